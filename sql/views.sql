--
-- views: silo.jobs, silo.attempts, silo.tasks, silo.leases and
-- silo.task_groups through whole job lifecycles, and the two queries the
-- indexes exist for.
--
SELECT test_helpers.reset();

-- one row per view, for the job under test (timestamps as relations only)
CREATE VIEW pg_temp.job AS
SELECT j.id, j.status, j.current_attempt,
	   j.status_changed_at = i.enqueued_at AS changed_at_enqueue,
	   j.next_attempt_at IS NULL AS no_next_attempt,
	   j.next_attempt_at <= silo.now() AS next_attempt_due,
	   j.cancelled_at IS NOT NULL AS cancelled
  FROM silo.jobs j JOIN silo.job_info i ON i.tenant = j.tenant AND i.id = j.id;
CREATE VIEW pg_temp.everything AS
SELECT 'task' AS what, job_id, attempt, relative_attempt, NULL AS status, is_due::text AS detail FROM silo.tasks
UNION ALL
SELECT 'lease', job_id, attempt, relative_attempt, NULL, worker_id || CASE WHEN expired THEN ' (expired)' ELSE '' END
  FROM silo.leases
UNION ALL
SELECT 'attempt', job_id, attempt, relative_attempt, status, coalesce(error_code, result::text, '')
  FROM silo.attempts;

--
-- Scheduled -> Waiting -> Running -> Retrying -> Waiting -> Running -> Succeeded
--
SELECT silo.enqueue('vg', id => 'life', payload => '{"step": 1}', metadata => '{"owner": "views"}',
					start_at => silo.now() + interval '30 seconds',
					retry_policy => '{"retryCount": 1, "initialIntervalMs": 10000}');

-- Scheduled: first attempt, start in the future; next_attempt_at is the
-- requested start; status_changed_at is the enqueue time
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT j.next_attempt_at = i.start_at AS next_attempt_is_start_at
  FROM silo.jobs j JOIN silo.job_info i USING (tenant, id) WHERE id = 'life';
SELECT tenant, id, task_group, priority, payload, metadata FROM silo.jobs WHERE id = 'life';
SELECT * FROM pg_temp.everything WHERE job_id = 'life' ORDER BY what, attempt;
SELECT task_group, due, scheduled, running, expired_leases, oldest_due_age FROM silo.task_groups;

-- Waiting: the start has passed (no maintenance needed to see it)
SET silo.clock_offset_ms = 60000;
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT * FROM pg_temp.everything WHERE job_id = 'life' ORDER BY what, attempt;
SELECT task_group, due, scheduled, running, expired_leases, oldest_due_age > interval '0' AS waited
  FROM silo.task_groups;

-- Running: leased; status_changed_at is the lease start; no next attempt
SELECT task_id AS t FROM silo.lease('w1', 'vg', 1, 20000) \gset
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT j.status_changed_at = l.started_at AS changed_at_lease_start
  FROM silo.jobs j JOIN silo.leases l ON l.job_id = j.id WHERE j.id = 'life';
SELECT * FROM pg_temp.everything WHERE job_id = 'life' ORDER BY what, attempt;
SELECT task_id = :'t' AS task_id_matches, kind, task_group, tenant, attempt, relative_attempt,
	   expires_at - started_at AS lease_length, expired
  FROM silo.leases WHERE job_id = 'life';
SELECT task_id = :'t' AS task_id_matches, started_at IS NOT NULL AS started, finished_at IS NULL AS unfinished
  FROM silo.attempts WHERE job_id = 'life';
SELECT task_group, due, scheduled, running, expired_leases, oldest_due_age FROM silo.task_groups;

-- Retrying: failed with a retry left; attempt 2 starts 10 s after the
-- failure; status_changed_at is the failure time
SELECT silo.fail(:'t', 'w1', 'FIRST_TRY', '{"n": 1}');
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT j.status_changed_at = a.finished_at AS changed_at_failure,
	   j.next_attempt_at - a.finished_at AS backoff
  FROM silo.jobs j JOIN silo.attempts a ON a.job_id = j.id AND a.attempt = 1 WHERE j.id = 'life';
SELECT * FROM pg_temp.everything WHERE job_id = 'life' ORDER BY what, attempt;
SELECT task_group, due, scheduled, running, expired_leases, oldest_due_age FROM silo.task_groups;

-- Waiting again once the backoff has passed
SET silo.clock_offset_ms = 75000;
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT task_group, due, scheduled, running, expired_leases FROM silo.task_groups;

-- Running attempt 2
SELECT task_id AS t FROM silo.lease('w2', 'vg') \gset
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT * FROM pg_temp.everything WHERE job_id = 'life' ORDER BY what, attempt;

