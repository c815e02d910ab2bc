--
-- cluster: the SQL surface of cluster mode as every node answers it, here
-- in single-node mode (silo.etcd_endpoints empty): the tenant hash and its
-- test vectors (docs/cluster.md), one local shard over the whole range,
-- and this node.
--
SELECT test_helpers.reset();

-- the hash is PostgreSQL's hashtextextended(tenant, 0): test vectors that
-- every client's implementation must match
SELECT tenant, silo.tenant_hash(tenant) AS hash,
       silo.tenant_hash(tenant) = hashtextextended(tenant, 0) AS is_hashtextextended
  FROM unnest(ARRAY['-', 'acme', 'Acme', 'tenant-1', 'ünïcødé', '😀',
                    repeat('x', 64), '']) AS tenant;

-- the shard of n: [-2^63 + floor(i * 2^64 / n), -2^63 + floor((i+1) * 2^64 / n)),
-- the last ending at 2^63; here (one shard) every tenant is in shard 0
SELECT silo.shard_for_tenant('acme') AS acme, silo.shard_for_tenant('-') AS dash;
SELECT shard_id, range_start, range_end, state, is_local FROM silo.cluster_info;
SELECT range_end - range_start = 2::numeric ^ 64 AS whole_line FROM silo.cluster_info;

-- this node
SELECT node_id, mode, membership, owned_shards, serving_shards FROM silo.node_info;

-- bad input
SELECT test_helpers.sqlstate_of($$SELECT silo.shard_for_tenant(NULL)$$) AS null_tenant,
       test_helpers.sqlstate_of($$SELECT silo.shard_for_tenant('')$$) AS empty_tenant,
       silo.tenant_hash(NULL) IS NULL AS hash_of_null;

-- every call that names a tenant passes the ownership check here
SELECT silo.enqueue('cluster', tenant => 'acme', id => 'c1');
SELECT count(*) AS leased FROM silo.complete_many(
    (SELECT array_agg(task_id) FROM silo.lease('w', 'cluster')), 'w');
SELECT id, status FROM silo.jobs WHERE tenant = 'acme';
