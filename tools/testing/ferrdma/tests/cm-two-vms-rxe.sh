#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=500 nic=no baseline=yes
#
# The RDMA CM end to end between two VMs on soft RoCE (rxe0 on each eth0), as a baseline for
# ferrdma: rping, ucmatose, udaddy over IPv4 and IPv6, rdma_server/rdma_client, riostream,
# ib_write_bw -R, ib_send_lat -R and cmtime with 200 connections over IPv4 (the baseline of
# the connection setup rate), node 1 serving (guest/cm.sh: cm_two_vms).
. "$FERRDMA_HARNESS/guest/cm.sh"
cm_two_vms rxe
