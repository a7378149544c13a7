# SPDX-License-Identifier: GPL-2.0
#
# Helpers for ferrdma guest test scripts (tools/testing/ferrdma/tests/*.sh). Source it with
#     . "$FERRDMA_HARNESS/guest/lib.sh"
# It turns on `set -euo pipefail`, so any failing command ends the test.
#
# The driver's probe summary line. The driver prints exactly one per bound device:
#     ferrdma 0000:00:03.0: probe ok: id 0x4652444d version 1.2, 8/8 MSI-X vectors delivered, DMA copy of 8192 bytes verified, MAC 52:54:00:fe:10:01
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

# retrying PART CAUSE...: announces that PART of the test runs again because of CAUSE. Every
# retry in a guest script goes through here, and only for a failure whose cause is known and
# named in CAUSE (a failure of any other kind must fail the test). The line it prints,
#     ferrdma-retry: PART: CAUSE
# is read by run-tests, which shows it as a "retry:" diagnostic on the test's TAP line and
# counts it in the summary.
retrying() {
	local part=$1
	shift
	echo "ferrdma-retry: $part: $*"
}

# need_nic: fail unless the harness attached a ferrdma NIC (not run with --no-nic).
need_nic() {
	[ "${FERRDMA_HAVE_NIC:-0}" = 1 ] || fail "this test needs the ferrdma NIC (the harness ran with --no-nic)"
}

# module_loaded: true while the ferrdma module is in the kernel.
module_loaded() {
	grep -q '^ferrdma ' /proc/modules || [ -d /sys/module/ferrdma ]
}

