
# 009_limits_stress.pl: a randomized stress test of limits, with the broker
# running.
#
# Sessions (psql processes, each one CALL of a procedure from
# test/stress/limits_stress.sql, committing after every silo call):
#   - 2 producers: jobs over 40 fixed keys (maxConcurrency derived from the
#     key's name), 3 floating keys and two rate limits (a generous one, and a
#     tight one that makes some jobs end RATE_LIMITED), 0-3 limits per job,
#     priorities, future starts, retry policies; one producer calls
#     silo.enqueue, the other silo.enqueue_many.  A job's definition is a
#     function of (seed, job id).  A job lists its concurrency keys in one
#     global order (by name): a job holds its earlier keys while it waits
#     for a later one, so jobs listing keys in opposite orders can wait for
#     each other forever (by the semantics, as in Silo), and the drain
#     could never end.
#   - 4 workers: complete, fail (retried per policy), release, heartbeat +
#     ack_cancel, ack_cancel, one report per transaction or a batch in one
#     transaction (half of those batches complete their run tasks with one
#     complete_many); one lease call in 25 uses a short lease and
#     never reports (expiry, sweep); refresh tasks of floating keys get
#     report_refresh (the max never goes down) or fail_refresh.
#   - chaos: cancels, restarts of Failed/Cancelled jobs, expedites.
#   - sampler: every 200 ms, one statement (one snapshot) checks the
#     invariants: holders <= max per key, no waiter next to a free slot,
#     every holder/requester/task/lease/chain task belongs to the current
#     attempt of a pending job, every pending job is in exactly one place,
#     holder rows match the holds lists and the job's limits, ...
# After the producers finish, chaos stops and the workers drain: every job
# must end within a deadline; then nothing may be left behind, and no job
# may be lost.
#
# SILO_STRESS=long runs 50,000 jobs instead of 4,000.  SILO_STRESS_SEED
# replays a workload (the job definitions; timing still varies).

use strict;
use warnings FATAL => 'all';

