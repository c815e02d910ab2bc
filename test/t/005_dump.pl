
# 005_dump.pl: pg_dump of a populated database, restored on another server.
#
# The source holds jobs in every state (Waiting, Scheduled, Retrying,
# Running, Running with a pending cancel, Succeeded, Failed, Cancelled, and
# a restarted job), with metadata, attempts, cancellation flags and live
# leases, in two tenants.  pg_dump -Fc of it is restored with pg_restore into
# database "restoredb" of a second node, whose cron.database_name and
# silo.database name that database.  Then:
#   - pg_restore reports no error (pg_cron's cron.job is dumped too, so the
#     purge job must not be scheduled twice);
#   - every silo table holds the same rows, the job sequence the same value,
#     silo's objects the same privileges,
#     silo.jobs the same states, and pg_cron has the purge job once;
#   - the restored jobs carry on: leases taken before the dump can be
#     reported, the cancel flag is seen, due jobs are leased and completed,
#     future ones expedited, and new enqueues continue the sequence.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $src = silo_node('src');

$src->safe_psql('postgres', q{
SELECT silo.enqueue('g', '{"doc": {"list": [1, 2.5, "three", null], "ok": true}}', id => 'd-waiting',
                    metadata => '{"team": "a", "env": "prod"}');
SELECT silo.enqueue('g', '{}', tenant => 'acme', id => 'd-scheduled', priority => 10,
                    start_at => now() + interval '1 day', metadata => '{"team": "b"}');
SELECT silo.enqueue('g', '{}', id => 'd-retrying', priority => 1,
                    retry_policy => '{"retryCount": 3, "initialIntervalMs": 3600000,
                                      "maxIntervalMs": 7200000, "backoffFactor": 3, "randomizeInterval": true}');
SELECT silo.enqueue('g', '{"n": 1}', id => 'd-running', priority => 0);
SELECT silo.enqueue('g', '{"n": 2}', tenant => 'acme', id => 'd-cancelling', priority => 0);
SELECT silo.enqueue('g', '{}', id => 'd-done', priority => 0, metadata => '{"team": "a"}');
SELECT silo.enqueue('g', '{}', id => 'd-failed', priority => 0);
SELECT silo.enqueue('g', '{}', id => 'd-restarted', priority => 0);
SELECT silo.enqueue('g', '{}', tenant => 'acme', id => 'd-cancelled', priority => 5);
});
# Lease order: priority 0 by enqueue order, then d-retrying (priority 1).
$src->safe_psql('postgres', q{
SELECT count(*) FROM silo.lease('w-dump', 'g', 5, 3600000);
SELECT silo.complete(task_id, 'w-dump', '{"answer": 42}') FROM silo.leases WHERE job_id = 'd-done';
SELECT silo.fail(task_id, 'w-dump', 'E_BAD', '{"why": "test"}') FROM silo.leases WHERE job_id IN ('d-failed', 'd-restarted');
SELECT count(*) FROM silo.lease('w-dump', 'g', 1, 3600000);
SELECT silo.fail(task_id, 'w-dump', 'E_RETRY') FROM silo.leases WHERE job_id = 'd-retrying';
SELECT silo.restart('d-restarted');
SELECT silo.cancel('d-cancelling', 'acme');
SELECT silo.cancel('d-cancelled', 'acme');
});
# A role bound to tenant acme (a binding names the role: roles are global
# objects, created on the new server before the restore, as with
# pg_dumpall --globals-only).
$src->safe_psql('postgres', q{
CREATE ROLE dump_acme IN ROLE silo_producer;
SELECT silo.grant_tenant('dump_acme', 'acme');
});

my $jobs_sql = q{
SELECT tenant, id, status, current_attempt, cancelled_at IS NOT NULL FROM silo.jobs ORDER BY tenant, id};
my $expected_jobs = join("\n",
	'-|d-done|Succeeded||f',
	'-|d-failed|Failed||f',
	'-|d-restarted|Waiting|2|f',
	'-|d-retrying|Retrying|2|f',
	'-|d-running|Running|1|f',
	'-|d-waiting|Waiting|1|f',
	'acme|d-cancelled|Cancelled||t',
	'acme|d-cancelling|Running|1|t',
	'acme|d-scheduled|Scheduled|1|f');
