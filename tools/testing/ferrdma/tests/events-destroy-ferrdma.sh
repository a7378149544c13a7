#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 smp=2
#
# Destroying QPs and CQs while their completions and events are in flight, on ferrdma0: 300
# create/arm/post/destroy rounds with a thread acknowledging events meanwhile; no event for a
# CQ that is gone, no hang (destroy-race gives up after 120 s, well inside the script's limit,
# and names the step it was stuck in), and the kernel log (lockdep, list debugging) and
# kmemleak stay clean (progs/destroy-race.c; guest/events.sh).
# Two vCPUs (smp=2): the event thread and the destroying thread run at the same time.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma destroy -i 300 -t 120 "$@"
