#!/usr/bin/env bash
# Build the ferrdma test kernel: Debian's linux-source-7.3 + our overlay, built with LLVM=-19 in
# the sysroot. Incremental: a change to a driver file rebuilds only what depends on it.
#
# Output: $FERRDMA_CACHE/kernel/build/arch/x86/boot/bzImage and .../drivers/infiniband/hw/ferrdma/ferrdma.ko
# With an argument VARIANT (kasan, ulp): the same in kernel/build-VARIANT, configured with
# kernel/configs/VARIANT.config on top of ferrdma.config.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need_root
src=$(cd "$here/.." && pwd)

# The kernel source package: the archive's copy when apt offers this exact version, else the
# copy kept beside the repository in ../shared/cache.
pkg=linux-source-7.3
ver=7.3.4-1~bpo13+1
debdir="$FERRDMA_CACHE/debs"
deb="$debdir/${pkg}_${ver}_all.deb"
mkdir -p "$debdir"
if [ ! -f "$deb" ]; then
	log "kernel: fetching $pkg $ver with apt in the sysroot"
	if ! "$here/in-sysroot.sh" bash -c '
		set -e
		lists=/ferrdma/cache/apt-lists; mkdir -p $lists/partial /tmp/apt-dl
		apt-get -qq -o Dir::State::Lists=$lists update
		cd /tmp/apt-dl && apt-get -qq -o APT::Sandbox::User=root -o Dir::State::Lists=$lists download "$1=$2"
		mv /tmp/apt-dl/*.deb /ferrdma/cache/debs/
	' _ "$pkg" "$ver" >&2; then
		shared="$src/../shared/cache"
		[ -f "$shared/$(basename "$deb")" ] \
			|| die "apt has no $pkg=$ver and $shared has no copy: cannot get the kernel source"
		log "kernel: apt does not offer it; using $shared"
		(cd "$shared" && sha256sum -c --quiet SHA256SUMS) || die "checksum mismatch in $shared"
		cp "$shared/$(basename "$deb")" "$deb.tmp" && mv "$deb.tmp" "$deb"
	fi
	ls "$debdir"/${pkg}_*_all.deb >/dev/null 2>&1 || die "kernel source package missing after download"
	# apt names the file with an epoch-escaped version; normalise to the name we look for.
	for f in "$debdir"/${pkg}_*_all.deb; do [ "$f" = "$deb" ] || mv "$f" "$deb"; done
fi

exec "$here/in-sysroot.sh" /ferrdma/src/scripts/kernel-build.sh "/ferrdma/cache/debs/$(basename "$deb")" ${1:+"$1"}
