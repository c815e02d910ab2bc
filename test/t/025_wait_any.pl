
# 025_wait_any.pl: silo.wait_any -- one session awaits many jobs, holding
# no snapshot, woken by the commits that end them.
#
#  - the race of ends against registrations: 6 sessions each await 25 jobs
#    of their own in a loop (a DO block calls silo.wait_any on the jobs
#    not yet returned until none is left) while another session ends the
#    150 jobs one transaction each (complete, fail, cancel), in rounds
#    where the ends start before, with and after the waiters.  Every loop
#    finishes within seconds (a wake-up missed would leave it asleep until
#    its 60 s timeout, which the loop counts as a failure), and every id a
#    call returned was ended by then;
#  - a sleeping call holds no snapshot and no xid;
#  - a call returns the jobs that ended, not the others of its list;
#  - the pool (silo.max_wait_any_jobs = 200 here) is shared: while one
#    session awaits 150 jobs, another's call for 100 is refused at once
#    (53400) and writes nothing; a cancelled wait (pg_cancel_backend) and
#    a timed-out one give their places back: a call for 200 then fits.
#
# Every wait is a poll for a condition with a deadline.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = silo_node('wait_any', conf => "silo.max_wait_any_jobs = 200\n");
ok(defined wait_for_broker($node), 'broker runs');

# background sessions (SiloTest's bg_*): a call started, then collected
sub session { return bg_session($node) }
sub start_call { return bg_start(@_) }
sub collect { return bg_collect(@_) }

# asleep(N, TIMEOUT): whether N sessions sleep in silo.wait_any within
# TIMEOUT seconds.
sub asleep
{
	my ($n, $timeout) = @_;
	return poll_until(
		$node, q{SELECT count(*) FROM pg_stat_activity
		  WHERE query LIKE '%silo.wait_any%' AND state = 'active'
		    AND wait_event_type = 'Extension'}, "$n", $timeout);
}

# await_all_sql(IDS): a DO block that calls silo.wait_any until every one
# of IDS was returned, checks that each returned job had ended, and says
# how many calls it took.
sub await_all_sql
{
	my (@ids) = @_;
	my $arr = "ARRAY[" . join(', ', map { "'$_'" } @ids) . "]";
	return qq{DO \$\$
DECLARE
	waiting text[] := $arr;
	e text[];
	calls int := 0;
	bad text;
BEGIN
	WHILE cardinality(waiting) > 0 LOOP
		CALL silo.wait_any(waiting, '-', '60 s', e);
		calls := calls + 1;
		IF cardinality(e) = 0 THEN
			RAISE EXCEPTION 'timed out with % jobs left', cardinality(waiting);
		END IF;
		SELECT string_agg(id || '=' || status, ' ') INTO bad FROM silo.job_status
		 WHERE tenant = '-' AND id = ANY (e) AND status = 'Pending';
		IF bad IS NOT NULL THEN
			RAISE EXCEPTION 'returned while pending: %', bad;
		END IF;
		waiting := ARRAY(SELECT x FROM unnest(waiting) x WHERE x <> ALL (e));
	END LOOP;
	RAISE NOTICE 'all ended after % calls', calls;
END \$\$;};
}

my @waiters = map { session() } 1 .. 6;
my $ender = session();

# ---------------------------------------------------------------------------
# The race: 150 jobs end while 6 sessions register and look.
# ---------------------------------------------------------------------------

for my $round (1 .. 6)
{
	my @jobs = map { "r$round-$_" } 0 .. 149;
	$node->safe_psql('postgres', join("\n",
		map {
			$_ % 5 == 4
			  ? "SELECT silo.enqueue('any_later', id => 'r$round-$_', start_at => now() + interval '1 hour');"
			  : "SELECT silo.enqueue('any', id => 'r$round-$_');"
		} 0 .. 149));
	my %task = map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres', q{SELECT job_id, task_id FROM silo.lease('w', 'any', 200)});
	is(scalar(keys %task), 120, "round $round: 120 jobs leased, 30 waiting for a later start");

	# one transaction per end, in an order that crosses the sessions' lists
	my @order = map { ($_ * 37) % 150 } 0 .. 149;
	my @script = map {
		my $j = $jobs[$_];
		$_ % 5 == 4 ? "SELECT silo.cancel('$j');"
		  : $_ % 5 == 1 ? "SELECT silo.fail('$task{$j}', 'w', 'E', NULL);"
		  : "SELECT silo.complete('$task{$j}', 'w');"
	} @order;

	my @calls;
	my $start_waiters = sub {
		for my $w (0 .. 5)
		{
			push @calls,
			  [ $waiters[$w], start_call($waiters[$w], await_all_sql(@jobs[ $w * 25 .. $w * 25 + 24 ])) ];
		}
	};
	my $ends;
	$start_waiters->() if $round >= 5;
	$ends = start_call($ender, join("\n", @script)) if $round <= 4;
	$start_waiters->() if $round <= 4;
	$ends = start_call($ender, join("\n", @script)) if $round >= 5;

	my ($ended) = collect(60, [ $ender, $ends ]);
	ok(defined $ended && $ended->[1] eq '00000', "round $round: the 150 jobs ended")
	  or diag(explain $ended);
	my $t_ended = time();
	my @got = collect(30, @calls);
	my $late = time() - $t_ended;
	my @wrong = map {
		!defined $got[$_] ? "session $_: still waiting"
		  : $got[$_][1] ne '00000' || $got[$_][2] !~ /all ended after \d+ calls/
		  ? "session $_: $got[$_][1] $got[$_][2]"
		  : ()
	} 0 .. $#got;
	is(join('; ', @wrong), '', "round $round: every session saw its 25 jobs end");
	cmp_ok($late, '<', 15, "round $round: within seconds of the last end, not at the 60 s timeout");
}

