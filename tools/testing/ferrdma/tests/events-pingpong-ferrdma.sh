#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=400
#
# Stock event-driven verbs tools between the two VMs' ferrdma NICs, over the fabric (the
# same as the rxe baseline): ibv_rc_pingpong -e, ib_send_lat -e and ib_send_bw -e, node 1
# serving (guest/events.sh: events_two_vms).
#
# ib_send_lat -e used to stop after a few dozen iterations: it polls a CQ once per event, and
# the NIC raised an event at once for every arm that found unpolled CQEs - the very CQEs the
# tool polls right after arming - so every such spurious event left a send completion behind
# until the send CQ overflowed (CQ_OVERFLOW in the NIC log). The NIC now looks again 1 ms
# after such an arm and raises the event only if they are still unpolled (manual, "Arming
# with unpolled CQEs"; issue 6).
. "$FERRDMA_HARNESS/guest/events.sh"
events_two_vms ferrdma
