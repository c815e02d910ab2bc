# shellcheck shell=bash
# clients/test-test-cluster.sh: a throwaway PostgreSQL 15 cluster with silo, for
# the client libraries' tests (clients/node/test/run.sh,
# clients/python/test/run.sh) and their benchmarks (bench/clients.sh,
# bench/clients_python.sh).
# Source it, then:
#
#   cluster_start DIR [CONF-LINE...]  initdb DIR/data (as postgres when
#                              root), preload pg_cron and silo, listen on a
#                              unix socket in DIR only, start it, CREATE
#                              EXTENSION silo in database postgres; sets
#                              CLUSTER_PID and CLUSTER_URL
#                              (postgresql://postgres@/postgres?host=DIR)
#   cluster_stop               stop it by its pid (fast shutdown, then
#                              SIGQUIT after 30 s if it still runs)
#   cluster_check              whether PostgreSQL 15, silo and pg_cron are
#                              installed (cluster_start calls it)
#   cluster_psql ARGS...       psql on it, stopping at the first error
#
# Nothing here touches another cluster: no TCP port, and the socket lives
# in DIR.

CLUSTER_PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CLUSTER_DIR=
CLUSTER_PID=
CLUSTER_URL=

cluster_as_pg()
{
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cluster_psql()
{
	PGOPTIONS='-c client_min_messages=warning' "$CLUSTER_PGBIN/psql" -h "$CLUSTER_DIR" \
		-U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"
}

# cluster_check: whether PostgreSQL 15's initdb, silo and pg_cron are
# installed (silo with "make install" from the repository's root, pg_cron
# from Debian's postgresql-15-cron); says what is missing if not.
cluster_check()
{
	local share lib ext missing=0
	if [ ! -x "$CLUSTER_PGBIN/initdb" ] || [ ! -x "$CLUSTER_PGBIN/pg_config" ]; then
		echo "test-cluster.sh: no PostgreSQL 15 in $CLUSTER_PGBIN (set PGBIN, or install postgresql-15)" >&2
		return 1
	fi
	share=$("$CLUSTER_PGBIN/pg_config" --sharedir) || return 1
	lib=$("$CLUSTER_PGBIN/pg_config" --pkglibdir) || return 1
	for ext in silo pg_cron; do
		if [ ! -f "$share/extension/$ext.control" ] || [ ! -f "$lib/$ext.so" ]; then
			echo "test-cluster.sh: the extension $ext is not installed ($share/extension/$ext.control, $lib/$ext.so)" >&2
			missing=1
		fi
	done
	if [ "$missing" -ne 0 ]; then
		echo "test-cluster.sh: install silo with 'make install' from the repository's root, pg_cron with 'apt-get install postgresql-15-cron'" >&2
		return 1
	fi
}

cluster_start()
{
	local dir=$1 line
	shift
	cluster_check || return 1
	CLUSTER_DIR=$dir
	if [ "$(id -u)" = 0 ]; then chown postgres: "$dir" || return 1; fi
	chmod 755 "$dir" || return 1
	cluster_as_pg "$CLUSTER_PGBIN/initdb" -D "$dir/data" -A trust -U postgres \
		--no-locale -E UTF8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; return 1; }
	{
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$dir'"
		echo "shared_preload_libraries = 'pg_cron,silo'"
		echo "cron.database_name = 'postgres'"
		echo "silo.database = 'postgres'"
		echo "max_connections = 200"
		echo "fsync = off"
		echo "lc_messages = 'C'"
		echo "log_min_messages = warning"
		echo "log_line_prefix = '%m [%p] %a: '"
		for line in "$@"; do echo "$line"; done
	} >>"$dir/data/postgresql.conf"
	if ! cluster_as_pg "$CLUSTER_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
		-w -t 60 start >/dev/null; then
		tail -n 40 "$dir/server.log"
		return 1
	fi
	CLUSTER_PID=$(head -n 1 "$dir/data/postmaster.pid")
	CLUSTER_URL="postgresql://postgres@/postgres?host=$dir"
	cluster_psql -c 'CREATE EXTENSION silo CASCADE' >/dev/null
}

cluster_stop()
{
	local i
	[ -n "$CLUSTER_PID" ] || return 0
	kill -INT "$CLUSTER_PID" 2>/dev/null
	for i in $(seq 300); do
		kill -0 "$CLUSTER_PID" 2>/dev/null || break
		sleep 0.1
	done
	# still there after 30 s: immediate shutdown (only if it has not exited)
	if kill -0 "$CLUSTER_PID" 2>/dev/null; then
		kill -QUIT "$CLUSTER_PID" 2>/dev/null
	fi
	CLUSTER_PID=
}

# ---------------------------------------------------------------------------
# A real two-node silo cluster with etcd, for the cluster-mode tests of the
# client libraries (clients/*/test: cluster2 tests).  etcd (Debian's
# etcd-server, or $ETCD) listens on 127.0.0.1 only, on free ports; the
# nodes listen on unix sockets in DIR/n1 and DIR/n2 and advertise those.
# Node n1 starts first and takes every shard; n2 joins with
# silo.max_moves_in = 0, so the shards stay on n1 (no move runs) until a
# test turns moves on (ALTER SYSTEM, reload: clients/node/test/
# cluster2-moves.e2e.mjs moves shards to n2 and back, and resets them).
# wal_retrieve_retry_interval is 200 ms so that a small shard's copy takes
# about 2 s, not 10 (docs/cluster.md, "Requirements and settings").
#
#   cluster2_check             whether etcd is there
#   cluster2_start DIR         start etcd and both nodes, wait until n1
#                              serves all 8 shards and n2 is a live member;
#                              sets CLUSTER2_N1_URL, CLUSTER2_N2_URL
#   cluster2_stop              stop both nodes and etcd by their pids

