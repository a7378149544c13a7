// SPDX-License-Identifier: GPL-2.0
/*
 * dmabuf-mr: ibv_reg_dmabuf_mr over a udmabuf (issue 17, item 4). Plain libibverbs and the
 * kernel's udmabuf driver, so it runs on any RoCE device whose provider registers dma-bufs.
 *
 *   dmabuf-mr DEVICE
 *
 * A memfd of 16 pages becomes a dma-buf (/dev/udmabuf); pages 1..8 of it are registered as an
 * MR (offset one page, an iova of our choosing) and reached through a loopback RC pair:
 * 1. an RDMA WRITE of 20000 bytes into the MR lands at that place of the memfd (read through
 *    a mapping of the memfd), and nothing else of it changes;
 * 2. an RDMA READ of 12000 bytes the CPU wrote into the memfd brings them back;
 * 3. a receive posted with the MR's lkey (at an iova inside it) takes a SEND.
 * Refused: an fd that is not a dma-buf (EINVAL), a closed fd (EBADF), a range past the end of
 * the buffer (EINVAL), length 0 (EINVAL). Every byte is checked. Prints what it did; exits 0
 * only if every check held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/udmabuf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs-common.h"

#define PAGE		4096u
#define BUF_PAGES	16
#define MR_OFFSET	PAGE
#define MR_LEN		(8 * PAGE)
#define MR_IOVA		0x40000000ull
#define FILL		0x5c

struct ctx {
	struct tp_dev dev;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	uint8_t *map;		/* the memfd, as the CPU sees it */
	uint8_t *local;		/* a plain buffer on the other side */
	struct ibv_mr *mr, *lmr;
};

static uint8_t pattern(int n, uint32_t i)
{
	return (uint8_t)((n + 3) * 29 + i * 7 + (i >> 9));
}

/* Waits for @n successful completions on the CQ. */
static void wait_wc(struct ctx *c, int n, const char *what)
{
	double end = tp_now() + 30;
	struct ibv_wc wc;
	int got = 0, r;

	while (got < n) {
		r = ibv_poll_cq(c->cq, 1, &wc);
		if (r < 0)
			tp_die("%s: ibv_poll_cq: %d", what, r);
		if (!r) {
			if (tp_now() > end)
				tp_die("%s: no completion in 30 s", what);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			tp_die("%s: completion %s", what, ibv_wc_status_str(wc.status));
		got++;
	}
}

static void post_send(struct ctx *c, enum ibv_wr_opcode op, uint32_t len, uint64_t raddr,
		      const char *what)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->local, .length = len, .lkey = c->lmr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = c->mr->rkey },
	}, *bad;
	int ret = ibv_post_send(c->a, &wr, &bad);

	if (ret)
		tp_die("%s: ibv_post_send: %s", what, strerror(ret));
}

/* The memfd holds pattern @n at [@off, @off + @len) and FILL everywhere else. */
static void expect_map(struct ctx *c, int n, uint32_t off, uint32_t len, const char *what)
{
	uint32_t i;

	for (i = 0; i < BUF_PAGES * PAGE; i++) {
		uint8_t want = (i >= off && i < off + len) ? pattern(n, i - off) : FILL;

		if (c->map[i] != want)
			tp_die("%s: byte %u of the dma-buf is %#04x, expected %#04x", what, i, c->map[i],
			       want);
	}
}

static void expect_refused(struct ctx *c, const char *what, uint64_t off, size_t len, int fd,
			   int want)
{
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(c->dev.pd, off, len, MR_IOVA, fd,
					      IBV_ACCESS_LOCAL_WRITE);

	if (mr)
		tp_die("ibv_reg_dmabuf_mr of %s succeeded", what);
	if (errno != want)
		tp_die("ibv_reg_dmabuf_mr of %s: %s, expected %s", what, strerror(errno),
		       strerror(want));
	tp_note("refused: %s (%s)", what, strerror(errno));
}

