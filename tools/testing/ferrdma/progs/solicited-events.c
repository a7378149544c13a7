// SPDX-License-Identifier: GPL-2.0
/*
 * solicited-events: CQ arming and completion events through a completion channel.
 *
 *   solicited-events DEVICE [-n SENDS] [-w QUIET_MS] [-e EVENT_MS] [-r ROUNDS] [--error-wakes]
 *                    [--sabotage]
 *
 * Two RC QPs on DEVICE, connected to each other through the port's RoCE v2 IPv4-mapped GID;
 * QP A sends (inline SENDs, its completions polled on a CQ of their own), QP B receives on a
 * CQ whose events go to a completion channel. Checks, in order:
 *
 *   1. armed solicited-only, SENDS unsolicited SENDs complete (all polled) and raise no event
 *      within QUIET_MS;
 *   2. then one solicited SEND raises exactly one event;
 *   3. armed for the next completion, one unsolicited SEND raises an event;
 *   4. one event per arm: without re-arming, SENDS more SENDs (the last one solicited) raise
 *      no event;
 *   5. armed solicited-only, SENDS unsolicited SENDs followed by one solicited SEND in one
 *      batch raise exactly one event, and all SENDS + 1 completions are there;
 *   6. a completion that raced the arm is not lost: SENDS SENDs complete before the CQ is
 *      armed and are all found by the poll after arming; then ROUNDS rounds of posting SENDS
 *      SENDs and arming at once, consumed with the race-free loop (wait for an event, ack,
 *      re-arm, poll until empty): every completion arrives, none is lost, none is extra;
 *   7. with --error-wakes only: armed solicited-only, error completions (SENDS receives
 *      flushed by moving QP B to the error state) raise an event, as InfiniBand specifies
 *      and issue 6 requires of ferrdma. Off by default: rxe posts flush completions as
 *      unsolicited, so a solicited-only arm never sees them.
 *
 * Every event is acknowledged with ibv_ack_cq_events. Expected events must come within
 * EVENT_MS. --sabotage arms check 1 for the next completion instead of solicited-only (as a
 * device that ignores the solicited-only flag would behave): the program must then fail.
 * Prints one line per check and a verdict; exits 0 only if every check passed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs-common.h"

#define RECV_SLOTS	512
#define CQ_DEPTH	1024

static struct tp_dev dev;
static struct ibv_comp_channel *channel;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qp_a, *qp_b;
static struct ibv_mr *recv_mr;
static struct tp_msg *recv_buf;

static unsigned int quiet_ms = 1000, event_ms = 10000;
static uint64_t next_send_seq, next_recv_seq, recv_slot;
static unsigned long events, checks;

static void arm(int solicited_only)
{
	int ret = ibv_req_notify_cq(rcq, solicited_only);

	if (ret)
		tp_die("ibv_req_notify_cq(solicited_only=%d): %s", solicited_only, strerror(ret));
}

/* Takes one event off the channel (it must be readable) and acknowledges it. */
static void get_event(const char *what)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	if (ibv_get_cq_event(channel, &cq, &cq_ctx))
		tp_die("%s: ibv_get_cq_event: %s", what, strerror(errno));
	if (cq != rcq || cq_ctx != &rcq)
		tp_die("%s: event for CQ %p (context %p), expected %p (context %p)", what,
		       (void *)cq, cq_ctx, (void *)rcq, (void *)&rcq);
	ibv_ack_cq_events(cq, 1);
	events++;
}

static void expect_event(const char *what)
{
	if (!tp_channel_ready(channel, event_ms))
		tp_die("%s: no completion event within %u ms", what, event_ms);
	get_event(what);
}

static void expect_no_event(const char *what)
{
	if (tp_channel_ready(channel, quiet_ms)) {
		get_event(what);
		tp_die("%s: an event arrived (within %u ms) although none was due", what,
		       quiet_ms);
	}
}

static void post_recvs(unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		uint64_t slot = recv_slot++ % RECV_SLOTS;

		if (tp_post_recv(qp_b, recv_mr, &recv_buf[slot], slot))
			tp_die("ibv_post_recv failed");
	}
}

