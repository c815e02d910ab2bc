
# 003_crash.pl: kill -9 of a backend in the middle of a load.
#
# Producers (silo.enqueue, silo.enqueue_many) and workers (silo.lease, then
# silo.complete / silo.fail one task per transaction) run as shell loops of
# psql calls, each call a new connection, so they carry on by themselves
# once the server has recovered.  Every acknowledged enqueue (the id printed
# by a successful psql call, i.e. after the commit was acknowledged) and
# every acknowledged completion is appended to files outside the cluster.
#
# With restart_after_crash = on, a client backend caught running
# silo.enqueue_many is killed with SIGKILL: the postmaster resets the whole
# cluster and runs crash recovery.  After recovery the load runs on for a
# while, then stops, and we check:
#   - every acknowledged enqueue id is in silo.job_info exactly once, with
#     the payload of the request that returned it (enqueue_many: in input
#     order), and no request created a job twice;
#   - no enqueue_many batch is partly there (all or nothing);
#   - no job has two Succeeded attempts;
#   - no terminal job has a task or a lease; every pending job has exactly
#     one of them, the one its status row names;
#   - every job with an acknowledged completion is Succeeded;
#   - leases held across the crash are swept (WORKER_CRASHED) and retried;
#   - the broker is back; after draining, every job is terminal.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = silo_node(
	'crash', conf => q{
restart_after_crash = on
log_statement = none
});
my $dsn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;
my $stop = "$dir/stop";
my $psql = $node->installed_command('psql');
my $broker1 = wait_for_broker($node) // 0;

my $retry = q{jsonb_build_object('retryCount', 3, 'initialIntervalMs', 100)};

# producer.sh DSN P BATCH PAUSE OUT STOP: request n = 1, 2, ... enqueues
# BATCH jobs with payload {p, n, k}; acknowledged ids go to OUT as "p n k id".
# A failed call is not retried with the same n.
PostgreSQL::Test::Utils::append_to_file("$dir/producer.sh", <<EOS);
dsn=\$1 p=\$2 batch=\$3 pause=\$4 out=\$5 stop=\$6
n=0
while [ ! -e "\$stop" ]; do
	n=\$((n + 1))
	if [ "\$batch" = 1 ]; then
		sql="SELECT '\$p \$n 1 ' || silo.enqueue('crash', jsonb_build_object('p', \$p, 'n', \$n, 'k', 1), retry_policy => $retry)"
	else
		sql="SELECT '\$p \$n ' || k || ' ' || id FROM silo.enqueue_many((
			SELECT jsonb_agg(jsonb_build_object('task_group', 'crash', 'retry_policy', $retry,
			                                    'payload', jsonb_build_object('p', \$p, 'n', \$n, 'k', k)) ORDER BY k)
			  FROM generate_series(1, \$batch) k)) WITH ORDINALITY AS e(id, k)"
	fi
	if res=\$($psql -XAtq -v ON_ERROR_STOP=1 -d "\$dsn" -c "\$sql" 2>/dev/null); then
		printf '%s\\n' "\$res" >> "\$out"
	else
		sleep 0.05
	fi
	[ "\$pause" = 0 ] || sleep "\$pause"
done
EOS

# worker.sh DSN W FAIL OUT STOP: lease up to 5 tasks for 3 s, then report
# each in its own transaction.  With FAIL = 1, first attempts of jobs whose
# id starts with 0-3 are failed (and retried).  Acknowledged completions go
# to OUT as "done JOB", acknowledged failures as "failed JOB".
PostgreSQL::Test::Utils::append_to_file("$dir/worker.sh", <<EOS);
dsn=\$1 w=\$2 fail=\$3 out=\$4 stop=\$5
while [ ! -e "\$stop" ]; do
	leased=\$($psql -XAtq -v ON_ERROR_STOP=1 -d "\$dsn" -c "SELECT task_id || ' ' || job_id || ' ' || attempt FROM silo.lease('\$w', 'crash', 5, 3000)" 2>/dev/null) || { sleep 0.05; continue; }
	[ -n "\$leased" ] || { sleep 0.02; continue; }
	args=()
	while read -r tid jid att; do
		case "\$fail:\$att:\$jid" in
			1:1:[0-3]*) args+=(-c "SELECT 'failed \$jid' FROM silo.fail('\$tid', '\$w', 'E_TEST')") ;;
			*) args+=(-c "SELECT 'done \$jid' FROM silo.complete('\$tid', '\$w')") ;;
		esac
	done <<< "\$leased"
	$psql -XAtq -d "\$dsn" "\${args[@]}" >> "\$out" 2>/dev/null
