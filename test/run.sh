#!/usr/bin/env bash
# test/run.sh: build, install and test silo; called by "make test" and .ci/run.
#
# Runs as root on a bare Debian 12 machine: installs the missing packages,
# builds and installs the extension as root, copies the tree into a scratch
# directory owned by "postgres", and runs each suite there as "postgres"
# (initdb refuses to run as root):
#
#   regress     pg_regress, temp instance, tests listed in test/regress_schedule
#               (sql/<name>.sql, expected/<name>.out)
#   isolation   pg_isolation_regress, temp instance, every
#               test/isolation/specs/*.spec
#   tap         prove -v over test/t/*.pl (PostgreSQL::Test::Cluster); the
#               full output goes to $SCRATCH/tap.log, the screen shows one
#               line per file (and the failed assertions) and prove's summary
#   layers      tools/check-layers.sh: calls between src/'s folders go down
#   clients     the client libraries' own suites: clients/node/test/run.sh
#               (node's test runner against a cluster of its own, the
#               README example from a fresh npm install) and
#               clients/python/test/run.sh (unittest against a cluster of its
#               own, the README examples from a fresh venv); the build step
#               runs clients/node/build.sh (npm ci from the lock file, tsc)
#               and checks that Debian's python3 imports psycopg
#
# Each suite runs on its own, under a timeout, so one failing suite does not
# hide the others.  The last line printed is always "N passed, N failed", and
# the exit status is non-zero iff something failed.
#
# Environment:
#   SILO_TESTS          which suites or tests to run; words separated by
#                       spaces or commas (default: all suites):
#                         regress | isolation | tap | layers | clients
#                                                        a whole suite
#                         regress:NAME  isolation:NAME   one test (glob ok)
#                         clients:GLOB                   clients/node test
#                                                        files (client.test.mjs),
#                                                        or, for a GLOB that ends
#                                                        in .py or starts with
#                                                        test_, clients/python
#                                                        test modules only
#                                                        (test_client.py)
#                         tap:PATTERN or PATTERN         TAP files whose name
#                                                        matches (010_crash,
#                                                        t/0*.pl, ...)
#   SILO_STRESS         passed to the TAP tests (SILO_STRESS=long: long stress)
#   SILO_SUITE_TIMEOUT  seconds per suite (default 900)
#   SILO_KEEP_SCRATCH   set to 1 to keep the scratch dir after a green run
#   SILO_REGRESS_OPTS   extra options for pg_regress and pg_isolation_regress

