--
-- lease: silo.lease -- ready order, future jobs, batch size, lease
-- length, the columns of a leased task, task group isolation.
--
SELECT test_helpers.reset();

-- nothing to lease: no rows
SELECT count(*) AS leased FROM silo.lease('w1', 'empty-group');

-- priority order: lower number first, whatever the enqueue order; equal
-- priorities in enqueue order
SELECT silo.enqueue('lp', id => 'p50', priority => 50),
	   silo.enqueue('lp', id => 'p10', priority => 10),
	   silo.enqueue('lp', id => 'p90', priority => 90),
	   silo.enqueue('lp', id => 'p0', priority => 0),
	   silo.enqueue('lp', id => 'p10-later', priority => 10),
	   silo.enqueue('lp', id => 'p99', priority => 99);
SELECT job_id, priority FROM silo.lease('w1', 'lp', 10);

-- then effective start: a job enqueued later but due earlier goes first
-- (a deliberate divergence from Silo, which orders by time first)
SELECT silo.enqueue('ls', id => 'enqueued-first-due-later', start_at => silo.now() + interval '30 seconds');
SELECT silo.enqueue('ls', id => 'enqueued-second-due-now');
SET silo.clock_offset_ms = 60000;
SELECT job_id FROM silo.lease('w1', 'ls', 10);
RESET silo.clock_offset_ms;

-- then enqueue order: jobs with the same start time come out in the
-- order they were enqueued; a better priority still goes first
SELECT silo.now() + interval '30 seconds' AS same_start \gset
SELECT silo.enqueue('lt', id => 'c', start_at => :'same_start'),
	   silo.enqueue('lt', id => 'a', start_at => :'same_start'),
	   silo.enqueue('lt', id => 'b', start_at => :'same_start'),
	   silo.enqueue('lt', id => 'urgent', start_at => :'same_start', priority => 1);
SELECT count(DISTINCT start_at) AS distinct_starts FROM silo.task WHERE task_group = 'lt';
SET silo.clock_offset_ms = 60000;
SELECT job_id FROM silo.lease('w1', 'lt', 10);
RESET silo.clock_offset_ms;

-- a back-dated start_at does not jump the queue
SELECT silo.enqueue('lb', id => 'on-time');
SELECT silo.enqueue('lb', id => 'back-dated-a-day', start_at => now() - interval '1 day');
SELECT silo.enqueue('lb', id => 'back-dated-to-epoch', start_at => 'epoch');
SELECT job_id FROM silo.lease('w1', 'lb', 10);

-- a future job is not leasable before silo's clock reaches its start;
-- once it has, silo.lease promotes it itself (the broker is paused here)
SELECT silo.enqueue('lf', id => 'in-five-minutes', start_at => silo.now() + interval '5 minutes');
SELECT count(*) AS leased FROM silo.lease('w1', 'lf');
SET silo.clock_offset_ms = 240000;	-- 4 minutes on: still in the future
SELECT count(*) AS leased FROM silo.lease('w1', 'lf');
SELECT status FROM silo.jobs WHERE id = 'in-five-minutes';
SET silo.clock_offset_ms = 360000;	-- 6 minutes on: due
SELECT status FROM silo.jobs WHERE id = 'in-five-minutes';
SELECT due AS promoted_before_lease FROM silo.task WHERE job_id = 'in-five-minutes';
SELECT job_id FROM silo.lease('w1', 'lf');
RESET silo.clock_offset_ms;

-- only due tasks are leased: a future job of a better priority waits
SELECT silo.enqueue('lw', id => 'future-urgent', priority => 0, start_at => silo.now() + interval '1 hour'),
	   silo.enqueue('lw', id => 'due-lazy', priority => 99);
SELECT job_id FROM silo.lease('w1', 'lw', 10);
SELECT id, status FROM silo.jobs WHERE task_group = 'lw' ORDER BY id;

-- the columns of a leased task
SELECT silo.enqueue('lc', payload => '{"x": [1, 2]}', tenant => 'acme', id => 'cols', priority => 12,
					metadata => '{"customer": "c1"}', retry_policy => '{"retryCount": 2}');
