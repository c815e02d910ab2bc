#!/usr/bin/env bash
# bench/run.sh: `make bench`.  Runs silo and the baselines side by side on
# one throwaway PostgreSQL 15 cluster with durable settings and prints a
# table of absolute figures and ratios.  See bench/README.md.
#
#   bash bench/run.sh
#
# Environment (all optional):
#   BENCH_WORKLOADS    sections to run, in this order (default all:
#                      "burn latency steady backlog limits held cluster
#                      detect"); steady and held need a burn rate and
#                      measure one if missing; cluster runs
#                      bench/cluster_overhead.sh (its own servers and etcd;
#                      output in cluster.txt), detect bench/cluster_detect.sh
#                      (the same; detect.txt)
#   BENCH_SECONDS      target drain time of a burn cell (default 8)
#   BENCH_MAX_JOBS     cap of a burn cell's job count (default 500000)
#   BENCH_CLIENTS      burn worker connections (default "4 8")
#   BENCH_BATCHES      burn batch sizes (default "1 8 32 128")
#   BENCH_REPEATS      runs of the key burn cells, 4 clients x batch 1 and 32
#                      (default 3; the report uses the median)
#   BENCH_SYSTEMS      loadgen systems (default "bare silo")
#   BENCH_LAT_JOBS     latency samples (default 5000)
#   BENCH_LAT_MAX_SECONDS  stop a latency cell early after this long (default 60)
#   BENCH_LAT_DIAG     1: also a silo latency row with silo.notify_coalesce_ms = 0
#                      in the producer's session (default 1)
#   BENCH_STEADY_SECONDS   producing window of a steady cell (default 20)
#   BENCH_STEADY_LOADS     shares of the burn rate (default "0.5 0.9")
#   BENCH_BACKLOGS     backlog depths (default "10000 100000 1000000")
#   BENCH_BACKLOG_BATCHES  batch sizes per depth (default "1 32")
#   BENCH_BACKLOG_SECONDS  measured window per depth and batch (default 8)
#   BENCH_LIMIT_JOBS   jobs per limits mode (default 20000)
#   BENCH_HELD_SECONDS target drain time of a held-snapshot burn (default 8)
#   BENCH_PEERS        peer systems run through bench/peers/run-peer.sh
#                      (default "pgboss graphile"; "" to skip)
#   BENCH_PEER_BATCHES peer batch sizes (default "1 32")
#   PEER_MAX_SECONDS   cap of a peer drain (default 60, passed on)
#   BENCH_SKIP_INSTALL 1: do not install packages or build/install silo
#
# Starts its own cluster (unix socket only, port 55493) in a mktemp
# directory and stops it by its pid on exit.  Results go to
# bench/results/<timestamp>/ (results.jsonl, results.csv, table.txt,
# burn.png when gnuplot is available).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
PORT=${BENCH_PORT:-55493}
WORKLOADS=${BENCH_WORKLOADS:-burn latency steady backlog limits held cluster detect}
SECONDS_PER_CELL=${BENCH_SECONDS:-8}
MAX_JOBS=${BENCH_MAX_JOBS:-500000}
LAT_MAX_SECONDS=${BENCH_LAT_MAX_SECONDS:-60}
CLIENTS=${BENCH_CLIENTS:-4 8}
BATCHES=${BENCH_BATCHES:-1 8 32 128}
REPEATS=${BENCH_REPEATS:-3}
SYSTEMS=${BENCH_SYSTEMS:-bare silo}
LAT_JOBS=${BENCH_LAT_JOBS:-5000}
LAT_DIAG=${BENCH_LAT_DIAG:-1}
STEADY_SECONDS=${BENCH_STEADY_SECONDS:-20}
STEADY_LOADS=${BENCH_STEADY_LOADS:-0.5 0.9}
BACKLOGS=${BENCH_BACKLOGS:-10000 100000 1000000}
BACKLOG_BATCHES=${BENCH_BACKLOG_BATCHES:-1 32}
BACKLOG_SECONDS=${BENCH_BACKLOG_SECONDS:-8}
LIMIT_JOBS=${BENCH_LIMIT_JOBS:-20000}
HELD_SECONDS=${BENCH_HELD_SECONDS:-8}
PEERS=${BENCH_PEERS-pgboss graphile}
PEER_BATCHES=${BENCH_PEER_BATCHES:-1 32}
export PEER_MAX_SECONDS=${PEER_MAX_SECONDS:-60}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$BENCH/results/$STAMP
AS=()
[ "$(id -u)" = 0 ] && AS=(runuser -u postgres --)
T_RUN=$(date +%s)

