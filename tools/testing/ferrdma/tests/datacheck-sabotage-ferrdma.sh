#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 boot-group=device
#
# The data check can fail: with the NIC's test-only sabotage knob armed through the fabric's
# control socket (`sabotage nic:0 write-byte=OFFSET`: the responder flips the lowest bit of
# byte OFFSET of every RDMA WRITE it places, tools/ferrdma-nic/README.md), verbs-datacheck's
# WRITE run must fail and report exactly that byte, one bad byte, expected and got one bit
# apart; disarmed, the same run passes. SEND and READ cases run with the knob armed too and
# must pass (the knob touches WRITEs only).
. "$FERRDMA_HARNESS/guest/datacheck.sh"
need_nic

load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)
OFF=4097
log=$DATACHECK_LOGS/sabotaged.log

fabric_ctl sabotage nic:0 write-byte=$OFF
# A knob left on would corrupt the next test's WRITEs: disarm it whatever happens.
trap 'fabric_ctl sabotage nic:0 off >/dev/null 2>&1 || true' EXIT
datacheck_loopback armed-send-read ferrdma0 -g "$gid" -q 2 -o send,read -s 1,$((OFF + 1)),9000
rc=0
timeout "$DATACHECK_TIMEOUT" "$DATACHECK_BIN" ferrdma0 -g "$gid" -q 2 -o write,write_imm \
	-s 1,$((OFF + 1)),9000 > "$log" 2>&1 || rc=$?
fabric_ctl sabotage nic:0 off
cat "$log"
[ "$rc" = 1 ] || fail "verbs-datacheck ended with status $rc although the NIC flipped byte $OFF of every WRITE"
line=$(grep -E "^verbs-datacheck: FAIL: write \(server\) size [0-9]+, message [0-9]+ .*: first bad byte at message offset $OFF \(.*\): expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}; 1 bad byte\(s\)" "$log") ||
	fail "verbs-datacheck did not report the flipped byte at message offset $OFF"
want=$(sed -E 's/.*expected 0x([0-9a-f]{2}), got 0x([0-9a-f]{2}).*/\1/' <<< "$line")
got=$(sed -E 's/.*expected 0x([0-9a-f]{2}), got 0x([0-9a-f]{2}).*/\2/' <<< "$line")
[ $((0x$want ^ 0x$got)) = 1 ] || fail "expected 0x$want and got 0x$got differ in more than the flipped bit"
note "armed: the WRITE check failed at message offset $OFF, 0x$want -> 0x$got, as it must"

datacheck_loopback disarmed ferrdma0 -g "$gid" -q 2 -o write,write_imm -s 1,$((OFF + 1)),9000
expect_no_verbs_objects
unload_ferrdma
note "datacheck-sabotage-ferrdma passed"
