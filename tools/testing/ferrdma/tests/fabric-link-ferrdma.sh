#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=480
#
# Pulling a cable on the fabric (ferrdma-nic --control through the harness, lib.sh's
# fabric_ctl) in the middle of RDMA traffic between two ferrdma VMs. Node 1 runs an
# ib_write_bw client (10 s, 64 KiB WRITEs) to node 2 and takes node 2's cable (its
# virtio-net's and its NIC's fabric ports) out:
#   short  for 2 s, with a QP timeout of 4.096 us * 2^18 (about 1.1 s a try, 7 retries): RC
#          retransmits once the link is back and both ends finish with their result rows;
#   long   for 8 s, with the default timeout 2^14 (67 ms a try, about 0.5 s in all): the
#          client's WRITE completes with "transport retry counter exceeded" (status 12) and
#          the tool exits non-zero; the server must end too, within a bound.
# The pull is what the guest sees of a real one: node 2's eth0 loses its carrier and its RDMA
# port goes DOWN (ib_core reports IB_EVENT_PORT_ERR), then both come back (PORT_ACTIVE).
# The fabric's counters (stats) must show frames the down link swallowed, and the client
# NIC's port counters (sysfs hw_counters) the retransmission timeouts and the packets it sent
# again; bad requests get an error reply. Afterwards the VMs talk again (ping and a short
# ib_write_bw, over which the two NICs' counters must agree: every WRITE and every packet one
# sent, the other received, nothing sent again; `rdma statistic` shows the same counters), no
# verbs object is left, kmemleak is clean, and the harness checks for kernel splats.
. "$FERRDMA_HARNESS/guest/lib.sh"
two_vms_up

if [ "$FERRDMA_NODE" = 1 ]; then
	note "fabric: $(fabric_ctl help | sed -n 1p)"
	! fabric_ctl link lan:7 down > /tmp/bad.log || fail "link lan:7 down was accepted"
	grep -q '^error: no lan:7' /tmp/bad.log || { cat /tmp/bad.log; fail "unexpected reply to a bad port"; }
	! fabric_ctl fault 0 drop=3 > /tmp/bad.log || fail "fault 0 drop=3 was accepted"
	! fabric_ctl reboot now > /tmp/bad.log || fail "an unknown command was accepted"
	note "bad requests refused: $(tail -1 /tmp/bad.log)"
fi

# watch_link: follows node 2's eth0 carrier and RDMA port state for up to 60 s; prints
# "carrier-and-port-down T" when both are down and then "carrier-and-port-up T" when both are
# back (T: seconds since the start).
watch_link() {
	local t0=$SECONDS carrier state down=0
	while ((SECONDS - t0 < 60)); do
		carrier=$(cat /sys/class/net/eth0/carrier 2>/dev/null || echo 0)
		state=$(cat /sys/class/infiniband/ferrdma0/ports/1/state)
		if [ "$down" = 0 ] && [ "$carrier" = 0 ] && [[ $state == *DOWN* ]]; then
			echo "carrier-and-port-down $((SECONDS - t0))"
			down=1
		elif [ "$down" = 1 ] && [ "$carrier" = 1 ] && [[ $state == *ACTIVE* ]]; then
			echo "carrier-and-port-up $((SECONDS - t0))"
			return 0
		fi
		sleep 0.1
	done
	echo "timeout: carrier $carrier, port $state"
}

