#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=900 check-pcap=yes pcap-opcodes=send,read,write long=yes ulp=yes
#
# SRP between two VMs (issue 20): node 1 exports a file through LIO and ib_srpt, listening on
# the RDMA CM; node 2 logs in with ib_srp and does O_DIRECT block I/O with data checks both
# ways; clean teardown (guest/ulp.sh).
. "$FERRDMA_HARNESS/guest/ulp.sh"
ulp_two_vms ferrdma srp
