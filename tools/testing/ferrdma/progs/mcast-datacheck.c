// SPDX-License-Identifier: GPL-2.0
/*
 * mcast-datacheck: UD multicast through the RDMA CM, every byte and completion checked.
 *
 *   mcast-datacheck --recv -b LOCAL_IP -m GROUP [-q QPS] [-c COUNT] [-S SEED] [-t SECONDS]
 *                   [-f PEER_IP] [-r READY_FILE]
 *   mcast-datacheck --send -b LOCAL_IP -m GROUP [-c COUNT] [-S SEED]
 *   mcast-datacheck --limits DEVICE
 *
 * --recv joins GROUP (an IPv4 multicast address) with QPS UD QPs, each through its own
 * rdma_cm id (librdmacm attaches each QP to the group: ibv_attach_mcast), posts COUNT
 * receives on each, writes READY_FILE (if given) and waits until every QP has received
 * COUNT messages. --send joins GROUP, creates the address handle from the join event and
 * sends COUNT messages to the multicast QPN with the group's Q_Key, at most 16 in flight.
 *
 * Message N is 1 + (N * 331 + SEED) % 1024 bytes (the path MTU of a 1500-byte Ethernet is
 * 1024), carries immediate data N, and byte O of it is a hash of (SEED, N, O). Every QP must
 * receive every message exactly once and in order (one path, no loss on this fabric):
 * status, opcode, IBV_WC_WITH_IMM and imm N, IBV_WC_GRH, byte_len 40 + size, one source QP
 * for all messages, the GRH's IPv4 header (destination GROUP, source PEER_IP if given) and
 * every payload byte. The first error prints QP, message, offset, expected and got, and
 * exits 1.
 *
 * --limits checks the device's multicast limits on DEVICE with plain verbs: an RC QP and a
 * unicast GID are refused (EINVAL), a detach of what was never attached is refused
 * (EINVAL), max_mcast_qp_attach QPs fit in one group and one more is refused, one QP joins
 * max_mcast_grp groups and one more is refused, and everything detaches.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "verbs-common.h"

#define MAX_QPS		8
#define MAX_LEN		1024
#define GRH_LEN		40
#define SLOT		(GRH_LEN + MAX_LEN)
#define WINDOW		16

static unsigned long count = 200, seed = 1, nqps = 2, timeout_s = 120;
static const char *local_ip, *group_ip, *peer_ip, *ready_file;

static uint32_t msg_len(uint32_t n)
{
	return 1 + (uint32_t)((n * 331ul + seed) % MAX_LEN);
}

static uint8_t pattern(uint32_t n, uint32_t off)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)n << 32 | off);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint8_t)x;
}

static void addr_of(const char *ip, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	if (inet_pton(AF_INET, ip, &sin->sin_addr) != 1)
		tp_die("bad IPv4 address '%s'", ip);
}

/* One joined endpoint: its cm_id, QP, CQ and receive buffer. */
struct member {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct rdma_ud_param ud;	/* from the join event */
	uint32_t got, src_qp;
};

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ec,
					enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ec, &ev))
		tp_die("rdma_get_cm_event: %s", strerror(errno));
	if (ev->event != want)
		tp_die("expected %s, got %s (status %d)", rdma_event_str(want),
		       rdma_event_str(ev->event), ev->status);
	return ev;
}

