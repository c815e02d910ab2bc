
# 019_cluster_moves.pl: shards move between nodes with their rows
# (docs/cluster.md, "Moving a shard"), against a real 3-member etcd:
#
#  1. node 1 owns every shard, with jobs in many tenants: pending (due and
#     future), running with leases, finished, holding and waiting for
#     concurrency slots;
#  2. node 2 joins: the shards placement gives it move, with equal
#     setsums (each side summing only the tail during the pause), while a
#     small workload runs through both nodes following
#     SL020 and retrying SL021; a lease taken on node 1 before its shard
#     moved completes on node 2; every job is on exactly one node, on the
#     node that owns its shard; node 2's enqueue order continues past what
#     it received; row hints arrived empty;
#  3. graceful leave: node 2 drains and its shards move back to node 1;
#  4. kill -9 of the target while it copies: it resumes after its restart
#     and the move ends with one owner holding all the shard's rows;
#  5. kill -9 of the source while its shard is paused (the target's views
#     do not show the copy it holds): after its restart the shard is still
#     paused (SL021), the move completes, one owner;
#  after 4 and 5, no node keeps a slot, publication, subscription or
#  stale shard_state row;
# and with SILO_CLUSTER_LONG (make test-cluster), kill -9 of either node at
# every other step of a move.  Hooks: silo.test_move_pause_at holds a
# node's coordinator at a phase.
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

my $ttl = 3;
my $P = 'c19';
my $t_start = time();
my $long = $ENV{SILO_CLUSTER_LONG} ? 1 : 0;

ok(defined etcd_binary(), 'etcd is installed')
  or BAIL_OUT('etcd not found: tools/ensure-deps.sh installs etcd-server');
my @etcd = etcd_cluster_start(3, name => 'c19_');
my $endpoints = etcd_endpoints(@etcd);
my $http = HTTP::Tiny->new(timeout => 2);

# ---------------------------------------------------------------------------
# etcd
# ---------------------------------------------------------------------------

# etcd_post(PATH, BODY): the first member's decoded answer, or undef.
sub etcd_post
{
	my ($path, $body) = @_;
	for my $m (@etcd)
	{
		next unless etcd_alive($m);
		my $r = $http->post("$m->{client_url}/v3/$path",
			{ content => encode_json($body), headers => { 'Content-Type' => 'application/json' } });
		return decode_json($r->{content}) if $r->{success};
	}
	return undef;
}

# moves(): the move records, { shard => value }.
sub moves
{
	my $prefix = "$P/coord/moves/";
	my $end = substr($prefix, 0, -1) . '0';
	my $r = etcd_post('kv/range',
		{ key => encode_base64($prefix, ''), range_end => encode_base64($end, '') })
	  // return undef;
	my %m;
	for my $kv (@{ $r->{kvs} // [] })
	{
		my ($s) = decode_base64($kv->{key}) =~ m{/(\d+)$};
		$m{$s} = decode_json(decode_base64($kv->{value}));
	}
	return \%m;
}

# wait_move_phase(SHARD, PHASE, TIMEOUT): until shard's record is in PHASE.
sub wait_move_phase
{
	my ($shard, $phase, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		my $m = moves();
		return 1 if $m && $m->{$shard} && $m->{$shard}{phase} eq $phase;
		usleep(50_000);
	}
	return 0;
}

# ---------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------

# new_node(NAME): a node in cluster mode (not started); hold: a phase for
# silo.test_move_pause_at.
sub new_node
{
	my ($name, %opt) = @_;
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
silo.lease_ttl_s = $ttl
silo.initial_shard_count = 8
silo.move_drain_timeout_ms = 2000
silo.move_pause_limit_ms = 20000
});
	return $node;
}

