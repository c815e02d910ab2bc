#!/usr/bin/env bash
# bench/cluster_overhead.sh: what cluster mode costs the hot path
# (docs/performance.md, "Cluster mode"): burn-downs on a one-node cluster
# (etcd, the coordinator, every shard owned by the one node) against a
# single-node server, both at wal_level = logical, at batch 1 and batched.
# Not part of make test; `make bench` runs it as its "cluster" workload.
#
#   bash bench/cluster_overhead.sh
#
# Both servers run at once, with the same settings but cluster mode's;
# each round drains on one and then the other (the order alternating from
# round to round), so that the machine's noise falls on both alike.  A
# drain: CO_CLIENTS pgbench clients, each transaction a lease of B tasks
# and their complete_many, until the group is empty; the jobs spread over
# 64 tenants, so a cluster's checks see every shard.  Reported: the median
# jobs per second of each server per batch size and the ratio.
#
# Environment: PGBIN, ETCD (etcd), CO_BATCHES ("1 32"), CO_CLIENTS (4),
# CO_JOBS_1 (10000: jobs per drain at batch 1), CO_JOBS (60000: batched),
# CO_REPEATS (3), KEEP=1 keeps the scratch directory.
set -euo pipefail

BATCHES=${CO_BATCHES:-1 32}
CLIENTS=${CO_CLIENTS:-4}
REPEATS=${CO_REPEATS:-3}
ETCD=${ETCD:-etcd}
ETCD_PID=

# shellcheck source=bench/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"

command -v "$ETCD" >/dev/null || {
	echo "cluster_overhead.sh: $ETCD not found (Debian package etcd-server)" >&2
	exit 1
}

# cleanup: both servers by their postmaster pids, etcd by its pid.
cleanup()
{
	local data pid
	for data in single cluster; do
		if [ -f "$DIR/$data/postmaster.pid" ]; then
			pid=$(head -1 "$DIR/$data/postmaster.pid")
			kill "$pid" 2>/dev/null || true
		fi
	done
	if [ -n "$ETCD_PID" ]; then
		kill "$ETCD_PID" 2>/dev/null || true
		wait "$ETCD_PID" 2>/dev/null || true
	fi
	sleep 1
	if [ "${KEEP:-}" = 1 ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}

# on SERVER ARGS...: psql on server single or cluster.
on()
{
	local server=$1
	shift
	as_pg "$PGBIN/psql" -h "$DIR" -p "$(port "$server")" -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"
}
port() { if [ "$1" = single ]; then echo "$PORT"; else echo $((PORT + 1)); fi; }

# wait_for SERVER SQL EXPECTED SECONDS: poll until SQL answers EXPECTED.
wait_for()
{
	local server=$1 sql=$2 want=$3 end=$(($(date +%s) + $4)) got=
	while [ "$(date +%s)" -lt "$end" ]; do
		got=$(on "$server" -c "$sql" 2>/dev/null || true)
		[ "$got" = "$want" ] && return 0
		sleep 0.2
	done
	echo "cluster_overhead.sh: $server: timed out waiting for $sql = $want (last: $got)" >&2
	exit 1
}

# enqueue SERVER GROUP N: N due jobs of GROUP over 64 tenants, 1000 per call.
enqueue()
{
	local server=$1 group=$2 n=$3 lo
	for ((lo = 1; lo <= n; lo += 1000)); do
		echo "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object("
		echo "  'task_group', '$group', 'tenant', 't' || (g % 64), 'payload', jsonb_build_object('i', g)))"
		echo "  FROM generate_series($lo, LEAST($lo + 999, $n)) g));"
	done | on "$server" >/dev/null
}

# drain SERVER GROUP BATCH N: lease and complete until the group is empty;
# prints jobs per second.
drain()
{
	local server=$1 group=$2 batch=$3 n=$4 per_client t0 t1 left
	per_client=$(((n + CLIENTS * batch - 1) / (CLIENTS * batch) + 2))
	echo "SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', '$group', $batch)), 'w');" \
		>"$DIR/drain.sql"
	chmod 644 "$DIR/drain.sql"
	t0=$(date +%s.%N)
	as_pg "$PGBIN/pgbench" -h "$DIR" -p "$(port "$server")" -n -c "$CLIENTS" -j "$CLIENTS" \
		-t "$per_client" -f "$DIR/drain.sql" postgres >"$DIR/pgbench.log" 2>&1 || {
		echo "cluster_overhead.sh: pgbench failed on $server:" >&2
		tail -5 "$DIR/pgbench.log" >&2
		exit 1
	}
	t1=$(date +%s.%N)
	left=$(on "$server" -c "SELECT count(*) FROM silo.task WHERE task_group = '$group'")
	if [ "$left" != 0 ]; then
		echo "cluster_overhead.sh: the drain of $group on $server left $left tasks" >&2
		exit 1
	fi
	echo "$n / ($t1 - $t0)" | bc -l
}

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

scratch_begin
trap cleanup EXIT
trap "exit 1" INT TERM
PORT=$((20000 + RANDOM % 20000))

"$ETCD" --name co --data-dir "$DIR/etcd" --listen-client-urls "http://127.0.0.1:$((PORT + 10))" \
	--advertise-client-urls "http://127.0.0.1:$((PORT + 10))" \
	--listen-peer-urls "http://127.0.0.1:$((PORT + 11))" \
	--initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 11))" \
	--initial-cluster "co=http://127.0.0.1:$((PORT + 11))" >"$DIR/etcd.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$((PORT + 10))/health" >/dev/null && break
	sleep 0.1
