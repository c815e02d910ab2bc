
# 008_rate_limits.pl: rate limits with the broker running and silo's clock
# moved by silo.clock_offset_ms.
#
#  - a job over a token bucket is re-checked at the bucket's reset when that
#    is within maxBackoffMs, and admitted then;
#  - otherwise the re-checks follow min(initialBackoffMs * multiplier^k,
#    maxBackoffMs), and the broker makes each at its time;
#  - a leaky bucket spreads admissions at limit / durationMs;
#  - maxRetries: after that many re-checks the job ends Failed with
#    RATE_LIMITED, and the concurrency slot it held (an earlier limit) goes
#    to the next waiting job in the same transaction;
#  - a token bucket of 3 per minute: 5 jobs, 3 leasable at once, 2 wait as
#    chain tasks and stay blocked while the broker re-checks them; once the
#    clock passes the window they are admitted;
#  - the broker deletes buckets once they are idle (full or drained), not
#    before.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $node = silo_node('ratelimits');
ok(defined wait_for_broker($node), 'the broker runs');

sub sql
{
	my ($q) = @_;
	return $node->safe_psql('postgres', $q);
}

# Lease every leasable task of a group and complete it; returns the job ids.
sub finish_group
{
	my ($group) = @_;
	my $out = sql(qq{
CREATE TEMP TABLE l AS SELECT * FROM silo.lease('w-done', '$group', 100, 60000);
SELECT silo.complete(task_id, 'w-done') FROM l;
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM l;});
	return (split /\n/, $out)[-1] // '';
}

# ---------------------------------------------------------------------------
# Re-checked at the bucket's reset when that is within maxBackoffMs.
# ---------------------------------------------------------------------------

