#!/bin/bash
# The `make run` demo, run in every VM by the harness: bring up the ferrdma function with the
# Rust driver and show what the guest sees. Grows with the driver (ibv_devinfo, ib_write_bw...).
set -euo pipefail
. "$FERRDMA_HARNESS/guest/lib.sh"
me="vm$FERRDMA_NODE"
echo "$me: $(uname -r), LAN $FERRDMA_IP${FERRDMA_PEER_IP:+, peer $FERRDMA_PEER_IP}"
echo "$me: ferrdma PCI function: $(lspci -nn -d 1234:fe10)"
insmod "$FERRDMA_KO"
dmesg | grep -E 'ferrdma .*: (probe ok|probe)' | sed "s/^/$me: dmesg: /"
dmesg | grep -E 'ferrdma .*: (admin queue up|registered)' | sed "s/^/$me: dmesg: /"
echo "$me: rdma link: $(rdma link show ferrdma0/1)"
ibv_devices | sed "s/^/$me: /"
ibv_devinfo -d ferrdma0 | grep -E 'hca_id|fw_ver|node_guid|vendor|hw_ver|state|active_mtu|link_layer' | sed "s/^/$me: /"
grep -E 'ferrdma' /proc/interrupts | awk -v me="$me" '{ print me ": irq " $1 " " $NF }' || true
if [ -n "${FERRDMA_PEER_IP:-}" ]; then
	ping -c 2 -W 5 "$FERRDMA_PEER_IP" | sed "s/^/$me: /"
	barrier pinged 120   # stay up until the peer has pinged us too
fi
rmmod ferrdma
dmesg | grep -E 'ferrdma .*: removed' | sed "s/^/$me: dmesg: /"
echo "$me: demo done"