done

common=("wal_level = logical" "max_worker_processes = 16" "shared_buffers = 256MB"
	"max_wal_size = 4GB" "listen_addresses = ''")
scratch_initdb single "port = $PORT" "${common[@]}"
scratch_initdb cluster "port = $((PORT + 1))" "${common[@]}" \
	"silo.etcd_endpoints = 'http://127.0.0.1:$((PORT + 10))'" \
	"silo.node_id = 'n1'" "silo.cluster_prefix = 'overhead'" \
	"silo.advertise_conninfo = 'host=$DIR port=$((PORT + 1)) dbname=postgres'"
for server in single cluster; do
	as_pg "$PGBIN/pg_ctl" -D "$DIR/$server" -l "$DIR/$server.log" -w start >/dev/null
	on "$server" -c "CREATE EXTENSION silo CASCADE" 2>/dev/null
done
wait_for cluster "SELECT cardinality(serving_shards) FROM silo.node_info" 8 60
shards=$(on cluster -c "SELECT count(*) FROM silo.cluster_info WHERE is_local")

echo "== burn-down, one-node cluster ($shards shards, etcd) against single-node, both at wal_level = logical;" \
	"$CLIENTS clients; $REPEATS rounds per batch size"
for batch in $BATCHES; do
	if [ "$batch" = 1 ]; then n=${CO_JOBS_1:-10000}; else n=${CO_JOBS:-60000}; fi
	: >"$DIR/rates.single.$batch"
	: >"$DIR/rates.cluster.$batch"
	for ((r = 1; r <= REPEATS; r++)); do
		if ((r % 2)); then order="single cluster"; else order="cluster single"; fi
		for server in $order; do
			g=burn_${batch}_$r
			enqueue "$server" "$g" "$n"
			on "$server" -c "VACUUM ANALYZE silo.task" -c "CHECKPOINT" >/dev/null
			drain "$server" "$g" "$batch" "$n" >>"$DIR/rates.$server.$batch"
			printf 'batch %-4s run %d %-8s %8.0f jobs/s\n' "$batch" "$r" "$server" \
				"$(tail -1 "$DIR/rates.$server.$batch")"
		done
	done
	single=$(median <"$DIR/rates.single.$batch")
	cluster=$(median <"$DIR/rates.cluster.$batch")
	printf 'batch %-4s median: single-node %.0f jobs/s, one-node cluster %.0f jobs/s, ratio %.3f\n' \
		"$batch" "$single" "$cluster" "$(echo "$cluster / $single" | bc -l)"
done
