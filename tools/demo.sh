#!/usr/bin/env bash
# tools/demo.sh: "make demo".  Shows silo end to end on a throwaway cluster.
#
# As root on a bare Debian 12 machine: installs the missing packages, builds
# and installs the extension and tools/silo-worker, creates a durable
# (fsync on) cluster in a postgres-owned temp dir under /tmp that listens on
# a unix socket in that dir only (port picked in 55000-55999), runs the
# scenario it prints first, then stops the cluster and removes the dir.
#
#   demo-bulk  5000 jobs of two tenants, drained by the worker's built-in
#              no-op handler: the throughput of the queue itself
#   demo        500 jobs run by a shell handler (--exec): some fail on
#               purpose (for good, with and without retries), some fail
#               twice and then succeed, some share a concurrency limit of 2;
#               plus one job delayed by 3 s and one cancelled while it runs
#
# After each worker the demo shows what happened with queries of silo.jobs,
# silo.attempts and silo.queues, and checks that the worker's summary line
# (jobs ended, not attempts) agrees with silo.jobs.
#
# Environment: SILO_DEMO_BULK (default 5000), SILO_DEMO_EXEC (default 500,
# at least 40).

# shellcheck source-path=SCRIPTDIR/..
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
WORKER=$SRC/tools/silo-worker
N_BULK=${SILO_DEMO_BULK:-5000}
N_EXEC=${SILO_DEMO_EXEC:-500}
[ "$N_EXEC" -ge 40 ] 2>/dev/null || N_EXEC=40

export LANG=C.UTF-8 LC_ALL=C.UTF-8
unset PGHOSTADDR PGSERVICE PGSERVICEFILE PGOPTIONS PGDATA PGPASSWORD

DIR=
WORKER_PID=
CANCEL_PID=

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
	[ -n "$CANCEL_PID" ] && kill -TERM "$CANCEL_PID" 2>/dev/null
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

# scenario: the plan, in plain words, before anything runs.  The counts
# follow from the rules of the "demo" batch below (n = 1 .. N_EXEC).
scenario()
{
	local fail=$(((N_EXEC + 7) / 10)) fail_retry=$(((N_EXEC + 17) / 20))
	local flaky=$(((N_EXEC + 4) / 10)) report=$(((N_EXEC + 12) / 20))
	cat <<EOF
== The scenario
1. demo-bulk: $N_BULK jobs of two tenants (acme, globex), three priorities,
   drained by silo-worker's built-in no-op handler (8 at a time).
2. demo: $N_EXEC jobs run by a shell handler (silo-worker --exec, 8 at a time):
   - $fail fail on purpose every time (n = 3, 13, 23, ...): the $fail_retry with a
     retry policy (3 retries) are tried 4 times, the others once; all end Failed;
   - $flaky are flaky (n = 6, 16, 26, ...): attempts 1 and 2 fail, attempt 3
     succeeds.  A retry is due 100 ms (then 200 ms) after the failure, and
     then waits its turn behind the jobs already due;
   - $report share a concurrency limit (n = 8, 28, 48, ...: key "report-db",
     at most 2 at a time), each runs for 0.2 s, and they go first
     (priority 0), so 2 run at a time while the other slots do other jobs;
   - the rest succeed at once.
   Plus two named jobs of priority 0: "nightly-report", delayed to start 3 s
   after it is enqueued, and "export-all", which would run for a minute but
   is cancelled as soon as it runs: the worker stops it and acknowledges the
   cancel.
   The worker's summary counts jobs: a retried job is one job, however many
   attempts it took.
EOF
}

# ---------------------------------------------------------------------------
scenario

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
header "1. demo-bulk: $N_BULK jobs, no-op handler"
sql -v n_bulk="$N_BULK" <<'EOF' || die "enqueue failed"
\timing on
SELECT count(*) AS "demo-bulk jobs enqueued"
  FROM silo.enqueue_many((
	SELECT jsonb_agg(jsonb_build_object(
			 'task_group', 'demo-bulk',
			 'tenant', CASE WHEN g / 10 % 2 = 0 THEN 'acme' ELSE 'globex' END,
			 'priority', (ARRAY[10, 50, 90])[1 + g % 3],
			 'payload', jsonb_build_object('n', g)))
	  FROM generate_series(1, :n_bulk) AS g));
