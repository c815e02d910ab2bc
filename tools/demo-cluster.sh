#!/usr/bin/env bash
# tools/demo-cluster.sh: "make demo-cluster".  Shows cluster mode
# (docs/cluster.md) end to end on one machine: etcd, three silo nodes,
# shards moving live under a workload, a node killed and restarted.
#
# As root on a bare Debian 12 machine: installs the missing packages, builds
# and installs the extension, silo-worker and siloctl, then, in a
# postgres-owned temp dir under /tmp:
#
#   - one etcd member (Debian's etcd-server; one member is enough for a
#     demo, a real deployment runs three or five) on 127.0.0.1, on free
#     ports picked in 55000-55999;
#   - three PostgreSQL servers n1, n2, n3 in cluster mode (map of 8 shards),
#     each listening on a unix socket in that dir only;
#
# and runs the scenario it prints first.  Every process it starts (etcd, the
# servers, the worker, the producer, the log followers) is stopped by pid
# at the end, and the dir is removed.  The last step checks that every job
# ran exactly once, on the one node that owns its shard, and exits non-zero
# (loudly) otherwise.
#
# Environment: SILO_DEMO_JOBS_PER_TENANT (default 75: 40 tenants, 3000 jobs
# in the first wave), SILO_DEMO_JOB_SLEEP (the handler's sleep, default
# 0.05 s).

# shellcheck source-path=SCRIPTDIR/..
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
WORKER=$SRC/tools/silo-worker
SILOCTL=$SRC/tools/siloctl/siloctl
PREFIX=demo
N_TENANTS=40
PER_TENANT=${SILO_DEMO_JOBS_PER_TENANT:-75}
[ "$PER_TENANT" -ge 1 ] 2>/dev/null || PER_TENANT=75
JOB_SLEEP=${SILO_DEMO_JOB_SLEEP:-0.05}
TTL=3

export LANG=C.UTF-8 LC_ALL=C.UTF-8
unset PGHOSTADDR PGSERVICE PGSERVICEFILE PGOPTIONS PGDATA PGPASSWORD PGHOST PGPORT

DIR=
ETCD_PID=
WORKER_PID=
PRODUCER_PID=
FOLLOW_PIDS=()
T0=$SECONDS

header() { printf '\n== %s  (%d s)\n' "$*" "$((SECONDS - T0))"; }
die()
{
	printf '\ndemo-cluster: FAILED: %s\n' "$*" >&2
	exit 1
}

# AS_PG: prefix that runs a command as postgres (empty when not root).
AS_PG=()
[ "$(id -u)" = 0 ] && AS_PG=(runuser -u postgres --)

# stop_pid PID: TERM a process we started and wait for it (KILL after 10 s).
stop_pid()
{
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}

