#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300
#
# Loads ferrdma.ko against one ferrdma NIC and unloads it again. Checks:
#   * lspci -n lists the function as 1234:fe10 and the driver binds it;
#   * the kernel log holds the driver's probe summary line, matched by FERRDMA_PROBE_RE
#     (guest/lib.sh):
#       ferrdma [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]: probe ok: id 0x4652444d version 1\.0, 8/8 MSI-X vectors delivered, DMA copy of 8192 bytes verified$
#     i.e. "ferrdma <PCI address>: probe ok: id 0x4652444d version 1.0, 8/8 MSI-X vectors
#     delivered, DMA copy of 8192 bytes verified";
#   * /proc/interrupts lists the driver's 8 MSI-X vectors (lines naming "ferrdma");
#   * rmmod succeeds, the module is gone and so are its interrupt lines.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

note "PCI devices:"
lspci -n
lspci -n | grep -q " $FERRDMA_PCI_ID" || fail "lspci -n does not list $FERRDMA_PCI_ID"
bdf=$(lspci -D -n -d "$FERRDMA_PCI_ID" | awk 'NR == 1 {print $1}')
note "ferrdma function at $bdf"

note "insmod $FERRDMA_KO"
load_ferrdma
line=$(wait_probe 1)
note "probe line: $line"
[ "$(probe_lines | wc -l)" = 1 ] || fail "expected one probe line, got: $(probe_lines)"
case "$line" in *"ferrdma $bdf: probe ok"*) ;; *) fail "the probe line does not name $bdf" ;; esac
[ -e "/sys/bus/pci/drivers/ferrdma/$bdf" ] || fail "$bdf is not bound to the ferrdma driver"

vectors=$(grep -c ferrdma /proc/interrupts || true)
note "interrupt lines naming ferrdma: $vectors"
grep ferrdma /proc/interrupts || true
[ "$vectors" = "$FERRDMA_VECTORS" ] || fail "/proc/interrupts shows $vectors ferrdma vectors, expected $FERRDMA_VECTORS"

note "rmmod ferrdma"
unload_ferrdma
[ ! -e "/sys/bus/pci/drivers/ferrdma" ] || fail "the ferrdma PCI driver is still registered"
left=$(grep -c ferrdma /proc/interrupts || true)
[ "$left" = 0 ] || fail "$left ferrdma interrupt lines remain after rmmod"
note "probe test passed"
