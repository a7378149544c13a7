# SPDX-License-Identifier: GPL-2.0
#
# The kernel-verbs tests (tests/kverbs-loopback-*.sh), the same on every RoCE device:
#     . "$FERRDMA_HARNESS/guest/kverbs.sh"; kverbs_main KIND [MODULE PARAMETERS...]
# KIND is a device kind of guest/events.sh's rdma_dev_up ("rxe" or "ferrdma"). The test loads
# the kernel-verbs test module (kmod/ferrdma_kverbs_test.c, built by kmod/build.sh) with
# dev=<device>; it runs its checks (RC and UD QPs of a kernel consumer, looped back through
# the device's RoCE v2 GID) while loading and logs one line per check:
#     ferrdma_kverbs: ok N - name            (or "ok N - name # SKIP reason")
#     ferrdma_kverbs: not ok N - name: reason
# after a plan line "ferrdma_kverbs: 1..N", then "ferrdma_kverbs: P passed, F failed" (", S
# skipped" when some were). The test fails on any "not ok", on a missing plan or summary, on a
# count that does not add up, on verbs objects left behind and on kmemleak suspects; on
# ferrdma also on any skipped check.
. "$FERRDMA_HARNESS/guest/events.sh"

# kverbs_module: prints the path of the built test module; fails if it is not built.
kverbs_module() {
	local dir=${FERRDMA_KVERBS_DIR:-}
	# The harness found it on the host (vmharness.py: kverbs_module_dir); in the guest
	# build.sh --dir takes 20-60 s of TCG time.
	[ -n "$dir" ] || dir=$("$FERRDMA_HARNESS/kmod/build.sh" --dir) ||
		fail "the kernel-verbs test module is not built for these sources and this kernel: run" \
			"scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/kmod/build.sh (make kmod and make check do)"
	echo "$dir/ferrdma_kverbs_test.ko"
}

# kasan_plant_check: the KASAN lane's proof that it looks, run by guest/init after the script
# of every test on the KASAN kernel (vmharness.py sets FERRDMA_KASAN_PROOF): the kernel-verbs
# test module loaded with plant_uaf=1 reads a freed kmalloc object once, and KASAN must report
# exactly that, "BUG: KASAN: slab-use-after-free in kv_plant_uaf" with "Read of size 1". Prints
# "reported: LINE" then, else the reason (the harness fails the test unless it reads the first).
# After the script, not before: a KASAN report turns lockdep off for the rest of the boot and,
# without kasan_multi_shot, silences KASAN's later reports.
kasan_plant_check() {
	local ko rc=0 report
	dmesg | has_line "KernelAddressSanitizer initialized" || { echo "this kernel has no KASAN"; return 1; }
	ko=$(kverbs_module) || return 1
	echo "ferrdma-test: expected splat begin kasan call-trace" > /dev/kmsg
	insmod "$ko" plant_uaf=1 2>/tmp/insmod.err || rc=$?
	echo "ferrdma-test: expected splat end" > /dev/kmsg
	[ "$rc" != 0 ] || { echo "insmod plant_uaf=1 succeeded: the module did not take its planted path"; return 1; }
	report=$(dmesg | grep -E "BUG: KASAN: [a-z-]*use-after-free in kv_plant_uaf" | sed -n 1p || true)
	[ -n "$report" ] || { echo "KASAN did not report the planted use-after-free"; dmesg | tail -20; return 1; }
	dmesg | has_line "Read of size 1 at addr" || { echo "KASAN's report lacks the access (Read of size 1)"; return 1; }
	echo "reported: ${report#*] }"
}

kverbs_main() {
	local kind=$1 ko before after log plan summary oks notoks skips p f s bad
	shift
	ko=$(kverbs_module)
	kmemleak_clear
	rdma_dev_up "$kind"
	before=$(rdma res show "$EVENTS_DEV")
	echo "ferrdma-test: kverbs begin" > /dev/kmsg
	note "insmod $ko dev=$EVENTS_DEV $*"
	if ! insmod "$ko" dev="$EVENTS_DEV" "$@"; then
		dmesg | tail -30 >&2
		fail "insmod $ko dev=$EVENTS_DEV failed"
	fi
	rmmod ferrdma_kverbs_test || fail "rmmod ferrdma_kverbs_test failed"
	# The module's lines since the marker, without printk timestamps.
	log=$(dmesg | sed -n '/ferrdma-test: kverbs begin/,$p' | grep -o 'ferrdma_kverbs: .*' || true)
	echo "$log"
	echo "$log" > "$FERRDMA_RESULTS/kverbs-$kind.log"
	plan=$(echo "$log" | sed -n 's/^ferrdma_kverbs: 1\.\.\([0-9][0-9]*\)$/\1/p')
	summary=$(echo "$log" | grep -E '^ferrdma_kverbs: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' || true)
	[ -n "$plan" ] || fail "no plan line (ferrdma_kverbs: 1..N) in the kernel log"
	[ -n "$summary" ] || fail "no summary line (ferrdma_kverbs: N passed, M failed) in the kernel log"
	notoks=$(echo "$log" | grep -cE '^ferrdma_kverbs: not ok [0-9]+ - ' || true)
	oks=$(echo "$log" | grep -cE '^ferrdma_kverbs: ok [0-9]+ - ' || true)
	skips=$(echo "$log" | grep -cE '^ferrdma_kverbs: ok [0-9]+ - .* # SKIP ' || true)
	read -r p f s < <(echo "$summary" | sed -E 's/^ferrdma_kverbs: ([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?$/\1 \2 \4/')
	s=${s:-0}
	# A failed check is reported after the cleanup checks, which still run.
	bad=
	if [ "$notoks" != 0 ]; then
		echo "$log" | grep -E '^ferrdma_kverbs: not ok ' >&2
		bad="$notoks of $plan kernel-verbs checks failed on $EVENTS_DEV"
	elif [ "$f" != 0 ]; then
		bad="the summary counts $f failures: $summary"
	elif [ "$((oks + notoks))" != "$plan" ]; then
		bad="$((oks + notoks)) result lines for a plan of $plan"
	elif [ "$((p + s))" != "$oks" ] || [ "$s" != "$skips" ]; then
		bad="the summary ($summary) does not match the $oks ok lines ($skips skipped)"
	elif [ "$kind" = ferrdma ] && [ "$skips" != 0 ]; then
		# ferrdma has every feature the module checks (a global rkey or fast registration,
		# IB_DEVICE_MEM_MGT_EXTENSIONS): a skipped check there is a lost feature.
		echo "$log" | grep -E '^ferrdma_kverbs: ok [0-9]+ - .* # SKIP ' >&2
		bad="$skips of $plan kernel-verbs checks skipped on $EVENTS_DEV (none may on ferrdma)"
	fi
	after=$(rdma res show "$EVENTS_DEV")
	note "rdma res: $after"
	[ "$after" = "$before" ] || fail "verbs objects left behind: before the test: $before; after: $after"
	rdma_dev_down
	kmemleak_check "kernel verbs on $kind"
	[ -z "$bad" ] || fail "$bad"
	note "kernel verbs on $kind: $summary"
}
