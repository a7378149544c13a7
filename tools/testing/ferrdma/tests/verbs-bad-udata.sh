#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=verbs
#
# Hostile driver data on alloc_ucontext, sent raw (guest/uverbs_raw.py, no libibverbs): the
# driver answers with errors, never an oops, and leaks nothing. Expected, per the irdma ABI:
#   * a valid request (userspace_ver 5) succeeds and the response says hw_rev 2 (GEN_2) at
#     byte 62 and 13 fragments at byte 32;
#   * userspace_ver 3 or an empty request -> EINVAL;
#   * a 16-byte response buffer (legacy i40iw library) -> EOPNOTSUPP;
#   * a short request reads as zero-extended, and trailing zero request bytes are fine (both
#     succeed: rdma-core grows its structs by appending), but a non-zero byte past the
#     driver's struct is a field this driver does not know -> EOPNOTSUPP (as C drivers'
#     ib_is_udata_cleared checks);
#   * afterwards no context or PD is left, and kmemleak has nothing.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
dev=/dev/infiniband/uverbs0
[ -c "$dev" ] || fail "$dev does not exist"
ok=00000000050000000100000000000000

# try NAME REQ_HEX OUTLEN WANT_ERRNO: runs one GET_CONTEXT and checks its errno; the response
# bytes (hex) go to $resp. (The JSON line is taken apart by bash: a Python start per field
# costs seconds under TCG.)
try() {
	local out got re='^\{"errno": "?([A-Za-z0-9]+)"?, "resp": "([0-9a-f]*)"\}$'
	out=$(python3 "$FERRDMA_HARNESS/guest/uverbs_raw.py" get-context "$dev" "$2" "$3")
	[[ $out =~ $re ]] || fail "$1: unexpected answer from uverbs_raw.py: $out"
	got=${BASH_REMATCH[1]} resp=${BASH_REMATCH[2]}
	note "$1: errno $got"
	[ "$got" = "$4" ] || fail "$1: errno $got, expected $4 ($out)"
}

try "valid request" "$ok" 80 0
[ "${resp:124:2}" = 02 ] || fail "hw_rev byte is ${resp:124:2}, expected 02 (GEN_2): $resp"
[ "${resp:64:8}" = 0d000000 ] || fail "max_hw_wq_frags is ${resp:64:8}, expected 13: $resp"
try "userspace_ver 3" 00000000030000000100000000000000 80 EINVAL
try "empty request" "" 80 EINVAL
try "legacy 16-byte response" "$ok" 16 ENOTSUP
try "trailing zero request bytes" "${ok}00000000000000000000000000000000" 80 0
try "trailing non-zero request bytes" "${ok}00000000000000000000000000000001" 80 ENOTSUP
try "short request" 000000000500 80 0

expect_no_verbs_objects
unload_ferrdma
kmemleak_check "hostile alloc_ucontext requests"
note "verbs-bad-udata test passed"
