#!/usr/bin/env bash
# clients/node/test/run.sh: the Node client's test suite (suite "clients" of
# test/run.sh, i.e. "make test"; also runs on its own, as root or as a user
# who may run initdb).
#
#   1. builds the package if needed (clients/node/build.sh: npm ci from the
#      lock file, the TypeScript compiler);
#   2. starts a throwaway PostgreSQL 15 cluster with silo (clients/test-cluster.sh:
#      a unix socket in a scratch directory, no TCP port);
#   3. runs each test/*.test.mjs with node's test runner (TAP), one file
#      after the other, against that cluster;
#   3b. when etcd is installed (and SILO_CLIENTS_CLUSTER2 is not 0), starts a
#      real two-node cluster (test-cluster.sh's cluster2_start) and runs
#      test/cluster2.e2e.mjs, then test/cluster2-moves.e2e.mjs (shards
#      moving under the client and the worker) against it, then stops it;
#   4. type-checks test/typecheck.ts against the package's declarations;
#   5. installs the package into a fresh directory (npm install <path>) and
#      runs the README's examples there, the first one and cluster mode's
#      (npm 9.4 and later link the folder; Debian 12's npm 9.2 copies it
#      and fetches pg from the registry);
#   6. stops the cluster by its pid.
#
# Quiet on success: one line per step.  A failure prints the failing tests
# (their TAP blocks), the end of the server log, and keeps the scratch
# directory with every log.  The last line is "clients: N passed, N failed"
# (each node test counts, step 4 one, each example of step 5 one); the exit
# status is non-zero iff something failed.
#
# Environment: SILO_NODE_TESTS, a glob of test files to run (default
# "*.test.mjs"; "none" runs only steps 4-5); SILO_NODE_TIMEOUT, seconds
# per test file (default 180); SILO_NODE_TMP, where the scratch directory
# goes (default /tmp).

set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
pkg=$(cd "$here/.." && pwd) || exit 1
SUITE=clients
# shellcheck source=../../test-suite.sh
. "$here/../../test-suite.sh"

# failed_blocks TAP: the "not ok" lines of a TAP file, each with its YAML block.
failed_blocks()
{
	awk '
		/^[ \t]*not ok / { show = 1 }
		show { print }
		show && /^[ \t]*\.\.\.[ \t]*$/ { show = 0 }
	' "$1" | head -n 400
}

# tap_count TAP: "PASS FAIL" from the closing comments of node's TAP reporter
# (cancelled tests count as failures).
tap_count()
{
	awk '
		/^# pass [0-9]+$/ { p = $3 }
		/^# fail [0-9]+$/ { f += $3 }
		/^# cancelled [0-9]+$/ { f += $3 }
		END { print p + 0, f + 0 }
	' "$1"
}

if ! out=$("$pkg/build.sh" 2>&1); then
	printf '%s\n' "$out"
	echo "clients: build ... FAILED"
	abort
fi

scratch=$(mktemp -d "${SILO_NODE_TMP:-/tmp}/silo-node-test.XXXXXX") || abort
if ! cluster_start "$scratch"; then
	echo "clients: could not start a cluster in $scratch"
	keep=1
	abort
fi

# 3. the node tests
pattern=${SILO_NODE_TESTS:-*.test.mjs}
for f in "$here"/$pattern; do
	[ -f "$f" ] || continue
	name=$(basename "$f")
	tap=$scratch/${name%.mjs}.tap
	start=$(date +%s)
	(cd "$pkg" && SILO_TEST_URL=$CLUSTER_URL timeout -k 10 "${SILO_NODE_TIMEOUT:-180}" \
		node --test-reporter=tap "$f") </dev/null >"$tap" 2>&1
	rc=$?
	read -r p fl < <(tap_count "$tap")
	if [ "$rc" -ne 0 ] && [ "$fl" -eq 0 ]; then
		fl=1
	fi
	if [ "$p" -eq 0 ] && [ "$fl" -eq 0 ]; then
		fl=1	# a file that ran no test has not passed
	fi
	pass=$((pass + p))
	fail=$((fail + fl))
	if [ "$fl" -eq 0 ]; then
		printf 'clients: node %s ... ok (%d tests, %ds)\n' "$name" "$p" "$(($(date +%s) - start))"
	else
		printf 'clients: node %s ... FAILED (%d passed, %d failed, exit status %d)\n' "$name" "$p" "$fl" "$rc"
		printf -- '---- failing tests of %s (whole output: %s)\n' "$name" "$tap"
		if [ -n "$(failed_blocks "$tap")" ]; then failed_blocks "$tap"; else tail -n 60 "$tap"; fi
	fi
done

