#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600
#
# Hostile udata and attributes on REG_MR, REREG_MR, DEREG_MR, CREATE_CQ, DESTROY_CQ, CREATE_QP,
# MODIFY_QP, DESTROY_QP, CREATE_AH and DESTROY_AH, sent raw (guest/uverbs_raw.py scenario: legacy
# uverbs write commands on one uverbs file, buffers mmap()ed by the script, no libibverbs):
# every bad request gets the errno listed below, the valid ones work (the create_qp response
# carries libirdma's ring sizes), ring registrations in use refuse DEREG_MR with EBUSY and
# deregister after their object is gone; then a process exits with one of each object open.
# Afterwards ib_core tracks no object, rmmod works and kmemleak has nothing. Cases marked
# "fixed" below found driver bugs (commit 0f55d8b, "ferrdma: fixes found by the hostile
# raw-uverbs test"); they now guard against their return.
#
# The kernel-verbs commands POLL_CQ, REQ_NOTIFY_CQ, POST_SEND, POST_RECV (and POST_SRQ_RECV)
# go against the user CQ, RC QP (in RTS) and UD QP, valid and hostile (ne 0 and 2^32-1, bogus
# opcode, wr_count/sge_count beyond the command, wqe_size below the struct, bad/destroyed/
# wrong-type CQ, QP, AH and SRQ handles). ib_core answers all of them EOPNOTSUPP: a legacy write
# command is enabled only by its bit in the device's uverbs_cmd_mask, whose default
# (_ib_alloc_device) has none of these five; only rxe, siw and rdmavt add them. So neither
# ib_core's marshalling nor the driver's poll_cq/req_notify_cq/post_send/post_recv (which refuse
# user objects with EINVAL) is reachable this way. "[enabled: ...]" notes what the case would
# give if ferrdma set those bits: the errno ib_core gives first, else the driver's.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

