#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=900 check-pcap=yes pcap-opcodes=send,read,write,send-inv long=yes ulp=yes
#
# iSER between two VMs (issue 20): node 1 exports a file through LIO's iSCSI target with an
# iSER portal (ib_isert); node 2 logs in with open-iscsi over ib_iser and does O_DIRECT block
# I/O with data checks both ways; clean teardown (guest/ulp.sh).
. "$FERRDMA_HARNESS/guest/ulp.sh"
ulp_two_vms ferrdma iser
