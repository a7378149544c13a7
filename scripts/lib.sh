# Shared shell helpers for ferrdma's build and test scripts.
FERRDMA_CACHE=${FERRDMA_CACHE:-/var/cache/ferrdma}
export FERRDMA_CACHE

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'ferrdma: %s\n' "$*" >&2; exit 1; }
need_root() {
	[ "$(id -u)" = 0 ] || die "this step needs root (mmdebstrap, chroot and bind mounts): run it with sudo"
}
