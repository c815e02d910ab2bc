
# 017_cluster_long.pl: longer scenarios of the coordinator against a real
# 3-member etcd.  Run by "make test-cluster" (SILO_CLUSTER_LONG=1); skipped
# by "make test".
#
#  1. a stalled watch: node 2's watch sits on an etcd member that hangs
#     (SIGSTOP; the stream stays open and silent), while its unary calls
#     fail over; node 1 stops and an operator force-releases a shard: only
#     the freshness check can tell node 2, which must then acquire it;
#  2. the etcd leader killed (kill -9) under two serving nodes: how long
#     calls get SL021 while etcd elects a new leader (measured), and that
#     both serve again;
#  3. etcd quorum loss with the leader surviving (measured: it renews
#     leases until it notices);
#  4. churn: three rounds of node 1's coordinator SIGSTOPped past its TTL,
#     one of its shards force-released and taken by node 2, SIGCONT;
#     meanwhile a sampler asks both nodes what they serve every few
#     milliseconds: no shard may ever be served by both.
#
# Every process is started and stopped by pid (SiloEtcd.pm, SiloTest.pm).

use strict;
use warnings FATAL => 'all';

use HTTP::Tiny;
use JSON::PP;
use MIME::Base64;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloEtcd;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

plan skip_all => 'long cluster scenarios: set SILO_CLUSTER_LONG=1 (make test-cluster)'
  unless $ENV{SILO_CLUSTER_LONG};

my $ttl = 3;
my $t_start = time();
my %measured;

my @etcd = etcd_cluster_start(3, name => 'c17_');
my $http = HTTP::Tiny->new(timeout => 2);

# gw(PATH, BODY): POST to the first member that answers.
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

# etcd_get(KEY): the kv with its value decoded, or undef.
sub etcd_get
{
	my ($key) = @_;
	my $r = gw('kv/range', { key => b64($key) }) // die "etcd did not answer";
	return undef unless $r->{kvs};
	my $kv = $r->{kvs}[0];
	$kv->{value} = decode_base64($kv->{value} // '');
	return $kv;
}

# force_release(PREFIX, SHARD): delete the owner key while its node is no member.
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
				{ key => b64("$prefix/coord/members/$node"), target => 'CREATE', result => 'EQUAL', create_revision => '0' },
				{ key => b64($okey), target => 'MOD', result => 'EQUAL', mod_revision => "$owner->{mod_revision}" },
			],
			success => [ { request_delete_range => { key => b64($okey) } } ],
		}) // die "etcd did not answer";
	return $r->{succeeded} ? 1 : 0;
}

# leader(): the member etcd's members agree is the leader, or undef.
sub leader
{
	my %id;
	my $leader;
	for my $m (@etcd)
	{
		next unless etcd_alive($m);
		my $r = $http->post("$m->{client_url}/v3/maintenance/status", { content => '{}' });
		next unless $r->{success};
		my $st = decode_json($r->{content});
		$id{ $st->{header}{member_id} } = $m;
		$leader = $st->{leader};
	}
	return defined $leader ? $id{$leader} : undef;
}

