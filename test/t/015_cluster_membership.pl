
# 015_cluster_membership.pl: the coordinator (src/coordinator/) against a
# real 3-member etcd: membership, the shard map, placement, ownership and
# self-fencing (docs/cluster.md).  No rows move between nodes yet.
#
#  1. one node in cluster mode registers, creates the map, owns and serves
#     every shard; work runs for several tenants;
#  2. a second node joins and serves nothing it does not own: a call there
#     gets SL020 naming node 1 and its conninfo, and the same call sent to
#     that conninfo succeeds; a third server with node 2's node_id does not
#     register and serves nothing;
#  3. kill -9 of node 1's postmaster: its member key expires after the TTL,
#     node 2 acquires nothing (ownership is permanent) and answers SL021
#     for its shards (their owner is not a member), SL020 again once it is;
#     node 1 restarted re-stamps its shards, serves again and still has the
#     job enqueued before the crash;
#  4. self-fencing: node 1's coordinator SIGSTOPped: calls on node 1 get
#     SL021 within TTL - 0.5 s, at least 0.5 s before etcd expires the
#     member key; an operator force-releases one of its shards meanwhile and
#     node 2 takes it; SIGCONT: node 1 registers again and serves its other
#     shards, not that one;
#  5. an operator revokes node 1's lease, then deletes its member key under
#     a live lease: each time node 1 gives the membership up and registers
#     again;
#  6. the etcd leader killed alone: a new leader is elected, no shard is
#     ever served by both nodes, and both serve their shards again;
#     then quorum loss (the leader and a follower killed): SL021 within the
#     TTL; serving again once the members are back;
#  7. force release: refused while the owner's member key exists; after a
#     clean stop of node 1 (its member key revoked, its owner keys kept) it
#     succeeds and node 2 acquires and serves that shard;
#  8. two fresh nodes on a new prefix racing from the same moment (etcd
#     paused while they start): one map, every shard exactly one owner,
#     together they serve every shard.
#
# Every process is started and stopped by pid (SiloEtcd.pm, SiloTest.pm).

use strict;
use warnings FATAL => 'all';

use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use MIME::Base64;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloEtcd;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $ttl = 3;              # silo.lease_ttl_s
my $margin_floor = 0.5;   # the smallest self-fencing margin (docs/cluster.md)
my $t_start = time();
my %measured;

ok(defined etcd_binary(), 'etcd is installed')
  or BAIL_OUT('etcd not found: tools/ensure-deps.sh installs etcd-server');

my @etcd = etcd_cluster_start(3, name => 'c15_');
my $endpoints = etcd_endpoints(@etcd);
my $http = HTTP::Tiny->new(timeout => 2);

# ---------------------------------------------------------------------------
# etcd through its JSON gateway
# ---------------------------------------------------------------------------

# gw(PATH, BODY): POST to the first member that answers; the decoded answer.
sub gw
{
	my ($path, $body) = @_;
	for my $m (@etcd)
	{
		next unless etcd_alive($m) && !$m->{paused};
		my $r = $http->post("$m->{client_url}/v3/$path",
			{ content => encode_json($body), headers => { 'Content-Type' => 'application/json' } });
		return decode_json($r->{content}) if $r->{success};
	}
	return undef;
}

sub b64 { return encode_base64($_[0], ''); }

