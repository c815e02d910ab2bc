--
-- outcome: how an attempt ends -- complete, fail, ack_cancel, release,
-- heartbeat; lease checks (unknown, wrong worker, expired, reported
-- twice); retry policy and backoff; reports on cancelled jobs.
--
SELECT test_helpers.reset();

-- complete: the job Succeeded, the attempt keeps the result; no task or
-- lease is left
SELECT silo.enqueue('oc', id => 'done', retry_policy => '{"retryCount": 3}');
SELECT task_id AS t FROM silo.lease('w1', 'oc') \gset
SELECT silo.complete(:'t', 'w1', '{"answer": 42}');
SELECT status, current_attempt, next_attempt_at FROM silo.jobs WHERE id = 'done';
SELECT attempt, relative_attempt, task_id = :'t' AS same_task, worker_id, status, result,
	   error_code, error_data, finished_at >= started_at AS finished_after_start
  FROM silo.attempts WHERE job_id = 'done';
SELECT test_helpers.job_rows('-', 'done');

-- complete without a result
SELECT silo.enqueue('oc', id => 'done-no-result');
SELECT task_id AS t FROM silo.lease('w1', 'oc') \gset
SELECT silo.complete(:'t', 'w1');
SELECT a.status, a.result IS NULL AS no_result FROM silo.attempts a WHERE job_id = 'done-no-result';

-- fail without a retry policy: the first failure is final
SELECT silo.enqueue('oc', id => 'failed-no-policy');
SELECT task_id AS t FROM silo.lease('w1', 'oc') \gset
SELECT silo.fail(:'t', 'w1', 'BOOM', '{"why": "disk full"}');
SELECT status, current_attempt, next_attempt_at FROM silo.jobs WHERE id = 'failed-no-policy';
SELECT attempt, status, result, error_code, error_data FROM silo.attempts WHERE job_id = 'failed-no-policy';
SELECT test_helpers.job_rows('-', 'failed-no-policy');

-- fail with retryCount 0: final too; error_data is optional
SELECT silo.enqueue('oc', id => 'failed-zero-retries', retry_policy => '{"retryCount": 0}');
SELECT task_id AS t FROM silo.lease('w1', 'oc') \gset
SELECT silo.fail(:'t', 'w1', 'BOOM');
SELECT status FROM silo.jobs WHERE id = 'failed-zero-retries';
SELECT attempt, status, error_code, error_data FROM silo.attempts WHERE job_id = 'failed-zero-retries';

-- ack_cancel without a cancel request: the worker cancels its own job
SELECT silo.enqueue('oc', id => 'self-cancelled', retry_policy => '{"retryCount": 3}');
SELECT task_id AS t FROM silo.lease('w1', 'oc') \gset
SELECT silo.ack_cancel(:'t', 'w1');
SELECT status FROM silo.jobs WHERE id = 'self-cancelled';
SELECT attempt, status FROM silo.attempts WHERE job_id = 'self-cancelled';
SELECT count(*) AS tasks FROM silo.tasks WHERE job_id = 'self-cancelled';

-- ack_cancel after a cancel request
SELECT silo.enqueue('oc', id => 'acked', retry_policy => '{"retryCount": 3}');
SELECT task_id AS t FROM silo.lease('w1', 'oc') \gset
SELECT silo.cancel('acked');
SELECT silo.ack_cancel(:'t', 'w1');
SELECT status, cancelled_at IS NOT NULL AS cancelled_at_set FROM silo.jobs WHERE id = 'acked';
SELECT attempt, status FROM silo.attempts WHERE job_id = 'acked';

--
-- heartbeat
--

-- a heartbeat returns false while the job is not cancelled, and extends
-- the lease to lease_ms from now
SELECT silo.enqueue('oh', id => 'beating');
SELECT task_id AS t FROM silo.lease('w1', 'oh', 1, 5000) \gset
SELECT expires_at - started_at AS initial_length FROM silo.leases WHERE task_id = :'t';
SELECT silo.heartbeat(:'t', 'w1', 60000) AS cancelled;
SELECT expires_at > silo.now() + interval '50 seconds' AND expires_at <= silo.now() + interval '60 seconds'
	   AS extended_to_60s
  FROM silo.leases WHERE task_id = :'t';
-- the default lease_ms is 10 s
SELECT silo.heartbeat(:'t', 'w1') AS cancelled;
SELECT expires_at > silo.now() + interval '5 seconds' AND expires_at <= silo.now() + interval '10 seconds'
	   AS extended_to_10s
  FROM silo.leases WHERE task_id = :'t';
