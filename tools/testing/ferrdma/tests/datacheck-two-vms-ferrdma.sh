#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=900
#
# Every byte between two ferrdma VMs over the fabric, checked by our own verbs program
# (progs/verbs-datacheck.c, guest/datacheck.sh): RC SEND, SEND_WITH_IMM, WRITE,
# WRITE_WITH_IMM, READ and UD SEND over sizes from 1 B to 8 MiB, one SGE, the most SGEs,
# inline, unaligned and page-crossing offsets, 3 QPs at once, poisoned targets and every
# completion field checked. Node 2 serves first (SEND and WRITE data flow node 1 -> node 2,
# READ data node 2 -> node 1), then node 1 serves (the other way round).
# Then ECN end to end (issue 18): both NICs with ECN and DCQCN on, switched by each guest in
# its driver's debugfs cc_params (hostile writes refused with EINVAL first; the host's
# cc nic:N shows the guests' values) and the fabric marking 5% of the frames to node 2's NIC Congestion
# Experienced (fault nic:1 ce=0.05): every byte still arrives, node 2's NIC counts the marks
# and answers with CNPs, node 1's NIC takes them into DCQCN (both seen in hw_counters).
# Then congestion of the fabric's own: the frames to node 2's NIC go through a link model
# (shape nic:1: 2 Gb/s, a 256 KiB buffer, RED from 20 KB to 200 KB), node 1 sends to node 2
# on 2 QPs at once: the queue marks, node 2 answers with CNPs, DCQCN slows node 1's QPs, and
# every byte arrives (drops, if the buffer overflows, are retransmitted); while it runs, the
# host's cc nic:0 reports show node 1's NIC handling CNPs (and its QPs below line rate, with
# DCQCN's rate, target and alpha, when a report comes while one is).
# Then lossless (PFC, no ECN): node 1's cable at 10 Gb/s (shape nic:0: the link model runs
# both ways, so node 1's NIC sends at that rate), node 2's port the 2 Gb/s bottleneck with a
# 256 KiB buffer, and the switch pausing node 1's port when 64 KiB of what it sent wait
# (pfc nic:0): node 1 sends on 2 QPs at once, every byte arrives, the bottleneck drops
# nothing, the switch sent pauses and node 1's NIC obeyed them (RxPauseFrames).
# Then UD multicast (progs/mcast-datacheck.c through the RDMA CM, guest/mcast.sh; every
# message received once and in order by every joined QP, bytes, immediate, GRH and source QP
# checked): a group inside node 1 (2 receiving QPs, the sender in another process: the NIC's
# own copies), a group node 1 sends to with 2 QPs on node 2 and one on node 1 (the wire copy
# and the loopback copy of the same packets), one node 2 sends to with 2 QPs on node 1; and
# stock mckey from node 1 to node 2. The device's multicast limits are in limits-ferrdma.
# Then RoCE over VLAN 100 (guest/vlan.sh): both ports stay bound to eth0 when eth0.100 appears
# and get its GID; verbs-datacheck over the VLAN GIDs node 1 -> node 2 (that the frames are
# tagged is shown with rxe, which takes no untagged frame for a VLAN GID:
# interop-rxe-ferrdma). Then no verbs object is left and kmemleak is clean on both.
. "$FERRDMA_HARNESS/guest/datacheck.sh"
. "$FERRDMA_HARNESS/guest/mcast.sh"
. "$FERRDMA_HARNESS/guest/vlan.sh"
two_vms_up
mcast_route_up

sizes=1,2,7,64,101,102,1000,1023,1024,1025,4095,4097,9000,65537,262143,1048577,8388608
datacheck_pair to-node2 2 ferrdma0 "$gid" -q 3 -s "$sizes"
datacheck_pair to-node1 1 ferrdma0 "$gid" -q 2 -s "$sizes"

# ctl REQUEST...: each request to the fabric's control socket (node 1), or fail.
ctl() {
	local req
	for req in "$@"; do
		fabric_ctl $req > /tmp/ctl.log || { cat /tmp/ctl.log; fail "fabric_ctl $req refused"; }
	done
}
# cc_run NAME DATACHECK-ARGS...: a data-checked run node 1 -> node 2 and the deltas of
# ${cc_names[*]} over it: this node's in CC_MINE, the peer's in CC_PEER.
cc_names=(RxECNMrkd cnpSent cnpHandled cnpIgnored RxPauseFrames)
cc_run() {
	local name=$1 i mine before=()
	shift
	for i in "${!cc_names[@]}"; do before+=("$(hw_counter "${cc_names[i]}")"); done
	datacheck_pair "$name" 2 ferrdma0 "$gid" "$@"
	CC_MINE=()
	for i in "${!cc_names[@]}"; do CC_MINE+=($(($(hw_counter "${cc_names[i]}") - before[i]))); done
	mine=$(IFS=,; echo "${CC_MINE[*]}")
	IFS=, read -ra CC_PEER <<< "$(barrier_word "$name-counters" $((3 - FERRDMA_NODE)) "$mine")"
	note "$name: deltas of ${cc_names[*]}: here $mine, on the peer $(IFS=,; echo "${CC_PEER[*]}")"
}