# load_ferrdma: insmod $FERRDMA_KO with the module parameters in $FERRDMA_KO_PARAMS (if any);
# fail with the kernel's last words if it does not load.
load_ferrdma() {
	[ -f "$FERRDMA_KO" ] || fail "module $FERRDMA_KO does not exist"
	# shellcheck disable=SC2086 # word splitting: one parameter per word
	if ! insmod "$FERRDMA_KO" ${FERRDMA_KO_PARAMS:-}; then
		dmesg | tail -20 >&2
		fail "insmod $FERRDMA_KO ${FERRDMA_KO_PARAMS:-} failed"
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

# barrier_word NAME NODE WORD [SECONDS]: a barrier (default 180 s) at which every VM brings
# WORD (no spaces; barrier.py --say); prints the word node NODE brought. Lets the VMs agree on
# an outcome each saw only in part.
barrier_word() {
	local out
	out=$(python3 "$FERRDMA_HARNESS/guest/barrier.py" "$1" "${4:-180}" --say "$3") ||
		fail "barrier $1 failed"
	awk -v n="$2" '$1 == n { print $2 }' <<< "$out"
}

# kmemleak, shared by the tests that check for leaks. kmemleak only reports objects older than
# 5 seconds and can miss a stale pointer on one scan, so checks scan twice; a few objects the
# boot path leaves unreferenced (backtrace through start_kernel or kernel_init and no ferrdma
# frame) are listed but not held against the test. A scan that finds suspects logs "kmemleak:
# N new suspected memory leaks", which the harness counts as a splat; as the test judges the
# findings itself, scans are bracketed with the kmemleak-only expected-splat markers.
FERRDMA_KMEMLEAK=/sys/kernel/debug/kmemleak
# The guest uptime of the last kmemleak_check that passed (see kmemleak_after_script).
FERRDMA_KMEMLEAK_PASSED=/run/ferrdma-kmemleak-passed

kmemleak_scan() {
	echo "ferrdma-test: expected splat begin kmemleak" > /dev/kmsg
	echo scan > "$FERRDMA_KMEMLEAK"
	echo "ferrdma-test: expected splat end" > /dev/kmsg
}

# Prints the suspects (blank-line separated blocks) of the report in $1 that are not boot-path
# objects.
kmemleak_attributable() {
	awk '
		function flush() {
			if (block != "" && (block ~ /ferrdma/ || block !~ /(start_kernel|kernel_init)/))
				printf "%s\n", block
			block = ""
		}
		/^unreferenced object/ { flush() }
		{ block = block $0 "\n" }
		END { flush() }
	' "$@"
}

# kmemleak_rdma FILE: of kmemleak_attributable's suspects in the report FILE, those with a
# backtrace frame of ferrdma or of the RDMA core (ib_core, ib_uverbs, rdma_cm, built in:
# functions ib_*, rdma_*, uverbs_*, cma_*, iw_cm*), or a bare module-space address: the frame
# of a module unloaded since (ferrdma after rmmod; kmemleak then cannot name it).
kmemleak_rdma() {
	kmemleak_attributable "$1" | awk '
		function flush() {
			if (block != "" && hit)
				printf "%s\n", block
			block = ""
			hit = 0
		}
		/^unreferenced object/ { flush() }
		/^ +(\[<[0-9a-f]+>\] )?(ferrdma|ib_|rdma_|uverbs_|cma_|iw_cm)[A-Za-z0-9_.]*\+0x/ { hit = 1 }
		/\[ferrdma\]/ { hit = 1 }
		/^ +0xffffffff[a-f][0-9a-f]+$/ { hit = 1 }
		NF { block = block $0 "\n" }
		END { flush() }
	'
}

# kmemleak_after_script REPORT: the leak check guest/init runs after every test script, also
# after those that never call kmemleak_check. Any expected-splat region the script left open is
# closed first. kmemleak only reports objects older than 5 seconds, so it waits 5 s from the
# script's end, then scans twice: this kernel reports an object only on the scan after the one
# that first found it unreferenced (measured: a leak of 64 objects, scan 1: 0 suspects, scan
# 2: 64; under TCG a scan takes seconds). The scans are bracketed as
# kmemleak-only, since the verdict is this one: the suspects kmemleak_rdma picks (our driver or
# the RDMA core, boot-path objects excluded) go to REPORT, nothing if none.
# Most scripts end with their own kmemleak_check (stricter: any suspect not from the boot path
# since kmemleak_clear); when one passed within the last 5 s of the script, nothing it could
# report has happened since, and the scan is not repeated (it costs 10-25 s under TCG).
kmemleak_after_script() {
	local report=$1 now passed
	: > "$report"
	echo "ferrdma-test: expected splat end" > /dev/kmsg
	[ -e "$FERRDMA_KMEMLEAK" ] || return 0
	now=$(cut -d' ' -f1 /proc/uptime)
	if [ -f "$FERRDMA_KMEMLEAK_PASSED" ]; then
		passed=$(cat "$FERRDMA_KMEMLEAK_PASSED")
		if awk -v a="$passed" -v b="$now" 'BEGIN { exit !(b - a <= 5) }'; then
			echo "ferrdma-init: kmemleak: the script's own kmemleak_check passed at ${passed}s, $(awk -v a="$passed" -v b="$now" 'BEGIN { printf "%.1f", b - a }')s before; not repeated"
			return 0
		fi
	fi
	sleep 5
	kmemleak_scan
	kmemleak_scan
	cat "$FERRDMA_KMEMLEAK" > /tmp/kmemleak-after
	kmemleak_rdma /tmp/kmemleak-after > "$report"
}

# Forgets every suspect found so far, so a later check sees only what came after.
kmemleak_clear() {
	[ -e "$FERRDMA_KMEMLEAK" ] || fail "$FERRDMA_KMEMLEAK is missing: the kernel needs CONFIG_DEBUG_KMEMLEAK (and debugfs)"
	kmemleak_scan
	sleep 1
	kmemleak_scan
	if [ -s "$FERRDMA_KMEMLEAK" ]; then
		note "kmemleak: suspects before the test (ignored):"
		head -60 "$FERRDMA_KMEMLEAK"
	fi
	echo clear > "$FERRDMA_KMEMLEAK"
}

# Fails on any suspect since kmemleak_clear that is not a boot-path object; $1 names what ran.
kmemleak_check() {
	local suspects bad
	sleep 6
	kmemleak_scan
	sleep 2
	kmemleak_scan
	cat "$FERRDMA_KMEMLEAK" > /tmp/kmemleak
	suspects=$(grep -c '^unreferenced object' /tmp/kmemleak || true)
	bad=$(kmemleak_attributable /tmp/kmemleak)
	if [ -n "$bad" ]; then
		echo "$bad" | head -150
		fail "kmemleak: $(echo "$bad" | grep -c '^unreferenced object') suspected leak(s) after $1 (of $suspects suspects in all)"
	fi
	if [ "$suspects" != 0 ]; then
		note "kmemleak: $suspects boot-path suspect(s), ignored:"
		cat /tmp/kmemleak
	fi
	note "kmemleak: no leaks from $1"
	cut -d' ' -f1 /proc/uptime > "$FERRDMA_KMEMLEAK_PASSED"
}

# Fails unless ib_core tracks no user verbs object (context, PD, CQ, QP, MR) of ferrdma0.
# The kernel's own objects (ib_mad's GSI QP with its PD and CQ, "comm [ib_core]") stay.
expect_no_verbs_objects() {
	local res kind left
	res=$(rdma res show ferrdma0)
	note "rdma res: $res"
	for kind in ctx pd cq qp mr; do
		left=$(rdma res show "$kind" | grep -w ferrdma0 | grep -v 'comm \[' || true)
		[ -z "$left" ] || fail "$kind objects left behind: $left"
	done
}

# roce_v2_gid_index DEV [IP]: the GID table index of DEV's RoCE v2 GID for IPv4 address IP
# (default: this VM's). Prints nothing if there is none.
roce_v2_gid_index() {
	local dev=$1 ip=${2:-$FERRDMA_IP} d=/sys/class/infiniband/$1/ports/1 f i hex
	hex=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })
	for f in "$d"/gids/*; do
		i=${f##*/}
		[ "$(cat "$f" 2>/dev/null)" = "$hex" ] || continue
		[ "$(cat "$d/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
		echo "$i"
		return 0
	done
}

