
# 011_notify.pl: coalesced wake-up notifications lose no wake-up.
#
# With silo.notify_coalesce_ms = 1000, a second due enqueue within a second
# of the first sends no NOTIFY of its own at commit; the broker must send
# one once the window has passed (the trailing edge).  Before the trailing
# edge existed, that second job's wake-up was simply lost and a LISTENing
# worker slept until its poll.
#
#  - two enqueues in one window: two notifications, the second no earlier
#    than the window after the first and from the broker;
#  - a burst of 30 enqueues in one window: still coalesced (a few
#    notifications, not 30), and more than the leading one;
#  - an aborted enqueue deferred in the window leaves nothing pending;
#  - a deferred wake-up is sent while the broker is paused too.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = silo_node('notify', conf => "silo.notify_coalesce_ms = 1000\n");
my $broker = wait_for_broker($node);
ok(defined $broker, 'broker runs');
$broker //= 0;

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN silo_task_ready');

# collect: poll the listener (psql prints notifications after each query)
# until $want notifications for $group have arrived or the deadline passes;
# returns the list of [pid, time seen].
sub collect
{
	my ($group, $want, $timeout) = @_;
	my @seen;
	my $deadline = time() + $timeout;
	my $re = qr/Asynchronous notification "silo_task_ready" with payload "\Q$group\E" received from server process with PID (\d+)/;
	while (time() < $deadline)
	{
		my $out = $listener->query_safe('SELECT 1');
		my $t = time();
		push @seen, [$1, $t] while $out =~ /$re/g;
		last if @seen >= $want;
		usleep(20_000);
	}
	return @seen;
}

# ---------------------------------------------------------------------------
# Two enqueues within one window: the second is notified by the broker.
# ---------------------------------------------------------------------------

# (one psql run, two autocommit transactions: both land in one window)
my $t0 = time();
$node->safe_psql('postgres', q{SELECT silo.enqueue('g_pair', '{}', id => 'pair-1');
SELECT silo.enqueue('g_pair', '{}', id => 'pair-2');});
my @pair = collect('g_pair', 2, 15);
is(scalar(@pair), 2, 'two enqueues in one window: two notifications (the second is not lost)');
SKIP:
{
	skip 'second notification missing', 2 if @pair < 2;
	cmp_ok($pair[1][1] - $t0, '>=', 0.9,
		'the trailing notification waits for the window (about 1 s after the first)');
	is($pair[1][0], $broker, 'the trailing notification is sent by the broker');
}

# ---------------------------------------------------------------------------
# A burst within one window is coalesced, and ends with a notification.
# ---------------------------------------------------------------------------

usleep(1_100_000);		# a fresh window
my $burst_start = time();
$node->safe_psql('postgres', join("\n",
	map { "SELECT silo.enqueue('g_burst', '{}', id => 'burst-$_');" } 1 .. 30));
my $burst_end = time();
my @burst = collect('g_burst', 100, ($burst_end - $burst_start) + 4);
my $windows = int(($burst_end - $burst_start) / 1.0) + 1;
note(sprintf('burst of 30 commits took %.2f s, %d notifications', $burst_end - $burst_start, scalar @burst));
cmp_ok(scalar(@burst), '>=', 2, 'burst: the leading and a trailing notification arrive');
cmp_ok(scalar(@burst), '<=', 2 * $windows + 1, 'burst: coalesced, at most about two per window');

# ---------------------------------------------------------------------------
# At the default (1 ms), enqueues spaced further apart than that are each
# notified at once by their own backend: coalescing costs nothing at low
# rates.
# ---------------------------------------------------------------------------

my $spaced = $node->safe_psql('postgres', q{
SET silo.notify_coalesce_ms = 1;
SELECT silo.enqueue('g_spaced', '{}', id => 'spaced-1');
SELECT pg_sleep(0.02);
SELECT silo.enqueue('g_spaced', '{}', id => 'spaced-2');
SELECT pg_backend_pid();});
my ($producer) = $spaced =~ /(\d+)\s*$/;
my @spaced = collect('g_spaced', 2, 10);
is(scalar(@spaced), 2, 'default window: two spaced enqueues, two notifications');
is(join(',', map { $_->[0] } @spaced), "$producer,$producer",
	'both sent by the producer itself at its commit, not deferred to the broker');

# ---------------------------------------------------------------------------
# An aborted enqueue leaves no wake-up behind.
# ---------------------------------------------------------------------------

usleep(1_100_000);
$node->psql('postgres', q{SELECT silo.enqueue('g_abort', '{}', id => 'abort-1');
BEGIN; SELECT silo.enqueue('g_abort', '{}', id => 'abort-2'); ROLLBACK;});
my @abort = collect('g_abort', 2, 3);
is(scalar(@abort), 1, 'an enqueue rolled back inside the window is not notified later');

# ---------------------------------------------------------------------------
# Paused broker: deferred wake-ups are still sent.
# ---------------------------------------------------------------------------

my $logpos = log_position($node);
$node->safe_psql('postgres', 'ALTER SYSTEM SET silo.broker_paused = on');
$node->reload;
ok(wait_for_log_until($node, qr/silo broker paused/, $logpos, 30), 'the broker says it is paused');
usleep(1_100_000);
$node->safe_psql('postgres', q{SELECT silo.enqueue('g_paused', '{}', id => 'paused-1');
SELECT silo.enqueue('g_paused', '{}', id => 'paused-2');});
my @paused = collect('g_paused', 2, 15);
is(scalar(@paused), 2, 'paused broker: the deferred wake-up is still sent');
$logpos = log_position($node);
$node->safe_psql('postgres', 'ALTER SYSTEM RESET silo.broker_paused');
$node->reload;
ok(wait_for_log_until($node, qr/silo broker resumed/, $logpos, 30), 'and then resumed');

$listener->quit;

done_testing();
