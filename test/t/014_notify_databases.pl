
# 014_notify_databases.pl: wake-ups in two databases with silo installed do
# not share coalescing state, and none is lost in the database the broker
# does not serve.
#
# silo installs only in silo.database, but a copy of that database (CREATE
# DATABASE ... TEMPLATE, a restore under another name) has it too, and
# enqueues there call the same NOTIFY path.  A NOTIFY reaches only the
# listeners of the database it is sent in.  The coalescing table used to be
# keyed by the task group alone, so
#
#  - a group notified in one database held back the same-named group's
#    NOTIFY in the other for a window, and the broker then sent it in its
#    own database: the other database's listeners never heard of it;
#  - in a database the broker does not serve, a second enqueue within the
#    window was deferred to the broker, which sent it in its own database:
#    lost as well.
#
# Now the table is keyed by (database, group), and only the broker's
# database coalesces: the others notify at every commit.
#
# Setup: silo is created in "postgres" (the broker's database), then the
# server is restarted with silo.database = 'silodb', which is created as a
# copy of "postgres" (a template copy needs its source free of sessions, so
# the broker must be elsewhere at that moment).  Then the broker serves
# silodb and "postgres" is the other database with silo installed.
#
# Every wait is a poll for a condition with a deadline.  Where a test shows
# that a notification does NOT come, it looks until a deadline measured
# from the event after which none may come (the last commit), one window
# plus a margin for the broker's wake-up later.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = silo_node('notify_db', conf => "silo.notify_coalesce_ms = 1000\n");
ok(defined wait_for_broker($node), 'broker runs in postgres');

# move the broker (and pg_cron) to silodb, then create silodb from postgres
$node->append_conf('postgresql.conf', qq{
silo.database = 'silodb'
cron.database_name = 'silodb'
});
$node->restart;
my ($rc, $out, $err) = (1, '', '');
my $deadline = time() + 30;
while (time() < $deadline)
{
	# the broker may still be on its way out of postgres: retry until free
	($rc, $out, $err) = $node->psql('template1', 'CREATE DATABASE silodb TEMPLATE postgres');
	last if $rc == 0 || $err !~ /is being accessed by other users/;
	usleep(50_000);
}
is($rc, 0, 'silodb created as a copy of postgres') or diag($err);
my $broker = wait_for_broker($node, db => 'silodb');
ok(defined $broker, 'broker runs in silodb');
$broker //= 0;

my $window = 1.0;    # silo.notify_coalesce_ms, in seconds
my $margin = 2.0;    # for the broker to wake up and send a due wake-up

my %listener = (
	silodb => $node->background_psql('silodb'),
	postgres => $node->background_psql('postgres'));
$_->query_safe('LISTEN silo_task_ready') for values %listener;

# collect_until: poll the listener of $db (psql prints notifications after
# each query; 20 ms between polls) until $want notifications for $group
# have arrived or time() reaches $deadline (it polls at least once, so a
# deadline already past still collects what has arrived); returns the list
# of [pid, time seen].
sub collect_until
{
	my ($db, $group, $want, $deadline) = @_;
	my @seen;
	my $re = qr/Asynchronous notification "silo_task_ready" with payload "\Q$group\E" received from server process with PID (\d+)/;
	while (1)
	{
		my $out = $listener{$db}->query_safe('SELECT 1');
		my $t = time();
		push @seen, [$1, $t] while $out =~ /$re/g;
		last if @seen >= $want || $t >= $deadline;
		usleep(20_000);
	}
	return @seen;
}

# collect_quiet: the first notification for $group in $db (waited for up
# to 15 s), then every further one that arrives until one window plus the
# margin after $event (a time() at which the last commit that could cause
# one had ended): a wake-up deferred by that commit is due within the
# window, so anything later would not be one of them.
sub collect_quiet
{
	my ($db, $group, $event) = @_;
	my @seen = collect_until($db, $group, 1, time() + 15);
	push @seen, collect_until($db, $group, 1_000_000, $event + $window + $margin);
	return @seen;
}

# enqueue: enqueue one job per id into $group in $db, each in its own
# transaction; returns the producer's pid.
sub enqueue
{
	my ($db, $group, @ids) = @_;
	my $out = $node->safe_psql($db, join("\n",
		(map { "SELECT silo.enqueue('$group', '{}', id => '$_');" } @ids),
		'SELECT pg_backend_pid();'));
	my ($pid) = $out =~ /(\d+)\s*$/;
	return $pid // -1;
}

# ---------------------------------------------------------------------------
# A group notified in the broker's database does not hold back the
# same-named group's NOTIFY in the other database.
# ---------------------------------------------------------------------------

my $pa = enqueue('silodb', 'g_shared', 'shared-a');
my $pb = enqueue('postgres', 'g_shared', 'shared-b');
my $shared_end = time();
# the premise: the second commit came within the window of the first
# (commit times are cluster-wide; each job_info row is read in its database)
my $ta = $node->safe_psql('silodb', q{
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM silo.job_info WHERE id = 'shared-a'});
my $tb = $node->safe_psql('postgres', q{
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM silo.job_info WHERE id = 'shared-b'});
cmp_ok($tb - $ta, '<', $window, 'the two commits fell within one window');

my @sa = collect_quiet('silodb', 'g_shared', $shared_end);
my @sb = collect_quiet('postgres', 'g_shared', $shared_end);
is(scalar(@sb), 1, "the other database's enqueue is notified once in its own database");
is($sb[0][0] // -1, $pb, '... by its producer, at its commit');
is(scalar(@sa), 1, "the broker's database hears of its own enqueue only");
is($sa[0][0] // -1, $pa, '... sent by its producer');

# ---------------------------------------------------------------------------
# In the other database, two enqueues within one window are both notified
# there, by the producer: nothing is deferred to a broker that would send
# it in its own database.
# ---------------------------------------------------------------------------

my $po = enqueue('postgres', 'g_other', 'other-1', 'other-2');
my $other_end = time();
my @ob = collect_quiet('postgres', 'g_other', $other_end);
my @oa = collect_until('silodb', 'g_other', 1_000_000, $other_end + $window + $margin);
is(scalar(@ob), 2, 'other database: two enqueues in one window, two notifications there');
is(join(',', map { $_->[0] } @ob), "$po,$po", '... both sent by the producer at its commit');
is(scalar(@oa), 0, "... and none in the broker's database");

# ---------------------------------------------------------------------------
# The broker's database still coalesces (the trailing edge from the broker).
# ---------------------------------------------------------------------------

my $ps = enqueue('silodb', 'g_served', 'served-1', 'served-2');
my @served = collect_until('silodb', 'g_served', 2, time() + 15);
is(scalar(@served), 2, "broker's database: two enqueues in one window, two notifications");
is(join(',', map { $_->[0] } @served), "$ps,$broker",
	'... the first by the producer, the trailing one by the broker');

$_->quit for values %listener;

done_testing();
