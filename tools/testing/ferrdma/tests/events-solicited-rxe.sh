#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 nic=no baseline=yes
#
# CQ arming and completion events on soft RoCE (rxe0 on eth0), as a baseline for ferrdma:
# solicited-only arms ignore unsolicited completions and wake on a solicited one, one event
# per arm, completions racing the arm are not lost (progs/solicited-events.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe solicited "$@"
