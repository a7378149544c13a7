#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=1500 nic=no baseline=yes ulp=yes
#
# ulp-nfs-ferrdma on soft RoCE (rxe0 on eth0), the baseline (guest/ulp.sh).
. "$FERRDMA_HARNESS/guest/ulp.sh"
ulp_two_vms rxe nfs