# outage NAME SECONDS QP_TIMEOUT EXPECT: ib_write_bw node 1 -> node 2 with -u QP_TIMEOUT for
# 10 s; node 2's cable goes out for SECONDS in the middle. EXPECT: "ok" (both ends succeed) or
# "retry-exceeded" (the client fails with status 12, the server ends too).
outage() {
	local name=$1 secs=$2 to=$3 expect=$4 pid rc=0 log=/tmp/$1.log t0
	if [ "$FERRDMA_NODE" = 2 ]; then
		stdbuf -oL ibv_asyncwatch -d ferrdma0 > "/tmp/$name.async" 2>&1 &
		local awatch=$!
		watch_link > "/tmp/$name.link" &
		local lwatch=$!
		timeout 90 ib_write_bw -d ferrdma0 -x "$gid" -s 65536 -D 10 -u "$to" -F > "$log" 2>&1 &
		pid=$!
		wait_listen 18515
		barrier "$name-listening" 60
		t0=$SECONDS
		wait "$pid" || rc=$?
		note "$name: server ended after $((SECONDS - t0))s with status $rc"
		wait "$lwatch" || { cat "/tmp/$name.link"; fail "$name: the link watcher failed"; }
		kill "$awatch"; wait "$awatch" 2>/dev/null || true
		note "$name: $(tr '\n' ' ' < "/tmp/$name.link")"
		grep -q '^carrier-and-port-down ' "/tmp/$name.link" ||
			{ cat "/tmp/$name.link"; fail "$name: eth0's carrier and the RDMA port never went down together"; }
		grep -q '^carrier-and-port-up ' "/tmp/$name.link" ||
			{ cat "/tmp/$name.link"; fail "$name: eth0's carrier and the RDMA port did not come back"; }
		grep -q 'IBV_EVENT_PORT_ERR.*port 1' "/tmp/$name.async" &&
			grep -q 'IBV_EVENT_PORT_ACTIVE.*port 1' "/tmp/$name.async" ||
			{ cat "/tmp/$name.async"; fail "$name: no PORT_ERR then PORT_ACTIVE async event"; }
		note "$name: async events: $(grep -o 'IBV_EVENT_PORT_[A-Z]*' "/tmp/$name.async" | tr '\n' ' ')"
		[ "$rc" != 124 ] || { cat "$log"; fail "$name: the server still ran after 90s"; }
		if [ "$expect" = ok ]; then
			[ "$rc" = 0 ] || { cat "$log"; fail "$name: the server failed with status $rc"; }
		fi
	else
		barrier "$name-listening" 60
		local rto0 retrans0
		rto0=$(hw_counter RTO) retrans0=$(hw_counter RetransPkts)
		timeout 90 ib_write_bw -d ferrdma0 -x "$gid" -s 65536 -D 10 -u "$to" -F "$FERRDMA_PEER_IP" > "$log" 2>&1 &
		pid=$!
		sleep 4 # connected and writing
		kill -0 "$pid" 2>/dev/null || { cat "$log"; fail "$name: the client ended before the outage"; }
		note "$name: node 2's cable out for ${secs}s"
		fabric_cable_out 2 "$secs"
		fabric_ctl stats > /tmp/stats.log # the counters outlive the outage
		note "$name: cable back; $(grep ' nic:1 ' /tmp/stats.log)"
		grep ' nic:1 ' /tmp/stats.log | has_line -v ' down_dropped=0 ' ||
			{ cat /tmp/stats.log; fail "$name: the down link dropped nothing?"; }
		wait "$pid" || rc=$?
		note "$name: client ended with status $rc"
		local rto=$(($(hw_counter RTO) - rto0)) retrans=$(($(hw_counter RetransPkts) - retrans0))
		note "$name: port counters: $rto retransmission timeouts, $retrans packets sent again"
		[ "$rto" -gt 0 ] && [ "$retrans" -gt 0 ] ||
			fail "$name: the outage left no trace in the port counters (RTO +$rto, RetransPkts +$retrans)"
		case $expect in
		ok)
			[ "$rc" = 0 ] || { cat "$log"; fail "$name: the client failed with status $rc after a ${secs}s outage"; }
			grep -qE '^ +65536 +[0-9]+ +[0-9.]+ +[0-9.]+' "$log" || { cat "$log"; fail "$name: no result row"; }
			note "$name: $(grep -E '^ +65536 ' "$log" | tr -s ' ')"
			;;
		retry-exceeded)
			if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
				cat "$log"
				fail "$name: the client exited with status $rc; expected a failure"
			fi
			grep -qE 'Failed status 12|retry counter exceeded' "$log" ||
				{ cat "$log"; fail "$name: the client did not report a retry-exceeded completion"; }
			note "$name: $(grep -m1 -E 'Failed status 12|retry counter exceeded' "$log")"
			;;
		esac
	fi
	barrier "$name-done" 120
	expect_no_verbs_objects
}

