#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 nics=1 timeout=900 smp=2
#
# Every byte between ferrdma and Linux soft RoCE, checked by our own programs: node 1 has a
# ferrdma NIC (ferrdma0), node 2 is a plain VM running rxe (rxe0 on its virtio-net).
# 1. Unicast (progs/verbs-datacheck.c, guest/datacheck.sh): RC SEND, SEND_WITH_IMM, WRITE,
#    WRITE_WITH_IMM, READ and UD SEND over sizes 1 B .. 1 MiB + 1 (rxe under TCG is slow: the
#    8 MiB size runs in the ferrdma-only tests), one SGE, the most SGEs both ends allow,
#    inline, unaligned and page-crossing offsets, 2 QPs at once, poisoned targets and
#    completions checked. Node 1 serves first (ferrdma is the responder of SEND and WRITE and
#    the requester of nothing: rxe -> ferrdma for SEND/WRITE, ferrdma -> rxe for READ), then
#    node 2 serves (ferrdma is the requester).
# 2. UD multicast (progs/mcast-datacheck.c, guest/mcast.sh): ferrdma sends to 2 rxe QPs, rxe
#    sends to 2 ferrdma QPs, every message and byte checked; then stock mckey from ferrdma to
#    rxe. Not mckey from rxe: mckey posts all its sends at once and rxe puts only a few of a
#    burst of 30 multicast sends on the wire (its own sent_pkts counter said 2, the capture
#    2-7); mcast-datacheck keeps 16 in flight and loses none from rxe.
# 3. RoCE over VLAN 100 (guest/vlan.sh): ferrdma's port stays bound to eth0 when eth0.100
#    (same MAC) appears, keeps its untagged GID and gets the VLAN GID; rxe takes packets for its
#    VLAN GID only from eth0.100, so every exchange proves ferrdma tags its frames. Over the
#    VLAN GIDs verbs-datacheck both ways, and rping -V through the RDMA CM over the VLAN
#    addresses (ib_core's CM answers from the VLAN GID because ferrdma reports the VLAN of
#    each datagram it receives).
# Node 1 then has no verbs object left and kmemleak is clean.
# Two vCPUs (smp=2): rxe moves its packets in the guest's softirqs, beside the programs (one
# vCPU made this test 1.4x slower).
. "$FERRDMA_HARNESS/guest/cm.sh"
. "$FERRDMA_HARNESS/guest/datacheck.sh"
. "$FERRDMA_HARNESS/guest/mcast.sh"
. "$FERRDMA_HARNESS/guest/vlan.sh"
[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs"

if [ "$FERRDMA_NODE" = 1 ]; then
	[ "$FERRDMA_HAVE_NIC" = 1 ] || fail "node 1 needs the ferrdma NIC (header nics=1)"
	kmemleak_clear
	rdma_dev_up ferrdma
else
	[ "$FERRDMA_HAVE_NIC" = 0 ] || fail "node 2 must be a plain VM (header nics=1), it has a ferrdma NIC"
	rdma_dev_up rxe
fi
mcast_route_up
ping_peer "$FERRDMA_PEER_IP" 90
barrier up 180

sizes=1,3,64,101,255,1024,1025,4097,9000,65537,1048577
datacheck_pair rxe-to-ferrdma 1 "$EVENTS_DEV" "$EVENTS_GID_INDEX" -q 2 -k 4 -s "$sizes"
datacheck_pair ferrdma-to-rxe 2 "$EVENTS_DEV" "$EVENTS_GID_INDEX" -q 2 -k 4 -s "$sizes"

mcast_pair mcast-ferrdma-to-rxe 2 239.2.1.1 2 100 5
mcast_pair mcast-rxe-to-ferrdma 1 239.2.1.2 2 100 7
mcast_mckey mckey-ferrdma-to-rxe 2 239.2.1.3 30

vlan_up
[ "$FERRDMA_NODE" = 2 ] || vlan_expect_port_on_eth0 ferrdma0
vgid=$(vlan_gid "$EVENTS_DEV")
note "$EVENTS_DEV: VLAN GID $vgid on $VLAN_DEV"
ping_peer "$VLAN_PEER_IP" 60
barrier vlan-up 120
vsizes=1,64,4097,65537
datacheck_pair vlan-rxe-to-ferrdma 1 "$EVENTS_DEV" "$vgid" -q 2 -k 4 -s "$vsizes"
datacheck_pair vlan-ferrdma-to-rxe 2 "$EVENTS_DEV" "$vgid" -q 2 -k 4 -s "$vsizes"
# rping with data validation through the RDMA CM over the VLAN addresses: cm_pair, node 1
# (ferrdma) serving, with the restrack counts of now as its reference.
CM_MODE=two
mkdir -p "$CM_LOGS"
CM_RES_BEFORE=$(rdma res show "$EVENTS_DEV")
CM_CMID_BEFORE=$(rdma res show cm_id)
cm_pair vlan-rping 7400 \
	-s 20 '^server ping data: rdma-ping-' -c 20 '^ping data: rdma-ping-' -- \
	rping -s -a 10.78.0.1 -p 7400 -v -V -C 20 -S 4096 -- \
	rping -c -a 10.78.0.1 -p 7400 -v -V -C 20 -S 4096
note "rping over VLAN $VLAN_ID passed"
barrier finished 120

if [ "$FERRDMA_NODE" = 1 ]; then
	expect_no_verbs_objects
	rdma_dev_down
	kmemleak_check "data between ferrdma and rxe: unicast, multicast, over a VLAN"
fi
note "datacheck-rxe-ferrdma passed on node $FERRDMA_NODE"