done
EOS

my @load;
push @load, start_process([ 'bash', "$dir/producer.sh", $dsn, 1, 1, 0, "$dir/enq1", $stop ]);
push @load, start_process([ 'bash', "$dir/producer.sh", $dsn, 2, 5, 0, "$dir/enq2", $stop ]);
push @load, start_process([ 'bash', "$dir/producer.sh", $dsn, 3, 400, 0.3, "$dir/enq3", $stop ]);
push @load, start_process([ 'bash', "$dir/worker.sh", $dsn, 'w1', 0, "$dir/done1", $stop ]);
push @load, start_process([ 'bash', "$dir/worker.sh", $dsn, 'w2', 1, "$dir/done2", $stop ]);

sub lines_in
{
	my $n = 0;
	for my $f (@_)
	{
		next unless -e $f;
		open my $fh, '<', $f or die "$f: $!";
		$n++ while defined(my $line = <$fh>);
		close $fh;
	}
	return $n;
}
my @enq_files = map { "$dir/enq$_" } 1 .. 3;
my @done_files = map { "$dir/done$_" } 1 .. 2;

# Let the load run for about 3 s, making sure every kind of client got work
# acknowledged.
my $deadline = time() + 60;
my $load_start = time();
usleep(100_000)
  while time() < $deadline
  && (time() - $load_start < 3
	|| grep { lines_in($_) == 0 } @enq_files, @done_files);
my $acked_before = lines_in(@enq_files);
my $done_before = lines_in(@done_files);
note("before the crash: $acked_before enqueues and $done_before completions acknowledged");
ok($acked_before > 0 && $done_before > 0 && !grep({ lines_in($_) == 0 } @enq_files, @done_files),
	'load: every producer and worker had work acknowledged before the crash');

# A worker that leases ten tasks and dies with the server: its leases are
# committed, so they survive recovery, expire and must be swept and retried.
my $lost = $node->safe_psql('postgres', q{
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.lease('w-lost', 'crash', 10, 2000)});
my @lost = split /,/, $lost;
is(scalar(@lost), 10, 'a doomed worker holds ten leases');

# Catch a backend running silo.enqueue_many and SIGKILL it.
my $logpos = log_position($node);
# The call may end between finding it and the kill -- and a backend that
# is already exiting still accepts the signal -- so a kill only counts once
# the postmaster reports the backend killed by it; otherwise try another.
# And a SIGKILL that lands just after the call returned crashes the server
# with the backend idle: the postmaster then logs no "Failed process was
# running"; such a crash does not count either -- wait for recovery and
# catch another call.
my ($victim, $killed) = ('', 0);
for my $try (1 .. 20)
{
	my $from = log_position($node);
	$victim = $node->safe_psql('postgres',
		q{SELECT silotest.wait_for_active('%silo.enqueue_many%', 20000)});
	last if $victim eq '';
	next unless kill 'KILL', $victim;
	if (defined wait_for_log_until(
			$node, qr/server process \(PID $victim\) was terminated by signal 9/, $from, 10))
	{
		$logpos = $from;
		if (defined wait_for_log_until($node, qr/Failed process was running: SELECT .* silo\.enqueue_many/, $from, 5))
		{
			$killed = 1;
			last;
		}
		note("pid $victim was killed just after its call returned; recovering and trying again");
		poll_until($node, 'SELECT 1', '1', 60);
		next;
	}
	note("pid $victim finished before the SIGKILL landed; trying another backend");
}
ok($killed, "a backend running silo.enqueue_many (pid $victim) was killed by SIGKILL");
my $killed_at = time();
unless ($killed)
{
	# The rest needs the crash; end this file (its END block stops the load).
	diag('no backend could be killed mid-call');
	done_testing();
	exit;
}
like(slurp_file($node->logfile, $logpos), qr/Failed process was running: SELECT .* silo\.enqueue_many/,
	'the killed backend was running silo.enqueue_many');