\timing off
EOF
echo "  \$ silo-worker --task-group demo-bulk --concurrency 8 --batch 200 --progress --exit-when-idle 3000"
run_worker "$DIR/worker-bulk.log" --task-group demo-bulk --concurrency 8 --batch 200 \
	--progress --exit-when-idle 3000
rc_bulk=$?
[ "$rc_bulk" -eq 0 ] || die "worker 1 exited with status $rc_bulk"

# ---------------------------------------------------------------------------
header "2. demo: $N_EXEC jobs and two named ones, shell handler"
# The payload tells the shell handler what to do: "fail" always fails,
# "fail_until_attempt" fails the attempts before that one, "sleep" sleeps
# that many seconds first.
sql -v n_exec="$N_EXEC" <<'EOF' || die "enqueue failed"
SELECT count(*) AS "demo jobs enqueued"
  FROM silo.enqueue_many((
	SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
			 'task_group', 'demo',
			 'id', 'demo-' || g,
			 'tenant', CASE WHEN g / 10 % 2 = 0 THEN 'acme' ELSE 'globex' END,
			 'priority', CASE WHEN g % 20 = 8 THEN 0 ELSE (ARRAY[10, 50, 90])[1 + g % 3] END,
			 'payload', jsonb_strip_nulls(jsonb_build_object(
				 'n', g,
				 'fail', CASE WHEN g % 10 = 3 THEN true END,
				 'fail_until_attempt', CASE WHEN g % 10 = 6 THEN 3 END,
				 'sleep', CASE WHEN g % 20 = 8 THEN 0.2 END)),
			 'retry_policy', CASE WHEN g % 20 = 3 OR g % 10 = 6 THEN
				 '{"retryCount": 3, "initialIntervalMs": 100, "backoffFactor": 2}'::jsonb END,
			 'limits', CASE WHEN g % 20 = 8 THEN
				 '[{"type": "concurrency", "key": "report-db", "maxConcurrency": 2}]'::jsonb END)))
	  FROM generate_series(1, :n_exec) AS g));
SELECT silo.enqueue('demo', '{"report": "nightly"}', tenant => 'acme', id => 'nightly-report',
					priority => 0, start_at => now() + interval '3 seconds') AS "delayed by 3 s";
SELECT silo.enqueue('demo', '{"sleep": 60}', tenant => 'acme', id => 'export-all',
					priority => 0) AS "to be cancelled";
\echo Jobs by state before the worker runs: the delayed job is Scheduled, and all
\echo but two of the jobs of the concurrency limit wait in line for key report-db:
SELECT status, count(*) AS jobs FROM silo.jobs WHERE task_group = 'demo' GROUP BY 1 ORDER BY 1;
SELECT tenant, queue AS key, holders, requesters FROM silo.queues WHERE queue = 'report-db';
EOF

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
secs=$(printf '%s' "$payload" | sed -n 's/.*"sleep": \([0-9.]*\).*/\1/p')
[ -n "$secs" ] && sleep "$secs"
printf '{"ok": true, "attempt": %s}\n' "$SILO_ATTEMPT"
EOF
chmod 755 "$HANDLER"

# The canceller: once export-all runs, cancel it.  The worker hears of it at
# its next heartbeat, stops the handler and acknowledges the cancel.
(
	deadline=$((SECONDS + 120))
	until [ "$(sql -At -c "SELECT status FROM silo.jobs WHERE tenant = 'acme' AND id = 'export-all'")" = Running ]; do
		[ "$SECONDS" -lt "$deadline" ] || { echo "export-all did not start within 120 s"; exit 1; }
		sleep 0.1
	done
	sql -c "SELECT silo.cancel('export-all', 'acme')" >/dev/null &&
		echo "cancelled export-all while it ran"
) >"$DIR/cancel.log" 2>&1 &
CANCEL_PID=$!

echo "  \$ silo-worker --task-group demo --exec handler.sh --concurrency 8 --progress --exit-when-idle 3000"
run_worker "$DIR/worker-exec.log" --task-group demo --exec "$HANDLER" --concurrency 8 \
	--progress --exit-when-idle 3000
rc_exec=$?
wait "$CANCEL_PID"
rc_cancel=$?
CANCEL_PID=
sed 's/^/  /' "$DIR/cancel.log"
[ "$rc_exec" -eq 0 ] || die "worker 2 exited with status $rc_exec"
[ "$rc_cancel" -eq 0 ] || die "the cancel did not happen"

