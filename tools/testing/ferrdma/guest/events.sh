# SPDX-License-Identifier: GPL-2.0
#
# Completion- and asynchronous-event tests (tests/events-*.sh), the same on every RoCE device.
# A test is a one-line wrapper:
#     . "$FERRDMA_HARNESS/guest/events.sh"; events_main KIND TEST [PROGRAM ARGS...]
# KIND picks the device (rdma_dev_up): "rxe" is soft RoCE on eth0 (rdma_rxe and the UDP
# tunnel modules from the booted kernel's build tree), "ferrdma" the VM's ferrdma NIC. TEST is one of the verbs test programs
# (progs/, built by progs/build.sh): "solicited" (solicited-events), "stress" (event-stress,
# twice: a channel per thread, then one channel shared by all threads), "destroy"
# (destroy-race), "errors" (error-events), "cq-resize" (cq-resize) or "async" (async-events,
# while the link goes down and up). Around the run: kmemleak cleared, no verbs object of the test left behind, device
# and modules removed, kmemleak clean. events_two_vms KIND runs stock event-driven tools
# between two VMs.
. "$FERRDMA_HARNESS/guest/lib.sh"

EVENTS_DEV=
EVENTS_KIND=
EVENTS_GID_INDEX=
# A bash snippet that takes the device's link down and up again (async test).
EVENTS_LINK_TOGGLE=
RXE_MODULES=(net/ipv4/udp_tunnel.ko net/ipv6/ip6_udp_tunnel.ko drivers/infiniband/sw/rxe/rdma_rxe.ko)

# wait_rocev2_gid DEVICE [SECONDS]: waits (default 30 s) until port 1 of DEVICE has the RoCE
# v2 GID of this VM's IPv4 address (ib_core adds it some time after the device appears;
# lib.sh's roce_v2_gid_index finds it); sets EVENTS_GID_INDEX to its index.
wait_rocev2_gid() {
	local dev=$1 end=$((SECONDS + ${2:-30})) idx
	while :; do
		idx=$(roce_v2_gid_index "$dev")
		if [ -n "$idx" ]; then
			EVENTS_GID_INDEX=$idx
			note "$dev: RoCE v2 GID $idx is $(cat "/sys/class/infiniband/$dev/ports/1/gids/$idx")"
			return 0
		fi
		[ "$SECONDS" -lt "$end" ] || break
		nap 0.2
	done
	ip addr show eth0 >&2 || true
	rdma link show >&2 || true
	fail "$dev has no RoCE v2 IPv4-mapped GID after ${2:-30}s"
}

# rdma_dev_up KIND: brings up the device of KIND and sets EVENTS_DEV to its name.
rdma_dev_up() {
	EVENTS_KIND=$1
	case $1 in
	rxe)
		load_kmods "${RXE_MODULES[@]}"
		rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"
		EVENTS_DEV=rxe0
		EVENTS_LINK_TOGGLE='ip link set eth0 down; sleep 2; ip link set eth0 up'
		;;
	ferrdma)
		need_nic
		load_ferrdma
		wait_probe 1 >/dev/null
		EVENTS_DEV=ferrdma0
		# The port follows the virtio-net it is bound to (same MAC): ib_core reports its
		# link changes as port events.
		EVENTS_LINK_TOGGLE='ip link set eth0 down; sleep 2; ip link set eth0 up'
		;;
	*)
		fail "rdma_dev_up: unknown device kind $1"
		;;
	esac
	wait_rocev2_gid "$EVENTS_DEV"
	note "$EVENTS_DEV up: $(rdma link show "$EVENTS_DEV/1")"
}

# rdma_dev_down: removes what rdma_dev_up set up.
rdma_dev_down() {
	case $EVENTS_KIND in
	rxe)
		rdma link delete "$EVENTS_DEV" || fail "rdma link delete $EVENTS_DEV failed"
		rmmod rdma_rxe ip6_udp_tunnel udp_tunnel || fail "rmmod of rdma_rxe and the UDP tunnel modules failed"
		[ ! -d /sys/module/rdma_rxe ] || fail "rdma_rxe is still loaded after rmmod"
		;;
	ferrdma)
		unload_ferrdma
		;;
	esac
}