# shellcheck source-path=SCRIPTDIR/..
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
# SILO_PGBIN: the bin directory of a private copy of the PostgreSQL tree
# (usr/lib/postgresql/15, usr/share/postgresql/15 and usr/include/postgresql
# copied under one directory; PostgreSQL finds its files relative to its
# binaries), to install into and test against instead of the system's, so
# that two checkouts can test at once
PGBIN=${SILO_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
PGXS_DIR=${PGBIN%/bin}/lib/pgxs
PG_REGRESS=$PGXS_DIR/src/test/regress/pg_regress
PG_ISOLATION_REGRESS=$PGXS_DIR/src/test/isolation/pg_isolation_regress
SUITE_TIMEOUT=${SILO_SUITE_TIMEOUT:-900}
RUN_AS=postgres

# Deterministic locale and no stray connection settings: nothing here may
# ever reach the default cluster on port 5432.
export LANG=C.UTF-8 LC_ALL=C.UTF-8
unset LANGUAGE LC_CTYPE LC_COLLATE LC_MESSAGES LC_MONETARY LC_NUMERIC LC_TIME
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGSERVICE PGSERVICEFILE PGOPTIONS PGDATA

total_pass=0
total_fail=0
summaries=()
SCRATCH=

say() { printf '%s\n' "$*"; }
header() { printf '\n==== %s\n' "$*"; }

# finish: print the closing line and exit.  Nothing may be printed after it.
finish()
{
	trap - EXIT INT TERM
	say "$total_pass passed, $total_fail failed"
	[ "$total_fail" -eq 0 ]
	exit
}

# AS_USER: prefix that runs a command as the test user (empty when not root).
AS_USER=()
[ "$(id -u)" = 0 ] && AS_USER=(runuser -u "$RUN_AS" --)

# stop_leftover_servers: stop any postmaster still running from a data
# directory inside the scratch dir (a suite killed by its timeout cannot
# stop its own servers).
stop_leftover_servers()
{
	local pidfile
	[ -n "$SCRATCH" ] && [ -d "$SCRATCH" ] || return 0
	for pidfile in "$SCRATCH"/*/tmp_check/data/postmaster.pid \
		"$SCRATCH"/tmp_check/t_*_data/pgdata/postmaster.pid \
		"$SCRATCH"/clients/*/data/postmaster.pid; do
		[ -f "$pidfile" ] || continue
		say "stopping leftover server in ${pidfile%/postmaster.pid}"
		"${AS_USER[@]}" "$PGBIN/pg_ctl" -D "${pidfile%/postmaster.pid}" -m immediate -w -t 30 stop \
			>/dev/null 2>&1 || true
	done
}

# run_logged LOG CMD...: run CMD under the suite timeout with its output
# saved to LOG and shown as it comes (through the command LOG_FILTER names,
# when set); returns CMD's status (124: timed out).  timeout(1) puts CMD in
# its own process group and kills all of it.
SUITE_PID=
LOG_FILTER=
run_logged()
{
	local log=$1 rc tail_pid
	shift
	: >"$log"
	timeout -k 60 "$SUITE_TIMEOUT" "$@" </dev/null >"$log" 2>&1 &
	SUITE_PID=$!
	if [ -n "$LOG_FILTER" ]; then
		tail -n +1 -f --pid="$SUITE_PID" "$log" | "$LOG_FILTER" &
	else
		tail -n +1 -f --pid="$SUITE_PID" "$log" &
	fi
	tail_pid=$!
	wait "$SUITE_PID"
	rc=$?
	wait "$tail_pid"
	SUITE_PID=
	return "$rc"
}

# on_abort: a signal, or an exit that did not go through finish.
# shellcheck disable=SC2317 # called from a trap
on_abort()
{
	# ignore further signals (a group signal can arrive twice) while cleaning up
	trap '' INT TERM
	trap - EXIT
	if [ -n "$SUITE_PID" ]; then
		kill -TERM "$SUITE_PID" 2>/dev/null
		wait "$SUITE_PID" 2>/dev/null
	fi
	stop_leftover_servers
	say "aborted"
	[ -n "$SCRATCH" ] && say "scratch dir kept: $SCRATCH"
	total_fail=$((total_fail + 1))
	finish
}

# ---------------------------------------------------------------------------
# Suite selection (SILO_TESTS)
# ---------------------------------------------------------------------------
want_regress=0 want_isolation=0 want_tap=0 want_layers=0 want_clients=0
regress_only=() isolation_only=() tap_patterns=() clients_only=

parse_selection()
{
	local sel=${SILO_TESTS:-} word
	sel=${sel//,/ }
	if [ -z "${sel// /}" ] || [ "$sel" = all ]; then
		want_regress=1 want_isolation=1 want_tap=1 want_layers=1 want_clients=1
		return
	fi
	for word in $sel; do
		case $word in
			all) want_regress=1 want_isolation=1 want_tap=1 want_layers=1 want_clients=1 ;;
			layers) want_layers=1 ;;
			clients) want_clients=1 ;;
			clients:*) want_clients=1 clients_only=${word#*:} ;;
			regress) want_regress=1 ;;
			isolation | iso) want_isolation=1 ;;
			tap | prove) want_tap=1 ;;
			regress:*) want_regress=1 regress_only+=("${word#*:}") ;;
			isolation:* | iso:*) want_isolation=1 isolation_only+=("${word#*:}") ;;
			tap:*) want_tap=1 tap_patterns+=("${word#*:}") ;;
			*) want_tap=1 tap_patterns+=("$word") ;;
		esac
	done
}

