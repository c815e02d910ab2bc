--
-- import: silo.import_jobs -- jobs with their attempt history (Silo's
-- ImportJobs): the state each history leads to, re-imports, the refusals
-- that write nothing, limits and tenants.
--
SELECT test_helpers.reset();

-- the state of one job, as the views show it
CREATE FUNCTION pg_temp.job(p_id text, p_tenant text DEFAULT '-') RETURNS text
LANGUAGE sql AS $$
	SELECT format('%s attempt=%s next=%s cancelled=%s', j.status, j.current_attempt,
				  CASE WHEN j.next_attempt_at IS NULL THEN '-'
					   WHEN j.next_attempt_at > silo.now() THEN 'future' ELSE 'due' END,
				  j.cancelled_at IS NOT NULL)
	  FROM silo.jobs j WHERE j.tenant = p_tenant AND j.id = p_id
$$;

-- the attempts of one job
CREATE FUNCTION pg_temp.attempts(p_id text, p_tenant text DEFAULT '-') RETURNS SETOF text
LANGUAGE sql AS $$
	SELECT format('%s/%s %s worker=%s started=%s finished=%s result=%s error=%s %s',
				  a.attempt, a.relative_attempt, a.status, a.worker_id,
				  to_char(a.started_at AT TIME ZONE 'UTC', 'MM-DD HH24:MI'),
				  to_char(a.finished_at AT TIME ZONE 'UTC', 'MM-DD HH24:MI'),
				  a.result, a.error_code, a.error_data)
	  FROM silo.attempts a WHERE a.tenant = p_tenant AND a.job_id = p_id ORDER BY a.attempt
$$;

--
-- the state a history leads to
--
SELECT * FROM silo.import_jobs('[
  {"task_group": "imp", "id": "fresh"},
  {"task_group": "imp", "id": "later", "start_at": "2099-01-01T00:00:00Z"},
  {"task_group": "imp", "id": "ok", "payload": {"n": 1}, "enqueued_at": "2026-01-01T09:00:00Z",
   "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1", "error_data": {"why": "flaky"}, "worker_id": "old-worker"},
     {"status": "Succeeded", "started_at": "2026-01-01T10:05:00Z", "finished_at": "2026-01-01T10:06:00Z",
      "result": {"sum": 42}}]},
  {"task_group": "imp", "id": "cancelled", "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1"},
     {"status": "Cancelled", "finished_at": "2026-01-01T10:02:00Z"}]},
  {"task_group": "imp", "id": "failed-no-policy", "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1"}]},
  {"task_group": "imp", "id": "failed-used-up", "retry_policy": {"retryCount": 1}, "attempts": [
     {"status": "Failed", "finished_at": "2026-01-01T10:01:00Z", "error_code": "E1"},
     {"status": "Failed", "finished_at": "2026-01-01T10:02:00Z", "error_code": "E2"}]},
  {"task_group": "imp-retry", "id": "retrying", "retry_policy": {"retryCount": 2},
   "start_at": "2099-01-01T00:00:00Z", "attempts": [
     {"status": "Failed", "finished_at": "2026-01-01T10:01:00Z", "error_code": "E1"},
     {"status": "Failed", "finished_at": "2026-01-01T10:02:00Z", "error_code": "E2"}]},
  {"task_group": "imp-retry", "id": "retry-now", "retry_policy": {"retryCount": 2}, "attempts": [
     {"status": "Failed", "finished_at": "2026-01-01T10:01:00Z", "error_code": "E1"}]}
]');
SELECT id, pg_temp.job(id) FROM silo.jobs ORDER BY id;
SELECT pg_temp.attempts('ok');
SELECT pg_temp.attempts('cancelled');
SELECT pg_temp.attempts('failed-used-up');
-- the outcome of a terminal job is its last attempt's, at that time
SELECT id, r.status, r.result, r.error_code, r.error_data, r.finished_at AT TIME ZONE 'UTC' AS finished
  FROM unnest(ARRAY['ok', 'cancelled', 'failed-no-policy', 'failed-used-up']) id,
	   silo.job_result(id) r;
SELECT id, status, last_attempt, finished_at AT TIME ZONE 'UTC' AS finished,
	   enqueued_at = '2026-01-01T09:00:00Z' AS enqueued_as_given
  FROM silo.finished_jobs ORDER BY id;
