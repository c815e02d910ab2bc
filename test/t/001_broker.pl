
# 001_broker.pl: the silo broker background worker.
#
#  - it shows in pg_stat_activity as backend_type 'silo broker', and
#    silo.broker_pid() is its pid;
#  - a job enqueued 2 s in the future is promoted (due, listed by a LISTENing
#    session) no earlier than its start time and within 1 s of it;
#  - an abandoned lease is swept into a WORKER_CRASHED attempt and the job is
#    retried per its policy and can be leased again;
#  - a committed enqueue of a future job wakes the broker through its latch
#    (measured against a control whose only chance is the periodic tick);
#  - an error in one expired lease is logged as a WARNING and does not stop
#    the sweep of the others, nor the broker.
#
# Times are measured inside the server: with track_commit_timestamp = on,
# pg_xact_commit_timestamp(xmin) of a row is when the transaction that last
# wrote it committed, e.g. when the broker promoted a task.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $node = silo_node('broker');

# ---------------------------------------------------------------------------
# The broker in pg_stat_activity
# ---------------------------------------------------------------------------

my $broker = wait_for_broker($node);
ok(defined $broker, 'a silo broker backend runs and silo.broker_pid() names it');
$broker //= 0;
is( $node->safe_psql(
		'postgres', qq{
SELECT backend_type, datname, application_name FROM pg_stat_activity WHERE pid = $broker}),
	'silo broker|postgres|silo broker',
	'broker: backend_type "silo broker", connected to silo.database');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'silo broker'"),
	'1', 'exactly one broker runs');

# ---------------------------------------------------------------------------
# A job 2 s in the future is promoted within 1 s of its start time, and a
# LISTENing session is told by the broker.
# ---------------------------------------------------------------------------

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN silo_task_ready');

$node->safe_psql('postgres', q{
SELECT silo.enqueue('g_future', '{"n": 1}', id => 'future-1',
                    start_at => clock_timestamp() + interval '2 s')});
is( $node->safe_psql('postgres', q{
SELECT t.due, j.status FROM silo.task t JOIN silo.jobs j ON j.id = t.job_id
 WHERE t.job_id = 'future-1'}),
	'f|Scheduled', 'future job: not due, Scheduled');

# Wait inside the listener's session, then collect what psql prints: the
# notification is printed after a query completes.
my $seen = $listener->query_safe(q{
SELECT silotest.wait_for($$SELECT due FROM silo.task WHERE job_id = 'future-1'$$, 10000) IS NOT NULL});
like($seen, qr/^t/, 'future job: promoted (due) within the deadline');

my $latency = $node->safe_psql('postgres', q{
SELECT round(extract(epoch FROM pg_xact_commit_timestamp(t.xmin) - i.start_at) * 1000)
  FROM silo.task t JOIN silo.job_info i ON i.tenant = t.tenant AND i.id = t.job_id
 WHERE t.job_id = 'future-1'});
note("promotion of future-1: ${latency} ms after its start_at");
cmp_ok($latency, '>=', 0, 'future job: not promoted before its start time');
cmp_ok($latency, '<', 1000, "future job: promoted within 1 s of its start time (${latency} ms)");

my $notes = $seen;
my $deadline = time() + 10;
my $note_re = qr/Asynchronous notification "silo_task_ready" with payload "g_future" received from server process with PID (\d+)/;
while ($notes !~ $note_re && time() < $deadline)
{
	$notes .= $listener->query_safe('SELECT 1');
}
like($notes, $note_re, 'LISTEN silo_task_ready: the promotion is notified with the task group as payload');
my ($notifier) = $notes =~ $note_re;
is($notifier // '', $broker, 'the notification comes from the broker');
$listener->quit;

is( $node->safe_psql('postgres', q{
SELECT job_id || ',' || attempt FROM silo.lease('w-1', 'g_future', 10, 10000)}),
	'future-1,1', 'the promoted job is leased');
$node->safe_psql('postgres', q{
SELECT silo.complete(task_id, 'w-1') FROM silo.leases WHERE job_id = 'future-1'});

# ---------------------------------------------------------------------------
# An abandoned lease is swept into a WORKER_CRASHED attempt and retried.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT silo.enqueue('g_sweep', '{}', id => 'abandon-1',
                    retry_policy => '{"retryCount": 1, "initialIntervalMs": 100}')});
