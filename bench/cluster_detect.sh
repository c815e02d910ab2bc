#!/usr/bin/env bash
# bench/cluster_detect.sh: how long cluster mode takes to notice a node
# that died and to put a new node to work (docs/performance.md, "Cluster
# mode"; docs/cluster.md, "Detection and join, measured").  `make bench`
# runs it as its "detect" workload; by hand, after make install:
#
#   bash bench/cluster_detect.sh
#
# One etcd member and two nodes on this machine (etcd on 127.0.0.1, the
# nodes on Unix sockets in a temporary directory, everything stopped by
# pid at the end), a map of 8 shards.  Each round, for each
# silo.lease_ttl_s in DETECT_TTLS, on fresh data directories and a fresh
# key prefix:
#
#   start   node 1 starts alone: its start -> its first served shard and
#           -> all 8 (the map is new, every shard unowned: plain
#           acquisitions, no move);
#   join    node 2 starts (silo.max_moves_in = 1): its start -> its first
#           served shard and -> every shard placement gives it served;
#           each of those is a real move from node 1 (rows copied,
#           paused, verified);
#   kill    kill -9 of node 2's postmaster -> its member key gone in etcd
#           (polled every 20 ms), -> node 1's coordinator logs that
#           placement gives it node 2's first shard while node 2 (not a
#           member) owns it, and -> a call on node 1 for a tenant of that
#           shard answers SL021 (retry: its owner is not a member; polled
#           every 20 ms).  Node 1's silo.cluster_info then shows those
#           shards "owner-down", owned by node 2: an owner key is
#           permanent, nobody else serves the shard (both printed);
#   release siloctl shard force-release of one of them -> node 1 serving it
#           (an operator's decision: the shard starts empty there);
#   restart node 2 started again -> serving every shard it still owns
#           (re-stamped, no move).
#
# Printed: one line per round and a table of medians per TTL.
#
# Environment: PGBIN, ETCD (etcd), SILOCTL (siloctl next to psql),
# DETECT_TTLS ("10 2"), DETECT_REPEATS (3), KEEP=1 keeps the scratch
# directory.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ETCD=${ETCD:-etcd}
SILOCTL=${SILOCTL:-$PGBIN/siloctl}
TTLS=${DETECT_TTLS:-10 2}
REPEATS=${DETECT_REPEATS:-3}
SHARDS=8
ETCD_PID=

for tool in "$ETCD" "$SILOCTL" curl jq bc; do
	command -v "$tool" >/dev/null || {
		echo "cluster_detect.sh: $tool not found (etcd: Debian package etcd-server; siloctl: make install)" >&2
		exit 1
	}
done

DIR=$(mktemp -d /tmp/silo-detect-bench.XXXXXX)
chmod 755 "$DIR"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$DIR"

# pid_of N: node N's postmaster pid, when its pid file is there.
pid_of() { [ -f "$DIR/n$1/postmaster.pid" ] && head -1 "$DIR/n$1/postmaster.pid"; }

# stop_node N: immediate stop of node N, by its postmaster pid.
stop_node()
{
	local pid
	pid=$(pid_of "$1") || return 0
	kill -QUIT "$pid" 2>/dev/null || return 0
	for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}

