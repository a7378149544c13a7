// SPDX-License-Identifier: GPL-2.0
/*
 * cq-resize: ibv_resize_cq while completions are in flight, every completion counted and every
 * byte checked (issue 17). Plain libibverbs, so it runs on any RoCE device.
 *
 *   cq-resize DEVICE [-n MESSAGES] [-s SEED]
 *
 * An RC pair on DEVICE (loopback through its own GID): QP a sends on CQ "send", QP b receives
 * on CQ "recv". Each message has its own length (16 B to 8 KiB) and a pattern made from its
 * sequence number, so a lost, duplicated, stale or misplaced completion or byte is caught.
 *
 * 1. Streaming: MESSAGES SENDs with up to 48 outstanding and 96 receives posted; both CQs are
 *    polled a few completions at a time, so CQEs sit unpolled in the ring when, every 200
 *    messages, each CQ is resized (grown and shrunk in turn): completions land in the old ring
 *    before the resize and in the new one after. Checked: every send completion (status,
 *    opcode, wr_id in order), every receive completion (status, opcode, byte_len, wr_id, the
 *    payload's bytes, in order), nothing more; the capacity ibv_resize_cq reports covers what
 *    was asked.
 * 2. Refusal: 100 receive completions left unpolled, a resize to a CQ too small for them fails
 *    with EINVAL and one that fits succeeds; then all 100 are polled and checked, and 10 more
 *    messages arrive through the new ring.
 * 3. The old ring's consumer index: libirdma keeps storing it until it polls the new ring; with
 *    40 polled in the old ring, 150 completions must fit a new ring of 202 slots.
 * 4. An event after a resize: the receive CQ is armed on the new ring and a SEND wakes it.
 * 5. A resize beyond max_cqe fails with EINVAL; one to 0 too, unless the provider rounds it up to
 *    its smallest CQ before the kernel sees it (libirdma does).
 *
 * Prints what it did; exits 0 only if every check held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs-common.h"

#define WINDOW		48	/* outstanding SENDs */
#define RECVS		96	/* receives kept posted */
#define MAX_LEN		8192
#define POLL_BATCH	3	/* completions taken per poll: leaves CQEs in the ring */
#define RESIZE_EVERY	200
#define HELD		100	/* unpolled completions in the refusal check */
#define SSLOTS		(HELD + 16)	/* send buffers (and SQ depth) */
#define RSLOTS		(RECVS + HELD + 16)	/* receive buffers (and RQ depth) */
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

static const int send_sizes[] = { 64, 256, 48, 1024, 100, 2048, 60 };
static const int recv_sizes[] = { 2048, 256, 4096, 200, 1024, 130 };

struct ctx {
	struct tp_dev dev;
	struct ibv_cq *scq, *rcq;
	struct ibv_comp_channel *ch;
	struct ibv_qp *a, *b;
	uint8_t *sbuf, *rbuf;		/* SSLOTS and RSLOTS slots of MAX_LEN */
	struct ibv_mr *smr, *rmr;
	uint64_t seed;
	uint64_t sent, send_done, recv_posted, recv_done;
	unsigned int resizes;
};

static uint32_t msg_len(const struct ctx *c, uint64_t seq)
{
	return 16 + (uint32_t)((seq * 2654435761u + c->seed) % (MAX_LEN - 16 + 1));
}

static uint8_t pattern(const struct ctx *c, uint64_t seq, uint32_t i)
{
	uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ (c->seed + i / 8);

	return (uint8_t)(x >> (8 * (i % 8)));
}

/* Message @seq: its sequence number in the first 8 bytes, then the pattern. */
static void fill(const struct ctx *c, uint8_t *p, uint64_t seq)
{
	uint32_t len = msg_len(c, seq), i;

	memcpy(p, &seq, sizeof(seq));
	for (i = 8; i < len; i++)
		p[i] = pattern(c, seq, i);
}

