#!/usr/bin/env bash
# bench/fairness.sh: fair dispatch across tenants (docs/api.md, "Fair
# dispatch"), measured on a throwaway cluster.  Not part of make test.
#
#   bash bench/fairness.sh
#
# 1. Starvation.  One task group, tenant "big" with FAIR_BIG due jobs
#    enqueued first, tenant "small" with FAIR_SMALL after them; FAIR_CLIENTS
#    pgbench clients lease FAIR_BATCH tasks at a time and complete them
#    until the group is drained.  Reported: how many tasks had been leased
#    when the last of small's jobs started (its attempt's started_at), with
#    the group's fairness 'none' and 'round_robin'.
# 2. Cost.  A group with one tenant and FAIR_BURN_JOBS due jobs, drained the
#    same way, FAIR_REPEATS times with each setting, alternating; reported:
#    the median jobs per second of each and their ratio.
#
# Environment: PGBIN, FAIR_BIG (100000), FAIR_SMALL (100), FAIR_CLIENTS (4),
# FAIR_BATCH (32), FAIR_BURN_JOBS (100000), FAIR_REPEATS (3), KEEP=1 keeps
# the scratch directory.
set -euo pipefail

BIG=${FAIR_BIG:-100000}
SMALL=${FAIR_SMALL:-100}
CLIENTS=${FAIR_CLIENTS:-4}
BATCH=${FAIR_BATCH:-32}
BURN_JOBS=${FAIR_BURN_JOBS:-100000}
REPEATS=${FAIR_REPEATS:-3}

# shellcheck source=bench/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"

# enqueue GROUP TENANT N: N due jobs of TENANT in GROUP, 1000 per call.
enqueue()
{
	local group=$1 tenant=$2 n=$3 lo
	for ((lo = 1; lo <= n; lo += 1000)); do
		echo "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object("
		echo "  'task_group', '$group', 'tenant', '$tenant', 'payload', jsonb_build_object('i', g)))"
		echo "  FROM generate_series($lo, LEAST($lo + 999, $n)) g));"
	done | psql_ >/dev/null
}

# drain GROUP JOBS: lease and complete until GROUP has no task left;
# prints the seconds it took.
drain()
{
	local group=$1 jobs=$2 per_client t0 t1
	per_client=$(((jobs + CLIENTS * BATCH - 1) / (CLIENTS * BATCH) + 2))
	echo "SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', '$group', $BATCH)), 'w');" \
		>"$DIR/drain.sql"
	chmod 644 "$DIR/drain.sql"
	t0=$(date +%s.%N)
	as_pg "$PGBIN/pgbench" -h "$DIR" -n -c "$CLIENTS" -j "$CLIENTS" -t "$per_client" \
		-f "$DIR/drain.sql" postgres >"$DIR/pgbench.log" 2>&1
	t1=$(date +%s.%N)
	left=$(psql_ -c "SELECT count(*) FROM silo.task WHERE task_group = '$group'")
	if [ "$left" != 0 ]; then
		echo "drain of $group left $left tasks" >&2
		exit 1
	fi
	echo "$t1 - $t0" | bc -l
}

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

scratch_begin
scratch_initdb data "max_connections = 50"
scratch_start data
psql_ -c "CREATE EXTENSION silo CASCADE" 2>/dev/null

echo "== starvation: $BIG jobs of big, then $SMALL of small; $CLIENTS clients x batch $BATCH"
printf '%-12s %s\n' fairness "tasks leased when small's last job started"
for mode in none round_robin; do
	g=starve_$mode
	psql_ -c "SELECT silo.configure_task_group('$g', '$mode')" >/dev/null
	enqueue "$g" "big_$mode" "$BIG"
	enqueue "$g" "small_$mode" "$SMALL"
	psql_ -c "VACUUM ANALYZE silo.task" >/dev/null
	drain "$g" $((BIG + SMALL)) >/dev/null
	rank=$(psql_ -c "SELECT count(*) FROM silo.attempt
	                  WHERE tenant IN ('big_$mode', 'small_$mode')
	                    AND started_at <= (SELECT max(started_at) FROM silo.attempt
	                                        WHERE tenant = 'small_$mode')")
	printf '%-12s %s\n' "$mode" "$rank"
done

echo "== cost: one tenant, $BURN_JOBS jobs, $CLIENTS clients x batch $BATCH, $REPEATS runs each"
: >"$DIR/rates.none"
: >"$DIR/rates.round_robin"
for ((r = 1; r <= REPEATS; r++)); do
	for mode in none round_robin; do
		g=burn_${mode}_$r
		psql_ -c "SELECT silo.configure_task_group('$g', '$mode')" >/dev/null
		enqueue "$g" solo "$BURN_JOBS"
		psql_ -c "VACUUM ANALYZE silo.task" -c "CHECKPOINT" >/dev/null
		s=$(drain "$g" "$BURN_JOBS")
		echo "$BURN_JOBS / $s" | bc -l >>"$DIR/rates.$mode"
		printf 'run %d %-12s %8.0f jobs/s\n' "$r" "$mode" "$(tail -1 "$DIR/rates.$mode")"
	done
done
off=$(median <"$DIR/rates.none")
on=$(median <"$DIR/rates.round_robin")
printf 'median: none %.0f jobs/s, round_robin %.0f jobs/s, ratio %.2f\n' "$off" "$on" \
	"$(echo "$on / $off" | bc -l)"
