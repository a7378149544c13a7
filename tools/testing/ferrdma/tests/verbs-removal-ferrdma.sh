#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400
#
# The device goes away under a process that holds verbs objects (disassociate_ucontext; issue
# 16): progs/removal-holder opens ferrdma0, moves 8 SENDs through a connected RC QP pair and
# checks their bytes, holds a PD, CQ, QPs, MR and libirdma's doorbell mapping, and waits. Then
#   1. the PCI function is unbound from the driver: the unbind completes (within 30 s), the
#      holder gets IBV_EVENT_DEVICE_FATAL, its commands fail, a post and a poll do not hurt it,
#      it tears everything down and exits 0;
#   2. the function is bound again: a new ferrdma0 comes up and a second holder's SENDs pass
#      their byte checks on it; then rmmod, with that holder attached, behaves as the unbind;
#   3. after insmod, a third holder works again and the module unloads under it once more.
# Each removal's time is printed. No splat, no id or handle left at removal, kmemleak clean.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic
REMOVAL_BOUND=30

# timed_removal WHAT CMD...: runs CMD (a removal), which must succeed within REMOVAL_BOUND s.
timed_removal() {
	local what=$1 t0 t1 ms
	shift
	t0=$(date +%s%3N)
	timeout "$((REMOVAL_BOUND + 5))" "$@" || fail "$what failed (status $?) with a process holding the device"
	t1=$(date +%s%3N)
	ms=$((t1 - t0))
	[ "$ms" -le $((REMOVAL_BOUND * 1000)) ] || fail "$what took ${ms} ms (bound ${REMOVAL_BOUND} s)"
	note "$what with a process holding a context, CQ, QPs, MR and doorbell mapping: ${ms} ms"
}

kmemleak_clear
echo "ferrdma-test: removal test start" > /dev/kmsg
load_ferrdma
wait_probe 1 >/dev/null
bdf=$(basename "$(readlink -f /sys/bus/pci/drivers/ferrdma/0000:*)")
[ -n "$bdf" ] && [ -e "/sys/bus/pci/devices/$bdf" ] || fail "no PCI function bound to ferrdma"

# 1. Unbind under a holder, then bind again.
removal_holder_start
timed_removal "unbind of $bdf" sh -c "echo $bdf > /sys/bus/pci/drivers/ferrdma/unbind"
removal_holder_finish "the unbind"
[ ! -e /sys/class/infiniband/ferrdma0 ] || fail "ferrdma0 still exists after the unbind"
echo "$bdf" > /sys/bus/pci/drivers/ferrdma/bind || fail "binding $bdf again failed"
wait_probe 2 >/dev/null
wait_gid ferrdma0 >/dev/null

# 2. The re-bound device carries data; rmmod under a holder.
removal_holder_start
timed_removal "rmmod" rmmod ferrdma
removal_holder_finish "rmmod"
! module_loaded || fail "ferrdma is still loaded after rmmod"

# 3. A fresh module, data again, and the module goes under a holder once more.
load_ferrdma
wait_probe 3 >/dev/null
wait_gid ferrdma0 >/dev/null
removal_holder_start
timed_removal "rmmod" rmmod ferrdma
removal_holder_finish "the second rmmod"

expect_no_removal_leak "ferrdma-test: removal test start"
kmemleak_check "device removal under a holder"
note "verbs-removal test passed"
