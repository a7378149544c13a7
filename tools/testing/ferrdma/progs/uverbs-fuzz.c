// SPDX-License-Identifier: GPL-2.0
/*
 * uverbs-fuzz: a bounded, seeded random fuzzer of the kernel's uverbs boundary for one RDMA
 * device (issue 14). Several worker processes issue raw uverbs commands - the legacy write()
 * commands and RDMA_VERBS_IOCTL - straight to /dev/infiniband/uverbsN, bypassing libibverbs and
 * the provider, with the irdma ABI's driver data (udata) mostly well formed and often not:
 * random, stale and foreign handles, sizes, access flags, ring registrations, response buffers
 * that are too short, read-only or unmapped, doorbell-page mmaps at any offset, garbage written
 * into registered rings and doorbells rung for random queues. Workers close their file or die
 * with objects alive at random moments (the kernel must clean up), and are replaced.
 *
 *   uverbs-fuzz [-d UVERBS_DEV] [-s SEED] [-n COMMANDS] [-p PROCS] [-u]
 *
 * -n is the total number of commands over all workers (default 100000); -u drops to user
 * nobody after opening nothing (the device node must be world-accessible, as rdma-core's udev
 * rules make it), so ib_umem's RLIMIT_MEMLOCK accounting is that of an unprivileged user.
 * Each worker's command stream is a function of (SEED, worker, generation) alone, printed
 * when a worker starts, so a finding can be replayed; the interleaving of workers is not.
 * Prints a summary (commands, successes, errno classes, respawns) and exits 0 when the run
 * completed; the harness judges the kernel (splats, kmemleak, hangs, leftover objects).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/irdma-abi.h>
#include <rdma/rdma_user_ioctl.h>

#define PAGE		4096u
#define POOL		16	/* handles remembered per object kind, live or stale */
#define BUFS		8	/* user buffers a worker keeps */
#define MAX_PROCS	16	/* = the size of stats.slot_actions */
#define RESP_ROOM	4096

/* enum ib_qp_attr_mask (include/rdma/ib_verbs.h: kernel-internal, but the uverbs ABI). */
enum {
	QP_STATE = 1 << 0, QP_ACCESS_FLAGS = 1 << 3, QP_PKEY_INDEX = 1 << 4, QP_PORT = 1 << 5,
	QP_QKEY = 1 << 6, QP_AV = 1 << 7, QP_PATH_MTU = 1 << 8, QP_TIMEOUT = 1 << 9,
	QP_RETRY_CNT = 1 << 10, QP_RNR_RETRY = 1 << 11, QP_RQ_PSN = 1 << 12,
	QP_MAX_QP_RD_ATOMIC = 1 << 13, QP_MIN_RNR_TIMER = 1 << 15, QP_SQ_PSN = 1 << 16,
	QP_MAX_DEST_RD_ATOMIC = 1 << 17, QP_DEST_QPN = 1 << 20,
};

