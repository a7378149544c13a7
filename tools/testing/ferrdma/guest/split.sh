# SPDX-License-Identifier: GPL-2.0
#
# The split-fabric tests (tests/split-fabric-*.sh, issue 20): two VMs whose ferrdma NICs and
# virtio-nets sit on two fabric processes in two network namespaces, joined only by host
# networking (vmharness.py: SplitNet). split_fabric_main HOW: RC SEND, WRITE and READ and UD
# SEND with every byte and completion checked (progs/verbs-datacheck, both directions), then
# RoCE over VLAN 100 both ways (guest/vlan.sh; the tests' header pcap-vlan=100 makes the
# harness check that each fabric received the other's RoCEv2 frames with their tag: Linux
# takes the tag off every frame before a packet socket sees it, and the fabric's port puts it
# back), then rping through the RDMA CM with its data verified (-V) and every line checked;
# no verbs object left and kmemleak clean after each part. HOW names the joining in the notes.
. "$FERRDMA_HARNESS/guest/datacheck.sh"
. "$FERRDMA_HARNESS/guest/cm.sh"
. "$FERRDMA_HARNESS/guest/vlan.sh"

split_fabric_main() {
	local how=$1 sizes=1,64,4095,4097,65537,1048577
	two_vms_up
	datacheck_pair to-node2 2 ferrdma0 "$gid" -q 2 -s "$sizes"
	datacheck_pair to-node1 1 ferrdma0 "$gid" -q 1 -s "$sizes"
	vlan_roce_up ferrdma0
	datacheck_pair vlan-to-node2 2 ferrdma0 "$VLAN_GID" -q 1 -s 1,4097,65537
	datacheck_pair vlan-to-node1 1 ferrdma0 "$VLAN_GID" -q 1 -s 1,4097,65537
	expect_no_verbs_objects
	barrier datacheck-finished 120
	unload_ferrdma
	kmemleak_check "verbs between two fabrics joined by $how"

	cm_setup ferrdma two
	cm_pair rping 7471 -s 50 '^server ping data: rdma-ping-' -c 50 '^ping data: rdma-ping-' -- \
		rping -s -a 10.77.0.1 -p 7471 -v -V -C 50 -- \
		rping -c -a 10.77.0.1 -p 7471 -v -V -C 50
	cm_teardown "rping between two fabrics joined by $how"
	note "$FERRDMA_SCRIPT_NAME passed on node $FERRDMA_NODE"
}
