#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=900 mem=1536 long=yes
#
# limits-ferrdma at the nominal resource profile (the manual's limits: 16,384 QPs and CQs,
# 65,536 MRs, 65,535 PDs through libirdma): the same programs and checks, counting to the
# limits ferrdma0 reports by default. 392 s on a 2-core TCG host (session 24), most of it in
# the counts; make check runs limits-ferrdma at the small profile instead.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma limits -i 101 -M "$@"
