#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Builds the kernel-verbs test module (ferrdma_kverbs_test.c, out of tree) against the ferrdma
# kernel build tree into $FERRDMA_CACHE/kmod/<key>/ferrdma_kverbs_test.ko, where <key> hashes
# the module's sources, this script, the compiler's version and the kernel build it is for
# (its .config, Module.symvers, release and version strings): a build is done once per
# content and reused; a rebuilt kernel needs a new module build.
#
#   build.sh          build unless already built; print the directory on stdout
#   build.sh --dir    print the directory without building; exit 1 if it is not built
#
# It runs in the sysroot (scripts/in-sysroot.sh), where the cache is /ferrdma/cache; started
# outside, it re-executes itself there. The guests, whose root is the sysroot, run
# `build.sh --dir` to find the module (tests/kverbs-loopback-*.sh): same files, same key.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if ! [ -e /.ferrdma-ready ] || ! [ -d /ferrdma/src ]; then
	repo=$(cd "$here/../../../.." && pwd)
	exec "$repo/scripts/in-sysroot.sh" "/ferrdma/src/tools/testing/ferrdma/kmod/build.sh" "$@"
fi

cache=${FERRDMA_CACHE:-/ferrdma/cache}
kbuild=${FERRDMA_KBUILD:-$cache/kernel/build}
# The kernel's own make variables (scripts/kernel-build.sh).
make_vars=(ARCH=x86_64 LLVM=-19)
module=ferrdma_kverbs_test

cd "$here"
kernel_id() {
	local f
	for f in .config Module.symvers include/generated/utsrelease.h include/generated/utsversion.h; do
		[ -f "$kbuild/$f" ] || { echo "kmod/build.sh: $kbuild/$f missing: build the kernel first (make kernel)" >&2; exit 1; }
		sha256sum < "$kbuild/$f"
	done
}
key=$({ sha256sum ./*.c Kbuild Makefile build.sh; clang-19 --version | sed -n 1p; echo "${make_vars[*]}"; kernel_id; } |
	sha256sum | cut -c1-16)
out="$cache/kmod/$key"

case "${1:-}" in
--dir)
	[ -f "$out/.built" ] || { echo "kmod/build.sh: not built: $out" >&2; exit 1; }
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

mkdir -p "$cache/kmod"
tmp=$(mktemp -d "$cache/kmod/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Built in a copy, so the source tree gets no objects.
cp ./*.c Kbuild Makefile "$tmp/"
if ! make -C "$kbuild" M="$tmp" "${make_vars[@]}" W=1 modules > "$tmp/build.log" 2>&1; then
	cat "$tmp/build.log" >&2
	echo "kmod/build.sh: build failed" >&2
	exit 1
fi
if grep -q 'warning:' "$tmp/build.log"; then
	grep -B2 -A6 'warning:' "$tmp/build.log" >&2
	echo "kmod/build.sh: the module builds with warnings" >&2
	exit 1
fi
mkdir -p "$tmp/out"
cp "$tmp/$module.ko" "$tmp/out/"
touch "$tmp/out/.built"
chmod 755 "$tmp/out"
# Another build of the same key may have won the race: either copy is the same.
mv -T "$tmp/out" "$out" 2>/dev/null || [ -f "$out/.built" ]
# Keep the five newest builds (other worktrees may use theirs).
# shellcheck disable=SC2012 # our own directory names
ls -1dt "$cache"/kmod/*/.built 2>/dev/null | tail -n +6 | while read -r built; do
	rm -rf "$(dirname "$built")"
done
echo "kmod/build.sh: built $module.ko in $out" >&2
echo "$out"
