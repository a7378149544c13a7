# SPDX-License-Identifier: GPL-2.0
# Guest side of run-tests' "harness:exit-status" self-test (not a test of the driver).
# run-tests boots two VMs without the NIC, runs this with the arguments "two words" and "x",
# and checks that the harness reports for node 1: exit status 7, this output, the environment
# below, the kernel splat written outside the expected-splat markers (and only that one as a
# failure); and that it stops node 2, which waits for a peer that will never come, soon after
# node 1's script failed (vmharness.Config.peer_grace) instead of at the run's time limit.
if [ "$FERRDMA_NODE" = 2 ]; then
	echo "node 2 waits for its peer"
	sleep 3600
	exit 0
fi
echo "node=$FERRDMA_NODE nvms=$FERRDMA_NVMS ip=$FERRDMA_IP peer=[$FERRDMA_PEER_IP]"
echo "argc=$# arg1=[$1] arg2=[$2]"
echo "eth0: $(ip -4 -o addr show dev eth0 | awk '{print $4}')"
echo "results writable: $(touch "$FERRDMA_RESULTS/probe-file" && echo yes)"
echo "ferrdma-test: expected splat begin warning" > /dev/kmsg
echo "WARNING: ferrdma harness self-test, expected splat" > /dev/kmsg
echo "ferrdma-test: expected splat end" > /dev/kmsg
echo "BUG: ferrdma harness self-test, unexpected splat" > /dev/kmsg
echo "to stderr" >&2
exit 7
