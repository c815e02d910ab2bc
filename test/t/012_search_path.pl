# 012_search_path.pl: a database owner who is not a superuser cannot make
# silo's superuser contexts run their code (docs/security.md).
#
# The broker and pg_cron's purge job run as the bootstrap superuser in
# sessions that take the database's settings.  The owner of the database
# plants, in a schema of their own, a function named like pg_catalog's
# to_regprocedure(), now() and clock_timestamp(), and operators <=, <, =
# on timestamptz and = on text and name, each of which records who called
# it and, when that is a superuser, makes the owner one; then sets the
# database's search_path to that schema first.  The test shows the trap
# works (an ordinary session of the owner's, and the command silo 1.5
# scheduled, reach it), then that
#  - a broker started under that search_path promotes, sweeps and rewrites
#    a restored pre-1.6 purge command without reaching any planted object;
#  - pg_cron runs the purge command (over libpq, as in production) without
#    reaching one either;
#  - the owner is not a superuser at the end.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $node = silo_node('search_path', dbname => 'app');

# pg_cron runs jobs over libpq to cron.host; the node listens on a socket.
my $socket_dir = $node->host;
$node->append_conf('postgresql.conf', "cron.host = '$socket_dir'\n");
$node->restart;

# Every query of the test's own in app pins its path, as silo must (once
# the trap is planted, a superuser query that does not would reach it).
# SET ROLE NONE, as the owner may set the database's role too (below).
my $pin = "SET search_path = pg_catalog, pg_temp;\nSET ROLE NONE;\n";

sub app
{
	my ($sql) = @_;
	return $node->safe_psql('app', $pin . $sql);
}

sub broker_pid
{
	my ($not) = @_;
	return poll_value(
		$node, $pin . qq{
SELECT b.pid FROM pg_stat_activity b
 WHERE b.backend_type = 'silo broker' AND b.pid = silo.broker_pid() AND b.pid <> $not},
		30, db => 'app');
}

sub as_owner
{
	my ($sql) = @_;
	return $node->safe_psql('app', $sql, extra_params => [ '-U', 'dbowner' ]);
}

my $old_command = q{DO $purge$ BEGIN IF to_regprocedure('silo.purge_terminal_jobs(integer)') IS NOT NULL THEN PERFORM silo.purge_terminal_jobs(); END IF; END $purge$};

# A job, so that the broker schedules the purge job.
$node->safe_psql('postgres', q{
CREATE ROLE dbowner LOGIN;
ALTER DATABASE app OWNER TO dbowner;
});
app(q{SELECT silo.enqueue('g', id => 'first')});
ok( poll_until(
		$node, $pin . q{SELECT command LIKE '%pg_catalog.pg_extension%' FROM cron.job
		                 WHERE jobname = 'silo-purge-terminal-jobs'},
		't', 30, db => 'app'),
	'the broker scheduled the purge job with the qualified command');
my $jobid = app(q{SELECT jobid FROM cron.job WHERE jobname = 'silo-purge-terminal-jobs'});

# ---------------------------------------------------------------------------
# The trap, planted by the database owner
# ---------------------------------------------------------------------------

as_owner(q{
CREATE SCHEMA own_evil;
CREATE TABLE own_evil.hits (what text, superuser boolean, backend_type text, app text);

CREATE FUNCTION own_evil.hit(what text) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO own_evil.hits
	SELECT what, current_setting('is_superuser') = 'on',
		   (SELECT backend_type FROM pg_stat_activity WHERE pid = pg_backend_pid()),
		   current_setting('application_name');
	IF current_setting('is_superuser') = 'on' THEN
		EXECUTE 'ALTER ROLE dbowner SUPERUSER';
	END IF;
END $$;

CREATE FUNCTION own_evil.to_regprocedure(t text) RETURNS regprocedure LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('to_regprocedure'); RETURN pg_catalog.to_regprocedure(t); END $$;
CREATE FUNCTION own_evil.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('now'); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION own_evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('clock_timestamp'); RETURN pg_catalog.clock_timestamp(); END $$;

CREATE FUNCTION own_evil.le(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('<='); RETURN pg_catalog.timestamptz_le(a, b); END $$;
CREATE FUNCTION own_evil.lt(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('<'); RETURN pg_catalog.timestamptz_lt(a, b); END $$;
CREATE FUNCTION own_evil.eq(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('= timestamptz'); RETURN pg_catalog.timestamptz_eq(a, b); END $$;
CREATE FUNCTION own_evil.texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('= text'); RETURN pg_catalog.texteq(a, b); END $$;
CREATE FUNCTION own_evil.nameeq(a name, b name) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('= name'); RETURN pg_catalog.nameeq(a, b); END $$;

CREATE OPERATOR own_evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = own_evil.le);
CREATE OPERATOR own_evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = own_evil.lt);
CREATE OPERATOR own_evil.= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = own_evil.eq);
CREATE OPERATOR own_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = own_evil.texteq);
CREATE OPERATOR own_evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = own_evil.nameeq);

ALTER DATABASE app SET search_path = own_evil, pg_catalog, public;
});
my $planted_at = app('SELECT now()');

# The trap works: a session of the owner's reaches the planted objects ...
as_owner(q{SELECT now() <= clock_timestamp(), to_regprocedure('pg_catalog.now()'),
                  'a'::text = 'b', 'a'::name = 'b'});
