#!/bin/bash
# The `make run` demo, run in every VM by the harness: bring up the ferrdma function with the
# Rust driver, show what the guest sees and move data with stock rdma-core and perftest tools.
set -euo pipefail
. "$FERRDMA_HARNESS/guest/lib.sh"
me="vm$FERRDMA_NODE"
# Jumbo frames on the LAN, so RoCE between the VMs runs at path MTU 4096 (as make bench).
ip link set eth0 mtu 9000
echo "$me: $(uname -r), LAN $FERRDMA_IP${FERRDMA_PEER_IP:+, peer $FERRDMA_PEER_IP}, MTU 9000"
echo "$me: ferrdma PCI function: $(lspci -nn -d 1234:fe10)"
insmod "$FERRDMA_KO"
dmesg | grep -E 'ferrdma .*: (probe ok|probe)' | sed "s/^/$me: dmesg: /"
dmesg | grep -E 'ferrdma .*: (admin queue up|registered)' | sed "s/^/$me: dmesg: /"
echo "$me: rdma link: $(rdma link show ferrdma0/1)"
ibv_devices | sed "s/^/$me: /"
ibv_devinfo -d ferrdma0 | grep -E 'hca_id|fw_ver|node_guid|vendor|hw_ver|state|active_mtu|link_layer' | sed "s/^/$me: /"
gid=$(wait_gid ferrdma0)
echo "$me: RoCE v2 GID index $gid: $(cat /sys/class/infiniband/ferrdma0/ports/1/gids/$gid)"
# Stock libibverbs + libirdma + perftest + librdmacm: first two processes of this VM through its own NIC
# (the NIC's loopback), then, with two VMs, node 2 serving and node 1 connecting over the
# fabric, RoCEv2 on the wire between the two NICs.
ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 200 -s 4096 -e > /tmp/pp-server.log 2>&1 &
wait_listen 18515
ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 200 -s 4096 -e 127.0.0.1 | grep -E 'bytes in|iters in' | sed "s/^/$me: ibv_rc_pingpong -e (loopback): /"
wait
if [ -n "${FERRDMA_PEER_IP:-}" ]; then
	ping -c 2 -W 5 "$FERRDMA_PEER_IP" | sed "s/^/$me: /"
	if [ "$FERRDMA_NODE" = 2 ]; then
		ib_write_bw -d ferrdma0 -x "$gid" -s 65536 -n 1000 > /tmp/bw.log 2>&1 &
		wait_listen 18515
		barrier listening 120
		wait
	else
		barrier listening 120
		ib_write_bw -d ferrdma0 -x "$gid" -s 65536 -n 1000 "$FERRDMA_PEER_IP" > /tmp/bw.log 2>&1
	fi
	grep -E '^ +#bytes|^ +65536' /tmp/bw.log | sed "s/^/$me: ib_write_bw vm1 -> vm2: /" || true
	# The RDMA CM through the kernel's ib_cm over ferrdma's GSI QP: rping with data
	# verification, vm1 connecting to vm2's IP address.
	if [ "$FERRDMA_NODE" = 2 ]; then
		timeout 120 rping -s -a "$FERRDMA_IP" -p 7000 -V -C 10 > /tmp/rping.log 2>&1 &
		barrier rping-listening 120
		wait
	else
		barrier rping-listening 120
		for i in 1 2 3 4 5; do
			timeout 60 rping -c -a "$FERRDMA_PEER_IP" -p 7000 -V -v -C 10 > /tmp/rping.log 2>&1 && break
			sleep 1
		done
		tail -1 /tmp/rping.log | sed "s/^/$me: rping -V -C 10 vm1 -> vm2: last ping: /"
	fi
	echo "$me: rping: $(rdma res show cm_id | grep -c ferrdma0 || true) cm_ids left; GSI: $(rdma res show qp | grep 'type GSI' | sed 's/ comm.*//')"
	barrier done 120   # stay up until the peer is done too
fi
grep -E 'ferrdma' /proc/interrupts | awk -v me="$me" '{ print me ": irq " $1 " " $(NF-1) " " $NF " count " $2 + $3 }' || true
rmmod ferrdma
dmesg | grep -E 'ferrdma .*: removed' | sed "s/^/$me: dmesg: /"
echo "$me: demo done"
