#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=600 split-fabric=vxlan pcap-vlan=100 long=yes
#
# Fabrics across host networking over a VXLAN (issue 20): as split-fabric-ferrdma, but each
# fabric's interface is a VXLAN device (VNI 42) whose underlay is the veth pair on the
# bridge: every frame between the fabrics, RoCEv2 included, crosses UDP encapsulation in
# the host's stack. RC and UD data checked both ways, also over VLAN 100 (tags checked in
# both captures), and rping (guest/split.sh).
. "$FERRDMA_HARNESS/guest/split.sh"
split_fabric_main "a VXLAN"
