#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 nic=no kasan=yes
#
# The KASAN lane's own check, so that it cannot pass by not looking: on the KASAN kernel
# (kasan=yes; the harness also fails a lane test whose console lacks KASAN's boot line), the
# kernel-verbs test module loaded with plant_uaf=1 reads a freed kmalloc object once, and KASAN
# must report exactly that: "BUG: KASAN: slab-use-after-free in kv_plant_uaf". The report is
# inside an expected-splat region naming kasan and its call trace; any other splat fails.
. "$FERRDMA_HARNESS/guest/kverbs.sh"

dmesg | has_line "KernelAddressSanitizer initialized" || fail "this kernel has no KASAN"
ko=$(kverbs_module)
echo "ferrdma-test: expected splat begin kasan call-trace" > /dev/kmsg
rc=0
insmod "$ko" plant_uaf=1 2>/tmp/insmod.err || rc=$?
echo "ferrdma-test: expected splat end" > /dev/kmsg
[ "$rc" != 0 ] || fail "insmod plant_uaf=1 succeeded: the module did not take its planted path"
report=$(dmesg | grep -E "BUG: KASAN: [a-z-]*use-after-free in kv_plant_uaf" | sed -n 1p || true)
if [ -z "$report" ]; then
	dmesg | tail -40
	fail "KASAN did not report the planted use-after-free"
fi
note "KASAN reported the planted read: ${report#*] }"
dmesg | has_line "Read of size 1 at addr" || fail "KASAN's report lacks the access (Read of size 1)"
note "kasan-lane test passed"
