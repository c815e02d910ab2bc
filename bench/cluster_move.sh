#!/usr/bin/env bash
# bench/cluster_move.sh: how long a shard is paused when it moves
# (docs/cluster.md, "Moving a shard"), against its size.  Not part of
# make test or make bench; run it by hand after make install:
#
#   bash bench/cluster_move.sh [JOBS | PENDING+FINISHED ...]   default: 10000 100000
#
# JOBS: half finished, a quarter running, a quarter pending.
# PENDING+FINISHED (e.g. 100000+1000000): that many jobs pending and that
# many finished, none running.
#
# For each size: a single-member etcd and two nodes (127.0.0.1 and Unix
# sockets in a temporary directory, stopped by pid at the end).  Node 1
# starts alone and owns both shards of a 2-shard map; JOBS jobs go into
# tenants of the shard placement gives node 2 (half finished, a quarter
# running, a quarter pending); then node 2 starts and the shard moves.
# Printed per size: the copy (request to synced), and the pause as the
# coordinators log it -- from the source's pause to the target serving
# (both nodes' wall clocks, one machine) -- and as a client sees it:
# the first SL021 on node 1 to the first call served on node 2.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ETCD=${ETCD:-etcd}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(10000 100000)
DIR=$(mktemp -d /tmp/silo-move-bench.XXXXXX)
chmod 755 "$DIR"
ETCD_PID=
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$DIR"

cleanup()
{
	local n
	for n in 1 2; do
		[ -f "$DIR/n$n/postmaster.pid" ] &&
			as_pg "$PGBIN/pg_ctl" -D "$DIR/n$n" -m immediate -w stop >/dev/null 2>&1 || true
	done
	[ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2>/dev/null && wait "$ETCD_PID" 2>/dev/null || true
	[ "${KEEP:-}" = 1 ] && echo "kept $DIR" || rm -rf "$DIR"
}
trap cleanup EXIT
trap "exit 1" INT TERM

psql_n() { local n=$1; shift; as_pg "$PGBIN/psql" -h "$DIR" -p "$((PORT + n))" -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }

# wait_for N SQL EXPECTED SECONDS
wait_for()
{
	local n=$1 sql=$2 want=$3 secs=$4 end got
	end=$(($(date +%s) + secs))
	while [ "$(date +%s)" -lt "$end" ]; do
		got=$(psql_n "$n" -c "$sql" 2>/dev/null || true)
		[ "$got" = "$want" ] && return 0
		sleep 0.1
	done
	echo "timed out waiting on node $n for: $sql = $want (last: $got)" >&2
	return 1
}

PORT=$((20000 + RANDOM % 20000))
"$ETCD" --name b1 --data-dir "$DIR/etcd" --listen-client-urls "http://127.0.0.1:$((PORT + 10))" \
	--advertise-client-urls "http://127.0.0.1:$((PORT + 10))" \
	--listen-peer-urls "http://127.0.0.1:$((PORT + 11))" \
	--initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 11))" \
	--initial-cluster "b1=http://127.0.0.1:$((PORT + 11))" >"$DIR/etcd.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((PORT + 10))/health" >/dev/null && break; sleep 0.1; done

round=0
for size in "${SIZES[@]}"; do
	round=$((round + 1))
	if [[ $size == *+* ]]; then
		pending=${size%+*} finished=${size#*+} running=0
	else
		finished=$((size / 2)) running=$((size / 4))
		pending=$((size - finished - running))
	fi
	jobs=$((pending + finished + running))
	prefix="bench$round"
	for n in 1 2; do
		rm -rf "$DIR/n$n"
		as_pg "$PGBIN/initdb" -D "$DIR/n$n" -A trust >/dev/null
		cat >>"$DIR/n$n/postgresql.conf" <<EOF
port = $((PORT + n))
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
wal_level = logical
max_worker_processes = 16
wal_retrieve_retry_interval = '200ms'
silo.etcd_endpoints = 'http://127.0.0.1:$((PORT + 10))'
silo.node_id = 'n$n'
silo.cluster_prefix = '$prefix'
silo.advertise_conninfo = 'host=$DIR port=$((PORT + n)) dbname=postgres'
silo.lease_ttl_s = 10
silo.initial_shard_count = 2
silo.move_pause_limit_ms = 600000
silo.broker_paused = on
EOF
	done
	as_pg "$PGBIN/pg_ctl" -D "$DIR/n1" -l "$DIR/n1-$round.log" -w start >/dev/null
	psql_n 1 -c 'CREATE EXTENSION silo CASCADE' 2>/dev/null
	wait_for 1 "SELECT cardinality(serving_shards) FROM silo.node_info" 2 30
	# the shard placement gives n2 (rendezvous: the higher unsigned hash)
	shard=$(psql_n 1 -c "SELECT s FROM generate_series(0, 1) s ORDER BY
		(SELECT m FROM unnest(ARRAY['n1','n2']) m ORDER BY (hashtextextended(m || ':' || s, 0)::numeric
		 + CASE WHEN hashtextextended(m || ':' || s, 0) < 0 THEN 18446744073709551616 ELSE 0 END) DESC LIMIT 1) = 'n2' DESC LIMIT 1")
	psql_n 1 -c "CREATE TABLE bench_tenants AS SELECT 'b' || n AS t FROM generate_series(1, 2000) n
		WHERE silo.shard_for_tenant('b' || n) = $shard LIMIT 50" >/dev/null
	t0=$(date +%s.%N)
	for b in $(seq 0 $(((jobs - 1) / 5000))); do
		psql_n 1 -c "SELECT count(silo.enqueue('bench', '{\"x\": 1}', tenant => t, id => 'j' || g))
			FROM generate_series($((b * 5000 + 1)), $(((b + 1) * 5000 < jobs ? (b + 1) * 5000 : jobs))) g,
			LATERAL (SELECT t FROM bench_tenants OFFSET g % 50 LIMIT 1) x" >/dev/null
	done
	# finished, then running (leases of 10 minutes), in batches of 1000
	for _ in $(seq $((finished / 1000))); do
		psql_n 1 -c "SELECT count(*) FROM silo.complete_many((SELECT array_agg(task_id)
			FROM silo.lease('w', 'bench', max_tasks => 1000)), 'w')" >/dev/null
	done
	for _ in $(seq $((running / 1000))); do
		psql_n 1 -c "SELECT count(*) FROM silo.lease('w', 'bench', max_tasks => 1000, lease_ms => 600000)" >/dev/null
	done
	fill=$(echo "$(date +%s.%N) - $t0" | bc)
	tenant=$(psql_n 1 -c "SELECT t FROM bench_tenants LIMIT 1")
	rows=$(psql_n 1 -c "SELECT sum(split_part(x, ':', 2)::bigint) FROM unnest(string_to_array(silo.shard_setsums(
		(SELECT range_start FROM silo.cluster_info WHERE shard_id = $shard)::bigint,
		(SELECT CASE WHEN range_end < 9223372036854775808 THEN range_end END FROM silo.cluster_info WHERE shard_id = $shard)::bigint), ';')) x")

	# a client probing the shard on both nodes every 2 ms
	cat >"$DIR/probe.sql" <<EOF