CLUSTER2_ETCD=${ETCD:-/usr/bin/etcd}
CLUSTER2_ETCD_PID=
CLUSTER2_PIDS=()
CLUSTER2_N1_URL=
CLUSTER2_N2_URL=

cluster2_check()
{
	[ -x "$CLUSTER2_ETCD" ]
}

# cluster2_free_port: a TCP port on 127.0.0.1 nobody listens on now.
cluster2_free_port()
{
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cluster2_psql DIR ARGS...: psql on the node whose socket is in DIR.
cluster2_psql()
{
	local dir=$1
	shift
	PGOPTIONS='-c client_min_messages=warning' "$CLUSTER_PGBIN/psql" -h "$dir" \
		-U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"
}

# cluster2_wait DIR SQL EXPECTED: poll SQL on the node of DIR for 30 s.
cluster2_wait()
{
	local dir=$1 q=$2 want=$3 i got=
	for i in $(seq 300); do
		got=$(cluster2_psql "$dir" -c "$q" 2>/dev/null)
		[ "$got" = "$want" ] && return 0
		sleep 0.1
	done
	echo "test-cluster.sh: $dir: waited 30 s for \"$q\" to say \"$want\" (last: \"$got\")" >&2
	return 1
}

cluster2_node()
{
	local dir=$1 id=$2 endpoints=$3
	mkdir -p "$dir" || return 1
	if [ "$(id -u)" = 0 ]; then chown postgres: "$dir" || return 1; fi
	chmod 755 "$dir" || return 1
	cluster_as_pg "$CLUSTER_PGBIN/initdb" -D "$dir/data" -A trust -U postgres \
		--no-locale -E UTF8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; return 1; }
	cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_cron,silo'
cron.database_name = 'postgres'
silo.database = 'postgres'
max_connections = 100
max_worker_processes = 16
wal_level = logical
wal_retrieve_retry_interval = '200ms'
fsync = off
lc_messages = 'C'
log_min_messages = warning
log_line_prefix = '%m [%p] %a: '
silo.etcd_endpoints = '$endpoints'
silo.node_id = '$id'
silo.cluster_prefix = 'silo-clients'
silo.advertise_conninfo = 'host=$dir dbname=postgres'
silo.lease_ttl_s = 3
silo.initial_shard_count = 8
silo.max_moves_in = 0
CONF
	if ! cluster_as_pg "$CLUSTER_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
		-w -t 60 start >/dev/null; then
		tail -n 40 "$dir/server.log"
		return 1
	fi
	CLUSTER2_PIDS+=("$(head -n 1 "$dir/data/postmaster.pid")")
	cluster2_psql "$dir" -c 'CREATE EXTENSION silo CASCADE' >/dev/null
}

cluster2_start()
{
	local dir=$1 client peer metrics
	cluster_check || return 1
	cluster2_check || { echo "test-cluster.sh: no etcd at $CLUSTER2_ETCD (apt-get install etcd-server)" >&2; return 1; }
	mkdir -p "$dir/etcd" || return 1
	chmod 755 "$dir" || return 1
	client=$(cluster2_free_port) peer=$(cluster2_free_port) metrics=$(cluster2_free_port)
	"$CLUSTER2_ETCD" --name e1 --data-dir "$dir/etcd/data" \
		--listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--listen-metrics-urls "http://127.0.0.1:$metrics" \
		--initial-cluster "e1=http://127.0.0.1:$peer" --initial-cluster-state new \
		--heartbeat-interval 100 --election-timeout 1000 >"$dir/etcd/etcd.log" 2>&1 </dev/null &
	CLUSTER2_ETCD_PID=$!
	local i
	for i in $(seq 100); do
		python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$client/health', timeout=1)" \
			2>/dev/null && break
		sleep 0.1
	done
	cluster2_node "$dir/n1" n1 "http://127.0.0.1:$client" || return 1
	cluster2_wait "$dir/n1" "SELECT cardinality(serving_shards) FROM silo.node_info" 8 || return 1
	cluster2_node "$dir/n2" n2 "http://127.0.0.1:$client" || return 1
	cluster2_wait "$dir/n2" "SELECT membership || count(*) FILTER (WHERE owner_node_id = 'n1') FROM silo.node_info, silo.cluster_info GROUP BY membership" alive8 || return 1
	CLUSTER2_N1_URL="postgresql://postgres@/postgres?host=$dir/n1"
	CLUSTER2_N2_URL="postgresql://postgres@/postgres?host=$dir/n2"
}

cluster2_stop()
{
	local pid i
	for pid in "${CLUSTER2_PIDS[@]}"; do kill -INT "$pid" 2>/dev/null; done
	for pid in "${CLUSTER2_PIDS[@]}"; do
		for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && kill -QUIT "$pid" 2>/dev/null
	done
	CLUSTER2_PIDS=()
	if [ -n "$CLUSTER2_ETCD_PID" ]; then
		kill -TERM "$CLUSTER2_ETCD_PID" 2>/dev/null
		wait "$CLUSTER2_ETCD_PID" 2>/dev/null
		CLUSTER2_ETCD_PID=
	fi
}
