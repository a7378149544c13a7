#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 boot-group=device
#
# Every byte through ferrdma0's loopback, checked by our own verbs program
# (progs/verbs-datacheck.c, guest/datacheck.sh): RC SEND, SEND_WITH_IMM, WRITE,
# WRITE_WITH_IMM, READ and UD SEND of 1 B to 8 MiB (non-powers of two, around the inline
# limit, the MTU and pages), one SGE, the most SGEs the QPs allow, inline, unaligned and
# page-crossing offsets, 3 QPs at once, with poisoned targets and every completion field
# checked. First a forked server on the same device, then a server and a client process
# over TCP with another seed. Then no verbs object is left and kmemleak is clean.
. "$FERRDMA_HARNESS/guest/datacheck.sh"
need_nic

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)
note "RoCE v2 GID index $gid"

datacheck_loopback fork ferrdma0 -g "$gid" -q 3
datacheck_tcp_loopback tcp ferrdma0 "$gid" -q 2 -k 4 -s 1,5,101,102,4093,65536,1000001
expect_no_verbs_objects

unload_ferrdma
kmemleak_check "verbs-datacheck on loopback"
note "datacheck-loopback-ferrdma passed"