int main(int argc, char **argv)
{
	struct udmabuf_create create = { .flags = UDMABUF_FLAGS_CLOEXEC, .offset = 0,
					 .size = BUF_PAGES * PAGE };
	int memfd, dev, dmabuf, pipefd[2], closed;
	struct ctx c = { 0 };
	struct ibv_sge rsge;
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	uint32_t i;
	int ret;

	tp_prog = "dmabuf-mr";
	if (argc != 2)
		tp_die("usage: dmabuf-mr DEVICE");
	tp_open(&c.dev, argv[1]);

	memfd = memfd_create("ferrdma-dmabuf", MFD_ALLOW_SEALING);
	if (memfd < 0 || ftruncate(memfd, BUF_PAGES * PAGE) ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK))
		tp_die("memfd: %s", strerror(errno));
	dev = open("/dev/udmabuf", O_RDWR);
	if (dev < 0)
		tp_die("/dev/udmabuf: %s", strerror(errno));
	create.memfd = memfd;
	dmabuf = ioctl(dev, UDMABUF_CREATE, &create);
	if (dmabuf < 0)
		tp_die("UDMABUF_CREATE: %s", strerror(errno));
	c.map = mmap(NULL, BUF_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (c.map == MAP_FAILED)
		tp_die("mmap of the memfd: %s", strerror(errno));
	memset(c.map, FILL, BUF_PAGES * PAGE);

	c.mr = ibv_reg_dmabuf_mr(c.dev.pd, MR_OFFSET, MR_LEN, MR_IOVA, dmabuf,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	if (!c.mr)
		tp_die("ibv_reg_dmabuf_mr(offset %u, %u bytes): %s", MR_OFFSET, MR_LEN,
		       strerror(errno));
	tp_note("dma-buf MR: %u bytes at offset %u of a udmabuf, iova %#llx, lkey %#x rkey %#x",
		MR_LEN, MR_OFFSET, (unsigned long long)MR_IOVA, c.mr->lkey, c.mr->rkey);

	c.local = aligned_alloc(PAGE, 8 * PAGE);
	c.lmr = c.local ? ibv_reg_mr(c.dev.pd, c.local, 8 * PAGE, IBV_ACCESS_LOCAL_WRITE) : NULL;
	c.cq = ibv_create_cq(c.dev.ctx, 16, NULL, NULL, 0);
	if (!c.lmr || !c.cq)
		tp_die("setup: %s", strerror(errno));
	c.a = tp_create_rc_qp(&c.dev, c.cq, c.cq, 4, 4);
	c.b = tp_create_rc_qp(&c.dev, c.cq, c.cq, 4, 4);
	tp_connect_pair(&c.dev, c.a, c.b);

	/* 1. WRITE into the MR: lands at MR_OFFSET + 100 of the memfd. */
	for (i = 0; i < 20000; i++)
		c.local[i] = pattern(1, i);
	post_send(&c, IBV_WR_RDMA_WRITE, 20000, MR_IOVA + 100, "WRITE");
	wait_wc(&c, 1, "WRITE");
	expect_map(&c, 1, MR_OFFSET + 100, 20000, "WRITE");
	tp_note("RDMA WRITE of 20000 bytes landed in the dma-buf, nothing else changed");

	/* 2. READ from the MR what the CPU wrote through the memfd. */
	memset(c.map, FILL, BUF_PAGES * PAGE);
	for (i = 0; i < 12000; i++)
		c.map[MR_OFFSET + 3 * PAGE + 5 + i] = pattern(2, i);
	memset(c.local, 0, 8 * PAGE);
	post_send(&c, IBV_WR_RDMA_READ, 12000, MR_IOVA + 3 * PAGE + 5, "READ");
	wait_wc(&c, 1, "READ");
	for (i = 0; i < 12000; i++)
		if (c.local[i] != pattern(2, i))
			tp_die("READ: byte %u is %#04x, expected %#04x", i, c.local[i], pattern(2, i));
	tp_note("RDMA READ of 12000 bytes from the dma-buf checked");

	/* 3. A receive into the MR under its lkey. */
	memset(c.map, FILL, BUF_PAGES * PAGE);
	rsge = (struct ibv_sge){ .addr = MR_IOVA + 7 * PAGE, .length = PAGE, .lkey = c.mr->lkey };
	ret = ibv_post_recv(c.b, &rwr, &rbad);
	if (ret)
		tp_die("ibv_post_recv into the dma-buf MR: %s", strerror(ret));
	for (i = 0; i < 3000; i++)
		c.local[i] = pattern(3, i);
	post_send(&c, IBV_WR_SEND, 3000, 0, "SEND");
	wait_wc(&c, 2, "SEND and RECV");
	expect_map(&c, 3, MR_OFFSET + 7 * PAGE, 3000, "SEND into the dma-buf MR");
	tp_note("a SEND received into the dma-buf MR under its lkey checked");

	/* Refusals. */
	if (pipe(pipefd))
		tp_die("pipe: %s", strerror(errno));
	expect_refused(&c, "a pipe", 0, PAGE, pipefd[0], EINVAL);
	closed = dup(pipefd[1]);
	close(closed);
	expect_refused(&c, "a closed fd", 0, PAGE, closed, EBADF);
	expect_refused(&c, "a range past the buffer's end", (BUF_PAGES - 1) * PAGE, 2 * PAGE,
		       dmabuf, EINVAL);
	expect_refused(&c, "length 0", 0, 0, dmabuf, EINVAL);

	ibv_destroy_qp(c.a);
	ibv_destroy_qp(c.b);
	ibv_destroy_cq(c.cq);
	if (ibv_dereg_mr(c.mr) || ibv_dereg_mr(c.lmr))
		tp_die("ibv_dereg_mr: %s", strerror(errno));
	munmap(c.map, BUF_PAGES * PAGE);
	close(dmabuf);
	close(dev);
	close(memfd);
	close(pipefd[0]);
	close(pipefd[1]);
	free(c.local);
	tp_close(&c.dev);
	tp_note("every dma-buf check held");
	return 0;
}
