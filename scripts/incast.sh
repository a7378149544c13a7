#!/usr/bin/env bash
# `make incast`: the congestion experiment of issue 18 as a time series and a plot. N senders
# (INCAST_SENDERS, default 4) stream RDMA WRITEs at 10 Gb/s to one receiver through a switch
# whose egress port to the receiver has a 512 KiB buffer and RED/ECN marking (Kmin 20 KB,
# Kmax 200 KB, Pmax 0.2), once without congestion control (lossy: drops, go-back-N), once
# lossless (PFC: XOFF 64 KiB, XON 32 KiB per sender's port) and once with ECN and DCQCN. The NICs are the real engines on a simulated clock (the NIC's ignored
# test incast_time_series), so the figures are the same on any host. Writes incast.csv and
# incast.png to $FERRDMA_CACHE/runs/incast-<time>/. The same experiments, with their
# assertions, run in make check (cargo test incast_).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
senders=${INCAST_SENDERS:-4}
[[ $senders =~ ^[1-9][0-9]?$ ]] || die "INCAST_SENDERS=$senders: a sender count 1..99"
out=$FERRDMA_CACHE/runs/incast-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$FERRDMA_CACHE/cargo-target}
log "incast: $senders senders, lossy, PFC and DCQCN, 50 ms of model time each -> $out"
(cd "$here/../tools/ferrdma-nic" && N=$senders FERRDMA_INCAST_OUT=$out \
	cargo test --release --locked --lib incast_time_series -- --ignored --nocapture 2>&1 |
	grep -E '^(lossy|pfc|dcqcn):|panicked' || true)
[ -s "$out/incast.csv" ] || die "incast: the simulation wrote no $out/incast.csv"
# matplotlib is in the sysroot.
"$here/in-sysroot.sh" python3 /ferrdma/src/tools/testing/ferrdma/bench/incast_plot.py \
	"$(sysroot_path "$out")/incast.csv" "$(sysroot_path "$out")"
log "incast: $out/incast.png"
