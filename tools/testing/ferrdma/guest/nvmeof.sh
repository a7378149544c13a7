# SPDX-License-Identifier: GPL-2.0
#
# NVMe over Fabrics on the RDMA transport (tests/nvmeof-*.sh): the kernel's own NVMe host
# (nvme-rdma) and target (nvmet-rdma) over ferrdma0, the first in-tree ULP on ferrdma.
#     . "$FERRDMA_HARNESS/guest/nvmeof.sh"; nvmeof_loopback [KIND]  (1 VM: target and host in it)
#     . "$FERRDMA_HARNESS/guest/nvmeof.sh"; nvmeof_two_vms    (2 VMs: node 1 target, node 2 host)
#
# The target exports a file on tmpfs (nvmet's file backend) as namespace 1 of a subsystem, set
# up by hand through configfs, on a port with trtype rdma at eth0's address, port 4420. The
# host connects over RDMA by writing the options to /dev/nvme-fabrics (nvme-cli is not in the
# sysroot). Then real I/O with O_DIRECT (dd oflag=direct / iflag=direct) and data checks:
# 4 KiB blocks (the host sends a 4 KiB write inline with the command), 64 KiB and 1 MiB
# (fast-registered MRs of 16 and 256 pages: the target RDMA-READs writes and RDMA-WRITEs reads
# into them, and answers reads with SEND_WITH_INV of the host's rkey), 4 MiB (the block layer
# splits it at the controller's max transfer size), each region read back and compared by
# cmp with the pattern, also through the page cache after dropping it; then several dd at once on disjoint
# regions (queue depth on the I/O queues), verified the same way. Then the host disconnects,
# the target is taken down, the modules are removed, and `rdma res` (device counts and cm_ids)
# must equal what it was before, kmemleak must be clean.
. "$FERRDMA_HARNESS/guest/events.sh"

NVMEOF_NQN=nqn.2026-12.dev.ferrdma:nvmeof-test
NVMEOF_PORT=4420
NVMEOF_CFG=/sys/kernel/config/nvmet
NVMEOF_BACKING=/tmp/nvmeof-backing.img
NVMEOF_SIZE_MB=64
NVMEOF_HOST_MODULES=(drivers/nvme/host/nvme-core.ko drivers/nvme/host/nvme-fabrics.ko drivers/nvme/host/nvme-rdma.ko)
NVMEOF_TARGET_MODULES=(drivers/nvme/target/nvmet.ko drivers/nvme/target/nvmet-rdma.ko)
NVMEOF_CTRL=
NVMEOF_DEV=
ULP_RES_BEFORE=
ULP_CMID_BEFORE=
ULP_CQS_BEFORE=

# nvmeof_target_up IP: subsystem, namespace (file on tmpfs) and an RDMA port on IP.
nvmeof_target_up() {
	local ip=$1 s=$NVMEOF_CFG/subsystems/$NVMEOF_NQN p=$NVMEOF_CFG/ports/1
	load_kmods "${NVMEOF_TARGET_MODULES[@]}"
	grep -q ' /sys/kernel/config configfs' /proc/mounts || mount -t configfs none /sys/kernel/config
	[ -d "$NVMEOF_CFG" ] || fail "$NVMEOF_CFG missing after loading nvmet"
	truncate -s "${NVMEOF_SIZE_MB}M" "$NVMEOF_BACKING"
	mkdir "$s"
	echo 1 > "$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo "$NVMEOF_BACKING" > "$s/namespaces/1/device_path"
	echo 1 > "$s/namespaces/1/enable" || fail "cannot enable namespace 1 on $NVMEOF_BACKING"
	mkdir "$p"
	echo rdma > "$p/addr_trtype"
	echo ipv4 > "$p/addr_adrfam"
	echo "$ip" > "$p/addr_traddr"
	echo "$NVMEOF_PORT" > "$p/addr_trsvcid"
	if ! ln -s "$s" "$p/subsystems/$NVMEOF_NQN"; then
		dmesg | tail -20 >&2
		fail "the nvmet RDMA port on $ip:$NVMEOF_PORT did not come up"
	fi
	note "nvmet: $NVMEOF_NQN, namespace 1 = $NVMEOF_BACKING (${NVMEOF_SIZE_MB} MiB), rdma port $ip:$NVMEOF_PORT"
	note "nvmet-rdma: $(dmesg | grep -o 'nvmet_rdma: .*' | tail -1)"
}