-- after a cancel it returns true; the job stays Running, with cancelled_at set
SELECT silo.cancel('beating');
SELECT silo.heartbeat(:'t', 'w1') AS cancelled;
SELECT status, cancelled_at IS NOT NULL AS cancelled_at_set FROM silo.jobs WHERE id = 'beating';
-- errors: another worker's lease, an unknown task, arguments
SELECT test_helpers.sqlstate_of(format('SELECT silo.heartbeat(%L, %L)', :'t', 'w2')) AS wrong_worker;
SELECT test_helpers.sqlstate_of(format('SELECT silo.heartbeat(%L, %L)', gen_random_uuid(), 'w1')) AS unknown_task;
SELECT arg, test_helpers.sqlstate_of(format(sql, :'t')) AS result
  FROM (VALUES ('task_id NULL', 'SELECT silo.heartbeat(NULL, ''w1'')'),
			   ('worker_id NULL', 'SELECT silo.heartbeat(%L, NULL)'),
			   ('lease_ms NULL', 'SELECT silo.heartbeat(%L, ''w1'', NULL)'),
			   ('lease_ms 99', 'SELECT silo.heartbeat(%L, ''w1'', 99)'),
			   ('lease_ms 3600001', 'SELECT silo.heartbeat(%L, ''w1'', 3600001)')) v(arg, sql);
-- once the attempt is reported, the lease is gone
SELECT silo.ack_cancel(:'t', 'w1');
SELECT test_helpers.sqlstate_of(format('SELECT silo.heartbeat(%L, %L)', :'t', 'w1')) AS after_report;

--
-- lease checks on every report
--

-- a second report raises "lease not found" (SL001) and changes nothing:
-- complete -> complete, complete -> fail, fail -> fail, fail -> complete
SELECT silo.enqueue('od', id => id, retry_policy => '{"retryCount": 1, "initialIntervalMs": 600000}')
  FROM unnest(ARRAY['complete-complete', 'complete-fail', 'fail-fail', 'fail-complete']) id;
CREATE TEMP TABLE twice AS
SELECT job_id, task_id, split_part(job_id, '-', 1) AS first, split_part(job_id, '-', 2) AS second
  FROM silo.lease('w1', 'od', 10);
SELECT job_id, CASE first WHEN 'complete' THEN silo.complete(task_id, 'w1', '{"ok": true}')
						  ELSE silo.fail(task_id, 'w1', 'E1') END IS NOT NULL AS reported
  FROM twice ORDER BY job_id;
CREATE TEMP TABLE state_after_first AS
SELECT j.id, j.status, j.current_attempt, j.next_attempt_at,
	   (SELECT count(*) FROM silo.attempts a WHERE a.job_id = j.id) AS attempts,
	   (SELECT count(*) FROM silo.tasks t WHERE t.job_id = j.id) AS tasks
  FROM silo.jobs j WHERE j.task_group = 'od';
SELECT id, status, current_attempt, attempts, tasks FROM state_after_first ORDER BY id;
SELECT job_id,
	   test_helpers.sqlstate_of(CASE second
			WHEN 'complete' THEN format('SELECT silo.complete(%L, %L)', task_id, 'w1')
			ELSE format('SELECT silo.fail(%L, %L, %L)', task_id, 'w1', 'E2') END) AS second_report
  FROM twice ORDER BY job_id;
-- nothing changed
SELECT count(*) AS changed_jobs
  FROM (SELECT j.id, j.status, j.current_attempt, j.next_attempt_at,
			   (SELECT count(*) FROM silo.attempts a WHERE a.job_id = j.id) AS attempts,
			   (SELECT count(*) FROM silo.tasks t WHERE t.job_id = j.id) AS tasks
		  FROM silo.jobs j WHERE j.task_group = 'od'
		EXCEPT SELECT * FROM state_after_first) changed;
SELECT count(*) AS unchanged_jobs FROM state_after_first s JOIN silo.jobs j USING (id)
 WHERE j.status = s.status;
-- ack_cancel and release after a report: the same
SELECT job_id,
	   test_helpers.sqlstate_of(format('SELECT silo.ack_cancel(%L, %L)', task_id, 'w1')) AS ack_cancel,
	   test_helpers.sqlstate_of(format('SELECT silo.release(%L, %L)', task_id, 'w1')) AS release
  FROM twice ORDER BY job_id;

