#!/usr/bin/env bash
# tools/check-docs-messages.sh: every error message docs/sqlstates.md quotes
# is one the code really raises.
#
# The messages are the backticked texts in the first column of the tables of
# docs/sqlstates.md (rows "| `message` | ..."), several per cell when joined
# by " · ".  In a message, "…" stands for any text and "limits[i]" for any
# limit's index.  Each must match, whole, at least one error message in the
# expected outputs of the regress suite (expected/*.out: "ERROR:  message",
# or "SQLSTATE: message" as test_helpers.sqlstate_of prints it), so a message
# the docs quote is one a test has seen the code raise.
#
#   tools/check-docs-messages.sh      quiet, exit 0 when every message is seen;
#                                     else lists the others and exits 1

set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 2
DOC=$SRC/docs/sqlstates.md

actual=$(mktemp) || exit 2
trap 'rm -f "$actual"' EXIT
# every error message the expected outputs show, one a line
# (a table row may hold several "SQLSTATE: message" cells: each counts)
perl -ne 'if (/^(?:ERROR|WARNING):  (.*)$/) { print "$1\n"; next; }
	for my $cell (split /\|/) { print "$1\n" if $cell =~ /^\s*[0-9A-Z]{5}: ([a-z].*?)\s*$/; }' \
	"$SRC"/expected/*.out | sort -u >"$actual"

bad=0
n=0
while IFS= read -r msg; do
	n=$((n + 1))
	# a regular expression of the documented message
	re=$(printf '%s' "$msg" | sed -E -e 's/[][\\.^$*+?(){}|/]/\\&/g' \
		-e 's/…/.*/g' -e 's/limits\\\[i\\\]/limits\\[[0-9]+\\]/g')
	if ! grep -qE "^$re\$" "$actual"; then
		echo "docs/sqlstates.md quotes a message no regress output shows: $msg"
		bad=1
	fi
done < <(grep -E '^\| `' "$DOC" | sed -E 's/^\| ([^|]*)\|.*/\1/' |
	grep -oE '`[^`]+`' | sed -E 's/^`(.*)`$/\1/' |
	grep -E ' ' | grep -vE '^silo\.|^[a-z_]+\(|^"')
[ "$n" -gt 0 ] || { echo "check-docs-messages: no message found in $DOC" >&2; exit 2; }
exit "$bad"
