--
-- retention: silo.purge_terminal_jobs() and the pg_cron job that runs it.
-- silo.retention is a server setting, so the tests move silo's clock
-- forward instead (8 days = 691200000 ms) and use ALTER SYSTEM for 0.
--
SELECT test_helpers.reset();

-- the default retention is 7 days; it cannot be set per session
SHOW silo.retention;
SET silo.retention = 0;
\echo :LAST_ERROR_SQLSTATE


-- a helper for this file: lease the group's next task and report it
CREATE FUNCTION pg_temp.run(p_group text, p_outcome text, p_lease_ms int DEFAULT 10000)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	l record;
BEGIN
	SELECT * INTO l FROM silo.lease('w1', p_group, 1, p_lease_ms);
	CASE p_outcome
		WHEN 'complete' THEN PERFORM silo.complete(l.task_id, 'w1', '{"r": 1}');
		WHEN 'fail' THEN PERFORM silo.fail(l.task_id, 'w1', 'E', '{"d": 1}');
		WHEN 'ack_cancel' THEN PERFORM silo.ack_cancel(l.task_id, 'w1');
		WHEN 'hold' THEN NULL;
	END CASE;
	RETURN l.job_id || ': ' || p_outcome;
END
$$;

-- terminal jobs of every kind, with attempts, metadata and cancellation
-- flags; and pending jobs in every state
SELECT silo.enqueue('r1', id => 'old-succeeded', metadata => '{"kind": "old", "n": "1"}');
SELECT pg_temp.run('r1', 'complete');
SELECT silo.enqueue('r2', id => 'old-failed', metadata => '{"kind": "old"}',
					retry_policy => '{"retryCount": 1, "initialIntervalMs": 0}');
SELECT pg_temp.run('r2', 'fail'), pg_temp.run('r2', 'fail');
SELECT silo.enqueue('r3', id => 'old-cancelled', metadata => '{"kind": "old"}');
SELECT silo.cancel('old-cancelled');
SELECT silo.enqueue('r4', id => 'old-cancelled-running', metadata => '{"kind": "old"}');
SELECT pg_temp.run('r4', 'hold');
SELECT silo.cancel('old-cancelled-running');
SELECT silo.ack_cancel(task_id, 'w1') FROM silo.leases WHERE job_id = 'old-cancelled-running';
SELECT silo.enqueue('r5', tenant => 'acme', id => 'old-acme', metadata => '{"kind": "old"}');
SELECT pg_temp.run('r5', 'complete');
SELECT silo.enqueue('p1', id => 'pending-waiting', metadata => '{"kind": "pending"}'),
	   silo.enqueue('p2', id => 'pending-scheduled', metadata => '{"kind": "pending"}',
					start_at => silo.now() + interval '30 days'),
	   silo.enqueue('p3', id => 'pending-running', metadata => '{"kind": "pending"}'),
	   silo.enqueue('p4', id => 'pending-retrying', metadata => '{"kind": "pending"}',
					retry_policy => '{"retryCount": 1, "initialIntervalMs": 2000000000, "maxIntervalMs": 2000000000}');
SELECT pg_temp.run('p3', 'hold', 3600000), pg_temp.run('p4', 'fail');
SELECT silo.cancel('pending-running');
SELECT tenant, id, status FROM silo.jobs ORDER BY tenant, id;
SELECT test_helpers.rows('-') AS default_tenant, test_helpers.rows('acme') AS acme;

-- nothing is older than the retention yet
SELECT silo.purge_terminal_jobs() AS purged;

-- eight days on: the terminal jobs are past the retention; a job that
-- ends now is not
SET silo.clock_offset_ms = 691200000;
SELECT silo.enqueue('r6', id => 'recent-succeeded', metadata => '{"kind": "recent"}');
SELECT pg_temp.run('r6', 'complete');
SELECT silo.purge_terminal_jobs() AS purged;
-- the old terminal jobs are gone with their attempts, metadata and flags;
-- pending jobs (even an enqueued-8-days-ago, cancel-pending running one)
-- and the recent one are untouched
SELECT tenant, id, status FROM silo.jobs ORDER BY tenant, id;
SELECT id, test_helpers.job_rows(tenant, id) FROM
  (VALUES ('-', 'old-succeeded'), ('-', 'old-failed'), ('-', 'old-cancelled'),
		  ('-', 'old-cancelled-running'), ('acme', 'old-acme'), ('-', 'pending-waiting'),
		  ('-', 'pending-scheduled'), ('-', 'pending-running'), ('-', 'pending-retrying'),
		  ('-', 'recent-succeeded')) v(tenant, id);
