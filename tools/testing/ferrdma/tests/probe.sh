#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 kunit=yes
#
# Loads ferrdma.ko against one ferrdma NIC and unloads it again. Checks:
#   * lspci -n lists the function as 1234:fe10 and the driver binds it;
#   * the kernel log holds the driver's probe summary line, matched by FERRDMA_PROBE_RE
#     (guest/lib.sh):
#       ferrdma [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]: probe ok: id 0x4652444d version 1\.[0-9]+, 8/8 MSI-X vectors delivered, DMA copy of 8192 bytes verified, MAC ([0-9a-f]{2}:){5}[0-9a-f]{2}$
#     i.e. "ferrdma <PCI address>: probe ok: id 0x4652444d version 1.2, 8/8 MSI-X vectors
#     delivered, DMA copy of 8192 bytes verified, MAC 52:54:00:fe:10:01";
#   * the function has the driver's 8 MSI-X vectors allocated (sysfs msi_irqs), and
#     /proc/interrupts has EXPECT_IRQ_LINES lines for them (see below);
#   * rmmod succeeds, the module is gone and so are its vectors and interrupt lines.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

# /proc/interrupts lists an IRQ only while a handler is installed. After the probe-time
# MSI-X self-test the driver keeps one handler per vector for its event queues (the AEQ on
# vector 0, a CEQ on each other vector) until remove.
EXPECT_IRQ_LINES=8

note "PCI devices:"
lspci -n
lspci -n | has_line " $FERRDMA_PCI_ID" || fail "lspci -n does not list $FERRDMA_PCI_ID"
bdf=$(lspci -D -n -d "$FERRDMA_PCI_ID" | awk 'NR == 1 {print $1}')
note "ferrdma function at $bdf"

note "insmod $FERRDMA_KO"
load_ferrdma
line=$(wait_probe 1)
note "probe line: $line"
[ "$(probe_lines | wc -l)" = 1 ] || fail "expected one probe line, got: $(probe_lines)"
case "$line" in *"ferrdma $bdf: probe ok"*) ;; *) fail "the probe line does not name $bdf" ;; esac
[ -e "/sys/bus/pci/drivers/ferrdma/$bdf" ] || fail "$bdf is not bound to the ferrdma driver"

msi=/sys/bus/pci/devices/$bdf/msi_irqs
irqs=$(find "$msi" -mindepth 1 -printf '%f\n' 2>/dev/null | sort -n | tr '\n' ' ')
nvec=$(echo "$irqs" | wc -w)
note "MSI-X vectors of $bdf: $irqs"
[ "$nvec" = "$FERRDMA_VECTORS" ] || fail "$bdf has $nvec MSI-X vectors allocated, expected $FERRDMA_VECTORS"
irq_lines() { # the /proc/interrupts lines of the function's vectors, or naming ferrdma
	local pattern
	pattern="ferrdma|PCI-MSIX?-$bdf"
	for i in $irqs; do pattern="$pattern|^ *$i:"; done
	grep -E "$pattern" /proc/interrupts || true
}
irq_lines
lines=$(irq_lines | wc -l)
note "/proc/interrupts lines of the ferrdma vectors: $lines (expected $EXPECT_IRQ_LINES)"
[ "$lines" = "$EXPECT_IRQ_LINES" ] || fail "/proc/interrupts has $lines lines for the ferrdma vectors, expected $EXPECT_IRQ_LINES"

note "rmmod ferrdma"
unload_ferrdma
[ ! -e "/sys/bus/pci/drivers/ferrdma" ] || fail "the ferrdma PCI driver is still registered"
[ -z "$(ls "$msi" 2>/dev/null)" ] || fail "$bdf still has MSI-X vectors after rmmod: $(ls "$msi")"
left=$(irq_lines | wc -l)
[ "$left" = 0 ] || fail "$left ferrdma interrupt lines remain after rmmod"
note "probe test passed"