my $lease = $node->safe_psql('postgres', q{
SELECT task_id || ',' || attempt || ',' || is_last_attempt || ',' || extract(epoch FROM lease_expires_at)
  FROM silo.lease('w-gone', 'g_sweep', 1, 500)});
my ($task1, $att1, $last1, $expires1) = split /,/, $lease;
is("$att1,$last1", '1,false', 'abandoned lease: attempt 1 of 2 leased for 500 ms');

ok( poll_until(
		$node, q{SELECT count(*) FROM silo.attempt WHERE job_id = 'abandon-1'},
		'1', 10),
	'abandoned lease: swept within the deadline');
is( $node->safe_psql('postgres', q{
SELECT attempt, status, error_code, worker_id, task_id, error_data->>'worker_id'
  FROM silo.attempt WHERE job_id = 'abandon-1'}),
	"1|Failed|WORKER_CRASHED|w-gone|$task1|w-gone",
	'abandoned lease: a Failed attempt with error_code WORKER_CRASHED');
my $sweep_ms = $node->safe_psql('postgres', qq{
SELECT round((extract(epoch FROM pg_xact_commit_timestamp(xmin)) - $expires1) * 1000)
  FROM silo.attempt WHERE job_id = 'abandon-1'});
note("abandon-1 was swept ${sweep_ms} ms after its lease expired");
cmp_ok($sweep_ms, '>=', 0, 'abandoned lease: not swept before it expired');
# The broker sweeps at least once a second; allow for the round's own
# duration and scheduling on a busy 2-core machine.
cmp_ok($sweep_ms, '<', 1500, "abandoned lease: swept within about a second (${sweep_ms} ms)");
is( $node->safe_psql('postgres', q{
SELECT current_attempt, status IN ('Retrying', 'Waiting') FROM silo.jobs WHERE id = 'abandon-1'}),
	'2|t', 'abandoned lease: the job is pending again, on attempt 2');

my $retry = poll_value($node, q{
SELECT task_id || ',' || attempt || ',' || relative_attempt || ',' || is_last_attempt
  FROM silo.lease('w-2', 'g_sweep', 1, 10000)}, 10);
ok(defined $retry, 'abandoned lease: the retry can be leased');
my ($task2, @rest) = split /,/, ($retry // ',,,');
is(join(',', @rest), '2,2,true', 'the retry is attempt 2, its last (retryCount 1)');
isnt($task2, $task1, 'the retry is a new task');
$node->safe_psql('postgres', qq{SELECT silo.complete('$task2', 'w-2', '{"ok": true}')})
  if defined $retry;
is( $node->safe_psql('postgres', q{
SELECT j.status, (SELECT string_agg(status, ',' ORDER BY attempt) FROM silo.attempt
                   WHERE job_id = j.id)
  FROM silo.jobs j WHERE j.id = 'abandon-1'}),
	'Succeeded|Failed,Succeeded', 'abandoned lease: the retry succeeded');

# ---------------------------------------------------------------------------
# A retry's backoff is timed by the broker too: a failure with
# initialIntervalMs 1500 schedules the retry 1.5 s later, and it is promoted
# within 1 s of that time.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT silo.enqueue('g_backoff', '{}', id => 'backoff-1',
                    retry_policy => '{"retryCount": 1, "initialIntervalMs": 1500}');
