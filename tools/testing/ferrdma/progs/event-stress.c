// SPDX-License-Identifier: GPL-2.0
/*
 * event-stress: event-driven completion processing by many threads over many CQs, counting
 * every completion (no loss, no duplicate, no hang).
 *
 *   event-stress DEVICE [-t THREADS] [-m CQS] [-c COMPLETIONS] [-w WINDOW] [--shared]
 *                [--stall SECONDS] [--timeout SECONDS] [--sabotage]
 *
 * THREADS threads each own CQS streams; a stream is a pair of RC QPs on DEVICE connected to
 * each other through the port's RoCE v2 GID, with one CQ for all four of their queues, so its
 * send and receive completions interleave on that CQ. Each thread owns a completion channel
 * for its CQs (with --shared, all threads wait on one channel that every CQ reports to, so
 * events of one CQ are taken by any thread and one CQ may be polled by two threads at once).
 *
 * Every CQ is armed before the first SEND is posted; after that completions are only ever
 * reaped by the race-free loop: wait for an event, acknowledge it, re-arm the CQ, poll it
 * until empty. A thread never polls a CQ without an event, so a lost event (or a completion
 * that raced the arm and was not reported) stops its stream and shows as a hang. Each
 * send completion posts the stream's next SEND (at most WINDOW in flight), each receive
 * completion re-posts its buffer; every SEND carries its stream and sequence number, checked
 * on receipt. A watchdog fails the run when no completion arrived for --stall seconds
 * (default 30) or the whole run takes longer than --timeout (default 600).
 *
 * At the end every stream must have exactly its share of send and receive completions, each
 * sequence number once, and every CQ must be empty. COMPLETIONS (default 100000) is rounded up
 * to a multiple of 2 x THREADS x CQS. --sabotage makes the first stream skip one re-arm (as a
 * device that loses an event would): the watchdog must then fail the run.
 * Prints the counts, completions/s and a verdict; exits 0 only on success.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs-common.h"

#define POLL_BATCH	16

struct group;

struct stream {
	unsigned int id;
	struct group *grp;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;	/* a sends to b */
	struct tp_msg *rbuf;	/* recv_slots buffers, in recv_mr */
	unsigned long target;	/* SENDs (and receives) of this stream */
	atomic_ulong posted, send_done, recv_done, events, empty_events;
	atomic_uchar *send_seen, *recv_seen;	/* a bit per sequence number */
};

struct group {
	struct ibv_comp_channel *ch;
	unsigned long target;	/* completions of its streams */
	atomic_ulong done;
};

static struct tp_dev dev;
static struct stream *streams;
static struct group *groups;
static struct ibv_mr *recv_mr;
static unsigned int nstreams, ngroups, window, recv_slots;
static atomic_ulong total_done;
static bool sabotage;

static void post_next_send(struct stream *s)
{
	unsigned long seq = atomic_fetch_add(&s->posted, 1);
	struct tp_msg msg = {
		.magic = TP_MSG_MAGIC,
		.stream = s->id,
		.seq = seq,
	};
	int ret;

	if (seq >= s->target)
		return;
	/* Some SENDs solicited: the flag must not change anything for next-completion arms. */
	ret = tp_post_send(s->a, &msg, seq, seq % 7 == 3 ? IBV_SEND_SOLICITED : 0);
	if (ret)
		tp_die("stream %u: ibv_post_send(seq %lu): %s", s->id, seq, strerror(ret));
}

static void post_recv_slot(struct stream *s, unsigned int slot)
{
	if (tp_post_recv(s->b, recv_mr, &s->rbuf[slot], slot))
		tp_die("stream %u: ibv_post_recv failed", s->id);
}

/* Marks sequence number @seq seen in @bits; fails on a duplicate. */
static void mark(struct stream *s, atomic_uchar *bits, unsigned long seq, const char *kind)
{
	unsigned char bit = 1u << (seq % 8);

	if (seq >= s->target)
		tp_die("stream %u: %s completion for seq %lu, beyond the %lu posted", s->id, kind,
		       seq, s->target);
	if (atomic_fetch_or(&bits[seq / 8], bit) & bit)
		tp_die("stream %u: duplicate %s completion for seq %lu", s->id, kind, seq);
}