# The expectations: CASE ERRNO [KEY=VALUE...] [# comment]. ERRNO is 0 (success), an errno
# name, alternatives such as 0|EINVAL, or ERROR (any errno). Each KEY=VALUE must appear in the
# case's line. "(core)" marks errnos that ib_core gives before the driver sees the request.
# A case whose expectation the driver does not meet fails the test (mark a newly found bug
# "DRIVER BUG" in its comment until it is fixed; none is open).
EXPECT=$(cat <<'EOF'
get_context 0
alloc_pd 0
alloc_pd.resp_unmapped EFAULT
alloc_pd.resp_no_room 0|EINVAL # irdma refuses; libirdma never uses pd_id
reg_mr.no_udata EINVAL
reg_mr.short_udata EINVAL
reg_mr.qp_pages_beyond_length EINVAL
reg_mr.qp_rq_pages_0 EINVAL
reg_mr.cq_pages_beyond_length EINVAL
reg_mr.qp_unaligned EINVAL
reg_mr.cq_unaligned EINVAL
reg_mr.qp_iova_differs EINVAL # rings are found by user address
reg_mr.cq_pages_0 EINVAL
reg_mr.type_srq EOPNOTSUPP
reg_mr.type_9 EOPNOTSUPP
reg_mr.mem_atomic EOPNOTSUPP # the device has no atomics
reg_mr.mem_length_0 EINVAL
reg_mr.mem_valid 0 lkey_nonzero=1
dereg_mr.mem 0
reg_mr.mem_unaligned_counts_ignored 0
dereg_mr.mem_unaligned 0
reg_mr.mem_iova_wraps EINVAL
reg_mr.mem_resp_unmapped EFAULT # (core) undoes the MR
reg_mr.cq_resp_unmapped EFAULT # (core) undoes the ring registration
create_cq.on_undone_registration EPROTO
reg_mr.mem_beyond_mapping ERROR # EFAULT from pinning
reg_mr.cq_beyond_mapping ERROR # EFAULT from pinning
reg_mr.mem_unmapped ERROR # EFAULT from pinning
reg_mr.cq_ring 0
reg_mr.cq_ring.shadow 0
create_cq.unregistered_buf EPROTO
create_cq.udata_4_bytes EINVAL
create_cq.udata_0_bytes EINVAL
create_cq.resp_no_room EINVAL
create_cq.cqe_3 EINVAL
create_cq.cqe_0 EINVAL
create_cq.cqe_above_max EINVAL
create_cq.ring_too_small EINVAL
create_cq.shadow_unregistered EPROTO
create_cq.shadow_in_ring EPROTO
create_cq.shadow_is_ring EPROTO
create_cq.resp_unmapped EFAULT
create_cq.valid 0 cq_size=8
create_cq.ring_in_use EPROTO
dereg_mr.cq_ring_in_use EBUSY
dereg_mr.cq_shadow_in_use EBUSY
poll_cq.ne_1 EOPNOTSUPP # (core) [enabled: EINVAL, the driver refuses user CQs]
poll_cq.ne_0 EOPNOTSUPP # (core) [enabled: 0, count 0; ib_core never asks the driver]
poll_cq.ne_huge EOPNOTSUPP # (core) [enabled: EINVAL, the driver refuses the first poll]
poll_cq.no_resp_room EOPNOTSUPP # (core) [enabled: ENOSPC (core), no room for the 8-byte header]
req_notify_cq.next_comp EOPNOTSUPP # (core) [enabled: 0, ib_core ignores the driver's EINVAL]
req_notify_cq.solicited EOPNOTSUPP # (core) [enabled: 0, likewise]
poll_cq.bogus_handle EOPNOTSUPP # (core) [enabled: ENOENT (core)]
poll_cq.pd_handle EOPNOTSUPP # (core) [enabled: EINVAL (core), not a CQ]
req_notify_cq.bogus_handle EOPNOTSUPP # (core) [enabled: ENOENT (core)]
req_notify_cq.pd_handle EOPNOTSUPP # (core) [enabled: EINVAL (core), not a CQ]
reg_mr.cq_resize_ring 0
resize_cq.unregistered_buf EPROTO
resize_cq.udata_4_bytes EINVAL
resize_cq.udata_0_bytes EINVAL
resize_cq.cqe_0 EINVAL # (core)
resize_cq.cqe_3 EINVAL
resize_cq.cqe_above_max EINVAL
resize_cq.cqe_huge EINVAL
resize_cq.ring_too_small EINVAL
resize_cq.current_ring EPROTO # claimed by the CQ
resize_cq.shadow_as_ring EPROTO # claimed by the CQ
resize_cq.bogus_handle ENOENT # (core)
resize_cq.pd_handle EINVAL # (core), not a CQ
rereg_mr.setup_mr 0
rereg_mr.setup_pd2 0
rereg_mr.access 0 new_keys=1 # a new region under new keys, made before the old one goes
rereg_mr.translation 0 lkey_is_rkey=1
rereg_mr.pd 0
rereg_mr.all_three 0
rereg_mr.flags_0 EINVAL # (core)
rereg_mr.flags_8 EOPNOTSUPP # (core)
rereg_mr.offsets_differ EINVAL # (core) start and hca_va at different page offsets
rereg_mr.length_0 EINVAL
rereg_mr.unmapped EFAULT # from pinning
rereg_mr.atomic EOPNOTSUPP # the device has no atomics
rereg_mr.no_udata EINVAL
rereg_mr.short_udata EINVAL
rereg_mr.type_qp EINVAL # libirdma re-registers ordinary regions only
rereg_mr.bogus_pd ENOENT # (core)
rereg_mr.bogus_handle ENOENT # (core)
rereg_mr.pd_handle EINVAL # (core), not an MR
rereg_mr.cq_ring 0
rereg_mr.cq_ring.shadow 0
rereg_mr.create_cq 0
rereg_mr.cq_ring_in_use EBUSY
rereg_mr.reg_cq_ring_unused 0
rereg_mr.cq_ring_unused EINVAL # a ring registration is no memory region
rereg_mr.destroy_cq 0
rereg_mr.dereg_ring 0
rereg_mr.dereg_shadow 0
rereg_mr.dereg_unused 0
rereg_mr.dereg_after_refusals 0 # every refusal left the region as it was
rereg_mr.dealloc_pd2 0
resize_cq.valid 0 cqe=256
dereg_mr.cq_ring_after_resize 0
dereg_mr.cq_resize_ring_in_use EBUSY
reg_mr.cq_ring2 0
reg_mr.cq_ring2.shadow 0
create_cq.valid2 0
dereg_mr.cq_ring2_in_use EBUSY
destroy_cq.cq2 0
poll_cq.destroyed EOPNOTSUPP # (core) [enabled: ENOENT (core)]
req_notify_cq.destroyed EOPNOTSUPP # (core) [enabled: ENOENT (core)]
resize_cq.destroyed ENOENT # (core)
dereg_mr.cq_ring2_after_destroy 0
dereg_mr.cq_shadow2_after_destroy 0
reg_mr.qp_ring 0
create_qp.unregistered_buf EPROTO
create_qp.udata_8_bytes EINVAL
create_qp.resp_16_bytes EINVAL
create_qp.type_uc EOPNOTSUPP
create_qp.send_sge_14 EINVAL
create_qp.recv_sge_14 EINVAL
create_qp.inline_102 EINVAL
create_qp.send_wr_huge EINVAL # max_send_wr 2^32-1: SQ deeper than 32768 quanta
create_qp.cq_registration EPROTO
reg_mr.qp_ring_small_sq 0
create_qp.sq_ring_too_small EINVAL
create_qp.rq_ring_too_small EINVAL
dereg_mr.qp_ring_small 0
create_qp.resp_unmapped EFAULT
create_qp.valid 0 qpn_is_qp_id=1 actual_sq_size=128 actual_rq_size=32 lsmm=0 qp_caps=7
create_qp.ring_in_use EPROTO
dereg_mr.qp_ring_in_use EBUSY
dealloc_pd.in_use EBUSY # (core)
destroy_cq.in_use EBUSY # (core)
ctx2.get_context 0
ctx2.alloc_pd 0
ctx2.reg_mr.cq_ring 0
ctx2.reg_mr.cq_ring.shadow 0
ctx2.create_cq 0
reg_mr.cq_ring_ctx1 0
reg_mr.qp_ring_ctx1 0
ctx2.create_cq_on_ctx1_ring EPROTO
ctx2.create_qp_on_ctx1_ring EPROTO
dereg_mr.qp_ring_ctx1 0
ctx2.destroy_cq 0
ctx2.dereg_mr.cq_ring 0
ctx2.dereg_mr.cq_shadow 0
ctx2.dealloc_pd 0
modify_qp.reset_to_rts EINVAL
modify_qp.reset_to_rtr EINVAL
modify_qp.init_port_2 EINVAL # (core)
modify_qp.init_pkey_index_1 EINVAL
modify_qp.state_8 EINVAL # (core)
modify_qp.init 0
modify_qp.rtr_path_mtu_7 EINVAL
modify_qp.rtr_path_mtu_0 EINVAL
modify_qp.rtr_dest_qpn_2^24 EINVAL
modify_qp.rtr_max_dest_rd_atomic_255 EINVAL
modify_qp.rtr_alt_path EINVAL # (core) bans alternate paths on RoCE ports
modify_qp.rtr_bad_sgid_index EINVAL # (core)
modify_qp.rtr 0
modify_qp.rts_retry_cnt_8 EINVAL
modify_qp.rts_timeout_32 EINVAL
modify_qp.rts_max_rd_atomic_255 EINVAL
modify_qp.rts 0
reg_mr.post_buf 0
post_send.rc_send EOPNOTSUPP # (core) [enabled: EINVAL, the driver refuses user QPs]
post_send.rc_rdma_write EOPNOTSUPP # (core) [enabled: EINVAL, driver]
post_send.rc_atomic EOPNOTSUPP # (core) [enabled: EINVAL, driver]
post_send.rc_opcode_bogus EOPNOTSUPP # (core) [enabled: EINVAL (core), unknown opcode 0x55]
post_send.wr_count_0 EOPNOTSUPP # (core) [enabled: EINVAL, driver (an empty list)]
post_send.wr_count_overflow EOPNOTSUPP # (core) [enabled: ENOSPC (core), command too short]
post_send.sge_count_overflow EOPNOTSUPP # (core) [enabled: ENOSPC (core), command too short]
post_send.num_sge_beyond_sge_count EOPNOTSUPP # (core) [enabled: EINVAL (core)]
post_send.wqe_size_16 EOPNOTSUPP # (core) [enabled: EINVAL (core), < sizeof(ib_uverbs_send_wr)]
post_send.bogus_handle EOPNOTSUPP # (core) [enabled: ENOENT (core)]
post_send.cq_handle EOPNOTSUPP # (core) [enabled: EINVAL (core), not a QP]
post_recv.rc_1_sge EOPNOTSUPP # (core) [enabled: EINVAL, the driver refuses user QPs]
post_recv.wr_count_0 EOPNOTSUPP # (core) [enabled: EINVAL, driver (an empty list)]
post_recv.wqe_size_8 EOPNOTSUPP # (core) [enabled: EINVAL (core), < sizeof(ib_uverbs_recv_wr)]
post_recv.sge_count_overflow EOPNOTSUPP # (core) [enabled: ENOSPC (core), command too short]
post_recv.num_sge_beyond_sge_count EOPNOTSUPP # (core) [enabled: EINVAL (core)]
post_recv.bogus_handle EOPNOTSUPP # (core) [enabled: ENOENT (core)]
post_srq_recv.bogus_handle EOPNOTSUPP # (core) no post_srq_recv op: never enabled
post_srq_recv.qp_handle EOPNOTSUPP # (core) likewise
dereg_mr.post_buf 0
modify_qp.rts_to_sqd 0
modify_qp.sqd_to_rts 0
modify_qp.rts_to_init EINVAL
modify_qp.err 0
modify_qp.err_again 0 # libirdma's reflush
modify_qp.err_to_err_with_qkey EINVAL # fixed: the reflush path skipped the checks
modify_qp.err_path_mtu_7_no_state EINVAL # fixed: the reflush path skipped the checks
modify_qp.err_timeout_32_no_state EINVAL # fixed: the reflush path skipped the checks
modify_qp.err_cur_state_spoofed_rts EINVAL # the NIC refuses
modify_qp.err_to_reset EINVAL # no QP reuse after ERR
destroy_qp.valid 0
post_send.destroyed_qp EOPNOTSUPP # (core) [enabled: ENOENT (core)]
post_recv.destroyed_qp EOPNOTSUPP # (core) [enabled: ENOENT (core)]
dereg_mr.qp_ring_after_destroy 0
reg_mr.qp_ring_spoof 0
create_qp.spoof 0
modify_qp.spoof_init 0
modify_qp.cur_state_spoofed_rts EINVAL # INIT QP claiming cur_state RTS; the NIC refuses
destroy_qp.spoof 0
dereg_mr.qp_ring_spoof 0
reg_mr.qp_ring_ud 0
create_qp.ud_valid 0 actual_sq_size=128 actual_rq_size=32 lsmm=0 qp_caps=6
reg_mr.post_buf_ud 0
create_ah.for_ud 0
post_send.ud_send EOPNOTSUPP # (core) [enabled: EINVAL, the driver refuses user QPs]
post_send.ud_bad_ah EOPNOTSUPP # (core) [enabled: ENOENT (core)]
post_send.ud_ah_is_qp EOPNOTSUPP # (core) [enabled: EINVAL (core), not an AH]
post_send.ud_rdma_write EOPNOTSUPP # (core) [enabled: EINVAL (core), UD takes only SEND]
post_recv.ud_1_sge EOPNOTSUPP # (core) [enabled: EINVAL, driver]
destroy_ah.for_ud 0
post_send.ud_destroyed_ah EOPNOTSUPP # (core) [enabled: ENOENT (core)]
dereg_mr.post_buf_ud 0
destroy_qp.ud 0
dereg_mr.qp_ring_ud 0
create_ah.no_grh EINVAL # (core)
create_ah.port_2 EINVAL # (core)
create_ah.bad_sgid_index EINVAL # (core)
create_ah.resp_no_room EINVAL # fixed: succeeded, user space never learned the ah_id
create_ah.resp_4_bytes 0|EINVAL # the ah_id fits; irdma wants all 8 bytes
create_ah.resp_unmapped EFAULT
create_ah.valid 0 ah_id_small=1
destroy_ah.valid 0
destroy_cq.valid 0
dereg_mr.cq_ring_after_destroy 0
dereg_mr.cq_shadow_after_destroy 0
dereg_mr.cq_ring_ctx1 0
dealloc_pd 0
EOF
)

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)
gid_hex=$(tr -d ':\n' < "/sys/class/infiniband/ferrdma0/ports/1/gids/$gid")
dev=$(uverbs_dev ferrdma0)
note "$dev, RoCE v2 GID index $gid ($gid_hex)"

