# shellcheck shell=bash
# clients/test-suite.sh: the frame both client libraries' test scripts
# (clients/node/test/run.sh, clients/python/test/run.sh) share.  Set SUITE,
# the prefix of the script's lines ("clients", "clients-python"), then
# source it; it sources test-cluster.sh and gives:
#
#   pass, fail     the counts the script adds to
#   scratch, keep  the scratch directory (removed at the end unless
#                  something failed or keep=1)
#   finish         stop the cluster, print "SUITE: N passed, N failed" and
#                  exit, non-zero iff something failed (also on EXIT)
#   abort          count one failure and finish (on INT and TERM)
#
# It clears the libpq environment, so that nothing reaches another cluster.

export LANG=C.UTF-8 LC_ALL=C.UTF-8
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGSERVICE PGSERVICEFILE PGOPTIONS PGDATA
export PGOPTIONS='-c client_min_messages=warning'

pass=0
fail=0
scratch=
keep=0

# finish: stop the cluster, report, keep or remove the scratch directory.
finish()
{
	trap - EXIT INT TERM
	cluster_stop
	cluster2_stop
	if [ -n "$scratch" ]; then
		if [ "$fail" -eq 0 ] && [ "$keep" -eq 0 ]; then
			rm -rf "$scratch"
		else
			echo "$SUITE: logs kept in $scratch"
		fi
	fi
	echo "$SUITE: $pass passed, $fail failed"
	[ "$fail" -eq 0 ]
	exit
}

# abort: one more failure, then finish.
abort()
{
	fail=$((fail + 1))
	finish
}

# shellcheck source=test-cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/test-cluster.sh"
trap abort EXIT INT TERM
