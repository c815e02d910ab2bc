-- clients/test-stub.sql: a stand-in cluster member for the client libraries'
-- cluster tests (clients/node/test/cluster.test.mjs,
-- clients/python/test/test_cluster.py).  Run in a database of its own on the
-- test server, after replacing the placeholder (REAL between at signs, in
-- the INSERT below) with a quoted conninfo literal of the real silo node
-- (the test database).
--
-- Its schema "silo" is hand-made: silo.cluster_info and silo.node_info read
-- tables the tests change (node "stub", cluster mode, 8 shards), and every
-- entry point that names a tenant raises SL020 naming the real node -- or
-- SL021 while silo.stub_conf.unavailable > nextval of silo.stub_calls --
-- the way a node raises them for a shard it does not serve.  silo.lease
-- leases from the real node through dblink, so that a worker's heartbeats
-- and reports of those tasks come here first and must follow the SL020.
-- complete_many completes nothing here (a task whose lease is elsewhere).

CREATE EXTENSION dblink;
CREATE SCHEMA silo;

CREATE TABLE silo.stub_conf (real text NOT NULL, real_node text NOT NULL, unavailable bigint NOT NULL DEFAULT 0);
INSERT INTO silo.stub_conf VALUES (@REAL@, 'real');
CREATE SEQUENCE silo.stub_calls;
CREATE SEQUENCE silo.stub_leased;		-- tasks leased through the stub

CREATE TABLE silo.stub_map (shard_id integer PRIMARY KEY, range_start numeric(20, 0), range_end numeric(20, 0),
							owner_node_id text, owner_conninfo text, state text, is_local boolean);
-- shard i of 8: [-2^63 + i * 2^61, -2^63 + (i + 1) * 2^61), all the stub's
INSERT INTO silo.stub_map
SELECT i, -(2::numeric ^ 63) + i * (2::numeric ^ 61), -(2::numeric ^ 63) + (i + 1) * (2::numeric ^ 61),
	   'stub', 'host=stub.invalid', 'serving', true
FROM generate_series(0, 7) AS i;

CREATE VIEW silo.cluster_info AS SELECT * FROM silo.stub_map;
CREATE VIEW silo.node_info AS
SELECT 'stub'::text AS node_id, 'cluster'::text AS mode, 'alive'::text AS membership,
	   '{}'::integer[] AS owned_shards, '{}'::integer[] AS serving_shards;
CREATE VIEW silo.jobs AS SELECT NULL::text AS tenant, NULL::text AS id WHERE false;

CREATE FUNCTION silo.tenant_hash(tenant text) RETURNS bigint
LANGUAGE sql AS $$ SELECT hashtextextended(tenant, 0) $$;

CREATE FUNCTION silo.shard_for_tenant(tenant text) RETURNS integer
LANGUAGE sql AS $$
	SELECT shard_id FROM silo.stub_map
	WHERE hashtextextended(tenant, 0) >= range_start AND hashtextextended(tenant, 0) < range_end
$$;

-- the answer of a node that does not serve the tenant's shard
CREATE FUNCTION silo.stub_refuse(tenant text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	c silo.stub_conf;
BEGIN
	SELECT * INTO c FROM silo.stub_conf;
	IF tenant IS NULL THEN
		RAISE EXCEPTION 'lease not found' USING ERRCODE = 'SL001';
	END IF;
	IF nextval('silo.stub_calls') <= c.unavailable THEN
		RAISE EXCEPTION 'shard % of tenant "%" is unavailable', silo.shard_for_tenant(tenant), tenant
			USING ERRCODE = 'SL021';
	END IF;
	RAISE EXCEPTION 'shard % of tenant "%" is not served by this node', silo.shard_for_tenant(tenant), tenant
		USING ERRCODE = 'SL020',
			  DETAIL = json_build_object('shard', silo.shard_for_tenant(tenant),
										 'owner_node_id', c.real_node, 'owner_conninfo', c.real)::text;
END
$$;

CREATE FUNCTION silo.enqueue(task_group text, payload jsonb DEFAULT '{}', tenant text DEFAULT '-',
							 id text DEFAULT NULL, priority integer DEFAULT 50, start_at timestamptz DEFAULT now(),
							 retry_policy jsonb DEFAULT NULL, limits jsonb DEFAULT '[]', metadata jsonb DEFAULT '{}',
							 on_conflict text DEFAULT 'error') RETURNS text
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); RETURN NULL; END $$;

CREATE FUNCTION silo.enqueue_many(jobs jsonb) RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM silo.stub_refuse(coalesce(jobs -> 0 ->> 'tenant', '-'));
END
$$;

CREATE FUNCTION silo.cancel(job_id text, tenant text DEFAULT '-') RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.restart(job_id text, tenant text DEFAULT '-') RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.expedite(job_id text, tenant text DEFAULT '-') RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.delete_job(job_id text, tenant text DEFAULT '-') RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); RETURN false; END $$;
CREATE FUNCTION silo.job_result(job_id text, tenant text DEFAULT '-',
								OUT status text, OUT result jsonb, OUT error_code text,
								OUT error_data jsonb, OUT finished_at timestamptz) RETURNS SETOF record
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;

-- the worker's side: leases come from the real node, reports must go there.
-- silo.lease returns the real node's silo.leased_task columns, whatever its
-- version has (read from it when the stub is made).
DO $stub$
DECLARE
	cols text;
	names text;
BEGIN
	SELECT c, n INTO cols, names
	FROM dblink((SELECT real FROM silo.stub_conf),
		$q$SELECT string_agg(quote_ident(attname) || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum),
				  string_agg(quote_ident(attname), ', ' ORDER BY attnum)
		   FROM pg_attribute WHERE attrelid = 'silo.leased_task'::regclass AND attnum > 0 AND NOT attisdropped$q$)
		AS t(c text, n text);
	EXECUTE format($f$
		CREATE FUNCTION silo.lease(worker_id text, task_group text, max_tasks integer DEFAULT 1,
								   lease_ms integer DEFAULT 10000, tenants text[] DEFAULT NULL)
		RETURNS TABLE (%1$s)
		LANGUAGE sql AS $body$
			SELECT * FROM dblink((SELECT real FROM silo.stub_conf),
				format('SELECT %2$s FROM silo.lease(%%L, %%L, %%s, %%s, %%L::text[])',
					   worker_id, task_group, max_tasks, lease_ms, tenants)) AS t(%1$s)
			WHERE nextval('silo.stub_leased') > 0
		$body$$f$, cols, names);
END
$stub$;

CREATE FUNCTION silo.heartbeat(task_id uuid, worker_id text, lease_ms integer DEFAULT 10000,
							   tenant text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); RETURN false; END $$;
CREATE FUNCTION silo.complete(task_id uuid, worker_id text, result jsonb DEFAULT NULL,
							  tenant text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.complete_many(task_ids uuid[], worker_id text, results jsonb[] DEFAULT NULL)
RETURNS SETOF uuid
LANGUAGE sql AS $$ SELECT NULL::uuid WHERE false $$;
CREATE FUNCTION silo.fail(task_id uuid, worker_id text, error_code text, error_data jsonb DEFAULT NULL,
						  tenant text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.ack_cancel(task_id uuid, worker_id text, tenant text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.release(task_id uuid, worker_id text, tenant text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.report_refresh(task_id uuid, worker_id text, new_max_concurrency integer,
									tenant text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
CREATE FUNCTION silo.fail_refresh(task_id uuid, worker_id text, error text, tenant text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM silo.stub_refuse(tenant); END $$;
