# shellcheck shell=bash
# bench/scratch.sh: a throwaway cluster with silo preloaded, for the small
# measuring scripts (instructions.sh, plans.sh).  Source it, then:
#
#   scratch_begin              a mktemp directory ($DIR), removed on exit
#                              (kept with KEEP=1); the cluster's postmaster
#                              is stopped by its pid on exit
#   scratch_initdb DATA [LINE...]   initdb DATA (under $DIR) and add the
#                              preload settings and the given lines to its
#                              postgresql.conf
#   scratch_start DATA         start it (unix socket in $DIR only)
#   scratch_stop DATA          stop it
#   as_pg CMD...               run CMD as postgres when root
#   psql_ ARGS...              psql on the running cluster, stopping at errors

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
RUN_AS=postgres
DIR=
PID=

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u "$RUN_AS" -- "$@"; else "$@"; fi; }
psql_() { as_pg "$PGBIN/psql" -h "$DIR" -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }

scratch_cleanup()
{
	if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; sleep 1; fi
	if [ "${KEEP:-}" = 1 ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}

scratch_begin()
{
	DIR=$(mktemp -d /tmp/silo-scratch.XXXXXX)
	chmod 755 "$DIR"
	if [ "$(id -u)" = 0 ]; then chown "$RUN_AS" "$DIR"; fi
	trap scratch_cleanup EXIT
}

scratch_initdb()
{
	local data=$DIR/$1 line
	shift
	as_pg "$PGBIN/initdb" -D "$data" -A trust >/dev/null
	{
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$DIR'"
		echo "shared_preload_libraries = 'pg_cron,silo'"
		echo "cron.database_name = 'postgres'"
		echo "silo.database = 'postgres'"
		for line in "$@"; do echo "$line"; done
	} >>"$data/postgresql.conf"
}

scratch_start()
{
	as_pg "$PGBIN/pg_ctl" -D "$DIR/$1" -l "$DIR/$1.log" -w start >/dev/null
	PID=$(head -1 "$DIR/$1/postmaster.pid")
}

scratch_stop()
{
	as_pg "$PGBIN/pg_ctl" -D "$DIR/$1" -w stop >/dev/null
	PID=
}
