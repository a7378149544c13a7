#!/usr/bin/env bash
# `make check`: every test ferrdma has, with one verdict line at the end.
#
#   1. ferrdma-nic unit and property tests (cargo test, no VM)
#   2. the test kernel with our driver (a build failure is a failed test)
#   3. the device model under QEMU's qtest
#   4. the VM suite: KUnit, probe, insmod/rmmod cycles, two VMs, event tests on rxe
#      (tools/testing/ferrdma/run-tests; its verbs test programs are built before it)
#
# The last line is "N passed, N failed, N skipped"; the exit status is non-zero on any failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need_root
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$FERRDMA_CACHE/cargo-target}
top=$(cd "$here/.." && pwd)
mkdir -p "$FERRDMA_CACHE"
out="$FERRDMA_CACHE/check-logs"
mkdir -p "$out"
passed=0 failed=0 skipped=0
t0=$(date +%s)

step() { log "== $* (+$(( $(date +%s) - t0 ))s)"; }

# check_one NAME CMD...: one test, passed when CMD succeeds.
check_one() {
	local name=$1; shift
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1)); echo "not ok - $name"; return 1
	fi
}

# add_verdict NAME LOG RC: adds the counts of LOG's last "N passed, N failed[, N skipped]"
# line. No such line is one failure; so is a non-zero RC with nothing failed.
add_verdict() {
	local name=$1 log=$2 rc=$3 last p f s=0
	last=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
	if [ -z "$last" ]; then
		echo "not ok - $name gave no verdict (exit $rc)"; failed=$((failed + 1)); return
	fi
	p=$(sed -E 's/.*\b([0-9]+) passed.*/\1/' <<<"$last")
	f=$(sed -E 's/.*\b([0-9]+) failed.*/\1/' <<<"$last")
	grep -q skipped <<<"$last" && s=$(sed -E 's/.*\b([0-9]+) skipped.*/\1/' <<<"$last")
	[ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

# 1. Device model tests.
step "ferrdma-nic: cargo test"
(cd "$top/tools/ferrdma-nic" && cargo test --release --locked 2>&1) | tee "$out/cargo-test.log"
rc=${PIPESTATUS[0]}
read -r p f i < <(awk '/^test result:/ { for (k = 1; k <= NF; k++) { if ($k ~ /^passed;?$/) p += $(k-1); if ($k ~ /^failed;?$/) f += $(k-1); if ($k ~ /^ignored;?$/) i += $(k-1) } } END { print p+0, f+0, i+0 }' "$out/cargo-test.log")
if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "cargo test failed before running tests (exit $rc)"; fi
passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + i))

# 1a. make bench's NIC-level benches (ignored above), small, so that they cannot rot: each
#     checks that its data arrived; the figures mean nothing here.
step "ferrdma-nic: NIC-level benches (smoke)"
check_one "NIC-level benches, smoke (cargo test fabric_bench -- --ignored)" \
	bash -c "cd '$top/tools/ferrdma-nic' && FERRDMA_FABRIC_BENCH_MIB=16 FERRDMA_FABRIC_BENCH_ITERS=300 \
		FERRDMA_FABRIC_BENCH_REPS=1 cargo test --release --locked --lib fabric_bench -- --ignored --test-threads=1 \
		> '$out/nic-bench-smoke.log' 2>&1"

# 1b. Formatting: the kernel's rustfmt rules for our kernel Rust, cargo fmt for the NIC.
step "style: rustfmt"
check_one "cargo fmt --check (tools/ferrdma-nic): run make fmt" \
	bash -c "cd '$top/tools/ferrdma-nic' && cargo fmt --check >/dev/null"

# 2. Kernel and device model binaries.
step "kernel: build"
check_one "kernel build" "$here/kernel.sh" && kernel_ok=1 || kernel_ok=0
if [ "$kernel_ok" = 1 ]; then
	check_one "rustfmt --check of drivers/ and rust/ (kernel rules): run make fmt" \
		"$here/in-sysroot.sh" bash -c 'cd /ferrdma/src && rustfmt --check --edition 2021 \
		--config-path /ferrdma/cache/kernel/src/.rustfmt.toml \
		$(find drivers rust -name "*.rs") >/dev/null'
fi
if [ "$kernel_ok" = 1 ]; then
	check_one "kernel-verbs test module build (tools/testing/ferrdma/kmod)" \
		"$here/in-sysroot.sh" bash -c '/ferrdma/src/tools/testing/ferrdma/kmod/build.sh >/dev/null'
fi
# No KASAN kernel here: a second kernel build (~20 min cold on 2 cores) does not fit make
# check's cold budget beside the first (~19 min) and the VM suite (~35 min). make check-kasan
# runs the driver-heavy VM tests on it; every run here has KFENCE, UBSAN, lockdep and kmemleak.
step "ferrdma-nic: release build"
check_one "ferrdma-nic build" "$here/nic.sh" && nic_ok=1 || nic_ok=0

# 2b. Our verbs test programs (C against libibverbs), which the VM suite's event tests run.
step "verbs test programs: build"
check_one "verbs test programs build (tools/testing/ferrdma/progs)" \
	"$here/in-sysroot.sh" bash -c '/ferrdma/src/tools/testing/ferrdma/progs/build.sh >/dev/null'

# 3. The device under a real QEMU, driven by qtest (no guest kernel needed).
if [ "$nic_ok" = 1 ]; then
	step "ferrdma-nic: QEMU qtest"
	"$here/in-sysroot.sh" bash /ferrdma/src/tools/ferrdma-nic/tests/qemu-qtest.sh 2>&1 | tee "$out/qemu-qtest.log"
	add_verdict "QEMU qtest" "$out/qemu-qtest.log" "${PIPESTATUS[0]}"
fi

# 4. The VM suite.
if [ "$kernel_ok" = 1 ] && [ "$nic_ok" = 1 ]; then
	step "VM suite"
	"$here/in-sysroot.sh" /ferrdma/src/tools/testing/ferrdma/run-tests "$@" 2>&1 | tee "$out/vm-suite.log"
	add_verdict "VM suite" "$out/vm-suite.log" "${PIPESTATUS[0]}"
	vm_ran=1
else
	echo "VM suite skipped: nothing to boot"
	failed=$((failed + 1))
fi

step "done in $(( $(date +%s) - t0 ))s; logs in $out"
# The VM suite's closing comments (after its plan line): its retries, the recap of its failed
# tests with their reasons, and its own split (ferrdma's tests vs upstream kernel KUnit cases),
# again here, where a reader of only the end of the output looks.
[ "${vm_ran:-0}" = 1 ] && awk '/^1\.\.[0-9]+$/ { plan = 1; next } plan && /^# /' "$out/vm-suite.log"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
