#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300
#
# The ferrdma-nic process dies under a running VM (issue 16, item 4): the harness's `nic
# kill` (fabric_ctl) sends it SIGKILL while removal-holder holds verbs objects on ferrdma0.
# What QEMU does (seen in qemu1.log): it keeps running and logs each failed access of the
# vfio-user device; the guest's reads of the function return all-ones, its writes are lost,
# no interrupt comes. Nothing in the guest notices until the driver talks to the device:
#   * a verbs program that needs an admin command (ibv_rc_pingpong creating its CQ) fails
#     after the command's 1 s timeout; the driver marks the device dead and resets it by
#     re-probing the function;
#   * that removal disassociates the holder (IBV_EVENT_DEVICE_FATAL, clean exit) and, the
#     function being gone (all-ones reads), frees the memory it had kept from the dead
#     device (no DMA mapping outlives the driver: DMA-API debug; kmemleak clean);
#   * the probe refuses the function (its ID reads 0xffffffff) and ferrdma0 is gone; rmmod
#     completes. No oops, no splat.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic
kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)
removal_holder_start -f

fabric_ctl nic kill > /dev/null
t0=$(uptime_cs)
# The device is silent now; the first admin command finds it out.
if timeout 60 ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 1 > /tmp/pingpong.log 2>&1; then
	cat /tmp/pingpong.log
	fail "ibv_rc_pingpong succeeded on a device whose NIC process is dead"
fi
note "a verbs program on the dead device failed as it should: $(grep -v '^\s*$' /tmp/pingpong.log | tail -1)"
outcome=$(wait_recovery 1 60)
note "the driver found the device dead and tried to reset it in $(cs_seconds $(($(uptime_cs) - t0))) s: $outcome"
dmesg | has_line 'admin queue: a command timed out; resetting the device' \
	|| fail "the driver did not report the dead device"
dmesg | has_line 'unexpected device id 0xffffffff' \
	|| fail "the re-probe did not refuse the all-ones function"
[ ! -e /sys/class/infiniband/ferrdma0 ] || fail "ferrdma0 still exists after its NIC died"
removal_holder_finish "the NIC process's death"
freed=$(dmesg | sed -n 's/.*freeing \([0-9]*\) objects abandoned by the dead device: it is gone.*/\1/p')
note "the removal freed ${freed:-no} objects kept from the dead device, which is gone"
! dmesg | has_line 'leaking [0-9]* abandoned objects' || fail "the removal leaked memory of a device that is gone"

timeout 30 rmmod ferrdma || fail "rmmod after the NIC's death did not complete within 30 s"
! dmesg | has_line 'device driver has pending DMA allocations while released' \
	|| fail "DMA-API debug: the driver let go of the function with DMA memory still mapped"
expect_no_removal_leak
kmemleak_check "the NIC process's death under a verbs process"
note "nic-killed test passed"
