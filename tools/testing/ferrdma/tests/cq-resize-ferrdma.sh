#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=events
#
# ibv_resize_cq on ferrdma0 through stock libirdma (irdma's CQ_RESIZE: a new ring registered,
# MODIFY_CQ, the old ring polled empty by libirdma, then deregistered): both CQs of a loopback
# RC pair grown and shrunk while completions sit in the old ring and more arrive, every
# completion counted and every byte checked; a resize too small for the unpolled completions
# fails with EINVAL; an arm on the new ring wakes (progs/cq-resize.c; guest/events.sh). No verbs
# object left, kmemleak clean. cq-resize-rxe runs the same program on soft RoCE.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma cq-resize "$@"