# tap_file_matches FILE: does FILE (a path under test/t) match tap_patterns?
tap_file_matches()
{
	local name=${1##*/} pat
	[ "${#tap_patterns[@]}" -eq 0 ] && return 0
	for pat in "${tap_patterns[@]}"; do
		pat=${pat##*/}
		case $pat in
			*[*?[]* | *.pl) ;;
			*) pat="*$pat*" ;;
		esac
		# shellcheck disable=SC2053 # pat is a glob on purpose
		[[ $name == $pat ]] && return 0
	done
	return 1
}

# ---------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------

# count_regress LOG: "PASS FAIL" from pg_regress / pg_isolation_regress output.
count_regress()
{
	local pass fail
	pass=$(grep -cE '^\s*(test\s+)?\S+\s+\.\.\.\s+ok\b' "$1")
	fail=$(grep -cE '^\s*(test\s+)?\S+\s+\.\.\.\s+(FAILED|failed)\b' "$1")
	echo "${pass:-0} ${fail:-0}"
}

# count_tap LOG: "PASS FAIL" from prove output.  Tests= total minus failed
# assertions, plus one failure per script that died (a summary entry with
# "Failed: 0").  If prove printed no summary (bail out), count the ok /
# not ok lines of -v instead, plus one failure for the bail out.
count_tap()
{
	awk '
		/^Files=[0-9]+, Tests=[0-9]+/ {
			summary = 1; split($2, a, "="); total += a[2] + 0
		}
		/\(Wstat: .*Tests: [0-9]+ Failed: [0-9]+\)/ {
			f = $0; sub(/.*Failed: /, "", f); sub(/\).*/, "", f)
			failed += f; if (f + 0 == 0) died++
		}
		/^[ \t]*ok [0-9]+/ { oks++ }
		/^[ \t]*not ok [0-9]+/ { if ($0 !~ /# *TODO/) notoks++; else oks++ }
		/^Bailout called|^FAILED--Further testing stopped/ { bailed = 1 }
		END {
			if (summary)
				print total - failed, failed + died
			else
				print oks + 0, notoks + bailed
		}' "$1"
}

# tap_progress: filter prove -v output (stdin) down to one line per TAP
# file, "test/t/NNN_name.pl .. ok" (or skipped, or Dubious ... with the
# subtest count), each failed assertion ("not ok") under its file, and
# prove's closing summary.  A file's "ok" counts once its plan ("1..N") was
# seen.  A file that never got its result line (the suite timed out) is
# named at the end.  Everything else (notes, the
# scripts' stderr) stays in the log only.
# shellcheck disable=SC2317 # called through LOG_FILTER
tap_progress()
{
	awk '
		function result(text) {
			printf "%s .. %s\n", file, text
			if (notok != "")
				printf "%s", notok
			file = ""; notok = ""; planned = 0; fflush()
		}
		summary { print; fflush(); next }
		/^Test Summary Report$/ || /^All tests successful\.$/ || /^Files=[0-9]+, Tests=[0-9]+/ {
			summary = 1; print; fflush(); next
		}
		/^[^ \t#]+\.pl \.+ ?/ {
			if (file != "")
				result("(no result)")
			file = $1; rest = $0; sub(/^[^ ]+ \.+ ?/, "", rest)
			if (rest != "")
				result(rest)
			next
		}
		file == "" { next }
		/^1\.\.[0-9]+/ { planned = 1; next }
		/^not ok [0-9]+/ && !/# *TODO/ { notok = notok "    " $0 "\n"; next }
		/^ok$/ && planned { result("ok"); next }
		/^Dubious, / { dubious = $0; next }
		/^(Failed [0-9]+\/[0-9]+ subtests|All [0-9]+ subtests passed|No subtests run)/ {
			sub(/ +$/, ""); result((dubious != "" ? dubious ": " : "") $0); dubious = ""; next
		}
		/^Bailout called/ { print; fflush(); next }
		END { if (file != "") result("(no result: the run ended here)") }'
}

# tap_failures LOG: the failed assertions of a TAP script's log
# (regress_log_NAME), each with the diagnostics below it, 40 lines at most
# for each and 200 in all.  Lines of that log may start with a "[time](elapsed) " stamp.
tap_failures()
{
	awk '
		{ line = $0; sub(/^\[[^]]*\]\([^)]*\) ?/, "", line) }
		line ~ /^not ok [0-9]+/ && line !~ /# *TODO/ { shown = 0; on = 1 }
		on && line !~ /^not ok / && line !~ /^#/ && line != "" { on = 0 }
		on && shown++ < 40 && total++ < 200 { print line }' "$1"
}