SELECT silo.fail(task_id, 'w-4', 'E_ONCE') FROM silo.lease('w-4', 'g_backoff', 1, 10000);});
is( $node->safe_psql('postgres', q{
SELECT j.status, t.due, round(extract(epoch FROM t.start_at - a.finished_at) * 1000)
  FROM silo.jobs j, silo.task t, silo.attempt a
 WHERE j.id = 'backoff-1' AND t.job_id = j.id AND a.job_id = j.id}),
	'Retrying|f|1500', 'backoff: the retry is scheduled 1.5 s after the failure');
ok(poll_until($node, q{SELECT due FROM silo.task WHERE job_id = 'backoff-1'}, 't', 10),
	'backoff: the retry is promoted');
my $backoff_ms = $node->safe_psql('postgres', q{
SELECT round(extract(epoch FROM pg_xact_commit_timestamp(xmin) - start_at) * 1000)
  FROM silo.task WHERE job_id = 'backoff-1'});
note("backoff-1 retry promoted ${backoff_ms} ms after its start time");
ok($backoff_ms >= 0 && $backoff_ms < 1000,
	"backoff: promoted within 1 s of the retry's start time (${backoff_ms} ms)");
$node->safe_psql('postgres', q{
SELECT silo.complete(task_id, 'w-4') FROM silo.lease('w-4', 'g_backoff', 1, 10000)});

# ---------------------------------------------------------------------------
# The broker is woken at commit.
#
# The broker sleeps until the next future task is due, at most 1 s.  If a
# job is enqueued just after the broker went to sleep with nothing planned,
# only the latch set at commit can make the broker promote that job at its
# start time; otherwise it waits for the next periodic round, about 1 s
# later.  silotest.after_broker_tick runs a statement right after a round,
# which pins that phase.
#
# Control: the start time of an existing task is moved to 300 ms from now by
# a plain UPDATE, which does not wake the broker: it must find the task only
# at its next round (> 0.8 s).  If that fails, the broker polls faster than
# once a second and the latch test below could not tell latch from timer.
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT silo.enqueue('g_latch', '{}', id => 'latch-control',
                    start_at => clock_timestamp() + interval '1 hour')});
$node->safe_psql('postgres', q{
SELECT silotest.after_broker_tick($$
	WITH s AS (UPDATE silo.job_status SET next_attempt_at = clock_timestamp() + interval '300 ms'
	            WHERE id = 'latch-control')
	UPDATE silo.task SET start_at = clock_timestamp() + interval '300 ms'
	 WHERE job_id = 'latch-control'$$)});
ok( poll_until($node, q{SELECT due FROM silo.task WHERE job_id = 'latch-control'}, 't', 10),
	'control task promoted');
my $control_ms = $node->safe_psql('postgres', q{
SELECT round(extract(epoch FROM pg_xact_commit_timestamp(t.xmin)
                                - pg_xact_commit_timestamp(s.xmin)) * 1000)
  FROM silo.task t JOIN silo.job_status s ON s.tenant = t.tenant AND s.id = t.job_id
 WHERE t.job_id = 'latch-control'});
note("control (no wake-up): promoted ${control_ms} ms after the commit");
cmp_ok($control_ms, '>', 800,
	"control: without a wake-up the task waits for the periodic round (${control_ms} ms)");

$node->safe_psql('postgres', q{
SELECT silotest.after_broker_tick($$
	SELECT silo.enqueue('g_latch', '{}', id => 'latch-1',
	                    start_at => clock_timestamp() + interval '300 ms')$$)});
ok(poll_until($node, q{SELECT due FROM silo.task WHERE job_id = 'latch-1'}, 't', 10),
	'latch job promoted');
my ($latch_ms, $latch_late) = split /\|/, $node->safe_psql('postgres', q{
SELECT round(extract(epoch FROM pg_xact_commit_timestamp(t.xmin)
                                - pg_xact_commit_timestamp(i.xmin)) * 1000),
       round(extract(epoch FROM pg_xact_commit_timestamp(t.xmin) - i.start_at) * 1000)
  FROM silo.task t JOIN silo.job_info i ON i.tenant = t.tenant AND i.id = t.job_id
 WHERE t.job_id = 'latch-1'});