# decode_kv(KV): a kv with key and value decoded.
sub decode_kv
{
	my ($kv) = @_;
	$kv->{key} = decode_base64($kv->{key});
	$kv->{value} = decode_base64($kv->{value} // '');
	return $kv;
}

# etcd_get(KEY): the kv, or undef when absent (dies when etcd does not answer).
sub etcd_get
{
	my ($key) = @_;
	my $r = gw('kv/range', { key => b64($key) }) // die "etcd did not answer";
	return $r->{kvs} ? decode_kv($r->{kvs}[0]) : undef;
}

# etcd_list(PREFIX): every kv under PREFIX.
sub etcd_list
{
	my ($prefix) = @_;
	my $end = substr($prefix, 0, -1) . chr(ord(substr($prefix, -1)) + 1);
	my $r = gw('kv/range', { key => b64($prefix), range_end => b64($end) })
	  // die "etcd did not answer";
	return map { decode_kv($_) } @{ $r->{kvs} // [] };
}

# force_release(PREFIX, SHARD): the operator's txn: delete the shard's owner
# key only while the owner's member key is absent.  1 when it deleted.
sub force_release
{
	my ($prefix, $shard) = @_;
	my $okey = "$prefix/coord/shards/$shard/owner";
	my $owner = etcd_get($okey) // return 0;
	my $node = decode_json($owner->{value})->{node_id};
	my $r = gw(
		'kv/txn',
		{
			compare => [
				{
					key => b64("$prefix/coord/members/$node"),
					target => 'CREATE',
					result => 'EQUAL',
					create_revision => '0'
				},
				{
					key => b64($okey),
					target => 'MOD',
					result => 'EQUAL',
					mod_revision => "$owner->{mod_revision}"
				},
			],
			success => [ { request_delete_range => { key => b64($okey) } } ],
		}) // die "etcd did not answer";
	return $r->{succeeded} ? 1 : 0;
}

# leader(): the member the answering members name as leader, or undef.
sub leader
{
	my (%id, $leader);
	for my $m (@etcd)
	{
		next unless etcd_alive($m) && !$m->{paused};
		my $r = $http->post("$m->{client_url}/v3/maintenance/status", { content => '{}' });
		next unless $r->{success};
		my $st = decode_json($r->{content});
		$id{ $st->{header}{member_id} } = $m;
		$leader = $st->{leader};
	}
	return defined $leader ? $id{$leader} : undef;
}

# wait_key(KEY, COND, TIMEOUT): poll KEY (every 20 ms) until COND->(kv or
# undef) holds; the time it first did, or undef.
sub wait_key
{
	my ($key, $cond, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		my $kv = eval { etcd_get($key) };
		return time() if !$@ && $cond->($kv);
		usleep(20_000);
	}
	return undef;
}

# ---------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------

# cluster_node(NAME, NODE_ID, PREFIX, %opt): a node in cluster mode with silo
# and the test helpers; started (and the extensions created) unless
# $opt{no_start}.
sub cluster_node
{
	my ($name, $node_id, $prefix, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->{conninfo} =
	  sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
max_worker_processes = 16
lc_messages = 'C'
wal_level = logical
silo.etcd_endpoints = '$endpoints'
silo.node_id = '$node_id'
silo.cluster_prefix = '$prefix'
silo.advertise_conninfo = '$node->{conninfo}'
silo.lease_ttl_s = $ttl
silo.initial_shard_count = 8
# owned shards stay where they are here (019_cluster_moves.pl moves them)
silo.max_moves_in = 0
});
	start_node($node) unless $opt{no_start};
	return $node;
}

# start_node(NODE): start it and create the extensions and helpers.
sub start_node
{
	my ($node) = @_;
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS silo CASCADE');
	install_test_helpers($node, 'postgres');
	# probe(tenant): 'served' when a call naming the tenant passes the
	# ownership check (it then fails with SL003: no such job, nothing
	# written), else the SQLSTATE and the DETAIL
	$node->safe_psql(
		'postgres', q{
CREATE OR REPLACE FUNCTION silotest.probe(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
	det text;
BEGIN
	PERFORM silo.cancel('silotest-no-such-job', t);
	RETURN 'served';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, det = PG_EXCEPTION_DETAIL;
	IF st = 'SL003' THEN
		RETURN 'served';
	END IF;
	RETURN st || ' ' || coalesce(det, '');
END $$;
});
	return;
}

sub probe
{
	my ($node, $tenant) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "SELECT silotest.probe('$tenant')", stdout => \$out, stderr => \$err);
	return $out;
}

# serving(NODE): "membership|owned|serving" from silo.node_info.
my $info_sql = q{SELECT membership || '|' || cardinality(owned_shards) || '|' || cardinality(serving_shards) FROM silo.node_info};

# wait_serving(NODE, EXPECTED, TIMEOUT): poll silo.node_info until it says
# EXPECTED; the time it did (undef at the deadline).
sub wait_serving
{
	my ($node, $expected, $timeout) = @_;
	return poll_until($node, $info_sql, $expected, $timeout) ? time() : undef;
}

# psql_conninfo(CONNINFO, SQL): run SQL through a plain libpq connection
# string, as a client following a NOT_OWNER hint would: (rc, stdout, stderr).
sub psql_conninfo
{
	my ($conninfo, $sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $conninfo, '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err);
	chomp $out;
	return ($? >> 8, $out, $err);
}

# coordinator_pid(NODE): the coordinator's pid from pg_stat_activity.
sub coordinator_pid
{
	my ($node) = @_;
	return poll_value($node,
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'silo coordinator'}, 30);
}

# log_has(NODE, RE): whether the node's log matches RE.
sub log_has
{
	my ($node, $re) = @_;
	return slurp_file($node->logfile) =~ $re ? 1 : 0;
}

# not_owner(OUT): the DETAIL of a probe that got SL020, decoded; undef else.
sub not_owner
{
	my ($out) = @_;
	return undef unless defined $out && $out =~ /^SL020 (\{.*\})$/;
	return decode_json($1);
}

my $P = 'c15a';    # this test's prefix; scenario 8 uses another

# ---------------------------------------------------------------------------
# 1. one node
# ---------------------------------------------------------------------------
my $n1 = cluster_node('n1', 'n1', $P);
ok(wait_serving($n1, 'alive|8|8', 30), 'node 1 registered, owns and serves all 8 shards');
is( $n1->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE is_local AND state = 'serving' AND owner_node_id = 'n1') || '/' || count(*) FROM silo.cluster_info}),
	'8/8',
	'silo.cluster_info: every shard is local and serving');

