--
-- setup: install silo and the helpers the other regress files use.
--
-- Every later file starts with test_helpers.reset(), so files do not depend
-- on each other's leftovers; they only need this one to have run first.
--

-- the extension installs pg_cron through "requires"
SET client_min_messages = warning;
CREATE EXTENSION silo CASCADE;
RESET client_min_messages;

-- what got installed
SELECT extname, extversion FROM pg_extension WHERE extname IN ('pg_cron', 'silo') ORDER BY 1;

-- the broker is paused in the regress configuration: tests drive
-- promotion and the lease sweep with silo.run_maintenance()
SHOW silo.broker_paused;
SHOW silo.database;

-- silo's clock is the wall clock shifted by silo.clock_offset_ms, the test
-- hook every later file uses instead of sleeping
SELECT silo.now() - clock_timestamp() BETWEEN interval '-5 seconds' AND interval '5 seconds' AS wall_clock;
SET silo.clock_offset_ms = 3600000;
SELECT silo.now() - clock_timestamp() BETWEEN interval '55 minutes' AND interval '65 minutes' AS an_hour_ahead;
SET silo.clock_offset_ms = -3600000;
SELECT clock_timestamp() - silo.now() BETWEEN interval '55 minutes' AND interval '65 minutes' AS an_hour_behind;
RESET silo.clock_offset_ms;

CREATE SCHEMA test_helpers;

