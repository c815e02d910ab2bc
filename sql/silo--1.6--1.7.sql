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