ok(defined wait_for_log_until($node, qr/all server processes terminated; reinitializing/, $logpos, 30),
	'the postmaster reset the cluster');
ok(poll_until($node, 'SELECT 1', '1', 60), 'the server accepts connections again');
note(sprintf('recovered %.1f s after the kill', time() - $killed_at));
my $broker2 = wait_for_broker($node, not => $broker1, timeout => 30);
ok(defined $broker2, 'a new broker runs after crash recovery');

# Run on for about 3 s after recovery, until new work was acknowledged.
my $acked_at_recovery = lines_in(@enq_files);
my $done_at_recovery = lines_in(@done_files);
$deadline = time() + 60;
my $recovered = time();
usleep(100_000)
  while time() < $deadline
  && (time() - $recovered < 3
	|| lines_in(@enq_files) == $acked_at_recovery
	|| lines_in(@done_files) == $done_at_recovery);
ok(lines_in(@enq_files) > $acked_at_recovery && lines_in(@done_files) > $done_at_recovery,
	'load: enqueues and completions are acknowledged again after recovery');

# Stop the load: the loops finish their current call and exit.
PostgreSQL::Test::Utils::append_to_file($stop, '');
my $all_stopped = 1;
for my $p (@load)
{
	$all_stopped = 0 unless wait_process_exit($p, 30);
	stop_process($p, 5);
}
ok($all_stopped, 'load: every client loop exited');

my $acked = lines_in(@enq_files);
my $done = lines_in(@done_files);
note("in total: $acked enqueues and $done reports acknowledged");

# Load what the clients saw into the database.
$node->safe_psql('postgres', qq{
CREATE TABLE acked (p int, n int, k int, id text);
CREATE TABLE reported (what text, job_id text);
COPY acked FROM '$dir/enq1' (DELIMITER ' ');
COPY acked FROM '$dir/enq2' (DELIMITER ' ');
COPY acked FROM '$dir/enq3' (DELIMITER ' ');
COPY reported FROM '$dir/done1' (DELIMITER ' ');
COPY reported FROM '$dir/done2' (DELIMITER ' ');});
is($node->safe_psql('postgres', 'SELECT count(*) FROM acked'), $acked, 'all acknowledged ids loaded');

# ---------------------------------------------------------------------------
# Invariants right after the load
# ---------------------------------------------------------------------------

