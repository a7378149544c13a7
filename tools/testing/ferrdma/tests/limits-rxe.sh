#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 nic=no baseline=yes
#
# The limits program (see limits-ferrdma) on soft RoCE (rxe0 on eth0), as a baseline: the
# program's expectations are those of a stock RoCE device. rxe's object limits are in the tens
# of thousands; counts above 40000 are reported, not created.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe limits -C 40000 "$@"
