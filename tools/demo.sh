#!/usr/bin/env bash
# tools/demo.sh: "make demo".  Shows silo end to end on a throwaway cluster.
#
# As root on a bare Debian 12 machine: installs the missing packages, builds
# and installs the extension and tools/silo-worker, creates a durable
# (fsync on) cluster in a postgres-owned temp dir under /tmp that listens on
# a unix socket in that dir only (port picked in 55000-55999), enqueues jobs
# and drains them with silo-worker, prints a summary, then stops the cluster
# and removes the dir.
#
#   demo-bulk  5000 jobs, drained by the worker's built-in no-op handler
#   demo        500 jobs, drained by a shell handler (--exec): some succeed,
#               some fail for good, some fail twice and then succeed
#
# Both batches mix two tenants, three priorities, jobs scheduled 2 s ahead
# and jobs with a retry policy.
#
# Environment: SILO_DEMO_BULK (default 5000), SILO_DEMO_EXEC (default 500).

# shellcheck source-path=SCRIPTDIR/..
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
WORKER=$SRC/tools/silo-worker
N_BULK=${SILO_DEMO_BULK:-5000}
N_EXEC=${SILO_DEMO_EXEC:-500}

export LANG=C.UTF-8 LC_ALL=C.UTF-8
unset PGHOSTADDR PGSERVICE PGSERVICEFILE PGOPTIONS PGDATA PGPASSWORD

DIR=
WORKER_PID=

header() { printf '\n== %s\n' "$*"; }
die()
{
	printf 'demo: %s\n' "$*" >&2
	exit 1
}

# AS_PG: prefix that runs a command as postgres (empty when not root).
AS_PG=()
[ "$(id -u)" = 0 ] && AS_PG=(runuser -u postgres --)

# cleanup: kill the worker, stop the cluster, remove the dir.
# shellcheck disable=SC2317 # called from a trap
cleanup()
{
	local rc=$?
	trap '' INT TERM
	trap - EXIT
	if [ -n "$WORKER_PID" ]; then
		kill -TERM "$WORKER_PID" 2>/dev/null
		wait "$WORKER_PID" 2>/dev/null
	fi
	if [ -n "$DIR" ] && [ -d "$DIR" ]; then
		if [ "$rc" -ne 0 ] && [ -s "$DIR/server.log" ]; then
			printf '\n-- server log (last 30 lines)\n'
			tail -n 30 "$DIR/server.log"
		fi
		if [ -f "$DIR/data/postmaster.pid" ]; then
			header "Stopping the cluster"
			"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
				"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1
		fi
		rm -rf "$DIR"
		echo "removed $DIR"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# pick_port: a port in 55000-55999 that no local server seems to use.  The
# cluster listens only on a socket in its own dir, so this is about tidiness.
pick_port()
{
	local i p off=$((RANDOM % 1000))
	for ((i = 0; i < 1000; i++)); do
		p=$((55000 + (off + i) % 1000))
		if [ -e "/var/run/postgresql/.s.PGSQL.$p" ] || [ -e "/tmp/.s.PGSQL.$p" ]; then
			continue
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			continue
		fi
		echo "$p"
		return 0
	done
	return 1
}

sql() { psql -X -q -v ON_ERROR_STOP=1 -P pager=off "$@"; }

# run_worker LOG ARGS...: run silo-worker in the background (so the EXIT
# trap can stop it), show its output indented, return its exit status.
run_worker()
{
	local log=$1 rc
	shift
	: >"$log"
	timeout 600 "$WORKER" "$@" </dev/null >"$log" 2>&1 &
	WORKER_PID=$!
	tail -n +1 -f --pid="$WORKER_PID" "$log" | sed -u 's/^/    /' &
	wait "$WORKER_PID"
	rc=$?
	WORKER_PID=
	wait "$!"
	return "$rc"
}

# ---------------------------------------------------------------------------
header "Packages"
# shellcheck source=tools/ensure-deps.sh
. "$SRC/tools/ensure-deps.sh"
silo_ensure_deps || die "could not install the packages"
echo "ok"

header "Build and install"
DIR=$(mktemp -d /tmp/silo-demo.XXXXXX) || die "mktemp failed"
if ! { make -C "$SRC" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" &&
	make -C "$SRC" PG_CONFIG="$PG_CONFIG" install; } </dev/null >"$DIR/build.log" 2>&1; then
	cat "$DIR/build.log"
	die "build failed"
fi
[ -x "$WORKER" ] || die "$WORKER was not built"
echo "ok: extension installed, worker at tools/silo-worker"

header "Throwaway cluster"
[ "$(id -u)" = 0 ] && chown postgres: "$DIR"
PORT=$(pick_port) || die "no free port in 55000-55999"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
	>"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log"; die "initdb failed"; }
