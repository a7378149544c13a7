#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Builds ferrdma's verbs test programs (the *.c here, each with verbs-common.c, against the
# sysroot's libibverbs) into $FERRDMA_CACHE/progs/<key>/, where <key> hashes the sources, this
# script and the compiler's version: a build is done once per content and reused.
#
#   build.sh          build unless already built; print the directory on stdout
#   build.sh --dir    print the directory without building; exit 1 if it is not built
#
# It runs in the sysroot (scripts/in-sysroot.sh), where the cache is /ferrdma/cache; started
# outside, it re-executes itself there. The guests, whose root is the sysroot, run
# `build.sh --dir` to find the binaries (guest/lib.sh: test_progs_dir): same files, same key.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if ! [ -e /.ferrdma-ready ] || ! [ -d /ferrdma/src ]; then
	repo=$(cd "$here/../../../.." && pwd)
	exec "$repo/scripts/in-sysroot.sh" "/ferrdma/src/tools/testing/ferrdma/progs/build.sh" "$@"
fi

cache=${FERRDMA_CACHE:-/ferrdma/cache}
CC=${CC:-cc}
CFLAGS="-O2 -g -std=gnu11 -Wall -Wextra -Werror -pthread"
programs=(solicited-events event-stress async-events destroy-race error-events uverbs-fuzz qkey-spoof
	verbs-datacheck removal-holder cq-resize limits rereg-mr dmabuf-mr mcast-datacheck)

cd "$here"
key=$({ sha256sum ./*.c ./*.h build.sh; "$CC" --version | sed -n 1p; echo "$CFLAGS"; } |
	sha256sum | cut -c1-16)
out="$cache/progs/$key"

case "${1:-}" in
--dir)
	[ -f "$out/.built" ] || { echo "progs/build.sh: not built: $out" >&2; exit 1; }
	echo "$out"
	exit 0
	;;
"") ;;
*)
	echo "usage: build.sh [--dir]" >&2
	exit 2
	;;
esac

if [ -f "$out/.built" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache/progs"
tmp=$(mktemp -d "$cache/progs/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for p in "${programs[@]}"; do
	# shellcheck disable=SC2086 # CFLAGS is a list of flags
	"$CC" $CFLAGS -o "$tmp/$p" "$p.c" verbs-common.c -libverbs -lrdmacm >&2
done
touch "$tmp/.built"
chmod 755 "$tmp"
# Another build of the same key may have won the race: either copy is the same.
mv -T "$tmp" "$out" 2>/dev/null || [ -f "$out/.built" ]
# Keep the five newest builds (other worktrees may use theirs).
ls -1dt "$cache"/progs/*/.built 2>/dev/null | tail -n +6 | while read -r built; do
	rm -rf "$(dirname "$built")"
done
echo "progs/build.sh: built ${programs[*]} in $out" >&2
echo "$out"
