
# 002_broker_restart.pl: the broker's life cycle.
#
#  - pg_terminate_backend(broker) -> a new broker (another pid) comes back
#    and keeps working: it promotes future jobs and sweeps expired leases;
#  - silo.broker_paused = on (ALTER SYSTEM + reload) stops promotion and
#    sweeping; off resumes both;
#  - a server restart keeps every job, lease and attempt, and a new broker
#    carries on with them.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;
use Time::HiRes qw(time);

my $node = silo_node('restart');

# A row of silo.task is promoted by the broker within 1 s of its start time:
# the commit time of the promoting transaction minus the start time, in ms.
sub promotion_ms
{
	my ($job) = @_;
	return $node->safe_psql('postgres', qq{
SELECT round(extract(epoch FROM pg_xact_commit_timestamp(xmin) - start_at) * 1000)
  FROM silo.task WHERE job_id = '$job' AND due});
}

# ---------------------------------------------------------------------------
# pg_terminate_backend
# ---------------------------------------------------------------------------

my $broker1 = wait_for_broker($node);
ok(defined $broker1, 'broker running');
$broker1 //= 0;

my $logpos = log_position($node);
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($broker1)"),
	't', 'broker terminated');
my $t0 = time();
my $broker2 = wait_for_broker($node, not => $broker1, timeout => 30);
ok(defined $broker2, 'a new broker comes back after pg_terminate_backend');
note(sprintf('new broker %s after %.2f s', $broker2 // 'none', time() - $t0));
$broker2 //= 0;
isnt($broker2, $broker1, 'the new broker is another process');
ok(!pid_alive($broker1), 'the old broker process is gone');
ok( defined wait_for_log_until(
		$node, qr/terminating background worker "silo broker" due to administrator command/,
		$logpos, 10),
	'the termination is logged');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'silo broker'"),
	'1', 'one broker after the restart');

# The new broker promotes ...
$node->safe_psql('postgres', q{
SELECT silo.enqueue('g', '{}', id => 'after-term', start_at => clock_timestamp() + interval '1 s')});
ok(poll_until($node, q{SELECT due FROM silo.task WHERE job_id = 'after-term'}, 't', 10),
	'new broker promotes a future job');
my $ms = promotion_ms('after-term');
note("after-term promoted $ms ms after its start time");
ok($ms >= 0 && $ms < 1000, "new broker promotes within 1 s of the start time ($ms ms)");

# ... and sweeps.
$node->safe_psql('postgres', q{
SELECT silo.enqueue('g-sweep', '{}', id => 'term-sweep');
SELECT count(*) FROM silo.lease('w-gone', 'g-sweep', 1, 300);});
ok( poll_until(
		$node, q{
SELECT status || ',' || (SELECT error_code FROM silo.attempt WHERE job_id = 'term-sweep')
  FROM silo.jobs WHERE id = 'term-sweep'}, 'Failed,WORKER_CRASHED', 10),
	'new broker sweeps an expired lease');

# ---------------------------------------------------------------------------
# silo.broker_paused
# ---------------------------------------------------------------------------

$logpos = log_position($node);
$node->safe_psql('postgres', q{ALTER SYSTEM SET silo.broker_paused = on; SELECT pg_reload_conf();});
ok( defined wait_for_log_until(
		$node, qr/parameter "silo.broker_paused" changed to "on"/, $logpos, 10),
	'pause: configuration reloaded');

# A job due in 300 ms and a lease expiring in 300 ms, then watch for 2.5 s:
# a running broker would have handled both within about 1.3 s.
$node->safe_psql('postgres', q{
SELECT silo.enqueue('g', '{}', id => 'paused-1', start_at => clock_timestamp() + interval '300 ms');
SELECT silo.enqueue('g-sweep', '{}', id => 'paused-sweep');
SELECT count(*) FROM silo.lease('w-gone', 'g-sweep', 1, 300);});
my $observed = $node->safe_psql('postgres', q{
SELECT silotest.wait_for($$
	SELECT (SELECT due FROM silo.task WHERE job_id = 'paused-1')
	    OR NOT EXISTS (SELECT 1 FROM silo.task_lease WHERE job_id = 'paused-sweep')$$, 2500)
       IS NULL});
is($observed, 't', 'paused: for 2.5 s nothing is promoted or swept');
is( $node->safe_psql('postgres', q{
SELECT (SELECT status FROM silo.jobs WHERE id = 'paused-1'),
       (SELECT expired FROM silo.leases WHERE job_id = 'paused-sweep')}),
	'Waiting|t', 'paused: the job is due (Waiting) and the lease expired, yet both untouched');
is($node->safe_psql('postgres', 'SELECT silo.broker_pid()'), $broker2,
	'paused: the broker is still running');

$logpos = log_position($node);
my $resumed_at = $node->safe_psql('postgres', q{
ALTER SYSTEM SET silo.broker_paused = off;
SELECT extract(epoch FROM clock_timestamp());
SELECT pg_reload_conf();});
($resumed_at) = split /\n/, $resumed_at;
ok(poll_until($node, q{SELECT due FROM silo.task WHERE job_id = 'paused-1'}, 't', 10),
	'resumed: the job is promoted');
my $resume_ms = $node->safe_psql('postgres', qq{
SELECT round((extract(epoch FROM pg_xact_commit_timestamp(xmin)) - $resumed_at) * 1000)
  FROM silo.task WHERE job_id = 'paused-1'});
note("promoted $resume_ms ms after the reload");
cmp_ok($resume_ms, '<', 1000, "resumed: promoted within 1 s of the reload ($resume_ms ms)");
ok( poll_until(
		$node, q{SELECT status FROM silo.jobs WHERE id = 'paused-sweep'}, 'Failed', 10),
	'resumed: the expired lease is swept');
$node->safe_psql('postgres', q{
SELECT silo.complete(task_id, 'w') FROM silo.lease('w', 'g', 100, 10000)});

# ---------------------------------------------------------------------------
# Server restart keeps the jobs
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT silo.enqueue('g', '{"k": "waiting"}', id => 'r-waiting', metadata => '{"kind": "w"}');
SELECT silo.enqueue('g', '{}', id => 'r-scheduled', start_at => now() + interval '1 hour');
SELECT silo.enqueue('g', '{}', id => 'r-retrying', priority => 1,
                    retry_policy => '{"retryCount": 2, "initialIntervalMs": 3600000}');
SELECT silo.enqueue('g', '{}', id => 'r-running', priority => 0);
SELECT silo.enqueue('g', '{}', id => 'r-cancel', priority => 0);
SELECT silo.enqueue('g', '{}', id => 'r-done', priority => 0);
});
# lease order: priority 0 (r-running, r-cancel, r-done), then r-retrying (priority 1)
$node->safe_psql('postgres', q{
SELECT count(*) FROM silo.lease('w-r', 'g', 3, 3600000);
SELECT silo.complete(task_id, 'w-r', '{"r": 1}') FROM silo.leases WHERE job_id = 'r-done';
SELECT silo.cancel('r-cancel');
SELECT count(*) FROM silo.lease('w-r', 'g', 1, 3600000);
SELECT silo.fail(task_id, 'w-r', 'E1') FROM silo.leases WHERE job_id = 'r-retrying';
});
my $states = q{SELECT string_agg(id || ':' || status || ':' || (cancelled_at IS NOT NULL), ',' ORDER BY id)
  FROM silo.jobs WHERE id LIKE 'r-%'};
