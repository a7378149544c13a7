#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 nic=no baseline=yes
#
# Faults and the events they raise, on soft RoCE (rxe0 on eth0), as a baseline for ferrdma:
# an RDMA WRITE with a wrong rkey completes with a remote access error and raises the QP
# access-error event at the responder; an overrun CQ raises the CQ error event
# (progs/error-events.c; guest/events.sh).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe errors "$@"
