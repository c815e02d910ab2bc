
# 016_siloctl.pl: siloctl, the operator's command-line tool (tools/siloctl).
#
#  - tenant hash: every test vector of docs/cluster.md (read from the
#    document), exact; --check against the server for 300 random tenants,
#    ASCII and multibyte; a server that disagrees fails --check;
#  - a single-node silo: cluster info, node info, shard list (text and
#    --json), tenant locate, every job command against real jobs (not found
#    and wrong states: exit 1 with the SQLSTATE), query (rows, JSON, writes
#    refused in its read-only transaction, one statement only);
#  - NOT_OWNER routing.  Without the coordinator no silo node answers SL020
#    yet, so the owner hints come from a stub: a plain PostgreSQL server
#    (no silo library) whose databases each have a hand-made schema "silo"
#    in which silo.cancel, restart, expedite, delete_job and job_result
#    raise SL020 (or SL021) with a DETAIL the test chooses, and
#    silo.cluster_info is a table the test fills.  siloctl runs its real
#    code path against it: plain SQL, the SQLSTATE and DETAIL of the
#    answer, a connection to the owner_conninfo named -- the real silo
#    node, where the call then succeeds.  Checked: every job command
#    through one hop; a chain of three hops, and --max-hops 2 giving up
#    (exit 4); a loop (exit 4); SL021 retried with back-off then followed,
#    and exhausted (exit 5); an owner of null (exit 4); an unreadable
#    DETAIL (exit 4); an unreachable owner (exit 3); routing by
#    silo.cluster_info for job get and query, with --dsn's user kept for
#    the owner (the hint names none); tenant locate over an 8-shard map
#    (the test vectors' shards), a 7-shard map against the server's own
#    range check, and a boundary equal to a tenant's hash;
#  - shard force-release against a real etcd (SiloEtcd.pm), keys put by
#    hand through the JSON gateway: refused while the owner's member key
#    exists (exit 1, key kept); without --yes and no terminal refused (exit
#    2, key kept); with --yes released; on a terminal (a pty): "no" keeps
#    the key, an owner key changed or a member key registered while the
#    prompt waits makes the txn refuse (exit 1), "yes" releases; no owner
#    key (exit 1); etcd unreachable (exit 3);
#  - cluster info --from-etcd: owned, owner-down and unowned shards;
#  - usage errors (exit 2), an unreachable node (exit 3), --help.
#
# Every server and etcd member runs on this machine (PostgreSQL on Unix
# sockets, etcd on 127.0.0.1) and is stopped by its pid.

use strict;
use warnings FATAL => 'all';

use Encode qw(encode_utf8 decode_utf8);
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use MIME::Base64 qw(encode_base64 decode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloEtcd;
use SiloTest;
use Test::More;
use Time::HiRes qw(time);

my $t_start = time();
my $src = $ENV{SILO_SRC} // '.';
my $siloctl = $ENV{SILOCTL} // "$src/tools/siloctl/siloctl";
my $json = JSON::PP->new->utf8->canonical;

ok(-x $siloctl, "siloctl is built ($siloctl)") or BAIL_OUT('siloctl is not built: run make');

# ctl([{stdin => S}], ARGS...): run siloctl to completion (at most 60 s);
# arguments are character strings, sent as UTF-8.  Returns {rc, out, err,
# json} (json: the decoded stdout when --json was given).
sub ctl
{
	my @args = @_;
	my %o = ref $args[0] eq 'HASH' ? %{ shift @args } : ();
	my @argv = ($siloctl, map { encode_utf8($_) } @args);
	my ($in, $out, $err) = ($o{stdin} // '', '', '');
	my $ok = eval {
		IPC::Run::run(\@argv, '<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
		1;
	};
	my $r = {
		argv => \@args,
		rc => $ok ? $? >> 8 : -1,
		out => decode_utf8($out),
		err => decode_utf8($err) . ($ok ? '' : "\n(run failed: $@)")
	};
	$r->{json} = eval { $json->decode($out) } if grep { $_ eq '--json' } @args;
	return $r;
}

# check(R, COND, NAME): an assertion on a run, showing the run on failure.
sub check
{
	my ($r, $cond, $name) = @_;
	ok($cond, $name)
	  or diag(encode_utf8(
		"siloctl @{$r->{argv}}\nexit status: $r->{rc}\nstdout:\n$r->{out}\nstderr:\n$r->{err}"));
	return $cond;
}

# sql_literal(S): S as an SQL string literal (undef: NULL).
sub sql_literal
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/'/''/g;
	return "'$s'";
}

# ---------------------------------------------------------------------------
# Usage
# ---------------------------------------------------------------------------
my $r = ctl('--help');
check($r, $r->{rc} == 0 && $r->{out} =~ /force-release/ && $r->{out} =~ /Exit status/,
	'--help lists the commands and exit codes');
$r = ctl('job', 'cancel', '--help');
check($r, $r->{rc} == 0 && $r->{out} =~ /NOT_OWNER/ && $r->{out} =~ /--max-hops/,
	'job cancel --help explains the routing');
$r = ctl('frobnicate');
check($r, $r->{rc} == 2 && $r->{err} =~ /unknown command/, 'an unknown command is exit 2');
$r = ctl('node', 'info', '--bogus');
check($r, $r->{rc} == 2, 'an unknown option is exit 2');
$r = ctl('tenant', 'hash', '--tenant', 'x', 'a');
check($r, $r->{rc} == 2 && $r->{err} =~ /does not apply/, 'an option of another command is exit 2');
$r = ctl('query', 'only-a-tenant');
check($r, $r->{rc} == 2, 'a missing argument is exit 2');
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $siloctl, 'tenant', 'hash', "\xff\xfe" ], '<', \undef, '>', \$out,
		'2>', \$err);
	is($? >> 8, 2, 'a tenant that is not UTF-8 is exit 2');
}

