// SPDX-License-Identifier: GPL-2.0
/*
 * limits: every limit ibv_query_device reports holds: an object at the limit works, one past
 * it fails cleanly (issue 17, item 8). Plain libibverbs, so it runs on any RoCE device.
 *
 *   limits DEVICE [-i INLINE] [-C CAP] [-M]
 *
 * -i: the device's inline-data limit (ibv_query_device has no field for it).
 * -C: create at most CAP objects of one kind; a larger limit is reported as not exercised.
 * -M: the max_mr_size check (it needs max_mr_size + 4 KiB of guest memory).
 *
 * 1. max_cqe: a CQ of max_cqe entries is created, one of max_cqe + 1 fails with EINVAL.
 * 2. max_qp_wr and max_sge: an RC pair (loopback through the device's GID) with max_qp_wr WRs
 *    of max_sge SGEs on both queues; max_qp_wr receives and then max_qp_wr SENDs are posted
 *    before anything is polled, each SEND gathering max_sge pieces of varying length from
 *    scattered places and each receive scattering into max_sge pieces in reverse order; every
 *    completion (status, opcode, wr_id order, byte_len) and every byte is checked, and no byte
 *    past a message's length is touched. A QP of max_qp_wr + 1 send WRs of max_sge SGEs and
 *    one of max_sge + 1 SGEs fail with EINVAL.
 * 3. Inline (-i): a QP of INLINE bytes of inline data sends INLINE bytes inline, checked; one
 *    of INLINE + 1 fails with EINVAL.
 * 4. max_mr_size (-M): max_mr_size bytes of 4 KiB pages (no huge pages) are registered; RDMA
 *    WRITEs into the first and the last page of the MR land there (checked through the
 *    buffer); max_mr_size + 4 KiB fails with EINVAL.
 * 5. max_pd, max_cq, max_qp, max_mr, max_ah: exactly as many as the device reports, less those
 *    that exist already, are created, and one more fails with ENOMEM, EINVAL or ENOSPC; after
 *    all are destroyed one can be created again. What exists is what `rdma res show KIND`
 *    lists for DEVICE just before (the kernel's GSI QP with its CQ and PD, this process's PD,
 *    and any object the provider keeps for itself: libirdma allocates a PD in every
 *    context); AHs are not tracked there and none are expected.
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
#include <sys/mman.h>

#include "verbs-common.h"

#define PIECE		24	/* receive piece; send pieces are 1..PIECE bytes */
#define SENTINEL	0xee
#define PAGE		4096ul

struct ctx {
	struct tp_dev dev;
	struct ibv_device_attr attr;
	unsigned long inline_max, cap;
	int mr_size_check;
};

static uint8_t pattern(uint32_t msg, uint32_t i)
{
	uint32_t x = (msg + 1) * 2654435761u ^ (i * 40503u);

	return (uint8_t)(x >> 13);
}

/* The length of send piece @k of message @m. */
static uint32_t piece_len(uint32_t m, uint32_t k)
{
	return 1 + (m * 7 + k * 5) % PIECE;
}

static void expect_fail(const char *what, void *obj, int want)
{
	if (obj)
		tp_die("%s succeeded past the limit", what);
	if (errno != want)
		tp_die("%s failed with %s, expected %s", what, strerror(errno), strerror(want));
	tp_note("%s: refused with %s", what, strerror(errno));
}

/* A refusal of one more object than the limit: a clean errno, not a crash or a hang. */
static int clean_refusal(int err)
{
	return err == ENOMEM || err == EINVAL || err == ENOSPC;
}

static struct ibv_qp *rc_qp(struct ctx *c, struct ibv_cq *cq, uint32_t wr, uint32_t sge,
			    uint32_t inl)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {
			.max_send_wr = wr,
			.max_recv_wr = wr,
			.max_send_sge = sge,
			.max_recv_sge = sge,
			.max_inline_data = inl,
		},
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(c->dev.pd, &attr);
}