static void handle(struct stream *s, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS)
		tp_die("stream %u: completion wr_id %llu on QP %u: %s", s->id,
		       (unsigned long long)wc->wr_id, wc->qp_num, ibv_wc_status_str(wc->status));
	if (wc->qp_num == s->a->qp_num && wc->opcode == IBV_WC_SEND) {
		mark(s, s->send_seen, wc->wr_id, "send");
		atomic_fetch_add(&s->send_done, 1);
		post_next_send(s);
	} else if (wc->qp_num == s->b->qp_num && wc->opcode == IBV_WC_RECV) {
		const struct tp_msg *msg = &s->rbuf[wc->wr_id];

		if (wc->byte_len != sizeof(*msg) || msg->magic != TP_MSG_MAGIC ||
		    msg->stream != s->id)
			tp_die("stream %u: received %u bytes, magic %#x, stream %u", s->id,
			       wc->byte_len, msg->magic, msg->stream);
		mark(s, s->recv_seen, msg->seq, "receive");
		atomic_fetch_add(&s->recv_done, 1);
		post_recv_slot(s, wc->wr_id);
	} else {
		tp_die("stream %u: unexpected completion: QP %u opcode %d", s->id, wc->qp_num,
		       wc->opcode);
	}
}

/* Polls @s's CQ until empty; returns the number of completions. */
static unsigned long drain(struct stream *s)
{
	struct ibv_wc wc[POLL_BATCH];
	unsigned long n = 0;
	int got, i;

	do {
		got = ibv_poll_cq(s->cq, POLL_BATCH, wc);
		if (got < 0)
			tp_die("stream %u: ibv_poll_cq failed", s->id);
		for (i = 0; i < got; i++)
			handle(s, &wc[i]);
		n += got;
	} while (got);
	if (n) {
		atomic_fetch_add(&s->grp->done, n);
		atomic_fetch_add(&total_done, n);
	}
	return n;
}

static void arm(struct stream *s)
{
	int ret = ibv_req_notify_cq(s->cq, 0);

	if (ret)
		tp_die("stream %u: ibv_req_notify_cq: %s", s->id, strerror(ret));
}

static void *worker(void *arg)
{
	struct group *grp = arg;

	while (atomic_load(&grp->done) < grp->target) {
		struct ibv_cq *cq;
		struct stream *s;
		void *ctx;

		/* Only to notice the end: a timeout never leads to polling a CQ. */
		if (!tp_channel_ready(grp->ch, 100))
			continue;
		if (ibv_get_cq_event(grp->ch, &cq, &ctx)) {
			if (errno == EAGAIN)	/* another thread took it (--shared) */
				continue;
			tp_die("ibv_get_cq_event: %s", strerror(errno));
		}
		s = ctx;
		if (s->cq != cq)
			tp_die("event for CQ %p with the context of stream %u (CQ %p)", (void *)cq,
			       s->id, (void *)s->cq);
		ibv_ack_cq_events(cq, 1);
		if (!(sabotage && s->id == 0 && atomic_load(&s->events) == 2))
			arm(s);
		atomic_fetch_add(&s->events, 1);
		if (!drain(s))
			atomic_fetch_add(&s->empty_events, 1);
	}
	return NULL;
}

