#!/usr/bin/env bash
# bench/run.sh: `make bench`.  Runs silo and the baselines side by side on
# one throwaway PostgreSQL 15 cluster with durable settings and prints a
# table of absolute figures and ratios.  See bench/README.md.
#
#   bash bench/run.sh
#
# Environment (all optional):
#   BENCH_SECONDS      target drain time of a burn cell (default 8)
#   BENCH_MAX_JOBS     cap of a burn cell's job count (default 500000)
#   BENCH_CLIENTS      burn worker connections (default "4 8")
#   BENCH_BATCHES      burn batch sizes (default "1 8 32 128")
#   BENCH_SYSTEMS      loadgen systems (default "bare silo")
#   BENCH_LAT_JOBS     latency samples (default 2000)
#   BENCH_LAT_MAX_SECONDS  stop a latency cell early after this long (default 60)
#   BENCH_PEERS        peer systems run through bench/peers/run-peer.sh
#                      (default "pgboss graphile"; "" to skip)
#   BENCH_PEER_BATCHES peer batch sizes (default "1 32")
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
SECONDS_PER_CELL=${BENCH_SECONDS:-8}
MAX_JOBS=${BENCH_MAX_JOBS:-500000}
LAT_MAX_SECONDS=${BENCH_LAT_MAX_SECONDS:-60}
CLIENTS=${BENCH_CLIENTS:-4 8}
BATCHES=${BENCH_BATCHES:-1 8 32 128}
SYSTEMS=${BENCH_SYSTEMS:-bare silo}
LAT_JOBS=${BENCH_LAT_JOBS:-2000}
PEERS=${BENCH_PEERS-pgboss graphile}
PEER_BATCHES=${BENCH_PEER_BATCHES:-1 32}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$BENCH/results/$STAMP
AS=()
[ "$(id -u)" = 0 ] && AS=(runuser -u postgres --)

log() { printf '== %s\n' "$*" >&2; }

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
	-L"$("$PG_CONFIG" --libdir)" -lpq
LOADGEN=$BENCH/loadgen/silo-loadgen

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
EOF
"${AS[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w start >/dev/null
PGPID=$(head -1 "$DIR/data/postmaster.pid")
CONNINFO="host=$DIR port=$PORT user=postgres dbname=postgres"
PEER_CONNINFO="postgresql://postgres@localhost:$PORT/postgres?host=$DIR"
psql() { "$PGBIN/psql" "$CONNINFO" -X -q -v ON_ERROR_STOP=1 "$@"; }
psql -c "CREATE EXTENSION silo CASCADE" >/dev/null 2>&1 || psql -c "CREATE EXTENSION silo CASCADE"
PGVERSION=$(psql -tAc "SHOW server_version")

mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

log "pg_test_fsync -s 2 (fdatasync figure)"
"${AS[@]}" "$PGBIN/pg_test_fsync" -s 2 -f "$DIR/fsync.test" >"$OUT/pg_test_fsync.txt" 2>&1 || true
FSYNC_OPS=$(awk '/one 8kB write/ {s = 1} s && $1 == "fdatasync" {print $2; exit}' "$OUT/pg_test_fsync.txt")
FSYNC_OPS=${FSYNC_OPS:-0}
rm -f "$DIR/fsync.test"
log "fdatasync: $FSYNC_OPS ops/s"

# --- the cells -------------------------------------------------------------

# run_cell: run one loadgen cell and append its JSON line; a failed cell is
# reported and recorded as an error line, and the run goes on.
run_cell()
{
	local line
	log "loadgen $*"
	if line=$("$LOADGEN" --conninfo "$CONNINFO" "$@" 2>>"$OUT/loadgen.log"); then
		echo "$line" | tee -a "$RESULTS" >&2
	else
		log "FAILED: loadgen $* (see $OUT/loadgen.log)"
		tail -3 "$OUT/loadgen.log" >&2
	fi
}

for sys in $SYSTEMS; do
	for c in $CLIENTS; do
		for b in $BATCHES; do
			run_cell --system "$sys" --workload burn --clients "$c" --batch "$b" --seconds "$SECONDS_PER_CELL" --max-jobs "$MAX_JOBS"
		done
	done
	run_cell --system "$sys" --workload latency --jobs "$LAT_JOBS" --max-seconds "$LAT_MAX_SECONDS"