# nvmeof_target_down: undoes nvmeof_target_up (port, namespace, subsystem, modules, file).
nvmeof_target_down() {
	local s=$NVMEOF_CFG/subsystems/$NVMEOF_NQN p=$NVMEOF_CFG/ports/1
	# Known upstream lockdep report, on any RDMA device: disabling the port takes
	# nvmet_config_sem, then rdma_destroy_id() of the listener takes its handler_mutex; the
	# rdma_cm handler of a connection (same lock class) holds handler_mutex while nvmet-rdma
	# runs the commands that arrived before ESTABLISHED (an I/O queue's Connect, which takes
	# nvmet_config_sem). Allowed here only, and only that report: the markers name its kinds
	# (splat.py: lockdep-circular and its backtrace), and nvmeof_known_lockdep checks its locks.
	echo "ferrdma-test: nvmet port removal" > /dev/kmsg
	echo "ferrdma-test: expected splat begin lockdep-circular call-trace" > /dev/kmsg
	rm "$p/subsystems/$NVMEOF_NQN" || fail "cannot unlink the subsystem from port 1"
	echo "ferrdma-test: expected splat end" > /dev/kmsg
	nvmeof_known_lockdep
	rmdir "$p" || fail "cannot remove port 1"
	echo 0 > "$s/namespaces/1/enable"
	rmdir "$s/namespaces/1" || fail "cannot remove namespace 1"
	rmdir "$s" || fail "cannot remove subsystem $NVMEOF_NQN"
	rmmod nvmet_rdma nvmet || fail "rmmod nvmet_rdma nvmet failed"
	rm -f "$NVMEOF_BACKING"
}

# nvmeof_known_lockdep: fails unless any lockdep report since the port removal began is the
# known nvmet_config_sem / rdma_cm handler_mutex one (see nvmeof_target_down).
nvmeof_known_lockdep() {
	local log
	log=$(dmesg | sed -n '/ferrdma-test: nvmet port removal/,/ferrdma-test: expected splat end/p')
	grep -q 'circular locking dependency\|lock(' <<< "$log" || return 0
	if grep -q 'possible circular locking dependency detected' <<< "$log" &&
		grep -q '(nvmet_config_sem)' <<< "$log" &&
		grep -q '(&id_priv->handler_mutex)' <<< "$log" &&
		[ "$(echo "$log" | grep -c 'WARNING:')" = 1 ]; then
		note "port removal: the known upstream lockdep report (nvmet_config_sem vs rdma_cm handler_mutex); lockdep is off from here on"
		return 0
	fi
	echo "$log" >&2
	fail "an unexpected lockdep report while the nvmet port was removed"
}

