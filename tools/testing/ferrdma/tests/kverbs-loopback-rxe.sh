#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 nic=no baseline=yes
#
# Kernel verbs of a kernel consumer on soft RoCE (rxe0 on eth0), the baseline for ferrdma:
# kmod/ferrdma_kverbs_test.ko's RC and UD checks over the RoCE v2 GID (guest/kverbs.sh).
. "$FERRDMA_HARNESS/guest/kverbs.sh"
kverbs_main rxe "$@"
