#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=1500 smp=2
#
# The kernel boundary under a seeded random fuzzer (progs/uverbs-fuzz.c, issue 14): four
# unprivileged processes issue raw uverbs commands to ferrdma0 - legacy writes and ioctls,
# with random and stale handles, sizes, driver data, response buffers, doorbell mmaps,
# garbage rings and doorbells, closes and deaths with objects open. Passes when the run
# completes, the kernel logged no splat (the harness scans), nothing is left in rdma res,
# kmemleak is clean, the module unloads, and ferrdma0 still moves verified data afterwards
# (ibv_rc_pingpong -c). Arguments: [COMMANDS [SEED]] (default 100000 and seed 1; make
# fuzz-uverbs runs a longer one with a fresh seed). The seed is printed last, to replay a
# finding with `make fuzz-uverbs FUZZ_SEED=...`.
# Two vCPUs (smp=2): the four processes' commands meet in the kernel at the same time.
. "$FERRDMA_HARNESS/guest/lib.sh"
need_nic

commands=${1:-100000}
seed=${2:-1}
trap 'echo "uverbs-fuzz: seed $seed, $commands commands (replay: make fuzz-uverbs FUZZ_COMMANDS=$commands FUZZ_SEED=$seed)"' EXIT

kmemleak_clear
load_ferrdma
wait_probe 1 >/dev/null
gid=$(wait_gid ferrdma0)

uverbs=$(ls /sys/class/infiniband/ferrdma0/device/infiniband_verbs/)
[ -c "/dev/infiniband/$uverbs" ] || fail "no /dev/infiniband/$uverbs for ferrdma0"
# World-accessible as rdma-core's udev rules make it: the fuzzer runs as nobody.
chmod 0666 "/dev/infiniband/$uverbs"

progs=$(test_progs_dir)
start=$(date +%s)
timeout $((commands / 100 + 120)) "$progs/uverbs-fuzz" -d "/dev/infiniband/$uverbs" \
	-s "$seed" -n "$commands" -p 4 -u > /tmp/fuzz.log 2>&1 || {
	cat /tmp/fuzz.log
	fail "uverbs-fuzz did not complete (status $?)"
}
cat /tmp/fuzz.log
note "uverbs-fuzz: $(($(date +%s) - start)) s"
ran=$(sed -n 's/^uverbs-fuzz: \([0-9]*\) commands.*/\1/p' /tmp/fuzz.log)
[ "${ran:-0}" -ge "$commands" ] || fail "uverbs-fuzz ran ${ran:-no} commands, asked for $commands"
ok=$(sed -n 's/.* \([0-9]*\) succeeded;.*/\1/p' /tmp/fuzz.log)
# A fuzzer whose commands all bounce off ib_core's argument checks tests nothing of ours.
[ "${ok:-0}" -ge $((commands / 20)) ] || fail "only ${ok:-0} of $commands commands succeeded: the fuzzer does not reach the driver"

expect_no_verbs_objects

# The device still works: verified data through a fresh RC QP pair.
ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 100 -s 4096 -c > /tmp/server.log 2>&1 &
spid=$!
wait_listen 18515
timeout 120 ibv_rc_pingpong -d ferrdma0 -g "$gid" -n 100 -s 4096 -c 127.0.0.1 > /tmp/client.log 2>&1 ||
	{ cat /tmp/client.log /tmp/server.log; fail "ibv_rc_pingpong after the fuzzer failed (client)"; }
wait "$spid" || { cat /tmp/client.log /tmp/server.log; fail "ibv_rc_pingpong after the fuzzer failed (server)"; }
! grep -qi 'mismatch\|error' /tmp/client.log /tmp/server.log ||
	{ cat /tmp/client.log /tmp/server.log; fail "ibv_rc_pingpong after the fuzzer reported a data mismatch"; }
note "after the fuzzer: $(grep -m1 -E 'bytes in' /tmp/client.log)"
expect_no_verbs_objects

unload_ferrdma
kmemleak_check "the uverbs fuzzer"
note "uverbs-fuzz-ferrdma test passed"
