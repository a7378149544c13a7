#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 smp=2
#
# Event-driven completion stress on ferrdma0 (the same program as the rxe baseline):
# 4 threads x 4 CQs, 10^6 completions (issue 6 acceptance), each CQ reaped only through its events (wait, ack, re-arm, poll until
# empty), every completion counted, no loss, no hang; then the same with one completion
# channel shared by all threads (progs/event-stress.c; guest/events.sh).
# Two vCPUs (smp=2): the threads reap their CQs in parallel, not only by turns.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma stress -t 4 -m 4 -c 1000000 "$@"
