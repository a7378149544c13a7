# SPDX-License-Identifier: GPL-2.0
#
# The kernel's RDMA storage and file ULPs between two VMs (tests/ulp-*.sh, issue 20): node 1
# serves, node 2 is the client, over ferrdma0 (or rxe0, the baseline). Each test:
#     ulp_two_vms KIND NAME   with functions NAME_server, NAME_client, NAME_server_down,
#                             NAME_client_down defined by the protocol's part below
# brings the device up, records `rdma res`, runs the protocol with data checks in both
# directions (the client writes, the server compares the bytes that reached its disk or
# directory; the server writes, the client reads and compares), tears it down, unloads every
# module it loaded, and then `rdma res` must be what it was and kmemleak clean (suspects in an
# unloaded module count: kmemleak shows their frames as bare module addresses).
# On ferrdma the NIC's counters must show the RDMA operations the protocol is built on
# (ulp_expect_ops); the harness checks the wire's opcodes too (test header pcap-opcodes=).
#
# The tests run on the ULP kernel (header ulp=yes; scripts/kernel.sh ulp, kernel/configs/
# ulp.config): make check's kernel has none of these modules. They are loaded with modprobe
# from that build's modroot (scripts/kernel-build.sh installs them there with their
# modules.dep), bind-mounted on /lib/modules: the ULPs need chains of modules and the
# kernel's own request_module (crypto algorithms, NLS tables).
. "$FERRDMA_HARNESS/guest/nvmeof.sh"

ULP_MODULES=()
ULP_PATTERNS=/tmp/ulp-patterns

# ulp_modprobe MODULE...: loads each module and what it needs; remembered for ulp_unload.
ulp_modprobe() {
	local m
	if ! mountpoint -q /lib/modules; then
		[ -n "${FERRDMA_KBUILD:-}" ] || fail "FERRDMA_KBUILD is empty: no kernel build tree"
		[ -d "$FERRDMA_KBUILD/modroot/lib/modules/$(uname -r)" ] ||
			fail "no $FERRDMA_KBUILD/modroot/lib/modules/$(uname -r): rebuild the kernel (scripts/kernel.sh ulp installs the modules there)"
		mount --bind "$FERRDMA_KBUILD/modroot/lib/modules" /lib/modules || fail "cannot bind-mount the modules on /lib/modules"
	fi
	for m in "$@"; do
		modprobe "$m" || { dmesg | tail -20 >&2; fail "modprobe $m failed"; }
		ULP_MODULES+=("$m")
	done
}

