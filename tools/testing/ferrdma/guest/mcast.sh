# SPDX-License-Identifier: GPL-2.0
#
# Helpers of the multicast tests (tests/mcast-*.sh): UD multicast through the RDMA CM with
# progs/mcast-datacheck (every message of a seeded series received once, in order, by every
# joined QP, every byte, immediate, GRH and source QP checked; see the top of the program)
# and with the stock librdmacm tool mckey. Receivers start first and say when their QPs
# have joined; senders start only then (UD is unreliable: a message sent before a QP joined
# is lost to it by design).
. "$FERRDMA_HARNESS/guest/events.sh"

MCAST_LOGS=/tmp/mcast
MCAST_BIN="$(test_progs_dir)/mcast-datacheck"
MCAST_TIMEOUT=240
mkdir -p "$MCAST_LOGS"

# mcast_route_up: multicast leaves through eth0 (the VMs have no default route).
mcast_route_up() {
	ip route replace 224.0.0.0/4 dev eth0 || fail "cannot route 224.0.0.0/4 through eth0"
}

# mcast_recv_start NAME GROUP QPS COUNT SEED SOURCE_IP: starts a receiver of COUNT messages
# on QPS QPs in the background and waits (60 s at most) until all its QPs joined GROUP.
mcast_recv_start() {
	local name=$1 end=$((SECONDS + 60))
	rm -f "$MCAST_LOGS/$name.ready"
	timeout "$MCAST_TIMEOUT" "$MCAST_BIN" --recv -b "$FERRDMA_IP" -m "$2" -q "$3" -c "$4" \
		-S "$5" -f "$6" -t $((MCAST_TIMEOUT - 20)) -r "$MCAST_LOGS/$name.ready" \
		> "$MCAST_LOGS/$name.recv" 2>&1 &
	eval "MCAST_PID_${name//-/_}=$!"
	until [ -e "$MCAST_LOGS/$name.ready" ]; do
		if [ "$SECONDS" -ge "$end" ] || ! kill -0 "$!" 2>/dev/null; then
			cat "$MCAST_LOGS/$name.recv"
			fail "$name: the receiver did not join $2 within 60s"
		fi
		nap 0.2
	done
	note "$name: receiver joined $2 with $3 QPs"
}

# mcast_recv_finish NAME: waits for receiver NAME; it must exit 0 with its PASS line.
mcast_recv_finish() {
	local name=$1 pidvar="MCAST_PID_${1//-/_}" rc=0
	wait "${!pidvar}" || rc=$?
	cat "$MCAST_LOGS/$name.recv"
	[ "$rc" = 0 ] || fail "$name: the multicast receiver failed with status $rc"
	grep -q '^mcast-datacheck: PASS: ' "$MCAST_LOGS/$name.recv" ||
		fail "$name: the multicast receiver printed no PASS line"
	note "$name: receiver passed"
}

# mcast_send NAME GROUP COUNT SEED: sends COUNT messages to GROUP; must succeed.
mcast_send() {
	local name=$1 rc=0
	timeout "$MCAST_TIMEOUT" "$MCAST_BIN" --send -b "$FERRDMA_IP" -m "$2" -c "$3" -S "$4" \
		> "$MCAST_LOGS/$name.send" 2>&1 || rc=$?
	cat "$MCAST_LOGS/$name.send"
	[ "$rc" = 0 ] || fail "$name: the multicast sender failed with status $rc"
	grep -q "^mcast-datacheck: sent $3 messages" "$MCAST_LOGS/$name.send" ||
		fail "$name: the multicast sender printed no 'sent' line"
}

# mcast_pair NAME RNODE GROUP QPS COUNT SEED: node RNODE receives on QPS QPs, the other node
# sends; both must pass.
mcast_pair() {
	local name=$1 rnode=$2 group=$3 qps=$4 count=$5 seed=$6
	if [ "$FERRDMA_NODE" = "$rnode" ]; then
		mcast_recv_start "$name" "$group" "$qps" "$count" "$seed" "$FERRDMA_PEER_IP"
		barrier "$name-joined" 120
		mcast_recv_finish "$name"
		barrier "$name-done" "$MCAST_TIMEOUT"
	else
		barrier "$name-joined" 120
		mcast_send "$name" "$group" "$count" "$seed"
		barrier "$name-done" "$MCAST_TIMEOUT"
	fi
}

# mcast_mckey NAME RNODE GROUP COUNT: the stock mckey, node RNODE receiving COUNT messages,
# the other node sending them; both must exit 0 and the receiver must report the transfers
# complete.
mcast_mckey() {
	local name=$1 rnode=$2 group=$3 count=$4 log=$MCAST_LOGS/$1.mckey rc=0 pid end
	if [ "$FERRDMA_NODE" = "$rnode" ]; then
		timeout "$MCAST_TIMEOUT" stdbuf -oL mckey -m "$group" -b "$FERRDMA_IP" -C "$count" > "$log" 2>&1 &
		pid=$!
		end=$((SECONDS + 60))
		until grep -q "receiving data transfers" "$log"; do
			if [ "$SECONDS" -ge "$end" ] || ! kill -0 "$pid" 2>/dev/null; then
				cat "$log"
				fail "$name: mckey did not join $group within 60s"
			fi
			nap 0.2
		done
		barrier "$name-joined" 120
		wait "$pid" || rc=$?
		cat "$log"
		[ "$rc" = 0 ] || fail "$name: the mckey receiver failed with status $rc"
		grep -q "data transfers complete" "$log" || fail "$name: mckey received no transfers"
		barrier "$name-done" "$MCAST_TIMEOUT"
	else
		barrier "$name-joined" 120
		timeout "$MCAST_TIMEOUT" stdbuf -oL mckey -m "$group" -b "$FERRDMA_IP" -s -C "$count" > "$log" 2>&1 || rc=$?
		cat "$log"
		[ "$rc" = 0 ] || fail "$name: the mckey sender failed with status $rc"
		barrier "$name-done" "$MCAST_TIMEOUT"
	fi
	note "$name: mckey passed"
}
