
# 013_etcd_client.pl: the etcd client (src/etcd) against real etcd members.
#
# The scenarios live in the driver test/etcd/etcd_client_test (one
# subcommand each; it checks what it can itself and prints what it saw as
# key=value lines); this script starts etcd, injects the faults, and judges
# the outcomes:
#
#  - offline: prefix ends, base64, encoders against etcd's wire format,
#    decoders on omitted defaults, configuration checks;
#  - one member: binary-safe put/range/prefix/delete (NUL, 0xff, 6000
#    bytes); put-if-absent with the owner returned to the loser; fenced
#    release, and the stale release of the ABA case refused; LEASE compares;
#    lease grant / keepalive / revoke, keepalive after revoke is TTL 0; a
#    TTL-2 lease expiring; a watch seeing PUT (no "type") and DELETE with
#    prev_kv, a message split over many write callbacks, progress
#    notifications, resuming, and compaction ending a resumed watch;
#  - auth on its own member: enabling it through the gateway, the
#    configured user working and re-authenticating after its token expired,
#    anonymous and wrong-password clients refused;
#  - TLS on its own member: https with a throwaway CA and a client
#    certificate; refused without the CA or without the certificate;
#  - three members: failover past a killed first endpoint; a hung
#    (SIGSTOPped) member: reads fail over after the request timeout, a write
#    times out as indeterminate, and its watch ends as stalled; watches on a
#    SIGKILLed member (transport) and a SIGTERMed one (in-stream error);
#    quorum loss: a put fails fast (far under etcd's 7 s), a hasleader
#    watch ends with "no leader", and writes work again once members return.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Utils;
use SiloEtcd;
use SiloTest qw(start_process wait_for_output wait_process_exit stop_process);
use Test::More;
use Time::HiRes qw(time);

my $src = $ENV{SILO_SRC} // '.';
my $driver = $ENV{SILO_ETCD_DRIVER} // "$src/test/etcd/etcd_client_test";
my $request_timeout_ms = 1500;    # the client's default
my $call_budget_ms = 2 * $request_timeout_ms;    # its default total_timeout_ms
my $t_start = time();

ok(-x $driver, "driver $driver is built") or BAIL_OUT("no driver: run make");
ok(defined etcd_binary(), 'etcd is installed')
  or BAIL_OUT('etcd not found: tools/ensure-deps.sh installs etcd-server');

my @diag_members;    # whose logs a failure shows

