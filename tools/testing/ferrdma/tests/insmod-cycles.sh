#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600
#
# Loads and unloads ferrdma.ko 10 times (or $1 times), checking the probe line each time, then
# asks kmemleak for leaks and fails on any that the cycles can have caused.
#
# kmemleak details:
#   * Suspects already known before the cycles (boot-time, unrelated code) are cleared first.
#   * kmemleak only reports objects older than 5 seconds, and a stale pointer somewhere can
#     hide an object for a scan or two, hence the sleep and the repeated scans. So a boot-time
#     object may still first show up after the cycles: such suspects, allocated on the boot path
#     (backtrace through start_kernel or kernel_init, no ferrdma frame) are listed but ignored.
#     Every other suspect fails the test.
#   * A scan that finds suspects prints "kmemleak: N new suspected memory leaks" to the kernel
#     log, which the harness counts as a splat; this test judges kmemleak's findings itself, so
#     it brackets its scans with the kmemleak-only expected-splat markers.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic
CYCLES=${1:-10} # each costs ~5 s of TCG time; a leak or a stale id shows in the first few
kmemleak_clear

for ((i = 1; i <= CYCLES; i++)); do
	load_ferrdma
	wait_probe "$i" >/dev/null
	unload_ferrdma
done
note "$CYCLES insmod/rmmod cycles done"
[ "$(probe_lines | wc -l)" = "$CYCLES" ] || fail "expected $CYCLES probe lines, got $(probe_lines | wc -l)"

kmemleak_check "$CYCLES insmod/rmmod cycles"
