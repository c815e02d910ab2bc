
# test/perl/SiloEtcd.pm: real etcd members for silo's TAP tests.
#
#   etcd_start(%opt)             a single-member etcd, healthy
#   etcd_cluster_start(N, %opt)  an N-member etcd cluster, every member healthy
#   etcd_wait_healthy(M, TIMEOUT)
#   etcd_stop(M), etcd_kill(M), etcd_pause(M), etcd_resume(M),
#   etcd_restart(M)              faults and recovery, always by the member's pid
#   etcd_alive(M), etcd_endpoints(M...), etcd_log_tail(M, LINES)
#   etcd_binary()                the etcd executable, or undef
#
# Every member listens on 127.0.0.1 only, on ports from
# PostgreSQL::Test::Cluster::get_free_port(): a client port (http, or https
# when TLS files are given), a peer port and a plain-http metrics port,
# which serves /health whatever the client port speaks.  Data directories
# and logs live in a PostgreSQL::Test::Utils::tempdir.  Members run with a
# 500 ms --experimental-watch-progress-notify-interval (the default, 10
# minutes, would make idle watches silent) and the default heartbeat (100 ms)
# and election timeout (1 s).
#
# Tests wait for health by polling /health under a deadline, never with a
# fixed sleep.  An END block kills (SIGKILL, by pid) every member a test
# started and has not stopped, even when the test dies half-way; nothing is
# ever looked up or killed by name, so a system etcd is never touched.
#
# A member is a hash:
#   name, pid (undef when not running), paused, client_url, peer_url,
#   metrics_url, client_port, peer_port, metrics_port, data_dir, log, argv

package SiloEtcd;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use HTTP::Tiny;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(
  etcd_binary etcd_start etcd_cluster_start etcd_wait_healthy etcd_stop
  etcd_kill etcd_pause etcd_resume etcd_restart etcd_alive etcd_endpoints
  etcd_log_tail
);

my @members;    # every member ever started, for the END block
my $cluster_seq = 0;

=pod

=head1 FUNCTIONS

=over

=item etcd_binary()

The etcd executable: $ENV{ETCD} if set, else "etcd" from PATH (Debian's
etcd-server package puts it in /usr/bin).  undef when there is none.

=cut

