
# 020_wait_result.pl: silo.wait_result waits in the server, holding no
# snapshot, and the commit that ends the job wakes exactly its waiters.
#
#  - the race of a job's end against a waiter's registration: 30 waiters
#    (20 jobs, 10 of them with two waiters) start while another session
#    ends the same jobs, one transaction each, by complete, fail,
#    complete_many and cancel; six rounds, the ends starting before,
#    with and after the waiters.  Every waiter returns with its job's
#    status within seconds (the timeout is 60 s: a wake-up missed between
#    a waiter's look and its sleep would show as a waiter still asleep at
#    the deadline);
#  - 30 sleeping waiters hold no snapshot and no xid (backend_xmin and
#    backend_xid NULL in pg_stat_activity), where a sleeping SELECT does;
#  - the end of one job wakes its waiter and not another job's (a waiter
#    that wakes looks again in a new transaction: its xact_start moves);
#  - every other way a job ends wakes its waiter: a cancel of a waiting
#    job (a running one's cancel only flags it; ack_cancel ends it), the
#    broker's sweep of an expired lease (WORKER_CRASHED), a rate limit's
#    re-checks used up (RATE_LIMITED); a job ended and deleted, or ended
#    and purged, in one transaction gives its waiter SL003;
#  - the timeout (SL011), pg_cancel_backend and statement_timeout end a
#    wait (57014), and the session waits again afterwards.
#
# Every wait is a poll for a condition with a deadline.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = silo_node('wait_result');
ok(defined wait_for_broker($node), 'broker runs');

# background sessions (SiloTest's bg_*): a call started, then collected
sub session { return bg_session($node) }
sub start_call { return bg_start(@_) }
sub collect { return bg_collect(@_) }

# asleep(N, TIMEOUT): whether N backends are waiting in silo.wait_result
# (in WaitLatch) within TIMEOUT seconds.
sub asleep
{
	my ($n, $timeout) = @_;
	return poll_until(
		$node, q{SELECT count(*) FROM pg_stat_activity
		  WHERE query LIKE 'CALL silo.wait_result%' AND state = 'active'
		    AND wait_event_type = 'Extension'}, "$n", $timeout);
}

# run_on(S, SQL): run SQL in session S and wait for it (it must succeed).
sub run_on
{
	my ($s, $sql) = @_;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return $s->query_safe($sql);
}

# unchanged_for(PID, XACT_START, SECONDS): whether backend PID's
# xact_start stays XACT_START for SECONDS (a waiter that wakes looks again
# in a new transaction; each psql run sees fresh statistics).
sub unchanged_for
{
	my ($pid, $start, $seconds) = @_;
	my $deadline = time() + $seconds;
	while (time() < $deadline)
	{
		return 0
		  if $node->safe_psql('postgres',
			"SELECT xact_start FROM pg_stat_activity WHERE pid = $pid") ne $start;
		usleep(20_000);
	}
	return 1;
}

