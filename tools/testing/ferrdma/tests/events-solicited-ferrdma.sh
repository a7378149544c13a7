#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=events
#
# CQ arming and completion events on ferrdma0 (the same program as the rxe baseline):
# solicited-only arms ignore unsolicited completions and wake on a solicited one, one event
# per arm, completions that preceded the arm are found, error completions wake a solicited-only
# arm (progs/solicited-events.c; guest/events.sh). The rounds of completions racing the arm
# (check 6b) are events-race-ferrdma.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma solicited --error-wakes -r 0 "$@"
