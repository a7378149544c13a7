# SPDX-License-Identifier: GPL-2.0
# Guest side of run-tests' "harness:timeout" self-test: never finishes. run-tests runs it with
# the guest-side time limit turned off and a short host timeout, and checks that the harness
# kills the VM, reports the timeout and leaves no process behind.
echo "sleeping forever"
exec sleep 100000
