--
-- schedules: recurring jobs (docs/api.md, "Recurring jobs").  pg_cron
-- does the timing; here the firings are called directly (test/t/
-- 021_schedules.pl waits for a real one).
--
SELECT test_helpers.reset();

-- bad input: the documented errors, and nothing written
SELECT test_helpers.sqlstate_of($$SELECT silo.schedule(NULL, '* * * * *', 'tg')$$) AS null_name,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('', '* * * * *', 'tg')$$) AS empty_name,
	   test_helpers.sqlstate_of(format('SELECT silo.schedule(%L, %L, %L)', repeat('n', 101), '* * * * *', 'tg')) AS long_name,
	   test_helpers.sqlstate_of(format('SELECT silo.schedule(%L, %L, %L)', E'a\nb', '* * * * *', 'tg')) AS newline,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', NULL, 'tg')$$) AS null_cron,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', NULL)$$) AS null_group;
SELECT c AS cron, test_helpers.sqlstate_of(format('SELECT silo.schedule(%L, %L, %L)', 's', c, 'tg')) AS error
  FROM unnest(ARRAY['* * * *', '* * * * * *', '60 * * * *', '* 24 * * *', '* * 0 * *',
					'* * * 13 *', '* * * * 8', '5/10 * * * *', '*/0 * * * *', '10-5 * * * *',
					'x * * * *', '* * * foo *', '30 seconds', '@reboot', '@every_minute',
					'1,,2 * * * *', '']) c;
-- the detail says what is wrong, the hint what is right
SELECT silo.schedule('s', '*/15 * * * * *', 'tg');
SELECT silo.schedule('s', '0 25 * * *', 'tg');
SELECT test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', 'tg', priority => 100)$$) AS priority,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', 'tg', tenant => '*')$$) AS star_tenant,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', 'tg', limits => '{}')$$) AS limits,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', 'tg', metadata => '[]')$$) AS metadata,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', 'tg', retry_policy => '{"x": 1}')$$) AS retry,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('s', '* * * * *', 'tg', skip_if_live => NULL)$$) AS skip;
SELECT count(*) AS schedules FROM silo.schedule;
SELECT count(*) AS cron_jobs FROM cron.job WHERE jobname LIKE 'silo-schedule-%';

-- what the accepted expressions match: the next minute after a time (GMT)
SELECT c AS cron, silo.cron_next(c, '2026-03-14 10:07:30+00') AT TIME ZONE 'UTC' AS next
  FROM unnest(ARRAY['* * * * *', '*/15 * * * *', '0 3 * * *', '0 3 * * mon-fri', '0 0 1 jan *',
					'@hourly', '@daily', '@weekly', '@monthly', '@yearly', '5,35 8-9 14 3 *',
					'0 0 13 * fri', '0 0 29 2 *', '0 0 30 2 *', ' 0  12  *  *  7 ']) c;

-- a schedule, its pg_cron job (a number and nothing else) and its row
SELECT silo.schedule('nightly', '0 3 * * *', 'reports', '{"kind": "daily"}') AS id \gset
SELECT jobname = 'silo-schedule-' || :id AS named, schedule, command = 'SELECT silo.fire_schedule(' || :id || ')' AS command,
	   database = current_database() AS here, username = current_user AS mine, active
  FROM cron.job WHERE jobname LIKE 'silo-schedule-%';
SELECT tenant, name, cron, task_group, payload, priority, skip_if_live, last_firing, last_job_id,
	   last_job_status, cron_job, next_firing = silo.cron_next('0 3 * * *', silo.now()) AS next_ok
  FROM silo.schedules;

-- scheduling again the same (tenant, name) replaces it: same id, one pg_cron job
SELECT silo.schedule('nightly', '30 4 * * *', 'reports', '{"kind": "daily", "v": 2}', priority => 10,
					 retry_policy => '{"retryCount": 2}', metadata => '{"source": "cron"}') = :id AS same_id;
SELECT schedule, command = 'SELECT silo.fire_schedule(' || :id || ')' AS command
  FROM cron.job WHERE jobname LIKE 'silo-schedule-%';
SELECT name, cron, payload, priority FROM silo.schedules;

-- a firing enqueues one job, named by the schedule and the minute (GMT)
SELECT silo.fire_schedule(:id, '2026-03-14 04:30:12+00') AS job;
SELECT silo.fire_schedule(:id, '2026-03-14 04:30:59+00') AS again;		-- the same minute: the same job
SELECT id, task_group, priority, status FROM silo.jobs ORDER BY id;
SELECT key, value FROM silo.job_metadata;
SELECT last_firing AT TIME ZONE 'UTC' AS last_firing, last_job_id, last_job_status FROM silo.schedules;
-- the next minute is another job
SELECT silo.fire_schedule(:id, '2026-03-14 04:31:00+00') AS next_minute;
SELECT count(*) AS jobs FROM silo.jobs;

