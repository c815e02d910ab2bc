-- upgrade: the extension's version chain and its re-installability.
-- silo--1.0.sql is the first release; every later release adds an upgrade
-- script silo--X--Y.sql and is checked here by creating the oldest
-- version and updating to the default.

-- every version PostgreSQL can install, and the default one (1.1: limits;
-- 1.2: complete_many, plans that need no statistics; 1.3: lease marks;
-- 1.4: byte-order collation of text columns; 1.5: 0x03 as a table, HOT
-- status changes; 1.6: a purge command immune to the database's search_path;
-- 1.7: tenancy, cluster mode, wait_result, schedules; 1.8: Silo's missing calls;
-- 1.9: wait_any)
SELECT version, installed FROM pg_available_extension_versions
 WHERE name = 'silo' ORDER BY version;

-- the library this server runs says its version (the 1.5 update checks it)
SHOW silo.library_version;

-- the installed version is the default, so UPDATE is a no-op
SELECT extversion FROM pg_extension WHERE extname = 'silo';
ALTER EXTENSION silo UPDATE;

-- every table holding jobs is dumped by pg_dump with its data
SELECT c::regclass AS config_table
  FROM pg_extension e, unnest(e.extconfig) c
 WHERE e.extname = 'silo' ORDER BY c::regclass::text;

-- the oldest version installs from scratch and updates to the default;
-- in between, pg_cron's purge command is harmless without silo
DROP EXTENSION silo;
DO $$ BEGIN EXECUTE (SELECT command FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs'); END $$;
CREATE EXTENSION silo VERSION '1.0';
-- a job enqueued under 1.0 (enqueue of jobs without limits works before
-- the update) runs to the end after it
SELECT silo.enqueue('upgrade-old', id => 'old1');
-- every other entry point refuses clearly until the update (55000, the
-- update as the hint), instead of failing on a missing table or column
SELECT e AS entry_point, test_helpers.sqlstate_of(e) AS refused FROM unnest(ARRAY[
  $$SELECT * FROM silo.lease('w', 'upgrade-old')$$,
  $$SELECT silo.complete('00000000-0000-7000-8000-000000000000', 'w')$$,
  $$SELECT silo.heartbeat('00000000-0000-7000-8000-000000000000', 'w')$$,
  $$SELECT silo.cancel('old1')$$,
  $$SELECT * FROM silo.job_result('old1')$$,
  $$SELECT * FROM silo.run_maintenance()$$]) e;
DO $$
DECLARE
	hint text;
BEGIN
	PERFORM silo.cancel('old1');
EXCEPTION WHEN object_not_in_prerequisite_state THEN
	GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
	RAISE NOTICE 'hint: %', hint;
END
$$;
ALTER EXTENSION silo UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'silo';
SELECT count(silo.complete(task_id, 'w')) AS completed FROM silo.lease('w', 'upgrade-old');
SELECT status FROM silo.jobs WHERE id = 'old1';
-- and 1.1 features work on the updated schema
SELECT silo.enqueue('upgrade-new', id => 'new1',
                    limits => '[{"type": "concurrency", "key": "u", "maxConcurrency": 1}]');
SELECT holders, requesters FROM silo.queues WHERE queue = 'u';
-- and 1.2's: complete_many, and every SQL entry point plans without
-- sequential scans or JIT
SELECT count(*) AS completed FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'upgrade-new')), 'w');
SELECT p.proname, p.proconfig FROM pg_proc p
 WHERE p.pronamespace = 'silo'::regnamespace AND p.prosecdef
   AND NOT (coalesce(p.proconfig, '{}') @> ARRAY['enable_seqscan=off', 'jit=off'])
 ORDER BY 1;
SELECT count(*) AS definer_functions FROM pg_proc p
 WHERE p.pronamespace = 'silo'::regnamespace AND p.prosecdef;
-- and 1.3's: the lease-mark trigger, firing always
SELECT tgname, tgenabled FROM pg_trigger
 WHERE tgrelid = 'silo.task'::regclass AND NOT tgisinternal;
-- and 1.4's: every text column of silo's tables compares bytewise ("C"),
-- the views dropped and re-created around that change are still members
-- of the extension with their grants, and 0x03 is ascending without
-- deduplication
SELECT c.relname, a.attname, a.attcollation::regcollation
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
   AND a.attnum > 0 AND NOT a.attisdropped
   AND a.atttypid IN ('text'::regtype, 'text[]'::regtype)
   AND a.attcollation <> '"C"'::regcollation;
SELECT count(*) AS text_columns FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
   AND a.attnum > 0 AND NOT a.attisdropped
   AND a.atttypid IN ('text'::regtype, 'text[]'::regtype);
SELECT c.relname, d.deptype AS member,
       ARRAY(SELECT r.rolname || '=' || a.privilege_type
               FROM aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
              WHERE a.grantee <> c.relowner ORDER BY 1) AS grants
  FROM pg_class c
  LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
                       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'silo')
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'v'
 ORDER BY c.relname;
-- and 1.5's: 0x03 is a table of its own, holding the job enqueued under
-- 1.0 (copied by the update) and the one enqueued since, each with the
-- status and time of its status row; job_status keeps only its primary
-- key, so that status changes are HOT updates, with room for them
SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
 WHERE i.indrelid IN ('silo.job_status'::regclass, 'silo.job_status_index'::regclass)
 ORDER BY 1;