# start_node(NODE): start it; the extensions and helpers once.
sub start_node
{
	my ($node) = @_;
	$node->start;
	return if $node->{installed};
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS silo CASCADE');
	install_test_helpers($node, 'postgres');
	$node->safe_psql(
		'postgres', q{
CREATE OR REPLACE FUNCTION silotest.probe(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
BEGIN
	PERFORM silo.cancel('silotest-no-such-job', t);
	RETURN 'served';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
	RETURN CASE WHEN st = 'SL003' THEN 'served' ELSE st END;
END $$;
-- the shard placement gives to one of the members (docs/cluster.md)
CREATE OR REPLACE FUNCTION silotest.placed(s int, members text[]) RETURNS text
LANGUAGE sql AS $$
SELECT m FROM unnest(members) m
 ORDER BY (hashtextextended(m || ':' || s, 0)::numeric
		   + CASE WHEN hashtextextended(m || ':' || s, 0) < 0 THEN 18446744073709551616 ELSE 0 END) DESC,
		  m LIMIT 1 $$;
});
	$node->{installed} = 1;
	return;
}

# set_hold(NODE, PHASE): silo.test_move_pause_at ('' clears it), reloaded.
sub set_hold
{
	my ($node, $phase) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET silo.test_move_pause_at = '$phase'; SELECT pg_reload_conf()");
	return;
}

# clear_hold_offline(NODE): drop the hold from a stopped node's auto.conf.
sub clear_hold_offline
{
	my ($node) = @_;
	my $f = $node->data_dir . '/postgresql.auto.conf';
	my @l = grep { !/test_move_pause_at/ } split /\n/, slurp_file($f);
	open my $fh, '>', $f or die "$f: $!";
	print $fh join("\n", @l) . "\n";
	close $fh;
	return;
}

# owned(NODE): the shards it serves, "0,3,5".
sub owned
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT array_to_string(serving_shards, ',') FROM silo.node_info});
}

# placement(NODE, MEMBERS): "shard=node,..." as placement says.
sub placement
{
	my ($node, @members) = @_;
	my $arr = join(',', map { "'$_'" } @members);
	return $node->safe_psql('postgres',
		"SELECT string_agg(s || '=' || silotest.placed(s, ARRAY[$arr]), ',' ORDER BY s) FROM generate_series(0, 7) s"
	);
}