# wait_gid DEV: waits up to 10 s for DEV's RoCE v2 GID of this VM's address; prints its index.
wait_gid() {
	local i idx
	for i in $(seq 100); do
		idx=$(roce_v2_gid_index "$1")
		[ -n "$idx" ] && { echo "$idx"; return 0; }
		sleep 0.1
	done
	fail "$1 has no RoCE v2 GID for $FERRDMA_IP"
}

# two_vms_up: the common start of a test between two ferrdma VMs: the NIC and 2 VMs are
# required; kmemleak is cleared, ferrdma loaded and probed, ferrdma0's RoCE v2 GID index is
# left in $gid, the peer answers pings (within 90 s) and both VMs meet at barrier "up".
two_vms_up() {
	need_nic
	[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs"
	kmemleak_clear
	load_ferrdma
	wait_probe 1 >/dev/null
	# shellcheck disable=SC2034 # for the test script
	gid=$(wait_gid ferrdma0)
	ping_peer "$FERRDMA_PEER_IP" 90
	barrier up 180
}

# wait_listen PORT: waits up to 20 s until something listens on TCP PORT (any address).
wait_listen() {
	local hex i
	hex=$(printf '%04X' "$1")
	for i in $(seq 200); do
		awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
			/proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		sleep 0.1
	done
	fail "nothing listens on TCP port $1"
}

# load_kmods MODULE...: insmods in-tree modules of the booted kernel from its build tree
# ($FERRDMA_KBUILD; the guest has no /lib/modules), given as paths relative to it, in order
# (dependencies first); modules already loaded are skipped.
load_kmods() {
	local kbuild=${FERRDMA_KBUILD:-} rel name
	[ -n "$kbuild" ] || fail "FERRDMA_KBUILD is empty: the kernel image is not in a build tree"
	for rel in "$@"; do
		name=$(basename "$rel" .ko)
		[ -d "/sys/module/$name" ] && continue
		[ -f "$kbuild/$rel" ] || fail "module $kbuild/$rel does not exist (CONFIG_...=m?)"
		insmod "$kbuild/$rel" || { dmesg | tail -20 >&2; fail "insmod $kbuild/$rel failed"; }
	done
}

# test_progs_dir: prints the directory of the verbs test programs built for these sources
# (progs/build.sh); fails if they have not been built.
test_progs_dir() {
	"$FERRDMA_HARNESS/progs/build.sh" --dir ||
		fail "the verbs test programs are not built for these sources: run" \
			"scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/progs/build.sh (make check does)"
}

# fabric_ctl REQUEST...: sends one request line to the fabric's control socket (ferrdma-nic
# --control, e.g. "link nic:1 down", "fault lan:0 drop=0.1", "stats") and prints the reply.
# The guest cannot reach the host: the request goes as a file into the run's share
# (/run/ferrdma/fabric-ctl/ID.req), the harness forwards it and writes the reply to ID.rep
# (README.md, "The fabric's control socket"). Returns 1 on an "error:" reply (so a failed
# request ends a `set -e` test), fails the test if the harness does not answer within 20 s.
fabric_ctl() {
	local dir=/run/ferrdma/fabric-ctl id i reply
	[ -d "$dir" ] || fail "fabric_ctl: $dir is missing: this run has no fabric (FERRDMA_FABRIC=0?)"
	id=$(date +%s%N)-$$-$RANDOM
	printf '%s\n' "$*" > "$dir/$id.tmp"
	mv "$dir/$id.tmp" "$dir/$id.req"
	for ((i = 0; i < 200; i++)); do
		if [ -f "$dir/$id.rep" ]; then
			reply=$(cat "$dir/$id.rep")
			rm -f "$dir/$id.rep"
			echo "$reply"
			[ "$(tail -n1 <<< "$reply")" = ok ]
			return
		fi
		sleep 0.1
	done
	rm -f "$dir/$id.req"
	fail "fabric_ctl $*: no reply from the harness within 20s"
}

# fabric_cable NODE up|down: plugs or pulls node NODE's cable in one request to the harness:
# the fabric takes node NODE's ports (its virtio-net's lan:NODE-1 and, when it has a ferrdma
# NIC, the NIC's RoCE engine) up or down, and QEMU switches the virtio-net's link (QMP
# set_link), so NODE's eth0 loses its carrier and its RDMA port goes DOWN like on a real NIC.
fabric_cable() {
	local node=$1 state=$2
	fabric_ctl cable "$node" "$state" > /dev/null || fail "fabric: cable $node $state refused"
}

# perftest, shared by every test that runs a perftest server and client (ib_send_bw,
# ib_write_bw, ib_read_bw, ib_*_lat) over TCP's exchange of connection data, on one VM or
# between two.
#
# perftest times itself with the TSC and first calibrates it against gettimeofday; on a loaded
# TCG host the calibration's fit can come out below r^2 0.9 (the guest kernel then also marks
# its TSC unstable), and the tool exits with "Can't produce a report" after the traffic ran.
# That is the tool's clock, not the data path: such a run is repeated once (announced with
# `retrying`). Any other failure fails the test.
PERFTEST_LOGS=/tmp/perftest
PERFTEST_TIMEOUT=300 # seconds, for each side of a run
PERFTEST_SERVER_LOG=
PERFTEST_CLIENT_LOG=

# perftest_clock_failed LOG: whether the perftest run that wrote LOG gave up on its TSC
# calibration.
perftest_clock_failed() {
	grep -q "Can't produce a report" "$1" && grep -q 'Correlation coefficient r^2' "$1"
}

# perftest_outcome STATUS LOG: "ok" (status 0), "clock" (perftest_clock_failed) or "fail".
perftest_outcome() {
	if [ "$1" = 0 ]; then
		echo ok
	elif perftest_clock_failed "$2"; then
		echo clock
	else
		echo fail
	fi
}

# perftest_pair NAME SNODE ADDR TOOL ARGS...: one perftest run: "TOOL ARGS..." serves on node
# SNODE and, once it listens on its TCP port (-p, default 18515), "TOOL ARGS... ADDR" connects
# from the other node; in a 1-VM run both run here. Each side is bounded by PERFTEST_TIMEOUT
# and both must exit 0. With two VMs the nodes tell each other their side's outcome
# (barrier_word), so both repeat a run or both fail it. On success PERFTEST_CLIENT_LOG and
# PERFTEST_SERVER_LOG name this node's logs ($PERFTEST_LOGS/NAME.client, .server) for the
# caller's checks (result rows are in the client's); on failure the test fails showing them.
perftest_pair() {
	local name=$1 snode=$2 addr=$3 port=18515 prev='' a try spid rc co so serve=0 connect=0
	shift 3
	for a in "$@"; do
		[ "$prev" = -p ] && port=$a
		prev=$a
	done
	if [ "$FERRDMA_NVMS" = 1 ]; then
		serve=1 connect=1
	elif [ "$FERRDMA_NODE" = "$snode" ]; then
		serve=1
	else
		connect=1
	fi
	mkdir -p "$PERFTEST_LOGS"
	PERFTEST_SERVER_LOG=$PERFTEST_LOGS/$name.server
	PERFTEST_CLIENT_LOG=$PERFTEST_LOGS/$name.client
	for try in 1 2; do
		co=- so=-
		if [ "$serve" = 1 ]; then
			timeout "$PERFTEST_TIMEOUT" "$@" > "$PERFTEST_SERVER_LOG" 2>&1 &
			spid=$!
			wait_listen "$port"
		fi
		[ "$FERRDMA_NVMS" = 1 ] || barrier "$name-$try-listening" 120
		if [ "$connect" = 1 ]; then
			rc=0
			timeout "$PERFTEST_TIMEOUT" "$@" "$addr" > "$PERFTEST_CLIENT_LOG" 2>&1 || rc=$?
			co=$(perftest_outcome "$rc" "$PERFTEST_CLIENT_LOG")
		fi
		[ "$FERRDMA_NVMS" = 1 ] ||
			co=$(barrier_word "$name-$try-client" $((3 - snode)) "$co" $((PERFTEST_TIMEOUT + 60)))
		if [ "$serve" = 1 ]; then
			# A failed client can leave the server waiting for it: stop a server still running.
			[ "$co" = ok ] || ! kill -0 "$spid" 2>/dev/null || kill "$spid" 2>/dev/null || true
			rc=0
			wait "$spid" || rc=$?
			so=$(perftest_outcome "$rc" "$PERFTEST_SERVER_LOG")
			# The server we stopped after the client failed: its status says nothing.
			[ "$co" = ok ] || [ "$rc" != 143 ] || so=stopped
		fi
		[ "$FERRDMA_NVMS" = 1 ] || so=$(barrier_word "$name-$try-server" "$snode" "$so")
		[ "$co/$so" = ok/ok ] && return 0
		if [ "$try" = 1 ] && [ "$co" != fail ] && [ "$so" != fail ] &&
			{ [ "$co" = clock ] || [ "$so" = clock ]; }; then
			# Announced once, by the node that runs the client.
			[ "$connect" = 0 ] || retrying "$name" "perftest's TSC calibration failed" \
				"(client: $co, server: $so: Can't produce a report, Correlation coefficient r^2 too low)"
			continue
		fi
		[ "$connect" = 0 ] || { echo "--- $name client: $* $addr"; cat "$PERFTEST_CLIENT_LOG"; } >&2
		[ "$serve" = 0 ] || { echo "--- $name server: $*"; cat "$PERFTEST_SERVER_LOG"; } >&2
		fail "$name: $1 failed (client: $co, server: $so)"
	done
}
