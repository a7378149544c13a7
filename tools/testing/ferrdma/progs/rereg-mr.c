// SPDX-License-Identifier: GPL-2.0
/*
 * rereg-mr: ibv_rereg_mr changes what RDMA WRITEs from a peer reach (issue 17, item 4). Plain
 * libibverbs, so it runs on any RoCE device.
 *
 *   rereg-mr DEVICE
 *
 * An MR over buffer A (two pages) in PD 1 takes RDMA WRITEs from a loopback RC pair whose
 * responder is in PD 1; every WRITE's bytes are checked where they must land, and the bytes
 * around them and in the other buffers must stay as they were.
 *
 * 1. Translation: rereg to buffer B (three pages): a WRITE under the keys ibv_rereg_mr reports
 *    lands in B, A is untouched; if the keys changed, a WRITE under the old rkey fails with
 *    REM_ACCESS_ERR. A rereg to an unmapped range fails and leaves the MR on B (a WRITE still
 *    lands there).
 * 2. Access: rereg to LOCAL_WRITE only: a WRITE fails with REM_ACCESS_ERR and changes nothing;
 *    rereg back to REMOTE_WRITE: a WRITE lands.
 * 3. PD: rereg to PD 2: a WRITE from the pair in PD 1 fails; one from a pair in PD 2 lands.
 * 4. Deregistration afterwards succeeds.
 *
 * A failed WRITE leaves its QP pair in the error state: each check that expects a failure
 * uses a pair of its own. Prints what it did; exits 0 only if every check held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "verbs-common.h"

#define PAGE		4096u
#define A_LEN		(2 * PAGE)
#define B_LEN		(3 * PAGE)
#define SRC_LEN		PAGE
#define FILL_A		0xa5
#define FILL_B		0xb6

struct pair {
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
};

struct ctx {
	struct tp_dev dev;
	struct ibv_pd *pd2;
	uint8_t *a, *b, *src;
	struct ibv_mr *mr, *smr;
	int writes;
};

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &attr);

	if (!qp)
		tp_die("ibv_create_qp: %s", strerror(errno));
	return qp;
}

/* A loopback pair: @a (sender, PD 1, where the source MR is) to @b (responder, in @pd). */
static void pair_open(struct ctx *c, struct pair *p, struct ibv_pd *pd)
{
	p->cq = ibv_create_cq(c->dev.ctx, 16, NULL, NULL, 0);
	if (!p->cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	p->a = rc_qp(c->dev.pd, p->cq);
	p->b = rc_qp(pd, p->cq);
	tp_connect_pair(&c->dev, p->a, p->b);
}

static void pair_close(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->cq);
}

static uint8_t pattern(int n, uint32_t i)
{
	return (uint8_t)((n + 1) * 37 + i * 13 + (i >> 8));
}

/*
 * An RDMA WRITE of @len bytes of pattern @n to @addr under @rkey over @p; returns the
 * completion status.
 */
static enum ibv_wc_status rdma_write(struct ctx *c, struct pair *p, int n, uint64_t addr,
				     uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->src, .length = len, .lkey = c->smr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = n, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { .remote_addr = addr, .rkey = rkey },
	}, *bad;
	double end = tp_now() + 30;
	struct ibv_wc wc;
	uint32_t i;
	int ret;

	for (i = 0; i < len; i++)
		c->src[i] = pattern(n, i);
	ret = ibv_post_send(p->a, &wr, &bad);
	if (ret)
		tp_die("WRITE %d: ibv_post_send: %s", n, strerror(ret));
	for (;;) {
		ret = ibv_poll_cq(p->cq, 1, &wc);
		if (ret < 0)
			tp_die("WRITE %d: ibv_poll_cq: %d", n, ret);
		if (ret)
			break;
		if (tp_now() > end)
			tp_die("WRITE %d: no completion in 30 s", n);
	}
	c->writes++;
	return wc.status;
}

