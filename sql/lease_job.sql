--
-- lease_job: leased tasks carry their job's limits and retry policy (as
-- silo.jobs does), and silo.lease_job leases one named job's due task --
-- its states, its errors, and that it honours what silo.lease honours
-- (limits, tenancy, the transaction's requirements, lease marks).
--
SELECT test_helpers.reset();

--
-- limits and retry_policy on leased tasks and in silo.jobs
--

-- a job with a policy and a limit, one with neither
SELECT silo.enqueue('lj-cols', id => 'full',
					retry_policy => '{"retryCount": 3, "initialIntervalMs": 250, "backoffFactor": 1.5}',
					limits => '[{"type": "concurrency", "key": "lj-k", "maxConcurrency": 2}]');
SELECT silo.enqueue('lj-cols', id => 'bare', priority => 60);
-- an empty policy is a policy (no retries), not "none"
SELECT silo.enqueue('lj-cols', id => 'empty-policy', priority => 70, retry_policy => '{}');
SELECT job_id, limits, retry_policy, is_last_attempt FROM silo.lease('w1', 'lj-cols', 3);
-- silo.jobs says the same
SELECT id, limits, retry_policy FROM silo.jobs WHERE task_group = 'lj-cols' ORDER BY id;
-- the values read back are enqueue's own shapes: a copy enqueued with
-- them has the same policy and limits
SELECT silo.enqueue('lj-cols2', id => 'copy', retry_policy => j.retry_policy, limits => j.limits)
  FROM silo.jobs j WHERE j.id = 'full';
SELECT a.limits = b.limits AS same_limits, a.retry_policy = b.retry_policy AS same_policy
  FROM silo.jobs a, silo.jobs b WHERE a.id = 'full' AND b.id = 'copy';
-- the type gained two columns at its end
SELECT attnum, attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'silo.leased_task'::regclass AND attnum > 14 ORDER BY attnum;

--
-- lease_job: the lease of one named job
--
SELECT test_helpers.reset();

-- a Waiting job is leased by name, whatever its place in its group's
-- order: one row, as silo.lease would have returned it
SELECT silo.enqueue('lj', id => 'first', priority => 10),
	   silo.enqueue('lj', id => 'second', priority => 90, metadata => '{"k": "v"}',
					 payload => '{"n": 2}', retry_policy => '{"retryCount": 1}');
SELECT kind, tenant, job_id, attempt, relative_attempt, is_last_attempt, priority, task_group,
	   payload, metadata, lease_expires_at > silo.now() + interval '50 seconds' AS long_lease,
	   queue_key, current_max_concurrency, refresh_metadata, limits, retry_policy
  FROM silo.lease_job('w1', 'second', lease_ms => 60000);
SELECT id, status, current_attempt FROM silo.jobs WHERE task_group = 'lj' ORDER BY id;
SELECT worker_id, owner_role = current_user AS owner_is_caller FROM silo.task_lease
 WHERE job_id = 'second';
-- the lease is an ordinary one: heartbeat and complete work on it
SELECT silo.heartbeat(task_id, 'w1') AS cancelled, silo.complete(task_id, 'w1', '{"ok": true}')
  FROM silo.task_lease WHERE job_id = 'second';
SELECT status FROM silo.jobs WHERE id = 'second';
-- silo.lease still hands out the rest of the group
SELECT job_id FROM silo.lease('w1', 'lj', 5);

-- a job of another tenant is named with its tenant
SELECT silo.enqueue('lj', tenant => 'acme', id => 'shared');
SELECT silo.enqueue('lj', id => 'shared');
SELECT tenant, job_id FROM silo.lease_job('w1', 'shared', 'acme');
SELECT tenant, job_id FROM silo.lease_job('w1', 'shared');

-- a retry in backoff is not due; once expedited it is leasable, with its
-- attempt numbers
SELECT silo.enqueue('lj-r', id => 'retry', retry_policy => '{"retryCount": 2, "initialIntervalMs": 600000}');
SELECT silo.fail(task_id, 'w1', 'E1') FROM silo.lease_job('w1', 'retry');
SELECT status FROM silo.jobs WHERE id = 'retry';
SELECT test_helpers.sqlstate_of($$SELECT * FROM silo.lease_job('w1', 'retry')$$) AS retrying;
SELECT silo.expedite('retry');
SELECT job_id, attempt, relative_attempt, is_last_attempt FROM silo.lease_job('w1', 'retry');

-- a restarted Cancelled job is leasable again
SELECT silo.enqueue('lj-rs', id => 'restarted');
SELECT silo.cancel('restarted');
SELECT silo.restart('restarted');
SELECT job_id, attempt FROM silo.lease_job('w1', 'restarted');

--
-- refusals: SL012 with the reason, SL003 for no such job; each writes
-- nothing
--
SELECT test_helpers.reset();
SELECT silo.enqueue('lj-e', id => 'e-scheduled', start_at => silo.now() + interval '1 hour'),
	   silo.enqueue('lj-e', id => 'e-cancelled'),
	   silo.enqueue('lj-e2', id => 'e-running'),
	   silo.enqueue('lj-e3', id => 'e-running-cancelled'),
	   silo.enqueue('lj-e4', id => 'e-succeeded'),
	   silo.enqueue('lj-e5', id => 'e-failed');
SELECT silo.cancel('e-cancelled');
SELECT count(*) AS held FROM silo.lease('w1', 'lj-e2');
SELECT count(*) AS held FROM silo.lease('w1', 'lj-e3');
SELECT silo.cancel('e-running-cancelled');
SELECT silo.complete(task_id, 'w1') FROM silo.lease('w1', 'lj-e4');
SELECT silo.fail(task_id, 'w1', 'E') FROM silo.lease('w1', 'lj-e5');
-- a job waiting on a concurrency limit (the slot is held) is refused:
-- the limit is not bypassed; the holder is leased and keeps its slot
SELECT silo.enqueue('lj-l', id => 'e-holder', limits => '[{"type": "concurrency", "key": "lj-one", "maxConcurrency": 1}]'),
	   silo.enqueue('lj-l', id => 'e-limited', limits => '[{"type": "concurrency", "key": "lj-one", "maxConcurrency": 1}]');
SELECT job_id, limits FROM silo.lease_job('w1', 'e-holder');
CREATE TEMP TABLE before AS SELECT * FROM test_helpers.table_rows();
CREATE TEMP TABLE before_jobs AS SELECT id, status, current_attempt, next_attempt_at FROM silo.jobs;
SELECT id, status, test_helpers.sqlstate_of(format('SELECT * FROM silo.lease_job(%L, %L)', 'w2', id)) AS lease_job
  FROM silo.jobs ORDER BY id;
SELECT * FROM silo.lease_job('w2', 'no-such-job');
SELECT * FROM silo.lease_job('w2', 'e-scheduled', 'other-tenant');
-- details and hints
SELECT * FROM silo.lease_job('w2', 'e-scheduled');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM silo.lease_job('w2', 'e-limited');
SELECT * FROM silo.lease_job('w2', 'e-cancelled');
SELECT * FROM silo.lease_job('w2', 'e-failed');
SELECT * FROM silo.lease_job('w2', 'e-running');
-- nothing was written
SELECT b.table_name, b.n, a.n FROM before b JOIN test_helpers.table_rows() a USING (table_name)
 WHERE a.n <> b.n;
SELECT count(*) AS jobs_changed FROM (SELECT id, status, current_attempt, next_attempt_at FROM silo.jobs
									  EXCEPT SELECT * FROM before_jobs) c;
-- once the holder completes, the limited job is granted and leasable
SELECT silo.complete(task_id, 'w1') FROM silo.task_lease WHERE job_id = 'e-holder';
SELECT job_id FROM silo.lease_job('w2', 'e-limited');
-- an expedited Scheduled job is leasable
SELECT silo.expedite('e-scheduled');
SELECT job_id FROM silo.lease_job('w2', 'e-scheduled');

-- argument errors
SELECT * FROM silo.lease_job(NULL, 'x');
SELECT * FROM silo.lease_job('w', NULL);
SELECT * FROM silo.lease_job('w', 'x', NULL);
SELECT * FROM silo.lease_job('w', 'x', lease_ms => 0);
SELECT * FROM silo.lease_job('', 'x');

-- the transaction: READ COMMITTED (25000), read-write (25006)
SELECT silo.enqueue('lj-tx', id => 'tx');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM silo.lease_job('w', 'tx');
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM silo.lease_job('w', 'tx');
ROLLBACK;

-- a rolled-back lease_job puts the task back where silo.lease finds it,
-- also after a lease in the same transaction took the task behind it
SELECT silo.enqueue('lj-m', id => 'm1', priority => 1), silo.enqueue('lj-m', id => 'm2', priority => 2);
BEGIN;
SELECT job_id FROM silo.lease_job('w', 'm1');
SELECT job_id FROM silo.lease('w', 'lj-m');
ROLLBACK;
SELECT job_id FROM silo.lease('w', 'lj-m', 5);

--
-- tenancy: a bound role leases by name only in its tenants; the lease
-- is its own (owner_role)
--
CREATE ROLE regress_lj_worker IN ROLE silo_worker;
SELECT silo.grant_tenant('regress_lj_worker', 'lj-t1');
SELECT silo.enqueue('lj-t', tenant => 'lj-t1', id => 'mine'),
	   silo.enqueue('lj-t', tenant => 'lj-t2', id => 'theirs');
SET ROLE regress_lj_worker;
SELECT tenant, job_id FROM silo.lease_job('wt', 'mine', 'lj-t1');
SELECT * FROM silo.lease_job('wt', 'theirs', 'lj-t2');
RESET ROLE;
SELECT job_id, owner_role FROM silo.task_lease WHERE job_id IN ('mine', 'theirs');
-- silo_worker and silo_admin may call it, as silo.lease; others may not
SELECT r AS role, has_function_privilege(r, 'silo.lease_job(text, text, text, integer)', 'EXECUTE')
  FROM unnest(ARRAY['silo_worker', 'silo_admin', 'silo_producer', 'public']) r;
SELECT silo.revoke_tenant('regress_lj_worker', 'lj-t1');
DROP ROLE regress_lj_worker;

--
-- expedite of a Cancelled job says so (as Silo does)
--
SELECT silo.enqueue('lj-x', id => 'x-cancelled', start_at => silo.now() + interval '1 hour');
SELECT silo.cancel('x-cancelled');
SELECT silo.expedite('x-cancelled');
\echo :LAST_ERROR_SQLSTATE

SELECT test_helpers.status_index_mismatches() AS status_index_mismatches;