# nvmeof_connect IP: connects the host to the subsystem at IP over RDMA; sets NVMEOF_CTRL
# (nvmeN) and NVMEOF_DEV (/dev/nvmeNn1).
nvmeof_connect() {
	local ip=$1 opts reply i c b
	load_kmods "${NVMEOF_HOST_MODULES[@]}"
	[ -c /dev/nvme-fabrics ] || fail "/dev/nvme-fabrics missing after loading nvme-fabrics"
	opts="transport=rdma,traddr=$ip,trsvcid=$NVMEOF_PORT,nqn=$NVMEOF_NQN"
	note "connect: $opts"
	exec 3<>/dev/nvme-fabrics
	if ! echo "$opts" >&3; then
		exec 3>&-
		dmesg | tail -30 >&2
		fail "connect ($opts) failed"
	fi
	read -r reply <&3 || true
	exec 3>&-
	note "nvme-fabrics: $reply"
	i=$(echo "$reply" | sed -n 's/^instance=\([0-9]*\),.*/\1/p')
	[ -n "$i" ] || fail "unexpected reply from /dev/nvme-fabrics: $reply"
	NVMEOF_CTRL=nvme$i
	# The namespace's block device (with native multipath the head node nvme<subsys>n1; the
	# test connects one controller only, so it is the only nvme*n1).
	local end=$((SECONDS + 20))
	while :; do
		NVMEOF_DEV=$(find /sys/block -maxdepth 1 -name 'nvme*n1' -printf '%f\n' -quit)
		[ -n "$NVMEOF_DEV" ] && [ -b "/dev/$NVMEOF_DEV" ] && break
		NVMEOF_DEV=
		[ "$SECONDS" -lt "$end" ] || break
		nap 0.1
	done
	[ -n "$NVMEOF_DEV" ] || { ls /dev /sys/class/nvme/"$NVMEOF_CTRL" >&2 || true; fail "no namespace block device of $NVMEOF_CTRL"; }
	NVMEOF_DEV=/dev/$NVMEOF_DEV
	c=/sys/class/nvme/$NVMEOF_CTRL
	b=/sys/class/block/${NVMEOF_DEV#/dev/}
	note "$NVMEOF_CTRL: $(cat "$c/transport") $(cat "$c/address"), state $(cat "$c/state")," \
		"$(cat "$c/queue_count") queues of $(cat "$c/sqsize") + 1; $NVMEOF_DEV $(($(cat "$b/size") / 2048)) MiB," \
		"max transfer $(cat "$b/queue/max_hw_sectors_kb") KiB"
}

# nvmeof_disconnect: deletes the controller and waits until it is gone; unloads the host.
nvmeof_disconnect() {
	local i
	echo 1 > "/sys/class/nvme/$NVMEOF_CTRL/delete_controller" || fail "delete_controller of $NVMEOF_CTRL failed"
	local end=$((SECONDS + 20))
	while [ -e "/sys/class/nvme/$NVMEOF_CTRL" ] && [ "$SECONDS" -lt "$end" ]; do
		nap 0.1
	done
	[ ! -e "/sys/class/nvme/$NVMEOF_CTRL" ] || fail "$NVMEOF_CTRL still exists 10 s after delete_controller"
	rmmod nvme_rdma nvme_fabrics nvme_core || fail "rmmod of the NVMe host modules failed"
	note "$NVMEOF_CTRL deleted, host modules removed"
}

# nvmeof_same FILE|DEV SKIP_MIB MIB: true if MIB MiB of FILE|DEV at SKIP_MIB MiB (read in
# 1 MiB blocks) equal the pattern's there. cmp, not a hash of each side: SHA-256 under TCG ran
# at ~10 MB/s, and the checks read ~200 MiB.
nvmeof_same() {
	cmp -s <(dd if="$1" bs=1M skip="$2" count="$3" status=none) \
		<(dd if=/tmp/nvmeof-pattern bs=1M skip="$2" count="$3" status=none)
}

# nvmeof_write_check BS MIB OFFSET_MIB: writes MIB MiB of the pattern at OFFSET_MIB with
# O_DIRECT blocks of BS, reads it back with O_DIRECT blocks of BS and compares.
nvmeof_write_check() {
	local bs=$1 mib=$2 off=$3 t0 t1
	t0=$(date +%s.%N)
	dd if=/tmp/nvmeof-pattern of="$NVMEOF_DEV" bs="$bs" iflag=skip_bytes,count_bytes oflag=direct,seek_bytes \
		skip=$((off << 20)) seek=$((off << 20)) count=$((mib << 20)) status=none ||
		fail "dd write of $mib MiB in blocks of $bs at $off MiB failed"
	cmp <(dd if="$NVMEOF_DEV" bs="$bs" iflag=direct,skip_bytes,count_bytes skip=$((off << 20)) \
		count=$((mib << 20)) status=none) \
		<(dd if=/tmp/nvmeof-pattern bs=1M skip="$off" count="$mib" status=none) >&2 ||
		fail "data mismatch (or a failed read): $mib MiB in blocks of $bs at $off MiB (cmp's first difference above, offsets from $off MiB)"
	t1=$(date +%s.%N)
	note "$mib MiB in blocks of $bs at $off MiB: written and read back identical ($(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s)"
}

# nvmeof_io: the data checks (see the top of this file).
nvmeof_io() {
	local pids=() i bs off
	head -c $((NVMEOF_SIZE_MB << 20)) /dev/urandom > /tmp/nvmeof-pattern
	nvmeof_write_check 4k 1 0
	nvmeof_write_check 64k 4 1
	nvmeof_write_check 1M 8 5
	nvmeof_write_check 4M 16 13
	# The backing file holds what the target was given (when the target is in this VM).
	if [ -f "$NVMEOF_BACKING" ]; then
		nvmeof_same "$NVMEOF_BACKING" 0 29 ||
			fail "the target's backing file differs from what the host wrote (0..29 MiB)"
		note "backing file: 29 MiB identical to what the host wrote"
	fi
	# Through the page cache (buffered, readahead-sized requests), after dropping it.
	echo 3 > /proc/sys/vm/drop_caches
	nvmeof_same "$NVMEOF_DEV" 0 29 || fail "buffered read of 0..29 MiB differs"
	note "buffered read of 29 MiB identical"
	# Several writers, then several readers at once, on disjoint 4 MiB regions from 32 MiB.
	i=0
	for bs in 4k 16k 64k 128k 512k 1M; do
		off=$((32 + 4 * i))
		dd if=/tmp/nvmeof-pattern of="$NVMEOF_DEV" bs="$bs" iflag=skip_bytes,count_bytes oflag=direct,seek_bytes \
			skip=$((off << 20)) seek=$((off << 20)) count=$((4 << 20)) status=none &
		pids+=($!)
		i=$((i + 1))
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "concurrent dd writer $i failed"
	done
	pids=()
	i=0
	for bs in 1M 512k 128k 64k 16k 4k; do
		off=$((32 + 4 * i))
		dd if="$NVMEOF_DEV" bs="$bs" iflag=direct,skip_bytes,count_bytes skip=$((off << 20)) \
			count=$((4 << 20)) status=none of="/tmp/nvmeof-got.$i" &
		pids+=($!)
		i=$((i + 1))
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "concurrent dd reader $i failed"
	done
	for i in "${!pids[@]}"; do
		off=$((32 + 4 * i))
		cmp -s "/tmp/nvmeof-got.$i" <(dd if=/tmp/nvmeof-pattern bs=1M skip="$off" count=4 status=none) ||
			fail "concurrent I/O: region $i (4 MiB at $off MiB) differs"
	done
	note "concurrent I/O: 6 writers, then 6 readers (blocks of 4 KiB..1 MiB), 24 MiB identical"
	rm -f /tmp/nvmeof-pattern /tmp/nvmeof-got.*
}

# ulp_res_record: remembers the device's restrack counts, the cm_ids and the CQs before a
# kernel ULP (NVMe-oF here, the others in guest/ulp.sh) runs, for ulp_res_check.
ulp_res_record() {
	ULP_RES_BEFORE=$(rdma res show "$EVENTS_DEV")
	ULP_CMID_BEFORE=$(rdma res show cm_id)
	ULP_CQS_BEFORE=$(ulp_device_cqs)
	note "rdma res before: $ULP_RES_BEFORE"
}

# ulp_device_cqs: the device's CQs, one line each (`rdma res show cq`).
ulp_device_cqs() {
	rdma res show cq | grep -w "$EVENTS_DEV" || true
}

# ulp_res_check WHAT: the device's restrack counts and the cm_ids equal those from before,
# but for CQs of ib_core's shared CQ pool: nvme-rdma and nvmet-rdma take their CQs from it
# (ib_cq_pool_get), and ib_core keeps the pool's CQs, idle, until the device unregisters. So
# every CQ that was not there before must be ib_core's and have no user left; rdma_dev_down
# (the device's removal) frees them, which kmemleak_check then covers.
ulp_res_check() {
	local end=$((SECONDS + 20)) res cmid cqs new bad
	while :; do
		res=$(rdma res show "$EVENTS_DEV")
		cmid=$(rdma res show cm_id)
		cqs=$(ulp_device_cqs)
		new=$(comm -13 <(echo "$ULP_CQS_BEFORE" | sort) <(echo "$cqs" | sort))
		bad=$(echo "$new" | grep -v 'users 0 .*comm \[ib_core\]' || true)
		# Counts only: the device index differs if the device was registered anew since.
		[ "$(echo "$res" | sed 's/^[0-9]*: //; s/ cq [0-9]*//')" = "$(echo "$ULP_RES_BEFORE" | sed 's/^[0-9]*: //; s/ cq [0-9]*//')" ] &&
			[ "$cmid" = "$ULP_CMID_BEFORE" ] && [ -z "$bad" ] && break
		if [ "$SECONDS" -ge "$end" ]; then
			echo "cm_ids now: $cmid" >&2
			echo "CQs now: $cqs" >&2
			rdma res show qp >&2 || true
			rdma res show mr >&2 || true
			fail "objects left behind after $1: before: $ULP_RES_BEFORE; after: $res"
		fi
		nap 0.2
	done
	note "rdma res after $1: $res"
	[ -z "$new" ] || { note "idle CQs of ib_core's CQ pool (freed with the device):"; echo "$new"; }
}

nvmeof_loopback() {
	[ "$FERRDMA_NVMS" = 1 ] || fail "this test runs in 1 VM (FERRDMA_NVMS=$FERRDMA_NVMS)"
	kmemleak_clear
	rdma_dev_up "${1:-ferrdma}"
	ulp_res_record
	nvmeof_target_up "$FERRDMA_IP"
	nvmeof_connect "$FERRDMA_IP"
	note "rdma res while connected: $(rdma res show "$EVENTS_DEV")"
	nvmeof_io
	nvmeof_disconnect
	nvmeof_target_down
	ulp_res_check "NVMe-oF/RDMA"
	rdma_dev_down
	kmemleak_check "NVMe-oF/RDMA"
	note "NVMe-oF/RDMA loopback on $EVENTS_DEV: passed"
}

nvmeof_two_vms() {
	[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs (FERRDMA_NVMS=$FERRDMA_NVMS)"
	kmemleak_clear
	rdma_dev_up "${1:-ferrdma}"
	ping_peer "$FERRDMA_PEER_IP" 90
	ulp_res_record
	if [ "$FERRDMA_NODE" = 1 ]; then
		nvmeof_target_up "$FERRDMA_IP"
		barrier nvmeof-target-up 180
		barrier nvmeof-host-done 240
		nvmeof_target_down
	else
		barrier nvmeof-target-up 180
		nvmeof_connect "$FERRDMA_PEER_IP"
		note "rdma res while connected: $(rdma res show "$EVENTS_DEV")"
		nvmeof_io
		nvmeof_disconnect
		barrier nvmeof-host-done 240
	fi
	ulp_res_check "NVMe-oF/RDMA"
	barrier nvmeof-finished 120
	rdma_dev_down
	kmemleak_check "NVMe-oF/RDMA"
	note "NVMe-oF/RDMA between two VMs on $EVENTS_DEV: passed"
}