is($src->safe_psql('postgres', $jobs_sql), $expected_jobs, 'source: jobs in every state');

# Every row of every silo table, in key order.
my %tables = (
	job_info => 'tenant, id',
	job_status => 'tenant, id',
	job_metadata => 'tenant, key, value, job_id',
	task => 'task_group, start_at, priority, tenant, job_id, attempt',
	task_lease => 'task_id',
	attempt => 'tenant, job_id, attempt',
	job_cancellation => 'tenant, job_id',
	tenant_grant => 'role_name, tenant');
my %rows;
for my $t (sort keys %tables)
{
	$rows{$t} = $src->safe_psql('postgres', "SELECT x::text FROM silo.$t x ORDER BY $tables{$t}");
}
my $acl_sql = q{
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
  SELECT p.oid::regprocedure::text || ' ' || coalesce(p.proacl::text, '-') x
    FROM pg_proc p WHERE p.pronamespace = 'silo'::regnamespace
  UNION ALL
  SELECT c.oid::regclass::text || ' ' || coalesce(c.relacl::text, '-')
    FROM pg_class c WHERE c.relnamespace = 'silo'::regnamespace) y};
my $acls = $src->safe_psql('postgres', $acl_sql);
my $seq_sql = 'SELECT last_value, is_called FROM silo.job_seq';
my $seq = $src->safe_psql('postgres', $seq_sql);
ok($rows{task_lease} ne '' && $rows{job_cancellation} ne '' && $rows{job_metadata} ne '',
	'source: leases, cancellation flags and metadata exist');

my $dumpfile = PostgreSQL::Test::Utils::tempdir . '/silo.dump';
# The broker schedules the purge job once silo holds jobs; the dump must
# carry it, and the restore must not collide with it.
ok(poll_until($src, q{SELECT count(*) FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs'}, '1', 30),
	'the source broker scheduled the purge job');
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dumpfile, '-d', 'postgres' ], 'pg_dump of the source');

# ---------------------------------------------------------------------------
# Restore into restoredb on a second node
# ---------------------------------------------------------------------------

my $dst = silo_node('dst', dbname => 'restoredb', no_extension => 1);
$dst->safe_psql('postgres', 'CREATE DATABASE restoredb');
$dst->safe_psql('postgres', 'CREATE ROLE dump_acme');
my ($stdout, $stderr) = ('', '');
my $rc = IPC::Run::run([ 'pg_restore', '-d', $dst->connstr('restoredb'), $dumpfile ],
	'>', \$stdout, '2>', \$stderr);
note("pg_restore stderr:\n$stderr") if $stderr ne '';
ok($rc && $stderr eq '', 'pg_restore succeeds without errors')
  or diag("pg_restore failed:\n$stderr");

for my $t (sort keys %tables)
{
	is($dst->safe_psql('restoredb', "SELECT x::text FROM silo.$t x ORDER BY $tables{$t}"),
		$rows{$t}, "restored: silo.$t has the same rows");
}
is($dst->safe_psql('restoredb', $seq_sql), $seq, 'restored: silo.job_seq has the same value');
is($dst->safe_psql('restoredb', $acl_sql), $acls, 'restored: the same privileges on silo functions, tables and views');
is($dst->safe_psql('restoredb', $jobs_sql), $expected_jobs, 'restored: silo.jobs shows the same states');
# The binding holds after the restore: the views and the metadata policy
# show the bound role its tenant only.
$dst->safe_psql('restoredb', 'GRANT silo_producer TO dump_acme');
is( $dst->safe_psql('restoredb', q{
SET ROLE dump_acme;
SELECT string_agg(id, ',' ORDER BY id) FROM silo.jobs;
SELECT string_agg(key || '=' || value, ',' ORDER BY key) FROM silo.job_metadata}),
	"d-cancelled,d-cancelling,d-scheduled\nteam=b",
	'restored: the binding of dump_acme limits it to acme, in the views and job_metadata');
my ($out_b, $err_b) = ('', '');
$dst->psql('restoredb', q{SET ROLE dump_acme; SELECT silo.enqueue('g', tenant => '-')},
	stdout => \$out_b, stderr => \$err_b);
like($err_b, qr/role "dump_acme" may not act in tenant "-"/,
	'restored: the bound role is refused another tenant');