-- every report checks the worker: another worker's report raises "lease
-- owner mismatch" (SL002) and the lease stays
SELECT silo.enqueue('ow', id => 'owned');
SELECT task_id AS t FROM silo.lease('w1', 'ow') \gset
SELECT report, test_helpers.sqlstate_of(format(sql, :'t', 'w-other')) AS result
  FROM (VALUES ('complete', 'SELECT silo.complete(%L, %L)'),
			   ('fail', 'SELECT silo.fail(%L, %L, ''E'')'),
			   ('ack_cancel', 'SELECT silo.ack_cancel(%L, %L)'),
			   ('release', 'SELECT silo.release(%L, %L)'),
			   ('heartbeat', 'SELECT silo.heartbeat(%L, %L)')) v(report, sql);
SELECT worker_id, expired FROM silo.leases WHERE task_id = :'t';
SELECT status FROM silo.jobs WHERE id = 'owned';
SELECT count(*) AS attempts FROM silo.attempt WHERE job_id = 'owned';
-- the owner can still report
SELECT silo.complete(:'t', 'w1');
SELECT status FROM silo.jobs WHERE id = 'owned';

-- a task that was never leased: "lease not found" for every report
SELECT report, test_helpers.sqlstate_of(format(sql, gen_random_uuid(), 'w1')) AS result
  FROM (VALUES ('complete', 'SELECT silo.complete(%L, %L)'),
			   ('fail', 'SELECT silo.fail(%L, %L, ''E'')'),
			   ('ack_cancel', 'SELECT silo.ack_cancel(%L, %L)'),
			   ('release', 'SELECT silo.release(%L, %L)')) v(report, sql);

-- NULL arguments raise 22004
SELECT arg, test_helpers.sqlstate_of(format(sql, gen_random_uuid())) AS result
  FROM (VALUES ('complete task_id', 'SELECT silo.complete(NULL, ''w1'')'),
			   ('complete worker_id', 'SELECT silo.complete(%L, NULL)'),
			   ('fail task_id', 'SELECT silo.fail(NULL, ''w1'', ''E'')'),
			   ('fail worker_id', 'SELECT silo.fail(%L, NULL, ''E'')'),
			   ('fail error_code', 'SELECT silo.fail(%L, ''w1'', NULL)'),
			   ('ack_cancel task_id', 'SELECT silo.ack_cancel(NULL, ''w1'')'),
			   ('ack_cancel worker_id', 'SELECT silo.ack_cancel(%L, NULL)'),
			   ('release task_id', 'SELECT silo.release(NULL, ''w1'')'),
			   ('release worker_id', 'SELECT silo.release(%L, NULL)')) v(arg, sql);

--
-- retry policy and backoff
--

-- delay before retry k = min(initialIntervalMs * backoffFactor^(k-1),
-- maxIntervalMs): here 10 s, 15 s, 22.5 s, then 25 s (capped, not 33.75 s);
-- retryCount 4 allows 5 attempts. The delay is next_attempt_at minus the
-- failed attempt's finished_at.
SELECT silo.enqueue('ob', id => 'backoff',
					retry_policy => '{"retryCount": 4, "initialIntervalMs": 10000, "backoffFactor": 1.5, "maxIntervalMs": 25000}');
CREATE VIEW pg_temp.backoff AS
SELECT j.status, j.current_attempt, a.attempt AS failed_attempt,
	   round(extract(epoch FROM j.next_attempt_at - a.finished_at) * 1000) AS delay_ms
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.id = 'backoff' AND a.attempt = (SELECT max(attempt) FROM silo.attempt WHERE job_id = 'backoff');
-- attempt 1
SELECT task_id AS t1, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'ob') \gset
SELECT :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt;
SELECT silo.fail(:'t1', 'w1', 'E1', '{"try": 1}');
SELECT * FROM pg_temp.backoff;
-- not leasable during the backoff
SELECT count(*) AS leased FROM silo.lease('w1', 'ob');
-- attempt 2: a new task id
SET silo.clock_offset_ms = 11000;
SELECT task_id AS t2, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'ob') \gset
SELECT :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt,
	   :'t2' <> :'t1' AS new_task_id;