# ---------------------------------------------------------------------------
header "What happened"
sql <<'EOF' || die "summary queries failed"
\echo Jobs by state, and the attempts they took:
SELECT j.task_group, j.status, count(*) AS jobs,
	   sum(a.attempts) AS attempts, max(a.attempts) AS "most attempts"
  FROM silo.jobs j
  JOIN (SELECT tenant, job_id, count(*) AS attempts FROM silo.attempts GROUP BY 1, 2) a
	ON a.tenant = j.tenant AND a.job_id = j.id
 GROUP BY 1, 2 ORDER BY 1, 2;
\echo Failing on purpose: demo-3 (retry policy: 4 attempts) and demo-13 (no policy: 1):
SELECT job_id, attempt, status, error_code, rtrim(error_data ->> 'stderr', E'\n') AS stderr,
	   to_char(started_at, 'HH24:MI:SS.MS') AS started
  FROM silo.attempts WHERE job_id IN ('demo-3', 'demo-13') ORDER BY job_id, attempt;
\echo Flaky: demo-6; each retry was due 100 ms, then 200 ms, after a failure, and then
\echo waited its turn behind the jobs already due:
SELECT job_id, attempt, status, error_code, to_char(started_at, 'HH24:MI:SS.MS') AS started,
	   to_char(finished_at, 'HH24:MI:SS.MS') AS finished
  FROM silo.attempts WHERE job_id = 'demo-6' ORDER BY attempt;
\echo The concurrency limit: the most jobs of key report-db running at one moment
\echo (started while others had not finished), and how long the 0.2 s jobs took together:
WITH r AS (SELECT a.started_at, a.finished_at
			 FROM silo.attempts a JOIN silo.jobs j ON j.tenant = a.tenant AND j.id = a.job_id
			WHERE j.task_group = 'demo' AND j.id LIKE 'demo-%' AND j.payload ? 'sleep')
SELECT max((SELECT count(*) FROM r o
			 WHERE o.started_at <= r.started_at AND o.finished_at > r.started_at)) AS "most at once",
	   count(*) AS jobs,
	   round(extract(epoch FROM max(finished_at) - min(started_at)), 1) AS seconds
  FROM r;
\echo The delayed job and the cancelled one:
SELECT j.id, j.status, to_char(j.enqueued_at, 'HH24:MI:SS.MS') AS enqueued,
	   to_char(a.started_at, 'HH24:MI:SS.MS') AS started,
	   round(extract(epoch FROM a.started_at - j.enqueued_at), 1) AS "s after enqueue",
	   to_char(j.cancelled_at, 'HH24:MI:SS.MS') AS cancelled,
	   to_char(a.finished_at, 'HH24:MI:SS.MS') AS "attempt ended", a.status AS attempt
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.id IN ('nightly-report', 'export-all') ORDER BY j.id;
EOF

# check_summary GROUP LOG: show the worker's summary, which counts the jobs
# it ended, and check it against silo.jobs (one worker per group, so it
# ended all of them).
check_summary()
{
	local group=$1 log=$2 want got
	want=$(sql -At -v g="$group" <<'EOF'
SELECT format('finished %s jobs (%s succeeded, %s failed, %s cancelled; %s of them after retries)',
			  count(*), count(*) FILTER (WHERE status = 'Succeeded'),
			  count(*) FILTER (WHERE status = 'Failed'),
			  count(*) FILTER (WHERE status = 'Cancelled'),
			  count(*) FILTER (WHERE (SELECT max(relative_attempt) FROM silo.attempts a
									  WHERE a.tenant = j.tenant AND a.job_id = j.id) > 1))
  FROM silo.jobs j WHERE task_group = :'g';
EOF
	) || die "the check of the summary failed"
	got=$(grep -E '^silo-worker: (finished|also) ' "$log")
	printf '%s\n' "$got" | sed 's/^/  /'
	case $got in
		"silo-worker: $want"*) echo "  silo.jobs agrees: $want" ;;
		*) die "the summary of $group does not match silo.jobs: $want" ;;
	esac
}

header "The workers' summaries (jobs, not attempts; the time includes the 3 s idle wait)"
check_summary demo-bulk "$DIR/worker-bulk.log"
check_summary demo "$DIR/worker-exec.log"
