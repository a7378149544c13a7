# SPDX-License-Identifier: GPL-2.0
#
# Helpers for ferrdma guest test scripts (tools/testing/ferrdma/tests/*.sh). Source it with
#     . "$FERRDMA_HARNESS/guest/lib.sh"
# It turns on `set -euo pipefail`, so any failing command ends the test.
#
# The driver's probe summary line. The driver prints exactly one per bound device:
#     ferrdma 0000:00:03.0: probe ok: id 0x4652444d version 1.3, 8/8 MSI-X vectors delivered, DMA copy of 8192 bytes verified, MAC 52:54:00:fe:10:01
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

# note MESSAGE...: a progress line in the test's output, stamped with /proc/uptime's first field
# (read with bash's read: a cut per note cost ~0.15 s of TCG time, and a suite prints ~800).
note() {
	local up _
	read -r up _ < /proc/uptime
	echo "[${up}s] $*"
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

# has_line [GREP-OPTION...] ERE: true if a line of standard input matches ERE (grep -E; with
# -v, if a line does not). Use it instead of `| grep -q`, `| grep -m` or `| head`: those stop
# reading at the first match, the writer (dmesg, rdma, echo of a long string) then dies of
# SIGPIPE, and under pipefail the pipeline fails although the line was there. The KASAN lane's
# check for KASAN's boot line failed in CI that way (dmesg of a KASAN boot is over 64 KiB, the
# pipe's buffer); test_selftest rejects the pattern in tests and helpers.
has_line() {
	grep -E "$@" > /dev/null
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

# expect_no_removal_leak [MARKER [CONTEXT]]: fails if the driver's removal check reported an
# id or event handle still held when a device went away ("leaked at removal", a WARN the
# splat scan would also fail, without saying which), in the kernel log since the line that
# ends with MARKER (the whole log without one).
expect_no_removal_leak() {
	local leak
	leak=$(dmesg | { if [ -n "${1:-}" ]; then sed -n "/$1\$/,\$p"; else cat; fi; } \
		| grep -o 'leaked at removal.*' | tail -1 || true)
	[ -z "$leak" ] || fail "${2:+$2: }$leak"
}

# probe_lines: the driver's probe summary lines in the kernel log so far.
probe_lines() {
	dmesg | grep -E "$FERRDMA_PROBE_RE" || true
}

# wait_probe COUNT [SECONDS]: waits (default 30 s) until the log holds COUNT probe summary lines;
# prints the last one. On timeout, shows the driver's messages and fails.
wait_probe() {
	local want=$1 end=$((SECONDS + ${2:-30}))
	while :; do
		if [ "$(probe_lines | wc -l)" -ge "$want" ]; then
			probe_lines | tail -1
			return 0
		fi
		[ "$SECONDS" -lt "$end" ] || break
		nap 0.2
	done
	echo "--- ferrdma lines in dmesg:" >&2
	dmesg | grep -i ferrdma | tail -20 >&2 || true
	fail "no probe summary line matching: $FERRDMA_PROBE_RE"
}

# ping_peer HOST [SECONDS]: pings HOST (one echo, 5 s wait) until that succeeds or SECONDS
# (default 60) have passed; the peer may still be booting. One echo a try: three made each
# call wait 2 s for the second and third, and the loop retries anyway. Uses ping(8) if
# installed, else the harness's own ICMP echo client (guest/ferrdma-ping).
ping_peer() {
	local host=$1 secs=${2:-60} end pinger
	if command -v ping >/dev/null; then pinger=ping; else pinger="$FERRDMA_HARNESS/guest/ferrdma-ping"; fi
	end=$(($(date +%s) + secs))
	until "$pinger" -c 1 -W 5 "$host"; do
		[ "$(date +%s)" -lt "$end" ] || fail "no ping reply from $host within ${secs}s"
		sleep 1
	done
}

# nap SECONDS: sleep(1) without an exec (each costs ~0.15 s of TCG time; a polling loop spent
# most of its time starting sleep): a read that times out on a FIFO no one writes to.
nap() {
	if [ -z "${FERRDMA_NAP_FD:-}" ] || [ "${FERRDMA_NAP_PID:-}" != "$BASHPID" ]; then
		local f=/tmp/ferrdma-nap.$BASHPID
		if ! { mkfifo "$f" && exec {FERRDMA_NAP_FD}<> "$f"; }; then
			rm -f "$f"
			sleep "$1"
			return 0
		fi
		rm -f "$f"
		FERRDMA_NAP_PID=$BASHPID
	fi
	read -rt "$1" -u "$FERRDMA_NAP_FD" _ || true
}

# barrier NAME [SECONDS]: waits until every VM of the run has reached barrier NAME (over TCP on
# the LAN; node 1 coordinates). Use it before a VM may power off while a peer still needs it.
barrier() {
	barrier_call "$1" "${2:-120}" "" > /dev/null || fail "barrier $1 failed"
}

# barrier_word NAME NODE WORD [SECONDS]: a barrier (default 180 s) at which every VM brings
# WORD (no spaces; barrier.py --say); prints the word node NODE brought. Lets the VMs agree on
# an outcome each saw only in part.
barrier_word() {
	local out n w
	out=$(barrier_call "$1" "${4:-180}" "$3") || fail "barrier $1 failed"
	while read -r n w; do
		[ "$n" != "$2" ] || echo "$w"
	done <<< "$out"
}

# barrier_call NAME SECONDS WORD: one barrier; prints "N WORD" for every node's word (none if
# WORD is empty). With two VMs it asks this VM's barrier daemon (guest/init started
# barrier.py --daemon) through bash's /dev/tcp, as a Python start per barrier costs 1-2 s of
# TCG time on each node.
barrier_call() {
	local fd line rc=1
	if [ "$FERRDMA_NVMS" = 1 ]; then
		[ -z "$3" ] || echo "1 $3"
		return 0
	fi
	exec {fd}<> /dev/tcp/127.0.0.1/7701 || { echo "barrier $1: no barrier daemon" >&2; return 1; }
	printf '%s %s %s\n' "$1" "$2" "$3" >&"$fd"
	while read -r -t $(($2 + 30)) line <&"$fd"; do
		case $line in
		ok) rc=0; break ;;
		fail*) echo "barrier: $line (barrier.py logs to the console)" >&2; break ;;
		*) echo "$line" ;;
		esac
	done
	exec {fd}>&-
	return "$rc"
}