outage short 2 18 ok
outage long 8 14 retry-exceeded

# The link is back: the LAN and RDMA work again.
ping_peer "$FERRDMA_PEER_IP" 30
barrier again 60
# counters NAME...: this node's values of the named counters, comma-separated.
counters() {
	local n out=
	for n in "$@"; do out+=$(hw_counter "$n"),; done
	echo "${out%,}"
}
names=(OutRdmaWrites InRdmaWrites ip4OutPkts ip4InPkts ip4OutOctets ip4InOctets RetransPkts)
before=$(counters "${names[@]}")
PERFTEST_TIMEOUT=60 perftest_pair again 2 "$FERRDMA_PEER_IP" ib_write_bw -d ferrdma0 -x "$gid" -s 65536 -n 200 -F
if [ "$FERRDMA_NODE" = 1 ]; then
	grep -qE '^ +65536 +[0-9]+ +[0-9.]+ +[0-9.]+' "$PERFTEST_CLIENT_LOG" ||
		{ cat "$PERFTEST_CLIENT_LOG"; fail "ib_write_bw after the outages: no result row"; }
	note "after the outages: $(grep -E '^ +65536 ' "$PERFTEST_CLIENT_LOG" | tr -s ' ')"
fi
# The counters of both NICs over that run (node 1 wrote to node 2): deltas in ${names[@]} order.
after=$(counters "${names[@]}")
IFS=, read -ra b <<< "$before"
IFS=, read -ra a <<< "$after"
d=()
for i in "${!names[@]}"; do d[i]=$((a[i] - b[i])); done
mine=$(IFS=,; echo "${d[*]}")
other=$(barrier_word counters $((3 - FERRDMA_NODE)) "$mine")
IFS=, read -ra o <<< "$other"
note "port counter deltas over the run (${names[*]}): here $mine, on the peer $other"
if [ "$FERRDMA_NODE" = 1 ]; then
	# perftest_pair may have run the tool twice (a failed clock calibration): n x 200 WRITEs.
	[ "${d[0]}" -gt 0 ] && [ $((d[0] % 200)) = 0 ] ||
		fail "the client's NIC counted ${d[0]} WRITE requests for runs of 200"
	[ "${d[0]}" = "${o[1]}" ] || fail "WRITEs: ${d[0]} sent, the peer counted ${o[1]} received"
	[ "${d[2]}" = "${o[3]}" ] || fail "packets: ${d[2]} sent, the peer counted ${o[3]} received"
	[ "${d[4]}" = "${o[5]}" ] || fail "IP octets: ${d[4]} sent, the peer counted ${o[5]} received"
	[ "${d[2]}" -ge $((d[0] * 16)) ] || fail "${d[2]} packets for ${d[0]} WRITEs of 64 KiB (4096-byte MTU at most)"
	[ "${d[4]}" -gt $((d[0] * 65536)) ] || fail "${d[4]} IP octets for ${d[0]} WRITEs of 64 KiB"
	[ "${d[6]}" = 0 ] || fail "${d[6]} packets sent again on a clean link"
	rdma statistic show link ferrdma0/1 > /tmp/rdma-statistic || fail "rdma statistic show failed"
	has_line "OutRdmaWrites $(hw_counter OutRdmaWrites)( |$)" < /tmp/rdma-statistic ||
		{ cat /tmp/rdma-statistic; fail "rdma statistic does not show the sysfs OutRdmaWrites"; }
fi
barrier finished 60
expect_no_verbs_objects
unload_ferrdma
kmemleak_check "fabric link outages"
note "fabric-link test passed on node $FERRDMA_NODE"