# record SUITE PASS FAIL RC: add a suite result; a runner that failed without
# a counted failure counts as one failure.
record()
{
	local suite=$1 pass=$2 fail=$3 rc=$4 note=
	if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
		fail=1
		note=" (runner exited with status $rc)"
	fi
	[ "$rc" -eq 124 ] && note=" (timed out after ${SUITE_TIMEOUT}s)"
	total_pass=$((total_pass + pass))
	total_fail=$((total_fail + fail))
	summaries+=("$(printf '%-10s %4d passed, %4d failed%s' "$suite" "$pass" "$fail" "$note")")
}

# show_tail FILE [LINES]: print the tail of a log under a sub-header.
show_tail()
{
	local f=$1 n=${2:-80}
	[ -s "$f" ] || return 0
	printf -- '---- %s (last %d lines)\n' "$f" "$n"
	tail -n "$n" "$f"
}

# ---------------------------------------------------------------------------
# Suites
# ---------------------------------------------------------------------------

# run_pg_regress SUITE DRIVER INPUTDIR TEST-ARGS...: one pg_regress-style run
# on a temp instance, output in $SCRATCH/SUITE.
run_pg_regress()
{
	local suite=$1 driver=$2 inputdir=$3 out rc pass fail
	shift 3
	out=$SCRATCH/$suite
	"${AS_USER[@]}" mkdir -p "$out"

	# shellcheck disable=SC2086 # SILO_REGRESS_OPTS is a list of options
	run_logged "$out/run.log" "${AS_USER[@]}" "$driver" \
		--temp-instance="$out/tmp_check" \
		--temp-config="$COPY/test/silo.conf" \
		--bindir="$PGBIN" \
		--inputdir="$inputdir" \
		--outputdir="$out" \
		--dbname=contrib_regression \
		--no-locale --encoding=UTF8 \
		${SILO_REGRESS_OPTS:-} \
		"$@"
	rc=$?
	stop_leftover_servers

	read -r pass fail < <(count_regress "$out/run.log")
	if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
		header "$suite failed: diagnostics"
		if [ -s "$out/regression.diffs" ]; then
			say "---- $out/regression.diffs"
			head -n 600 "$out/regression.diffs"
		fi
		grep -q 'initdb failed' "$out/run.log" && show_tail "$out/log/initdb.log" 40
		show_tail "$out/log/postmaster.log" 100
		[ "$rc" -eq 124 ] && say "$suite: timed out after ${SUITE_TIMEOUT}s"
	fi
	record "$suite" "$pass" "$fail" "$rc"
}