SELECT test_helpers.status_index_mismatches() AS mismatches, test_helpers.views_disagree() AS disagree;
-- a pending import has one task, at the next attempt number
SELECT job_id, attempt, relative_attempt, due FROM silo.task ORDER BY job_id;
-- its next attempt runs with the retries the history left: "retry-now"
-- (1 failure, retryCount 2) runs as attempt 2, may fail once more
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'imp-retry');
SELECT silo.fail(task_id, 'w1', 'E2') FROM silo.leases WHERE job_id = 'retry-now';
SELECT pg_temp.job('retry-now');
SELECT silo.expedite('retry-now');
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'imp-retry');
SELECT silo.fail(task_id, 'w1', 'E3') FROM silo.leases WHERE job_id = 'retry-now';
SELECT pg_temp.job('retry-now');
-- a due import woke its group, as an enqueue does: the lease above found it
-- at once; a leased imported job completes as any other
SELECT job_id, attempt FROM silo.lease('w1', 'imp');
SELECT silo.complete(task_id, 'w1', '{"done": true}') FROM silo.leases WHERE job_id = 'fresh';
SELECT pg_temp.job('fresh');

--
-- bad input: 22023/22004, the whole call refused, nothing written
--
SELECT test_helpers.rows('-') AS before \gset
SELECT label, test_helpers.sqlstate_of(format('SELECT * FROM silo.import_jobs(%L)', j)) AS refused
  FROM (VALUES
  ('not an array', '{"task_group": "imp", "id": "x"}'),
  ('not an object', '[1]'),
  ('no id', '[{"task_group": "imp"}]'),
  ('no task_group', '[{"id": "x"}]'),
  ('bad priority', '[{"task_group": "imp", "id": "x", "priority": 100}]'),
  ('on_conflict', '[{"task_group": "imp", "id": "x", "on_conflict": "ignore"}]'),
  ('unknown key', '[{"task_group": "imp", "id": "x", "colour": "red"}]'),
  ('twice', '[{"task_group": "imp", "id": "x"}, {"task_group": "imp", "id": "x"}]'),
  ('attempts not array', '[{"task_group": "imp", "id": "x", "attempts": {}}]'),
  ('attempt not object', '[{"task_group": "imp", "id": "x", "attempts": [1]}]'),
  ('running attempt', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Running", "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('no status', '[{"task_group": "imp", "id": "x", "attempts": [{"finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('no finished_at', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled"}]}]'),
  ('bad finished_at', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "finished_at": "soon"}]}]'),
  ('success not last', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Succeeded", "finished_at": "2026-01-01T10:00:00Z"}, {"status": "Cancelled", "finished_at": "2026-01-01T10:01:00Z"}]}]'),
  ('future', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "finished_at": "2099-01-01T10:00:00Z"}]}]'),
  ('started after', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "started_at": "2026-01-01T11:00:00Z", "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('out of order', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Failed", "error_code": "E", "finished_at": "2026-01-01T11:00:00Z"}, {"status": "Cancelled", "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('result of a failure', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Failed", "error_code": "E", "result": 1, "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('error of a success', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Succeeded", "error_code": "E", "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('failure without code', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Failed", "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('worker without start', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "worker_id": "w", "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('unknown attempt key', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "finished_at": "2026-01-01T10:00:00Z", "colour": "red"}]}]'),
  ('infinite enqueued_at', '[{"task_group": "imp", "id": "x", "enqueued_at": "infinity"}]'),
  ('infinite finish', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "finished_at": "-infinity"}]}]'),
  ('bad started_at', '[{"task_group": "imp", "id": "x", "attempts": [{"status": "Cancelled", "started_at": 5, "finished_at": "2026-01-01T10:00:00Z"}]}]'),
  ('good then bad', '[{"task_group": "imp", "id": "good"}, {"task_group": "imp", "id": "bad", "priority": -1}]')
  ) t(label, j);
SELECT test_helpers.sqlstate_of(format('SELECT * FROM silo.import_jobs(%L)',
		jsonb_build_array(jsonb_build_object('task_group', 'imp', 'id', 'x', 'attempts',
			(SELECT jsonb_agg(jsonb_build_object('status', 'Failed', 'error_code', 'E',
												 'finished_at', '2026-01-01T10:00:00Z'))
			   FROM generate_series(1, 1001))))))
	AS too_many_attempts;
