
# 007_floating.pl: the refresh lifecycle of a floating-concurrency key, end to
# end, with the broker running.
#
#  - a key in use (a job holds it, others wait) gets a refresh scheduled by
#    the broker within about a second after its refreshIntervalMs;
#  - silo.lease on the key's task group hands the refresh out first, as a
#    kind = 'refresh' row with queue_key, current_max_concurrency and the
#    metadata of the job that created the key; it is not handed out twice;
#  - reports of the wrong kind are refused (SL010);
#  - report_refresh with a larger max grants the waiting jobs in the same
#    transaction;
#  - fail_refresh keeps the max and backs off 1 s, then 2 s, at most 60 s; a
#    success resets the failure count;
#  - an expired refresh lease is freed by the sweep and a new refresh is
#    scheduled at once, without backoff;
#  - a lost refresh (the state says "leased" but there is no lease) is
#    logged and replaced; so is a ready refresh nobody leased within
#    interval + 10 s (clock offset); a refresh leased by a live worker is not
#    declared lost;
#  - a key nobody uses goes idle and is not refreshed; the next job re-arms
#    it, and the key keeps the definition of its first job;
#  - reset_floating_limit deletes the state and its refresh lease; a waiting
#    job re-creates the state from its own definition.
#
# Intervals are about a second and every wait polls with a deadline; the
# "lost after interval + 10 s" case moves silo's clock instead of waiting.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $node = silo_node('floating');
ok(defined wait_for_broker($node), 'the broker runs');

$node->safe_psql('postgres', q{
CREATE FUNCTION silotest.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN '00000';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END
$$;});

sub sql
{
	my ($q) = @_;
	return $node->safe_psql('postgres', $q);
}

# Columns of silo.floating_limits for a key of tenant '-'.
sub fl
{
	my ($cols, $key) = @_;
	$key //= 'fk';
	return sql("SELECT $cols FROM silo.floating_limits WHERE tenant = '-' AND key = '$key'");
}

# Wait until the key has a refresh ready for a worker (other than $not);
# returns its task id, or '' at the deadline.
sub wait_ready
{
	my ($key, $not) = @_;
	my $other = defined $not ? " AND refresh_task_id <> '$not'" : '';
	return poll_value(
		$node, qq{
SELECT refresh_task_id FROM silo.floating_limits
 WHERE tenant = '-' AND key = '$key' AND refresh_state = 'ready'$other}, 15) // '';
}

# Lease one task of a group, expected to be a refresh: its task id, or ''.
sub lease_refresh
{
	my ($group, $worker, $ms) = @_;
	return sql(qq{
SELECT task_id FROM silo.lease('$worker', '$group', 1, $ms) WHERE kind = 'refresh'});
}

sub sqlstate_of
{
	my ($q) = @_;
	$q =~ s/'/''/g;
	return sql("SELECT silotest.sqlstate_of('$q')");
}

my $fk = '[{"type": "floatingConcurrency", "key": "fk", "defaultMaxConcurrency": 1, '
  . '"refreshIntervalMs": 1000, "metadata": {"region": "eu"}}]';
# Later definitions of the same key: ignored while its state exists.
my $fk_other = '[{"type": "floatingConcurrency", "key": "fk", "defaultMaxConcurrency": 5, '
  . '"refreshIntervalMs": 60000, "metadata": {"region": "ap"}}]';
my $fk_us = '[{"type": "floatingConcurrency", "key": "fk", "defaultMaxConcurrency": 4, '
  . '"refreshIntervalMs": 2000, "metadata": {"region": "us"}}]';

# ---------------------------------------------------------------------------
# A key in use: a refresh is scheduled within about a second of its interval.
# ---------------------------------------------------------------------------

sql(qq{
SELECT silo.enqueue('gf', '{"n": 1}', id => 'h1', limits => '$fk');
SELECT silo.enqueue('gf', '{"n": 2}', id => 'h2', limits => '$fk_other');
SELECT silo.enqueue('gf', '{"n": 3}', id => 'h3', limits => '$fk_other');});
is( fl(q{current_max, default_max, refresh_interval_ms, metadata, task_group, retry_count,
         last_refreshed_at = created_at}),
	'1|1|1000|{"region": "eu"}|gf|0|t',
	'the first job created the state: its default, interval, metadata and task group');