suite_regress()
{
	local sched=$COPY/test/regress_schedule
	header "regress (pg_regress)"
	if [ "${#regress_only[@]}" -gt 0 ]; then
		local names=() pat f
		for pat in "${regress_only[@]}"; do
			for f in "$COPY"/sql/$pat.sql; do
				case ${f##*/} in *--*) continue ;; esac	# extension scripts
				[ -f "$f" ] && names+=("$(basename "$f" .sql)")
			done
		done
		if [ "${#names[@]}" -eq 0 ]; then
			say "no regress test matches: ${regress_only[*]}"
			record regress 0 1 0
			return
		fi
		run_pg_regress regress "$PG_REGRESS" "$COPY" "${names[@]}"
	elif [ -f "$sched" ] && grep -qE '^[[:space:]]*test:[[:space:]]*[^[:space:]]' "$sched"; then
		run_pg_regress regress "$PG_REGRESS" "$COPY" --schedule="$sched"
	else
		# a suite that finds nothing to run has not passed
		say "FAILED: test/regress_schedule is missing or lists no tests"
		record regress 0 1 0
	fi
}

suite_isolation()
{
	local specs=() f pat name
	header "isolation (pg_isolation_regress)"
	for f in "$COPY"/test/isolation/specs/*.spec; do
		[ -f "$f" ] || continue
		name=$(basename "$f" .spec)
		if [ "${#isolation_only[@]}" -gt 0 ]; then
			for pat in "${isolation_only[@]}"; do
				# shellcheck disable=SC2053 # pat is a glob on purpose
				[[ $name == $pat ]] && { specs+=("$name"); break; }
			done
		else
			specs+=("$name")
		fi
	done
	if [ "${#specs[@]}" -eq 0 ]; then
		if [ "${#isolation_only[@]}" -gt 0 ]; then
			say "no isolation spec matches: ${isolation_only[*]}"
			record isolation 0 1 0
		else
			say "FAILED: no specs in test/isolation/specs"
			record isolation 0 1 0
		fi
		return
	fi
	run_pg_regress isolation "$PG_ISOLATION_REGRESS" "$COPY/test/isolation" "${specs[@]}"
}

suite_tap()
{
	local files=() f rc pass fail log=$SCRATCH/tap.log
	header "tap (prove)"
	for f in "$COPY"/test/t/*.pl; do
		[ -f "$f" ] || continue
		tap_file_matches "$f" && files+=("test/t/${f##*/}")
	done
	if [ "${#files[@]}" -eq 0 ]; then
		if [ "${#tap_patterns[@]}" -gt 0 ]; then
			say "no TAP file matches: ${tap_patterns[*]}"
			record tap 0 1 0
		else
			say "FAILED: no test/t/*.pl"
			record tap 0 1 0
		fi
		return
	fi

	# cwd is $COPY, so prove names the files test/t/*.pl
	say "full output: $log"
	LOG_FILTER=tap_progress run_logged "$log" "${AS_USER[@]}" env \
		PATH="$PGBIN:$PATH" \
		PG_REGRESS="$PG_REGRESS" \
		TESTDIR="$SCRATCH" \
		SILO_SRC="$COPY" \
		SILO_WORKER="$COPY/tools/silo-worker" \
		SILO_STRESS="${SILO_STRESS:-}" \
		prove -v \
		-I "$PGXS_DIR/src/test/perl" \
		-I "$COPY/test/perl" \
		"${files[@]}"
	rc=$?
	stop_leftover_servers

	read -r pass fail < <(count_tap "$log")
	if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
		header "tap failed: diagnostics"
		# The scripts in prove's failure report; without one (the run was
		# cut short), the last script prove started.  For each, the tail of
		# its own output (regress_log_NAME: every TAP line, note and diag)
		# and of its servers' logs, all kept with the scratch dir.
		local failed_scripts=() name
		mapfile -t failed_scripts < <(sed -nE 's|^(\S*/)?(\S+)\.pl +\(Wstat: .*|\2|p' "$log")
		if [ "${#failed_scripts[@]}" -eq 0 ]; then
			mapfile -t failed_scripts < <(sed -nE 's|^(\S*/)?([^/ ]+)\.pl \.+.*|\2|p' "$log" | tail -n 1)
		fi
		for name in "${failed_scripts[@]}"; do
			f=$SCRATCH/tmp_check/log/regress_log_$name
			if [ -s "$f" ] && grep -qE '(^|\) )not ok [0-9]+' "$f"; then
				say "---- $f: the failed assertions"
				tap_failures "$f"
			fi
			show_tail "$f" 60
			for f in "$SCRATCH"/tmp_check/log/"${name}"_*.log; do
				[ -f "$f" ] && show_tail "$f" 20
			done
		done
		say "---- the full output of prove: $log"
		say "---- every script's output and server logs: $SCRATCH/tmp_check/log/"
		[ "$rc" -eq 124 ] && say "tap: timed out after ${SUITE_TIMEOUT}s"
	fi
	record tap "$pass" "$fail" "$rc"
}

