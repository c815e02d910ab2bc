--
-- jobops: operations on a whole job -- cancel, restart, expedite,
-- delete_job, job_result -- their allowed states and their errors.
--
SELECT test_helpers.reset();

-- a helper for this file: lease the job's group and report the job's task
-- (only one job is ever due in these groups at a time)
CREATE FUNCTION pg_temp.run(p_group text, p_outcome text, p_worker text DEFAULT 'w1')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	l record;
BEGIN
	SELECT * INTO l FROM silo.lease(p_worker, p_group);
	IF l.task_id IS NULL THEN
		RETURN 'nothing to lease';
	END IF;
	CASE p_outcome
		WHEN 'complete' THEN PERFORM silo.complete(l.task_id, p_worker, jsonb_build_object('attempt', l.attempt));
		WHEN 'fail' THEN PERFORM silo.fail(l.task_id, p_worker, 'E' || l.attempt);
		WHEN 'ack_cancel' THEN PERFORM silo.ack_cancel(l.task_id, p_worker);
		WHEN 'hold' THEN NULL;
	END CASE;
	RETURN format('%s attempt %s/%s: %s', l.job_id, l.attempt, l.relative_attempt, p_outcome);
END
$$;

--
-- cancel
--

-- a Waiting job is Cancelled at once: its task is deleted, the flag set
SELECT silo.enqueue('jc', id => 'waiting');
SELECT silo.cancel('waiting');
SELECT status, cancelled_at IS NOT NULL AS cancelled_at_set, current_attempt, next_attempt_at
  FROM silo.jobs WHERE id = 'waiting';
SELECT test_helpers.job_rows('-', 'waiting');
SELECT count(*) AS leased FROM silo.lease('w1', 'jc');

-- a Scheduled job (future start) likewise
SELECT silo.enqueue('jc', id => 'scheduled', start_at => silo.now() + interval '1 hour');
SELECT silo.cancel('scheduled');
SELECT status FROM silo.jobs WHERE id = 'scheduled';
SELECT test_helpers.job_rows('-', 'scheduled');

-- a Retrying job (in backoff) likewise; its failed attempt is kept
SELECT silo.enqueue('jc', id => 'retrying', retry_policy => '{"retryCount": 3, "initialIntervalMs": 600000}');
SELECT pg_temp.run('jc', 'fail');
SELECT status FROM silo.jobs WHERE id = 'retrying';
SELECT silo.cancel('retrying');
SELECT status FROM silo.jobs WHERE id = 'retrying';
SELECT test_helpers.job_rows('-', 'retrying');

-- a Running job only gets the flag: it stays Running, with cancelled_at
-- set, until its worker reports (here: ack_cancel)
SELECT silo.enqueue('jc', id => 'running', retry_policy => '{"retryCount": 3}');
SELECT task_id AS t FROM silo.lease('w1', 'jc') \gset
SELECT silo.cancel('running');
SELECT status, cancelled_at IS NOT NULL AS cancelled_at_set FROM silo.jobs WHERE id = 'running';
SELECT test_helpers.job_rows('-', 'running');
SELECT silo.heartbeat(:'t', 'w1') AS cancelled;
SELECT silo.ack_cancel(:'t', 'w1');
SELECT status, cancelled_at IS NOT NULL AS cancelled_at_set FROM silo.jobs WHERE id = 'running';

-- cancel is scoped by tenant
SELECT silo.enqueue('jc', tenant => 'acme', id => 'tenant-job');
SELECT silo.cancel('tenant-job');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.cancel('tenant-job', 'acme');
SELECT tenant, status FROM silo.jobs WHERE id = 'tenant-job';

-- errors: no such job (SL003), already cancelled (SL005), already
-- Succeeded or Failed (SL006)
SELECT silo.cancel('no-such-job');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.cancel('waiting');
\echo :LAST_ERROR_SQLSTATE
-- a Running job with a pending cancel is already cancelled too
SELECT silo.enqueue('jc', id => 'running-cancelled');
SELECT pg_temp.run('jc', 'hold');
SELECT silo.cancel('running-cancelled');
SELECT silo.cancel('running-cancelled');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('jc', id => 'succeeded'), silo.enqueue('jc', id => 'failed', priority => 60);
SELECT pg_temp.run('jc', 'complete'), pg_temp.run('jc', 'fail');
SELECT silo.cancel('succeeded');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.cancel('failed');
\echo :LAST_ERROR_SQLSTATE
-- the failed cancels changed nothing
SELECT id, status, cancelled_at IS NOT NULL AS cancelled_at_set FROM silo.jobs
 WHERE id IN ('succeeded', 'failed', 'waiting') ORDER BY id;
