#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=900 check-pcap=yes pcap-opcodes=send,read,write,send-inv long=yes ulp=yes
#
# NFS over RDMA between two VMs (issue 20): node 1 runs knfsd with an RDMA listener on port
# 20049, node 2 mounts NFSv4.1 with proto=rdma; files of 200 B..8 MiB written and read both
# ways and compared on the other side; clean teardown (guest/ulp.sh).
. "$FERRDMA_HARNESS/guest/ulp.sh"
ulp_two_vms ferrdma nfs