SELECT silo.fail(:'t2', 'w1', 'E2');
SELECT * FROM pg_temp.backoff;
-- attempt 3
SET silo.clock_offset_ms = 27000;
SELECT task_id AS t, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'ob') \gset
SELECT :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt;
SELECT silo.fail(:'t', 'w1', 'E3');
SELECT * FROM pg_temp.backoff;
-- attempt 4: the delay hits maxIntervalMs
SET silo.clock_offset_ms = 50500;
SELECT task_id AS t, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'ob') \gset
SELECT :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt;
SELECT silo.fail(:'t', 'w1', 'E4');
SELECT * FROM pg_temp.backoff;
-- attempt 5 is the last; its failure is final
SET silo.clock_offset_ms = 76500;
SELECT task_id AS t, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'ob') \gset
SELECT :attempt AS attempt, :relative_attempt AS relative_attempt, :'is_last_attempt' AS is_last_attempt;
SELECT silo.fail(:'t', 'w1', 'E5');
SELECT status, current_attempt, next_attempt_at FROM silo.jobs WHERE id = 'backoff';
SELECT attempt, relative_attempt, status, error_code, error_data FROM silo.attempts WHERE job_id = 'backoff' ORDER BY attempt;
SELECT count(DISTINCT task_id) AS distinct_task_ids FROM silo.attempts WHERE job_id = 'backoff';
SELECT test_helpers.job_rows('-', 'backoff');
RESET silo.clock_offset_ms;

-- the first retry waits initialIntervalMs (not initial * factor) with the
-- default factor 2; the second waits twice as long
SELECT silo.enqueue('ob2', id => 'factor-two', retry_policy => '{"retryCount": 2, "initialIntervalMs": 20000}');
SELECT task_id AS t FROM silo.lease('w1', 'ob2') \gset
SELECT silo.fail(:'t', 'w1', 'E');
SELECT j.status, round(extract(epoch FROM j.next_attempt_at - a.finished_at) * 1000) AS delay_ms
  FROM silo.jobs j JOIN silo.attempts a ON a.job_id = j.id AND a.attempt = 1 WHERE j.id = 'factor-two';
SET silo.clock_offset_ms = 21000;
SELECT task_id AS t FROM silo.lease('w1', 'ob2') \gset
SELECT silo.fail(:'t', 'w1', 'E');
SELECT j.status, round(extract(epoch FROM j.next_attempt_at - a.finished_at) * 1000) AS delay_ms
  FROM silo.jobs j JOIN silo.attempts a ON a.job_id = j.id AND a.attempt = 2 WHERE j.id = 'factor-two';
RESET silo.clock_offset_ms;

-- randomizeInterval: the delay is initialIntervalMs * r with r in [1, 2),
-- and still capped by maxIntervalMs
SELECT count(*) AS enqueued FROM (
	SELECT silo.enqueue('orand', id => 'rand-' || i,
						retry_policy => '{"retryCount": 1, "initialIntervalMs": 10000, "randomizeInterval": true}')
	  FROM generate_series(1, 20) i) e;
SELECT count(*) AS enqueued FROM (
	SELECT silo.enqueue('orand', id => 'rand-capped-' || i,
						retry_policy => '{"retryCount": 1, "initialIntervalMs": 10000, "maxIntervalMs": 15000, "randomizeInterval": true}')
	  FROM generate_series(1, 20) i) e;
CREATE TEMP TABLE rand_leases AS SELECT task_id FROM silo.lease('w1', 'orand', 100);
SELECT count(*) AS failed FROM (SELECT silo.fail(task_id, 'w1', 'E') FROM rand_leases) f;
SELECT id LIKE 'rand-capped-%' AS capped, count(*) AS jobs,
	   min(delay_ms) >= 10000 AS at_least_initial,
	   max(delay_ms) < 20000 AS below_twice_initial,
	   max(delay_ms) <= 15000 AS within_cap,
	   count(DISTINCT delay_ms) > 1 AS varies
  FROM (SELECT j.id, extract(epoch FROM j.next_attempt_at - a.finished_at) * 1000 AS delay_ms
		  FROM silo.jobs j JOIN silo.attempts a ON a.job_id = j.id AND a.attempt = 1
		 WHERE j.task_group = 'orand' AND j.status = 'Retrying') d
 GROUP BY 1 ORDER BY 1;

-- initialIntervalMs 0: the retry is due at once
SELECT silo.enqueue('oz', id => 'no-delay', retry_policy => '{"retryCount": 1, "initialIntervalMs": 0}');
SELECT task_id AS t FROM silo.lease('w1', 'oz') \gset
SELECT silo.fail(:'t', 'w1', 'E');
SELECT status, current_attempt FROM silo.jobs WHERE id = 'no-delay';
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease('w1', 'oz');

--
-- reports on cancelled jobs
--

-- a failure report for a cancelled job ends it Cancelled, without a
-- retry, even with retries left
SELECT silo.enqueue('ox', id => 'cancel-then-fail', retry_policy => '{"retryCount": 5, "initialIntervalMs": 0}');
SELECT task_id AS t FROM silo.lease('w1', 'ox') \gset
SELECT silo.cancel('cancel-then-fail');
SELECT silo.fail(:'t', 'w1', 'E', '{"late": true}');
SELECT status FROM silo.jobs WHERE id = 'cancel-then-fail';
SELECT attempt, error_code, error_data FROM silo.attempts WHERE job_id = 'cancel-then-fail';
SELECT count(*) AS tasks FROM silo.tasks WHERE job_id = 'cancel-then-fail';