# suite_layers: the calls between src/'s folders go down the table of
# src/README.md (tools/check-layers.sh, on the objects just built), and
# the check catches an upward call built for the purpose; and every error
# message docs/sqlstates.md quotes is one a regress test has seen
# (tools/check-docs-messages.sh).
suite_layers()
{
	local pass=0 fail=0 out
	header "layers (tools/check-layers.sh)"
	if out=$("$SRC/tools/check-layers.sh" 2>&1); then
		say "layers ... ok"
		pass=$((pass + 1))
	else
		say "$out"
		say "layers ... FAILED"
		fail=$((fail + 1))
	fi
	if out=$("$SRC/tools/check-layers.sh" --selftest 2>&1); then
		say "layers selftest ... ok"
		pass=$((pass + 1))
	else
		say "$out"
		say "layers selftest ... FAILED"
		fail=$((fail + 1))
	fi
	if out=$("$SRC/tools/check-docs-messages.sh" 2>&1); then
		say "docs messages ... ok"
		pass=$((pass + 1))
	else
		say "$out"
		say "docs messages ... FAILED"
		fail=$((fail + 1))
	fi
	record layers "$pass" "$fail" 0
}

# suite_clients: the client libraries' suites, each of which starts and stops
# its own cluster (in $SCRATCH/clients, where stop_leftover_servers finds it)
# and ends with "clients: N passed, N failed" (clients/node) or
# "clients-python: N passed, N failed" (clients/python); the suite counts
# the sum.  A part whose runner failed without a counted failure counts one.
suite_clients()
{
	local log=$SCRATCH/clients.log pylog=$SCRATCH/clients-python.log rc=0 rc_part pass=0 fail=0 p f line
	local run_node=1 run_py=1 py_tests= m
	header "clients (clients/node/test/run.sh, clients/python/test/run.sh)"
	if [ -n "$clients_only" ]; then
		case $clients_only in
			*.py | test_*)
				run_node=0
				for m in "$COPY"/clients/python/test/$clients_only; do
					case $m in */test_*.py) [ -f "$m" ] && py_tests+="${py_tests:+ }$(basename "$m" .py)" ;; esac
				done
				if [ -z "$py_tests" ]; then
					say "no clients/python test module matches: $clients_only"
					record clients 0 1 0
					return
				fi
				;;
			*) run_py=0 ;;
		esac
	fi
	"${AS_USER[@]}" mkdir -p "$SCRATCH/clients"
	# clients/node
	if [ "$run_node" = 1 ]; then
		if [ "$clients_build_ok" != 1 ]; then
			show_tail "$SCRATCH/clients-build.log" 60
			say "clients: build ... FAILED"
			fail=$((fail + 1))
		else
			run_logged "$log" "${AS_USER[@]}" env PGBIN="$PGBIN" \
				SILO_NODE_TMP="$SCRATCH/clients" \
				${clients_only:+SILO_NODE_TESTS="$clients_only"} \
				bash "$COPY/clients/node/test/run.sh"
			rc_part=$?
			stop_leftover_servers
			p=0 f=0
			line=$(grep -E '^clients: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
			if [ -n "$line" ]; then
				p=${line#clients: }
				p=${p%% *}
				f=${line#*passed, }
				f=${f%% *}
			fi
			[ "$rc_part" -ne 0 ] && [ "$f" -eq 0 ] && f=1
			[ "$rc_part" -eq 124 ] && say "clients: node timed out after ${SUITE_TIMEOUT}s"
			[ "$rc_part" -ne 0 ] && rc=$rc_part
			pass=$((pass + p))
			fail=$((fail + f))
		fi
	fi
	# clients/python
	if [ "$run_py" = 1 ]; then
		if [ "$clients_python_ok" != 1 ]; then
			show_tail "$SCRATCH/clients-python-build.log" 20
			say "clients-python: python3 with psycopg ... FAILED"
			fail=$((fail + 1))
		else
			run_logged "$pylog" "${AS_USER[@]}" env PGBIN="$PGBIN" \
				SILO_PY_TMP="$SCRATCH/clients" \
				${py_tests:+SILO_PY_TESTS="$py_tests"} \
				bash "$COPY/clients/python/test/run.sh"
			rc_part=$?
			stop_leftover_servers
			p=0 f=0
			line=$(grep -E '^clients-python: [0-9]+ passed, [0-9]+ failed$' "$pylog" | tail -n 1)
			if [ -n "$line" ]; then
				p=${line#clients-python: }
				p=${p%% *}
				f=${line#*passed, }
				f=${f%% *}
			fi
			[ "$rc_part" -ne 0 ] && [ "$f" -eq 0 ] && f=1
			[ "$rc_part" -eq 124 ] && say "clients: python timed out after ${SUITE_TIMEOUT}s"
			[ "$rc_part" -ne 0 ] && rc=$rc_part
			pass=$((pass + p))
			fail=$((fail + f))
		fi
	fi
	say "clients: $pass passed, $fail failed"
	record clients "$pass" "$fail" "$rc"
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
trap on_abort EXIT INT TERM

parse_selection

# shellcheck source=tools/ensure-deps.sh
. "$SRC/tools/ensure-deps.sh"
if ! silo_ensure_deps; then
	total_fail=1
	finish
fi
if [ "$(id -u)" = 0 ] && ! id "$RUN_AS" >/dev/null 2>&1; then
	say "user $RUN_AS does not exist (it comes with postgresql-15)"
	total_fail=1
	finish
fi

SCRATCH=$(mktemp -d /tmp/silo-test.XXXXXX) || { total_fail=1; finish; }
COPY=$SCRATCH/src

header "build and install (log: $SCRATCH/build.log)"
if ! { make -C "$SRC" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" &&
	make -C "$SRC" PG_CONFIG="$PG_CONFIG" install; } </dev/null >"$SCRATCH/build.log" 2>&1; then
	cat "$SCRATCH/build.log"
	say "build failed; scratch dir kept: $SCRATCH"
	total_fail=1
	finish
fi
say "ok"

# The client libraries are built in the tree too (clients/node/dist, its
# node_modules; both git-ignored), so that the copy carries them; a failure
# here fails the clients suite only (its node part, or its python part).
clients_build_ok=0
clients_python_ok=0
if [ "$want_clients" = 1 ]; then
	if "$SRC/clients/node/build.sh" </dev/null >"$SCRATCH/clients-build.log" 2>&1; then
		clients_build_ok=1
	fi
	# clients/python needs no build: Debian's python3 and python3-psycopg
	if /usr/bin/python3 -c 'import psycopg, venv' </dev/null >"$SCRATCH/clients-python-build.log" 2>&1; then
		clients_python_ok=1
	fi
fi

# The copy is what the suites see: writable by the test user, so results/,
# output dirs and tmp_check land there, never in the source tree.
if ! { mkdir -p "$COPY" &&
	tar -C "$SRC" --exclude=./.git -cf - . | tar -C "$COPY" -xf - &&
	{ [ "$(id -u)" != 0 ] || chown -R "$RUN_AS:" "$SCRATCH"; }; }; then
	say "could not copy the tree to $COPY"
	total_fail=1
	finish
fi
cd "$COPY" || { total_fail=1; finish; }

[ "$want_layers" = 1 ] && suite_layers
[ "$want_regress" = 1 ] && suite_regress
[ "$want_isolation" = 1 ] && suite_isolation
[ "$want_tap" = 1 ] && suite_tap
[ "$want_clients" = 1 ] && suite_clients

stop_leftover_servers
header "summary"
for s in "${summaries[@]}"; do
	say "$s"
done
if [ "$total_fail" -eq 0 ] && [ "${SILO_KEEP_SCRATCH:-0}" != 1 ]; then
	cd / && rm -rf "$SCRATCH"
else
	say "scratch dir kept: $SCRATCH"
fi
finish
