
# 004_worker.pl: the reference worker tools/silo-worker, end to end.
#
#  - no-op mode drains 200 jobs (all Succeeded, one attempt each); a job on
#    its second attempt counts as ended after retries;
#  - --exec: the payload arrives on stdin and SILO_* variables are set; exit 0
#    with JSON stdout stores that JSON as the result, exit 0 with other text
#    stores it as a JSON string (surrounding whitespace trimmed), empty stdout
#    a NULL result; exit 3 is a Failed attempt EXIT_3 with the stderr tail in
#    error_data, retried per the job's policy; death by a signal is SIGNAL_n;
#  - SIGTERM with jobs that outlive --grace-ms: the worker exits after the
#    grace period, its children are killed and the tasks released (jobs
#    Waiting again, no attempt used up);
#  - a second SIGTERM cuts the grace period short;
#  - SIGTERM with jobs that finish within --grace-ms: they complete, nothing
#    new is leased, the worker exits when they are done;
#  - with --poll-ms 60000 a new job is still picked up at once: the worker
#    wakes on NOTIFY silo_task_ready.
#
# Every worker is started in the background and stopped by its pid.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $worker = silo_worker_path();
ok(defined $worker, 'silo-worker binary found ($SILO_WORKER)')
  or BAIL_OUT('silo-worker is not built: run make');

my $node = silo_node('worker');
my $dsn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;

# start_worker(ID, ARGS...): silo-worker --dsn DSN --worker-id ID ARGS.
sub start_worker
{
	my ($id, @args) = @_;
	return start_process([ $worker, '--dsn', $dsn, '--worker-id', $id, @args ]);
}

# ---------------------------------------------------------------------------
# No-op mode: 200 jobs
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT count(silo.enqueue('noop', jsonb_build_object('i', i))) FROM generate_series(1, 200) i});
my $w = start_worker('tap-noop', '--task-group', 'noop', '--concurrency', '8',
	'--batch', '50', '--max-jobs', '200');
ok(wait_process_exit($w, 60), 'no-op: the worker exits after --max-jobs 200');
stop_process($w);
is($w->{status}, 0, 'no-op: exit status 0');
like($w->{out}, qr/finished 200 jobs \(200 succeeded, 0 failed, 0 cancelled; 0 of them after retries\)/,
	'no-op: the summary line counts 200 successes');
unlike($w->{out}, qr/also \d+ failed attempt/, 'no-op: no line about retried attempts or releases');
is( $node->safe_psql('postgres', q{
SELECT string_agg(status || ' ' || n, ',') FROM
  (SELECT status, count(*) n FROM silo.jobs WHERE task_group = 'noop' GROUP BY 1) x}),
	'Succeeded 200', 'no-op: all 200 jobs Succeeded');
is( $node->safe_psql('postgres', q{
SELECT count(*), count(DISTINCT job_id), min(worker_id), max(worker_id), count(result)
  FROM silo.attempt a JOIN silo.job_info i ON i.tenant = a.tenant AND i.id = a.job_id
 WHERE i.task_group = 'noop'}),
	'200|200|tap-noop|tap-noop|0', 'no-op: one attempt per job, by this worker, NULL result');

# A retry completed by the no-op handler counts as a job ended after retries
# (silo.complete_many is told which tasks are retries).
$node->safe_psql('postgres', q{
SELECT silo.enqueue('noop-retry', '{}', id => 'noop-retry-1',
                    retry_policy => '{"retryCount": 1, "initialIntervalMs": 0}');
SELECT silo.fail(task_id, 'w-sql', 'FIRST_TRY') FROM silo.lease('w-sql', 'noop-retry', 10);
SELECT silo.enqueue('noop-retry', '{}', id => 'noop-retry-2');});
$w = start_worker('tap-noop-retry', '--task-group', 'noop-retry', '--max-jobs', '2');
ok(wait_process_exit($w, 60), 'no-op retry: the worker exits after --max-jobs 2');
stop_process($w);
like($w->{out}, qr/finished 2 jobs \(2 succeeded, 0 failed, 0 cancelled; 1 of them after retries\)/,
	'no-op retry: the summary counts the job on its second attempt as ended after retries');

# ---------------------------------------------------------------------------
# --exec
# ---------------------------------------------------------------------------

