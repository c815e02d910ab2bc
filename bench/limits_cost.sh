#!/usr/bin/env bash
# bench/limits_cost.sh: the throughput cost of concurrency limits against
# jobs without limits, measured in one run on one throwaway cluster.
#
#   bash bench/limits_cost.sh [JOBS] [ROUNDS]      (default 20000 jobs, 3 rounds)
#
# Starts its own PostgreSQL 15 cluster (durable: fsync and synchronous_commit
# on, broker running) on a unix socket in a scratch directory, installs
# nothing (run `make install` first), and stops the cluster by its pid at
# the end.  Each round, per workload: enqueue JOBS jobs (enqueue_many, 500
# per call), wait for the broker to walk any deferred chain task, then drain
# with pgbench, 4 clients, each transaction leasing 32 jobs and completing
# them.  The rate is jobs / (last attempt's end - first attempt's start) as
# the database recorded them.  Workloads:
#   none    no limits
#   k100k   one concurrency key per job out of 100,000, max 1
#   k1k     one key out of 1,000, max 10
#   hot     one key for every job, max 50
# Prints one line per round and workload, then the medians and their
# ratios to "none".  Not part of make test.
set -euo pipefail

JOBS=${1:-20000}
ROUNDS=${2:-3}
PGBIN=/usr/lib/postgresql/15/bin
AS=()
[ "$(id -u)" = 0 ] && AS=(runuser -u postgres --)
DIR=$(mktemp -d /tmp/silo-bench-limits.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
PORT=55491

cleanup()
{
	if [ -f "$DIR/data/postmaster.pid" ]; then
		kill -INT "$(head -1 "$DIR/data/postmaster.pid")" 2>/dev/null || true
		for _ in $(seq 1 100); do [ -f "$DIR/data/postmaster.pid" ] || break; sleep 0.1; done
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

"${AS[@]}" "$PGBIN/initdb" -D "$DIR/data" -A trust >/dev/null
cat >> "$DIR/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
shared_buffers = 512MB
max_wal_size = 4GB
fsync = on
synchronous_commit = on
EOF
"${AS[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w start >/dev/null
psql() { "${AS[@]}" "$PGBIN/psql" -h "$DIR" -p "$PORT" -X -q -v ON_ERROR_STOP=1 "$@" postgres; }
psql -c "CREATE EXTENSION silo CASCADE" 2>/dev/null
echo "SELECT count(silo.complete(task_id, 'w' || :client_id)) FROM silo.lease('w' || :client_id, 'bench', 32);" > "$DIR/burn.sql"
chmod 644 "$DIR/burn.sql"

limits_of()
{
	case $1 in
		none) echo "'[]'::jsonb" ;;
		k100k) echo "jsonb_build_array(jsonb_build_object('type','concurrency','key','k'||(random()*100000)::int,'maxConcurrency',1))" ;;
		k1k) echo "jsonb_build_array(jsonb_build_object('type','concurrency','key','k'||(random()*1000)::int,'maxConcurrency',10))" ;;
		hot) echo "jsonb_build_array(jsonb_build_object('type','concurrency','key','hot','maxConcurrency',50))" ;;
	esac
}

run_one()
{
	local mode=$1 b left
	psql -c "TRUNCATE silo.job_info, silo.job_status, silo.task, silo.task_lease, silo.attempt,
	         silo.job_metadata, silo.chain_task, silo.concurrency_request, silo.concurrency_holder,
	         silo.concurrency_regrant, silo.floating_limit, silo.rate_limit_bucket"
	for b in $(seq 1 $((JOBS / 500))); do
		psql -c "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
		         'task_group', 'bench', 'limits', $(limits_of "$mode"))) FROM generate_series(1, 500)))" >/dev/null
	done
	until [ "$(psql -tAc 'SELECT count(*) FROM silo.chain_task')" = 0 ]; do sleep 0.2; done
	psql -c "VACUUM ANALYZE"
	while :; do
		"${AS[@]}" "$PGBIN/pgbench" -h "$DIR" -p "$PORT" -n -c 4 -j 2 -T 3 -f "$DIR/burn.sql" postgres >/dev/null 2>&1 || true
		left=$(psql -tAc "SELECT count(*) FROM silo.job_status WHERE status = 'Pending'")
		[ "$left" = 0 ] && break
	done
	psql -tAc "SELECT round(count(*) / extract(epoch FROM max(finished_at) - min(started_at)))
	           FROM silo.attempt WHERE status = 'Succeeded'"
}

declare -A rates
for r in $(seq 1 "$ROUNDS"); do
	for m in none k100k k1k hot; do
		rate=$(run_one "$m")
		rates[$m]="${rates[$m]:-} $rate"
		printf 'round %d  %-6s %8s jobs/s\n' "$r" "$m" "$rate"
	done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(echo "${rates[none]}" | median)
echo
printf '%-6s %12s %8s\n' workload 'median/s' ratio
for m in none k100k k1k hot; do
	med=$(echo "${rates[$m]}" | median)
	printf '%-6s %12s %8s\n' "$m" "$med" "$(awk -v a="$med" -v b="$base" 'BEGIN {printf "%.2f", a / b}')"
done
echo "deadlocks in the server log: $(grep -c 'deadlock detected' "$DIR/log" || true)"
