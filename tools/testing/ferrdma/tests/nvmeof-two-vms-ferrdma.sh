#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=2 timeout=400
#
# NVMe over Fabrics, RDMA transport, between two VMs over the fabric: node 1 runs the target
# (nvmet-rdma, a file on tmpfs), node 2 the host (nvme-rdma) with the I/O and data checks of
# nvmeof-loopback-ferrdma (guest/nvmeof.sh).
. "$FERRDMA_HARNESS/guest/nvmeof.sh"
nvmeof_two_vms
