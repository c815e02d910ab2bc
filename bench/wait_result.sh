#!/usr/bin/env bash
# bench/wait_result.sh: what idle silo.wait_result waiters cost a burn-down
# (docs/performance.md, "Waiting for results"), measured on a throwaway
# cluster.  Not part of make test.
#
#   bash bench/wait_result.sh
#
# A burn-down: WR_JOBS due jobs drained by WR_CLIENTS pgbench clients, each
# transaction a lease of WR_BATCH tasks and their complete_many.  Every
# drain starts from the same state: the queue's tables truncated, the
# WR_JOBS jobs and WR_WAITERS jobs of another task group (the waiters'
# jobs, enqueued in every mode) enqueued, the database vacuumed and
# analyzed, a checkpoint.  Each of WR_REPEATS rounds drains three times,
# in an order that turns from round to round (the first round's is this
# one):
#
#   without   nothing else connected
#   waiters   WR_WAITERS sessions asleep in CALL silo.wait_result on jobs
#             of their own that never end (another task group, never
#             leased; timeout 1 hour)
#   idle      the control: WR_WAITERS connections that are merely idle
#             (pgbench sleeping client-side), so that what a waiter costs
#             can be told from what a connection costs
#   any       the same WR_WAITERS jobs awaited by WR_ANY_SESSIONS sessions,
#             each asleep in one CALL silo.wait_any on its share of them
#             (what a client library that gathers its callers' awaits
#             does)
#   node      WR_WAITERS concurrent awaitResult calls of one Node SiloClient
#             (clients/node, built by clients/node/build.sh; bench/node-await.mjs),
#             which the client gathers onto one session in silo.wait_any
#
# The waiters are one pgbench run of WR_WAITERS clients, started before the
# drain and ended after it by one transaction that cancels their jobs.  A
# drain with waiters or idle connections starts once they have used no
# CPU for a whole second (settle).
# Reported: each drain's jobs per second and the CPU the cluster used
# during it (in all, and the part of it the WR_WAITERS other backends
# used: /proc's utime and stime of the postmaster's children, with the
# exited ones' through the postmaster's cutime and cstime); the median,
# lowest and highest jobs per second of each mode and the ratios of the
# medians to "without"; the load average (uptime) before and after; that
# every waiter was asleep with backend_xmin and
# backend_xid NULL before and after each drain; and how long after the one
# statement that ends the waiters' jobs (its commit included) they
# resumed: each records the time in a table right after its CALL returns
# (an unlogged insert without a WAL flush; median and slowest).
#
# max_connections is WR_WAITERS + WR_CLIENTS + 30 (the broker, pg_cron, the
# script's own psql): a waiter is a backend.
#
# Mode node needs node and clients/node built (bash clients/node/build.sh).
# Environment: PGBIN, WR_WAITERS (1000), WR_JOBS (60000), WR_CLIENTS (4),
# WR_BATCH (32), WR_REPEATS (5), WR_MODES ("without waiters idle any node"),
# WR_ANY_SESSIONS (4), KEEP=1 keeps the scratch directory;
# WR_HUGE_PAGES=on runs the cluster with huge_pages = on (default off, not
# PostgreSQL's 'try', which would use them wherever some are reserved; reserve them
# first: sysctl vm.nr_hugepages=N, N at least the cluster's
# shared_memory_size_in_huge_pages, which the script prints; about 300 with
# the defaults here); WR_PERF=DIR records each drain with "perf record -a
# -g" into DIR/perf.MODE.ROUND.
set -euo pipefail

WAITERS=${WR_WAITERS:-1000}
JOBS=${WR_JOBS:-60000}
CLIENTS=${WR_CLIENTS:-4}
BATCH=${WR_BATCH:-32}
REPEATS=${WR_REPEATS:-5}
MODES=${WR_MODES:-without waiters idle any node}
ANY_SESSIONS=${WR_ANY_SESSIONS:-4}
ANY_PIDS=()
WAITER_PID=
PERF_PID=

# shellcheck source=bench/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"