done

PEER=$BENCH/peers/run-peer.sh
if [ -n "$PEERS" ] && [ -x "$PEER" ]; then
	for sys in $PEERS; do
		case $sys in pg-boss) sys=pgboss ;; graphile-worker) sys=graphile ;; esac
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
					echo "$line" | tee -a "$RESULTS" >&2
				else
					log "FAILED: peer $sys workers $c batch $b (see $OUT/peers.log)"
				fi
			done
		done
	done
else
	log "no executable bench/peers/run-peer.sh: peers skipped"
fi

# --- report ----------------------------------------------------------------

jq -r '[.system, .workload, .clients, .batch, .jobs, .seconds, .rate, .p50_ms, .p99_ms, .p999_ms] | @csv' \
	"$RESULTS" | sed '1i "system","workload","clients","batch","jobs","seconds","rate","p50_ms","p99_ms","p999_ms"' \
	>"$OUT/results.csv"

# report: the table of absolute figures and ratios.
report()
{
	echo "silo benchmark $STAMP — PostgreSQL $PGVERSION, $(nproc) vCPU, fsync=on, synchronous_commit=on"
	echo "pg_test_fsync: fdatasync (one 8kB write) $FSYNC_OPS ops/s; burn cells sized to ~${SECONDS_PER_CELL}s"
	echo
	echo "Burn-down (jobs/s; rows: clients x batch)"
	jq -rs '
		[.[] | select(.workload == "burn")] as $b
		| ($b | map(.system) | unique) as $sys
		| ($b | map([.clients, .batch]) | unique) as $cells
		| (["clients", "batch"] + $sys | @tsv),
		  ($cells[] as [$c, $k]
		   | [$c, $k] + [$sys[] as $s
		       | ($b | map(select(.system == $s and .clients == $c and .batch == $k)) | first
		          | if . == null then "-" else (.rate | round) end)]
		   | @tsv)' "$RESULTS" | column -t
	echo
	echo "Burn-down ratios (best over clients; \"best\" = best batch of each system)"
	jq -rs '
		[.[] | select(.workload == "burn")] as $b
		| def best(s; k): [$b[] | select(.system == s and (k == null or .batch == k)) | .rate] | max;
		  ($b | map(.system) | unique | map(select(. != "silo"))) as $others
		| (["vs", "silo/x batch 1", "silo/x best", "x batch 1", "x best"] | @tsv),
		  ($others[] as $o
		   | [$o,
		      (if best("silo"; 1) and best($o; 1) then (best("silo"; 1) / best($o; 1) * 100 | round / 100) else "-" end),
		      (if best("silo"; null) and best($o; null) then (best("silo"; null) / best($o; null) * 100 | round / 100) else "-" end),
		      ((best($o; 1) // "-") | if type == "number" then round else . end),
		      ((best($o; null) // "-") | if type == "number" then round else . end)]
		   | @tsv)' "$RESULTS" | column -t -s $'\t'
	echo
	echo "Latency (sequential enqueue -> lease/claim returned, ms)"
	jq -rs '
		(["system", "samples", "p50", "p99", "p99.9"] | @tsv),
		(.[] | select(.workload == "latency") | [.system, .jobs, .p50_ms, .p99_ms, .p999_ms] | @tsv)' \
		"$RESULTS" | column -t
	jq -rs '
		(map(select(.workload == "latency")) | map({(.system): .}) | add // {}) as $l
		| if $l.silo and $l.bare then
		    "latency ratio silo/bare: p50 \($l.silo.p50_ms / $l.bare.p50_ms * 100 | round / 100), p99 \($l.silo.p99_ms / $l.bare.p99_ms * 100 | round / 100)"
		  else empty end' "$RESULTS"
}
report | tee "$OUT/table.txt"

# --- chart -----------------------------------------------------------------

if command -v gnuplot >/dev/null 2>&1; then
	jq -rs '
		[.[] | select(.workload == "burn")] as $b
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
