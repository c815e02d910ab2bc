--
-- replication: silo's tables under a publication of a shard's rows, the
-- form cluster mode moves shards with: every table of schema silo, rows
-- filtered on tenant, publishing inserts, updates and deletes (not
-- TRUNCATE).  PostgreSQL refuses an UPDATE or DELETE of a table whose row
-- filter uses a column outside its replica identity, whatever wal_level;
-- so the whole lifecycle must run with every table's replica identity
-- holding tenant.  And silo's direct row access (storage/direct*.c) must
-- refuse what it cannot do right: a table with a trigger it would not
-- fire, a delete a subscriber could not apply.
--
SELECT test_helpers.reset();
TRUNCATE silo.chain_task, silo.concurrency_request, silo.concurrency_holder,
		 silo.concurrency_regrant, silo.floating_limit, silo.rate_limit_bucket;

-- A shard's rows are those of the tables silo.shard_tables() lists, each
-- keyed by tenant.  The others stay on their node: silo.tenant_grant
-- (roles bound to tenants) and silo.task_group_setting (one row per task
-- group) configure silo itself, silo.shard_state is this node's own record
-- of its shards' moves, silo.schedule the schedules of this node's
-- pg_cron.  Every shard table's replica identity is its primary key, with
-- tenant in it; task_group_setting and shard_state have no tenant at all.
SELECT c.relname
  FROM pg_class c
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
   AND (c.relreplident <> 'd' OR NOT EXISTS (
		SELECT 1 FROM pg_index i JOIN pg_attribute a
		    ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		 WHERE i.indrelid = c.oid AND i.indisprimary AND a.attname = 'tenant'))
 ORDER BY 1;

-- silo.shard_tables() is a list: a table added to schema silo stays on its
-- node until it is listed.  The tables it leaves out:
SELECT c.relname,
	   EXISTS (SELECT 1 FROM pg_attribute a
				WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped)
		   AS has_tenant
  FROM pg_class c
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
   AND c.oid NOT IN (SELECT t FROM silo.shard_tables() t)
 ORDER BY 1;
SELECT count(*) AS shard_tables FROM silo.shard_tables();

-- the publication of half of the hash space (wal_level is not logical
-- here: the WARNING says so, and changes nothing below)
DO $$
BEGIN
	EXECUTE (SELECT 'CREATE PUBLICATION regress_silo_shard FOR '
					|| string_agg(format('TABLE %s WHERE (hashtextextended(tenant, 0) >= 0)', t),
								  ', ')
					|| $q$ WITH (publish = 'insert, update, delete')$q$
			   FROM silo.shard_tables() t);
END
$$;
SELECT count(*) AS published_tables FROM pg_publication_tables WHERE pubname = 'regress_silo_shard';

-- a job through its life: enqueue, lease, heartbeat, a failure and its
-- retry, completion
SELECT silo.enqueue('repl', '{"n": 1}', tenant => 't1', id => 'life',
					retry_policy => '{"retryCount": 1, "initialIntervalMs": 0}');
SELECT task_id AS t FROM silo.lease('w', 'repl') \gset
SELECT silo.heartbeat(:'t', 'w') AS cancelled;
SELECT silo.fail(:'t', 'w', 'BOOM');
SELECT task_id AS t FROM silo.lease('w', 'repl') \gset
SELECT silo.complete(:'t', 'w', '{"ok": true}');
SELECT status, current_attempt FROM silo.jobs WHERE tenant = 't1' AND id = 'life';

-- complete_many, release, cancel of a waiting and of a running job,
-- restart, expedite, delete
SELECT silo.enqueue('repl', tenant => 't1', id => 'batch-' || n) FROM generate_series(1, 3) n;
SELECT count(*) AS completed
  FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'repl', max_tasks => 3)), 'w');
