
# 010_worker_refresh.pl: the reference worker answers refresh tasks of
# floating concurrency limits (silo.lease rows of kind 'refresh').
#
#  - --refresh-exec printing a bigger number: the key's current_max becomes
#    that number and the jobs waiting on it run; the command sees the key,
#    its current max, metadata and tenant in SILO_* variables (and the
#    metadata on stdin), and no job variables;
#  - a refresh command exiting 1: fail_refresh, so retry_count grows and
#    last_error holds the exit status and stderr; the max and the waiting
#    job stay as they were;
#  - output that is not an integer >= 1, and a command running past
#    --refresh-timeout-ms: fail_refresh with what went wrong;
#  - the worker never reports a job outcome on a refresh lease (SL010);
#  - SIGTERM while a refresh command runs past --grace-ms: the command is
#    killed and the refresh failed with "worker shutting down";
#  - without --refresh-exec: each refresh is answered with the current max,
#    so the max stays, last_refreshed_at advances refresh after refresh, and
#    the worker says so once.
#
# The job holding each key is leased from SQL (worker id 'holder') with a
# long lease, so the key stays in use and the broker keeps scheduling
# refreshes every 500 ms.  Every worker is stopped by its pid.

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

my $node = silo_node('worker_refresh');
my $dsn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;

ok(wait_for_broker($node), 'the broker runs');

# start_worker(ID, ARGS...): silo-worker --dsn DSN --worker-id ID ARGS.
sub start_worker
{
	my ($id, @args) = @_;
	return start_process([ $worker, '--dsn', $dsn, '--worker-id', $id, @args ]);
}

# floating(KEY, DEFAULT_MAX, %opt): the limits argument of a job using the
# floating key KEY (refresh every 500 ms).
sub floating
{
	my ($key, $max, %opt) = @_;
	my $meta = $opt{metadata} ? qq(, "metadata": $opt{metadata}) : '';
	return qq('[{"type": "floatingConcurrency", "key": "$key", )
	  . qq("defaultMaxConcurrency": $max, "refreshIntervalMs": 500$meta}]');
}

# hold(GROUP): lease every leasable task of GROUP as worker 'holder' for ten
# minutes, so the jobs holding the keys keep them.  A refresh that happens
# to be due already is answered with the current max.  Returns the job ids
# leased, sorted, comma-separated.
sub hold
{
	my ($group) = @_;
	return $node->safe_psql('postgres', qq{
CREATE TEMP TABLE l AS SELECT * FROM silo.lease('holder', '$group', 100, 600000);
DO \$\$ BEGIN
  PERFORM silo.report_refresh(task_id, 'holder', current_max_concurrency)
     FROM l WHERE kind = 'refresh';
END \$\$;
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM l WHERE kind = 'run';});
}

# limit_row(KEY): current_max|retry_count|last_error of a floating key.
sub limit_row
{
	my ($key) = @_;
	return $node->safe_psql('postgres', qq{
SELECT current_max || '|' || retry_count || '|' || coalesce(last_error, '<null>')
  FROM silo.floating_limits WHERE key = '$key'});
}

# ---------------------------------------------------------------------------
# --refresh-exec: a bigger max, a failing command, bad output, a timeout
# ---------------------------------------------------------------------------

my $refresher = "$dir/refresh.sh";
PostgreSQL::Test::Utils::append_to_file($refresher, <<"EOS");
#!/bin/sh
case "\$SILO_QUEUE_KEY" in
	grow)
		printf '%s|%s|%s|%s|%s|%s|%s\\n' "\$SILO_QUEUE_KEY" "\$SILO_CURRENT_MAX" \\
			"\$SILO_REFRESH_METADATA" "\$SILO_TENANT" "\$SILO_TASK_KIND" \\
			"\${SILO_JOB_ID-unset}" "\$(cat)" >> "$dir/env-grow"
		printf '%s\\n' "\$SILO_TASK_ID" >> "$dir/ids-grow"
		printf '  4 \\n' ;;
	fail)
		echo "boom on \$SILO_QUEUE_KEY" >&2
		exit 1 ;;
	bad)
		echo banana ;;
	slow)
		echo 'still thinking' >&2
		exec sleep 30 ;;
	noisy)
		i=0
		while [ \$i -lt 600 ]; do
			printf '\303\251\377x' >&2
			i=\$((i + 1))
		done
		printf END >&2
		exit 2 ;;
esac
EOS
chmod 0755, $refresher;

