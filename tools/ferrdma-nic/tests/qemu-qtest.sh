#!/usr/bin/env bash
# End-to-end check of ferrdma-nic behind QEMU's vfio-user-pci client, without a guest
# kernel: QEMU's qtest accelerator plays the guest (PCI config cycles, MMIO, guest RAM).
# It checks identity, the MSI-X capability, BAR sizing, every register, a DMA copy and each
# TEST_STATUS error, and an MSI-X interrupt that QEMU delivers into guest RAM. For interface
# 2.0 it sizes the doorbell BAR, runs QUERY_CAPS through the admin queue in guest RAM and
# rings a (harmless) doorbell. Then it stops
# QEMU and checks that the NIC exits 0 and removes its socket.
#
# Run inside the ferrdma sysroot (QEMU >= 10.1 with vfio-user-pci):
#   scripts/in-sysroot.sh bash /ferrdma/src/tools/ferrdma-nic/tests/qemu-qtest.sh [NIC_BINARY]
# NIC_BINARY defaults to /ferrdma/cache/cargo-target/release/ferrdma-nic.
set -euo pipefail

BIN=${1:-/ferrdma/cache/cargo-target/release/ferrdma-nic}
# The interface version the NIC must report is the one the interface definition states.
iface="$(cd "$(dirname "$0")/../../.." && pwd)/drivers/infiniband/hw/ferrdma/interface.rs"
ver_major=$(sed -n 's/^pub const VERSION_MAJOR: u16 = \([0-9]*\);$/\1/p' "$iface")
ver_minor=$(sed -n 's/^pub const VERSION_MINOR: u16 = \([0-9]*\);$/\1/p' "$iface")
[ -n "$ver_major" ] && [ -n "$ver_minor" ] || { echo "qemu-qtest: no VERSION_MAJOR/MINOR in $iface" >&2; exit 1; }
QEMU=${QEMU:-qemu-system-x86_64}
work=$(mktemp -d)
sock=$work/nic.sock
nic=
passed=0
failed=0

