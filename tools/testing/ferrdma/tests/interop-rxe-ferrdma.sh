#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 nics=1 check-pcap=yes timeout=900 smp=2
#
# Interoperability with Linux soft RoCE on the fabric: node 1 has a ferrdma NIC (ferrdma0),
# node 2 is a plain VM running rxe (rxe0 on its virtio-net, which the fabric switches like any
# RoCEv2 station). Stock tools between them, each once with node 1 serving and once with
# node 2 serving: ibv_rc_pingpong (data checked, RoCE v2 over IPv4 and over IPv6 GIDs),
# ibv_ud_pingpong, perftest's ib_send_bw, ib_write_bw and ib_read_bw at a size larger than the
# 1024-byte path MTU (single-packet messages of every size are datacheck-rxe-ferrdma's), rping -V (rdma_cm, data verified) and udaddy over IPv4
# and IPv6. Afterwards the harness checks the fabric's capture (check-pcap=yes): RoCEv2
# frames both ways, and every one passes ferrdma-nic's parser and ICRC check.
#
# perftest runs by lib.sh's perftest_pair (a run that failed only on perftest's TSC
# calibration is repeated once), with a QP timeout of 2^18 x 4.096 us (-u 18, about 1 s a try): rxe under
# TCG can take more than the default 2^14's half second in all (7 retries of 67 ms) to
# acknowledge a window of 128 packets from ferrdma, and every retransmitted window makes it
# slower still (seen as RETRY_EXC in ib_send_bw -s 9000 with node 2 serving; the capture
# shows rxe's ACKs arriving 640 ms after the packets, no protocol error).
# Two vCPUs (smp=2): rxe moves its packets in the guest's softirqs, beside the programs (one
# vCPU made this test 1.4x slower).
. "$FERRDMA_HARNESS/guest/cm.sh"
[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs"

LOGS=/tmp/interop
mkdir -p "$LOGS"
CM_MODE=two
TIMEOUT=150
PERFTEST_TIMEOUT=$TIMEOUT

if [ "$FERRDMA_NODE" = 1 ]; then
	[ "$FERRDMA_HAVE_NIC" = 1 ] || fail "node 1 needs the ferrdma NIC (header nics=1)"
	rdma_dev_up ferrdma
else
	[ "$FERRDMA_HAVE_NIC" = 0 ] || fail "node 2 must be a plain VM (header nics=1), it has a ferrdma NIC"
	rdma_dev_up rxe
fi
DEV=$EVENTS_DEV
GID4=$EVENTS_GID_INDEX
ping_peer "$FERRDMA_PEER_IP" 90
cm_ipv6_up

# gid6_index: the index of DEV's RoCE v2 GID of this node's ULA.
gid6_index() {
	local d=/sys/class/infiniband/$DEV/ports/1 f
	while read -r f; do
		[ "$(cat "$d/gid_attrs/types/${f##*/}" 2>/dev/null)" = "RoCE v2" ] && { echo "${f##*/}"; return 0; }
	done < <(grep -lx "$(cm_gid6_hex "$FERRDMA_NODE")" "$d"/gids/* 2>/dev/null)
	fail "$DEV has no RoCE v2 GID for $(cm_ip6 "$FERRDMA_NODE")"
}
GID6=$(gid6_index)
note "$DEV: RoCE v2 GIDs: IPv4 index $GID4, IPv6 index $GID6; $(ibv_devinfo -d "$DEV" | grep -E 'active_mtu|state' | tr -s ' \t' ' ' | tr '\n' ';')"
barrier up 180

# pair NAME SNODE WAIT SRE CRE -- SERVER... -- CLIENT...: SERVER runs on node SNODE and, once
# it listens (WAIT: tcp:PORT, a TCP listener; cm:PORT, an rdma_cm listener), CLIENT on the
# other node. Both must exit 0; the server's and the client's output must match the extended
# regexes SRE and CRE (empty: no check).
pair() {
	local name=$1 snode=$2 wait=$3 sre=$4 cre=$5 log=$LOGS/$1 pid rc t0=$SECONDS
	local -a srv=() cli=()
	shift 5
	[ "$1" = -- ] || fail "pair: bad arguments"
	shift
	while [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	if [ "$FERRDMA_NODE" = "$snode" ]; then
		note "$name: server ($DEV): ${srv[*]}"
		timeout "$TIMEOUT" "${srv[@]}" > "$log.server" 2>&1 &
		pid=$!
		case $wait in
		tcp:*) wait_listen "${wait#tcp:}" ;;
		cm:*) cm_wait_listener "$pid" "${wait#cm:}" "$log.server" ;;
		esac
	fi
	barrier "$name-listening" 120
	if [ "$FERRDMA_NODE" = "$snode" ]; then
		rc=0
		wait "$pid" || rc=$?
		[ "$rc" = 0 ] || { cat "$log.server" >&2; fail "$name: server (${srv[*]}) failed with status $rc"; }
		[ -z "$sre" ] || grep -qE -- "$sre" "$log.server" ||
			{ cat "$log.server" >&2; fail "$name: server output lacks '$sre'"; }
	else
		note "$name: client ($DEV): ${cli[*]}"
		CM_TIMEOUT=$TIMEOUT cm_client "$log.client" "${cli[@]}" ||
			{ rc=$?; cat "$log.client" >&2; fail "$name: client (${cli[*]}) failed with status $rc"; }
		[ -z "$cre" ] || grep -qE -- "$cre" "$log.client" ||
			{ cat "$log.client" >&2; fail "$name: client output lacks '$cre'"; }
		note "$name: $(grep -m1 -E -- "${cre:-.}" "$log.client" | tr -s ' \t' ' ' | cut -c1-100)"
	fi
	barrier "$name-done" 180
	note "$name: passed ($((SECONDS - t0))s)"
}

# The server's addresses, by the node that serves.
ip4() { echo "10.77.0.$1"; }

BW_ROW='^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
for s in 1 2; do
	c=$((3 - s))
	tag="s$s"
	note "=== node $s serves ($( [ $s = 1 ] && echo ferrdma || echo rxe)), node $c connects"
	pair "rc_pingpong-v4-$tag" $s tcp:18515 'bytes in' 'bytes in' -- \
		ibv_rc_pingpong -d "$DEV" -g "$GID4" -n 100 -s 4096 -c -- \
		ibv_rc_pingpong -d "$DEV" -g "$GID4" -n 100 -s 4096 -c "$(ip4 $s)"
	pair "rc_pingpong-v6-$tag" $s tcp:18515 'bytes in' 'bytes in' -- \
		ibv_rc_pingpong -d "$DEV" -g "$GID6" -n 50 -s 2000 -c -- \
		ibv_rc_pingpong -d "$DEV" -g "$GID6" -n 50 -s 2000 -c "$(ip4 $s)"
	pair "ud_pingpong-$tag" $s tcp:18515 'bytes in' 'bytes in' -- \
		ibv_ud_pingpong -d "$DEV" -g "$GID4" -n 100 -s 512 -- \
		ibv_ud_pingpong -d "$DEV" -g "$GID4" -n 100 -s 512 "$(ip4 $s)"
	for tool in ib_send_bw ib_write_bw ib_read_bw; do
		opts=(-d "$DEV" -x "$GID4" -m 1024 -u 18 -n 50 -F)
		# perftest makes the client's max_rd_atomic the server's outstanding reads, which
		# default to the server's device limit (rxe 128, ferrdma 16): pin both to 16.
		[ "$tool" = ib_read_bw ] && opts+=(-o 16)
		for size in 9000; do
			perftest_pair "$tool-$size-$tag" $s "$(ip4 $s)" "$tool" "${opts[@]}" -s "$size"
			if [ "$FERRDMA_NODE" = "$c" ]; then
				grep -qE -- "$BW_ROW" "$PERFTEST_CLIENT_LOG" ||
					{ cat "$PERFTEST_CLIENT_LOG" >&2; fail "$tool-$size-$tag: client output lacks '$BW_ROW'"; }
				note "$tool-$size-$tag: $(grep -m1 -E -- "$BW_ROW" "$PERFTEST_CLIENT_LOG" | tr -s ' \t' ' ' | cut -c1-100)"
			fi
			barrier "$tool-$size-$tag-done" 180
		done
	done
	for fam in 4 6; do
		if [ $fam = 4 ]; then sa=$(ip4 $s); else sa=$(cm_ip6 $s); fi
		port=$((7300 + 10 * s + fam))
		pair "rping-v$fam-$tag" $s cm:$port '^server ping data: rdma-ping-' '^ping data: rdma-ping-' -- \
			rping -s -a "$sa" -p $port -v -V -C 10 -S 4000 -- \
			rping -c -a "$sa" -p $port -v -V -C 10 -S 4000
		# udaddy always uses port 7174.
		pair "udaddy-v$fam-$tag" $s cm:7174 '^return status 0$' '^return status 0$' -- \
			udaddy -b "$sa" -c 2 -C 10 -- \
			udaddy -s "$sa" -c 2 -C 10
	done
done

barrier finished 120
note "interop between ferrdma (node 1) and rxe (node 2) passed on node $FERRDMA_NODE"