static void check_cqe(struct ctx *c)
{
	int max = c->attr.max_cqe;
	struct ibv_cq *cq;
	struct ibv_wc wc;

	cq = ibv_create_cq(c->dev.ctx, max, NULL, NULL, 0);
	if (!cq)
		tp_die("ibv_create_cq(max_cqe = %d): %s", max, strerror(errno));
	if (cq->cqe < max)
		tp_die("ibv_create_cq(%d) gave a CQ of %d entries", max, cq->cqe);
	if (ibv_poll_cq(cq, 1, &wc) != 0)
		tp_die("a new CQ of %d entries is not empty", max);
	if (ibv_destroy_cq(cq))
		tp_die("ibv_destroy_cq of the max_cqe CQ failed");
	tp_note("max_cqe: a CQ of %d entries", max);
	expect_fail("ibv_create_cq(max_cqe + 1)", ibv_create_cq(c->dev.ctx, max + 1, NULL, NULL, 0),
		    EINVAL);
}

/* Polls @n completions of @cq into @wc within 60 s. */
static void poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, const char *what)
{
	double end = tp_now() + 60;
	int got = 0, r;

	while (got < n) {
		r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			tp_die("%s: ibv_poll_cq: %d", what, r);
		got += r;
		if (!r && tp_now() > end)
			tp_die("%s: %d of %d completions after 60 s", what, got, n);
	}
}

