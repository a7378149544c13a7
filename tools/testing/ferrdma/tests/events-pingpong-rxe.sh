#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=400 nic=no baseline=yes
#
# Stock event-driven verbs tools between two VMs on soft RoCE (rxe0 on each eth0), as a
# baseline for ferrdma: ibv_rc_pingpong -e, ib_send_lat -e and ib_send_bw -e, node 1 serving
# (guest/events.sh: events_two_vms).
. "$FERRDMA_HARNESS/guest/events.sh"
events_two_vms rxe
