/* silo--1.6--1.7.sql: every table keyed with its tenant (replication), a lease's probe of its own group's overdue tasks, and cluster mode's SQL surface (the shard map, the tenant hash, the setsum). */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.7'" to load this file. \quit

/*
 * The 1.7 library reads the index added below; an older library still
 * loaded in this server would keep writing regrant markers the 1.6 way
 * (which still works) but would not know it must not run on 1.7.
 */
DO $$
BEGIN
	IF coalesce(string_to_array(current_setting('silo.library_version', true), '.')::int[],
				'{0,0}') < '{1,7}' THEN
		RAISE EXCEPTION 'the silo library loaded in this server is older than 1.7'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'PostgreSQL keeps using the library it loaded at start.',
				  HINT = 'Restart PostgreSQL after installing silo 1.7, then run ALTER EXTENSION silo UPDATE.';
	END IF;
END
$$;

/*
 * Every table has a primary key with tenant in it, which is its replica
 * identity: a publication of a shard's rows filters on tenant, and
 * PostgreSQL refuses an UPDATE or DELETE on a table whose row filter uses
 * a column outside the replica identity (docs/storage.md, "Replication").
 *
 * task_lease was keyed by task_id alone.  Its key becomes (task_id,
 * tenant): task ids are unique by construction (version 7 UUIDs), every
 * look-up by task_id still uses the key's first column, and no index is
 * added to the lease's hot path (an extra unique index used as REPLICA
 * IDENTITY USING INDEX would cost every lease and completion one more
 * B-tree insertion).
 */
ALTER TABLE silo.task_lease
	DROP CONSTRAINT task_lease_pkey,
	ADD CONSTRAINT task_lease_pkey PRIMARY KEY (task_id, tenant);

/*
 * concurrency_regrant had no key at all: under a publication that
 * publishes deletes its DELETE fails, and the broker would retry it
 * forever while the key's waiters starve.  A marker must never wait to be
 * written and the same key may be marked twice, so the key is (tenant,
 * queue, mark_id) with a random mark_id (no sequence: sequences do not
 * replicate).
 */
ALTER TABLE silo.concurrency_regrant
	ADD COLUMN mark_id uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE silo.concurrency_regrant
	ADD CONSTRAINT concurrency_regrant_pkey PRIMARY KEY (tenant, queue, mark_id);
DROP INDEX silo.concurrency_regrant_key;

/*
 * A lease first checks its own group for due tasks the broker has not
 * promoted yet.  With only task_future (start_at WHERE NOT due) that probe
 * walked every group's overdue tasks: 200 leases of an empty group took
 * 378 ms with 20,000 overdue tasks in another group, against 35 ms
 * without.  The broker keeps task_future for its cross-group order.
 * Future tasks only: a due task's insert never touches either index.
 */
CREATE INDEX task_future_group ON silo.task (task_group, start_at) WHERE NOT due;

/*
 * Cluster mode (docs/cluster.md).  Every node answers these, in
 * single-node mode too (one local shard over the whole hash range).  A
 * tenant's shard is found from hashtextextended(tenant, 0), which
 * silo.tenant_hash returns; clients compute it themselves to route calls.
 */
