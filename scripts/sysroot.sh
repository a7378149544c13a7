#!/usr/bin/env bash
# Build (or reuse) the ferrdma sysroot: Debian trixie + trixie-backports made by mmdebstrap.
# It holds the kernel toolchain, QEMU and the guest userspace; the same tree is the guests' 9p root.
#
# Usage: scripts/sysroot.sh            prints the sysroot path on stdout, building it if needed
# Env:   FERRDMA_CACHE (default /var/cache/ferrdma), DEBIAN_MIRROR (default http://deb.debian.org/debian)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

need_root
need_host_package mmdebstrap mmdebstrap

key=$(cat "$here/sysroot-packages.txt" "$here/sysroot.sh" | sha256sum | cut -c1-16)
root="$FERRDMA_CACHE/sysroot-$key"
# A sysroot is usable when it finished building and still has its tools (a half-deleted tree
# must not pass for a good one).
usable() { [ -f "$1/.ferrdma-ready" ] && [ -x "$1/usr/bin/qemu-system-x86_64" ] && [ -d "$1/proc" ]; }
if usable "$root"; then
	echo "$root"
	exit 0
fi

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/sysroot-packages.txt")
include=$(IFS=,; echo "${pkgs[*]}")

rm -rf "$root" "$root.tmp"
mkdir -p "$FERRDMA_CACHE"
log "sysroot: mmdebstrap trixie + trixie-backports into $root (about a minute or two)"
mmdebstrap --variant=apt --mode=root --components=main \
	--include="$include" \
	--customize-hook='chroot "$1" sh -c "command -v qemu-system-x86_64 >/dev/null"' \
	--customize-hook='mkdir -p "$1/ferrdma"' \
	--customize-hook='mkdir -p "$1/usr/lib/modules"' \
	trixie "$root.tmp" \
	"deb $mirror trixie main" \
	"deb $mirror trixie-backports main" >&2 \
	|| die "mmdebstrap failed (see above)"

# QEMU must offer vfio-user-pci: the NIC is a vfio-user server.
if ! chroot "$root.tmp" qemu-system-x86_64 -device help 2>/dev/null | grep '"vfio-user-pci"' > /dev/null; then
	die "the sysroot's QEMU ($(chroot "$root.tmp" qemu-system-x86_64 --version | sed -n 1p)) has no vfio-user-pci device"
fi
touch "$root.tmp/.ferrdma-ready"
mv "$root.tmp" "$root"
# Keep the three newest sysroots: other checkouts (worktrees, branches) with other package
# lists may be using theirs right now; older ones are dropped.
ls -1dt "$FERRDMA_CACHE"/sysroot-*/.ferrdma-ready 2>/dev/null | tail -n +4 | while read -r ready; do
	rm -rf "$(dirname "$ready")"
done
log "sysroot: ready ($(chroot "$root" qemu-system-x86_64 --version | sed -n 1p), $(chroot "$root" rustc --version))"
echo "$root"