DO \$\$
DECLARE st text; first_unavailable timestamptz; t timestamptz;
BEGIN
	LOOP
		BEGIN
			PERFORM silo.cancel('no-such-job', '$tenant');
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
			IF st = 'SL021' AND first_unavailable IS NULL THEN
				first_unavailable := clock_timestamp();
				RAISE NOTICE 'unavailable %', extract(epoch FROM first_unavailable);
			END IF;
			IF st = 'SL020' AND first_unavailable IS NOT NULL THEN
				RETURN;
			END IF;
		END;
		PERFORM pg_sleep(0.002);
	END LOOP;
END \$\$;
EOF
	psql_n 1 -f "$DIR/probe.sql" >"$DIR/probe1.out" 2>&1 &
	probe=$!
	t1=$(date +%s.%N)
	as_pg "$PGBIN/pg_ctl" -D "$DIR/n2" -l "$DIR/n2-$round.log" -w start >/dev/null
	psql_n 2 -c 'CREATE EXTENSION silo CASCADE' 2>/dev/null
	# served on node 2: the first call that passes there (a session polling every 2 ms)
	cat >"$DIR/served.sql" <<EOF
DO \$\$
DECLARE st text;
BEGIN
	LOOP
		BEGIN
			PERFORM silo.cancel('no-such-job', '$tenant');
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
			IF st = 'SL003' THEN
				RAISE NOTICE 'served %', extract(epoch FROM clock_timestamp());
				RETURN;
			END IF;
		END;
		PERFORM pg_sleep(0.002);
	END LOOP;
END \$\$;
EOF
	psql_n 2 -f "$DIR/served.sql" >"$DIR/served.out" 2>&1 || true
	served=$(grep -o 'served [0-9.]*' "$DIR/served.out" | head -1 | cut -d' ' -f2)
	wait "$probe" || true
	unavailable=$(grep -o 'unavailable [0-9.]*' "$DIR/probe1.out" | head -1 | cut -d' ' -f2)
	# wait for the target's log line of the measured shard
	for _ in $(seq 100); do grep -q "shard $shard: served here" "$DIR/n2-$round.log" && break; sleep 0.1; done
	logged=$(grep -o "shard $shard: served here.*after a pause of [0-9]* ms" "$DIR/n2-$round.log" | head -1 |
		grep -o 'pause of [0-9]*' | grep -o '[0-9]*')
	copying=$(grep "shard $shard: move [0-9]* from \"n1\" to \"n2\" copying" "$DIR/n2-$round.log" | head -1 | cut -c1-23)
	synced=$(grep "shard $shard: move [0-9]* from \"n1\" to \"n2\" synced" "$DIR/n2-$round.log" | head -1 | cut -c1-23)
	copy_s=$(psql_n 1 -c "SELECT round(extract(epoch FROM '$synced'::timestamptz - '$copying'::timestamptz)::numeric, 2)")
	client_ms=$(echo "($served - $unavailable) * 1000 / 1" | bc)
	# how each side summed, and when the source's sums were done
	src_sum=$(grep -o "shard $shard: summed [a-z ]*, [0-9]* ms into the pause" "$DIR/n1-$round.log" | head -1 |
		sed 's/.*: summed //')
	tgt_sum=$(grep -o "shard $shard: summed the [a-z ]*" "$DIR/n2-$round.log" | head -1 | sed 's/.*: summed //')
	printf '%s jobs (%s pending, %s running, %s finished; %s rows in the shard; filled in %.1f s): copy %s s; pause as logged %s ms; SL021 on node 1 -> served on node 2 %s ms; join -> served %.1f s; source summed %s; target summed %s\n' \
		"$jobs" "$pending" "$running" "$finished" "$rows" "$fill" "$copy_s" "$logged" "$client_ms" \
		"$(echo "$served - $t1" | bc)" "$src_sum" "$tgt_sum"
	for n in 2 1; do as_pg "$PGBIN/pg_ctl" -D "$DIR/n$n" -m fast -w stop >/dev/null; done
done