# ---------------------------------------------------------------------------
# tenant hash: the test vectors of docs/cluster.md
# ---------------------------------------------------------------------------
my @vectors;    # [tenant, hash, shard of 8]
{
	open my $fh, '<:encoding(UTF-8)', "$src/docs/cluster.md" or die "docs/cluster.md: $!";
	my $in_vectors = 0;
	while (my $line = <$fh>)
	{
		$in_vectors = 1 if $line =~ /^Test vectors/;
		next unless $in_vectors;
		last if $in_vectors && $line =~ /^## /;
		next unless $line =~ /^\| (.+?) \| `(-?\d+)` \| (\d+) \|\s*$/;
		my ($cell, $hash, $shard) = ($1, $2, $3);
		my $tenant =
			$cell eq '(empty string)' ? ''
		  : $cell =~ /^`(.)` repeated (\d+) times$/ ? $1 x $2
		  : $cell =~ /^`(.*)`$/ ? $1
		  : die "unreadable test vector cell: $cell";
		push @vectors, [ $tenant, $hash, $shard ];
	}
	close $fh;
}
is(scalar(@vectors), 8, 'docs/cluster.md has 8 test vectors');
for my $v (@vectors)
{
	my $r = ctl('tenant', 'hash', '--', $v->[0]);
	check($r, $r->{rc} == 0 && $r->{out} eq "$v->[1]\n",
		encode_utf8("tenant hash of \"$v->[0]\" is $v->[1]"));
}
$r = ctl('--json', 'tenant', 'hash', '--', map { $_->[0] } @vectors);
check($r, $r->{rc} == 0 && ref $r->{json} eq 'ARRAY'
	  && join(',', map { $_->{hash} } @{ $r->{json} }) eq join(',', map { $_->[1] } @vectors),
	'--json with several tenants: an array of the same hashes');

# ---------------------------------------------------------------------------
# A single-node silo
# ---------------------------------------------------------------------------
my $node = silo_node('main');
my $dsn = $node->connstr('postgres');
$node->safe_psql('postgres', q{
CREATE ROLE operator LOGIN;
GRANT silo_producer, silo_admin TO operator;
});

