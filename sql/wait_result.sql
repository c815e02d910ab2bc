--
-- wait_result: the procedure silo.wait_result -- its arguments, and the
-- calls that return or fail at once: a job that has ended, a missing
-- job, another tenant's job, a transaction block, REPEATABLE READ, the
-- timeout; and a transaction that ended a job cannot be prepared.  A
-- waiter asleep and woken by the commit that ends its job is the TAP
-- test 020_wait_result.
--
SELECT test_helpers.reset();

-- jobs that have ended, one of each kind, and one still waiting
SELECT silo.enqueue('wr', '{}', id => 'done', retry_policy => NULL);
SELECT silo.enqueue('wr', '{}', id => 'failed');
SELECT silo.enqueue('wr', '{}', id => 'big');
SELECT silo.enqueue('wr', '{}', id => 'acked');
SELECT silo.enqueue('wr_later', '{}', id => 'cancelled', start_at => now() + interval '1 hour');
SELECT silo.enqueue('wr_later', '{}', id => 'pending', start_at => now() + interval '1 hour');
SELECT silo.enqueue('wr', '{}', tenant => 't2', id => 'other');
SELECT string_agg(job_id, ' ' ORDER BY job_id) AS leased FROM silo.lease('w', 'wr', 10) \gset
\echo :leased
SELECT silo.complete(task_id, 'w', '{"sent": true}') FROM silo.leases WHERE job_id = 'done';
SELECT silo.fail(task_id, 'w', 'SMTP_DOWN', '{"try": 1}') FROM silo.leases WHERE job_id = 'failed';
SELECT silo.complete(task_id, 'w',
		jsonb_build_object('blob', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g)))
  FROM silo.leases WHERE job_id = 'big';
SELECT silo.cancel('acked');
SELECT silo.ack_cancel(task_id, 'w') FROM silo.leases WHERE job_id = 'acked';
SELECT silo.complete(task_id, 'w') FROM silo.leases WHERE job_id = 'other';
SELECT silo.cancel('cancelled');

-- the first look of this session prepares its statement: an operator
-- planted in the caller's search_path never runs in it (the look pins
-- search_path as a SECURITY DEFINER function's SET clause would)
CREATE SCHEMA regress_wr_plant;
CREATE FUNCTION regress_wr_plant.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'planted operator ran as %', current_user; RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE OPERATOR regress_wr_plant.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_wr_plant.text_eq);
SET search_path = regress_wr_plant, pg_catalog;
SELECT 'x'::text = 'x'::text AS planted_reached;	-- the control: it runs here
CALL silo.wait_result('failed', '-', '1 s', NULL, NULL, NULL, NULL, NULL) \gset w_
RESET search_path;
DROP SCHEMA regress_wr_plant CASCADE;
SELECT :'w_status' AS status, :'w_error_code' AS error_code;

-- a job that has ended returns at once, with the row of silo.job_result;
-- show() prints it with finished_at compared to job_result's
CREATE PROCEDURE pg_temp.show(id text, tenant text DEFAULT '-')
LANGUAGE plpgsql AS $$
DECLARE
	st text;
	res jsonb;
	ec text;
	ed jsonb;
	fa timestamptz;
BEGIN
	CALL silo.wait_result(id, tenant, '1 s', st, res, ec, ed, fa);
	RAISE NOTICE 'status=% result=% error_code=% error_data=% same_as_job_result=%',
		st, CASE WHEN octet_length(res::text) > 100 THEN octet_length(res::text) || ' bytes'
			ELSE res::text END, ec, ed,
		(SELECT (r.status, r.result, r.error_code, r.error_data, r.finished_at)
				IS NOT DISTINCT FROM (st, res, ec, ed, fa)
		   FROM silo.job_result(id, tenant) r);
END $$;
CALL pg_temp.show('done');
CALL pg_temp.show('failed');
CALL pg_temp.show('big');	-- a result stored out of line, returned whole
CALL pg_temp.show('acked');
CALL pg_temp.show('cancelled');	-- cancelled while it waited: no attempt ended it
CALL pg_temp.show('other', 't2');
-- the defaults: tenant '-', timeout 30 s; the INOUT columns' values are ignored
CALL silo.wait_result('done') \gset d_
CALL silo.wait_result('done', status => 'ignored') \gset e_
SELECT :'d_status' AS status, :'d_result' AS result, :'e_status' AS status_passed_ignored;

-- a missing job: SL003 at once
CALL silo.wait_result('no-such-job');
\echo :LAST_ERROR_SQLSTATE
CALL silo.wait_result('done', 't2');
\echo :LAST_ERROR_SQLSTATE

