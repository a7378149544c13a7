#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 nic=no baseline=yes
#
# nvmeof-loopback-ferrdma on soft RoCE (rxe0 on eth0), for comparison (guest/nvmeof.sh).
. "$FERRDMA_HARNESS/guest/nvmeof.sh"
nvmeof_loopback rxe