# wait_sql(JOB, TIMEOUT): the call that waits for JOB.
sub wait_sql
{
	my ($job, $timeout) = @_;
	return "CALL silo.wait_result('$job', timeout => '" . ($timeout // '60 s') . "');";
}

# status_of(RESULT): the status column of a CALL's output, or the error.
sub status_of
{
	my ($r) = @_;
	return 'still waiting' unless defined $r;
	return "error $r->[1]" if $r->[1] ne '00000';
	my ($status) = split /\|/, $r->[0];
	return $status;
}

my @waiters = map { session() } 1 .. 30;
my $ender = session();

# ---------------------------------------------------------------------------
# The race: jobs end while their waiters register and look.
# ---------------------------------------------------------------------------

my %kind = (0 => 'Succeeded', 1 => 'Failed', 2 => 'Succeeded', 3 => 'Cancelled');
for my $round (1 .. 6)
{
	my @jobs = map { "r$round-$_" } 0 .. 19;
	# kind i % 4: complete, fail, complete_many (in pairs), cancel while waiting
	$node->safe_psql('postgres', join("\n",
		map {
			$_ % 4 == 3
			  ? "SELECT silo.enqueue('race_later', id => 'r$round-$_', start_at => now() + interval '1 hour');"
			  : "SELECT silo.enqueue('race', id => 'r$round-$_');"
		} 0 .. 19));
	my %task = map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres', q{SELECT job_id, task_id FROM silo.lease('w', 'race', 100)});
	is(scalar(keys %task), 15, "round $round: 15 jobs leased, 5 waiting for a later start");

	# the ends, one transaction each, in an order that mixes the kinds
	my @script;
	my @order = $round % 2 ? reverse(0 .. 19) : (0 .. 19);
	for my $i (@order)
	{
		my $k = $i % 4;
		if ($k == 0)
		{
			push @script, "SELECT silo.complete('$task{$jobs[$i]}', 'w', '{\"i\": $i}');";
		}
		elsif ($k == 1)
		{
			push @script, "SELECT silo.fail('$task{$jobs[$i]}', 'w', 'E$i', NULL);";
		}
		elsif ($k == 2 && $i % 8 == 2)
		{
			# with the job four on, if there is one
			my @ids = map { "'$task{$_}'" } grep { defined $_ } @jobs[ $i, $i + 4 ];
			push @script,
			  'SELECT count(*) FROM silo.complete_many(ARRAY[' . join(', ', @ids) . "]::uuid[], 'w');";
		}
		elsif ($k == 3)
		{
			push @script, "SELECT silo.cancel('$jobs[$i]');";
		}
	}

	# rounds 1-2: the ends start first; 3-4: together; 5-6: the waiters first
	my @calls;
	my $start_waiters = sub {
		for my $w (0 .. 29)
		{
			my $job = $jobs[ $w % 20 ];
			push @calls, [ $waiters[$w], start_call($waiters[$w], wait_sql($job)), $job ];
		}
	};
	my $ends;
	$start_waiters->() if $round >= 5;
	$ends = start_call($ender, join("\n", @script)) if $round <= 4;
	$start_waiters->() if $round <= 4;
	$ends = start_call($ender, join("\n", @script)) if $round >= 5;

	my ($ended) = collect(30, [ $ender, $ends ]);
	ok(defined $ended && $ended->[1] eq '00000', "round $round: the 20 jobs ended")
	  or diag(explain $ended);
	my $t_ended = time();
	my @got = collect(20, map { [ $_->[0], $_->[1] ] } @calls);
	my $late = time() - $t_ended;
	my @wrong;
	for my $c (0 .. $#calls)
	{
		my ($i) = $calls[$c][2] =~ /-(\d+)$/;
		my $want = $kind{ $i % 4 };
		my $have = status_of($got[$c]);
		push @wrong, "$calls[$c][2]: $have (want $want)" if $have ne $want;
	}
	is(join('; ', @wrong), '', "round $round: all 30 waiters returned with their job's status");
	cmp_ok($late, '<', 10, "round $round: within seconds of the last end, not at the 60 s timeout");
}

# ---------------------------------------------------------------------------
# Sleeping waiters hold no snapshot and no xid; each wakes for its own job.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', join("\n",
	map { "SELECT silo.enqueue('idle', id => 'idle-$_');" } 0 .. 29));
my @idle = map { [ $waiters[$_], start_call($waiters[$_], wait_sql("idle-$_")) ] } 0 .. 29;
ok(asleep(30, 30), '30 waiters asleep');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE backend_xmin IS NULL AND backend_xid IS NULL) || '/' || count(*)
	  FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_result%' AND state = 'active'}),
	'30/30', 'no sleeping waiter holds an xmin or an xid');

