#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=900
#
# Error paths of every create, walked with the driver's fault injection (module parameter
# fault_every=N: one fallible step in N of creating a verbs object fails with ENOMEM).
# For each N, with ferrdma loaded that way:
#   - ib_mad's own QPs and CQs are created at registration (their failures are ib_mad's to
#     handle);
#   - user verbs churn through stock libirdma (guest/verbs_churn.py ... faults: contexts, PDs,
#     CQs, MRs, ring registrations, RC/UD QPs; ENOMEM refusals counted, anything else fatal);
#   - the kernel-verbs module's checks (kernel CQs, QPs, AHs, fast-registration MRs, posts);
#     they may fail or refuse to load, which is not judged here;
#   - the kernel-verbs module's churn mode: rounds of PD, CQ, RC and UD QP, AH and
#     fast-registration MR creates and destroys that go on after a failed create, so late
#     steps of kernel creates fail too; a create may fail only with ENOMEM;
#   - nothing may be left: no user verbs object in ib_core, and at rmmod the driver's own
#     check (every id given back, no event handle still published) must not WARN;
#   - the driver must report that it injected failures (else this test proved nothing).
# Then ferrdma without injection must still pass the churn, and kmemleak must be clean.
. "$FERRDMA_HARNESS/guest/kverbs.sh"
need_nic
ko=$(kverbs_module)
loads=0
kmemleak_clear

for every in ${1:-3 5 8 13}; do
	echo "ferrdma-test: fault injection every $every" > /dev/kmsg
	FERRDMA_KO_PARAMS="fault_every=$every" load_ferrdma
	wait_probe "$((++loads))" >/dev/null
	wait_rocev2_gid ferrdma0
	out=$(python3 "$FERRDMA_HARNESS/guest/verbs_churn.py" ferrdma0 400 "$every" faults) \
		|| fail "verbs churn with fault_every=$every failed: $out"
	note "fault_every=$every: $out"
	expect_no_verbs_objects
	# Several loads: each makes ~5 kernel CQs, 6 kernel QPs, an AH and fast-registration MRs,
	# and a create takes several steps, so one load reaches few of the later ones.
	loaded=0
	for _ in 1 2 3 4 5; do
		if insmod "$ko" dev=ferrdma0 >/dev/null 2>&1; then
			rmmod ferrdma_kverbs_test || fail "rmmod ferrdma_kverbs_test failed"
			loaded=$((loaded + 1))
		fi
	done
	note "fault_every=$every: the kernel-verbs module loaded $loaded of 5 times (its checks are not judged here)"
	echo "ferrdma-test: kverbs churn every $every" > /dev/kmsg
	insmod "$ko" dev=ferrdma0 churn=150 || true
	rmmod ferrdma_kverbs_test 2>/dev/null || true
	churned=$(dmesg | sed -n "/ferrdma-test: kverbs churn every $every\$/,\$p" \
		| grep -o 'ferrdma_kverbs: churn: .*' || true)
	grep -Eq '^ferrdma_kverbs: churn: 150 rounds, [0-9]+ created, [1-9][0-9]* refused with ENOMEM, 0 other errors$' \
		<<< "$churned" || fail "fault_every=$every: kernel churn: ${churned:-no summary line}"
	note "fault_every=$every: kernel ${churned#ferrdma_kverbs: }"
	expect_no_verbs_objects
	unload_ferrdma
	injected=$(dmesg | sed -n "/ferrdma-test: fault injection every $every\$/,\$p" \
		| sed -n 's/.*fault injection: \([0-9][0-9]*\) steps failed.*/\1/p' | tail -1)
	[ -n "$injected" ] && [ "$injected" -gt 0 ] \
		|| fail "fault_every=$every: the driver reports no injected failure"
	note "fault_every=$every: $injected steps failed"
	expect_no_removal_leak "ferrdma-test: fault injection every $every" "fault_every=$every"
done

# The device still works as before once injection is off.
load_ferrdma
wait_probe "$((++loads))" >/dev/null
python3 "$FERRDMA_HARNESS/guest/verbs_churn.py" ferrdma0 200 1 || fail "verbs churn without faults failed"
expect_no_verbs_objects
unload_ferrdma
kmemleak_check "creates failed by fault injection"
note "fault-inject test passed"
