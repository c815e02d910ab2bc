
# 022_worker_cluster.pl: tools/silo-worker in cluster mode (docs/cluster.md,
# "silo-worker in cluster mode"), against a real etcd:
#
#  1. two nodes share the 8 shards; jobs of 40 tenants are enqueued on their
#     owners; one silo-worker given only node 1's conninfo finds node 2 in
#     node 1's silo.cluster_info and drains both nodes;
#  2. while it runs, node 3 joins: the shards placement gives it move to it
#     with their rows (and running leases), and more jobs are enqueued
#     through a client that follows SL020 and retries SL021; the worker
#     starts leasing from node 3, and the heartbeats (every second) and
#     reports of leases whose shard moved follow NOT_OWNER to the new owner
#     (seen in its log);
#  3. at the end every job is on exactly one node, the one serving its
#     shard, Succeeded with exactly one attempt, and the worker counted
#     exactly as many successes as there are jobs: none lost, none run or
#     completed twice;
#  4. without --exec, a worker given node 2 completes jobs of all three
#     nodes in batches (silo.complete_many on each);
#  5. a report that meets SL021 does not hold the worker's loop: node 3
#     drains while nodes 1 and 2 hold their moves in at phase "drained"
#     (silo.test_move_pause_at), so node 3's shards stay paused; jobs that
#     were running in them end, and their completions wait for the shard
#     while the worker leases and completes new jobs of node 1 at once;
#     the holds cleared, the waiting completions follow NOT_OWNER to the
#     new owners, and every job Succeeded with exactly one attempt.
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

my $P = 'c22';
my $t_start = time();

my $worker = silo_worker_path();
ok(defined $worker, 'silo-worker binary found ($SILO_WORKER)')
  or BAIL_OUT('silo-worker is not built: run make');
ok(defined etcd_binary(), 'etcd is installed')
  or BAIL_OUT('etcd not found: tools/ensure-deps.sh installs etcd-server');
my $etcd = etcd_start(name => 'c22_');
my $endpoints = etcd_endpoints($etcd);
my $http = HTTP::Tiny->new(timeout => 2);
my $dir = PostgreSQL::Test::Utils::tempdir;

# moves(): the move records in etcd, { shard => value }, or undef.
sub moves
{
	my $prefix = "$P/coord/moves/";
	my $end = substr($prefix, 0, -1) . '0';
	my $r = $http->post("$etcd->{client_url}/v3/kv/range",
		{
			content => encode_json(
				{ key => encode_base64($prefix, ''), range_end => encode_base64($end, '') }),
			headers => { 'Content-Type' => 'application/json' }
		});
	return undef unless $r->{success};
	my %m;
	for my $kv (@{ decode_json($r->{content})->{kvs} // [] })
	{
		my ($s) = decode_base64($kv->{key}) =~ m{/(\d+)$};
		$m{$s} = decode_json(decode_base64($kv->{value}));
	}
	return \%m;
}

# new_node(NAME): a started node in cluster mode, with silo and the helpers.
sub new_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 'logical');
	$node->{conninfo} = sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
	$node->{node_id} = $name;
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
max_worker_processes = 16
max_logical_replication_workers = 6
wal_retrieve_retry_interval = '200ms'
lc_messages = 'C'
silo.etcd_endpoints = '$endpoints'
silo.node_id = '$name'
silo.cluster_prefix = '$P'
silo.advertise_conninfo = '$node->{conninfo}'
silo.lease_ttl_s = 10
silo.initial_shard_count = 8
silo.move_drain_timeout_ms = 2000
silo.move_pause_limit_ms = 20000
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS silo CASCADE');
	install_test_helpers($node, 'postgres');
	# the member placement gives shard s to (docs/cluster.md, "Placement")
	$node->safe_psql(
		'postgres', q{
CREATE OR REPLACE FUNCTION silotest.placed(s int, members text[]) RETURNS text
LANGUAGE sql AS $$
SELECT m FROM unnest(members) m
 ORDER BY (hashtextextended(m || ':' || s, 0)::numeric
		   + CASE WHEN hashtextextended(m || ':' || s, 0) < 0 THEN 18446744073709551616 ELSE 0 END) DESC,
		  m LIMIT 1 $$;
});
	return $node;
}