my $grow = floating('grow', 1, metadata => '{"region": "eu"}');
my $fail = floating('fail', 1);
my $bad = floating('bad', 2);
my $slow = floating('slow', 1);
my $noisy = floating('noisy', 1);
$node->safe_psql('postgres', qq{
SELECT silo.enqueue('ga', '{}', tenant => 't1', id => 'grow-h', limits => $grow);
SELECT silo.enqueue('ga', '{}', id => 'fail-h', limits => $fail);
SELECT silo.enqueue('ga', '{}', id => 'bad-h', limits => $bad);
SELECT silo.enqueue('ga', '{}', id => 'slow-h', limits => $slow);
SELECT silo.enqueue('ga', '{}', id => 'noisy-h', limits => $noisy);
SELECT count(silo.enqueue('ga', '{}', tenant => 't1', id => 'grow-w' || i, limits => $grow))
  FROM generate_series(1, 3) i;
SELECT silo.enqueue('ga', '{}', id => 'fail-w1', limits => $fail);});
is(hold('ga'), 'bad-h,fail-h,grow-h,noisy-h,slow-h', 'exec: the five holder jobs are leased from SQL');
is( $node->safe_psql('postgres', q{
SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM silo.jobs
 WHERE task_group = 'ga' AND id LIKE '%-w%'}),
	'fail-w1:Waiting,grow-w1:Waiting,grow-w2:Waiting,grow-w3:Waiting',
	'exec: the other jobs wait for their keys');

my $wa = start_worker('tap-refresh', '--task-group', 'ga', '--poll-ms', '200',
	'--grace-ms', '500', '--refresh-exec', "exec $refresher",
	'--refresh-timeout-ms', '1000');

ok( poll_until(
		$node, q{SELECT current_max FROM silo.floating_limits WHERE key = 'grow'}, '4', 60),
	'grow: current_max becomes the 4 the refresh command printed');
ok( poll_until(
		$node, q{
SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM silo.jobs WHERE id LIKE 'grow-w%'},
		'grow-w1:Succeeded,grow-w2:Succeeded,grow-w3:Succeeded', 30),
	'grow: the three waiting jobs run');
is( $node->safe_psql('postgres', q{
SELECT retry_count, last_error IS NULL, tenant FROM silo.floating_limits WHERE key = 'grow'}),
	'0|t|t1', 'grow: no failure recorded');
my @env = split /\n/, slurp_file("$dir/env-grow");
is($env[0], 'grow|1|{"region": "eu"}|t1|refresh|unset|{"region": "eu"}',
	'grow: SILO_QUEUE_KEY, SILO_CURRENT_MAX, SILO_REFRESH_METADATA, SILO_TENANT, '
	  . 'SILO_TASK_KIND set, no SILO_JOB_ID, the metadata on stdin');
my ($first_id) = split /\n/, slurp_file("$dir/ids-grow");
like($first_id, qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
	'grow: SILO_TASK_ID is the task id');

ok( poll_until(
		$node, q{SELECT retry_count >= 2 FROM silo.floating_limits WHERE key = 'fail'}, 't', 60),
	'fail: retry_count grows with each failed refresh');
like(limit_row('fail'), qr/^1\|\d+\|refresh command exited with status 1: boom on fail$/,
	'fail: the max stays 1; last_error has the exit status and stderr');
is($node->safe_psql('postgres', q{SELECT status FROM silo.jobs WHERE id = 'fail-w1'}),
	'Waiting', 'fail: its waiting job still waits');

ok( poll_until(
		$node, q{SELECT retry_count >= 1 FROM silo.floating_limits WHERE key = 'bad'}, 't', 60),
	'bad: output that is not a number fails the refresh');
like(limit_row('bad'), qr/^2\|\d+\|refresh command output is not an integer >= 1: banana$/,
	'bad: the max stays 2; last_error shows the output');

ok( poll_until(
		$node, q{SELECT retry_count >= 1 FROM silo.floating_limits WHERE key = 'slow'}, 't', 60),
	'slow: a refresh command past --refresh-timeout-ms fails the refresh');
like(limit_row('slow'), qr/^1\|\d+\|refresh command timed out after 1000 ms: still thinking$/,
	'slow: the max stays 1; last_error says it timed out');

ok( poll_until(
		$node, q{SELECT retry_count >= 1 FROM silo.floating_limits WHERE key = 'noisy'}, 't', 60),
	'noisy: a refresh command with 1800 characters of stderr fails the refresh');
is( $node->safe_psql('postgres', q{
SELECT char_length(last_error),
       left(last_error, 41) = 'refresh command exited with status 2: ...',
       right(last_error, 9) = repeat(U&'\00e9\fffdx', 2) || 'END'
  FROM silo.floating_limits WHERE key = 'noisy'}),
	'1024|t|t', 'noisy: last_error is cut to 1024 characters keeping the end of stderr, '
	  . 'invalid UTF-8 replaced');