# --check: the test vectors and 300 random tenants agree with the server
$r = ctl('--dsn', $dsn, '--check', '--json', 'tenant', 'hash', '--', map { $_->[0] } @vectors);
check($r, $r->{rc} == 0 && @{ $r->{json} // [] } == 8
	  && !grep({ !$_->{agrees} || $_->{server_hash} ne $_->{hash} } @{ $r->{json} }),
	'--check: the server agrees on every test vector');

my $seed = $ENV{SILOCTL_TEST_SEED} // int(rand(1_000_000_000));
note("random tenants: seed $seed (SILOCTL_TEST_SEED)");
srand($seed);
my @ascii = map { chr } 32 .. 126;
my @multi = (map { chr } 0xa1 .. 0xff, 0x391 .. 0x3a9, 0x4e00 .. 0x4e3f, 0x1f600 .. 0x1f64f,
	0x10348, 0x20ac, 0xfeff);
my @random;
for my $i (1 .. 300)
{
	my @pool = $i % 2 ? @ascii : (@ascii, @multi, @multi);
	my $len = 1 + int(rand(64));
	push @random, join('', map { $pool[ int(rand(@pool)) ] } 1 .. $len);
}
$r = ctl('--dsn', $dsn, '--check', '--json', 'tenant', 'hash', '--', @random);
my @bad = grep { !$_->{agrees} } @{ $r->{json} // [] };
check($r, $r->{rc} == 0 && @{ $r->{json} // [] } == 300 && !@bad,
	'--check: the server agrees on 300 random tenants, ASCII and multibyte')
  or diag('differs: ' . join(', ', map { $_->{tenant} } @bad[ 0 .. ($#bad < 4 ? $#bad : 4) ]));
check($r, join("\x00", map { $_->{tenant} } @{ $r->{json} // [] }) eq join("\x00", @random),
	'... and names them back in order, unchanged');

# cluster info, node info, shard list
$r = ctl('--dsn', $dsn, 'cluster', 'info');
check($r, $r->{rc} == 0 && $r->{out} =~ /single-node mode/
	  && $r->{out} =~ /^0\s+-9223372036854775808\s+9223372036854775808\s+serving\s+true/m,
	'cluster info: the one local shard over the whole range');
$r = ctl('--dsn', $dsn, '--json', 'cluster', 'info');
check($r, $r->{rc} == 0 && $r->{json}{node}{mode} eq 'single-node'
	  && @{ $r->{json}{shards} } == 1
	  && $r->{json}{shards}[0]{range_start} eq '-9223372036854775808'
	  && $r->{json}{shards}[0]{range_end} eq '9223372036854775808'
	  && $r->{json}{shards}[0]{is_local} == JSON::PP::true,
	'cluster info --json: node and shards, bounds as strings');
$r = ctl('--dsn', $dsn, 'node', 'info');
check($r, $r->{rc} == 0 && $r->{out} =~ /^mode\s+single-node$/m
	  && $r->{out} =~ /^membership\s+none$/m, 'node info');
$r = ctl('--dsn', $dsn, '--json', 'node', 'info');
check($r, $r->{rc} == 0 && $r->{json}{mode} eq 'single-node'
	  && "@{ $r->{json}{owned_shards} }" eq '0' && "@{ $r->{json}{serving_shards} }" eq '0',
	'node info --json: owned and serving shards as arrays');
$r = ctl('--dsn', $dsn, 'shard', 'list');
my @lines = split /\n/, $r->{out};
check($r, $r->{rc} == 0 && @lines == 2 && $lines[0] =~ /^SHARD_ID\s+RANGE_START/
	  && $lines[1] =~ /^0\s+-9223372036854775808\s/, 'shard list: a header and one line per shard');
$r = ctl('--dsn', $dsn, '--json', 'shard', 'list');
check($r, $r->{rc} == 0 && ref $r->{json} eq 'ARRAY' && @{ $r->{json} } == 1
	  && $r->{json}[0]{shard_id} == 0 && $r->{json}[0]{state} eq 'serving',
	'shard list --json: an array of shards');
$r = ctl('--dsn', $dsn, '--json', 'tenant', 'locate', 'acme');
check($r, $r->{rc} == 0 && $r->{json}{shard_id} == 0 && $r->{json}{hash} eq '7757017307627438190'
	  && $r->{json}{is_local} == JSON::PP::true, 'tenant locate --json');
$r = ctl('--dsn', $dsn, 'tenant', 'locate', 'acme');
check($r, $r->{rc} == 0 && $r->{out} =~ /^shard_id\s+0$/m && $r->{out} =~ /^hash\s+7757017307627438190$/m,
	'tenant locate');

# the job commands against real jobs
$node->safe_psql('postgres', q{
SELECT silo.enqueue('g', '{"n": 1}', id => 'done-1');
SELECT silo.complete(task_id, 'w', '{"ok": true}') FROM silo.lease('w', 'g');
SELECT silo.enqueue('g', '{}', id => 'later-1', start_at => now() + interval '1 hour');
SELECT silo.enqueue('g', '{}', id => 'cancel-1', start_at => now() + interval '1 hour');
SELECT silo.enqueue('g', '{"t": "acme"}', id => 'acme-1', tenant => 'acme',
					start_at => now() + interval '1 hour');
});
my $status = sub {
	my ($id, $tenant) = @_;
	return $node->safe_psql('postgres',
		"SELECT status FROM silo.jobs WHERE tenant = '" . ($tenant // '-') . "' AND id = '$id'");
};

$r = ctl('--dsn', $dsn, 'job', 'get', 'done-1');
check($r, $r->{rc} == 0 && $r->{out} =~ /^status\s+Succeeded$/m && $r->{out} =~ /^id\s+done-1$/m
	  && $r->{out} =~ /^1\s+1\s+Succeeded\s+w\s/m, 'job get: the row and its attempt');
$r = ctl('--dsn', $dsn, '--json', 'job', 'get', 'done-1');
check($r, $r->{rc} == 0 && $r->{json}{job}{status} eq 'Succeeded' && $r->{json}{job}{payload}{n} == 1
	  && $r->{json}{attempts}[0]{result}{ok} == JSON::PP::true && @{ $r->{json}{hops} } == 0,
	'job get --json: payload and result embedded as JSON');
$r = ctl('--dsn', $dsn, '--json', 'job', 'get', 'nope');
check($r, $r->{rc} == 1 && $r->{json}{error}{message} eq 'job not found'
	  && $r->{json}{error}{exit_code} == 1, 'job get of no such job: exit 1, an error document');
$r = ctl('--dsn', $dsn, '--json', 'job', 'get', 'acme-1', '--tenant', 'acme');
check($r, $r->{rc} == 0 && $r->{json}{job}{tenant} eq 'acme' && $r->{json}{job}{status} eq 'Scheduled',
	'job get --tenant');
$r = ctl('--dsn', $dsn, '--json', 'job', 'get', 'acme-1');
check($r, $r->{rc} == 1, '... and not in the default tenant');

$r = ctl('--dsn', $dsn, '--json', 'job', 'result', 'done-1');
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Succeeded'
	  && $r->{json}{result}{ok} == JSON::PP::true && defined $r->{json}{finished_at},
	'job result --json');
$r = ctl('--dsn', $dsn, 'job', 'result', 'done-1');
check($r, $r->{rc} == 0 && $r->{out} =~ /^result\s+\{"ok": true\}$/m, 'job result');
$r = ctl('--dsn', $dsn, '--json', 'job', 'result', 'later-1');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL004',
	'job result of an unfinished job: exit 1, SL004');
$r = ctl('--dsn', $dsn, '--json', 'job', 'result', 'nope');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL003', 'job result of no such job: SL003');

$r = ctl('--dsn', $dsn, 'job', 'cancel', 'cancel-1');
check($r, $r->{rc} == 0 && $r->{out} =~ /cancelled job "cancel-1".*Cancelled/,
	'job cancel: a pending job ends Cancelled');
is($status->('cancel-1'), 'Cancelled', '... in the database');
$r = ctl('--dsn', $dsn, '--json', 'job', 'cancel', 'cancel-1');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL005', 'cancelling it again: SL005');
$r = ctl('--dsn', $dsn, '--json', 'job', 'cancel', 'nope');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL003', 'job cancel of no such job: SL003');
$r = ctl('--dsn', $dsn, '--json', 'job', 'restart', 'cancel-1');
check($r, $r->{rc} == 0 && $r->{json}{action} eq 'restart' && $r->{json}{status} eq 'Waiting',
	'job restart: Cancelled to Waiting');
$r = ctl('--dsn', $dsn, '--json', 'job', 'restart', 'cancel-1');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL007', 'restarting a pending job: SL007');
$r = ctl('--dsn', $dsn, '--json', 'job', 'expedite', 'later-1');
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Waiting', 'job expedite: Scheduled to Waiting');
$r = ctl('--dsn', $dsn, '--json', 'job', 'expedite', 'later-1');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL008', 'expediting it again: SL008');
$r = ctl('--dsn', $dsn, '--json', 'job', 'delete', 'later-1');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL004', 'deleting a pending job: SL004');
$r = ctl('--dsn', $dsn, '--json', 'job', 'delete', 'done-1');
check($r, $r->{rc} == 0 && $r->{json}{deleted} == JSON::PP::true, 'job delete');
is($status->('done-1'), '', '... it is gone');
$r = ctl('--dsn', $dsn, 'job', 'delete', 'done-1');
check($r, $r->{rc} == 1 && $r->{err} =~ /job not found/, 'deleting it again: exit 1, not found');

# query
$r = ctl('--dsn', $dsn, 'query', '-',
	'SELECT id, status FROM silo.jobs WHERE tenant = $1 ORDER BY id');
check($r, $r->{rc} == 0 && $r->{out} =~ /^ID\s+STATUS$/m && $r->{out} =~ /^cancel-1\s+Waiting$/m
	  && $r->{out} =~ /^\(2 rows\)$/m, 'query: rows of the tenant ($1 is the tenant)');
$r = ctl('--dsn', $dsn, '--json', 'query', 'acme',
	q{SELECT count(*) AS n, bool_and(true) AS b, 1.5::numeric AS x, NULL::text AS z,
	         '{"a": [1]}'::jsonb AS j FROM silo.jobs WHERE tenant = $1});
check($r, $r->{rc} == 0 && $r->{json}{rows}[0]{n} == 1 && $r->{json}{rows}[0]{b} == JSON::PP::true
	  && $r->{json}{rows}[0]{x} eq '1.5' && !defined $r->{json}{rows}[0]{z}
	  && $r->{json}{rows}[0]{j}{a}[0] == 1 && "@{ $r->{json}{columns} }" eq 'n b x z j'
	  && $r->{json}{shard} == 0 && $r->{json}{command} eq 'SELECT 1',
	'query --json: typed values, columns, shard, command');
$r = ctl('--dsn', $dsn, '--json', 'query', '-', q{SELECT silo.enqueue('g')});
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq '25006',
	'query: an enqueue is refused (read-only transaction)');
$r = ctl('--dsn', $dsn, '--json', 'query', '-', 'DELETE FROM silo.job_info');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq '25006', 'query: a DELETE is refused');
$r = ctl('--dsn', $dsn, '--json', 'query', '-', 'COMMIT; DELETE FROM silo.job_info');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq '42601',
	'query: a second statement is refused');
$r = ctl('--dsn', $dsn, '--json', 'query', '-', 'SET TRANSACTION READ WRITE');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq '25001',
	'query: the transaction cannot be made read-write');
is($node->safe_psql('postgres', 'SELECT count(*) FROM silo.jobs'), '3', 'nothing was written');

# an unreachable node
my $free_port = PostgreSQL::Test::Cluster::get_free_port();
$r = ctl('--dsn', "host=127.0.0.1 port=$free_port dbname=postgres", '--json', 'node', 'info');
check($r, $r->{rc} == 3 && $r->{json}{error}{exit_code} == 3, 'no node reachable: exit 3');

# ---------------------------------------------------------------------------
# NOT_OWNER routing against a stub (see the header)
# ---------------------------------------------------------------------------
my $stub = PostgreSQL::Test::Cluster->new('stub');
$stub->init;
$stub->append_conf('postgresql.conf', "lc_messages = 'C'\n");
$stub->start;
$stub->safe_psql('postgres', 'CREATE ROLE operator LOGIN');

my $stub_schema = q{
CREATE SCHEMA silo;
GRANT USAGE ON SCHEMA silo TO operator;
CREATE TABLE silo.stub_answer (code text NOT NULL, detail text,
							   unavailable_first int NOT NULL DEFAULT 0);
CREATE SEQUENCE silo.stub_calls;
CREATE TABLE silo.cluster_info (shard_id int, range_start numeric, range_end numeric,
								owner_node_id text, owner_conninfo text, state text,
								is_local boolean);
CREATE TABLE silo.jobs (tenant text, id text, task_group text, status text, priority int,
						enqueued_at timestamptz, status_changed_at timestamptz,
						current_attempt int, next_attempt_at timestamptz,
						cancelled_at timestamptz, payload jsonb, metadata jsonb);
CREATE TABLE silo.attempts (tenant text, job_id text, attempt int, relative_attempt int,
							status text, worker_id text, started_at timestamptz,
							finished_at timestamptz, error_code text, error_data jsonb,
							result jsonb);
GRANT SELECT ON ALL TABLES IN SCHEMA silo TO operator;
GRANT USAGE ON SEQUENCE silo.stub_calls TO operator;

-- the answer of every stubbed call: SL021 for the first unavailable_first
-- calls (or always, with code SL021), then SL020 with the chosen DETAIL
CREATE FUNCTION silo.stub_raise() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	a silo.stub_answer;
BEGIN
	SELECT * INTO a FROM silo.stub_answer;
	IF nextval('silo.stub_calls') <= a.unavailable_first OR a.code = 'SL021' THEN
		RAISE EXCEPTION 'shard 0 is not available on this node right now'
			USING ERRCODE = 'SL021', DETAIL = 'The stub is unavailable.';
	END IF;
	RAISE EXCEPTION 'shard 0 is not owned by this node'
		USING ERRCODE = 'SL020', DETAIL = a.detail;
END
$$;
CREATE FUNCTION silo.cancel(job_id text, tenant text DEFAULT '-') RETURNS void
	LANGUAGE plpgsql AS $$BEGIN PERFORM silo.stub_raise(); END$$;
CREATE FUNCTION silo.restart(job_id text, tenant text DEFAULT '-') RETURNS void
	LANGUAGE plpgsql AS $$BEGIN PERFORM silo.stub_raise(); END$$;
CREATE FUNCTION silo.expedite(job_id text, tenant text DEFAULT '-') RETURNS void
	LANGUAGE plpgsql AS $$BEGIN PERFORM silo.stub_raise(); END$$;
CREATE FUNCTION silo.delete_job(job_id text, tenant text DEFAULT '-') RETURNS boolean
	LANGUAGE plpgsql AS $$BEGIN PERFORM silo.stub_raise(); RETURN false; END$$;
CREATE FUNCTION silo.job_result(job_id text, tenant text DEFAULT '-')
	RETURNS TABLE(status text, result jsonb, error_code text, error_data jsonb,
				  finished_at timestamptz)
	LANGUAGE plpgsql AS $$BEGIN PERFORM silo.stub_raise(); END$$;
-- the server's hash, except for one tenant
CREATE FUNCTION silo.tenant_hash(t text) RETURNS bigint LANGUAGE sql
	AS $$SELECT CASE WHEN t = 'differs' THEN 0 ELSE hashtextextended(t, 0) END$$;
};
for my $db (qw(stub1 stub2 stub3 stubloop stubmap))
{
	$stub->safe_psql('postgres', "CREATE DATABASE $db");
	$stub->safe_psql($db, $stub_schema);
}

# hint(SHARD, NODE, CONNINFO): the DETAIL of a NOT_OWNER error
sub hint
{
	my ($shard, $id, $conninfo) = @_;
	return $json->encode(
		{ shard => $shard, owner_node_id => $id, owner_conninfo => $conninfo });
}

# answer(DB, CODE, DETAIL, UNAVAILABLE_FIRST): what DB's stubbed calls raise
sub answer
{
	my ($db, $code, $detail, $unavailable) = @_;
	$stub->safe_psql($db,
		    "TRUNCATE silo.stub_answer; INSERT INTO silo.stub_answer VALUES ("
		  . sql_literal($code) . ', '
		  . sql_literal($detail) . ', '
		  . ($unavailable // 0)
		  . "); SELECT setval('silo.stub_calls', 1, false);");
	return;
}

# shard_map(DB, ROWS...): DB's silo.cluster_info; each row [id, start, end,
# owner, conninfo, state, is_local]
sub shard_map
{
	my ($db, @rows) = @_;
	my $values = join(",\n",
		map { '(' . join(', ', map { sql_literal($_) } @$_) . ')' } @rows);
	$stub->safe_psql($db,
		"TRUNCATE silo.cluster_info;"
		  . (@rows ? " INSERT INTO silo.cluster_info VALUES $values;" : ''));
	return;
}

my $main_hint = hint(0, 'main', $dsn);
answer($_, 'SL020', $main_hint) for qw(stub1 stubmap);

$node->safe_psql('postgres', q{
SELECT silo.enqueue('g', '{}', id => 'r-1', start_at => now() + interval '1 hour');
SELECT silo.enqueue('g', '{}', id => 'r-2', start_at => now() + interval '1 hour');
SELECT silo.enqueue('g', '{}', id => 'r-3', start_at => now() + interval '1 hour');
SELECT silo.cancel('r-3');
});

my $stub1 = $stub->connstr('stub1');
$r = ctl('--dsn', $stub1, '--json', 'job', 'cancel', 'r-1');
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Cancelled' && @{ $r->{json}{hops} } == 1
	  && $r->{json}{hops}[0]{owner_node_id} eq 'main' && $r->{json}{hops}[0]{via} eq 'not_owner'
	  && $r->{json}{hops}[0]{owner_conninfo} eq $dsn && $r->{json}{hops}[0]{shard} == 0,
	'job cancel through a NOT_OWNER hint: cancelled on the owner, one hop');
is($status->('r-1'), 'Cancelled', '... in the owner\'s database');
$r = ctl('--dsn', $stub1, '--json', 'job', 'restart', 'r-1');
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Waiting' && @{ $r->{json}{hops} } == 1,
	'job restart through a NOT_OWNER hint');
$r = ctl('--dsn', $stub1, '--json', 'job', 'expedite', 'r-2');
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Waiting' && @{ $r->{json}{hops} } == 1,
	'job expedite through a NOT_OWNER hint');
$r = ctl('--dsn', $stub1, '--json', 'job', 'result', 'r-3');
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Cancelled' && defined $r->{json}{finished_at}
	  && @{ $r->{json}{hops} } == 1, 'job result through a NOT_OWNER hint');
$r = ctl('--dsn', $stub1, '--json', 'job', 'delete', 'r-3');
check($r, $r->{rc} == 0 && $r->{json}{deleted} == JSON::PP::true && @{ $r->{json}{hops} } == 1,
	'job delete through a NOT_OWNER hint');
is($status->('r-3'), '', '... deleted on the owner');
$r = ctl('--dsn', $stub1, '--json', 'job', 'cancel', 'nope');
check($r, $r->{rc} == 1 && $r->{json}{error}{sqlstate} eq 'SL003'
	  && $r->{json}{error}{message} =~ /^node "main" .*job not found/,
	"the owner's own error after a hop: exit 1, naming the owner");
$r = ctl('--dsn', $stub1, '-v', 'job', 'cancel', 'r-2');
check($r, $r->{rc} == 0 && $r->{err} =~ /owned by node "main".*following \(not_owner\)/
	  && $r->{out} =~ /cancelled job "r-2".*\(on node "main"/,
	'--verbose shows the hop; the text output names the owner');

# a chain of three hops, and --max-hops
answer('stub1', 'SL020', hint(0, 'stub2', $stub->connstr('stub2')));
answer('stub2', 'SL020', hint(0, 'stub3', $stub->connstr('stub3')));
answer('stub3', 'SL020', $main_hint);
$r = ctl('--dsn', $stub1, '--json', 'job', 'restart', 'r-2');
check($r, $r->{rc} == 0 && join(',', map { $_->{owner_node_id} } @{ $r->{json}{hops} })
	  eq 'stub2,stub3,main', 'three hops: stub1 -> stub2 -> stub3 -> main');
$r = ctl('--dsn', $stub1, '--json', '--max-hops', '2', 'job', 'cancel', 'r-2');
check($r, $r->{rc} == 4 && $r->{err} =~ /gave up after 2 hops/
	  && $r->{json}{error}{exit_code} == 4, '--max-hops 2: exit 4');
is($status->('r-2'), 'Waiting', '... and the job was not touched');

# a loop
answer('stubloop', 'SL020', hint(0, 'loop', $stub->connstr('stubloop')));
$r = ctl('--dsn', $stub->connstr('stubloop'), 'job', 'cancel', 'r-2');
check($r, $r->{rc} == 4 && $r->{err} =~ /NOT_OWNER loop/, 'a hint that leads back: a loop, exit 4');

# SL021: retried with back-off, then followed; or exhausted
answer('stub1', 'SL020', $main_hint, 2);
my $t0 = time();
$r = ctl('--dsn', $stub1, '--json', '--retries', '2', '-v', 'job', 'cancel', 'r-2');
my $took = time() - $t0;
check($r, $r->{rc} == 0 && $r->{json}{status} eq 'Cancelled'
	  && (() = $r->{err} =~ /retrying in (?:100|200) ms/g) == 2,
	'SL021 twice, then NOT_OWNER: two retries (100 ms, 200 ms), then the owner');
ok($took >= 0.3, sprintf('... after the back-off (%.2f s)', $took));
answer('stub1', 'SL020', $main_hint, 2);
$r = ctl('--dsn', $stub1, '--json', '--retries', '1', 'job', 'restart', 'r-2');
check($r, $r->{rc} == 5 && $r->{json}{error}{sqlstate} eq 'SL021', 'SL021 past --retries: exit 5');
answer('stub1', 'SL021', undef);
$r = ctl('--dsn', $stub1, '--retries', '0', 'job', 'restart', 'r-2');
check($r, $r->{rc} == 5 && $r->{err} =~ /not available/, 'SL021 with --retries 0: exit 5 at once');
is($status->('r-2'), 'Cancelled', '... and the job was not touched');

# a NOT_OWNER without an owner, an unreadable DETAIL, an unreachable owner
answer('stub1', 'SL020', hint(0, undef, undef));
$r = ctl('--dsn', $stub1, '--json', '--retries', '1', 'job', 'restart', 'r-2');
check($r, $r->{rc} == 4 && $r->{err} =~ /has no owner/, 'an owner of null, retried: exit 4');
answer('stub1', 'SL020', 'not json');
$r = ctl('--dsn', $stub1, 'job', 'restart', 'r-2');
check($r, $r->{rc} == 4 && $r->{err} =~ /not the JSON owner hint/, 'an unreadable DETAIL: exit 4');
answer('stub1', 'SL020', hint(0, 'gone', "host=127.0.0.1 port=$free_port dbname=postgres"));
$r = ctl('--dsn', $stub1, '--json', 'job', 'restart', 'r-2');
check($r, $r->{rc} == 3 && $r->{err} =~ /cannot connect to node "gone"/,
	'an owner that cannot be reached: exit 3');

# routing by silo.cluster_info (job get, query); --dsn's user is kept
my $min = '-9223372036854775808';
my $max = '9223372036854775808';
shard_map('stubmap', [ 0, $min, $max, 'main', $dsn, 'remote', 'f' ]);
my $stubmap_op = $stub->connstr('stubmap') . ' user=operator';
$r = ctl('--dsn', $stubmap_op, '--json', 'job', 'get', 'r-2');
check($r, $r->{rc} == 0 && $r->{json}{job}{status} eq 'Cancelled'
	  && @{ $r->{json}{hops} } == 1 && $r->{json}{hops}[0]{via} eq 'cluster_info',
	"job get: routed by the node's silo.cluster_info");
$r = ctl('--dsn', $stubmap_op, '--json', 'query', '-',
	'SELECT current_user AS u, current_database() AS d, count(*) AS n FROM silo.jobs WHERE tenant = $1');
check($r, $r->{rc} == 0 && $r->{json}{rows}[0]{u} eq 'operator' && $r->{json}{rows}[0]{d} eq 'postgres'
	  && $r->{json}{rows}[0]{n} == 4 && $r->{json}{hops}[0]{via} eq 'cluster_info',
	"query: routed by cluster_info, as --dsn's user (the hint names none)");
shard_map('stubmap', [ 0, $min, $max, undef, undef, 'unowned', 'f' ]);
$r = ctl('--dsn', $stubmap_op, '--retries', '1', 'job', 'get', 'r-2');
check($r, $r->{rc} == 4 && $r->{err} =~ /has no owner/, 'job get of an unowned shard: exit 4');
shard_map('stubmap');
$r = ctl('--dsn', $stubmap_op, '--retries', '0', 'query', '-', 'SELECT 1');
check($r, $r->{rc} == 5 && $r->{err} =~ /no shard map/, 'query on a node without a map: exit 5');

# tenant locate over 8 and 7 shards; a bound equal to a tenant's hash
$stub->safe_psql('stubmap', q{
CREATE FUNCTION make_map(n int) RETURNS void LANGUAGE sql AS $$
TRUNCATE silo.cluster_info;
INSERT INTO silo.cluster_info
SELECT i, -9223372036854775808::numeric + floor(i * 18446744073709551616::numeric / n),
	   -9223372036854775808::numeric + floor((i + 1) * 18446744073709551616::numeric / n),
	   'n' || i, 'host=nowhere', 'remote', false
  FROM generate_series(0, n - 1) i;
$$;
SELECT make_map(8);
});
for my $v (@vectors)
{
	my $r = ctl('--dsn', $stub->connstr('stubmap'), '--json', 'tenant', 'locate', '--', $v->[0]);
	check($r, $r->{rc} == 0 && $r->{json}{shard_id} == $v->[2] && $r->{json}{hash} eq $v->[1],
		encode_utf8("tenant locate \"$v->[0]\" in a map of 8: shard $v->[2]"));
}
$stub->safe_psql('stubmap', 'SELECT make_map(7)');
my @sample = @random[ 0 .. 19 ];
my $expected = $stub->safe_psql('stubmap', encode_utf8(
	    "SELECT string_agg(s::text, ',' ORDER BY k) FROM (SELECT k, "
	  . "(SELECT shard_id FROM silo.cluster_info WHERE hashtextextended(t, 0) >= range_start "
	  . "AND hashtextextended(t, 0) < range_end) AS s FROM (VALUES "
	  . join(',', map { "($_, " . sql_literal($sample[$_]) . ')' } 0 .. $#sample)
	  . ') v(k, t)) x'));
my @got;
for my $t (@sample)
{
	my $r = ctl('--dsn', $stub->connstr('stubmap'), '--json', 'tenant', 'locate', '--', $t);
	push @got, $r->{rc} == 0 ? $r->{json}{shard_id} : "rc$r->{rc}";
}
is(join(',', @got), $expected, 'tenant locate in a map of 7 agrees with the server for 20 tenants');
my $acme = $vectors[1][1];
die 'vector 1 is not acme' unless $vectors[1][0] eq 'acme';
shard_map('stubmap', [ 0, $min, $acme, 'a', 'host=a', 'remote', 'f' ],
	[ 1, $acme, $max, 'b', 'host=b', 'remote', 'f' ]);
$r = ctl('--dsn', $stub->connstr('stubmap'), '--json', 'tenant', 'locate', 'acme');
check($r, $r->{rc} == 0 && $r->{json}{shard_id} == 1, 'a range starting at the hash holds it');
shard_map('stubmap', [ 0, $min, $acme + 1, 'a', 'host=a', 'remote', 'f' ],
	[ 1, $acme + 1, $max, 'b', 'host=b', 'remote', 'f' ]);
$r = ctl('--dsn', $stub->connstr('stubmap'), '--json', 'tenant', 'locate', 'acme');
check($r, $r->{rc} == 0 && $r->{json}{shard_id} == 0, 'a range ending just past it holds it');

# --check finds a server that disagrees
$r = ctl('--dsn', $stub1, '--check', 'tenant', 'hash', 'acme', 'differs');
check($r, $r->{rc} == 1 && $r->{out} =~ /^\S+\tacme\tserver agrees$/m
	  && $r->{out} =~ /^\S+\tdiffers\tserver DIFFERS$/m, '--check: a difference is exit 1');

# ---------------------------------------------------------------------------
# shard force-release and cluster info --from-etcd against a real etcd
# ---------------------------------------------------------------------------
ok(defined etcd_binary(), 'etcd is installed')
  or BAIL_OUT('etcd not found: tools/ensure-deps.sh installs etcd-server');
my $etcd = etcd_start(name => 'siloctl');
my $url = $etcd->{client_url};
my $http = HTTP::Tiny->new(timeout => 5);

# gateway(PATH, BODY): one call of etcd's JSON gateway
sub gateway
{
	my ($path, $body) = @_;
	my $res = $http->post("$url/v3/$path",
		{ content => $json->encode($body), headers => { 'content-type' => 'application/json' } });
	die "etcd $path: $res->{status} $res->{content}" unless $res->{success};
	return $json->decode($res->{content});
}
sub eput { gateway('kv/put', { key => encode_base64($_[0], ''), value => encode_base64($_[1], '') }) }
sub edel { gateway('kv/deleterange', { key => encode_base64($_[0], '') }) }

sub eget
{
	my $res = gateway('kv/range', { key => encode_base64($_[0], '') });
	return $res->{kvs} ? decode_base64($res->{kvs}[0]{value}) : undef;
}

my $owner_key = 'silo/coord/shards/3/owner';
my $member_key = 'silo/coord/members/b';
my $owner_value = $json->encode({ node_id => 'b', conninfo => 'host=10.0.0.2 port=5432 dbname=app',
	acquired_at => '2026-11-20T10:00:00Z' });
eput($owner_key, $owner_value);
eput($member_key, $json->encode({ node_id => 'b', conninfo => 'host=10.0.0.2', started_at => 'x',
	incarnation => 1 }));

$r = ctl('--etcd', $url, '--yes', 'shard', 'force-release', '3');
check($r, $r->{rc} == 1 && $r->{err} =~ /its owner, node "b", is alive/,
	'force-release while the owner is a member: refused, exit 1');
is(eget($owner_key), $owner_value, '... the owner key is still there');

edel($member_key);
$r = ctl('--etcd', $url, 'shard', 'force-release', '3');
check($r, $r->{rc} == 2 && $r->{err} =~ /without --yes: stdin is not a terminal/
	  && $r->{err} =~ /WARNING/, 'without --yes and no terminal: the warning, then refused (exit 2)');
is(eget($owner_key), $owner_value, '... the owner key is still there');

# on_terminal(S, CODE): force-release shard 3 with a pty as stdin; CODE runs
# while the prompt waits, then S is typed
sub on_terminal
{
	my ($typed, $during) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ $siloctl, '--etcd', $url, 'shard', 'force-release', '3' ],
		'<pty<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(30));
	$h->pump while $h->pumpable && $err !~ /Type "yes"/;
	$during->() if $during;
	$in .= "$typed\n";
	$h->finish;
	return { argv => [ 'shard', 'force-release', '3', "(typed $typed)" ],
		rc => $h->full_result(0) >> 8, out => $out, err => $err };
}
$r = on_terminal('no');
check($r, $r->{rc} == 1 && $r->{err} =~ /not confirmed/, 'on a terminal, "no": not released');
is(eget($owner_key), $owner_value, '... the owner key is still there');
my $changed = $owner_value =~ s/10\.0\.0\.2/10.0.0.3/r;
$r = on_terminal('yes', sub { eput($owner_key, $changed) });
check($r, $r->{rc} == 1 && $r->{err} =~ /owner key changed meanwhile/,
	'the owner key changed while the prompt waited: the txn refuses (MOD), exit 1');
is(eget($owner_key), $changed, '... the new owner key is kept');
$r = on_terminal('yes', sub { eput($member_key, '{"node_id": "b"}') });
check($r, $r->{rc} == 1 && $r->{err} =~ /registered as a member meanwhile/,
	'the owner registered while the prompt waited: the txn refuses (CREATE), exit 1');
is(eget($owner_key), $changed, '... the owner key is kept');
edel($member_key);
$r = on_terminal('yes');
check($r, $r->{rc} == 0 && $r->{out} =~ /released shard 3/, 'on a terminal, "yes": released');
ok(!defined eget($owner_key), '... the owner key is gone');

eput($owner_key, $owner_value);
$r = ctl('--etcd', $url, '--yes', '--json', 'shard', 'force-release', '3');
check($r, $r->{rc} == 0 && $r->{json}{released} == JSON::PP::true && $r->{json}{shard} == 3
	  && $r->{json}{owner}{node_id} eq 'b' && $r->{json}{revision} > $r->{json}{owner_mod_revision},
	'force-release --yes --json: released');
ok(!defined eget($owner_key), '... the owner key is gone');
$r = ctl('--etcd', $url, '--yes', 'shard', 'force-release', '3');
check($r, $r->{rc} == 1 && $r->{err} =~ /has no owner/, 'no owner key: nothing to release, exit 1');

eput('other/coord/shards/5/owner', $owner_value);
$r = ctl('--etcd', $url, '--prefix', 'other/', '--yes', 'shard', 'force-release', '5');
check($r, $r->{rc} == 0 && !defined eget('other/coord/shards/5/owner'), '--prefix');

$r = ctl('--yes', 'shard', 'force-release', '3');
check($r, $r->{rc} == 2 && $r->{err} =~ /needs --etcd/, 'no --etcd: exit 2');
$r = ctl('--etcd', $url, '--yes', 'shard', 'force-release', 'three');
check($r, $r->{rc} == 2, 'a shard id that is not a number: exit 2');
$r = ctl('--etcd', "http://127.0.0.1:$free_port", '--yes', '--json', 'shard', 'force-release', '3');
check($r, $r->{rc} == 3 && $r->{json}{error}{exit_code} == 3, 'etcd not reachable: exit 3');

# cluster info --from-etcd
$r = ctl('--etcd', $url, 'cluster', 'info', '--from-etcd');
check($r, $r->{rc} == 1 && $r->{err} =~ /no shard map/, '--from-etcd without a map: exit 1');
eput('silo/coord/shardmap', $json->encode({ version => 1, count => 3, shards => [
	{ id => 0, start => $min, end => '-3074457345618258603' },
	{ id => 1, start => '-3074457345618258603', end => '3074457345618258602' },
	{ id => 2, start => '3074457345618258602', end => $max } ] }));
eput('silo/coord/shards/0/owner', $json->encode({ node_id => 'a', conninfo => 'host=a',
	acquired_at => 't0' }));
eput('silo/coord/members/a', $json->encode({ node_id => 'a', conninfo => 'host=a',
	started_at => 't', incarnation => 1 }));
eput('silo/coord/shards/1/owner', $owner_value);
$r = ctl('--etcd', $url, '--json', 'cluster', 'info', '--from-etcd');
check($r, $r->{rc} == 0 && $r->{json}{source} eq 'etcd'
	  && join(',', map { "$_->{shard_id}:$_->{state}:" . ($_->{owner_node_id} // '') } @{ $r->{json}{shards} })
	  eq '0:owned:a,1:owner-down:b,2:unowned:'
	  && $r->{json}{shards}[2]{range_end} eq $max
	  && join(',', map { $_->{node_id} } @{ $r->{json}{members} }) eq 'a',
	'cluster info --from-etcd --json: owned, owner-down, unowned; the members');
$r = ctl('--etcd', $url, 'cluster', 'info', '--from-etcd');
check($r, $r->{rc} == 0 && $r->{out} =~ /^1\s+-3074457345618258603\s+3074457345618258602\s+b\s+owner-down/m,
	'cluster info --from-etcd');

etcd_stop($etcd);
$stub->stop;
$node->stop;
my $secs = time() - $t_start;
# about 25 s on an idle 2-core machine; the bound leaves room for a loaded one
ok($secs < 90, sprintf('the whole test took %.1f s', $secs));

done_testing();