# kmemleak, shared by the tests that check for leaks. kmemleak reports an object only once it is
# older than its minimum age and was found unreferenced, with unchanged contents, by two scans
# in a row (a first scan after the leak: 0 suspects, the second: all of them; under TCG a scan
# takes 1-5 s). So a check scans at once, waits until the minimum age has passed since it
# began, and scans again. The age is 5 s in the kernel; the harness boots with
# kmemleak.min_age_ms=1000 (scripts/kernel-patches/0007 makes it a parameter): the wait was
# most of the check, and 1 s is still a million times longer than a pointer stays only in a
# register. A
# objects the boot path leaves unreferenced (backtrace through start_kernel or kernel_init and
# no ferrdma frame) are listed but not held against the test. A scan that finds suspects logs
# "kmemleak: N new suspected memory leaks", which the harness counts as a splat; as the test
# judges the findings itself, scans are bracketed with the kmemleak-only expected-splat markers.
FERRDMA_KMEMLEAK=/sys/kernel/debug/kmemleak
# The guest uptime of the last kmemleak_check that passed (see kmemleak_after_script).
FERRDMA_KMEMLEAK_PASSED=/run/ferrdma-kmemleak-passed
# The kernel's jiffies at the last kmemleak_clear: older suspects are not the test's.
FERRDMA_KMEMLEAK_SINCE=/run/ferrdma-kmemleak-since

kmemleak_scan() {
	echo "ferrdma-test: expected splat begin kmemleak" > /dev/kmsg
	echo scan > "$FERRDMA_KMEMLEAK"
	echo "ferrdma-test: expected splat end" > /dev/kmsg
}

