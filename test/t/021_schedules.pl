
# 021_schedules.pl: recurring jobs fired by pg_cron for real
# (docs/api.md, "Recurring jobs"; docs/security.md).
#
# The database owner, not a superuser, plants a trap as in
# 012_search_path.pl -- functions and operators named like pg_catalog's,
# and a silo-like function in a schema of their own, each making the owner
# a superuser when a superuser reaches it -- and puts that schema first in
# the database's search_path.  Then:
#  - a superuser schedules '* * * * *' from a session under that path;
#  - pg_cron, over libpq, fires it within about 70 s (minute granularity)
#    as the extension owner: one job 'cron:tick:<minute>' per minute;
#  - no planted object is reached, and the owner is not a superuser;
#  - the broker makes a pg_cron job that went missing again, and removes a
#    job of a schedule that is gone.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $node = silo_node('schedules', dbname => 'app');

# pg_cron runs jobs over libpq to cron.host; the node listens on a socket.
my $socket_dir = $node->host;
$node->append_conf('postgresql.conf', "cron.host = '$socket_dir'\n");
$node->restart;

my $pin = "SET search_path = pg_catalog, pg_temp;\nSET ROLE NONE;\n";

sub app
{
	my ($sql) = @_;
	return $node->safe_psql('app', $pin . $sql);
}

sub as_owner
{
	my ($sql) = @_;
	return $node->safe_psql('app', $sql, extra_params => [ '-U', 'dbowner' ]);
}

$node->safe_psql('postgres', q{
CREATE ROLE dbowner LOGIN;
ALTER DATABASE app OWNER TO dbowner;
});

as_owner(q{
CREATE SCHEMA own_evil;
CREATE TABLE own_evil.hits (what text, superuser boolean);

CREATE FUNCTION own_evil.hit(what text) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO own_evil.hits SELECT what, current_setting('is_superuser') = 'on';
	IF current_setting('is_superuser') = 'on' THEN
		EXECUTE 'ALTER ROLE dbowner SUPERUSER';
	END IF;
END $$;

CREATE FUNCTION own_evil.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('now'); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION own_evil.fire_schedule(id integer) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('fire_schedule'); RETURN NULL; END $$;
CREATE FUNCTION own_evil.texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('= text'); RETURN pg_catalog.texteq(a, b); END $$;
CREATE FUNCTION own_evil.int8eq(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('= bigint'); RETURN pg_catalog.int8eq(a, b); END $$;
CREATE FUNCTION own_evil.int84eq(a bigint, b integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('= bigint integer'); RETURN pg_catalog.int84eq(a, b); END $$;
CREATE FUNCTION own_evil.le(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('<='); RETURN pg_catalog.timestamptz_le(a, b); END $$;
CREATE FUNCTION own_evil.textcat(a text, b text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM own_evil.hit('||'); RETURN pg_catalog.textcat(a, b); END $$;

CREATE OPERATOR own_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = own_evil.texteq);
CREATE OPERATOR own_evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = own_evil.int8eq);
CREATE OPERATOR own_evil.= (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = own_evil.int84eq);
CREATE OPERATOR own_evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = own_evil.le);
CREATE OPERATOR own_evil.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = own_evil.textcat);

ALTER DATABASE app SET search_path = own_evil, pg_catalog, public;
});

# control: a session of the owner's reaches the planted objects
as_owner(q{SELECT 'a'::text = 'b', 1::bigint = 2::bigint, now() <= now(), 'a'::text || 'b',
                  fire_schedule(1)});
is( app(q{SELECT string_agg(DISTINCT what, ',' ORDER BY what) FROM own_evil.hits WHERE NOT superuser}),
	'<=,= bigint,= text,fire_schedule,now,||',
	'control: an ordinary session of the database owner reaches every planted object');
app('DELETE FROM own_evil.hits');

# A superuser schedules from a session that takes the planted search_path
# (silo.schedule pins its own).
is($node->safe_psql('app', 'SHOW search_path'), 'own_evil, pg_catalog, public',
	'control: a superuser session takes the planted search_path');
my $id = $node->safe_psql('app',
	q{SELECT silo.schedule('tick', '* * * * *', 'ticks', '{"n": 1}', tenant => 'acme')});
like($id, qr/^\d+$/, 'scheduled every minute');
is( app(qq{SELECT command FROM cron.job WHERE jobname = 'silo-schedule-$id'}),
	"SELECT silo.fire_schedule($id)",
	'the pg_cron command names the schedule by its number only');

# pg_cron fires it within the next minute (and a bit)
my $job = poll_value(
	$node, $pin . q{SELECT id FROM silo.jobs WHERE tenant = 'acme' AND id LIKE 'cron:tick:%' LIMIT 1},
	75, db => 'app');
like($job, qr/^cron:tick:\d{4}-\d\d-\d\dT\d\d:\d\dZ$/, "pg_cron fired the schedule: $job");
my ($minute) = $job =~ /^cron:tick:(.*)Z$/;
is( app(qq{SELECT to_char(last_firing AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI') || '|' || last_job_id
             FROM silo.schedules WHERE name = 'tick'}),
	"$minute|$job", 'the view shows the last firing and its job');
is( app(qq{SELECT count(*) FROM silo.jobs WHERE tenant = 'acme' AND id = '$job'}),
	'1', 'one job for that minute');
is( app(qq{SELECT bool_or(status = 'succeeded') AND NOT bool_or(status = 'failed')
             FROM cron.job_run_details
             WHERE jobid = (SELECT jobid FROM cron.job WHERE jobname = 'silo-schedule-$id')}),
	't', 'pg_cron recorded the firing as succeeded, and no run as failed');

# nothing planted was reached by a superuser
is(app(q{SELECT count(*) FROM own_evil.hits}), '0',
	'neither scheduling nor the firing reached a planted object');
is(app(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'dbowner'}), 'f',
	'the database owner is not a superuser');

# the broker checks pg_cron's jobs: a missing one is made again (as after
# a restore into a cluster without it), a job of no schedule goes
app(qq{SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = 'silo-schedule-$id'});
app(q{SELECT cron.schedule('silo-schedule-424242', '* * * * *', 'SELECT 1')});
ok( poll_until(
		$node, $pin . q{SELECT string_agg(jobname || ' ' || command, ',') FROM cron.job
		                 WHERE jobname LIKE 'silo-schedule-%'},
		"silo-schedule-$id SELECT silo.fire_schedule($id)", 30, db => 'app'),
	'the broker made the missing pg_cron job again and removed the stray one');

# unschedule removes the pg_cron job
is(app(q{SELECT silo.unschedule('tick', 'acme')}), 't', 'unscheduled');
is(app(q{SELECT count(*) FROM cron.job WHERE jobname LIKE 'silo-schedule-%'}), '0',
	'its pg_cron job is gone');
is(app(q{SELECT count(*) FROM own_evil.hits}), '0', 'still no planted object reached');

$node->stop;
done_testing();