-- a success report for a cancelled job ends it Succeeded: the work was done
SELECT silo.enqueue('ox', id => 'cancel-then-complete', retry_policy => '{"retryCount": 5}');
SELECT task_id AS t FROM silo.lease('w1', 'ox') \gset
SELECT silo.cancel('cancel-then-complete');
SELECT silo.complete(:'t', 'w1', '"done anyway"');
SELECT status FROM silo.jobs WHERE id = 'cancel-then-complete';
SELECT attempt, status, result FROM silo.attempts WHERE job_id = 'cancel-then-complete';

--
-- release
--

-- release hands the task back due now, in its old place in the queue,
-- with the same attempt number, a new task id, and no attempt row
SELECT silo.enqueue('or', id => 'released', retry_policy => '{"retryCount": 1}'),
	   silo.enqueue('or', id => 'enqueued-after');
SELECT task_id AS t FROM silo.lease('w1', 'or') \gset
SELECT silo.release(:'t', 'w1');
SELECT status, current_attempt FROM silo.jobs WHERE id = 'released';
SELECT count(*) AS attempts FROM silo.attempts WHERE job_id = 'released';
SELECT attempt, relative_attempt, task_id <> :'t' AS new_task_id, is_due FROM silo.tasks WHERE job_id = 'released';
SELECT count(*) AS leases FROM silo.leases WHERE job_id = 'released';
SELECT job_id, attempt, relative_attempt, is_last_attempt, task_id <> :'t' AS new_task_id
  FROM silo.lease('w2', 'or', 10);

-- release of a cancelled job ends it Cancelled
SELECT silo.enqueue('or', id => 'release-cancelled', retry_policy => '{"retryCount": 1}');
SELECT task_id AS t FROM silo.lease('w1', 'or') \gset
SELECT silo.cancel('release-cancelled');
SELECT silo.release(:'t', 'w1');
SELECT status FROM silo.jobs WHERE id = 'release-cancelled';
SELECT count(*) AS tasks FROM silo.tasks WHERE job_id = 'release-cancelled';
SELECT count(*) AS leases FROM silo.leases WHERE job_id = 'release-cancelled';

--
-- an expired lease is lost even before the sweep
--
SELECT silo.enqueue('oe', id => 'expired-' || r, retry_policy => '{"retryCount": 1}')
  FROM unnest(ARRAY['complete', 'fail', 'ack_cancel', 'release', 'heartbeat']) r;
CREATE TEMP TABLE expiring AS SELECT job_id, task_id FROM silo.lease('w1', 'oe', 10, 5000);
SET silo.clock_offset_ms = 6000;
SELECT job_id, test_helpers.sqlstate_of(format(
		CASE job_id
			WHEN 'expired-complete' THEN 'SELECT silo.complete(%L, %L)'
			WHEN 'expired-fail' THEN 'SELECT silo.fail(%L, %L, ''E'')'
			WHEN 'expired-ack_cancel' THEN 'SELECT silo.ack_cancel(%L, %L)'
			WHEN 'expired-release' THEN 'SELECT silo.release(%L, %L)'
			ELSE 'SELECT silo.heartbeat(%L, %L)' END, task_id, 'w1')) AS result
  FROM expiring ORDER BY job_id;
-- the leases are still there, expired, waiting for the sweep; no attempt
-- was written
SELECT job_id, expired FROM silo.leases WHERE task_group = 'oe' ORDER BY job_id;
SELECT count(*) AS attempts FROM silo.attempt WHERE job_id LIKE 'expired-%';
RESET silo.clock_offset_ms;

-- reports lock the job row and then read the cancellation flag; only READ
-- COMMITTED reads a cancel that committed meanwhile, so other levels are refused
SELECT silo.enqueue('rc', id => 'rc-1');
SELECT task_id AS rc_task FROM silo.lease('w1', 'rc') \gset
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT silo.complete(:'rc_task', 'w1');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT silo.fail(:'rc_task', 'w1', 'E');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM silo.run_maintenance();
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- the lease is untouched, and a READ COMMITTED report still works
SELECT silo.complete(:'rc_task', 'w1');
SELECT status FROM silo.jobs WHERE id = 'rc-1';

-- 0x03 agrees with every status row the file left behind, and the views
-- that read it with silo.jobs
SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
