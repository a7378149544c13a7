#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=device
#
# The RDMA device: after insmod the driver registers ferrdma0 with one RoCEv2 port bound to
# eth0 (the virtio-net with the NIC's MAC). Checks, with stock iproute2 (rdma) and sysfs:
#   * "registered ferrdma0" in dmesg; node GUID = modified EUI-64 of the MAC;
#   * rdma link: ferrdma0/1 ACTIVE, LINK_UP, netdev eth0; link layer Ethernet;
#   * the GID table: the link-local GID from the MAC and the IPv4-mapped GID of $FERRDMA_IP,
#     of type RoCE v2, on eth0;
#   * the port follows its netdev: eth0 down -> port DOWN, up -> ACTIVE; giving eth0 another
#     MAC unbinds the port (no netdev), restoring the MAC binds it again;
#   * rmmod removes ferrdma0.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

port=/sys/class/infiniband/ferrdma0/ports/1

# Waits up to $2 seconds for "$1" (a command) to succeed.
wait_for() {
	local i
	for i in $(seq "$(($2 * 10))"); do
		eval "$1" && return 0
		sleep 0.1
	done
	return 1
}

# The value after the word $1 in "rdma link show ferrdma0/1".
link_field() { rdma link show ferrdma0/1 | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }

load_ferrdma
wait_probe 1 >/dev/null
# grep reads all of dmesg (no -q): an early exit would SIGPIPE dmesg and fail the pipeline.
dmesg | grep "ferrdma .*: registered ferrdma0" >/dev/null || fail "no 'registered ferrdma0' line in dmesg"
[ -d "$port" ] || fail "$port does not exist"

mac=$(cat /sys/class/net/eth0/address)
[ "$mac" = "$FERRDMA_MAC" ] || fail "eth0 has MAC $mac, expected $FERRDMA_MAC"
IFS=: read -r m0 m1 m2 m3 m4 m5 <<<"$mac"
guid=$(printf '%02x%02x:%02xff:fe%02x:%02x%02x' $((0x$m0 ^ 2)) 0x$m1 0x$m2 0x$m3 0x$m4 0x$m5)
got=$(cat /sys/class/infiniband/ferrdma0/node_guid)
note "node GUID $got (expected $guid)"
[ "$got" = "$guid" ] || fail "node GUID $got, expected $guid"

note "$(rdma link show ferrdma0/1)"
[ "$(link_field state)" = ACTIVE ] || fail "port state $(link_field state), expected ACTIVE"
[ "$(link_field physical_state)" = LINK_UP ] || fail "physical state $(link_field physical_state)"
[ "$(link_field netdev)" = eth0 ] || fail "port netdev '$(link_field netdev)', expected eth0"
[ "$(cat $port/link_layer)" = Ethernet ] || fail "link layer $(cat $port/link_layer)"

# GIDs: fe80::<EUI-64> and ::ffff:<IPv4>, both RoCE v2 (each appears as v1 and v2).
ll="fe80:0000:0000:0000:${guid:0:4}:${guid:5:4}:${guid:10:4}:${guid:15:4}"
IFS=. read -r a b c d <<<"$FERRDMA_IP"
v4=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
found_ll= found_v4=
# bash's read, not cat: three execs per entry of the 32 took 26 s of TCG time.
for g in "$port"/gids/*; do
	i=${g##*/}
	read -r gid < "$g"
	type= ndev=
	read -r type 2>/dev/null < "$port/gid_attrs/types/$i" || true
	read -r ndev 2>/dev/null < "$port/gid_attrs/ndevs/$i" || true
	[ "$type" = "RoCE v2" ] && [ "$ndev" = eth0 ] || continue
	[ "$gid" = "$ll" ] && found_ll=$i
	[ "$gid" = "$v4" ] && found_v4=$i
done
[ -n "$found_ll" ] || fail "no RoCE v2 GID $ll on eth0"
[ -n "$found_v4" ] || fail "no RoCE v2 GID $v4 ($FERRDMA_IP) on eth0"
note "RoCE v2 GIDs: $ll at $found_ll, $v4 at $found_v4"

ip link set eth0 down
wait_for '[ "$(link_field state)" = DOWN ]' 10 || fail "port state $(link_field state) after eth0 down"
ip link set eth0 up
wait_for '[ "$(link_field state)" = ACTIVE ]' 10 || fail "port state $(link_field state) after eth0 up"
note "port follows eth0 down/up"

ip link set eth0 address 52:54:00:aa:bb:cc
wait_for '[ -z "$(link_field netdev)" ]' 10 || fail "port still bound to $(link_field netdev) after a MAC change"
ip link set eth0 address "$mac"
wait_for '[ "$(link_field netdev)" = eth0 ]' 10 || fail "port not rebound to eth0 after restoring the MAC"
note "port follows eth0's MAC: unbound and rebound"

unload_ferrdma
[ ! -e /sys/class/infiniband/ferrdma0 ] || fail "ferrdma0 still exists after rmmod"
note "ib-device test passed"