# ECN and DCQCN are switched on by each guest for its own NIC, through the driver's debugfs
# cc_params (QUERY_CC/SET_CC): the CE run below shows the engines took them; the host sees them.
cc=/sys/kernel/debug/ferrdma/$(basename "$(readlink -f /sys/class/infiniband/ferrdma0/device)")/cc_params
[ -d "$cc" ] || { ls -R /sys/kernel/debug/ferrdma >&2 || true; fail "no $cc"; }
cc_read() { cat "$cc/$1" || fail "reading $cc/$1 failed"; }
[ "$(cc_read line_rate_mbps)" = 100000 ] || fail "line_rate_mbps reads $(cc_read line_rate_mbps), not the host's 100000"
[ "$(cc_read ecn_enable),$(cc_read dcqcn_enable),$(cc_read rp_dce_tcp_g)" = 0,0,1020 ] ||
	fail "cc_params do not show the host's defaults (ecn off, dcqcn off, dce_tcp_g 1020)"
# Refused, each with EINVAL, changing nothing: out of range, not a number, read only.
for bad in np_cnp_dscp=64 ecn_enable=2 rp_dce_tcp_g=1024 rp_min_rate=0 rp_ai_rate=-1 \
	rp_ai_rate=0x10 rp_ai_rate=4294967296 line_rate_mbps=5; do
	err=$( (echo "${bad#*=}" > "$cc/${bad%%=*}") 2>&1) && fail "writing $bad succeeded"
	[[ "$err" == *"Invalid argument"* ]] || fail "writing $bad: '$err', not EINVAL"
done
[ "$(cc_read np_cnp_dscp),$(cc_read rp_ai_rate),$(cc_read line_rate_mbps)" = 48,40,100000 ] ||
	fail "refused writes changed the values"
echo 1 > "$cc/ecn_enable" && echo 1 > "$cc/dcqcn_enable" && echo $((40 + FERRDMA_NODE)) > "$cc/rp_ai_rate" ||
	fail "writing cc_params failed"
[ "$(cc_read ecn_enable),$(cc_read dcqcn_enable),$(cc_read rp_ai_rate)" = "1,1,$((40 + FERRDMA_NODE))" ] ||
	fail "cc_params do not read back what was written"
barrier cc-params-set 60
if [ "$FERRDMA_NODE" = 1 ]; then
	for n in 0 1; do
		fabric_ctl "cc nic:$n" > /tmp/cc-settings.log || fail "fabric_ctl cc nic:$n failed"
		grep -qE "^nic:$n ecn=on,dcqcn=on,.*,rpg_ai_rate=$((41 + n))," /tmp/cc-settings.log ||
			{ cat /tmp/cc-settings.log; fail "the host does not see node $((n + 1))'s cc_params"; }
	done
	note "cc_params: both guests switched ECN and DCQCN on; the host sees it; 8 hostile writes refused"
	ctl "fault nic:1 ce=0.05"
fi
barrier ce-on 60
cc_run ce-to-node2 -q 1 -s 4097,65537,1048577
if [ "$FERRDMA_NODE" = 1 ]; then
	[ "${CC_PEER[0]}" -gt 0 ] || fail "node 2's NIC counted no CE-marked packet"
	[ "${CC_PEER[1]}" -gt 0 ] || fail "node 2's NIC sent no CNP for ${CC_PEER[0]} CE-marked packets"
	# A CNP finds its QP gone only if it comes after the run (none is lost: no fault here).
	[ "${CC_MINE[2]}" -gt 0 ] && [ $((CC_MINE[2] + CC_MINE[3])) = "${CC_PEER[1]}" ] ||
		fail "node 1's NIC handled ${CC_MINE[2]} and ignored ${CC_MINE[3]} of the ${CC_PEER[1]} CNPs node 2 sent"
	ctl "fault nic:1 off" \
		"shape nic:1 rate-mbps=2000,delay-us=10,buffer=262144,kmin=20000,kmax=200000,pmax=0.2"
fi
barrier shape-on 60
if [ "$FERRDMA_NODE" = 1 ]; then
	# The host's view of node 1's NIC while the run lasts (until the flag file appears).
	rm -f /tmp/cc-during.log /tmp/cc-stop
	( until [ -e /tmp/cc-stop ]; do fabric_ctl "cc nic:0" >> /tmp/cc-during.log 2>&1 || true; nap 0.5; done ) &
	ccpid=$!