is( $dst->safe_psql('restoredb',
		q{SELECT count(*) FROM cron.job WHERE command LIKE '%silo.purge_terminal_jobs%'}),
	'1', 'restored: pg_cron has the purge job once');
# The restored row still names the source database ("postgres"); the
# restored broker re-schedules the job by name, which pg_cron turns into an
# update of that row: one purge job, now aimed at restoredb.
ok(poll_until($dst, q{SELECT string_agg(database, ',') FROM cron.job
                       WHERE command LIKE '%silo.purge_terminal_jobs%'}, 'restoredb', 30, db => 'restoredb'),
	'restored: the broker points the one purge job at the restored database');
is( $dst->safe_psql('restoredb', q{
SELECT string_agg(job_id, ',' ORDER BY job_id) FROM silo.job_metadata
 WHERE tenant = '-' AND key = 'team' AND value = 'a'}),
	'd-done,d-waiting', 'restored: the metadata index answers');

my $broker = wait_for_broker($dst, db => 'restoredb');
ok(defined $broker, 'restored: the broker runs in restoredb');

# ---------------------------------------------------------------------------
# The restored jobs carry on
# ---------------------------------------------------------------------------

is( $dst->safe_psql('restoredb', q{
SELECT silo.complete(task_id, 'w-dump', '{"after": "restore"}') FROM silo.leases WHERE job_id = 'd-running';
SELECT status, result FROM silo.job_result('d-running');}),
	"\nSucceeded|{\"after\": \"restore\"}", 'restored: a lease taken before the dump is completed');
is( $dst->safe_psql('restoredb', q{
SELECT silo.heartbeat(task_id, 'w-dump') FROM silo.leases WHERE job_id = 'd-cancelling'}),
	't', 'restored: the heartbeat of the flagged job reports the cancel');
$dst->safe_psql('restoredb', q{
SELECT silo.ack_cancel(task_id, 'w-dump') FROM silo.leases WHERE job_id = 'd-cancelling'});
is( $dst->safe_psql('restoredb', q{
SELECT string_agg(job_id || ':' || attempt || ':' || relative_attempt, ',' ORDER BY job_id)
  FROM silo.lease('w-new', 'g', 10, 10000)}),
	'd-restarted:2:1,d-waiting:1:1', 'restored: the due jobs are leased');
$dst->safe_psql('restoredb', q{
SELECT silo.expedite('d-scheduled', 'acme');
SELECT silo.expedite('d-retrying');});
is( $dst->safe_psql('restoredb', q{
SELECT string_agg(job_id || ':' || attempt, ',' ORDER BY job_id) FROM silo.lease('w-new', 'g', 10, 10000)}),
	'd-retrying:2,d-scheduled:1', 'restored: expedited jobs are leased');
$dst->safe_psql('restoredb', q{SELECT count(silo.complete(task_id, 'w-new')) FROM silo.leases});
is( $dst->safe_psql('restoredb', $jobs_sql),
	join("\n",
		'-|d-done|Succeeded||f',
		'-|d-failed|Failed||f',
		'-|d-restarted|Succeeded||f',
		'-|d-retrying|Succeeded||f',
		'-|d-running|Succeeded||f',
		'-|d-waiting|Succeeded||f',
		'acme|d-cancelled|Cancelled||t',
		'acme|d-cancelling|Cancelled||t',
		'acme|d-scheduled|Succeeded||f'),
	'restored: every job finished');

my ($ok, $out, $err) = (0, '', '');
$dst->psql('restoredb', q{SELECT silo.enqueue('g', '{}', id => 'd-done')},
	stdout => \$out, stderr => \$err, on_error_stop => 1, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  23505/, 'restored: a duplicate id is still refused (23505)');
is( $dst->safe_psql('restoredb', q{
SELECT silo.enqueue('g', '{}', id => 'd-new');
SELECT i.seq > (SELECT max(seq) FROM silo.job_info WHERE id <> 'd-new')
  FROM silo.job_info i WHERE id = 'd-new'}),
	"d-new\nt", 'restored: new jobs continue the enqueue sequence');
ok(poll_until($dst, q{SELECT count(*) FROM silo.leases}, '0', 5, db => 'restoredb'),
	'restored: no lease left');

$src->stop;
$dst->stop;
done_testing();