# events_main KIND TEST [ARGS...]: the whole test (see the top of this file); ARGS go to the
# test program (e.g. --sabotage, to see it fail).
events_main() {
	local kind=$1 test=$2 progs before after
	shift 2
	progs=$(test_progs_dir)
	kmemleak_clear
	rdma_dev_up "$kind"
	# The kernel's own objects (rxe: the GSI QP's PD, CQ and QP) are there before and after.
	before=$(rdma res show "$EVENTS_DEV")
	case $test in
	solicited)
		"$progs/solicited-events" "$EVENTS_DEV" "$@" || fail "solicited-events on $EVENTS_DEV failed"
		;;
	stress)
		"$progs/event-stress" "$EVENTS_DEV" "$@" || fail "event-stress on $EVENTS_DEV failed"
		"$progs/event-stress" "$EVENTS_DEV" --shared "$@" ||
			fail "event-stress --shared on $EVENTS_DEV failed"
		;;
	destroy)
		"$progs/destroy-race" "$EVENTS_DEV" "$@" || fail "destroy-race on $EVENTS_DEV failed"
		;;
	errors)
		"$progs/error-events" "$EVENTS_DEV" "$@" || fail "error-events on $EVENTS_DEV failed"
		;;
	cq-resize)
		"$progs/cq-resize" "$EVENTS_DEV" "$@" || fail "cq-resize on $EVENTS_DEV failed"
		;;
	limits)
		"$progs/limits" "$EVENTS_DEV" "$@" || fail "limits on $EVENTS_DEV failed"
		"$progs/mcast-datacheck" --limits "$EVENTS_DEV" ||
			fail "multicast limits on $EVENTS_DEV failed"
		;;
	rereg-mr)
		"$progs/rereg-mr" "$EVENTS_DEV" "$@" || fail "rereg-mr on $EVENTS_DEV failed"
		;;
	dmabuf-mr)
		"$progs/dmabuf-mr" "$EVENTS_DEV" "$@" || fail "dmabuf-mr on $EVENTS_DEV failed"
		;;
	async)
		"$progs/async-events" "$EVENTS_DEV" -e port-err,port-active "$@" -- \
			bash -c "sleep 1; $EVENTS_LINK_TOGGLE" ||
			fail "async-events on $EVENTS_DEV failed"
		;;
	*)
		fail "events_main: unknown test $test"
		;;
	esac
	after=$(rdma res show "$EVENTS_DEV")
	note "rdma res: $after"
	[ "$after" = "$before" ] || fail "verbs objects left behind: before the test: $before; after: $after"
	rdma_dev_down
	kmemleak_check "$test events on $kind"
	note "$test events on $kind: passed"
}

# peer_tool NAME PORT CMD...: a client/server tool between the two VMs: node 1 runs CMD as the
# server and, once it listens on TCP PORT, node 2 runs CMD PEER_IP as the client (once: the
# server is known to listen). Both must exit 0.
peer_tool() {
	local name=$1 port=$2 pid rc=0
	shift 2
	barrier "$name-start" 120
	if [ "$FERRDMA_NODE" = 1 ]; then
		note "$name: server: $*"
		timeout 120 "$@" > "/tmp/$name.server" 2>&1 &
		pid=$!
		wait_listen "$port"
		barrier "$name-listening" 60
		wait "$pid" || rc=$?
		[ "$rc" = 0 ] || { cat "/tmp/$name.server"; fail "$name server ($*) failed with status $rc"; }
		note "$name: server: $(grep -m1 'bytes in' "/tmp/$name.server" || true)"
	else
		barrier "$name-listening" 60
		note "$name: client: $* $FERRDMA_PEER_IP"
		timeout 120 "$@" "$FERRDMA_PEER_IP" > "/tmp/$name.client" 2>&1 || rc=$?
		[ "$rc" = 0 ] || { cat "/tmp/$name.client"; fail "$name client ($* $FERRDMA_PEER_IP) failed with status $rc"; }
		note "$name: client: $(grep -m1 'bytes in' "/tmp/$name.client" || true)"
	fi
	barrier "$name-done" 180
}

# peer_perftest NAME TOOL ARGS...: perftest's TOOL between the two VMs, node 1 serving (lib.sh's
# perftest_pair); the client must report a result row.
peer_perftest() {
	local name=$1
	shift
	barrier "$name-start" 120
	PERFTEST_TIMEOUT=120 perftest_pair "$name" 1 "$FERRDMA_PEER_IP" "$@"
	if [ "$FERRDMA_NODE" = 2 ]; then
		grep -qE '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" ||
			{ cat "$PERFTEST_CLIENT_LOG"; fail "$name: $1 printed no result row"; }
		note "$name: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" | tail -1 | tr -s ' \t' ' ')"
	fi
	barrier "$name-done" 180
}

# events_two_vms KIND: stock event-driven tools between the two VMs' devices of KIND
# (issue 6): ibv_rc_pingpong -e, ib_send_lat -e and ib_send_bw -e, node 1 serving; then the
# same cleanup checks as events_main.
events_two_vms() {
	local kind=$1 before after
	[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs (FERRDMA_NVMS=$FERRDMA_NVMS)"
	kmemleak_clear
	rdma_dev_up "$kind"
	before=$(rdma res show "$EVENTS_DEV")
	ping_peer "$FERRDMA_PEER_IP" 90
	peer_tool rc_pingpong 18515 ibv_rc_pingpong -d "$EVENTS_DEV" -g "$EVENTS_GID_INDEX" -e -n 200 -p 18515
	peer_perftest send_lat ib_send_lat -d "$EVENTS_DEV" -x "$EVENTS_GID_INDEX" -e -F -C -n 200 -p 18516
	peer_perftest send_bw ib_send_bw -d "$EVENTS_DEV" -x "$EVENTS_GID_INDEX" -e -F -n 200 -p 18517
	after=$(rdma res show "$EVENTS_DEV")
	note "rdma res: $after"
	[ "$after" = "$before" ] || fail "verbs objects left behind: before the test: $before; after: $after"
	rdma_dev_down
	kmemleak_check "event-driven tools on $kind"
	barrier finished 120
	note "event-driven tools between two VMs on $kind: passed"
}