my $map = etcd_get("$P/coord/shardmap");
ok($map && decode_json($map->{value})->{count} == 8, 'the shard map of 8 shards is in etcd');
my $m1 = etcd_get("$P/coord/members/n1");
ok($m1 && $m1->{lease} && decode_json($m1->{value})->{conninfo} eq $n1->{conninfo},
	'member key of n1 under a lease, with its conninfo');
my @owners = etcd_list("$P/coord/shards/");
is(scalar(grep { decode_json($_->{value})->{node_id} eq 'n1' && !$_->{lease} } @owners),
	8, 'eight owner keys name n1, none under a lease');

$n1->safe_psql('postgres', qq{SELECT silo.enqueue('g15', '{}', tenant => t, id => 'j-' || t)
  FROM unnest(ARRAY['acme', '-', 'tenant-1', 'zeta', 'omega']) t});
is( $n1->safe_psql('postgres',
		q{SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'g15', max_tasks => 10)), 'w')}),
	'5',
	'five jobs of five tenants leased and completed');
is( $n1->safe_psql('postgres',
		q{SELECT count(DISTINCT tenant) || ' ' || min(status) || ' ' || max(status) FROM silo.jobs WHERE task_group = 'g15'}),
	'5 Succeeded Succeeded',
	'... and succeeded');
my $shards_used = $n1->safe_psql('postgres',
	q{SELECT count(DISTINCT silo.shard_for_tenant(t)) FROM unnest(ARRAY['acme', '-', 'tenant-1', 'zeta', 'omega']) t});
cmp_ok($shards_used, '>=', 3, "the tenants are spread over $shards_used shards");