sub check_invariants
{
	my ($when) = @_;

	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM acked a
 WHERE (SELECT count(*) FROM silo.job_info i WHERE i.tenant = '-' AND i.id = a.id) <> 1}),
		'0', "$when: every acknowledged enqueue id is in silo.job_info exactly once");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM acked a JOIN silo.job_info i ON i.tenant = '-' AND i.id = a.id
 WHERE (i.payload->>'p')::int <> a.p OR (i.payload->>'n')::int <> a.n
    OR (i.payload->>'k')::int <> a.k}),
		'0', "$when: each acknowledged id belongs to the request (and batch position) that returned it");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT 1 FROM silo.job_info WHERE task_group = 'crash'
                       GROUP BY payload->>'p', payload->>'n', payload->>'k' HAVING count(*) > 1) x}),
		'0', "$when: no request created a job twice");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT payload->>'p' p, payload->>'n' n, count(*) c FROM silo.job_info
                       WHERE task_group = 'crash' GROUP BY 1, 2) x
 WHERE c <> CASE p WHEN '1' THEN 1 WHEN '2' THEN 5 ELSE 400 END}),
		'0', "$when: every enqueue_many batch is complete or absent");
	is( $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM silo.job_info i
         WHERE NOT EXISTS (SELECT 1 FROM silo.job_status s WHERE s.tenant = i.tenant AND s.id = i.id))
     + (SELECT count(*) FROM silo.job_status s
         WHERE NOT EXISTS (SELECT 1 FROM silo.job_info i WHERE s.tenant = i.tenant AND s.id = i.id))}),
		'0', "$when: job_info and job_status match one to one");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT 1 FROM silo.attempt WHERE status = 'Succeeded'
                       GROUP BY tenant, job_id HAVING count(*) > 1) x}),
		'0', "$when: no job has two Succeeded attempts");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM silo.job_status s
 WHERE s.status <> 'Pending'
   AND (s.task_id IS NOT NULL
        OR EXISTS (SELECT 1 FROM silo.task t WHERE t.tenant = s.tenant AND t.job_id = s.id)
        OR EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.tenant = s.tenant AND l.job_id = s.id))}),
		'0', "$when: no terminal job has a task or a lease");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM silo.job_status s
 WHERE s.status = 'Pending'
   AND ((SELECT count(*) FROM silo.task t WHERE t.tenant = s.tenant AND t.job_id = s.id)
        + (SELECT count(*) FROM silo.task_lease l WHERE l.tenant = s.tenant AND l.job_id = s.id) <> 1
        OR NOT EXISTS (SELECT 1 FROM silo.task t WHERE t.task_id = s.task_id
                       UNION ALL SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id))}),
		'0', "$when: every pending job has exactly one task or lease, the one it names");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM silo.job_status s
 WHERE s.status = 'Succeeded'
   AND NOT EXISTS (SELECT 1 FROM silo.attempt a WHERE a.tenant = s.tenant AND a.job_id = s.id
                     AND a.status = 'Succeeded' AND a.attempt = s.attempt)}),
		'0', "$when: every Succeeded job's last attempt is its Succeeded attempt");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM reported r
  LEFT JOIN silo.job_status s ON s.tenant = '-' AND s.id = r.job_id
 WHERE r.what = 'done' AND s.status IS DISTINCT FROM 'Succeeded'}),
		'0', "$when: every job with an acknowledged completion is Succeeded");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM reported r
 WHERE r.what = 'failed'
   AND NOT EXISTS (SELECT 1 FROM silo.attempt a WHERE a.tenant = '-' AND a.job_id = r.job_id
                     AND a.attempt = 1 AND a.error_code = 'E_TEST')}),
		'0', "$when: every acknowledged failure is recorded as the job's first attempt");
	return;
}

check_invariants('after the crash');

# ---------------------------------------------------------------------------
# Drain: leases the killed clients held expire (3 s) and are swept.
# ---------------------------------------------------------------------------

$deadline = time() + 90;
my $pending;
while (1)
{
	$node->safe_psql('postgres', q{
SELECT count(silo.complete(task_id, 'drain')) FROM silo.lease('drain', 'crash', 1000, 60000)});
	$pending = $node->safe_psql('postgres',
		q{SELECT count(*) FROM silo.job_status WHERE status = 'Pending'});
	last if $pending eq '0' || time() > $deadline;
	usleep(100_000);
}
is($pending, '0', 'drain: every job ended');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM silo.job_status WHERE status NOT IN ('Succeeded', 'Failed')}),
	'0', 'drain: every job is Succeeded or Failed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM silo.task_lease')
	  . '|' . $node->safe_psql('postgres', 'SELECT count(*) FROM silo.task'),
	'0|0', 'drain: no task or lease is left');
note($node->safe_psql('postgres', q{
SELECT 'jobs: ' || string_agg(status || ' ' || c, ', ') FROM
  (SELECT status, count(*) c FROM silo.job_status GROUP BY 1 ORDER BY 1) x}));
note($node->safe_psql('postgres', q{
SELECT 'attempts: ' || string_agg(coalesce(error_code, status) || ' ' || c, ', ') FROM
  (SELECT status, error_code, count(*) c FROM silo.attempt GROUP BY 1, 2 ORDER BY 1, 2) x}));

check_invariants('after draining');
my $lost_list = join(',', map { "'$_'" } @lost);
is( $node->safe_psql('postgres', qq{
SELECT string_agg(DISTINCT a.worker_id || ':' || a.error_code || '>' || s.status, ',')
  FROM silo.attempt a JOIN silo.job_status s ON s.tenant = a.tenant AND s.id = a.job_id
 WHERE a.job_id IN ($lost_list) AND a.attempt = 1}),
	'w-lost:WORKER_CRASHED>Succeeded',
	'the leases held across the crash were swept as WORKER_CRASHED, and the jobs retried');

$node->stop;
done_testing();
