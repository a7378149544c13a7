#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=600
#
# UD multicast on ferrdma (guest/mcast.sh): node 1 first checks the device's multicast limits
# (RC QP and unicast GID refused, a detach of what was never attached refused, a full group and
# a full group table refused, everything detaches), then a loopback group on node 1 (2
# receiving QPs, the sender in another process), then groups across the VMs both ways,
# with a member on the sending node too (the NIC's loopback copy and the wire copy of the same
# packets), every message and byte checked (progs/mcast-datacheck); then stock mckey from
# node 1 to node 2. Afterwards no verbs object is left and kmemleak is clean.
. "$FERRDMA_HARNESS/guest/mcast.sh"
[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs"
kmemleak_clear
rdma_dev_up ferrdma
mcast_route_up
ping_peer "$FERRDMA_PEER_IP" 90
barrier up 180

if [ "$FERRDMA_NODE" = 1 ]; then
	"$MCAST_BIN" --limits ferrdma0 || fail "multicast limits on ferrdma0"
	mcast_recv_start loopback 239.1.1.1 2 200 11 "$FERRDMA_IP"
	mcast_send loopback 239.1.1.1 200 11
	mcast_recv_finish loopback
fi
barrier loopback-done 300

# Node 1 sends; node 2 receives on 2 QPs and node 1 on 1 QP (its NIC's loopback copy).
if [ "$FERRDMA_NODE" = 1 ]; then
	mcast_recv_start one-to-both 239.1.1.2 1 200 23 "$FERRDMA_IP"
	barrier one-to-both-joined 120
	mcast_send one-to-both 239.1.1.2 200 23
	mcast_recv_finish one-to-both
	barrier one-to-both-done "$MCAST_TIMEOUT"
else
	mcast_pair one-to-both 2 239.1.1.2 2 200 23
fi
mcast_pair two-to-one 1 239.1.1.3 2 200 37
mcast_mckey mckey 2 239.1.1.4 50

expect_no_verbs_objects
rdma_dev_down
kmemleak_check "multicast on ferrdma"
note "mcast-ferrdma passed on node $FERRDMA_NODE"
