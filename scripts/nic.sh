#!/usr/bin/env bash
# Build the ferrdma-nic device model (release) into $CARGO_TARGET_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$FERRDMA_CACHE/cargo-target}
command -v cargo >/dev/null || die "cargo is missing: install Rust (rustup) on the host"
log "nic: cargo build --release (tools/ferrdma-nic)"
cd "$here/../tools/ferrdma-nic"
cargo build --release --locked
