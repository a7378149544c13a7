#!/usr/bin/env bash
# `make check`: every test ferrdma has, with one verdict line at the end.
#
#   1. ferrdma-nic unit and property tests (cargo test, no VM)
#   2. the test kernel with our driver (a build failure is a failed test)
#   3. the device model under QEMU's qtest
#   4. the VM suite: KUnit, probe, insmod/rmmod cycles, two VMs (tools/testing/ferrdma/run-tests)
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

# 1. Device model tests.
step "ferrdma-nic: cargo test"
(cd "$top/tools/ferrdma-nic" && cargo test --release --locked 2>&1) | tee "$out/cargo-test.log"
rc=${PIPESTATUS[0]}
read -r p f i < <(awk '/^test result:/ { for (k = 1; k <= NF; k++) { if ($k ~ /^passed;?$/) p += $(k-1); if ($k ~ /^failed;?$/) f += $(k-1); if ($k ~ /^ignored;?$/) i += $(k-1) } } END { print p+0, f+0, i+0 }' "$out/cargo-test.log")
if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "cargo test failed before running tests (exit $rc)"; fi
passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + i))

# 1b. Formatting: the kernel's rustfmt rules for our kernel Rust, cargo fmt for the NIC.
step "style: rustfmt"
if (cd "$top/tools/ferrdma-nic" && cargo fmt --check >/dev/null); then
	passed=$((passed + 1))
else
	failed=$((failed + 1)); echo "not ok - cargo fmt --check (tools/ferrdma-nic): run cargo fmt"
fi

# 2. Kernel and device model binaries.
step "kernel: build"
if "$here/kernel.sh"; then
	passed=$((passed + 1)); kernel_ok=1
else
	failed=$((failed + 1)); kernel_ok=0; echo "not ok - kernel build"
fi
if [ "$kernel_ok" = 1 ]; then
	if "$here/in-sysroot.sh" bash -c 'cd /ferrdma/src && rustfmt --check --edition 2021 \
		--config-path /ferrdma/cache/kernel/src/.rustfmt.toml \
		$(find drivers rust -name "*.rs")' >/dev/null; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1)); echo "not ok - rustfmt --check of drivers/ and rust/ (kernel rules): run make fmt"
	fi
fi
step "ferrdma-nic: release build"
if "$here/nic.sh"; then
	passed=$((passed + 1)); nic_ok=1
else
	failed=$((failed + 1)); nic_ok=0; echo "not ok - ferrdma-nic build"
fi

# 3. The device under a real QEMU, driven by qtest (no guest kernel needed).
if [ "$nic_ok" = 1 ]; then
	step "ferrdma-nic: QEMU qtest"
	"$here/in-sysroot.sh" bash /ferrdma/src/tools/ferrdma-nic/tests/qemu-qtest.sh 2>&1 | tee "$out/qemu-qtest.log"
	rc=${PIPESTATUS[0]}
	last=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$out/qemu-qtest.log" | tail -1)
	p=$(sed -nE 's/.*\b([0-9]+) passed.*/\1/p' <<<"$last"); f=$(sed -nE 's/.*\b([0-9]+) failed.*/\1/p' <<<"$last")
	[ -n "$p" ] || { p=0; f=1; }
	[ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
	passed=$((passed + p)) failed=$((failed + f))
fi

# 4. The VM suite.
if [ "$kernel_ok" = 1 ] && [ "$nic_ok" = 1 ]; then
	step "VM suite"
	"$here/in-sysroot.sh" /ferrdma/src/tools/testing/ferrdma/run-tests "$@" 2>&1 | tee "$out/vm-suite.log"
	rc=${PIPESTATUS[0]}
	last=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$out/vm-suite.log" | tail -1)
	if [ -z "$last" ]; then
		echo "VM suite gave no verdict (exit $rc)"; failed=$((failed + 1))
	else
		p=$(sed -E 's/.*\b([0-9]+) passed.*/\1/' <<<"$last")
		f=$(sed -E 's/.*\b([0-9]+) failed.*/\1/' <<<"$last")
		s=0; grep -q skipped <<<"$last" && s=$(sed -E 's/.*\b([0-9]+) skipped.*/\1/' <<<"$last")
		[ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	fi
else
	echo "VM suite skipped: nothing to boot"
	failed=$((failed + 1))
fi

step "done in $(( $(date +%s) - t0 ))s; logs in $out"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