/* Binds, resolves GROUP, creates the UD QP and joins: the member is attached. */
static void join(struct rdma_event_channel *ec, struct member *m, uint32_t slots)
{
	struct sockaddr_in local, group;
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_cm_event *ev;

	addr_of(local_ip, &local);
	addr_of(group_ip, &group);
	if (rdma_create_id(ec, &m->id, m, RDMA_PS_UDP))
		tp_die("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(m->id, (struct sockaddr *)&local, (struct sockaddr *)&group, 2000))
		tp_die("rdma_resolve_addr %s: %s", group_ip, strerror(errno));
	rdma_ack_cm_event(wait_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED));
	m->pd = ibv_alloc_pd(m->id->verbs);
	m->cq = ibv_create_cq(m->id->verbs, slots + WINDOW, NULL, NULL, 0);
	m->buf = calloc(slots ? slots : 1, SLOT);
	if (!m->pd || !m->cq || !m->buf)
		tp_die("PD/CQ/buffer: %s", strerror(errno));
	m->mr = ibv_reg_mr(m->pd, m->buf, (size_t)(slots ? slots : 1) * SLOT,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!m->mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	qa.qp_type = IBV_QPT_UD;
	qa.send_cq = m->cq;
	qa.recv_cq = m->cq;
	qa.cap.max_send_wr = WINDOW;
	qa.cap.max_recv_wr = slots ? slots : 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(m->id, m->pd, &qa))
		tp_die("rdma_create_qp: %s", strerror(errno));
	for (uint32_t i = 0; i < slots; i++) {
		struct ibv_sge sge = {
			.addr = (uintptr_t)(m->buf + (size_t)i * SLOT),
			.length = SLOT,
			.lkey = m->mr->lkey,
		};
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		memset(m->buf + (size_t)i * SLOT, 0xa5, SLOT);
		if (ibv_post_recv(m->id->qp, &wr, &bad))
			tp_die("ibv_post_recv %u: %s", i, strerror(errno));
	}
	if (rdma_join_multicast(m->id, (struct sockaddr *)&group, m))
		tp_die("rdma_join_multicast %s: %s", group_ip, strerror(errno));
	ev = wait_event(ec, RDMA_CM_EVENT_MULTICAST_JOIN);
	m->ud = ev->param.ud;
	rdma_ack_cm_event(ev);
	if (m->ud.qp_num != 0xffffff)
		tp_die("the join event's QPN is %#x, not the multicast QPN", m->ud.qp_num);
}

static void leave(struct member *m)
{
	struct sockaddr_in group;

	addr_of(group_ip, &group);
	if (rdma_leave_multicast(m->id, (struct sockaddr *)&group))
		tp_die("rdma_leave_multicast: %s", strerror(errno));
	rdma_destroy_qp(m->id);
	if (ibv_dereg_mr(m->mr) || ibv_destroy_cq(m->cq) || ibv_dealloc_pd(m->pd))
		tp_die("teardown: %s", strerror(errno));
	if (rdma_destroy_id(m->id))
		tp_die("rdma_destroy_id: %s", strerror(errno));
	free(m->buf);
}

static void check_recv(struct member *m, int qi, const struct ibv_wc *wc)
{
	uint32_t n = m->got, len = msg_len(n), src, dst;
	const uint8_t *p = m->buf + wc->wr_id * SLOT;
	struct in_addr a;

	if (wc->status != IBV_WC_SUCCESS)
		tp_die("QP %d message %u: status %s", qi, n, ibv_wc_status_str(wc->status));
	if (wc->opcode != IBV_WC_RECV || wc->wr_id != n)
		tp_die("QP %d message %u: opcode %d wr_id %llu", qi, n, wc->opcode,
		       (unsigned long long)wc->wr_id);
	if (!(wc->wc_flags & IBV_WC_WITH_IMM) || ntohl(wc->imm_data) != n)
		tp_die("QP %d: expected message %u (imm), got %s%u: lost, duplicated or reordered",
		       qi, n, wc->wc_flags & IBV_WC_WITH_IMM ? "" : "no imm, ",
		       ntohl(wc->imm_data));
	if (!(wc->wc_flags & IBV_WC_GRH) || wc->byte_len != GRH_LEN + len)
		tp_die("QP %d message %u: byte_len %u (want %u), flags %#x", qi, n, wc->byte_len,
		       GRH_LEN + len, wc->wc_flags);
	if (n == 0)
		m->src_qp = wc->src_qp;
	else if (wc->src_qp != m->src_qp)
		tp_die("QP %d message %u: source QP %#x, earlier %#x", qi, n, wc->src_qp, m->src_qp);
	/* The GRH slot of an IPv4 packet: 20 bytes, then the IPv4 header. */
	memcpy(&src, p + 20 + 12, 4);
	memcpy(&dst, p + 20 + 16, 4);
	if (p[20] >> 4 != 4 || inet_pton(AF_INET, group_ip, &a) != 1 || dst != a.s_addr)
		tp_die("QP %d message %u: the GRH is not an IPv4 header to %s", qi, n, group_ip);
	if (peer_ip && (inet_pton(AF_INET, peer_ip, &a) != 1 || src != a.s_addr))
		tp_die("QP %d message %u: GRH source %s is not %s", qi, n,
		       inet_ntoa(*(struct in_addr *)&src), peer_ip);
	for (uint32_t o = 0; o < len; o++)
		if (p[GRH_LEN + o] != pattern(n, o))
			tp_die("QP %d message %u: first bad byte at offset %u: expected %#04x, got %#04x",
			       qi, n, o, pattern(n, o), p[GRH_LEN + o]);
	for (uint32_t o = GRH_LEN + len; o < SLOT; o++)
		if (p[o] != 0xa5)
			tp_die("QP %d message %u: byte %u past the message was written", qi, n,
			       o - GRH_LEN);
	m->got++;
}

