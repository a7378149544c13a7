#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 hostile-caps=oversized,impossible,nominal
#
# The device is not trusted: its QUERY_CAPS reply is validated once at probe (issue 14,
# defect 7). The NIC runs with --hostile-caps, so the driver's three probes see:
#   1. oversized: every limit at its type's maximum (255 SGEs, 2^32-1 QPs, 255 RD atomics,
#      2^32-1 ring quanta and GIDs, every page size...). The driver clamps each to its own
#      limit, says so, and the device works: the attributes user space sees are the clamped
#      ones, and ibv_rc_pingpong moves and checks data. (A driver trusting them panics
#      computing max_res_rd_atom = max_rd_atomic * max_qp at registration.)
#   2. impossible: no SGE, only QP 0, no CQ entries, no 4 KiB pages. Probe fails cleanly with
#      -EINVAL naming the field; no device is registered; the module unloads.
#   3. nominal: the real limits; probe succeeds with no clamp warning.
# The harness fails the test on any splat (oops, panic, UBSAN, WARN).
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

# Whether the kernel log matches an extended regex (grep without -q reads all of dmesg, so
# pipefail never sees dmesg die of SIGPIPE).
in_dmesg() { dmesg | grep -E "$1" >/dev/null; }
registered() { dmesg | grep -cE 'ferrdma [0-9a-f:.]+: registered ferrdma[0-9]+' || true; }
clamps() { dmesg | grep -cE "QUERY_CAPS: [a-z_]+ = 0x[0-9a-f]+ exceeds the driver's limit" || true; }

# 1. oversized: clamped.
note "probe 1: oversized capabilities"
load_ferrdma
wait_probe 1 >/dev/null
for ((i = 0; i < 100 && $(registered) < 1; i++)); do sleep 0.2; done
[ "$(registered)" = 1 ] || { dmesg | grep -i ferrdma | tail -20; fail "oversized caps: the device was not registered"; }
dmesg | grep -E "QUERY_CAPS" || true
for field in max_sge max_read_sge max_inline max_qp max_cq max_mr max_ah max_pd max_sq_quanta \
	max_rq_quanta max_cq_entries max_gid max_msg_size max_mr_size page_size_cap max_rd_atomic \
	max_fast_reg_pages max_eq_moderation_us db_pages; do
	in_dmesg "QUERY_CAPS: $field = 0x[0-9a-f]+ exceeds the driver's limit; using 0x" ||
		fail "no clamp warning for $field"
done
attrs=$(ibv_devinfo -v -d ferrdma0)
attr() { echo "$attrs" | awk -v k="$1:" '$1 == k {print $2; exit}'; }
for kv in max_qp=16384 max_sge=13 max_sge_rd=13 max_cq=16384 max_mr=65536 max_ah=1023 \
	max_qp_rd_atom=16 max_qp_init_rd_atom=16 max_res_rd_atom=262160 max_cqe=524287 \
	max_qp_wr=4063 max_mr_size=0x40000000 page_size_cap=0x40201000; do
	got=$(attr "${kv%%=*}")
	[ "$got" = "${kv#*=}" ] || fail "ibv_devinfo: ${kv%%=*} is '$got', expected ${kv#*=} (clamped)"
done
note "attributes are the clamped limits: $(echo "$attrs" | grep -E '^\s+max_(qp|sge|res_rd_atom):' | tr -s ' \t\n' ' ')"
gid=$(wait_gid ferrdma0)
ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 50 -s 4096 -c > /tmp/server.log 2>&1 &
spid=$!
wait_listen 18515
if ! timeout 120 ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 50 -s 4096 -c 127.0.0.1 > /tmp/client.log 2>&1; then
	cat /tmp/client.log /tmp/server.log
	kill "$spid" 2>/dev/null
	fail "ibv_rc_pingpong on the clamped device failed (client)"
fi
wait "$spid" || { cat /tmp/client.log /tmp/server.log; fail "ibv_rc_pingpong on the clamped device failed (server)"; }
note "ibv_rc_pingpong with data check on the clamped device: $(grep -m1 -E 'bytes in' /tmp/client.log)"
unload_ferrdma

# 2. impossible: refused.
note "probe 2: impossible capabilities"
load_ferrdma
wait_probe 2 >/dev/null
for ((i = 0; i < 100; i++)); do
	in_dmesg "refusing the device" && break
	sleep 0.2
done
dmesg | grep -E "QUERY_CAPS|probe.*failed" | tail -3
in_dmesg "QUERY_CAPS: max_sge = 0x0 is impossible \(.*\); refusing the device" ||
	fail "no refusal naming max_sge"
in_dmesg "[a-z]+ [0-9a-f:.]+: probe with driver ferrdma failed with error -22" ||
	fail "probe did not fail with -EINVAL"
[ "$(registered)" = 1 ] || fail "a device was registered with impossible capabilities"
[ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] || fail "an RDMA device exists: $(ls /sys/class/infiniband)"
[ -z "$(ls /sys/bus/pci/drivers/ferrdma | grep -E '^[0-9a-f]{4}:' || true)" ] || fail "the function is bound"
unload_ferrdma

# 3. nominal: the real limits, no clamp.
note "probe 3: nominal capabilities"
before=$(clamps)
load_ferrdma
wait_probe 3 >/dev/null
for ((i = 0; i < 100 && $(registered) < 2; i++)); do sleep 0.2; done
[ "$(registered)" = 2 ] || fail "the nominal device was not registered"
[ "$(clamps)" = "$before" ] || fail "clamp warnings for the nominal capabilities"
[ "$(ibv_devinfo -v -d ferrdma0 | awk '$1 == "max_qp:" {print $2}')" = 16384 ] || fail "max_qp of the nominal device"
unload_ferrdma
note "caps-hostile test passed"