# settled(NODES, MEMBERS): no move records, and every shard served by the
# node placement gives it to.
sub settled
{
	my ($nodes, @members) = @_;
	my $m = moves() // return 0;
	return 0 if %$m;
	my $want = placement($nodes->[0], @members);
	my %have;
	for my $n (@$nodes)
	{
		$have{$_} = $n->{node_id} for grep { $_ ne '' } split /,/, owned($n);
	}
	my $got = join(',', map { "$_=" . ($have{$_} // '?') } 0 .. 7);
	return $got eq $want;
}

# call(NODES, TENANT, SQL): run SQL for TENANT on whichever node serves its
# shard: follow SL020, retry SL021 (a client's routing); (rc, out).
sub call
{
	my ($nodes, $tenant, $sql) = @_;
	my $deadline = time() + 30;
	my $i = 0;
	while (time() < $deadline)
	{
		my $node = $nodes->[ $i++ % @$nodes ];
		next unless $node->{up};
		my ($out, $err) = ('', '');
		my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
			on_error_stop => 1, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
		return (0, $out) if $rc == 0;
		return ($rc, $err) unless $err =~ /SL02[01]/;
		usleep(20_000) if $err =~ /SL021/;
	}
	return (1, 'no node served it');
}

# jobs_on(NODE): the jobs in its job_info, { "tenant/id" => 1 }.
sub jobs_on
{
	my ($node) = @_;
	my %j = map { $_ => 1 } grep { $_ ne '' } split /\n/,
	  $node->safe_psql('postgres', q{SELECT tenant || '/' || id FROM silo.job_info});
	return \%j;
}

# check_exactly_once(NODES, EXPECTED, LABEL): every expected job on exactly
# one node, every node's jobs of shards it serves, nothing else.
sub check_exactly_once
{
	my ($nodes, $expected, $label) = @_;
	my (%count, @misplaced);
	for my $n (@$nodes)
	{
		next unless $n->{up};
		my %mine = map { $_ => 1 } split /,/, owned($n);
		for my $row (split /\n/,
			$n->safe_psql('postgres',
				q{SELECT tenant || '/' || id || ' ' || silo.shard_for_tenant(tenant) FROM silo.job_info}))
		{
			my ($job, $shard) = split / /, $row;
			$count{$job}++;
			push @misplaced, "$job on $n->{node_id}" unless $mine{$shard};
		}
	}
	my @missing = grep { !$count{$_} } keys %$expected;
	my @dup = grep { $count{$_} > 1 } keys %count;
	my @extra = grep { !$expected->{$_} } keys %count;
	ok(!@missing && !@dup && !@extra && !@misplaced,
		"$label: every job exactly once, on the node serving its shard ("
		  . scalar(keys %count) . " jobs)")
	  or diag("missing @missing[0..min(5,$#missing)]; duplicated @dup[0..min(5,$#dup)];"
		  . " unexpected @extra[0..min(5,$#extra)]; misplaced @misplaced[0..min(5,$#misplaced)]");
	return;
}

sub min { return $_[0] < $_[1] ? $_[0] : $_[1]; }

# workload_step(NODES, EXPECTED, N): enqueue N jobs into random tenants and
# complete what one lease returns, through call().
my $wl_seq = 0;
sub workload_step
{
	my ($nodes, $expected, $n) = @_;
	for (1 .. $n)
	{
		my $tenant = 't' . int(rand(40));
		my $id = 'wl-' . (++$wl_seq);
		my ($rc, $out) = call($nodes, $tenant,
			"SELECT silo.enqueue('wl', '{}', tenant => '$tenant', id => '$id')");
		$expected->{"$tenant/$id"} = 1 if $rc == 0;
		diag("enqueue $tenant/$id: $out") if $rc != 0;
	}
	for my $node (grep { $_->{up} } @$nodes)
	{
		my ($out, $err) = ('', '');
		$node->psql('postgres',
			q{SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('wl-w', 'wl', max_tasks => 5)), 'wl-w')},
			stdout => \$out, stderr => \$err);
	}
	return;
}

# wait_settled(NODES, MEMBERS, EXPECTED, TIMEOUT): run the workload until
# the cluster settles; 1 when it did.
sub wait_settled
{
	my ($nodes, $members, $expected, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		return 1 if settled($nodes, @$members);
		workload_step($nodes, $expected, 3) if $expected;
		usleep(100_000);
	}
	diag('moves: ' . encode_json(moves() // {}));
	return 0;
}

# setsum_lines(NODE, POS): the coordinator's verdicts since POS.
sub setsum_lines
{
	my ($node, $pos) = @_;
	my $log = substr(slurp_file($node->logfile), $pos);
	my $agree = () = $log =~ /setsums agree with the source's/g;
	my $differ = () = $log =~ /setsums differ from the source's/g;
	my @pauses = $log =~ /after a pause of (\d+) ms/g;
	return ($agree, $differ, @pauses);
}

# ---------------------------------------------------------------------------
# 1. node 1 owns every shard, with jobs
# ---------------------------------------------------------------------------
my $n1 = new_node('n1');
my $n2 = new_node('n2');
my @nodes = ($n1, $n2);
start_node($n1);
$n1->{up} = 1;
ok(poll_until($n1, q{SELECT cardinality(serving_shards) FROM silo.node_info}, '8', 30),
	'node 1 serves all 8 shards');

my %expected;
$n1->safe_psql(
	'postgres', q{
SELECT silo.enqueue('g', jsonb_build_object('n', n), tenant => 't' || (n % 40), id => 'j' || n,
					start_at => CASE WHEN n % 7 = 0 THEN now() + interval '1 hour' ELSE now() END,
					limits => CASE WHEN n % 5 = 0
								   THEN '[{"type": "concurrency", "key": "k", "maxConcurrency": 1}]'::jsonb
								   ELSE '[]'::jsonb END)
  FROM generate_series(1, 1200) n;
});
$expected{"t" . ($_ % 40) . "/j$_"} = 1 for 1 .. 1200;
is( $n1->safe_psql('postgres',
		q{SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'g', max_tasks => 400)), 'w')}),
	'400', '400 jobs completed');