is( sql(q{SELECT kind, holders, requesters, current_max FROM silo.queues WHERE queue = 'fk'}),
	'floatingConcurrency|1|2|1', 'h1 holds the key, h2 and h3 wait');
is( sql(q{
SELECT string_agg(job_id || ':' || limit_index || ':' || limit_type || ':' || key || ':'
                  || holders || ':' || max_concurrency, ',' ORDER BY job_id)
  FROM silo.blocked_jobs}),
	'h2:0:floatingConcurrency:fk:1:1,h3:0:floatingConcurrency:fk:1:1',
	'blocked_jobs: h2 and h3 wait on fk (1 holder, max 1)');

my $r1 = wait_ready('fk');
isnt($r1, '', 'a refresh is scheduled for the key in use');
my $sched_ms = fl(q{round(extract(epoch FROM refresh_scheduled_at - (created_at + interval '1 s')) * 1000)});
note("first refresh scheduled ${sched_ms} ms after the interval elapsed");
ok($sched_ms >= 0 && $sched_ms < 1500,
	"the refresh is scheduled no earlier than the interval and within about a second ($sched_ms ms)");
is(fl('next_refresh_at IS NULL, retry_count'), 't|0', 'ready: no next refresh time while one is scheduled');

# ---------------------------------------------------------------------------
# silo.lease hands the refresh out first.
# ---------------------------------------------------------------------------

is( sql(qq{
SELECT kind, tenant, task_group, priority, queue_key, current_max_concurrency, refresh_metadata,
       job_id IS NULL AND payload IS NULL AND attempt IS NULL, task_id = '$r1',
       lease_expires_at > silo.now()
  FROM silo.lease('w-r', 'gf', 1, 60000)}),
	'refresh|-|gf|0|fk|1|{"region": "eu"}|t|t|t',
	'lease: a refresh row with queue_key, current max and the first job\'s metadata, before the leasable job');
is(fl('refresh_state, refresh_task_id'), "leased|$r1", 'the refresh is leased');
is( sql(qq{SELECT kind, job_id IS NULL, queue_key, worker_id FROM silo.leases WHERE task_id = '$r1'}),
	'refresh|t|fk|w-r', 'silo.leases: the refresh lease, with queue_key and no job');
is( sql(q{
SELECT string_agg(kind || ':' || coalesce(job_id, '-'), ',') FROM silo.lease('w-j', 'gf', 10, 600000)}),
	'run:h1', 'a leased refresh is not handed out again: the next lease gets the job only');
my $h1_task = sql(q{SELECT task_id FROM silo.leases WHERE job_id = 'h1'});

is(sqlstate_of("SELECT silo.complete('$r1', 'w-r')"), 'SL010', 'complete on a refresh lease: SL010');
is(sqlstate_of("SELECT silo.fail('$r1', 'w-r', 'X')"), 'SL010', 'fail on a refresh lease: SL010');
is(sqlstate_of("SELECT silo.report_refresh('$h1_task', 'w-j', 5)"), 'SL010',
	'report_refresh on a run lease: SL010');
is(sqlstate_of("SELECT silo.report_refresh('$r1', 'w-other', 5)"), 'SL002',
	'report_refresh by another worker: SL002');
is(sqlstate_of("SELECT silo.report_refresh('$r1', 'w-r', 0)"), '22023',
	'report_refresh with a max of 0: 22023');
is(fl('refresh_state, refresh_task_id, current_max'), "leased|$r1|1", 'refused reports change nothing');

# ---------------------------------------------------------------------------
# report_refresh with a larger max grants the waiting jobs at once.
# ---------------------------------------------------------------------------

