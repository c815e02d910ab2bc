-- upgrade: the extension's version chain and its re-installability.
-- silo--1.0.sql is the first release; every later release adds an upgrade
-- script silo--X--Y.sql and is checked here by creating the oldest
-- version and updating to the default.

-- every version PostgreSQL can install, and the default one (1.1: limits;
-- 1.2: complete_many, plans that need no statistics; 1.3: lease marks;
-- 1.4: byte-order collation of text columns)
SELECT version, installed FROM pg_available_extension_versions
 WHERE name = 'silo' ORDER BY version;

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
SELECT pg_get_indexdef('silo.job_status_by_status'::regclass),
       (SELECT reloptions FROM pg_class WHERE oid = 'silo.job_status_by_status'::regclass);

-- re-creating keeps exactly one purge job in pg_cron
SELECT count(*) FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs';

-- and the re-created extension works
SELECT silo.enqueue('upgrade-check', id => 'u1');
SELECT job_id FROM silo.lease('w', 'upgrade-check');
