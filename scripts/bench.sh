#!/usr/bin/env bash
# `make bench`: ferrdma against soft RoCE (rxe) on the same two VMs in one run, and the host's
# memcpy as the physical reference. A benchmark: it judges nothing, but fails when a tool fails.
#
#   1. the host's single-thread memcpy bandwidth (bench/memcpy.py, in the sysroot);
#   2. the NIC alone: two NICs with engine threads on a running fabric, no VMs (the cargo
#      test fabric_bench_write_stream), and both engines stepped in one thread, which shows
#      the data path's CPU cost per byte without the scheduler's noise
#      (fabric_bench_engines_in_one_thread); profiled with perf when the host has it: the top
#      of the profile goes into the output (profile.txt);
#   3. two VMs booted with ferrdma NICs and a second LAN for rxe (ferrdma-vm --rxe-lan), the
#      fabric's capture off (--no-capture):
#      bench/bench.sh runs stock perftest and cmtime on ferrdma0 and rxe0, loopback and
#      between the VMs, BENCH_REPS times (default 3);
#   4. bench/report.py: the table (with ratios and the issue's targets), bench.csv,
#      summary.csv, bandwidth.png and latency.png in the run's directory.
#
# Env: BENCH_REPS (3), BENCH_FABRIC_MIB (1024: MiB per NIC-level run), BENCH_TIMEOUT (VM part,
# seconds; 7200).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
reps=${BENCH_REPS:-3}
[[ $reps =~ ^[1-9][0-9]?$ ]] || die "BENCH_REPS=$reps: a repetition count 1..99"
out=$FERRDMA_CACHE/runs/bench-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
header=scope,device,tool,size,rep,metric,value

log "bench: 1/4 host memcpy ($reps x 256 MiB) -> $out"
{ echo "$header"; "$here/in-sysroot.sh" python3 /ferrdma/src/tools/testing/ferrdma/bench/memcpy.py "$reps"; } \
	> "$out/host.csv"

# One bench at a time: cargo runs tests on as many threads as there are cores, and until
# session 28 the write stream, the one-thread engines and (later) the latency ran side by
# side on this 2-core host and lowered each other's figures.
log "bench: 2/4 the NIC alone: two NICs on a running fabric: WRITE streams, SEND latency, the host's wake-up ($reps rounds)"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$FERRDMA_CACHE/cargo-target}
cd "$here/../tools/ferrdma-nic"
export FERRDMA_FABRIC_BENCH_MIB=${BENCH_FABRIC_MIB:-1024} FERRDMA_FABRIC_BENCH_REPS=$reps
test_bin=$(cargo test --release --locked --lib --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -1)
[ -x "$test_bin" ] || die "bench: could not build the NIC's test binary"
# The figures come from a run of their own: under perf (-g) the same benches read a third
# lower and the latency more than twice as high (session 28). The profile is a second run.
"$test_bin" fabric_bench --ignored --nocapture --test-threads=1 > "$out/fabric-bench.log" 2>&1 ||
	{ cat "$out/fabric-bench.log"; die "bench: the NIC-level run failed"; }
if command -v perf >/dev/null && perf record -q -o /dev/null true 2>/dev/null; then
	FERRDMA_FABRIC_BENCH_REPS=1 perf record -q -g -o "$out/fabric-bench.perf" -- "$test_bin" fabric_bench \
		--ignored --nocapture --test-threads=1 > "$out/fabric-bench-perf.log" 2>&1 ||
		{ cat "$out/fabric-bench-perf.log"; die "bench: the NIC-level run under perf failed"; }
	perf report -i "$out/fabric-bench.perf" --no-children --sort comm,sym --percent-limit 1 --stdio -g none \
		> "$out/profile-full.txt" 2>/dev/null || true
	awk '/^ +[0-9]/ && n++ < 25' "$out/profile-full.txt" > "$out/profile.txt"
else
	echo "no profile: perf is not installed or not permitted here (Debian: linux-perf)" > "$out/profile.txt"
fi
# With one test thread, libtest prints a test's first row on its "test NAME ... " line.
{ echo "$header"; grep -o 'fabric-bench,.*' "$out/fabric-bench.log" | sed 's/^fabric-bench,//'; } > "$out/nic-level.csv"
cd "$here/.."

log "bench: 3/4 two VMs, ferrdma and rxe, $reps repetition(s) (TCG: about $((reps * 8)) minutes)"
# Two vCPUs a VM unless FERRDMA_SMP says otherwise (the tests' default is one): rxe does its
# transport on the guest's CPUs and perftest's loopback ends both busy-poll, and the figures
# in README were taken with two.
FERRDMA_SMP=${FERRDMA_SMP:-2} "$here/in-sysroot.sh" /ferrdma/src/tools/testing/ferrdma/ferrdma-vm --vms 2 --rxe-lan --no-capture \
	--timeout "${BENCH_TIMEOUT:-7200}" --logdir "$(sysroot_path "$out/vms")" \
	/ferrdma/src/tools/testing/ferrdma/bench/bench.sh full "$reps" | tee "$out/vms.log" |
	grep --line-buffered -E 'ferrdma-retry|\] bench: |FAIL|PASS' || true
grep -q '^ferrdma-vm: PASS' "$out/vms.log" || die "bench: the VM part failed (log: $out/vms.log)"

log "bench: 4/4 report"
"$here/in-sysroot.sh" python3 /ferrdma/src/tools/testing/ferrdma/bench/report.py "$(sysroot_path "$out")" \
	"$(sysroot_path "$out/host.csv")" "$(sysroot_path "$out/nic-level.csv")" \
	"$(sysroot_path "$out/vms/vm1/results/bench.csv")" "$(sysroot_path "$out/vms/vm2/results/bench.csv")"
echo
echo "NIC-level profile (perf, top symbols by thread):"
cat "$out/profile.txt"
log "bench: done; table, CSV and plots in $out"