static void report_streams(FILE *f)
{
	unsigned int i;

	for (i = 0; i < nstreams; i++) {
		struct stream *s = &streams[i];

		fprintf(f, "  stream %u: posted %lu, sends %lu/%lu, receives %lu/%lu, events %lu (%lu empty)\n",
			s->id, atomic_load(&s->posted) < s->target ? atomic_load(&s->posted) : s->target,
			atomic_load(&s->send_done), s->target, atomic_load(&s->recv_done),
			s->target, atomic_load(&s->events), atomic_load(&s->empty_events));
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s DEVICE [-t THREADS] [-m CQS] [-c COMPLETIONS] [-w WINDOW] [--shared]\n"
		"       [--stall SECONDS] [--timeout SECONDS] [--sabotage]\n", tp_prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "shared", no_argument, NULL, 's' },
		{ "stall", required_argument, NULL, 'T' },
		{ "timeout", required_argument, NULL, 'O' },
		{ "sabotage", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ }
	};
	unsigned long completions = 100000, per_stream, total, stall = 30, timeout = 600;
	unsigned long events = 0, empty = 0, last_done = 0;
	unsigned int threads = 4, cqs = 4, i, j;
	double t0, last_progress, last_print, elapsed;
	struct tp_msg *rbufs;
	pthread_t *tids;
	bool shared = false;
	int opt;

	tp_prog = "event-stress";
	window = 16;
	while ((opt = getopt_long(argc, argv, "t:m:c:w:sh", longopts, NULL)) != -1) {
		switch (opt) {
		case 't':
			threads = tp_parse_ulong("THREADS", optarg, 1, 64);
			break;
		case 'm':
			cqs = tp_parse_ulong("CQS", optarg, 1, 64);
			break;
		case 'c':
			completions = tp_parse_ulong("COMPLETIONS", optarg, 1, 1UL << 40);
			break;
		case 'w':
			window = tp_parse_ulong("WINDOW", optarg, 1, 256);
			break;
		case 's':
			shared = true;
			break;
		case 'T':
			stall = tp_parse_ulong("stall seconds", optarg, 1, 86400);
			break;
		case 'O':
			timeout = tp_parse_ulong("timeout seconds", optarg, 1, 86400);
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

	nstreams = threads * cqs;
	ngroups = shared ? 1 : threads;
	per_stream = (completions + 2UL * nstreams - 1) / (2UL * nstreams);
	total = 2 * per_stream * nstreams;
	recv_slots = 2 * window;

	tp_open(&dev, argv[optind]);
	streams = calloc(nstreams, sizeof(*streams));
	groups = calloc(ngroups, sizeof(*groups));
	tids = calloc(threads, sizeof(*tids));
	rbufs = calloc((size_t)nstreams * recv_slots, sizeof(*rbufs));
	if (!streams || !groups || !tids || !rbufs)
		tp_die("out of memory");
	recv_mr = ibv_reg_mr(dev.pd, rbufs, (size_t)nstreams * recv_slots * sizeof(*rbufs),
			     IBV_ACCESS_LOCAL_WRITE);
	if (!recv_mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	for (i = 0; i < ngroups; i++)
		groups[i].ch = tp_create_channel(&dev);
	for (i = 0; i < nstreams; i++) {
		struct stream *s = &streams[i];

		s->id = i;
		s->grp = &groups[shared ? 0 : i / cqs];
		s->grp->target += 2 * per_stream;
		s->target = per_stream;
		s->rbuf = &rbufs[(size_t)i * recv_slots];
		s->send_seen = calloc(per_stream / 8 + 1, 1);
		s->recv_seen = calloc(per_stream / 8 + 1, 1);
		if (!s->send_seen || !s->recv_seen)
			tp_die("out of memory");
		/* Room for everything in flight: WINDOW sends and all receive buffers. */
		s->cq = ibv_create_cq(dev.ctx, 2 * (window + recv_slots) + 16, s, s->grp->ch, 0);
		if (!s->cq)
			tp_die("ibv_create_cq: %s", strerror(errno));
		s->a = tp_create_rc_qp(&dev, s->cq, s->cq, window, 1);
		s->b = tp_create_rc_qp(&dev, s->cq, s->cq, 1, recv_slots);
		tp_connect_pair(&dev, s->a, s->b);
	}
	tp_note("%u threads x %u CQs (%s), %u streams of %lu SENDs, window %u: %lu completions expected%s",
		threads, cqs, shared ? "one channel shared by all threads" : "a channel per thread",
		nstreams, per_stream, window, total,
		sabotage ? "; SABOTAGE: stream 0 skips its third re-arm" : "");

	/* Arm everything, then start the traffic: no completion can precede its CQ's arm. */
	for (i = 0; i < nstreams; i++)
		arm(&streams[i]);
	for (i = 0; i < threads; i++)
		if (pthread_create(&tids[i], NULL, worker, &groups[shared ? 0 : i]))
			tp_die("pthread_create failed");
	t0 = tp_now();
	for (i = 0; i < nstreams; i++) {
		for (j = 0; j < recv_slots; j++)
			post_recv_slot(&streams[i], j);
		for (j = 0; j < window; j++)
			post_next_send(&streams[i]);
	}

	/* The watchdog. */
	last_progress = last_print = t0;
	while (atomic_load(&total_done) < total) {
		unsigned long done;
		double now;

		usleep(100000);
		now = tp_now();
		done = atomic_load(&total_done);
		if (done != last_done) {
			last_done = done;
			last_progress = now;
		}
		if (now - last_print >= 10) {
			tp_note("%.0fs: %lu of %lu completions (%.0f/s)", now - t0, done, total,
				done / (now - t0));
			last_print = now;
		}
		if (now - last_progress > stall) {
			fprintf(stderr, "%s: no completion for %lu s; %lu of %lu completions:\n",
				tp_prog, stall, done, total);
			report_streams(stderr);
			tp_die("hang: %lu completions never reaped (lost event or completion?)",
			       total - done);
		}
		if (now - t0 > timeout) {
			report_streams(stderr);
			tp_die("not done after %lu s: %lu of %lu completions", timeout, done, total);
		}
	}
	elapsed = tp_now() - t0;
	for (i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);

	/* Every completion counted once; nothing left over in any CQ. */
	for (i = 0; i < ngroups; i++) {
		while (tp_channel_ready(groups[i].ch, 0)) {
			struct ibv_cq *cq;
			void *ctx;

			if (ibv_get_cq_event(groups[i].ch, &cq, &ctx))
				break;
			ibv_ack_cq_events(cq, 1);
			atomic_fetch_add(&((struct stream *)ctx)->events, 1);
			atomic_fetch_add(&((struct stream *)ctx)->empty_events, 1);
		}
	}
	for (i = 0; i < nstreams; i++) {
		struct stream *s = &streams[i];
		struct ibv_wc wc;

		if (atomic_load(&s->send_done) != s->target || atomic_load(&s->recv_done) != s->target)
			tp_die("stream %u: %lu send and %lu receive completions, expected %lu each",
			       i, atomic_load(&s->send_done), atomic_load(&s->recv_done), s->target);
		if (ibv_poll_cq(s->cq, 1, &wc) != 0)
			tp_die("stream %u: a completion left in the CQ after all were counted", i);
		events += atomic_load(&s->events);
		empty += atomic_load(&s->empty_events);
	}
	if (atomic_load(&total_done) != total)
		tp_die("%lu completions, expected %lu", atomic_load(&total_done), total);

	for (i = 0; i < nstreams; i++) {
		struct stream *s = &streams[i];

		if (ibv_destroy_qp(s->a) || ibv_destroy_qp(s->b) || ibv_destroy_cq(s->cq))
			tp_die("stream %u: destroying its QPs and CQ failed", i);
		free(s->send_seen);
		free(s->recv_seen);
	}
	for (i = 0; i < ngroups; i++)
		if (ibv_destroy_comp_channel(groups[i].ch))
			tp_die("ibv_destroy_comp_channel failed");
	if (ibv_dereg_mr(recv_mr))
		tp_die("ibv_dereg_mr failed");
	tp_close(&dev);
	printf("event-stress: PASS: %lu completions (%u threads x %u CQs%s), none lost or repeated; %lu events (%lu found the CQ empty); %.1f s, %.0f completions/s\n",
	       total, threads, cqs, shared ? ", shared channel" : "", events, empty, elapsed,
	       total / elapsed);
	free(rbufs);
	free(tids);
	free(streams);
	free(groups);
	return 0;
}