/* @buf (of @len bytes, filled with @fill) holds pattern @n at @off..@off+@wlen, nothing else. */
static void expect_bytes(const char *what, const uint8_t *buf, uint32_t len, uint8_t fill, int n,
			 uint32_t off, uint32_t wlen)
{
	uint32_t i;

	for (i = 0; i < len; i++) {
		uint8_t want = (n >= 0 && i >= off && i < off + wlen) ? pattern(n, i - off) : fill;

		if (buf[i] != want)
			tp_die("%s: byte %u is %#04x, expected %#04x", what, i, buf[i], want);
	}
}

static void write_lands(struct ctx *c, struct pair *p, int n, uint8_t *buf, uint32_t len,
			uint8_t fill, uint32_t off, uint32_t wlen, const char *what)
{
	enum ibv_wc_status st;

	memset(buf, fill, len);
	st = rdma_write(c, p, n, (uintptr_t)buf + off, c->mr->rkey, wlen);
	if (st != IBV_WC_SUCCESS)
		tp_die("%s: WRITE failed with %s", what, ibv_wc_status_str(st));
	expect_bytes(what, buf, len, fill, n, off, wlen);
}

/* A WRITE that must fail with REM_ACCESS_ERR on a pair of its own, changing nothing. */
static void write_refused(struct ctx *c, struct ibv_pd *pd, uint64_t addr, uint32_t rkey,
			  const char *what)
{
	enum ibv_wc_status st;
	struct pair p;

	memset(c->a, FILL_A, A_LEN);
	memset(c->b, FILL_B, B_LEN);
	pair_open(c, &p, pd);
	st = rdma_write(c, &p, 99, addr, rkey, 512);
	if (st != IBV_WC_REM_ACCESS_ERR)
		tp_die("%s: WRITE completed with %s, expected %s", what, ibv_wc_status_str(st),
		       ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	expect_bytes(what, c->a, A_LEN, FILL_A, -1, 0, 0);
	expect_bytes(what, c->b, B_LEN, FILL_B, -1, 0, 0);
	pair_close(&p);
	tp_note("%s: refused (%s), nothing written", what, ibv_wc_status_str(st));
}

static void rereg(struct ctx *c, int flags, struct ibv_pd *pd, void *addr, size_t len, int access,
		  const char *what)
{
	int ret = ibv_rereg_mr(c->mr, flags, pd, addr, len, access);

	if (ret)
		tp_die("ibv_rereg_mr (%s): %d (%s)", what, ret, strerror(errno));
}

/* `rdma res show mr` lists the MR under @rkey with length @len (ib_mr.length). */
static void expect_res_length(uint32_t rkey, size_t len, const char *what)
{
	char line[1024], key[32], want[48];
	int found = 0;
	FILE *f = popen("rdma res show mr", "r");

	if (!f)
		tp_die("popen(rdma res show mr): %s", strerror(errno));
	snprintf(key, sizeof(key), "rkey 0x%x ", rkey);
	snprintf(want, sizeof(want), "mrlen %zu ", len);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, key)) {
			found = 1;
			if (!strstr(line, want))
				tp_die("%s: rdma res shows %s", what, line);
		}
	if (pclose(f) || !found)
		tp_die("%s: rdma res show mr lists no MR with rkey %#x", what, rkey);
}