static void do_recv(void)
{
	struct member ms[MAX_QPS] = { 0 };
	struct rdma_event_channel *ec = rdma_create_event_channel();
	double deadline;
	uint64_t bytes = 0;
	unsigned long done = 0;

	if (!ec)
		tp_die("rdma_create_event_channel: %s", strerror(errno));
	for (unsigned long i = 0; i < nqps; i++)
		join(ec, &ms[i], count);
	tp_note("%lu QPs joined %s (QPNs %#x..%#x), %lu receives each", nqps, group_ip,
		ms[0].id->qp->qp_num, ms[nqps - 1].id->qp->qp_num, count);
	if (ready_file) {
		FILE *f = fopen(ready_file, "w");

		if (!f || fclose(f))
			tp_die("cannot write %s", ready_file);
	}
	deadline = tp_now() + timeout_s;
	while (done < nqps) {
		done = 0;
		for (unsigned long i = 0; i < nqps; i++) {
			struct ibv_wc wc[16];
			int n = ibv_poll_cq(ms[i].cq, 16, wc);

			if (n < 0)
				tp_die("ibv_poll_cq: %d", n);
			for (int k = 0; k < n; k++) {
				if (ms[i].got >= count)
					tp_die("QP %lu: a completion after all %lu messages", i, count);
				bytes += msg_len(ms[i].got);
				check_recv(&ms[i], (int)i, &wc[k]);
			}
			done += ms[i].got == count;
		}
		if (tp_now() > deadline) {
			for (unsigned long i = 0; i < nqps; i++)
				fprintf(stderr, "QP %lu: %u of %lu messages\n", i, ms[i].got, count);
			tp_die("timed out after %lus", timeout_s);
		}
		if (done < nqps)
			usleep(1000);
	}
	for (unsigned long i = 0; i < nqps; i++)
		leave(&ms[i]);
	rdma_destroy_event_channel(ec);
	printf("mcast-datacheck: PASS: %lu QPs received %lu messages each from source QP %#x, "
	       "%llu bytes verified\n", nqps, count, ms[0].src_qp, (unsigned long long)bytes);
}

