#!/usr/bin/env bash
# bench/clients.sh: jobs/s of a no-op handler through the Node client's
# SiloWorker (clients/node) against the reference worker tools/silo-worker,
# with the same concurrency, lease batch size and completion batching
# (silo.complete_many per batch), in one run on one cluster.  Not part of
# "make test" or "make bench"; docs/clients.md has the figures.
#
#   bash bench/clients.sh
#
# Environment (all optional):
#   CLIENTS_JOBS         jobs drained per round (default 20000)
#   CLIENTS_CONCURRENCY  --concurrency / concurrency (default 32)
#   CLIENTS_BATCH        --batch / batchSize (default 32)
#   CLIENTS_ROUNDS       rounds per worker, taken in the order C N N C C N ...
#                        so that drift hits both alike (default 3)
#   CLIENTS_NODE_POOL    also run the Node worker with this poolSize (e.g. 1:
#                        its lease and its completions then share one
#                        connection, as the C worker's do; default: no)
#
# Each round enqueues CLIENTS_JOBS jobs into a task group of its own (one
# silo.enqueue_many per 5000), checkpoints, and drains the group with one
# worker process.  Its rate is jobs / (last attempt's finished_at - first
# attempt's started_at), read from the tables silo.attempt and
# silo.job_info (as the superuser: silo.attempts and silo.jobs, security
# barrier views, took a minute and more to join once the rounds' jobs added
# up, all of it under the install lock): the same clock and the same span
# for both workers, without process start-up.  The cluster runs
# with durable settings (fsync and synchronous_commit on), as bench/run.sh's
# does, on a unix socket in a mktemp directory; it is stopped by its pid.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
JOBS=${CLIENTS_JOBS:-20000}
CONC=${CLIENTS_CONCURRENCY:-32}
BATCH=${CLIENTS_BATCH:-32}
ROUNDS=${CLIENTS_ROUNDS:-3}
NODE_POOL=${CLIENTS_NODE_POOL:-}

log() { printf '== %s\n' "$*" >&2; }

# shellcheck source=../clients/test-cluster.sh
. "$ROOT/clients/test-cluster.sh"

DIR=
cleanup()
{
	cluster_stop
	[ -n "$DIR" ] && rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What the run needs: silo built and installed, tools/silo-worker, the
# Node package.  (tools/ensure-deps.sh installs the Debian packages.)
if [ ! -x "$ROOT/tools/silo-worker" ]; then
	log "building tools/silo-worker"
	make -C "$ROOT" tools/silo-worker >/dev/null || exit 1
fi
log "building clients/node"
"$ROOT/clients/node/build.sh" || exit 1

DIR=$(mktemp -d /tmp/silo-bench-clients.XXXXXX) || exit 1
log "cluster in $DIR"
cluster_start "$DIR" "shared_buffers = 512MB" "max_wal_size = 4GB" "fsync = on" \
	"synchronous_commit = on" "full_page_writes = on" || exit 1
DSN="host=$DIR user=postgres dbname=postgres"

# round KIND N: enqueue, drain with worker KIND (c, node, node-poolN), print
# "KIND rate jobs seconds"
round()
{
	local kind=$1 n=$2 group="bench_${1//-/_}_$2" left=$JOBS chunk out
	while [ "$left" -gt 0 ]; do
		chunk=$((left < 5000 ? left : 5000))
		cluster_psql -c "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object('task_group', '$group')) FROM generate_series(1, $chunk)))" >/dev/null || return 1
		left=$((left - chunk))
	done
	cluster_psql -c "CHECKPOINT" >/dev/null
	case $kind in
		c)
			out=$("$ROOT/tools/silo-worker" --dsn "$DSN" --task-group "$group" --worker-id "c-$n" \
				--concurrency "$CONC" --batch "$BATCH" --lease-ms 30000 --max-jobs "$JOBS" \
				--exit-when-idle 2000 -q 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
			;;
		node*)
			local pool=
			[ "$kind" != node ] && pool=${kind#node-pool}
			out=$(node "$ROOT/bench/node-noop.mjs" "$CLUSTER_URL" "$group" "$JOBS" "$CONC" "$BATCH" \
				$pool 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
			;;
	esac
	log "$kind round $n: $out"
	cluster_psql -F ' ' -c "SELECT '$kind', round(count(*) / extract(epoch FROM max(a.finished_at) - min(a.started_at)), 1),
		count(*), round(extract(epoch FROM max(a.finished_at) - min(a.started_at)), 3)
		FROM silo.attempt a JOIN silo.job_info j ON j.tenant = a.tenant AND j.id = a.job_id
		WHERE j.task_group = '$group' AND a.status = 'Succeeded'"
}

kinds=(c node)
[ -n "$NODE_POOL" ] && kinds+=("node-pool$NODE_POOL")
results=$DIR/results.txt
: >"$results"
for ((r = 1; r <= ROUNDS; r++)); do
	order=("${kinds[@]}")
	if [ $((r % 2)) -eq 0 ]; then
		order=()
		for ((i = ${#kinds[@]} - 1; i >= 0; i--)); do order+=("${kinds[$i]}"); done
	fi
	for k in "${order[@]}"; do
		round "$k" "$r" >>"$results" || { log "round $k $r failed"; exit 1; }
	done
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "bench/clients.sh: $JOBS no-op jobs per round, concurrency $CONC, lease batch $BATCH," \
	"completions batched (silo.complete_many), $ROUNDS rounds each, $(nproc) vCPU," \
	"PostgreSQL $(cluster_psql -c 'SHOW server_version'), silo $(cluster_psql -c "SELECT extversion FROM pg_extension WHERE extname = 'silo'")," \
	"node $(node --version)"
printf '%-12s %10s   %s\n' worker 'jobs/s' 'rounds (jobs/s)'
declare -A med
for k in "${kinds[@]}"; do
	med[$k]=$(awk -v k="$k" '$1 == k { print $2 }' "$results" | median)
	printf '%-12s %10s   %s\n' "$k" "${med[$k]}" "$(awk -v k="$k" '$1 == k { printf "%s ", $2 }' "$results")"
done
for k in "${kinds[@]}"; do
	[ "$k" = c ] && continue
	awk -v a="${med[$k]}" -v b="${med[c]}" -v k="$k" \
		'BEGIN { printf "ratio %s / c: %.2f (target >= 0.5)\n", k, a / b }'
done