static void check_translation(struct ctx *c, struct pair *p)
{
	uint32_t old_rkey = c->mr->rkey;
	void *hole;
	int ret;

	rereg(c, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, c->b, B_LEN, 0, "to buffer B");
	memset(c->a, FILL_A, A_LEN);
	write_lands(c, p, 2, c->b, B_LEN, FILL_B, PAGE + 300, 2000, "translation: WRITE into B");
	expect_bytes("translation: buffer A", c->a, A_LEN, FILL_A, -1, 0, 0);
	expect_res_length(c->mr->rkey, B_LEN, "translation: the kernel's view of the new MR");
	tp_note("translation: rereg to B (rkey %#x -> %#x), a WRITE landed in B, A untouched; rdma res shows its new length",
		old_rkey, c->mr->rkey);
	if (c->mr->rkey != old_rkey)
		write_refused(c, c->dev.pd, (uintptr_t)c->a, old_rkey,
			      "translation: WRITE under the old rkey");

	/* A range that is not mapped: the rereg fails, the MR stays on B. */
	hole = mmap(NULL, B_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (hole == MAP_FAILED)
		tp_die("mmap: %s", strerror(errno));
	munmap(hole, B_LEN);
	ret = ibv_rereg_mr(c->mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, hole, B_LEN, 0);
	if (!ret)
		tp_die("ibv_rereg_mr to an unmapped range succeeded");
	write_lands(c, p, 3, c->b, B_LEN, FILL_B, 8, 4000,
		    "translation: WRITE after a failed rereg");
	tp_note("translation: a rereg to an unmapped range failed (%d, %s); the MR still maps B",
		ret, strerror(errno));
}

static void check_access(struct ctx *c, struct pair *p)
{
	rereg(c, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE,
	      "to LOCAL_WRITE only");
	write_refused(c, c->dev.pd, (uintptr_t)c->mr->addr, c->mr->rkey,
		      "access: WRITE into a LOCAL_WRITE-only MR");
	rereg(c, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
	      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "back to REMOTE_WRITE");
	write_lands(c, p, 4, c->mr->addr, c->mr->length, c->mr->addr == c->a ? FILL_A : FILL_B,
		    100, 1000, "access: WRITE after REMOTE_WRITE is back");
	tp_note("access: a WRITE after REMOTE_WRITE came back landed");
}

static void check_pd(struct ctx *c)
{
	uint8_t fill = c->mr->addr == c->a ? FILL_A : FILL_B;
	struct pair p2;

	rereg(c, IBV_REREG_MR_CHANGE_PD, c->pd2, NULL, 0, 0, "to PD 2");
	write_refused(c, c->dev.pd, (uintptr_t)c->mr->addr, c->mr->rkey,
		      "pd: WRITE through a responder in PD 1");
	pair_open(c, &p2, c->pd2);
	write_lands(c, &p2, 5, c->mr->addr, c->mr->length, fill, 64, 3000,
		    "pd: WRITE through a responder in PD 2");
	pair_close(&p2);
	tp_note("pd: after a rereg to PD 2 only a responder in PD 2 reaches the MR");
}

int main(int argc, char **argv)
{
	struct ctx c = { 0 };
	struct pair p;

	tp_prog = "rereg-mr";
	if (argc != 2)
		tp_die("usage: rereg-mr DEVICE");
	tp_open(&c.dev, argv[1]);
	c.pd2 = ibv_alloc_pd(c.dev.ctx);
	c.a = aligned_alloc(PAGE, A_LEN);
	c.b = aligned_alloc(PAGE, B_LEN);
	c.src = aligned_alloc(PAGE, SRC_LEN);
	if (!c.pd2 || !c.a || !c.b || !c.src)
		tp_die("setup: %s", strerror(errno));
	memset(c.b, FILL_B, B_LEN);
	c.smr = ibv_reg_mr(c.dev.pd, c.src, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	c.mr = ibv_reg_mr(c.dev.pd, c.a, A_LEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!c.smr || !c.mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	pair_open(&c, &p, c.dev.pd);
	write_lands(&c, &p, 1, c.a, A_LEN, FILL_A, 100, 3000, "WRITE into A");
	expect_bytes("buffer B", c.b, B_LEN, FILL_B, -1, 0, 0);

	check_translation(&c, &p);
	check_access(&c, &p);
	pair_close(&p);
	check_pd(&c);

	if (ibv_dereg_mr(c.mr) || ibv_dereg_mr(c.smr))
		tp_die("ibv_dereg_mr: %s", strerror(errno));
	ibv_dealloc_pd(c.pd2);
	tp_close(&c.dev);
	tp_note("%d WRITEs, every rereg held", c.writes);
	return 0;
}