is( app(q{SELECT string_agg(what, ',' ORDER BY what) FROM own_evil.hits WHERE NOT superuser}),
	'<=,= name,= text,clock_timestamp,now,to_regprocedure',
	'control: an ordinary session of the database owner reaches every planted object');

# ... and so does, run as a superuser, the purge command silo scheduled up
# to 1.5 (in a transaction rolled back, so that nothing of it stays)
is( $node->safe_psql(
		'app', qq{
BEGIN;
$old_command;
SET LOCAL search_path = pg_catalog;
SELECT count(*) FROM own_evil.hits WHERE superuser AND what = 'to_regprocedure';
SELECT rolsuper FROM pg_roles WHERE rolname = 'dbowner';
ROLLBACK;}),
	"1\nt",
	'control: the pre-1.6 purge command would have made the owner a superuser');
app('DELETE FROM own_evil.hits');

# ---------------------------------------------------------------------------
# The broker, started under the planted search_path
# ---------------------------------------------------------------------------

my $old_broker = broker_pid(0) // 0;
app("SELECT pg_terminate_backend($old_broker)");
my $broker = broker_pid($old_broker);
ok(defined $broker, 'a new broker started under the planted search_path');
is( as_owner('SHOW search_path'),
	'own_evil, pg_catalog, public',
	'control: a new session of the database takes the planted search_path');

# Work for the broker: a future job to promote, a lease to sweep; and a
# limit slot freed while the broker runs.
app(q{
SELECT silo.enqueue('later', id => 'later', start_at => clock_timestamp() + interval '1 s');
SELECT silo.enqueue('swept', id => 'swept');
SELECT count(*) FROM silo.lease('w', 'swept', lease_ms => 200);
SELECT silo.enqueue('limited', id => 'limited-' || i,
                    limits => '[{"type": "concurrency", "key": "k", "maxConcurrency": 1}]')
  FROM generate_series(1, 2) i;
SELECT silo.complete(task_id, 'w') FROM silo.lease('w', 'limited');
});
ok(poll_until($node, $pin . q{SELECT due FROM silo.task WHERE job_id = 'later'}, 't', 30, db => 'app'),
	'the broker promotes under the planted search_path');
ok( poll_until(
		$node, $pin . q{SELECT error_code FROM silo.attempts WHERE job_id = 'swept'},
		'WORKER_CRASHED', 30, db => 'app'),
	'the broker sweeps an expired lease under the planted search_path');
is(app(q{SELECT count(*) FROM silo.lease('w', 'limited')}), '1',
	'the next job of the limit was granted');

# ---------------------------------------------------------------------------
# pg_cron runs the purge command, over libpq, in a session of app
# ---------------------------------------------------------------------------

my $run = poll_value(
	$node, $pin . qq{
SELECT status FROM cron.job_run_details
 WHERE jobid = $jobid AND start_time > '$planted_at' AND status IN ('succeeded', 'failed')
 ORDER BY start_time LIMIT 1}, 150, db => 'app');
is($run, 'succeeded', 'pg_cron ran the purge command after the trap was planted');

# Right after a run (the next is a minute away): a restore of an older dump
# brings the old command back, and the broker rewrites it.
app(qq{UPDATE cron.job SET command = \$cmd\$$old_command\$cmd\$ WHERE jobid = $jobid});
ok( poll_until(
		$node, $pin . qq{SELECT command LIKE '%pg_catalog.pg_extension%' FROM cron.job WHERE jobid = $jobid},
		't', 20, db => 'app'),
	'the broker rewrote a restored pre-1.6 purge command');

# ---------------------------------------------------------------------------
# Nothing planted was reached by a superuser
# ---------------------------------------------------------------------------

is(app(q{SELECT count(*) FROM own_evil.hits}), '0',
	'neither the broker nor the purge job reached a planted object');
is(app(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'dbowner'}), 'f',
	'the database owner is not a superuser');
my $hits = app(q{
SELECT string_agg(format('%s x%s (superuser %s, %s, %s)', what, n, superuser, backend_type, app), '; ')
  FROM (SELECT what, superuser, backend_type, app, count(*) AS n
          FROM own_evil.hits GROUP BY 1, 2, 3, 4 ORDER BY 1) h});
diag("planted objects reached: $hits") if $hits ne '';

# ---------------------------------------------------------------------------
# The owner may also set the database's role: the broker acts as itself
# ---------------------------------------------------------------------------

as_owner(q{ALTER DATABASE app SET role = dbowner});
is( $node->safe_psql('app', 'SELECT current_user'),
	'dbowner', 'control: a superuser session of the database now acts as the owner');
$old_broker = $broker // 0;
app("SELECT pg_terminate_backend($old_broker)");
$broker = broker_pid($old_broker);
ok(defined $broker, 'a new broker started under the planted role');
app(q{SELECT silo.enqueue('later', id => 'later2', start_at => clock_timestamp() + interval '1 s')});
ok(poll_until($node, $pin . q{SELECT due FROM silo.task WHERE job_id = 'later2'}, 't', 30, db => 'app'),
	'the broker still promotes: it did not take the role');
is(app(q{SELECT count(*) FROM own_evil.hits}), '0', 'still no planted object reached');

$node->stop;
done_testing();