# ---------------------------------------------------------------------------
# 2. a second node joins
# ---------------------------------------------------------------------------
my $n2 = cluster_node('n2', 'n2', $P);
ok(wait_serving($n2, 'alive|0|0', 30), 'node 2 registered and serves nothing');
is( $n2->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE NOT is_local AND state = 'remote' AND owner_node_id = 'n1' AND owner_conninfo IS NOT NULL) FROM silo.cluster_info}),
	'8',
	"node 2's cluster_info: every shard remote, owned by n1");
ok(etcd_get("$P/coord/members/n2"), 'member key of n2');

my $out = probe($n2, 'acme');
my $hint = not_owner($out);
ok($hint && $hint->{owner_node_id} eq 'n1' && $hint->{owner_conninfo} eq $n1->{conninfo}
	  && $hint->{shard} == 7,
	'a call on node 2 for tenant acme gets SL020 naming n1 and its conninfo')
  or diag("probe: $out");
my ($rc, $o, $e) = psql_conninfo($hint ? $hint->{owner_conninfo} : '',
	q{SELECT silo.enqueue('g15', '{}', tenant => 'acme', id => 'before-crash')});
ok($rc == 0 && $o eq 'before-crash', 'the same call sent to that conninfo succeeds')
  or diag("rc $rc out $o err $e");
($rc, $o, $e) = psql_conninfo($n2->{conninfo},
	q{SELECT silo.enqueue('g15', '{}', tenant => 'acme', id => 'on-n2')});
ok($rc != 0 && $e =~ /SL020|not owned by this node/, 'the enqueue itself on node 2 is refused')
  or diag("rc $rc out $o err $e");
# silo.lease_job (1.8) names its tenant: the same check, before the job is read
($rc, $o, $e) = psql_conninfo($n2->{conninfo},
	q{SELECT job_id FROM silo.lease_job('w15', 'before-crash', 'acme')});
ok($rc != 0 && $e =~ /not owned by this node/, 'a lease_job of an acme job on node 2 is refused (SL020)')
  or diag("rc $rc out $o err $e");

# a third server with node 2's node_id: it must neither register nor serve
{
	my $dup = cluster_node('dup', 'n2', $P);
	my $m2 = etcd_get("$P/coord/members/n2");
	ok(poll_until($dup, q{SELECT count(*) FROM silo.cluster_info WHERE owner_node_id = 'n1'}, '8', 30),
		'a duplicate of node id n2 reads the map and the owners');
	ok(wait_for_log_until($dup, qr/node id "n2" is already registered in etcd/, 0, 10),
		'... logs that n2 is already registered');
	is($dup->safe_psql('postgres', $info_sql), 'lost|0|0', '... and is no member, serves nothing');
	like(probe($dup, 'acme'), qr/^SL020 /, '... a call there gets SL020');
	$dup->stop;
	my $m2_after = etcd_get("$P/coord/members/n2");
	ok($m2_after && $m2_after->{lease} eq $m2->{lease}
		  && $m2_after->{mod_revision} == $m2->{mod_revision},
		"node 2's member key is untouched by the duplicate's start and stop");
}

# a reload with a new silo.advertise_conninfo: the member key and, by
# re-stamping, the owner keys carry it, and so do node 2's NOT_OWNER hints
{
	my $new_ci = "$n1->{conninfo} connect_timeout=5";
	$n1->safe_psql('postgres',
		"ALTER SYSTEM SET silo.advertise_conninfo = '$new_ci'; SELECT pg_reload_conf()");
	ok(wait_key("$P/coord/members/n1",
			sub { $_[0] && decode_json($_[0]{value})->{conninfo} eq $new_ci }, 10),
		'reload: the member key carries the new conninfo');
	ok(wait_key("$P/coord/shards/7/owner",
			sub { $_[0] && decode_json($_[0]{value})->{conninfo} eq $new_ci }, 10),
		'... and so do the owner keys');
	ok( poll_until(
			$n2,
			q{SELECT substr(p, 7)::json ->> 'owner_conninfo' FROM silotest.probe('acme') p WHERE p LIKE 'SL020 %'},
			$new_ci, 10),
		"... and so do node 2's NOT_OWNER hints");
	is($n1->safe_psql('postgres', $info_sql), 'alive|8|8', 'node 1 served throughout');
	$n1->{conninfo} = $new_ci;
}