static void do_send(void)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct member m = { 0 };
	struct ibv_ah *ah;
	uint8_t *buf;
	struct ibv_mr *mr;
	unsigned long posted = 0, completed = 0;
	double deadline;

	if (!ec)
		tp_die("rdma_create_event_channel: %s", strerror(errno));
	join(ec, &m, 0);
	ah = ibv_create_ah(m.pd, &m.ud.ah_attr);
	buf = malloc((size_t)WINDOW * MAX_LEN);
	if (!ah || !buf)
		tp_die("ibv_create_ah: %s", strerror(errno));
	mr = ibv_reg_mr(m.pd, buf, (size_t)WINDOW * MAX_LEN, 0);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	deadline = tp_now() + timeout_s;
	while (completed < count) {
		while (posted < count && posted - completed < WINDOW) {
			uint8_t *p = buf + (posted % WINDOW) * MAX_LEN;
			uint32_t n = (uint32_t)posted, len = msg_len(n);
			struct ibv_sge sge = { .addr = (uintptr_t)p, .length = len, .lkey = mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = n, .sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				.imm_data = htonl(n),
			}, *bad;

			for (uint32_t o = 0; o < len; o++)
				p[o] = pattern(n, o);
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = m.ud.qp_num;
			wr.wr.ud.remote_qkey = m.ud.qkey;
			if (ibv_post_send(m.id->qp, &wr, &bad))
				tp_die("ibv_post_send %u: %s", n, strerror(errno));
			posted++;
		}
		struct ibv_wc wc[WINDOW];
		int n = ibv_poll_cq(m.cq, WINDOW, wc);

		if (n < 0)
			tp_die("ibv_poll_cq: %d", n);
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS || wc[k].wr_id != completed)
				tp_die("send %lu: status %s wr_id %llu", completed,
				       ibv_wc_status_str(wc[k].status),
				       (unsigned long long)wc[k].wr_id);
			completed++;
		}
		if (tp_now() > deadline)
			tp_die("sends timed out: %lu of %lu completed", completed, count);
		if (!n)
			usleep(200);
	}
	if (ibv_destroy_ah(ah) || ibv_dereg_mr(mr))
		tp_die("teardown: %s", strerror(errno));
	free(buf);
	printf("mcast-datacheck: sent %lu messages from QP %#x to %s (QPN %#x, Q_Key %#x)\n",
	       count, m.id->qp->qp_num, group_ip, m.ud.qp_num, m.ud.qkey);
	leave(&m);
	rdma_destroy_event_channel(ec);
}

static union ibv_gid v4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	union ibv_gid g = { .raw = { [10] = 0xff, [11] = 0xff, [12] = a, [13] = b, [14] = c,
				     [15] = d } };
	return g;
}

static struct ibv_qp *limits_qp(struct tp_dev *dev, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = t,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(dev->pd, &qa);

	if (!qp)
		tp_die("ibv_create_qp: %s", strerror(errno));
	return qp;
}

static void expect_err(int rc, int want, const char *what)
{
	if (rc != want)
		tp_die("%s: got %d (%s), want %d (%s)", what, rc, rc > 0 ? strerror(rc) : "-",
		       want, want ? strerror(want) : "success");
	tp_note("%s: %s", what, want ? strerror(want) : "ok");
}

