# shellcheck shell=bash
# clients/test-test-cluster.sh: a throwaway PostgreSQL 15 cluster with silo, for
# the client libraries' tests (clients/node/test/run.sh,
# clients/python/test/run.sh) and their benchmarks (bench/clients.sh,
# bench/clients_python.sh).
# Source it, then:
#
#   cluster_start DIR [CONF-LINE...]  initdb DIR/data (as postgres when
#                              root), preload pg_cron and silo, listen on a
#                              unix socket in DIR only, start it, CREATE
#                              EXTENSION silo in database postgres; sets
#                              CLUSTER_PID and CLUSTER_URL
#                              (postgresql://postgres@/postgres?host=DIR)
#   cluster_stop               stop it by its pid (fast shutdown, then
#                              SIGQUIT after 30 s if it still runs)
#   cluster_check              whether PostgreSQL 15, silo and pg_cron are
#                              installed (cluster_start calls it)
#   cluster_psql ARGS...       psql on it, stopping at the first error
#
# Nothing here touches another cluster: no TCP port, and the socket lives
# in DIR.

CLUSTER_PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CLUSTER_DIR=
CLUSTER_PID=
CLUSTER_URL=

cluster_as_pg()
{
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cluster_psql()
{
	PGOPTIONS='-c client_min_messages=warning' "$CLUSTER_PGBIN/psql" -h "$CLUSTER_DIR" \
		-U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"
}

# cluster_check: whether PostgreSQL 15's initdb, silo and pg_cron are
# installed (silo with "make install" from the repository's root, pg_cron
# from Debian's postgresql-15-cron); says what is missing if not.
cluster_check()
{
	local share lib ext missing=0
	if [ ! -x "$CLUSTER_PGBIN/initdb" ] || [ ! -x "$CLUSTER_PGBIN/pg_config" ]; then
		echo "test-cluster.sh: no PostgreSQL 15 in $CLUSTER_PGBIN (set PGBIN, or install postgresql-15)" >&2
		return 1
	fi
	share=$("$CLUSTER_PGBIN/pg_config" --sharedir) || return 1
	lib=$("$CLUSTER_PGBIN/pg_config" --pkglibdir) || return 1
	for ext in silo pg_cron; do
		if [ ! -f "$share/extension/$ext.control" ] || [ ! -f "$lib/$ext.so" ]; then
			echo "test-cluster.sh: the extension $ext is not installed ($share/extension/$ext.control, $lib/$ext.so)" >&2
			missing=1
		fi
	done
	if [ "$missing" -ne 0 ]; then
		echo "test-cluster.sh: install silo with 'make install' from the repository's root, pg_cron with 'apt-get install postgresql-15-cron'" >&2
		return 1
	fi
}

cluster_start()
{
	local dir=$1 line
	shift
	cluster_check || return 1
	CLUSTER_DIR=$dir
	if [ "$(id -u)" = 0 ]; then chown postgres: "$dir" || return 1; fi
	chmod 755 "$dir" || return 1
	cluster_as_pg "$CLUSTER_PGBIN/initdb" -D "$dir/data" -A trust -U postgres \
		--no-locale -E UTF8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; return 1; }
	{
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$dir'"
		echo "shared_preload_libraries = 'pg_cron,silo'"
		echo "cron.database_name = 'postgres'"
		echo "silo.database = 'postgres'"
		echo "max_connections = 200"
		echo "fsync = off"
		echo "lc_messages = 'C'"
		echo "log_min_messages = warning"
		echo "log_line_prefix = '%m [%p] %a: '"
		for line in "$@"; do echo "$line"; done
	} >>"$dir/data/postgresql.conf"
	if ! cluster_as_pg "$CLUSTER_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
		-w -t 60 start >/dev/null; then
		tail -n 40 "$dir/server.log"
		return 1
	fi
	CLUSTER_PID=$(head -n 1 "$dir/data/postmaster.pid")
	CLUSTER_URL="postgresql://postgres@/postgres?host=$dir"
	cluster_psql -c 'CREATE EXTENSION silo CASCADE' >/dev/null
}

cluster_stop()
{
	local i
	[ -n "$CLUSTER_PID" ] || return 0
	kill -INT "$CLUSTER_PID" 2>/dev/null
	for i in $(seq 300); do
		kill -0 "$CLUSTER_PID" 2>/dev/null || break
		sleep 0.1
	done
	# still there after 30 s: immediate shutdown (only if it has not exited)
	if kill -0 "$CLUSTER_PID" 2>/dev/null; then
		kill -QUIT "$CLUSTER_PID" 2>/dev/null
	fi
	CLUSTER_PID=
}