# cleanup: stop the worker, the producer, the log followers, the three
# servers and etcd, each by its pid; remove the dir.
# shellcheck disable=SC2317 # called from a trap
cleanup()
{
	local rc=$? n p
	trap '' INT TERM
	trap - EXIT
	stop_pid "$PRODUCER_PID"
	stop_pid "$WORKER_PID"
	for p in "${FOLLOW_PIDS[@]}"; do stop_pid "$p"; done
	if [ -n "$DIR" ] && [ -d "$DIR" ]; then
		if [ "$rc" -ne 0 ]; then
			for n in 1 2 3; do
				[ -s "$DIR/n$n.log" ] || continue
				printf '\n-- node n%s log (last 15 lines)\n' "$n"
				tail -n 15 "$DIR/n$n.log"
			done
			[ -s "$DIR/worker.log" ] && { printf '\n-- worker log (last 15 lines)\n'; tail -n 15 "$DIR/worker.log"; }
		fi
		header "Stopping everything"
		for n in 3 2 1; do
			[ -f "$DIR/n$n/postmaster.pid" ] || continue
			"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/n$n" -m fast -w -t 30 stop >/dev/null 2>&1 ||
				"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/n$n" -m immediate -w stop >/dev/null 2>&1
		done
		stop_pid "$ETCD_PID"
		rm -rf "$DIR"
		echo "stopped etcd and the three nodes; removed $DIR"
	else
		stop_pid "$ETCD_PID"
	fi
	[ "$rc" -ne 0 ] && printf 'demo-cluster: exit status %s\n' "$rc" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# port_free P: nothing listens on 127.0.0.1:P and no socket file names it.
port_free()
{
	local p=$1
	[ -e "/var/run/postgresql/.s.PGSQL.$p" ] && return 1
	[ -e "/tmp/.s.PGSQL.$p" ] && return 1
	(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && return 1
	return 0
}

# pick_ports N: N distinct free ports in 55000-55999, from a random start.
pick_ports()
{
	local n=$1 i p off=$((RANDOM % 1000)) got=0
	for ((i = 0; i < 1000 && got < n; i++)); do
		p=$((55000 + (off + i) % 1000))
		port_free "$p" || continue
		echo "$p"
		got=$((got + 1))
	done
	[ "$got" -eq "$n" ]
}

# psql_n N ARGS...: psql on node N (unaligned, quiet, stop on error).
psql_n()
{
	local n=$1
	shift
	psql -X -q -At -v ON_ERROR_STOP=1 -P pager=off "host=$DIR port=${PORT[$n]} dbname=postgres user=postgres" "$@"
}

# wait_until SECONDS WHAT CMD...: run CMD every 0.2 s until it succeeds;
# fail the demo when the deadline passes.
wait_until()
{
	local secs=$1 what=$2 end
	shift 2
	end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$end" ] || die "timed out after ${secs} s waiting for: $what"
		sleep 0.2
	done
}

# serves_count N COUNT: node N serves COUNT shards.
serves_count() { [ "$(psql_n "$1" -c 'SELECT cardinality(serving_shards) FROM silo.node_info')" = "$2" ]; }

# serves_list N LIST: node N serves exactly the shards LIST (as "1,4,6").
serves_list()
{
	[ "$(psql_n "$1" -c "SELECT array_to_string(serving_shards, ',') FROM silo.node_info")" = "$2" ]
}

# some_succeeded: the worker has finished a job on node 1.
some_succeeded()
{
	[ "$(psql_n 1 -c "SELECT count(*) FROM silo.jobs WHERE task_group = 'demo' AND status = 'Succeeded'")" -gt 0 ]
}

# owner_down_on_n1 NODE: node 1 shows every shard of NODE as owner-down.
owner_down_on_n1()
{
	[ "$(psql_n 1 -c "SELECT count(*) FROM silo.cluster_info WHERE owner_node_id = '$1' AND state <> 'owner-down'")" = 0 ]
}

# etcd_healthy: the etcd member answers /health.
etcd_healthy() { curl -sf "$ETCD_URL/health"; }

# etcd_moves: how many move records are in etcd now.
etcd_moves()
{
	local key end out
	key=$(printf '%s/coord/moves/' "$PREFIX" | base64 -w0)
	end=$(printf '%s/coord/moves0' "$PREFIX" | base64 -w0)
	out=$(curl -sf -X POST -d "{\"key\": \"$key\", \"range_end\": \"$end\", \"count_only\": true}" \
		"$ETCD_URL/v3/kv/range") || return 1
	printf '%s\n' "$out" | sed -n 's/.*"count":"\([0-9]*\)".*/\1/p' | grep . || echo 0
}

# placement_sql: for each shard, the member placement gives it to among
# n1..n3 (docs/cluster.md, "Placement": the highest unsigned
# hash_bytes_extended("<node_id>:<shard>", 0)), next to its owner.
PLACEMENT_SQL="SELECT c.shard_id, c.owner_node_id, c.state,
	   (SELECT m FROM unnest(ARRAY['n1', 'n2', 'n3']) m
		 ORDER BY (hashtextextended(m || ':' || c.shard_id, 0)::numeric
				   + CASE WHEN hashtextextended(m || ':' || c.shard_id, 0) < 0
						  THEN 18446744073709551616 ELSE 0 END) DESC, m LIMIT 1) AS placed
  FROM silo.cluster_info c"

# settled: no move in etcd, and node 1 sees every shard served by the node
# placement gives it to.
settled()
{
	[ "$(etcd_moves)" = 0 ] || return 1
	[ "$(psql_n 1 -c "SELECT count(*) FROM ($PLACEMENT_SQL) p
		WHERE p.owner_node_id IS DISTINCT FROM p.placed OR p.state NOT IN ('serving', 'remote')")" = 0 ]
}

# enqueue_wave WAVE PER: PER jobs for each of the 40 tenants, each owner's
# tenants in one silo.enqueue_many on that owner, found from a node's
# silo.cluster_info and silo.shard_for_tenant.  A batch refused with SL020
# (the shard moved) or SL021 (paused for its move) wrote nothing: the map
# is read again and the batch is sent where it now says.  Prints the jobs
# enqueued per node.
enqueue_wave()
{
	local wave=$1 per=$2 end=$((SECONDS + 60)) ask=1 plan owner conninfo tenants out done_any t
	local -A sent=()
	while :; do
		[ "$SECONDS" -lt "$end" ] || { echo "wave $wave: not enqueued within 60 s" >&2; return 1; }
		plan=$(psql_n "$ask" -F '|' -c "
			SELECT c.owner_node_id, c.owner_conninfo, string_agg(t, ',' ORDER BY t)
			  FROM (SELECT 'tenant-' || lpad(g::text, 2, '0') AS t FROM generate_series(1, $N_TENANTS) g) x
			  JOIN silo.cluster_info c ON c.shard_id = silo.shard_for_tenant(x.t)
			 GROUP BY 1, 2 ORDER BY 1" 2>/dev/null) || { ask=$((ask % 3 + 1)); sleep 0.2; continue; }
		done_any=0
		while IFS='|' read -r owner conninfo tenants; do
			[ -n "$tenants" ] || continue
			local todo=() all=()
			IFS=',' read -r -a all <<<"$tenants"
			for t in "${all[@]}"; do [ -n "${sent[$t]:-}" ] || todo+=("$t"); done
			[ "${#todo[@]}" -gt 0 ] || continue
			if [ -z "$owner" ]; then continue; fi
			tenants=$(IFS=,; echo "${todo[*]}")
			out=$(psql -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "$conninfo user=postgres" \
				-v w="$wave" -v per="$per" -v tenants="$tenants" 2>&1 <<'EOF'
SELECT count(*) FROM silo.enqueue_many((
	SELECT jsonb_agg(jsonb_build_object(
			 'task_group', 'demo', 'tenant', t, 'id', :'w' || '-' || t || '-' || k,
			 'payload', jsonb_build_object('wave', :'w', 'k', k)))
	  FROM unnest(string_to_array(:'tenants', ',')) t, generate_series(1, :per) k));
EOF
			)
			if [[ $out =~ ^[0-9]+$ ]]; then
				for t in "${todo[@]}"; do sent[$t]=1; done
				printf '%s %s %s\n' "$wave" "$owner" "$out" >>"$DIR/enqueued"
				done_any=1
			elif [[ $out == *SL020* || $out == *SL021* ]]; then
				printf '  producer: %s: %s; reading the map again\n' "$owner" \
					"$(grep -o 'SL02[01]' <<<"$out" | head -1)" >>"$DIR/producer.log"
			else
				echo "wave $wave on $owner failed: $out" >&2
				return 1
			fi
		done <<<"$plan"
		[ "${#sent[@]}" -ge "$N_TENANTS" ] && return 0
		[ "$done_any" = 1 ] || sleep 0.1
		ask=$((ask % 3 + 1))
		# ask a node that runs: the first one that answers
		for _ in 1 2 3; do
			[ -f "$DIR/n$ask/postmaster.pid" ] && psql_n "$ask" -c 'SELECT 1' >/dev/null 2>&1 && break
			ask=$((ask % 3 + 1))
		done
	done
}

# follow_log N: print the coordinator's lines about moves and ownership
# from node N's log as they are written, with the time and the node.
follow_log()
{
	local n=$1
	tail -n +1 -F "$DIR/n$n.log" 2>/dev/null > >(grep --line-buffered -E \
		'silo coordinator: (shard [0-9]+: (move [0-9]+ .*(requested|aborted)|served here|summed)|node "[^"]*" (acquired|released) shard)' |
		sed -u -E "s/^[0-9-]+ ([0-9:.]+) [A-Z]+ \[[0-9]+\] [A-Z]+:  silo coordinator: /  \1 n$n  /") &
	FOLLOW_PIDS+=($!)
}

# start_node N: start node N (again after a kill -9: tried until its old
# processes have gone), create the extension.
start_node()
{
	local n=$1 end=$((SECONDS + 60))
	until "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/n$n" -l "$DIR/n$n.log" -w -t 60 start >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$end" ] || die "node n$n did not start"
		sleep 0.5
	done
	psql_n "$n" -c 'CREATE EXTENSION IF NOT EXISTS silo CASCADE' >/dev/null 2>&1 ||
		die "CREATE EXTENSION failed on n$n"
}

scenario()
{
	cat <<EOF
== The scenario (make demo-cluster)
1. One etcd member on 127.0.0.1 (a demo: production runs 3 or 5) and node n1
   in cluster mode with a map of 8 shards. Alone, n1 owns every shard.
2. $((N_TENANTS * PER_TENANT)) jobs over $N_TENANTS tenants (tenant-01 .. tenant-$N_TENANTS), enqueued with one
   silo.enqueue_many per owner (the tenants it owns, from silo.cluster_info
   and silo.shard_for_tenant). silo-worker, given only n1's conninfo, runs
   them in cluster mode, 8 at a time, each a shell handler sleeping ${JOB_SLEEP} s.
3. While it runs, nodes n2 and n3 join. Placement gives each its share of
   the shards, which move live, with their rows and running leases: each
   move's copy, pause and verdict are printed as the coordinators log them.
   Meanwhile a producer adds waves of one job per tenant, a second apart,
   always on the tenant's current owner (SL020 / SL021: it reads the map
   again).
4. Once the moves are done: siloctl cluster info shows the new owners. Then
   n3 is killed (kill -9): n1 says its shards are owner-down and answers
   SL021 for their tenants; n3 restarts with the same node id and serves
   its shards again, with their jobs.
5. The check: every job is on exactly one node, the one owning its shard,
   Succeeded with exactly one attempt, as many as were enqueued, and the
   worker counted each once; no node keeps rows of a shard it does not own.
   Any mismatch fails the demo.
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
DIR=$(mktemp -d /tmp/silo-demo-cluster.XXXXXX) || die "mktemp failed"
chmod 755 "$DIR"
if ! { make -C "$SRC" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" &&
	make -C "$SRC" PG_CONFIG="$PG_CONFIG" install; } </dev/null >"$DIR/build.log" 2>&1; then
	cat "$DIR/build.log"
	die "build failed"
fi
[ -x "$WORKER" ] || die "$WORKER was not built"
[ -x "$SILOCTL" ] || die "$SILOCTL was not built"
command -v etcd >/dev/null || die "etcd not found (Debian's etcd-server)"
echo "ok: extension installed, tools/silo-worker, tools/siloctl/siloctl"

# ---------------------------------------------------------------------------
header "1. etcd and node n1"
[ "$(id -u)" = 0 ] && chown postgres: "$DIR"
mapfile -t PORTS < <(pick_ports 5)
[ "${#PORTS[@]}" -eq 5 ] || die "no 5 free ports in 55000-55999"
PORT=([1]=${PORTS[0]} [2]=${PORTS[1]} [3]=${PORTS[2]})
ETCD_URL=http://127.0.0.1:${PORTS[3]}
ETCD_PEER=http://127.0.0.1:${PORTS[4]}
etcd --name demo1 --data-dir "$DIR/etcd" \
	--listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
	--listen-peer-urls "$ETCD_PEER" --initial-advertise-peer-urls "$ETCD_PEER" \
	--initial-cluster "demo1=$ETCD_PEER" --initial-cluster-token "silo-demo-$$" \
	--experimental-watch-progress-notify-interval 500ms \
	</dev/null >"$DIR/etcd.log" 2>&1 &
ETCD_PID=$!
wait_until 30 "etcd healthy" etcd_healthy
echo "etcd (one member, pid $ETCD_PID) at $ETCD_URL"

for n in 1 2 3; do
	"${AS_PG[@]}" "$PGBIN/initdb" -D "$DIR/n$n" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
		>"$DIR/initdb-n$n.log" 2>&1 || { cat "$DIR/initdb-n$n.log"; die "initdb failed"; }
	cat >>"$DIR/n$n/postgresql.conf" <<EOF

# silo demo-cluster: unix socket in the demo dir only
port = ${PORT[$n]}
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
cron.host = '$DIR'
silo.database = 'postgres'
max_worker_processes = 16
max_logical_replication_workers = 6
wal_level = logical
wal_retrieve_retry_interval = '200ms'
lc_messages = 'C'
# cluster mode
silo.etcd_endpoints = '$ETCD_URL'
silo.node_id = 'n$n'
silo.cluster_prefix = '$PREFIX'
silo.advertise_conninfo = 'host=$DIR port=${PORT[$n]} dbname=postgres'
silo.lease_ttl_s = $TTL
silo.initial_shard_count = 8
EOF
done
for n in 1 2 3; do follow_log "$n"; done
echo "nodes: n1, n2, n3 on sockets in $DIR, ports ${PORT[1]}, ${PORT[2]}, ${PORT[3]};"
echo "       silo.lease_ttl_s = $TTL, wal_retrieve_retry_interval = 200ms (small copies are fast)"
echo "moves and acquisitions, as the coordinators log them:"
start_node 1
wait_until 30 "n1 serving 8 shards" serves_count 1 8
echo "  \$ siloctl cluster info --dsn 'host=... port=${PORT[1]}'"
"$SILOCTL" cluster info --dsn "host=$DIR port=${PORT[1]} dbname=postgres user=postgres" | sed 's/^/    /'

# ---------------------------------------------------------------------------
header "2. The workload: $((N_TENANTS * PER_TENANT)) jobs, silo-worker in cluster mode"
: >"$DIR/enqueued"
: >"$DIR/producer.log"
: >"$DIR/waves"
enqueue_wave w1 "$PER_TENANT" || die "enqueue failed"
awk '{ printf "  enqueued on %s: %s jobs\n", $2, $3 }' "$DIR/enqueued"

HANDLER=$DIR/handler.sh
cat >"$HANDLER" <<EOF
#!/bin/sh
# demo handler: read the payload, work for a moment, succeed
cat >/dev/null
sleep $JOB_SLEEP
echo '{"ok": true}'
EOF
chmod 755 "$HANDLER"
echo "  \$ silo-worker --dsn 'host=... port=${PORT[1]}' --task-group demo --exec handler.sh --concurrency 8 --exit-when-idle 4000"
timeout 600 "$WORKER" --dsn "host=$DIR port=${PORT[1]} dbname=postgres user=postgres" \
	--task-group demo --exec "$HANDLER" --concurrency 8 --exit-when-idle 4000 \
	</dev/null >"$DIR/worker.log" 2>&1 &
WORKER_PID=$!
tail -n +1 -F "$DIR/worker.log" 2>/dev/null > >(grep --line-buffered -E 'leasing from|no longer' |
	sed -u 's/^/  worker: /') &
FOLLOW_PIDS+=($!)
wait_until 30 "the worker's first jobs" some_succeeded
echo "  running: $(psql_n 1 -c "SELECT count(*) FILTER (WHERE status = 'Succeeded') || ' done, ' || count(*) FILTER (WHERE status <> 'Succeeded') || ' to go' FROM silo.jobs WHERE task_group = 'demo'")"

# ---------------------------------------------------------------------------
header "3. n2 and n3 join while the workload runs: the shards move live"
# the producer: one job per tenant every second, on the tenant's owner
# (it stops between waves when told to, so that every wave it starts is
# enqueued whole and counted)
rm -f "$DIR/producer.stop"
(
	i=0
	until [ -e "$DIR/producer.stop" ]; do
		i=$((i + 1))
		t=$(date +%s.%N)
		enqueue_wave "live$i" 1 || exit 1
		printf 'live%s %s %s\n' "$i" "$t" "$(date +%s.%N)" >>"$DIR/waves"
		sleep 1
	done
) &
PRODUCER_PID=$!
start_node 2
start_node 3
echo "  n2 and n3 started ($((SECONDS - T0)) s)"
wait_until 120 "the shards to settle on n1, n2, n3 (placement)" settled
touch "$DIR/producer.stop"
wait "$PRODUCER_PID"
rc_producer=$?
PRODUCER_PID=
[ "$rc_producer" -eq 0 ] || die "the producer failed"
echo "  the moves are done ($((SECONDS - T0)) s); the producer is stopped"
printf '  the producer: %s waves of %s jobs; %s batches refused (SL020: %s, SL021: %s) and sent again where the map then said\n' \
	"$(wc -l <"$DIR/waves")" "$N_TENANTS" "$(wc -l <"$DIR/producer.log")" \
	"$(grep -c SL020 "$DIR/producer.log")" "$(grep -c SL021 "$DIR/producer.log")"
echo "  \$ siloctl cluster info --dsn 'host=... port=${PORT[1]}'"
"$SILOCTL" cluster info --dsn "host=$DIR port=${PORT[1]} dbname=postgres user=postgres" | sed 's/^/    /'

echo "  waiting for the worker to drain the queue (it exits after 4 s idle)"
wait "$WORKER_PID"
rc_worker=$?
WORKER_PID=
[ "$rc_worker" -eq 0 ] || die "silo-worker exited with status $rc_worker"
grep -E '^silo-worker: (finished|also)|followed' "$DIR/worker.log" | sed 's/^/  /'

# ---------------------------------------------------------------------------
header "4. kill -9 of n3: its shards are owner-down on the others; its restart reclaims them"
T_TENANT=$(psql_n 1 -c "SELECT 'tenant-' || lpad(g::text, 2, '0') FROM generate_series(1, $N_TENANTS) g
	JOIN silo.cluster_info c ON c.shard_id = silo.shard_for_tenant('tenant-' || lpad(g::text, 2, '0'))
	WHERE c.owner_node_id = 'n3' ORDER BY 1 LIMIT 1")
[ -n "$T_TENANT" ] || die "n3 owns no shard of the demo's tenants"
N3_SHARDS=$(psql_n 3 -c 'SELECT array_to_string(serving_shards, $$,$$) FROM silo.node_info')
pid3=$(head -1 "$DIR/n3/postmaster.pid")
t_kill=$SECONDS
kill -9 "$pid3"
echo "  killed n3's postmaster (pid $pid3); it owned shards {$N3_SHARDS}"
wait_until 30 "n1 to see n3's shards owner-down" owner_down_on_n1 n3
echo "  after $((SECONDS - t_kill)) s (lease TTL $TTL s) n1 shows them owner-down:"
psql_n 1 -F ' ' -c "SELECT '    shard ' || shard_id || ': owner ' || owner_node_id || ', ' || state
	FROM silo.cluster_info WHERE owner_node_id = 'n3' ORDER BY shard_id"
# job result runs silo.job_result on the node of --dsn, which answers for
# the tenant's shard: SL021 while its owner is not a member
JOB="w1-$T_TENANT-1"
echo "  \$ siloctl job result $JOB --tenant $T_TENANT --dsn 'host=... port=${PORT[1]}' --retries 0"
out=$("$SILOCTL" job result "$JOB" --tenant "$T_TENANT" --retries 0 \
	--dsn "host=$DIR port=${PORT[1]} dbname=postgres user=postgres" 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/    /'
echo "    (exit status $rc: the shard is unavailable)"
[ "$rc" -eq 5 ] || die "siloctl should have exited 5 (shard unavailable) for a tenant of the dead n3"
t_restart=$SECONDS
start_node 3
wait_until 60 "n3 to serve its shards again" serves_list 3 "$N3_SHARDS"
echo "  n3 restarted with the same node id: serving {$N3_SHARDS} again $((SECONDS - t_restart)) s after its start"
echo "  \$ siloctl job result $JOB --tenant $T_TENANT --dsn 'host=... port=${PORT[1]}' -v"
"$SILOCTL" job result "$JOB" --tenant "$T_TENANT" -v \
	--dsn "host=$DIR port=${PORT[1]} dbname=postgres user=postgres" 2>&1 | sed "s|$DIR|\$DIR|g; s/^/    /"
[ "${PIPESTATUS[0]}" -eq 0 ] || die "siloctl job result via n1 after n3's restart failed"

# ---------------------------------------------------------------------------
header "5. The check"
failed=0
check()
{
	if [ "$2" = "$3" ]; then
		printf '  ok    %s: %s\n' "$1" "$2"
	else
		printf '  FAIL  %s: %s, expected %s\n' "$1" "$2" "$3"
		failed=1
	fi
}
enqueued=$(awk '{ s += $3 } END { print s + 0 }' "$DIR/enqueued")
: >"$DIR/jobs"
for n in 1 2 3; do
	# every job the node's views show (the shards it owns), with its shard,
	# whether the node owns that shard, and its attempts
	psql_n "$n" -F ' ' -c "
		SELECT j.tenant || '/' || j.id, 'n$n', silo.shard_for_tenant(j.tenant),
			   silo.shard_for_tenant(j.tenant) = ANY (i.owned_shards), j.status,
			   (SELECT count(*) FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id),
			   (SELECT count(*) FROM silo.attempts a
				 WHERE a.tenant = j.tenant AND a.job_id = j.id AND a.status = 'Succeeded')
		  FROM silo.jobs j, silo.node_info i WHERE j.task_group = 'demo'" >>"$DIR/jobs" ||
		die "could not read n$n's jobs"
	# rows of any shard the node does not own, in the tables themselves
	# (the views show only owned shards): a move deletes its source's copy
	# once the target has acquired it
	stray=$(psql_n "$n" -c "SELECT count(*) FROM silo.job_info, silo.node_info i
		WHERE NOT silo.shard_for_tenant(tenant) = ANY (i.owned_shards)")
	check "n$n: rows in silo.job_info of shards n$n does not own" "$stray" 0
	printf '  n%s owns shards {%s} and holds %s jobs\n' "$n" \
		"$(psql_n "$n" -c 'SELECT array_to_string(owned_shards, $$,$$) FROM silo.node_info')" \
		"$(awk -v n="n$n" '$2 == n' "$DIR/jobs" | wc -l)"
done
check "jobs enqueued (all waves) = distinct jobs found" "$(cut -d' ' -f1 "$DIR/jobs" | sort -u | wc -l)" "$enqueued"
check "jobs found on two nodes" "$(cut -d' ' -f1 "$DIR/jobs" | sort | uniq -d | wc -l)" 0
check "jobs on a node that does not own their shard" "$(awk '$4 != "t"' "$DIR/jobs" | wc -l)" 0
check "jobs not Succeeded" "$(awk '$5 != "Succeeded"' "$DIR/jobs" | wc -l)" 0
check "jobs without exactly one attempt, succeeded" "$(awk '$6 != 1 || $7 != 1' "$DIR/jobs" | wc -l)" 0
summary=$(grep -E '^silo-worker: finished' "$DIR/worker.log")
check "the worker's successes" "$(sed -n 's/.*(\([0-9]*\) succeeded.*/\1/p' <<<"$summary")" "$enqueued"

# the moves, from the targets' logs
for n in 1 2 3; do
	grep -h 'served here from' "$DIR/n$n.log" | sed -E "s/.*shard ([0-9]+): .*pause of ([0-9]+) ms \(paused on node \"([^\"]*)\".*/\1 \3 n$n \2/"
done | sort -n >"$DIR/moves"
nmoves=$(wc -l <"$DIR/moves")
[ "$nmoves" -gt 0 ] || { echo "  FAIL  no shard moved"; failed=1; }

header "Summary"
printf '  jobs:   %s enqueued over %s tenants (%s in the first wave, %s in %s waves of one per tenant while shards moved;\n' \
	"$enqueued" "$N_TENANTS" "$((N_TENANTS * PER_TENANT))" "$((enqueued - N_TENANTS * PER_TENANT))" "$(wc -l <"$DIR/waves")"
printf '          the slowest wave took %s s),\n' "$(awk '{ d = $3 - $2; if (d > m) m = d } END { printf "%.1f", m }' "$DIR/waves")"
printf '          each Succeeded once, on its shard'\''s owner: %s\n' \
	"$(cut -d' ' -f2 "$DIR/jobs" | sort | uniq -c | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 }')"
printf '  worker: %s\n' "${summary#silo-worker: }"
printf '  moves:  %s shards moved live:\n' "$nmoves"
awk '{ printf "            shard %s: %s -> %s, paused %s ms\n", $1, $2, $3, $4 }' "$DIR/moves"
[ "$nmoves" -gt 0 ] && awk '{ s += $4; if ($4 > m) m = $4 } END { printf "          pauses: mean %d ms, longest %d ms\n", s / NR, m }' "$DIR/moves"
printf '  summed: %s tail sums during pauses, %s whole-shard sums\n' \
	"$(cat "$DIR"/n[123].log | grep -c -E 'summed (the tail|the copy with its tail)')" \
	"$(cat "$DIR"/n[123].log | grep -c -E 'the pause sums the whole shard|summed the whole copy')"
printf '  kill -9 of n3: owner-down on n1 within the lease TTL, shards served again after its restart\n'
printf '  total time: %d s\n' "$((SECONDS - T0))"
[ "$failed" = 0 ] || die "the check found a mismatch (above)"
echo
echo "demo-cluster: OK"
