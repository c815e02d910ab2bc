
# test/perl/SiloTest.pm: helpers shared by silo's TAP tests (test/t/*.pl).
#
#   silo_node(NAME, %opt)      a started node with pg_cron and silo preloaded
#                              and both extensions created
#   poll_until(NODE, SQL, EXPECTED, TIMEOUT, %opt)
#                              re-run SQL until it prints EXPECTED (deadline)
#   wait_for_broker(NODE, %opt) the broker's pid once it runs (optionally a
#                              pid other than a given one)
#   log_position(NODE), wait_for_log_until(NODE, RE, OFFSET, TIMEOUT)
#   start_process(ARGV, %opt), wait_process_exit(P, TIMEOUT),
#   wait_for_output(P, RE, TIMEOUT),
#   stop_process(P, TIMEOUT)  background processes, always stopped by pid;
#                              an END block kills any a test left running
#   pid_alive(PID)
#   set_clock_offset(NODE, MS) move silo's clock server-wide (ALTER SYSTEM
#                              silo.clock_offset_ms + reload)
#
# Tests wait for conditions with deadlines, never with fixed sleeps.  The
# SQL helpers installed by silo_node (schema silotest) do the waiting inside
# the server when a measurement needs millisecond precision:
#
#   silotest.wait_for(cond text, timeout_ms int) -> timestamptz
#       clock_timestamp() at the first evaluation of the boolean query cond
#       that returns true (NULL counts as false), or NULL at the deadline.
#   silotest.wait_for_active(pattern text, timeout_ms int) -> int
#       the pid of another client backend that is running a query LIKE
#       pattern right now, or NULL at the deadline.
#   silotest.after_broker_tick(stmt text, timeout_ms int) -> timestamptz
#       waits until the broker has just finished a round (its
#       pg_stat_activity row turned idle with a new state_change), then runs
#       stmt and returns clock_timestamp().  The statement commits a few
#       milliseconds after the broker went to sleep, which pins the phase of
#       the broker's periodic tick.
#
# Nodes run with track_commit_timestamp = on, so the commit time of the
# transaction that last wrote a row is pg_xact_commit_timestamp(xmin): the
# exact moment a task was promoted, a job enqueued, and so on.

package SiloTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(
  silo_node install_test_helpers poll_until poll_value wait_for_broker
  log_position wait_for_log_until start_process wait_process_exit
  stop_process pid_alive silo_worker_path wait_for_output
  set_clock_offset bg_session bg_start bg_finished bg_collect
);

my @processes;    # every process start_process started

=pod

=item silo_node(NAME, %opt)

Create, configure and start a node whose postgresql.conf preloads pg_cron and
silo, with cron.database_name and silo.database set to $opt{dbname}
(default postgres).  Creates that database if needed, then the extensions
(CREATE EXTENSION silo CASCADE) and the silotest helpers, unless
$opt{no_extension}.  $opt{conf} is appended to postgresql.conf.

=cut

sub silo_node
{
	my ($name, %opt) = @_;
	my $db = $opt{dbname} // 'postgres';
	my $node = PostgreSQL::Test::Cluster->new($name);

	$node->init;
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = '$db'
silo.database = '$db'
track_commit_timestamp = on
max_worker_processes = 16
lc_messages = 'C'
} . ($opt{conf} // ''));
	$node->start;
	return $node if $opt{no_extension};

	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"})
	  if $db ne 'postgres';
	$node->safe_psql($db, 'CREATE EXTENSION silo CASCADE');
	install_test_helpers($node, $db);
	return $node;
}

=pod

=item install_test_helpers(NODE, DB)

Create (or replace) the silotest schema and its functions in DB.

=cut

