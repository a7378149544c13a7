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
# Then UD multicast (progs/mcast-datacheck.c through the RDMA CM, guest/mcast.sh; every
# message received once and in order by every joined QP, bytes, immediate, GRH and source QP
# checked): a group inside node 1 (2 receiving QPs, the sender in another process: the NIC's
# own copies), a group node 1 sends to with 2 QPs on node 2 and one on node 1 (the wire copy
# and the loopback copy of the same packets), one node 2 sends to with 2 QPs on node 1; and
# stock mckey from node 1 to node 2. The device's multicast limits are in limits-ferrdma.
# Then RoCE over VLAN 100 (guest/vlan.sh): both ports stay bound to eth0 when eth0.100 appears
# and get its GID; verbs-datacheck over the VLAN GIDs node 1 -> node 2 (that the frames are
# tagged is shown with rxe, which takes no untagged frame for a VLAN GID:
# datacheck-rxe-ferrdma). Then no verbs object is left and kmemleak is clean on both.
. "$FERRDMA_HARNESS/guest/datacheck.sh"
. "$FERRDMA_HARNESS/guest/mcast.sh"
. "$FERRDMA_HARNESS/guest/vlan.sh"
two_vms_up
mcast_route_up

sizes=1,2,7,64,101,102,1000,1023,1024,1025,4095,4097,9000,65537,262143,1048577,8388608
datacheck_pair to-node2 2 ferrdma0 "$gid" -q 3 -s "$sizes"
datacheck_pair to-node1 1 ferrdma0 "$gid" -q 2 -s "$sizes"

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

vlan_up
vlan_expect_port_on_eth0 ferrdma0
vgid=$(vlan_gid ferrdma0)
note "ferrdma0: VLAN GID $vgid on $VLAN_DEV"
ping_peer "$VLAN_PEER_IP" 60
barrier vlan-up 120
datacheck_pair vlan-to-node2 2 ferrdma0 "$vgid" -q 2 -s 1,64,4097,65537,1048577
expect_no_verbs_objects
barrier finished 120

unload_ferrdma
kmemleak_check "unicast, multicast and VLAN data between two VMs"
note "datacheck-two-vms-ferrdma passed on node $FERRDMA_NODE"
