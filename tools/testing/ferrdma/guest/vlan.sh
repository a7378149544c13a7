# SPDX-License-Identifier: GPL-2.0
#
# RoCE over a VLAN (802.1Q): VLAN 100 on eth0 (eth0.100, 10.78.0.N/24), whose RoCE v2 GIDs
# ib_core gives to the RDMA port of eth0 (ferrdma's and rxe's alike: rxe binds to real
# devices only, and takes a packet for a VLAN GID only from that VLAN's device).
. "$FERRDMA_HARNESS/guest/lib.sh"

VLAN_ID=100
VLAN_DEV=eth0.$VLAN_ID
VLAN_MY_IP=10.78.0.$FERRDMA_NODE
VLAN_PEER_IP=10.78.0.$((3 - FERRDMA_NODE))

# vlan_up: creates and addresses eth0.100.
vlan_up() {
	ip link add link eth0 name "$VLAN_DEV" type vlan id "$VLAN_ID" || fail "cannot add $VLAN_DEV"
	ip addr add "$VLAN_MY_IP/24" dev "$VLAN_DEV" || fail "cannot address $VLAN_DEV"
	ip link set "$VLAN_DEV" up || fail "cannot bring $VLAN_DEV up"
}

# vlan_gid DEV: waits (30 s at most) for DEV's RoCE v2 GID of this VM's VLAN address, checks
# that it belongs to eth0.100, and prints its index.
vlan_gid() {
	local dev=$1 end=$((SECONDS + 30)) idx ndev
	until idx=$(roce_v2_gid_index "$dev" "$VLAN_MY_IP") && [ -n "$idx" ]; do
		[ "$SECONDS" -lt "$end" ] || fail "$dev has no RoCE v2 GID for $VLAN_MY_IP after 30s"
		nap 0.2
	done
	ndev=$(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/ndevs/$idx")
	[ "$ndev" = "$VLAN_DEV" ] || fail "$dev GID $idx ($VLAN_MY_IP) belongs to '$ndev', not $VLAN_DEV"
	echo "$idx"
}

# vlan_roce_up DEV: eth0.100 up on both nodes, DEV still bound to eth0 and given the VLAN's
# RoCE v2 GID, the peer answering over the VLAN (barrier vlan-up); sets VLAN_GID to that GID's
# index.
vlan_roce_up() {
	vlan_up
	vlan_expect_port_on_eth0 "$1"
	VLAN_GID=$(vlan_gid "$1")
	note "$1: VLAN GID $VLAN_GID on $VLAN_DEV"
	ping_peer "$VLAN_PEER_IP" 60
	barrier vlan-up 120
}

# vlan_expect_port_on_eth0 DEV: DEV's port is still bound to eth0 (not to eth0.100, which has
# the same MAC) and still has its untagged GID.
vlan_expect_port_on_eth0() {
	local link
	link=$(rdma link show "$1/1")
	has_line "netdev eth0( |$)" <<< "$link" || fail "$1 left eth0 when $VLAN_DEV appeared: $link"
	[ -n "$(roce_v2_gid_index "$1")" ] || fail "$1 lost its untagged GID for $FERRDMA_IP"
}