my @rep = split /\n/, sql(qq{
BEGIN;
SELECT 'reported' FROM silo.report_refresh('$r1', 'w-r', 3);
SELECT holders || '/' || requesters || '/' || current_max FROM silo.queues WHERE queue = 'fk';
SELECT string_agg(job_id || ':' || due, ',' ORDER BY job_id) FROM silo.task WHERE job_id IN ('h2', 'h3');
SELECT count(*) FROM silo.blocked_jobs;
SELECT retry_count || '/' || refresh_state || '/' || (refresh_task_id IS NULL) || '/'
       || (next_refresh_at - last_refreshed_at)
  FROM silo.floating_limits WHERE key = 'fk';
SELECT count(*) FROM silo.task_lease WHERE task_id = '$r1';
COMMIT;});
is($rep[0] // '', 'reported', 'report_refresh(3) accepted');
is($rep[1] // '', '3/0/3', 'in the same transaction: 3 holders, no requester, max 3');
is($rep[2] // '', 'h2:true,h3:true', 'in the same transaction: h2 and h3 have leasable tasks');
is($rep[3] // '', '0', 'in the same transaction: nothing is blocked');
is($rep[4] // '', '0/waiting/true/00:00:01', 'the next refresh is one interval after the report');
is($rep[5] // '', '0', 'the refresh lease is gone');

# ---------------------------------------------------------------------------
# fail_refresh: the max stays, the next try comes 1 s, then 2 s later; a
# success resets the count.
# ---------------------------------------------------------------------------

# Fail the refresh task $task; returns (before, after, retry_count|error|max|state,
# next_retry_at) with times as epochs.
sub fail_refresh
{
	my ($task, $error) = @_;
	my @l = split /\n/, sql(qq{
BEGIN;
SELECT extract(epoch FROM silo.now());
SELECT 'failed' FROM silo.fail_refresh('$task', 'w-r', '$error');
SELECT extract(epoch FROM silo.now());
SELECT retry_count || '|' || last_error || '|' || current_max || '|' || refresh_state || '|'
       || (next_refresh_at = next_retry_at)
  FROM silo.floating_limits WHERE key = 'fk';
SELECT extract(epoch FROM next_retry_at) FROM silo.floating_limits WHERE key = 'fk';
COMMIT;});
	return ($l[0], $l[2], $l[3], $l[4]);
}

my $prev = wait_ready('fk', $r1);
isnt($prev, '', 'the next refresh is ready one interval later');
for my $n (1, 2)
{
	is(lease_refresh('gf', 'w-r', 60000), $prev, "failure $n: the refresh is leased");
	my ($before, $after, $state, $next) = fail_refresh($prev, "upstream down $n");
	is($state, "$n|upstream down $n|3|waiting|true",
		"failure $n: retry_count $n, the error kept, the max unchanged, waiting for the retry");
	my $backoff = 1000 * 2**($n - 1);
	my ($lo, $hi) = (($next - $after) * 1000, ($next - $before) * 1000);
	note(sprintf('failure %d: next_retry_at is %.1f..%.1f ms after the failure', $n, $lo, $hi));
	ok($lo <= $backoff + 0.5 && $hi >= $backoff - 0.5,
		"failure $n: next try ${backoff} ms after the failure");

	my $again = wait_ready('fk', $prev);
	isnt($again, '', "failure $n: a new refresh is scheduled after the backoff");
	my $late = fl(q{round(extract(epoch FROM refresh_scheduled_at - next_retry_at) * 1000)});
	note("failure $n: retry scheduled $late ms after next_retry_at");
	ok($late >= 0 && $late < 1500,
		"failure $n: the retry is scheduled at next_retry_at, within about a second ($late ms)");
	$prev = $again;
}
is(lease_refresh('gf', 'w-r', 60000), $prev, 'the retry is leased');
sql("SELECT silo.report_refresh('$prev', 'w-r', 3)");
is(fl('retry_count, next_retry_at IS NULL, last_error IS NULL, current_max'), '0|t|t|3',
	'a success resets retry_count, next_retry_at and last_error');

# ---------------------------------------------------------------------------
# An expired refresh lease: the sweep frees it and a new refresh is
# scheduled at once, without backoff.
# ---------------------------------------------------------------------------

my $r5 = wait_ready('fk', $prev);
isnt($r5, '', 'expiry: a refresh is ready');
my $exp = sql(qq{
SELECT task_id || ',' || extract(epoch FROM lease_expires_at)
  FROM silo.lease('w-gone', 'gf', 1, 100) WHERE kind = 'refresh'});
my ($r5_leased, $r5_expires) = split /,/, $exp;
is($r5_leased // '', $r5, 'expiry: the refresh is leased for 100 ms and abandoned');
my $r6 = wait_ready('fk', $r5);
isnt($r6, '', 'expiry: a new refresh is scheduled');
is(sql(qq{SELECT count(*) FROM silo.task_lease WHERE task_id = '$r5'}), '0',
	'expiry: the expired refresh lease was swept');
is(fl('retry_count, next_retry_at IS NULL, last_error IS NULL, current_max'), '0|t|t|3',
	'expiry: no failure counted, no backoff');
my $resched_ms = fl(qq{
round((extract(epoch FROM refresh_scheduled_at) - $r5_expires) * 1000)});
note("expiry: new refresh scheduled $resched_ms ms after the lease expired");
ok($resched_ms >= 0 && $resched_ms < 1500,
	"expiry: rescheduled within about a second of the lease expiry ($resched_ms ms)");
is(sqlstate_of("SELECT silo.report_refresh('$r5', 'w-gone', 9)"), 'SL001',
	'expiry: the abandoned worker can no longer report (SL001)');

# ---------------------------------------------------------------------------
# A lost refresh: the state says "leased" but no lease exists, and its
# deadline has passed.  The broker logs it and schedules a new one.
# ---------------------------------------------------------------------------

my $logpos = log_position($node);
is( sql(qq{
UPDATE silo.floating_limit SET refresh_ready = false,
       refresh_scheduled_at = silo.now() - interval '20 s',
       refresh_check_at = silo.now() - interval '1 s'
 WHERE tenant = '-' AND queue = 'fk' AND refresh_task_id = '$r6' AND refresh_ready
   AND NOT EXISTS (SELECT 1 FROM silo.task_lease WHERE task_id = '$r6')
RETURNING 'broken'}),
	'broken', 'lost: the state claims a lease that does not exist');
ok( defined wait_for_log_until(
		$node,
		qr/LOG:  silo: refresh \Q$r6\E of floating limit "fk" \(tenant "-"\) was not answered in time; scheduling a new one/,
		$logpos, 15),
	'lost: the broker logs the refresh that was not answered in time');
my $r7 = wait_ready('fk', $r6);
isnt($r7, '', 'lost: a new refresh is scheduled');
is(lease_refresh('gf', 'w-r', 60000), $r7, 'lost: the new refresh is leased');
sql("SELECT silo.report_refresh('$r7', 'w-r', 3)");
is(fl('refresh_state, current_max, retry_count'), 'waiting|3|0', 'lost: the key works again');

# A ready refresh nobody leases is lost after interval + 10 s: move silo's
# clock 12 s forward rather than wait.
my $r8 = wait_ready('fk', $r7);
isnt($r8, '', 'unanswered: a refresh is ready');
is(sql(q{SELECT refresh_check_at - refresh_scheduled_at FROM silo.floating_limit WHERE queue = 'fk'}),
	'00:00:11', 'unanswered: the broker looks again interval + 10 s after scheduling it');
$logpos = log_position($node);
ok(set_clock_offset($node, 12000), 'clock moved 12 s forward');
ok( defined wait_for_log_until(
		$node,
		qr/LOG:  silo: refresh \Q$r8\E of floating limit "fk" \(tenant "-"\) was not answered in time; scheduling a new one/,
		$logpos, 15),
	'unanswered: the broker logs the refresh nobody leased');
my $r9 = wait_ready('fk', $r8);
isnt($r9, '', 'unanswered: a new refresh replaces it');

# A refresh leased by a live worker is not lost, however long it takes.
is(lease_refresh('gf', 'w-r', 600000), $r9, 'live lease: the refresh is leased for 10 minutes');
$logpos = log_position($node);
ok(set_clock_offset($node, 24000), 'clock moved another 12 s forward');
ok( poll_until(
		$node, qq{
SELECT f.refresh_check_at = l.expires_at FROM silo.floating_limit f
  JOIN silo.task_lease l ON l.task_id = f.refresh_task_id
 WHERE f.queue = 'fk' AND l.task_id = '$r9'}, 't', 15),
	'live lease: the broker looked and will look again when the lease expires');
is(fl('refresh_state, refresh_task_id'), "leased|$r9", 'live lease: the refresh is still the leased one');
unlike(slurp_file($node->logfile, $logpos), qr/refresh \Q$r9\E .*not answered in time/,
	'live lease: not declared lost');

# The failure backoff is capped at 60 s: after six failures (counted
# directly here) the seventh waits 60 s, not 64 s.  The clock then moves
# past it.
sql(q{UPDATE silo.floating_limit SET retry_count = 6 WHERE queue = 'fk'});
my ($cap_before, $cap_after, $cap_state, $cap_next) = fail_refresh($r9, 'still down');
is($cap_state, '7|still down|3|waiting|true', 'cap: the seventh failure is counted, the max kept');
my ($cap_lo, $cap_hi) = (($cap_next - $cap_after) * 1000, ($cap_next - $cap_before) * 1000);
note(sprintf('cap: next_retry_at is %.1f..%.1f ms after the failure', $cap_lo, $cap_hi));
ok($cap_lo <= 60000.5 && $cap_hi >= 59999.5, 'cap: the next try comes 60 s after the failure');
ok(set_clock_offset($node, 24000 + 61000), 'clock moved 61 s forward');
my $r9b = wait_ready('fk', $r9);
isnt($r9b, '', 'cap: a refresh is scheduled once the 60 s have passed');
is(fl('refresh_scheduled_at >= next_retry_at'), 't', 'cap: not before next_retry_at');
is(lease_refresh('gf', 'w-r', 60000), $r9b, 'cap: the retry is leased');
sql("SELECT silo.report_refresh('$r9b', 'w-r', 2)");
is(fl('refresh_state, current_max, retry_count, next_retry_at IS NULL'), 'waiting|2|0|t',
	'cap: a success resets the failure count');

# ---------------------------------------------------------------------------
# An idle key is not refreshed; the next job re-arms it.
# ---------------------------------------------------------------------------

# Hold the next refresh while the jobs finish, so the key is idle when the
# report comes.
my $r10 = wait_ready('fk', $r9b);
isnt($r10, '', 'idle: a refresh is ready');
is(lease_refresh('gf', 'w-r', 600000), $r10, 'idle: the refresh is leased');
is( sql(q{SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.lease('w-j', 'gf', 10, 600000)}),
	'h2,h3', 'idle: h2 and h3 leased');
sql(q{SELECT silo.complete(task_id, 'w-j') FROM silo.leases WHERE kind = 'run' AND worker_id = 'w-j'});
is( sql(q{SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM silo.jobs WHERE id LIKE 'h_'}),
	'h1:Succeeded,h2:Succeeded,h3:Succeeded', 'idle: every job of the key finished');
is(sql(q{SELECT holders || '/' || requesters FROM silo.queues WHERE queue = 'fk'}), '0/0',
	'idle: no holder, no requester');
sql("SELECT silo.report_refresh('$r10', 'w-r', 2)");
my $last_refreshed = fl('last_refreshed_at');
ok(poll_until($node, q{SELECT refresh_state FROM silo.floating_limits WHERE key = 'fk'}, 'idle', 15),
	'idle: the key goes idle at its next check');
is( sql(q{
SELECT refresh_task_id IS NULL, refresh_check_at IS NULL, refresh_ready
  FROM silo.floating_limit WHERE queue = 'fk'}),
	't|t|f', 'idle: no refresh scheduled and nothing for the broker to check');
is( sql(q{
SELECT silotest.wait_for($$SELECT refresh_state <> 'idle' FROM silo.floating_limits WHERE key = 'fk'$$,
                         1500) IS NULL}),
	't', 'idle: for 1.5 s (the broker checks every second) nothing is scheduled');
is(fl('last_refreshed_at, current_max'), "$last_refreshed|2", 'idle: the state is kept as it was');

sql(qq{SELECT silo.enqueue('gf', '{"n": 4}', id => 'h4', limits => '$fk_other')});
is(sql(q{SELECT count(*) FROM silo.task WHERE job_id = 'h4'}), '1',
	're-armed: h4 takes a slot at once (max 2)');
my $r11 = wait_ready('fk', $r10);
isnt($r11, '', 're-armed: the next job re-arms the key and a refresh is scheduled');
is( sql(q{
SELECT task_id || '|' || queue_key || '|' || current_max_concurrency || '|' || refresh_metadata
  FROM silo.lease('w-r', 'gf', 1, 60000)}),
	"$r11|fk|2|{\"region\": \"eu\"}",
	're-armed: the refresh carries the key\'s own max and first metadata, not h4\'s');
is(fl('default_max, refresh_interval_ms, metadata'), '1|1000|{"region": "eu"}',
	're-armed: the definition of the first job is kept');
sql("SELECT silo.report_refresh('$r11', 'w-r', 1)");

# ---------------------------------------------------------------------------
# reset_floating_limit
# ---------------------------------------------------------------------------

sql(qq{SELECT silo.enqueue('gf2', '{"n": 5}', id => 'h5', limits => '$fk_us')});
is( sql(q{SELECT job_id || ':' || holders || ':' || max_concurrency FROM silo.blocked_jobs}),
	'h5:1:1', 'reset: h5 waits (h4 holds the only slot)');
my $r12 = wait_ready('fk', $r11);
isnt($r12, '', 'reset: a refresh is ready');
is(lease_refresh('gf', 'w-r', 600000), $r12, 'reset: the refresh is leased');

my @reset = split /\n/, sql(q{
BEGIN;
SELECT silo.reset_floating_limit('-', 'fk');
SELECT current_max || '|' || default_max || '|' || refresh_interval_ms || '|' || metadata || '|'
       || task_group || '|' || refresh_state || '|' || retry_count
  FROM silo.floating_limits WHERE key = 'fk';
SELECT holders || '/' || requesters FROM silo.queues WHERE queue = 'fk';
SELECT string_agg(job_id || ':' || task_group, ',') FROM silo.task WHERE job_id = 'h5';
COMMIT;});
is($reset[0] // '', 't', 'reset: returns true when the key had state');
is($reset[1] // '', '4|4|2000|{"region": "us"}|gf2|waiting|0',
	'reset: the waiting job re-creates the state from its own definition');
is($reset[2] // '', '2/0', 'reset: with the new max (4), h5 is granted at once');
is($reset[3] // '', 'h5:gf2', 'reset: h5 has a leasable task');
is(sql(qq{SELECT count(*) FROM silo.task_lease WHERE task_id = '$r12'}), '0',
	'reset: the refresh lease is deleted with the state');
is(sqlstate_of("SELECT silo.report_refresh('$r12', 'w-r', 7)"), 'SL001',
	'reset: the old refresh can no longer be reported (SL001)');

my $r13 = wait_ready('fk', $r12);
isnt($r13, '', 'reset: the re-created key is refreshed');
is( sql(q{
SELECT task_id || '|' || task_group || '|' || current_max_concurrency || '|' || refresh_metadata
  FROM silo.lease('w-r2', 'gf2', 1, 60000)}),
	"$r13|gf2|4|{\"region\": \"us\"}",
	'reset: refresh tasks now go to the task group of the job that re-created the key');
sql("SELECT silo.report_refresh('$r13', 'w-r2', 4)");

sql(q{
SELECT silo.complete(task_id, 'w-j') FROM silo.lease('w-j', 'gf', 10, 60000) WHERE kind = 'run';
SELECT silo.complete(task_id, 'w-j') FROM silo.lease('w-j', 'gf2', 10, 60000) WHERE kind = 'run';});
is( sql(q{SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM silo.jobs WHERE id IN ('h4', 'h5')}),
	'h4:Succeeded,h5:Succeeded', 'reset: h4 and h5 finished');
is(sql(q{SELECT silo.reset_floating_limit('-', 'fk')}), 't', 'reset of an unused key: true');
is(sql(q{SELECT count(*) FROM silo.floating_limit}), '0', 'reset of an unused key: no state left');
is(sql(q{SELECT count(*) FROM silo.queues WHERE queue = 'fk'}), '0', 'reset: the key is gone from silo.queues');
is(sql(q{SELECT silo.reset_floating_limit('-', 'fk')}), 'f', 'reset again: false');
is(sql(q{SELECT silo.reset_floating_limit('-', 'never-used')}), 'f', 'reset of an unknown key: false');
is(sql(q{SELECT count(*) FROM silo.task_lease}), '0', 'no lease is left behind');

$node->stop;
done_testing();
