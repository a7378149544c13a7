#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 boot-group=verbs
#
# Q_Key spoofing (issue 14, defect 8): a user UD QP that puts GSI's controlled Q_Key
# 0x80010000 in its work request to send a MAD to QP1 (a forged CM MAD, say) must not reach
# the GSI: the NIC sends the QP's own Q_Key instead and QP1 drops the datagram. Checked with
# progs/qkey-spoof.c through ib_umad (a listener for a vendor class on ferrdma0's QP1): the
# forged MAD never arrives, while a UD QP whose own Q_Key root set to 0x80010000 reaches QP1
# the same way (so the silence is a drop, not a deaf listener). On loopback through the
# device's own RoCE v2 GID; the wire path is covered by ferrdma-nic's cargo tests.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

progs=$(test_progs_dir)
load_ferrdma
wait_probe 1 >/dev/null
wait_gid ferrdma0 >/dev/null
"$progs/qkey-spoof" ferrdma0 || fail "qkey-spoof failed"
expect_no_verbs_objects
unload_ferrdma
note "qkey-spoof test passed"