sub install_test_helpers
{
	my ($node, $db) = @_;

	$node->safe_psql(
		$db, q{
CREATE SCHEMA IF NOT EXISTS silotest;

CREATE OR REPLACE FUNCTION silotest.wait_for(cond text, timeout_ms int DEFAULT 10000)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + timeout_ms * interval '1 ms';
	ok boolean;
BEGIN
	LOOP
		EXECUTE cond INTO ok;
		IF ok THEN
			RETURN clock_timestamp();
		END IF;
		IF clock_timestamp() > deadline THEN
			RETURN NULL;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION silotest.wait_for_active(pattern text, timeout_ms int DEFAULT 10000)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + timeout_ms * interval '1 ms';
	found int;
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT pid INTO found FROM pg_stat_activity
		 WHERE backend_type = 'client backend' AND state = 'active'
		   AND query LIKE pattern AND pid <> pg_backend_pid()
		 LIMIT 1;
		IF found IS NOT NULL OR clock_timestamp() > deadline THEN
			RETURN found;
		END IF;
		PERFORM pg_sleep(0.001);
	END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION silotest.after_broker_tick(stmt text, timeout_ms int DEFAULT 10000)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + timeout_ms * interval '1 ms';
	t0 timestamptz;
	st text;
	ts timestamptz;
BEGIN
	SELECT state_change INTO t0 FROM pg_stat_activity WHERE backend_type = 'silo broker';
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT state, state_change INTO st, ts
		  FROM pg_stat_activity WHERE backend_type = 'silo broker';
		EXIT WHEN st = 'idle' AND ts IS DISTINCT FROM t0 AND t0 IS NOT NULL;
		IF t0 IS NULL THEN
			t0 := ts;
		END IF;
		IF clock_timestamp() > deadline THEN
			RAISE EXCEPTION 'the silo broker did not finish a round within % ms', timeout_ms;
		END IF;
		PERFORM pg_sleep(0.001);
	END LOOP;
	EXECUTE stmt;
	RETURN clock_timestamp();
END
$$;
});
	return;
}

=pod

=item poll_until(NODE, SQL, EXPECTED, TIMEOUT, %opt)

Run SQL (in $opt{db}, default postgres) every 50 ms until its output equals
EXPECTED, for at most TIMEOUT seconds.  Errors (say, while the server
restarts) count as "not yet".  Returns 1 on success; on timeout prints the
last output and returns 0.

=cut