sub etcd_binary
{
	return $ENV{ETCD} if defined $ENV{ETCD};
	for my $dir ((split /:/, ($ENV{PATH} // '')), '/usr/bin')
	{
		return "$dir/etcd" if $dir ne '' && -f "$dir/etcd" && -x "$dir/etcd";
	}
	return undef;
}

=pod

=item etcd_start(%opt)

Start a single-member etcd and wait until it is healthy; returns the
member.  Options (also those of etcd_cluster_start):

  name       name prefix (default "etcd")
  tls        { cert => F, key => F, ca => F }: serve clients over https with
             that certificate; with ca, also require client certificates
             signed by it (--client-cert-auth)
  extra_args extra etcd arguments (array ref), e.g. ['--auth-token-ttl', 1]
  progress   watch progress notification interval (default '500ms')
  timeout    seconds to wait for health (default 30)

Dies if etcd is missing or the member does not become healthy (its log
tail is printed with diag first).

=cut

sub etcd_start
{
	my (%opt) = @_;
	my @m = etcd_cluster_start(1, %opt);
	return $m[0];
}

=pod

=item etcd_cluster_start(N, %opt)

Start N members forming one new cluster (unique cluster token, every
member started before any is waited for, since none is healthy without a
quorum) and wait until each is healthy; returns the members in order.

=cut

sub etcd_cluster_start
{
	my ($n, %opt) = @_;
	my $etcd = etcd_binary()
	  // die "etcd not found (tools/ensure-deps.sh installs Debian's etcd-server)";
	my $prefix = $opt{name} // 'etcd';
	my $token = sprintf('silo-%d-%d', $$, ++$cluster_seq);
	my $tls = $opt{tls};
	my $scheme = $tls ? 'https' : 'http';
	my @m;

	for my $i (1 .. $n)
	{
		my $name = "$prefix$i";
		my $dir = PostgreSQL::Test::Utils::tempdir("etcd_$name");
		my %mem = (
			name => $name,
			client_port => PostgreSQL::Test::Cluster::get_free_port(),
			peer_port => PostgreSQL::Test::Cluster::get_free_port(),
			metrics_port => PostgreSQL::Test::Cluster::get_free_port(),
			data_dir => "$dir/data",
			log => "$dir/etcd.log",
			paused => 0);
		$mem{client_url} = "$scheme://127.0.0.1:$mem{client_port}";
		$mem{peer_url} = "http://127.0.0.1:$mem{peer_port}";
		$mem{metrics_url} = "http://127.0.0.1:$mem{metrics_port}";
		push @m, \%mem;
	}
	my $initial = join(',', map { "$_->{name}=$_->{peer_url}" } @m);
	for my $mem (@m)
	{
		$mem->{argv} = [
			$etcd,
			'--name' => $mem->{name},
			'--data-dir' => $mem->{data_dir},
			'--listen-client-urls' => $mem->{client_url},
			'--advertise-client-urls' => $mem->{client_url},
			'--listen-peer-urls' => $mem->{peer_url},
			'--initial-advertise-peer-urls' => $mem->{peer_url},
			'--listen-metrics-urls' => $mem->{metrics_url},
			'--initial-cluster' => $initial,
			'--initial-cluster-token' => $token,
			'--initial-cluster-state' => 'new',
			'--heartbeat-interval' => 100,
			'--election-timeout' => 1000,
			'--experimental-watch-progress-notify-interval' =>
			  ($opt{progress} // '500ms'),
			'--logger' => 'zap',
			'--log-outputs' => 'stderr',
			($tls
				? ('--cert-file' => $tls->{cert},
					'--key-file' => $tls->{key},
					($tls->{ca}
						? ('--trusted-ca-file' => $tls->{ca}, '--client-cert-auth')
						: ()))
				: ()),
			@{ $opt{extra_args} // [] },
		];
		_spawn($mem);
		push @members, $mem;
	}
	for my $mem (@m)
	{
		next if etcd_wait_healthy($mem, $opt{timeout} // 30);
		diag(etcd_log_tail($_, 30)) for @m;
		die "etcd member $mem->{name} did not become healthy";
	}
	return @m;
}

# _spawn(M): fork and exec M's argv with stdin from /dev/null and stdout and
# stderr appended to its log; records the pid.
sub _spawn
{
	my ($mem) = @_;
	my $pid = fork();

	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		# dup2 on the raw descriptors: the test's STDOUT/STDERR are tied
		my $null = POSIX::open('/dev/null', POSIX::O_RDONLY());
		my $log = POSIX::open($mem->{log},
			POSIX::O_WRONLY() | POSIX::O_CREAT() | POSIX::O_APPEND(), 0600);
		POSIX::_exit(127) unless defined $null && defined $log;
		POSIX::dup2($null, 0);
		POSIX::dup2($log, 1);
		POSIX::dup2($log, 2);
		exec { $mem->{argv}[0] } @{ $mem->{argv} } or POSIX::_exit(127);
	}
	$mem->{pid} = $pid;
	$mem->{paused} = 0;
	$mem->{started_at} = time();
	return;
}

# _reap(M, TIMEOUT): wait at most TIMEOUT seconds for M's process to exit;
# returns 1 when it did (and forgets the pid).
sub _reap
{
	my ($mem, $timeout) = @_;
	my $deadline = time() + $timeout;

	return 1 unless defined $mem->{pid};
	while (1)
	{
		my $r = waitpid($mem->{pid}, POSIX::WNOHANG());
		if ($r == $mem->{pid} || $r == -1)
		{
			$mem->{exit_status} = $?;
			$mem->{pid} = undef;
			$mem->{paused} = 0;
			return 1;
		}
		return 0 if time() > $deadline;
		usleep(10_000);
	}
}

=pod

=item etcd_wait_healthy(M, TIMEOUT)

Poll M's /health (metrics port) every 50 ms until it reports
{"health":"true"}, for at most TIMEOUT seconds (default 30).  Returns 1
when healthy; 0 at the deadline or as soon as the process has exited.

=cut

sub etcd_wait_healthy
{
	my ($mem, $timeout) = @_;
	my $deadline = time() + ($timeout // 30);
	my $http = HTTP::Tiny->new(timeout => 2);

	while (1)
	{
		return 0 if !etcd_alive($mem);
		my $r = $http->get("$mem->{metrics_url}/health");
		return 1 if $r->{success} && $r->{content} =~ /"health"\s*:\s*"true"/;
		return 0 if time() > $deadline;
		usleep(50_000);
	}
}

=pod

=item etcd_alive(M)

Whether M's process is running (stopped by SIGSTOP counts as running).

=cut

sub etcd_alive
{
	my ($mem) = @_;
	return 0 unless defined $mem->{pid};
	return 0 if _reap($mem, 0);
	return kill(0, $mem->{pid}) ? 1 : 0;
}

=pod

=item etcd_stop(M, TIMEOUT)

Graceful stop: SIGCONT if paused, SIGTERM, then wait at most TIMEOUT
seconds (default 10) before SIGKILL.  Returns 1 if SIGTERM was enough.

=cut

sub etcd_stop
{
	my ($mem, $timeout) = @_;

	return 1 unless defined $mem->{pid};
	kill 'CONT', $mem->{pid} if $mem->{paused};
	kill 'TERM', $mem->{pid};
	return 1 if _reap($mem, $timeout // 10);
	diag("etcd $mem->{name} (pid $mem->{pid}) ignored SIGTERM; killing it");
	etcd_kill($mem);
	return 0;
}

=pod

=item etcd_kill(M)

Hard crash: SIGKILL, then reap the process.

=cut

sub etcd_kill
{
	my ($mem) = @_;

	return unless defined $mem->{pid};
	kill 'KILL', $mem->{pid};
	_reap($mem, 10) or die "etcd $mem->{name} survived SIGKILL";
	return;
}

=pod

=item etcd_pause(M), etcd_resume(M)

SIGSTOP and SIGCONT: a hung member whose sockets stay open.

=cut

sub etcd_pause
{
	my ($mem) = @_;
	kill 'STOP', $mem->{pid} if defined $mem->{pid};
	$mem->{paused} = 1;
	return;
}

sub etcd_resume
{
	my ($mem) = @_;
	kill 'CONT', $mem->{pid} if defined $mem->{pid};
	$mem->{paused} = 0;
	return;
}

=pod

=item etcd_restart(M, %opt)

Start a stopped or killed member again with the same arguments (its data
directory makes it rejoin; etcd ignores --initial-cluster-state then) and,
unless $opt{nowait}, wait until it is healthy (at most $opt{timeout}
seconds, default 30).  Returns 1 when healthy (or not waited for).

=cut

sub etcd_restart
{
	my ($mem, %opt) = @_;

	die "etcd $mem->{name} is still running" if etcd_alive($mem);
	_spawn($mem);
	return 1 if $opt{nowait};
	return etcd_wait_healthy($mem, $opt{timeout} // 30);
}

=pod

=item etcd_endpoints(M...)

The members' client URLs, comma-separated.

=cut

sub etcd_endpoints
{
	return join(',', map { $_->{client_url} } @_);
}

=pod

=item etcd_log_tail(M, LINES)

The last LINES (default 40) lines of M's log, with a title line.

=cut

sub etcd_log_tail
{
	my ($mem, $lines) = @_;
	my @all;

	if (open my $fh, '<', $mem->{log})
	{
		@all = <$fh>;
		close $fh;
	}
	$lines //= 40;
	splice(@all, 0, @all - $lines) if @all > $lines;
	return "---- etcd $mem->{name} log ($mem->{log}), last $lines lines\n" . join('', @all);
}

=pod

=back

=cut

END
{
	# Kill, by pid, every member still running; keep the script's status.
	local $?;
	for my $mem (@members)
	{
		next unless defined $mem->{pid};
		kill 'KILL', $mem->{pid};
		_reap($mem, 5);
	}
}

1;