log() { printf '== %s\n' "$*" >&2; }

# The steady-state and held cells use 4 workers; key_cell is a burn cell
# that is repeated (BENCH_REPEATS) and whose median the report uses.
STEADY_CLIENTS=4
key_cell() { [ "$1" = 4 ] && { [ "$2" = 1 ] || [ "$2" = 32 ]; }; }
wants() { [[ " $WORKLOADS " == *" $1 "* ]]; }

# section NAME: start timing a section; section_end prints its elapsed time.
SECTION= T_SECTION= SECTION_TIMES=
section()
{
	SECTION=$1
	T_SECTION=$(date +%s)
	log "section $SECTION"
}
section_end()
{
	local s=$(($(date +%s) - T_SECTION))
	SECTION_TIMES="$SECTION_TIMES $SECTION=${s}s"
	log "section $SECTION took ${s} s (total so far $(($(date +%s) - T_RUN)) s)"
}

# --- dependencies, silo, loadgen -------------------------------------------

if [ "${BENCH_SKIP_INSTALL:-0}" != 1 ]; then
	# shellcheck source=../tools/ensure-deps.sh
	. "$ROOT/tools/ensure-deps.sh"
	silo_ensure_deps
	log "building and installing silo"
	(cd "$ROOT" && flock /tmp/silo-build.lock make -s PG_CONFIG="$PG_CONFIG" install >/dev/null)
fi
if ! command -v gnuplot >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && [ "${BENCH_SKIP_INSTALL:-0}" != 1 ]; then
	log "installing gnuplot-nox"
	{ apt-get -q -o DPkg::Lock::Timeout=300 update &&
		DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300 install gnuplot-nox; } \
		</dev/null >/tmp/silo-bench-apt.log 2>&1 || log "gnuplot install failed; no chart (see /tmp/silo-bench-apt.log)"
fi