my $handler = "$dir/handler.sh";
PostgreSQL::Test::Utils::append_to_file($handler, <<'EOS');
#!/bin/sh
payload=$(cat)
case "$SILO_JOB_ID" in
	json-*)
		printf '{"stdin": %s, "attempt": %s, "job": "%s", "tenant": "%s", "last": %s}\n' \
			"$payload" "$SILO_ATTEMPT" "$SILO_JOB_ID" "$SILO_TENANT" "$SILO_IS_LAST_ATTEMPT" ;;
	text-*)
		printf '  hello from %s\nsecond line\n\n' "$SILO_JOB_ID" ;;
	number-*)
		echo ' 42 ' ;;
	empty-*)
		: ;;
	exit3-*)
		echo "something went wrong in $SILO_JOB_ID attempt $SILO_ATTEMPT" >&2
		exit 3 ;;
	flaky-*)
		if [ "$SILO_ATTEMPT" = 1 ]; then
			echo 'first try fails' >&2
			exit 3
		fi
		echo '{"ok": true}' ;;
	signal-*)
		kill -KILL $$ ;;
esac
EOS
chmod 0755, $handler;

$node->safe_psql('postgres', q{
SELECT silo.enqueue('exec', '{"a": [1, 2], "s": "x y \"q\""}', tenant => 't1', id => 'json-1');
SELECT silo.enqueue('exec', '{}', id => 'text-1');
SELECT silo.enqueue('exec', '{}', id => 'number-1');
SELECT silo.enqueue('exec', '{}', id => 'empty-1');
SELECT silo.enqueue('exec', '{}', id => 'exit3-1',
                    retry_policy => '{"retryCount": 1, "initialIntervalMs": 100}');
SELECT silo.enqueue('exec', '{}', id => 'exit3-2');
SELECT silo.enqueue('exec', '{}', id => 'flaky-1',
                    retry_policy => '{"retryCount": 2, "initialIntervalMs": 100}');
SELECT silo.enqueue('exec', '{}', id => 'signal-1');});

$w = start_worker('tap-exec', '--task-group', 'exec', '--exec', "exec $handler",
	'--concurrency', '4', '--poll-ms', '200');
ok( poll_until(
		$node, q{SELECT count(*) FROM silo.jobs WHERE task_group = 'exec' AND status IN ('Succeeded', 'Failed')},
		'8', 60),
	'exec: all eight jobs ended');
ok(stop_process($w, 15), 'exec: the worker stops on SIGTERM');
is($w->{status}, 0, 'exec: exit status 0');
# ten attempts: exit3-1 and flaky-1 failed once each with a retry to come
like($w->{out}, qr/finished 8 jobs \(5 succeeded, 3 failed, 0 cancelled; 2 of them after retries\)/,
	'exec: the summary counts jobs, not attempts: 8 ended, exit3-1 and flaky-1 after a retry');
like($w->{out}, qr/also 2 failed attempt\(s\) to be retried and 0 task\(s\) released unfinished/,
	'exec: the two failed attempts that were retried are counted apart');

is( $node->safe_psql('postgres', q{
SELECT status, result = jsonb_build_object('stdin', '{"a": [1, 2], "s": "x y \"q\""}'::jsonb,
                                            'attempt', 1, 'job', 'json-1', 'tenant', 't1', 'last', true)
  FROM silo.job_result('json-1', 't1')}),
	'Succeeded|t', 'exec: JSON stdout is the result; the payload came on stdin, SILO_* set');
is( $node->safe_psql('postgres', q{SELECT status, result FROM silo.job_result('text-1')}),
	'Succeeded|"hello from text-1\nsecond line"',
	'exec: non-JSON stdout is stored as a JSON string, surrounding whitespace trimmed');
is($node->safe_psql('postgres', q{SELECT status, jsonb_typeof(result), result FROM silo.job_result('number-1')}),
	'Succeeded|number|42', 'exec: a bare JSON number is stored as JSON');
is($node->safe_psql('postgres', q{SELECT status, result IS NULL FROM silo.job_result('empty-1')}),
	'Succeeded|t', 'exec: empty stdout gives a NULL result');

my $attempts = q{
SELECT string_agg(attempt || ':' || status || ':' || coalesce(error_code, '-'), ',' ORDER BY attempt)
  FROM silo.attempt WHERE job_id = '%s'};
is($node->safe_psql('postgres', sprintf($attempts, 'exit3-1')), '1:Failed:EXIT_3,2:Failed:EXIT_3',
	'exec: exit 3 fails with EXIT_3 and is retried once (retryCount 1)');
is($node->safe_psql('postgres', q{SELECT status, error_code FROM silo.job_result('exit3-1')}),
	'Failed|EXIT_3', 'exec: exit3-1 ends Failed');
is( $node->safe_psql('postgres', q{
SELECT error_data->>'exit_code', error_data->>'stderr' FROM silo.attempt WHERE job_id = 'exit3-1' AND attempt = 2}),
	"3|something went wrong in exit3-1 attempt 2\n",
	'exec: error_data has the exit code and the stderr tail');
