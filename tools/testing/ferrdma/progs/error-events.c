// SPDX-License-Identifier: GPL-2.0
/*
 * error-events: error completions and the asynchronous events that faults must raise.
 *
 *   error-events DEVICE [-t SECONDS] [--sabotage]
 *
 * On DEVICE, with RC QP pairs connected to each other through the port's RoCE v2 GID:
 *
 *   1. a remote access violation: an RDMA WRITE from QP A into QP B's memory region, first
 *      with the right rkey (it must succeed and the data land), then with a wrong one: A's
 *      send CQ must report IBV_WC_REM_ACCESS_ERR for it, and B must get the asynchronous
 *      event IBV_EVENT_QP_ACCESS_ERR (a WRITE without immediate has no receive WQE to carry
 *      the error, so the responder reports it as an event);
 *   2. a CQ overrun: a pair whose four queues share one small CQ gets more completions than
 *      the CQ holds, never polled: the asynchronous event IBV_EVENT_CQ_ERR for that CQ.
 *
 * Each expected completion and event must come within SECONDS (default 20); other
 * asynchronous events on the way are printed and ignored. Every event is acknowledged.
 * --sabotage uses the right rkey for the "wrong" WRITE: the program must then fail.
 * Prints a line per check and a verdict; exits 0 only if both checks passed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs-common.h"

static struct tp_dev dev;
static unsigned long seconds = 20;

/* Waits for the asynchronous event @type whose element is @element (a QP or a CQ). */
static void expect_async(enum ibv_event_type type, const void *element, const char *what)
{
	double deadline = tp_now() + seconds;

	for (;;) {
		struct ibv_async_event ev;
		const void *got;

		if (!tp_next_async_event(dev.ctx, deadline, &ev))
			tp_die("%s: no %s event within %lu s", what, ibv_event_type_str(type),
			       seconds);
		got = type == IBV_EVENT_CQ_ERR ? (const void *)ev.element.cq :
						 (const void *)ev.element.qp;
		ibv_ack_async_event(&ev);
		if (ev.event_type == type && got == element)
			return;
		tp_note("%s: other event: %s (ignored)", what, ibv_event_type_str(ev.event_type));
	}
}

/* Polls @cq until one completion arrives; returns it. */
static struct ibv_wc poll_one(struct ibv_cq *cq, const char *what)
{
	double deadline = tp_now() + seconds;
	struct ibv_wc wc;
	int got;

	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {
		if (tp_now() > deadline)
			tp_die("%s: no completion within %lu s", what, seconds);
		usleep(500);
	}
	if (got < 0)
		tp_die("%s: ibv_poll_cq failed", what);
	return wc;
}

static void rdma_write(struct ibv_qp *qp, uint64_t wr_id, void *remote, uint32_t rkey,
		       const struct tp_msg *msg)
{
	struct ibv_sge sge = { .addr = (uintptr_t)msg, .length = sizeof(*msg) };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
		.wr.rdma = { .remote_addr = (uintptr_t)remote, .rkey = rkey },
	};
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(qp, &wr, &bad);

	if (ret)
		tp_die("ibv_post_send(RDMA WRITE): %s", strerror(ret));
}

static void check_access_error(bool sabotage)
{
	struct tp_msg *target, msg = { .magic = TP_MSG_MAGIC, .seq = 1 };
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	uint32_t bad_rkey;

	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	target = calloc(1, sizeof(*target));
	if (!cq || !target)
		tp_die("ibv_create_cq or calloc failed");
	mr = ibv_reg_mr(dev.pd, target, sizeof(*target),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	a = tp_create_rc_qp(&dev, cq, cq, 4, 1);
	b = tp_create_rc_qp(&dev, cq, cq, 1, 4);
	tp_connect_pair(&dev, a, b);

	/* The control: the right rkey works. */
	rdma_write(a, 1, target, mr->rkey, &msg);
	wc = poll_one(cq, "check 1 (RDMA WRITE, right rkey)");
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 1 || target->seq != 1)
		tp_die("check 1: the RDMA WRITE with the right rkey: status %s, data %s",
		       ibv_wc_status_str(wc.status), target->seq == 1 ? "there" : "missing");

	/* The fault: a key that names no region of B's. */
	bad_rkey = sabotage ? mr->rkey : mr->rkey ^ 0x5a5a00;
	msg.seq = 2;
	rdma_write(a, 2, target, bad_rkey, &msg);
	wc = poll_one(cq, "check 1 (RDMA WRITE, wrong rkey)");
	if (wc.status != IBV_WC_REM_ACCESS_ERR || wc.wr_id != 2)
		tp_die("check 1: the RDMA WRITE with a wrong rkey completed with %s (wr_id %llu), expected %s",
		       ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id,
		       ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	if (target->seq != 1)
		tp_die("check 1: the WRITE with a wrong rkey changed the memory");
	expect_async(IBV_EVENT_QP_ACCESS_ERR, b, "check 1");
	printf("ok 1 - RDMA WRITE with a wrong rkey: %s completion at the requester, %s event at the responder\n",
	       ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), ibv_event_type_str(IBV_EVENT_QP_ACCESS_ERR));

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr))
		tp_die("check 1: cleanup failed");
	free(target);
}

static void check_cq_overrun(void)
{
	struct tp_msg *rbuf, msg = { .magic = TP_MSG_MAGIC };
	unsigned int n, i;
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
	struct ibv_mr *mr;

	cq = ibv_create_cq(dev.ctx, 4, NULL, NULL, 0);
	if (!cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	/* Every SEND completes twice (send and receive) on this CQ: n SENDs overrun it. */
	n = cq->cqe + 2;
	rbuf = calloc(n, sizeof(*rbuf));
	if (!rbuf)
		tp_die("out of memory");
	mr = ibv_reg_mr(dev.pd, rbuf, n * sizeof(*rbuf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	a = tp_create_rc_qp(&dev, cq, cq, n, 1);
	b = tp_create_rc_qp(&dev, cq, cq, 1, n);
	tp_connect_pair(&dev, a, b);
	for (i = 0; i < n; i++)
		if (tp_post_recv(b, mr, &rbuf[i], i))
			tp_die("ibv_post_recv failed");
	for (i = 0; i < n; i++) {
		int ret;

		msg.seq = i;
		ret = tp_post_send(a, &msg, i, 0);
		if (ret)
			tp_die("ibv_post_send: %s", strerror(ret));
	}
	expect_async(IBV_EVENT_CQ_ERR, cq, "check 2");
	printf("ok 2 - %u SENDs (%u completions) into a CQ of %d entries, never polled: %s event\n",
	       n, 2 * n, cq->cqe, ibv_event_type_str(IBV_EVENT_CQ_ERR));

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr))
		tp_die("check 2: cleanup failed");
	free(rbuf);
}

static void usage(void)
{
	fprintf(stderr, "usage: %s DEVICE [-t SECONDS] [--sabotage]\n", tp_prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "sabotage", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ }
	};
	bool sabotage = false;
	int opt;

	tp_prog = "error-events";
	while ((opt = getopt_long(argc, argv, "t:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 't':
			seconds = tp_parse_ulong("SECONDS", optarg, 1, 86400);
			break;
		case 'S':
			sabotage = true;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();

	tp_open(&dev, argv[optind]);
	tp_set_nonblock(dev.ctx->async_fd);
	if (sabotage)
		tp_note("SABOTAGE: the \"wrong\" RDMA WRITE uses the right rkey");
	check_access_error(sabotage);
	check_cq_overrun();
	tp_close(&dev);
	printf("error-events: PASS: 2 checks on %s\n", dev.name);
	return 0;
}