# the control: a sleeping SELECT holds its snapshot's xmin
my $sleeper = session();
my $sleep_mark = start_call($sleeper, 'SELECT pg_sleep(60);');
ok( poll_until(
		$node, qq{SELECT backend_xmin IS NOT NULL FROM pg_stat_activity
		  WHERE pid = $sleeper->{pid} AND query LIKE 'SELECT pg_sleep%'}, 't', 20),
	'the control: a sleeping SELECT holds an xmin');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($sleeper->{pid})");
collect(20, [ $sleeper, $sleep_mark ]);

# the end of idle-0 wakes its waiter only: another waiter that woke would
# look again in a new transaction, and its xact_start would move
my $other_pid = $waiters[1]{pid};
my $other_start = $node->safe_psql('postgres',
	"SELECT xact_start FROM pg_stat_activity WHERE pid = $other_pid");
$node->safe_psql('postgres', q{SELECT silo.cancel('idle-0')});
my ($first) = collect(20, $idle[0]);
is(status_of($first), 'Cancelled', 'the waiter of the cancelled job returns');
ok(unchanged_for($other_pid, $other_start, 0.5), 'the waiter of another job did not wake');

# the others: all their jobs end in one transaction
$node->safe_psql('postgres', join("\n", 'BEGIN;',
	(map { "SELECT silo.cancel('idle-$_');" } 1 .. 29), 'COMMIT;'));
my @rest = collect(20, @idle[ 1 .. 29 ]);
is(scalar(grep { status_of($_) eq 'Cancelled' } @rest), 29,
	'one commit that ends 29 jobs wakes their 29 waiters');

# ---------------------------------------------------------------------------
# Every way a job ends wakes its waiter.
# ---------------------------------------------------------------------------

my $w = $waiters[0];

# wait_for_end(JOB, ACTION): start a waiter on JOB, let it fall asleep, run
# ACTION (SQL, or a code ref), and return the waiter's result.
sub wait_for_end
{
	my ($job, $action) = @_;
	my $mark = start_call($w, wait_sql($job));
	asleep(1, 20) or diag("the waiter of $job did not fall asleep");
	ref $action ? $action->() : $node->safe_psql('postgres', $action);
	my ($r) = collect(30, [ $w, $mark ]);
	return $r;
}

# a running job's cancel flags it (the waiter sleeps on); ack_cancel ends it
$node->safe_psql('postgres', q{SELECT silo.enqueue('ends', id => 'running')});
my $running = $node->safe_psql('postgres', q{SELECT task_id FROM silo.lease('w', 'ends', 1)});
my $r = wait_for_end(
	'running',
	sub {
		my $start = $node->safe_psql('postgres',
			"SELECT xact_start FROM pg_stat_activity WHERE pid = $w->{pid}");
		$node->safe_psql('postgres', q{SELECT silo.cancel('running')});
		ok(unchanged_for($w->{pid}, $start, 0.5),
			'the cancel of a running job does not end it: its waiter sleeps on');
		$node->safe_psql('postgres', qq{SELECT silo.ack_cancel('$running', 'w')});
	});
is(status_of($r), 'Cancelled', 'ack_cancel ends it: Cancelled');

# the broker's sweep of an expired lease
$node->safe_psql('postgres', q{SELECT silo.enqueue('ends', id => 'crashed')});
$node->safe_psql('postgres', q{SELECT count(*) FROM silo.lease('w', 'ends', 1, 1500)});
$r = wait_for_end('crashed', sub { });
is(status_of($r), 'Failed', 'the sweep of an expired lease: Failed');
like($r->[0], qr/\|WORKER_CRASHED\|/, '... with WORKER_CRASHED');

# a rate limit whose one re-check finds it still over: RATE_LIMITED
my $rate = q{'[{"type": "rateLimit", "name": "once", "uniqueKey": "u", "limit": 1,
	"durationMs": 3600000, "retryPolicy": {"initialBackoffMs": 1500, "maxRetries": 1}}]'};