is($node->safe_psql('postgres', sprintf($attempts, 'exit3-2')), '1:Failed:EXIT_3',
	'exec: without a retry policy the first failure is final');
is($node->safe_psql('postgres', sprintf($attempts, 'flaky-1')), '1:Failed:EXIT_3,2:Succeeded:-',
	'exec: a job failing once then succeeding');
is($node->safe_psql('postgres', q{SELECT status, result FROM silo.job_result('flaky-1')}),
	'Succeeded|{"ok": true}', 'exec: flaky-1 ends Succeeded with its result');
is( $node->safe_psql('postgres', q{
SELECT status, error_code, error_data->>'signal' FROM silo.job_result('signal-1')}),
	'Failed|SIGNAL_9|9', 'exec: death by SIGKILL fails with SIGNAL_9');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.leases}), '0', 'exec: no lease left');

# ---------------------------------------------------------------------------
# SIGTERM: jobs outlive --grace-ms and are released
# ---------------------------------------------------------------------------

mkdir "$dir/pids";
$node->safe_psql('postgres', q{
SELECT count(silo.enqueue('slow', jsonb_build_object('i', i), id => 'slow-' || i)) FROM generate_series(1, 3) i});
$w = start_worker('tap-slow', '--task-group', 'slow', '--concurrency', '3', '--grace-ms', '1000',
	'--exec', "echo \$\$ > $dir/pids/\$SILO_JOB_ID; exec sleep 30");

ok( poll_until(
		$node, q{SELECT count(*) FROM silo.leases WHERE worker_id = 'tap-slow'}, '3', 30),
	'slow: the worker holds three leases');
my @pidfiles = map { "$dir/pids/slow-$_" } 1 .. 3;
my $deadline = time() + 30;
usleep(20_000) while time() < $deadline && grep { !-s $_ } @pidfiles;
my @children = map { -s $_ ? slurp_file($_) =~ s/\s+//gr : () } @pidfiles;
is(scalar(@children), 3, 'slow: three handlers are running');
is( $node->safe_psql('postgres', q{
SELECT string_agg(status || ':' || current_attempt, ',') FROM silo.jobs WHERE task_group = 'slow'}),
	'Running:1,Running:1,Running:1', 'slow: the jobs are Running');
my $attempt_rows = $node->safe_psql('postgres', q{SELECT count(*) FROM silo.attempt WHERE job_id LIKE 'slow-%'});

my $t0 = time();
kill 'TERM', $w->{pid};
ok(wait_process_exit($w, 20), 'slow: the worker exits after SIGTERM');
my $took = time() - $t0;
note(sprintf('slow: exited %.2f s after SIGTERM (grace 1 s)', $took));
ok($took >= 0.9, sprintf('slow: it waited for the grace period first (%.2f s)', $took));
ok($took < 10, sprintf('slow: it did not wait for the jobs (%.2f s)', $took));
stop_process($w);
is($w->{status}, 0, 'slow: exit status 0');
like($w->{out}, qr/finished 0 jobs .*\n.*also 0 failed attempt\(s\) to be retried and 3 task\(s\) released unfinished/,
	'slow: the summary counts no job finished and 3 released');
ok(!grep({ pid_alive($_) } @children), 'slow: the handlers were killed');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.leases}), '0', 'slow: the leases are gone');
is( $node->safe_psql('postgres', q{
SELECT string_agg(status || ':' || current_attempt, ',') FROM silo.jobs WHERE task_group = 'slow'}),
	'Waiting:1,Waiting:1,Waiting:1', 'slow: the jobs are Waiting again, still on attempt 1');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.attempt WHERE job_id LIKE 'slow-%'}),
	$attempt_rows, 'slow: no attempt was used up');
is( $node->safe_psql('postgres', q{
SELECT string_agg(DISTINCT attempt || ':' || relative_attempt, ',') FROM silo.lease('w-sql', 'slow', 10, 10000)}),
	'1:1', 'slow: the released tasks can be leased again as attempt 1');
kill 'KILL', grep { pid_alive($_) } @children;

# A second SIGTERM ends the grace period at once.
$node->safe_psql('postgres', q{
SELECT count(silo.enqueue('slow2', '{}', id => 'slow2-' || i)) FROM generate_series(1, 2) i});
$w = start_worker('tap-slow2', '--task-group', 'slow2', '--concurrency', '2', '--grace-ms', '60000',
	'--exec', "echo \$\$ > $dir/pids/\$SILO_JOB_ID; exec sleep 60");
ok( poll_until(
		$node, q{SELECT count(*) FROM silo.leases WHERE worker_id = 'tap-slow2'}, '2', 30),
	'second signal: the worker holds two leases');