cat >>"$DIR/data/postgresql.conf" <<EOF

# silo demo: unix socket in the demo dir only; durable defaults (fsync on)
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
cron.host = '$DIR'	# pg_cron connects over the socket (no TCP here)
silo.database = 'postgres'
max_worker_processes = 16
lc_messages = 'C'
EOF
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start >/dev/null ||
	die "the cluster did not start"
export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
echo "data dir $DIR/data, socket $DIR/.s.PGSQL.$PORT"

sql -c 'CREATE EXTENSION silo CASCADE' 2>&1 | sed 's/^/  /'
[ "${PIPESTATUS[0]}" -eq 0 ] || die "CREATE EXTENSION failed"
sql -At -c "SELECT 'installed: ' || string_agg(extname || ' ' || extversion, ', ' ORDER BY extname)
              FROM pg_extension WHERE extname IN ('silo', 'pg_cron')"

# ---------------------------------------------------------------------------
header "Enqueue"
# Every 10th job starts 2 s from now, every 4th has a retry policy, the
# tenant alternates every 10 jobs and the priority every job.  In group
# "demo" the payload also tells the shell handler what to do: jobs 3, 13,
# 23, ... always fail (the half with a retry policy after 4 attempts), jobs
# 6, 16, 26, ... fail twice, then succeed.
sql -v n_bulk="$N_BULK" -v n_exec="$N_EXEC" <<'EOF' || die "enqueue failed"
\timing on
SELECT count(*) AS "demo-bulk jobs enqueued"
  FROM silo.enqueue_many((
	SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
			 'task_group', 'demo-bulk',
			 'tenant', CASE WHEN g / 10 % 2 = 0 THEN 'acme' ELSE 'globex' END,
			 'priority', (ARRAY[10, 50, 90])[1 + g % 3],
			 'payload', jsonb_build_object('n', g),
			 'start_at', CASE WHEN g % 10 = 0 THEN now() + interval '2 seconds' END,
			 'retry_policy', CASE WHEN g % 4 = 0 THEN
				 '{"retryCount": 3, "initialIntervalMs": 100, "backoffFactor": 2}'::jsonb END)))
	  FROM generate_series(1, :n_bulk) AS g));
SELECT count(*) AS "demo jobs enqueued"
  FROM silo.enqueue_many((
	SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
			 'task_group', 'demo',
			 'tenant', CASE WHEN g / 10 % 2 = 0 THEN 'acme' ELSE 'globex' END,
			 'priority', (ARRAY[10, 50, 90])[1 + g % 3],
			 'payload', jsonb_strip_nulls(jsonb_build_object(
				 'n', g,
				 'fail', CASE WHEN g % 10 = 3 THEN true END,
				 'fail_until_attempt', CASE WHEN g % 10 = 6 THEN 3 END)),
			 'start_at', CASE WHEN g % 10 = 0 THEN now() + interval '2 seconds' END,
			 'retry_policy', CASE WHEN g % 4 = 0 OR g % 10 = 6 OR g % 20 = 3 THEN
				 '{"retryCount": 3, "initialIntervalMs": 100, "backoffFactor": 2}'::jsonb END)))
	  FROM generate_series(1, :n_exec) AS g));
\timing off
\echo
\echo Jobs by state before the workers run:
SELECT task_group, status, count(*) AS jobs
  FROM silo.jobs GROUP BY 1, 2 ORDER BY 1, 2;