/* Posts @n receives on B and @n SENDs on A; the last one gets @last_flags. */
static void post_sends(unsigned int n, unsigned int last_flags)
{
	unsigned int i;

	post_recvs(n);
	for (i = 0; i < n; i++) {
		struct tp_msg msg = {
			.magic = TP_MSG_MAGIC,
			.seq = next_send_seq,
		};
		int ret = tp_post_send(qp_a, &msg, next_send_seq++, i == n - 1 ? last_flags : 0);

		if (ret)
			tp_die("ibv_post_send: %s", strerror(ret));
	}
}

/* Polls A's send CQ until @n SENDs completed successfully (they have reached B by then). */
static void wait_sends(unsigned int n)
{
	double deadline = tp_now() + event_ms / 1000.0;
	unsigned int done = 0;
	struct ibv_wc wc[16];
	int i, got;

	while (done < n) {
		got = ibv_poll_cq(scq, 16, wc);
		if (got < 0)
			tp_die("ibv_poll_cq(send CQ) failed");
		for (i = 0; i < got; i++)
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_SEND)
				tp_die("send completion %llu: status %s, opcode %d",
				       (unsigned long long)wc[i].wr_id,
				       ibv_wc_status_str(wc[i].status), wc[i].opcode);
		done += got;
		if (done < n && tp_now() > deadline)
			tp_die("only %u of %u SENDs completed within %u ms", done, n, event_ms);
		if (!got)
			usleep(200);
	}
}

/* Polls the receive CQ once (up to 16): checks each completion, returns how many. */
static int poll_recv_once(const char *what)
{
	struct ibv_wc wc[16];
	int i, got;

	got = ibv_poll_cq(rcq, 16, wc);
	if (got < 0)
		tp_die("%s: ibv_poll_cq(receive CQ) failed", what);
	for (i = 0; i < got; i++) {
		struct tp_msg *msg = &recv_buf[wc[i].wr_id % RECV_SLOTS];

		if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV)
			tp_die("%s: receive completion: status %s, opcode %d", what,
			       ibv_wc_status_str(wc[i].status), wc[i].opcode);
		if (wc[i].byte_len != sizeof(*msg) || msg->magic != TP_MSG_MAGIC ||
		    msg->seq != next_recv_seq)
			tp_die("%s: received %u bytes, seq %llu; expected seq %llu", what,
			       wc[i].byte_len, (unsigned long long)msg->seq,
			       (unsigned long long)next_recv_seq);
		next_recv_seq++;
	}
	return got;
}

/* Polls until @n receive completions were found, then checks that the CQ is empty. */
static void poll_recvs(const char *what, unsigned int n)
{
	double deadline = tp_now() + event_ms / 1000.0;
	unsigned int done = 0;
	int got;

	while (done < n) {
		got = poll_recv_once(what);
		done += got;
		if (done < n && tp_now() > deadline)
			tp_die("%s: only %u of %u receive completions within %u ms", what, done, n,
			       event_ms);
		if (!got)
			usleep(200);
	}
	if (done > n || poll_recv_once(what))
		tp_die("%s: more receive completions than the %u SENDs posted", what, n);
}

static void pass(const char *what)
{
	checks++;
	printf("ok %lu - %s\n", checks, what);
	fflush(stdout);
}

/*
 * The race-free consumer loop: arm, poll until empty, and for each event ack, re-arm and poll
 * again. Returns the number of events taken; fails if @n completions do not all arrive.
 */
static unsigned long consume(const char *what, unsigned int n)
{
	unsigned long taken = 0;
	unsigned int done;

	arm(0);
	done = poll_recv_once(what);
	while (done < n) {
		int got;

		if (!tp_channel_ready(channel, event_ms))
			tp_die("%s: %u of %u completions missing: no event within %u ms after arming (lost completion or event)",
			       what, n - done, n, event_ms);
		get_event(what);
		taken++;
		arm(0);
		while ((got = poll_recv_once(what)) > 0)
			done += got;
	}
	if (done != n)
		tp_die("%s: %u completions for %u SENDs", what, done, n);
	return taken;
}