raw() { python3 "$FERRDMA_HARNESS/guest/uverbs_raw.py" scenario "$dev" "$gid" "$gid_hex" "$@"; }

WANT=$(sed -e 's/[[:space:]]*#.*$//' -e '/^$/d' <<<"$EXPECT")
ncases=$(wc -l <<<"$WANT")

start=$(date +%s)
rc=0
raw > /tmp/cases || rc=$?
cat /tmp/cases
grep -q '^case ' /tmp/cases || fail "the scenario ran no case (exit $rc)"

# Judge every case line against the expectations; every expected case must have run. A wrong
# errno does not stop the test: the object, rmmod and kmemleak checks below still run.
bad=0
# (Looked up in arrays: an awk per case cost ~50 s of TCG time over 176 cases.)
declare -A seen=() want_of=() line_of=()
while read -r name rest; do
	[ -n "${want_of[$name]:-}" ] || { want_of[$name]=$rest; line_of[$name]="$name $rest"; }
done <<<"$WANT"
while read -r _ name got extra; do
	seen[$name]=1
	want=${want_of[$name]:-}
	if [ -z "$want" ]; then
		echo "MISMATCH $name: not an expected case (errno $got $extra)"
		bad=$((bad + 1))
		continue
	fi
	read -r werr wkv <<<"$want"
	ok=1
	if [ "$werr" = ERROR ]; then
		[ "$got" != 0 ] || ok=0
	else
		[[ "|$werr|" == *"|$got|"* ]] || ok=0
	fi
	for kv in $wkv; do
		[[ " $extra " == *" $kv "* ]] || ok=0
	done
	if [ $ok = 0 ]; then
		echo "MISMATCH $name: got $got $extra, expected: ${line_of[$name]}"
		bad=$((bad + 1))
	fi