$node->safe_psql('postgres', "SELECT silo.enqueue('rl', id => 'rl-1', limits => $rate)");
$node->safe_psql('postgres', "SELECT silo.enqueue('rl', id => 'rl-2', limits => $rate)");
$r = wait_for_end('rl-2', sub { });
is(status_of($r), 'Failed', 'a rate limit used up: Failed');
like($r->[0], qr/\|RATE_LIMITED\|/, '... with RATE_LIMITED');

# a re-import whose history ends a pending job (silo.import_jobs, 1.8)
$node->safe_psql('postgres',
	q{SELECT silo.enqueue('ends', id => 'imported', start_at => now() + interval '1 hour')});
$r = wait_for_end('imported', q{SELECT count(*) FROM silo.import_jobs('[{"task_group": "ends",
	"id": "imported", "attempts": [{"status": "Failed", "finished_at": "2026-01-01T10:00:00Z",
	"error_code": "OLD_QUEUE"}]}]')});
is(status_of($r), 'Failed', 'a re-import that ends a pending job: Failed');
like($r->[0], qr/\|OLD_QUEUE\|/, '... with its last attempt\'s error');

# ended and deleted in one transaction: the waiter finds no job
$node->safe_psql('postgres', q{SELECT silo.enqueue('ends', id => 'deleted')});
my $task = $node->safe_psql('postgres', q{SELECT task_id FROM silo.lease('w', 'ends', 1)});
$r = wait_for_end('deleted',
	"BEGIN; SELECT silo.complete('$task', 'w'); SELECT silo.delete_job('deleted'); COMMIT;");
is(status_of($r), 'error SL003', 'ended and deleted: SL003');

# ended and purged in one transaction (the purge's clock moved past the
# retention)
$node->safe_psql('postgres', q{SELECT silo.enqueue('ends', id => 'purged')});
$task = $node->safe_psql('postgres', q{SELECT task_id FROM silo.lease('w', 'ends', 1)});
$r = wait_for_end('purged', qq{BEGIN; SELECT silo.complete('$task', 'w');
SET LOCAL silo.clock_offset_ms = 700000000;
SELECT silo.purge_terminal_jobs(); COMMIT;});
is(status_of($r), 'error SL003', 'ended and purged: SL003');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.jobs WHERE id = 'purged'}),
	'0', '... the job was purged');

# ---------------------------------------------------------------------------
# What ends a wait without the job's end.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{SELECT silo.enqueue('never', id => 'forever')});

my $t0 = time();
my ($timed_out) = collect(20, [ $w, start_call($w, wait_sql('forever', '700 ms')) ]);
my $took = time() - $t0;
is(status_of($timed_out), 'error SL011', 'the timeout: SL011');
like($timed_out->[2], qr/job did not end within the timeout/, '... job did not end within the timeout');
ok($took >= 0.7 && $took < 10, sprintf('... after the timeout (%.2f s)', $took));

$r = wait_for_end('forever', "SELECT pg_cancel_backend($w->{pid})");
is(status_of($r), 'error 57014', 'pg_cancel_backend ends a wait: 57014');

run_on($w, q{SET statement_timeout = '700ms'});
($r) = collect(20, [ $w, start_call($w, wait_sql('forever')) ]);
is(status_of($r), 'error 57014', 'statement_timeout ends a wait: 57014');
like($r->[2], qr/statement timeout/, '... canceling statement due to statement timeout');
run_on($w, q{RESET statement_timeout});

# the session waits again, and is woken, after those errors
$node->safe_psql('postgres', q{SELECT silo.enqueue('ends', id => 'after')});
$task = $node->safe_psql('postgres', q{SELECT task_id FROM silo.lease('w', 'ends', 1)});
$r = wait_for_end('after', "SELECT silo.complete('$task', 'w')");
is(status_of($r), 'Succeeded', 'after a cancel and a timeout the session waits and wakes again');

$_->quit for @waiters, $ender, $sleeper;
$node->stop;
done_testing();