/* Check 7: flushed receives are error completions, which wake a solicited-only arm. */
static void check_error_wakes(unsigned int n)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	unsigned int done = 0;
	double deadline;
	int ret;

	/*
	 * The race loop of check 6 left the CQ armed for the next completion, and arming
	 * solicited-only on top does not lower that: one completion uses the arm up first.
	 */
	post_sends(1, 0);
	wait_sends(1);
	poll_recvs("check 7 (disarming)", 1);
	if (tp_channel_ready(channel, quiet_ms))
		get_event("check 7 (disarming)");

	post_recvs(n);
	arm(1);
	ret = ibv_modify_qp(qp_b, &attr, IBV_QP_STATE);
	if (ret)
		tp_die("check 7: QP %u to ERR: %s", qp_b->qp_num, strerror(ret));
	expect_event("check 7 (solicited-only arm, flushed receives)");
	deadline = tp_now() + event_ms / 1000.0;
	while (done < n) {
		struct ibv_wc wc;
		int got = ibv_poll_cq(rcq, 1, &wc);

		if (got < 0)
			tp_die("check 7: ibv_poll_cq failed");
		if (got && wc.status != IBV_WC_WR_FLUSH_ERR)
			tp_die("check 7: completion status %s, expected %s", ibv_wc_status_str(wc.status),
			       ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));
		done += got;
		if (!got && tp_now() > deadline)
			tp_die("check 7: only %u of %u flush completions within %u ms", done, n, event_ms);
		if (!got)
			usleep(200);
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s DEVICE [-n SENDS] [-w QUIET_MS] [-e EVENT_MS] [-r ROUNDS] [--error-wakes]\n"
		"       [--sabotage]\n", tp_prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "sabotage", no_argument, NULL, 'S' },
		{ "error-wakes", no_argument, NULL, 'E' },
		{ "help", no_argument, NULL, 'h' },
		{ }
	};
	unsigned int n = 8, rounds = 20, r;
	unsigned long raced_events = 0;
	bool sabotage = false, error_wakes = false;
	char what[128];
	int opt;

	tp_prog = "solicited-events";
	while ((opt = getopt_long(argc, argv, "n:w:e:r:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			n = tp_parse_ulong("SENDS", optarg, 1, RECV_SLOTS / 2);
			break;
		case 'w':
			quiet_ms = tp_parse_ulong("QUIET_MS", optarg, 1, 600000);
			break;
		case 'e':
			event_ms = tp_parse_ulong("EVENT_MS", optarg, 1, 600000);
			break;
		case 'r':
			rounds = tp_parse_ulong("ROUNDS", optarg, 0, 1000000);
			break;
		case 'S':
			sabotage = true;
			break;
		case 'E':
			error_wakes = true;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();

	tp_open(&dev, argv[optind]);
	channel = tp_create_channel(&dev);
	scq = ibv_create_cq(dev.ctx, CQ_DEPTH, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, CQ_DEPTH, &rcq, channel, 0);
	if (!scq || !rcq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	recv_buf = calloc(RECV_SLOTS, sizeof(*recv_buf));
	if (!recv_buf)
		tp_die("out of memory");
	recv_mr = ibv_reg_mr(dev.pd, recv_buf, RECV_SLOTS * sizeof(*recv_buf),
			     IBV_ACCESS_LOCAL_WRITE);
	if (!recv_mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	qp_a = tp_create_rc_qp(&dev, scq, scq, RECV_SLOTS, 1);
	qp_b = tp_create_rc_qp(&dev, scq, rcq, 1, RECV_SLOTS);
	tp_connect_pair(&dev, qp_a, qp_b);
	tp_note("QP %u -> QP %u; %u SENDs per check, quiet window %u ms, event wait %u ms%s",
		qp_a->qp_num, qp_b->qp_num, n, quiet_ms, event_ms,
		sabotage ? "; SABOTAGE: check 1 arms for the next completion" : "");

	/* 1. Solicited-only: unsolicited completions do not wake. */
	arm(sabotage ? 0 : 1);
	post_sends(n, 0);
	wait_sends(n);
	poll_recvs("check 1", n);
	expect_no_event("check 1 (solicited-only arm, unsolicited SENDs)");
	snprintf(what, sizeof(what), "armed solicited-only, %u unsolicited SENDs completed: no event", n);
	pass(what);

	/* 2. The arm still stands: a solicited completion wakes, once. */
	post_sends(1, IBV_SEND_SOLICITED);
	expect_event("check 2 (solicited SEND)");
	poll_recvs("check 2", 1);
	expect_no_event("check 2 (a second event)");
	pass("then one solicited SEND: exactly one event");

	/* 3. Next-completion arming: any completion wakes. */
	arm(0);
	post_sends(1, 0);
	expect_event("check 3 (next-completion arm, unsolicited SEND)");
	poll_recvs("check 3", 1);
	pass("armed for the next completion, one unsolicited SEND: one event");

	/* 4. One event per arm: nothing more without re-arming, not even a solicited SEND. */
	post_sends(n, IBV_SEND_SOLICITED);
	wait_sends(1 + 1 + n);
	poll_recvs("check 4", n);
	expect_no_event("check 4 (no re-arm after an event)");
	snprintf(what, sizeof(what), "not re-armed, %u more SENDs (last solicited): no event", n);
	pass(what);

	/* 5. Solicited-only, a mixed batch: one event, nothing lost. */
	arm(1);
	post_sends(n + 1, IBV_SEND_SOLICITED);
	expect_event("check 5 (mixed batch)");
	poll_recvs("check 5", n + 1);
	wait_sends(n + 1);
	expect_no_event("check 5 (a second event)");
	snprintf(what, sizeof(what), "armed solicited-only, %u unsolicited + 1 solicited SENDs: one event, %u completions",
		 n, n + 1);
	pass(what);

	/* 6a. Completions that were there before the arm are found by the poll after it. */
	post_sends(n, 0);
	wait_sends(n);
	arm(0);
	poll_recvs("check 6a", n);
	if (tp_channel_ready(channel, quiet_ms)) {
		/* Allowed, not required: some devices signal an arm over a non-empty CQ. */
		get_event("check 6a");
		tp_note("check 6a: arming over %u completions raised an event (allowed)", n);
	}
	snprintf(what, sizeof(what), "%u completions that preceded the arm: all found by the poll after arming", n);
	pass(what);

	/* 6b. Completions racing the arm: the standard loop sees every one. */
	for (r = 0; r < rounds; r++) {
		snprintf(what, sizeof(what), "check 6b round %u", r + 1);
		post_sends(n, r & 1 ? IBV_SEND_SOLICITED : 0);
		raced_events += consume(what, n);
		wait_sends(n);
	}
	/* The loop leaves the CQ armed; an event may still be pending for the last completion. */
	if (tp_channel_ready(channel, quiet_ms))
		get_event("check 6b (last)");
	if (poll_recv_once("check 6b (leftovers)"))
		tp_die("check 6b: completions left over after the loop counted them all");
	snprintf(what, sizeof(what), "%u rounds of %u SENDs racing the arm: %u completions, none lost, %lu events",
		 rounds, n, rounds * n, raced_events);
	pass(what);

	/* 7. Error completions wake a solicited-only arm (QP B ends in the error state). */
	if (error_wakes) {
		check_error_wakes(n);
		snprintf(what, sizeof(what), "armed solicited-only, %u receives flushed with errors: an event", n);
		pass(what);
	} else {
		tp_note("check 7 (error completions wake a solicited-only arm) not run: no --error-wakes");
	}

	if (ibv_destroy_qp(qp_a) || ibv_destroy_qp(qp_b))
		tp_die("ibv_destroy_qp failed");
	/* ibv_destroy_cq waits for unacknowledged events: it returns only if all were acked. */
	if (ibv_destroy_cq(rcq) || ibv_destroy_cq(scq))
		tp_die("ibv_destroy_cq failed");
	if (ibv_destroy_comp_channel(channel))
		tp_die("ibv_destroy_comp_channel failed");
	if (ibv_dereg_mr(recv_mr))
		tp_die("ibv_dereg_mr failed");
	tp_close(&dev);
	free(recv_buf);
	printf("solicited-events: PASS: %lu checks on %s, %lu events, all acknowledged\n", checks,
	       dev.name, events);
	return 0;
}
