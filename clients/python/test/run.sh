#!/usr/bin/env bash
# clients/python/test/run.sh: the Python client's test suite (part of the
# suite "clients" of test/run.sh, i.e. "make test"; also runs on its own, as
# root or as a user who may run initdb).
#
#   1. starts a throwaway PostgreSQL 15 cluster with silo (clients/test-cluster.sh:
#      a unix socket in a scratch directory, no TCP port);
#   2. runs each test/test_*.py with unittest (test/runtests.py), one module
#      after the other, against that cluster, with Debian's python3
#      (/usr/bin/python3, which sees python3-psycopg);
#   2b. when etcd is installed (and SILO_CLIENTS_CLUSTER2 is not 0), starts a
#      real two-node cluster (test-cluster.sh's cluster2_start) and runs
#      test/cluster2_e2e.py, then test/cluster2_moves_e2e.py (shards moving
#      under the client and the worker) against it, then stops it;
#   3. installs the package into a fresh virtual environment that sees
#      Debian's psycopg (python3 -m venv --system-site-packages; pip install
#      --no-build-isolation --no-index <copy of the package>: no network) and
#      runs the README's three examples there (sync, asyncio, cluster
#      mode), comparing their output with README.md's;
#   4. stops the cluster by its pid.
#
# Quiet on success: one line per step.  A failure prints the failing tests'
# output, the end of the server log, and keeps the scratch directory.  The
# last line is "clients-python: N passed, N failed" (each unittest test
# counts, each example of step 3 one); the exit status is non-zero iff something
# failed.
#
# Environment: SILO_PY_TESTS, test module names to run, separated by spaces
# (default: every test_*.py; "none" runs only step 3); SILO_PY_TIMEOUT,
# seconds per module (default 300); SILO_PY_TMP, where the scratch directory
# goes (default /tmp); SILO_PYTHON, the interpreter (default /usr/bin/python3).

set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
pkg=$(cd "$here/.." && pwd) || exit 1
py=${SILO_PYTHON:-/usr/bin/python3}
export PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH
SUITE=clients-python
# shellcheck source=../../test-suite.sh
. "$here/../../test-suite.sh"

if ! "$py" -c 'import psycopg' 2>/dev/null; then
	echo "clients-python: $py cannot import psycopg (apt-get install python3-psycopg; tools/ensure-deps.sh does)"
	abort
fi

scratch=$(mktemp -d "${SILO_PY_TMP:-/tmp}/silo-python-test.XXXXXX") || abort
if ! cluster_start "$scratch"; then
	echo "clients-python: could not start a cluster in $scratch"
	keep=1
	abort
fi

# 2. the unittest modules
if [ "${SILO_PY_TESTS:-}" = none ]; then
	modules=()
elif [ -n "${SILO_PY_TESTS:-}" ]; then
	read -r -a modules <<<"$SILO_PY_TESTS"
else
	modules=()
	for f in "$here"/test_*.py; do
		[ -f "$f" ] && modules+=("$(basename "$f" .py)")
	done
fi
for m in "${modules[@]}"; do
	m=${m%.py}
	log=$scratch/$m.log
	start=$(date +%s)
	(cd "$here" && SILO_TEST_URL=$CLUSTER_URL timeout -k 10 "${SILO_PY_TIMEOUT:-300}" \
		"$py" runtests.py "$m") </dev/null >"$log" 2>&1
	rc=$?
	read -r p fl < <(awk '/^RESULT [0-9]+ [0-9]+$/ { p = $2; f = $3 } END { print p + 0, f + 0 }' "$log")
	if [ "$rc" -ne 0 ] && [ "$fl" -eq 0 ]; then fl=1; fi
	if [ "$p" -eq 0 ] && [ "$fl" -eq 0 ]; then fl=1; fi	# a module that ran no test has not passed
	pass=$((pass + p))
	fail=$((fail + fl))
	if [ "$fl" -eq 0 ]; then
		printf 'clients-python: %s ... ok (%d tests, %ds)\n' "$m" "$p" "$(($(date +%s) - start))"
	else
		printf 'clients-python: %s ... FAILED (%d passed, %d failed, exit status %d)\n' "$m" "$p" "$fl" "$rc"
		printf -- '---- failing tests of %s (whole output: %s)\n' "$m" "$log"
		if grep -qE '^(FAIL|ERROR):' "$log"; then
			awk '/^(=+)$/ { show = 1 } /^Ran [0-9]+ tests? in/ { show = 0 } show' "$log" | head -n 400
		else
			tail -n 60 "$log"
		fi
	fi
done