# running leases, some of them holding concurrency slots
my @held = split /\n/, $n1->safe_psql('postgres',
	q{SELECT task_id || ' ' || tenant FROM silo.lease('w', 'g', max_tasks => 100, lease_ms => 600000)});
is(scalar(@held), 100, '100 jobs running with leases');
my $state = $n1->safe_psql('postgres',
	q{SELECT (SELECT count(*) FROM silo.concurrency_holder) > 0, (SELECT count(*) FROM silo.concurrency_request) > 0,
			 (SELECT count(*) FROM silo.task WHERE NOT due) > 0});
is($state, 't|t|t', 'slots held and waited for, future tasks');

# ---------------------------------------------------------------------------
# 2. node 2 joins: shards move, with the workload running
# ---------------------------------------------------------------------------
my $pos2 = 0;
my $pos1 = -s $n1->logfile;
start_node($n2);
$n2->{up} = 1;
my $want = placement($n1, 'n1', 'n2');
my $moving = () = $want =~ /=n2/g;
cmp_ok($moving, '>=', 1, "placement gives node 2 $moving of 8 shards ($want)");
my $t_join = time();
ok(wait_settled(\@nodes, [ 'n1', 'n2' ], \%expected, 120),
	sprintf('the shards moved to node 2 (%.1f s)', time() - $t_join));
my ($agree, $differ, @pauses) = setsum_lines($n2, $pos2);
is($agree, $moving, "node 2 verified $moving copies by setsum");
is($differ, 0, '... no setsums differed');
note("pauses (ms): @pauses");
{
	# each side summed the shard before the pause and only its tail in it
	my $src = () = substr(slurp_file($n1->logfile), $pos1) =~ /summed the tail,/g;
	my $tgt = () = substr(slurp_file($n2->logfile), $pos2) =~ /summed the copy with its tail/g;
	is("$src/$tgt", "$moving/$moving", '... each side summed only the tail during the pause');
}
check_exactly_once(\@nodes, \%expected, 'after the join');

