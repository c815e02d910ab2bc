#!/usr/bin/env bash
# clients/node/build.sh: make the package usable from this folder: install
# the pinned npm packages (npm ci, from package-lock.json) unless
# node_modules already holds them, and compile src/ into dist/ with the
# TypeScript compiler unless dist/ is newer than every source.  Quiet when
# all goes well; otherwise prints what failed and exits non-zero.  Runs
# under a lock, so two runs in one tree (make test by two people) do not
# write the same files at once.  Needs node and npm (tools/ensure-deps.sh
# installs Debian's) and, the first time, the npm registry.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
# shellcheck source=../../tools/ensure-deps.sh
. "$here/../../tools/ensure-deps.sh"

for cmd in node npm; do
	if ! command -v "$cmd" >/dev/null 2>&1; then
		echo "clients/node/build.sh: $cmd not found (tools/ensure-deps.sh installs nodejs and npm)" >&2
		exit 1
	fi
done

exec 9>"$here/.build.lock" || exit 1
flock -w 600 9 || { echo "clients/node/build.sh: could not lock $here/.build.lock" >&2; exit 1; }

silo_ensure_npm_packages "$here" || exit 1

stamp=$here/dist/.built
if [ -f "$stamp" ] && [ -f "$here/dist/index.js" ] &&
	[ -z "$(find "$here/src" "$here/tsconfig.json" "$here/package.json" "$here/package-lock.json" \
		-newer "$stamp" -print -quit)" ]; then
	exit 0
fi
rm -rf "$here/dist"
if ! out=$(cd "$here" && node node_modules/typescript/bin/tsc -p tsconfig.json 2>&1); then
	printf '%s\n' "$out" >&2
	echo "clients/node/build.sh: the TypeScript compiler failed (above)" >&2
	exit 1
fi
touch "$stamp"
