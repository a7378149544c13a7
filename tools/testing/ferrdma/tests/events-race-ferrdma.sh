#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=events
#
# Completions racing the arm on ferrdma0: 100 rounds of 8 SENDs posted while the consumer arms
# and polls with the standard loop (check 6b of progs/solicited-events.c); every completion must
# be seen, through an event when the poll after arming missed it.
#
# This lost an event in one full make check out of three ("round 4: 8 of 8 completions
# missing: no event within 10000 ms after arming") until the NIC stopped ignoring CQ-arm
# doorbells whose 2-bit ARM_SEQ had not changed: events taken back to back make several arms
# before the device reads the first doorbell, and four of them look like none (issue 6;
# manual, "Arming"; cargo test cq_arms_whose_sequence_number_wrapped_still_arm).
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma solicited -r 100 "$@"