cleanup() {
	if [ -n "${QEMU_PID:-}" ]; then kill "$QEMU_PID" 2>/dev/null || true; fi
	if [ -n "$nic" ]; then kill "$nic" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

die() {
	echo "qemu-qtest: $*" >&2
	echo "---- NIC log" >&2; cat "$work/nic.log" >&2 || true
	echo "---- QEMU stderr" >&2; cat "$work/qemu.err" >&2 || true
	exit 1
}

"$BIN" --socket "$sock" --log-level info 2>"$work/nic.log" &
nic=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || die "the NIC did not create $sock"

# The device sits in slot 3 of the q35 root bus.
coproc QEMU_CO {
	exec "$QEMU" -machine q35 -m 256 \
		-object memory-backend-memfd,id=mem,size=256M,share=on -machine memory-backend=mem \
		-display none -nodefaults -accel qtest -qtest stdio -qtest-log /dev/null \
		-device "{\"driver\":\"vfio-user-pci\",\"addr\":\"03.0\",\"socket\":{\"type\":\"unix\",\"path\":\"$sock\"}}" \
		2>"$work/qemu.err"
}
QEMU_PID=$QEMU_CO_PID
CFG=$((0x80000000 | (3 << 11)))
BAR0=0xfe000000
BAR4=0xfe010000
# BAR2 is 16 MiB (4096 doorbell pages): naturally aligned below BAR0.
BAR2=0xfd000000

reply=
q() {
	echo "$1" >&"${QEMU_CO[1]}"
	IFS= read -r -t 10 reply <&"${QEMU_CO[0]}" || die "no reply to '$1'"
	[[ $reply == OK* ]] || die "'$1' -> '$reply'"
}
# check WHAT CMD WANT: CMD must answer "OK <value>" with value == WANT (numerically).
check() {
	q "$2"
	local got=${reply#OK }
	if (($got == $3)); then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "FAIL: $1: '$2' -> $got, want $(printf '%#x' "$3")" >&2
	fi
}
cfg_read() { q "$(printf 'outl 0xcf8 %#x' $((CFG | $1)))"; check "$2" "inl 0xcfc" "$3"; }
cfg_write() { q "$(printf 'outl 0xcf8 %#x' $((CFG | $1)))"; q "outl 0xcfc $2"; }
reg() { printf '%#x' $((BAR0 + $1)); }
status() { check "$1" "readl $(reg 0x104)" "$2"; }
dma() { # SRC DST LEN CTRL
	q "writel $(reg 0x110) $(($1 & 0xffffffff))"; q "writel $(reg 0x114) $((($1 >> 32) & 0xffffffff))"
	q "writel $(reg 0x118) $(($2 & 0xffffffff))"; q "writel $(reg 0x11c) $((($2 >> 32) & 0xffffffff))"
	q "writel $(reg 0x108) $3"; q "writel $(reg 0x120) $4"
}

# Identity, class, capability list, MSI-X capability.
cfg_read 0x00 "vendor/device" 0xfe101234
cfg_read 0x08 "class/revision" 0x02800001
cfg_read 0x2c "subsystem" 0xfe101234
cfg_read 0x34 "capability pointer" 0x40
cfg_read 0x40 "MSI-X cap: id 0x11, 8 vectors" 0x00070011
cfg_read 0x44 "MSI-X table: BAR4 + 0" 0x4
cfg_read 0x48 "MSI-X PBA: BAR4 + 0x800" 0x804
# BAR sizing, then program the BARs and enable memory + bus master.
cfg_write 0x10 0xffffffff; cfg_read 0x10 "BAR0 size mask" 0xffff0000
cfg_write 0x20 0xffffffff; cfg_read 0x20 "BAR4 size mask" 0xfffff000
cfg_write 0x18 0xffffffff; cfg_read 0x18 "BAR2 (doorbell) size mask" 0xff000000
cfg_write 0x10 $BAR0
cfg_write 0x20 $BAR4
cfg_write 0x18 $BAR2
cfg_write 0x04 0x6

# Registers.
check "ID" "readl $(reg 0x0)" 0x4652444d
check "VERSION ($ver_major.$ver_minor, interface.rs)" "readl $(reg 0x4)" "$(printf '0x%04x%04x' "$ver_major" "$ver_minor")"
check "MAC_LO (default MAC 52:54:00:fe:10:01)" "readl $(reg 0x18)" 0xfe005452
check "MAC_HI" "readl $(reg 0x1c)" 0x00000110
check "SCRATCH reset" "readl $(reg 0x8)" 0
q "writel $(reg 0x8) 0x12345678"
check "SCRATCH" "readl $(reg 0x8)" 0x12345678
check "MSIX_COUNT" "readl $(reg 0xc)" 8
status "TEST_STATUS reset" 0

# DMA copy in guest RAM, and every failure.
q "write 0x100000 8 0x0102030405060708"
dma 0x100000 0x200000 8 1; status "DMA copy" 0
check "DMA copy data" "read 0x200000 8" 0x0102030405060708
dma 0x100000 0x200000 0 1; status "zero length" 2
dma 0x100000 0x200000 $((0x100001)) 1; status "too long" 2
dma 0x100000 0x100004 8 1; status "overlap" 4
dma 0x100000 0x20000000 8 1; status "destination outside RAM" 3
dma 0xfffffffffffffffc 0x100000 8 1; status "address wraps" 3
dma 0x100000 0x200000 8 7; status "bad command" 5

# MSI-X: vector 0 with MSI-X disabled, then a real interrupt. The table entry points the
# message at guest RAM, so QEMU's delivery shows up as a memory write.
q "writel $(reg 0x100) 0"; status "TEST_IRQ with MSI-X disabled" 1
q "writel $((BAR4)) 0x3000"; q "writel $((BAR4 + 4)) 0"
q "writel $((BAR4 + 8)) 0xabcd"; q "writel $((BAR4 + 12)) 0"
q "outl 0xcf8 $(printf '%#x' $((CFG | 0x40)))"; q "outw 0xcfe 0x8000"
q "writel $(reg 0x100) 0"; status "TEST_IRQ 0" 0
for _ in $(seq 50); do
	q "readl 0x3000"
	[ "$((${reply#OK }))" = "$((0xabcd))" ] && break
	sleep 0.05
done
check "MSI-X message delivered" "readl 0x3000" 0xabcd
q "writel $(reg 0x100) 8"; status "TEST_IRQ 8" 1
check "PBA" "readl $((BAR4 + 0x800))" 0

# Interface 2.0: reset the RDMA engine, run the admin queue in guest RAM (2 entries at
# 0x400000, completions at 0x401000) with QUERY_CAPS writing to 0x402000.
check "FEATURES" "readl $(reg 0x10)" 3
q "writel $(reg 0x200) 1"
check "DEV_STATUS" "readl $(reg 0x204)" 1
q "writel $(reg 0x210) 0x400000"; q "writel $(reg 0x214) 0"
q "writel $(reg 0x218) 0x401000"; q "writel $(reg 0x21c) 0"
q "writel $(reg 0x220) 2"; q "writel $(reg 0x224) 1"
check "AQ_STATUS" "readl $(reg 0x230)" 0
q "writeq 0x400000 0x550001"; q "writel 0x40000c 128"; q "writeq 0x400010 0x402000"
q "writel $(reg 0x228) 1"
check "AQ_HEAD" "readl $(reg 0x22c)" 1
check "completion: cmd_id, status OK" "readl 0x401000" 0x55
check "completion: opcode, phase" "readl 0x40100c" 0x80000001
check "caps: hw_rev, max_sge, max_read_sge, chunk" "readl 0x402000" 0x080d0d02
check "caps: max_qp" "readl 0x402008" 16385
# A doorbell for a QP that does not exist is ignored; the doorbell BAR reads 0.
q "writel $BAR2 5"; q "writel $((BAR2 + 0x40)) 9"
check "doorbell BAR reads 0" "readl $BAR2" 0
check "still alive" "readl $(reg 0x0)" 0x4652444d

# Stop QEMU; the NIC must see the disconnect, exit 0 and remove its socket.
kill "$QEMU_PID"
wait "$QEMU_PID" 2>/dev/null || true
QEMU_PID=
rc=0
for _ in $(seq 100); do kill -0 "$nic" 2>/dev/null || break; sleep 0.05; done
wait "$nic" || rc=$?
nic=
if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: NIC exit code $rc" >&2; fi
if [ ! -e "$sock" ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: socket left behind" >&2; fi
if grep -q 'DMA map iova 0x0+.* rw fd offset' "$work/nic.log"; then
	passed=$((passed + 1))
else
	failed=$((failed + 1)); echo "FAIL: guest RAM was not DMA-mapped with an fd" >&2
fi

[ "$failed" = 0 ] || { echo "---- NIC log" >&2; cat "$work/nic.log" >&2; }
echo "qemu-qtest: $passed passed, $failed failed"
[ "$failed" = 0 ]
