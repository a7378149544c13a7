#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 nic=no baseline=yes
#
# The RDMA CM with both ends in one VM on soft RoCE (rxe0 on eth0), as a baseline for ferrdma:
# the tools of cm-two-vms over IPv4, the addressing ones over IPv6 (guest/cm.sh: cm_loopback).
. "$FERRDMA_HARNESS/guest/cm.sh"
cm_loopback rxe