SELECT test_helpers.rows('-') = :'before' AS nothing_written;
SELECT * FROM silo.import_jobs(NULL);
-- the error says which element
SELECT * FROM silo.import_jobs('[{"task_group": "imp", "id": "a"}, {"task_group": "imp", "id": "b", "attempts": [{"status": "Lost", "finished_at": "2026-01-01T10:00:00Z"}]}]');
SELECT * FROM silo.import_jobs('[]');

--
-- re-imports
--
SELECT test_helpers.reset();
SELECT * FROM silo.import_jobs('[
  {"task_group": "re", "id": "waiting", "payload": {"v": 1}, "priority": 10},
  {"task_group": "re", "id": "failed", "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1", "error_data": {"n": 1}}]},
  {"task_group": "re", "id": "done", "attempts": [
     {"status": "Succeeded", "finished_at": "2026-01-01T10:01:00Z", "result": 1}]}
]') ORDER BY id;
SELECT silo.enqueue('re', id => 'cancelled-here', start_at => now() + interval '1 hour');
SELECT silo.cancel('cancelled-here');
-- one batch: a waiting job gets its history (its task is replaced), a
-- Failed job gets one attempt more and runs again with the retry policy
-- brought, a Cancelled job loses its flag; a Succeeded job, a history that
-- does not start with the job's, or one that adds nothing, refuse only
-- their own job
SELECT * FROM silo.import_jobs('[
  {"task_group": "ignored", "id": "waiting", "payload": {"v": 2}, "priority": 90,
   "retry_policy": {"retryCount": 5}, "attempts": [
     {"status": "Failed", "finished_at": "2026-01-02T10:00:00Z", "error_code": "E9"}]},
  {"task_group": "re", "id": "failed", "retry_policy": {"retryCount": 3}, "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1", "error_data": {"n": 1}},
     {"status": "Failed", "finished_at": "2026-01-02T10:00:00Z", "error_code": "E2"}]},
  {"task_group": "re", "id": "cancelled-here", "attempts": [
     {"status": "Succeeded", "finished_at": "2026-01-02T10:00:00Z", "result": "late"}]},
  {"task_group": "re", "id": "done", "attempts": [
     {"status": "Failed", "finished_at": "2026-01-01T10:00:00Z", "error_code": "E0"},
     {"status": "Succeeded", "finished_at": "2026-01-01T10:02:00Z", "result": 2}]},
  {"task_group": "re", "id": "new-in-batch"}
]');
SELECT id, pg_temp.job(id), priority, payload FROM silo.jobs ORDER BY id;
SELECT j.id, i.retry_count FROM silo.jobs j JOIN silo.job_info i USING (tenant, id) ORDER BY id;
SELECT pg_temp.attempts('waiting');
SELECT pg_temp.attempts('failed');
SELECT pg_temp.attempts('cancelled-here');
SELECT job_id, attempt, relative_attempt FROM silo.task ORDER BY job_id;
SELECT test_helpers.status_index_mismatches() AS mismatches, test_helpers.views_disagree() AS disagree;
-- refusals of one job (SL013): the others of the batch are written
SELECT * FROM silo.import_jobs('[
  {"task_group": "re", "id": "failed", "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1", "error_data": {"n": 2}},
     {"status": "Failed", "finished_at": "2026-01-02T10:00:00Z", "error_code": "E2"},
     {"status": "Succeeded", "finished_at": "2026-01-03T10:00:00Z"}]},
  {"task_group": "re", "id": "failed", "tenant": "other", "attempts": [
     {"status": "Cancelled", "finished_at": "2026-01-03T10:00:00Z"}]},
  {"task_group": "re", "id": "cancelled-here", "attempts": [
     {"status": "Failed", "finished_at": "2026-01-02T10:00:00Z", "error_code": "E0"},
     {"status": "Succeeded", "finished_at": "2026-01-03T10:00:00Z"}]},
  {"task_group": "re", "id": "waiting", "attempts": []},
  {"task_group": "re", "id": "new-in-batch", "attempts": []},
  {"task_group": "re", "id": "waiting", "tenant": "t9", "attempts": []}
]');
SELECT pg_temp.job('failed'), pg_temp.job('failed', 'other'), pg_temp.job('waiting', 't9');
-- the Failed job's history, extended by the last attempt, makes it
-- Succeeded, which wakes nobody here but would wake its waiters at commit
SELECT id, success, status FROM silo.import_jobs('[
  {"task_group": "re", "id": "failed", "attempts": [
     {"status": "Failed", "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:01:00Z",
      "error_code": "E1", "error_data": {"n": 1}},
     {"status": "Failed", "finished_at": "2026-01-02T10:00:00Z", "error_code": "E2"},
     {"status": "Succeeded", "finished_at": "2026-01-03T10:00:00Z", "result": "at last"}]}
]');
SELECT pg_temp.job('failed'), (SELECT result FROM silo.job_result('failed')) AS result;
SELECT count(*) AS tasks_left FROM silo.task WHERE job_id = 'failed';

