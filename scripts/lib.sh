# Shared shell helpers for ferrdma's build and test scripts.
FERRDMA_CACHE=${FERRDMA_CACHE:-/var/cache/ferrdma}
export FERRDMA_CACHE

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'ferrdma: %s\n' "$*" >&2; exit 1; }
# need_host_package CMD PACKAGE: installs Debian's PACKAGE with apt-get when the host lacks
# CMD, so a new user's first `make run` does not stop at a tool the build can install itself.
# Hosts without apt-get get the command to run instead.
need_host_package() {
	command -v "$1" >/dev/null && return 0
	command -v apt-get >/dev/null ||
		die "$1 is missing and this host has no apt-get: install the package that provides it ($2 on Debian)"
	log "host: $1 is missing; installing Debian's $2 (apt-get)"
	apt-get update -qq >/dev/null || die "apt-get update failed; install $2 yourself"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null || die "apt-get install $2 failed"
	command -v "$1" >/dev/null || die "$2 is installed but $1 is still not on PATH"
}
# sysroot_path PATH: PATH (under $FERRDMA_CACHE) as the sysroot sees it (/ferrdma/cache/...).
sysroot_path() {
	case $1 in
	"$FERRDMA_CACHE"/*) echo "/ferrdma/cache/${1#"$FERRDMA_CACHE"/}" ;;
	*) die "$1 is not under $FERRDMA_CACHE, which is all the sysroot sees of the host's files" ;;
	esac
}
need_root() {
	[ "$(id -u)" = 0 ] || die "this step needs root (mmdebstrap, chroot and bind mounts): run it with sudo"
}
