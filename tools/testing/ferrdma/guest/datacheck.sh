# SPDX-License-Identifier: GPL-2.0
#
# Helpers of the data-checking tests (tests/datacheck-*.sh), around progs/verbs-datacheck:
# every byte of RC SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ and UD SEND messages of
# many sizes, SGE layouts and offsets is checked against a seeded pattern, and so are the
# completions (see the top of progs/verbs-datacheck.c). A run passes only if the program
# exits 0 and printed its PASS line; its per-size lines go to the test's output as the record.
. "$FERRDMA_HARNESS/guest/lib.sh"

DATACHECK_PORT=18516
DATACHECK_LOGS=/tmp/datacheck
# Seconds one run of the program may take (the harness's timeout is the backstop).
DATACHECK_TIMEOUT=${DATACHECK_TIMEOUT:-400}
mkdir -p "$DATACHECK_LOGS"
DATACHECK_BIN="$(test_progs_dir)/verbs-datacheck"

# datacheck_expect_pass LOG WHAT STATUS: fails unless STATUS is 0 and LOG has the client's
# PASS line (or, with WHAT ending in "server", the server's).
datacheck_expect_pass() {
	local log=$1 what=$2 rc=$3 re='^verbs-datacheck: PASS: '
	[ "${what%server}" = "$what" ] || re='^verbs-datacheck: server: PASS: '
	[ "$rc" = 0 ] || { cat "$log"; fail "$what: verbs-datacheck failed with status $rc"; }
	grep -qE "$re" "$log" || { cat "$log"; fail "$what: verbs-datacheck printed no PASS line"; }
	cat "$log"
}

# datacheck_loopback NAME DEVICE ARGS...: verbs-datacheck on DEVICE in loopback (a forked
# server on the same device, over a socketpair); must pass.
datacheck_loopback() {
	local name=$1 log=$DATACHECK_LOGS/$1.log rc=0 t0=$SECONDS
	shift
	note "$name: verbs-datacheck $*"
	timeout "$DATACHECK_TIMEOUT" "$DATACHECK_BIN" "$@" > "$log" 2>&1 || rc=$?
	datacheck_expect_pass "$log" "$name" "$rc"
	note "$name: passed ($((SECONDS - t0))s)"
}

# datacheck_tcp_loopback NAME DEVICE GIDX ARGS...: a server and a client process on this VM,
# over TCP on 127.0.0.1; both must pass.
datacheck_tcp_loopback() {
	local name=$1 dev=$2 gidx=$3 slog=$DATACHECK_LOGS/$1.server clog=$DATACHECK_LOGS/$1.client
	local spid rc=0 t0=$SECONDS
	shift 3
	note "$name: verbs-datacheck server and client on $dev over TCP: $*"
	timeout "$DATACHECK_TIMEOUT" "$DATACHECK_BIN" "$dev" -g "$gidx" --server -p "$DATACHECK_PORT" \
		> "$slog" 2>&1 &
	spid=$!
	wait_listen "$DATACHECK_PORT"
	timeout "$DATACHECK_TIMEOUT" "$DATACHECK_BIN" "$dev" -g "$gidx" --client 127.0.0.1 \
		-p "$DATACHECK_PORT" "$@" > "$clog" 2>&1 || rc=$?
	[ "$rc" = 0 ] || { cat "$slog"; kill "$spid" 2>/dev/null || true; wait "$spid" || true; }
	datacheck_expect_pass "$clog" "$name client" "$rc"
	rc=0
	wait "$spid" || rc=$?
	datacheck_expect_pass "$slog" "$name server" "$rc"
	note "$name: passed ($((SECONDS - t0))s)"
}

# datacheck_pair NAME SNODE DEVICE GIDX ARGS...: between two VMs: node SNODE serves, the other
# node runs the client with ARGS. The client is the requester: SEND and WRITE data go from
# the client to the server, READ data from the server to the client. Both must pass.
datacheck_pair() {
	local name=$1 snode=$2 dev=$3 gidx=$4 log=$DATACHECK_LOGS/$1 pid rc=0 t0=$SECONDS
	shift 4
	if [ "$FERRDMA_NODE" = "$snode" ]; then
		note "$name: server on $dev (GID index $gidx)"
		timeout "$DATACHECK_TIMEOUT" "$DATACHECK_BIN" "$dev" -g "$gidx" --server \
			-p "$DATACHECK_PORT" > "$log.server" 2>&1 &
		pid=$!
		wait_listen "$DATACHECK_PORT"
	fi
	barrier "$name-listening" 180
	if [ "$FERRDMA_NODE" = "$snode" ]; then
		wait "$pid" || rc=$?
		datacheck_expect_pass "$log.server" "$name server" "$rc"
	else
		note "$name: client on $dev (GID index $gidx): $*"
		timeout "$DATACHECK_TIMEOUT" "$DATACHECK_BIN" "$dev" -g "$gidx" --client "$FERRDMA_PEER_IP" \
			-p "$DATACHECK_PORT" "$@" > "$log.client" 2>&1 || rc=$?
		datacheck_expect_pass "$log.client" "$name client" "$rc"
	fi
	barrier "$name-done" "$DATACHECK_TIMEOUT"
	note "$name: passed ($((SECONDS - t0))s)"
}