-- skip_if_live: no firing while the previous job is not terminal
SELECT silo.schedule('poll', '*/5 * * * *', 'poller', tenant => 't1', skip_if_live => true) AS poll \gset
SELECT silo.fire_schedule(:poll, '2026-03-14 05:00+00') AS first;
SELECT silo.fire_schedule(:poll, '2026-03-14 05:05+00') AS skipped;	-- the first is still Waiting
SELECT job_id, silo.complete(task_id, 'w1') FROM silo.lease('w1', 'poller', tenants => '{t1}');
SELECT silo.fire_schedule(:poll, '2026-03-14 05:10+00') AS after_success;
SELECT id, status FROM silo.jobs WHERE tenant = 't1' ORDER BY id;
SELECT name, last_job_id, last_job_status FROM silo.schedules WHERE tenant = 't1';
-- an unknown schedule fires nothing; a time must be finite
SELECT silo.fire_schedule(-1) IS NULL AS unknown;
SELECT test_helpers.sqlstate_of($$SELECT silo.fire_schedule(1, 'infinity')$$) AS infinite,
	   test_helpers.sqlstate_of($$SELECT silo.fire_schedule(NULL)$$) AS null_id;

-- tenancy: a bound role schedules, unschedules and sees only its tenants
CREATE ROLE regress_sched_t1 IN ROLE silo_producer;
CREATE ROLE regress_sched_worker IN ROLE silo_worker;
GRANT USAGE ON SCHEMA test_helpers TO regress_sched_t1, regress_sched_worker;
SELECT silo.grant_tenant('regress_sched_t1', 't1');
SELECT count(*) AS rows_before FROM silo.schedule \gset
SET ROLE regress_sched_t1;
SELECT name, tenant FROM silo.schedules ORDER BY name;
SELECT test_helpers.sqlstate_of($$SELECT silo.schedule('mine', '* * * * *', 'tg')$$) AS default_tenant,
	   test_helpers.sqlstate_of($$SELECT silo.schedule('mine', '* * * * *', 'tg', tenant => 't2')$$) AS other_tenant,
	   test_helpers.sqlstate_of($$SELECT silo.unschedule('nightly')$$) AS unschedule_other,
	   test_helpers.sqlstate_of($$SELECT silo.fire_schedule(1)$$) AS fire;
SELECT silo.schedule('hourly', '@hourly', 'tg', tenant => 't1') IS NOT NULL AS scheduled;
SELECT name, tenant, cron FROM silo.schedules ORDER BY name;
SELECT * FROM cron.job;		-- ERROR expected: pg_cron's table is not the producer's
RESET ROLE;
SET ROLE regress_sched_worker;
SELECT test_helpers.sqlstate_of($$SELECT silo.schedule('w', '* * * * *', 'tg')$$) AS worker_schedules,
	   test_helpers.sqlstate_of($$SELECT * FROM silo.schedules$$) AS worker_reads;
RESET ROLE;
SELECT count(*) - :rows_before AS rows_added FROM silo.schedule;

-- unschedule: the row and its pg_cron job go, the jobs it made stay
SELECT count(*) AS cron_jobs FROM cron.job WHERE jobname LIKE 'silo-schedule-%';
SELECT silo.unschedule('nightly') AS removed, silo.unschedule('nightly') AS again,
	   silo.unschedule('never') AS never;
SELECT count(*) AS cron_jobs FROM cron.job WHERE jobname = 'silo-schedule-' || :id;
SELECT name, tenant FROM silo.schedules ORDER BY name;
SELECT count(*) AS jobs_kept FROM silo.jobs WHERE tenant = '-';
SELECT test_helpers.sqlstate_of($$SELECT silo.unschedule(NULL)$$) AS null_name,
	   test_helpers.sqlstate_of($$SELECT silo.unschedule('x', NULL)$$) AS null_tenant;

-- the pg_cron jobs are checked, not only made: a missing job is made
-- again, a changed one is put right, a job of no schedule is removed
SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = 'silo-schedule-' || :poll;
UPDATE cron.job SET command = 'SELECT 1' WHERE jobname LIKE 'silo-schedule-%';
SELECT cron.schedule('silo-schedule-999999', '* * * * *', 'SELECT 1') > 0 AS planted;
SELECT silo.sync_schedules() AS changed;
SELECT silo.sync_schedules() AS nothing_left;
SELECT s.name, j.schedule, j.command = 'SELECT silo.fire_schedule(' || s.schedule_id || ')' AS command
  FROM silo.schedule s JOIN cron.job j ON j.jobname = 'silo-schedule-' || s.schedule_id ORDER BY 1;
SELECT count(*) AS cron_jobs FROM cron.job WHERE jobname LIKE 'silo-schedule-%';

-- a read-only transaction is refused before anything is written
BEGIN READ ONLY;
SELECT test_helpers.sqlstate_of($$SELECT silo.schedule('ro', '* * * * *', 'tg')$$) AS read_only;
ROLLBACK;

SELECT test_helpers.reset();
REVOKE USAGE ON SCHEMA test_helpers FROM regress_sched_t1, regress_sched_worker;
DROP ROLE regress_sched_t1, regress_sched_worker;
