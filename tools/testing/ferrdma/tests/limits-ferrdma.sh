#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ferrdma-test: vms=1 timeout=600 mem=1536 resources=small
#
# Every limit ferrdma0 reports holds (issue 17, item 8; progs/limits.c through stock libirdma),
# on a NIC provisioned with the small resource profile (1024 QPs and CQs, 4096 MRs and PDs,
# 256 AHs) so that counting to each limit takes seconds, not the ~400 s of the nominal
# profile's 16,384 QPs and CQs and 65,536 MRs (limits-nominal-ferrdma, make check-long):
# a CQ of max_cqe entries, an RC pair of max_qp_wr WRs of max_sge SGEs filled before anything is
# polled (every completion and byte checked), 101 bytes of inline data, an MR of max_mr_size
# bytes of 4 KiB pages with RDMA WRITEs into its first and last page, and exactly max_pd PDs,
# max_cq CQs, max_qp QPs, max_mr MRs and max_ah AHs (less the kernel's own); one past each
# limit fails cleanly. Then the multicast limits (progs/mcast-datacheck --limits): a full
# group of max_mcast_qp_attach QPs and one QP in max_mcast_grp groups, one more of each
# refused with ENOMEM; an RC QP, a unicast GID and a detach of what was never attached
# refused with EINVAL. The kernel side of max_cqe is kverbs' cq_of_max_cqe_and_one_more. No
# verbs object left, kmemleak clean. limits-rxe runs the same programs on soft RoCE.
. "$FERRDMA_HARNESS/guest/events.sh"
events_main ferrdma limits -i 101 -M "$@"
