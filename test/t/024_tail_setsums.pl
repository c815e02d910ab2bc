
# 024_tail_setsums.pl: a move's setsums with only the tail summed in the
# pause (silo.move_tail_setsums, src/cluster/tail.c; docs/cluster.md, "The
# setsums and the tail"), on one node at wal_level = logical, against the
# whole sum (silo.shard_setsums) of the same rows at the pause:
#
#  1. the tail is started on a shard of 40 tenants with jobs in every state;
#     traffic runs through it (leases, completions, failures, cancels,
#     enqueues, deletes) while rounds go on;
#  2. meanwhile a commit waits for a synchronous standby that does not
#     exist (committed in the WAL, seen by no snapshot) for several rounds,
#     and is then released: its rows must be in the tail's sums;
#  3. at the pause (silo.shard_state says paused with an LSN) the tail's
#     setsums equal the whole sums, table by table, and its slot is gone;
#  4. a tail whose move is over (no shard_state row for it) fails, and
#     leaves no slot.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

# the broker paused: nothing but the traffic below changes the shard's rows
my $node = silo_node('tail',
	conf => "wal_level = logical\nmax_wal_senders = 4\nmax_replication_slots = 10\nsilo.broker_paused = on\n");
my $lo = '-9223372036854775808';
my $local = 'SET synchronous_commit = local; ';

# the shard [-2^63, 0): the tenants whose hash is negative
$node->safe_psql('postgres', q{
SELECT count(silo.enqueue('g', jsonb_build_object('n', n), tenant => 't' || (n % 80), id => 'j' || n))
  FROM generate_series(1, 3000) n;
SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'g', max_tasks => 800)), 'w');
SELECT silo.shard_publish('silo_tail_0', -9223372036854775808, 0);
INSERT INTO silo.shard_state (shard_id, state, move_id) VALUES (0, 'sending', 1);
});
my $tenants = $node->safe_psql('postgres',
	q{SELECT count(DISTINCT tenant) FROM silo.job_info WHERE hashtextextended(tenant, 0) < 0});
cmp_ok($tenants, '>=', 20, "$tenants tenants in the shard");

# the tail's session
my $tail = $node->background_psql('postgres', on_error_stop => 0);
$tail->{stdin} .= "SELECT silo.move_tail_setsums(0, 1, $lo, 0, 'silo_tail_0', 'paused', 600000);\n"
  . "\\echo '\@\@done' :SQLSTATE\n";
$tail->{run}->pump_nb;
my $deadline = time() + 120;
while (time() < $deadline && $tail->{stderr} !~ /summed up to the tail/)
{
	$tail->{run}->pump_nb;
	usleep(20_000);
}
like($tail->{stderr}, qr/summed up to the tail/, 'the tail summed the shard and said so');

# traffic: one round of each kind of change
sub traffic
{
	my ($i) = @_;
	$node->safe_psql('postgres', $local . qq{
SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'g', max_tasks => 40)), 'w');
SELECT count(*) FROM (SELECT silo.fail(task_id, 'w', 'E', '{}') FROM silo.lease('w', 'g', max_tasks => 5)) f;
SELECT count(*) FROM silo.lease('w', 'g', max_tasks => 5, lease_ms => 600000);
SELECT count(silo.enqueue('g', '{}', tenant => 't' || (n % 80), id => 'x$i-' || n)) FROM generate_series(1, 20) n;
DO \$\$BEGIN PERFORM silo.cancel('j' || (2900 + $i), 't' || ((2900 + $i) % 80));
  EXCEPTION WHEN OTHERS THEN NULL; END\$\$;
DO \$\$BEGIN PERFORM silo.delete_job('j' || (3 * $i + 1), 't' || ((3 * $i + 1) % 80));
  EXCEPTION WHEN OTHERS THEN NULL; END\$\$;
});
	return;
}
traffic($_) for 1 .. 5;

# a commit that waits for a synchronous standby nobody runs
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf();});
ok(poll_until($node, q{SHOW synchronous_standby_names}, 'nosuch', 30), 'a synchronous standby is required');
my $held = $node->background_psql('postgres', on_error_stop => 0);
$held->{stdin} .= "SET application_name = 'held'; SET synchronous_commit = on;\n"
  . "SELECT count(silo.enqueue('g', '{}', tenant => 't' || (n % 80), id => 'held-' || n)) FROM generate_series(1, 40) n;\n";
$held->{run}->pump_nb;
ok( poll_until(
		$node, q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'held' AND wait_event = 'SyncRep'},
		'1', 30),
	'a commit waits for the synchronous standby');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.job_info WHERE id LIKE 'held-%'}),
	'0', '... and is not seen yet');
traffic($_) for 6 .. 8;
usleep(500_000);	# several rounds while it is not seen
$node->safe_psql('postgres', $local
	  . q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'held'});
ok(poll_until($node, q{SELECT count(*) FROM silo.job_info WHERE id LIKE 'held-%'}, '40', 30),
	'released, it is seen (committed locally)');
$node->safe_psql('postgres',
	$local . q{ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf();});
traffic($_) for 9 .. 10;

# the pause: no more changes of the shard, then its LSN
my $whole = $node->safe_psql('postgres', "SELECT silo.shard_setsums($lo, 0)");
$node->safe_psql('postgres',
	q{UPDATE silo.shard_state SET state = 'paused', final_lsn = pg_current_wal_insert_lsn() WHERE shard_id = 0});
$deadline = time() + 60;
while (time() < $deadline && $tail->{stdout} !~ /\@\@done/)
{
	$tail->{run}->pump_nb;
	usleep(20_000);
}
my ($sums, $state) = $tail->{stdout} =~ /^(.*?)\n?\@\@done (\S+)/s;
is($state // 'timeout', '00000', 'the tail returned at the pause');
is($node->safe_psql('postgres', "SELECT silo.shard_setsums($lo, 0)"), $whole,
	'nothing changed the shard after the pause');
is($sums, $whole, "the tail's setsums equal the whole sums of the shard at the pause")
  or diag("tail:  $sums\nwhole: $whole");
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_replication_slots}), '0', '... and its slot is gone');
$tail->quit;
$held->quit;

# a tail whose move is over fails and leaves no slot
$node->safe_psql('postgres', q{DELETE FROM silo.shard_state});
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT silo.move_tail_setsums(0, 2, $lo, 0, 'silo_tail_0', 'paused', 600000)");
like($err, qr/the move of shard 0 is over on this node/, 'a tail whose move is over fails');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_replication_slots}), '0', '... and leaves no slot');

$node->stop;
done_testing();