# cleanup: both nodes and etcd by their pids; the scratch directory.
cleanup()
{
	stop_node 1 || true
	stop_node 2 || true
	if [ -n "$ETCD_PID" ]; then
		kill "$ETCD_PID" 2>/dev/null || true
		wait "$ETCD_PID" 2>/dev/null || true
	fi
	if [ "${KEEP:-}" = 1 ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap "exit 1" INT TERM

# sql N ARGS...: psql on node N (trust over its socket).
sql() { local n=$1; shift; "$PGBIN/psql" -h "$DIR" -p "$((PORT + n))" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
now() { date +%s.%N; }
# ms A B: B - A in whole milliseconds.
ms() { echo "($2 - $1) * 1000 / 1" | bc; }

# wait_sql N SQL EXPECTED SECONDS: poll SQL on node N every 20 ms; prints
# the time it first answered EXPECTED.
wait_sql()
{
	local n=$1 q=$2 want=$3 end got=
	end=$(($(date +%s) + $4))
	while [ "$(date +%s)" -lt "$end" ]; do
		got=$(sql "$n" -c "$q" 2>/dev/null || true)
		if [ "$got" = "$want" ]; then now; return 0; fi
		sleep 0.02
	done
	echo "cluster_detect.sh: node $n: waited $4 s for \"$q\" = \"$want\" (last: \"$got\")" >&2
	return 1
}

# watch_serving N SECONDS FIRST_VAR ALL_VAR ALL: poll node N's serving
# shards every 20 ms; the times of the first one and of ALL of them.
watch_serving()
{
	local n=$1 end got first=
	end=$(($(date +%s) + $2))
	while [ "$(date +%s)" -lt "$end" ]; do
		got=$(sql "$n" -c "SELECT coalesce(cardinality(serving_shards), 0) FROM silo.node_info" 2>/dev/null || echo 0)
		if [ "${got:-0}" -gt 0 ] && [ -z "$first" ]; then first=$(now); fi
		if [ "${got:-0}" -ge "$5" ]; then
			printf -v "$3" %s "$first"
			printf -v "$4" %s "$(now)"
			return 0
		fi
		sleep 0.02
	done
	echo "cluster_detect.sh: node $n: waited $2 s for $5 served shards (last: $got)" >&2
	return 1
}

# member_key_present PREFIX NODE: whether P/coord/members/NODE is in etcd.
member_key_present()
{
	local key
	key=$(printf '%s/coord/members/%s' "$1" "$2" | base64 -w0)
	curl -sf -m 2 -X POST -d "{\"key\": \"$key\"}" "$ETCD_URL/v3/kv/range" | grep -q '"kvs"'
}

# log_time FILE PATTERN AFTER_LINE: the timestamp (epoch seconds) of the
# first line past AFTER_LINE of FILE that matches PATTERN, or nothing.
log_time()
{
	local line
	line=$(tail -n +"$(($3 + 1))" "$1" | grep -m1 -F "$2" || true)
	[ -n "$line" ] || return 0
	date -d "$(cut -c1-23 <<<"$line") UTC" +%s.%N
}

# start_node N: pg_ctl start of node N (after a kill -9, tried again until
# the dead postmaster's children have left its shared memory).
start_node()
{
	local n=$1 i
	for i in $(seq 60); do
		as_pg "$PGBIN/pg_ctl" -D "$DIR/n$n" -l "$DIR/n$n.log" -w -t 60 start >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	echo "cluster_detect.sh: node $n did not start (see $DIR/n$n.log)" >&2
	tail -20 "$DIR/n$n.log" >&2
	return 1
}

PORT=$((20000 + RANDOM % 20000))
ETCD_URL="http://127.0.0.1:$((PORT + 10))"
"$ETCD" --name d1 --data-dir "$DIR/etcd" --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
	--listen-peer-urls "http://127.0.0.1:$((PORT + 11))" \
	--initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 11))" \
	--initial-cluster "d1=http://127.0.0.1:$((PORT + 11))" >"$DIR/etcd.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 100); do curl -sf "$ETCD_URL/health" >/dev/null && break; sleep 0.1; done

# a template with silo created (single-node), copied for every node and round
as_pg "$PGBIN/initdb" -D "$DIR/template" -A trust -U postgres --no-locale -E UTF8 >/dev/null
cat >>"$DIR/template/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
wal_level = logical
max_worker_processes = 16
wal_retrieve_retry_interval = '200ms'
log_line_prefix = '%m [%p] '
log_timezone = 'UTC'
lc_messages = 'C'
EOF
as_pg "$PGBIN/pg_ctl" -D "$DIR/template" -o "-p $PORT" -l "$DIR/template.log" -w start >/dev/null
"$PGBIN/psql" -h "$DIR" -p "$PORT" -U postgres -d postgres -qAtX -c 'CREATE EXTENSION silo CASCADE' 2>/dev/null
as_pg "$PGBIN/pg_ctl" -D "$DIR/template" -w stop >/dev/null

echo "== detection and join: one etcd member, two nodes, $SHARDS shards, loopback and Unix sockets;" \
	"$REPEATS rounds per TTL; times in ms"
: >"$DIR/rows"
round=0
for ttl in $TTLS; do
	for r in $(seq "$REPEATS"); do
		round=$((round + 1))
		prefix="detect$round"
		for n in 1 2; do
			rm -rf "$DIR/n$n" "$DIR/n$n.log"
			cp -a "$DIR/template" "$DIR/n$n"
			rm -f "$DIR/n$n/postmaster.pid"
			cat >>"$DIR/n$n/postgresql.conf" <<EOF
port = $((PORT + n))
silo.etcd_endpoints = '$ETCD_URL'
silo.node_id = 'n$n'
silo.cluster_prefix = '$prefix'
silo.advertise_conninfo = 'host=$DIR port=$((PORT + n)) dbname=postgres'
silo.lease_ttl_s = $ttl
silo.initial_shard_count = $SHARDS
silo.max_moves_in = 1
EOF
		done

		# start: node 1 alone, a new map, every shard unowned
		t0=$(now)
		start_node 1
		watch_serving 1 60 s_first s_all "$SHARDS"

		# join: node 2; the shards placement gives it move from node 1
		placed=$(sql 1 -c "SELECT count(*) FROM generate_series(0, $SHARDS - 1) s WHERE (SELECT m FROM
			unnest(ARRAY['n1','n2']) m ORDER BY (hashtextextended(m || ':' || s, 0)::numeric
			+ CASE WHEN hashtextextended(m || ':' || s, 0) < 0 THEN 18446744073709551616 ELSE 0 END) DESC,
			m LIMIT 1) = 'n2'")
		t1=$(now)
		start_node 2
		watch_serving 2 300 j_first j_all "$placed"

		# kill: node 2's postmaster, kill -9
		shard=$(sql 2 -c "SELECT serving_shards[1] FROM silo.node_info")
		tenant=$(sql 1 -c "SELECT 't' || g FROM generate_series(1, 10000) g
			WHERE silo.shard_for_tenant('t' || g) = $shard LIMIT 1")
		before=$(wc -l <"$DIR/n1.log")
		pid=$(pid_of 2)
		t2=$(now)
		kill -9 "$pid"
		end=$(($(date +%s) + ttl * 3 + 30))
		while member_key_present "$prefix" n2; do
			[ "$(date +%s)" -lt "$end" ] || { echo "cluster_detect.sh: n2's member key stayed" >&2; exit 1; }
			sleep 0.02
		done
		t_key=$(now)
		pattern="placement gives shard $shard to node \"n1\", but node \"n2\" owns it"
		t_log=
		while [ -z "$t_log" ]; do
			[ "$(date +%s)" -lt "$end" ] || { echo "cluster_detect.sh: node 1 never logged: $pattern" >&2; exit 1; }
			t_log=$(log_time "$DIR/n1.log" "$pattern" "$before")
			[ -n "$t_log" ] || sleep 0.05
		done
		# node 1 answers retry for that shard: its owner is not a member
		t_retry=
		while [ -z "$t_retry" ]; do
			[ "$(date +%s)" -lt "$end" ] || { echo "cluster_detect.sh: node 1 never answered SL021" >&2; exit 1; }
			answer=$(sql 1 -c "\\set VERBOSITY verbose" -c "SELECT silo.cancel('no-such-job', '$tenant')" 2>&1 |
				grep -o 'SL02[01]\|SL003' | head -1 || true)
			if [ "$answer" = SL021 ]; then t_retry=$(now); else sleep 0.02; fi
		done
		# what node 1 shows for that shard now
		view=$(sql 1 -c "SELECT state || '/' || owner_node_id FROM silo.cluster_info WHERE shard_id = $shard")

		# release: an operator gives the shard up; node 1 takes it (empty)
		t3=$(now)
		"$SILOCTL" shard force-release "$shard" --yes --etcd "$ETCD_URL" --prefix "$prefix" \
			>/dev/null 2>"$DIR/siloctl.err" || { cat "$DIR/siloctl.err" >&2; exit 1; }
		t_rel=$(wait_sql 1 "SELECT $shard = ANY(serving_shards) FROM silo.node_info" t 60)

		# restart: node 2 again, serving the shards it still owns
		stop_node 2
		t4=$(now)
		start_node 2
		t_back=$(wait_sql 2 "SELECT cardinality(owned_shards) > 0 AND owned_shards <@ serving_shards FROM silo.node_info" t 120)

		row=$(printf '%s %s %s %s %s %s %s %s %s %s %s %s %s' "$ttl" "$(ms "$t0" "$s_first")" "$(ms "$t0" "$s_all")" \
			"$(ms "$t1" "$j_first")" "$(ms "$t1" "$j_all")" "$placed" "$(ms "$t2" "$t_key")" "$(ms "$t2" "$t_log")" \
			"$(ms "$t2" "$t_retry")" "$(ms "$t3" "$t_rel")" "$(ms "$t4" "$t_back")" "$view" "$answer")
		echo "$row" >>"$DIR/rows"
		fmt='ttl %s round %s: start->first %s, ->all %s; join->first %s, ->all %s (%s shards);'
		fmt+=' kill -9->member key gone %s, ->node 1 logs it %s, ->SL021 on node 1 %s; force-release->served %s;'
		fmt+=' restart->serving %s; node 1 shows %s, a call gets %s\n'
		# shellcheck disable=SC2086
		printf "$fmt" "$ttl" "$r" ${row#* }
		stop_node 2
		stop_node 1
	done
done

# the medians per TTL
echo
{
	echo "ttl_s start->first start->all join->first join->all kill->key_gone kill->survivor_logs kill->survivor_SL021 release->served restart->serving survivor_view survivor_answer"
	for ttl in $TTLS; do
		awk -v t="$ttl" '$1 == t' "$DIR/rows" | jq -Rrs --arg t "$ttl" '
			[split("\n")[] | select(length > 0) | split(" ")] as $r
			| def med(i): ($r | map(.[i] | tonumber) | sort) as $v | $v[(($v | length) - 1) / 2 | floor];
			  def all(i): $r | map(.[i]) | unique | join(",");
			[$t, med(1), med(2), med(3), med(4), med(6), med(7), med(8), med(9), med(10)]
			| map(tostring) + [all(11), all(12)] | join(" ")'
	done
} | column -t
echo "(medians in ms over $REPEATS rounds; start: a new map, plain acquisitions; join: real moves from node 1;"
echo " kill->key_gone: the member key expired in etcd; kill->survivor_logs: node 1's coordinator logged the owner"
echo " gone; kill->survivor_SL021: a call on node 1 for the dead node's shard answered retry; survivor_view/answer:"
echo " node 1's silo.cluster_info state/owner and a call's SQLSTATE then)"