--
-- a batch that names a running job is refused whole (SL013), nothing written
--
SELECT job_id FROM silo.lease('w1', 're', 1);
SELECT test_helpers.rows('-') AS before \gset
SELECT * FROM silo.import_jobs('[
  {"task_group": "re", "id": "brand-new"},
  {"task_group": "re", "id": "waiting", "attempts": [
     {"status": "Failed", "finished_at": "2026-01-02T10:00:00Z", "error_code": "E9"},
     {"status": "Succeeded", "finished_at": "2026-01-03T10:00:00Z"}]}
]');
SELECT test_helpers.rows('-') = :'before' AS nothing_written,
	   (SELECT count(*) FROM silo.job_info WHERE id = 'brand-new') AS brand_new;

--
-- limits: a pending import walks its limits as an enqueue does
--
SELECT test_helpers.reset();
SELECT id, status FROM silo.import_jobs('[
  {"task_group": "lim", "id": "l1", "limits": [{"type": "concurrency", "key": "k", "maxConcurrency": 1}]},
  {"task_group": "lim", "id": "l2", "limits": [{"type": "concurrency", "key": "k", "maxConcurrency": 1}],
   "retry_policy": {"retryCount": 1}, "attempts": [
     {"status": "Failed", "finished_at": "2026-01-01T10:00:00Z", "error_code": "E"}]},
  {"task_group": "lim", "id": "l3", "limits": [{"type": "concurrency", "key": "k", "maxConcurrency": 1}],
   "attempts": [{"status": "Succeeded", "finished_at": "2026-01-01T10:00:00Z"}]}
]');
-- l1 holds the slot, l2 queues for it; the terminal l3 takes nothing
SELECT job_id, attempt, limit_index, key, holders FROM silo.blocked_jobs;
SELECT job_id, attempt FROM silo.lease('w1', 'lim', 5);
-- a re-import of the waiting l2 leaves the queue: its history ends it
SELECT id, status FROM silo.import_jobs('[
  {"task_group": "lim", "id": "l2", "attempts": [
     {"status": "Failed", "finished_at": "2026-01-01T10:00:00Z", "error_code": "E"},
     {"status": "Cancelled", "finished_at": "2026-01-01T11:00:00Z"}]}
]');
SELECT count(*) AS blocked FROM silo.blocked_jobs;
SELECT count(*) AS requests FROM silo.concurrency_request;
SELECT test_helpers.status_index_mismatches() AS mismatches;
-- in REPEATABLE READ, a job with limits is refused (25000)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM silo.import_jobs('[{"task_group": "lim", "id": "l4",
  "limits": [{"type": "concurrency", "key": "k", "maxConcurrency": 1}]}]');
ROLLBACK;

--
-- tenants: the calling role's bindings, as for enqueue
--
SELECT test_helpers.reset();
CREATE ROLE regress_imp_t1 IN ROLE silo_producer;
SELECT silo.grant_tenant('regress_imp_t1', 't1');
SET ROLE regress_imp_t1;
SELECT id, tenant, success, status FROM silo.import_jobs('[{"task_group": "tg", "tenant": "t1", "id": "mine"}]');
SELECT * FROM silo.import_jobs('[{"task_group": "tg", "tenant": "t1", "id": "mine2"},
								  {"task_group": "tg", "tenant": "t2", "id": "theirs"}]');
RESET ROLE;
SELECT tenant, id FROM silo.jobs ORDER BY 1, 2;
SELECT silo.revoke_tenant('regress_imp_t1', 't1');
DROP ROLE regress_imp_t1;