# ---------------------------------------------------------------------------
# 3. kill -9 of node 1
# ---------------------------------------------------------------------------
{
	my $old_inc = decode_json(etcd_get("$P/coord/members/n1")->{value})->{incarnation};
	my @pids = split /\n/,
	  $n1->safe_psql('postgres', 'SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL');
	push @pids, $n1->{_pid};
	my $t_kill = time();
	$n1->kill9;
	my $t_gone = wait_key("$P/coord/members/n1", sub { !defined $_[0] }, 3 * $ttl);
	ok(defined $t_gone, "n1's member key expired after kill -9");
	$measured{'kill -9 -> member key expired'} = $t_gone - $t_kill if defined $t_gone;
	cmp_ok(($t_gone // 0) - $t_kill, '>=', $ttl - 1, '... not before its lease could have expired');

	# node 2 now sees no live n1, and placement gives it everything: it
	# still must not serve n1's shards, and answers retry (SL021) rather
	# than send clients to a node that is gone
	ok(poll_until($n2, q{SELECT silotest.probe('acme') LIKE 'SL021 %n1%not a member%'}, 't', 10),
		"node 2 answers SL021 for n1's shards: their owner is not a member");
	$measured{'kill -9 -> survivor answers SL021'} = time() - $t_kill;
	is($n2->safe_psql('postgres',
			q{SELECT count(*) FILTER (WHERE state = 'owner-down' AND owner_node_id = 'n1' AND NOT is_local) FROM silo.cluster_info}),
		'8', "... its cluster_info shows every shard owner-down, owned by n1");
	usleep(500_000);
	is($n2->safe_psql('postgres', $info_sql), 'alive|0|0', 'node 2 acquired nothing');

	# the old processes must be gone before the data directory is reused
	my $deadline = time() + 30;
	usleep(50_000) while (grep { pid_alive($_) } @pids) && time() < $deadline;
	my $t_restart = time();
	start_node($n1);
	my $t_serve = wait_serving($n1, 'alive|8|8', 30);
	ok(defined $t_serve, 'node 1 restarted with the same node id serves its 8 shards again');
	$measured{'restart -> serving again'} = $t_serve - $t_restart if defined $t_serve;
	ok(log_has($n1, qr/re-stamped its shard 7/), '... after re-stamping its owner keys');
	ok(poll_until($n2, q{SELECT silotest.probe('acme') LIKE 'SL020 %'}, 't', 10),
		'... and node 2 sends calls for its shards to it again (SL020)');
	my $new = etcd_get("$P/coord/members/n1");
	ok($new && decode_json($new->{value})->{incarnation} ne $old_inc, '... as a new incarnation');
	is($n1->safe_psql('postgres',
			q{SELECT count(*) FROM silo.jobs WHERE tenant = 'acme' AND id = 'before-crash' AND status IS NOT NULL}),
		'1', 'the job enqueued before the crash is still there');
}

# ---------------------------------------------------------------------------
# 4. self-fencing: the coordinator SIGSTOPped
# ---------------------------------------------------------------------------
{
	my $pid = coordinator_pid($n1);
	is(probe($n1, 'acme'), 'served', 'node 1 serves acme before the stop');
	kill 'STOP', $pid;
	my $t_stop = time();
	my $t_fenced = $n1->safe_psql('postgres',
		q{SELECT extract(epoch FROM silotest.wait_for($$SELECT silotest.probe('acme') LIKE 'SL021%'$$, 10000))});
	my $t_gone = wait_key("$P/coord/members/n1", sub { !defined $_[0] }, 3 * $ttl);
	ok($t_fenced ne '', 'with its coordinator stopped, node 1 answers SL021');
	my $fence = ($t_fenced || 1e10) - $t_stop;
	$measured{'SIGSTOP -> SL021'} = $fence;
	cmp_ok($fence, '<', $ttl - $margin_floor,
		sprintf('... %.2f s after the stop: below TTL - %.1f s', $fence, $margin_floor));
	ok(defined $t_gone, "n1's member key expired while its coordinator was stopped");
	$measured{'SIGSTOP -> member key expired'} = ($t_gone // 0) - $t_stop;
	cmp_ok(($t_gone // 0) - ($t_fenced || 1e10), '>=', $margin_floor,
		sprintf('... %.2f s after node 1 had stopped serving',
			($t_gone // 0) - ($t_fenced || 0)));

	# while node 1 is no member, an operator force-releases the shard of
	# tenant '-', and node 2 takes it
	my $dash = $n1->safe_psql('postgres', q{SELECT silo.shard_for_tenant('-')});
	is(force_release($P, $dash), 1, "force release of shard $dash while n1 is no member");
	ok(poll_until($n2, q{SELECT silotest.probe('-')}, 'served', 30),
		'node 2 acquired it and serves tenant -');

	kill 'CONT', $pid;
	my $t_cont = time();
	my $t_back = wait_serving($n1, 'alive|7|7', 30);
	ok(defined $t_back, 'SIGCONT: node 1 registers again and serves its other 7 shards');
	$measured{'SIGCONT -> serving again'} = ($t_back // 0) - $t_cont;
	ok(log_has($n1, qr/lost its membership: its lease expired in etcd/),
		'... after the keepalive told it the lease was gone');
	is(probe($n1, 'acme'), 'served', '... acme is served again');
	my $h = not_owner(probe($n1, '-'));
	ok($h && $h->{owner_node_id} eq 'n2', "... and tenant - is n2's now: SL020 on node 1");
	ok(log_has($n1, qr/shard $dash is no longer this node's/), '... which it logged');
	is($n2->safe_psql('postgres', $info_sql), 'alive|1|1', 'node 2 serves that one shard');
}

# ---------------------------------------------------------------------------
# 5. an operator ends node 1's membership in etcd
# ---------------------------------------------------------------------------
{
	# its lease revoked: the member key goes with it
	my $m = etcd_get("$P/coord/members/n1");
	my $pos = log_position($n1);
	my $t0 = time();
	gw('lease/revoke', { ID => "$m->{lease}" }) // die 'etcd did not answer';
	ok(wait_for_log_until($n1, qr/lost its membership: its lease expired in etcd/, $pos, 10),
		'lease revoked by an operator: node 1 gives its membership up');
	my $t_back = wait_serving($n1, 'alive|7|7', 30);
	my $m_new = etcd_get("$P/coord/members/n1");
	ok(defined $t_back && $m_new && $m_new->{lease} ne $m->{lease},
		'... registers again under a new lease and serves');
	$measured{'lease revoked -> serving again'} = ($t_back // 0) - $t0;

	# its member key deleted while the lease lives: a force release is
	# possible from then on, so the node must not serve on its lease
	$m = $m_new;
	$pos = log_position($n1);
	gw('kv/deleterange', { key => b64("$P/coord/members/n1") }) // die 'etcd did not answer';
	ok(wait_for_log_until($n1, qr/its member key was deleted from etcd while its lease lives/, $pos, 10),
		'member key deleted under a live lease: node 1 gives the membership up');
	$t_back = wait_serving($n1, 'alive|7|7', 30);
	$m_new = etcd_get("$P/coord/members/n1");
	ok(defined $t_back && $m_new && $m_new->{lease} ne $m->{lease},
		'... registers again under a new lease and serves');
}

# ---------------------------------------------------------------------------
# 6. the etcd leader alone, then etcd quorum loss
# ---------------------------------------------------------------------------
{
	my $l = leader();
	ok(defined $l, 'etcd has a leader');
	my $t_kill = time();
	etcd_kill($l // $etcd[0]);
	# sample both nodes' served shards while etcd elects a new leader: a
	# shard served by both at once would be a split brain
	my ($samples, @both) = (0);
	while (time() < $t_kill + 2 * $ttl)
	{
		my $a = $n1->safe_psql('postgres', q{SELECT array_to_string(serving_shards, ',') FROM silo.node_info});
		my $b = $n2->safe_psql('postgres', q{SELECT array_to_string(serving_shards, ',') FROM silo.node_info});
		my %on1 = map { $_ => 1 } split /,/, $a;
		push @both, grep { $on1{$_} } split /,/, $b;
		$samples++;
		usleep(50_000);
	}
	is(join(',', @both), '', "the leader killed: no shard served by both nodes ($samples samples over " . 2 * $ttl . ' s)');
	ok(defined leader() && leader() != ($l // $etcd[0]), 'the other members elected a new leader');
	ok(wait_serving($n1, 'alive|7|7', 30) && wait_serving($n2, 'alive|1|1', 30),
		'both nodes serve their shards under the new leader');
	ok(etcd_restart($l // $etcd[0]), 'the old leader restarted');
}
{
	# the leader and a follower: a surviving leader would renew leases for
	# up to an election timeout more before it noticed (docs/cluster.md)
	my $l = leader();
	ok(defined $l, 'etcd has a leader');
	my @gone = ($l // $etcd[0], grep { $_ != ($l // $etcd[0]) } @etcd);
	pop @gone;
	is(probe($n1, 'acme'), 'served', 'node 1 serves acme before the quorum loss');
	my $t_kill = time();
	etcd_kill($_) for @gone;
	my $t_fenced = $n1->safe_psql('postgres',
		q{SELECT extract(epoch FROM silotest.wait_for($$SELECT silotest.probe('acme') LIKE 'SL021%'$$, 10000))});
	ok($t_fenced ne '', 'without an etcd quorum, node 1 answers SL021');
	my $fence = ($t_fenced || 1e10) - $t_kill;
	$measured{'quorum loss -> SL021'} = $fence;
	cmp_ok($fence, '<', $ttl, sprintf('... %.2f s after the quorum was lost (TTL %d s)', $fence, $ttl));
	my $t_restart = time();
	ok(etcd_restart($_), "etcd member $_->{name} restarted") for @gone;
	my $t_back = wait_serving($n1, 'alive|7|7', 30);
	ok(defined $t_back, 'with the quorum back, node 1 serves again');
	$measured{'quorum back (restart of the members) -> serving'} = ($t_back // 0) - $t_restart;
	is(probe($n1, 'acme'), 'served', '... acme is served again');
	ok(wait_serving($n2, 'alive|1|1', 30), 'node 2 serves its shard again too');
}

# ---------------------------------------------------------------------------
# 7. force release
# ---------------------------------------------------------------------------
{
	my $shard = $n1->safe_psql('postgres', q{SELECT silo.shard_for_tenant('acme')});
	is(force_release($P, $shard), 0, 'force release is refused while the owner n1 is a member');
	ok(etcd_get("$P/coord/shards/$shard/owner"), '... the owner key is still there');

	$n1->stop;
	my $t_gone = wait_key("$P/coord/members/n1", sub { !defined $_[0] }, 1);
	ok(defined $t_gone, "a clean stop revoked n1's membership at once");
	is(scalar(grep { decode_json($_->{value})->{node_id} eq 'n1' } etcd_list("$P/coord/shards/")),
		7, "... and kept n1's seven owner keys");
	ok(poll_until($n2, q{SELECT silotest.probe('acme') LIKE 'SL021 %n1%not a member%'}, 't', 10),
		'node 2 does not serve acme: SL021, its owner n1 is not a member');

	is(force_release($P, $shard), 1, 'force release succeeds once the owner is not a member');
	ok(poll_until($n2, q{SELECT silotest.probe('acme')}, 'served', 30),
		'node 2 acquired the released shard and serves acme');
	my $owner = etcd_get("$P/coord/shards/$shard/owner");
	ok($owner && decode_json($owner->{value})->{node_id} eq 'n2', "... its owner key names n2");
	is($n2->safe_psql('postgres', $info_sql), 'alive|2|2', '... and only that shard more');
	my $other = $n2->safe_psql('postgres',
		q{SELECT t FROM unnest(ARRAY['tenant-1', 'zeta', 'omega']) t WHERE silo.shard_for_tenant(t) NOT IN (silo.shard_for_tenant('acme'), silo.shard_for_tenant('-')) LIMIT 1});
	like(probe($n2, $other), qr/^SL021 .*n1/, "... tenant $other still waits for n1 (SL021)");
	$n2->stop;
}

# ---------------------------------------------------------------------------
# 8. two fresh nodes on a new prefix, racing
# ---------------------------------------------------------------------------
{
	my $Q = 'c15b';
	my $na = cluster_node('n3', 'n3', $Q, no_start => 1);
	my $nb = cluster_node('n4', 'n4', $Q, no_start => 1);
	# both start while etcd is paused, so that both coordinators reach it
	# at the same moment once it resumes
	etcd_pause($_) for @etcd;
	start_node($_) for ($na, $nb);
	etcd_resume($_) for @etcd;
	ok(etcd_wait_healthy($_, 30), "etcd member $_->{name} healthy after the pause") for @etcd;
	ok( poll_until($na, q{SELECT membership FROM silo.node_info}, 'alive', 30)
		  && poll_until($nb, q{SELECT membership FROM silo.node_info}, 'alive', 30),
		'both fresh nodes registered');
	my $deadline = time() + 30;
	my ($served_a, $served_b);
	while (time() < $deadline)
	{
		$served_a = $na->safe_psql('postgres', q{SELECT array_to_string(serving_shards, ',') FROM silo.node_info});
		$served_b = $nb->safe_psql('postgres', q{SELECT array_to_string(serving_shards, ',') FROM silo.node_info});
		my @all = sort { $a <=> $b } grep { $_ ne '' } split(/,/, "$served_a,$served_b");
		last if "@all" eq '0 1 2 3 4 5 6 7';
		usleep(100_000);
	}
	my @all = sort { $a <=> $b } grep { $_ ne '' } split(/,/, "$served_a,$served_b");
	is("@all", '0 1 2 3 4 5 6 7',
		"together they serve every shard exactly once (n3: {$served_a}, n4: {$served_b})");
	my @maps = etcd_list("$Q/coord/shardmap");
	is(scalar(@maps), 1, 'one shard map');
	my @owner_keys = etcd_list("$Q/coord/shards/");
	my %by_shard;
	for my $k (@owner_keys)
	{
		my ($s) = $k->{key} =~ m{/shards/(\d+)/owner$};
		$by_shard{$s} = decode_json($k->{value})->{node_id};
	}
	is(join(',', sort { $a <=> $b } keys %by_shard), '0,1,2,3,4,5,6,7',
		'every shard has exactly one owner key');
	my $from_a = join(',', map { $_ } sort { $a <=> $b } grep { $by_shard{$_} eq 'n3' } keys %by_shard);
	is($from_a, $served_a, "the owner keys naming n3 are the shards n3 serves");
	is($na->safe_psql('postgres', q{SELECT string_agg(shard_id || '=' || owner_node_id, ',' ORDER BY shard_id) FROM silo.cluster_info}),
		$nb->safe_psql('postgres', q{SELECT string_agg(shard_id || '=' || owner_node_id, ',' ORDER BY shard_id) FROM silo.cluster_info}),
		'both nodes agree on every owner');
	$na->stop;
	$nb->stop;
}

etcd_stop($_) for @etcd;

for my $k (sort keys %measured)
{
	note(sprintf('measured: %-48s %.2f s', $k, $measured{$k}));
}
my $secs = time() - $t_start;
ok($secs < 150, sprintf('the whole test took %.1f s', $secs));

done_testing();
