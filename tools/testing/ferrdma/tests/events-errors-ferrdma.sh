#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=events
#
# Faults and the events they raise, on ferrdma0 (the same program as the rxe baseline):
# an RDMA WRITE with a wrong rkey completes with a remote access error and raises the QP
# access-error event at the responder; an overrun CQ raises the CQ error event
# (progs/error-events.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma errors "$@"
