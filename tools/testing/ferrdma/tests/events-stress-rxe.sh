#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 nic=no baseline=yes
#
# Event-driven completion stress on soft RoCE (rxe0 on eth0), as a baseline for ferrdma:
# 4 threads x 4 CQs, 100,000 completions, each CQ reaped only through its events (wait, ack, re-arm, poll until
# empty), every completion counted, no loss, no hang; then the same with one completion
# channel shared by all threads (progs/event-stress.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe stress -t 4 -m 4 -c 100000 "$@"
