--
-- sweep: silo.run_maintenance(), one round of the broker's work --
-- promotion of tasks whose start has come, and the sweep of expired
-- leases into WORKER_CRASHED attempts.  (The broker is paused here.)
--
SELECT test_helpers.reset();

-- nothing to do
SELECT * FROM silo.run_maintenance();

--
-- promotion
--

-- future tasks are not promoted before their start
SELECT silo.enqueue('sp1', id => 'soon-1', start_at => silo.now() + interval '30 seconds'),
	   silo.enqueue('sp1', id => 'soon-2', start_at => silo.now() + interval '40 seconds'),
	   silo.enqueue('sp2', id => 'soon-3', start_at => silo.now() + interval '50 seconds'),
	   silo.enqueue('sp2', id => 'much-later', start_at => silo.now() + interval '1 hour'),
	   silo.enqueue('sp2', id => 'now');
SELECT * FROM silo.run_maintenance();
SELECT job_id, due FROM silo.task ORDER BY job_id;
SELECT task_group, due, scheduled, running, expired_leases, oldest_due_age IS NOT NULL AS has_due_age
  FROM silo.task_groups ORDER BY task_group;

-- once silo's clock has passed their start they are promoted and counted
-- (once), and silo.tasks / silo.task_groups show them due
SET silo.clock_offset_ms = 60000;
SELECT job_id, is_due FROM silo.tasks ORDER BY job_id;
SELECT task_group, due, scheduled FROM silo.task_groups ORDER BY task_group;
SELECT * FROM silo.run_maintenance();
SELECT job_id, due FROM silo.task ORDER BY job_id;
SELECT * FROM silo.run_maintenance();
SELECT id, status FROM silo.jobs ORDER BY id;
SELECT job_id FROM silo.lease('w1', 'sp1', 10);
SELECT job_id FROM silo.lease('w1', 'sp2', 10);
RESET silo.clock_offset_ms;

--
-- the lease sweep
--
SELECT test_helpers.reset();

-- five jobs leased by two workers: four with a 5 s lease, one with a long
-- one; one of the short leases is renewed by a heartbeat, one job is
-- cancelled while it runs
SELECT silo.enqueue('sw', id => 'sw-retry', priority => 1, retry_policy => '{"retryCount": 1, "initialIntervalMs": 5000}'),
	   silo.enqueue('sw', id => 'sw-final', priority => 2),
	   silo.enqueue('sw', tenant => 'acme', id => 'sw-cancelled', priority => 3, retry_policy => '{"retryCount": 3}'),
	   silo.enqueue('sw', id => 'sw-renewed', priority => 4),
	   silo.enqueue('sw', id => 'sw-live', priority => 5);
CREATE TEMP TABLE swept AS SELECT job_id, task_id FROM silo.lease('crashy-worker', 'sw', 4, 5000);
SELECT job_id FROM swept ORDER BY job_id;
SELECT job_id FROM silo.lease('slow-worker', 'sw', 1, 600000);
SELECT silo.cancel('sw-cancelled', 'acme');
SELECT silo.heartbeat(task_id, 'crashy-worker', 600000) FROM swept WHERE job_id = 'sw-renewed';

-- nothing has expired yet
SELECT * FROM silo.run_maintenance();
SELECT task_group, running, expired_leases FROM silo.task_groups;

-- 6 s later three leases have expired; the views show them before the sweep
SET silo.clock_offset_ms = 6000;
SELECT job_id, worker_id, expired FROM silo.leases ORDER BY job_id;
SELECT task_group, running, expired_leases FROM silo.task_groups;
SELECT * FROM silo.run_maintenance();

-- each expired lease became a Failed attempt with code WORKER_CRASHED;
-- error_data names the worker
SELECT job_id, attempt, worker_id, error_code, error_data->>'worker_id' AS crashed_worker,
	   jsonb_typeof(error_data->'message') AS message
  FROM silo.attempts WHERE error_code IS NOT NULL ORDER BY job_id;
-- every swept lease is a Failed attempt, the flagged job's too (that job
-- itself ends Cancelled, below)
SELECT job_id, status FROM silo.attempts WHERE error_code = 'WORKER_CRASHED' ORDER BY job_id;
-- sw-retry is retried per its policy (5 s backoff), sw-final (no policy)
-- Failed, sw-cancelled (flagged) Cancelled; the live and renewed leases
-- are untouched
SELECT tenant, id, status, current_attempt FROM silo.jobs ORDER BY id;
SELECT round(extract(epoch FROM j.next_attempt_at - a.finished_at) * 1000) AS retry_delay_ms
  FROM silo.jobs j JOIN silo.attempts a ON a.job_id = j.id AND a.attempt = 1 WHERE j.id = 'sw-retry';
SELECT job_id, worker_id, expired FROM silo.leases ORDER BY job_id;
SELECT test_helpers.job_rows('acme', 'sw-cancelled');

-- the crashed worker's late reports find no lease
SELECT job_id, test_helpers.sqlstate_of(format('SELECT silo.complete(%L, %L)', task_id, 'crashy-worker')) AS late_complete
  FROM swept WHERE job_id IN ('sw-retry', 'sw-final', 'sw-cancelled') ORDER BY job_id;

-- a second sweep finds nothing
SELECT * FROM silo.run_maintenance();

-- the retry is promoted once its backoff has passed, and leased as
-- attempt 2, the last
SET silo.clock_offset_ms = 7000;
SELECT * FROM silo.run_maintenance();
SET silo.clock_offset_ms = 12000;
SELECT * FROM silo.run_maintenance();
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w2', 'sw', 10);

-- an expired retry attempt with no retries left ends the job Failed
SET silo.clock_offset_ms = 30000;
SELECT * FROM silo.run_maintenance();
SELECT id, status FROM silo.jobs WHERE id = 'sw-retry';
SELECT attempt, status, error_code, error_data->>'worker_id' AS crashed_worker
  FROM silo.attempts WHERE job_id = 'sw-retry' ORDER BY attempt;
RESET silo.clock_offset_ms;

-- one call looks at 50 items at most, each in a subtransaction that
-- writes (a backend caches 64 of them in its snapshot): 120 expired
-- leases take three calls, 50 + 50 + 20, and nothing is left after them
SELECT count(*) AS enqueued FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
    'task_group', 'sw-many', 'tenant', 'acme', 'id', 'many-' || g)) FROM generate_series(1, 120) g));
SELECT count(*) AS leased FROM silo.lease('w3', 'sw-many', 120, lease_ms => 100);
SET silo.clock_offset_ms = 1000;
SELECT expired FROM silo.run_maintenance();
SELECT expired FROM silo.run_maintenance();
SELECT expired FROM silo.run_maintenance();
SELECT count(*) AS leases_left FROM silo.leases WHERE task_group = 'sw-many';
RESET silo.clock_offset_ms;

-- 0x03 agrees with every status row the file left behind, and the views
-- that read it with silo.jobs
SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
