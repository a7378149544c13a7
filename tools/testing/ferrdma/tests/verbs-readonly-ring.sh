#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 boot-group=verbs
#
# The device never writes memory the user could not write: an unprivileged process (uid
# 65534) maps a root-owned 0644 file on tmpfs PROT_READ, MAP_SHARED (its page-cache pages) and
# registers that mapping, raw (guest/uverbs_raw.py readonly-ring):
#   * as a CQ ring and as a QP ring (irdma reg_type CQ/QP) with access 0 -> EINVAL: the device
#     writes CQEs and shadow areas into rings, and a ring pinned without FOLL_WRITE would make
#     the page cache device-writable;
#   * as a CQ ring with LOCAL_WRITE -> an error from pinning (the mapping is read-only);
#   * as a memory MR with REMOTE_READ only -> accepted (the device only reads it);
#   * a CQ on the file's page then cannot be created (EPROTO: nothing registered there).
# A flushed receive makes the device write one CQE; the same flush on a CQ in the process's
# own memory must show that CQE (so the traffic is real), and the file's bytes (read back as
# root) must be unchanged afterwards. No verbs object left, kmemleak clean.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

EXPECT=$(cat <<'EOF2'
file.open_rdwr_as_nobody EACCES uid=65534 euid=65534
get_context 0
alloc_pd 0
control.reg_mr.cq_ring 0
control.reg_mr.cq_ring.shadow 0
control.create_cq 0
control.reg_mr.qp_ring 0
control.create_qp 0
control.modify_qp.init 0
control.modify_qp.err 0
control.flush_cqe_written 0 written=1
control.destroy_qp 0
control.dereg_mr.qp_ring 0
control.destroy_cq 0
control.dereg_mr.cq_ring 0
reg_mr.cq_ring_readonly_file_access_0 EINVAL
reg_mr.qp_ring_readonly_file_access_0 EINVAL
reg_mr.cq_ring_readonly_file_local_write ERROR
reg_mr.mem_readonly_file_remote_read 0
dereg_mr.mem_readonly_file 0
create_cq.on_readonly_file EPROTO
file.bytes_changed_in_mapping 0 changed=0
control.dereg_mr.cq_shadow 0
dealloc_pd 0
EOF2
)

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
dev=$(uverbs_dev ferrdma0)

# The file's contents: 8 pages of text (the QP ring registration needs 6).
contents() {
	python3 -c 'import sys; sys.stdout.buffer.write((b"root-owned file: only root may change these bytes\n" * 700)[:32768])'
}

dir=$(mktemp -d)
mount -t tmpfs -o mode=0755 tmpfs "$dir" || fail "cannot mount a tmpfs on $dir"
f=$dir/root-owned
contents > "$f"
chown 0:0 "$f"
chmod 0644 "$f"
before=$(sha256sum < "$f")
note "$dev; $f: $(stat -c '%U %a %s bytes' "$f")"

rc=0
python3 "$FERRDMA_HARNESS/guest/uverbs_raw.py" readonly-ring "$dev" "$f" > /tmp/cases || rc=$?
cat /tmp/cases
grep -q '^case ' /tmp/cases || fail "the scenario ran no case (exit $rc)"

bad=0
declare -A seen=()
while read -r _ name got extra; do
	seen[$name]=1
	want=$(awk -v n="$name" '$1 == n { $1 = ""; print substr($0, 2); exit }' <<<"$EXPECT")
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
		echo "MISMATCH $name: got $got $extra, expected: $name $want"
		bad=$((bad + 1))
	fi
done < <(grep '^case ' /tmp/cases)
while read -r name _; do
	[ -n "${seen[$name]:-}" ] || { echo "MISSING $name: the case did not run"; bad=$((bad + 1)); }
done <<<"$EXPECT"

after=$(sha256sum < "$f")
if [ "$before" != "$after" ]; then
	cmp -l <(contents) "$f" | sed -n '1,5p' >&2 || true
	fail "the root-owned file changed under an unprivileged user's registration"
fi
umount "$dir"
rmdir "$dir"

[ "$rc" = 0 ] || fail "uverbs_raw.py readonly-ring exited $rc: $(tail -1 /tmp/cases)"
expect_no_verbs_objects
unload_ferrdma
kmemleak_check "read-only ring registrations"
[ "$bad" = 0 ] || fail "$bad cases went wrong (MISMATCH/MISSING above)"
note "verbs-readonly-ring test passed"
