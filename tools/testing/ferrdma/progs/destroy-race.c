// SPDX-License-Identifier: GPL-2.0
/*
 * destroy-race: destroys QPs and CQs while their completions and events are in flight.
 *
 *   destroy-race DEVICE [-i ITERATIONS] [-n SENDS] [-t SECONDS] [--sabotage]
 *
 * A second thread takes every event off one completion channel and acknowledges it at once.
 * Each of ITERATIONS (default 200) iterations creates a CQ on that channel and two RC QPs on
 * DEVICE connected to each other, arms the CQ, posts SENDS (default 16) receives and SENDs,
 * and then, at once or after a short pause that grows with the iteration, tears everything
 * down while the completions and their events are being generated: by turns it destroys the
 * QPs straight away, or first moves them to the error state (flush completions racing the
 * destroy), or re-arms the CQ before the QPs go; then it destroys the CQ. ibv_destroy_cq
 * returns only once every event that was delivered for the CQ has been acknowledged, so a
 * device or driver that loses track of an event in flight hangs it: the whole run must end
 * within SECONDS (default 300), or it fails naming the iteration and the step it was stuck in.
 * A completion event for a CQ that was never armed, or is gone, fails the run too. The kernel
 * side (no oops, no use after free, no leak) is judged by the harness's splat and kmemleak
 * checks around the run. --sabotage leaves the
 * first event unacknowledged (as if it were lost on the way): the run must then fail.
 * Prints the counts and a verdict; exits 0 only on success.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs-common.h"

static struct tp_dev dev;
static struct ibv_comp_channel *channel;
static atomic_bool stop;
static atomic_ulong events, stale_events;
static bool sabotage;
/*
 * The CQ that may have events: set just before it is first armed, cleared once it is
 * destroyed. An event is read, and so counted by the kernel for the CQ's destroy, before that
 * destroy can return; an event for any other CQ is a device or driver bug: one for a CQ that
 * was never armed (say, an event of a destroyed CQ whose number was given to the next one), or
 * for a CQ that is gone. It is counted and not acknowledged: the ibv_cq may be freed memory,
 * or not yet set up by ibv_create_cq, which zeroes the acknowledgement count after the kernel
 * created the CQ. A CQ's destroy then waits for that acknowledgement forever, and the alarm
 * reports the count.
 */
static struct ibv_cq *_Atomic live_cq;

/* Where the main thread is, for the report of a hang (read by the SIGALRM handler). */
static volatile sig_atomic_t iteration, step;
static const char *const step_names[] = {
	"setting up", "creating the CQ and QPs", "posting", "moving the QPs to ERR",
	"re-arming the CQ", "destroying the QPs", "destroying the CQ", "stopping the event reader",
	"closing the device",
};
enum { S_SETUP, S_CREATE, S_POST, S_TO_ERR, S_REARM, S_DESTROY_QPS, S_DESTROY_CQ, S_JOIN, S_CLOSE };

/* Where the event reader is, for the report of a hang. */
static volatile sig_atomic_t reader_step;
static const char *const reader_step_names[] = { "waiting", "reading an event", "acknowledging" };
enum { R_WAIT, R_READ, R_ACK };

static void *event_reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct ibv_cq *cq;
		void *ctx;

		reader_step = R_WAIT;
		if (!tp_channel_ready(channel, 50))
			continue;
		reader_step = R_READ;
		if (ibv_get_cq_event(channel, &cq, &ctx)) {
			if (errno == EAGAIN)
				continue;
			tp_die("ibv_get_cq_event: %s", strerror(errno));
		}
		if (cq != atomic_load(&live_cq)) {
			atomic_fetch_add(&stale_events, 1);
			continue;
		}
		reader_step = R_ACK;
		if (atomic_fetch_add(&events, 1) > 0 || !sabotage)
			ibv_ack_cq_events(cq, 1);
	}
	return NULL;
}

/* Appends the decimal digits of v to buf at *len (async-signal-safe). */
static void put_ulong(char *buf, size_t *len, unsigned long v)
{
	char digits[24];
	size_t n = 0;

	do
		digits[n++] = '0' + v % 10;
	while ((v /= 10) && n < sizeof(digits));
	while (n)
		buf[(*len)++] = digits[--n];
}

static void put_str(char *buf, size_t *len, size_t cap, const char *s)
{
	while (*s && *len < cap)
		buf[(*len)++] = *s++;
}

static void on_alarm(int sig)
{
	char msg[448];
	size_t len = 0;
	int s = step;
	struct ibv_cq *cq = atomic_load(&live_cq);

	(void)sig;
	put_str(msg, &len, 120, "destroy-race: FAIL: the run did not end in time: stuck at iteration ");
	put_ulong(msg, &len, (unsigned long)iteration);
	put_str(msg, &len, 150, ", ");
	put_str(msg, &len, 200, s >= 0 && s <= S_CLOSE ? step_names[s] : "?");
	put_str(msg, &len, 220, "; events taken: ");
	put_ulong(msg, &len, atomic_load(&events));
	put_str(msg, &len, 250, ", for a CQ not armed or gone: ");
	put_ulong(msg, &len, atomic_load(&stale_events));
	if (cq) {
		put_str(msg, &len, 300, ", acknowledged for this CQ: ");
		put_ulong(msg, &len, cq->comp_events_completed);
	}
	put_str(msg, &len, 360, "; the event reader is ");
	put_str(msg, &len, 400, reader_step_names[reader_step]);
	put_str(msg, &len, 420, "\n");
	if (write(STDERR_FILENO, msg, len) < 0)
		_exit(1);
	_exit(1);
}

