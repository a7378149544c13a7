#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=600 check-pcap=yes pcap-opcodes=send long=yes ulp=yes
#
# RDS over RDMA between two VMs (issue 20): AF_RDS sockets on rds_rdma, messages of
# 1 B..1 MiB echoed and checked on both sides (guest/ulp.sh, guest/rds_echo.py).
. "$FERRDMA_HARNESS/guest/ulp.sh"
ulp_two_vms ferrdma rds
