#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400
#
# A device that stops answering its admin queue (the NIC's test-only knob `sabotage nic:0
# admin=stall`, through the fabric's control socket) while a process holds verbs objects:
#   * the process is killed: the kernel destroys its QP, CQs, MRs, PD and context. The first
#     command times out (ADMIN_TIMEOUT_MS, 1 s) and marks the device dead; every later one
#     fails at once, and the destroys succeed in software with the objects' memory abandoned
#     (kept by the driver, not freed, since the device may still access it), so the process
#     is gone within 15 s and ib_core holds nothing of it (no WARN from uverbs for an object
#     that cannot be destroyed);
#   * the driver says once that the device is dead and resets it by re-probing the function
#     (as irdma asks for a reset on a CQP timeout): the removal resets the device, which
#     confirms it, and only then frees the abandoned memory (no DMA mapping outlives the
#     removal: DMA-API debug; kmemleak finds nothing); the probe that follows finds the
#     admin queue still silent, fails, and leaves the function unbound, its rings freed after
#     a confirmed reset;
#   * rmmod completes within 15 s, and the driver's removal check finds every id returned;
#   * once the queue answers again, ferrdma loads anew (probe resets the device) and moves
#     and checks data (progs/verbs-datacheck on loopback).
. "$FERRDMA_HARNESS/guest/datacheck.sh"
need_nic
trap 'fabric_ctl sabotage nic:0 admin=run >/dev/null 2>&1 || true' EXIT

load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)
# A verbs process holding a context, PD, MR, CQs and an RC QP: rc_pingpong's server creates
# them, then waits for its client.
ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 5 -s 4096 > /tmp/holder.log 2>&1 &
holder=$!
wait_listen 18515
note "rdma res while held: $(rdma res show ferrdma0)"

fabric_ctl sabotage nic:0 admin=stall
t0=$(uptime_cs)
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
# The process is reaped before its files are released only if nothing else holds them; wait
# until ib_core has no user object of ferrdma0 left.
end=$((SECONDS + 15))
while rdma res show qp | grep -w ferrdma0 | has_line -v 'comm \['; do
	[ "$SECONDS" -lt "$end" ] || fail "the killed process's QP is still there after 15 s: $(rdma res show qp)"
	nap 0.2
done
note "the killed process's objects were torn down in $(cs_seconds $(($(uptime_cs) - t0))) s with the admin queue stalled"
expect_no_verbs_objects
dead=$(dmesg | grep -c 'admin queue: a command timed out; resetting the device' || true)
[ "$dead" = 1 ] || fail "expected one 'a command timed out; resetting the device' line, got $dead"

# The reset: a removal, then a probe that the silent admin queue fails.
outcome=$(wait_recovery 1 30)
note "recovery: $outcome"
! dmesg | has_line 'recovery: the function is bound again' \
	|| fail "the function was bound again although its admin queue still does not answer"
[ ! -e /sys/class/infiniband/ferrdma0 ] || fail "ferrdma0 exists although the re-probe should have failed"
freed=$(dmesg | sed -n 's/.*freeing \([0-9]*\) objects abandoned by the dead device after its reset.*/\1/p')
[ -n "$freed" ] && [ "$freed" -gt 0 ] \
	|| fail "the reset's removal did not free the dead device's abandoned objects: $(dmesg | grep -i abandon || true)"
note "the reset's removal freed $freed abandoned objects after the device confirmed its reset"
! dmesg | has_line 'leaking its admin and' \
	|| fail "the failed re-probe leaked its rings although the device confirms resets"

t0=$(uptime_cs)
timeout 15 rmmod ferrdma || fail "rmmod ferrdma after a dead device's reset did not complete within 15 s"
note "rmmod took $(cs_seconds $(($(uptime_cs) - t0))) s"
! dmesg | has_line 'device driver has pending DMA allocations while released' \
	|| fail "DMA-API debug: the driver let go of the function with DMA memory still mapped"
expect_no_removal_leak
kmemleak_check "removal of a device that died with objects abandoned"

fabric_ctl sabotage nic:0 admin=run
load_ferrdma
# Probe summaries so far: the first probe, the failed re-probe (its self test passed), this one.
wait_probe 3 >/dev/null
gid=$(wait_gid ferrdma0)
datacheck_loopback after-hang ferrdma0 -g "$gid" -q 2 -s 1,4096,65537
expect_no_verbs_objects
unload_ferrdma
kmemleak_check "a device reloaded after its admin queue hung"
note "admin-hang test passed"