static void to_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE);

	if (ret)
		tp_die("QP %u to ERR: %s", qp->qp_num, strerror(ret));
}

static void usage(void)
{
	fprintf(stderr, "usage: %s DEVICE [-i ITERATIONS] [-n SENDS] [-t SECONDS] [--sabotage]\n",
		tp_prog);
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned long iterations = 200, seconds = 300, i;
	unsigned int sends = 16, j, how[3] = { 0 };
	struct tp_msg *rbuf;
	struct ibv_mr *mr;
	pthread_t reader;
	double t0;
	static const struct option longopts[] = {
		{ "sabotage", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ }
	};
	int opt;

	tp_prog = "destroy-race";
	while ((opt = getopt_long(argc, argv, "i:n:t:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'i':
			iterations = tp_parse_ulong("ITERATIONS", optarg, 1, 10000000);
			break;
		case 'n':
			sends = tp_parse_ulong("SENDS", optarg, 1, 256);
			break;
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

	signal(SIGALRM, on_alarm);
	alarm(seconds);
	tp_open(&dev, argv[optind]);
	channel = tp_create_channel(&dev);
	rbuf = calloc(sends, sizeof(*rbuf));
	if (!rbuf)
		tp_die("out of memory");
	mr = ibv_reg_mr(dev.pd, rbuf, sends * sizeof(*rbuf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	if (pthread_create(&reader, NULL, event_reader, NULL))
		tp_die("pthread_create failed");

	t0 = tp_now();
	for (i = 0; i < iterations; i++) {
		struct ibv_cq *cq;
		struct ibv_qp *a, *b;
		unsigned int mode = i % 3;

		iteration = i;
		step = S_CREATE;
		cq = ibv_create_cq(dev.ctx, 4 * sends, NULL, channel, 0);
		if (!cq)
			tp_die("ibv_create_cq: %s", strerror(errno));
		a = tp_create_rc_qp(&dev, cq, cq, sends, 1);
		b = tp_create_rc_qp(&dev, cq, cq, 1, sends);
		tp_connect_pair(&dev, a, b);
		step = S_POST;
		atomic_store(&live_cq, cq);
		if (ibv_req_notify_cq(cq, 0))
			tp_die("ibv_req_notify_cq failed");
		for (j = 0; j < sends; j++)
			if (tp_post_recv(b, mr, &rbuf[j], j))
				tp_die("ibv_post_recv failed");
		for (j = 0; j < sends; j++) {
			struct tp_msg msg = { .magic = TP_MSG_MAGIC, .seq = j };
			int ret = tp_post_send(a, &msg, j, j & 1 ? IBV_SEND_SOLICITED : 0);

			if (ret)
				tp_die("ibv_post_send: %s", strerror(ret));
		}
		/* Tear down at once, or a little later: 0 to about 2 ms into the traffic. */
		if (i % 8)
			usleep((i % 8) * 250);
		if (mode == 1) {
			step = S_TO_ERR;
			to_error(a);
			to_error(b);
		} else if (mode == 2) {
			step = S_REARM;
			if (ibv_req_notify_cq(cq, 1))
				tp_die("ibv_req_notify_cq(solicited) failed");
		}
		how[mode]++;
		step = S_DESTROY_QPS;
		if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
			tp_die("iteration %lu: ibv_destroy_qp failed", i);
		step = S_DESTROY_CQ;
		if (ibv_destroy_cq(cq))
			tp_die("iteration %lu: ibv_destroy_cq failed", i);
		atomic_store(&live_cq, NULL);
	}
	step = S_JOIN;
	atomic_store(&stop, true);
	pthread_join(reader, NULL);
	step = S_CLOSE;
	if (ibv_destroy_comp_channel(channel))
		tp_die("ibv_destroy_comp_channel failed");
	if (ibv_dereg_mr(mr))
		tp_die("ibv_dereg_mr failed");
	tp_close(&dev);
	free(rbuf);
	if (atomic_load(&stale_events)) {
		printf("destroy-race: FAIL: %lu completion event(s) arrived for a CQ that was not armed, or gone\n",
		       atomic_load(&stale_events));
		return 1;
	}
	printf("destroy-race: PASS: %lu iterations on %s (%u QPs destroyed in flight, %u after a move to ERR, %u with a fresh arm), %lu events taken and acknowledged during them, %.1f s\n",
	       iterations, dev.name, how[0], how[1], how[2], atomic_load(&events), tp_now() - t0);
	return 0;
}