static const char *prog = "uverbs-fuzz";

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* xoshiro-style generator (splitmix64 seeding): small, fast and the same on every host. */
struct rng {
	uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t below(struct rng *r, uint32_t n)
{
	return n ? (uint32_t)(rnd(r) % n) : 0;
}

static bool chance(struct rng *r, unsigned int percent)
{
	return below(r, 100) < percent;
}

/* A value that is usually interesting: 0, 1, a small number, a boundary or anything. */
static uint32_t any_u32(struct rng *r)
{
	static const uint32_t edges[] = { 0, 1, 2, 3, 4, 7, 8, 15, 16, 63, 64, 255, 256, 4095,
					  4096, 65535, 65536, 0x7fffffff, 0x80000000,
					  0xfffffffe, 0xffffffff };

	switch (below(r, 4)) {
	case 0:
		return edges[below(r, sizeof(edges) / sizeof(edges[0]))];
	case 1:
		return below(r, 64);
	case 2:
		return below(r, 4096);
	default:
		return (uint32_t)rnd(r);
	}
}

/* Counters in shared memory, summed over all workers. */
struct stats {
	uint64_t commands;
	uint64_t ok;
	uint64_t errs[140];
	uint64_t ioctls;
	uint64_t mmaps;
	uint64_t doorbells;
	uint64_t deaths;
	uint64_t closes;
	uint64_t slot_actions[16];	/* uverbs commands per worker slot (its budget) */
};

static struct stats *stats;
/* This worker's slot in stats->slot_actions: its uverbs commands count against the budget. */
static uint64_t *slot_commands;

struct handles {
	uint32_t h[POOL];
	unsigned int n;
};

/* What one worker knows of its uverbs file. */
struct worker {
	struct rng rng;
	const char *dev;
	int fd;
	bool context;
	uint64_t db_key;
	struct handles pd, mr, cq, qp, ah;
	struct {
		uint8_t *addr;
		size_t len;
	} buf[BUFS];
	uint8_t *resp;		/* RESP_ROOM bytes for responses */
	uint8_t *ro_page;	/* a read-only page, for responses the kernel cannot write */
	uint8_t *hole;		/* an address that is not mapped */
	void *db;		/* the doorbell page, when mapped */
};

static void remember(struct handles *p, uint32_t h)
{
	p->h[p->n % POOL] = h;
	p->n++;
}

/* A handle to use: mostly one seen before (live or already destroyed), sometimes anything. */
static uint32_t pick(struct worker *w, struct handles *p)
{
	if (p->n && chance(&w->rng, 85))
		return p->h[below(&w->rng, p->n < POOL ? p->n : POOL)];
	return any_u32(&w->rng);
}

/* An address for the kernel to read or write: a buffer, an odd place in one, or a bad one. */
static uint64_t some_addr(struct worker *w, size_t *len)
{
	unsigned int i = below(&w->rng, BUFS);

	*len = w->buf[i].len;
	switch (below(&w->rng, 10)) {
	case 0:
		*len = PAGE;
		return (uintptr_t)w->hole;
	case 1:
		*len = PAGE;
		return (uintptr_t)w->ro_page;
	case 2:
		*len = any_u32(&w->rng);
		return rnd(&w->rng);
	case 3: {
		size_t off = below(&w->rng, (uint32_t)w->buf[i].len);

		*len -= off;
		return (uintptr_t)w->buf[i].addr + off;
	}
	default:
		return (uintptr_t)w->buf[i].addr;
	}
}

static void count(int err)
{
	(*slot_commands)++;
	__atomic_fetch_add(&stats->commands, 1, __ATOMIC_RELAXED);
	if (!err)
		__atomic_fetch_add(&stats->ok, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&stats->errs[err < 140 ? err : 0], 1, __ATOMIC_RELAXED);
}

/*
 * One legacy write command: header, core request (whose first 8 bytes are the response
 * pointer when @out_words is not 0) and driver data. The response lands in w->resp unless
 * the fuzzer chooses a bad pointer. Returns 0 or the errno.
 */
static int cmd(struct worker *w, uint32_t command, void *core, size_t core_len,
	       const void *drv, size_t drv_len, uint16_t out_words)
{
	uint8_t msg[1024];
	struct ib_uverbs_cmd_hdr *hdr = (void *)msg;
	size_t len = sizeof(*hdr) + core_len + drv_len;
	int err = 0;

	if (len > sizeof(msg) || len % 4)
		die("internal: command of %zu bytes", len);
	if (out_words) {
		uint64_t resp = (uintptr_t)w->resp;

		if (chance(&w->rng, 3))
			resp = chance(&w->rng, 50) ? (uintptr_t)w->ro_page : (uintptr_t)w->hole;
		if (out_words * 4u > RESP_ROOM)
			out_words = RESP_ROOM / 4;
		memcpy(core, &resp, sizeof(resp));
	}
	hdr->command = command;
	hdr->in_words = (uint16_t)(len / 4);
	hdr->out_words = out_words;
	/* Now and then a lying header: the kernel must check the lengths against the write. */
	if (chance(&w->rng, 2))
		hdr->in_words = (uint16_t)any_u32(&w->rng);
	memcpy(msg + sizeof(*hdr), core, core_len);
	if (drv_len)
		memcpy(msg + sizeof(*hdr) + core_len, drv, drv_len);
	if (write(w->fd, msg, len) < 0)
		err = errno;
	count(err);
	return err;
}

/* Driver data: well formed as given, or mangled (a byte flipped, cut short, grown). */
static size_t mangle(struct worker *w, uint8_t *drv, size_t len, size_t room)
{
	switch (below(&w->rng, 12)) {
	case 0:
		if (len)
			drv[below(&w->rng, (uint32_t)len)] ^= (uint8_t)(1u << below(&w->rng, 8));
		return len;
	case 1:
		return len & ~(size_t)3 ? (len - 4) & ~(size_t)3 : 0;
	case 2: {
		size_t grown = len + 4 * (1 + below(&w->rng, 8));

		if (grown > room)
			grown = room & ~(size_t)3;
		for (size_t i = len; i < grown; i++)
			drv[i] = chance(&w->rng, 50) ? 0 : (uint8_t)rnd(&w->rng);
		return grown;
	}
	default:
		return len;
	}
}

static void do_get_context(struct worker *w)
{
	struct ib_uverbs_get_context core = { 0 };
	uint8_t drv[64] = { 0 };
	struct irdma_alloc_ucontext_req *req = (void *)drv;
	size_t drv_len;
	int err;

	req->userspace_ver = chance(&w->rng, 80) ? 5 : (uint8_t)below(&w->rng, 8);
	req->comp_mask = chance(&w->rng, 80) ? IRDMA_ALLOC_UCTX_USE_RAW_ATTR : rnd(&w->rng);
	drv_len = mangle(w, drv, sizeof(*req), sizeof(drv));
	err = cmd(w, IB_USER_VERBS_CMD_GET_CONTEXT, &core, sizeof(core), drv, drv_len,
		  (sizeof(struct ib_uverbs_get_context_resp) +
		   sizeof(struct irdma_alloc_ucontext_resp)) / 4);
	if (!err) {
		struct ib_uverbs_get_context_resp *r = (void *)w->resp;
		struct irdma_alloc_ucontext_resp *d = (void *)(w->resp + sizeof(*r));

		w->context = true;
		w->db_key = d->db_mmap_key;
		close((int)r->async_fd);
	}
}

static void do_alloc_pd(struct worker *w)
{
	struct ib_uverbs_alloc_pd core = { 0 };

	if (!cmd(w, IB_USER_VERBS_CMD_ALLOC_PD, &core, sizeof(core), NULL, 0,
		 (sizeof(struct ib_uverbs_alloc_pd_resp) +
		  sizeof(struct irdma_alloc_pd_resp)) / 4))
		remember(&w->pd, ((struct ib_uverbs_alloc_pd_resp *)w->resp)->pd_handle);
}

static void do_dealloc_pd(struct worker *w)
{
	struct ib_uverbs_dealloc_pd core = { .pd_handle = pick(w, &w->pd) };

	cmd(w, IB_USER_VERBS_CMD_DEALLOC_PD, &core, sizeof(core), NULL, 0, 0);
}

/*
 * The range, PD and access rights of a registration or re-registration: mostly a buffer of the
 * worker's (or a hole, a read-only page) with its own address as iova, sometimes any values.
 */
static void mr_args(struct worker *w, __u64 *start, __u64 *length, __u64 *hca_va, __u32 *pd,
		    __u32 *access)
{
	size_t len;

	*start = some_addr(w, &len);
	*length = chance(&w->rng, 80) ? len : any_u32(&w->rng);
	*hca_va = chance(&w->rng, 80) ? *start : rnd(&w->rng);
	*pd = pick(w, &w->pd);
	*access = chance(&w->rng, 60) ? IB_UVERBS_ACCESS_LOCAL_WRITE | (below(&w->rng, 8) << 1) :
		any_u32(&w->rng);
}

static void do_reg_mr(struct worker *w)
{
	struct ib_uverbs_reg_mr core = { 0 };
	uint8_t drv[32] = { 0 };
	struct irdma_mem_reg_req *req = (void *)drv;
	size_t drv_len;
	uint32_t pages;

	mr_args(w, &core.start, &core.length, &core.hca_va, &core.pd_handle, &core.access_flags);
	pages = (uint32_t)((core.length + PAGE - 1) / PAGE);
	req->reg_type = (uint16_t)below(&w->rng, 4);	/* MEM, QP, CQ and one too far */
	switch (req->reg_type) {
	case IRDMA_MEMREG_TYPE_CQ:
		req->cq_pages = (uint16_t)(chance(&w->rng, 70) ? pages : any_u32(&w->rng));
		break;
	case IRDMA_MEMREG_TYPE_QP:
		req->sq_pages = (uint16_t)(chance(&w->rng, 70) ? pages / 2 : any_u32(&w->rng));
		req->rq_pages = (uint16_t)(chance(&w->rng, 70) ? pages - req->sq_pages :
					   any_u32(&w->rng));
		break;
	}
	drv_len = mangle(w, drv, sizeof(*req), sizeof(drv));
	if (!cmd(w, IB_USER_VERBS_CMD_REG_MR, &core, sizeof(core), drv, drv_len,
		 sizeof(struct ib_uverbs_reg_mr_resp) / 4))
		remember(&w->mr, ((struct ib_uverbs_reg_mr_resp *)w->resp)->mr_handle);
}

static void do_rereg_mr(struct worker *w)
{
	struct ib_uverbs_rereg_mr core = { 0 };
	uint8_t drv[32] = { 0 };
	struct irdma_mem_reg_req *req = (void *)drv;
	size_t drv_len;

	core.mr_handle = pick(w, &w->mr);
	core.flags = chance(&w->rng, 80) ? 1 + below(&w->rng, 7) : any_u32(&w->rng);
	mr_args(w, &core.start, &core.length, &core.hca_va, &core.pd_handle, &core.access_flags);
	req->reg_type = chance(&w->rng, 80) ? IRDMA_MEMREG_TYPE_MEM : (uint16_t)below(&w->rng, 4);
	drv_len = mangle(w, drv, sizeof(*req), sizeof(drv));
	cmd(w, IB_USER_VERBS_CMD_REREG_MR, &core, sizeof(core), drv, drv_len,
	    sizeof(struct ib_uverbs_rereg_mr_resp) / 4);
}

static void do_dereg_mr(struct worker *w)
{
	struct ib_uverbs_dereg_mr core = { .mr_handle = pick(w, &w->mr) };

	cmd(w, IB_USER_VERBS_CMD_DEREG_MR, &core, sizeof(core), NULL, 0, 0);
}

static void do_create_cq(struct worker *w)
{
	struct ib_uverbs_create_cq core = { 0 };
	uint8_t drv[48] = { 0 };
	struct irdma_create_cq_req *req = (void *)drv;
	size_t len, drv_len;

	core.user_handle = rnd(&w->rng);
	core.cqe = chance(&w->rng, 70) ? 1 + below(&w->rng, 256) : any_u32(&w->rng);
	core.comp_vector = chance(&w->rng, 80) ? below(&w->rng, 2) : any_u32(&w->rng);
	core.comp_channel = -1;
	req->user_cq_buf = some_addr(w, &len);
	/* With irdma's CQ_RESIZE layout the shadow area is a registration of its own. */
	req->user_shadow_area = chance(&w->rng, 10) ? req->user_cq_buf + len - 64 :
						      some_addr(w, &len);
	drv_len = mangle(w, drv, sizeof(*req), sizeof(drv));
	if (!cmd(w, IB_USER_VERBS_CMD_CREATE_CQ, &core, sizeof(core), drv, drv_len,
		 (sizeof(struct ib_uverbs_create_cq_resp) +
		  sizeof(struct irdma_create_cq_resp)) / 4))
		remember(&w->cq, ((struct ib_uverbs_create_cq_resp *)w->resp)->cq_handle);
}

static void do_resize_cq(struct worker *w)
{
	struct ib_uverbs_resize_cq core = { 0 };
	uint8_t drv[32] = { 0 };
	struct irdma_resize_cq_req *req = (void *)drv;
	size_t len, drv_len;

	core.cq_handle = pick(w, &w->cq);
	core.cqe = chance(&w->rng, 70) ? 4 + below(&w->rng, 512) : any_u32(&w->rng);
	req->user_cq_buffer = some_addr(w, &len);
	drv_len = mangle(w, drv, sizeof(*req), sizeof(drv));
	cmd(w, IB_USER_VERBS_CMD_RESIZE_CQ, &core, sizeof(core), drv, drv_len,
	    sizeof(struct ib_uverbs_resize_cq_resp) / 4);
}

static void do_destroy_cq(struct worker *w)
{
	struct ib_uverbs_destroy_cq core = { .cq_handle = pick(w, &w->cq) };

	cmd(w, IB_USER_VERBS_CMD_DESTROY_CQ, &core, sizeof(core), NULL, 0,
	    sizeof(struct ib_uverbs_destroy_cq_resp) / 4);
}

static void do_create_qp(struct worker *w)
{
	struct ib_uverbs_create_qp core = { 0 };
	uint8_t drv[64] = { 0 };
	struct irdma_create_qp_req *req = (void *)drv;
	size_t len, drv_len;

	core.user_handle = rnd(&w->rng);
	core.pd_handle = pick(w, &w->pd);
	core.send_cq_handle = pick(w, &w->cq);
	core.recv_cq_handle = chance(&w->rng, 70) ? core.send_cq_handle : pick(w, &w->cq);
	core.srq_handle = chance(&w->rng, 95) ? 0 : any_u32(&w->rng);
	core.max_send_wr = chance(&w->rng, 70) ? 1 + below(&w->rng, 64) : any_u32(&w->rng);
	core.max_recv_wr = chance(&w->rng, 70) ? 1 + below(&w->rng, 64) : any_u32(&w->rng);
	core.max_send_sge = chance(&w->rng, 70) ? 1 + below(&w->rng, 3) : any_u32(&w->rng);
	core.max_recv_sge = chance(&w->rng, 70) ? 1 + below(&w->rng, 3) : any_u32(&w->rng);
	core.max_inline_data = chance(&w->rng, 70) ? below(&w->rng, 102) : any_u32(&w->rng);
	core.sq_sig_all = (uint8_t)below(&w->rng, 2);
	core.qp_type = chance(&w->rng, 85) ? (chance(&w->rng, 60) ? IB_UVERBS_QPT_RC :
						IB_UVERBS_QPT_UD) : (uint8_t)any_u32(&w->rng);
	core.is_srq = chance(&w->rng, 95) ? 0 : 1;
	req->user_wqe_bufs = some_addr(w, &len);
	req->user_compl_ctx = rnd(&w->rng);
	drv_len = mangle(w, drv, chance(&w->rng, 50) ? 16 : sizeof(*req), sizeof(drv));
	if (!cmd(w, IB_USER_VERBS_CMD_CREATE_QP, &core, sizeof(core), drv, drv_len,
		 (sizeof(struct ib_uverbs_create_qp_resp) +
		  sizeof(struct irdma_create_qp_resp)) / 4))
		remember(&w->qp, ((struct ib_uverbs_create_qp_resp *)w->resp)->qp_handle);
}

static void do_modify_qp(struct worker *w)
{
	struct ib_uverbs_modify_qp core = { 0 };
	static const uint32_t masks[] = {
		QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
		QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY,
		QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
			QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER,
		QP_STATE | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN |
			QP_MAX_QP_RD_ATOMIC,
		QP_STATE | QP_SQ_PSN,
		QP_STATE,
	};

	core.qp_handle = pick(w, &w->qp);
	core.attr_mask = chance(&w->rng, 80) ? masks[below(&w->rng, 6)] : any_u32(&w->rng);
	core.qp_state = (uint8_t)(chance(&w->rng, 90) ? below(&w->rng, 7) : any_u32(&w->rng));
	core.cur_qp_state = (uint8_t)below(&w->rng, 8);
	core.path_mtu = (uint8_t)(chance(&w->rng, 80) ? 1 + below(&w->rng, 5) : any_u32(&w->rng));
	core.qkey = chance(&w->rng, 50) ? 0x11111111 : (uint32_t)rnd(&w->rng);
	core.rq_psn = any_u32(&w->rng);
	core.sq_psn = any_u32(&w->rng);
	core.dest_qp_num = chance(&w->rng, 50) ? below(&w->rng, 64) : any_u32(&w->rng);
	core.qp_access_flags = any_u32(&w->rng);
	core.pkey_index = (uint16_t)(chance(&w->rng, 90) ? 0 : any_u32(&w->rng));
	core.port_num = (uint8_t)(chance(&w->rng, 90) ? 1 : any_u32(&w->rng));
	core.max_rd_atomic = (uint8_t)any_u32(&w->rng);
	core.max_dest_rd_atomic = (uint8_t)any_u32(&w->rng);
	core.min_rnr_timer = (uint8_t)any_u32(&w->rng);
	core.timeout = (uint8_t)any_u32(&w->rng);
	core.retry_cnt = (uint8_t)below(&w->rng, 9);
	core.rnr_retry = (uint8_t)below(&w->rng, 9);
	core.dest.is_global = (uint8_t)(chance(&w->rng, 90) ? 1 : any_u32(&w->rng));
	core.dest.port_num = 1;
	core.dest.sgid_index = (uint8_t)(chance(&w->rng, 80) ? below(&w->rng, 4) : any_u32(&w->rng));
	core.dest.hop_limit = 64;
	for (unsigned int i = 0; i < 16; i++)
		core.dest.dgid[i] = chance(&w->rng, 70) ? 0 : (uint8_t)rnd(&w->rng);
	core.dest.dgid[10] = core.dest.dgid[11] = 0xff;	/* mostly IPv4-mapped */
	core.dest.dgid[12] = 10;
	core.dest.dgid[13] = 77;
	core.dest.sl = (uint8_t)any_u32(&w->rng);
	core.dest.traffic_class = (uint8_t)any_u32(&w->rng);
	cmd(w, IB_USER_VERBS_CMD_MODIFY_QP, &core, sizeof(core), NULL, 0, 0);
}

static void do_destroy_qp(struct worker *w)
{
	struct ib_uverbs_destroy_qp core = { .qp_handle = pick(w, &w->qp) };

	cmd(w, IB_USER_VERBS_CMD_DESTROY_QP, &core, sizeof(core), NULL, 0,
	    sizeof(struct ib_uverbs_destroy_qp_resp) / 4);
}

static void do_create_ah(struct worker *w)
{
	struct ib_uverbs_create_ah core = { 0 };

	core.user_handle = rnd(&w->rng);
	core.pd_handle = pick(w, &w->pd);
	core.attr.is_global = (uint8_t)(chance(&w->rng, 90) ? 1 : any_u32(&w->rng));
	core.attr.port_num = (uint8_t)(chance(&w->rng, 90) ? 1 : any_u32(&w->rng));
	core.attr.grh.sgid_index = (uint8_t)(chance(&w->rng, 80) ? below(&w->rng, 4) :
						      any_u32(&w->rng));
	core.attr.grh.hop_limit = (uint8_t)any_u32(&w->rng);
	core.attr.grh.traffic_class = (uint8_t)any_u32(&w->rng);
	core.attr.grh.flow_label = any_u32(&w->rng);
	core.attr.sl = (uint8_t)any_u32(&w->rng);
	for (unsigned int i = 0; i < 16; i++)
		core.attr.grh.dgid[i] = chance(&w->rng, 60) ? 0 : (uint8_t)rnd(&w->rng);
	if (chance(&w->rng, 70)) {
		core.attr.grh.dgid[10] = core.attr.grh.dgid[11] = 0xff;
		core.attr.grh.dgid[12] = 10;
		core.attr.grh.dgid[13] = 77;
	}
	if (!cmd(w, IB_USER_VERBS_CMD_CREATE_AH, &core, sizeof(core), NULL, 0,
		 (sizeof(struct ib_uverbs_create_ah_resp) +
		  sizeof(struct irdma_create_ah_resp)) / 4))
		remember(&w->ah, ((struct ib_uverbs_create_ah_resp *)w->resp)->ah_handle);
}

static void do_destroy_ah(struct worker *w)
{
	struct ib_uverbs_destroy_ah core = { .ah_handle = pick(w, &w->ah) };

	cmd(w, IB_USER_VERBS_CMD_DESTROY_AH, &core, sizeof(core), NULL, 0, 0);
}

/* Multicast attach and detach: GIDs mostly from a few IPv4 and IPv6 groups (so attaches
 * meet earlier ones, fill groups and get detached), sometimes anything. */
static void do_mcast(struct worker *w)
{
	struct ib_uverbs_attach_mcast core = { 0 };

	core.qp_handle = pick(w, &w->qp);
	core.mlid = (uint16_t)(chance(&w->rng, 90) ? 0 : any_u32(&w->rng));
	if (chance(&w->rng, 45)) {
		core.gid[10] = core.gid[11] = 0xff;
		core.gid[12] = 239;
		core.gid[15] = (uint8_t)below(&w->rng, 4);
	} else if (chance(&w->rng, 60)) {
		core.gid[0] = 0xff;
		core.gid[1] = 0x0e;
		core.gid[15] = (uint8_t)below(&w->rng, 4);
	} else {
		for (unsigned int i = 0; i < 16; i++)
			core.gid[i] = (uint8_t)rnd(&w->rng);
	}
	/* attach_mcast and detach_mcast have the same layout. */
	cmd(w, chance(&w->rng, 60) ? IB_USER_VERBS_CMD_ATTACH_MCAST :
	    IB_USER_VERBS_CMD_DETACH_MCAST, &core, sizeof(core), NULL, 0, 0);
}

/* The kernel-verbs commands: uverbs marshals work requests for kernel post paths, which a
 * user QP of a driver with its own user data path must refuse. */
static void do_kernel_verbs(struct worker *w)
{
	uint8_t body[512] = { 0 };
	size_t len;

	switch (below(&w->rng, 4)) {
	case 0: {
		struct ib_uverbs_poll_cq *c = (void *)body;

		c->cq_handle = pick(w, &w->cq);
		c->ne = chance(&w->rng, 80) ? below(&w->rng, 8) : any_u32(&w->rng);
		cmd(w, IB_USER_VERBS_CMD_POLL_CQ, c, sizeof(*c), NULL, 0,
		    (uint16_t)below(&w->rng, 64));
		return;
	}
	case 1: {
		struct ib_uverbs_req_notify_cq c = { .cq_handle = pick(w, &w->cq),
						     .solicited_only = any_u32(&w->rng) };

		cmd(w, IB_USER_VERBS_CMD_REQ_NOTIFY_CQ, &c, sizeof(c), NULL, 0, 0);
		return;
	}
	default: {
		struct ib_uverbs_post_send *c = (void *)body;
		struct ib_uverbs_send_wr *wr = (void *)(c + 1);
		struct ib_uverbs_sge *sge = (void *)(wr + 1);

		c->qp_handle = pick(w, &w->qp);
		c->wr_count = chance(&w->rng, 80) ? 1 : any_u32(&w->rng);
		c->sge_count = chance(&w->rng, 80) ? 1 : any_u32(&w->rng);
		c->wqe_size = chance(&w->rng, 80) ? sizeof(*wr) : any_u32(&w->rng);
		wr->wr_id = rnd(&w->rng);
		wr->num_sge = 1;
		wr->opcode = below(&w->rng, 16);
		wr->send_flags = any_u32(&w->rng);
		wr->wr.ud.ah = pick(w, &w->ah);
		wr->wr.ud.remote_qpn = 1;
		wr->wr.ud.remote_qkey = 0x80010000;
		sge->addr = some_addr(w, &len);
		sge->length = (uint32_t)len;
		sge->lkey = any_u32(&w->rng);
		cmd(w, chance(&w->rng, 50) ? IB_USER_VERBS_CMD_POST_SEND :
		    IB_USER_VERBS_CMD_POST_RECV, c,
		    sizeof(*c) + sizeof(*wr) + sizeof(*sge), NULL, 0,
		    sizeof(struct ib_uverbs_post_send_resp) / 4);
		return;
	}
	}
}

static void do_query(struct worker *w)
{
	uint8_t core[16] = { 0 };

	if (chance(&w->rng, 50)) {
		cmd(w, IB_USER_VERBS_CMD_QUERY_DEVICE, core, 8, NULL, 0,
		    sizeof(struct ib_uverbs_query_device_resp) / 4);
	} else {
		struct ib_uverbs_query_port *q = (void *)core;

		q->port_num = (uint8_t)(chance(&w->rng, 70) ? 1 : any_u32(&w->rng));
		cmd(w, IB_USER_VERBS_CMD_QUERY_PORT, q, sizeof(*q), NULL, 0,
		    sizeof(struct ib_uverbs_query_port_resp) / 4);
	}
}

/* The ioctl path: a random object and method with random attributes of every kind. */
static void do_ioctl(struct worker *w)
{
	uint64_t space[64] = { 0 };
	struct ib_uverbs_ioctl_hdr *hdr = (void *)space;
	unsigned int n = below(&w->rng, 8);
	int err = 0;

	hdr->object_id = (uint16_t)(chance(&w->rng, 90) ? below(&w->rng, 24) :
				    (0x1000 | below(&w->rng, 8)));
	hdr->method_id = (uint16_t)(chance(&w->rng, 90) ? below(&w->rng, 12) :
				    (0x1000 | below(&w->rng, 8)));
	hdr->num_attrs = (uint16_t)n;
	hdr->driver_id = chance(&w->rng, 90) ? 9 /* RDMA_DRIVER_IRDMA */ : any_u32(&w->rng);
	hdr->length = (uint16_t)(sizeof(*hdr) + n * sizeof(struct ib_uverbs_attr));
	if (chance(&w->rng, 3))
		hdr->length = (uint16_t)any_u32(&w->rng);
	for (unsigned int i = 0; i < n; i++) {
		struct ib_uverbs_attr *a = &hdr->attrs[i];
		size_t len;

		a->attr_id = (uint16_t)(chance(&w->rng, 85) ? below(&w->rng, 12) :
					(0x1000 | below(&w->rng, 8)));
		a->flags = (uint16_t)(chance(&w->rng, 80) ? below(&w->rng, 2) : any_u32(&w->rng));
		switch (below(&w->rng, 4)) {
		case 0:	/* an object handle */
			a->len = 0;
			a->data = chance(&w->rng, 50) ? pick(w, &w->pd) : pick(w, &w->qp);
			break;
		case 1:	/* an inline value */
			a->len = (uint16_t)(1u << below(&w->rng, 4));
			a->data = rnd(&w->rng);
			break;
		case 2:	/* a pointer to memory, maybe bad */
			a->data = some_addr(w, &len);
			a->len = (uint16_t)(chance(&w->rng, 70) ? (len < 512 ? len : 512) :
					    any_u32(&w->rng));
			break;
		default: /* an fd or an enum element */
			a->len = (uint16_t)below(&w->rng, 16);
			a->attr_data.enum_data.elem_id = (uint8_t)below(&w->rng, 4);
			a->data = chance(&w->rng, 50) ? (uint64_t)w->fd : any_u32(&w->rng);
			break;
		}
	}
	if (ioctl(w->fd, RDMA_VERBS_IOCTL, hdr) < 0)
		err = errno;
	__atomic_fetch_add(&stats->ioctls, 1, __ATOMIC_RELAXED);
	count(err);
}

/* mmap of the uverbs file: the doorbell page (by its key), or any offset and size. A mapped
 * doorbell page gets random doorbells: the device must survive them. */
static void do_mmap(struct worker *w)
{
	size_t len = chance(&w->rng, 80) ? PAGE : PAGE * (1 + below(&w->rng, 4));
	off_t off = chance(&w->rng, 70) ? (off_t)w->db_key : (off_t)(below(&w->rng, 64) * PAGE);
	int prot = chance(&w->rng, 80) ? PROT_READ | PROT_WRITE : PROT_READ;
	void *p;

	__atomic_fetch_add(&stats->mmaps, 1, __ATOMIC_RELAXED);
	if (w->db) {
		munmap(w->db, PAGE);
		w->db = NULL;
	}
	p = mmap(NULL, len, prot, MAP_SHARED, w->fd, off);
	count(p == MAP_FAILED ? errno : 0);
	if (p == MAP_FAILED)
		return;
	if (len == PAGE && (prot & PROT_WRITE)) {
		w->db = p;
		return;
	}
	munmap(p, len);
}

static void do_doorbell(struct worker *w)
{
	volatile uint32_t *db = w->db;
	unsigned int i;

	if (!db)
		return;
	/* Garbage into a registered ring first, so a rung queue may read it. */
	i = below(&w->rng, BUFS);
	for (unsigned int k = 0; k < 16; k++)
		w->buf[i].addr[below(&w->rng, (uint32_t)w->buf[i].len)] = (uint8_t)rnd(&w->rng);
	db[below(&w->rng, PAGE / 4)] = chance(&w->rng, 70) ? below(&w->rng, 64) :
							       any_u32(&w->rng);
	__atomic_fetch_add(&stats->doorbells, 1, __ATOMIC_RELAXED);
}

static void reopen(struct worker *w)
{
	if (w->db) {
		munmap(w->db, PAGE);
		w->db = NULL;
	}
	if (w->fd >= 0)
		close(w->fd);
	w->fd = open(w->dev, O_RDWR | O_CLOEXEC);
	if (w->fd < 0)
		die("open %s: %s", w->dev, strerror(errno));
	w->context = false;
	w->db_key = 0;
}

static void *map_pages(size_t pages, int prot)
{
	void *p = mmap(NULL, pages * PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	return p;
}

static void worker_setup(struct worker *w)
{
	w->resp = map_pages(RESP_ROOM / PAGE, PROT_READ | PROT_WRITE);
	w->ro_page = map_pages(1, PROT_READ);
	w->hole = map_pages(1, PROT_READ | PROT_WRITE);
	munmap(w->hole, PAGE);
	for (unsigned int i = 0; i < BUFS; i++) {
		size_t pages = 1 + below(&w->rng, i < 4 ? 4 : 64);

		w->buf[i].addr = map_pages(pages, PROT_READ | PROT_WRITE);
		w->buf[i].len = pages * PAGE;
		memset(w->buf[i].addr, 0, w->buf[i].len);
	}
	w->fd = -1;
	reopen(w);
}

/*
 * One worker generation: @budget commands from the seed, unless it decides to die first with
 * everything still open (returns without cleaning up: the caller _exit()s).
 */
static void worker_run(struct worker *w, uint64_t budget)
{
	while (*slot_commands < budget) {
		uint32_t a = below(&w->rng, 1000);

		if (!w->context && chance(&w->rng, 90)) {
			do_get_context(w);
			continue;
		}
		if (a < 3) {	/* die with everything open: release must clean up */
			__atomic_fetch_add(&stats->deaths, 1, __ATOMIC_RELAXED);
			return;
		}
		if (a < 10) {
			__atomic_fetch_add(&stats->closes, 1, __ATOMIC_RELAXED);
			reopen(w);
		} else if (a < 60) {
			do_get_context(w);
		} else if (a < 130) {
			do_alloc_pd(w);
		} else if (a < 160) {
			do_dealloc_pd(w);
		} else if (a < 300) {
			do_reg_mr(w);
		} else if (a < 320) {
			do_rereg_mr(w);
		} else if (a < 340) {
			do_dereg_mr(w);
		} else if (a < 420) {
			do_create_cq(w);
		} else if (a < 440) {
			do_resize_cq(w);
		} else if (a < 470) {
			do_destroy_cq(w);
		} else if (a < 580) {
			do_create_qp(w);
		} else if (a < 680) {
			do_modify_qp(w);
		} else if (a < 710) {
			do_destroy_qp(w);
		} else if (a < 740) {
			do_create_ah(w);
		} else if (a < 750) {
			do_mcast(w);
		} else if (a < 770) {
			do_destroy_ah(w);
		} else if (a < 830) {
			do_kernel_verbs(w);
		} else if (a < 850) {
			do_query(w);
		} else if (a < 930) {
			do_ioctl(w);
		} else if (a < 960) {
			do_mmap(w);
		} else {
			do_doorbell(w);
		}
	}
}

static uint64_t worker_seed(uint64_t seed, unsigned int worker, unsigned int generation)
{
	struct rng r = { seed ^ ((uint64_t)worker << 32) ^ generation };

	return rnd(&r);
}

static void drop_privileges(void)
{
	struct rlimit lim = { 64ul << 20, 64ul << 20 };

	/* An unprivileged user's pinning budget, as a distribution gives one. */
	if (setrlimit(RLIMIT_MEMLOCK, &lim))
		die("setrlimit: %s", strerror(errno));
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		die("dropping to nobody: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	const char *dev = "/dev/infiniband/uverbs0";
	uint64_t seed = (uint64_t)time(NULL), total = 100000;
	unsigned int procs = 4, generation[MAX_PROCS] = { 0 }, respawns = 0;
	uint64_t share[MAX_PROCS];
	pid_t pids[MAX_PROCS] = { 0 };
	bool unprivileged = false;
	unsigned int alive = 0;
	int opt;

	while ((opt = getopt(argc, argv, "d:s:n:p:u")) != -1) {
		switch (opt) {
		case 'd':
			dev = optarg;
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'n':
			total = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			procs = (unsigned int)strtoul(optarg, NULL, 0);
			if (!procs || procs > MAX_PROCS)
				die("-p takes 1..%d", MAX_PROCS);
			break;
		case 'u':
			unprivileged = true;
			break;
		default:
			fprintf(stderr, "usage: %s [-d DEV] [-s SEED] [-n COMMANDS] [-p PROCS] [-u]\n",
				prog);
			return 2;
		}
	}
	stats = mmap(NULL, sizeof(*stats), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	if (stats == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	memset(stats, 0, sizeof(*stats));
	if (unprivileged)
		drop_privileges();
	printf("%s: seed %" PRIu64 ", %" PRIu64 " commands, %u processes, on %s%s\n", prog, seed,
	       total, procs, dev, unprivileged ? " as nobody" : "");
	fflush(stdout);

	/* Each worker slot has a share of the commands; a worker that dies early leaves the rest
	 * of its share to its successor in the same slot. */
	for (unsigned int i = 0; i < procs; i++)
		share[i] = total / procs + (i < total % procs);
	for (;;) {
		for (unsigned int i = 0; i < procs; i++) {
			pid_t pid;

			if (pids[i] > 0 || stats->slot_actions[i] >= share[i])
				continue;
			pid = fork();
			if (pid < 0)
				die("fork: %s", strerror(errno));
			if (!pid) {
				struct worker w = { .dev = dev };

				slot_commands = &stats->slot_actions[i];
				w.rng.s = worker_seed(seed, i, generation[i]);
				worker_setup(&w);
				worker_run(&w, share[i]);
				_exit(0);
			}
			pids[i] = pid;
			alive++;
		}
		if (!alive)
			break;
		{
			int status;
			pid_t pid = wait(&status);

			if (pid < 0)
				die("wait: %s", strerror(errno));
			for (unsigned int i = 0; i < procs; i++) {
				if (pids[i] != pid)
					continue;
				alive--;
				if (!WIFEXITED(status) || WEXITSTATUS(status))
					die("worker %u (generation %u, seed %" PRIu64 ") ended with "
					    "status 0x%x", i, generation[i],
					    worker_seed(seed, i, generation[i]), status);
				if (stats->slot_actions[i] < share[i]) {
					generation[i]++;
					respawns++;
				}
				pids[i] = 0;
			}
		}
	}

	printf("%s: %" PRIu64 " commands (%" PRIu64 " ioctl, %" PRIu64 " mmap), %" PRIu64
	       " doorbells, %" PRIu64 " succeeded; %" PRIu64 " deaths with objects open, %" PRIu64
	       " closes, %u respawns\n", prog, stats->commands, stats->ioctls, stats->mmaps,
	       stats->doorbells, stats->ok, stats->deaths, stats->closes, respawns);
	printf("%s: errors:", prog);
	for (unsigned int i = 0; i < sizeof(stats->errs) / sizeof(stats->errs[0]); i++) {
		if (stats->errs[i])
			printf(" %s %" PRIu64, i ? strerrorname_np((int)i) : "beyond-139",
			       stats->errs[i]);
	}
	printf("\n");
	return 0;
}