# uptime_cs: the guest's uptime in hundredths of a second (bash only: an exec costs ~0.1 s of
# TCG time).
uptime_cs() {
	local up _
	read -r up _ < /proc/uptime
	echo $((10#${up%.*} * 100 + 10#${up#*.}))
}

# cs_seconds CS: hundredths of a second as seconds, "S.CC".
cs_seconds() {
	local cc
	printf -v cc %02d $(($1 % 100))
	echo "$(($1 / 100)).$cc"
}

# kmemleak_scan_twice: the two scans of a check (see above), with the wait between them.
# kmemleak_min_age_cs: kmemleak's minimum object age in hundredths of a second.
kmemleak_min_age_cs() {
	local ms=5000
	[ ! -r /sys/module/kmemleak/parameters/min_age_ms ] ||
		read -r ms < /sys/module/kmemleak/parameters/min_age_ms
	echo $(((ms + 9) / 10))
}

kmemleak_scan_twice() {
	local t0 left
	t0=$(uptime_cs)
	kmemleak_scan
	left=$((t0 + $(kmemleak_min_age_cs) + 10 - $(uptime_cs)))
	[ "$left" -le 0 ] || sleep "$(cs_seconds "$left")"
	kmemleak_scan
}

# jiffies_now: the kernel's jiffies (the clock of kmemleak's "jiffies N" allocation stamps).
jiffies_now() {
	awk '$1 == "jiffies:" { print $2; exit }' /proc/timer_list
}

# kmemleak_since JIFFIES FILE: of the report in FILE, the suspects allocated at JIFFIES or later.
kmemleak_since() {
	awk -v since="$1" '
		function flush() {
			if (block != "" && keep)
				printf "%s", block
			block = ""
			keep = 0
		}
		/^unreferenced object/ { flush() }
		/^  comm ".*", pid [0-9]+, jiffies [0-9]+$/ { keep = ($NF + 0 >= since + 0) }
		{ block = block $0 "\n" }
		END { flush() }
	' "$2"
}

# Prints the suspects (blank-line separated blocks) of the report in $1 that are not boot-path
# objects, nor the task, signal, credential or exec-state structures of a process being forked
# or exec'd, without an RDMA frame (kmemleak's conservative scan reported the test's own bash
# this way, session 9, with no RDMA code involved).
kmemleak_attributable() {
	awk '
		function flush() {
			if (block != "" && (block ~ /(ferrdma|ib_|rdma_|uverbs_)/ ||
			    block !~ /(start_kernel|kernel_init|copy_process|bprm_execve)/))
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

# kmemleak_after_script REPORT [END]: the leak check guest/init runs after every test script, also
# after those that never call kmemleak_check. Any expected-splat region the script left open is
# closed first; then kmemleak_scan_twice. The scans are bracketed as kmemleak-only, since the
# verdict is this one: the suspects kmemleak_rdma picks (our driver or the RDMA core, boot-path
# objects excluded) go to REPORT, nothing if none.
# Most scripts end with their own kmemleak_check (stricter: any suspect not from the boot path
# since kmemleak_clear); when one passed within kmemleak's minimum age before the end of the
# script, nothing it could report has happened since, and the scans are not repeated (they
# cost 3-15 s under TCG). The end is END, guest/init's /proc/uptime reading ("S.CC") when the
# script ended: measured here, after this bash and lib.sh started, it missed the 1 s window in
# most runs whose check had passed 0.5-0.8 s before the script ended. Without END (or with one
# not in that form) it is measured here.
kmemleak_after_script() {
	local report=$1 end=${2:-} now passed
	: > "$report"
	echo "ferrdma-test: expected splat end" > /dev/kmsg
	[ -e "$FERRDMA_KMEMLEAK" ] || return 0
	if [[ $end =~ ^[0-9]+\.[0-9][0-9]$ ]]; then
		now=$((10#${end%.*} * 100 + 10#${end#*.}))
	else
		now=$(uptime_cs)
	fi
	if [ -f "$FERRDMA_KMEMLEAK_PASSED" ]; then
		passed=$(cat "$FERRDMA_KMEMLEAK_PASSED")
		if [ $((now - passed)) -le "$(kmemleak_min_age_cs)" ]; then
			echo "ferrdma-init: kmemleak: the script's own kmemleak_check passed $(cs_seconds $((now - passed)))s before its end; not repeated"
			return 0
		fi
	fi
	kmemleak_scan_twice
	cat "$FERRDMA_KMEMLEAK" > /tmp/kmemleak-after
	kmemleak_rdma /tmp/kmemleak-after > "$report"
}

# kmemleak_clear: from now on, a kmemleak_check holds only newer suspects against the test (by
# their allocation stamp; no scan needed). Suspects reported so far are forgotten.
kmemleak_clear() {
	[ -e "$FERRDMA_KMEMLEAK" ] || fail "$FERRDMA_KMEMLEAK is missing: the kernel needs CONFIG_DEBUG_KMEMLEAK (and debugfs)"
	echo clear > "$FERRDMA_KMEMLEAK"
	jiffies_now > "$FERRDMA_KMEMLEAK_SINCE"
}

# Fails on any suspect allocated since kmemleak_clear (since boot without one) that is
# attributable to ferrdma or the RDMA core (kmemleak_rdma, the after-script check's rule);
# other suspects are listed, not held against the test: since the test kernel has vmap'ed
# stacks (session 9), kmemleak has reported processes' own task, cred, group and exec
# structures (fork, exec, setgroups; no RDMA frame) in three runs; $1 names what ran.
kmemleak_check() {
	local suspects bad since=0
	[ ! -f "$FERRDMA_KMEMLEAK_SINCE" ] || since=$(cat "$FERRDMA_KMEMLEAK_SINCE")
	kmemleak_scan_twice
	# One read of the debugfs file into a copy, as kmemleak_after_script does (the report
	# shown on failure is then the one judged).
	cat "$FERRDMA_KMEMLEAK" > /tmp/kmemleak-all
	kmemleak_since "$since" /tmp/kmemleak-all > /tmp/kmemleak
	suspects=$(grep -c '^unreferenced object' /tmp/kmemleak || true)
	bad=$(kmemleak_rdma /tmp/kmemleak)
	if [ -n "$bad" ]; then
		sed -n 1,150p <<< "$bad"
		fail "kmemleak: $(echo "$bad" | grep -c '^unreferenced object') suspected leak(s) after $1 (of $suspects suspects in all)"
	fi
	if [ "$suspects" != 0 ]; then
		note "kmemleak: $suspects suspect(s) from the boot path or without an RDMA frame, listed, not held against the test:"
		cat /tmp/kmemleak
	fi
	note "kmemleak: no leaks from $1"
	uptime_cs > "$FERRDMA_KMEMLEAK_PASSED"
}

# Fails unless ib_core tracks no user verbs object (context, PD, CQ, QP, MR) of ferrdma0.
# The kernel's own objects (ib_mad's GSI QP with its PD and CQ, "comm [ib_core]") stay. A
# ferrdma0 that is gone (a reset under way: admin-hang) has none left.
# One rdma process answers the six queries (rdma -b -, batch mode) and bash reads its lines: with an
# rdma and two greps per kind this took 3-5 s of TCG time, and tests call it up to 9 times.
expect_no_verbs_objects() {
	local out line summary= left=
	out=$(printf 'res show %s\n' ferrdma0 ctx pd cq qp mr | rdma -b - 2>&1) ||
		fail "rdma res show failed: $out"
	# rdma says "Unknown parameter 'ferrdma0'." (and goes on) when ib_core no longer lists
	# the device: it is being unregistered or is gone.
	if [[ $out == *"Unknown parameter 'ferrdma0'"* ]] || [ ! -e /sys/class/infiniband/ferrdma0 ]; then
		note "rdma res: ferrdma0 is gone, and with it every verbs object of it"
		return 0
	fi
	while IFS= read -r line; do
		if [[ $line =~ ^[0-9]+:\ ferrdma0: ]]; then
			summary=$line
		elif [[ " $line " =~ [^[:alnum:]_]ferrdma0[^[:alnum:]_] && $line != *'comm ['* ]]; then
			left+=$'\n'"  $line"
		fi
	done <<< "$out"
	[ -n "$summary" ] || fail "rdma res show ferrdma0 printed no summary: $out"
	note "rdma res: $summary"
	[ -z "$left" ] || fail "verbs objects left behind (ctxn, pdn, cqn, lqpn, mrn lines):$left"
}

# uverbs_dev IBDEV: prints the /dev/infiniband/uverbsN character device of RDMA device IBDEV;
# fails if it has none.
uverbs_dev() {
	local d dev=
	for d in /sys/class/infiniband_verbs/uverbs*; do
		if [ "$(cat "$d/ibdev")" = "$1" ]; then dev=/dev/infiniband/${d##*/}; fi
	done
	[ -c "$dev" ] || fail "no uverbs device of $1"
	echo "$dev"
}

# roce_v2_gid_index DEV [IP]: the GID table index of DEV's RoCE v2 GID for IPv4 address IP
# (default: this VM's). Prints nothing if there is none. Of several, the first in the glob's
# order of the gids directory.
roce_v2_gid_index() {
	local dev=$1 ip=${2:-$FERRDMA_IP} d=/sys/class/infiniband/$1/ports/1 f i hex
	hex=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })
	# One grep over the whole table, which lists the matching files in the glob's order (rxe
	# has 1024 entries: a cat per entry took 27 s under TCG); the type only of those.
	while read -r f; do
		i=${f##*/}
		[ "$(cat "$d/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
		echo "$i"
		return 0
	done < <(grep -lxF "$hex" "$d"/gids/* 2>/dev/null)
}

# wait_gid DEV: waits up to 30 s for DEV's RoCE v2 GID of this VM's address; prints its index.
wait_gid() {
	local idx end=$((SECONDS + 30))
	while :; do
		idx=$(roce_v2_gid_index "$1")
		[ -n "$idx" ] && { echo "$idx"; return 0; }
		[ "$SECONDS" -lt "$end" ] || break
		nap 0.1
	done
	fail "$1 has no RoCE v2 GID for $FERRDMA_IP"
}

# two_vms_up: the common start of a test between two ferrdma VMs: the NIC and 2 VMs are
# required, and the harness's node numbers and addresses must match (10.77.0.1 and
# 10.77.0.2); kmemleak is cleared, ferrdma loaded and probed, ferrdma0's RoCE v2 GID index is
# left in $gid, the peer answers pings over the LAN (within 90 s) and both VMs meet at
# barrier "up".
two_vms_up() {
	need_nic
	[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs"
	[ "$FERRDMA_IP" = "10.77.0.$FERRDMA_NODE" ] || fail "node $FERRDMA_NODE has address $FERRDMA_IP"
	[ "$FERRDMA_PEER_IP" = "10.77.0.$((3 - FERRDMA_NODE))" ] ||
		fail "node $FERRDMA_NODE's peer is $FERRDMA_PEER_IP"
	kmemleak_clear
	load_ferrdma
	wait_probe 1 >/dev/null
	# shellcheck disable=SC2034 # for the test script
	gid=$(wait_gid ferrdma0)
	ping_peer "$FERRDMA_PEER_IP" 90
	barrier up 180
}

# wait_listen PORT [SECONDS]: waits up to SECONDS (default 30) until something listens on TCP
# PORT (any address).
wait_listen() {
	local hex end=$((SECONDS + ${2:-30})) _ addr st f
	printf -v hex '%04X' "$1"
	while :; do
		# bash only: this polls while the server starts, and an exec per poll slows it down.
		for f in /proc/net/tcp /proc/net/tcp6; do
			while read -r _ addr _ st _; do
				[ "${addr##*:}/$st" != "$hex/0A" ] || return 0
			done < "$f"
		done
		[ "$SECONDS" -lt "$end" ] || break
		nap 0.1
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
		# The kernel names modules with underscores (nvme-core.ko is nvme_core).
		name=$(basename "$rel" .ko)
		name=${name//-/_}
		[ -d "/sys/module/$name" ] && continue
		[ -f "$kbuild/$rel" ] || fail "module $kbuild/$rel does not exist (CONFIG_...=m?)"
		insmod "$kbuild/$rel" || { dmesg | tail -20 >&2; fail "insmod $kbuild/$rel failed"; }
	done
}

# test_progs_dir: prints the directory of the verbs test programs built for these sources
# (progs/build.sh); fails if they have not been built.
test_progs_dir() {
	# The harness found it on the host (vmharness.py: progs_dir); in the guest build.sh --dir
	# hashes the sources and runs cc --version, ~3.8 s of TCG time a call.
	if [ -n "${FERRDMA_PROGS_DIR:-}" ] && [ -d "$FERRDMA_PROGS_DIR" ]; then
		echo "$FERRDMA_PROGS_DIR"
		return 0
	fi
	"$FERRDMA_HARNESS/progs/build.sh" --dir ||
		fail "the verbs test programs are not built for these sources: run" \
			"scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/progs/build.sh (make check does)"
}

# fabric_ctl REQUEST...: sends one request line to the fabric's control socket (ferrdma-nic
# --control, e.g. "link nic:1 down", "fault lan:0 drop=0.1", "stats") and prints the reply.
# The guest cannot reach the host: the request goes as a file into the run's share
# (/run/ferrdma/fabric-ctl/ID.req), the harness forwards it and writes the reply to ID.rep
# (README.md, "The fabric's control socket"). Returns 1 on an "error:" reply (so a failed
# request ends a `set -e` test), fails the test if the harness does not answer within 60 s.
fabric_ctl() {
	# 60 s: the harness serves a request within its 0.2 s poll and a 10 s socket limit, but
	# a make check on a host also compiling took 16 s to answer one (fatal-nvmeof, session 32).
	local dir=/run/ferrdma/fabric-ctl id end=$((SECONDS + 60)) reply
	[ -d "$dir" ] || fail "fabric_ctl: $dir is missing: this run has no fabric (FERRDMA_FABRIC=0?)"
	id=$(date +%s%N)-$$-$RANDOM
	printf '%s\n' "$*" > "$dir/$id.tmp"
	mv "$dir/$id.tmp" "$dir/$id.req"
	while [ "$SECONDS" -le "$end" ]; do
		if [ -f "$dir/$id.rep" ]; then
			reply=$(cat "$dir/$id.rep")
			rm -f "$dir/$id.rep"
			echo "$reply"
			[ "${reply##*$'\n'}" = ok ]
			return
		fi
		nap 0.1
	done
	rm -f "$dir/$id.req"
	fail "fabric_ctl $*: no reply from the harness within 60s"
}

# hw_counter NAME [DEV]: the value of hardware counter NAME of port 1 of DEV (default ferrdma0),
# from sysfs hw_counters (what `rdma statistic` shows).
hw_counter() {
	local f="/sys/class/infiniband/${2:-ferrdma0}/ports/1/hw_counters/$1"
	[ -r "$f" ] || fail "no hardware counter '$1' ($f)"
	cat "$f"
}

# fabric_cable NODE up|down: plugs or pulls node NODE's cable in one request to the harness:
# the fabric takes node NODE's ports (its virtio-net's lan:NODE-1 and, when it has a ferrdma
# NIC, the NIC's RoCE engine) up or down, and QEMU switches the virtio-net's link (QMP
# set_link), so NODE's eth0 loses its carrier and its RDMA port goes DOWN like on a real NIC.
fabric_cable() {
	local node=$1 state=$2
	fabric_ctl cable "$node" "$state" > /dev/null || fail "fabric: cable $node $state refused"
}

# fabric_cable_out NODE SECONDS: pulls node NODE's cable for SECONDS, timed by the harness
# (one request, answered once the cable is back): an outage as long as asked, not that plus
# the guest's round trips to the harness.
fabric_cable_out() {
	fabric_ctl cable "$1" out "$2" > /dev/null || fail "fabric: cable $1 out $2 refused"
}

# removal_holder_start [-f]: starts progs/removal-holder on ferrdma0 (the verbs objects a running
# application holds, after 8 SENDs whose bytes it checked) and waits until it is ready; its pid
# is in $REMOVAL_HOLDER, its output in /tmp/removal-holder.out. -f: the device will fail fatally (see the program).
removal_holder_start() {
	local progs
	progs=$(test_progs_dir)
	: > /tmp/removal-holder.out
	"$progs/removal-holder" ferrdma0 -t 90 "$@" > /tmp/removal-holder.out 2>&1 &
	REMOVAL_HOLDER=$!
	for _ in $(seq 300); do
		grep -q '^ready' /tmp/removal-holder.out && return 0
		kill -0 "$REMOVAL_HOLDER" 2>/dev/null || break
		nap 0.1
	done
	cat /tmp/removal-holder.out
	fail "removal-holder did not get ready on ferrdma0"
}

# removal_holder_finish WHAT: the holder must have seen the device go (WHAT: IB_EVENT_DEVICE_FATAL,
# failing commands, a clean teardown) and exited 0.
removal_holder_finish() {
	local rc=0
	wait "$REMOVAL_HOLDER" || rc=$?
	cat /tmp/removal-holder.out
	[ "$rc" = 0 ] || fail "removal-holder failed (status $rc) after $1"
	grep -q 'IBV_EVENT_DEVICE_FATAL' /tmp/removal-holder.out || fail "no IBV_EVENT_DEVICE_FATAL after $1"
	grep -q 'removal-holder: PASS' /tmp/removal-holder.out || fail "removal-holder did not pass after $1"
}

# wait_recovery COUNT SECONDS: waits (at most SECONDS) until the driver's reset of a failed
# device by re-probing (rust/kernel/infiniband/recovery.rs) has ended COUNT times in all, and
# prints how the last one ended: "the function is bound again", "no driver took the function"
# or "probing the function failed (ERRNO)". On timeout, shows the driver's lines and fails.
RECOVERY_OUTCOME_RE='recovery: (the function is bound again|no driver took the function|probing the function failed.*)$'
wait_recovery() {
	local want=$1 end=$((SECONDS + $2))
	while [ "$(dmesg | grep -cE "$RECOVERY_OUTCOME_RE" || true)" -lt "$want" ]; do
		[ "$SECONDS" -lt "$end" ] || {
			dmesg | grep -iE 'ferrdma|recover|nvme' | tail -30 >&2
			fail "no ${want}th recovery outcome within $2 s"
		}
		nap 0.2
	done
	dmesg | grep -oE "$RECOVERY_OUTCOME_RE" | tail -1 | sed 's/^recovery: //'
}

# fabric_pci NODE unplug|plug: hot-unplugs node NODE's ferrdma function (QMP device_del; the
# guest's ACPI hotplug removes it, the driver's remove runs) or plugs it in again (device_add on
# the same PCIe root port; the NIC serves it as a new client on a reset device). Only in tests
# whose header says replug=yes.
fabric_pci() {
	local node=$1 what=$2
	fabric_ctl pci "$node" "$what" > /dev/null || fail "harness: pci $node $what refused"
}

# perftest, shared by every test that runs a perftest server and client (ib_send_bw,
# ib_write_bw, ib_read_bw, ib_*_lat) over TCP's exchange of connection data, on one VM or
# between two.
#
# perftest times itself with the TSC, which it calibrates against gettimeofday, in every report
# (each size of an -a run, on both sides) and, in the latency tools of perftest 25.01, once more
# before each size's ping-pong (for --latency_gap, 0 unless asked). A fit fails ("Correlation
# coefficient r^2: R < 0.9") when one of its 200 samples took a pause of a few ms between reading
# the TSC and the clock: the guest's vCPU descheduled by the host, or another guest task run (one
# task waking every 20 ms gave 2-7.6 ms outliers in 7 of 25 fits, r^2 down to 0.93). On a loaded
# 2-core TCG host that is routine, and no number of tries makes it go away: CI failed
# verbs-two-vms on 2026-12-07 with the server's calibration failing on each of three tries.
# The bandwidth tools then give up ("Can't produce a report", status 1) unless run with -F, when
# they print 0 for that size and go on; the latency tools print "inf" unless run with -C (report
# in cycles, no calibration for the report). What a failed fit means depends on the caller
# (PERFTEST_CLOCK):
#  - "pass" (the tests): they check the data path (every size's result row, both sides' status),
#    not perftest's figures, and run the bandwidth tools with -F and the latency tools with -C.
#    A run that exited 0 with a failed fit passes, and says so in a note ("unclocked").
#  - "retry" (make bench, which needs the figures): such a run is repeated, up to
#    PERFTEST_TRIES runs, each announced with `retrying`.
# A failed fit that stopped the tool (status 1) is repeated in both modes. Any other failure
# fails the test.
PERFTEST_LOGS=/tmp/perftest
PERFTEST_TIMEOUT=300 # seconds, for each side of a run
# Runs of a pair whose only failure was perftest's clock calibration (above); make bench, whose
# long runs fail it more often, allows four (bench.sh).
PERFTEST_TRIES=3
PERFTEST_CLOCK=pass
# What a failed pair does: "fatal" (tests: the test fails) or "skip" (make bench: it returns
# 1, the failure shown, and the bench goes on without that figure).
PERFTEST_FAILS=fatal
PERFTEST_SERVER_LOG=
PERFTEST_CLIENT_LOG=

# perftest_clock_failed LOG: whether the perftest run that wrote LOG failed a TSC calibration
# ("Correlation coefficient r^2: R < 0.9"; seen 2026-12-03 as "inf" in every column of
# ib_send_lat -s 2, which exited 0).
perftest_clock_failed() {
	grep -qE 'Correlation coefficient r\^2: [0-9.e+-]+ < 0\.9' "$1"
}

# perftest_outcome STATUS LOG: "ok" (status 0), "unclocked" (status 0 after a failed
# calibration, with PERFTEST_CLOCK=pass), "clock" (a failed calibration, any other status or
# mode), "peer" (this side failed only because its peer quit: the exchange over TCP between two
# sizes or at the end found the socket closed) or "fail".
perftest_outcome() {
	if perftest_clock_failed "$2"; then
		if [ "$1" = 0 ] && [ "$PERFTEST_CLOCK" = pass ]; then
			echo unclocked
		else
			echo clock
		fi
	elif [ "$1" = 0 ]; then
		echo ok
	elif grep -q 'Failed to exchange data between server and clients' "$2"; then
		echo peer
	else
		echo fail
	fi
}

# perftest_side_passed OUTCOME: whether one side of a pair passed ("ok" or "unclocked").
perftest_side_passed() {
	[ "$1" = ok ] || [ "$1" = unclocked ]
}

# perftest_passed NAME CO SO: whether a pair whose sides came out CO and SO (perftest_outcome)
# passed: both "ok", or "unclocked" with a note that names the side.
perftest_passed() {
	perftest_side_passed "$2" && perftest_side_passed "$3" || return 1
	[ "$2/$3" = ok/ok ] || note "$1: perftest's TSC calibration failed (client: $2, server: $3)," \
		"the run passed: figures not measured"
}

# perftest_repeat CO SO: whether a pair that did not pass is run again: a side's calibration
# stopped it ("clock") and the other side passed, was stopped, or failed only because that
# side quit ("peer").
perftest_repeat() {
	[ "$1" != fail ] && [ "$2" != fail ] && { [ "$1" = clock ] || [ "$2" = clock ]; }
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
	for ((try = 1; try <= PERFTEST_TRIES; try++)); do
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
			perftest_side_passed "$co" || ! kill -0 "$spid" 2>/dev/null || kill "$spid" 2>/dev/null || true
			rc=0
			wait "$spid" || rc=$?
			so=$(perftest_outcome "$rc" "$PERFTEST_SERVER_LOG")
			# The server we stopped after the client failed: its status says nothing.
			perftest_side_passed "$co" || [ "$rc" != 143 ] || so=stopped
		fi
		[ "$FERRDMA_NVMS" = 1 ] || so=$(barrier_word "$name-$try-server" "$snode" "$so")
		perftest_passed "$name" "$co" "$so" && return 0
		if [ "$try" -lt "$PERFTEST_TRIES" ] && perftest_repeat "$co" "$so"; then
			# Announced once, by the node that runs the client.
			[ "$connect" = 0 ] || retrying "$name" "perftest's TSC calibration failed" \
				"(client: $co, server: $so: Correlation coefficient r^2 below 0.9)"
			continue
		fi
		[ "$connect" = 0 ] || { echo "--- $name client: $* $addr"; cat "$PERFTEST_CLIENT_LOG"; } >&2
		[ "$serve" = 0 ] || { echo "--- $name server: $*"; cat "$PERFTEST_SERVER_LOG"; } >&2
		# make bench records a missing figure instead (both nodes agreed on the outcome).
		if [ "$PERFTEST_FAILS" = skip ]; then
			note "$name: $1 failed (client: $co, server: $so): no figure"
			return 1
		fi
		fail "$name: $1 failed (client: $co, server: $so)"
	done
}