-- arguments
SELECT arg, test_helpers.sqlstate_of('SELECT silo.cancel(' || call || ')') AS result
  FROM (VALUES ('job_id NULL', 'NULL'),
			   ('tenant NULL', '''x'', NULL'),
			   ('job_id empty', ''''''),
			   ('tenant empty', '''x'', '''''),
			   ('job_id 129 characters', format('%L', repeat('i', 129))),
			   ('tenant 65 characters', format('''x'', %L', repeat('t', 65)))) v(arg, call);

--
-- restart
--

-- a Failed job runs again: attempt numbers keep rising, the relative
-- attempt starts at 1 again; the old attempts are kept
SELECT silo.enqueue('jr', id => 'failed-job');
SELECT pg_temp.run('jr', 'fail');
SELECT silo.restart('failed-job');
SELECT status, current_attempt, cancelled_at FROM silo.jobs WHERE id = 'failed-job';
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'jr') \gset
SELECT :'job_id' AS job_id, :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt;
SELECT silo.fail(task_id, 'w1', 'E2') FROM silo.leases WHERE job_id = 'failed-job';
-- restart twice
SELECT silo.restart('failed-job');
SELECT pg_temp.run('jr', 'complete');
SELECT attempt, relative_attempt, status, error_code, result FROM silo.attempts WHERE job_id = 'failed-job' ORDER BY attempt;
SELECT status FROM silo.jobs WHERE id = 'failed-job';

-- restart gives a fresh retry budget
SELECT silo.enqueue('jr', id => 'budget', retry_policy => '{"retryCount": 1, "initialIntervalMs": 0}');
SELECT pg_temp.run('jr', 'fail'), pg_temp.run('jr', 'fail');
SELECT status FROM silo.jobs WHERE id = 'budget';
SELECT silo.restart('budget');
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'jr') \gset
SELECT :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt;
SELECT silo.fail(task_id, 'w1', 'E3') FROM silo.leases WHERE job_id = 'budget';
SELECT status, current_attempt FROM silo.jobs WHERE id = 'budget';
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'jr');
SELECT silo.fail(task_id, 'w1', 'E4') FROM silo.leases WHERE job_id = 'budget';
SELECT status FROM silo.jobs WHERE id = 'budget';
SELECT attempt, relative_attempt, status FROM silo.attempts WHERE job_id = 'budget' ORDER BY attempt;

-- a Cancelled job runs again and its cancellation is cleared; one
-- cancelled before it ran starts at attempt 1
SELECT silo.enqueue('jr', id => 'cancelled-early');
SELECT silo.cancel('cancelled-early');
SELECT silo.restart('cancelled-early');
SELECT status, current_attempt, cancelled_at IS NULL AS flag_cleared FROM silo.jobs WHERE id = 'cancelled-early';
SELECT test_helpers.job_rows('-', 'cancelled-early');
SELECT pg_temp.run('jr', 'complete');
-- one cancelled while running continues after its last attempt
SELECT silo.enqueue('jr', id => 'cancelled-running');
SELECT pg_temp.run('jr', 'hold');
SELECT silo.cancel('cancelled-running');
SELECT silo.ack_cancel(task_id, 'w1') FROM silo.leases WHERE job_id = 'cancelled-running';
SELECT silo.restart('cancelled-running');
SELECT status, current_attempt, cancelled_at IS NULL AS flag_cleared FROM silo.jobs WHERE id = 'cancelled-running';
SELECT pg_temp.run('jr', 'complete');

-- errors: only Failed or Cancelled jobs restart (SL007); no such job (SL003)
SELECT silo.enqueue('jr', id => 'r-waiting'),
	   silo.enqueue('jr', id => 'r-scheduled', start_at => silo.now() + interval '1 hour'),
	   silo.enqueue('jr2', id => 'r-running'),
	   silo.enqueue('jr3', id => 'r-retrying', retry_policy => '{"retryCount": 1, "initialIntervalMs": 600000}');