# A lease is held before its handler has started: wait for both pid files.
my $pid_deadline = time() + 30;
usleep(50_000)
  while (grep({ !-s "$dir/pids/slow2-$_" } 1 .. 2) && time() < $pid_deadline);
kill 'TERM', $w->{pid};
ok(wait_for_output($w, qr/stopping; waiting up to 60000 ms for 2 job\(s\)/, 20),
	'second signal: after the first SIGTERM the worker waits for its jobs');
$t0 = time();
kill 'TERM', $w->{pid};
ok(wait_process_exit($w, 20), 'second signal: the worker exits');
$took = time() - $t0;
note(sprintf('second signal: exited %.2f s after the second SIGTERM (grace 60 s)', $took));
ok($took < 10, sprintf('second signal: the grace period was cut short (%.2f s)', $took));
stop_process($w);
like($w->{out}, qr/finished 0 jobs .*\n.*also 0 failed attempt\(s\) to be retried and 2 task\(s\) released unfinished/,
	'second signal: both tasks released');
is( $node->safe_psql('postgres', q{
SELECT string_agg(status || ':' || current_attempt, ',') FROM silo.jobs WHERE task_group = 'slow2'}),
	'Waiting:1,Waiting:1', 'second signal: the jobs are Waiting again');
my @children2 = map { -s $_ ? slurp_file($_) =~ s/\s+//gr : () } map { "$dir/pids/slow2-$_" } 1 .. 2;
is(scalar(@children2), 2, 'second signal: two handlers had started');
ok(!grep({ pid_alive($_) } @children2), 'second signal: the handlers were killed');
kill 'KILL', grep { pid_alive($_) } @children2;

# ---------------------------------------------------------------------------
# SIGTERM: jobs finish within --grace-ms
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT count(silo.enqueue('grace', '{}', id => 'grace-' || i)) FROM generate_series(1, 5) i});
$w = start_worker('tap-grace', '--task-group', 'grace', '--concurrency', '3', '--batch', '3',
	'--grace-ms', '5000', '--exec', 'sleep 1.5');
ok( poll_until(
		$node, q{SELECT count(*) FROM silo.leases WHERE worker_id = 'tap-grace'}, '3', 30),
	'grace: the worker holds three leases');
$t0 = time();
kill 'TERM', $w->{pid};
ok(wait_process_exit($w, 20), 'grace: the worker exits after SIGTERM');
$took = time() - $t0;
note(sprintf('grace: exited %.2f s after SIGTERM (jobs of 1.5 s, grace 5 s)', $took));
ok($took < 4.5, sprintf('grace: it exited when the jobs were done, before the grace ran out (%.2f s)', $took));
stop_process($w);
is($w->{status}, 0, 'grace: exit status 0');
like($w->{out}, qr/finished 3 jobs \(3 succeeded, 0 failed, 0 cancelled; 0 of them after retries\)/,
	'grace: the summary counts 3 succeeded');
is( $node->safe_psql('postgres', q{
SELECT string_agg(status || ' ' || n, ',' ORDER BY status) FROM
  (SELECT status, count(*) n FROM silo.jobs WHERE task_group = 'grace' GROUP BY 1) x}),
	'Succeeded 3,Waiting 2', 'grace: the running jobs Succeeded, and nothing new was leased after SIGTERM');

# ---------------------------------------------------------------------------
# NOTIFY wakes the worker
# ---------------------------------------------------------------------------

$w = start_worker('tap-wake', '--task-group', 'wake', '--poll-ms', '60000');
ok( poll_until(
		$node, q{
SELECT count(*) FROM pg_stat_activity
 WHERE state = 'idle' AND query LIKE '%FROM silo.lease($1::text%'}, '1', 30),
	'wake: the worker has leased once and now waits (poll interval 60 s)');
$node->safe_psql('postgres', q{SELECT silo.enqueue('wake', '{}', id => 'wake-1')});
ok(poll_until($node, q{SELECT status FROM silo.jobs WHERE id = 'wake-1'}, 'Succeeded', 30),
	'wake: the job is done');
my $wake_ms = $node->safe_psql('postgres', q{
SELECT round(extract(epoch FROM pg_xact_commit_timestamp(s.xmin) - pg_xact_commit_timestamp(i.xmin)) * 1000)
  FROM silo.job_status s JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
 WHERE s.id = 'wake-1'});
note("wake: job done $wake_ms ms after its enqueue committed");
cmp_ok($wake_ms, '<', 2000, "wake: picked up on NOTIFY, not by the 60 s poll ($wake_ms ms)");
ok(stop_process($w, 15), 'wake: the worker stops on SIGTERM');
is($w->{status}, 0, 'wake: exit status 0');

$node->stop;
done_testing();
