#!/usr/bin/env bash
# tools/check-layers.sh: check that silo's object files call only down the
# layers that src/README.md allows.
#
# The allowed edges are the table under "## Layers" in src/README.md: a row
# "| folder | folders it may call |".  What a folder calls is computed from
# the object files themselves: every symbol an object of src/F/ leaves
# undefined (nm -u) that an object of another folder src/G/ defines is an
# edge F -> G.  Headers, umbrella includes or a local "extern" cannot hide
# an edge: only the linker's view counts.
#
#   tools/check-layers.sh [--extra LAYER:OBJECT]...   check the built tree
#                                                      (run "make" first);
#                                                      --extra adds an object
#                                                      as if it were in LAYER
#   tools/check-layers.sh --selftest                   build an object that
#                                                      calls upward and show
#                                                      the check catching it
#
# Prints one line per edge that is not allowed and exits 1 if there is one;
# quiet and exit 0 otherwise.

set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 2
README=$SRC/src/README.md

# allowed_table: "folder allowed..." lines from the README's Layers table.
allowed_table()
{
	awk '
		/^## Layers/ { in_section = 1; next }
		/^## / { in_section = 0 }
		in_section && /^\|/ {
			n = split($0, cell, "|")
			from = cell[2]; to = cell[3]
			gsub(/[` ]/, "", from)
			gsub(/`/, "", to); gsub(/,/, " ", to)
			if (from == "" || from ~ /^-+$/ || from == "folder") next
			print from, to
		}' "$README"
}

selftest()
{
	local tmp rc out
	tmp=$(mktemp -d /tmp/silo-layers.XXXXXX) || return 2
	# storage/ calling core/'s enqueue: an upward call, declared locally
	cat >"$tmp/upward.c" <<'EOF'
extern char *silo_enqueue_job(void *args);
char *silo_layers_selftest(void);
char *silo_layers_selftest(void) { return silo_enqueue_job((void *) 0); }
EOF
	if ! cc -c -o "$tmp/upward.o" "$tmp/upward.c"; then
		rm -rf "$tmp"
		echo "check-layers selftest: could not compile the violating object" >&2
		return 2
	fi
	out=$("${BASH_SOURCE[0]}" --extra "storage:$tmp/upward.o" 2>&1)
	rc=$?
	rm -rf "$tmp"
	if [ "$rc" -eq 1 ] && grep -q 'upward.o calls silo_enqueue_job, defined in core/: storage/ may not call core/' <<<"$out"; then
		echo "check-layers selftest: the upward call was caught:"
		echo "$out" | sed 's/^/  /'
		return 0
	fi
	echo "check-layers selftest: an upward call from storage/ to core/ was NOT caught (exit $rc):" >&2
	echo "$out" >&2
	return 1
}

if [ "${1:-}" = "--selftest" ]; then
	selftest
	exit
fi

declare -A allowed=() defined_in=()
extra=()
while [ $# -gt 0 ]; do
	case $1 in
		--extra) extra+=("$2"); shift 2 ;;
		*) echo "usage: $0 [--extra LAYER:OBJECT]... | --selftest" >&2; exit 2 ;;
	esac
done

while read -r from to; do
	allowed[$from]=" $to "
done < <(allowed_table)
if [ "${#allowed[@]}" -eq 0 ]; then
	echo "check-layers: no Layers table found in $README" >&2
	exit 2
fi

# objects: "layer object" for every built object of a known layer
objects=()
for layer in "${!allowed[@]}"; do
	for o in "$SRC"/src/"$layer"/*.o; do
		[ -f "$o" ] && objects+=("$layer $o")
	done
done
for e in "${extra[@]}"; do
	objects+=("${e%%:*} ${e#*:}")
done
for d in "$SRC"/src/*/; do
	d=${d%/}; d=${d##*/}
	if [ -z "${allowed[$d]:-}" ] && compgen -G "$SRC/src/$d/*.c" >/dev/null; then
		echo "check-layers: src/$d/ has C files but no row in the Layers table of src/README.md" >&2
		exit 1
	fi
done
if [ "${#objects[@]}" -eq 0 ]; then
	echo "check-layers: no object files under src/*/ (run make first)" >&2
	exit 2
fi

# which layer defines each global symbol
for lo in "${objects[@]}"; do
	layer=${lo%% *} o=${lo#* }
	while read -r sym; do
		defined_in[$sym]=$layer
	done < <(nm --defined-only -g "$o" | awk 'NF == 3 { print $3 }')
done

bad=0
for lo in "${objects[@]}"; do
	layer=${lo%% *} o=${lo#* }
	while read -r sym; do
		to=${defined_in[$sym]:-}
		[ -n "$to" ] && [ "$to" != "$layer" ] || continue
		if [[ ${allowed[$layer]} != *" $to "* ]]; then
			echo "${o#"$SRC"/} calls $sym, defined in $to/: $layer/ may not call $to/"
			bad=1
		fi
	done < <(nm -u "$o" | awk '{ print $NF }')
done
exit "$bad"
