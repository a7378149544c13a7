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
 * within SECONDS (default 300). The kernel side (no oops, no use after free, no leak) is
 * judged by the harness's splat and kmemleak checks around the run. --sabotage leaves the
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
static atomic_ulong events;
static bool sabotage;

static void *event_reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct ibv_cq *cq;
		void *ctx;

		if (!tp_channel_ready(channel, 50))
			continue;
		if (ibv_get_cq_event(channel, &cq, &ctx)) {
			if (errno == EAGAIN)
				continue;
			tp_die("ibv_get_cq_event: %s", strerror(errno));
		}
		if (atomic_fetch_add(&events, 1) > 0 || !sabotage)
			ibv_ack_cq_events(cq, 1);
	}
	return NULL;
}

static void on_alarm(int sig)
{
	static const char msg[] = "destroy-race: FAIL: the run did not end in time (a destroy hung?)\n";

	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
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

		cq = ibv_create_cq(dev.ctx, 4 * sends, NULL, channel, 0);
		if (!cq)
			tp_die("ibv_create_cq: %s", strerror(errno));
		a = tp_create_rc_qp(&dev, cq, cq, sends, 1);
		b = tp_create_rc_qp(&dev, cq, cq, 1, sends);
		tp_connect_pair(&dev, a, b);
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
			to_error(a);
			to_error(b);
		} else if (mode == 2 && ibv_req_notify_cq(cq, 1)) {
			tp_die("ibv_req_notify_cq(solicited) failed");
		}
		how[mode]++;
		if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
			tp_die("iteration %lu: ibv_destroy_qp failed", i);
		if (ibv_destroy_cq(cq))
			tp_die("iteration %lu: ibv_destroy_cq failed", i);
	}
	atomic_store(&stop, true);
	pthread_join(reader, NULL);
	if (ibv_destroy_comp_channel(channel))
		tp_die("ibv_destroy_comp_channel failed");
	if (ibv_dereg_mr(mr))
		tp_die("ibv_dereg_mr failed");
	tp_close(&dev);
	free(rbuf);
	printf("destroy-race: PASS: %lu iterations on %s (%u QPs destroyed in flight, %u after a move to ERR, %u with a fresh arm), %lu events taken and acknowledged during them, %.1f s\n",
	       iterations, dev.name, how[0], how[1], how[2], atomic_load(&events), tp_now() - t0);
	return 0;
}
