# shellcheck shell=bash
# tools/ensure-deps.sh: install the Debian 12 packages silo needs to build,
# test and demo.  Sourced by test/run.sh, tools/demo.sh and .ci/run; call
# silo_ensure_deps afterwards.  It asks dpkg first and touches apt only when
# a package is missing, running "apt-get update" once per call.
#
# Installing postgresql-15 may create and start the default cluster 15/main
# on port 5432.  Nothing in silo's scripts ever connects to it.  Likewise
# etcd-server enables an "etcd" systemd service (localhost:2379, data in
# /var/lib/etcd/default) and starts it where systemd runs; the tests never
# use it: they start their own members on free ports and stop them by pid.

SILO_DEB_PACKAGES=(
	postgresql-15				# server binaries, initdb, pg_ctl, psql
	postgresql-server-dev-15	# PGXS, pg_regress, pg_isolation_regress, TAP modules
	postgresql-15-cron			# silo requires pg_cron
	libpq-dev					# tools/silo-worker
	libcurl4-openssl-dev
	libjansson-dev
	gcc
	libc6-dev					# only a Recommends of gcc
	make
	pkg-config
	perl						# prove, Test::More
	libipc-run-perl				# PostgreSQL::Test::Cluster
	libio-pty-perl				# IPC::Run ptys (interactive_psql)
	etcd-server					# test/t/013_etcd_client.pl runs its own etcd
								# members (3.4) on free loopback ports
)

# silo_missing_packages: print the packages that are not installed, one a line.
silo_missing_packages()
{
	local p
	for p in "${SILO_DEB_PACKAGES[@]}"; do
		dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed ||
			printf '%s\n' "$p"
	done
}

# silo_ensure_deps: install whatever is missing.  Returns non-zero (after
# printing apt's output) when that fails, or when not root and something is
# missing.
silo_ensure_deps()
{
	local missing log

	if ! command -v dpkg-query >/dev/null 2>&1; then
		echo "ensure-deps: dpkg-query not found; this script supports Debian 12 only" >&2
		return 1
	fi
	mapfile -t missing < <(silo_missing_packages)
	[ "${#missing[@]}" -eq 0 ] && return 0

	if [ "$(id -u)" != 0 ]; then
		echo "ensure-deps: missing packages: ${missing[*]}" >&2
		echo "ensure-deps: run as root to install them" >&2
		return 1
	fi

	echo "== Installing Debian packages: ${missing[*]}"
	log=$(mktemp /tmp/silo-apt.XXXXXX) || return 1
	if ! {
		apt-get -q -o DPkg::Lock::Timeout=300 update &&
			DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300 \
				install "${missing[@]}"
	} </dev/null >"$log" 2>&1; then
		cat "$log" >&2
		echo "ensure-deps: package installation failed (log above)" >&2
		rm -f "$log"
		return 1
	fi
	rm -f "$log"

	mapfile -t missing < <(silo_missing_packages)
	if [ "${#missing[@]}" -ne 0 ]; then
		echo "ensure-deps: still missing after apt-get install: ${missing[*]}" >&2
		return 1
	fi
	return 0
}