-- the timeout: SL011, the job untouched; a timeout below a millisecond
-- waits a millisecond
CALL silo.wait_result('pending', timeout => '50 ms');
\echo :LAST_ERROR_SQLSTATE
CALL silo.wait_result('pending', timeout => '1 microsecond');
\echo :LAST_ERROR_SQLSTATE
SELECT status FROM silo.jobs WHERE id = 'pending';

-- it commits while it waits: not inside a transaction block (25001) ...
BEGIN;
CALL silo.wait_result('done');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- ... nor from a function, which cannot commit
CREATE FUNCTION pg_temp.wait_in_function() RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; res jsonb; ec text; ed jsonb; fa timestamptz;
BEGIN CALL silo.wait_result('done', '-', '1 s', st, res, ec, ed, fa); RETURN st; END $$;
SELECT test_helpers.sqlstate_of('SELECT pg_temp.wait_in_function()') AS from_a_function;
-- ... nor inside an exception block, a subtransaction that cannot commit
-- (even for a job that has ended: the refusal does not depend on the job)
DO $$
DECLARE st text; res jsonb; ec text; ed jsonb; fa timestamptz;
BEGIN
	BEGIN
		CALL silo.wait_result('done', '-', '1 s', st, res, ec, ed, fa);
	EXCEPTION WHEN OTHERS THEN
		RAISE NOTICE 'in an exception block: %', SQLSTATE;
	END;
END $$;
-- a DO block without one may commit: it waits, and returns
DO $$
DECLARE st text; res jsonb; ec text; ed jsonb; fa timestamptz;
BEGIN
	CALL silo.wait_result('done', '-', '1 s', st, res, ec, ed, fa);
	RAISE NOTICE 'in a DO block: %', st;
END $$;
-- and only in READ COMMITTED (25000), which sees the commit that ends the job
SET default_transaction_isolation = 'repeatable read';
CALL silo.wait_result('done');
\echo :LAST_ERROR_SQLSTATE
SET default_transaction_isolation = 'serializable';
CALL silo.wait_result('done');
\echo :LAST_ERROR_SQLSTATE
RESET default_transaction_isolation;

-- arguments: 22004 for a missing one, 22023 for a bad one
CALL silo.wait_result(NULL);
CALL silo.wait_result('done', NULL);
CALL silo.wait_result('done', '-', NULL);
CALL silo.wait_result('');
CALL silo.wait_result(repeat('j', 129));
CALL silo.wait_result('done', repeat('t', 65));
CALL silo.wait_result('done', timeout => '0');
CALL silo.wait_result('done', timeout => '-1 s');
CALL silo.wait_result('done', timeout => '1 day 1 second');
CALL silo.wait_result('done', timeout => '1 mon');
CALL silo.wait_result('done', timeout => '1 day') \gset f_
SELECT :'f_status' AS a_day_is_allowed;

-- tenants: a role bound to t1 waits on t1's jobs; another tenant's job is
-- refused (42501) before anything is read, whether it exists or not
CREATE ROLE regress_wr_t1 IN ROLE silo_producer;
SELECT silo.grant_tenant('regress_wr_t1', 't1') AS bound;
SELECT silo.enqueue('wr', '{}', tenant => 't1', id => 'mine');
SELECT silo.cancel('mine', 't1');
SET ROLE regress_wr_t1;
CALL silo.wait_result('mine', 't1') \gset m_
SELECT :'m_status' AS own_tenant;
CALL silo.wait_result('other', 't2');
\echo :LAST_ERROR_SQLSTATE
CALL silo.wait_result('no-such-job', 't2');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- a worker may not call it (it is silo_producer's and silo_admin's)
CREATE ROLE regress_wr_worker IN ROLE silo_worker;
SET ROLE regress_wr_worker;
CALL silo.wait_result('done');
RESET ROLE;
DROP ROLE regress_wr_worker;
SELECT silo.revoke_tenant('regress_wr_t1', 't1') AS unbound;
DROP ROLE regress_wr_t1;

-- a transaction that ended a job cannot be prepared: its waiters are
-- woken by the session that commits, and COMMIT PREPARED runs in
-- another; nothing is prepared, the job is still running
SELECT silo.enqueue('wr', '{}', id => 'two-phase');
SELECT task_id AS two_phase_task FROM silo.lease('w', 'wr', 1) \gset
BEGIN;
SELECT silo.complete(:'two_phase_task', 'w');
PREPARE TRANSACTION 'silo_wait_result';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared FROM pg_prepared_xacts;
SELECT status FROM silo.jobs WHERE id = 'two-phase';
-- a rolled-back savepoint takes the job's end with it: nothing to refuse
BEGIN;
SAVEPOINT s;
SELECT silo.complete(:'two_phase_task', 'w');
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'silo_wait_result';
SELECT gid FROM pg_prepared_xacts;
ROLLBACK PREPARED 'silo_wait_result';
SELECT status FROM silo.jobs WHERE id = 'two-phase';