ok(stop_process($wa, 20), 'exec: the worker stops on SIGTERM');
is($wa->{status}, 0, 'exec: exit status 0');
like($wa->{out}, qr/finished 3 jobs \(3 succeeded, 0 failed, 0 cancelled; 0 of them after retries\)/,
	'exec: the summary counts the three jobs, not the refreshes');
like($wa->{out}, qr/answered \d+ refresh task\(s\) \([1-9]\d* reported, [1-9]\d* failed\)/,
	'exec: the summary counts reported and failed refreshes');
unlike($wa->{err}, qr/SL010|failed:/, 'exec: no report was refused (no SL010)');
is( $node->safe_psql('postgres', q{SELECT count(*) FROM silo.leases WHERE worker_id = 'tap-refresh'}),
	'0', 'exec: the worker left no lease behind');

# ---------------------------------------------------------------------------
# SIGTERM while a refresh command runs: fail_refresh "worker shutting down"
# ---------------------------------------------------------------------------

my $hang = floating('hang', 2);
$node->safe_psql('postgres', qq{SELECT silo.enqueue('gb', '{}', id => 'hang-h', limits => $hang)});
is(hold('gb'), 'hang-h', 'shutdown: the holder job is leased from SQL');
my $wb = start_worker('tap-hang', '--task-group', 'gb', '--poll-ms', '200', '--grace-ms', '500',
	'--refresh-exec', "echo \$\$ > $dir/hang.pid; exec sleep 60");
ok( poll_until(
		$node, q{
SELECT kind || ':' || queue_key FROM silo.leases WHERE worker_id = 'tap-hang'}, 'refresh:hang', 60),
	'shutdown: the worker holds the refresh lease');
my $deadline = time() + 30;
usleep(20_000) while time() < $deadline && !-s "$dir/hang.pid";
my $hang_pid = -s "$dir/hang.pid" ? slurp_file("$dir/hang.pid") =~ s/\s+//gr : undef;
ok(defined $hang_pid, 'shutdown: the refresh command runs');
is(limit_row('hang'), '2|0|<null>', 'shutdown: no failure before the signal');
kill 'TERM', $wb->{pid};
ok(wait_process_exit($wb, 20), 'shutdown: the worker exits after SIGTERM');
stop_process($wb);
is($wb->{status}, 0, 'shutdown: exit status 0');
like($wb->{out}, qr/answered 1 refresh task\(s\) \(0 reported, 1 failed\)/,
	'shutdown: the summary counts one failed refresh');
is(limit_row('hang'), '2|1|worker shutting down',
	'shutdown: the refresh was failed with "worker shutting down", the max kept');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.leases WHERE worker_id = 'tap-hang'}),
	'0', 'shutdown: the refresh lease is gone');
ok(!pid_alive($hang_pid), 'shutdown: the refresh command was killed');
kill 'KILL', $hang_pid if pid_alive($hang_pid);

# ---------------------------------------------------------------------------
# Without --refresh-exec: the max stays, last_refreshed_at advances
# ---------------------------------------------------------------------------

my $keep = floating('keep', 3);
$node->safe_psql('postgres', qq{SELECT silo.enqueue('gc', '{}', id => 'keep-h', limits => $keep)});
is(hold('gc'), 'keep-h', 'no refresh-exec: the holder job is leased from SQL');
my $t0 = $node->safe_psql('postgres',
	q{SELECT last_refreshed_at FROM silo.floating_limits WHERE key = 'keep'});
my $wc = start_worker('tap-keep', '--task-group', 'gc', '--poll-ms', '200');
ok( poll_until(
		$node, qq{
SELECT last_refreshed_at > '$t0' FROM silo.floating_limits WHERE key = 'keep'}, 't', 60),
	'no refresh-exec: last_refreshed_at advances');
my $t1 = $node->safe_psql('postgres',
	q{SELECT last_refreshed_at FROM silo.floating_limits WHERE key = 'keep'});
ok( poll_until(
		$node, qq{
SELECT last_refreshed_at > '$t1' FROM silo.floating_limits WHERE key = 'keep'}, 't', 60),
	'no refresh-exec: and advances again: the refresh cycle goes on');
is(limit_row('keep'), '3|0|<null>', 'no refresh-exec: the max stays 3, no failure');
ok(stop_process($wc, 20), 'no refresh-exec: the worker stops on SIGTERM');
is($wc->{status}, 0, 'no refresh-exec: exit status 0');
like($wc->{out}, qr/answered ([2-9]|\d\d+) refresh task\(s\) \(\1 reported, 0 failed\)/,
	'no refresh-exec: the summary counts the refreshes, all reported');
my $told = () = $wc->{err} =~ /no --refresh-exec: answering refresh tasks/g;
is($told, 1, 'no refresh-exec: the worker says so once');
is(limit_row('keep'), '3|0|<null>', 'no refresh-exec: still 3 after the worker stopped');

$node->stop;
done_testing();
