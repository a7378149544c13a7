// SPDX-License-Identifier: GPL-2.0
/*
 * removal-holder: holds a device's verbs objects while the device goes away under it.
 *
 *   removal-holder DEVICE [-t SECONDS] [-f]
 *
 * Opens DEVICE and sets up what a running RDMA application holds: a PD, a completion channel
 * and CQ, two RC QPs connected to each other, an MR, libirdma's doorbell mapping. It moves 8
 * SENDs through the pair and checks every received byte, prints "ready" and then waits (at
 * most SECONDS, default 60) for the device to be removed (driver unbind or rmmod): the async
 * event fd must deliver IBV_EVENT_DEVICE_FATAL. After it, commands to the kernel must fail
 * (QUERY_PORT, MODIFY_QP, REG_MR), a post and a poll must not crash the process (the doorbell
 * mapping was zapped: stores land in a dummy page), and every object must still be
 * destroyable so that the process can clean up and exit. Prints the result; exits 0 only if
 * all of that held.
 *
 * -f: the device fails fatally rather than being removed. Its driver reports
 * IBV_EVENT_DEVICE_FATAL when the error happens and then removes the device to reset it, so
 * commands may still reach the driver for a moment after the event: they must start failing
 * within 30 s (the removal disassociates the context), and the wait is printed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs-common.h"

#define SENDS 8

static void usage(void)
{
	fprintf(stderr, "usage: %s DEVICE [-t SECONDS]\n", tp_prog);
	exit(2);
}

/* Takes SENDS receive completions and SENDS send completions off @cq (5 s at most). */
static void reap(struct ibv_cq *cq)
{
	unsigned int recvs = 0, sends = 0;
	double deadline = tp_now() + 5;

	while (recvs < SENDS || sends < SENDS) {
		struct ibv_wc wc[4];
		int n = ibv_poll_cq(cq, 4, wc), i;

		if (n < 0)
			tp_die("ibv_poll_cq failed");
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				tp_die("completion %lu: %s", (unsigned long)wc[i].wr_id,
				       ibv_wc_status_str(wc[i].status));
			if (wc[i].opcode == IBV_WC_RECV)
				recvs++;
			else
				sends++;
		}
		if (tp_now() > deadline)
			tp_die("only %u of %u receives and %u of %u sends completed", recvs, SENDS,
			       sends, SENDS);
	}
}

/* Waits for IBV_EVENT_DEVICE_FATAL on the async fd; other events are printed and skipped. */
static double wait_fatal(struct ibv_context *ctx, unsigned long seconds)
{
	double t0 = tp_now(), deadline = t0 + seconds;

	tp_set_nonblock(ctx->async_fd);
	for (;;) {
		struct ibv_async_event ev;

		if (!tp_next_async_event(ctx, deadline, &ev))
			tp_die("no IBV_EVENT_DEVICE_FATAL within %lu s", seconds);
		ibv_ack_async_event(&ev);
		if (ev.event_type == IBV_EVENT_DEVICE_FATAL)
			return tp_now() - t0;
		tp_note("event %s while waiting for the removal", ibv_event_type_str(ev.event_type));
	}
}

int main(int argc, char **argv)
{
	unsigned long seconds = 60;
	bool fatal = false;
	struct tp_msg rbuf[SENDS];
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_port_attr port;
	struct ibv_comp_channel *channel;
	struct ibv_mr *mr, *late_mr;
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	struct tp_dev dev;
	double waited;
	unsigned int i;
	int opt, ret;

	tp_prog = "removal-holder";
	while ((opt = getopt(argc, argv, "t:fh")) != -1) {
		switch (opt) {
		case 't':
			seconds = tp_parse_ulong("SECONDS", optarg, 1, 3600);
			break;
		case 'f':
			fatal = true;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();

	tp_open(&dev, argv[optind]);
	channel = tp_create_channel(&dev);
	cq = ibv_create_cq(dev.ctx, 4 * SENDS, NULL, channel, 0);
	if (!cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	if (ibv_req_notify_cq(cq, 0))
		tp_die("ibv_req_notify_cq failed");
	mr = ibv_reg_mr(dev.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	a = tp_create_rc_qp(&dev, cq, cq, SENDS, 1);
	b = tp_create_rc_qp(&dev, cq, cq, 1, SENDS);
	tp_connect_pair(&dev, a, b);

	memset(rbuf, 0, sizeof(rbuf));
	for (i = 0; i < SENDS; i++)
		if (tp_post_recv(b, mr, &rbuf[i], i))
			tp_die("ibv_post_recv failed");
	for (i = 0; i < SENDS; i++) {
		struct tp_msg msg = { .magic = TP_MSG_MAGIC, .stream = 7, .seq = 1000 + i };

		ret = tp_post_send(a, &msg, i, 0);
		if (ret)
			tp_die("ibv_post_send: %s", strerror(ret));
	}
	reap(cq);
	for (i = 0; i < SENDS; i++)
		if (rbuf[i].magic != TP_MSG_MAGIC || rbuf[i].stream != 7 || rbuf[i].seq != 1000 + i)
			tp_die("received message %u is wrong: magic %#x stream %u seq %llu", i,
			       rbuf[i].magic, rbuf[i].stream, (unsigned long long)rbuf[i].seq);
	printf("ready: %u SENDs through the QP pair checked\n", SENDS);
	fflush(stdout);

	waited = wait_fatal(dev.ctx, seconds);
	printf("IBV_EVENT_DEVICE_FATAL after %.2f s\n", waited);

	if (fatal) {
		double t0 = tp_now();

		while (!ibv_query_port(dev.ctx, 1, &port)) {
			if (tp_now() - t0 > 30)
				tp_die("ibv_query_port still succeeds 30 s after IBV_EVENT_DEVICE_FATAL");
			usleep(20000);
		}
		printf("commands fail %.2f s after IBV_EVENT_DEVICE_FATAL (the removal that resets the device)\n",
		       tp_now() - t0);
	}

	/* The device is gone: commands fail, the data path must not take the process down. */
	if (!ibv_query_port(dev.ctx, 1, &port))
		tp_die("ibv_query_port succeeded after the removal");
	ret = ibv_modify_qp(a, &attr, IBV_QP_STATE);
	if (!ret)
		tp_die("ibv_modify_qp succeeded after the removal");
	printf("commands fail: query_port and modify_qp: %s\n", strerror(ret));
	late_mr = ibv_reg_mr(dev.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	if (late_mr)
		tp_die("ibv_reg_mr succeeded after the removal");
	{
		struct tp_msg msg = { .magic = TP_MSG_MAGIC, .stream = 7, .seq = 1 };

		/* libirdma writes the WQE and rings the zapped doorbell page. */
		ret = tp_post_send(a, &msg, 99, 0);
		printf("post after the removal: %s\n", ret ? strerror(ret) : "accepted (no effect)");
	}
	ret = ibv_poll_cq(cq, 1, &wc);
	if (ret > 0)
		tp_die("a completion (wr_id %lu) after the removal", (unsigned long)wc.wr_id);

	/* Cleanup must still work: ib_core freed the hardware objects already. */
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		tp_die("ibv_destroy_qp after the removal failed");
	if (ibv_dereg_mr(mr))
		tp_die("ibv_dereg_mr after the removal failed");
	if (ibv_destroy_cq(cq))
		tp_die("ibv_destroy_cq after the removal failed");
	if (ibv_destroy_comp_channel(channel))
		tp_die("ibv_destroy_comp_channel after the removal failed");
	tp_close(&dev);
	printf("removal-holder: PASS: fatal event, failing commands, clean teardown\n");
	return 0;
}