static void check_payload(const struct ctx *c, const uint8_t *p, uint64_t seq, uint32_t len)
{
	uint64_t got;
	uint32_t i;

	if (len != msg_len(c, seq))
		tp_die("message %" PRIu64 ": byte_len %u, expected %u", seq, len, msg_len(c, seq));
	memcpy(&got, p, sizeof(got));
	if (got != seq)
		tp_die("message %" PRIu64 ": carries sequence number %" PRIu64
		       " (a stale, duplicated or misplaced message)", seq, got);
	for (i = 8; i < len; i++)
		if (p[i] != pattern(c, seq, i))
			tp_die("message %" PRIu64 ": first bad byte at offset %u of %u: expected %#04x, got %#04x",
			       seq, i, len, pattern(c, seq, i), p[i]);
}

static void post_send(struct ctx *c)
{
	uint64_t seq = c->sent;
	uint8_t *p = c->sbuf + (seq % SSLOTS) * MAX_LEN;
	struct ibv_sge sge = {
		.addr = (uintptr_t)p, .length = msg_len(c, seq), .lkey = c->smr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = seq, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int ret;

	fill(c, p, seq);
	ret = ibv_post_send(c->a, &wr, &bad);
	if (ret)
		tp_die("ibv_post_send of message %" PRIu64 ": %s", seq, strerror(ret));
	c->sent++;
}

static void post_recv(struct ctx *c)
{
	uint64_t n = c->recv_posted;
	uint8_t *p = c->rbuf + (n % RSLOTS) * MAX_LEN;
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = MAX_LEN, .lkey = c->rmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = n, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret;

	/* Poison: a completion that reports bytes it did not write is caught. */
	memset(p, 0xa5, MAX_LEN);
	ret = ibv_post_recv(c->b, &wr, &bad);
	if (ret)
		tp_die("ibv_post_recv %" PRIu64 ": %s", n, strerror(ret));
	c->recv_posted++;
}

/* Takes at most @max send completions; each must be the next one. */
static int poll_sends(struct ctx *c, int max)
{
	struct ibv_wc wc[16];
	int n, i;

	n = ibv_poll_cq(c->scq, max < 16 ? max : 16, wc);
	if (n < 0)
		tp_die("ibv_poll_cq(send): %d", n);
	for (i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			tp_die("send completion %" PRIu64 ": %s", c->send_done,
			       ibv_wc_status_str(wc[i].status));
		if (wc[i].opcode != IBV_WC_SEND)
			tp_die("send completion %" PRIu64 ": opcode %d", c->send_done, wc[i].opcode);
		if (wc[i].wr_id != c->send_done)
			tp_die("send completion: wr_id %" PRIu64 ", expected %" PRIu64
			       " (lost, duplicated or out of order)", wc[i].wr_id, c->send_done);
		if (wc[i].qp_num != c->a->qp_num)
			tp_die("send completion %" PRIu64 ": qp_num %u, expected %u", c->send_done,
			       wc[i].qp_num, c->a->qp_num);
		c->send_done++;
	}
	return n;
}

/* Takes at most @max receive completions, checks them, and reposts when @repost. */
static int poll_recvs(struct ctx *c, int max, bool repost)
{
	struct ibv_wc wc[16];
	int n, i;

	n = ibv_poll_cq(c->rcq, max < 16 ? max : 16, wc);
	if (n < 0)
		tp_die("ibv_poll_cq(recv): %d", n);
	for (i = 0; i < n; i++) {
		uint64_t seq = c->recv_done;

		if (wc[i].status != IBV_WC_SUCCESS)
			tp_die("receive completion %" PRIu64 ": %s", seq,
			       ibv_wc_status_str(wc[i].status));
		if (wc[i].opcode != IBV_WC_RECV)
			tp_die("receive completion %" PRIu64 ": opcode %d", seq, wc[i].opcode);
		/* Receives complete in order, and message n lands in receive n. */
		if (wc[i].wr_id != seq)
			tp_die("receive completion: wr_id %" PRIu64 ", expected %" PRIu64
			       " (lost, duplicated or out of order)", wc[i].wr_id, seq);
		if (wc[i].qp_num != c->b->qp_num)
			tp_die("receive completion %" PRIu64 ": qp_num %u, expected %u", seq,
			       wc[i].qp_num, c->b->qp_num);
		check_payload(c, c->rbuf + (seq % RSLOTS) * MAX_LEN, seq, wc[i].byte_len);
		c->recv_done++;
		if (repost)
			post_recv(c);
	}
	return n;
}

static void resize(struct ctx *c, struct ibv_cq *cq, const char *name, int cqe)
{
	int ret = ibv_resize_cq(cq, cqe);

	if (ret)
		tp_die("ibv_resize_cq(%s, %d) with %" PRIu64 " sends and %" PRIu64
		       " receives outstanding: %s", name, cqe, c->sent - c->send_done,
		       c->recv_posted - c->recv_done, strerror(ret));
	if (cq->cqe < cqe)
		tp_die("ibv_resize_cq(%s, %d): the CQ reports %d entries", name, cqe, cq->cqe);
	c->resizes++;
}

static double deadline_in(double s)
{
	return tp_now() + s;
}

static void streaming(struct ctx *c, uint64_t total)
{
	unsigned int round = 0;
	double end = deadline_in(300);

	while (c->recv_done < total) {
		while (c->sent < total && c->sent - c->send_done < WINDOW)
			post_send(c);
		poll_sends(c, POLL_BATCH);
		poll_recvs(c, POLL_BATCH, c->recv_posted < total);
		if (c->sent >= (uint64_t)(round + 1) * RESIZE_EVERY && c->sent < total) {
			resize(c, c->scq, "send", send_sizes[round % ARRAY_SIZE(send_sizes)]);
			resize(c, c->rcq, "recv", recv_sizes[round % ARRAY_SIZE(recv_sizes)]);
			round++;
		}
		if (tp_now() > end)
			tp_die("streaming stalled: %" PRIu64 " sent, %" PRIu64 " send and %" PRIu64
			       " receive completions", c->sent, c->send_done, c->recv_done);
	}
	while (c->send_done < total) {
		poll_sends(c, 16);
		if (tp_now() > end)
			tp_die("%" PRIu64 " of %" PRIu64 " send completions", c->send_done, total);
	}
	tp_note("streaming: %" PRIu64 " messages, every completion and byte checked, %u resizes "
		"of the two CQs with completions in flight", total, round);
}

/* The CQs must hold nothing more: a duplicated completion would show up here. */
static void expect_empty(struct ctx *c, const char *when)
{
	struct ibv_wc wc;

	if (ibv_poll_cq(c->scq, 1, &wc) != 0 || ibv_poll_cq(c->rcq, 1, &wc) != 0)
		tp_die("%s: a completion beyond the expected ones (wr_id %" PRIu64 ")", when,
		       wc.wr_id);
}

static void refusal(struct ctx *c)
{
	uint64_t first = c->recv_done, i;
	int ret;

	while (c->recv_posted < first + HELD + 10)
		post_recv(c);
	for (i = 0; i < HELD; i++)
		post_send(c);
	/* An RC send completes once the receiver has the message: its CQE is written then. */
	{
		double end = deadline_in(30);

		while (c->send_done < c->sent) {
			poll_sends(c, 16);
			if (tp_now() > end)
				tp_die("%" PRIu64 " of %d sends completed", c->send_done - first, HELD);
		}
	}
	ret = ibv_resize_cq(c->rcq, 20);
	if (ret != EINVAL)
		tp_die("resize of the receive CQ to 20 entries with %d completions unpolled: %s, expected EINVAL",
		       HELD, ret ? strerror(ret) : "success");
	resize(c, c->rcq, "recv", 3 * HELD);
	while (c->recv_done < first + HELD)
		if (poll_recvs(c, 16, false) == 0)
			tp_die("only %" PRIu64 " of the %d held completions after the resize",
			       c->recv_done - first, HELD);
	for (i = 0; i < 10; i++)
		post_send(c);
	{
		double end = deadline_in(30);

		while (c->recv_done < first + HELD + 10 || c->send_done < c->sent) {
			poll_recvs(c, 16, false);
			poll_sends(c, 16);
			if (tp_now() > end)
				tp_die("the 10 messages after the refused resize did not all arrive");
		}
	}
	tp_note("refusal: a resize too small for %d unpolled completions failed with EINVAL; "
		"one that fits kept all of them, and later ones arrived in the new ring", HELD);
}

/* Sends up to message @upto, keeping fewer than SSLOTS outstanding; waits for every send. */
static void send_upto(struct ctx *c, uint64_t upto, double end)
{
	while (c->send_done < upto) {
		while (c->sent < upto && c->sent - c->send_done < SSLOTS - 1)
			post_send(c);
		poll_sends(c, 16);
		if (tp_now() > end)
			tp_die("%" PRIu64 " of %" PRIu64 " sends completed", c->send_done, upto);
	}
}

/*
 * Until libirdma polls the new ring, the consumer index it keeps in the shadow area is the old
 * ring's. A device that took it for an index into the new ring would find that ring fuller
 * than it is and overflow it: 40 completions polled from a ring of 1002 slots (index 40), a
 * resize to 202 slots, then 150 completions left unpolled: at face value, index 40 leaves room
 * for 39 of them.
 */
static void old_ring_index(struct ctx *c)
{
	uint64_t first = c->recv_done, i;
	double end = deadline_in(60);

	resize(c, c->rcq, "recv", 500);
	for (i = 0; i < 40; i++)
		post_recv(c);
	send_upto(c, c->sent + 40, end);
	while (c->recv_done < first + 40) {
		poll_recvs(c, 16, false);
		if (tp_now() > end)
			tp_die("old ring index: %" PRIu64 " of 40 receives", c->recv_done - first);
	}
	resize(c, c->rcq, "recv", 100);
	for (i = 0; i < 150; i++)
		post_recv(c);
	send_upto(c, c->sent + 150, end);
	while (c->recv_done < first + 190) {
		if (poll_recvs(c, 16, false) == 0 && tp_now() > end)
			tp_die("old ring index: %" PRIu64 " of the 150 completions in the new ring (overflowed?)",
			       c->recv_done - first - 40);
	}
	tp_note("old ring index: 150 completions unpolled in a new ring of 202 slots after the "
		"consumer stopped at index 40 of the old one, all there");
}

static void event_after_resize(struct ctx *c)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	resize(c, c->rcq, "recv", 500);
	post_recv(c);
	if (ibv_req_notify_cq(c->rcq, 0))
		tp_die("ibv_req_notify_cq: %s", strerror(errno));
	post_send(c);
	if (!tp_channel_ready(c->ch, 10000))
		tp_die("no completion event within 10 s on the resized receive CQ");
	if (ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx))
		tp_die("ibv_get_cq_event: %s", strerror(errno));
	if (ev_cq != c->rcq)
		tp_die("the event names another CQ");
	ibv_ack_cq_events(ev_cq, 1);
	while (c->recv_done < c->recv_posted || c->send_done < c->sent) {
		poll_recvs(c, 16, false);
		poll_sends(c, 16);
	}
	tp_note("event: an arm on the resized CQ woke on the next completion");
}