# serving(NODE): the shards it serves now, { shard => 1 }.
sub serving
{
	my ($node) = @_;
	return { map { $_ => 1 } grep { $_ ne '' } split /,/,
		  $node->safe_psql('postgres',
			  q{SELECT array_to_string(serving_shards, ',') FROM silo.node_info}) };
}

# settled(NODES): no move in etcd, and every shard served by the node
# placement gives it to among NODES.
sub settled
{
	my (@nodes) = @_;
	my $m = moves() // return 0;
	return 0 if %$m;
	my $arr = join(',', map { "'$_->{node_id}'" } @nodes);
	my $want = $nodes[0]->safe_psql('postgres',
		"SELECT string_agg(s || '=' || silotest.placed(s, ARRAY[$arr]), ',' ORDER BY s) FROM generate_series(0, 7) s"
	);
	my %have;
	for my $n (@nodes)
	{
		$have{$_} = $n->{node_id} for keys %{ serving($n) };
	}
	return join(',', map { "$_=" . ($have{$_} // '?') } 0 .. 7) eq $want;
}

# call(NODES, SQL): run SQL on whichever node serves its tenant, as a client
# does: on SL020 try the next node, on SL021 wait a little; (rc, out).
sub call
{
	my ($nodes, $sql) = @_;
	my $deadline = time() + 30;
	my $i = 0;
	while (time() < $deadline)
	{
		my $node = $nodes->[ $i++ % @$nodes ];
		my ($out, $err) = ('', '');
		my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
			on_error_stop => 1, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
		return (0, $out) if $rc == 0;
		return ($rc, $err) unless $err =~ /SL02[01]/;
		usleep(20_000) if $err =~ /SL021/;
	}
	return (1, 'no node served it');
}

# job_states(NODES): for every job on a node that serves its shard,
# "tenant/id" => [status, attempts, succeeded attempts, node]; jobs found
# on two owners are listed in $dup.
sub job_states
{
	my ($nodes, $dup) = @_;
	my %j;
	for my $n (@$nodes)
	{
		my $mine = serving($n);
		for my $row (split /\n/, $n->safe_psql('postgres', q{
SELECT j.tenant || '/' || j.id, silo.shard_for_tenant(j.tenant), j.status,
	   (SELECT count(*) FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id),
	   (SELECT count(*) FROM silo.attempts a
		 WHERE a.tenant = j.tenant AND a.job_id = j.id AND a.status = 'Succeeded')
  FROM silo.jobs j WHERE j.task_group = 'wc'}))
		{
			my ($job, $shard, $status, $att, $ok) = split /\|/, $row;
			next unless $mine->{$shard};
			push @$dup, $job if $j{$job};
			$j{$job} = [ $status, $att, $ok, $n->{node_id} ];
		}
	}
	return \%j;
}

# all_succeeded(NODES, EXPECTED): every expected job Succeeded on its owner.
sub all_succeeded
{
	my ($nodes, $expected) = @_;
	my $j = job_states($nodes, []);
	return !grep { !$j->{$_} || $j->{$_}[0] ne 'Succeeded' } keys %$expected;
}

# worker_log(): what the worker wrote to stderr so far.
my $worker_err = "$dir/worker.err";
sub worker_log { return -e $worker_err ? slurp_file($worker_err) : ''; }

# poll_until_log(FILE, RE, TIMEOUT): whether FILE matches RE within TIMEOUT s.
sub poll_until_log
{
	my ($file, $re, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (1)
	{
		return 1 if -e $file && slurp_file($file) =~ $re;
		return 0 if time() > $deadline;
		usleep(50_000);
	}
}

# ---------------------------------------------------------------------------
# 1. two nodes; the worker, given node 1, drains both
# ---------------------------------------------------------------------------
my $n1 = new_node('n1');
my $n2 = new_node('n2');
ok(poll_until($n1, q{SELECT cardinality(serving_shards) > 0 FROM silo.node_info}, 't', 30),
	'node 1 serves shards');
my $t0 = time();
ok(wait_until_settled([ $n1, $n2 ], 120), sprintf('node 1 and node 2 share the shards (%.1f s)', time() - $t0));

my %expected;
for my $n ($n1, $n2)
{
	# each node enqueues the jobs of the tenants whose shards it serves
	my $ids = $n->safe_psql(
		'postgres', q{
SELECT string_agg(x.tenant || '/' || e.id, ' ')
  FROM (SELECT 't' || (n % 40) AS tenant, 'a' || n AS id, n FROM generate_series(1, 160) n
		 WHERE silo.shard_for_tenant('t' || (n % 40)) = ANY ((SELECT serving_shards FROM silo.node_info)::int[])
		OFFSET 0) x,
	   LATERAL silo.enqueue('wc', jsonb_build_object('n', x.n), tenant => x.tenant, id => x.id) AS e(id)});
	my @ids = split / /, $ids;
	cmp_ok(scalar(@ids), '>', 0, "node $n->{node_id} holds " . scalar(@ids) . ' of the first jobs');
	$expected{$_} = 1 for @ids;
}
is(scalar(keys %expected), 160, 'all 160 first jobs enqueued on their owners');

my $w = start_process(
	[
		$worker, '--dsn', $n1->connstr('postgres'), '--worker-id', 'w22',
		'--task-group', 'wc', '--concurrency', '8', '--poll-ms', '500', '--lease-ms', '10000',
		'--exec', 'read -r p; case "$p" in *slow*) sleep 1 ;; *) sleep 0.2 ;; esac'
	],
	stderr => $worker_err);
$t0 = time();
my $drained = 0;
while (time() < $t0 + 120)
{
	last if ($drained = all_succeeded([ $n1, $n2 ], \%expected));
	usleep(200_000);
}
ok($drained, sprintf('the worker drained both nodes through node 1 (%.1f s)', time() - $t0));
like(worker_log(), qr/cluster mode; leasing from every owner/, 'the worker found node 1 in cluster mode');
like(worker_log(), qr/leasing from node "n2" \(\Q$n2->{conninfo}\E\) too/,
	'... and node 2 in its shard map, with its advertised conninfo');

# ---------------------------------------------------------------------------
# 2. node 3 joins while jobs keep coming
# ---------------------------------------------------------------------------
# The shards placement will give node 3, and tenants in them: their jobs
# (160 slow ones, 1 s each, and more while node 3 joins) keep the worker's slots busy in those shards while
# they move, so that leases taken on the old owner are reported after the
# move.
my @to_n3 = split /,/, $n1->safe_psql('postgres',
	q{SELECT string_agg(s::text, ',') FROM generate_series(0, 7) s
	   WHERE silotest.placed(s, ARRAY['n1', 'n2', 'n3']) = 'n3'});
cmp_ok(scalar(@to_n3), '>=', 1, 'placement will give node 3 shards ' . join(',', @to_n3));
my @moving = split /,/, $n1->safe_psql('postgres',
	"SELECT string_agg(t, ',') FROM (SELECT 'm' || i AS t FROM generate_series(1, 400) i) x
	  WHERE silo.shard_for_tenant(t) IN (" . join(',', @to_n3) . ')');
cmp_ok(scalar(@moving), '>=', 10, scalar(@moving) . ' tenants of those shards');
for my $n ($n1, $n2)
{
	my $ids = $n->safe_psql('postgres', qq{
SELECT string_agg(x.tenant || '/' || e.id, ' ')
  FROM (SELECT pick.t AS tenant, 'slow-' || i AS id FROM generate_series(1, 160) i,
			   LATERAL (SELECT (ARRAY['@{[ join("','", @moving) ]}'])[1 + i % @{[ scalar(@moving) ]}]) AS pick(t)
		 WHERE silo.shard_for_tenant(pick.t) = ANY ((SELECT serving_shards FROM silo.node_info)::int[])
		OFFSET 0) x,
	   LATERAL silo.enqueue('wc', '{"slow": true}', tenant => x.tenant, id => x.id) AS e(id)});
	$expected{$_} = 1 for grep { $_ ne '' } split / /, $ids;
}
my $n3 = new_node('n3');
my @nodes = ($n1, $n2, $n3);
$t0 = time();
my ($seq, $moved) = (0, 0);
while (time() < $t0 + 180)
{
	for (1 .. 4)
	{
		my $tenant = $moving[ int(rand(@moving)) ];
		my $id = 'b' . (++$seq);
		my ($rc, $out) = call(\@nodes,
			"SELECT silo.enqueue('wc', '{\"slow\": true}', tenant => '$tenant', id => '$id')");
		$expected{"$tenant/$id"} = 1 if $rc == 0;
		diag("enqueue $tenant/$id: $out") if $rc != 0;
	}
	$moved = 1, last if %{ serving($n3) } && settled(@nodes);
	usleep(100_000);
}
ok($moved, sprintf('node 3 joined and the shards moved (%.1f s, %d more jobs)', time() - $t0, $seq));
note('node 3 serves ' . join(',', sort keys %{ serving($n3) }));

$t0 = time();
$drained = 0;
while (time() < $t0 + 120)
{
	last if ($drained = all_succeeded(\@nodes, \%expected));
	usleep(200_000);
}
ok($drained, sprintf('the worker drained every node (%.1f s)', time() - $t0));
my $log = worker_log();
like($log, qr/leasing from node "n3" \(\Q$n3->{conninfo}\E\) too/, 'the worker found node 3');
my @follows = $log =~ /not the owner; following NOT_OWNER to node "(n\d)"/g;
cmp_ok(scalar(@follows), '>=', 1,
	'reports or heartbeats of moved leases followed NOT_OWNER ('
	  . scalar(@follows) . " times, to @follows)");
note($_) for grep { /NOT_OWNER|leasing from|shard map|connect/ } split /\n/, $log;

# ---------------------------------------------------------------------------
# 3. exactly once
# ---------------------------------------------------------------------------
my @dup;
my $j = job_states(\@nodes, \@dup);
my @missing = grep { !$j->{$_} } sort keys %expected;
my @extra = grep { !$expected{$_} } sort keys %$j;
my @bad = grep { $j->{$_} && ($j->{$_}[0] ne 'Succeeded' || $j->{$_}[1] != 1 || $j->{$_}[2] != 1) }
  sort keys %expected;
my $total = scalar(keys %expected);
ok(!@missing && !@dup && !@extra,
	"every one of the $total jobs is on exactly one node, the one serving its shard")
  or diag("missing @missing; on two owners @dup; unexpected @extra");
ok(!@bad, 'every job Succeeded with exactly one attempt')
  or diag(join('; ', map { "$_: @{ $j->{$_} }" } @bad));

ok(stop_process($w), 'the worker stops on SIGTERM');
is($w->{status}, 0, '... with exit status 0');
like($w->{out}, qr/finished $total jobs \($total succeeded, 0 failed, 0 cancelled; 0 of them after retries\)/,
	"... having completed each of the $total jobs once");
unlike($w->{out}, qr/\b[1-9]\d* task\(s\) released unfinished/, '... and released none');
unlike(worker_log(), qr/abandoned/, '... and abandoned no task');

# ---------------------------------------------------------------------------
# 4. no-op mode (batches completed with silo.complete_many per node), given
#    node 2
# ---------------------------------------------------------------------------
my $noop_total = 0;
for my $n (@nodes)
{
	$noop_total += $n->safe_psql('postgres', q{
SELECT count(*)
  FROM (SELECT 'u' || n AS tenant, n FROM generate_series(1, 150) n
		 WHERE silo.shard_for_tenant('u' || n) = ANY ((SELECT serving_shards FROM silo.node_info)::int[])
		OFFSET 0) x,
	   LATERAL silo.enqueue('wn', '{}', tenant => x.tenant, id => 'n' || x.n) AS e(id)});
}
is($noop_total, 150, 'no-op: 150 jobs enqueued on their owners among the three nodes');
my $wn = start_process(
	[
		$worker, '--dsn', $n2->connstr('postgres'), '--worker-id', 'w22n',
		'--task-group', 'wn', '--batch', '16', '--concurrency', '16', '--max-jobs', '150'
	]);
ok(wait_process_exit($wn, 60), 'no-op: the worker given node 2 exits after --max-jobs 150');
stop_process($wn);
like($wn->{out}, qr/finished 150 jobs \(150 succeeded, 0 failed/, '... having completed 150 jobs');
is( join('+', map { $_->safe_psql('postgres', q{
SELECT count(*) FROM silo.jobs WHERE task_group = 'wn' AND status = 'Succeeded'
   AND silo.shard_for_tenant(tenant) = ANY ((SELECT serving_shards FROM silo.node_info)::int[])}) } @nodes),
	join('+', map { $_->safe_psql('postgres', q{
SELECT count(*) FROM silo.jobs WHERE task_group = 'wn'
   AND silo.shard_for_tenant(tenant) = ANY ((SELECT serving_shards FROM silo.node_info)::int[])}) } @nodes),
	'... all of them Succeeded, on every node');

# ---------------------------------------------------------------------------
# 5. a report waiting for its shard (SL021) does not hold the loop
# ---------------------------------------------------------------------------
my %n3_shards = %{ serving($n3) };
my @hold_tenants = map {
	my $s = $_;
	$n3->safe_psql('postgres',
		"SELECT t FROM (SELECT 'h' || i AS t FROM generate_series(1, 400) i) x WHERE silo.shard_for_tenant(t) = $s LIMIT 1")
} sort keys %n3_shards;
my $release = "$dir/release-holds";
for my $t (@hold_tenants)
{
	$n3->safe_psql('postgres', "SELECT silo.enqueue('wp', '{\"hold\": true}', tenant => '$t', id => 'hold-$t')");
}
my $wp_err = "$dir/worker-wp.err";
my $wp = start_process(
	[
		$worker, '--dsn', $n1->connstr('postgres'), '--worker-id', 'w22p', '-v',
		'--task-group', 'wp', '--concurrency', '8', '--poll-ms', '200', '--lease-ms', '20000',
		'--exec', qq{read -r p; case "\$p" in *hold*) while [ ! -e '$release' ]; do sleep 0.05; done ;; esac}
	],
	stderr => $wp_err);
ok( poll_until($n3,
		"SELECT count(*) FROM silo.jobs WHERE task_group = 'wp' AND status = 'Running'",
		scalar(@hold_tenants), 30),
	'one job held running in each of node 3\'s shards ' . join(',', sort keys %n3_shards));
# node 3 leaves; nodes 1 and 2 take its shards but hold each move at
# "drained": the source has paused the shard, nobody verifies
$_->safe_psql('postgres', "ALTER SYSTEM SET silo.test_move_pause_at = 'drained'; SELECT pg_reload_conf()")
  for ($n1, $n2);
$n3->safe_psql('postgres', 'ALTER SYSTEM SET silo.draining = on; SELECT pg_reload_conf()');
# each target moves one shard at a time: as many paused shards as targets
my $targets = $n1->safe_psql('postgres',
	"SELECT count(DISTINCT silotest.placed(s, ARRAY['n1', 'n2'])) FROM unnest(ARRAY["
	  . join(',', keys %n3_shards) . ']) s');
ok(poll_until($n3, q{SELECT count(*) FROM silo.cluster_info WHERE state = 'paused'}, $targets, 60),
	"node 3 paused $targets shard(s) for their moves");
my @paused = split /,/, $n3->safe_psql('postgres',
	q{SELECT string_agg(shard_id::text, ',') FROM silo.cluster_info WHERE state = 'paused'});
# the held jobs end: those of paused shards cannot be completed for now
open my $fh, '>', $release or die "$release: $!";
close $fh;
ok( poll_until($n3,
		'SELECT count(*) FROM silo.jobs WHERE task_group = \'wp\' AND status = \'Running\''
		  . ' AND silo.shard_for_tenant(tenant) IN (' . join(',', @paused) . ')', scalar(@paused), 10)
	  && poll_until($n3, q{SELECT count(*) FROM silo.jobs WHERE task_group = 'wp' AND status = 'Succeeded'},
		scalar(@hold_tenants) - scalar(@paused), 10),
	'the held jobs of served shards completed; those of the paused shards ' . join(',', @paused) . ' wait');
ok(poll_until_log($wp_err, qr/report of task \S+ waits for its shard/, 5),
	'... their completions wait for the shard (SL021), out of the loop');
# meanwhile the worker goes on: 20 new jobs of node 1's shards
my $t5 = time();
my $fresh = $n1->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT 'f' || n AS tenant, n FROM generate_series(1, 400) n
		 WHERE silo.shard_for_tenant('f' || n) = ANY ((SELECT serving_shards FROM silo.node_info)::int[])
		 LIMIT 20) x,
	   LATERAL silo.enqueue('wp', '{}', tenant => x.tenant, id => 'fresh-' || x.n) AS e(id)});
ok( poll_until($n1, q{SELECT count(*) FROM silo.jobs WHERE task_group = 'wp' AND id LIKE 'fresh-%' AND status = 'Succeeded'},
		$fresh, 6),
	sprintf('the worker leased and completed %d new jobs of node 1 meanwhile (%.1f s; lease 20 s)', $fresh, time() - $t5));
is( $n3->safe_psql('postgres',
		q{SELECT string_agg(shard_id::text, ',' ORDER BY shard_id) FROM silo.cluster_info WHERE state = 'paused'}),
	join(',', sort { $a <=> $b } @paused),
	'... while those shards were still paused');
# the holds cleared: the moves go on, the waiting completions follow the shards
$_->safe_psql('postgres', "ALTER SYSTEM RESET silo.test_move_pause_at; SELECT pg_reload_conf()") for ($n1, $n2);
my %holds_done;
$t5 = time();
while (time() < $t5 + 60)
{
	%holds_done = ();
	for my $n ($n1, $n2, $n3)
	{
		for my $row (split /\n/, $n->safe_psql('postgres', q{
SELECT j.id, j.status, (SELECT count(*) FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id)
  FROM silo.jobs j WHERE j.task_group = 'wp' AND j.id LIKE 'hold-%'}))
		{
			my ($id, $status, $att) = split /\|/, $row;
			$holds_done{$id} = "$status/$att" if $status eq 'Succeeded';
		}
	}
	last if keys %holds_done == @hold_tenants;
	usleep(200_000);
}
is_deeply([ sort values %holds_done ], [ ('Succeeded/1') x @hold_tenants ],
	'every held job Succeeded with one attempt, those of the paused shards on their new owners');
like(slurp_file($wp_err), qr/(?:complete|heartbeat) of task \S+ \(tenant "h\d+"\): not the owner; following NOT_OWNER/,
	'... their calls followed NOT_OWNER to the new owner (the heartbeat or the completion, whichever came first)');
ok(stop_process($wp), 'the worker stops');
my $wp_total = @hold_tenants + $fresh;
like($wp->{out}, qr/finished $wp_total jobs \($wp_total succeeded, 0 failed/,
	"... having completed each of the $wp_total jobs once");
$n3->safe_psql('postgres', 'ALTER SYSTEM RESET silo.draining; SELECT pg_reload_conf()');

$_->stop for @nodes;
etcd_stop($etcd);
note(sprintf('the whole test took %.1f s', time() - $t_start));

done_testing();

# wait_until_settled(NODES, TIMEOUT): settled() within TIMEOUT seconds.
sub wait_until_settled
{
	my ($nodes, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		return 1 if settled(@$nodes);
		usleep(100_000);
	}
	diag('moves: ' . encode_json(moves() // {}));
	return 0;
}