EOF

# ---------------------------------------------------------------------------
header "Worker 1: no-op handler, task group demo-bulk"
echo "  \$ silo-worker --task-group demo-bulk --concurrency 8 --batch 200 --progress --exit-when-idle 3000"
run_worker "$DIR/worker-bulk.log" --task-group demo-bulk --concurrency 8 --batch 200 \
	--progress --exit-when-idle 3000
rc_bulk=$?

HANDLER=$DIR/handler.sh
cat >"$HANDLER" <<'EOF'
#!/bin/sh
# Demo job handler: the payload (JSON) arrives on stdin, the attempt number
# in SILO_RELATIVE_ATTEMPT.  Exit 0 succeeds (stdout is the result).
payload=$(cat)
case $payload in
	*'"fail": true'*)
		echo "failing as the payload asks" >&2
		exit 3 ;;
esac
until=$(printf '%s' "$payload" | sed -n 's/.*"fail_until_attempt": \([0-9]*\).*/\1/p')
if [ -n "$until" ] && [ "$SILO_RELATIVE_ATTEMPT" -lt "$until" ]; then
	echo "flaky: attempt $SILO_RELATIVE_ATTEMPT fails" >&2
	exit 1
fi
printf '{"ok": true, "attempt": %s}\n' "$SILO_ATTEMPT"
EOF
chmod 755 "$HANDLER"

header "Worker 2: shell handler (--exec), task group demo"
echo "  \$ silo-worker --task-group demo --exec $HANDLER --concurrency 8 --progress --exit-when-idle 3000"
run_worker "$DIR/worker-exec.log" --task-group demo --exec "$HANDLER" --concurrency 8 \
	--progress --exit-when-idle 3000
rc_exec=$?

# ---------------------------------------------------------------------------
header "Summary"
sql <<'EOF' || die "summary queries failed"
\echo Jobs by state:
SELECT task_group, status, count(*) AS jobs,
	   count(*) FILTER (WHERE tenant = 'acme') AS acme,
	   count(*) FILTER (WHERE tenant = 'globex') AS globex
  FROM silo.jobs GROUP BY 1, 2 ORDER BY 1, 2;
\echo Attempts by status:
SELECT i.task_group, a.status, count(*) AS attempts, max(a.attempt) AS max_attempt
  FROM silo.attempts a
  JOIN silo.job_info i ON i.tenant = a.tenant AND i.id = a.job_id
 GROUP BY 1, 2 ORDER BY 1, 2;
\echo Failed jobs: the last attempt of one job per attempt count:
SELECT DISTINCT ON (a.attempt) a.tenant, a.job_id, a.attempt, a.error_code, a.error_data
  FROM silo.jobs j
  JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.status = 'Failed'
   AND a.attempt = (SELECT max(attempt) FROM silo.attempts x
					 WHERE x.tenant = a.tenant AND x.job_id = a.job_id)
 ORDER BY a.attempt, a.finished_at;
\echo Throughput, first attempt start to last attempt end (includes the 2 s scheduled jobs):
SELECT i.task_group, count(*) AS attempts,
	   round(extract(epoch FROM max(a.finished_at) - min(a.started_at)), 2) AS seconds,
	   round(count(*) / nullif(extract(epoch FROM max(a.finished_at) - min(a.started_at)), 0), 1)
		   AS attempts_per_s
  FROM silo.attempts a
  JOIN silo.job_info i ON i.tenant = a.tenant AND i.id = a.job_id
 WHERE a.finished_at IS NOT NULL
 GROUP BY 1 ORDER BY 1;
EOF
echo "Throughput reported by the workers (their time includes the 3 s idle wait before exiting):"
grep -h 'silo-worker: finished' "$DIR/worker-bulk.log" "$DIR/worker-exec.log" | sed 's/^/  /'

[ "$rc_bulk" -eq 0 ] || die "worker 1 exited with status $rc_bulk"
[ "$rc_exec" -eq 0 ] || die "worker 2 exited with status $rc_exec"
