#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 nic=no baseline=yes
#
# The cq-resize program (see cq-resize-ferrdma) on soft RoCE (rxe0 on eth0), as a baseline: the
# program's expectations are those of a stock RoCE device.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main rxe cq-resize "$@"