my $rs = '[{"type": "rateLimit", "name": "rs", "uniqueKey": "u", "limit": 1, "durationMs": 3000}]';
my @o = split /\n/, sql(qq{
SELECT silo.enqueue('g-rs', '{}', id => 'rs-1', limits => '$rs');
SELECT silo.enqueue('g-rs', '{}', id => 'rs-2', limits => '$rs');
SELECT string_agg(job_id, ',') FROM silo.task WHERE task_group = 'g-rs';
SELECT b.limit_index || '|' || b.limit_type || '|' || b.key
       || '|' || (b.next_check_at = date_trunc('milliseconds', k.reset_at + interval '999 microseconds'))
       || '|' || c.rate_checks || '|' || j.status
  FROM silo.blocked_jobs b, silo.rate_limit_bucket k, silo.chain_task c, silo.jobs j
 WHERE b.job_id = 'rs-2' AND k.name = 'rs' AND c.job_id = 'rs-2' AND j.id = 'rs-2';
SELECT extract(epoch FROM reset_at) || '|' || level FROM silo.rate_limit_bucket WHERE name = 'rs';});
is($o[2] // '', 'rs-1', 'reset: the first job is admitted at once');
is($o[3] // '', '0|rateLimit|rs/u|true|1|Waiting',
	'reset: the second waits, to be re-checked exactly at the bucket reset, rounded up to the ms (3 s < maxBackoffMs)');
my ($rs_reset, $rs_level) = split /\|/, ($o[4] // '0|');
is($rs_level, '0', 'reset: the bucket is empty');
ok(poll_until($node, q{SELECT count(*) FROM silo.task WHERE job_id = 'rs-2'}, '1', 15),
	'reset: the second job is admitted by the broker');
my $rs_ms = sql(qq{
SELECT round((extract(epoch FROM pg_xact_commit_timestamp(xmin)) - $rs_reset) * 1000)
  FROM silo.task WHERE job_id = 'rs-2'});
note("rs-2 admitted $rs_ms ms after the bucket reset");
ok($rs_ms >= 0 && $rs_ms < 1000, "reset: admitted at the reset, within a second ($rs_ms ms)");
is(sql(q{SELECT count(*) FROM silo.chain_task}), '0', 'reset: no chain task left');
is(finish_group('g-rs'), 'rs-1,rs-2', 'reset: both jobs run');

# ---------------------------------------------------------------------------
# Backoff: the reset is 1 h away, beyond maxBackoffMs, so the re-checks
# come after min(500 * 3^k, 2000) ms: 500, 1500, 2000, 2000.
# ---------------------------------------------------------------------------

my $bo = '[{"type": "rateLimit", "name": "bo", "uniqueKey": "u", "limit": 1, "durationMs": 3600000, '
  . '"retryPolicy": {"initialBackoffMs": 500, "maxBackoffMs": 2000, "backoffMultiplier": 3}}]';
# rate_checks | run_at - the check's time (ms) | next_check_at = run_at |
# the check's time | run_at, of bo-2's chain task once it has >= $m checks.
my $bo_state = q{
SELECT c.rate_checks || '|' || round(extract(epoch FROM c.run_at - k.updated_at) * 1000) || '|'
       || (b.next_check_at = c.run_at) || '|' || extract(epoch FROM k.updated_at) || '|'
       || extract(epoch FROM c.run_at)
  FROM silo.chain_task c, silo.rate_limit_bucket k, silo.blocked_jobs b
 WHERE c.job_id = 'bo-2' AND k.name = 'bo' AND b.job_id = 'bo-2' AND c.rate_checks >= };
@o = split /\n/, sql(qq{
SELECT silo.enqueue('g-bo', '{}', id => 'bo-1', limits => '$bo');
SELECT silo.enqueue('g-bo', '{}', id => 'bo-2', limits => '$bo');
${bo_state}1;});
my ($checks, $delay, $same, $checked_at, $run_at) = split /\|/, ($o[2] // '');
is("$checks|$delay|$same", '1|500|true', 'backoff: first re-check 500 ms after the enqueue');
for my $m (2 .. 4)
{
	my $expected = $m == 2 ? 1500 : 2000;
	my $prev_run_at = $run_at // 0;
	my $row = poll_value($node, "${bo_state}$m", 15) // '';
	($checks, $delay, $same, $checked_at, $run_at) = split /\|/, $row;
	is("$checks|$delay|$same", "$m|$expected|true",
		"backoff: after re-check " . ($m - 1) . ", the next comes $expected ms later");
	my $late = ($checked_at - $prev_run_at) * 1000;
	note(sprintf('bo-2: re-check %d made %.1f ms after its time', $m - 1, $late));
	ok($late >= 0 && $late < 1000,
		sprintf('backoff: re-check %d made at its time, within a second (%.0f ms)', $m - 1, $late));
}
is(sql(q{SELECT count(*) FROM silo.task WHERE job_id = 'bo-2'}), '0', 'backoff: bo-2 is still blocked');
sql(q{SELECT silo.cancel('bo-2')});
is( sql(q{
SELECT j.status, (SELECT count(*) FROM silo.chain_task WHERE job_id = 'bo-2')
  FROM silo.jobs j WHERE j.id = 'bo-2'}),
	'Cancelled|0', 'backoff: cancelling the blocked job removes its chain task');
is(finish_group('g-bo'), 'bo-1', 'backoff: bo-1 runs');

# ---------------------------------------------------------------------------
# Leaky bucket: 2 per 2000 ms drains one per second.  Five jobs: two at
# once, then one a second.
# ---------------------------------------------------------------------------

my $lk = '[{"type": "rateLimit", "name": "lk", "uniqueKey": "u", "limit": 2, "durationMs": 2000, '
  . '"algorithm": "leakyBucket"}]';
@o = split /\n/, sql(
	join('', map { "SELECT silo.enqueue('g-lk', '{}', id => 'lk-$_', limits => '$lk');\n" } 1 .. 5)
	  . q{
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.task WHERE task_group = 'g-lk';
SELECT string_agg(job_id || ':' || limit_type || ':' || key, ',' ORDER BY job_id)
  FROM silo.blocked_jobs WHERE task_group = 'g-lk';});
is($o[5] // '', 'lk-1,lk-2', 'leaky: two jobs admitted at once (the bucket holds 2)');
is($o[6] // '', 'lk-3:rateLimit:lk/u,lk-4:rateLimit:lk/u,lk-5:rateLimit:lk/u',
	'leaky: three wait on the bucket');
ok(poll_until($node, q{SELECT count(*) FROM silo.task WHERE task_group = 'g-lk'}, '5', 20),
	'leaky: all five are admitted eventually');
my @adm = split /\n/, sql(q{
SELECT job_id || '|' || extract(epoch FROM pg_xact_commit_timestamp(xmin))
  FROM silo.task WHERE task_group = 'g-lk' ORDER BY pg_xact_commit_timestamp(xmin), job_id});
push @adm, ('-|0') x (5 - @adm) if @adm < 5;
# The three waiting jobs share one admission time (the bucket's), so the
# order among them is not specified: only the pace is.
my @order = map { (split /\|/)[0] } @adm;
is(join(',', sort @order[0, 1]), 'lk-1,lk-2', 'leaky: lk-1 and lk-2 first');
is(join(',', sort @order[2 .. 4]), 'lk-3,lk-4,lk-5', 'leaky: then the three that waited');
my @t = map { (split /\|/)[1] } @adm;
my @gaps = map { sprintf('%.0f', ($t[$_] - $t[$_ - 1]) * 1000) } 1 .. $#t;
note('leaky: gaps between admissions (ms): ' . join(', ', @gaps));
ok($gaps[0] < 500, "leaky: the first two together ($gaps[0] ms)");
for my $i (1 .. 3)
{
	ok($gaps[$i] >= 800 && $gaps[$i] < 2000,
		'leaky: admission ' . ($i + 2) . " one drain period (1000 ms) after the previous ($gaps[$i] ms)");
}
is(finish_group('g-lk'), 'lk-1,lk-2,lk-3,lk-4,lk-5', 'leaky: all five run');

# ---------------------------------------------------------------------------
# maxRetries: mr-y holds a slot of mr-slot (limit 0) and is over the rate
# limit (limit 1).  After 3 re-checks (1 s apart) it ends Failed with
# RATE_LIMITED, and its slot goes to mr-z in the same transaction.
# ---------------------------------------------------------------------------

my $mr_c = '{"type": "concurrency", "key": "mr-slot", "maxConcurrency": 2}';
my $mr_r = '{"type": "rateLimit", "name": "mr", "uniqueKey": "u", "limit": 1, "durationMs": 3600000, '
  . '"retryPolicy": {"initialBackoffMs": 1000, "maxBackoffMs": 1000, "backoffMultiplier": 2, "maxRetries": 3}}';
@o = split /\n/, sql(qq{
SELECT silo.enqueue('g-mr', '{}', id => 'mr-x', limits => '[$mr_c, $mr_r]');
SELECT silo.enqueue('g-mr', '{}', id => 'mr-y', limits => '[$mr_c, $mr_r]');
SELECT silo.enqueue('g-mr', '{}', id => 'mr-z', limits => '[$mr_c]');
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.task WHERE task_group = 'g-mr';
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.concurrency_holder WHERE queue = 'mr-slot';
SELECT string_agg(job_id || ':' || limit_index || ':' || limit_type || ':' || key || ':'
                  || coalesce(holders || '/' || max_concurrency, '-'), ',' ORDER BY job_id)
  FROM silo.blocked_jobs WHERE task_group = 'g-mr';});
is($o[3] // '', 'mr-x', 'maxRetries: mr-x passes both limits');
is($o[4] // '', 'mr-x,mr-y', 'maxRetries: mr-x and mr-y hold the two slots');
is($o[5] // '', 'mr-y:1:rateLimit:mr/u:-,mr-z:0:concurrency:mr-slot:2/2',
	'maxRetries: mr-y waits on the rate limit, mr-z on the full key');
ok(poll_until($node, q{SELECT status FROM silo.job_result('mr-y')}, 'Failed', 20),
	'maxRetries: mr-y ends Failed');
is( sql(q{
SELECT error_code, error_data = '{"limit_index": 1, "name": "mr", "uniqueKey": "u", "rechecks": 3}'
  FROM silo.job_result('mr-y')}),
	'RATE_LIMITED|t', 'maxRetries: error RATE_LIMITED, with the limit and the 3 re-checks');
is( sql(q{
SELECT attempt, status, started_at IS NULL, worker_id IS NULL FROM silo.attempt WHERE job_id = 'mr-y'}),
	'1|Failed|t|t', 'maxRetries: one attempt, Failed, never started');
my $mr_ms = sql(q{
SELECT round(extract(epoch FROM a.finished_at - j.enqueued_at) * 1000)
  FROM silo.attempt a JOIN silo.jobs j ON j.id = a.job_id WHERE a.job_id = 'mr-y'});
note("mr-y failed $mr_ms ms after its enqueue");
ok($mr_ms >= 3000 && $mr_ms < 6000, "maxRetries: failed at its third re-check, 3 s after the enqueue ($mr_ms ms)");
is( sql(q{SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.concurrency_holder WHERE queue = 'mr-slot'}),
	'mr-x,mr-z', 'maxRetries: mr-y\'s slot was freed and granted to mr-z');
is( sql(q{
SELECT t.xmin = a.xmin FROM silo.task t, silo.attempt a WHERE t.job_id = 'mr-z' AND a.job_id = 'mr-y'}),
	't', 'maxRetries: mr-z was granted in the transaction that failed mr-y');
is( sql(q{
SELECT (SELECT count(*) FROM silo.blocked_jobs) || '/' || (SELECT count(*) FROM silo.chain_task)
       || '/' || (SELECT count(*) FROM silo.concurrency_request)}),
	'0/0/0', 'maxRetries: nothing waits any more');
is(finish_group('g-mr'), 'mr-x,mr-z', 'maxRetries: mr-x and mr-z run');
is(sql(q{SELECT count(*) FROM silo.concurrency_holder}), '0', 'maxRetries: no holder left');

# ---------------------------------------------------------------------------
# Token bucket, 3 per minute: the clock moves past the window.
# ---------------------------------------------------------------------------

my $tb = '[{"type": "rateLimit", "name": "tb", "uniqueKey": "u", "limit": 3, "durationMs": 60000}]';
@o = split /\n/, sql(
	join('', map { "SELECT silo.enqueue('g-tb', '{}', id => 'tb-$_', limits => '$tb');\n" } 1 .. 5)
	  . q{
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.task WHERE task_group = 'g-tb';
SELECT string_agg(job_id || ':' || limit_index || ':' || limit_type || ':' || key, ',' ORDER BY job_id)
  FROM silo.blocked_jobs WHERE task_group = 'g-tb';
SELECT string_agg(DISTINCT status, ',') FROM silo.jobs WHERE task_group = 'g-tb';
SELECT level || '|' || (reset_at - updated_at <= interval '60 s') FROM silo.rate_limit_bucket WHERE name = 'tb';});
is($o[5] // '', 'tb-1,tb-2,tb-3', 'token: three admitted');
is($o[6] // '', 'tb-4:0:rateLimit:tb/u,tb-5:0:rateLimit:tb/u', 'token: two wait on the bucket (blocked_jobs)');
is($o[7] // '', 'Waiting', 'token: every job is Waiting');
is($o[8] // '', '0|true', 'token: the bucket is empty until its reset a minute later');
is( sql(q{SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.lease('w-tb', 'g-tb', 10, 60000)}),
	'tb-1,tb-2,tb-3', 'token: the three are leasable at once');
ok( poll_until(
		$node, q{
SELECT count(*) || '/' || (min(rate_checks) >= 3) FROM silo.chain_task WHERE job_id IN ('tb-4', 'tb-5')},
		'2/true', 15),
	'token: the broker re-checked the two waiting jobs twice');
is( sql(q{
SELECT (SELECT count(*) FROM silo.task WHERE job_id IN ('tb-4', 'tb-5')) || '/'
       || (SELECT bool_and(b.next_check_at < k.reset_at) FROM silo.blocked_jobs b, silo.rate_limit_bucket k
            WHERE b.job_id IN ('tb-4', 'tb-5') AND k.name = 'tb')}),
	'0/true', 'token: still blocked, re-checked by backoff before the reset (60 s > maxBackoffMs)');
sql(q{SELECT silo.complete(task_id, 'w-tb') FROM silo.leases WHERE worker_id = 'w-tb'});

ok(set_clock_offset($node, 61000), 'clock moved 61 s forward');
ok(poll_until($node, q{SELECT count(*) FROM silo.task WHERE job_id IN ('tb-4', 'tb-5')}, '2', 15),
	'token: past the window, the broker admits the two waiting jobs');
is( sql(q{
SELECT level || '|' || (reset_at - updated_at <= interval '60 s') || '|' || (reset_at > silo.now())
  FROM silo.rate_limit_bucket WHERE name = 'tb'}),
	'1|true|true', 'token: they opened a new window and took 2 of its 3 tokens');
is(sql(q{SELECT count(*) FROM silo.chain_task}), '0', 'token: no chain task left');
is(finish_group('g-tb'), 'tb-4,tb-5', 'token: tb-4 and tb-5 run');

# ---------------------------------------------------------------------------
# The broker deletes idle buckets: a token bucket once its window ends
# (full again), a leaky bucket once drained; never before.
# ---------------------------------------------------------------------------

my $pg = '[{"type": "rateLimit", "name": "pg", "uniqueKey": "u", "limit": 5, "durationMs": 2000}]';
my $pg_idle = sql(qq{
SELECT silo.enqueue('g-pg', '{}', id => 'pg-1', limits => '$pg');
SELECT extract(epoch FROM idle_at) - 61 FROM silo.rate_limit_bucket WHERE name = 'pg';});
($pg_idle) = (split /\n/, $pg_idle)[1];
my $gone = sql(q{
SELECT extract(epoch FROM silotest.wait_for(
	$$SELECT NOT EXISTS (SELECT 1 FROM silo.rate_limit_bucket WHERE name = 'pg')$$, 15000))});
ok($gone ne '', 'purge: the bucket of an unused key is deleted');
my $purge_ms = sprintf('%.0f', (($gone || 0) - $pg_idle) * 1000);
note("pg bucket deleted $purge_ms ms after it became idle");
ok($purge_ms >= 0 && $purge_ms < 2500,
	"purge: deleted once idle (its window over), within about two seconds ($purge_ms ms)");
is(finish_group('g-pg'), 'pg-1', 'purge: pg-1 runs');

ok(poll_until($node, q{SELECT count(*) FROM silo.rate_limit_bucket WHERE name IN ('rs', 'lk')}, '0', 15),
	'purge: the ended token bucket (rs) and the drained leaky bucket (lk) are gone');
is( sql(q{
SELECT string_agg(name, ',' ORDER BY name), bool_and(idle_at > silo.now())
  FROM silo.rate_limit_bucket}),
	'bo,mr,tb|t', 'purge: buckets whose window is still open are kept');
ok(set_clock_offset($node, 61000 + 3600000 + 60000), 'clock moved past every window');
ok(poll_until($node, q{SELECT count(*) FROM silo.rate_limit_bucket}, '0', 15),
	'purge: silo.rate_limit_bucket empties once every bucket is idle');
is( sql(q{
SELECT string_agg(DISTINCT status, ',' ORDER BY status) FROM silo.jobs}),
	'Cancelled,Failed,Succeeded', 'every job finished');

$node->stop;
done_testing();