# enqueue GROUP N PREFIX: N due jobs in GROUP, ids PREFIX1..PREFIXn, 1000
# per call.
enqueue()
{
	local group=$1 n=$2 prefix=$3 lo
	for ((lo = 1; lo <= n; lo += 1000)); do
		echo "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object("
		echo "  'task_group', '$group', 'id', '$prefix' || g, 'payload', jsonb_build_object('i', g)))"
		echo "  FROM generate_series($lo, LEAST($lo + 999, $n)) g));"
	done | psql_ >/dev/null
}

# asleep: "waiting/no-xmin" for the backends in silo.wait_result.
asleep()
{
	psql_ -c "SELECT count(*) FILTER (WHERE wait_event = 'Extension') || '/' ||
	                 count(*) FILTER (WHERE backend_xmin IS NULL AND backend_xid IS NULL)
	            FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_result%' AND state = 'active'"
}

# backends_gone: wait until the previous phase's backends have exited; a
# thousand new connections would otherwise meet "too many clients" while
# they are still leaving, and pgbench would drop those clients.
backends_gone()
{
	local deadline=$((SECONDS + 300))
	until [ "$(psql_ -c "SELECT count(*) < 10 FROM pg_stat_activity
	                      WHERE backend_type = 'client backend'")" = t ]; do
		if ((SECONDS > deadline)); then
			echo "the previous phase's backends did not exit" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# start_waiters R: WAITERS sessions wait for jobs idle-R-1 .. idle-R-n
# (enqueued by fresh_state, in a group nobody leases), all asleep before
# it returns.
start_waiters()
{
	local r=$1 deadline
	psql_ -c "TRUNCATE bench_woken"
	{
		echo "SET synchronous_commit = off;"
		echo "CALL silo.wait_result('idle-$r-' || :client_id + 1, '-', interval '1 hour');"
		echo "INSERT INTO bench_woken VALUES (clock_timestamp());"
	} >"$DIR/wait.sql"
	chmod 644 "$DIR/wait.sql"
	# a connection is a file: raise this process's limit (as root, or
	# within the user's hard limit), and connect as postgres
	(
		ulimit -n $((WAITERS + 100)) 2>/dev/null || true
		exec "$PGBIN/pgbench" -h "$DIR" -U postgres -n -c "$WAITERS" -j 20 -t 1 \
			-f "$DIR/wait.sql" postgres
	) >"$DIR/waiters.log" 2>&1 &
	WAITER_PID=$!
	deadline=$((SECONDS + 300))
	until [ "$(asleep)" = "$WAITERS/$WAITERS" ]; do
		if ((SECONDS > deadline)); then
			echo "the waiters did not fall asleep: $(asleep)" >&2
			cat "$DIR/waiters.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# stop_waiters R: end the waiters' jobs in one transaction; appends to
# $DIR/wakes "median slowest": seconds from the end of that statement to
# the waiters' resumption.  (Not in a subshell: it waits for the waiters'
# pgbench, a child of this shell.)
stop_waiters()
{
	local r=$1 t_end
	t_end=$(psql_ -c "SELECT count(silo.cancel(id)), clock_timestamp() FROM silo.jobs
	                   WHERE tenant = '-' AND id LIKE 'idle-$r-%'" | cut -d'|' -f2)
	wait "$WAITER_PID"
	WAITER_PID=
	if ! grep -q "number of transactions actually processed: $WAITERS/$WAITERS" "$DIR/waiters.log"; then
		echo "not every waiter returned normally:" >&2
		cat "$DIR/waiters.log" >&2
		exit 1
	fi
	psql_ -c "SELECT extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY at) - '$t_end'),
	                 extract(epoch FROM max(at) - '$t_end') FROM bench_woken" |
		tr '|' ' ' >>"$DIR/wakes"
}

# start_any R: ANY_SESSIONS sessions, each asleep in one CALL
# silo.wait_any on its share of the jobs idle-R-1 .. idle-R-n.
start_any()
{
	local r=$1 s lo hi ids deadline
	psql_ -c "TRUNCATE bench_woken"
	for ((s = 0; s < ANY_SESSIONS; s++)); do
		lo=$((s * WAITERS / ANY_SESSIONS + 1))
		hi=$(((s + 1) * WAITERS / ANY_SESSIONS))
		ids=$(seq -f "idle-$r-%.0f" "$lo" "$hi" | paste -sd,)
		as_pg "$PGBIN/psql" -h "$DIR" -X -q -At -v ON_ERROR_STOP=1 postgres \
			-c "SET synchronous_commit = off" \
			-c "CALL silo.wait_any('{$ids}', '-', interval '1 hour')" \
			-c "INSERT INTO bench_woken VALUES (clock_timestamp())" >>"$DIR/any.log" 2>&1 &
		ANY_PIDS+=($!)
	done
	deadline=$((SECONDS + 300))
	until [ "$(psql_ -c "SELECT count(*) FILTER (WHERE wait_event = 'Extension' AND backend_xmin IS NULL
	                                                 AND backend_xid IS NULL)
	                      FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_any%'")" = "$ANY_SESSIONS" ]; do
		if ((SECONDS > deadline)); then
			echo "the wait_any sessions did not fall asleep" >&2
			cat "$DIR/any.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# start_node R: one Node client awaiting the jobs idle-R-1 .. idle-R-n.
start_node()
{
	local r=$1 deadline
	: >"$DIR/node.log"
	chmod 666 "$DIR/node.log"
	node "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/node-await.mjs" \
		"postgresql://postgres@/postgres?host=$DIR" "idle-$r-" "$WAITERS" >>"$DIR/node.log" 2>&1 &
	ANY_PIDS=($!)
	deadline=$((SECONDS + 300))
	until grep -q '^waiting' "$DIR/node.log" && [ "$(psql_ -c "SELECT count(*) FROM pg_stat_activity
	        WHERE query LIKE 'CALL silo.wait_any%' AND wait_event = 'Extension'
	          AND application_name = 'bench-await'")" = 1 ]; do
		if ((SECONDS > deadline)); then
			echo "the Node client's awaits did not fall asleep" >&2
			cat "$DIR/node.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# stop_node R: end the jobs in one transaction; appends to $DIR/wakes.node
# the seconds until the Node client had all its awaits back (twice: the
# format of the other wakes files).
stop_node()
{
	local r=$1 t0 t1
	psql_ -c "SELECT count(silo.cancel(id)) FROM silo.jobs WHERE tenant = '-' AND id LIKE 'idle-$r-%'" >/dev/null
	t0=$(date +%s.%N)
	if ! wait "${ANY_PIDS[0]}"; then
		echo "the Node client failed:" >&2
		cat "$DIR/node.log" >&2
		exit 1
	fi
	t1=$(date +%s.%N)
	ANY_PIDS=()
	grep -q "^returned $WAITERS\$" "$DIR/node.log" || { cat "$DIR/node.log" >&2; exit 1; }
	echo "$(echo "$t1 - $t0" | bc -l) $(echo "$t1 - $t0" | bc -l)" >>"$DIR/wakes.node"
}

# stop_any R: end the jobs in one transaction, as stop_waiters does.
stop_any()
{
	local r=$1 t_end p
	t_end=$(psql_ -c "SELECT count(silo.cancel(id)), clock_timestamp() FROM silo.jobs
	                   WHERE tenant = '-' AND id LIKE 'idle-$r-%'" | cut -d'|' -f2)
	for p in "${ANY_PIDS[@]}"; do
		if ! wait "$p"; then
			echo "a wait_any session failed:" >&2
			cat "$DIR/any.log" >&2
			exit 1
		fi
	done
	ANY_PIDS=()
	psql_ -c "SELECT extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY at) - '$t_end'),
	                 extract(epoch FROM max(at) - '$t_end') FROM bench_woken" |
		tr '|' ' ' >>"$DIR/wakes.any"
}

# start_idle / stop_idle: the control, WAITERS connections that are idle
# (the client sleeps between two statements) during the drain.
start_idle()
{
	local deadline
	# (pgbench counts a sleep in microseconds in an int: 1200 s fits,
	# 3600 s overflows and the "idle" clients would end at once)
	printf 'SELECT 1;\n\\sleep 1200 s\n' >"$DIR/idle.sql"
	chmod 644 "$DIR/idle.sql"
	(
		ulimit -n $((WAITERS + 100)) 2>/dev/null || true
		exec "$PGBIN/pgbench" -h "$DIR" -U postgres -n -c "$WAITERS" -j 20 -t 1 \
			-f "$DIR/idle.sql" postgres
	) >"$DIR/idle.log" 2>&1 &
	WAITER_PID=$!
	deadline=$((SECONDS + 300))
	until [ "$(psql_ -c "SELECT count(*) FROM pg_stat_activity
	                      WHERE query LIKE 'SELECT 1%' AND state = 'idle'")" = "$WAITERS" ]; do
		if ((SECONDS > deadline)); then
			echo "the idle connections did not come up" >&2
			exit 1
		fi
		sleep 0.2
	done
}

stop_idle()
{
	kill "$WAITER_PID" 2>/dev/null || true
	wait "$WAITER_PID" 2>/dev/null || true
	WAITER_PID=
	while [ "$(psql_ -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT 1%'")" != 0 ]; do
		sleep 0.2
	done
}

# drain GROUP: lease and complete until GROUP has no task left; prints the
# seconds it took.
drain()
{
	local group=$1 per_client t0 t1 left
	per_client=$(((JOBS + CLIENTS * BATCH - 1) / (CLIENTS * BATCH) + 2))
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

# fresh_state R GROUP: the state every drain starts from: the queue's
# tables emptied (the previous drains' finished jobs would otherwise make
# each drain read larger tables than the one before), WAITERS jobs
# idle-R-1 .. idle-R-n in group idle (the waiters' jobs; enqueued in every
# mode, so that the three drains see the same tables) and JOBS jobs in
# GROUP, everything vacuumed and analyzed, a checkpoint.
fresh_state()
{
	local r=$1 group=$2
	backends_gone
	psql_ -c "TRUNCATE silo.job_info, silo.job_status, silo.job_status_index,
	                   silo.job_metadata, silo.task, silo.task_lease, silo.attempt,
	                   silo.job_cancellation, silo.chain_task"
	enqueue idle "$WAITERS" "idle-$r-"
	enqueue "$group" "$JOBS" "$group-"
	psql_ -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
}

# others_pids: the backends of the waiters or of the idle control.
others_pids()
{
	psql_ -c "SELECT pid FROM pg_stat_activity
	           WHERE query LIKE 'CALL silo.wait_result%' OR query LIKE 'SELECT 1%'
	              OR query LIKE 'CALL silo.wait_any%' OR application_name = 'bench-await'"
}

# cpu_ticks PID...: the CPU clock ticks these processes used (user and
# system), with those of their exited children.
cpu_ticks()
{
	local p
	for p in "$@"; do
		cat "/proc/$p/stat" 2>/dev/null || true
	done | sed 's/^.*) //' | awk '{t += $12 + $13 + $14 + $15} END {print t + 0}'
}

# cluster_ticks: cpu_ticks of the postmaster and every child of it, once
# the children it had before the drain are all that is left (the drain's
# backends have exited and been reaped: their ticks are then the
# postmaster's cutime and cstime), or after 10 s.
cluster_ticks()
{
	local deadline=$((SECONDS + 10))
	while (($(pgrep -c -P "$PID") > NCHILDREN)) && ((SECONDS < deadline)); do
		sleep 0.05
	done
	# shellcheck disable=SC2046
	cpu_ticks "$PID" $(pgrep -P "$PID")
}

# settle PID...: wait until these backends have used no CPU for a whole
# second (60 s at most).  Counted asleep, 1,000 waiters still use a
# second or two of CPU in all during the next second (their start-up's
# tail); a drain started at once would pay for it, which is not what a
# sleeping waiter costs.
settle()
{
	local deadline=$((SECONDS + 60)) t0 t1
	t0=$(cpu_ticks "$@")
	while ((SECONDS < deadline)); do
		sleep 1
		t1=$(cpu_ticks "$@")
		if [ "$t1" = "$t0" ]; then
			return
		fi
		t0=$t1
	done
	echo "the $# backends did not settle" >&2
}

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# cleanup_waiters: on the way out, end the waiters' pgbench and stop the
# cluster at once (a fast shutdown: sleeping waiters whose client has gone
# would hold up a smart one until their timeout).
cleanup_waiters()
{
	local deadline=$((SECONDS + 60))
	if [ -n "$WAITER_PID" ]; then kill "$WAITER_PID" 2>/dev/null || true; fi
	for p in "${ANY_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID" 2>/dev/null || true; fi
	if [ -n "$PID" ] && kill -INT "$PID" 2>/dev/null; then
		while kill -0 "$PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
	fi
}

if [ -n "${WR_PERF:-}" ]; then mkdir -p "$WR_PERF"; fi
scratch_begin
trap 'cleanup_waiters; scratch_cleanup' EXIT
scratch_initdb data "max_connections = $((WAITERS + CLIENTS + 30))" "shared_buffers = 512MB" \
	"max_wal_size = 4GB" "huge_pages = ${WR_HUGE_PAGES:-off}"
echo "huge_pages = ${WR_HUGE_PAGES:-off}; the cluster's shared memory in huge pages:" \
	"$(as_pg "$PGBIN/postgres" -D "$DIR/data" -C shared_memory_size_in_huge_pages)"
scratch_start data
psql_ -c "CREATE EXTENSION silo CASCADE" 2>/dev/null
psql_ -c "CREATE UNLOGGED TABLE bench_woken (at timestamptz)"

HZ=$(getconf CLK_TCK)
echo "== burn-down: $JOBS jobs, $CLIENTS clients x batch $BATCH; $REPEATS rounds of: $MODES" \
	"(waiters: $WAITERS sessions asleep in silo.wait_result; idle: $WAITERS idle connections;" \
	"any: $WAITERS jobs awaited by $ANY_SESSIONS sessions in silo.wait_any); each drain from" \
	"truncated queue tables"
echo "load before: $(uptime)"
read -r -a modes <<<"$MODES"
for mode in "${modes[@]}"; do
	if [ "$mode" = node ]; then
		# the Node client, built from its lock file (quiet when it is up to date)
		"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/clients/node/build.sh" || exit 1
	fi
done
for mode in "${modes[@]}"; do
	case $mode in without | waiters | idle | any | node) : >"$DIR/rates.$mode" ;; *)
		echo "WR_MODES: unknown mode $mode" >&2
		exit 2
		;;
	esac
done
: >"$DIR/wakes"
: >"$DIR/wakes.any"
: >"$DIR/wakes.node"
for ((r = 1; r <= REPEATS; r++)); do
	# the order turns from round to round, so that whatever drifts
	# (the machine's other load, the catalogs) is not pinned on one mode
	order=()
	for ((i = 0; i < ${#modes[@]}; i++)); do
		order+=("${modes[$(((i + r - 1) % ${#modes[@]}))]}")
	done
	for mode in "${order[@]}"; do
		g=burn_${mode}_$r
		fresh_state "$r" "$g"
		note=
		others=
		if [ "$mode" = waiters ]; then
			start_waiters "$r"
			note="waiters asleep/no xmin before $(asleep)"
			others=$(others_pids)
		elif [ "$mode" = idle ]; then
			start_idle
			others=$(others_pids)
		elif [ "$mode" = any ]; then
			start_any "$r"
			others=$(others_pids)
		elif [ "$mode" = node ]; then
			start_node "$r"
			others=$(others_pids)
		fi
		# shellcheck disable=SC2086
		if [ -n "$others" ]; then settle $others; fi
		# shellcheck disable=SC2086
		o0=$(cpu_ticks $others)
		NCHILDREN=$(pgrep -c -P "$PID")
		c0=$(cluster_ticks)
		if [ -n "${WR_PERF:-}" ]; then
			perf record -a -g -o "$WR_PERF/perf.$mode.$r" >/dev/null 2>&1 &
			PERF_PID=$!
			sleep 0.5
		fi
		s=$(drain "$g")
		if [ -n "${WR_PERF:-}" ]; then
			kill -INT "$PERF_PID" 2>/dev/null || echo "perf record ended early: see 'perf record -a true'" >&2
			wait "$PERF_PID" || true
			PERF_PID=
		fi
		c1=$(cluster_ticks)
		# shellcheck disable=SC2086
		o1=$(cpu_ticks $others)
		echo "$JOBS / $s" | bc -l >>"$DIR/rates.$mode"
		if [ "$mode" = idle ]; then
			stop_idle
		elif [ "$mode" = waiters ]; then
			note="$note, after $(asleep)"
			stop_waiters "$r"
			read -r wmed wmax < <(tail -1 "$DIR/wakes")
			note="$note; one commit ended their jobs: resumed after ${wmed} s (median), ${wmax} s (last)"
		elif [ "$mode" = any ]; then
			stop_any "$r"
			read -r wmed wmax < <(tail -1 "$DIR/wakes.any")
			note="one commit ended their jobs: resumed after ${wmed} s (median), ${wmax} s (last)"
		elif [ "$mode" = node ]; then
			stop_node "$r"
			read -r wmed _ < <(tail -1 "$DIR/wakes.node")
			note="one commit ended their jobs: the Node client had all $WAITERS awaits back after ${wmed} s"
		fi
		printf 'run %d %-8s %8.0f jobs/s  cluster CPU %6.2f s, of it the %d others %5.2f s  %s\n' \
			"$r" "$mode" "$(tail -1 "$DIR/rates.$mode")" "$(echo "($c1 - $c0) / $HZ" | bc -l)" \
			"$(echo "$others" | grep -c .)" "$(echo "($o1 - $o0) / $HZ" | bc -l)" "$note"
	done
done
echo "load after: $(uptime)"
for mode in "${modes[@]}"; do
	printf '%-8s median %6.0f jobs/s, lowest %6.0f, highest %6.0f\n' "$mode" \
		"$(median <"$DIR/rates.$mode")" "$(sort -g "$DIR/rates.$mode" | head -1)" \
		"$(sort -g "$DIR/rates.$mode" | tail -1)"
done
if [ -s "$DIR/rates.without" ]; then
	off=$(median <"$DIR/rates.without")
	for mode in "${modes[@]}"; do
		[ "$mode" = without ] && continue
		printf 'ratio %-8s / without: %.3f\n' "$mode" "$(echo "$(median <"$DIR/rates.$mode") / $off" | bc -l)"
	done
fi
if [ -s "$DIR/wakes" ]; then
	printf 'one commit ending the jobs of %d wait_result waiters: they resumed after %.3f s (median), the last after %.3f s (medians of the runs)\n' \
		"$WAITERS" "$(cut -d' ' -f1 "$DIR/wakes" | median)" "$(cut -d' ' -f2 "$DIR/wakes" | median)"
fi
if [ -s "$DIR/wakes.node" ]; then
	printf 'one commit ending the %d jobs awaited by the Node client: all its awaits back after %.3f s (median of the runs)\n' \
		"$WAITERS" "$(cut -d' ' -f1 "$DIR/wakes.node" | median)"
fi
if [ -s "$DIR/wakes.any" ]; then
	printf 'one commit ending the %d jobs awaited in silo.wait_any: its %d sessions resumed after %.3f s (median), the last after %.3f s (medians of the runs)\n' \
		"$WAITERS" "$ANY_SESSIONS" "$(cut -d' ' -f1 "$DIR/wakes.any" | median)" "$(cut -d' ' -f2 "$DIR/wakes.any" | median)"
fi