-- Succeeded: terminal; no current or next attempt; nothing pending or
-- leased; status_changed_at is the finish time
SELECT silo.complete(:'t', 'w2', '{"answer": 42}');
SELECT * FROM pg_temp.job WHERE id = 'life';
SELECT j.status_changed_at = a.finished_at AS changed_at_finish
  FROM silo.jobs j JOIN silo.attempts a ON a.job_id = j.id AND a.attempt = 2 WHERE j.id = 'life';
SELECT * FROM pg_temp.everything WHERE job_id = 'life' ORDER BY what, attempt;
SELECT attempt, worker_id, status, started_at <= finished_at AS ordered, error_data
  FROM silo.attempts WHERE job_id = 'life' ORDER BY attempt;
SELECT count(*) AS groups FROM silo.task_groups;
RESET silo.clock_offset_ms;

--
-- Failed and Cancelled
--

-- Failed: the failure was final
SELECT silo.enqueue('vf', id => 'life-failed');
SELECT task_id AS t FROM silo.lease('w1', 'vf') \gset
SELECT silo.fail(:'t', 'w1', 'FATAL');
SELECT * FROM pg_temp.job WHERE id = 'life-failed';
SELECT * FROM pg_temp.everything WHERE job_id = 'life-failed' ORDER BY what, attempt;

-- Cancelled before it ran: no attempt; cancelled_at is the status change
SELECT silo.enqueue('vc', id => 'life-cancelled');
SELECT silo.cancel('life-cancelled');
SELECT * FROM pg_temp.job WHERE id = 'life-cancelled';
SELECT status_changed_at = cancelled_at AS cancelled_at_is_change FROM silo.jobs WHERE id = 'life-cancelled';
SELECT * FROM pg_temp.everything WHERE job_id = 'life-cancelled' ORDER BY what, attempt;

-- Cancelled while running: Running with cancelled_at set, then Cancelled
-- once the worker acknowledges
SELECT silo.enqueue('vc', id => 'life-cancelled-running');
SELECT task_id AS t FROM silo.lease('w1', 'vc') \gset
SELECT silo.cancel('life-cancelled-running');
SELECT * FROM pg_temp.job WHERE id = 'life-cancelled-running';
SELECT silo.ack_cancel(:'t', 'w1');
SELECT * FROM pg_temp.job WHERE id = 'life-cancelled-running';
SELECT * FROM pg_temp.everything WHERE job_id = 'life-cancelled-running' ORDER BY what, attempt;

-- a lease past its expiry still shows in silo.leases and silo.attempts,
-- marked expired in silo.leases and counted in silo.task_groups, until
-- the sweep
SELECT silo.enqueue('ve', id => 'life-expiring');
SELECT task_id AS t FROM silo.lease('w1', 've', 1, 1000) \gset
SET silo.clock_offset_ms = 2000;
SELECT * FROM pg_temp.job WHERE id = 'life-expiring';
SELECT * FROM pg_temp.everything WHERE job_id = 'life-expiring' ORDER BY what, attempt;
SELECT task_group, due, scheduled, running, expired_leases FROM silo.task_groups;
SELECT expired FROM silo.run_maintenance();
SELECT * FROM pg_temp.job WHERE id = 'life-expiring';
SELECT * FROM pg_temp.everything WHERE job_id = 'life-expiring' ORDER BY what, attempt;
SELECT count(*) AS groups FROM silo.task_groups;
RESET silo.clock_offset_ms;

--
-- the queries the indexes are for
--
SELECT test_helpers.reset();
SELECT silo.enqueue('q', tenant => 'acme', id => 'a-' || i, metadata => jsonb_build_object('customer', 'c' || (i % 3)),
					priority => i)
  FROM generate_series(1, 9) i;
SELECT silo.enqueue('q', tenant => 'other', id => 'o-1', metadata => '{"customer": "c1"}', priority => 0);
-- acme's jobs fail in priority order (a-1 first); a-9 succeeds; the
-- other tenant's job fails too
SELECT count(*) AS failed FROM (
	SELECT CASE WHEN job_id = 'a-9' THEN silo.complete(task_id, 'w1') ELSE silo.fail(task_id, 'w1', 'E') END
	  FROM (SELECT * FROM silo.lease('w1', 'q', 100)) l ORDER BY priority) f;
SELECT id, status FROM silo.jobs ORDER BY tenant, id;

-- "newest Failed jobs of tenant acme"
SELECT id, status FROM silo.jobs
 WHERE tenant = 'acme' AND status = 'Failed'
 ORDER BY status_changed_at DESC LIMIT 3;

-- "jobs of tenant acme with metadata customer = c1": a semi-join on
-- silo.job_metadata
SELECT j.id, j.metadata FROM silo.jobs j
 WHERE j.tenant = 'acme'
   AND EXISTS (SELECT 1 FROM silo.job_metadata m
				WHERE m.tenant = j.tenant AND m.key = 'customer' AND m.value = 'c1' AND m.job_id = j.id)
 ORDER BY j.id;

-- 0x03 agrees with every status row the file left behind, and the views
-- that read it with silo.jobs
SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
