#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`, run in one VM by the harness: the same stock perftest runs on ferrdma0 and on
# Linux's software RoCE (rxe0 on eth0), in the same VM and boot, so the numbers compare. Both
# devices loop back between two processes of the VM (ferrdma through its NIC, rxe inside the
# kernel). Prints one table; judges nothing (a benchmark, not a test) but fails if a run fails.
#
# Two-VM numbers need rxe on a MAC of its own: on the shared-MAC LAN port the fabric steers
# RoCEv2 frames to the ferrdma NIC engine, so rxe cannot run across VMs there.
. "$FERRDMA_HARNESS/guest/events.sh"   # lib.sh, RXE_MODULES
need_nic

load_kmods "${RXE_MODULES[@]}"
rdma link add rxe0 type rxe netdev eth0 || fail "could not create rxe0"
load_ferrdma
wait_probe 1 >/dev/null
fgid=$(wait_gid ferrdma0)
rgid=$(wait_gid rxe0)

results=/tmp/bench.txt
: > "$results"
# measure DEV GID TOOL ARGS...: one perftest run on loopback; appends its result row.
measure() {
	local dev=$1 gid=$2 tool=$3; shift 3
	"$tool" -d "$dev" -x "$gid" "$@" > /tmp/server.log 2>&1 &
	local pid=$!
	wait_listen 18515
	timeout 300 "$tool" -d "$dev" -x "$gid" "$@" 127.0.0.1 > /tmp/client.log 2>&1 \
		|| { cat /tmp/client.log; fail "$dev: $tool $* failed"; }
	wait "$pid" || { cat /tmp/server.log; fail "$dev: $tool $* failed (server)"; }
	printf '%-9s %-12s %-16s %s\n' "$dev" "$tool" "$*" \
		"$(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+' /tmp/client.log | tail -1 | tr -s ' \t' ' ')" >> "$results"
}

for dev in ferrdma0 rxe0; do
	gid=$fgid
	[ "$dev" = rxe0 ] && gid=$rgid
	measure "$dev" "$gid" ib_write_bw -s 65536 -n 2000
	measure "$dev" "$gid" ib_read_bw -s 65536 -n 2000
	measure "$dev" "$gid" ib_send_bw -s 4096 -n 5000
	measure "$dev" "$gid" ib_send_lat -s 64 -n 2000
	measure "$dev" "$gid" ib_write_lat -s 64 -n 2000
done
echo "bench: 1 VM, $(nproc) vCPUs, accel ${FERRDMA_ACCEL:?the harness names the accelerator}; bw rows: bytes iters peak-MiB/s avg-MiB/s Mpps; lat rows: bytes iters min max typical avg stdev p99 p99.9 (usec)"
sed 's/^/bench: /' "$results"
rdma link delete rxe0
unload_ferrdma
