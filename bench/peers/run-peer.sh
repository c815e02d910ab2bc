#!/bin/sh
# One benchmark cell of a peer queue system (pg-boss or graphile-worker).
#
#   bench/peers/run-peer.sh SYSTEM CONNINFO JOBS WORKERS BATCH                 burn-down
#   bench/peers/run-peer.sh SYSTEM CONNINFO steady WORKERS BATCH RATE SECONDS  steady state
#
#   SYSTEM   pgboss | graphile
#   CONNINFO libpq conninfo ("host=/tmp/x port=55497 dbname=postgres user=postgres")
#            or a postgres:// URL
#   JOBS     burn: jobs pre-inserted (bulk API) and then drained
#   WORKERS  concurrent worker loops (pg-boss) / concurrency (graphile-worker)
#   BATCH    1 = no batching; >1 = the system's documented batching (README.md)
#   RATE     steady: total rate of single-job enqueues, jobs/s
#   SECONDS  steady: length of the producing window
#
#   PEER_MAX_SECONDS (default 60) caps a burn drain (then "partial":true, exit 0)
#   and the drain after a steady window. Other knobs: README.md.
#
# Prints exactly one JSON line on stdout:
#   burn:   {"system","workload":"burn","clients","batch","jobs","seconds","rate","partial"}
#   steady: {"system","workload":"steady","clients","batch","target_rate","rate","jobs",
#            "seconds","p50_ms","p99_ms","p999_ms","max_depth","mean_depth","dead_tuples",...}
# All logs go to stderr. Drops and recreates the system's schema (pgboss /
# graphile_worker) in the target database. Installs the pinned npm packages
# (npm ci, from package-lock.json) into bench/peers/node_modules on first use.
set -eu

if ! { [ "$#" -eq 5 ] && [ "$3" != steady ]; } && ! { [ "$#" -eq 7 ] && [ "$3" = steady ]; }; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)

if [ ! -d "$here/node_modules/pg-boss" ] || [ ! -d "$here/node_modules/graphile-worker" ]; then
    echo "run-peer.sh: installing pinned peers (npm ci) in $here" >&2
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi

exec node "$here/burn.js" "$@"
