#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 nic=no baseline=yes
#
# Destroying QPs and CQs while their completions and events are in flight, on soft RoCE
# (rxe0 on eth0), as a baseline for ferrdma: 300 create/arm/post/destroy rounds with a thread
# acknowledging events meanwhile; no event for a CQ that is gone, no hang (120 s at most), and the kernel log (lockdep, list debugging) and
# kmemleak stay clean (progs/destroy-race.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe destroy -i 300 -t 120 "$@"
