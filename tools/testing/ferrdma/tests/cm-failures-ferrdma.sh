#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=400 slots=1
#
# RDMA CM failure paths between two VMs on ferrdma0: no listener, unreachable address, peer
# link down mid-connection, a peer killed mid-transfer; every tool must fail in bounded time
# and leave no object behind (guest/cm.sh: cm_failures).
. "$FERRDMA_HARNESS/guest/cm.sh"
cm_failures ferrdma
