#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=500
#
# The RDMA CM end to end between two VMs on ferrdma0: rping, ucmatose, udaddy over IPv4 and
# IPv6, rdma_server/rdma_client, riostream, ib_write_bw -R, ib_send_lat -R over IPv4, and
# cmtime with 200 connections over IPv4 (the connection-scale check; its setup times are
# noted), node 1 serving (guest/cm.sh: cm_two_vms).
. "$FERRDMA_HARNESS/guest/cm.sh"
cm_two_vms ferrdma
