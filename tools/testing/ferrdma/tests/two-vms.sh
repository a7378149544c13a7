#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=400
#
# Both VMs load ferrdma.ko and check the probe line (see probe.sh for the expected text), then
# ping each other over the LAN: proves that both VMs run, that the harness hands out node
# numbers and addresses (10.77.0.1 and 10.77.0.2) and that the virtio-net link works. The
# barrier keeps each VM up until its peer has pinged it too.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic
[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs (FERRDMA_NVMS=$FERRDMA_NVMS)"
[ "$FERRDMA_IP" = "10.77.0.$FERRDMA_NODE" ] || fail "node $FERRDMA_NODE has address $FERRDMA_IP"
[ "$FERRDMA_PEER_IP" = "10.77.0.$((3 - FERRDMA_NODE))" ] || fail "node $FERRDMA_NODE's peer is $FERRDMA_PEER_IP"
note "node $FERRDMA_NODE: $FERRDMA_IP, peer $FERRDMA_PEER_IP"
ip -4 -o addr show dev eth0

load_ferrdma
note "probe line: $(wait_probe 1)"

note "pinging $FERRDMA_PEER_IP"
ping_peer "$FERRDMA_PEER_IP" 90
barrier pinged 120

unload_ferrdma
note "two-VM test passed on node $FERRDMA_NODE"
