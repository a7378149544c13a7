#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 alone=yes smp=2
#
# Stock perftest between two processes on one VM over ferrdma0 (RC through the NIC's
# loopback): ib_send_bw, ib_write_bw and ib_read_bw over every size from 2 B to 8 MiB (-a),
# ib_send_bw -e and ib_send_lat -e (completion events), and the three latency tools at
# 2 B, 4 KiB and 64 KiB. Each run must succeed and report a result row for every size it was
# asked for. Throughput numbers under TCG are logged, not judged (benchmarks judge speed).
# Two vCPUs (smp=2): perftest's server and client both busy-poll; on one vCPU they would
# take turns by time slice (the test took 126 s instead of 88).
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)

# perf ROWS TOOL ARGS...: server + client here (lib.sh's perftest_pair); ROWS result rows
# expected from the client. -F (bandwidth) and -C (latency): a failed TSC calibration neither
# stops a run nor voids its rows (lib.sh, PERFTEST_CLOCK).
step=0
perf() {
	local rows=$1 tool=$2 got
	shift 2
	step=$((step + 1))
	perftest_pair "$step-$tool" 1 127.0.0.1 "$tool" -d ferrdma0 -x "$gid" "$@"
	got=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" || true)
	[ "$got" = "$rows" ] || { cat "$PERFTEST_CLIENT_LOG"; fail "$tool $*: $got result rows, expected $rows"; }
	note "$tool $*: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" | tail -1 | tr -s ' \t' ' ')"
}

# -a: 2^1 .. 2^23 bytes, 23 rows.
perf 23 ib_send_bw -a -n 20 -F
perf 23 ib_write_bw -a -n 20 -F
perf 23 ib_read_bw -a -n 20 -F
perf 1 ib_send_bw -e -s 65536 -n 200 -F
perf 1 ib_send_lat -e -s 64 -n 200 -C
for s in 2 4096 65536; do
	perf 1 ib_send_lat -s "$s" -n 100 -C
	perf 1 ib_write_lat -s "$s" -n 100 -C
	perf 1 ib_read_lat -s "$s" -n 100 -C
done
expect_no_verbs_objects

unload_ferrdma
kmemleak_check "perftest on loopback"
note "perftest-loopback test passed"
