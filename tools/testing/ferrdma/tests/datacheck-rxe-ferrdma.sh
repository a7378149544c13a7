#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 nics=1 timeout=900
#
# Every byte between ferrdma and Linux soft RoCE, checked by our own verbs program
# (progs/verbs-datacheck.c, guest/datacheck.sh): node 1 has a ferrdma NIC (ferrdma0), node 2
# is a plain VM running rxe (rxe0 on its virtio-net). RC SEND, SEND_WITH_IMM, WRITE,
# WRITE_WITH_IMM, READ and UD SEND over sizes 1 B .. 1 MiB + 1 (rxe under TCG is slow: the
# 8 MiB size runs in the ferrdma-only tests), one SGE, the most SGEs both ends allow, inline,
# unaligned and page-crossing offsets, 2 QPs at once, poisoned targets and completions
# checked. Node 1 serves first (ferrdma is the responder of SEND and WRITE and the requester
# of nothing: rxe -> ferrdma for SEND/WRITE, ferrdma -> rxe for READ), then node 2 serves
# (ferrdma is the requester). Node 1 then has no verbs object left and kmemleak is clean.
. "$FERRDMA_HARNESS/guest/events.sh"
. "$FERRDMA_HARNESS/guest/datacheck.sh"
[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs"

if [ "$FERRDMA_NODE" = 1 ]; then
	[ "$FERRDMA_HAVE_NIC" = 1 ] || fail "node 1 needs the ferrdma NIC (header nics=1)"
	kmemleak_clear
	rdma_dev_up ferrdma
else
	[ "$FERRDMA_HAVE_NIC" = 0 ] || fail "node 2 must be a plain VM (header nics=1), it has a ferrdma NIC"
	rdma_dev_up rxe
fi
ping_peer "$FERRDMA_PEER_IP" 90
barrier up 180

sizes=1,3,64,101,255,1024,1025,4097,9000,65537,1048577
datacheck_pair rxe-to-ferrdma 1 "$EVENTS_DEV" "$EVENTS_GID_INDEX" -q 2 -k 4 -s "$sizes"
datacheck_pair ferrdma-to-rxe 2 "$EVENTS_DEV" "$EVENTS_GID_INDEX" -q 2 -k 4 -s "$sizes"
barrier finished 120

if [ "$FERRDMA_NODE" = 1 ]; then
	expect_no_verbs_objects
	rdma_dev_down
	kmemleak_check "verbs-datacheck between ferrdma and rxe"
fi
note "datacheck-rxe-ferrdma passed on node $FERRDMA_NODE"
