
# 023_cluster_standby.pl: a node's high availability is PostgreSQL's own
# (docs/cluster.md, "A node and its standby"): a physical standby of a
# cluster node, promoted with the same silo.node_id after the primary's
# kill -9, reclaims the node's shards and serves them with every row the
# primary had committed.
#
#  1. the primary owns and serves every shard, with jobs pending, running
#     (leases) and finished in many tenants; a streaming standby catches up;
#  2. the standby, in recovery, serves nothing (its coordinator does not run
#     there) while the primary lives;
#  3. kill -9 of the primary, then promotion of the standby: it registers
#     under the same node id once the primary's member key has expired,
#     serves every shard, advertises its own conninfo, and has every job;
#     a lease taken on the primary completes on it, and new work runs.
#
# Every process is started and stopped by pid (SiloEtcd.pm, SiloTest.pm).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloEtcd;
use SiloTest;
use Test::More;

my $ttl = 3;    # silo.lease_ttl_s

ok(defined etcd_binary(), 'etcd is installed')
  or BAIL_OUT('etcd not found: tools/ensure-deps.sh installs etcd-server');
my $etcd = etcd_start(name => 'c23_');
my $endpoints = etcd_endpoints($etcd);

# cluster_conf(NODE): the cluster settings of node id n1 advertising NODE.
sub cluster_conf
{
	my ($node) = @_;
	my $conninfo = sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
	return qq{
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
max_worker_processes = 16
lc_messages = 'C'
wal_level = logical
silo.etcd_endpoints = '$endpoints'
silo.node_id = 'n1'
silo.cluster_prefix = 'c23'
silo.advertise_conninfo = '$conninfo'
silo.lease_ttl_s = $ttl
silo.initial_shard_count = 8
};
}

# ---------------------------------------------------------------------------
# 1. the primary, with jobs, and its standby
# ---------------------------------------------------------------------------
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', cluster_conf($primary));
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION silo CASCADE');
ok(poll_until($primary, q{SELECT cardinality(serving_shards) FROM silo.node_info}, '8', 30),
	'the primary serves every shard');

# 300 jobs in 30 tenants: 100 finished, 50 running (10-minute leases),
# 150 pending
$primary->safe_psql('postgres', q{
SELECT count(silo.enqueue('g', jsonb_build_object('i', i), tenant => 't' || (i % 30),
                          id => 'j' || i))
  FROM generate_series(1, 300) i;
CREATE TABLE held AS SELECT task_id, tenant, job_id FROM silo.lease('w', 'g', 150, 600000);
SELECT count(*) FROM silo.complete_many(
	(SELECT array_agg(task_id) FROM (SELECT task_id FROM held ORDER BY job_id LIMIT 100) h), 'w');
DELETE FROM held WHERE task_id NOT IN (SELECT task_id FROM silo.task_lease);
});
my $before = $primary->safe_psql('postgres',
	q{SELECT status || '=' || count(*) FROM silo.jobs GROUP BY status ORDER BY status});
is($before, "Running=50\nSucceeded=100\nWaiting=150", 'jobs finished, running and waiting');

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf',
	sprintf("silo.advertise_conninfo = 'host=%s port=%d dbname=postgres'\n",
		$standby->host, $standby->port));
$standby->start;
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));

# ---------------------------------------------------------------------------
# 2. in recovery the standby serves nothing
# ---------------------------------------------------------------------------
is( $standby->safe_psql('postgres',
		q{SELECT coalesce(cardinality(serving_shards), 0) FROM silo.node_info}),
	'0', 'the standby in recovery serves no shard');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM silo.job_info}),
	'300', 'the standby has every job');
my $advertised = $primary->safe_psql('postgres',
	q{SELECT DISTINCT owner_conninfo FROM silo.cluster_info});
like($advertised, qr/port=${\ $primary->port }\b/, 'the shards are advertised at the primary');

# ---------------------------------------------------------------------------
# 3. kill -9 of the primary; the promoted standby takes over as n1
# ---------------------------------------------------------------------------
$primary->kill9;
$standby->promote;
ok(poll_until($standby, q{SELECT cardinality(serving_shards) FROM silo.node_info}, '8', 60),
	'the promoted standby serves every shard of n1');
is( $standby->safe_psql('postgres',
		q{SELECT string_agg(DISTINCT owner_node_id || ' ' || owner_conninfo, '; ') FROM silo.cluster_info}),
	sprintf('n1 host=%s port=%d dbname=postgres', $standby->host, $standby->port),
	'... under the same node id, advertising its own conninfo');
is( $standby->safe_psql('postgres',
		q{SELECT status || '=' || count(*) FROM silo.jobs GROUP BY status ORDER BY status}),
	$before, '... with every job the primary had committed');

# a lease taken on the primary completes on the standby, with its tenant
my $done = $standby->safe_psql('postgres', q{
SELECT count(*) FROM held h, LATERAL (SELECT silo.complete(h.task_id, 'w', tenant => h.tenant)) c;
});
is($done, '50', 'the leases taken on the primary complete on the promoted standby');

# and new work runs
is( $standby->safe_psql('postgres', q{
SELECT count(silo.enqueue('g', '{}', tenant => 't' || i, id => 'after' || i)) FROM generate_series(1, 20) i;
SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'g', 500)), 'w');
}),
	"20\n170", 'new jobs enqueue, and every waiting job leases and completes');
is( $standby->safe_psql('postgres',
		q{SELECT status || '=' || count(*) FROM silo.jobs GROUP BY status ORDER BY status}),
	'Succeeded=320', 'every job succeeded once');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM silo.attempts GROUP BY job_id HAVING count(*) > 1}),
	'', 'no job ran twice');

$standby->stop;
etcd_stop($etcd);
done_testing();
