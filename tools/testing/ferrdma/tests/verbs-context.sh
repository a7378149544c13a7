#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=device
#
# Stock libibverbs + libirdma open ferrdma0: the driver's irdma ABI (driver id, ABI 5, the
# GEN_2 ucontext response), the doorbell page mmap of BAR2 and the PD libirdma allocates at
# open all work. Checks:
#   * ibv_devices lists ferrdma0 with its node GUID;
#   * ibv_devinfo -v opens it (alloc_ucontext, mmap, alloc_pd) and reports hw_ver 0x2, 13 SGEs,
#     the QP/CQ/MR limits and firmware version the device gave the driver via QUERY_CAPS (also
#     in sysfs fw_ver),
#     port 1 PORT_ACTIVE on link layer Ethernet with its RoCE v2 GIDs;
#   * one unprivileged user cannot take every user context (each owns a doorbell page): uid
#     65534 gets 1024 (a quarter of the 4096 doorbell pages) and then EDQUOT, and root can
#     still open one while it holds them;
#   * 5 open/close cycles of stock libibverbs (ibv_devinfo) and 1100 raw ones by uid 65534
#     (context, doorbell mmap, PD; more than the user's quota of 1024, so a doorbell page or
#     quota slot that a close keeps makes a later cycle fail) leave no
#     context or PD behind (rdma res) and no kmemleak report: ucontexts, PDs, doorbell pages
#     and mmap entries are all released.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null

guid=$(cat /sys/class/infiniband/ferrdma0/node_guid | tr -d :)
ibv_devices | tee /tmp/devices
grep -Eq "^\s+ferrdma0\s+$guid\s*$" /tmp/devices || fail "ibv_devices does not list ferrdma0 with GUID $guid"

ibv_devinfo -v -d ferrdma0 > /tmp/devinfo || { cat /tmp/devinfo; fail "ibv_devinfo -v -d ferrdma0 failed"; }
field() { awk -F: -v k="$1" '$1 ~ "^[ \t]*"k"$" { gsub(/^[ \t]+/, "", $2); print $2; exit }' /tmp/devinfo; }
[ "$(field hca_id)" = ferrdma0 ] || fail "hca_id '$(field hca_id)'"
[ "$(field hw_ver)" = 0x2 ] || fail "hw_ver '$(field hw_ver)'"
[ "$(field max_sge)" = 13 ] || fail "max_sge '$(field max_sge)'"
# The limits come from the device, through the admin queue (QUERY_CAPS).
caps=$(dmesg | grep -Eo 'admin queue up: fw [0-9]+\.[0-9]+, [0-9]+ QPs, [0-9]+ CQs, [0-9]+ MRs' | tail -1)
[ -n "$caps" ] || fail "no 'admin queue up' line in dmesg"
read -r qps cqs mrs < <(sed -E 's/.*, ([0-9]+) QPs, ([0-9]+) CQs, ([0-9]+) MRs/\1 \2 \3/' <<<"$caps")
# Id 0 of each table is never handed out: the usable counts are one less (as irdma reports).
[ "$(field max_qp)" = "$((qps - 1))" ] || fail "max_qp '$(field max_qp)', the device reports $qps"
[ "$(field max_cq)" = "$((cqs - 1))" ] || fail "max_cq '$(field max_cq)', the device reports $cqs"
[ "$(field max_mr)" = "$((mrs - 1))" ] || fail "max_mr '$(field max_mr)', the device reports $mrs"
[ "$(field fw_ver)" = "$(sed -E 's/.*fw ([0-9.]+),.*/\1/' <<<"$caps")" ] || fail "fw_ver '$(field fw_ver)' vs '$caps'"
# sysfs fw_ver (get_dev_fw_str, what `rdma dev` and udev see) says the same.
sysfs_fw=$(cat /sys/class/infiniband/ferrdma0/fw_ver)
[ "$sysfs_fw" = "$(field fw_ver)" ] || fail "sysfs fw_ver '$sysfs_fw', ibv_devinfo says '$(field fw_ver)'"
grep -Eq "state:\s+PORT_ACTIVE \(4\)" /tmp/devinfo || fail "port 1 is not PORT_ACTIVE"
grep -Eq "link_layer:\s+Ethernet" /tmp/devinfo || fail "link layer is not Ethernet"
grep -Eq "GID\[\s*[0-9]+\]:\s+::ffff:$FERRDMA_IP, RoCE v2" /tmp/devinfo \
	|| fail "no RoCE v2 GID for $FERRDMA_IP in ibv_devinfo -v"
note "ibv_devinfo -v: $(grep -E 'state:|active_mtu|GID\[' /tmp/devinfo | tr -s ' \t' ' ' | paste -sd';')"

dev=$(uverbs_dev ferrdma0)
quota=$(python3 "$FERRDMA_HARNESS/guest/uverbs_raw.py" context-quota "$dev") || fail "context-quota broke: $quota"
note "$quota"
grep -qx 'case nobody.contexts EDQUOT opened=1024' <<<"$quota" \
	|| fail "uid 65534 should get 1024 user contexts, then EDQUOT: $quota"
grep -qx 'case root.context_while_nobody_holds 0' <<<"$quota" \
	|| fail "root could not open a context while uid 65534 held its 1024: $quota"
expect_no_verbs_objects

# Five: the 1100 raw cycles below are the ones that count (20 of ibv_devinfo took 10 s).
note "5 open/close cycles of ibv_devinfo"
for i in 1 2 3 4 5; do
	ibv_devinfo -d ferrdma0 > /dev/null || fail "ibv_devinfo failed in cycle $i"
done
cycles=$(python3 "$FERRDMA_HARNESS/guest/uverbs_raw.py" context-cycles "$dev" 1100) || fail "context-cycles broke: $cycles"
note "$cycles"
grep -qx 'case nobody.context_cycles 0 done=1100' <<<"$cycles" \
	|| fail "uid 65534 could not open and close a context 1100 times: $cycles"
expect_no_verbs_objects

unload_ferrdma
kmemleak_check "1105 open/close cycles and rmmod"
note "verbs-context test passed"