fi
cc_run shaped-to-node2 -q 2 -s 65537,1048577
if [ "$FERRDMA_NODE" = 1 ]; then
	touch /tmp/cc-stop
	wait "$ccpid" || true
	# Every report has the engine's counters; CNPs handled during the run show in them. A QP
	# is listed only while DCQCN holds it below line rate (it recovers within ~0.1 s of its
	# last CNP), so a report between bursts may list none: shown when seen, not required
	# (the listing itself is unit-tested: incast_tests, hub).
	handled=$(sed -n 's/^nic:0 counters .* cnps_handled=\([0-9]*\) .*/\1/p' /tmp/cc-during.log | sort -n | tail -1)
	[ "${handled:-0}" -gt 0 ] ||
		{ cat /tmp/cc-during.log; fail "cc nic:0: no report showed a handled CNP during the run"; }
	limited=$(grep -m1 -E '^nic:0 qp [0-9]+ rate-mbps=' /tmp/cc-during.log || echo "none listed")
	note "shaped: the host saw $(grep -c '^nic:0 counters' /tmp/cc-during.log) reports, up to $handled CNPs handled; a limited QP: $limited"
	fabric_ctl stats > /tmp/stats.log || fail "fabric_ctl stats failed"
	link=$(grep -m1 ' nic:1 link ' /tmp/stats.log) || { cat /tmp/stats.log; fail "no link model line for nic:1"; }
	note "shaped: $link"
	marked=$(sed -n 's/.* marked=\([0-9]*\).*/\1/p' <<< "$link")
	[ "${marked:-0}" -gt 0 ] || fail "the link model marked nothing: $link"
	[ "${CC_PEER[0]}" -gt 0 ] && [ "${CC_PEER[1]}" -gt 0 ] ||
		fail "node 2's NIC: ${CC_PEER[0]} CE packets, ${CC_PEER[1]} CNPs sent"
	[ "${CC_MINE[2]}" -gt 0 ] || fail "node 1's NIC handled no CNP"
	ctl "shape nic:1 off" "cc nic:0 ecn=off,dcqcn=off,line-mbps=10000" "cc nic:1 ecn=off,dcqcn=off" \
		"shape nic:0 rate-mbps=10000,delay-us=10,buffer=1048576" \
		"shape nic:1 rate-mbps=2000,delay-us=10,buffer=262144" \
		"pfc nic:0 xoff=65536,xon=32768,prio=0"
fi
barrier pfc-on 60
cc_run pfc-to-node2 -q 2 -s 65537,1048577
if [ "$FERRDMA_NODE" = 1 ]; then
	fabric_ctl stats > /tmp/stats.log || fail "fabric_ctl stats failed"
	for what in ' nic:1 link ' ' nic:0 pfc ' ' nic:0 uplink '; do
		line=$(grep -m1 "$what" /tmp/stats.log) || { cat /tmp/stats.log; fail "no '$what' line in the fabric's stats"; }
		note "lossless:$line"
	done
	link=$(grep -m1 ' nic:1 link ' /tmp/stats.log)
	pauses=$(grep -m1 ' nic:0 pfc ' /tmp/stats.log | sed -n 's/.* pauses=\([0-9]*\).*/\1/p')
	dropped=$(sed -n 's/.* dropped=\([0-9]*\).*/\1/p' <<< "$link")
	[ "$dropped" = 0 ] || fail "lossless, yet the bottleneck dropped $dropped frames: $link"
	[ "${pauses:-0}" -gt 0 ] || fail "the switch never paused node 1's port"
	[ "${CC_MINE[4]}" -gt 0 ] || fail "node 1's NIC obeyed no pause frame (RxPauseFrames delta ${CC_MINE[4]})"
	ctl "pfc nic:0 off" "shape nic:0 off" "shape nic:1 off" "cc nic:0 line-mbps=100000"
fi
barrier shape-off 60

if [ "$FERRDMA_NODE" = 1 ]; then
	mcast_recv_start mcast-loopback 239.1.1.1 2 200 11 "$FERRDMA_IP"
	mcast_send mcast-loopback 239.1.1.1 200 11
	mcast_recv_finish mcast-loopback
	mcast_recv_start mcast-one-to-both 239.1.1.2 1 200 23 "$FERRDMA_IP"
	barrier mcast-one-to-both-joined 120
	mcast_send mcast-one-to-both 239.1.1.2 200 23
	mcast_recv_finish mcast-one-to-both
	barrier mcast-one-to-both-done "$MCAST_TIMEOUT"
else
	mcast_pair mcast-one-to-both 2 239.1.1.2 2 200 23
fi
mcast_pair mcast-two-to-one 1 239.1.1.3 2 200 37
mcast_mckey mckey 2 239.1.1.4 50

vlan_roce_up ferrdma0
datacheck_pair vlan-to-node2 2 ferrdma0 "$VLAN_GID" -q 2 -s 1,64,4097,65537,1048577
expect_no_verbs_objects
barrier finished 120

unload_ferrdma
kmemleak_check "unicast, multicast and VLAN data between two VMs"
note "datacheck-two-vms-ferrdma passed on node $FERRDMA_NODE"