is( $node->safe_psql('postgres', $states),
	'r-cancel:Running:true,r-done:Succeeded:false,r-retrying:Retrying:false,r-running:Running:false,'
	  . 'r-scheduled:Scheduled:false,r-waiting:Waiting:false',
	'before restart: jobs in every live state');

my $snapshot_sql = q{
SELECT 'info', count(*), md5(string_agg(x::text, ',' ORDER BY x.tenant, x.id)) FROM silo.job_info x
UNION ALL SELECT 'status', count(*), md5(string_agg(x::text, ',' ORDER BY x.tenant, x.id)) FROM silo.job_status x
UNION ALL SELECT 'meta', count(*), md5(string_agg(x::text, ',' ORDER BY x)) FROM silo.job_metadata x
UNION ALL SELECT 'task', count(*), md5(string_agg(x::text, ',' ORDER BY x.task_id)) FROM silo.task x
UNION ALL SELECT 'lease', count(*), md5(string_agg(x::text, ',' ORDER BY x.task_id)) FROM silo.task_lease x
UNION ALL SELECT 'attempt', count(*), md5(string_agg(x::text, ',' ORDER BY x.tenant, x.job_id, x.attempt)) FROM silo.attempt x
UNION ALL SELECT 'cancel', count(*), md5(string_agg(x::text, ',' ORDER BY x)) FROM silo.job_cancellation x};
my $before = $node->safe_psql('postgres', $snapshot_sql);

$node->restart;
my $broker3 = wait_for_broker($node, not => $broker2);
ok(defined $broker3, 'after restart: a new broker runs');
is($node->safe_psql('postgres', $snapshot_sql), $before,
	'after restart: every silo table holds the same rows');
is($node->safe_psql('postgres', $states),
	'r-cancel:Running:true,r-done:Succeeded:false,r-retrying:Retrying:false,r-running:Running:false,'
	  . 'r-scheduled:Scheduled:false,r-waiting:Waiting:false',
	'after restart: the same job states');

# The jobs carry on.
is( $node->safe_psql('postgres', q{
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.lease('w-2', 'g', 10, 10000)}),
	'r-waiting', 'after restart: the waiting job is leased');
$node->safe_psql('postgres', q{
SELECT silo.complete(task_id, 'w-2') FROM silo.leases WHERE job_id = 'r-waiting';
SELECT silo.complete(task_id, 'w-r') FROM silo.leases WHERE job_id = 'r-running';
SELECT silo.fail(task_id, 'w-r', 'X') FROM silo.leases WHERE job_id = 'r-cancel';
SELECT silo.expedite('r-scheduled');
SELECT silo.expedite('r-retrying');});
is( $node->safe_psql('postgres', q{
SELECT string_agg(job_id || ':' || attempt, ',' ORDER BY job_id) FROM silo.lease('w-3', 'g', 10, 10000)}),
	'r-retrying:2,r-scheduled:1', 'after restart: expedited jobs are leased');
$node->safe_psql('postgres', q{SELECT silo.complete(task_id, 'w-3') FROM silo.leases});
is( $node->safe_psql('postgres', $states),
	'r-cancel:Cancelled:true,r-done:Succeeded:false,r-retrying:Succeeded:false,r-running:Succeeded:false,'
	  . 'r-scheduled:Succeeded:false,r-waiting:Succeeded:false',
	'after restart: every job finished as expected');

$node->stop;
done_testing();
