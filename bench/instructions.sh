#!/usr/bin/env bash
# bench/instructions.sh: instructions per job, counted by valgrind, for silo
# (a lease of 128 and complete_many of the 128) and for the bare queue (a
# DELETE of 128 claimed rows), on queues of 200,000 jobs.  Instruction
# counts do not move with the load of a shared machine, so one change can be
# judged by them where a rate would drown in noise (docs/performance.md,
# "How to measure").
#
#   bash bench/instructions.sh            # both systems
#   bash bench/instructions.sh silo       # one
#   bash bench/instructions.sh silo silo-k100k   # and silo with limits (below)
#   bash bench/instructions.sh silo-enqueue      # enqueues of 128 jobs
#
# silo-k100k is silo with one concurrency limit per job, its key one of
# 100,000 (max 1), over LIMIT_JOBS (20000) jobs, as the benchmark's limits
# workload.
#
# Environment: PGBIN (default /usr/lib/postgresql/15/bin), JOBS (200000),
# KEEP=1 keeps the scratch directory (and its callgrind.out files, for
# callgrind_annotate).
#
# Method: `postgres --single` runs 10, then 30, copies of one statement
# under callgrind, each from a copy of the same filled data directory; the
# difference of the two totals divided by the 20 x 128 jobs in between is
# the cost per job, with start-up and cold caches cancelled out.

set -euo pipefail

JOBS=${JOBS:-200000}
SYSTEMS=${*:-silo bare}

# shellcheck source=bench/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"

if ! command -v valgrind >/dev/null 2>&1; then
	DEBIAN_FRONTEND=noninteractive apt-get -q -y install valgrind >/dev/null
fi

# The filled template: silo with JOBS due jobs of one group, and the bare
# queue's table with JOBS rows; vacuumed, analyzed and checkpointed.
scratch_begin
scratch_initdb tmpl "autovacuum = off"
scratch_start tmpl
psql_ -c "CREATE EXTENSION silo CASCADE" 2>/dev/null
psql_ -c "CREATE TABLE bench_bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL,
                                   run_at timestamptz NOT NULL DEFAULT now())"
for ((lo = 1; lo <= JOBS; lo += 1000)); do
	echo "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object("
	echo "  'task_group', 'bench', 'payload', jsonb_build_object('i', g)))"
	echo "  FROM generate_series($lo, LEAST($lo + 999, $JOBS)) g));"
done | psql_ >/dev/null
psql_ -c "INSERT INTO bench_bare (payload) SELECT jsonb_build_object('i', g)
          FROM generate_series(1, $JOBS) g"
if [[ " $SYSTEMS " == *" silo-k100k "* ]]; then
	# the limits workload's k100k mode: a concurrency key out of 100,000,
	# max 1, chosen at random (seeded), for LIMIT_JOBS jobs of their own group
	psql_ -c "SELECT setseed(0.5)" \
		-c "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
			  'task_group', 'limited', 'payload', jsonb_build_object('k', k),
			  'limits', jsonb_build_array(jsonb_build_object('type', 'concurrency',
			  'key', 'k' || k, 'maxConcurrency', 1))))
			  FROM (SELECT floor(random() * 100000)::int AS k
					  FROM generate_series(1, ${LIMIT_JOBS:-20000})) g))" >/dev/null
	# the broker walks the limit chains: the template is taken only once
	# every job has its task or waits on its key, or the runs would lease
	# from however many walks it finished before the stop
	deadline=$((SECONDS + 600))
	until [[ $(psql_ -c "SELECT count(*) FROM silo.chain_task") == 0 ]]; do
		if ((SECONDS > deadline)); then
			echo "instructions.sh: the broker did not walk the limit chains within 10 minutes" >&2
			exit 1
		fi
		sleep 1
	done
fi
psql_ -c "VACUUM ANALYZE" -c "CHECKPOINT"
scratch_stop tmpl

# count SYSTEM N: total instructions of N statements in a fresh copy.
count()
{
	local system=$1 n=$2 stmt i
	case $system in
		silo) stmt="SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'bench', 128)), 'w');" ;;
		bare) stmt="BEGIN; DELETE FROM bench_bare WHERE id = ANY(ARRAY(SELECT id FROM bench_bare WHERE run_at <= now() ORDER BY id LIMIT 128 FOR UPDATE SKIP LOCKED)); COMMIT;" ;;
		silo-k100k) stmt="SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id) FROM silo.lease('w', 'limited', 128)), 'w');" ;;
		silo-enqueue) stmt="SELECT count(silo.enqueue('enq', jsonb_build_object('i', g))) FROM generate_series(1, 128) g;" ;;
		*) echo "unknown system $system" >&2; exit 2 ;;
	esac
	rm -rf "$DIR/run"
	cp -a "$DIR/tmpl" "$DIR/run"
	for ((i = 0; i < n; i++)); do echo "$stmt"; done >"$DIR/stmts.sql"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$DIR/callgrind.out.$system.$n" \
		"$PGBIN/postgres" --single -D "$DIR/run" postgres <"$DIR/stmts.sql" \
		>"$DIR/out.$system.$n" 2>"$DIR/valgrind.$system.$n"
	# every statement of a silo system must have handled its 128 jobs: a run
	# that ran dry would count fewer jobs than it divides by
	if [[ $system != bare ]] &&
		[[ $(grep -c 'count = "128"' "$DIR/out.$system.$n") != "$n" ]]; then
		echo "instructions.sh: $system: not every statement of the $n-statement run handled 128 jobs" \
			"(see $DIR/out.$system.$n; set KEEP=1 to keep it)" >&2
		exit 1
	fi
	grep -E '^(summary|totals):' "$DIR/callgrind.out.$system.$n" | head -1 | awk '{print $2}'
}

for s in $SYSTEMS; do
	a=$(count "$s" 10)
	b=$(count "$s" 30)
	printf '%s: %d instructions per job\n' "$s" $(((b - a) / 2560))
done