static void check_depth_and_sges(struct ctx *c)
{
	uint32_t w = c->attr.max_qp_wr, s = c->attr.max_sge, m, k;
	int at_limit = 1;
	size_t slot = (size_t)s * PIECE;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *a, *b;
	struct ibv_qp_init_attr init = {
		.cap = {
			.max_send_wr = w, .max_recv_wr = w, .max_send_sge = s, .max_recv_sge = s,
		},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp_attr qattr;
	struct ibv_sge *sge;
	struct ibv_wc *wc;
	struct ibv_mr *smr, *rmr;
	uint8_t *sbuf, *rbuf;

	if (w > c->cap || (int)w > c->attr.max_cqe) {
		/* max_sge is still checked, on a queue of 64. */
		tp_note("max_qp_wr %u: more than %lu (or than max_cqe %d) to post here, not exercised",
			w, c->cap, c->attr.max_cqe);
		w = 64;
		at_limit = 0;
	}
	init.cap.max_send_wr = w;
	init.cap.max_recv_wr = w;
	scq = ibv_create_cq(c->dev.ctx, w, NULL, NULL, 0);
	rcq = ibv_create_cq(c->dev.ctx, w, NULL, NULL, 0);
	if (!scq || !rcq)
		tp_die("ibv_create_cq(%u): %s", w, strerror(errno));
	init.send_cq = scq;
	init.recv_cq = rcq;
	a = ibv_create_qp(c->dev.pd, &init);
	if (!a)
		tp_die("ibv_create_qp(max_qp_wr = %u WRs of max_sge = %u SGEs): %s", w, s,
		       strerror(errno));
	b = ibv_create_qp(c->dev.pd, &init);
	if (!b)
		tp_die("second ibv_create_qp(%u WRs of %u SGEs): %s", w, s, strerror(errno));
	if (ibv_query_qp(a, &qattr, IBV_QP_CAP, &init))
		tp_die("ibv_query_qp: %s", strerror(errno));
	if (qattr.cap.max_send_wr < w || qattr.cap.max_recv_wr < w ||
	    qattr.cap.max_send_sge < s || qattr.cap.max_recv_sge < s)
		tp_die("the QP holds %u/%u WRs of %u/%u SGEs, asked for %u of %u",
		       qattr.cap.max_send_wr, qattr.cap.max_recv_wr, qattr.cap.max_send_sge,
		       qattr.cap.max_recv_sge, w, s);
	tp_connect_pair(&c->dev, a, b);

	sbuf = malloc(slot * w);
	rbuf = malloc(slot * w);
	sge = calloc(s, sizeof(*sge));
	wc = calloc(w, sizeof(*wc));
	if (!sbuf || !rbuf || !sge || !wc)
		tp_die("out of memory");
	memset(rbuf, SENTINEL, slot * w);
	smr = ibv_reg_mr(c->dev.pd, sbuf, slot * w, IBV_ACCESS_LOCAL_WRITE);
	rmr = ibv_reg_mr(c->dev.pd, rbuf, slot * w, IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !rmr)
		tp_die("ibv_reg_mr: %s", strerror(errno));

	/* Every receive first: the RQ holds w of them. Piece k at the (s-1-k)th place. */
	for (m = 0; m < w; m++) {
		struct ibv_recv_wr wr = { .wr_id = m, .sg_list = sge, .num_sge = s }, *bad;
		int ret;

		for (k = 0; k < s; k++) {
			sge[k].addr = (uintptr_t)(rbuf + m * slot + (s - 1 - k) * PIECE);
			sge[k].length = PIECE;
			sge[k].lkey = rmr->lkey;
		}
		ret = ibv_post_recv(b, &wr, &bad);
		if (ret)
			tp_die("ibv_post_recv of receive %u of %u (max_qp_wr): %s", m + 1, w,
			       strerror(ret));
	}
	/* Then every SEND, nothing polled yet: the SQ holds w of them. */
	for (m = 0; m < w; m++) {
		struct ibv_send_wr wr = {
			.wr_id = m, .sg_list = sge, .num_sge = s, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
		}, *bad;
		uint32_t off = 0, i;
		int ret;

		for (k = 0; k < s; k++) {
			/* Pieces in reverse order in the buffer, each at its slot's start. */
			uint8_t *p = sbuf + m * slot + (s - 1 - k) * PIECE;

			for (i = 0; i < piece_len(m, k); i++)
				p[i] = pattern(m, off + i);
			sge[k].addr = (uintptr_t)p;
			sge[k].length = piece_len(m, k);
			sge[k].lkey = smr->lkey;
			off += piece_len(m, k);
		}
		ret = ibv_post_send(a, &wr, &bad);
		if (ret)
			tp_die("ibv_post_send of SEND %u of %u (max_qp_wr) with %u SGEs: %s", m + 1,
			       w, s, strerror(ret));
	}
	poll_n(scq, wc, w, "send completions");
	for (m = 0; m < w; m++)
		if (wc[m].status != IBV_WC_SUCCESS || wc[m].opcode != IBV_WC_SEND ||
		    wc[m].wr_id != m)
			tp_die("send completion %u: status %s, opcode %d, wr_id %" PRIu64, m,
			       ibv_wc_status_str(wc[m].status), wc[m].opcode, wc[m].wr_id);
	poll_n(rcq, wc, w, "receive completions");
	for (m = 0; m < w; m++) {
		uint32_t len = 0, i;

		for (k = 0; k < s; k++)
			len += piece_len(m, k);
		if (wc[m].status != IBV_WC_SUCCESS || wc[m].opcode != IBV_WC_RECV ||
		    wc[m].wr_id != m || wc[m].byte_len != len)
			tp_die("receive completion %u: status %s, opcode %d, wr_id %" PRIu64
			       ", byte_len %u (expected %u)", m, ibv_wc_status_str(wc[m].status),
			       wc[m].opcode, wc[m].wr_id, wc[m].byte_len, len);
		for (i = 0; i < s * PIECE; i++) {
			/* Byte i of the message is in piece i / PIECE, stored reversed. */
			uint8_t got = rbuf[m * slot + (s - 1 - i / PIECE) * PIECE + i % PIECE];
			uint8_t want = i < len ? pattern(m, i) : SENTINEL;

			if (got != want)
				tp_die("message %u: byte %u of %u is %#04x, expected %#04x%s", m, i,
				       len, got, want, i < len ? "" : " (past the message)");
		}
	}
	tp_note("max_qp_wr %u, max_sge %u: %u SENDs of %u pieces each posted before any poll, every completion and byte checked",
		c->attr.max_qp_wr, s, w, s);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	free(sbuf);
	free(rbuf);
	free(sge);
	free(wc);

	if (at_limit) {
		init.cap.max_send_wr = w + 1;
		init.cap.max_recv_wr = 1;
		expect_fail("ibv_create_qp(max_qp_wr + 1 send WRs of max_sge SGEs)",
			    ibv_create_qp(c->dev.pd, &init), EINVAL);
	}
	init.cap.max_send_wr = 1;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = s + 1;
	expect_fail("ibv_create_qp(max_sge + 1 send SGEs)", ibv_create_qp(c->dev.pd, &init), EINVAL);
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = s + 1;
	expect_fail("ibv_create_qp(max_sge + 1 receive SGEs)", ibv_create_qp(c->dev.pd, &init),
		    EINVAL);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
}

static void check_inline(struct ctx *c)
{
	uint32_t n = c->inline_max, i;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	struct ibv_wc wc[2];
	uint8_t *sbuf, *rbuf;
	struct ibv_sge ssge, rsge;
	struct ibv_send_wr swr = {
		.wr_id = 1, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
	}, *sbad;
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	int ret;

	cq = ibv_create_cq(c->dev.ctx, 16, NULL, NULL, 0);
	if (!cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	a = rc_qp(c, cq, 4, 1, n);
	if (!a)
		tp_die("ibv_create_qp(max_inline_data = %u): %s", n, strerror(errno));
	b = rc_qp(c, cq, 4, 1, 0);
	if (!b)
		tp_die("ibv_create_qp: %s", strerror(errno));
	tp_connect_pair(&c->dev, a, b);
	/* The source is not registered: an inline SEND copies it at post time. */
	sbuf = malloc(n);
	rbuf = malloc(n + 64);
	if (!sbuf || !rbuf)
		tp_die("out of memory");
	memset(rbuf, SENTINEL, n + 64);
	mr = ibv_reg_mr(c->dev.pd, rbuf, n + 64, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	for (i = 0; i < n; i++)
		sbuf[i] = pattern(7777, i);
	rsge = (struct ibv_sge){ .addr = (uintptr_t)rbuf, .length = n + 64, .lkey = mr->lkey };
	ssge = (struct ibv_sge){ .addr = (uintptr_t)sbuf, .length = n, .lkey = 0 };
	ret = ibv_post_recv(b, &rwr, &rbad);
	if (ret)
		tp_die("ibv_post_recv: %s", strerror(ret));
	ret = ibv_post_send(a, &swr, &sbad);
	if (ret)
		tp_die("ibv_post_send of %u bytes inline: %s", n, strerror(ret));
	memset(sbuf, 0, n);
	poll_n(cq, wc, 2, "inline completions");
	for (i = 0; i < 2; i++)
		if (wc[i].status != IBV_WC_SUCCESS ||
		    (wc[i].wr_id == 2 && wc[i].byte_len != n))
			tp_die("inline completion wr_id %" PRIu64 ": %s, byte_len %u", wc[i].wr_id,
			       ibv_wc_status_str(wc[i].status), wc[i].byte_len);
	for (i = 0; i < n + 64; i++) {
		uint8_t want = i < n ? pattern(7777, i) : SENTINEL;

		if (rbuf[i] != want)
			tp_die("inline SEND: byte %u of %u is %#04x, expected %#04x", i, n, rbuf[i],
			       want);
	}
	tp_note("inline: a QP of %u inline bytes sent %u bytes inline, checked", n, n);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	free(sbuf);
	free(rbuf);
	expect_fail("ibv_create_qp(inline limit + 1)", rc_qp(c, cq, 4, 1, n + 1), EINVAL);
	ibv_destroy_cq(cq);
}

/* RDMA WRITEs @len bytes of pattern @seed from @src into @dst (rkey @rkey) over @a. */
static void rdma_write(struct ibv_qp *a, struct ibv_cq *cq, struct ibv_mr *smr, uint8_t *src,
		       uint64_t dst, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = smr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = dst, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = dst, .rkey = rkey },
	}, *bad;
	struct ibv_wc wc;
	int ret;

	ret = ibv_post_send(a, &wr, &bad);
	if (ret)
		tp_die("RDMA WRITE to %#" PRIx64 ": %s", dst, strerror(ret));
	poll_n(cq, &wc, 1, "RDMA WRITE");
	if (wc.status != IBV_WC_SUCCESS)
		tp_die("RDMA WRITE to %#" PRIx64 ": %s", dst, ibv_wc_status_str(wc.status));
}

static void check_mr_size(struct ctx *c)
{
	uint64_t size = c->attr.max_mr_size, i;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *big, *smr;
	uint8_t *buf, *src;
	void *past;

	if (size > (16ull << 30)) {
		tp_note("max_mr_size %#" PRIx64 ": too large to register here, not exercised", size);
		return;
	}
	buf = mmap(NULL, size + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (buf == MAP_FAILED)
		tp_die("mmap of %" PRIu64 " bytes: %s", size + PAGE, strerror(errno));
	/*
	 * 4 KiB pages: the most page-list entries an MR of this size can need. EINVAL: a kernel
	 * without transparent huge pages, whose anonymous memory is all 4 KiB pages.
	 */
	if (madvise(buf, size + PAGE, MADV_NOHUGEPAGE) && errno != EINVAL)
		tp_die("madvise(MADV_NOHUGEPAGE): %s", strerror(errno));
	for (i = 0; i < size + PAGE; i += PAGE)
		buf[i] = 0;
	big = ibv_reg_mr(c->dev.pd, buf, size,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!big)
		tp_die("ibv_reg_mr of max_mr_size = %#" PRIx64 " bytes of 4 KiB pages: %s", size,
		       strerror(errno));
	cq = ibv_create_cq(c->dev.ctx, 16, NULL, NULL, 0);
	a = cq ? rc_qp(c, cq, 4, 1, 0) : NULL;
	b = cq ? rc_qp(c, cq, 4, 1, 0) : NULL;
	if (!a || !b)
		tp_die("QPs for the WRITEs: %s", strerror(errno));
	tp_connect_pair(&c->dev, a, b);
	src = malloc(PAGE);
	smr = src ? ibv_reg_mr(c->dev.pd, src, PAGE, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!smr)
		tp_die("source MR: %s", strerror(errno));
	for (i = 0; i < PAGE; i++)
		src[i] = pattern(1, i);
	rdma_write(a, cq, smr, src, (uintptr_t)buf, big->rkey, PAGE);
	rdma_write(a, cq, smr, src, (uintptr_t)buf + size - PAGE, big->rkey, PAGE);
	for (i = 0; i < PAGE; i++)
		if (buf[i] != src[i] || buf[size - PAGE + i] != src[i])
			tp_die("RDMA WRITE into the max_mr_size MR: byte %" PRIu64 " of the %s page differs",
			       i, buf[i] != src[i] ? "first" : "last");
	tp_note("max_mr_size: %#" PRIx64 " bytes of 4 KiB pages registered; WRITEs into its first and last page checked",
		size);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(smr);
	free(src);
	if (ibv_dereg_mr(big))
		tp_die("ibv_dereg_mr of the max_mr_size MR failed");
	past = ibv_reg_mr(c->dev.pd, buf, size + PAGE, IBV_ACCESS_LOCAL_WRITE);
	expect_fail("ibv_reg_mr(max_mr_size + 4 KiB)", past, EINVAL);
	munmap(buf, size + PAGE);
}

enum kind { K_PD, K_CQ, K_QP, K_MR, K_AH };
static const char *const kind_name[] = { "PD", "CQ", "QP", "MR", "AH" };

/* Creates one object of @k; NULL with errno set when refused. */
static void *create_one(struct ctx *c, enum kind k, struct ibv_cq *cq, void *page)
{
	struct ibv_ah_attr ah = {
		.is_global = 1, .port_num = TP_PORT,
		.grh = { .dgid = c->dev.gid, .sgid_index = c->dev.gid_index, .hop_limit = 64 },
	};

	switch (k) {
	case K_PD:
		return ibv_alloc_pd(c->dev.ctx);
	case K_CQ:
		return ibv_create_cq(c->dev.ctx, 1, NULL, NULL, 0);
	case K_QP:
		return rc_qp(c, cq, 1, 1, 0);
	case K_MR:
		return ibv_reg_mr(c->dev.pd, page, PAGE, IBV_ACCESS_LOCAL_WRITE);
	case K_AH:
		return ibv_create_ah(c->dev.pd, &ah);
	}
	return NULL;
}

static int destroy_one(enum kind k, void *o)
{
	switch (k) {
	case K_PD:
		return ibv_dealloc_pd(o);
	case K_CQ:
		return ibv_destroy_cq(o);
	case K_QP:
		return ibv_destroy_qp(o);
	case K_MR:
		return ibv_dereg_mr(o);
	case K_AH:
		return ibv_destroy_ah(o);
	}
	return EINVAL;
}

/* How many objects of @kind ("qp", "cq", "pd", "mr") of @dev `rdma res show` lists. */
static unsigned long res_count(const char *dev, const char *kind)
{
	char cmd[128], line[1024], link[80], own[80];
	unsigned long n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "rdma res show %s", kind);
	snprintf(own, sizeof(own), " dev %s ", dev);
	snprintf(link, sizeof(link), "link %s/", dev);
	f = popen(cmd, "r");
	if (!f)
		tp_die("popen(%s): %s", cmd, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char padded[1100];

		snprintf(padded, sizeof(padded), " %s", line);
		if (strstr(padded, own) || !strncmp(line, link, strlen(link)))
			n++;
	}
	if (pclose(f))
		tp_die("%s failed", cmd);
	return n;
}

/* Creates every object of @k the device has left (@limit less those of @res_kind that exist);
 * one more must fail. */
static void check_count(struct ctx *c, enum kind k, unsigned long limit, const char *res_kind)
{
	unsigned long in_use = res_kind ? res_count(c->dev.name, res_kind) : 0;
	unsigned long want, n, i;
	struct ibv_cq *cq = NULL;
	void **objs, *extra, *page;
	double t0 = tp_now();
	int err;

	if (limit <= in_use)
		tp_die("max %s %lu, but %lu exist already", kind_name[k], limit, in_use);
	want = limit - in_use;
	if (want > c->cap) {
		tp_note("max %s %lu: more than %lu to create here, not exercised", kind_name[k],
			limit, c->cap);
		return;
	}
	if (k == K_QP) {
		cq = ibv_create_cq(c->dev.ctx, 16, NULL, NULL, 0);
		if (!cq)
			tp_die("ibv_create_cq: %s", strerror(errno));
	}
	page = aligned_alloc(PAGE, PAGE);
	objs = calloc(want, sizeof(*objs));
	if (!page || !objs)
		tp_die("out of memory");
	for (n = 0; n < want; n++) {
		objs[n] = create_one(c, k, cq, page);
		if (!objs[n])
			tp_die("%s %lu of %lu (max %lu, %lu in use before): %s", kind_name[k], n + 1,
			       want, limit, in_use, strerror(errno));
	}
	extra = create_one(c, k, cq, page);
	err = errno;
	if (extra)
		tp_die("%s %lu (one past max %lu) was created", kind_name[k], want + 1, limit);
	if (!clean_refusal(err))
		tp_die("%s %lu (one past max %lu): %s, expected ENOMEM, EINVAL or ENOSPC",
		       kind_name[k], want + 1, limit, strerror(err));
	for (i = 0; i < n; i++)
		if (destroy_one(k, objs[i]))
			tp_die("destroying %s %lu failed", kind_name[k], i + 1);
	extra = create_one(c, k, cq, page);
	if (!extra)
		tp_die("no %s can be created after the %lu were destroyed: %s", kind_name[k], n,
		       strerror(errno));
	destroy_one(k, extra);
	tp_note("max %s %lu: %lu created (%lu existed), one more refused with %s (%.1f s)",
		kind_name[k], limit, n, in_use, strerror(err), tp_now() - t0);
	if (cq)
		ibv_destroy_cq(cq);
	free(objs);
	free(page);
}

/*
 * Memory windows: a device reporting max_mw 0 (E810 under Linux 7.3's irdma, which registers
 * alloc_mw for GEN_3 only, and ferrdma) refuses ibv_alloc_mw of either type with EOPNOTSUPP;
 * one reporting windows (rxe) allocates and frees one of each type.
 */
static void check_mw(struct ctx *c)
{
	static const enum ibv_mw_type types[] = { IBV_MW_TYPE_1, IBV_MW_TYPE_2 };
	unsigned int i;

	for (i = 0; i < 2; i++) {
		struct ibv_mw *mw = ibv_alloc_mw(c->dev.pd, types[i]);

		if (c->attr.max_mw == 0) {
			if (mw)
				tp_die("ibv_alloc_mw(type %d) succeeded with max_mw 0", types[i]);
			if (errno != EOPNOTSUPP)
				tp_die("ibv_alloc_mw(type %d) failed with %s, expected %s", types[i],
				       strerror(errno), strerror(EOPNOTSUPP));
			tp_note("max_mw 0: ibv_alloc_mw(type %d) refused with %s", types[i],
				strerror(errno));
		} else if (mw) {
			if (ibv_dealloc_mw(mw))
				tp_die("ibv_dealloc_mw: %s", strerror(errno));
			tp_note("max_mw %d: a type %d window allocated and freed", c->attr.max_mw,
				types[i]);
		} else {
			tp_note("max_mw %d: ibv_alloc_mw(type %d) refused with %s", c->attr.max_mw,
				types[i], strerror(errno));
		}
	}
}

int main(int argc, char **argv)
{
	struct ctx c = { .cap = ~0ul };
	int opt;

	tp_prog = "limits";
	while ((opt = getopt(argc, argv, "i:C:M")) != -1) {
		switch (opt) {
		case 'i':
			c.inline_max = tp_parse_ulong("-i", optarg, 1, 1ul << 20);
			break;
		case 'C':
			c.cap = tp_parse_ulong("-C", optarg, 1, 1ul << 24);
			break;
		case 'M':
			c.mr_size_check = 1;
			break;
		default:
			fprintf(stderr, "usage: limits DEVICE [-i INLINE] [-C CAP] [-M]\n");
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "usage: limits DEVICE [options]\n");
		return 2;
	}
	tp_open(&c.dev, argv[optind]);
	if (ibv_query_device(c.dev.ctx, &c.attr))
		tp_die("ibv_query_device: %s", strerror(errno));
	tp_note("%s: max_cqe %d, max_qp_wr %d, max_sge %d, max_mr_size %#" PRIx64
		", max_qp %d, max_cq %d, max_mr %d, max_pd %d, max_ah %d", argv[optind],
		c.attr.max_cqe, c.attr.max_qp_wr, c.attr.max_sge, c.attr.max_mr_size,
		c.attr.max_qp, c.attr.max_cq, c.attr.max_mr, c.attr.max_pd, c.attr.max_ah);

	check_mw(&c);
	check_cqe(&c);
	check_depth_and_sges(&c);
	if (c.inline_max)
		check_inline(&c);
	if (c.mr_size_check)
		check_mr_size(&c);
	check_count(&c, K_PD, c.attr.max_pd, "pd");
	check_count(&c, K_CQ, c.attr.max_cq, "cq");
	/* The QPs share one CQ of their own. */
	check_count(&c, K_QP, c.attr.max_qp, "qp");
	check_count(&c, K_MR, c.attr.max_mr, "mr");
	check_count(&c, K_AH, c.attr.max_ah, NULL);
	tp_close(&c.dev);
	tp_note("every limit held");
	return 0;
}