SELECT relname, reloptions FROM pg_class
 WHERE oid IN ('silo.job_status'::regclass, 'silo.job_status_index_pkey'::regclass) ORDER BY 1;
SELECT x.tenant, x.status, x.id, x.changed_at = s.changed_at AS same_time
  FROM silo.job_status_index x JOIN silo.job_status s ON s.tenant = x.tenant AND s.id = x.id
 ORDER BY x.id;
SELECT test_helpers.status_index_mismatches();

-- re-creating keeps exactly one purge job in pg_cron
SELECT count(*) FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs';

-- and 1.7's: every table has a primary key with tenant in it (its
-- replica identity, docs/storage.md "Replication"), and a lease probes its
-- own group's overdue tasks through task_future_group
SELECT c.relname, c.relreplident,
       (SELECT string_agg(a.attname, ', ' ORDER BY k.n)
          FROM pg_index i
         CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = c.oid AND i.indisprimary) AS primary_key
  FROM pg_class c
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
 ORDER BY c.relname;
SELECT pg_get_indexdef('silo.task_future_group'::regclass);

-- and 1.8's: leased tasks and silo.jobs carry limits and retry_policy,
-- also for the jobs enqueued before the update
SELECT attnum, attname FROM pg_attribute
 WHERE attrelid = 'silo.leased_task'::regclass AND attnum > 14 ORDER BY attnum;
SELECT id, limits, retry_policy FROM silo.jobs WHERE id IN ('old1', 'new1') ORDER BY id;

-- and 1.6's: the update rewrites the purge command of older versions,
-- which resolved to_regprocedure() through the database's search_path as
-- a superuser, into the qualified one the broker writes (in one
-- transaction, so that the broker, which rewrites it too, cannot)
DROP EXTENSION silo;
CREATE EXTENSION silo VERSION '1.5';
BEGIN;
UPDATE cron.job
   SET command = $cmd$DO $purge$ BEGIN IF to_regprocedure('silo.purge_terminal_jobs(integer)') IS NOT NULL THEN PERFORM silo.purge_terminal_jobs(); END IF; END $purge$$cmd$
 WHERE jobname = 'silo-purge-terminal-jobs';
ALTER EXTENSION silo UPDATE TO '1.6';
SELECT command FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs';
COMMIT;

-- 1.3 -> 1.4 re-creates silo's views around the collation change and puts
-- back what a DBA did to them: an extra grant, a revoked one, a comment.
-- The extension's record of its own initial grants (pg_init_privs, what
-- pg_dump compares against) stays the shipped one, so pg_dump still dumps
-- exactly the DBA's changes.  A view of the DBA's on a silo view stops the
-- update, naming it.
DROP EXTENSION silo;
CREATE EXTENSION silo VERSION '1.3';
CREATE ROLE regress_silo_reports NOLOGIN;
CREATE TEMP TABLE init_before AS
  SELECT c.relname, ip.initprivs::text AS initprivs
    FROM pg_init_privs ip JOIN pg_class c ON c.oid = ip.objoid
   WHERE ip.classoid = 'pg_class'::regclass AND c.relnamespace = 'silo'::regnamespace
     AND c.relkind = 'v';
SELECT silo.enqueue('upgrade-views', id => 'v1');
GRANT SELECT ON silo.jobs TO regress_silo_reports;
REVOKE SELECT ON silo.finished_jobs FROM silo_producer;
COMMENT ON VIEW silo.jobs IS 'one row per job';
CREATE VIEW public.my_jobs AS SELECT id, status FROM silo.jobs;
ALTER EXTENSION silo UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'silo';
DROP VIEW public.my_jobs;
ALTER EXTENSION silo UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'silo';
SELECT c.relname,
       ARRAY(SELECT r.rolname || '=' || a.privilege_type
               FROM aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
              WHERE a.grantee <> c.relowner ORDER BY 1) AS grants,
       obj_description(c.oid, 'pg_class') AS comment
  FROM pg_class c
 WHERE c.oid IN ('silo.jobs'::regclass, 'silo.finished_jobs'::regclass)
 ORDER BY 1;
-- the recorded initial grants of every view are those of before the update
SELECT count(*) AS views_recorded,
       count(*) FILTER (WHERE b.initprivs IS NOT DISTINCT FROM ip.initprivs::text) AS unchanged
  FROM init_before b
  JOIN pg_class c ON c.relname = b.relname AND c.relnamespace = 'silo'::regnamespace
  LEFT JOIN pg_init_privs ip ON ip.objoid = c.oid AND ip.classoid = 'pg_class'::regclass;
-- and the view still reads the job enqueued before the update
SELECT id, status FROM silo.jobs WHERE id = 'v1';
DROP EXTENSION silo;
DROP ROLE regress_silo_reports;
CREATE EXTENSION silo;

-- and the re-created extension works
SELECT silo.enqueue('upgrade-check', id => 'u1');
SELECT job_id FROM silo.lease('w', 'upgrade-check');
SELECT silo.enqueue('upgrade-check', id => 'u2', retry_policy => '{"retryCount": 1}');
SELECT job_id, limits, retry_policy FROM silo.lease_job('w', 'u2');