done < <(grep '^case ' /tmp/cases)
while read -r name _; do
	[ -n "${seen[$name]:-}" ] || { echo "MISSING $name: the case did not run"; bad=$((bad + 1)); }
done <<<"$WANT"
[ "$rc" = 0 ] || fail "uverbs_raw.py scenario exited $rc: $(tail -1 /tmp/cases)"
if [ "$bad" = 0 ]; then
	note "all $ncases cases as expected in $(($(date +%s) - start))s"
else
	note "$bad of $ncases cases went wrong (MISMATCH/MISSING above), in $(($(date +%s) - start))s"
fi
expect_no_verbs_objects

# A process that exits holding a MEM MR, a CQ on its ring, an unused CQ ring registration, an
# RC QP in RTR and a UD QP on their rings, and an AH: the kernel destroys them on file release
# (the ring MRs only after the QPs and CQs on them: their first DEREG_MR says EBUSY).
raw leave-open > /tmp/open || { cat /tmp/open; fail "uverbs_raw.py scenario leave-open failed"; }
cat /tmp/open
# (The kernel's own objects, ib_mad's GSI QP and its PD and CQ, stay.)
for _ in $(seq 50); do
	rdma res show qp | grep -w ferrdma0 | has_line -v 'comm \[' || break
	sleep 0.1
done
expect_no_verbs_objects

unload_ferrdma
kmemleak_check "hostile verbs"
[ "$bad" = 0 ] || fail "$bad of $ncases cases went wrong (MISMATCH/MISSING above)"
note "verbs-hostile-verbs test passed"