log "building bench/loadgen/silo-loadgen"
cc -O2 -Wall -Wextra -Werror -pthread -I"$("$PG_CONFIG" --includedir)" \
	-o "$BENCH/loadgen/silo-loadgen" "$BENCH"/loadgen/*.c \
	-L"$("$PG_CONFIG" --libdir)" -lpq -lm
LOADGEN=$BENCH/loadgen/silo-loadgen
SILO_WORKER=
for w in "$PGBIN/silo-worker" "$ROOT/tools/silo-worker"; do
	[ -x "$w" ] && { SILO_WORKER=$w; break; }
done

# --- the cluster -----------------------------------------------------------

DIR=$(mktemp -d /tmp/silo-bench.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
PGPID=

# cleanup: stop the cluster by its postmaster pid, remove the scratch dir.
cleanup()
{
	if [ -n "$PGPID" ] && kill -0 "$PGPID" 2>/dev/null; then
		kill -INT "$PGPID" 2>/dev/null || true
		for _ in $(seq 1 150); do kill -0 "$PGPID" 2>/dev/null || break; sleep 0.1; done
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "initdb in $DIR"
"${AS[@]}" "$PGBIN/initdb" -D "$DIR/data" -A trust -U postgres >/dev/null
# track_commit_timestamp: the limits workload reads the commit time of every
# lease and completion (bench/README.md); it costs every system the same.
cat >> "$DIR/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
shared_buffers = 512MB
max_wal_size = 4GB
max_connections = 100
fsync = on
synchronous_commit = on
full_page_writes = on
track_commit_timestamp = on
EOF
"${AS[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w start >/dev/null
PGPID=$(head -1 "$DIR/data/postmaster.pid")
CONNINFO="host=$DIR port=$PORT user=postgres dbname=postgres"
PEER_CONNINFO="postgresql://postgres@localhost:$PORT/postgres?host=$DIR"
psql() { "$PGBIN/psql" "$CONNINFO" -X -q -v ON_ERROR_STOP=1 "$@"; }
psql -c "CREATE EXTENSION silo CASCADE" >/dev/null 2>&1 || psql -c "CREATE EXTENSION silo CASCADE"
PGVERSION=$(psql -tAc "SHOW server_version")
SILO_VERSION=$(psql -tAc "SELECT extversion FROM pg_extension WHERE extname = 'silo'")

mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

section fsync
log "pg_test_fsync -s 2 (fdatasync figure)"
"${AS[@]}" "$PGBIN/pg_test_fsync" -s 2 -f "$DIR/fsync.test" >"$OUT/pg_test_fsync.txt" 2>&1 || true
FSYNC_OPS=$(awk '/one 8kB write/ {s = 1} s && $1 == "fdatasync" {print $2; exit}' "$OUT/pg_test_fsync.txt")
FSYNC_OPS=${FSYNC_OPS:-0}
rm -f "$DIR/fsync.test"
log "fdatasync: $FSYNC_OPS ops/s"
section_end

# --- the cells -------------------------------------------------------------

# run_cell [VAR=VALUE...] -- ARGS: run one loadgen cell (environment
# VAR=VALUE for it) and append its JSON line(s), each with "repeat":
# $REPEAT; a failed cell is reported and the run goes on.
REPEAT=1
run_cell()
{
	local env=() out
	while [ "$1" != -- ]; do env+=("$1"); shift; done
	shift
	log "loadgen $*"
	if out=$(env "${env[@]}" "$LOADGEN" --conninfo "$CONNINFO" "$@" 2>>"$OUT/loadgen.log") &&
		[ -n "$out" ]; then
		jq -c --argjson r "$REPEAT" '. + {repeat: $r}' <<<"$out" | tee -a "$RESULTS" >&2
	else
		log "FAILED: loadgen $* (see $OUT/loadgen.log)"
		tail -3 "$OUT/loadgen.log" >&2
		[ -z "$out" ] || jq -c --argjson r "$REPEAT" '. + {repeat: $r}' <<<"$out" >>"$RESULTS" 2>/dev/null || true
	fi
}

# burn_median SYSTEM CLIENTS BATCH: median rate of that burn cell so far.
burn_median()
{
	jq -rs --arg s "$1" --argjson c "$2" --argjson b "$3" '
		[.[] | select(.workload == "burn" and .system == $s and .clients == $c and .batch == $b) | .rate]
		| sort | if length == 0 then empty else .[(length - 1) / 2 | floor] end' "$RESULTS"
}

# steady_batch SYSTEM: the batch of the steady/held cells: 32 when a
# 4-client batch-32 burn cell exists, else that system's best 4-client batch.
steady_batch()
{
	jq -rs --arg s "$1" --argjson c "$STEADY_CLIENTS" '
		[.[] | select(.workload == "burn" and .system == $s and .clients == $c)] as $b
		| if ($b | map(select(.batch == 32)) | length) > 0 then 32
		  else ($b | max_by(.rate) | .batch // 32) end' "$RESULTS"
}

# base_rate SYSTEM: the burn rate (median, 4 clients, steady_batch) that
# steady and held cells are sized from; measures one cell when missing.
base_rate()
{
	local b r
	b=$(steady_batch "$1")
	r=$(burn_median "$1" "$STEADY_CLIENTS" "$b")
	if [ -z "$r" ]; then
		run_cell -- --system "$1" --workload burn --clients "$STEADY_CLIENTS" --batch "$b" \
			--seconds "$SECONDS_PER_CELL" --max-jobs "$MAX_JOBS"
		r=$(burn_median "$1" "$STEADY_CLIENTS" "$b")
	fi
	echo "${r:-0}"
}

if wants burn; then
	section burn
	for sys in $SYSTEMS; do
		for c in $CLIENTS; do
			for b in $BATCHES; do
				REPEAT=1
				run_cell -- --system "$sys" --workload burn --clients "$c" --batch "$b" \
					--seconds "$SECONDS_PER_CELL" --max-jobs "$MAX_JOBS"
				key_cell "$c" "$b" || continue
				# the repeats drain the job count the first run calibrated
				jobs=$(jq -rs --arg s "$sys" --argjson c "$c" --argjson b "$b" '
					[.[] | select(.workload == "burn" and .system == $s and .clients == $c
					   and .batch == $b)] | first | .filled // empty' "$RESULTS")
				[ -n "$jobs" ] || continue
				for REPEAT in $(seq 2 "$REPEATS"); do
					run_cell -- --system "$sys" --workload burn --clients "$c" --batch "$b" --jobs "$jobs"
				done
				REPEAT=1
			done
		done
	done
	section_end
fi

if wants latency; then
	section latency
	for sys in $SYSTEMS; do
		run_cell -- --system "$sys" --workload latency --jobs "$LAT_JOBS" --max-seconds "$LAT_MAX_SECONDS"
	done
	if [[ " $SYSTEMS " == *" silo "* ]]; then
		if [ -n "$SILO_WORKER" ]; then
			run_cell -- --system silo --workload latency --jobs "$LAT_JOBS" \
				--max-seconds "$LAT_MAX_SECONDS" --silo-worker "$SILO_WORKER"
		else
			log "no silo-worker binary: its latency row is skipped"
		fi
		if [ "$LAT_DIAG" = 1 ]; then
			run_cell PGOPTIONS="-c silo.notify_coalesce_ms=0" -- --system silo --workload latency \
				--jobs "$LAT_JOBS" --max-seconds "$LAT_MAX_SECONDS" --label silo-coalesce0
		fi
	fi
	section_end
fi

if wants steady; then
	section steady
	for sys in $SYSTEMS; do
		base=$(base_rate "$sys")
		b=$(steady_batch "$sys")
		for load in $STEADY_LOADS; do
			rate=$(awk -v r="$base" -v l="$load" 'BEGIN {printf "%.0f", r * l}')
			[ "$rate" -gt 0 ] || { log "steady $sys: no burn rate"; continue; }
			run_cell -- --system "$sys" --workload steady --clients "$STEADY_CLIENTS" --batch "$b" \
				--rate "$rate" --seconds "$STEADY_SECONDS"
		done
	done
	section_end
fi

if wants backlog; then
	section backlog
	for sys in $SYSTEMS; do
		run_cell -- --system "$sys" --workload backlog --clients 4 --backlogs "${BACKLOGS// /,}" \
			--batches "${BACKLOG_BATCHES// /,}" --seconds "$BACKLOG_SECONDS"
	done
	section_end
fi

if wants limits && [[ " $SYSTEMS " == *" silo "* ]]; then
	section limits
	run_cell -- --system silo --workload limits --clients 4 --batch 32 --jobs "$LIMIT_JOBS" \
		--modes none,k100k,k1k,hot --max-seconds 120
	section_end
fi

if wants held; then
	section held
	for sys in $SYSTEMS; do
		base=$(base_rate "$sys")
		jobs=$(awk -v r="$base" -v s="$HELD_SECONDS" -v m="$MAX_JOBS" \
			'BEGIN {n = int(r * s); if (n < 1000) n = 1000; if (n > m) n = m; print n}')
		run_cell -- --system "$sys" --workload held --clients "$STEADY_CLIENTS" \
			--batch "$(steady_batch "$sys")" --jobs "$jobs" --max-seconds $((HELD_SECONDS * 8))
	done
	section_end
fi

if wants cluster; then
	log "cluster: a one-node cluster against single-node (bench/cluster_overhead.sh)"
	if ! bash "$BENCH/cluster_overhead.sh" >"$OUT/cluster.txt" 2>&1; then
		log "FAILED: cluster (see $OUT/cluster.txt)"
	fi
	grep median "$OUT/cluster.txt" >&2 || true
fi

if wants detect; then
	section detect
	log "detect: kill -9 of a node and a node's join, timed (bench/cluster_detect.sh)"
	if ! bash "$BENCH/cluster_detect.sh" >"$OUT/detect.txt" 2>&1; then
		log "FAILED: detect (see $OUT/detect.txt)"
	fi
	sed -n '/^ttl_s /,$p' "$OUT/detect.txt" >&2 || true
	section_end
fi

PEER=$BENCH/peers/run-peer.sh
if [ -n "$PEERS" ] && [ -x "$PEER" ]; then
	section peers
	peer_steady=0
	usage=$("$PEER" 2>&1 </dev/null || true)
	[[ $usage == *steady* ]] && peer_steady=1
	for sys in $PEERS; do
		case $sys in pg-boss) sys=pgboss ;; graphile-worker) sys=graphile ;; esac
		if wants burn; then
			for c in $CLIENTS; do
				for b in $PEER_BATCHES; do
					# calibrate with a small run, then size the cell to BENCH_SECONDS
					calib=$((b == 1 ? 500 : 4000))
					log "peer $sys workers $c batch $b: calibration with $calib jobs"
					if ! line=$("$PEER" "$sys" "$PEER_CONNINFO" "$calib" "$c" "$b" 2>>"$OUT/peers.log" | tail -1) ||
						! rate=$(jq -er '.rate' <<<"$line" 2>/dev/null); then
						log "FAILED: peer $sys calibration (see $OUT/peers.log)"
						continue
					fi
					jobs=$(awk -v r="$rate" -v s="$SECONDS_PER_CELL" -v m="$calib" \
						'BEGIN {n = int(r * s); if (n < m) n = m; if (n > 1000000) n = 1000000; print n}')
					log "peer $sys workers $c batch $b: $jobs jobs"
					if line=$("$PEER" "$sys" "$PEER_CONNINFO" "$jobs" "$c" "$b" 2>>"$OUT/peers.log" | tail -1) &&
						jq -e . <<<"$line" >/dev/null 2>&1; then
						jq -c '. + {repeat: 1}' <<<"$line" | tee -a "$RESULTS" >&2
					else
						log "FAILED: peer $sys workers $c batch $b (see $OUT/peers.log)"
					fi
				done
			done
		fi
		if wants steady && [ "$peer_steady" = 1 ]; then
			# 50% / 90% of the peer's best 4-worker burn rate, at that batch
			read -r prate pbatch < <(jq -rs --arg s "$sys" --argjson c "$STEADY_CLIENTS" '
				[.[] | select(.workload == "burn" and .system == $s and .clients == $c)]
				| max_by(.rate) // {rate: 0, batch: 1} | "\(.rate) \(.batch)"' "$RESULTS")
			for load in $STEADY_LOADS; do
				rate=$(awk -v r="$prate" -v l="$load" 'BEGIN {printf "%.0f", r * l}')
				[ "$rate" -gt 0 ] || { log "peer $sys: no burn rate, steady skipped"; break; }
				log "peer $sys steady: $rate jobs/s, workers $STEADY_CLIENTS batch $pbatch"
				if line=$("$PEER" "$sys" "$PEER_CONNINFO" steady "$STEADY_CLIENTS" "$pbatch" "$rate" \
					"$STEADY_SECONDS" 2>>"$OUT/peers.log" | tail -1) && jq -e . <<<"$line" >/dev/null 2>&1; then
					jq -c '. + {repeat: 1}' <<<"$line" | tee -a "$RESULTS" >&2
				else
					log "FAILED: peer $sys steady $rate (see $OUT/peers.log)"
				fi
			done
		elif wants steady; then
			log "run-peer.sh has no steady mode: peer steady cells skipped"
		fi
	done
	section_end
else
	log "no executable bench/peers/run-peer.sh (or BENCH_PEERS empty): peers skipped"
fi

# --- report ----------------------------------------------------------------

jq -r '[.system, .workload, .repeat, .clients, .batch, .jobs, .seconds, .rate, .p50_ms, .p99_ms,
		.p999_ms, .max_ms, .target_rate, .max_depth, .mean_depth, .dead_tuples, .backlog, .mode,
		.overshoot, .overshoot_commit, .held, .size_before, .size_after, .partial, .finish] | @csv' \
	"$RESULTS" | sed '1i "system","workload","repeat","clients","batch","jobs","seconds","rate","p50_ms","p99_ms","p999_ms","max_ms","target_rate","max_depth","mean_depth","dead_tuples","backlog","mode","overshoot","overshoot_commit","held","size_before","size_after","partial","finish"' \
	>"$OUT/results.csv"

# jq helpers shared by the report: med = the median rate of each burn cell.
JQ_LIB='
def r2: if type == "number" then (. * 100 | round / 100) else . end;
def r3: if type == "number" then (. * 1000 | round / 1000) else . end;
def med: sort | .[(length - 1) / 2 | floor];
def burns: [.[] | select(.workload == "burn")]
	| group_by([.system, .clients, .batch])
	| map(.[0] + {rate: (map(.rate) | med), n: length, lo: (map(.rate) | min), hi: (map(.rate) | max)});
def best(s; f): [burns[] | select(.system == s) | select(f) | .rate] | max;
def ratio(a; b): if a and b and b > 0 then (a / b | r2) else null end;
def met(v; ok): if v == null then "n/a" elif ok then "met" else "NOT met" end;
'

# report: the tables of absolute figures and ratios, and the targets.
report()
{
	echo "silo benchmark $STAMP — PostgreSQL $PGVERSION, silo $SILO_VERSION, $(nproc) vCPU, fsync=on, synchronous_commit=on"
	echo "pg_test_fsync: fdatasync (one 8kB write) $FSYNC_OPS ops/s; burn cells sized to ~${SECONDS_PER_CELL}s;" \
		"key burn cells (4x1, 4x32) run $REPEATS times, median shown"
	echo "silo finishes batches with: $(jq -rs '[.[] | select(.system == "silo") | .finish // empty] | unique | join(", ")' "$RESULTS")"
	echo
	echo "Burn-down (jobs/s, median of repeats; rows: clients x batch)"
	jq -rs "$JQ_LIB"'
		burns as $b
		| ($b | map(.system) | unique) as $sys
		| ($b | map([.clients, .batch]) | unique) as $cells
		| (["clients", "batch"] + $sys | @tsv),
		  ($cells[] as [$c, $k]
		   | [$c, $k] + [$sys[] as $s
		       | ($b | map(select(.system == $s and .clients == $c and .batch == $k)) | first
		          | if . == null then "-" elif .n > 1 then "\(.rate | round) (\(.lo | round)-\(.hi | round))"
		            elif .partial then "\(.rate | round)*" else (.rate | round) end)]
		   | @tsv)' "$RESULTS" | column -t -s $'\t'
	echo "(n-m: range over the repeats; *: partial, the drain was capped)"
	echo
	echo "Burn-down ratios (best over clients; batched = best cell with batch > 1)"
	jq -rs "$JQ_LIB"'
		. as $all
		| (burns | map(.system) | unique | map(select(. != "silo"))) as $others
		| (["vs", "silo/x batch 1", "silo/x batched", "x batch 1", "x batched"] | @tsv),
		  ($others[] as $o
		   | [$o,
		      (ratio($all | best("silo"; .batch == 1); $all | best($o; .batch == 1)) // "-"),
		      (ratio($all | best("silo"; .batch > 1); $all | best($o; .batch > 1)) // "-"),
		      (($all | best($o; .batch == 1)) // "-" | if type == "number" then round else . end),
		      (($all | best($o; .batch > 1)) // "-" | if type == "number" then round else . end)]
		   | @tsv)' "$RESULTS" | column -t -s $'\t'
	echo
	echo "Latency (sequential enqueue call start -> lease/claim returned, ms; the next enqueue once leased)"
	jq -rs '
		(["system", "samples", "p50", "p99", "p99.9", "max", "partial"] | @tsv),
		(.[] | select(.workload == "latency")
		 | [.system, .jobs, .p50_ms, .p99_ms, .p999_ms, .max_ms, (.partial // false)] | @tsv)' \
		"$RESULTS" | column -t
	echo "(silo-worker: enqueue -> tools/worker reported the lease; silo-coalesce0: silo with"
	echo " silo.notify_coalesce_ms = 0 in the producer's session, a diagnostic row)"
	echo
	echo "Steady state (4 workers; enqueue call start -> lease/claim returned, ms; depth sampled every 200 ms)"
	jq -rs "$JQ_LIB"'
		(["system", "batch", "target/s", "achieved/s", "p50", "p99", "p99.9", "max", "max_depth",
		  "mean_depth", "dead_tup", "undrained"] | @tsv),
		(.[] | select(.workload == "steady")
		 | [.system, .batch, (.target_rate | round), (.rate | round), .p50_ms, .p99_ms, .p999_ms, .max_ms,
		    .max_depth, (.mean_depth | r2), .dead_tuples, (.undrained // "-")] | @tsv)' \
		"$RESULTS" | column -t
	echo
	echo "Backlog scale (4 workers; lease/claim call duration, ms; depth kept within 10% of B)"
	jq -rs "$JQ_LIB"'
		(["system", "backlog", "batch", "jobs/s", "p50", "p99", "p99.9", "fill_s"] | @tsv),
		(.[] | select(.workload == "backlog")
		 | [.system, .backlog, .batch, (.rate | round), .p50_ms, .p99_ms, .p999_ms, .fill_s] | @tsv)' \
		"$RESULTS" | column -t
	jq -rs "$JQ_LIB"'
		[.[] | select(.workload == "backlog")] as $k
		| ($k | map([.system, .batch]) | unique)[] as [$s, $b]
		| ($k | map(select(.system == $s and .batch == $b)) | sort_by(.backlog)) as $r
		| select(($r | length) > 1)
		| "p50 ratio \($s) batch \($b): \($r[-1].backlog)/\($r[0].backlog) = \(ratio($r[-1].p50_ms; $r[0].p50_ms))"' \
		"$RESULTS"
	echo
	echo "Limits (silo, 4 workers, batch 32; lease and completion in separate transactions)"
	jq -rs "$JQ_LIB"'
		(["mode", "jobs", "jobs/s", "vs_none", "max_overlap(client)", "max_overlap(commit)",
		  "overshoot(client)", "overshoot(commit)", "partial"] | @tsv),
		(.[] | select(.workload == "limits")
		 | [.mode, .jobs, (.rate | round), (.ratio // "-" | r2), .max_overlap, (.max_overlap_commit // "-"),
		    (.overshoot // "-"), (.overshoot_commit // "-"), .partial] | @tsv)' "$RESULTS" | column -t -s $'\t'
	echo "(client: [lease returned, completion returned] on the client clock, which counts a slot"
	echo " as held until the reply is read; commit: [lease committed, completion committed] from"
	echo " pg_xact_commit_timestamp, the exact holding interval)"
	echo
	echo "Held snapshot (4 workers; a REPEATABLE READ session idle in transaction during the drain)"
	jq -rs "$JQ_LIB"'
		(["system", "held", "jobs", "of", "jobs/s", "ratio", "dead_tup", "size_before_MB", "size_after_MB",
		  "growth_MB", "partial"] | @tsv),
		(.[] | select(.workload == "held")
		 | [.system, .held, .jobs, .filled, (.rate | round), (.ratio // "-" | r2), .dead_tuples,
		    (.size_before / 1048576 | r2), (.size_after / 1048576 | r2),
		    ((.size_after - .size_before) / 1048576 | r2), .partial] | @tsv)' "$RESULTS" | column -t
	echo
	if [ -s "$OUT/detect.txt" ]; then
		echo "Cluster mode: detection and join (bench/cluster_detect.sh; ms, medians; docs/cluster.md)"
		sed -n '/^ttl_s /,$p' "$OUT/detect.txt"
		echo
	fi
	echo "Targets (ratios from this run)"
	jq -rs "$JQ_LIB"'
		. as $all
		| def one(w): [$all[] | select(.workload == w)];
		  (one("latency") | map(select(.system == "silo")) | first) as $lat
		| (one("latency") | map(select(.system == "silo-worker")) | first) as $latw
		| (one("backlog") | map(select(.system == "silo" and .batch == 1)) | sort_by(.backlog)) as $bl
		| (one("limits") | map({(.mode): .}) | add // {}) as $lim
		| (one("held") | map(select(.system == "silo")) | map({(.held | tostring): .}) | add // {}) as $held
		| ($all | best("silo"; .batch > 1)) as $sb
		| [
		  ["burn batched silo/graphile >= 1.3", ratio($sb; $all | best("graphile"; .batch > 1))],
		  ["burn batched silo/pg-boss >= 3", ratio($sb; $all | best("pgboss"; .batch > 1))],
		  ["burn batched silo/bare >= 0.5", ratio($sb; $all | best("bare"; .batch > 1))],
		  ["latency p50 <= 2 ms (silo-worker)", ($latw.p50_ms // null)],
		  ["latency p99 <= 10 ms (silo-worker)", ($latw.p99_ms // null)],
		  ["latency p50 <= 2 ms (silo SQL API)", ($lat.p50_ms // null)],
		  ["latency p99 <= 10 ms (silo SQL API)", ($lat.p99_ms // null)],
		  ["backlog lease p50 1M/10k <= 1.3 (silo, batch 1)",
		   (if ($bl | length) > 1 and ($bl[-1].backlog >= 1000000) then ratio($bl[-1].p50_ms; $bl[0].p50_ms) else null end)],
		  ["limits 100k keys x max 1 >= 0.6x unlimited", ($lim.k100k.ratio // null | r2)],
		  ["limits overshoot <= 0 (commit timestamps, all modes)",
		   ([$lim[] | .overshoot_commit // empty] | max)],
		  ["limits overshoot <= 0 (client clock, all modes)", ([$lim[] | .overshoot // empty] | max)],
		  ["held snapshot silo >= 0.7x its own rate", ($held["true"].ratio // null | r2)]
		  ]
		| (["target", "value", "status"] | @tsv),
		  (.[] as [$t, $v]
		   | ($t | capture("(?<op>>=|<=) (?<x>[0-9.]+)")) as $c
		   | [$t, ($v // "-"), met($v; if $c.op == ">=" then $v >= ($c.x | tonumber) else $v <= ($c.x | tonumber) end)]
		   | @tsv)' "$RESULTS" | column -t -s $'\t'
	echo
	echo "elapsed:$SECTION_TIMES total=$(($(date +%s) - T_RUN))s"
}
report | tee "$OUT/table.txt"

# --- chart -----------------------------------------------------------------

if command -v gnuplot >/dev/null 2>&1 && jq -se 'any(.[]; .workload == "burn")' "$RESULTS" >/dev/null; then
	jq -rs "$JQ_LIB"'
		burns as $b
		| ($b | map(.system) | unique) as $sys
		| ($b | map([.clients, .batch]) | unique) as $cells
		| (["cell"] + $sys | join(" ")),
		  ($cells[] as [$c, $k]
		   | ["c\($c)/b\($k)"] + [$sys[] as $s
		       | ($b | map(select(.system == $s and .clients == $c and .batch == $k)) | first
		          | if . == null then "-" else (.rate | tostring) end)]
		   | join(" "))' "$RESULTS" >"$OUT/burn.dat"
	ncols=$(head -1 "$OUT/burn.dat" | wc -w)
	gnuplot <<EOF 2>>"$OUT/gnuplot.log" || log "gnuplot failed (see $OUT/gnuplot.log)"
set terminal pngcairo size 1200,600 noenhanced
set output "$OUT/burn.png"
set title "Burn-down jobs/s (PostgreSQL $PGVERSION, fsync on, sync commit on; fdatasync $FSYNC_OPS ops/s)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set datafile missing "-"
set logscale y
set ylabel "jobs/s (log)"
set xlabel "clients / batch"
set key top left
set grid ytics
plot for [i=2:$ncols] "$OUT/burn.dat" using i:xtic(1) title columnheader(i)
EOF
	[ -s "$OUT/burn.png" ] && log "chart: $OUT/burn.png"
fi
log "results in $OUT"
log "total elapsed $(($(date +%s) - T_RUN)) s"
