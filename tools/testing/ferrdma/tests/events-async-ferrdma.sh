#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=200 boot-group=events
#
# Asynchronous port events on ferrdma0 (the same program as the rxe baseline): taking
# eth0 down and up delivers IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE to a process
# waiting in ibv_get_async_event (progs/async-events.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma async -t 30 "$@"
