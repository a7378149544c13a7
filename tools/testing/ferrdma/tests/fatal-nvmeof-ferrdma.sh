#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600
#
# A fatal device error under NVMe-oF I/O (issue 16, item 3), target (nvmet-rdma) and host
# (nvme-rdma) in one VM over ferrdma0. With data written and checked, writers running, the
# NIC's `sabotage nic:0 fatal` puts the engine in its fatal state. Then:
#   * the driver reports the error and re-probes the function; while its removal runs, the
#     kernel QPs' outstanding work completes as flushed in software (a dead device completes
#     nothing), so nvme-rdma and nvmet-rdma drain their queues and let go: the removal ends
#     and a new ferrdma0 comes up within 60 s, with no hang and no splat;
#   * nvme-rdma deletes its controller on the device removal (as on every RDMA device: the
#     ib_client's remove deletes the controllers on it), so the writers fail, and end;
#     nvmet-rdma drops the port's listener (RDMA_CM_EVENT_DEVICE_REMOVAL);
#   * the port is enabled again (its subsystem unlinked and linked), the host connects to the
#     new device, reads back what was written before the error and the backing file's copy of
#     it, and writes and checks new data.
# Then teardown as nvmeof-loopback: no verbs object or cm_id left, kmemleak clean.
. "$FERRDMA_HARNESS/guest/nvmeof.sh"
need_nic
kmemleak_clear
rdma_dev_up ferrdma
ulp_res_record
nvmeof_target_up "$FERRDMA_IP"
nvmeof_connect "$FERRDMA_IP"
first_ctrl=$NVMEOF_CTRL

head -c $((NVMEOF_SIZE_MB << 20)) /dev/urandom > /tmp/nvmeof-pattern
nvmeof_write_check 64k 4 0
nvmeof_write_check 1M 8 4

# Writers on 12..28 MiB until the device fails under them (nocreat: once the controller is
# gone, its /dev node is too, and dd must not write a regular file in its place).
writers=()
: > /tmp/nvmeof-writers.log
for i in 0 1 2 3; do
	(
		off=$((12 + 4 * i))
		while dd if=/tmp/nvmeof-pattern of="$NVMEOF_DEV" bs=64k iflag=skip_bytes,count_bytes \
			oflag=direct,seek_bytes conv=nocreat skip=$((off << 20)) seek=$((off << 20)) count=$((4 << 20)) \
			status=none 2>> /tmp/nvmeof-writers.log; do
			echo "writer $i: pass" >> /tmp/nvmeof-writers.log
		done
		echo "writer $i: ended by a failed write" >> /tmp/nvmeof-writers.log
	) &
	writers+=($!)
done
end=$((SECONDS + 60))
until [ "$(grep -c ': pass' /tmp/nvmeof-writers.log)" -ge 4 ]; do
	[ "$SECONDS" -lt "$end" ] || { cat /tmp/nvmeof-writers.log; fail "the writers made no progress"; }
	nap 0.2
done
note "writers running ($(grep -c ': pass' /tmp/nvmeof-writers.log) passes of 4 MiB); injecting a fatal error"

t0=$(uptime_cs)
fabric_ctl sabotage nic:0 fatal > /dev/null
outcome=$(wait_recovery 1 60)
[ "$outcome" = "the function is bound again" ] || fail "the re-probe ended with: $outcome"
wait_probe 2 > /dev/null
wait_rocev2_gid ferrdma0
note "ferrdma0 is back with a RoCE GID $(cs_seconds $(($(uptime_cs) - t0))) s after the injection"
dmesg | has_line 'the device reported a fatal error \(cause 1\); resetting it' \
	|| fail "the driver did not report the fatal error"

end=$((SECONDS + 60))
while [ -e "/sys/class/nvme/$first_ctrl" ]; do
	[ "$SECONDS" -lt "$end" ] || fail "$first_ctrl still exists 60 s after its device went away"
	nap 0.2
done
for pid in "${writers[@]}"; do
	end=$((SECONDS + 60))
	while kill -0 "$pid" 2>/dev/null; do
		[ "$SECONDS" -lt "$end" ] || fail "a writer still runs 60 s after the controller went away"
		nap 0.2
	done
done
note "$first_ctrl was deleted with its device; the writers ended: $(grep -c 'ended by a failed write' /tmp/nvmeof-writers.log) of 4 by a failed write"

# The listener went with the old device: enable the port again.
s=$NVMEOF_CFG/subsystems/$NVMEOF_NQN
p=$NVMEOF_CFG/ports/1
rm "$p/subsystems/$NVMEOF_NQN" || fail "cannot unlink the subsystem from port 1"
ln -s "$s" "$p/subsystems/$NVMEOF_NQN" || fail "cannot link the subsystem to port 1 again"
nvmeof_connect "$FERRDMA_IP"

# What was written and checked before the error is there, on the device and in the file.
nvmeof_same "$NVMEOF_DEV" 0 12 || fail "the 12 MiB written before the fatal error read back differently"
nvmeof_same "$NVMEOF_BACKING" 0 12 || fail "the backing file lost the 12 MiB written before the fatal error"
note "the 12 MiB written before the fatal error read back identical, on the new controller and in the file"
nvmeof_write_check 64k 4 32
nvmeof_write_check 1M 8 36
rm -f /tmp/nvmeof-pattern

nvmeof_disconnect
nvmeof_target_down
ulp_res_check "NVMe-oF/RDMA across a fatal device error"
rdma_dev_down
kmemleak_check "NVMe-oF/RDMA across a fatal device error"
note "fatal-nvmeof test passed"
