--
-- privileges: the roles silo_producer, silo_worker and silo_admin;
-- nothing for PUBLIC; SECURITY DEFINER functions with a pinned
-- search_path.
--
SELECT test_helpers.reset();

-- the three roles exist; none can log in or is a superuser
SELECT rolname, rolcanlogin, rolsuper, rolinherit FROM pg_roles
 WHERE rolname IN ('silo_producer', 'silo_worker', 'silo_admin') ORDER BY rolname;

-- PUBLIC can execute no silo function (a NULL proacl would mean the
-- default, EXECUTE for PUBLIC)
SELECT p.oid::regprocedure AS executable_by_public
  FROM pg_proc p
 WHERE p.pronamespace = 'silo'::regnamespace
   AND (p.proacl IS NULL
		OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'));

-- PUBLIC has no privilege on any silo table, view or sequence, nor on the
-- schema
SELECT c.oid::regclass AS readable_by_public, a.privilege_type
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relnamespace = 'silo'::regnamespace AND a.grantee = 0;
SELECT has_schema_privilege('public', 'silo', 'USAGE') AS public_schema_usage;

-- what each role may execute
SELECT p.proname,
	   has_function_privilege('silo_producer', p.oid, 'EXECUTE') AS producer,
	   has_function_privilege('silo_worker', p.oid, 'EXECUTE') AS worker,
	   has_function_privilege('silo_admin', p.oid, 'EXECUTE') AS admin
  FROM pg_proc p WHERE p.pronamespace = 'silo'::regnamespace ORDER BY p.proname;

-- what each role may read
SELECT c.relname, c.relkind,
	   has_table_privilege('silo_producer', c.oid, 'SELECT') AS producer,
	   has_table_privilege('silo_worker', c.oid, 'SELECT') AS worker,
	   has_table_privilege('silo_admin', c.oid, 'SELECT') AS admin
  FROM pg_class c WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind IN ('r', 'v')
 ORDER BY c.relkind, c.relname;

-- no role may write a table directly: every change goes through the API
SELECT c.relname
  FROM pg_class c, unnest(ARRAY['silo_producer', 'silo_worker', 'silo_admin']) r
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
   AND has_table_privilege(r, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE');

-- every SECURITY DEFINER function pins its search_path
SELECT proname, prosecdef, proconfig FROM pg_proc
 WHERE pronamespace = 'silo'::regnamespace ORDER BY proname;
SELECT count(*) AS definer_functions_without_search_path FROM pg_proc
 WHERE pronamespace = 'silo'::regnamespace AND prosecdef
   AND NOT coalesce(EXISTS (SELECT 1 FROM unnest(proconfig) c WHERE c LIKE 'search\_path=%'), false);

--
-- the roles at work, through login roles that are members
--
CREATE ROLE regress_silo_producer LOGIN IN ROLE silo_producer;
CREATE ROLE regress_silo_worker LOGIN IN ROLE silo_worker;
CREATE ROLE regress_silo_admin LOGIN IN ROLE silo_admin;
CREATE ROLE regress_silo_nobody LOGIN;

-- a producer enqueues and reads silo.jobs and silo.attempts
SET ROLE regress_silo_producer;
SELECT silo.enqueue('pv', id => 'by-producer', payload => '{"p": 1}');
SELECT * FROM silo.enqueue_many('[{"task_group": "pv", "id": "by-producer-2", "priority": 60}]');
SELECT id, status FROM silo.jobs ORDER BY id;
SELECT count(*) AS attempts FROM silo.attempts;
-- ... but cannot lease, report, run maintenance or read the tables
SELECT * FROM silo.lease('w1', 'pv');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.complete(gen_random_uuid(), 'w1');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM silo.run_maintenance();
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM silo.job_info;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM silo.leases;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO silo.job_cancellation VALUES ('-', 'by-producer', now());
\echo :LAST_ERROR_SQLSTATE
-- silo's test clock is for superusers only
SET silo.clock_offset_ms = 60000;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- a worker leases, heartbeats and reports
SET ROLE regress_silo_worker;
SELECT task_id AS t, job_id, payload FROM silo.lease('w1', 'pv') \gset
SELECT :'job_id' AS job_id, :'payload' AS payload;
SELECT silo.heartbeat(:'t', 'w1') AS cancelled;
SELECT silo.complete(:'t', 'w1', '{"done": true}');
SELECT task_id AS t FROM silo.lease('w1', 'pv') \gset
SELECT silo.release(:'t', 'w1');
SELECT task_id AS t FROM silo.lease('w1', 'pv') \gset
SELECT silo.fail(:'t', 'w1', 'E');
-- ... but cannot enqueue, read the jobs, or touch the tables
SELECT silo.enqueue('pv');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM silo.jobs;
\echo :LAST_ERROR_SQLSTATE
SELECT silo.cancel('by-producer');
\echo :LAST_ERROR_SQLSTATE
DELETE FROM silo.task_lease;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- an admin can do everything the API offers and read every table
SET ROLE regress_silo_admin;
SELECT id, status FROM silo.jobs ORDER BY id;
SELECT count(*) AS info_rows FROM silo.job_info;
SELECT * FROM silo.run_maintenance();
SELECT silo.restart('by-producer-2');
SELECT task_id AS t FROM silo.lease('w9', 'pv') \gset
SELECT silo.ack_cancel(:'t', 'w9');
SELECT silo.delete_job('by-producer') AS deleted;
SELECT status FROM silo.job_result('by-producer-2');
SELECT silo.purge_terminal_jobs() AS purged;
RESET ROLE;

-- a role without membership gets nothing, not even the schema
SET ROLE regress_silo_nobody;
SELECT silo.enqueue('pv');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM silo.jobs;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- the SECURITY DEFINER functions ignore the caller's search_path: a
-- producer whose search_path puts a look-alike of a pg_catalog function
-- first does not get it called by silo
CREATE SCHEMA regress_hostile;
CREATE FUNCTION regress_hostile.jsonb_each_text(from_json jsonb, OUT key text, OUT value text)
RETURNS SETOF record LANGUAGE sql AS $$ SELECT 'hijacked'::text, 'yes'::text $$;
GRANT USAGE ON SCHEMA regress_hostile TO regress_silo_producer;
SET ROLE regress_silo_producer;
SET search_path = regress_hostile, pg_catalog;
SELECT key FROM jsonb_each_text('{"k": "v"}');
SELECT silo.enqueue('pv', id => 'hostile-path', metadata => '{"k": "v"}');
RESET search_path;
RESET ROLE;
SELECT key, value FROM silo.job_metadata WHERE job_id = 'hostile-path';
DROP SCHEMA regress_hostile CASCADE;

DROP ROLE regress_silo_producer, regress_silo_worker, regress_silo_admin, regress_silo_nobody;
