#!/usr/bin/env bash
# bench/clients_python.sh: jobs/s of a no-op handler through the Python
# client's workers (clients/python: AsyncSiloWorker with a coroutine handler,
# SiloWorker with a thread handler) and, if it has been built, the reference
# worker tools/silo-worker, with the same concurrency, lease batch size and
# completion batching (silo.complete_many per batch), on one cluster.  Not
# part of "make test" or "make bench"; builds nothing (bench/clients.sh
# measures the Node client the same way).
#
#   bash bench/clients_python.sh
#
# Environment (all optional):
#   CLIENTS_JOBS         jobs drained per round (default 10000)
#   CLIENTS_CONCURRENCY  --concurrency / concurrency (default 32)
#   CLIENTS_BATCH        --batch / batch_size (default 32)
#   CLIENTS_ROUNDS       rounds per worker, taken in alternating order so that
#                        drift hits all alike (default 1)
#   SILO_PYTHON          the interpreter (default /usr/bin/python3, which sees
#                        Debian's python3-psycopg)
#
# Each round enqueues CLIENTS_JOBS jobs into a task group of its own (one
# silo.enqueue_many per 5000), checkpoints, and drains the group with one
# worker process.  Its rate is jobs / (last attempt's finished_at - first
# attempt's started_at), read from the tables silo.attempt and silo.job_info
# (as the superuser; the views silo.attempts and silo.jobs are security
# barriers, slow to join): the same clock and span for every worker, without
# process start-up.  The cluster runs with durable
# settings (fsync and synchronous_commit on), on a unix socket in a mktemp
# directory, and is stopped by its pid.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
JOBS=${CLIENTS_JOBS:-10000}
CONC=${CLIENTS_CONCURRENCY:-32}
BATCH=${CLIENTS_BATCH:-32}
ROUNDS=${CLIENTS_ROUNDS:-1}
PY=${SILO_PYTHON:-/usr/bin/python3}

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

"$PY" -c 'import psycopg' || { log "$PY cannot import psycopg (apt-get install python3-psycopg)"; exit 1; }
kinds=(py-async py-sync)
if [ -x "$ROOT/tools/silo-worker" ]; then
	kinds=(c "${kinds[@]}")
else
	log "tools/silo-worker is not built: measuring the Python workers only"
fi

DIR=$(mktemp -d /tmp/silo-bench-clients-python.XXXXXX) || exit 1
log "cluster in $DIR"
cluster_start "$DIR" "shared_buffers = 512MB" "max_wal_size = 4GB" "fsync = on" \
	"synchronous_commit = on" "full_page_writes = on" || exit 1
DSN="host=$DIR user=postgres dbname=postgres"

# round KIND N: enqueue, drain with worker KIND, print "KIND rate jobs seconds"
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
		py-*)
			out=$("$PY" "$ROOT/bench/python-noop.py" "$CLUSTER_URL" "$group" "$JOBS" "$CONC" "$BATCH" \
				"${kind#py-}" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
			;;
	esac
	log "$kind round $n: $out"
	cluster_psql -F ' ' -c "SELECT '$kind', round(count(*) / extract(epoch FROM max(a.finished_at) - min(a.started_at)), 1),
		count(*), round(extract(epoch FROM max(a.finished_at) - min(a.started_at)), 3)
		FROM silo.attempt a JOIN silo.job_info j ON j.tenant = a.tenant AND j.id = a.job_id
		WHERE j.task_group = '$group' AND a.status = 'Succeeded'"
}

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

echo "bench/clients_python.sh: $JOBS no-op jobs per round, concurrency $CONC, lease batch $BATCH," \
	"completions batched (silo.complete_many), $ROUNDS rounds each, $(nproc) vCPU," \
	"PostgreSQL $(cluster_psql -c 'SHOW server_version'), silo $(cluster_psql -c "SELECT extversion FROM pg_extension WHERE extname = 'silo'")," \
	"$("$PY" --version), psycopg $("$PY" -c 'import psycopg; print(psycopg.__version__)')"
printf '%-12s %10s   %s\n' worker 'jobs/s' 'rounds (jobs/s)'
declare -A med
for k in "${kinds[@]}"; do
	med[$k]=$(awk -v k="$k" '$1 == k { print $2 }' "$results" | median)
	printf '%-12s %10s   %s\n' "$k" "${med[$k]}" "$(awk -v k="$k" '$1 == k { printf "%s ", $2 }' "$results")"
done
if [ -n "${med[c]:-}" ]; then
	for k in "${kinds[@]}"; do
		[ "$k" = c ] && continue
		awk -v a="${med[$k]}" -v b="${med[c]}" -v k="$k" 'BEGIN { printf "ratio %s / c: %.2f\n", k, a / b }'
	done
fi
