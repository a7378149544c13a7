#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=900
#
# RDMA between two VMs, each with its own ferrdma NIC, over the NIC process's fabric: stock
# ibv_rc_pingpong (with data check, and event-driven), ibv_ud_pingpong, and perftest's
# ib_send_bw, ib_write_bw, ib_read_bw and ib_send_lat over sizes 2 B..8 MiB, ib_write_lat and
# ib_read_lat at 2 B and 64 KiB, and the event-driven ib_send_lat -e and ib_send_bw -e (what
# events-pingpong-rxe runs on soft RoCE).
# Node 2 serves, node 1 connects to it through node 2's RoCE v2 GID; every run must pass on
# both sides and report its result rows. Then no objects are left and kmemleak is clean.
. "$FERRDMA_HARNESS/guest/lib.sh"
two_vms_up

step=0
# run ROWS TOOL ARGS...: node 2 serves, node 1 connects; ROWS result rows (perftest, run by
# lib.sh's perftest_pair) or 0 (the pingpong tools). The bandwidth tools run with -F and the
# latency tools with -C, so that a failed TSC calibration neither stops a run nor voids its rows
# (lib.sh, PERFTEST_CLOCK): the rows are checked, not the figures.
run() {
	local rows=$1 tool=$2 got
	shift 2
	step=$((step + 1))
	if [ "$rows" -gt 0 ]; then
		perftest_pair "$step-$tool" 2 "$FERRDMA_PEER_IP" "$tool" -d ferrdma0 "$@"
		# The client reports; a passive server (WRITE, READ) prints no rows per size.
		if [ "$FERRDMA_NODE" = 1 ]; then
			got=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" || true)
			[ "$got" -ge "$rows" ] || { cat "$PERFTEST_CLIENT_LOG"; fail "$tool $*: $got result rows, expected $rows"; }
			note "$tool $*: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" | tail -1 | tr -s ' \t' ' ')"
		fi
		barrier "done-$step" 300
		return
	fi
	if [ "$FERRDMA_NODE" = 2 ]; then
		"$tool" -d ferrdma0 "$@" > /tmp/out.log 2>&1 &
		local pid=$!
		wait_listen 18515
		barrier "listen-$step" 120
		wait "$pid" || { cat /tmp/out.log; fail "$tool $* failed (server)"; }
	else
		barrier "listen-$step" 120
		timeout 300 "$tool" -d ferrdma0 "$@" "$FERRDMA_PEER_IP" > /tmp/out.log 2>&1 \
			|| { cat /tmp/out.log; fail "$tool $* failed (client)"; }
	fi
	note "$tool $*: $(grep -m1 -E 'bytes in' /tmp/out.log)"
	barrier "done-$step" 300
}

run 0 ibv_rc_pingpong -g "$gid" -n 500 -s 4096 -c
run 0 ibv_rc_pingpong -g "$gid" -n 200 -s 65536 -m 1024
run 0 ibv_rc_pingpong -g "$gid" -n 300 -e
run 0 ibv_ud_pingpong -g "$gid" -n 500 -s 1024
run 21 ib_send_bw -x "$gid" -a -n 10 -m 1024 -F
run 21 ib_write_bw -x "$gid" -a -n 10 -F
run 21 ib_read_bw -x "$gid" -a -n 10 -F
# The latency tools: ib_send_lat over every size at perftest's minimum of 5 exchanges (a
# ping-pong both ways at each size; the bandwidth runs above carry the volume), the WRITE and
# READ ping-pongs at a small and a large size (every size costs a start of perftest with
# 8 MiB buffers, which is what made them long; perftest-loopback runs them at three sizes).
run 23 ib_send_lat -x "$gid" -a -n 5 -C
# Event-driven perftest: the tool arms the CQ and sleeps on its completion channel. ib_send_lat
# -e used to stop after a few dozen iterations: it polls a CQ once per event, and the NIC raised
# an event at once for every arm that found unpolled CQEs - the very CQEs the tool polls right
# after arming - so every such spurious event left a send completion behind until the send CQ
# overflowed. The NIC now looks again 1 ms after such an arm and raises the event only if they
# are still unpolled (manual, "Arming with unpolled CQEs"; issue 6).
run 1 ib_send_lat -x "$gid" -e -F -C -n 200
run 1 ib_send_bw -x "$gid" -e -F -n 200
for s in 2 65536; do
	run 1 ib_write_lat -x "$gid" -s "$s" -n 100 -C
	run 1 ib_read_lat -x "$gid" -s "$s" -n 100 -C
done
expect_no_verbs_objects
barrier finished 120

unload_ferrdma
kmemleak_check "verbs between two VMs"
note "verbs-two-vms test passed on node $FERRDMA_NODE"