static void do_limits(const char *name)
{
	struct ibv_device_attr da;
	struct tp_dev dev;
	struct ibv_cq *cq;
	struct ibv_qp *rc, **ud;
	union ibv_gid g = v4_gid(239, 9, 9, 9), uni = v4_gid(10, 0, 0, 1);
	int grp, per;

	tp_open(&dev, name);
	if (ibv_query_device(dev.ctx, &da))
		tp_die("ibv_query_device: %s", strerror(errno));
	grp = da.max_mcast_grp;
	per = da.max_mcast_qp_attach;
	tp_note("max_mcast_grp %d, max_mcast_qp_attach %d, max_total_mcast_qp_attach %d", grp,
		per, da.max_total_mcast_qp_attach);
	if (grp < 1 || per < 1 || grp > 65536 || per > 1024 ||
	    da.max_total_mcast_qp_attach != grp * per)
		tp_die("implausible multicast limits");
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	ud = calloc(per + 1, sizeof(*ud));
	if (!cq || !ud)
		tp_die("CQ: %s", strerror(errno));
	rc = limits_qp(&dev, cq, IBV_QPT_RC);
	for (int i = 0; i <= per; i++)
		ud[i] = limits_qp(&dev, cq, IBV_QPT_UD);
	expect_err(ibv_attach_mcast(rc, &g, 0), EINVAL, "attach of an RC QP");
	expect_err(ibv_attach_mcast(ud[0], &uni, 0), EINVAL, "attach to a unicast GID");
	expect_err(ibv_detach_mcast(ud[0], &g, 0), EINVAL, "detach of a QP never attached");
	for (int i = 0; i < per; i++)
		if (ibv_attach_mcast(ud[i], &g, 0))
			tp_die("attach of QP %d of %d: %s", i + 1, per, strerror(errno));
	expect_err(ibv_attach_mcast(ud[per], &g, 0), ENOMEM, "attach of one QP more than max_mcast_qp_attach");
	for (int i = 0; i < per; i++)
		if (ibv_detach_mcast(ud[i], &g, 0))
			tp_die("detach of QP %d: %s", i + 1, strerror(errno));
	for (int k = 0; k < grp; k++) {
		union ibv_gid gk = v4_gid(239, 8, k >> 8, k & 0xff);

		if (ibv_attach_mcast(ud[0], &gk, 0))
			tp_die("attach to group %d of %d: %s", k + 1, grp, strerror(errno));
	}
	g = v4_gid(239, 7, 0, 0);
	expect_err(ibv_attach_mcast(ud[1], &g, 0), ENOMEM, "attach to one group more than max_mcast_grp");
	for (int k = 0; k < grp; k++) {
		union ibv_gid gk = v4_gid(239, 8, k >> 8, k & 0xff);

		if (ibv_detach_mcast(ud[0], &gk, 0))
			tp_die("detach from group %d: %s", k + 1, strerror(errno));
	}
	/* Every slot is free again. */
	expect_err(ibv_attach_mcast(ud[1], &g, 0), 0, "attach once everything was detached");
	expect_err(ibv_detach_mcast(ud[1], &g, 0), 0, "detach");
	for (int i = 0; i <= per; i++)
		if (ibv_destroy_qp(ud[i]))
			tp_die("ibv_destroy_qp: %s", strerror(errno));
	if (ibv_destroy_qp(rc) || ibv_destroy_cq(cq))
		tp_die("teardown: %s", strerror(errno));
	free(ud);
	tp_close(&dev);
	printf("mcast-datacheck: PASS: limits of %s hold (%d groups of %d QPs)\n", name, grp, per);
}

int main(int argc, char **argv)
{
	enum { NONE, RECV, SEND, LIMITS } mode = NONE;
	static const struct option opts[] = {
		{ "recv", no_argument, NULL, 'R' },
		{ "send", no_argument, NULL, 'T' },
		{ "limits", required_argument, NULL, 'L' },
		{ 0 }
	};
	const char *limits_dev = NULL;
	int c;

	tp_prog = "mcast-datacheck";
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt_long(argc, argv, "b:m:q:c:S:t:f:r:", opts, NULL)) != -1) {
		switch (c) {
		case 'R': mode = RECV; break;
		case 'T': mode = SEND; break;
		case 'L': mode = LIMITS; limits_dev = optarg; break;
		case 'b': local_ip = optarg; break;
		case 'm': group_ip = optarg; break;
		case 'q': nqps = tp_parse_ulong("QPs", optarg, 1, MAX_QPS); break;
		case 'c': count = tp_parse_ulong("count", optarg, 1, 4096); break;
		case 'S': seed = tp_parse_ulong("seed", optarg, 0, 1ul << 31); break;
		case 't': timeout_s = tp_parse_ulong("timeout", optarg, 1, 3600); break;
		case 'f': peer_ip = optarg; break;
		case 'r': ready_file = optarg; break;
		default: tp_die("usage: see the comment at the top of mcast-datacheck.c");
		}
	}
	if (mode == LIMITS) {
		do_limits(limits_dev);
		return 0;
	}
	if (mode == NONE || !local_ip || !group_ip)
		tp_die("need --recv or --send, -b LOCAL_IP and -m GROUP");
	tp_note("%s, group %s, %lu messages, seed %lu", mode == RECV ? "receiver" : "sender",
		group_ip, count, seed);
	if (mode == RECV)
		do_recv();
	else
		do_send();
	return 0;
}
