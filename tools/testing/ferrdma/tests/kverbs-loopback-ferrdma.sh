#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=400 boot-group=device
#
# Kernel verbs of a kernel consumer on ferrdma0: kmod/ferrdma_kverbs_test.ko's checks of
# kernel CQs (IB_POLL_DIRECT, IB_POLL_SOFTIRQ, ib_create_cq with a comp_handler) and RC/UD
# QPs with the local DMA lkey, looped back through the RoCE v2 GID: SEND/RECV of 1 B to
# 64 KiB with up to 13 SGEs, SEND_WITH_IMM, RDMA WRITE/WRITE_WITH_IMM/READ, inline, unsignaled
# WRs, a chain of 32, a full send queue, req_notify_cq, posting and polling under a spinlock,
# a bad lkey and the flush after it, an AH made in atomic context, COMM_EST in hard IRQ with
# AHs made under the spinlock its handler takes (ib_cm's pattern, for lockdep), fast registration
# (ib_alloc_mr, ib_map_mr_sg, IB_WR_REG_MR: the rkey of the RDMA checks, LOCAL_INV and a stale
# rkey refused, re-registration, SEND_WITH_INV, REG_MR of a valid MR refused; an MR of
# max_fast_reg_page_list_len = 262144 pages, a two-level list, written and read at list-page
# boundaries, one page more refused), ib_drain_qp;
# then no verbs object left and kmemleak clean (guest/kverbs.sh).
. "$FERRDMA_HARNESS/guest/kverbs.sh"
kverbs_main ferrdma "$@"