# a lease taken on node 1 before its shard moved completes on node 2
{
	my %n2 = map { $_ => 1 } split /,/, owned($n2);
	my ($task, $tenant) = ('', '');
	for my $h (@held)
	{
		my ($t, $te) = split / /, $h;
		next unless $n2{ $n1->safe_psql('postgres', "SELECT silo.shard_for_tenant('$te')") };
		($task, $tenant) = ($t, $te);
		last;
	}
	ok($task ne '', "a lease of tenant $tenant moved to node 2");
	# node 1 no longer has the lease, so it cannot name the tenant's owner
	# (SL001); the report succeeds on node 2, which has it
	my ($out, $err) = ('', '');
	$n1->psql('postgres', "SELECT silo.complete('$task', 'w', '{\"late\": true}')",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/SL001/, '... its completion on node 1 finds no lease there');
	# with the tenant (as silo.leased_task returned it), node 1 names the
	# owner: SL020, with node 2's id in the hint and the detail
	($out, $err) = ('', '');
	$n1->psql('postgres', "SELECT silo.heartbeat('$task', 'w', 600000, tenant => '$tenant')",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/SL020/, '... a heartbeat that names the tenant gets SL020 on node 1');
	like($err, qr/"owner_node_id": "$n2->{node_id}"/, '... whose detail names node 2');
	($out, $err) = ('', '');
	$n1->psql('postgres', "SELECT silo.complete('$task', 'w', '{\"late\": true}', '$tenant')",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/SL020/, '... and so does its completion');
	like($err, qr/HINT:  Send the call to node "$n2->{node_id}"/, '... with a hint to send it to node 2');
	is($n2->safe_psql('postgres',
			"SELECT silo.heartbeat('$task', 'w', 600000, tenant => '$tenant')"),
		'f', '... where the heartbeat that names the tenant extends the lease');
	my $rc = $n2->psql('postgres', "SELECT silo.complete('$task', 'w', '{\"late\": true}', '$tenant')",
		stdout => \$out, stderr => \$err);
	is($rc, 0, '... and completes on node 2, where the lease moved')
	  or diag($err);
	is($n2->safe_psql('postgres',
			"SELECT count(*) FROM silo.attempt WHERE task_id = '$task' AND status = 'Succeeded'"),
		'1', '... where its attempt succeeded');
	is($n2->safe_psql('postgres',
			q{SELECT (SELECT last_value FROM silo.job_seq) >= (SELECT max(seq) FROM silo.job_info)}),
		't', "node 2's enqueue order continues past every seq it received");
	is($n2->safe_psql('postgres',
			q{SELECT count(*) FROM silo.job_status s WHERE s.status_index_tid IS NOT NULL
			   AND NOT EXISTS (SELECT 1 FROM silo.job_status_index x WHERE x.ctid = s.status_index_tid)}),
		'0', 'no row hint on node 2 points at another row');
	is($n1->safe_psql('postgres', q{SELECT count(*) FROM pg_replication_slots}) . '/'
		  . $n1->safe_psql('postgres', q{SELECT count(*) FROM pg_publication}) . '/'
		  . $n2->safe_psql('postgres', q{SELECT count(*) FROM pg_subscription}) . '/'
		  . $n2->safe_psql('postgres', q{SELECT count(*) FROM pg_publication}),
		'0/0/0/0', 'no slot, publication or subscription is left');
	is($n1->safe_psql('postgres', q{SELECT count(*) FROM silo.shard_state WHERE state <> 'owned'})
		  . '/' . $n2->safe_psql('postgres', q{SELECT count(*) FROM silo.shard_state WHERE state <> 'owned'}),
		'0/0', 'every shard_state row says owned');
}

# ---------------------------------------------------------------------------
# 3. graceful leave: node 2 drains
# ---------------------------------------------------------------------------
{
	my $pos = log_position($n1);
	$n2->safe_psql('postgres', q{ALTER SYSTEM SET silo.draining = on; SELECT pg_reload_conf()});
	my $t0 = time();
	ok(wait_settled(\@nodes, ['n1'], \%expected, 120),
		sprintf('node 2 drained: its shards moved back to node 1 (%.1f s)', time() - $t0));
	is(owned($n2), '', 'node 2 serves nothing');
	my ($a, $d) = setsum_lines($n1, $pos);
	is("$a/$d", "$moving/0", "node 1 verified the $moving copies by setsum");
	check_exactly_once(\@nodes, \%expected, 'after the leave');
	$n2->safe_psql('postgres', q{ALTER SYSTEM RESET silo.draining; SELECT pg_reload_conf()});
}

# kill9_and_wait(NODE): kill -9 of its postmaster; wait until the
# postmaster and every process it had started are gone (a new postmaster
# refuses the data directory while any lives).
sub kill9_and_wait
{
	my ($node) = @_;
	my $pm = $node->{_pid};
	my @pids = ($pm);
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh> // '';
		close $fh;
		push @pids, $1 if $line =~ /^(\d+) \(.*\) \S+ (\d+) / && $2 == $pm;
	}
	$node->kill9;
	$node->{up} = 0;
	my $deadline = time() + 30;
	usleep(20_000) while (grep { kill(0, $_) } @pids) && time() < $deadline;
	return;
}