use File::Basename qw(dirname);
use File::Spec;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $long = ($ENV{SILO_STRESS} // '') eq 'long';
my $seed = $ENV{SILO_STRESS_SEED} // int(rand(2**31));
die "SILO_STRESS_SEED must be an integer\n" unless $seed =~ /^-?\d+$/;
my $jobs_per_producer = $long ? 25_000 : 2_000;
my $nworkers = 4;
my $backlog = 400;
my $load_timeout = $long ? 3600 : 180;
my $drain_timeout = $long ? 600 : 120;
my $total = 2 * $jobs_per_producer;

note("limits stress: seed $seed, $total jobs" . ($long ? ' (SILO_STRESS=long)' : ''));
note("replay with SILO_STRESS_SEED=$seed");

my $node = silo_node(
	'limits_stress', conf => q{
silo.retention = 0
fsync = off
synchronous_commit = off
autovacuum_naptime = 1s
log_statement = none
});
my $dsn = $node->connstr('postgres');
my $psql = $node->installed_command('psql');
ok(defined wait_for_broker($node), 'the broker runs');

my $driver = File::Spec->rel2abs(dirname(__FILE__) . '/../stress/limits_stress.sql');
$node->safe_psql('postgres', slurp_file($driver));
my $logpos = log_position($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub client
{
	my ($call) = @_;
	return start_process([ $psql, '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $dsn, '-c', "CALL $call" ]);
}

# ---------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------

my $t0 = time();
my $sampler = client('stress.sampler()');
my @workers = map { client("stress.worker('w$_', $seed)") } 1 .. $nworkers;
my $chaos = client("stress.chaos($seed, 0.04, 0.03, 0.02)");
my @producers = (
	client("stress.producer(1, $jobs_per_producer, $seed, 'single', $backlog)"),
	client("stress.producer(2, $jobs_per_producer, $seed, 'many', $backlog)"));
my @clients = ($sampler, @workers, $chaos, @producers);

# A client that died early (an uncaught error) ends the run.
sub dead_clients
{
	return grep { wait_process_exit($_, 0) } @_;
}

my $deadline = time() + $load_timeout;
my $next_note = time() + 30;
my $producers_done = 0;
while (time() < $deadline)
{
	if (!grep { !wait_process_exit($_, 0) } @producers)
	{
		$producers_done = 1;
		last;
	}
	last if dead_clients($sampler, @workers, $chaos);
	if (time() > $next_note)
	{
		note(sprintf('%.0f s: %s', time() - $t0, sql(q{
SELECT (SELECT coalesce(sum(n), 0) FROM stress.progress) || ' requested, '
    || (SELECT count(*) FROM stress.enqueued) || ' enqueued, '
    || (SELECT count(*) FROM silo.job_status WHERE status = 'Pending') || ' pending, '
    || (SELECT count(*) FROM stress.violation) || ' violations'})));
		$next_note = time() + 30;
	}
	usleep(100_000);
}
my $t_load = time();
my $load_count = sql('SELECT count(*) FROM stress.enqueued');
ok($producers_done && $load_count == $total,
	"producers enqueued their $total jobs within ${load_timeout}s (got $load_count)")
  or diag(sql(q{SELECT string_agg(producer || ':' || n, ' ') FROM stress.progress}));

# No more cancels, restarts or expedites; the workers drain.
sql('UPDATE stress.control SET stop_chaos = true, stop_producers = true');
ok(wait_process_exit($chaos, 60), 'the chaos client stopped');
my @drained = (0, '');
$deadline = time() + $drain_timeout;
while (1)
{
	my $pending = sql(q{SELECT count(*) FROM silo.job_status WHERE status = 'Pending'});
	if ($pending eq '0')
	{
		@drained = (1, $pending);
		last;
	}
	@drained = (0, $pending);
	last if time() > $deadline || dead_clients(@workers, $sampler);
	usleep(100_000);
}
my $t_drained = time();
ok($drained[0], "every job ended within ${drain_timeout}s of the last enqueue")
  or diag("still pending: $drained[1]\n" . sql(q{
SELECT string_agg(format('%s/%s %s attempt %s next %s', j.tenant, j.id, j.status, j.current_attempt,
                         j.next_attempt_at), E'\n')
  FROM (SELECT * FROM silo.jobs WHERE status NOT IN ('Succeeded', 'Failed', 'Cancelled')
         ORDER BY id LIMIT 30) j})
	  . "\nblocked: " . sql(q{
SELECT string_agg(format('%s/%s index %s %s %s holders %s max %s next %s', tenant, job_id, limit_index,
                         limit_type, key, holders, max_concurrency, next_check_at), E'\n')
  FROM (SELECT * FROM silo.blocked_jobs ORDER BY job_id LIMIT 30) b}));

# Stop the workers, then take a last sample once nothing moves.
sql('UPDATE stress.control SET stop_workers = true');
my $stopped = 1;
for my $p (@workers, @producers)
{
	$stopped = 0 unless wait_process_exit($p, 60);
}
ok($stopped, 'workers and producers stopped');
# leases the workers abandoned last expire and are swept
ok(poll_until($node, 'SELECT count(*) FROM silo.task_lease', '0', 30),
	'no lease is left (abandoned ones were swept)');
sql('UPDATE stress.control SET stop_sampler = true');
ok(wait_process_exit($sampler, 60), 'the sampler stopped');
sql('SELECT stress.sample(1000000)');

for my $p (@clients)
{
	my $status = $p->{status} // 'running';
	is($status, 0, "client exited cleanly: $p->{argv}[-1]")
	  or diag("stderr: $p->{err}");
}

# ---------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------

my $nsamples = sql('SELECT count(*) FROM stress.sample');
my $min_samples = int(($t_drained - $t0) / 0.2 / 4);
cmp_ok($nsamples, '>=', $min_samples, "the sampler took $nsamples samples (>= $min_samples)");
is(sql('SELECT count(*) FROM stress.violation'), '0', 'no invariant was ever violated')
  or diag("violations by kind:\n" . sql(q{
SELECT string_agg(format('%s: %s (samples %s..%s)', kind, n, first, last), E'\n')
  FROM (SELECT kind, count(*) n, min(sample) first, max(sample) last
          FROM stress.violation GROUP BY kind ORDER BY kind) x})
	  . "\nfirst violations:\n" . sql(q{
SELECT string_agg(format('sample %s at %s: %s %s', sample, at, kind, detail), E'\n')
  FROM (SELECT * FROM stress.violation ORDER BY sample, kind LIMIT 20) x}));

is(sql(q{
SELECT count(*) FROM stress.error
 WHERE NOT (op = 'cancel' AND sqlstate IN ('SL005', 'SL006')
         OR op = 'restart' AND sqlstate = 'SL007'
         OR op = 'expedite' AND sqlstate = 'SL008')}),
	'0', 'no silo call raised an unexpected error')
  or diag(sql(q{
SELECT string_agg(format('%s %s %s: %s (%s) x%s', client, op, sqlstate, message, detail, n), E'\n')
  FROM (SELECT client, op, sqlstate, min(message) message, min(detail) detail, count(*) n
          FROM stress.error GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x}));

# (regrant markers the broker has yet to process go within a second)
ok(poll_until($node, q{
SELECT (SELECT count(*) FROM silo.concurrency_holder) || ' holders, '
    || (SELECT count(*) FROM silo.concurrency_request) || ' requesters, '
    || (SELECT count(*) FROM silo.chain_task) || ' chain tasks, '
    || (SELECT count(*) FROM silo.task) || ' tasks, '
    || (SELECT count(*) FROM silo.task_lease) || ' leases, '
    || (SELECT count(*) FROM stress.regrant) || ' regrant markers'},
	'0 holders, 0 requesters, 0 chain tasks, 0 tasks, 0 leases, 0 regrant markers', 30),
	'after the drain nothing is left behind');

# (if the producers were stopped early, the jobs they did enqueue)
my $enqueued = sql('SELECT count(*) FROM stress.enqueued');
is(sql(q{
SELECT (SELECT count(*) FROM silo.job_info) || ' jobs, '
    || (SELECT count(*) FROM silo.job_status) || ' statuses'}),
	"$enqueued jobs, $enqueued statuses", "every job enqueued ($enqueued) is there, once");
is(sql(q{
SELECT count(*) FROM (
  (SELECT tenant, id FROM stress.enqueued EXCEPT SELECT tenant, id FROM silo.job_info)
  UNION ALL
  (SELECT tenant, id FROM silo.job_info EXCEPT SELECT tenant, id FROM stress.enqueued)) x}),
	'0', 'the jobs are exactly the ones enqueued (nothing lost, nothing extra)');
is(sql(q{
SELECT count(*) FROM silo.job_status WHERE status IN ('Succeeded', 'Failed', 'Cancelled')}),
	$enqueued, 'Succeeded + Failed + Cancelled = every job');
is(sql(q{
SELECT count(*) FROM (SELECT 1 FROM silo.attempt WHERE status = 'Succeeded'
                       GROUP BY tenant, job_id HAVING count(*) > 1) x}),
	'0', 'no job has two Succeeded attempts');
is(sql(q{
SELECT count(*) FROM silo.job_status s
 WHERE s.status = 'Succeeded'
   AND NOT EXISTS (SELECT 1 FROM silo.attempt a WHERE a.tenant = s.tenant AND a.job_id = s.id
                     AND a.attempt = s.attempt AND a.status = 'Succeeded')}),
	'0', "every Succeeded job's last attempt Succeeded");

my $bad_log = qr/silo: could not|deadlock detected|internal inconsistency|vanished under|
	TRAP:|PANIC|terminated\ by\ signal|has\ no\ refresh/x;
my $log = slurp_file($node->logfile, $logpos);
my @bad = grep { /$bad_log/ } split /\n/, $log;
is(scalar(@bad), 0, 'the server log has no broker failure, deadlock or crash')
  or diag(join("\n", @bad[0 .. ($#bad < 29 ? $#bad : 29)]));

# ---------------------------------------------------------------------------
# The run did what it is meant to (a stress test that exercises nothing
# cannot fail)
# ---------------------------------------------------------------------------

my %count = split /[|\n]/, sql(q{
SELECT op, sum(n) FROM stress.counter GROUP BY op
UNION ALL SELECT 'job:' || status, count(*) FROM silo.job_status GROUP BY status
UNION ALL SELECT 'attempt:' || coalesce(error_code, status), count(*) FROM silo.attempt GROUP BY 1
UNION ALL SELECT 'restarts', coalesce(sum(n), 0) FROM stress.restarted
UNION ALL SELECT 'raised_floating', count(*) FROM silo.floating_limit WHERE current_max > default_max
UNION ALL SELECT 'refreshed_floating', count(*) FROM silo.floating_limit WHERE last_refreshed_at > created_at
UNION ALL SELECT 'samples_full_keys', count(*) FROM stress.sample WHERE full_keys_with_waiters > 0
UNION ALL SELECT 'samples_chain_tasks', count(*) FROM stress.sample WHERE chain_tasks > 0
UNION ALL SELECT 'samples_refresh_leases', count(*) FROM stress.sample WHERE refresh_leases > 0
UNION ALL SELECT 'samples_regrant_markers', count(*) FROM stress.sample WHERE regrant_markers > 0
UNION ALL SELECT 'max_holders', max(holders) FROM stress.sample
UNION ALL SELECT 'max_requesters', max(requesters) FROM stress.sample
UNION ALL SELECT 'limited_jobs', count(*) FROM stress.enqueued WHERE nlimits > 0});
for my $what (
	'job:Succeeded', 'job:Failed', 'job:Cancelled', 'attempt:E_STRESS',
	'attempt:WORKER_CRASHED', 'attempt:RATE_LIMITED',
	'release', 'ack_cancel_self', 'batched_reports', 'complete_many', 'complete_before_many', 'cancel', 'restarts', 'expedite',
	'report_refresh', 'fail_refresh', 'abandon_run', 'raised_floating',
	'samples_full_keys', 'samples_chain_tasks', 'limited_jobs')
{
	cmp_ok($count{$what} // 0, '>', 0, "the run exercised $what");
}
note(join(', ', map { "$_ $count{$_}" } sort keys %count));

my $secs = $t_drained - $t0;
note(sprintf('%d jobs (%d with limits) in %.1f s: %.0f jobs/s end to end; load phase %.1f s, drain %.1f s; '
	  . '%d samples',
	$enqueued, $count{limited_jobs} // 0, $secs, $enqueued / $secs, $t_load - $t0, $t_drained - $t_load,
	$nsamples));

$node->stop;
done_testing();

END
{
	# also when the script dies half-way
	diag("limits stress FAILED: replay with SILO_STRESS_SEED=$seed"
		  . ($long ? ' SILO_STRESS=long' : '') . " (server log: " . $node->logfile . ')')
	  if defined $node && (!Test::More->builder->is_passing || $?);
}
