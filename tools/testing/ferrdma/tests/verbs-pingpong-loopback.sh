#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 boot-group=verbs
#
# Stock ibv_rc_pingpong and ibv_ud_pingpong (libibverbs examples over libirdma) between two
# processes on one VM, through ferrdma0's RoCE v2 GID: user MRs pinned with ib_umem, the
# QP and CQ rings libirdma registers, user CQs and RC/UD QPs created and walked through
# INIT/RTR/RTS, an AH for UD, and the NIC's loopback moving and checking the data. Then every
# object is gone (rdma res) and kmemleak is clean.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)
note "RoCE v2 GID index $gid"

pingpong() { # TOOL ARGS...: server in the background, client against it; both must pass
	local tool=$1; shift
	"$tool" -d ferrdma0 -g "$gid" "$@" > /tmp/server.log 2>&1 &
	local spid=$!
	wait_listen 18515
	if ! timeout 120 "$tool" -d ferrdma0 -g "$gid" "$@" 127.0.0.1 > /tmp/client.log 2>&1; then
		cat /tmp/client.log /tmp/server.log
		kill "$spid" 2>/dev/null
		fail "$tool $* failed (client)"
	fi
	if ! wait "$spid"; then
		cat /tmp/client.log /tmp/server.log
		fail "$tool $* failed (server)"
	fi
	note "$tool $*: $(grep -m1 -E 'bytes in' /tmp/client.log)"
}

pingpong ibv_rc_pingpong -n 1000 -s 4096
pingpong ibv_rc_pingpong -n 100 -s 65536 -m 1024
pingpong ibv_rc_pingpong -n 200 -s 1 -c
# Event-driven: CQ arming through the shadow area and doorbell, CEQ interrupts, wakeups.
pingpong ibv_rc_pingpong -n 500 -e
pingpong ibv_ud_pingpong -n 1000 -s 1024
pingpong ibv_ud_pingpong -n 300 -s 512 -e
expect_no_verbs_objects

unload_ferrdma
kmemleak_check "rc/ud pingpong on loopback"
note "verbs-pingpong-loopback test passed"