# kill_during(VICTIM, OTHER, HOLD_NODE, PHASE, LABEL): with HOLD_NODE held at
# PHASE, node 2 takes its shards again; once the first move reaches PHASE,
# kill -9 the victim, restart it, release the hold; the move must end with
# one owner holding all the shard's rows.
sub kill_during
{
	my ($victim, $hold_node, $phase, $label, %opt) = @_;
	set_hold($hold_node, $phase);
	# node 2 takes shards again once it no longer drains
	my $shard;
	my $deadline = time() + 60;
	while (time() < $deadline && !defined $shard)
	{
		my $m = moves() // {};
		($shard) = grep { $m->{$_}{phase} eq $phase } keys %$m;
		usleep(50_000);
	}
	if (!ok(defined $shard, "$label: a move reached $phase"))
	{
		set_hold($hold_node, '');
		return;
	}
	if ($opt{tail_checked})
	{
		# the source's setsums, summed before the pause and completed with
		# the tail, are the sums of all of the paused shard's rows
		my $sums;
		my $until = time() + 60;
		while (time() < $until && !$sums)
		{
			my $m = moves() // {};
			$sums = $m->{$shard}{setsums} if $m->{$shard};
			usleep(50_000) unless $sums;
		}
		my $whole = $victim->safe_psql('postgres',
			"SELECT silo.shard_setsums(range_start::bigint, CASE WHEN range_end < 9223372036854775808"
			  . " THEN range_end::bigint END) FROM silo.cluster_info WHERE shard_id = $shard");
		is($sums // '', $whole,
			"$label: the source's setsums in the record are the sums of the whole paused shard");
		like(slurp_file($victim->logfile), qr/shard $shard: summed the tail,/,
			"$label: ... computed from its tail");
	}
	if ($opt{copy_hidden})
	{
		# the target holds the whole copy, which is not its yet: in its
		# tables, not in its views (which show a node's own shards)
		my $seen = $hold_node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM silo.job_info WHERE silo.shard_for_tenant(tenant) = $shard) > 0,"
			  . " (SELECT count(*) FROM silo.jobs WHERE silo.shard_for_tenant(tenant) = $shard),"
			  . " (SELECT count(*) FROM silo.attempts WHERE silo.shard_for_tenant(tenant) = $shard)");
		my $owner = $victim->safe_psql('postgres',
			"SELECT count(*) > 0 FROM silo.jobs WHERE silo.shard_for_tenant(tenant) = $shard");
		is("$seen/$owner", 't|0|0/t',
			"$label: the target's copy of shard $shard is in its tables, not in its views; the paused source shows it");
	}
	kill9_and_wait($victim);
	clear_hold_offline($victim) if $victim == $hold_node;
	$victim->start;
	$victim->{up} = 1;
	if ($opt{paused_after_restart})
	{
		# right after a restart every shard answers SL021 (nothing is served
		# before silo.shard_state is read): wait until the node serves its
		# other shards, then shard S must still be paused
		my $other = $victim == $n1 ? $n2 : $n1;
		my $tenant = $other->safe_psql('postgres',
			"SELECT 'p' || n FROM generate_series(0, 9999) n WHERE silo.shard_for_tenant('p' || n) = $shard LIMIT 1");
		ok(poll_until($victim, q{SELECT cardinality(serving_shards) > 0 FROM silo.node_info}, 't', 30),
			"$label: after its restart the source serves its other shards");
		my $seen = $victim->safe_psql('postgres',
			"SELECT state || '/' || (SELECT $shard = ANY (serving_shards) FROM silo.node_info)"
			  . " || '/' || silotest.probe('$tenant') FROM silo.cluster_info WHERE shard_id = $shard");
		is($seen, 'paused/false/SL021',
			"$label: ... but keeps shard $shard paused (tenant $tenant gets SL021)");
	}
	set_hold($hold_node, '') if $victim != $hold_node;
	ok(wait_settled(\@nodes, [ 'n1', 'n2' ], \%expected, 120),
		"$label: the moves completed after the restart");
	check_exactly_once(\@nodes, \%expected, $label);
	check_no_leftovers($label);
	return;
}

