#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=300 boot-group=events
#
# ibv_reg_dmabuf_mr on ferrdma0 through stock libirdma (issue 17, item 4; progs/dmabuf-mr.c):
# part of a udmabuf (a memfd turned into a dma-buf in the guest) registered as an MR takes an
# RDMA WRITE, serves an RDMA READ and receives a SEND under its lkey, every byte checked
# through a mapping of the memfd; an fd that is not a dma-buf, a closed fd, a range past the
# buffer and length 0 are refused with a clear errno. No verbs object left, kmemleak clean.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma dmabuf-mr "$@"
