--
-- wait_any: the procedure silo.wait_any -- its arguments, and the calls
-- that return at once: jobs that have ended or are gone, the timeout with
-- none, another tenant, a transaction block, REPEATABLE READ.  Sessions
-- asleep and woken by the commits that end their jobs, and the pool's
-- limit across sessions, are the TAP test 025_wait_any.
-- (test/silo.conf sets silo.max_wait_any_jobs = 64 for this test.)
--
SELECT test_helpers.reset();

SELECT silo.enqueue('wa', '{}', id => 'a-done');
SELECT silo.enqueue('wa', '{}', id => 'a-failed', retry_policy => NULL);
SELECT silo.enqueue('wa_later', '{}', id => 'a-cancelled', start_at => now() + interval '1 hour');
SELECT silo.enqueue('wa_later', '{}', id => 'p1', start_at => now() + interval '1 hour');
SELECT silo.enqueue('wa_later', '{}', id => 'p2', start_at => now() + interval '1 hour');
SELECT silo.enqueue('wa', '{}', tenant => 't2', id => 'other');
SELECT count(*) AS leased FROM silo.lease('w', 'wa', 10);
SELECT silo.complete(task_id, 'w') FROM silo.leases WHERE job_id = 'a-done';
SELECT silo.fail(task_id, 'w', 'BAD') FROM silo.leases WHERE job_id = 'a-failed';
SELECT silo.cancel('a-cancelled');
SELECT silo.cancel('other', 't2');

-- the looks pin search_path: an operator planted in the caller's path
-- never runs in them
CREATE SCHEMA regress_wa_plant;
CREATE FUNCTION regress_wa_plant.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'planted operator ran as %', current_user; RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE OPERATOR regress_wa_plant.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_wa_plant.text_eq);
SET search_path = regress_wa_plant, pg_catalog;
SELECT 'x'::text = 'x'::text AS planted_reached;	-- the control: it runs here
CALL silo.wait_any(ARRAY['p1', 'a-done']);
RESET search_path;
DROP SCHEMA regress_wa_plant CASCADE;

-- every job found ended (whatever the end) or gone, in the order given;
-- the pending ones are left out
CALL silo.wait_any(ARRAY['p1', 'a-failed', 'no-such-job', 'a-cancelled', 'p2', 'a-done']);
-- a job given twice counts once
CALL silo.wait_any(ARRAY['a-done', 'p1', 'a-done']);
-- the INOUT parameter's value is ignored
CALL silo.wait_any(ARRAY['a-done'], ended => ARRAY['x']);

-- none ends within the timeout: an empty array, not an error, the jobs
-- untouched; a timeout below a millisecond waits a millisecond
CALL silo.wait_any(ARRAY['p1', 'p2'], timeout => '50 ms');
CALL silo.wait_any(ARRAY['p1'], timeout => '1 microsecond');
SELECT id, status FROM silo.jobs WHERE id IN ('p1', 'p2') ORDER BY id;

-- the tenant: one per call; another tenant's job is gone from this one's view
CALL silo.wait_any(ARRAY['other'], 't2');
CALL silo.wait_any(ARRAY['other', 'p1']);

-- it commits while it waits: not inside a transaction block (25001) ...
BEGIN;
CALL silo.wait_any(ARRAY['a-done']);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- ... nor inside an exception block, even for jobs that have ended
DO $$
DECLARE e text[];
BEGIN
	BEGIN
		CALL silo.wait_any(ARRAY['a-done'], '-', '1 s', e);
	EXCEPTION WHEN OTHERS THEN
		RAISE NOTICE 'in an exception block: %', SQLSTATE;
	END;
END $$;
-- a DO block without one may commit
DO $$
DECLARE e text[];
BEGIN
	CALL silo.wait_any(ARRAY['p1', 'a-done'], '-', '1 s', e);
	RAISE NOTICE 'in a DO block: %', e;
END $$;
-- and only in READ COMMITTED (25000)
SET default_transaction_isolation = 'repeatable read';
CALL silo.wait_any(ARRAY['a-done']);
\echo :LAST_ERROR_SQLSTATE
RESET default_transaction_isolation;

-- arguments: 22004 for a missing one or a null id, 22023 for a bad one
CALL silo.wait_any(NULL);
CALL silo.wait_any(ARRAY['a-done', NULL]);
CALL silo.wait_any(ARRAY['a-done'], NULL);
CALL silo.wait_any(ARRAY['a-done'], '-', NULL);
CALL silo.wait_any('{}');
CALL silo.wait_any(ARRAY[['a-done'], ['p1']]);
CALL silo.wait_any(ARRAY['a-done', '']);
CALL silo.wait_any(ARRAY[repeat('j', 129)]);
CALL silo.wait_any(ARRAY['a-done'], repeat('t', 65));
CALL silo.wait_any(ARRAY['a-done'], timeout => '0');
CALL silo.wait_any(ARRAY['a-done'], timeout => '1 day 1 second');
-- at most silo.max_wait_any_jobs distinct ids in one call (repeats count once)
SHOW silo.max_wait_any_jobs;
SELECT array_agg('gone-' || g)::text AS ids65 FROM generate_series(1, 65) g \gset
CALL silo.wait_any(:'ids65');
SELECT array_agg('gone-' || g)::text AS ids64 FROM generate_series(1, 64) g \gset
CALL silo.wait_any(:'ids64') \gset g_
SELECT cardinality(:'g_ended'::text[]) AS sixty_four_gone;
CALL silo.wait_any(array_fill('a-done'::text, ARRAY[1000]));

-- tenants: a role bound to t1 waits on t1's jobs only (42501 otherwise);
-- a worker may not call it
CREATE ROLE regress_wa_t1 IN ROLE silo_producer;
SELECT silo.grant_tenant('regress_wa_t1', 't1') AS bound;
SELECT silo.enqueue('wa', '{}', tenant => 't1', id => 'mine');
SELECT silo.cancel('mine', 't1');
SET ROLE regress_wa_t1;
CALL silo.wait_any(ARRAY['mine'], 't1');
CALL silo.wait_any(ARRAY['other'], 't2');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
CREATE ROLE regress_wa_worker IN ROLE silo_worker;
SET ROLE regress_wa_worker;
CALL silo.wait_any(ARRAY['a-done']);
RESET ROLE;
DROP ROLE regress_wa_worker;
SELECT silo.revoke_tenant('regress_wa_t1', 't1') AS unbound;
DROP ROLE regress_wa_t1;