# leftovers(NODE): its replication slots, publications, subscriptions and
# shard_state rows that are not 'owned' of a shard it serves, as one line
# ('' when there is none).
sub leftovers
{
	my ($node) = @_;
	return $node->safe_psql(
		'postgres', q{
SELECT concat_ws(' ',
	(SELECT 'slots: ' || string_agg(slot_name::text, ',') FROM pg_replication_slots),
	(SELECT 'publications: ' || string_agg(pubname::text, ',') FROM pg_publication),
	(SELECT 'subscriptions: ' || string_agg(subname::text, ',') FROM pg_subscription),
	(SELECT 'shard_state: ' || string_agg(shard_id || '=' || state, ',') FROM silo.shard_state
	  WHERE state <> 'owned'
		 OR NOT shard_id = ANY ((SELECT serving_shards FROM silo.node_info)::int[])))});
}

# check_no_leftovers(LABEL): once the moves are over, no node keeps a slot,
# a publication, a subscription or a state row of a move (the source sweeps
# leftover slots every 10 s).
sub check_no_leftovers
{
	my ($label) = @_;
	my $deadline = time() + 40;
	my $left;
	while (1)
	{
		$left = join('; ', map { "$_->{node_id}: " . leftovers($_) }
			  grep { leftovers($_) ne '' } @nodes);
		last if $left eq '' || time() > $deadline;
		usleep(200_000);
	}
	is($left, '', "$label: no slot, publication, subscription or stale shard_state is left");
	return;
}

# ---------------------------------------------------------------------------
# 4. kill -9 of the target while it copies
# ---------------------------------------------------------------------------
kill_during($n2, $n2, 'copying', 'kill -9 of the target in copying');

# back to node 1 for the next round
$n2->safe_psql('postgres', q{ALTER SYSTEM SET silo.draining = on; SELECT pg_reload_conf()});
ok(wait_settled(\@nodes, ['n1'], \%expected, 120), 'node 2 drained again');
$n2->safe_psql('postgres', q{ALTER SYSTEM RESET silo.draining; SELECT pg_reload_conf()});

# ---------------------------------------------------------------------------
# 5. kill -9 of the source while the shard is paused
# ---------------------------------------------------------------------------
kill_during($n1, $n2, 'drained', 'kill -9 of the source while paused',
	paused_after_restart => 1, copy_hidden => 1, tail_checked => 1);

# ---------------------------------------------------------------------------
# the long scenarios: every other step, either node
# ---------------------------------------------------------------------------
if ($long)
{
	for my $case (
		[ $n2, $n2, 'published', 'kill -9 of the target in published' ],
		[ $n1, $n2, 'copying', 'kill -9 of the source in copying' ],
		[ $n2, $n2, 'drained', 'kill -9 of the target while the source is paused' ],
		[ $n1, $n1, 'verified', 'kill -9 of the source at verified' ],
		[ $n2, $n1, 'verified', 'kill -9 of the target at verified' ],
		[ $n2, $n2, 'released', 'kill -9 of the target at released' ],
		[ $n1, $n1, 'acquired', 'kill -9 of the source at acquired' ])
	{
		$n2->safe_psql('postgres', q{ALTER SYSTEM SET silo.draining = on; SELECT pg_reload_conf()});
		ok(wait_settled(\@nodes, ['n1'], \%expected, 120), 'node 2 drained');
		$n2->safe_psql('postgres', q{ALTER SYSTEM RESET silo.draining; SELECT pg_reload_conf()});
		kill_during(@$case);
	}
}

$n2->stop;
$n1->stop;
etcd_stop($_) for @etcd;
my $secs = time() - $t_start;
note(sprintf('the whole test took %.1f s', $secs));
ok($long || $secs < 240, sprintf('the test took %.1f s', $secs));

done_testing();
