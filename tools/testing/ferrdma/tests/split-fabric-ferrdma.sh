#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=600 split-fabric=bridge pcap-vlan=100 long=yes
#
# Fabrics across host networking (issue 20): each VM's ferrdma NIC and virtio-net sit on a
# fabric process of their own, in a network namespace of its own; each fabric joins one end
# of a veth pair (ferrdma-nic --interface), the other ends are on a Linux bridge in the
# harness's namespace. Across it RC and UD data checked both ways, also over VLAN 100 with
# the tags checked in both captures, and rping (guest/split.sh).
. "$FERRDMA_HARNESS/guest/split.sh"
split_fabric_main "a Linux bridge"
