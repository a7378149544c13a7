#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=events
#
# ibv_rereg_mr on ferrdma0 through stock libirdma (issue 17, item 4; progs/rereg-mr.c): a new
# translation, access rights taken away and given back, another PD; RDMA WRITEs from a loopback
# pair land where the MR now points and nowhere else, are refused where it no longer allows
# them, and a failed rereg leaves the MR as it was. No verbs object left, kmemleak clean.
# Hostile REREG_MR commands are in verbs-hostile-verbs. No soft RoCE baseline: librxe has no
# rereg_mr, so libibverbs answers EOPNOTSUPP before the kernel is asked.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma rereg-mr "$@"