SELECT silo.enqueue('repl', tenant => 't1', id => 'released');
SELECT task_id AS t FROM silo.lease('w', 'repl') \gset
SELECT silo.release(:'t', 'w');
SELECT silo.cancel('released', 't1');
SELECT silo.enqueue('repl', tenant => 't1', id => 'running');
SELECT task_id AS t FROM silo.lease('w', 'repl') \gset
SELECT silo.cancel('running', 't1');
SELECT silo.ack_cancel(:'t', 'w');
SELECT silo.restart('running', 't1');
SELECT silo.enqueue('repl-later', tenant => 't1', id => 'later', start_at => now() + interval '1 hour');
SELECT silo.expedite('later', 't1');
SELECT silo.delete_job('life', 't1');
SELECT id, status FROM silo.jobs WHERE tenant = 't1' ORDER BY id;

-- limits: a concurrency key granted on release, a floating key, a rate
-- limit, a swept lease, a regrant marker
SELECT silo.enqueue('repl-lim', tenant => 't2', id => 'k' || n,
					limits => '[{"type": "concurrency", "key": "k", "maxConcurrency": 1}]')
  FROM generate_series(1, 2) n;
SELECT task_id AS t FROM silo.lease('w', 'repl-lim') \gset
SELECT silo.complete(:'t', 'w');
SELECT job_id FROM silo.lease('w', 'repl-lim', lease_ms => 100);
SELECT silo.enqueue('repl-lim', tenant => 't2', id => 'f1',
					limits => '[{"type": "floatingConcurrency", "key": "f", "defaultMaxConcurrency": 1,
								 "refreshIntervalMs": 1000}]');
SELECT silo.enqueue('repl-lim', tenant => 't2', id => 'r1',
					limits => '[{"type": "rateLimit", "name": "r", "uniqueKey": "u", "limit": 5,
								 "durationMs": 1000}]');
INSERT INTO silo.concurrency_regrant (tenant, queue, marked_at) VALUES ('t2', 'k', now()), ('t2', 'k', now());
SET silo.clock_offset_ms = 5000;	-- the lease of k2 expires, the refresh is due
SELECT * FROM silo.run_maintenance();
RESET silo.clock_offset_ms;
SELECT count(*) AS regrant_markers FROM silo.concurrency_regrant;
SELECT a.job_id, a.error_code FROM silo.attempts a WHERE a.tenant = 't2' AND a.status = 'Failed';
SELECT key, refresh_state FROM silo.floating_limits WHERE tenant = 't2';
SELECT kind, count(*) FROM silo.lease('w', 'repl-lim', max_tasks => 10) GROUP BY kind ORDER BY kind;
SELECT silo.purge_terminal_jobs() >= 0 AS purged;

-- a trigger on a table silo writes directly would not be fired: refused
CREATE FUNCTION pg_temp.audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NEW; END $$;
CREATE TRIGGER regress_audit BEFORE INSERT ON silo.attempt
	FOR EACH ROW EXECUTE FUNCTION pg_temp.audit();
SELECT silo.enqueue('repl', tenant => 't3', id => 'trig');
SELECT test_helpers.sqlstate_of($$SELECT silo.complete_many((SELECT array_agg(task_id)
								   FROM silo.lease('w', 'repl')), 'w')$$) AS with_trigger;
ALTER TABLE silo.attempt DISABLE TRIGGER regress_audit;
SELECT count(*) AS completed
  FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'repl')), 'w');
DROP TRIGGER regress_audit ON silo.attempt;

-- a delete that a subscriber could not apply is refused, not written
ALTER TABLE silo.task_lease REPLICA IDENTITY NOTHING;
SELECT silo.enqueue('repl', tenant => 't3', id => 'ident');
SELECT task_id AS t FROM silo.lease('w', 'repl') \gset
SELECT test_helpers.sqlstate_of(format($$SELECT silo.complete_many(ARRAY[%L]::uuid[], 'w')$$, :'t'))
	   AS without_identity;
ALTER TABLE silo.task_lease REPLICA IDENTITY DEFAULT;
SELECT count(*) AS completed FROM silo.complete_many(ARRAY[:'t']::uuid[], 'w');

DROP PUBLICATION regress_silo_shard;
SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
