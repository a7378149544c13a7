#!/usr/bin/env bash
# Run a command inside the ferrdma sysroot, in a private mount namespace.
#
#   scripts/in-sysroot.sh CMD [ARGS...]
#
# Inside, the repository is at /ferrdma/src and the cache directory ($FERRDMA_CACHE) at
# /ferrdma/cache; /proc, /sys, /dev and a fresh /tmp are mounted. The mounts vanish with the
# namespace, so nothing is left behind on the host however the command ends.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need_root
[ $# -ge 1 ] || die "usage: scripts/in-sysroot.sh CMD [ARGS...]"

root=$("$here/sysroot.sh")
src=$(cd "$here/.." && pwd)
mkdir -p "$FERRDMA_CACHE"

exec unshare --mount --propagation private -- bash -euo pipefail -c '
	root=$1 src=$2 cache=$3; shift 3
	mkdir -p "$root/ferrdma/src" "$root/ferrdma/cache"
	mount --bind "$src" "$root/ferrdma/src"
	mount --bind "$cache" "$root/ferrdma/cache"
	mount -t proc proc "$root/proc"
	mount --rbind /sys "$root/sys"
	mount --rbind /dev "$root/dev"
	mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
	cd /
	exec chroot "$root" /usr/bin/env -i \
		PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
		HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
		FERRDMA_CACHE=/ferrdma/cache FERRDMA_SRC=/ferrdma/src \
		CI="${CI:-}" FERRDMA_VERBOSE="${FERRDMA_VERBOSE:-}" \
		${FERRDMA_FABRIC:+FERRDMA_FABRIC="$FERRDMA_FABRIC"} \
		${FERRDMA_ACCEL:+FERRDMA_ACCEL="$FERRDMA_ACCEL"} \
		${FERRDMA_SMP:+FERRDMA_SMP="$FERRDMA_SMP"} \
		${FERRDMA_GDB:+FERRDMA_GDB="$FERRDMA_GDB"} \
		"$@"
' ferrdma-in-sysroot "$root" "$src" "$FERRDMA_CACHE" "$@"
