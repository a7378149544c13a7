#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 smp=2
#
# NVMe over Fabrics, RDMA transport, with the kernel's target (nvmet-rdma, a file on tmpfs as
# namespace) and host (nvme-rdma) in one VM over ferrdma0: connect, O_DIRECT I/O of 4 KiB
# (inline) to 4 MiB blocks (fast-registered MRs, RDMA READ/WRITE, SEND_WITH_INV) with data
# checks, concurrent dd, disconnect, teardown; no verbs object or cm_id left, kmemleak clean
# (guest/nvmeof.sh).
# Two vCPUs (smp=2): nvme-rdma then opens an I/O queue per CPU, and the dd's run in parallel.
. "$FERRDMA_HARNESS/guest/nvmeof.sh"
nvmeof_loopback
