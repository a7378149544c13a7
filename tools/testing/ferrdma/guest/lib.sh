# SPDX-License-Identifier: GPL-2.0
#
# Helpers for ferrdma guest test scripts (tools/testing/ferrdma/tests/*.sh). Source it with
#     . "$FERRDMA_HARNESS/guest/lib.sh"
# It turns on `set -euo pipefail`, so any failing command ends the test.
#
# The driver's probe summary line. The driver prints exactly one per bound device:
#     ferrdma 0000:00:03.0: probe ok: id 0x4652444d version 1.1, 8/8 MSI-X vectors delivered, DMA copy of 8192 bytes verified, MAC 52:54:00:fe:10:01
# FERRDMA_PROBE_RE (an extended regex, for grep -E) matches it after the printk timestamp:
# "ferrdma", the PCI address, then the text with the expected id (the "FRDM" magic), interface
# version 1.x, all 8 MSI-X vectors and the 8 KiB DMA self-test.
# shellcheck disable=SC2034 # for the scripts that source this file, like the two below
FERRDMA_PROBE_RE='ferrdma [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]: probe ok: id 0x4652444d version 1\.[0-9]+, 8/8 MSI-X vectors delivered, DMA copy of 8192 bytes verified, MAC ([0-9a-f]{2}:){5}[0-9a-f]{2}$'
# The PCI vendor:device of the ferrdma function (drivers/infiniband/hw/ferrdma/interface.rs).
# shellcheck disable=SC2034
FERRDMA_PCI_ID=1234:fe10
# MSI-X vectors the driver requests (interface.rs MSIX_VECTORS).
# shellcheck disable=SC2034
FERRDMA_VECTORS=8

set -euo pipefail

# fail MESSAGE...: print the message and end the test with status 1.
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# note MESSAGE...: a progress line in the test's output.
note() {
	echo "[$(cut -d' ' -f1 /proc/uptime)s] $*"
}

# need_nic: fail unless the harness attached a ferrdma NIC (not run with --no-nic).
need_nic() {
	[ "${FERRDMA_HAVE_NIC:-0}" = 1 ] || fail "this test needs the ferrdma NIC (the harness ran with --no-nic)"
}

# module_loaded: true while the ferrdma module is in the kernel.
module_loaded() {
	grep -q '^ferrdma ' /proc/modules || [ -d /sys/module/ferrdma ]
}

# load_ferrdma: insmod $FERRDMA_KO; fail with the kernel's last words if it does not load.
load_ferrdma() {
	[ -f "$FERRDMA_KO" ] || fail "module $FERRDMA_KO does not exist"
	if ! insmod "$FERRDMA_KO"; then
		dmesg | tail -20 >&2
		fail "insmod $FERRDMA_KO failed"
	fi
	module_loaded || fail "insmod succeeded but ferrdma is not in /proc/modules"
}

# unload_ferrdma: rmmod ferrdma and check that the module is gone.
unload_ferrdma() {
	rmmod ferrdma || fail "rmmod ferrdma failed"
	! module_loaded || fail "ferrdma is still loaded after rmmod"
}

# probe_lines: the driver's probe summary lines in the kernel log so far.
probe_lines() {
	dmesg | grep -E "$FERRDMA_PROBE_RE" || true
}

# wait_probe COUNT [SECONDS]: waits (default 20 s) until the log holds COUNT probe summary lines;
# prints the last one. On timeout, shows the driver's messages and fails.
wait_probe() {
	local want=$1 secs=${2:-20} i
	for ((i = 0; i < secs * 5; i++)); do
		if [ "$(probe_lines | wc -l)" -ge "$want" ]; then
			probe_lines | tail -1
			return 0
		fi
		sleep 0.2
	done
	echo "--- ferrdma lines in dmesg:" >&2
	dmesg | grep -i ferrdma | tail -20 >&2 || true
	fail "no probe summary line matching: $FERRDMA_PROBE_RE"
}

# ping_peer HOST [SECONDS]: pings HOST (3 echoes, 5 s wait each) until that succeeds or SECONDS
# (default 60) have passed; the peer may still be booting. Uses ping(8) if installed, else the
# harness's own ICMP echo client (guest/ferrdma-ping).
ping_peer() {
	local host=$1 secs=${2:-60} end pinger
	if command -v ping >/dev/null; then pinger=ping; else pinger="$FERRDMA_HARNESS/guest/ferrdma-ping"; fi
	end=$(($(date +%s) + secs))
	until "$pinger" -c 3 -W 5 "$host"; do
		[ "$(date +%s)" -lt "$end" ] || fail "no ping reply from $host within ${secs}s"
		sleep 1
	done
}

# barrier NAME [SECONDS]: waits until every VM of the run has reached barrier NAME (over TCP on
# the LAN; node 1 coordinates). Use it before a VM may power off while a peer still needs it.
barrier() {
	python3 "$FERRDMA_HARNESS/guest/barrier.py" "$@" || fail "barrier $1 failed"
}
