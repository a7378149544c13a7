#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=500 alone=yes
#
# CEQ interrupt moderation (the ceq_moderation_us module parameter; manual, "Interrupt
# moderation"): a value beyond the device's limit makes the probe fail with a clear message;
# then the same event-driven stress (progs/event-stress with one SEND in flight per stream, so
# nearly every completion needs an event; every CQ on completion vector 0) runs without and
# with a moderation interval of T us, counting that CEQ's interrupts in /proc/interrupts. With moderation the vector may fire at most once per T (plus one, and 10%
# for the guest's and the NIC's clocks); without it the same load must exceed that rate, or the
# check would prove nothing. Every completion is still counted by the program (no event lost
# while interrupts are held back).
. "$FERRDMA_HARNESS/guest/events.sh"
T=8000

# dmesg_has TEXT: whether the kernel log has TEXT (grep -q would end the pipe early and fail
# it under pipefail).
dmesg_has() {
	dmesg | grep -F -- "$1" >/dev/null
}

# The busiest ferrdma vector's interrupt count (the AEQ on vector 0 sees almost nothing).
ceq_irqs() {
	awk '/ferrdma/ { s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; if (s > m) m = s } END { print m + 0 }' /proc/interrupts
}

# stress_run US COMPLETIONS: loads ferrdma with ceq_moderation_us=US, runs the stress, and
# sets STRESS_IRQS (the CEQ's interrupts) and STRESS_US (how long it took).
stress_run() {
	local progs i0 i1 t0 t1
	progs=$(test_progs_dir)
	FERRDMA_KO_PARAMS="ceq_moderation_us=$1" rdma_dev_up ferrdma
	if [ "$1" != 0 ]; then
		dmesg_has "CEQ interrupt moderation: $1 us" || fail "no moderation line in dmesg for ceq_moderation_us=$1"
	fi
	i0=$(ceq_irqs)
	t0=$(date +%s%6N)
	"$progs/event-stress" "$EVENTS_DEV" -t 2 -m 2 -w 1 -c "$2" ||
		fail "event-stress with ceq_moderation_us=$1 failed"
	t1=$(date +%s%6N)
	i1=$(ceq_irqs)
	rdma_dev_down
	STRESS_IRQS=$((i1 - i0))
	STRESS_US=$((t1 - t0))
}

need_nic
kmemleak_clear

# 1. Beyond the device's limit (8160 us): no device, and the reason in the log.
insmod "$FERRDMA_KO" ceq_moderation_us=8161 || fail "insmod with ceq_moderation_us=8161 failed (the probe should, not the module)"
dmesg_has "ceq_moderation_us=8161 exceeds the device's limit of 8160 us" ||
	fail "no message for ceq_moderation_us=8161"
[ ! -e /sys/class/infiniband/ferrdma0 ] || fail "ferrdma0 registered with ceq_moderation_us=8161"
unload_ferrdma
note "ceq_moderation_us=8161: probe refused with a message"

# 2. The same load without and with moderation.
stress_run 0 20000
n0=$STRESS_IRQS us0=$STRESS_US
stress_run "$T" 4000
n1=$STRESS_IRQS us1=$STRESS_US
bound=$(( (us1 / T + 1) * 11 / 10 + 1 ))
rate0=$(( n0 * 1000000 / (us0 > 0 ? us0 : 1) ))
rate1=$(( n1 * 1000000 / (us1 > 0 ? us1 : 1) ))
note "without moderation: $n0 interrupts in $((us0 / 1000)) ms ($rate0/s); with ${T} us: $n1 in $((us1 / 1000)) ms ($rate1/s, bound $bound)"
[ "$n1" -le "$bound" ] || fail "moderation ${T} us: $n1 interrupts in ${us1} us, more than $bound"
[ "$n1" -gt 0 ] || fail "moderation ${T} us: no interrupt at all"
[ "$((n0 * T))" -gt "$us0" ] ||
	fail "inconclusive: without moderation the load raised only $n0 interrupts in ${us0} us, not more than one per ${T} us"
kmemleak_check "interrupt moderation"
note "interrupt moderation: passed"