SELECT pg_temp.run('jr2', 'hold'), pg_temp.run('jr3', 'fail');
SELECT id, status, test_helpers.sqlstate_of(format('SELECT silo.restart(%L)', id)) AS restart
  FROM silo.jobs WHERE id IN ('r-waiting', 'r-scheduled', 'r-running', 'r-retrying', 'failed-job')
 ORDER BY id;
SELECT silo.restart('r-running');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.restart('failed-job');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.restart('no-such-job');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.restart(NULL);
\echo :LAST_ERROR_SQLSTATE

--
-- expedite
--

-- a Scheduled job moves to now: Waiting, and leasable at once
SELECT silo.enqueue('je', id => 'later', start_at => silo.now() + interval '1 hour');
SELECT count(*) AS leased FROM silo.lease('w1', 'je');
SELECT silo.expedite('later');
SELECT status, current_attempt, next_attempt_at <= silo.now() AS due_now FROM silo.jobs WHERE id = 'later';
SELECT job_id, attempt FROM silo.lease('w1', 'je');

-- a job in retry backoff likewise, keeping its attempt number
SELECT silo.enqueue('je', id => 'backing-off', retry_policy => '{"retryCount": 2, "initialIntervalMs": 600000}');
SELECT pg_temp.run('je', 'fail');
SELECT status FROM silo.jobs WHERE id = 'backing-off';
SELECT silo.expedite('backing-off');
SELECT status, current_attempt FROM silo.jobs WHERE id = 'backing-off';
SELECT job_id, attempt, relative_attempt FROM silo.lease('w1', 'je');

-- a second expedite fails: the task is already ready
SELECT silo.enqueue('je2', id => 'twice', start_at => silo.now() + interval '1 hour');
SELECT silo.expedite('twice');
SELECT silo.expedite('twice');
\echo :LAST_ERROR_SQLSTATE

-- errors (SL008): terminal, cancelled, running, already ready; no such
-- job (SL003)
SELECT silo.enqueue('je3', id => 'e-waiting'),
	   silo.enqueue('je3', id => 'e-cancelled-scheduled', start_at => silo.now() + interval '1 hour');
SELECT silo.cancel('e-cancelled-scheduled');
SELECT silo.enqueue('je4', id => 'e-running'), silo.enqueue('je5', id => 'e-running-cancelled'),
	   silo.enqueue('je6', id => 'e-succeeded');
SELECT pg_temp.run('je4', 'hold'), pg_temp.run('je5', 'hold'), pg_temp.run('je6', 'complete');
SELECT silo.cancel('e-running-cancelled');
SELECT id, status, test_helpers.sqlstate_of(format('SELECT silo.expedite(%L)', id)) AS expedite
  FROM silo.jobs WHERE id LIKE 'e-%' ORDER BY id;
SELECT silo.expedite('no-such-job');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.expedite(NULL);
\echo :LAST_ERROR_SQLSTATE

--
-- delete_job
--

-- only terminal jobs can be deleted (SL004); the job is left as it was
SELECT silo.enqueue('jd', id => 'd-waiting'),
	   silo.enqueue('jd', id => 'd-scheduled', start_at => silo.now() + interval '1 hour'),
	   silo.enqueue('jd2', id => 'd-running');
SELECT pg_temp.run('jd2', 'hold');
SELECT id, status, test_helpers.sqlstate_of(format('SELECT silo.delete_job(%L)', id)) AS delete_job
  FROM silo.jobs WHERE id IN ('d-waiting', 'd-scheduled', 'd-running') ORDER BY id;
SELECT silo.delete_job('d-running');
\echo :LAST_ERROR_SQLSTATE
SELECT test_helpers.job_rows('-', 'd-running');

-- a terminal job goes with its attempts, metadata and cancellation flag;
-- another job's identical metadata stays
SELECT silo.enqueue('jd3', id => 'd-failed', metadata => '{"customer": "c1", "run": "7"}',
					retry_policy => '{"retryCount": 2, "initialIntervalMs": 0}'),
	   silo.enqueue('jd4', id => 'd-cancelled', metadata => '{"customer": "c1"}'),
	   silo.enqueue('jd5', id => 'd-keep', metadata => '{"customer": "c1", "run": "7"}');