note("latch-1 (start 300 ms after enqueue): promoted ${latch_ms} ms after the enqueue committed, "
	  . "${latch_late} ms after its start time");
cmp_ok($latch_late, '>=', 0, 'latch job: not promoted before its start time');
cmp_ok($latch_ms, '<', 800,
	"woken at commit: promoted well before the next periodic round (${latch_ms} ms)");
$node->safe_psql('postgres', q{
SELECT silo.complete(task_id, 'w-3') FROM silo.lease('w-3', 'g_latch', 10, 10000)});

# ---------------------------------------------------------------------------
# One bad row does not stop the sweep.  bad-1 loses its job_status row, so
# finishing its expired lease raises an error; the other leases of the same
# batch, expiring at the same moment, must still be swept, and the broker
# must stay up.
# ---------------------------------------------------------------------------

my $logpos = log_position($node);
$node->safe_psql('postgres', q{
SELECT silo.enqueue('g_bad', '{}', id => x) FROM unnest(ARRAY['bad-1', 'ok-1', 'ok-2', 'ok-3']) x});
my $leased = $node->safe_psql('postgres', q{
SELECT string_agg(job_id || '=' || task_id, ',' ORDER BY job_id)
  FROM silo.lease('w-bad', 'g_bad', 10, 1000);
DELETE FROM silo.job_status WHERE id = 'bad-1';});
my %task = map { split /=/ } split /,/, $leased;
$task{'bad-1'} //= 'none';
is(join(',', sort keys %task), 'bad-1,ok-1,ok-2,ok-3', 'four leases taken in one call');

ok( poll_until(
		$node, q{
SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM silo.jobs WHERE task_group = 'g_bad'},
		'ok-1:Failed,ok-2:Failed,ok-3:Failed', 10),
	'bad row: the other expired leases were swept');
is( $node->safe_psql('postgres', q{
SELECT count(*), count(DISTINCT finished_at), min(error_code), max(error_code)
  FROM silo.attempt WHERE job_id LIKE 'ok-%'}),
	'3|1|WORKER_CRASHED|WORKER_CRASHED', 'bad row: the three were swept in one round');
ok( defined wait_for_log_until(
		$node,
		qr/WARNING:  silo: could not sweep the expired lease of task $task{'bad-1'}: job "bad-1" of tenant "-" has a lease but no status row/,
		$logpos, 10),
	'bad row: a WARNING names the lease that could not be swept');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.task_lease WHERE job_id = 'bad-1'}),
	'1', 'bad row: its lease stays in place');
is(silo_broker_now($node), $broker, 'bad row: the broker is still the same process');
unlike(slurp_file($node->logfile, $logpos), qr/silo broker.*exited|terminating background worker "silo broker"/,
	'bad row: the broker did not exit');

# Repair so the sweep stops warning, and check it then finishes the lease.
# The status row goes back as it was: Pending since the time its 0x03 row
# (silo.job_status_index, which the delete above left alone) records.
$node->safe_psql('postgres', q{
INSERT INTO silo.job_status (tenant, id, status, changed_at, attempt, relative_attempt, task_id, next_attempt_at)
SELECT l.tenant, l.job_id, 'Pending', x.changed_at, l.attempt, l.relative_attempt, l.task_id, l.start_at
  FROM silo.task_lease l
  JOIN silo.job_status_index x ON x.tenant = l.tenant AND x.id = l.job_id AND x.status = 'Pending'
 WHERE l.job_id = 'bad-1'});
ok( poll_until($node, q{SELECT status FROM silo.jobs WHERE id = 'bad-1'}, 'Failed', 10),
	'bad row repaired: the sweep then finishes its lease');

$node->stop;
done_testing();

# The current broker pid (silo.broker_pid()).
sub silo_broker_now
{
	my ($n) = @_;
	return $n->safe_psql('postgres', 'SELECT silo.broker_pid()');
}