# ulp_unload: removes the modules ulp_modprobe loaded (last first) with what they pulled in.
ulp_unload() {
	local i
	for ((i = ${#ULP_MODULES[@]} - 1; i >= 0; i--)); do
		modprobe -r "${ULP_MODULES[$i]}" || { lsmod >&2; fail "modprobe -r ${ULP_MODULES[$i]} failed"; }
	done
	note "modules removed: ${ULP_MODULES[*]}"
	ULP_MODULES=()
}

# ulp_pattern NAME BYTES: prints the path of a file of BYTES pseudo-random bytes that depends
# only on NAME and BYTES, so both VMs make the same one without sending it.
ulp_pattern() {
	local f="$ULP_PATTERNS/$1.$2"
	mkdir -p "$ULP_PATTERNS"
	[ -f "$f" ] || python3 -c '
import random, sys
sys.stdout.buffer.write(random.Random(sys.argv[1] + "/" + sys.argv[2]).randbytes(int(sys.argv[2])))
' "$1" "$2" > "$f" || fail "cannot make pattern $1 of $2 bytes"
	echo "$f"
}

# The sizes written each way: inline sends, a page, chunked transfers, several MiB.
ULP_SIZES=(200 4096 65536 1048576 8388608)

# The NIC's RDMA operation counters at ulp_counter_snapshot, by name.
declare -A ULP_COUNTERS

# ulp_counter_snapshot: remembers the NIC's RDMA operation counters (ferrdma only).
ulp_counter_snapshot() {
	local c
	ULP_COUNTERS=()
	[ "$EVENTS_KIND" = ferrdma ] || return 0
	for c in InRdmaReads InRdmaWrites InRdmaSends OutRdmaReads OutRdmaWrites OutRdmaSends; do
		ULP_COUNTERS[$c]=$(hw_counter "$c")
	done
}

# ulp_expect_ops WHAT COUNTER...: each counter (e.g. OutRdmaReads) must have grown since
# ulp_counter_snapshot: the protocol used that operation. On rxe only noted.
ulp_expect_ops() {
	local what=$1 c now delta line=""
	shift
	if [ "$EVENTS_KIND" != ferrdma ]; then
		note "$what: operation counters not checked on $EVENTS_DEV"
		return 0
	fi
	for c in "$@"; do
		now=$(hw_counter "$c")
		delta=$((now - ULP_COUNTERS[$c]))
		line+=" $c +$delta"
		[ "$delta" -gt 0 ] || fail "$what: the NIC's $c did not grow (+0): the protocol should have used it"
	done
	note "$what: NIC counters:$line"
}

# ulp_two_vms KIND NAME: the whole test (see the top).
ulp_two_vms() {
	local kind=$1 name=$2
	[ "$FERRDMA_NVMS" = 2 ] || fail "this test needs 2 VMs (FERRDMA_NVMS=$FERRDMA_NVMS)"
	kmemleak_clear
	rdma_dev_up "$kind"
	ping_peer "$FERRDMA_PEER_IP" 90
	ulp_res_record
	ulp_counter_snapshot
	if [ "$FERRDMA_NODE" = 1 ]; then
		"${name}_server"
	else
		"${name}_client"
	fi
	barrier "$name-finished" 300
	ulp_unload
	ulp_res_check "$name"
	barrier "$name-clean" 120
	rdma_dev_down
	kmemleak_check "$name over $EVENTS_DEV"
	note "$name between two VMs on $EVENTS_DEV: passed"
}

# ulp_files_write DIR PREFIX: writes one file per size of ULP_SIZES into DIR, patterns
# PREFIX.SIZE, and syncs them.
ulp_files_write() {
	local dir=$1 prefix=$2 size p
	for size in "${ULP_SIZES[@]}"; do
		p=$(ulp_pattern "$prefix" "$size")
		dd if="$p" of="$dir/$prefix.$size" bs=1M conv=fsync status=none ||
			fail "writing $dir/$prefix.$size failed"
	done
	note "wrote ${#ULP_SIZES[@]} files ($prefix.*: ${ULP_SIZES[*]} bytes) into $dir"
}

# ulp_files_check DIR PREFIX HOW: every file ulp_files_write DIR PREFIX made must equal its
# pattern; HOW says how it is read (for the note).
ulp_files_check() {
	local dir=$1 prefix=$2 how=$3 size p
	for size in "${ULP_SIZES[@]}"; do
		p=$(ulp_pattern "$prefix" "$size")
		[ -f "$dir/$prefix.$size" ] || fail "$dir/$prefix.$size is missing ($how)"
		cmp "$dir/$prefix.$size" "$p" >&2 || fail "$dir/$prefix.$size differs from its pattern ($how)"
	done
	note "${#ULP_SIZES[@]} files $prefix.* in $dir identical to their patterns ($how)"
}

# --- NFS over RDMA: NFSv4.1 on port 20049 ------------------------------------------------------
# The server (knfsd) exports a directory on tmpfs; the client mounts it with proto=rdma. Large
# WRITEs travel in RPC-over-RDMA read chunks the server pulls with RDMA READ, large READ
# replies in write chunks it pushes with RDMA WRITE, and the server answers with Send With
# Invalidate (the Linux client offers remote invalidation).
NFS_EXPORT=/tmp/nfs-export
NFS_MNT=/mnt/nfs
NFS_PORT=20049

nfs_server() {
	ulp_modprobe nfsd rpcrdma
	# The server's state (etab, rmtab, v4recovery) needs a writable /var/lib/nfs.
	mount -t tmpfs -o mode=755 tmpfs /var/lib/nfs
	mkdir -p /var/lib/nfs/rpc_pipefs /var/lib/nfs/nfsdcld "$NFS_EXPORT"
	touch /var/lib/nfs/etab /var/lib/nfs/rmtab
	mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
	# knfsd keeps its NFSv4 clients' records through nfsdcld (without it, it waits for the
	# upcall to time out, then serves without).
	mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs || fail "cannot mount rpc_pipefs"
	nfsdcld || fail "nfsdcld did not start"
	# The shortest grace period knfsd allows (10 s, not 90): a new server refuses OPENs until
	# it is over, and the client waits that out.
	echo 10 > /proc/fs/nfsd/nfsv4gracetime
	echo 10 > /proc/fs/nfsd/nfsv4leasetime
	# fsid=0: the export is the root of the server's NFSv4 namespace, so no parent directory
	# has to be exported (the guests' root is 9p, which knfsd cannot export).
	exportfs -o rw,sync,no_root_squash,insecure,no_subtree_check,fsid=0 "$FERRDMA_PEER_IP:$NFS_EXPORT" ||
		fail "exportfs of $NFS_EXPORT failed"
	rpcbind -w || fail "rpcbind did not start"
	rpc.mountd -N 2 -N 3 || fail "rpc.mountd did not start"
	rpc.nfsd -N 3 --rdma="$NFS_PORT" 4 || { dmesg | tail -20 >&2; fail "rpc.nfsd did not start"; }
	grep -qx "rdma $NFS_PORT" /proc/fs/nfsd/portlist ||
		fail "knfsd does not listen on rdma $NFS_PORT: $(tr '\n' ' ' < /proc/fs/nfsd/portlist)"
	note "knfsd: versions $(cat /proc/fs/nfsd/versions), listening on $(tr '\n' ' ' < /proc/fs/nfsd/portlist)"
	barrier nfs-server-up 180
	barrier nfs-client-wrote 600
	ulp_files_check "$NFS_EXPORT" nfs-client "on the server's disk"
	ulp_files_write "$NFS_EXPORT" nfs-server
	barrier nfs-server-wrote 120
	barrier nfs-client-read 600
	ulp_expect_ops "NFS/RDMA server" OutRdmaReads OutRdmaWrites InRdmaSends OutRdmaSends
	barrier nfs-client-unmounted 120
	rpc.nfsd 0 || fail "rpc.nfsd 0 (stopping knfsd) failed"
	exportfs -ua
	pkill -x rpc.mountd || true
	pkill -x nfsdcld || true
	pkill -x rpcbind || true
	umount /proc/fs/nfsd
	umount /var/lib/nfs/rpc_pipefs
	umount /var/lib/nfs
	rm -rf "$NFS_EXPORT"
}

nfs_client() {
	ulp_modprobe nfsv4 rpcrdma
	mkdir -p "$NFS_MNT"
	barrier nfs-server-up 180
	mount -t nfs4 -o vers=4.1,proto=rdma,port="$NFS_PORT" "$FERRDMA_PEER_IP:/" "$NFS_MNT" ||
		{ dmesg | tail -20 >&2; fail "mount -t nfs4 -o proto=rdma of $FERRDMA_PEER_IP:/ failed"; }
	note "mounted: $(grep " $NFS_MNT " /proc/mounts)"
	grep " $NFS_MNT " /proc/mounts | has_line 'proto=rdma' || fail "the mount is not over RDMA"
	ulp_files_write "$NFS_MNT" nfs-client
	# O_DIRECT reads go to the server, not to the page cache the writes filled.
	for size in "${ULP_SIZES[@]}"; do
		cmp <(dd if="$NFS_MNT/nfs-client.$size" bs=1M iflag=direct status=none) \
			"$(ulp_pattern nfs-client "$size")" >&2 || fail "O_DIRECT read of nfs-client.$size differs"
	done
	note "O_DIRECT reads of the files written: identical"
	barrier nfs-client-wrote 120
	barrier nfs-server-wrote 600
	echo 3 > /proc/sys/vm/drop_caches
	ulp_files_check "$NFS_MNT" nfs-server "read by the client over NFS/RDMA"
	ulp_expect_ops "NFS/RDMA client" InRdmaReads InRdmaWrites InRdmaSends OutRdmaSends
	barrier nfs-client-read 120
	umount "$NFS_MNT" || fail "umount $NFS_MNT failed"
	barrier nfs-client-unmounted 120
}

# --- Block ULPs: the data checks on a SCSI disk the client sees ------------------------------
# The target exports a 32 MiB file on tmpfs through LIO (target_core_file), filled beforehand
# with pattern "<name>-server": the client first reads the whole disk with O_DIRECT and
# compares (the target's RDMA WRITEs into the client's buffers), then writes pattern
# "<name>-client" over the first 27 MiB in O_DIRECT blocks of 4 KiB..4 MiB, six writers at once
# for the last 12 MiB (RDMA READs of the client's buffers), reads it back and compares; after
# the logout the target compares its file with that pattern.
ULP_DISK_MB=32
ULP_WRITE_MB=27

# ulp_block_fill FILE NAME: a backing file of ULP_DISK_MB MiB holding pattern NAME.
ulp_block_fill() {
	cp "$(ulp_pattern "$2" $((ULP_DISK_MB << 20)))" "$1" || fail "cannot fill $1"
}

# ulp_block_client_io DEV NAME: the client's part (above) on block device DEV.
ulp_block_client_io() {
	local dev=$1 name=$2 p q bs mib off pids=() i
	p=$(ulp_pattern "$name-server" $((ULP_DISK_MB << 20)))
	cmp <(dd if="$dev" bs=1M iflag=direct status=none) "$p" >&2 ||
		fail "O_DIRECT read of $dev differs from the target's file (pattern $name-server)"
	note "$dev: ${ULP_DISK_MB} MiB read with O_DIRECT, identical to the target's file"
	q=$(ulp_pattern "$name-client" $((ULP_DISK_MB << 20)))
	for bs in "4k 1 0" "64k 2 1" "1M 4 3" "4M 8 7"; do
		read -r bs mib off <<< "$bs"
		dd if="$q" of="$dev" bs="$bs" iflag=skip_bytes,count_bytes oflag=direct,seek_bytes \
			skip=$((off << 20)) seek=$((off << 20)) count=$((mib << 20)) status=none ||
			fail "O_DIRECT write of $mib MiB in blocks of $bs at $off MiB failed"
	done
	i=0
	for bs in 4k 16k 64k 128k 512k 1M; do
		off=$((15 + 2 * i))
		dd if="$q" of="$dev" bs="$bs" iflag=skip_bytes,count_bytes oflag=direct,seek_bytes \
			skip=$((off << 20)) seek=$((off << 20)) count=$((2 << 20)) status=none &
		pids+=($!)
		i=$((i + 1))
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "concurrent O_DIRECT writer $i failed"
	done
	cmp <(dd if="$dev" bs=1M count="$ULP_WRITE_MB" iflag=direct status=none) \
		<(head -c $((ULP_WRITE_MB << 20)) "$q") >&2 ||
		fail "O_DIRECT read-back of the ${ULP_WRITE_MB} MiB written differs (pattern $name-client)"
	note "$dev: ${ULP_WRITE_MB} MiB written with O_DIRECT (blocks of 4 KiB..4 MiB, 6 writers at once) and read back identical"
}

# ulp_block_target_check FILE NAME: after the client is gone, FILE must hold the client's
# pattern over what it wrote and the target's own beyond.
ulp_block_target_check() {
	local f=$1 name=$2
	cmp <(head -c $((ULP_WRITE_MB << 20)) "$f") <(head -c $((ULP_WRITE_MB << 20)) "$(ulp_pattern "$name-client" $((ULP_DISK_MB << 20)))") >&2 ||
		fail "the target's file differs from what the client wrote (first ${ULP_WRITE_MB} MiB)"
	cmp <(tail -c +$(((ULP_WRITE_MB << 20) + 1)) "$f") \
		<(tail -c +$(((ULP_WRITE_MB << 20) + 1)) "$(ulp_pattern "$name-server" $((ULP_DISK_MB << 20)))") >&2 ||
		fail "the target's file changed beyond what the client wrote"
	note "target file: the client's ${ULP_WRITE_MB} MiB arrived intact, the rest untouched"
}

# ulp_wait_disk: prints the SCSI disk (/dev/sdX) that appears within 60 s.
ulp_wait_disk() {
	local end=$((SECONDS + 60)) d
	while :; do
		for d in /sys/block/sd*; do
			[ -e "$d" ] && [ -b "/dev/${d##*/}" ] && { echo "/dev/${d##*/}"; return 0; }
		done
		[ "$SECONDS" -lt "$end" ] || break
		nap 0.2
	done
	dmesg | tail -30 >&2
	fail "no SCSI disk appeared within 60 s"
}

# ulp_wait_no_disk: waits until no SCSI disk is left (60 s).
ulp_wait_no_disk() {
	local end=$((SECONDS + 60)) d any
	while :; do
		any=
		for d in /sys/block/sd*; do [ -e "$d" ] && any=$d; done
		[ -n "$any" ] || return 0
		[ "$SECONDS" -lt "$end" ] || fail "$any still exists 60 s after the logout"
		nap 0.2
	done
}

LIO=/sys/kernel/config/target

# lio_backstore NAME FILE: a fileio backstore of FILE (ULP_DISK_MB MiB); prints its directory.
lio_backstore() {
	local b=$LIO/core/fileio_0/$1
	mkdir -p "$b" || fail "cannot create the LIO backstore $b"
	echo "fd_dev_name=$2,fd_dev_size=$((ULP_DISK_MB << 20))" > "$b/control" || fail "cannot configure $b"
	echo 1 > "$b/enable" || fail "cannot enable $b"
	echo "$b"
}

# lio_backstore_down BACKSTORE FILE: removes what lio_backstore made, and FILE.
lio_backstore_down() {
	echo 0 > "$1/enable" 2>/dev/null || true
	rmdir "$1" "$LIO/core/fileio_0" || fail "cannot remove the backstore"
	rm -f "$2"
}

# lio_lun TPG BACKSTORE INITIATOR: LUN 0 of TPG on BACKSTORE, mapped for the ACL INITIATOR.
lio_lun() {
	local tpg=$1 b=$2 acl=$1/acls/$3
	mkdir "$tpg/lun/lun_0" || fail "cannot create $tpg/lun/lun_0"
	ln -s "$b" "$tpg/lun/lun_0/${b##*/}" || fail "cannot link $b to LUN 0"
	mkdir "$acl" || fail "cannot create the ACL $acl"
	mkdir "$acl/lun_0" || fail "cannot create $acl/lun_0"
	ln -s "$tpg/lun/lun_0" "$acl/lun_0/lun_0" || fail "cannot map LUN 0 for $3"
}

# lio_lun_down TPG BACKSTORE INITIATOR: undoes lio_lun.
lio_lun_down() {
	local tpg=$1 b=$2 acl=$1/acls/$3
	rm "$acl/lun_0/lun_0" && rmdir "$acl/lun_0" && rmdir "$acl" || fail "cannot remove the ACL $acl"
	rm "$tpg/lun/lun_0/${b##*/}" && rmdir "$tpg/lun/lun_0" || fail "cannot remove LUN 0 of $tpg"
}

# --- SRP: ib_srpt (LIO) and ib_srp, logged in through the RDMA CM ----------------------------
# ib_srp sends SRP_CMD with the data buffers' rkeys; ib_srpt moves the data with RDMA READ
# (writes) and RDMA WRITE (reads).
SRP_CM_PORT=5555
SRP_BACKING=/tmp/srp-backing.img

# srp_gid_hex [PART]: GID 0 of the port in hex without colons; with "iface", its interface id
# only (what ib_srp puts in the initiator port id it logs in with).
srp_gid_hex() {
	local g
	g=$(cat "/sys/class/infiniband/$EVENTS_DEV/ports/1/gids/0")
	[ "${1:-}" != iface ] || g=${g#*:*:*:*:}
	echo "${g//:/}"
}

srp_server() {
	local port tpg b guid acl
	ulp_modprobe target_core_file ib_srpt
	# The target's id goes to the initiator, the initiator's port id comes back for the ACL.
	guid=$(tr -d : < "/sys/class/infiniband/$EVENTS_DEV/node_guid")
	acl=0x0000000000000000$(barrier_word srp-ids 2 "$guid" 180)
	ulp_block_fill "$SRP_BACKING" srp-server
	b=$(lio_backstore srp_disk "$SRP_BACKING")
	# The port named by its GID: ib_srpt then looks the initiator up by its port id (for a
	# port named by GUID it would use the RDMA CM's address, which on the passive side is the
	# target's own).
	port=0x$(srp_gid_hex)
	tpg=$LIO/srpt/$port/tpg_1
	mkdir -p "$tpg" || fail "cannot create $tpg"
	lio_lun "$tpg" "$b" "$acl"
	echo 1 > "$tpg/enable" || fail "cannot enable $tpg"
	echo "$SRP_CM_PORT" > "$LIO/srpt/discovery_auth/rdma_cm_port" ||
		fail "ib_srpt cannot listen on RDMA CM port $SRP_CM_PORT"
	note "ib_srpt: port $port, target id $guid, LUN 0 = $SRP_BACKING for $acl, RDMA CM port $SRP_CM_PORT"
	barrier srp-target-up 180
	barrier srp-client-done 900
	ulp_block_target_check "$SRP_BACKING" srp
	ulp_expect_ops "SRP target" OutRdmaReads OutRdmaWrites InRdmaSends OutRdmaSends
	echo 0 > "$LIO/srpt/discovery_auth/rdma_cm_port"
	echo 0 > "$tpg/enable"
	lio_lun_down "$tpg" "$b" "$acl"
	# The fabric's own directory holds a reference to ib_srpt until it goes too.
	rmdir "$tpg" "$LIO/srpt/$port" "$LIO/srpt" || fail "cannot remove the ib_srpt port"
	lio_backstore_down "$b" "$SRP_BACKING"
}

srp_client() {
	local guid dev add
	ulp_modprobe sd_mod ib_srp
	guid=$(barrier_word srp-ids 1 "$(srp_gid_hex iface)" 180)
	[ -n "$guid" ] || fail "node 1 did not bring the target id"
	barrier srp-target-up 180
	add=/sys/class/infiniband_srp/srp-$EVENTS_DEV-1/add_target
	[ -e "$add" ] || fail "ib_srp has no $add"
	echo "id_ext=$guid,ioc_guid=$guid,dest=$FERRDMA_PEER_IP:$SRP_CM_PORT" > "$add" ||
		{ dmesg | tail -20 >&2; fail "SRP login to $FERRDMA_PEER_IP:$SRP_CM_PORT failed"; }
	dev=$(ulp_wait_disk)
	note "SRP: logged in to $FERRDMA_PEER_IP:$SRP_CM_PORT; disk $dev, $(($(cat "/sys/block/${dev#/dev/}/size") / 2048)) MiB"
	ulp_block_client_io "$dev" srp
	ulp_expect_ops "SRP initiator" InRdmaReads InRdmaWrites InRdmaSends OutRdmaSends
	for p in /sys/class/srp_remote_ports/port-*; do
		echo 1 > "$p/delete" || fail "cannot delete the SRP remote port $p"
	done
	ulp_wait_no_disk
	note "SRP: logged out"
	barrier srp-client-done 120
}

# --- iSER: LIO's iSCSI target with an iSER portal (ib_isert), open-iscsi over ib_iser ---------
# The initiator maps its buffers and sends their rkeys; ib_isert moves the data with RDMA READ
# and WRITE and answers with Send With Invalidate (ib_iser allows remote invalidation).
ISER_IQN=iqn.2026-12.dev.ferrdma:iser-target
ISER_INITIATOR=iqn.2026-12.dev.ferrdma:iser-initiator
ISER_BACKING=/tmp/iser-backing.img
ISER_PORT=3260

iser_server() {
	local b tpg np
	ulp_modprobe target_core_file iscsi_target_mod ib_isert
	ulp_block_fill "$ISER_BACKING" iser-server
	b=$(lio_backstore iser_disk "$ISER_BACKING")
	tpg=$LIO/iscsi/$ISER_IQN/tpgt_1
	mkdir -p "$tpg" || fail "cannot create $tpg"
	lio_lun "$tpg" "$b" "$ISER_INITIATOR"
	echo 0 > "$tpg/attrib/authentication"
	np=$tpg/np/$FERRDMA_IP:$ISER_PORT
	mkdir "$np" || fail "cannot create the network portal $np"
	echo 1 > "$np/iser" || { dmesg | tail -20 >&2; fail "cannot make $np an iSER portal"; }
	echo 1 > "$tpg/enable" || fail "cannot enable $tpg"
	note "LIO iSCSI: $ISER_IQN, LUN 0 = $ISER_BACKING, iSER portal $FERRDMA_IP:$ISER_PORT (iser=$(cat "$np/iser"))"
	# Known upstream DMA-API report, on any RDMA device: the first Data-In of a command has
	# isert_put_datain() -> isert_create_send_desc() sync the command's tx descriptor for
	# the CPU before isert_init_tx_hdrs() has mapped it (device address 0, 76 bytes: the
	# iSER and iSCSI headers). Allowed in this window only, and only that report:
	# iser_known_dma_debug checks it.
	echo "ferrdma-test: iser target I/O" > /dev/kmsg
	echo "ferrdma-test: expected splat begin warning call-trace" > /dev/kmsg
	barrier iser-target-up 180
	barrier iser-client-done 900
	echo "ferrdma-test: expected splat end" > /dev/kmsg
	iser_known_dma_debug
	ulp_block_target_check "$ISER_BACKING" iser
	ulp_expect_ops "iSER target" OutRdmaReads OutRdmaWrites InRdmaSends OutRdmaSends
	echo 0 > "$tpg/enable"
	echo 0 > "$np/iser"
	rmdir "$np" || fail "cannot remove $np"
	lio_lun_down "$tpg" "$b" "$ISER_INITIATOR"
	rmdir "$tpg" "$LIO/iscsi/$ISER_IQN" "$LIO/iscsi" || fail "cannot remove the iSCSI target"
	lio_backstore_down "$b" "$ISER_BACKING"
}

# iser_known_dma_debug: fails unless every warning since the target's I/O began is the known
# isert DMA-API one (see iser_server).
iser_known_dma_debug() {
	local log
	log=$(dmesg | sed -n '/ferrdma-test: iser target I\/O/,/ferrdma-test: expected splat end/p')
	grep -q 'WARNING:\|Call Trace:' <<< "$log" || return 0
	if [ "$(grep -c 'WARNING:' <<< "$log")" = 1 ] &&
		grep -q 'DMA-API: ferrdma [0-9a-f:.]*: device driver tries to sync DMA memory it has not allocated \[device address=0x0000000000000000\] \[size=76 bytes\]' <<< "$log" &&
		grep -q 'isert_put_datain' <<< "$log" &&
		[ "$(grep -c 'Call Trace:' <<< "$log")" = 1 ]; then
		note "iSER target: the known upstream DMA-API report (isert syncs a tx descriptor before mapping it); DMA-API debug reports no more from here on"
		return 0
	fi
	echo "$log" >&2
	fail "an unexpected warning while the iSER target served I/O"
}

iser_client() {
	local dev node
	ulp_modprobe sd_mod ib_iser
	# open-iscsi reads its name from /etc/iscsi and keeps node records in /var/lib/iscsi:
	# writable copies over the read-only root's.
	cp -a /etc/iscsi /tmp/iscsi-etc
	mount -t tmpfs -o mode=755 tmpfs /etc/iscsi
	cp -a /tmp/iscsi-etc/. /etc/iscsi/
	echo "InitiatorName=$ISER_INITIATOR" > /etc/iscsi/initiatorname.iscsi
	mount -t tmpfs -o mode=700 tmpfs /var/lib/iscsi || fail "cannot mount a tmpfs on /var/lib/iscsi"
	mkdir -p /run/lock/iscsi
	iscsid || fail "iscsid did not start"
	barrier iser-target-up 180
	node=(-m node -T "$ISER_IQN" -p "$FERRDMA_PEER_IP:$ISER_PORT" -I iser)
	iscsiadm "${node[@]}" -o new > /dev/null || fail "iscsiadm: cannot create the node record"
	iscsiadm "${node[@]}" --login || { dmesg | tail -20 >&2; fail "iSER login to $FERRDMA_PEER_IP:$ISER_PORT failed"; }
	dev=$(ulp_wait_disk)
	note "iSER: logged in ($(iscsiadm -m session | tr '\n' ' ')); disk $dev, $(($(cat "/sys/block/${dev#/dev/}/size") / 2048)) MiB"
	iscsiadm -m session | has_line '^iser:' || fail "the session is not over iser: $(iscsiadm -m session)"
	ulp_block_client_io "$dev" iser
	ulp_expect_ops "iSER initiator" InRdmaReads InRdmaWrites InRdmaSends OutRdmaSends
	iscsiadm "${node[@]}" --logout || fail "iSER logout failed"
	ulp_wait_no_disk
	iscsiadm -k 0 || pkill -x iscsid || true
	umount /etc/iscsi /var/lib/iscsi
	rm -rf /tmp/iscsi-etc
	note "iSER: logged out"
	barrier iser-client-done 120
}

# --- SMB Direct: ksmbd serving a share, the cifs client mounting it with "rdma" ----------------
# SMB2 READ and WRITE above the client's RDMA threshold (4 KiB) travel as RDMA WRITE and READ
# by the server, which answers with Send With Invalidate (SMB 3.1.1, RDMA_V1_INVALIDATE).
SMB_SHARE=/tmp/smb-share
SMB_MNT=/mnt/smb
SMB_USER=ferrdma
SMB_PASS=ferrdma-test

smbdirect_server() {
	ulp_modprobe ksmbd
	mkdir -p "$SMB_SHARE"
	mount -t tmpfs -o mode=755 tmpfs /etc/ksmbd
	cat > /etc/ksmbd/ksmbd.conf <<-CONF
		[global]
		    server min protocol = SMB3_11
		[share]
		    path = $SMB_SHARE
		    read only = no
		    force user = root
		    force group = root
	CONF
	ksmbd.adduser -a "$SMB_USER" -p "$SMB_PASS" > /dev/null || fail "ksmbd.adduser failed"
	ksmbd.mountd || fail "ksmbd.mountd did not start"
	barrier smb-server-up 180
	barrier smb-client-wrote 600
	ulp_files_check "$SMB_SHARE" smb-client "on the server's disk"
	ulp_files_write "$SMB_SHARE" smb-server
	barrier smb-server-wrote 120
	barrier smb-client-read 600
	ulp_expect_ops "SMB Direct server" OutRdmaReads OutRdmaWrites InRdmaSends OutRdmaSends
	barrier smb-client-unmounted 120
	ksmbd.control -s || fail "ksmbd.control -s (stopping ksmbd) failed"
	umount /etc/ksmbd
	rm -rf "$SMB_SHARE"
}

smbdirect_client() {
	ulp_modprobe cifs
	mkdir -p "$SMB_MNT"
	barrier smb-server-up 180
	mount -t cifs "//$FERRDMA_PEER_IP/share" "$SMB_MNT" \
		-o "rdma,vers=3.1.1,username=$SMB_USER,password=$SMB_PASS,cache=none" ||
		{ dmesg | tail -20 >&2; fail "mount -t cifs -o rdma of //$FERRDMA_PEER_IP/share failed"; }
	note "mounted: $(grep " $SMB_MNT " /proc/mounts)"
	grep " $SMB_MNT " /proc/mounts | has_line ',rdma' || fail "the mount is not over SMB Direct"
	ulp_files_write "$SMB_MNT" smb-client
	barrier smb-client-wrote 120
	barrier smb-server-wrote 600
	ulp_files_check "$SMB_MNT" smb-server "read by the client over SMB Direct (cache=none)"
	ulp_expect_ops "SMB Direct client" InRdmaReads InRdmaWrites InRdmaSends OutRdmaSends
	barrier smb-client-read 120
	umount "$SMB_MNT" || fail "umount $SMB_MNT failed"
	barrier smb-client-unmounted 120
}

# --- RDS over RDMA: AF_RDS sockets, reliable datagrams over an RC connection of rds_rdma -------
# No RDS TCP transport in the test kernel: a socket bound to eth0's address can only use the
# RDMA one. The client sends messages of 1 B..1 MiB, the server checks each and echoes it, the
# client checks the echo (guest/rds_echo.py).
RDS_PORT=18634

rds_server() {
	ulp_modprobe rds_rdma
	python3 "$FERRDMA_HARNESS/guest/rds_echo.py" server "$FERRDMA_IP" "$RDS_PORT" > /tmp/rds-server.log 2>&1 &
	local pid=$!
	barrier rds-server-up 180
	wait "$pid" || { cat /tmp/rds-server.log >&2; fail "the RDS echo server failed"; }
	cat /tmp/rds-server.log
	ulp_expect_ops "RDS server" InRdmaSends OutRdmaSends
	barrier rds-client-done 120
}

rds_client() {
	ulp_modprobe rds_rdma
	barrier rds-server-up 180
	python3 "$FERRDMA_HARNESS/guest/rds_echo.py" client "$FERRDMA_IP" "$RDS_PORT" "$FERRDMA_PEER_IP" ||
		fail "the RDS echo client failed"
	ulp_expect_ops "RDS client" InRdmaSends OutRdmaSends
	barrier rds-client-done 120
}