CREATE FUNCTION silo.tenant_hash(tenant text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'silo_tenant_hash_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION silo.shard_for_tenant(tenant text)
RETURNS integer
AS 'MODULE_PATHNAME', 'silo_shard_for_tenant'
LANGUAGE C VOLATILE;

CREATE FUNCTION silo.cluster_shards(OUT shard_id integer, OUT range_start numeric,
									OUT range_end numeric, OUT owner_node_id text,
									OUT owner_conninfo text, OUT state text, OUT is_local boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'silo_cluster_info'
LANGUAGE C VOLATILE ROWS 8;

CREATE FUNCTION silo.node_status(OUT node_id text, OUT mode text, OUT membership text,
								 OUT owned_shards integer[], OUT serving_shards integer[])
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'silo_node_info'
LANGUAGE C VOLATILE ROWS 1;

-- one row per shard, as this node knows the map
CREATE VIEW silo.cluster_info AS SELECT * FROM silo.cluster_shards();
-- this node: its id, mode, membership, the shards it owns and serves
CREATE VIEW silo.node_info AS SELECT * FROM silo.node_status();

REVOKE ALL ON FUNCTION silo.tenant_hash(text), silo.shard_for_tenant(text),
	silo.cluster_shards(), silo.node_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.tenant_hash(text), silo.shard_for_tenant(text),
	silo.cluster_shards(), silo.node_status() TO silo_producer, silo_worker, silo_admin;
REVOKE ALL ON silo.cluster_info, silo.node_info FROM PUBLIC;
GRANT SELECT ON silo.cluster_info, silo.node_info TO silo_producer, silo_worker, silo_admin;

/*
 * setsum: a composable checksum of a multiset of texts (src/cluster/setsum.c,
 * src/cluster/README.md).  Cluster mode checks with it that a shard's rows
 * arrived whole on another node: both nodes compute
 *
 *     SELECT silo.setsum(t::text) FROM <table> t WHERE <the shard's rows>;
 *
 * and compare.  A table can be summed in parts and the parts added
 * (silo.setsum_add), and rows removed by subtraction (silo.setsum_sub).  A
 * setsum is 64 lowercase hexadecimal digits; the empty multiset's is 64
 * zeros, and silo.setsum over no rows (or only NULL items) returns that,
 * not NULL.
 *
 * The C functions pin no search_path: they run no SQL.
 * The aggregate's transition, combine and final functions are not STRICT
 * (the first call makes the state, NULL items are skipped, no rows give
 * the empty setsum); the serialize and deserialize functions and the
 * three scalar functions are.
 */

CREATE FUNCTION silo.setsum_accum(state internal, item text)
RETURNS internal
AS 'MODULE_PATHNAME', 'silo_setsum_accum'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE SECURITY INVOKER;

CREATE FUNCTION silo.setsum_combine(a internal, b internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'silo_setsum_combine'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE SECURITY INVOKER;

CREATE FUNCTION silo.setsum_serialize(state internal)
RETURNS bytea
AS 'MODULE_PATHNAME', 'silo_setsum_serialize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER;

CREATE FUNCTION silo.setsum_deserialize(bytes bytea, unused internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'silo_setsum_deserialize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER;

CREATE FUNCTION silo.setsum_final(state internal)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_setsum_final'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE SECURITY INVOKER;

CREATE AGGREGATE silo.setsum(item text) (
	SFUNC = silo.setsum_accum,
	STYPE = internal,
	SSPACE = 32,
	FINALFUNC = silo.setsum_final,
	COMBINEFUNC = silo.setsum_combine,
	SERIALFUNC = silo.setsum_serialize,
	DESERIALFUNC = silo.setsum_deserialize,
	PARALLEL = SAFE
);

CREATE FUNCTION silo.setsum_add(a text, b text)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_setsum_add'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER;

CREATE FUNCTION silo.setsum_sub(a text, b text)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_setsum_sub'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER;

CREATE FUNCTION silo.setsum_item(item text)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_setsum_item'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER;

/* Nothing for PUBLIC (functions get EXECUTE for PUBLIC by default). */
REVOKE ALL ON FUNCTION silo.setsum_accum(internal, text), silo.setsum_combine(internal, internal),
	silo.setsum_serialize(internal), silo.setsum_deserialize(bytea, internal),
	silo.setsum_final(internal), silo.setsum(text),
	silo.setsum_add(text, text), silo.setsum_sub(text, text), silo.setsum_item(text)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.setsum_accum(internal, text), silo.setsum_combine(internal, internal),
	silo.setsum_serialize(internal), silo.setsum_deserialize(bytea, internal),
	silo.setsum_final(internal), silo.setsum(text),
	silo.setsum_add(text, text), silo.setsum_sub(text, text), silo.setsum_item(text)
	TO silo_admin;

/* ---------------------------------------------------------------------
 * Tenants as a security boundary (docs/security.md, "Tenants")
 * ------------------------------------------------------------------- */

/*
 * Bindings: a role (by name: OIDs differ between nodes and are reused
 * after DROP ROLE) acts only in the tenants it is bound to, '*' being
 * every tenant; membership in a bound role binds too.  Dumped with the
 * data (restore it after the roles: pg_dumpall --roles-only first).
 */
CREATE TABLE silo.tenant_grant (
	role_name	text COLLATE "C" NOT NULL,
	tenant		text COLLATE "C" NOT NULL,
	granted_at	timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (role_name, tenant)
);
SELECT pg_catalog.pg_extension_config_dump('silo.tenant_grant', '');
REVOKE ALL ON silo.tenant_grant FROM PUBLIC;
GRANT SELECT ON silo.tenant_grant TO silo_admin;

/* any change of the bindings reaches every session at its commit */
CREATE FUNCTION silo.tenant_grant_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'silo_tenant_grant_changed'
LANGUAGE C;
CREATE TRIGGER tenant_grant_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON silo.tenant_grant
	FOR EACH STATEMENT EXECUTE FUNCTION silo.tenant_grant_changed();

CREATE FUNCTION silo.grant_tenant(role regrole, tenant text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_grant_tenant'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

CREATE FUNCTION silo.revoke_tenant(role regrole, tenant text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_revoke_tenant'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

/* the filter of the views below: may the role current at the call see
 * this tenant's rows?  Parallel unsafe: it may read the bindings, which
 * takes a snapshot, so plans that use it stay serial. */
CREATE FUNCTION silo.tenant_visible(tenant text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_tenant_visible'
LANGUAGE C STABLE PARALLEL UNSAFE;

CREATE VIEW silo.tenant_grants AS
SELECT role_name AS role, tenant, granted_at FROM silo.tenant_grant;

REVOKE ALL ON FUNCTION silo.grant_tenant(regrole, text), silo.revoke_tenant(regrole, text),
	silo.tenant_visible(text), silo.tenant_grant_changed() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.grant_tenant(regrole, text), silo.revoke_tenant(regrole, text)
	TO silo_admin;
GRANT EXECUTE ON FUNCTION silo.tenant_visible(text) TO silo_producer, silo_worker, silo_admin;
REVOKE ALL ON silo.tenant_grants FROM PUBLIC;
GRANT SELECT ON silo.tenant_grants TO silo_admin;

/*
 * A lease belongs to the role that took it: another role's heartbeats and
 * reports get "lease owner mismatch", even with the right worker_id.
 * NULL on leases taken before 1.7.
 */
ALTER TABLE silo.task_lease ADD COLUMN owner_role text COLLATE "C";

/*
 * A lease of some tenants' work (a bound worker, or silo.lease's tenants
 * filter) reads each tenant's own range of the ready order instead of
 * walking the others' backlog.  Due tasks only.
 */
CREATE INDEX task_ready_tenant ON silo.task (task_group, tenant, priority, start_at, seq)
	WHERE due AND tenant <> '-';

DROP FUNCTION silo.lease(text, text, integer, integer);
CREATE FUNCTION silo.lease(worker_id text,
						   task_group text,
						   max_tasks integer DEFAULT 1,
						   lease_ms integer DEFAULT 10000,
						   tenants text[] DEFAULT NULL)
RETURNS SETOF silo.leased_task
AS 'MODULE_PATHNAME', 'silo_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off ROWS 10;
REVOKE ALL ON FUNCTION silo.lease(text, text, integer, integer, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.lease(text, text, integer, integer, text[])
	TO silo_worker, silo_admin;

/*
 * The views producers read show only the tenants the role current at the
 * query may see (silo.tenant_visible), as security barriers, so that a
 * function of the user's in a WHERE clause never sees another tenant's
 * rows (a leakproof qual such as id = '...' still reaches the index:
 * a job by id stays a primary-key probe).  CREATE OR REPLACE keeps their
 * owners, grants and comments.  silo.attempts no longer shows the
 * task_id of a running attempt but to silo_admin: the id a worker reports
 * with.  silo.job_metadata, a table producers may read, gets the same
 * filter as a row-level security policy (its owner, silo's functions,
 * is not subject to it).
 */
CREATE OR REPLACE VIEW silo.jobs WITH (security_barrier) AS
SELECT s.tenant, s.id, i.task_group,
	   CASE WHEN s.status <> 'Pending' THEN s.status
			WHEN EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN 'Running'
			WHEN s.next_attempt_at > silo.now()
				THEN CASE WHEN s.relative_attempt > 1 THEN 'Retrying' ELSE 'Scheduled' END
			ELSE 'Waiting' END COLLATE "C" AS status,
	   i.priority::integer AS priority, i.enqueued_at,
	   CASE WHEN s.status <> 'Pending' THEN s.changed_at
			ELSE coalesce((SELECT l.started_at FROM silo.task_lease l WHERE l.task_id = s.task_id),
						  s.changed_at) END AS status_changed_at,
	   CASE WHEN s.status = 'Pending' THEN s.attempt END AS current_attempt,
	   CASE WHEN s.status = 'Pending'
				 AND NOT EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN s.next_attempt_at END AS next_attempt_at,
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status s
  JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = s.tenant AND c.job_id = s.id
 WHERE silo.tenant_visible(s.tenant);

CREATE OR REPLACE VIEW silo.finished_jobs WITH (security_barrier) AS
SELECT x.tenant, x.id, i.task_group, x.status, i.priority::integer AS priority,
	   i.enqueued_at, x.changed_at AS finished_at, s.attempt AS last_attempt,
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status_index x
  JOIN silo.job_status s ON s.tenant = x.tenant AND s.id = x.id
  JOIN silo.job_info i ON i.tenant = x.tenant AND i.id = x.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = x.tenant AND c.job_id = x.id
 WHERE x.status <> 'Pending' AND silo.tenant_visible(x.tenant);

CREATE OR REPLACE VIEW silo.live_jobs WITH (security_barrier) AS
SELECT s.tenant, s.id, i.task_group,
	   CASE WHEN EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN 'Running'
			WHEN s.next_attempt_at > silo.now()
				THEN CASE WHEN s.relative_attempt > 1 THEN 'Retrying' ELSE 'Scheduled' END
			ELSE 'Waiting' END COLLATE "C" AS status,
	   i.priority::integer AS priority, i.enqueued_at,
	   coalesce((SELECT l.started_at FROM silo.task_lease l WHERE l.task_id = s.task_id),
				s.changed_at) AS status_changed_at,
	   s.attempt AS current_attempt,
	   CASE WHEN NOT EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN s.next_attempt_at END AS next_attempt_at,
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status_index x
  JOIN silo.job_status s ON s.tenant = x.tenant AND s.id = x.id
						AND s.status = x.status AND s.changed_at = x.changed_at
  JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = s.tenant AND c.job_id = s.id
 WHERE x.status = 'Pending' AND silo.tenant_visible(x.tenant);

CREATE FUNCTION silo.is_admin()
RETURNS boolean
AS $$ SELECT pg_catalog.pg_has_role('silo_admin', 'USAGE') $$
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION silo.is_admin() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.is_admin() TO silo_producer, silo_worker, silo_admin;

/*
 * A view whose top is a UNION ALL would be flattened into an append, and
 * its barrier lost with it: a cheap function of the caller's could then
 * run before the filter.  So the union is a subquery, filtered above it.
 */
CREATE OR REPLACE VIEW silo.attempts WITH (security_barrier) AS
SELECT * FROM (
	SELECT tenant, job_id, attempt, relative_attempt, task_id, worker_id, status,
		   started_at, finished_at, result, error_code, error_data
	  FROM silo.attempt
	UNION ALL
	SELECT tenant, job_id, attempt, relative_attempt,
		   CASE WHEN silo.is_admin() THEN task_id END, worker_id, 'Running',
		   started_at, NULL::timestamptz, NULL::jsonb, NULL::text, NULL::jsonb
	  FROM silo.task_lease
	 WHERE kind = 'run'
) a
 WHERE silo.tenant_visible(a.tenant);

CREATE OR REPLACE VIEW silo.queues WITH (security_barrier) AS
WITH k AS (
	SELECT tenant, queue FROM silo.concurrency_holder
	UNION
	SELECT tenant, queue FROM silo.concurrency_request
	UNION
	SELECT tenant, queue FROM silo.floating_limit
)
SELECT k.tenant, k.queue,
	   CASE WHEN f.queue IS NULL THEN 'concurrency' ELSE 'floatingConcurrency' END AS kind,
	   (SELECT count(*) FROM silo.concurrency_holder h
		 WHERE h.tenant = k.tenant AND h.queue = k.queue) AS holders,
	   (SELECT count(*) FROM silo.concurrency_request r
		 WHERE r.tenant = k.tenant AND r.queue = k.queue) AS requesters,
	   f.current_max
  FROM k LEFT JOIN silo.floating_limit f ON f.tenant = k.tenant AND f.queue = k.queue
 WHERE silo.tenant_visible(k.tenant);

CREATE OR REPLACE VIEW silo.floating_limits WITH (security_barrier) AS
SELECT f.tenant, f.queue AS key, f.current_max, f.default_max, f.refresh_interval_ms,
	   f.metadata, f.task_group, f.created_at, f.last_refreshed_at, f.retry_count,
	   f.next_retry_at, f.last_error,
	   CASE WHEN f.refresh_task_id IS NULL THEN
				CASE WHEN f.refresh_check_at IS NULL THEN 'idle' ELSE 'waiting' END
			WHEN f.refresh_ready THEN 'ready'
			ELSE 'leased' END AS refresh_state,
	   f.refresh_task_id, f.refresh_scheduled_at,
	   CASE WHEN f.refresh_task_id IS NULL THEN f.refresh_check_at END AS next_refresh_at
  FROM silo.floating_limit f
 WHERE silo.tenant_visible(f.tenant);

CREATE OR REPLACE VIEW silo.blocked_jobs WITH (security_barrier) AS
SELECT * FROM (
	SELECT r.tenant, r.job_id, r.task_group, r.attempt, r.limit_index::integer AS limit_index,
		   CASE WHEN r.max_concurrency IS NULL THEN 'floatingConcurrency' ELSE 'concurrency' END AS limit_type,
		   r.queue AS key,
		   (SELECT count(*) FROM silo.concurrency_holder h
			 WHERE h.tenant = r.tenant AND h.queue = r.queue) AS holders,
		   coalesce(r.max_concurrency,
					(SELECT f.current_max FROM silo.floating_limit f
					  WHERE f.tenant = r.tenant AND f.queue = r.queue)) AS max_concurrency,
		   r.requested_at AS waiting_since,
		   NULL::timestamptz AS next_check_at
	  FROM silo.concurrency_request r
	UNION ALL
	SELECT c.tenant, c.job_id, c.task_group, c.attempt, c.limit_index::integer,
		   l ->> 'type',
		   CASE WHEN l ->> 'type' = 'rateLimit' THEN (l ->> 'name') || '/' || (l ->> 'uniqueKey')
				ELSE l ->> 'key' END,
		   NULL::bigint, NULL::integer, c.start_at, c.run_at
	  FROM silo.chain_task c
	  JOIN silo.job_info i ON i.tenant = c.tenant AND i.id = c.job_id
	  CROSS JOIN LATERAL (SELECT i.limits -> c.limit_index::integer AS l) x
	 WHERE (c.run_at <= silo.now() OR c.rate_checks > 0 OR c.limit_index > 0)
) b
 WHERE silo.tenant_visible(b.tenant);

ALTER TABLE silo.job_metadata ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_metadata_tenant ON silo.job_metadata
	FOR SELECT USING (silo.tenant_visible(tenant));

/* ---------------------------------------------------------------------
 * Task group settings: fair dispatch across tenants (docs/api.md, "Fair
 * dispatch")
 * ------------------------------------------------------------------- */

/*
 * One row per task group configured; no row is the default ('none': the
 * ready order).  'round_robin' leases in turns across the tenants with
 * due tasks.  Dumped with the data.
 */
CREATE TABLE silo.task_group_setting (
	task_group	text COLLATE "C" PRIMARY KEY,
	fairness	text COLLATE "C" NOT NULL DEFAULT 'none'
				CHECK (fairness IN ('none', 'round_robin')),
	updated_at	timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('silo.task_group_setting', '');
REVOKE ALL ON silo.task_group_setting FROM PUBLIC;
GRANT SELECT ON silo.task_group_setting TO silo_admin;

/* any change of the settings reaches every session at its commit */
CREATE FUNCTION silo.task_group_setting_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'silo_task_group_setting_changed'
LANGUAGE C;
CREATE TRIGGER task_group_setting_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON silo.task_group_setting
	FOR EACH STATEMENT EXECUTE FUNCTION silo.task_group_setting_changed();

CREATE FUNCTION silo.configure_task_group(task_group text, fairness text)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_configure_task_group'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

CREATE VIEW silo.task_group_settings AS
SELECT task_group, fairness, updated_at FROM silo.task_group_setting;

REVOKE ALL ON FUNCTION silo.configure_task_group(text, text),
	silo.task_group_setting_changed() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.configure_task_group(text, text) TO silo_admin;
REVOKE ALL ON silo.task_group_settings FROM PUBLIC;
GRANT SELECT ON silo.task_group_settings TO silo_admin, silo_producer, silo_worker;

/* ---------------------------------------------------------------------
 * Results without polling: silo.wait_result (docs/api.md)
 * ------------------------------------------------------------------- */

/*
 * A procedure, so that it can commit before it sleeps: a sleeping waiter
 * holds no snapshot and no xid.  PostgreSQL makes a SECURITY DEFINER
 * procedure, and one with SET clauses, atomic (it could not commit), so
 * this one is neither: each look at the job runs as the procedure's owner
 * with search_path pinned to pg_catalog, pg_temp, as a SECURITY DEFINER
 * function's body would (src/core/wait.c).  The result columns are INOUT
 * with defaults because a procedure's OUT parameters cannot follow one
 * with a default; what a call passes for them is ignored.
 */
CREATE PROCEDURE silo.wait_result(job_id text, tenant text DEFAULT '-',
								  timeout interval DEFAULT '30 s',
								  INOUT status text DEFAULT NULL,
								  INOUT result jsonb DEFAULT NULL,
								  INOUT error_code text DEFAULT NULL,
								  INOUT error_data jsonb DEFAULT NULL,
								  INOUT finished_at timestamptz DEFAULT NULL)
AS 'MODULE_PATHNAME', 'silo_wait_result'
LANGUAGE C;

REVOKE ALL ON PROCEDURE silo.wait_result(text, text, interval, text, jsonb, text, jsonb,
										 timestamptz) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE silo.wait_result(text, text, interval, text, jsonb, text, jsonb,
											timestamptz) TO silo_producer, silo_admin;

/* ---------------------------------------------------------------------
 * Moving a shard between nodes (docs/cluster.md, "Moving a shard")
 * ------------------------------------------------------------------- */

/*
 * What this node holds of each shard, as far as moves are concerned: the
 * local half of a move's state (the other half is the move record in
 * etcd).  No row: the node holds nothing of the shard, or rows from
 * before cluster mode, which are the shard's if this node acquires it.
 *
 *   owned      acquired here; the rows are the shard's
 *   sending    the source of a move: a publication of the rows exists
 *   paused     the source, paused; final_lsn holds every change
 *   released   the source, released to the target: rows kept until the
 *              target has acquired, then deleted
 *   receiving  the target: rows arriving by a subscription, incomplete
 *   received   the target: a copy whose setsums matched the source's
 *   stale      rows that are no longer the shard's (an aborted copy, an
 *              ownership lost): deleted when the coordinator gets to it
 *
 * Written only by the functions below, each one statement, so a state and
 * the work it records commit together.  Node-local: not in any
 * publication, not dumped.
 */
CREATE TABLE silo.shard_state (
	shard_id	integer PRIMARY KEY,
	state		text COLLATE "C" NOT NULL
		CHECK (state IN ('owned', 'sending', 'paused', 'released', 'receiving', 'received', 'stale')),
	move_id		bigint NOT NULL DEFAULT 0,	-- the move record's create revision
	peer		text COLLATE "C" NOT NULL DEFAULT '',
	final_lsn	pg_lsn,
	changed_at	timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON silo.shard_state FROM PUBLIC;
GRANT SELECT ON silo.shard_state TO silo_admin;

/* the broker's filter in cluster mode: does this node serve the tenant? */
CREATE FUNCTION silo.shard_served(tenant text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_shard_served'
LANGUAGE C VOLATILE STRICT;

/* a move's pause: wait for the shard's transactions (the coordinator's) */
CREATE FUNCTION silo.shard_drain(shard integer, timeout_ms integer)
RETURNS pg_lsn
AS 'MODULE_PATHNAME', 'silo_shard_drain'
LANGUAGE C VOLATILE STRICT;

/* lease marks, the refresh hint and the broker, after rows arrived */
CREATE FUNCTION silo.shard_forget_hints()
RETURNS void
AS 'MODULE_PATHNAME', 'silo_shard_forget_hints'
LANGUAGE C VOLATILE;

/* the tables whose rows belong to shards and move with them: a list, each
 * keyed by tenant.  Any other table of silo's stays on its node: the
 * configuration (tenant_grant, task_group_setting), per-node state
 * (shard_state, schedule), and any table added later until it is listed
 * here (docs/cluster.md, "What moves") */
CREATE FUNCTION silo.shard_tables()
RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT c.oid::regclass FROM pg_class c
 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
   AND c.relname IN ('attempt', 'chain_task', 'concurrency_holder', 'concurrency_regrant',
					 'concurrency_request', 'floating_limit', 'job_cancellation', 'job_info',
					 'job_metadata', 'job_status', 'job_status_index', 'rate_limit_bucket',
					 'task', 'task_lease')
 ORDER BY c.relname
$$;

/* a shard table's columns but the row hints (tid), which point nowhere on
 * another node: they are not published (they arrive NULL) nor summed */
CREATE FUNCTION silo.shard_columns(tbl regclass)
RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute a
 WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped
   AND a.atttypid <> 'tid'::regtype
$$;

/* the rows of the hash range [lo, hi) (hi NULL: up to 2^63), as SQL */
CREATE FUNCTION silo.shard_filter(lo bigint, hi bigint)
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT concat_ws(' AND ',
				 format('pg_catalog.hashtextextended(tenant, 0) >= %L::bigint', lo),
				 CASE WHEN hi IS NOT NULL
					  THEN format('pg_catalog.hashtextextended(tenant, 0) < %L::bigint', hi) END)
$$;

/* one upsert of this node's state of a shard */
CREATE FUNCTION silo.shard_state_set(shard integer, new_state text, move bigint, peer_node text,
									 lsn pg_lsn)
RETURNS text
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$
INSERT INTO silo.shard_state (shard_id, state, move_id, peer, final_lsn)
VALUES (shard, new_state, move, peer_node, lsn)
ON CONFLICT (shard_id) DO UPDATE
   SET state = excluded.state, move_id = excluded.move_id, peer = excluded.peer,
	   final_lsn = excluded.final_lsn, changed_at = pg_catalog.now()
RETURNING state
$$;

/*
 * The setsum of every shard table's rows of a range, table by table, as
 * one text "table:rows:setsum;..." in table order, computed with fixed
 * output settings so that two nodes compare like with like.
 */
CREATE FUNCTION silo.shard_setsums(lo bigint, hi bigint)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp SET "TimeZone" = 'UTC' SET "DateStyle" = 'ISO, YMD'
SET "IntervalStyle" = 'postgres' SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $$
DECLARE
	t regclass;
	part text;
	result text := '';
BEGIN
	FOR t IN SELECT * FROM silo.shard_tables() LOOP
		EXECUTE format('SELECT count(*) || %L || silo.setsum(ROW(%s)::text) FROM %s WHERE %s',
					   ':', silo.shard_columns(t), t, silo.shard_filter(lo, hi))
		   INTO part;
		result := result || CASE WHEN result = '' THEN '' ELSE ';' END
				  || (SELECT c.relname FROM pg_class c WHERE c.oid = t) || ':' || part;
	END LOOP;
	RETURN result;
END
$$;

/* delete a range's rows from every shard table (no publication of this
 * node covers them: the source drops its move's first) */
CREATE FUNCTION silo.shard_delete_rows(lo bigint, hi bigint)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	t regclass;
	n bigint;
	total bigint := 0;
BEGIN
	FOR t IN SELECT * FROM silo.shard_tables() LOOP
		EXECUTE format('DELETE FROM %s WHERE %s', t, silo.shard_filter(lo, hi));
		GET DIAGNOSTICS n = ROW_COUNT;
		total := total + n;
	END LOOP;
	RETURN total;
END
$$;

/* the source: publish the shard's rows for the move (a publication named
 * silo_move_<shard>, row-filtered, no TRUNCATE, no row hints) */
CREATE FUNCTION silo.move_source_prepare(shard integer, move bigint, peer_node text, lo bigint,
										 hi bigint)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	pub text := format('silo_move_%s', shard);
BEGIN
	IF EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = pub) THEN
		EXECUTE format('DROP PUBLICATION %I', pub);
	END IF;
	EXECUTE (SELECT format('CREATE PUBLICATION %I FOR ', pub)
					|| string_agg(format('TABLE %s (%s) WHERE (%s)', t, silo.shard_columns(t),
										 silo.shard_filter(lo, hi)), ', ')
					|| ' WITH (publish = ''insert, update, delete'')'
			   FROM silo.shard_tables() t);
	RETURN silo.shard_state_set(shard, 'sending', move, peer_node, NULL);
END
$$;

/*
 * The source, once the move is over either way: drop the publication and
 * the move's replication slots (a subscriber still connected is cut off
 * first; 'retry' while one is still active).  Then, with keep_rows, the
 * shard is this node's again ('owned'); without, its rows are deleted and
 * the state forgotten: the target has them.
 */
CREATE FUNCTION silo.move_source_cleanup(shard integer, lo bigint, hi bigint, keep_rows boolean)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	pub text := format('silo_move_%s', shard);
	prefix text := format('silo_move_%s_', shard);
	slot record;
BEGIN
	IF EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = pub) THEN
		EXECUTE format('DROP PUBLICATION %I', pub);
	END IF;
	FOR slot IN SELECT s.slot_name, s.active, s.active_pid FROM pg_replication_slots s
				 WHERE left(s.slot_name::text, length(prefix)) = prefix LOOP
		IF slot.active THEN
			PERFORM pg_terminate_backend(slot.active_pid);
			RETURN 'retry';
		END IF;
		PERFORM pg_drop_replication_slot(slot.slot_name);
	END LOOP;
	IF keep_rows THEN
		RETURN silo.shard_state_set(shard, 'owned', 0, '', NULL);
	END IF;
	PERFORM silo.shard_delete_rows(lo, hi);
	DELETE FROM silo.shard_state s WHERE s.shard_id = shard;
	RETURN 'gone';
END
$$;

/* the target, before it subscribes: its rows of the range go (whatever an
 * old move left), and it is receiving */
CREATE FUNCTION silo.move_target_prepare(shard integer, move bigint, peer_node text, lo bigint,
										 hi bigint)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM silo.shard_delete_rows(lo, hi);
	RETURN silo.shard_state_set(shard, 'receiving', move, peer_node, NULL);
END
$$;

/* the target's subscription, as one word: none, copying, ready (every
 * table copied and streaming), or errors:<n> */
CREATE FUNCTION silo.move_target_progress(shard integer)
RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN s.oid IS NULL THEN 'none'
			WHEN coalesce(st.apply_error_count + st.sync_error_count, 0) >= 30
				THEN 'errors:' || (st.apply_error_count + st.sync_error_count)
			WHEN (SELECT count(*) FROM pg_subscription_rel r
				   WHERE r.srsubid = s.oid AND r.srsubstate = 'r')
				 = (SELECT count(*) FROM silo.shard_tables()) THEN 'ready'
			ELSE 'copying' END
  FROM (SELECT format('silo_move_%s', shard) AS name) n
  LEFT JOIN pg_subscription s ON s.subname = n.name AND s.subdbid = (
		SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
  LEFT JOIN pg_stat_subscription_stats st ON st.subid = s.oid
$$;

/*
 * The target, having acquired the shard: node-local state catches up with
 * the rows that arrived.  Enqueue order continues past every seq received
 * (sequences do not replicate), lease marks and hints are dropped, and
 * workers of the groups with due tasks are woken.  Then the shard is
 * 'owned'.
 */
CREATE FUNCTION silo.move_target_acquired(shard integer, lo bigint, hi bigint)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	f text := silo.shard_filter(lo, hi);
	top bigint;
	g text;
BEGIN
	EXECUTE format('SELECT greatest((SELECT max(seq) FROM silo.job_info WHERE %1$s),'
				   ' (SELECT max(seq) FROM silo.task WHERE %1$s),'
				   ' (SELECT max(seq) FROM silo.task_lease WHERE %1$s),'
				   ' (SELECT max(seq) FROM silo.chain_task WHERE %1$s),'
				   ' (SELECT max(seq) FROM silo.concurrency_request WHERE %1$s))', f)
	   INTO top;
	/* forward only: setval only past a value this call took itself, so that
	 * another session's nextval meanwhile is not handed out again (unless
	 * it took more than top minus that value in between) */
	IF top IS NOT NULL AND top > nextval('silo.job_seq') THEN
		PERFORM setval('silo.job_seq', top);
	END IF;
	PERFORM silo.shard_forget_hints();
	FOR g IN EXECUTE format('SELECT DISTINCT task_group FROM silo.task WHERE due AND %s', f) LOOP
		PERFORM pg_notify('silo_task_ready', g);
	END LOOP;
	RETURN silo.shard_state_set(shard, 'owned', 0, '', NULL);
END
$$;

/* rows that are not the shard's (an aborted copy, a lost ownership) go */
CREATE FUNCTION silo.shard_wipe(shard integer, lo bigint, hi bigint)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM silo.shard_delete_rows(lo, hi);
	DELETE FROM silo.shard_state s WHERE s.shard_id = shard;
	RETURN 'gone';
END
$$;

REVOKE ALL ON FUNCTION silo.shard_served(text), silo.shard_drain(integer, integer),
	silo.shard_forget_hints(), silo.shard_tables(), silo.shard_columns(regclass),
	silo.shard_filter(bigint, bigint),
	silo.shard_state_set(integer, text, bigint, text, pg_lsn), silo.shard_setsums(bigint, bigint),
	silo.shard_delete_rows(bigint, bigint),
	silo.move_source_prepare(integer, bigint, text, bigint, bigint),
	silo.move_source_cleanup(integer, bigint, bigint, boolean),
	silo.move_target_prepare(integer, bigint, text, bigint, bigint),
	silo.move_target_progress(integer), silo.move_target_acquired(integer, bigint, bigint),
	silo.shard_wipe(integer, bigint, bigint) FROM PUBLIC;

/*
 * A worker's heartbeat and reports name the tenant of the task they answer
 * (optional, as Silo's worker RPCs carry tenant_id): in cluster mode a node
 * that no longer holds the lease row, because the task's shard moved, can
 * then answer SL020 with the new owner instead of SL001, and the worker
 * follows the hint.  A new trailing argument with a default: the old
 * signatures are dropped so that calls without it are not ambiguous.
 */
DROP FUNCTION silo.heartbeat(uuid, text, integer);
CREATE FUNCTION silo.heartbeat(task_id uuid, worker_id text, lease_ms integer DEFAULT 10000,
							   tenant text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_heartbeat'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

DROP FUNCTION silo.complete(uuid, text, jsonb);
CREATE FUNCTION silo.complete(task_id uuid, worker_id text, result jsonb DEFAULT NULL,
							  tenant text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_complete'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

DROP FUNCTION silo.fail(uuid, text, text, jsonb);
CREATE FUNCTION silo.fail(task_id uuid, worker_id text, error_code text,
						  error_data jsonb DEFAULT NULL, tenant text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_fail'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

DROP FUNCTION silo.ack_cancel(uuid, text);
CREATE FUNCTION silo.ack_cancel(task_id uuid, worker_id text, tenant text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_ack_cancel'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

DROP FUNCTION silo.release(uuid, text);
CREATE FUNCTION silo.release(task_id uuid, worker_id text, tenant text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_release'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

DROP FUNCTION silo.report_refresh(uuid, text, integer);
CREATE FUNCTION silo.report_refresh(task_id uuid, worker_id text, new_max_concurrency integer,
									tenant text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_report_refresh'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

DROP FUNCTION silo.fail_refresh(uuid, text, text);
CREATE FUNCTION silo.fail_refresh(task_id uuid, worker_id text, error text,
								  tenant text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_fail_refresh'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

REVOKE ALL ON FUNCTION silo.heartbeat(uuid, text, integer, text),
	silo.complete(uuid, text, jsonb, text), silo.fail(uuid, text, text, jsonb, text),
	silo.ack_cancel(uuid, text, text), silo.release(uuid, text, text),
	silo.report_refresh(uuid, text, integer, text), silo.fail_refresh(uuid, text, text, text)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.heartbeat(uuid, text, integer, text),
	silo.complete(uuid, text, jsonb, text), silo.fail(uuid, text, text, jsonb, text),
	silo.ack_cancel(uuid, text, text), silo.release(uuid, text, text),
	silo.report_refresh(uuid, text, integer, text), silo.fail_refresh(uuid, text, text, text)
	TO silo_worker, silo_admin;

/* ---------------------------------------------------------------------
 * Recurring jobs (docs/api.md, "Recurring jobs")
 * ------------------------------------------------------------------- */

/*
 * One row per schedule, keyed by (tenant, name).  pg_cron runs each as
 * the job "silo-schedule-<schedule_id>" whose command is
 * "SELECT silo.fire_schedule(<schedule_id>)": a number, never user text
 * (docs/security.md).  A firing enqueues the job 'cron:<name>:<minute>'.
 * Dumped with the data, the id sequence too; the broker makes pg_cron's
 * jobs match the rows (silo.sync_schedules).
 */
CREATE SEQUENCE silo.schedule_id_seq;
CREATE TABLE silo.schedule (
	tenant		text COLLATE "C" NOT NULL,
	name		text COLLATE "C" NOT NULL,
	schedule_id bigint NOT NULL UNIQUE DEFAULT nextval('silo.schedule_id_seq'),
	cron		text COLLATE "C" NOT NULL,
	task_group	text COLLATE "C" NOT NULL,
	payload		jsonb NOT NULL,
	priority	integer NOT NULL,
	retry_policy jsonb,
	limits		jsonb NOT NULL,
	metadata	jsonb NOT NULL,
	skip_if_live boolean NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT now(),
	updated_at	timestamptz NOT NULL DEFAULT now(),
	last_fired_at timestamptz,
	last_job_id text COLLATE "C",
	PRIMARY KEY (tenant, name)
);
ALTER SEQUENCE silo.schedule_id_seq OWNED BY silo.schedule.schedule_id;
SELECT pg_catalog.pg_extension_config_dump('silo.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('silo.schedule_id_seq', '');
REVOKE ALL ON silo.schedule, silo.schedule_id_seq FROM PUBLIC;
GRANT SELECT ON silo.schedule TO silo_admin;

CREATE FUNCTION silo.schedule(name text, cron text, task_group text,
							  payload jsonb DEFAULT '{}',
							  tenant text DEFAULT '-',
							  priority integer DEFAULT 50,
							  retry_policy jsonb DEFAULT NULL,
							  limits jsonb DEFAULT '[]',
							  metadata jsonb DEFAULT '{}',
							  skip_if_live boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'silo_schedule'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

CREATE FUNCTION silo.unschedule(name text, tenant text DEFAULT '-')
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_unschedule'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

/* what pg_cron runs: a firing of one schedule, named by its number */
CREATE FUNCTION silo.fire_schedule(schedule_id bigint, scheduled_at timestamptz DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_fire_schedule'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

/* pg_cron's jobs made to match silo.schedule (the broker calls it) */
CREATE FUNCTION silo.sync_schedules()
RETURNS bigint
AS 'MODULE_PATHNAME', 'silo_sync_schedules'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

/* the first minute after `after` a cron expression matches (GMT) */
CREATE FUNCTION silo.cron_next(cron text, after timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'silo_cron_next_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

/* filtered by tenant, as the other producer views */
CREATE VIEW silo.schedules WITH (security_barrier) AS
SELECT s.tenant, s.name, s.schedule_id, s.cron, s.task_group, s.payload, s.priority,
	   s.skip_if_live, s.created_at, s.updated_at,
	   silo.cron_next(s.cron, silo.now()) AS next_firing,
	   s.last_fired_at AS last_firing, s.last_job_id,
	   (SELECT j.status FROM silo.jobs j
		 WHERE j.tenant = s.tenant AND j.id = s.last_job_id) AS last_job_status,
	   EXISTS (SELECT 1 FROM cron.job c
				WHERE c.jobname = 'silo-schedule-' || s.schedule_id AND c.active) AS cron_job
  FROM silo.schedule s
 WHERE silo.tenant_visible(s.tenant);

REVOKE ALL ON FUNCTION silo.schedule(text, text, text, jsonb, text, integer, jsonb, jsonb, jsonb,
									 boolean),
	silo.unschedule(text, text), silo.fire_schedule(bigint, timestamptz),
	silo.sync_schedules(), silo.cron_next(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.schedule(text, text, text, jsonb, text, integer, jsonb, jsonb, jsonb,
										boolean),
	silo.unschedule(text, text) TO silo_producer, silo_admin;
GRANT EXECUTE ON FUNCTION silo.fire_schedule(bigint, timestamptz), silo.sync_schedules()
	TO silo_admin;
GRANT EXECUTE ON FUNCTION silo.cron_next(text, timestamptz) TO silo_producer, silo_admin;
REVOKE ALL ON silo.schedules FROM PUBLIC;
GRANT SELECT ON silo.schedules TO silo_producer, silo_admin;

/*
 * The source's sweep of replication slots no move needs (docs/cluster.md,
 * "Leftover slots"): a subscription created after its move had given up,
 * or a table synchronization cut off by an abort, leaves a slot here that
 * its subscriber never drops (it drops its subscription with slot_name =
 * NONE).  Drops the inactive logical slots of this database named
 * silo_move_... but not in keep and, with sync, the inactive pgoutput
 * slots of this database named pg_<oid>_sync_<oid>_<system id>.  Returns
 * how many it dropped.
 */
CREATE FUNCTION silo.move_source_sweep(keep text[], sync boolean)
RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	slot text;
	n integer := 0;
BEGIN
	FOR slot IN SELECT s.slot_name FROM pg_replication_slots s
				 WHERE s.slot_type = 'logical' AND NOT s.active
				   AND s.database = current_database()
				   AND ((left(s.slot_name::text, 10) = 'silo_move_'
						 AND s.slot_name::text <> ALL (keep))
						OR (sync AND s.plugin = 'pgoutput'
							AND s.slot_name::text ~ '^pg_[0-9]+_sync_[0-9]+_[0-9]+$')) LOOP
		PERFORM pg_drop_replication_slot(slot);
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;
REVOKE ALL ON FUNCTION silo.move_source_sweep(text[], boolean) FROM PUBLIC;