sub poll_until
{
	my ($node, $sql, $expected, $timeout, %opt) = @_;
	my $db = $opt{db} // 'postgres';
	my $deadline = time() + ($timeout // 30);
	my ($out, $err) = ('', '');

	while (1)
	{
		($out, $err) = ('', '');

		# psql can exit before reading its input (the server is still in
		# crash recovery and refuses the connection): IPC::Run then dies on
		# the broken pipe.  That is one more failed poll, not the test's end.
		eval { $node->psql($db, $sql, stdout => \$out, stderr => \$err); 1 }
		  or ($@ =~ /Broken pipe/ ? ($err = "psql: $@") : die $@);
		chomp $out;
		return 1 if $out eq $expected;
		last if time() > $deadline;
		usleep(50_000);
	}
	diag("poll_until timed out after ${timeout}s\nquery: $sql\n"
		  . "expected: $expected\nlast output: $out\nlast stderr: $err");
	return 0;
}

=pod

=item poll_value(NODE, SQL, TIMEOUT, %opt)

Run SQL every 50 ms until it prints something non-empty without error;
returns that output, or undef at the deadline.

=cut

sub poll_value
{
	my ($node, $sql, $timeout, %opt) = @_;
	my $db = $opt{db} // 'postgres';
	my $deadline = time() + ($timeout // 30);

	my ($out, $err) = ('', '');

	while (1)
	{
		($out, $err) = ('', '');
		# as in poll_until: a psql that exits unread is a failed poll
		my $rc = eval { $node->psql($db, $sql, stdout => \$out, stderr => \$err) };
		if (!defined $rc)
		{
			die $@ unless $@ =~ /Broken pipe/;
			($rc, $err) = (-1, "psql: $@");
		}
		chomp $out;
		return $out if $rc == 0 && $out ne '';
		last if time() > $deadline;
		usleep(50_000);
	}
	diag("poll_value timed out after ${timeout}s: $sql\nlast stderr: $err");
	return undef;
}

=pod

=item wait_for_broker(NODE, %opt)

Wait (at most $opt{timeout} s, default 30) until silo.broker_pid() is set,
differs from $opt{not} when given, and a 'silo broker' backend with that pid
is in pg_stat_activity.  Returns the pid or undef.

=cut

sub wait_for_broker
{
	my ($node, %opt) = @_;
	my $db = $opt{db} // 'postgres';
	my $not = $opt{not} // 0;
	my $pid = poll_value(
		$node, qq{
SELECT b.pid FROM pg_stat_activity b
 WHERE b.backend_type = 'silo broker' AND b.pid = silo.broker_pid() AND b.pid <> $not},
		$opt{timeout} // 30, db => $db);
	return $pid;
}

=pod

=item log_position(NODE), wait_for_log_until(NODE, RE, OFFSET, TIMEOUT)

The current size of the server log, and a wait for RE to appear in the log
after OFFSET: returns the new offset, or undef at the deadline.

=cut

sub log_position
{
	my ($node) = @_;
	return -s $node->logfile;
}

sub wait_for_log_until
{
	my ($node, $re, $offset, $timeout) = @_;
	my $deadline = time() + ($timeout // 30);

	while (1)
	{
		my $log = slurp_file($node->logfile, $offset // 0);
		return ($offset // 0) + length($log) if $log =~ $re;
		last if time() > $deadline;
		usleep(50_000);
	}
	diag("log did not match $re within ${timeout}s");
	return undef;
}

=pod

=item start_process(ARGV, %opt)

Start ARGV in the background with IPC::Run; stdout and stderr are captured
into $p->{out} and $p->{err} (or go to files $opt{stdout} / $opt{stderr}).
$opt{env} is a hash of extra environment variables.  Returns a handle with
{pid}; every handle is remembered so the END block can kill leftovers.

=cut

sub start_process
{
	my ($argv, %opt) = @_;
	my $p = { argv => $argv, out => '', err => '' };
	local %ENV = (%ENV, %{ $opt{env} // {} });

	my @redirs = (
		'<', \undef,
		'>', ($opt{stdout} // \$p->{out}),
		'2>', ($opt{stderr} // \$p->{err}));
	$p->{h} = IPC::Run::start($argv, @redirs);
	$p->{pid} = $p->{h}->{KIDS}[0]{PID};
	$p->{started} = time();
	push @processes, $p;
	note("started pid $p->{pid}: @$argv");
	return $p;
}

=pod

=item wait_process_exit(P, TIMEOUT)

Wait at most TIMEOUT seconds for P to exit; returns 1 when it did (its exit
status is then in $p->{status}, as in $?), 0 otherwise.

=cut

sub wait_process_exit
{
	my ($p, $timeout) = @_;
	my $deadline = time() + $timeout;

	return 1 if defined $p->{status};
	while (1)
	{
		$p->{h}->pump_nb;
		if (!$p->{h}->pumpable)
		{
			$p->{h}->finish;
			$p->{status} = $p->{h}->full_result(0);
			$p->{exited_at} = time();
			return 1;
		}
		return 0 if time() > $deadline;
		usleep(20_000);
	}
}

=pod

=item wait_for_output(P, RE, TIMEOUT)

Wait at most TIMEOUT seconds for RE to match what P has written to stdout or
stderr (captured ones only); returns 1 when it did.

=cut

sub wait_for_output
{
	my ($p, $re, $timeout) = @_;
	my $deadline = time() + $timeout;

	while (1)
	{
		$p->{h}->pump_nb if !defined $p->{status} && $p->{h}->pumpable;
		return 1 if $p->{out} =~ $re || $p->{err} =~ $re;
		if (time() > $deadline)
		{
			diag("no output matching $re within ${timeout}s");
			return 0;
		}
		usleep(20_000);
	}
}

=pod

=item stop_process(P, TIMEOUT)

Stop P by its pid: SIGTERM, then SIGKILL if it has not exited within TIMEOUT
seconds (default 10).  Returns 1 if SIGTERM was enough.

=cut

sub stop_process
{
	my ($p, $timeout) = @_;

	return 1 if defined $p->{status};
	kill 'TERM', $p->{pid};
	return 1 if wait_process_exit($p, $timeout // 10);
	diag("pid $p->{pid} ignored SIGTERM; killing it");
	kill 'KILL', $p->{pid};
	wait_process_exit($p, 10);
	return 0;
}

=pod

=item pid_alive(PID)

Whether a process with that pid exists (and is not a zombie of ours).

=cut

sub pid_alive
{
	my ($pid) = @_;
	return 0 unless $pid && kill(0, $pid);
	if (open my $fh, '<', "/proc/$pid/stat")
	{
		my $stat = <$fh>;
		close $fh;
		return 0 if defined $stat && $stat =~ /^\d+ \(.*\) Z /;
	}
	return 1;
}

=pod

=item silo_worker_path()

The silo-worker binary: $SILO_WORKER, else tools/silo-worker under
$SILO_SRC; undef when neither is an executable file.

=cut

sub silo_worker_path
{
	for my $w ($ENV{SILO_WORKER},
		defined $ENV{SILO_SRC} ? "$ENV{SILO_SRC}/tools/silo-worker" : undef)
	{
		return $w if defined $w && -f $w && -x $w;
	}
	return undef;
}

=pod

=item set_clock_offset(NODE, MS, %opt)

Move silo's clock for the whole server: ALTER SYSTEM SET
silo.clock_offset_ms = MS and pg_reload_conf(), then wait (at most
$opt{timeout} s, default 30) until a new session sees the value.  By then
the postmaster has signalled every process; the broker applies the new
offset at the start of its next round (within about a second), so tests
still wait for its effects with deadlines.  Returns 1 on success.

=cut

sub set_clock_offset
{
	my ($node, $ms, %opt) = @_;
	my $db = $opt{db} // 'postgres';

	$node->safe_psql($db,
		"ALTER SYSTEM SET silo.clock_offset_ms = $ms; SELECT pg_reload_conf();");
	return poll_until(
		$node, q{SELECT setting FROM pg_settings WHERE name = 'silo.clock_offset_ms'},
		"$ms", $opt{timeout} // 30, db => $db);
}

=pod

=item bg_session(NODE, DB)

A background psql session on DB (default postgres) that goes on after an
error, with its backend's pid in {pid}.

=cut

sub bg_session
{
	my ($node, $db) = @_;
	my $s = $node->background_psql($db // 'postgres', on_error_stop => 0);
	$s->{pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

my $bg_marks = 0;

=pod

=item bg_start(S, SQL)

Send SQL to session S without waiting for it; the end of its output is
marked.  Returns the mark, for bg_finished and bg_collect.

=cut

sub bg_start
{
	my ($s, $sql) = @_;
	my $mark = 'done' . ++$bg_marks;
	$s->{stdout} = '';
	$s->{stderr} = '';
	$s->{stdin} .= "$sql\n\\echo '\@\@$mark' :SQLSTATE\n";
	$s->{run}->pump_nb;
	return $mark;
}

=pod

=item bg_finished(S, MARK)

undef while the call of MARK runs; then [its output, its SQLSTATE, what it
wrote to stderr].

=cut

sub bg_finished
{
	my ($s, $mark) = @_;
	$s->{run}->pump_nb if $s->{run}->pumpable;
	return undef unless $s->{stdout} =~ /^(.*?)\@\@$mark (\S+)\n/s;
	return [ $1, $2, $s->{stderr} ];
}

=pod

=item bg_collect(TIMEOUT, [S, MARK]...)

Wait until every call has finished or TIMEOUT seconds have passed; returns
bg_finished's results in order (undef for a call still running).

=cut

sub bg_collect
{
	my ($timeout, @calls) = @_;
	my $deadline = time() + $timeout;
	my @got = map { undef } @calls;
	while (1)
	{
		my $left = 0;
		for my $i (0 .. $#calls)
		{
			$got[$i] //= bg_finished(@{ $calls[$i] }[ 0, 1 ]);
			$left++ unless defined $got[$i];
		}
		last if $left == 0 || time() > $deadline;
		usleep(10_000);
	}
	return @got;
}

END
{
	# A test that died half-way must not leave its processes running.  Keep
	# the script's exit status: reaping a child would overwrite $?.
	local $?;
	for my $p (@processes)
	{
		next if defined $p->{status} || !pid_alive($p->{pid});
		kill 'KILL', $p->{pid};
		eval { $p->{h}->finish; };
	}
}

1;
