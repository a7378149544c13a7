#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400
#
# The RDMA CM with both ends in one VM on ferrdma0: the tools of cm-two-vms over IPv4, the
# addressing ones (rping, ucmatose, udaddy) over IPv6 (guest/cm.sh: cm_loopback).
. "$FERRDMA_HARNESS/guest/cm.sh"
cm_loopback ferrdma
