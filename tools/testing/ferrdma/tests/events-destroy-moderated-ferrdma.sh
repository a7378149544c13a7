#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 smp=2
#
# events-destroy-ferrdma with CEQ interrupt moderation at 8 ms (ceq_moderation_us=8000): a
# completion event the device queued just before a CQ was destroyed then waits in the CEQ
# until after the next CQ was created, most often with the same CQ number. The driver must
# deliver it to nobody (the device echoes the event tag that CREATE_CQ gave; manual, "Event
# tags"), not to the new CQ, which was never armed: destroy-race fails on an event for a CQ
# that was not armed, and a stray event left unacknowledged hangs that CQ's destroy until
# destroy-race gives up after 120 s and says so (progs/destroy-race.c; guest/events.sh).
# Two vCPUs (smp=2), as events-destroy-ferrdma.
. "$FERRDMA_HARNESS/guest/events.sh"
FERRDMA_KO_PARAMS="ceq_moderation_us=8000" events_main ferrdma destroy -i 300 -t 120 "$@"
