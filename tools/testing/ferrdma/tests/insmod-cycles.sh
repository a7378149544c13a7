#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600
#
# Loads and unloads ferrdma.ko 20 times, checking the probe line each time, then asks kmemleak
# for leaks. Whatever kmemleak already suspected at boot is cleared before the cycles, so any
# report afterwards comes from the cycles; the test fails on any report. kmemleak only reports
# objects older than 5 seconds and usually needs two scans to be sure, hence the sleeps.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic
CYCLES=${1:-20}
kml=/sys/kernel/debug/kmemleak
[ -e "$kml" ] || fail "$kml is missing: the kernel needs CONFIG_DEBUG_KMEMLEAK (and debugfs)"

note "kmemleak: clearing boot-time suspects"
echo scan > "$kml"
if [ -s "$kml" ]; then
	note "boot-time suspects (ignored):"
	head -40 "$kml"
fi
echo clear > "$kml"

for ((i = 1; i <= CYCLES; i++)); do
	load_ferrdma
	wait_probe "$i" >/dev/null
	unload_ferrdma
done
note "$CYCLES insmod/rmmod cycles done"
[ "$(probe_lines | wc -l)" = "$CYCLES" ] || fail "expected $CYCLES probe lines, got $(probe_lines | wc -l)"

sleep 6
echo scan > "$kml"
sleep 2
echo scan > "$kml"
report=$(cat "$kml")
if [ -n "$report" ]; then
	echo "$report" | head -100
	fail "kmemleak reports $(echo "$report" | grep -c '^unreferenced object') leaked object(s) after $CYCLES cycles"
fi
note "kmemleak: no leaks"
