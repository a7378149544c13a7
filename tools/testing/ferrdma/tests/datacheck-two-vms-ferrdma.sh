#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=900
#
# Every byte between two ferrdma VMs over the fabric, checked by our own verbs program
# (progs/verbs-datacheck.c, guest/datacheck.sh): RC SEND, SEND_WITH_IMM, WRITE,
# WRITE_WITH_IMM, READ and UD SEND over sizes from 1 B to 8 MiB, one SGE, the most SGEs,
# inline, unaligned and page-crossing offsets, 3 QPs at once, poisoned targets and every
# completion field checked. Node 2 serves first (SEND and WRITE data flow node 1 -> node 2,
# READ data node 2 -> node 1), then node 1 serves (the other way round). Then no verbs object
# is left and kmemleak is clean on both.
. "$FERRDMA_HARNESS/guest/datacheck.sh"
two_vms_up

sizes=1,2,7,64,101,102,1000,1023,1024,1025,4095,4097,9000,65537,262143,1048577,8388608
datacheck_pair to-node2 2 ferrdma0 "$gid" -q 3 -s "$sizes"
datacheck_pair to-node1 1 ferrdma0 "$gid" -q 2 -s "$sizes"
expect_no_verbs_objects
barrier finished 120

unload_ferrdma
kmemleak_check "verbs-datacheck between two VMs"
note "datacheck-two-vms-ferrdma passed on node $FERRDMA_NODE"