SELECT pg_temp.run('jd3', 'fail'), pg_temp.run('jd3', 'fail'), pg_temp.run('jd3', 'fail');
SELECT pg_temp.run('jd4', 'hold');
SELECT silo.cancel('d-cancelled');
SELECT silo.ack_cancel(task_id, 'w1') FROM silo.leases WHERE job_id = 'd-cancelled';
SELECT id, status, test_helpers.job_rows('-', id) FROM silo.jobs WHERE id LIKE 'd-%' AND task_group <> 'jd' ORDER BY id;
SELECT silo.delete_job('d-failed') AS deleted_failed, silo.delete_job('d-cancelled') AS deleted_cancelled;
SELECT id, test_helpers.job_rows('-', id)
  FROM unnest(ARRAY['d-failed', 'd-cancelled', 'd-keep']) id ORDER BY id;
SELECT key, value, job_id FROM silo.job_metadata WHERE value IN ('c1', '7') ORDER BY key, job_id;

-- no such job: false; deleting twice: true, then false; tenant-scoped
SELECT silo.delete_job('no-such-job') AS deleted;
SELECT silo.enqueue('jd6', tenant => 'acme', id => 'd-tenant');
SELECT silo.cancel('d-tenant', 'acme');
SELECT silo.delete_job('d-tenant') AS deleted_in_default_tenant;
SELECT silo.delete_job('d-tenant', 'acme') AS deleted, silo.delete_job('d-tenant', 'acme') AS deleted_again;
SELECT test_helpers.rows('acme');
SELECT call, test_helpers.sqlstate_of('SELECT silo.delete_job(' || call || ')') AS result
  FROM (VALUES ('NULL'), ('''x'', NULL')) v(call);

--
-- job_result
--

-- no such job (SL003); a job that has not finished (SL004)
SELECT * FROM silo.job_result('no-such-job');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('jres', id => 'res-waiting'),
	   silo.enqueue('jres', id => 'res-scheduled', start_at => silo.now() + interval '1 hour'),
	   silo.enqueue('jres2', id => 'res-running'),
	   silo.enqueue('jres3', id => 'res-retrying', retry_policy => '{"retryCount": 1, "initialIntervalMs": 600000}');
SELECT pg_temp.run('jres2', 'hold'), pg_temp.run('jres3', 'fail');
SELECT id, status, test_helpers.sqlstate_of(format('SELECT silo.job_result(%L)', id)) AS job_result
  FROM silo.jobs WHERE id LIKE 'res-%' ORDER BY id;
SELECT * FROM silo.job_result('res-waiting');
\echo :LAST_ERROR_SQLSTATE

-- each terminal status; finished_at is when the job reached it
SELECT silo.enqueue('jres4', id => 'res-succeeded'),
	   silo.enqueue('jres5', id => 'res-failed'),
	   silo.enqueue('jres6', id => 'res-cancelled-running'),
	   silo.enqueue('jres7', id => 'res-cancelled-early'),
	   silo.enqueue('jres8', id => 'res-restarted', retry_policy => '{"retryCount": 0}');
SELECT pg_temp.run('jres4', 'complete'), pg_temp.run('jres5', 'fail'), pg_temp.run('jres6', 'ack_cancel');
SELECT silo.cancel('res-cancelled-early');
SELECT pg_temp.run('jres8', 'fail');
SELECT silo.restart('res-restarted');
SELECT pg_temp.run('jres8', 'complete');
SELECT j.id, r.status, r.result, r.error_code, r.error_data,
	   r.finished_at = j.status_changed_at AS finished_at_is_status_change,
	   r.finished_at = (SELECT max(finished_at) FROM silo.attempts a WHERE a.job_id = j.id) AS finished_at_is_last_attempt
  FROM silo.jobs j, silo.job_result(j.id) r
 WHERE j.id IN ('res-succeeded', 'res-failed', 'res-cancelled-running', 'res-cancelled-early', 'res-restarted')
 ORDER BY j.id;
-- job_result is scoped by tenant
SELECT silo.enqueue('jres9', tenant => 'acme', id => 'res-tenant');
SELECT silo.cancel('res-tenant', 'acme');
SELECT status FROM silo.job_result('res-tenant', 'acme');
SELECT * FROM silo.job_result('res-tenant');
\echo :LAST_ERROR_SQLSTATE
SELECT call, test_helpers.sqlstate_of('SELECT * FROM silo.job_result(' || call || ')') AS result
  FROM (VALUES ('NULL'), ('''x'', NULL')) v(call);

-- 0x03 agrees with every status row the file left behind, and the views
-- that read it with silo.jobs
SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