# cluster_node(NAME, ENDPOINTS, PREFIX): a started node with silo and helpers.
sub cluster_node
{
	my ($name, $endpoints, $prefix) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	my $conninfo = sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
max_worker_processes = 16
lc_messages = 'C'
wal_level = logical
silo.etcd_endpoints = '$endpoints'
silo.node_id = '$name'
silo.cluster_prefix = '$prefix'
silo.advertise_conninfo = '$conninfo'
silo.lease_ttl_s = $ttl
# owned shards stay where they are here (019_cluster_moves.pl moves them)
silo.max_moves_in = 0
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION silo CASCADE');
	install_test_helpers($node, 'postgres');
	$node->safe_psql(
		'postgres', q{
CREATE FUNCTION silotest.probe(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text;
BEGIN
	PERFORM silo.cancel('silotest-no-such-job', t);
	RETURN 'served';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
	RETURN CASE WHEN st = 'SL003' THEN 'served' ELSE st END;
END $$;
});
	return $node;
}

# log_has(NODE, RE)
sub log_has
{
	my ($node, $re) = @_;
	return slurp_file($node->logfile) =~ $re ? 1 : 0;
}

my $info_sql = q{SELECT membership || '|' || cardinality(owned_shards) || '|' || cardinality(serving_shards) FROM silo.node_info};

# ---------------------------------------------------------------------------
# 1. a stalled watch
# ---------------------------------------------------------------------------
{
	my $P = 'c17a';
	my ($x, $y, $z) = @etcd;
	my $n1 = cluster_node('n1', etcd_endpoints($y, $z, $x), $P);
	ok(poll_until($n1, $info_sql, 'alive|8|8', 30), 'node 1 serves all 8 shards');
	my $n2 = cluster_node('n2', etcd_endpoints($x, $y, $z), $P);
	ok(poll_until($n2, $info_sql, 'alive|0|0', 30), 'node 2 is a member, serves nothing');

	# node 2's watch is on x, its first endpoint
	etcd_pause($x);
	usleep(2_000_000);
	ok(poll_until($n2, q{SELECT membership FROM silo.node_info}, 'alive', 10),
		"node 2's keepalives go elsewhere: still a member");

	$n1->stop;
	my $shard = $n2->safe_psql('postgres', q{SELECT silo.shard_for_tenant('acme')});
	my $t0 = time();
	is(force_release($P, $shard), 1, "shard $shard force-released while node 1 is down");
	ok(poll_until($n2, q{SELECT silotest.probe('acme')}, 'served', 30),
		'node 2, whose watch saw nothing, acquired it');
	$measured{'stalled watch: force release -> other node serving'} = time() - $t0;
	ok(log_has($n2, qr/missed changes; reading the cluster state again/),
		'... because the freshness check caught the stalled watch');
	etcd_resume($x);
	ok(etcd_wait_healthy($x, 30), 'the hung member resumed');
	$n2->stop;
}

# ---------------------------------------------------------------------------
# 2. the etcd leader killed
# ---------------------------------------------------------------------------
my $P = 'c17b';
my $n3 = cluster_node('n3', etcd_endpoints(@etcd), $P);
ok(poll_until($n3, $info_sql, 'alive|8|8', 30), 'node 3 serves all 8 shards');
my $n4 = cluster_node('n4', etcd_endpoints(reverse @etcd), $P);
ok(poll_until($n4, $info_sql, 'alive|0|0', 30), 'node 4 is a member');
{
	my $l = leader();
	ok(defined $l, "etcd's leader is $l->{name}");
	my $t_kill = time();
	etcd_kill($l);
	# in-server: first SL021 within 5 s, then the first success after it
	my $r = $n3->safe_psql(
		'postgres', q{
SELECT coalesce(extract(epoch FROM f), 0) || ' ' ||
       coalesce(extract(epoch FROM silotest.wait_for($$SELECT silotest.probe('acme') = 'served'$$, 20000)), 0)
  FROM silotest.wait_for($$SELECT silotest.probe('acme') = 'SL021'$$, 5000) f});
	my ($fenced, $back) = split / /, $r;
	if ($fenced > 0)
	{
		$measured{'leader killed -> SL021 on a node'} = $fenced - $t_kill;
		$measured{'leader killed: SL021 lasted'} = $back - $fenced;
		ok($back > 0, sprintf('after the leader kill node 3 answered SL021 for %.2f s, then served',
				$back - $fenced));
	}
	else
	{
		$measured{'leader killed: SL021 lasted'} = 0;
		pass('node 3 served through the leader election');
	}
	ok(poll_until($n3, $info_sql, 'alive|8|8', 30), 'node 3 serves its 8 shards');
	ok(poll_until($n4, $info_sql, 'alive|0|0', 30), 'node 4 is a member');
	ok(etcd_restart($l), 'the killed leader restarted');
}

# ---------------------------------------------------------------------------
# 3. quorum loss with the leader surviving: it renews leases until it
#    notices (an election timeout, 1 s here), so SL021 comes later than
#    TTL - margin after the loss, though still before anyone could see the
#    lease expire (nobody can while there is no quorum)
# ---------------------------------------------------------------------------
{
	my $l = leader();
	ok(defined $l, "etcd's leader is $l->{name}");
	my @gone = grep { $_ != $l } @etcd;
	is($n3->safe_psql('postgres', q{SELECT silotest.probe('acme')}), 'served', 'node 3 serves acme');
	my $t_kill = time();
	etcd_kill($_) for @gone;
	my $fenced = $n3->safe_psql('postgres',
		q{SELECT extract(epoch FROM silotest.wait_for($$SELECT silotest.probe('acme') = 'SL021'$$, 10000))});
	ok($fenced ne '', 'the followers killed: node 3 answers SL021');
	$measured{'quorum loss, leader survives -> SL021'} = ($fenced || 1e10) - $t_kill;
	cmp_ok(($fenced || 1e10) - $t_kill, '<', $ttl + 1.5, '... within TTL + an election timeout and then some');
	ok(etcd_restart($_), "etcd member $_->{name} restarted") for @gone;
	ok(poll_until($n3, $info_sql, 'alive|8|8', 30), 'node 3 serves again');
	ok(poll_until($n4, $info_sql, 'alive|0|0', 30), 'node 4 is a member again');
}

# ---------------------------------------------------------------------------
# 4. churn, with a sampler checking that no shard is served twice
# ---------------------------------------------------------------------------
{
	my $dir = PostgreSQL::Test::Utils::tempdir('c17_sampler');
	my $stop = "$dir/stop";
	my %sampler;
	for my $n ($n3, $n4)
	{
		# in-server: every 5 ms, the monotonic-enough wall clock and what
		# the node serves, until the stop file exists
		$n->safe_psql(
			'postgres', q{
CREATE FUNCTION silotest.sample(stopfile text) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
	WHILE pg_stat_file(stopfile, true) IS NULL LOOP
		RETURN NEXT extract(epoch FROM clock_timestamp()) || '|' ||
			(SELECT array_to_string(serving_shards, ',') FROM silo.node_info);
		PERFORM pg_sleep(0.005);
	END LOOP;
END $$;
});
		$sampler{$n} = start_process(
			[ 'psql', '-X', '-A', '-t', '-d', $n->connstr('postgres'), '-c',
			  "SELECT silotest.sample('$stop')" ]);
	}
	my $pid = $n3->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'silo coordinator'});
	my @taken;
	for my $round (1 .. 3)
	{
		kill 'STOP', $pid;
		my $deadline = time() + 3 * $ttl;
		usleep(50_000) while etcd_get("$P/coord/members/n3") && time() < $deadline;
		my $owned = $n4->safe_psql('postgres',
			q{SELECT min(shard_id) FROM silo.cluster_info WHERE owner_node_id = 'n3'});
		is(force_release($P, $owned), 1, "round $round: shard $owned released while n3 is stopped");
		push @taken, $owned;
		ok(poll_until($n4, q{SELECT cardinality(serving_shards) FROM silo.node_info}, scalar(@taken), 30),
			"round $round: node 4 serves it");
		kill 'CONT', $pid;
		ok(poll_until($n3, $info_sql, 'alive|' . (8 - @taken) . '|' . (8 - @taken), 30),
			"round $round: node 3 is back with its other " . (8 - @taken) . ' shards');
	}
	PostgreSQL::Test::Utils::append_to_file($stop, '');
	my %timeline;    # node -> [ [time, {shard => 1}] ... ]
	for my $n ($n3, $n4)
	{
		wait_process_exit($sampler{$n}, 10) or stop_process($sampler{$n});
		for my $line (split /\n/, $sampler{$n}{out})
		{
			my ($t, $set) = split /\|/, $line, -1;
			next unless defined $set;
			push @{ $timeline{$n} }, [ $t, { map { $_ => 1 } grep { $_ ne '' } split /,/, $set } ];
		}
	}
	my ($s3, $s4) = ($timeline{$n3} // [], $timeline{$n4} // []);
	cmp_ok(scalar(@$s3) + scalar(@$s4), '>', 1000,
		sprintf('the samplers took %d and %d samples', scalar(@$s3), scalar(@$s4)));
	# a shard node 4 serves at t while node 3's samples just before and
	# just after t both show it served: served by both at t
	my ($overlaps, $first) = (0, '');
	my $i = 0;
	for my $sample (@$s4)
	{
		my ($t, $set) = @$sample;
		$i++ while $i + 1 < @$s3 && $s3->[ $i + 1 ][0] <= $t;
		next unless $i + 1 < @$s3 && $s3->[$i][0] <= $t;
		for my $shard (keys %$set)
		{
			next unless $s3->[$i][1]{$shard} && $s3->[ $i + 1 ][1]{$shard};
			$overlaps++;
			$first ||= sprintf('shard %s at %.3f', $shard, $t);
		}
	}
	is($overlaps, 0, 'no shard was ever served by both nodes') or diag("first: $first");
	$n3->stop;
	$n4->stop;
}

etcd_stop($_) for @etcd;
note(sprintf('measured: %-52s %.2f s', $_, $measured{$_})) for sort keys %measured;
note(sprintf('the whole test took %.1f s', time() - $t_start));
done_testing();