# 3b. cluster mode against a real two-node cluster with etcd (test-cluster.sh's
# cluster2_start), when etcd is installed and SILO_CLIENTS_CLUSTER2 is not 0
if [ "${SILO_CLIENTS_CLUSTER2:-1}" != 0 ] && cluster2_check; then
	start=$(date +%s)
	tap=$scratch/cluster2.tap
	if ! cluster2_start "$scratch/c2" >"$scratch/cluster2-start.log" 2>&1; then
		cat "$scratch/cluster2-start.log"
		echo "clients: node cluster2.e2e.mjs ... FAILED (the two-node cluster did not start)"
		fail=$((fail + 1))
	else
		# cluster2.e2e.mjs first: it expects n2 to own nothing, which the moves test changes
		for name in cluster2.e2e.mjs cluster2-moves.e2e.mjs; do
			start=$(date +%s)
			tap=$scratch/${name%.mjs}.tap
			(cd "$pkg" && SILO_TEST_URL=$CLUSTER_URL SILO_TEST_N1_URL=$CLUSTER2_N1_URL SILO_TEST_N2_URL=$CLUSTER2_N2_URL \
				timeout -k 10 "${SILO_NODE_TIMEOUT:-180}" node --test-reporter=tap "$here/$name") </dev/null >"$tap" 2>&1
			rc=$?
			read -r p fl < <(tap_count "$tap")
			if [ "$rc" -ne 0 ] && [ "$fl" -eq 0 ]; then fl=1; fi
			if [ "$p" -eq 0 ] && [ "$fl" -eq 0 ]; then fl=1; fi
			pass=$((pass + p))
			fail=$((fail + fl))
			if [ "$fl" -eq 0 ]; then
				printf 'clients: node %s (two nodes, etcd) ... ok (%d tests, %ds)\n' "$name" "$p" "$(($(date +%s) - start))"
				# the moves test's one line of figures (its "# ..." comment)
				grep -h '^# [0-9]* jobs; ' "$tap" | sed 's/^# /clients:   /' || true
			else
				printf 'clients: node %s ... FAILED (%d passed, %d failed, exit status %d)\n' "$name" "$p" "$fl" "$rc"
				if [ -n "$(failed_blocks "$tap")" ]; then failed_blocks "$tap"; else tail -n 60 "$tap"; fi
			fi
		done
	fi
	cluster2_stop
fi

# 4. the declarations serve a TypeScript user
if out=$(cd "$pkg" && node node_modules/typescript/bin/tsc -p test/tsconfig.json 2>&1); then
	echo "clients: typecheck test/typecheck.ts ... ok"
	pass=$((pass + 1))
else
	printf '%s\n' "$out"
	echo "clients: typecheck test/typecheck.ts ... FAILED"
	fail=$((fail + 1))
fi

# 5. the README's example, from a fresh directory
ex=$scratch/example
mkdir -p "$ex/home" || abort
awk '/<!-- example:start -->/ { on = 1; next } /<!-- example:end -->/ { on = 0 }
	on && !/^```/ { print }' "$pkg/README.md" >"$ex/example.mjs"
awk '/<!-- output:start -->/ { on = 1; next } /<!-- output:end -->/ { on = 0 }
	on && !/^```/ { print }' "$pkg/README.md" >"$ex/expected.txt"
if [ ! -s "$ex/example.mjs" ] || [ ! -s "$ex/expected.txt" ]; then
	echo "clients: README example ... FAILED (no example or output between the markers of README.md)"
	fail=$((fail + 1))
elif ! (cd "$ex" && HOME=$ex/home npm_config_cache=$ex/npm-cache npm_config_update_notifier=false \
	npm init -y >/dev/null && HOME=$ex/home npm_config_cache=$ex/npm-cache npm_config_update_notifier=false \
	npm install --no-audit --no-fund --loglevel=error "$pkg") </dev/null >"$ex/npm.log" 2>&1; then
	cat "$ex/npm.log"
	echo "clients: README example ... FAILED (npm install $pkg)"
	fail=$((fail + 1))
elif ! (cd "$ex" && DATABASE_URL=$CLUSTER_URL timeout -k 10 60 node example.mjs) </dev/null >"$ex/output.txt" 2>&1; then
	cat "$ex/output.txt"
	echo "clients: README example ... FAILED (node example.mjs)"
	fail=$((fail + 1))
elif ! diff -u "$ex/expected.txt" "$ex/output.txt" >"$ex/output.diff"; then
	cat "$ex/output.diff"
	echo "clients: README example ... FAILED (its output differs from README.md's)"
	fail=$((fail + 1))
else
	echo "clients: README example (npm install <path> in a fresh directory) ... ok"
	pass=$((pass + 1))
	# the cluster mode example, in the same directory
	awk '/<!-- example-cluster:start -->/ { on = 1; next } /<!-- example-cluster:end -->/ { on = 0 }
		on && !/^```/ { print }' "$pkg/README.md" >"$ex/example-cluster.mjs"
	awk '/<!-- output-cluster:start -->/ { on = 1; next } /<!-- output-cluster:end -->/ { on = 0 }
		on && !/^```/ { print }' "$pkg/README.md" >"$ex/expected-cluster.txt"
	if [ ! -s "$ex/example-cluster.mjs" ] || [ ! -s "$ex/expected-cluster.txt" ]; then
		echo "clients: README cluster example ... FAILED (no example or output between the markers of README.md)"
		fail=$((fail + 1))
	elif ! (cd "$ex" && DATABASE_URL=$CLUSTER_URL timeout -k 10 60 node example-cluster.mjs) </dev/null \
		>"$ex/output-cluster.txt" 2>&1; then
		cat "$ex/output-cluster.txt"
		echo "clients: README cluster example ... FAILED (node example-cluster.mjs)"
		fail=$((fail + 1))
	elif ! diff -u "$ex/expected-cluster.txt" "$ex/output-cluster.txt" >"$ex/output-cluster.diff"; then
		cat "$ex/output-cluster.diff"
		echo "clients: README cluster example ... FAILED (its output differs from README.md's)"
		fail=$((fail + 1))
	else
		echo "clients: README cluster example ... ok"
		pass=$((pass + 1))
	fi
fi

if [ "$fail" -ne 0 ]; then
	printf -- '---- %s (last 40 lines)\n' "$scratch/server.log"
	tail -n 40 "$scratch/server.log"
fi
finish
