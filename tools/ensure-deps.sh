# shellcheck shell=bash
# tools/ensure-deps.sh: install the Debian 12 packages silo needs to build,
# test and demo.  Sourced by test/run.sh, tools/demo.sh and .ci/run; call
# silo_ensure_deps afterwards.  It asks dpkg first and touches apt only when
# a package is missing, running "apt-get update" once per call.
# silo_ensure_npm_packages DIR installs a folder's npm packages from its
# package-lock.json (clients/node; test/run.sh calls it).
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
	nodejs						# clients/node: runs the TypeScript compiler
	npm							# and the tests; packages from its lock file
	python3-psycopg				# clients/python: its driver (psycopg 3) for
								# Debian's python3; nothing comes from PyPI
	python3-venv				# clients/python's tests install the package
	python3-setuptools			# into a venv (--system-site-packages,
								# pip --no-build-isolation --no-index)
)

# A package counts as installed when this command is on PATH, however it got
# there: a Node.js from NodeSource's repository brings its own npm and
# conflicts with Debian's npm package, so dpkg alone would ask for a
# conflicting install.
declare -gA SILO_DEB_COMMANDS=([nodejs]=node [npm]=npm)

# silo_missing_packages: print the packages that are not installed, one a line.
silo_missing_packages()
{
	local p
	for p in "${SILO_DEB_PACKAGES[@]}"; do
		if [ -n "${SILO_DEB_COMMANDS[$p]:-}" ] &&
			command -v "${SILO_DEB_COMMANDS[$p]}" >/dev/null 2>&1; then
			continue
		fi
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

# silo_ensure_npm_packages DIR: install DIR's npm packages exactly as its
# package-lock.json pins them ("npm ci"), unless node_modules already holds
# that lock file's packages (npm keeps a copy of the lock it installed in
# node_modules/.package-lock.json; a stamp records which lock that was).
# Needs the npm registry the first time.  Prints npm's output only when it
# fails.
silo_ensure_npm_packages()
{
	local dir=$1 stamp want log
	stamp=$dir/node_modules/.silo-lock.sha256
	want=$(sha256sum "$dir/package-lock.json" 2>/dev/null | cut -d' ' -f1) || return 1
	if [ -n "$want" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
		[ -f "$dir/node_modules/.package-lock.json" ]; then
		return 0
	fi
	log=$(mktemp /tmp/silo-npm.XXXXXX) || return 1
	if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) </dev/null >"$log" 2>&1; then
		cat "$log" >&2
		echo "ensure-deps: npm ci failed in $dir (log above)" >&2
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
	printf '%s\n' "$want" >"$stamp"
}
