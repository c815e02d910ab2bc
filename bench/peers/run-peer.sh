#!/bin/sh
# Burn-down run of one peer queue system (pg-boss or graphile-worker).
#
#   bench/peers/run-peer.sh SYSTEM CONNINFO JOBS WORKERS BATCH
#
#   SYSTEM   pgboss | graphile
#   CONNINFO libpq conninfo ("host=/tmp/x port=55497 dbname=postgres user=postgres")
#            or a postgres:// URL
#   JOBS     jobs pre-inserted and then drained
#   WORKERS  concurrent worker loops (pg-boss) / concurrency (graphile-worker)
#   BATCH    1 = no batching; >1 = the system's documented batching (README.md)
#
# Prints exactly one JSON line on stdout:
#   {"system":..,"workload":"burn","clients":W,"batch":B,"jobs":N,"seconds":S,"rate":R}
# All logs go to stderr. Drops and recreates the system's schema (pgboss /
# graphile_worker) in the target database. Installs the pinned npm packages
# (npm ci, from package-lock.json) into bench/peers/node_modules on first use.
set -eu

if [ "$#" -ne 5 ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)

if [ ! -d "$here/node_modules/pg-boss" ] || [ ! -d "$here/node_modules/graphile-worker" ]; then
    echo "run-peer.sh: installing pinned peers (npm ci) in $here" >&2
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi

exec node "$here/burn.js" "$@"
