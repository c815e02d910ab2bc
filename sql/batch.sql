--
-- batch: silo.complete_many -- a batch of successes in one call; results
-- paired by position; tasks without a live lease of the worker skipped;
-- bad arguments rejected with nothing written; jobs with limits free
-- their slots and grant the next waiter in the same transaction.
--
SELECT test_helpers.reset();

-- three jobs leased together and completed together, with results
SELECT silo.enqueue('bt', id => 'b' || g, priority => g) FROM generate_series(1, 3) g;
CREATE TEMP TABLE leased AS SELECT task_id, job_id FROM silo.lease('w1', 'bt', 3);
SELECT array_agg(task_id ORDER BY job_id) AS ids FROM leased \gset
SELECT job_id FROM leased l JOIN silo.complete_many(:'ids', 'w1',
		ARRAY['{"n": 1}', NULL, '{"n": 3}']::jsonb[]) c ON c = l.task_id
 ORDER BY job_id;
SELECT id, status FROM silo.jobs WHERE id LIKE 'b_' ORDER BY id;
SELECT job_id, attempt, worker_id, status, result, task_id = (SELECT task_id FROM leased l WHERE l.job_id = a.job_id) AS same_task,
	   finished_at >= started_at AS finished_after_start
  FROM silo.attempts a WHERE job_id LIKE 'b_' ORDER BY job_id;
SELECT test_helpers.job_rows('-', 'b2');
SELECT count(*) AS leases_left FROM silo.task_lease;

-- without results; an empty batch completes nothing
SELECT silo.enqueue('bt', id => 'nr');
SELECT count(*) AS completed FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w1', 'bt', 5)), 'w1');
SELECT status, (SELECT result IS NULL FROM silo.attempts WHERE job_id = 'nr') AS no_result FROM silo.jobs WHERE id = 'nr';
SELECT count(*) AS completed FROM silo.complete_many('{}', 'w1');
-- NULL too: array_agg of an empty lease is NULL, and lease-then-complete
-- in one statement must work on an empty queue
SELECT count(*) AS completed FROM silo.complete_many(NULL, 'w1');
SELECT count(*) AS completed FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w1', 'bt', 5)), 'w1');

-- skipped, not errors: another worker's lease, an expired lease, an
-- unknown task, a task already completed; the others are completed
SELECT silo.enqueue('bt', id => 's' || g) FROM generate_series(1, 3) g;
SELECT task_id AS mine FROM silo.lease('w1', 'bt', 1) \gset
SELECT task_id AS theirs FROM silo.lease('w2', 'bt', 1) \gset
SELECT task_id AS short FROM silo.lease('w1', 'bt', 1, 100) \gset
SET silo.clock_offset_ms = 1000;
SELECT c = :'mine' AS only_mine
  FROM silo.complete_many(ARRAY[:'mine', :'theirs', :'short',
								'00000000-0000-4000-8000-000000000000',
								(SELECT task_id FROM leased WHERE job_id = 'b1')]::uuid[], 'w1') c;
SELECT job_id, worker_id FROM silo.leases ORDER BY job_id;
RESET silo.clock_offset_ms;
-- silo.complete tells why for each skipped one
SELECT which, test_helpers.sqlstate_of(format('SELECT silo.complete(%L, %L)', t, 'w1')) AS single
  FROM (VALUES ('theirs', :'theirs'::uuid), ('unknown', '00000000-0000-4000-8000-000000000000')) v(which, t);

-- bad arguments: an error, and nothing is completed (task ids masked)
SELECT regexp_replace(call, '[0-9a-f]{8}-[0-9a-f-]{27}', '<uuid>', 'g') AS call,
	   regexp_replace(test_helpers.sqlstate_of(call), '[0-9a-f]{8}-[0-9a-f-]{27}', '<uuid>', 'g') AS result
  FROM (VALUES
	(format('SELECT silo.complete_many(ARRAY[%L, NULL]::uuid[], ''w2'')', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L, %L]::uuid[], ''w2'')', :'theirs', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], ''w2'', ARRAY[''{}'', ''{}'']::jsonb[])', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], ''w2'', ''{}''::jsonb[])', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[[%L]]::uuid[], ''w2'')', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], ''w2'', ARRAY[[''{}'']]::jsonb[])', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], ''w2'', ''[0:0]={"{}"}''::jsonb[])', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], NULL)', :'theirs')),
	(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], '''')', :'theirs')),
	('SELECT silo.complete_many((SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 1001)), ''w2'')')
  ) v(call);
SELECT job_id, worker_id FROM silo.leases WHERE task_id = :'theirs';
-- REPEATABLE READ is refused, as for silo.complete
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT test_helpers.sqlstate_of(format('SELECT silo.complete_many(ARRAY[%L]::uuid[], ''w2'')', :'theirs')) AS repeatable_read;
ROLLBACK;
SELECT count(*) AS completed FROM silo.complete_many(ARRAY[:'theirs']::uuid[], 'w2');

-- jobs with limits: completing the holders grants the waiters in the same
-- transaction, and the slots are never over-granted
SELECT test_helpers.reset();
SELECT silo.enqueue('bl', id => 'l' || g,
					limits => '[{"type": "concurrency", "key": "bk", "maxConcurrency": 2}]')
  FROM generate_series(1, 5) g;
SELECT holders, requesters FROM silo.queues WHERE queue = 'bk';
SELECT array_agg(task_id) AS ids FROM silo.lease('w1', 'bl', 5) \gset
SELECT cardinality(:'ids'::uuid[]) AS leased;
BEGIN;
SELECT count(*) AS completed FROM silo.complete_many(:'ids', 'w1');
SELECT holders, requesters FROM silo.queues WHERE queue = 'bk';
SELECT id, status FROM silo.jobs WHERE id LIKE 'l_' ORDER BY id;
COMMIT;
SELECT array_agg(task_id) AS ids FROM silo.lease('w1', 'bl', 5) \gset
SELECT cardinality(:'ids'::uuid[]) AS leased;
SELECT count(*) AS completed FROM silo.complete_many(:'ids', 'w1');
SELECT count(*) AS completed FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w1', 'bl', 5)), 'w1');
SELECT status, count(*) FROM silo.jobs WHERE id LIKE 'l_' GROUP BY status;
SELECT count(*) AS holders_left FROM silo.concurrency_holder;

-- a completion changes the status row in place: a HOT update (1.5; 0x03 is
-- a table of its own), one per job.  The counters are the backend's own,
-- read around the call in one transaction (they may also hold earlier,
-- unflushed counts: hence the differences).
SELECT test_helpers.reset();
SELECT count(*) AS enqueued FROM silo.enqueue_many(
	(SELECT jsonb_agg(jsonb_build_object('task_group', 'hot')) FROM generate_series(1, 40)));
BEGIN;
SELECT pg_stat_get_xact_tuples_updated('silo.job_status'::regclass) AS upd0,
	   pg_stat_get_xact_tuples_hot_updated('silo.job_status'::regclass) AS hot0 \gset
SELECT count(*) AS completed FROM silo.complete_many(
	(SELECT array_agg(task_id) FROM silo.lease('w1', 'hot', 40)), 'w1');
SELECT pg_stat_get_xact_tuples_updated('silo.job_status'::regclass) - :upd0 AS updated,
	   pg_stat_get_xact_tuples_hot_updated('silo.job_status'::regclass) - :hot0 AS hot_updated;
COMMIT;
SELECT status, count(*) FROM silo.jobs WHERE tenant = '-' GROUP BY status;

-- 0x03 agrees with every status row the file left behind
SELECT test_helpers.status_index_mismatches();