static void bad_sizes(struct ctx *c)
{
	struct ibv_device_attr attr;
	int ret;

	if (ibv_query_device(c->dev.ctx, &attr))
		tp_die("ibv_query_device: %s", strerror(errno));
	ret = ibv_resize_cq(c->rcq, attr.max_cqe + 1);
	if (ret != EINVAL)
		tp_die("resize to max_cqe + 1 = %d entries: %s, expected EINVAL", attr.max_cqe + 1,
		       ret ? strerror(ret) : "success");
	/*
	 * 0 never reaches the kernel through libirdma, which rounds every size up to its
	 * smallest ring (4 entries) first; the kernel's own answer to 0 (EINVAL, from ib_core) is
	 * checked with raw commands by verbs-hostile-verbs. rxe passes 0 on and gets EINVAL.
	 */
	ret = ibv_resize_cq(c->rcq, 0);
	if (ret && ret != EINVAL)
		tp_die("resize to 0 entries: %s, expected EINVAL or the smallest CQ", strerror(ret));
	tp_note("bad sizes: max_cqe + 1 (%d) refused with EINVAL; 0 %s", attr.max_cqe + 1,
		ret ? "refused with EINVAL" : "taken as the smallest CQ (the provider rounds it up)");
}

int main(int argc, char **argv)
{
	struct ctx c = { .seed = 1 };
	uint64_t total = 2000;
	int opt;

	tp_prog = "cq-resize";
	while ((opt = getopt(argc, argv, "n:s:")) != -1) {
		switch (opt) {
		case 'n':
			total = tp_parse_ulong("-n", optarg, 1, 1000000);
			break;
		case 's':
			c.seed = tp_parse_ulong("-s", optarg, 0, 1ul << 62);
			break;
		default:
			tp_die("usage: cq-resize DEVICE [-n MESSAGES] [-s SEED]");
		}
	}
	if (optind != argc - 1)
		tp_die("usage: cq-resize DEVICE [-n MESSAGES] [-s SEED]");
	tp_open(&c.dev, argv[optind]);
	c.ch = tp_create_channel(&c.dev);
	c.scq = ibv_create_cq(c.dev.ctx, 64, NULL, NULL, 0);
	c.rcq = ibv_create_cq(c.dev.ctx, 512, NULL, c.ch, 0);
	if (!c.scq || !c.rcq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	c.a = tp_create_rc_qp(&c.dev, c.scq, c.scq, SSLOTS, 1);
	c.b = tp_create_rc_qp(&c.dev, c.rcq, c.rcq, 1, RSLOTS);
	tp_connect_pair(&c.dev, c.a, c.b);
	c.sbuf = calloc(SSLOTS, MAX_LEN);
	c.rbuf = calloc(RSLOTS, MAX_LEN);
	if (!c.sbuf || !c.rbuf)
		tp_die("out of memory");
	c.smr = ibv_reg_mr(c.dev.pd, c.sbuf, SSLOTS * MAX_LEN, IBV_ACCESS_LOCAL_WRITE);
	c.rmr = ibv_reg_mr(c.dev.pd, c.rbuf, RSLOTS * MAX_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!c.smr || !c.rmr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	while (c.recv_posted < RECVS)
		post_recv(&c);

	streaming(&c, total);
	expect_empty(&c, "after streaming");
	refusal(&c);
	expect_empty(&c, "after the refusal check");
	old_ring_index(&c);
	expect_empty(&c, "after the old ring index check");
	event_after_resize(&c);
	expect_empty(&c, "after the event check");
	bad_sizes(&c);

	if (ibv_destroy_qp(c.a) || ibv_destroy_qp(c.b) || ibv_destroy_cq(c.scq) ||
	    ibv_destroy_cq(c.rcq) || ibv_dereg_mr(c.smr) || ibv_dereg_mr(c.rmr) ||
	    ibv_destroy_comp_channel(c.ch))
		tp_die("teardown: %s", strerror(errno));
	tp_close(&c.dev);
	free(c.sbuf);
	free(c.rbuf);
	printf("cq-resize: %" PRIu64 " messages, %u resizes, all checks passed\n", c.sent,
	       c.resizes);
	return 0;
}