CREATE TEMP TABLE leased AS SELECT * FROM silo.lease('w-cols', 'lc', 1, 5000);
SELECT kind, tenant, job_id, attempt, relative_attempt, is_last_attempt, priority, task_group,
	   payload, metadata, queue_key, current_max_concurrency, refresh_metadata
  FROM leased;
-- the task id is a UUID, and is the job's current task
SELECT test_helpers.is_uuid(l.task_id::text) AS task_id_is_uuid,
	   l.task_id = s.task_id AS is_current_task
  FROM leased l JOIN silo.job_status s ON s.tenant = l.tenant AND s.id = l.job_id;
-- lease_expires_at is the stored expiry, lease_ms after the lease started
SELECT l.lease_expires_at = x.expires_at AS expiry_matches,
	   x.expires_at - x.started_at AS lease_length,
	   x.worker_id, x.kind, x.expired
  FROM leased l JOIN silo.leases x ON x.task_id = l.task_id;
-- the job is Running; its task moved from silo.tasks to silo.leases, and
-- silo.attempts shows a running attempt
SELECT status, current_attempt, next_attempt_at IS NULL AS no_next_attempt FROM silo.jobs WHERE id = 'cols';
SELECT count(*) AS pending_tasks FROM silo.tasks WHERE job_id = 'cols';
SELECT attempt, relative_attempt, worker_id, status, finished_at IS NULL AS unfinished
  FROM silo.attempts WHERE job_id = 'cols';
-- a leased task is not handed out again
SELECT count(*) AS leased FROM silo.lease('w2', 'lc', 10);

-- is_last_attempt: true without a policy or with retryCount 0, false
-- while retries are left
SELECT silo.enqueue('li', id => 'no-policy', priority => 1),
	   silo.enqueue('li', id => 'empty-policy', priority => 2, retry_policy => '{}'),
	   silo.enqueue('li', id => 'zero-retries', priority => 3, retry_policy => '{"retryCount": 0}'),
	   silo.enqueue('li', id => 'one-retry', priority => 4, retry_policy => '{"retryCount": 1}');
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'li', 10);

-- max_tasks caps the batch; the rest stays for the next call
SELECT silo.enqueue('lm', id => 'm' || i) FROM generate_series(1, 5) i;
SELECT job_id FROM silo.lease('w1', 'lm', 2);
SELECT job_id FROM silo.lease('w1', 'lm', 2);
SELECT job_id FROM silo.lease('w1', 'lm', 2);
SELECT count(*) AS leased FROM silo.lease('w1', 'lm', 2);

-- the largest batch is 1000
SELECT count(*) AS enqueued FROM (SELECT silo.enqueue('lbig') FROM generate_series(1, 1001)) e;
SELECT count(*) AS leased FROM silo.lease('w1', 'lbig', 1000);
SELECT count(*) AS left_over FROM silo.tasks WHERE task_group = 'lbig';

-- lease_ms sets the lease length, from 100 ms to one hour
SELECT silo.enqueue('ll', id => 'short'), silo.enqueue('ll', id => 'long');
SELECT job_id FROM silo.lease('w-short', 'll', 1, 100);
SELECT job_id FROM silo.lease('w-long', 'll', 1, 3600000);
SELECT job_id, expires_at - started_at AS lease_length FROM silo.leases WHERE task_group = 'll' ORDER BY job_id;

