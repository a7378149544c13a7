#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=verbs
#
# A process holding a user context:
#   * stock ibv_asyncwatch sees IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE on port 1 when the
#     port's netdev (eth0) goes down and up again;
#   * rmmod while the context is open succeeds (the driver has disassociate_ucontext, so an
#     open uverbs file no longer pins the module), and ibv_asyncwatch sees
#     IBV_EVENT_DEVICE_FATAL. verbs-removal-ferrdma covers a process holding every kind of
#     object.
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

unload_ferrdma
for _ in $(seq 100); do grep -q IBV_EVENT_DEVICE_FATAL /tmp/asyncwatch && break; sleep 0.1; done
kill "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true
cat /tmp/asyncwatch
grep -q "IBV_EVENT_DEVICE_FATAL" /tmp/asyncwatch || fail "no DEVICE_FATAL event after rmmod with the context open"
note "verbs-async-rmmod test passed"
