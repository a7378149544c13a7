#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300
#
# A process holding a user context:
#   * stock ibv_asyncwatch sees IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE on port 1 when the
#     port's netdev (eth0) goes down and up again;
#   * rmmod while the context is open is refused ("in use"): the ib_device ops carry the
#     module as owner, so every open uverbs file pins it (there is no disassociate_ucontext);
#   * once the process has exited, rmmod succeeds.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

load_ferrdma
wait_probe 1 >/dev/null

stdbuf -oL ibv_asyncwatch -d ferrdma0 > /tmp/asyncwatch 2>&1 &
watcher=$!
for _ in $(seq 50); do grep -q "async event FD" /tmp/asyncwatch && break; sleep 0.1; done
grep -q "async event FD" /tmp/asyncwatch || { cat /tmp/asyncwatch; fail "ibv_asyncwatch did not open ferrdma0"; }

ip link set eth0 down
for _ in $(seq 50); do grep -q IBV_EVENT_PORT_ERR /tmp/asyncwatch && break; sleep 0.1; done
ip link set eth0 up
for _ in $(seq 50); do grep -q IBV_EVENT_PORT_ACTIVE /tmp/asyncwatch && break; sleep 0.1; done
cat /tmp/asyncwatch
grep -q "IBV_EVENT_PORT_ERR (10), port 1" /tmp/asyncwatch || fail "no PORT_ERR event after eth0 down"
grep -q "IBV_EVENT_PORT_ACTIVE (9), port 1" /tmp/asyncwatch || fail "no PORT_ACTIVE event after eth0 up"

if rmmod ferrdma 2>/tmp/rmmod.err; then
	fail "rmmod succeeded while ibv_asyncwatch held a context"
fi
grep -q "in use" /tmp/rmmod.err || fail "rmmod failed for another reason: $(cat /tmp/rmmod.err)"
module_loaded || fail "ferrdma is gone although rmmod failed"
note "rmmod refused while a context is open: $(cat /tmp/rmmod.err)"

kill "$watcher"
wait "$watcher" 2>/dev/null || true
unload_ferrdma
note "verbs-async-rmmod test passed"
