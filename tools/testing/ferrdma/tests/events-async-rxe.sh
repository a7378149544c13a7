#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=200 nic=no baseline=yes
#
# Asynchronous port events on soft RoCE (rxe0 on eth0), as a baseline for ferrdma: taking
# eth0 down and up delivers IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE to a process
# waiting in ibv_get_async_event (progs/async-events.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe async -t 30 "$@"