# 2b. cluster mode against a real two-node cluster with etcd (test-cluster.sh's
# cluster2_start), when etcd is installed and SILO_CLIENTS_CLUSTER2 is not 0
if [ "${SILO_CLIENTS_CLUSTER2:-1}" != 0 ] && [ "${SILO_PY_TESTS:-}" != none ] && cluster2_check; then
	start=$(date +%s)
	log=$scratch/cluster2_e2e.log
	if ! cluster2_start "$scratch/c2" >"$scratch/cluster2-start.log" 2>&1; then
		cat "$scratch/cluster2-start.log"
		echo "clients-python: cluster2_e2e ... FAILED (the two-node cluster did not start)"
		fail=$((fail + 1))
	else
		# cluster2_e2e first: it expects n2 to own nothing, which the moves test changes
		for mod in cluster2_e2e cluster2_moves_e2e; do
			start=$(date +%s)
			log=$scratch/$mod.log
			(cd "$here" && SILO_TEST_URL=$CLUSTER_URL SILO_TEST_N1_URL=$CLUSTER2_N1_URL SILO_TEST_N2_URL=$CLUSTER2_N2_URL \
				timeout -k 10 "${SILO_PY_TIMEOUT:-300}" "$py" runtests.py "$mod") </dev/null >"$log" 2>&1
			rc=$?
			read -r p fl < <(awk '/^RESULT [0-9]+ [0-9]+$/ { p = $2; f = $3 } END { print p + 0, f + 0 }' "$log")
			if [ "$rc" -ne 0 ] && [ "$fl" -eq 0 ]; then fl=1; fi
			if [ "$p" -eq 0 ] && [ "$fl" -eq 0 ]; then fl=1; fi
			pass=$((pass + p))
			fail=$((fail + fl))
			if [ "$fl" -eq 0 ]; then
				printf 'clients-python: %s (two nodes, etcd) ... ok (%d tests, %ds)\n' "$mod" "$p" "$(($(date +%s) - start))"
				# the moves test's one line of figures
				grep -h '^# [0-9]* jobs; ' "$log" | sed 's/^# /clients-python:   /' || true
			else
				printf 'clients-python: %s ... FAILED (%d passed, %d failed, exit status %d)\n' "$mod" "$p" "$fl" "$rc"
				tail -n 80 "$log"
			fi
		done
	fi
	cluster2_stop
fi

# 3. the README's examples (sync and asyncio), from a fresh virtual environment
ex=$scratch/example
mkdir -p "$ex/src" || abort
# a copy of the package: pip builds in the folder it installs from
cp -r "$pkg/pyproject.toml" "$pkg/README.md" "$pkg/silo_client" "$ex/src/" || abort
if ! { "$py" -m venv --system-site-packages "$ex/venv" &&
	PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
		"$ex/venv/bin/pip" install --no-build-isolation --no-index "$ex/src"; } </dev/null >"$ex/pip.log" 2>&1; then
	cat "$ex/pip.log"
	echo "clients-python: README examples ... FAILED (venv, pip install)"
	fail=$((fail + 1))
elif ! (cd "$ex" && "$ex/venv/bin/python" -c 'import silo_client, sys; sys.exit(not silo_client.__file__.startswith(sys.prefix))'); then
	echo "clients-python: README examples ... FAILED (silo_client was not imported from the venv)"
	fail=$((fail + 1))
else
	for kind in example example-async example-cluster; do
		awk -v m="$kind" '$0 == "<!-- " m ":start -->" { on = 1; next } $0 == "<!-- " m ":end -->" { on = 0 }
			on && !/^```/ { print }' "$pkg/README.md" >"$ex/$kind.py"
		awk -v m="$kind" '$0 == "<!-- " m ":output:start -->" { on = 1; next } $0 == "<!-- " m ":output:end -->" { on = 0 }
			on && !/^```/ { print }' "$pkg/README.md" >"$ex/$kind.expected"
		if [ ! -s "$ex/$kind.py" ] || [ ! -s "$ex/$kind.expected" ]; then
			echo "clients-python: README $kind ... FAILED (no code or output between the markers of README.md)"
			fail=$((fail + 1))
		elif ! (cd "$ex" && DATABASE_URL=$CLUSTER_URL timeout -k 10 60 "$ex/venv/bin/python" "$kind.py") </dev/null \
			>"$ex/$kind.out" 2>&1; then
			cat "$ex/$kind.out"
			echo "clients-python: README $kind ... FAILED (venv/bin/python $kind.py)"
			fail=$((fail + 1))
		elif ! diff -u "$ex/$kind.expected" "$ex/$kind.out" >"$ex/$kind.diff"; then
			cat "$ex/$kind.diff"
			echo "clients-python: README $kind ... FAILED (its output differs from README.md's)"
			fail=$((fail + 1))
		else
			echo "clients-python: README $kind (venv --system-site-packages, pip install --no-index) ... ok"
			pass=$((pass + 1))
		fi
	done
fi

if [ "$fail" -ne 0 ]; then
	printf -- '---- %s (last 40 lines)\n' "$scratch/server.log"
	tail -n 40 "$scratch/server.log"
fi
finish