-- sqlstate_of(sql): run one statement; 'ok', or "SQLSTATE: message".
-- (The statement runs in a subtransaction that is rolled back on error.)
CREATE FUNCTION test_helpers.sqlstate_of(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- is_uuid(text): is this the canonical text of a version 7 (time-ordered)
-- UUID, the kind silo generates for job and task ids?
CREATE FUNCTION test_helpers.is_uuid(s text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
	SELECT s ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
$$;

-- rows(tenant): how many rows each silo table holds for one tenant
CREATE FUNCTION test_helpers.rows(p_tenant text) RETURNS text
LANGUAGE sql AS $$
	SELECT format('info=%s status=%s task=%s lease=%s attempt=%s meta=%s cancel=%s',
		(SELECT count(*) FROM silo.job_info WHERE tenant = p_tenant),
		(SELECT count(*) FROM silo.job_status WHERE tenant = p_tenant),
		(SELECT count(*) FROM silo.task WHERE tenant = p_tenant),
		(SELECT count(*) FROM silo.task_lease WHERE tenant = p_tenant),
		(SELECT count(*) FROM silo.attempt WHERE tenant = p_tenant),
		(SELECT count(*) FROM silo.job_metadata WHERE tenant = p_tenant),
		(SELECT count(*) FROM silo.job_cancellation WHERE tenant = p_tenant))
$$;

-- job_rows(tenant, id): the same, for one job
CREATE FUNCTION test_helpers.job_rows(p_tenant text, p_id text) RETURNS text
LANGUAGE sql AS $$
	SELECT format('info=%s status=%s task=%s lease=%s attempt=%s meta=%s cancel=%s',
		(SELECT count(*) FROM silo.job_info WHERE tenant = p_tenant AND id = p_id),
		(SELECT count(*) FROM silo.job_status WHERE tenant = p_tenant AND id = p_id),
		(SELECT count(*) FROM silo.task WHERE tenant = p_tenant AND job_id = p_id),
		(SELECT count(*) FROM silo.task_lease WHERE tenant = p_tenant AND job_id = p_id),
		(SELECT count(*) FROM silo.attempt WHERE tenant = p_tenant AND job_id = p_id),
		(SELECT count(*) FROM silo.job_metadata WHERE tenant = p_tenant AND job_id = p_id),
		(SELECT count(*) FROM silo.job_cancellation WHERE tenant = p_tenant AND job_id = p_id))
$$;

-- wait_for(cond): poll a boolean SQL expression (fresh snapshot each time)
-- until it is true or timeout_s passes; returns whether it became true.
CREATE FUNCTION test_helpers.wait_for(cond text, timeout_s int DEFAULT 30) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + make_interval(secs => timeout_s);
	ok boolean;
BEGIN
	LOOP
		EXECUTE 'SELECT (' || cond || ')' INTO ok;
		IF ok THEN
			RETURN true;
		END IF;
		IF clock_timestamp() > deadline THEN
			RETURN false;
		END IF;
		PERFORM pg_sleep(0.05);
	END LOOP;
END
$$;

-- reset(): empty every silo table -- the jobs' and the limits' -- so a
-- file starts from an empty queue with no slot, waiter, floating state or
-- bucket left behind by the file before it.  A new table of schema silo
-- must be added here: the check at the end of this file fails until it is.
CREATE FUNCTION test_helpers.reset() RETURNS void
LANGUAGE sql AS $$
	SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE 'silo-schedule-%';
	TRUNCATE silo.job_info, silo.job_status, silo.job_status_index, silo.job_metadata, silo.task,
			 silo.task_lease, silo.attempt, silo.job_cancellation,
			 silo.chain_task, silo.concurrency_request, silo.concurrency_holder,
			 silo.concurrency_regrant, silo.floating_limit, silo.rate_limit_bucket,
			 silo.tenant_grant, silo.task_group_setting, silo.schedule;
$$;

-- table_rows(): every table of schema silo (found in pg_class, so a table
-- added later is listed too) with its number of rows
CREATE FUNCTION test_helpers.table_rows(OUT table_name text, OUT n bigint) RETURNS SETOF record
LANGUAGE plpgsql AS $$
DECLARE
	t regclass;
BEGIN
	FOR t IN SELECT c.oid FROM pg_class c
			  WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
			  ORDER BY c.relname COLLATE "C" LOOP
		table_name := t::text;
		EXECUTE format('SELECT count(*) FROM %s', t) INTO n;
		RETURN NEXT;
	END LOOP;
END
$$;

-- status_index_mismatches(): jobs whose 0x03 row (silo.job_status_index)
-- is missing, extra, or disagrees with their status row; 0 when the two
-- tables agree, as every transition must leave them
CREATE FUNCTION test_helpers.status_index_mismatches() RETURNS bigint
LANGUAGE sql AS $$
	SELECT count(*) FROM silo.job_status s
	  FULL JOIN silo.job_status_index x
	    ON x.tenant = s.tenant AND x.id = s.id AND x.status = s.status
	   AND x.changed_at = s.changed_at
	 WHERE s.id IS NULL OR x.id IS NULL;
$$;

-- views_disagree(): rows on which silo.jobs disagrees with silo.live_jobs
-- (pending jobs) or silo.finished_jobs (terminal ones): the views read
-- different tables (1.5) and must still say the same about every job
CREATE FUNCTION test_helpers.views_disagree() RETURNS bigint
LANGUAGE sql AS $$
	WITH j AS (SELECT tenant, id, task_group, status, priority, enqueued_at, status_changed_at,
					  current_attempt, next_attempt_at, payload::text, metadata::text, cancelled_at,
					  status IN ('Succeeded', 'Failed', 'Cancelled') AS terminal
				 FROM silo.jobs),
		 l AS (SELECT tenant, id, task_group, status, priority, enqueued_at, status_changed_at,
					  current_attempt, next_attempt_at, payload::text, metadata::text, cancelled_at
				 FROM silo.live_jobs),
		 f AS (SELECT tenant, id, task_group, status, priority, enqueued_at, finished_at,
					  NULL::integer, NULL::timestamptz, payload::text, metadata::text, cancelled_at
				 FROM silo.finished_jobs)
	SELECT count(*) FROM (
		(SELECT tenant, id, task_group, status, priority, enqueued_at, status_changed_at,
				current_attempt, next_attempt_at, payload, metadata, cancelled_at
		   FROM j WHERE NOT terminal EXCEPT ALL SELECT * FROM l)
		UNION ALL
		(SELECT * FROM l EXCEPT ALL
		 SELECT tenant, id, task_group, status, priority, enqueued_at, status_changed_at,
				current_attempt, next_attempt_at, payload, metadata, cancelled_at
		   FROM j WHERE NOT terminal)
		UNION ALL
		(SELECT tenant, id, task_group, status, priority, enqueued_at, status_changed_at,
				current_attempt, next_attempt_at, payload, metadata, cancelled_at
		   FROM j WHERE terminal EXCEPT ALL SELECT * FROM f)
		UNION ALL
		(SELECT * FROM f EXCEPT ALL
		 SELECT tenant, id, task_group, status, priority, enqueued_at, status_changed_at,
				current_attempt, next_attempt_at, payload, metadata, cancelled_at
		   FROM j WHERE terminal)) d;
$$;

-- the helpers work
SELECT test_helpers.sqlstate_of('SELECT 1/0') AS division,
	   test_helpers.sqlstate_of('SELECT 1') AS fine,
	   test_helpers.is_uuid('019a8f3c-5b2e-7d41-9c3e-2f6a1b8e4d07') AS uuid_ok,
	   test_helpers.is_uuid(gen_random_uuid()::text) AS v4_uuid,
	   test_helpers.is_uuid('not-a-uuid') AS not_uuid,
	   test_helpers.rows('-') AS empty;

-- reset() leaves no row in any table of schema silo.  First every table
-- gets rows: jobs done, running with a cancel pending, holding a key,
-- waiting for it, holding a floating key, hit by a rate limit, and due
-- later with a limit (a chain task)
SELECT silo.enqueue('reset-done', tenant => 'reset', id => 'done'),
	   silo.enqueue('reset-running', tenant => 'reset', id => 'running', metadata => '{"k": "v"}'),
	   silo.enqueue('reset-limits', tenant => 'reset', id => 'holder',
					limits => '[{"type": "concurrency", "key": "k", "maxConcurrency": 1}]'),
	   silo.enqueue('reset-limits', tenant => 'reset', id => 'requester',
					limits => '[{"type": "concurrency", "key": "k", "maxConcurrency": 1}]'),
	   silo.enqueue('reset-limits', tenant => 'reset', id => 'floating',
					limits => '[{"type": "floatingConcurrency", "key": "f", "defaultMaxConcurrency": 1,
								 "refreshIntervalMs": 60000}]'),
	   silo.enqueue('reset-limits', tenant => 'reset', id => 'rate-limited',
					limits => '[{"type": "rateLimit", "name": "r", "uniqueKey": "u", "limit": 1, "durationMs": 60000}]'),
	   silo.enqueue('reset-limits', tenant => 'reset', id => 'later', start_at => now() + interval '1 hour',
					limits => '[{"type": "concurrency", "key": "k2", "maxConcurrency": 1}]');
SELECT count(silo.complete(task_id, 'w')) AS completed FROM silo.lease('w', 'reset-done');
SELECT count(*) AS leased FROM silo.lease('w', 'reset-running', 1, 3600000);
SELECT silo.cancel('running', 'reset');
-- (a regrant marker is written only when a release meets a busy key lock,
-- which one session cannot make: write one)
INSERT INTO silo.concurrency_regrant (tenant, queue, marked_at) VALUES ('reset', 'k', silo.now());
-- a binding of a role to a tenant (tenancy, 1.7)
CREATE ROLE regress_reset_bound NOLOGIN;
SELECT silo.grant_tenant('regress_reset_bound', 'reset') AS bound;
-- a task group setting (fair dispatch, 1.7)
SELECT silo.configure_task_group('reset', 'round_robin') AS had;
-- a recurring schedule (1.7)
SELECT silo.schedule('reset', '@daily', 'reset-schedule', tenant => 'reset') > 0 AS scheduled;
-- every table of schema silo now has rows (a table added later shows up
-- here as a new line: fill it above, and add it to reset())
SELECT table_name, n > 0 AS has_rows FROM test_helpers.table_rows();
SELECT test_helpers.reset();
-- ... and none has any left
SELECT table_name AS left_behind_by_reset, n FROM test_helpers.table_rows() WHERE n > 0;
DROP ROLE regress_reset_bound;
