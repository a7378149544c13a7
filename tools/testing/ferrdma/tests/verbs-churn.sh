#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 boot-group=verbs
#
# Verbs object churn through stock pyverbs + libirdma (guest/verbs_churn.py): 1000 random
# operations creating and destroying contexts, PDs, CQs, MRs (ib_umem-pinned, random sizes and
# access) and RC/UD QPs (random caps, some moved to INIT) in random order, with a fixed seed;
# then a run whose process exits holding objects. Afterwards ib_core tracks no object of
# ferrdma0, rmmod works and kmemleak has nothing.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
python3 "$FERRDMA_HARNESS/guest/verbs_churn.py" ferrdma0 1000 "${1:-7}" \
	|| fail "verbs_churn.py failed"
expect_no_verbs_objects
# The same with a process that dies holding objects: the kernel cleans up on file release.
python3 "$FERRDMA_HARNESS/guest/verbs_churn.py" ferrdma0 300 "${1:-7}" exit \
	|| fail "verbs_churn.py (exit without cleanup) failed"
expect_no_verbs_objects
unload_ferrdma
kmemleak_check "1000 random verbs operations"
note "verbs-churn test passed"