# ---------------------------------------------------------------------------
# Asleep: no snapshot, no xid; woken for its own jobs only.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', join("\n",
	map { "SELECT silo.enqueue('idle', id => 'idle-$_');" } 0 .. 9));
my $w0 = start_call($waiters[0],
	"CALL silo.wait_any(ARRAY['idle-0', 'idle-1', 'idle-2'], timeout => '60 s');");
my $w1 = start_call($waiters[1], "CALL silo.wait_any(ARRAY['idle-3', 'idle-4'], timeout => '60 s');");
ok(asleep(2, 30), 'two sessions asleep in silo.wait_any');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE backend_xmin IS NULL AND backend_xid IS NULL) || '/' || count(*)
	  FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_any%' AND state = 'active'}),
	'2/2', 'no sleeping caller holds an xmin or an xid');

$node->safe_psql('postgres', q{SELECT silo.cancel('idle-1')});
my ($r0) = collect(20, [ $waiters[0], $w0 ]);
ok(defined $r0 && $r0->[0] =~ /^\{idle-1\}$/m, 'the end of one job returns it, and only it')
  or diag(explain $r0);
ok(asleep(1, 10), 'the other session sleeps on');
$node->safe_psql('postgres', q{SELECT silo.cancel('idle-4'); SELECT silo.cancel('idle-3')});
my ($r1) = collect(20, [ $waiters[1], $w1 ]);
ok(defined $r1 && $r1->[0] =~ /^\{(idle-3,idle-4|idle-4|idle-3)\}$/m, 'its jobs end: it returns them')
  or diag(explain $r1);

# ---------------------------------------------------------------------------
# The pool is shared, refused calls write nothing, places come back.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres',
	"SELECT count(silo.enqueue('pool', id => 'p-' || g)) FROM generate_series(1, 200) g");
# CALL takes no subquery: the arrays as literals
my $ids = sub { "'{" . join(',', map { "p-$_" } @_) . "}'" };
my $ids150 = $ids->(1 .. 150);
my $ids100 = $ids->(101 .. 200);
my $ids200 = $ids->(1 .. 200);
my $big = start_call($waiters[2], "CALL silo.wait_any($ids150, timeout => '60 s');");
ok(asleep(1, 30), 'one session awaits 150 jobs');
my ($refused) = collect(20, [ $waiters[3], start_call($waiters[3], "CALL silo.wait_any($ids100, timeout => '60 s');") ]);
is($refused->[1], '53400', 'a call for 100 more is refused at once (53400)')
  or diag(explain $refused);
like($refused->[2], qr/too many jobs awaited at once.*This call awaits 100 jobs; 50 of the 200 places/s,
	'the error says how many places are free');
# a cancel of the big call gives its 150 places back
$node->safe_psql('postgres', "SELECT pg_cancel_backend($waiters[2]{pid})");
my ($cancelled) = collect(20, [ $waiters[2], $big ]);
is($cancelled->[1], '57014', 'pg_cancel_backend ends the wait');
my ($fits) = collect(20, [ $waiters[3], start_call($waiters[3], "CALL silo.wait_any($ids200, timeout => '100 ms');") ]);
is_deeply([ $fits->[1], $fits->[0] =~ /\{\}/ ? 'empty' : $fits->[0] ], [ '00000', 'empty' ],
	'then a call for all 200 fits, and times out with none');
($fits) = collect(20, [ $waiters[4], start_call($waiters[4], "CALL silo.wait_any($ids200, timeout => '100 ms');") ]);
is($fits->[1], '00000', 'and the timed-out call gave its places back');
# a session that ends while it waits gives them back too
my $quitter = session();
start_call($quitter, "CALL silo.wait_any($ids200, timeout => '60 s');");
ok(asleep(1, 30), 'a session awaits all 200');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($quitter->{pid})");
ok( poll_until(
		$node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $quitter->{pid}", '0', 20),
	'it is terminated');
($fits) = collect(20, [ $waiters[4], start_call($waiters[4], "CALL silo.wait_any($ids200, timeout => '100 ms');") ]);
is($fits->[1], '00000', 'a terminated session gave its places back');

$_->quit for @waiters, $ender;
eval { $quitter->quit };
$node->stop;
done_testing();