SELECT value, count(*) FROM silo.job_metadata WHERE key = 'kind' GROUP BY value ORDER BY value;
-- a second purge finds nothing, and 0x03 lost exactly the purged jobs' rows
SELECT silo.purge_terminal_jobs() AS purged;
SELECT test_helpers.status_index_mismatches();

-- max_jobs bounds one call
SELECT silo.enqueue('r7', id => 'batch-' || i) FROM generate_series(1, 5) i;
SELECT count(*) AS cancelled FROM (SELECT silo.cancel('batch-' || i) FROM generate_series(1, 5) i) c;
SET silo.clock_offset_ms = 1382400000;	-- 16 days on: these five and recent-succeeded are old
SELECT silo.purge_terminal_jobs(4) AS purged;
SELECT silo.purge_terminal_jobs(4) AS purged;
SELECT silo.purge_terminal_jobs(4) AS purged;
SELECT id, status FROM silo.jobs ORDER BY id;
-- max_jobs must be at least 1
SELECT call, test_helpers.sqlstate_of('SELECT silo.purge_terminal_jobs(' || call || ')') AS result
  FROM (VALUES ('0'), ('-1'), ('NULL')) v(call);
RESET silo.clock_offset_ms;

-- silo.retention = 0 keeps terminal jobs forever (the new setting is seen
-- by a new session)
SELECT silo.enqueue('r8', id => 'kept-forever');
SELECT silo.cancel('kept-forever');
ALTER SYSTEM SET silo.retention = 0;
SELECT pg_reload_conf();
\c
SHOW silo.retention;
SET silo.clock_offset_ms = 2000000000;	-- 23 days on
SELECT silo.purge_terminal_jobs() AS purged;
SELECT id, status FROM silo.jobs WHERE id = 'kept-forever';
ALTER SYSTEM RESET silo.retention;
SELECT pg_reload_conf();
\c
SHOW silo.retention;
SET silo.clock_offset_ms = 2000000000;
SELECT silo.purge_terminal_jobs() AS purged;
SELECT count(*) AS jobs FROM silo.jobs WHERE id = 'kept-forever';
SELECT test_helpers.status_index_mismatches();

-- pg_cron runs the purge every minute, in this database.  The broker (even
-- paused) schedules that job once silo holds jobs -- the install script
-- cannot, or pg_restore would collide with the dumped cron.job row.
SELECT count(*) > 0 AS have_jobs FROM silo.job_status;
SELECT test_helpers.wait_for($$EXISTS (SELECT 1 FROM cron.job
                                        WHERE jobname = 'silo-purge-terminal-jobs')$$) AS scheduled;
SELECT jobname, schedule, command, database = current_database() AS this_database, active
  FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs';

-- pg_cron runs that command as the superuser that scheduled it, in a
-- session with the database's settings: every name in it is qualified
-- (docs/security.md).  A restore of a dump taken before 1.6 brings back
-- the old command, which called to_regprocedure() by its bare name, and a
-- dump of another database names that one: the broker rewrites both.
UPDATE cron.job
   SET command = $cmd$DO $purge$ BEGIN IF to_regprocedure('silo.purge_terminal_jobs(integer)') IS NOT NULL THEN PERFORM silo.purge_terminal_jobs(); END IF; END $purge$$cmd$,
       database = 'postgres'
 WHERE jobname = 'silo-purge-terminal-jobs';
SELECT test_helpers.wait_for($$(SELECT command NOT LIKE '%to_regprocedure%' AND database = current_database()
                                  FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs')$$) AS rewritten;
SELECT count(*) AS jobs, bool_and(command LIKE '%pg_catalog.pg_extension%') AS new_command
  FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs';