-- argument checks: bounds raise 22023, NULLs 22004
SELECT call, test_helpers.sqlstate_of('SELECT * FROM silo.lease(' || call || ')') AS result
  FROM (VALUES ('''w'', ''ll'', 0'),
			   ('''w'', ''ll'', 1001'),
			   ('''w'', ''ll'', -1'),
			   ('''w'', ''ll'', NULL'),
			   ('''w'', ''ll'', 1, 99'),
			   ('''w'', ''ll'', 1, 3600001'),
			   ('''w'', ''ll'', 1, NULL'),
			   ('NULL, ''ll'''),
			   ('''w'', NULL'),
			   ('''w'', ''''')) t(call);
SELECT * FROM silo.lease('w', repeat('g', 65));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM silo.lease('w', 'll', 0);
\echo :LAST_ERROR_SQLSTATE

-- task groups isolate: leasing one group never returns another's tasks
SELECT silo.enqueue('group-a', id => 'ga1'), silo.enqueue('group-b', id => 'gb1'),
	   silo.enqueue('group-a', id => 'ga2'), silo.enqueue('group-b', id => 'gb2');
SELECT job_id, task_group FROM silo.lease('w1', 'group-b', 10);
SELECT job_id, task_group FROM silo.tasks WHERE task_group LIKE 'group-_' ORDER BY job_id;
SELECT job_id, task_group FROM silo.lease('w1', 'group-a', 10);

-- tenants share a task group: one lease returns every tenant's work, in
-- priority order
SELECT silo.enqueue('lten', tenant => 't1', id => 'x', priority => 30),
	   silo.enqueue('lten', tenant => 't2', id => 'x', priority => 20),
	   silo.enqueue('lten', tenant => 't3', id => 'y', priority => 40);
SELECT tenant, job_id, priority FROM silo.lease('w1', 'lten', 10);

-- silo.lease needs READ COMMITTED: under REPEATABLE READ or SERIALIZABLE
-- it refuses (a task another worker just took would raise a serialization
-- error instead of being skipped)
SELECT silo.enqueue('lrr', id => 'rr');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT job_id FROM silo.lease('w1', 'lrr');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT job_id FROM silo.lease('w1', 'lrr');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- nor in a read-only transaction (25006), where it leases nothing; then
-- the same task is leased as usual, and complete_many refuses likewise
-- (an empty batch, which writes nothing, is fine)
BEGIN READ ONLY;
SELECT job_id FROM silo.lease('w1', 'lrr');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT task_id AS rr_task FROM silo.lease('w1', 'lrr') \gset
COMMIT;
BEGIN READ ONLY;
SELECT count(*) AS nothing_to_do FROM silo.complete_many(NULL, 'w1');
SELECT * FROM silo.complete_many(ARRAY[:'rr_task']::uuid[], 'w1');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS completed FROM silo.complete_many(ARRAY[:'rr_task']::uuid[], 'w1');

-- lease marks (src/leasemark.c): a lease starts past the tasks earlier
-- leases of its group took; a task enqueued ahead of them, by a higher
-- priority or an earlier start, is still leased first
SELECT silo.enqueue('lmark', tenant => 'lm', id => 'm' || g, priority => 50) FROM generate_series(1, 3) g;
SELECT job_id FROM silo.lease('w1', 'lmark', 2);
SELECT silo.enqueue('lmark', tenant => 'lm', id => 'urgent', priority => 10);
SELECT job_id FROM silo.lease('w1', 'lmark', 1);
SELECT job_id FROM silo.lease('w1', 'lmark', 1);
-- a task whose lease rolled back is leased again (that lease had moved
-- the mark past it)
SELECT silo.enqueue('lmark', tenant => 'lm', id => 'm' || g, priority => 50) FROM generate_series(4, 5) g;
BEGIN;
SELECT job_id FROM silo.lease('w1', 'lmark', 1);
ROLLBACK;
SELECT job_id FROM silo.lease('w1', 'lmark', 5);
-- the trigger that keeps marks safe fires always, replicas included
SELECT tgname, tgenabled FROM pg_trigger
 WHERE tgrelid = 'silo.task'::regclass AND NOT tgisinternal;
-- a transaction that changed due tasks cannot be prepared: the marks
-- would miss its commit
BEGIN;
SELECT silo.enqueue('lmark', tenant => 'lm', id => 'prepared') IS NOT NULL AS enqueued;
PREPARE TRANSACTION 'silo_lease_marks';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared FROM pg_prepared_xacts;
SELECT count(*) AS kept FROM silo.jobs WHERE tenant = 'lm' AND id = 'prepared';

-- every task leased in this file is held by exactly one lease; pending
-- are the future job of group lw and the one task of group lbig that did
-- not fit in the batch
SELECT count(*) AS leases, count(DISTINCT task_id) AS tasks, count(DISTINCT (tenant, job_id)) AS jobs
  FROM silo.leases;
SELECT task_group, count(*) AS pending FROM silo.tasks GROUP BY task_group ORDER BY task_group;

-- a lease reads a bounded part of task_ready however many tasks wait
-- behind the ones it takes: with 3,000 due tasks (about 15 leaf pages),
-- leasing one reads a few index pages (4; up to about 7 right after
-- autovacuum dropped the marks), not the whole group (the mark's check
-- once walked every due task of the group: 18)
SELECT count(*) AS enqueued FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
    'task_group', 'lwalk', 'tenant', 'lwalk', 'id', 'w' || g)) FROM generate_series(1, 3000) g));
SELECT count(*) AS leased FROM silo.lease('w1', 'lwalk', 1);
BEGIN;
SELECT set_config('lwalk.before', pg_stat_get_xact_blocks_fetched('silo.task_ready'::regclass)::text, true) IS NOT NULL AS counted;
SELECT count(*) AS leased FROM silo.lease('w1', 'lwalk', 1);
SELECT pg_stat_get_xact_blocks_fetched('silo.task_ready'::regclass)
       - current_setting('lwalk.before')::bigint <= 12 AS few_pages_read;
COMMIT;
-- and it fetches the payload by one primary-key probe of job_info per
-- task (a root-to-leaf descent and a heap page: 3 to 4 pages), never by a
-- join that reads the table or its index whole (3,000 jobs: about 60 pages)
BEGIN;
SELECT set_config('lwalk.info', (pg_stat_get_xact_blocks_fetched('silo.job_info'::regclass)
       + pg_stat_get_xact_blocks_fetched('silo.job_info_pkey'::regclass))::text, true) IS NOT NULL AS counted;
SELECT count(*) AS leased FROM silo.lease('w1', 'lwalk', 1);
SELECT pg_stat_get_xact_blocks_fetched('silo.job_info'::regclass)
       + pg_stat_get_xact_blocks_fetched('silo.job_info_pkey'::regclass)
       - current_setting('lwalk.info')::bigint <= 6 AS one_probe;
COMMIT;

-- a lease first looks for its own group's due tasks the broker has not
-- promoted yet (the broker is paused here): 20,000 tasks of group lcliff
-- come due an hour from now, and with the clock an hour on, a lease of
-- the empty group lempty reads a few pages of task_future_group (its own
-- range), not the 20,000 overdue tasks of another group (about 55 leaf
-- pages of task_future, and their heap pages)
SELECT count(*) AS enqueued FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
    'task_group', 'lcliff', 'tenant', 'lcliff', 'id', 'c' || g,
    'start_at', now() + interval '1 hour')) FROM generate_series(1, 20000) g));
SET silo.clock_offset_ms = 3700000;
BEGIN;
SELECT set_config('lcliff.before', (pg_stat_get_xact_blocks_fetched('silo.task_future'::regclass)
       + pg_stat_get_xact_blocks_fetched('silo.task_future_group'::regclass)
       + pg_stat_get_xact_blocks_fetched('silo.task'::regclass))::text, true) IS NOT NULL AS counted;
SELECT count(*) AS leased FROM silo.lease('w1', 'lempty', 1);
SELECT pg_stat_get_xact_blocks_fetched('silo.task_future'::regclass)
       + pg_stat_get_xact_blocks_fetched('silo.task_future_group'::regclass)
       + pg_stat_get_xact_blocks_fetched('silo.task'::regclass)
       - current_setting('lcliff.before')::bigint <= 6 AS own_group_only;
COMMIT;
-- the group's own overdue tasks are still found and leased at once
SELECT count(*) AS leased FROM silo.lease('w1', 'lcliff', 5);
RESET silo.clock_offset_ms;

-- 0x03 agrees with every status row the file left behind
SELECT test_helpers.status_index_mismatches();