# parse: key=value pairs of the driver's output; "X.message=" runs to the end
# of its line.
sub parse
{
	my ($out) = @_;
	my %kv;
	for my $line (split /\n/, $out)
	{
		if ($line =~ s/(\S+\.message)=(.*)$//)
		{
			$kv{$1} = $2;
		}
		$kv{$1} = $2 while $line =~ /(\S+?)=(\S*)/g;
	}
	return \%kv;
}

# show_failure: show a driver run and the etcd logs after a failed assertion.
sub show_failure
{
	my ($r) = @_;
	diag("driver: @{$r->{argv}}\nexit status: $r->{rc}\nstdout:\n$r->{out}\nstderr:\n$r->{err}");
	diag(etcd_log_tail($_, 25)) for @diag_members;
	return;
}

# run_driver(ARGS...): run the driver to completion (at most 60 s).
sub run_driver
{
	my @argv = ($driver, @_);
	my ($out, $err) = ('', '');
	my $t0 = time();
	my $ok = eval {
		IPC::Run::run(\@argv, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(60));
		1;
	};
	my $rc = $ok ? $? >> 8 : -1;
	$err .= "\n(driver run failed: $@)" unless $ok;
	return {
		argv => \@argv,
		rc => $rc,
		out => $out,
		err => $err,
		kv => parse($out),
		ms => (time() - $t0) * 1000
	};
}

# scenario(NAME, ARGS...): a driver run that must exit 0.
sub scenario
{
	my ($name, @args) = @_;
	my $r = run_driver(@args);
	ok($r->{rc} == 0, $name) or show_failure($r);
	return $r;
}

# check(R, OK, NAME): an assertion on a driver run's output.
sub check
{
	my ($r, $cond, $name) = @_;
	ok($cond, $name) or show_failure($r);
	return $cond;
}

# background(ARGS...): start the driver in the background.
sub background
{
	my @argv = ($driver, @_);
	my $p = start_process(\@argv);
	$p->{argv} = \@argv;
	return $p;
}

# finish(P, TIMEOUT): wait for a background driver; returns a run record.
sub finish
{
	my ($p, $timeout) = @_;
	stop_process($p, 5) unless wait_process_exit($p, $timeout);
	return {
		argv => $p->{argv},
		rc => defined $p->{status} ? $p->{status} : -1,
		out => $p->{out},
		err => $p->{err},
		kv => parse($p->{out})
	};
}

# roles(MEMBERS): (status run, leader ID, [leader], [followers]) from the
# driver's status scenario, retried (for at most 10 s) until every member
# answers and all name the same leader.
sub roles
{
	my @m = @_;
	my $deadline = time() + 10;
	while (1)
	{
		my $r = run_driver('-e', etcd_endpoints(@m), 'status');
		my (%id_of, %leaders);
		while ($r->{out} =~ /^status endpoint=(\S+) member_id=(\d+) leader=(\d+)/mg)
		{
			$id_of{$1} = $2;
			$leaders{$3} = 1;
		}
		my ($leader) = keys %leaders;
		my @lead = grep { ($id_of{ $_->{client_url} } // '') eq ($leader // '-') } @m;
		my @follow = grep { ($id_of{ $_->{client_url} } // '') ne ($leader // '-') } @m;
		return ($r, $leader, \@lead, \@follow)
		  if ($r->{rc} == 0 && keys(%id_of) == @m && keys(%leaders) == 1 && @lead == 1)
		  || time() > $deadline;
		Time::HiRes::usleep(100_000);
	}
}

# ---------------------------------------------------------------------------
# Offline
# ---------------------------------------------------------------------------
my $r = scenario('unit checks', 'unit');
check($r, ($r->{kv}{checks} // 0) > 90, 'unit checks ran');

# ---------------------------------------------------------------------------
# One member
# ---------------------------------------------------------------------------
my $single = etcd_start(name => 'single');
@diag_members = ($single);
my @one = ('-e', $single->{client_url});

$r = scenario('kv: binary-safe put/range/prefix/delete', @one, 'kv');
check($r, ($r->{kv}{big_value_len} // '') eq '6000', 'a 6000-byte value comes back whole');
check($r, ($r->{kv}{prefix_count} // '') eq '3', 'prefix range counts the 0xff key');
check($r, ($r->{kv}{limit_more} // '') eq '1', 'limit reports more');

$r = scenario('lock: put-if-absent, fenced release, ABA, LEASE compare', @one, 'lock');
check($r, ($r->{kv}{acquire_a} // '') eq 'won' && ($r->{kv}{acquire_b} // '') eq 'lost',
	'put-if-absent has one winner');
check($r, ($r->{kv}{owner_hint} // '') eq 'node-a', "the loser's failure branch names the owner");
check($r, ($r->{kv}{release_fenced} // '') eq 'ok', 'release fenced on the acquisition revision');
check($r, ($r->{kv}{stale_release} // '') eq 'refused',
	'a stale release fenced on an older revision is refused');
check($r, ($r->{kv}{lease_compare} // '') eq 'ok', 'txn compares on LEASE');

$r = scenario('lease: grant, keepalive, revoke', @one, 'lease');
check($r, ($r->{kv}{keepalive_ttl} // '') eq '10', 'keepalive renews');
check($r, ($r->{kv}{keepalive_after_revoke_ttl} // '') eq '0',
	'keepalive after revoke returns TTL 0');

$r = scenario('lease-expire: a TTL-2 lease left alone expires', @one, 'lease-expire');
my $expired = $r->{kv}{expired_after_ms} // -1;
check($r, $expired >= 1500 && $expired <= 6000, "its key vanished after ${expired} ms");
check($r, ($r->{kv}{delete_event} // '') eq '1', 'a watch saw the DELETE');

$r = scenario('watch: events, split messages, progress, resume, compaction', @one, 'watch');
check($r, ($r->{kv}{events} // 0) == 5, 'five events with prev_kv');
check($r, ($r->{kv}{max_message_parts} // 0) >= 4,
	"a big message spanned $r->{kv}{max_message_parts} write callbacks");
check($r, ($r->{kv}{progress} // 0) >= 1, 'progress notification');
check($r, ($r->{kv}{end} // '') eq 'canceled' && ($r->{kv}{compact_revision} // 0) > 0,
	'compaction past the resume point cancels the watch');

$r = scenario('status and version', @one, 'status');
check($r, $r->{out} =~ /^version server=3\.\d+\.\d+ cluster=3\.\d+/m, 'version check passes');
etcd_stop($single);

# ---------------------------------------------------------------------------
# Auth, on a member of its own (tokens live 1 s)
# ---------------------------------------------------------------------------
my $authd = etcd_start(name => 'auth', extra_args => [ '--auth-token-ttl', '1' ]);
@diag_members = ($authd);
scenario('auth enabled through the gateway', '-e', $authd->{client_url}, 'auth-enable', 'rootpw');
$r = scenario(
	'auth: user works, re-authenticates, others refused',
	'-e', $authd->{client_url}, '-u', 'root', '-p', 'rootpw', 'auth', 3000);
check($r, ($r->{kv}{authentications} // '') eq '2', 'an expired token is replaced once');
check($r, ($r->{kv}{'wrong_get.kind'} // '') eq 'auth', 'a wrong password is an auth error');
check($r, ($r->{kv}{'anon_put.kind'} // '') eq 'auth', 'no credentials is an auth error');
etcd_stop($authd);

# ---------------------------------------------------------------------------
# TLS, on a member of its own
# ---------------------------------------------------------------------------
SKIP:
{
	my ($bindir) = grep { -x "$_/openssl" } split(/:/, $ENV{PATH} // ''), '/usr/bin';
	skip('openssl is not installed', 3) unless $bindir;
	my $openssl = "$bindir/openssl";
	my $dir = PostgreSQL::Test::Utils::tempdir('etcd_tls');
	my @req = ($openssl, 'req', '-newkey', 'ec', '-pkeyopt',
		'ec_paramgen_curve:prime256v1', '-nodes');
	my @sign = ($openssl, 'x509', '-req', '-days', '1', '-CA', "$dir/ca.crt",
		'-CAkey', "$dir/ca.key", '-CAcreateserial');
	open my $ext, '>', "$dir/ext.cnf" or die;
	print $ext "[server]\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
	  . "[client]\nextendedKeyUsage=clientAuth\n";
	close $ext;
	my $quiet = sub { IPC::Run::run(\@_, '<', \undef, '>', '/dev/null', '2>', '/dev/null') };
	my $made =
	  $quiet->(@req, '-x509', '-days', '1', '-subj', '/CN=silo test CA',
		'-keyout', "$dir/ca.key", '-out', "$dir/ca.crt")
	  && $quiet->(@req, '-subj', '/CN=127.0.0.1', '-keyout', "$dir/server.key",
		'-out', "$dir/server.csr")
	  && $quiet->(@sign, '-in', "$dir/server.csr", '-out', "$dir/server.crt",
		'-extfile', "$dir/ext.cnf", '-extensions', 'server')
	  && $quiet->(@req, '-subj', '/CN=root', '-keyout', "$dir/client.key",
		'-out', "$dir/client.csr")
	  && $quiet->(@sign, '-in', "$dir/client.csr", '-out', "$dir/client.crt",
		'-extfile', "$dir/ext.cnf", '-extensions', 'client');
	ok($made, 'throwaway CA, server and client certificates') or last SKIP;

	my $tlsd = etcd_start(
		name => 'tls',
		tls => {
			cert => "$dir/server.crt",
			key => "$dir/server.key",
			ca => "$dir/ca.crt"
		});
	@diag_members = ($tlsd);
	$r = scenario(
		'tls: https with CA and client certificate',
		'-e', $tlsd->{client_url}, '--ca', "$dir/ca.crt", '--cert', "$dir/client.crt",
		'--key', "$dir/client.key", 'tls');
	check($r, ($r->{kv}{'no_ca_put.kind'} // '') eq 'unavailable',
		'without the CA the server is not trusted');
	etcd_stop($tlsd);
}

# ---------------------------------------------------------------------------
# Three members
# ---------------------------------------------------------------------------
my @m = etcd_cluster_start(3, name => 'm');
@diag_members = @m;
my $all = etcd_endpoints(@m);

my ($st, $leader, $leaders, $followers) = roles(@m);
check($st, $st->{rc} == 0 && $st->{out} =~ /^members=3 /m && @$leaders == 1,
	'member list and leader of the 3-member cluster');

# failover: the first endpoint's member is killed
{
	my $dead = $followers->[0];
	etcd_kill($dead);
	my @rest = grep { $_ != $dead } @m;
	$r = scenario('failover past a killed first endpoint',
		'-e', etcd_endpoints($dead, @rest), 'failover');
	check($r, ($r->{kv}{failovers} // '') eq '1', 'only the first call had to move on');
	check($r, ($r->{kv}{total_ms} // 1e9) < 3 * $call_budget_ms,
		"three calls in $r->{kv}{total_ms} ms");
	check($r, ($r->{kv}{'get1.kind'} // '') eq 'ok' && ($r->{kv}{'put.kind'} // '') eq 'ok',
		'read and write through the others');
	ok(etcd_restart($dead), 'killed member restarted');
}

# a hung member: SIGSTOP
{
	($st, $leader, $leaders, $followers) = roles(@m);
	my $hung = $followers->[0];
	my @rest = grep { $_ != $hung } @m;
	my $w = background('-e', $hung->{client_url}, 'watch-end', 2000, 15000);
	ok(wait_for_output($w, qr/^watch=created/m, 10), 'watch on the member to hang');
	etcd_pause($hung);
	my $t0 = time();
	$r = run_driver('-e', etcd_endpoints($hung, @rest), 'hung');
	my $kv = $r->{kv};
	check($r, $r->{rc} == 0 && ($kv->{'get.kind'} // '') eq 'ok',
		'a read fails over from a hung member');
	my ($get_ms) = $r->{out} =~ /^call=get elapsed_ms=(\d+)/m;
	check($r, defined $get_ms && $get_ms >= $request_timeout_ms - 100
		  && $get_ms < $call_budget_ms + 500,
		"... after the request timeout (${\($get_ms // '?')} ms)");
	check($r, ($kv->{'put1.kind'} // '') eq 'timeout' && ($kv->{'put1.indeterminate'} // '') eq '1',
		'a write to a hung member times out as indeterminate');
	check($r, ($kv->{'put2.kind'} // '') eq 'ok', 'the next write goes to the next endpoint');

	my $wr = finish($w, 10);
	my $ended = ($wr->{kv}{ended_at_ms} // 0) - $t0 * 1000;
	check($wr, $wr->{rc} == 0 && ($wr->{kv}{end} // '') eq 'stalled',
		'the watch on the hung member ends as stalled');
	check($wr, $ended > 0 && $ended < 2000 + 1500, sprintf('... %.0f ms after SIGSTOP', $ended));
	etcd_resume($hung);
	ok(etcd_wait_healthy($hung, 30), 'hung member resumed');
}

# a watch on a SIGKILLed member
{
	($st, $leader, $leaders, $followers) = roles(@m);
	my $victim = $followers->[0];
	my $w = background('-e', $victim->{client_url}, 'watch-end', 0, 10000);
	ok(wait_for_output($w, qr/^watch=created/m, 10), 'watch on the member to kill');
	my $t0 = time();
	etcd_kill($victim);
	my $wr = finish($w, 10);
	my $ended = ($wr->{kv}{ended_at_ms} // 0) - $t0 * 1000;
	check($wr, $wr->{rc} == 0 && ($wr->{kv}{end} // '') eq 'transport'
		  && ($wr->{kv}{'status.curl'} // '') eq '18',
		'SIGKILL ends the watch with a transport error (CURLE_PARTIAL_FILE)');
	check($wr, $ended < 1500, sprintf('... at once (%.0f ms)', $ended));
	ok(etcd_restart($victim), 'killed member restarted');
}

# a watch on a SIGTERMed member
{
	($st, $leader, $leaders, $followers) = roles(@m);
	my $victim = $followers->[0];
	my $w = background('-e', $victim->{client_url}, 'watch-end', 0, 10000);
	ok(wait_for_output($w, qr/^watch=created/m, 10), 'watch on the member to stop');
	etcd_stop($victim);
	my $wr = finish($w, 10);
	check($wr, $wr->{rc} == 0 && ($wr->{kv}{end} // '') eq 'error'
		  && ($wr->{kv}{'status.grpc'} // '') =~ /^(1|14)$/,
		"SIGTERM ends the watch with an in-stream error ($wr->{kv}{'status.message'})");
	ok(etcd_restart($victim), 'stopped member restarted');
}

# quorum loss: two of three killed
{
	my ($survivor, @gone) = @m;
	my $w = background('-e', $survivor->{client_url}, 'watch-end', 0, 20000);
	ok(wait_for_output($w, qr/^watch=created/m, 10), 'hasleader watch on the survivor');
	my $t0 = time();
	etcd_kill($_) for @gone;
	$r = run_driver('-e', $survivor->{client_url}, 'put', 0);
	my ($put_ms) = $r->{out} =~ /^call=put elapsed_ms=(\d+)/m;
	check($r, $r->{rc} == 0 && ($r->{kv}{'put.kind'} // '') =~ /^(timeout|unavailable)$/,
		"without quorum a put fails ($r->{kv}{'put.kind'})");
	check($r, defined $put_ms && $put_ms < 4000,
		"... in ${\($put_ms // '?')} ms, far under etcd's 7 s");

	my $wr = finish($w, 20);
	my $ended = ($wr->{kv}{ended_at_ms} // 0) - $t0 * 1000;
	check($wr, $wr->{rc} == 0 && ($wr->{kv}{end} // '') eq 'error'
		  && ($wr->{kv}{'status.message'} // '') =~ /no leader/,
		'the hasleader watch ends with "no leader"');
	check($wr, $ended > 0 && $ended < 12000, sprintf('... %.0f ms after quorum loss', $ended));

	etcd_restart($_, nowait => 1) for @gone;
	$r = run_driver('-e', $all, 'put', 20000);
	check($r, $r->{rc} == 0 && ($r->{kv}{'put.kind'} // '') eq 'ok',
		'writes work again once members return');
	ok(etcd_wait_healthy($_, 30), "$_->{name} healthy again") for @m;
}

etcd_stop($_) for @m;
my $secs = time() - $t_start;
ok($secs < 90, sprintf('the whole test took %.1f s', $secs));

done_testing();
