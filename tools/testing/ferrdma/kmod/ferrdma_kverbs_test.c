// SPDX-License-Identifier: GPL-2.0
/*
 * ferrdma_kverbs_test: a kernel verbs consumer for testing an RDMA device's kernel-mode verbs
 * (kernel CQs and QPs, post/poll in atomic context, the local DMA lkey) without a ULP.
 *
 * On load it registers an ib_client, picks the device named by the `dev` parameter (default
 * ferrdma0; rxe0 works too, for comparison with soft RoCE) and runs its checks one after the
 * other, logging one KTAP-like line per check:
 *
 *	ferrdma_kverbs: ok N - name
 *	ferrdma_kverbs: ok N - name # SKIP reason
 *	ferrdma_kverbs: not ok N - name: reason
 *
 * and at the end "ferrdma_kverbs: P passed, F failed" (", S skipped" when some were). Init
 * returns 0 whatever the checks found (tests/kverbs-loopback-*.sh parse the log) and -EINVAL
 * if the device does not exist. Every object is gone when init returns.
 *
 * Topology, all on one device and its RoCE v2 GID of the VM's IPv4 address (loopback):
 *   main RC pair   qa (IB_POLL_DIRECT CQ)  <-> qb (IB_POLL_SOFTIRQ CQ)
 *   small RC pair  sa (ib_create_cq CQ with a comp_handler) <-> sb (IB_POLL_DIRECT CQ)
 *   UD pair        ua, ub (one IB_POLL_DIRECT CQ), an AH made in atomic context
 * Every WR carries a wr_cqe (struct kv_tag) whose done callback copies the completion into the
 * CQ's ring, so ib_process_cq_direct, the softirq poller and ib_drain_qp all work; the raw
 * CQ and the atomic-context check use ib_poll_cq directly.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/scatterlist.h>
#include <linux/delay.h>
#include <linux/wait.h>
#include <linux/jiffies.h>
#include <linux/ktime.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/if_ether.h>
#include <net/ipv6.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>

#define KV "ferrdma_kverbs: "

static char *dev = "ferrdma0";
module_param(dev, charp, 0444);
MODULE_PARM_DESC(dev, "name of the RDMA device to test (default ferrdma0)");

/*
 * The KASAN lane's sabotage check (guest/kverbs.sh: kasan_plant_check): load with plant_uaf=1 and, instead of
 * the tests, the module reads a freed object once. A KASAN kernel must report it.
 */
static bool plant_uaf;
module_param(plant_uaf, bool, 0444);
MODULE_PARM_DESC(plant_uaf, "read a freed object once instead of testing (KASAN lane self-check)");

/*
 * Churn mode (tests/fault-inject-ferrdma.sh): instead of the checks, create and destroy the
 * objects a kernel ULP uses (PD, CQ, RC and UD QPs, AH, fast-registration MR), round after
 * round, going on after a failed create. The checks stop at their first failed setup step, so
 * under the driver's fault injection they reach only the early steps of a create; churn
 * reaches the late ones too. Ends with one line:
 *     ferrdma_kverbs: churn: R rounds, C created, E refused with ENOMEM, O other errors
 */
static unsigned int churn;
module_param(churn, uint, 0444);
MODULE_PARM_DESC(churn, "create/destroy rounds instead of the checks (fault-injection test)");

#define KV_BUF		(128 * 1024)	/* each of the two mapped data buffers */
#define KV_RING		512		/* completions a struct kv_cq can hold */
#define KV_NTAGS	1024
static unsigned int timeout_ms = 10000;	/* TCG is slow */
module_param(timeout_ms, uint, 0444);
MODULE_PARM_DESC(timeout_ms, "how long to wait for a completion (default 10000)");
#define KV_TIMEOUT_MS	timeout_ms
#define KV_QUIET_MS	300		/* how long "no further completion" waits */
#define KV_QKEY		0x11110000
#define KV_BAD_LKEY	0x12345600
#define KV_SKIP		1
#define KV_RAW_CQE	1024
#define KV_FR_PAGES	64		/* pages of the fast-registration MR */

struct kv_cq {
	struct ib_cq *cq;
	const char *name;
	bool direct;		/* IB_POLL_DIRECT: ib_process_cq_direct feeds the ring */
	bool raw;		/* ib_create_cq: ib_poll_cq, no ring */
	spinlock_t lock;
	unsigned int head, tail;
	bool overflow;
	wait_queue_head_t wq;
	atomic_t events;	/* raw: completion events */
	struct ib_wc ring[KV_RING];
};

struct kv_tag {
	struct ib_cqe cqe;
	u32 id;
};

struct kv_qp {
	struct ib_qp *qp;
	struct kv_cq *cq;	/* send and receive CQ */
	struct ib_qp_cap cap;
};

struct kv {
	struct ib_device *ib;
	u32 port;
	int gid_index;
	union ib_gid gid;
	u8 mac[ETH_ALEN];
	enum ib_mtu mtu;
	struct ib_pd *pd;
	bool global_rkey;	/* pd->unsafe_global_rkey is usable */
	int pd_rkey_err;
	u32 lkey;
	/* A fast-registration MR (IB_DEVICE_MEM_MGT_EXTENSIONS), valid after an IB_WR_REG_MR. */
	struct ib_mr *fr;
	bool fr_valid;

	/* Two kmalloc buffers mapped with ib_dma_map_single. */
	u8 *src, *dst;
	u64 src_dma, dst_dma;
	/* A dma_alloc_coherent buffer (when the device does real DMA), for UD receives. */
	u8 *coh;
	dma_addr_t coh_dma;
	bool coh_is_coherent;
	size_t coh_len;

	struct kv_cq *cq_direct, *cq_soft, *cq_raw, *cq_direct2, *cq_ud;
	struct kv_qp qa, qb, sa, sb, ua, ub;
	struct ib_ah *ah;
};

static struct kv_tag kv_tags[KV_NTAGS];
static u32 kv_next_tag;
static int kv_n, kv_passed, kv_failed, kv_skipped;
static char kv_why[320];
static bool kv_abort;
static bool kv_is_rxe;

/* A client: the device is found through add(); remove() waits for a running test. */
static DEFINE_MUTEX(kv_lock);
static struct ib_device *kv_found;

#define FAIL(fmt, ...) ({ snprintf(kv_why, sizeof(kv_why), fmt, ##__VA_ARGS__); -EIO; })
#define SKIP(fmt, ...) ({ snprintf(kv_why, sizeof(kv_why), fmt, ##__VA_ARGS__); KV_SKIP; })

/* ---- completions ---------------------------------------------------------------------- */

static void kv_push(struct kv_cq *k, const struct ib_wc *wc)
{
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	if (k->head - k->tail < KV_RING)
		k->ring[k->head++ % KV_RING] = *wc;
	else
		k->overflow = true;
	spin_unlock_irqrestore(&k->lock, flags);
	wake_up(&k->wq);
}

static bool kv_pop(struct kv_cq *k, struct ib_wc *wc)
{
	unsigned long flags;
	bool got = false;

	spin_lock_irqsave(&k->lock, flags);
	if (k->head != k->tail) {
		*wc = k->ring[k->tail++ % KV_RING];
		got = true;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	return got;
}

static bool kv_pending(struct kv_cq *k)
{
	unsigned long flags;
	bool p;

	spin_lock_irqsave(&k->lock, flags);
	p = k->head != k->tail;
	spin_unlock_irqrestore(&k->lock, flags);
	return p;
}

static void kv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	kv_push(cq->cq_context, wc);
}

static void kv_comp_handler(struct ib_cq *cq, void *ctx)
{
	struct kv_cq *k = ctx;

	atomic_inc(&k->events);
	wake_up(&k->wq);
}

static struct ib_cqe *kv_newtag(u32 *id)
{
	struct kv_tag *t = &kv_tags[kv_next_tag++ % KV_NTAGS];

	*id = t->id;
	return &t->cqe;
}

static u32 kv_wc_tag(const struct ib_wc *wc)
{
	if (!wc->wr_cqe)
		return U32_MAX;
	return container_of(wc->wr_cqe, struct kv_tag, cqe)->id;
}

/* Waits up to @ms for the next completion of @k; 0 or -ETIMEDOUT. */
static int kv_wait_ms(struct kv_cq *k, struct ib_wc *wc, unsigned int ms)
{
	unsigned long end = jiffies + msecs_to_jiffies(ms);

	for (;;) {
		if (kv_pop(k, wc))
			return 0;
		if (k->raw) {
			int n = ib_poll_cq(k->cq, 1, wc);

			if (n == 1)
				return 0;
			if (n < 0)
				return n;
		} else if (k->direct) {
			ib_process_cq_direct(k->cq, 16);
			if (kv_pop(k, wc))
				return 0;
		} else {
			wait_event_timeout(k->wq, kv_pending(k), HZ / 50);
		}
		if (time_after(jiffies, end))
			return -ETIMEDOUT;
		if (k->raw || k->direct)
			usleep_range(200, 500);
	}
}

static int kv_wait(struct kv_cq *k, struct ib_wc *wc)
{
	return kv_wait_ms(k, wc, KV_TIMEOUT_MS);
}

/* 0 if @k yields no completion for KV_QUIET_MS; else describes the stray one. */
static int kv_expect_quiet(struct kv_cq *k, const char *what)
{
	struct ib_wc wc;

	if (kv_wait_ms(k, &wc, KV_QUIET_MS))
		return 0;
	return FAIL("unexpected completion on %s CQ %s: status %s (%d) opcode %d tag %u",
		    k->name, what, ib_wc_status_msg(wc.status), wc.status, wc.opcode,
		    kv_wc_tag(&wc));
}

/*
 * Checks completion @wc: status success, @opcode, tag @tag, @qp and (when @len >= 0)
 * byte_len. On failure fills kv_why and returns an error. kv_expect waits for it first.
 */
static int kv_check_wc(const struct ib_wc *wc, enum ib_wc_opcode opcode, u32 tag,
		       struct ib_qp *qp, int len, const char *what)
{
	if (wc->status != IB_WC_SUCCESS)
		return FAIL("%s: status %s (%d), vendor_err 0x%x, opcode %d", what,
			    ib_wc_status_msg(wc->status), wc->status, wc->vendor_err, wc->opcode);
	if (wc->opcode != opcode)
		return FAIL("%s: opcode %d, expected %d", what, wc->opcode, opcode);
	if (kv_wc_tag(wc) != tag)
		return FAIL("%s: completion of tag %u, expected %u", what, kv_wc_tag(wc), tag);
	if (wc->qp != qp)
		return FAIL("%s: wc.qp is QP %u, expected %u", what,
			    wc->qp ? wc->qp->qp_num : 0, qp->qp_num);
	if (len >= 0 && wc->byte_len != len)
		return FAIL("%s: byte_len %u, expected %d", what, wc->byte_len, len);
	return 0;
}

static int kv_expect(struct kv_cq *k, struct ib_wc *wc, enum ib_wc_opcode opcode, u32 tag,
		     struct ib_qp *qp, int len, const char *what)
{
	int r = kv_wait(k, wc);

	if (r)
		return FAIL("%s: no completion on %s CQ within %d ms (%d)", what, k->name,
			    KV_TIMEOUT_MS, r);
	return kv_check_wc(wc, opcode, tag, qp, len, what);
}

static struct kv_cq *kv_cq_alloc(struct kv *t, const char *name, int nr, enum ib_poll_context ctx,
				 bool raw, int *err)
{
	struct kv_cq *k = kzalloc(sizeof(*k), GFP_KERNEL);
	struct ib_cq *cq;

	if (!k) {
		*err = -ENOMEM;
		return NULL;
	}
	k->name = name;
	spin_lock_init(&k->lock);
	init_waitqueue_head(&k->wq);
	atomic_set(&k->events, 0);
	if (raw) {
		struct ib_cq_init_attr attr = { .cqe = nr, .comp_vector = 0 };

		cq = ib_create_cq(t->ib, kv_comp_handler, NULL, k, &attr);
		k->raw = true;
	} else {
		cq = ib_alloc_cq(t->ib, k, nr, 0, ctx);
		k->direct = ctx == IB_POLL_DIRECT;
	}
	if (IS_ERR(cq)) {
		*err = PTR_ERR(cq);
		kfree(k);
		return NULL;
	}
	k->cq = cq;
	return k;
}

static void kv_cq_free(struct kv_cq *k)
{
	if (!k)
		return;
	if (k->raw)
		ib_destroy_cq(k->cq);
	else
		ib_free_cq(k->cq);
	kfree(k);
}

/* ---- QPs ------------------------------------------------------------------------------- */

static int kv_qp_create(struct kv *t, struct kv_qp *q, enum ib_qp_type type, struct kv_cq *cq,
			u32 max_send_wr, u32 max_recv_wr, u32 max_send_sge, u32 inline_len)
{
	struct ib_qp_init_attr attr = {
		.send_cq = cq->cq,
		.recv_cq = cq->cq,
		.qp_type = type,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = {
			.max_send_wr = max_send_wr,
			.max_recv_wr = max_recv_wr,
			.max_send_sge = max_send_sge,
			.max_recv_sge = 4,
			.max_inline_data = inline_len,
		},
	};
	struct ib_qp *qp = ib_create_qp(t->pd, &attr);

	if (IS_ERR(qp))
		return PTR_ERR(qp);
	q->qp = qp;
	q->cq = cq;
	q->cap = attr.cap;
	return 0;
}

static void kv_qp_destroy(struct kv_qp *q)
{
	if (q->qp)
		ib_destroy_qp(q->qp);
	q->qp = NULL;
}

static int kv_qp_init(struct kv *t, struct ib_qp *qp, bool ud)
{
	struct ib_qp_attr a = {
		.qp_state = IB_QPS_INIT,
		.pkey_index = 0,
		.port_num = t->port,
	};
	int mask = IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT;

	if (ud) {
		a.qkey = KV_QKEY;
		mask |= IB_QP_QKEY;
	} else {
		a.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				    IB_ACCESS_REMOTE_READ;
		mask |= IB_QP_ACCESS_FLAGS;
	}
	return ib_modify_qp(qp, &a, mask);
}

static void kv_ah_attr(struct kv *t, struct rdma_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->type = rdma_ah_find_type(t->ib, t->port);
	rdma_ah_set_port_num(ah, t->port);
	rdma_ah_set_sl(ah, 0);
	rdma_ah_set_grh(ah, &t->gid, 0, t->gid_index, 64, 0);
	/* ib_modify_qp resolves no MAC for kernel callers: ours, as the path loops back. */
	memcpy(ah->roce.dmac, t->mac, ETH_ALEN);
}

/* RESET -> INIT -> RTR -> RTS of an RC QP towards @dqpn, through our own GID. */
static int kv_rc_connect(struct kv *t, struct ib_qp *qp, u32 dqpn, u32 psn, u32 dpsn)
{
	struct ib_qp_attr a;
	int r;

	r = kv_qp_init(t, qp, false);
	if (r)
		return FAIL("QP %u to INIT: %d", qp->qp_num, r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = t->mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = dpsn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	kv_ah_attr(t, &a.ah_attr);
	r = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN |
			 IB_QP_RQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (r)
		return FAIL("QP %u to RTR: %d", qp->qp_num, r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	r = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
			 IB_QP_SQ_PSN | IB_QP_MAX_QP_RD_ATOMIC);
	if (r)
		return FAIL("QP %u to RTS: %d", qp->qp_num, r);
	return 0;
}

static int kv_ud_up(struct kv *t, struct ib_qp *qp)
{
	struct ib_qp_attr a;
	int r;

	r = kv_qp_init(t, qp, true);
	if (r)
		return FAIL("UD QP %u to INIT: %d", qp->qp_num, r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	r = ib_modify_qp(qp, &a, IB_QP_STATE);
	if (r)
		return FAIL("UD QP %u to RTR: %d", qp->qp_num, r);
	a.qp_state = IB_QPS_RTS;
	a.sq_psn = 0x123;
	r = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_SQ_PSN);
	if (r)
		return FAIL("UD QP %u to RTS: %d", qp->qp_num, r);
	return 0;
}

static void kv_qp_dump(const char *name, struct ib_qp *qp)
{
	struct ib_qp_attr a = {};
	struct ib_qp_init_attr ia = {};
	int r = ib_query_qp(qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN |
			    IB_QP_RQ_PSN | IB_QP_SQ_PSN, &ia);

	if (r) {
		pr_info(KV "# %s QP %u: ib_query_qp %d\n", name, qp->qp_num, r);
		return;
	}
	pr_info(KV "# %s QP %u: state %d mtu %d dest %u sq_psn 0x%x rq_psn 0x%x dmac %pM dgid %pI6 sgid_index %u hop %u\n",
		name, qp->qp_num, a.qp_state, a.path_mtu, a.dest_qp_num, a.sq_psn, a.rq_psn,
		a.ah_attr.roce.dmac, rdma_ah_read_grh(&a.ah_attr)->dgid.raw,
		rdma_ah_read_grh(&a.ah_attr)->sgid_index, rdma_ah_read_grh(&a.ah_attr)->hop_limit);
	rdma_destroy_ah_attr(&a.ah_attr);
}

static int kv_qp_state(struct ib_qp *qp)
{
	struct ib_qp_attr a;
	struct ib_qp_init_attr ia;
	int r = ib_query_qp(qp, &a, IB_QP_STATE, &ia);

	return r ? r : a.qp_state;
}

/* ---- data ------------------------------------------------------------------------------ */

static void kv_fill(u8 *p, size_t len, u32 seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (u8)(seed * 31 + i * 7 + (i >> 8) * 13 + 1);
}

static void kv_to_dev(struct kv *t)
{
	ib_dma_sync_single_for_device(t->ib, t->src_dma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(t->ib, t->dst_dma, KV_BUF, DMA_BIDIRECTIONAL);
}

static void kv_to_cpu(struct kv *t)
{
	ib_dma_sync_single_for_cpu(t->ib, t->src_dma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_cpu(t->ib, t->dst_dma, KV_BUF, DMA_BIDIRECTIONAL);
}

/* Fresh pattern in src (seed), poison in dst; both handed to the device. */
static void kv_prep(struct kv *t, u32 seed)
{
	kv_to_cpu(t);
	kv_fill(t->src, KV_BUF, seed);
	memset(t->dst, 0xa5, KV_BUF);
	kv_to_dev(t);
}

/* Compares @len bytes: dst+doff against src+soff; describes the first difference. */
static int kv_cmp(struct kv *t, size_t doff, size_t soff, size_t len, const char *what)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (t->dst[doff + i] != t->src[soff + i])
			return FAIL("%s: data differs at byte %zu of %zu: 0x%02x, expected 0x%02x",
				    what, i, len, t->dst[doff + i], t->src[soff + i]);
	return 0;
}

static int kv_untouched(struct kv *t, size_t off, size_t len, const char *what)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (t->dst[off + i] != 0xa5)
			return FAIL("%s: byte %zu was written (0x%02x)", what, off + i, t->dst[off + i]);
	return 0;
}

static struct ib_sge kv_sge(struct kv *t, bool src, size_t off, u32 len)
{
	return (struct ib_sge){
		.addr = (src ? t->src_dma : t->dst_dma) + off,
		.length = len,
		.lkey = t->lkey,
	};
}

static int kv_post_recv(struct ib_qp *qp, struct ib_sge *sge, int nsge, u32 *tag)
{
	struct ib_recv_wr wr = { .sg_list = sge, .num_sge = nsge };
	const struct ib_recv_wr *bad = NULL;

	wr.wr_cqe = kv_newtag(tag);
	return ib_post_recv(qp, &wr, &bad);
}

static int kv_post_send(struct ib_qp *qp, enum ib_wr_opcode op, struct ib_sge *sge, int nsge,
			int flags, __be32 imm, u64 raddr, u32 rkey, u32 *tag)
{
	struct ib_rdma_wr wr = {
		.wr = {
			.opcode = op,
			.sg_list = sge,
			.num_sge = nsge,
			.send_flags = flags,
			.ex.imm_data = imm,
		},
		.remote_addr = raddr,
		.rkey = rkey,
	};
	const struct ib_send_wr *bad = NULL;

	wr.wr.wr_cqe = kv_newtag(tag);
	return ib_post_send(qp, &wr.wr, &bad);
}

/*
 * A two-sided transfer: @rq posts a receive of @nr SGEs (dst), @sq sends @ns SGEs (src);
 * checks both completions and the data (the gather and scatter lists are each contiguous in
 * the payload order).
 */
static int kv_send_recv(struct kv *t, struct kv_qp *sq, struct kv_qp *rq, struct ib_sge *ss,
			int ns, struct ib_sge *rs, int nr, bool imm, u32 seed)
{
	struct ib_wc wc;
	u32 st, rt, len = 0;
	size_t got = 0;
	int i, r;
	__be32 immv = cpu_to_be32(0x1234abcd ^ seed);

	for (i = 0; i < ns; i++)
		len += ss[i].length;
	kv_prep(t, seed);
	r = kv_post_recv(rq->qp, rs, nr, &rt);
	if (r)
		return FAIL("ib_post_recv: %d", r);
	r = kv_post_send(sq->qp, imm ? IB_WR_SEND_WITH_IMM : IB_WR_SEND, ss, ns, IB_SEND_SIGNALED,
			 immv, 0, 0, &st);
	if (r)
		return FAIL("ib_post_send: %d", r);
	r = kv_expect(sq->cq, &wc, IB_WC_SEND, st, sq->qp, -1, "send completion");
	if (r)
		return r;
	r = kv_expect(rq->cq, &wc, IB_WC_RECV, rt, rq->qp, len, "receive completion");
	if (r)
		return r;
	if (imm) {
		if (!(wc.wc_flags & IB_WC_WITH_IMM))
			return FAIL("receive: no IB_WC_WITH_IMM in wc_flags 0x%x", wc.wc_flags);
		if (wc.ex.imm_data != immv)
			return FAIL("receive: imm_data 0x%08x, expected 0x%08x",
				    be32_to_cpu(wc.ex.imm_data), be32_to_cpu(immv));
	} else if (wc.wc_flags & IB_WC_WITH_IMM) {
		return FAIL("receive: IB_WC_WITH_IMM set without immediate data");
	}
	kv_to_cpu(t);
	/* Walk both lists in payload order. */
	{
		int si = 0, ri = 0;
		u32 so = 0, ro = 0;

		while (got < len) {
			u32 n = min(ss[si].length - so, rs[ri].length - ro);

			r = kv_cmp(t, rs[ri].addr - t->dst_dma + ro, ss[si].addr - t->src_dma + so,
				   n, "received data");
			if (r)
				return r;
			got += n;
			so += n;
			ro += n;
			if (so == ss[si].length) {
				si++;
				so = 0;
			}
			if (ro == rs[ri].length) {
				ri++;
				ro = 0;
			}
		}
	}
	return 0;
}

/* ---- the checks ------------------------------------------------------------------------ */

static int check_send_1b(struct kv *t)
{
	struct ib_sge s = kv_sge(t, true, 5, 1), r = kv_sge(t, false, 100, 4096);
	int ret = kv_send_recv(t, &t->qa, &t->qb, &s, 1, &r, 1, false, 1);

	if (ret) {
		kv_qp_dump("qa", t->qa.qp);
		kv_qp_dump("qb", t->qb.qp);
	}
	return ret;
}

static int check_send_4k_reverse(struct kv *t)
{
	struct ib_sge s = kv_sge(t, true, 0, 4096), r = kv_sge(t, false, 4096, 4096);

	/* qb (softirq CQ) sends, qa (direct CQ) receives. */
	return kv_send_recv(t, &t->qb, &t->qa, &s, 1, &r, 1, false, 2);
}

static int check_send_64k(struct kv *t)
{
	struct ib_sge s = kv_sge(t, true, 0, 65536), r = kv_sge(t, false, 0, 65536);

	return kv_send_recv(t, &t->qa, &t->qb, &s, 1, &r, 1, false, 3);
}

static int check_send_64k_3sge(struct kv *t)
{
	struct ib_sge s[3] = {
		kv_sge(t, true, 10, 1000),
		kv_sge(t, true, 8192, 30000),
		kv_sge(t, true, 50000, 65536 - 31000),
	};
	struct ib_sge r[3] = {
		kv_sge(t, false, 3, 40000),
		kv_sge(t, false, 45000, 20000),
		kv_sge(t, false, 70000, 5536),
	};

	return kv_send_recv(t, &t->qa, &t->qb, s, 3, r, 3, false, 4);
}

static int check_send_13sge(struct kv *t)
{
	struct ib_sge s[13], r = kv_sge(t, false, 0, 8192);
	int i;

	if (t->qa.cap.max_send_sge < 13)
		return FAIL("QP has max_send_sge %u < 13", t->qa.cap.max_send_sge);
	for (i = 0; i < 13; i++)
		s[i] = kv_sge(t, true, i * 1000 + 3 * i, 100 + i * 37);
	return kv_send_recv(t, &t->qb, &t->qa, s, 13, &r, 1, false, 5);
}

static int check_send_with_imm(struct kv *t)
{
	struct ib_sge s = kv_sge(t, true, 0, 512), r = kv_sge(t, false, 0, 1024);

	return kv_send_recv(t, &t->qa, &t->qb, &s, 1, &r, 1, true, 6);
}

/* Posts @wr signaled on @q and waits for its successful completion of @opcode. */
static int kv_post_wait(struct kv_qp *q, struct ib_send_wr *wr, enum ib_wc_opcode opcode,
			const char *what)
{
	const struct ib_send_wr *bad = NULL;
	struct ib_wc wc;
	u32 tag;
	int r;

	wr->wr_cqe = kv_newtag(&tag);
	wr->send_flags |= IB_SEND_SIGNALED;
	r = ib_post_send(q->qp, wr, &bad);
	if (r)
		return FAIL("%s: ib_post_send: %d", what, r);
	return kv_expect(q->cq, &wc, opcode, tag, q->qp, -1, what);
}

/* IB_WR_LOCAL_INV of the fast-registration MR's key, on @q. */
static int kv_local_inv(struct kv *t, struct kv_qp *q)
{
	struct ib_send_wr wr = { .opcode = IB_WR_LOCAL_INV, .ex.invalidate_rkey = t->fr->rkey };
	int r = kv_post_wait(q, &wr, IB_WC_LOCAL_INV, "local invalidate");

	if (!r)
		t->fr_valid = false;
	return r;
}

/*
 * Maps @len bytes at DMA address @dma into the fast-registration MR with ib_map_mr_sg, moves
 * its key to the next key byte (ib_update_fast_reg_key) and fills @wr with the IB_WR_REG_MR
 * that registers them with @access under that key; the caller posts it.
 */
static int kv_reg_wr(struct kv *t, struct ib_reg_wr *wr, u64 dma, u32 len, int access)
{
	struct scatterlist sg;
	int n;

	sg_init_table(&sg, 1);
	sg.length = len;
	sg_dma_address(&sg) = dma;
	sg_dma_len(&sg) = len;
	n = ib_map_mr_sg(t->fr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1)
		return FAIL("ib_map_mr_sg of %u bytes: %d", len, n);
	if (t->fr->iova != dma || t->fr->length != len)
		return FAIL("ib_map_mr_sg: iova 0x%llx length %llu, expected 0x%llx %u",
			    t->fr->iova, t->fr->length, dma, len);
	ib_update_fast_reg_key(t->fr, ib_inc_rkey(t->fr->rkey));
	*wr = (struct ib_reg_wr){};
	wr->wr.opcode = IB_WR_REG_MR;
	wr->mr = t->fr;
	wr->key = t->fr->rkey;
	wr->access = access;
	return 0;
}

/*
 * Registers @len bytes at DMA address @dma in the fast-registration MR with @access, the way
 * a ULP does: LOCAL_INV of the previous registration, ib_map_mr_sg, a new key byte with
 * ib_update_fast_reg_key, IB_WR_REG_MR posted on @q (a QP of the MR's PD). The rkey is then
 * t->fr->rkey and the remote address of the first byte t->fr->iova (= @dma).
 */
static int kv_fastreg(struct kv *t, struct kv_qp *q, u64 dma, u32 len, int access)
{
	struct ib_reg_wr wr;
	int r;

	if (t->fr_valid) {
		r = kv_local_inv(t, q);
		if (r)
			return r;
	}
	r = kv_reg_wr(t, &wr, dma, len, access);
	if (r)
		return r;
	r = kv_post_wait(q, &wr.wr, IB_WC_REG_MR, "fast registration (IB_WR_REG_MR)");
	if (!r)
		t->fr_valid = true;
	return r;
}

/*
 * Posts a signaled RDMA @op (IB_WR_RDMA_WRITE or IB_WR_RDMA_READ) of the @nsge SGEs @s on @q to
 * @raddr under @rkey and waits for its successful completion on @q's CQ.
 */
static int kv_rdma(struct kv_qp *q, enum ib_wr_opcode op, struct ib_sge *s, int nsge, u64 raddr,
		   u32 rkey, const char *what)
{
	enum ib_wc_opcode wc_op = op == IB_WR_RDMA_READ ? IB_WC_RDMA_READ : IB_WC_RDMA_WRITE;
	struct ib_wc wc;
	u32 tag;
	int r = kv_post_send(q->qp, op, s, nsge, IB_SEND_SIGNALED, 0, raddr, rkey, &tag);

	if (r)
		return FAIL("%s: ib_post_send: %d", what, r);
	return kv_expect(q->cq, &wc, wc_op, tag, q->qp, -1, what);
}

/*
 * A remote key for @len bytes at DMA address @dma, owned by @q's side: the PD's unsafe global
 * rkey if the device gives one, else a fast registration; SKIP when there is neither.
 */
static int kv_need_rkey(struct kv *t, struct kv_qp *q, u64 dma, u32 len, int access, u32 *rkey)
{
	int r;

	if (t->global_rkey) {
		*rkey = t->pd->unsafe_global_rkey;
		return 0;
	}
	if (!t->fr)
		return SKIP("no remote key for kernel memory: ib_alloc_pd(IB_PD_UNSAFE_GLOBAL_RKEY) = %d and the device has no fast registration",
			    t->pd_rkey_err);
	r = kv_fastreg(t, q, dma, len, access);
	*rkey = t->fr->rkey;
	return r;
}

static int check_rdma_write(struct kv *t)
{
	struct ib_sge s[2] = { kv_sge(t, true, 100, 5000), kv_sge(t, true, 20000, 3192) };
	u32 rkey;
	int r = kv_need_rkey(t, &t->qb, t->dst_dma + 1000, 8192,
			     IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE, &rkey);

	if (r)
		return r;
	kv_prep(t, 7);
	r = kv_rdma(&t->qa, IB_WR_RDMA_WRITE, s, 2, t->dst_dma + 1000, rkey, "write completion");
	if (r)
		return r;
	r = kv_expect_quiet(t->qb.cq, "(an RDMA WRITE consumes no receive)");
	if (r)
		return r;
	kv_to_cpu(t);
	r = kv_cmp(t, 1000, 100, 5000, "written data");
	if (!r)
		r = kv_cmp(t, 6000, 20000, 3192, "written data");
	if (!r)
		r = kv_untouched(t, 9192, 64, "after the written range");
	if (!r)
		r = kv_untouched(t, 900, 100, "before the written range");
	return r;
}

static int check_rdma_write_with_imm(struct kv *t)
{
	struct ib_sge s = kv_sge(t, true, 0, 12288), rs = kv_sge(t, false, 100000, 16);
	__be32 imm = cpu_to_be32(0xfeedf00d);
	struct ib_wc wc;
	u32 st, rt, rkey;
	int r = kv_need_rkey(t, &t->qb, t->dst_dma + 4096, 12288,
			     IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE, &rkey);

	if (r)
		return r;
	kv_prep(t, 8);
	r = kv_post_recv(t->qb.qp, &rs, 1, &rt);
	if (r)
		return FAIL("ib_post_recv: %d", r);
	r = kv_post_send(t->qa.qp, IB_WR_RDMA_WRITE_WITH_IMM, &s, 1, IB_SEND_SIGNALED, imm,
			 t->dst_dma + 4096, rkey, &st);
	if (r)
		return FAIL("ib_post_send: %d", r);
	r = kv_expect(t->qa.cq, &wc, IB_WC_RDMA_WRITE, st, t->qa.qp, -1, "write completion");
	if (r)
		return r;
	r = kv_expect(t->qb.cq, &wc, IB_WC_RECV_RDMA_WITH_IMM, rt, t->qb.qp, 12288,
		      "receive completion");
	if (r)
		return r;
	if (!(wc.wc_flags & IB_WC_WITH_IMM) || wc.ex.imm_data != imm)
		return FAIL("receive: wc_flags 0x%x imm_data 0x%08x, expected IB_WC_WITH_IMM and 0x%08x",
			    wc.wc_flags, be32_to_cpu(wc.ex.imm_data), be32_to_cpu(imm));
	kv_to_cpu(t);
	r = kv_cmp(t, 4096, 0, 12288, "written data");
	if (!r)
		r = kv_untouched(t, 100000, 16, "the receive buffer of a WRITE_WITH_IMM");
	return r;
}

static int check_rdma_read(struct kv *t)
{
	struct ib_sge s[2] = { kv_sge(t, false, 7, 10000), kv_sge(t, false, 20000, 6384) };
	u32 rkey;
	int r = kv_need_rkey(t, &t->qa, t->src_dma + 333, 16384, IB_ACCESS_REMOTE_READ, &rkey);

	if (r)
		return r;
	kv_prep(t, 9);
	/* qb reads 16 KiB of src (the "remote" buffer) into two pieces of dst. */
	r = kv_rdma(&t->qb, IB_WR_RDMA_READ, s, 2, t->src_dma + 333, rkey, "read completion");
	if (r)
		return r;
	r = kv_expect_quiet(t->qa.cq, "(an RDMA READ's responder)");
	if (r)
		return r;
	kv_to_cpu(t);
	r = kv_cmp(t, 7, 333, 10000, "read data");
	if (!r)
		r = kv_cmp(t, 20000, 10333, 6384, "read data");
	return r;
}

static int check_inline_send(struct kv *t)
{
	struct ib_sge r = kv_sge(t, false, 0, 256), s;
	struct ib_wc wc;
	u8 *buf, expect[64];
	u32 st, rt;
	int ret, i;

	if (t->qa.cap.max_inline_data < 64)
		return FAIL("QP has max_inline_data %u < 64", t->qa.cap.max_inline_data);
	buf = kmalloc(64, GFP_KERNEL);
	if (!buf)
		return FAIL("kmalloc failed");
	for (i = 0; i < 64; i++)
		expect[i] = buf[i] = 0x40 + i;
	kv_prep(t, 10);
	ret = kv_post_recv(t->qb.qp, &r, 1, &rt);
	if (ret) {
		kfree(buf);
		return FAIL("ib_post_recv: %d", ret);
	}
	/* A kernel virtual address, no lkey: the payload is copied at post time. */
	s = (struct ib_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = t->lkey };
	ret = kv_post_send(t->qa.qp, IB_WR_SEND, &s, 1, IB_SEND_SIGNALED | IB_SEND_INLINE, 0, 0, 0,
			   &st);
	/* The buffer is the caller's again once the post returned. */
	memset(buf, 0xee, 64);
	kfree(buf);
	if (ret)
		return FAIL("ib_post_send(IB_SEND_INLINE): %d", ret);
	ret = kv_expect(t->qa.cq, &wc, IB_WC_SEND, st, t->qa.qp, -1, "send completion");
	if (!ret)
		ret = kv_expect(t->qb.cq, &wc, IB_WC_RECV, rt, t->qb.qp, 64, "receive completion");
	if (ret)
		return ret;
	kv_to_cpu(t);
	for (i = 0; i < 64; i++)
		if (t->dst[i] != expect[i])
			return FAIL("inline data differs at byte %d: 0x%02x, expected 0x%02x", i,
				    t->dst[i], expect[i]);
	return kv_untouched(t, 64, 64, "after the inline payload");
}

static int check_unsignaled(struct kv *t)
{
	struct ib_sge s[5], r[5];
	struct ib_wc wc;
	u32 st[5], rt[5];
	int i, ret;

	kv_prep(t, 11);
	for (i = 0; i < 5; i++) {
		s[i] = kv_sge(t, true, i * 512, 100 + i);
		r[i] = kv_sge(t, false, i * 512, 512);
		ret = kv_post_recv(t->qb.qp, &r[i], 1, &rt[i]);
		if (ret)
			return FAIL("ib_post_recv: %d", ret);
	}
	for (i = 0; i < 5; i++) {
		ret = kv_post_send(t->qa.qp, IB_WR_SEND, &s[i], 1, i == 4 ? IB_SEND_SIGNALED : 0,
				   0, 0, 0, &st[i]);
		if (ret)
			return FAIL("ib_post_send %d: %d", i, ret);
	}
	for (i = 0; i < 5; i++) {
		ret = kv_expect(t->qb.cq, &wc, IB_WC_RECV, rt[i], t->qb.qp, 100 + i, "receive");
		if (ret)
			return ret;
	}
	ret = kv_expect(t->qa.cq, &wc, IB_WC_SEND, st[4], t->qa.qp, -1,
			"the one signaled send's completion");
	if (ret)
		return ret;
	ret = kv_expect_quiet(t->qa.cq, "after 4 unsignaled and 1 signaled send");
	if (ret)
		return ret;
	kv_to_cpu(t);
	for (i = 0; i < 5; i++) {
		ret = kv_cmp(t, i * 512, i * 512, 100 + i, "received data");
		if (ret)
			return ret;
	}
	return 0;
}

static int check_chain_32(struct kv *t)
{
	struct ib_send_wr *sw;
	struct ib_recv_wr *rw;
	struct ib_sge *ss, *rs;
	const struct ib_send_wr *sbad = NULL;
	const struct ib_recv_wr *rbad = NULL;
	struct ib_wc wc;
	u32 st[32], rt[32];
	int i, ret;

	sw = kcalloc(32, sizeof(*sw), GFP_KERNEL);
	rw = kcalloc(32, sizeof(*rw), GFP_KERNEL);
	ss = kcalloc(32, sizeof(*ss), GFP_KERNEL);
	rs = kcalloc(32, sizeof(*rs), GFP_KERNEL);
	if (!sw || !rw || !ss || !rs) {
		ret = FAIL("kcalloc failed");
		goto out;
	}
	kv_prep(t, 12);
	for (i = 0; i < 32; i++) {
		ss[i] = kv_sge(t, true, i * 2048, 1024 + i);
		rs[i] = kv_sge(t, false, i * 2048, 2048);
		rw[i].sg_list = &rs[i];
		rw[i].num_sge = 1;
		rw[i].wr_cqe = kv_newtag(&rt[i]);
		rw[i].next = i < 31 ? &rw[i + 1] : NULL;
		sw[i].sg_list = &ss[i];
		sw[i].num_sge = 1;
		sw[i].opcode = IB_WR_SEND;
		sw[i].send_flags = IB_SEND_SIGNALED;
		sw[i].wr_cqe = kv_newtag(&st[i]);
		sw[i].next = i < 31 ? &sw[i + 1] : NULL;
	}
	ret = ib_post_recv(t->qb.qp, rw, &rbad);
	if (ret) {
		ret = FAIL("ib_post_recv of 32: %d (bad_wr #%ld)", ret, rbad ? (long)(rbad - rw) : -1L);
		goto out;
	}
	ret = ib_post_send(t->qa.qp, sw, &sbad);
	if (ret) {
		ret = FAIL("ib_post_send of 32: %d (bad_wr #%ld)", ret, sbad ? (long)(sbad - sw) : -1L);
		goto out;
	}
	for (i = 0; i < 32; i++) {
		ret = kv_expect(t->qa.cq, &wc, IB_WC_SEND, st[i], t->qa.qp, -1, "send completion");
		if (ret)
			goto out;
	}
	for (i = 0; i < 32; i++) {
		ret = kv_expect(t->qb.cq, &wc, IB_WC_RECV, rt[i], t->qb.qp, 1024 + i, "receive");
		if (ret)
			goto out;
	}
	kv_to_cpu(t);
	for (i = 0; i < 32 && !ret; i++)
		ret = kv_cmp(t, i * 2048, i * 2048, 1024 + i, "received data");
out:
	kfree(sw);
	kfree(rw);
	kfree(ss);
	kfree(rs);
	return ret;
}

/*
 * Posts and polls with a spinlock held and interrupts off: one direction with the send
 * completion polled (ib_poll_cq) under the lock, then the other with the receive polled
 * under it.
 */
static int kv_poll_locked(spinlock_t *lock, struct kv_cq *k, struct ib_wc *wc)
{
	unsigned long end = jiffies + msecs_to_jiffies(KV_TIMEOUT_MS), flags;
	int n;

	for (;;) {
		spin_lock_irqsave(lock, flags);
		n = ib_poll_cq(k->cq, 1, wc);
		spin_unlock_irqrestore(lock, flags);
		if (n)
			return n < 0 ? n : 0;
		if (time_after(jiffies, end))
			return -ETIMEDOUT;
		usleep_range(100, 300);
	}
}

static int check_atomic_context(struct kv *t)
{
	static DEFINE_SPINLOCK(lock);
	struct ib_sge s = kv_sge(t, true, 0, 3000), r = kv_sge(t, false, 0, 4096);
	struct ib_sge s2 = kv_sge(t, true, 8000, 2000), r2 = kv_sge(t, false, 8192, 4096);
	unsigned long flags;
	struct ib_wc wc;
	u32 st, rt, st2, rt2;
	int e1, e2, ret;

	kv_prep(t, 13);
	spin_lock_irqsave(&lock, flags);
	e1 = kv_post_recv(t->qb.qp, &r, 1, &rt);
	e2 = e1 ? 0 : kv_post_send(t->qa.qp, IB_WR_SEND, &s, 1, IB_SEND_SIGNALED, 0, 0, 0, &st);
	spin_unlock_irqrestore(&lock, flags);
	if (e1 || e2)
		return FAIL("posting with a spinlock held: recv %d, send %d", e1, e2);
	ret = kv_poll_locked(&lock, t->qa.cq, &wc);
	if (ret)
		return FAIL("ib_poll_cq under a spinlock: %d", ret);
	if (wc.status != IB_WC_SUCCESS || wc.opcode != IB_WC_SEND || kv_wc_tag(&wc) != st)
		return FAIL("send completion: status %s (%d) vendor_err 0x%x opcode %d tag %u/%u",
			    ib_wc_status_msg(wc.status), wc.status, wc.vendor_err, wc.opcode,
			    kv_wc_tag(&wc), st);
	ret = kv_expect(t->qb.cq, &wc, IB_WC_RECV, rt, t->qb.qp, 3000, "receive");
	if (ret)
		return ret;

	spin_lock_irqsave(&lock, flags);
	e1 = kv_post_recv(t->qa.qp, &r2, 1, &rt2);
	e2 = e1 ? 0 : kv_post_send(t->qb.qp, IB_WR_SEND, &s2, 1, IB_SEND_SIGNALED, 0, 0, 0, &st2);
	spin_unlock_irqrestore(&lock, flags);
	if (e1 || e2)
		return FAIL("posting with a spinlock held (reverse): recv %d, send %d", e1, e2);
	ret = kv_poll_locked(&lock, t->qa.cq, &wc);
	if (ret)
		return FAIL("ib_poll_cq under a spinlock (receive): %d", ret);
	if (wc.status != IB_WC_SUCCESS || wc.opcode != IB_WC_RECV || kv_wc_tag(&wc) != rt2 ||
	    wc.byte_len != 2000)
		return FAIL("receive completion: status %s (%d) vendor_err 0x%x opcode %d tag %u/%u len %u",
			    ib_wc_status_msg(wc.status), wc.status, wc.vendor_err, wc.opcode,
			    kv_wc_tag(&wc), rt2, wc.byte_len);
	ret = kv_expect(t->qb.cq, &wc, IB_WC_SEND, st2, t->qb.qp, -1, "send completion (reverse)");
	if (ret)
		return ret;
	kv_to_cpu(t);
	ret = kv_cmp(t, 0, 0, 3000, "received data");
	if (!ret)
		ret = kv_cmp(t, 8192, 8000, 2000, "received data (reverse)");
	return ret;
}

/* The small pair: sa on the raw CQ (comp_handler), sb on a direct CQ. */
static int check_notify_event(struct kv *t)
{
	struct ib_sge s = kv_sge(t, true, 0, 256), r = kv_sge(t, false, 0, 256);
	struct kv_cq *k = t->cq_raw;
	struct ib_wc wc;
	u32 st, rt;
	int ret, ev;

	kv_prep(t, 14);
	ret = ib_req_notify_cq(k->cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS);
	if (ret)
		return FAIL("ib_req_notify_cq on an empty CQ: %d, expected 0", ret);
	ev = atomic_read(&k->events);
	ret = kv_post_recv(t->sb.qp, &r, 1, &rt);
	if (!ret)
		ret = kv_post_send(t->sa.qp, IB_WR_SEND, &s, 1, IB_SEND_SIGNALED, 0, 0, 0, &st);
	if (ret)
		return FAIL("post: %d", ret);
	if (!wait_event_timeout(k->wq, atomic_read(&k->events) != ev,
				msecs_to_jiffies(KV_TIMEOUT_MS)))
		return FAIL("no completion event within %d ms of arming the CQ", KV_TIMEOUT_MS);
	ret = kv_expect(t->sb.cq, &wc, IB_WC_RECV, rt, t->sb.qp, 256, "receive");
	if (ret)
		return ret;
	kv_to_cpu(t);
	ret = kv_cmp(t, 0, 0, 256, "received data");
	if (ret)
		return ret;
	/* The send completion is still in the CQ, unpolled: next check. */
	return 0;
}

static int check_notify_missed(struct kv *t)
{
	struct kv_cq *k = t->cq_raw;
	struct ib_wc wc;
	int ret;

	ret = ib_req_notify_cq(k->cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS);
	if (ret <= 0)
		return FAIL("ib_req_notify_cq(NEXT_COMP | REPORT_MISSED_EVENTS) with a completion pending: %d, expected > 0",
			    ret);
	ret = ib_poll_cq(k->cq, 1, &wc);
	if (ret != 1)
		return FAIL("ib_poll_cq after that: %d, expected the pending completion", ret);
	if (wc.status != IB_WC_SUCCESS || wc.opcode != IB_WC_SEND || wc.qp != t->sa.qp)
		return FAIL("the pending completion: status %s (%d) opcode %d",
			    ib_wc_status_msg(wc.status), wc.status, wc.opcode);
	ret = ib_poll_cq(k->cq, 1, &wc);
	if (ret != 0)
		return FAIL("ib_poll_cq of the emptied CQ: %d, expected 0", ret);
	return 0;
}

/*
 * A chain longer than the send queue: -ENOMEM with bad_wr at the first WR that did not fit,
 * the ones before it executed. The WRs are zero-length RDMA WRITEs (no rkey needed, IBA
 * C9-88; no receive consumed), so the chain may be long whatever the queue rounds up to.
 * Each carries max_send_sge (1) SGEs of length 0; max_send_wr counts WRs of the largest
 * kind (e.g. with immediate data), so a queue holds more of these: the chain is 4x + 64.
 */
static int check_full_queue(struct kv *t)
{
	u32 cap = t->sa.cap.max_send_wr, n = 4 * cap + 64, i, k;
	struct ib_sge empty = kv_sge(t, true, 0, 0);
	struct ib_rdma_wr *sw = NULL;
	const struct ib_send_wr *sbad = NULL;
	struct ib_wc wc;
	u32 *st = NULL;
	int ret;

	if (n > KV_RAW_CQE)
		return FAIL("send queue capacity %u too large for this check (CQ of %u)", cap,
			    KV_RAW_CQE);
	sw = kcalloc(n, sizeof(*sw), GFP_KERNEL);
	st = kcalloc(n, sizeof(*st), GFP_KERNEL);
	if (!sw || !st) {
		ret = FAIL("kcalloc failed");
		goto out;
	}
	for (i = 0; i < n; i++) {
		sw[i].wr.opcode = IB_WR_RDMA_WRITE;
		sw[i].wr.sg_list = &empty;
		sw[i].wr.num_sge = 1;
		sw[i].wr.send_flags = IB_SEND_SIGNALED;
		sw[i].wr.wr_cqe = kv_newtag(&st[i]);
		sw[i].wr.next = i + 1 < n ? &sw[i + 1].wr : NULL;
	}
	ret = ib_post_send(t->sa.qp, &sw[0].wr, &sbad);
	if (ret != -ENOMEM) {
		ret = FAIL("ib_post_send of %u WRs on a send queue of %u: %d, expected -ENOMEM", n, cap,
			   ret);
		goto out;
	}
	for (k = 0; k < n && sbad != &sw[k].wr; k++)
		;
	if (k == n) {
		ret = FAIL("-ENOMEM but bad_wr %p is not in the chain", sbad);
		goto out;
	}
	if (k < cap) {
		ret = FAIL("-ENOMEM at WR #%u of a send queue of %u", k, cap);
		goto out;
	}
	ret = 0;
	/* The k WRs before bad_wr were posted. */
	for (i = 0; i < k && !ret; i++)
		ret = kv_expect(t->cq_raw, &wc, IB_WC_RDMA_WRITE, st[i], t->sa.qp, -1,
				"write completion");
	if (!ret)
		ret = kv_expect_quiet(t->cq_raw, "after the accepted WRs");
	if (!ret)
		ret = kv_expect_quiet(t->sb.cq, "(zero-length writes consume no receive)");
	if (!ret)
		pr_info(KV "# full queue: -ENOMEM at WR #%u of %u (max_send_wr %u)\n", k, n, cap);
out:
	kfree(sw);
	kfree(st);
	return ret;
}

/*
 * Records completion @wc of the bad-lkey check in @seen: the send with the bad lkey (index
 * @badi) must end IB_WC_LOC_PROT_ERR, every other WR IB_WC_WR_FLUSH_ERR, and sends (indexes
 * >= @badi, except the late ones) complete in order.
 */
static int kv_bad_lkey_wc(const struct ib_wc *wc, const u32 *tags, int n, int badi, u32 *seen)
{
	int i;

	for (i = 0; i < n; i++)
		if (kv_wc_tag(wc) == tags[i])
			break;
	if (i == n || (*seen & BIT(i)))
		return FAIL("completion of an unknown or repeated tag %u: status %s (%d)",
			    kv_wc_tag(wc), ib_wc_status_msg(wc->status), wc->status);
	/*
	 * rxe, the reference this module is checked against, sets IB_WC_LOC_PROT_ERR and moves
	 * the QP to error, whereupon its completer flushes the whole send queue including the
	 * failing WR (rxe_comp.c: flush_send_queue). Tolerated for rxe only, and said so.
	 */
	if (i == badi && wc->status == IB_WC_WR_FLUSH_ERR && kv_is_rxe) {
		pr_info(KV "# bad lkey: rxe reports the failing WR as IB_WC_WR_FLUSH_ERR (known rxe behaviour), accepted for rxe only\n");
	} else if (i == badi && wc->status != IB_WC_LOC_PROT_ERR)
		return FAIL("the send with lkey 0x%x: status %s (%d), vendor_err 0x%x; expected IB_WC_LOC_PROT_ERR",
			    KV_BAD_LKEY, ib_wc_status_msg(wc->status), wc->status, wc->vendor_err);
	if (i != badi && wc->status != IB_WC_WR_FLUSH_ERR)
		return FAIL("WR %d: status %s (%d) vendor_err 0x%x, expected IB_WC_WR_FLUSH_ERR", i,
			    ib_wc_status_msg(wc->status), wc->status, wc->vendor_err);
	if (i > badi && i < badi + 3 && !(*seen & BIT(i - 1)))
		return FAIL("send %d completed before send %d", i, i - 1);
	if (i == badi)
		pr_info(KV "# bad lkey: %s, vendor_err 0x%x\n", ib_wc_status_msg(wc->status),
			wc->vendor_err);
	*seen |= BIT(i);
	return 0;
}

static int check_bad_lkey(struct kv *t)
{
	struct ib_sge bad = { .addr = t->src_dma, .length = 64, .lkey = KV_BAD_LKEY };
	struct ib_sge good = kv_sge(t, true, 0, 64), r = kv_sge(t, false, 0, 64);
	unsigned long end;
	u32 tags[7], seen = 0;
	struct ib_wc wc;
	int ret, i, n = 0, state;
	const int badi = 2;

	/* Two receives on sa to see its receive queue flushed too. */
	for (i = 0; i < 2; i++) {
		ret = kv_post_recv(t->sa.qp, &r, 1, &tags[n++]);
		if (ret)
			return FAIL("ib_post_recv: %d", ret);
	}
	ret = kv_post_send(t->sa.qp, IB_WR_SEND, &bad, 1, IB_SEND_SIGNALED, 0, 0, 0, &tags[n++]);
	if (ret)
		return FAIL("ib_post_send with lkey 0x%x: %d", KV_BAD_LKEY, ret);
	for (i = 0; i < 2; i++) {
		ret = kv_post_send(t->sa.qp, IB_WR_SEND, &good, 1, IB_SEND_SIGNALED, 0, 0, 0,
				   &tags[n++]);
		if (ret)
			return FAIL("ib_post_send after the bad one: %d", ret);
	}
	/* Up to the bad send's completion (receive flushes may come first). */
	while (!(seen & BIT(badi))) {
		ret = kv_wait(t->cq_raw, &wc);
		if (ret)
			return FAIL("no completion for the send with a bad lkey (%d)", ret);
		ret = kv_bad_lkey_wc(&wc, tags, n, badi, &seen);
		if (ret)
			return ret;
	}
	end = jiffies + HZ;
	while ((state = kv_qp_state(t->sa.qp)) != IB_QPS_ERR && time_before(jiffies, end))
		msleep(10);
	/* Checked to the end even so; reported after the flush checks. */
	if (state != IB_QPS_ERR)
		pr_info(KV "# bad lkey: ib_query_qp reports state %d after the error completion\n",
			state);
	/* WRs posted after the error flush too. */
	ret = kv_post_recv(t->sa.qp, &r, 1, &tags[n++]);
	if (ret)
		return FAIL("ib_post_recv on the QP in error: %d", ret);
	ret = kv_post_send(t->sa.qp, IB_WR_SEND, &good, 1, IB_SEND_SIGNALED, 0, 0, 0, &tags[n++]);
	if (ret)
		return FAIL("ib_post_send on the QP in error: %d", ret);
	while (seen != BIT(n) - 1) {
		ret = kv_wait(t->cq_raw, &wc);
		if (ret)
			return FAIL("WRs not flushed (seen mask 0x%x of 0x%lx): %d", seen, BIT(n) - 1,
				    ret);
		ret = kv_bad_lkey_wc(&wc, tags, n, badi, &seen);
		if (ret)
			return ret;
	}
	ret = kv_expect_quiet(t->cq_raw, "after the flush");
	if (!ret)
		ret = kv_expect_quiet(t->sb.cq, "(the peer of the QP in error)");
	if (!ret && state != IB_QPS_ERR)
		return FAIL("QP state %d (ib_query_qp) after the IB_WC_LOC_PROT_ERR completion, expected IB_QPS_ERR (%d); the WRs were flushed",
			    state, IB_QPS_ERR);
	return ret;
}

/*
 * rdma_query_ah gives back the address vector (ib_mad matches responses to requests with it):
 * destination GID, source GID index, hop limit, traffic class and flow label.
 */
static int check_query_ah(struct kv *t)
{
	struct rdma_ah_attr attr, q;
	const struct ib_global_route *g;
	struct ib_ah *ah;
	int ret;

	kv_ah_attr(t, &attr);
	rdma_ah_set_grh(&attr, &t->gid, 0x12345, t->gid_index, 17, 0x28);
	ah = rdma_create_ah(t->pd, &attr, RDMA_CREATE_AH_SLEEPABLE);
	if (IS_ERR(ah))
		return FAIL("rdma_create_ah: %ld", PTR_ERR(ah));
	memset(&q, 0xa5, sizeof(q));
	ret = rdma_query_ah(ah, &q);
	g = rdma_ah_read_grh(&q);
	if (ret)
		ret = FAIL("rdma_query_ah: %d", ret);
	else if (!(rdma_ah_get_ah_flags(&q) & IB_AH_GRH) ||
		 memcmp(g->dgid.raw, t->gid.raw, sizeof(t->gid.raw)) ||
		 g->sgid_index != t->gid_index || g->hop_limit != 17 ||
		 g->traffic_class != 0x28 || g->flow_label != 0x12345)
		ret = FAIL("rdma_query_ah: flags %#x dgid %pI6 sgid_index %u hop_limit %u traffic_class %#x flow_label %#x",
			   rdma_ah_get_ah_flags(&q), g->dgid.raw, g->sgid_index, g->hop_limit,
			   g->traffic_class, g->flow_label);
	rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
	return ret;
}

static int check_ud(struct kv *t)
{
	static DEFINE_SPINLOCK(lock);
	const size_t payload = 256;
	struct rdma_ah_attr attr;
	unsigned long flags;
	struct ib_ud_wr wr = {};
	const struct ib_send_wr *bad = NULL;
	struct ib_sge s = kv_sge(t, true, 64, payload), r;
	struct ib_wc wc, recv;
	struct iphdr *ip;
	u8 *grh;
	u32 st, rt;
	int ret;

	kv_prep(t, 16);
	kv_ah_attr(t, &attr);
	spin_lock_irqsave(&lock, flags);
	t->ah = rdma_create_ah(t->pd, &attr, 0);
	spin_unlock_irqrestore(&lock, flags);
	if (IS_ERR(t->ah)) {
		ret = PTR_ERR(t->ah);
		t->ah = NULL;
		return FAIL("rdma_create_ah(flags 0) under a spinlock: %d", ret);
	}
	if (t->coh_is_coherent)
		memset(t->coh, 0xa5, t->coh_len);
	r = (struct ib_sge){ .addr = t->coh_dma, .length = 40 + payload + 64, .lkey = t->lkey };
	ret = kv_post_recv(t->ub.qp, &r, 1, &rt);
	if (ret)
		return FAIL("ib_post_recv (UD): %d", ret);
	wr.wr.opcode = IB_WR_SEND;
	wr.wr.sg_list = &s;
	wr.wr.num_sge = 1;
	wr.wr.send_flags = IB_SEND_SIGNALED;
	wr.wr.wr_cqe = kv_newtag(&st);
	wr.ah = t->ah;
	wr.remote_qpn = t->ub.qp->qp_num;
	wr.remote_qkey = KV_QKEY;
	ret = ib_post_send(t->ua.qp, &wr.wr, &bad);
	if (ret)
		return FAIL("ib_post_send (UD): %d", ret);
	/* ua and ub share the CQ: their completions may come in either order. */
	ret = kv_wait(t->cq_ud, &wc);
	if (ret)
		return FAIL("no completion on the UD CQ (%d)", ret);
	if (kv_wc_tag(&wc) == rt) {
		recv = wc;
		ret = kv_expect(t->cq_ud, &wc, IB_WC_SEND, st, t->ua.qp, -1, "UD send completion");
	} else {
		ret = kv_check_wc(&wc, IB_WC_SEND, st, t->ua.qp, -1, "UD send completion");
		if (!ret)
			ret = kv_expect(t->cq_ud, &recv, IB_WC_RECV, rt, t->ub.qp, 40 + payload,
					"UD receive");
	}
	if (ret)
		return ret;
	ret = kv_check_wc(&recv, IB_WC_RECV, rt, t->ub.qp, 40 + payload, "UD receive");
	if (ret)
		return ret;
	wc = recv;
	if (wc.src_qp != t->ua.qp->qp_num)
		return FAIL("src_qp %u, expected %u", wc.src_qp, t->ua.qp->qp_num);
	if (!(wc.wc_flags & IB_WC_GRH))
		return FAIL("no IB_WC_GRH in wc_flags 0x%x", wc.wc_flags);
	if (!(wc.wc_flags & IB_WC_WITH_NETWORK_HDR_TYPE))
		return FAIL("no IB_WC_WITH_NETWORK_HDR_TYPE in wc_flags 0x%x", wc.wc_flags);
	if (wc.network_hdr_type != RDMA_NETWORK_IPV4)
		return FAIL("network_hdr_type %u, expected RDMA_NETWORK_IPV4 (%u)", wc.network_hdr_type,
			    RDMA_NETWORK_IPV4);
	if (!t->coh_is_coherent)
		ib_dma_sync_single_for_cpu(t->ib, t->coh_dma, t->coh_len, DMA_BIDIRECTIONAL);
	grh = t->coh;
	ip = (struct iphdr *)(grh + 20);
	if (ip->version != 4 || ip->ihl != 5)
		return FAIL("GRH bytes 20..39 do not hold an IPv4 header: %*ph", 20, grh + 20);
	if (ip->protocol != IPPROTO_UDP)
		return FAIL("IPv4 protocol %u, expected UDP: %*ph", ip->protocol, 20, grh + 20);
	if (memcmp(&ip->saddr, &t->gid.raw[12], 4) || memcmp(&ip->daddr, &t->gid.raw[12], 4))
		return FAIL("IPv4 addresses %pI4 -> %pI4, expected %pI4 both", &ip->saddr, &ip->daddr,
			    &t->gid.raw[12]);
	/* IPv4 + UDP + BTH + DETH + payload + ICRC */
	if (ntohs(ip->tot_len) != 20 + 8 + 12 + 8 + payload + 4)
		return FAIL("IPv4 total length %u, expected %zu", ntohs(ip->tot_len),
			    20 + 8 + 12 + 8 + payload + 4);
	if (memcmp(grh + 40, t->src + 64, payload))
		return FAIL("UD payload differs: %*ph...", 16, grh + 40);
	ret = kv_expect_quiet(t->cq_ud, "after the datagram");
	if (!t->coh_is_coherent)
		ib_dma_sync_single_for_device(t->ib, t->coh_dma, t->coh_len, DMA_BIDIRECTIONAL);
	return ret;
}

/* Zero-length RDMA operations need no valid rkey (IBA C9-88): rkey 0, no SGE. */
static int check_zero_len_write_imm(struct kv *t)
{
	struct ib_sge rs = kv_sge(t, false, 0, 16);
	__be32 imm = cpu_to_be32(0x5a5a0001);
	struct ib_wc wc;
	u32 st, rt;
	int r;

	kv_prep(t, 17);
	r = kv_post_recv(t->qb.qp, &rs, 1, &rt);
	if (r)
		return FAIL("ib_post_recv: %d", r);
	r = kv_post_send(t->qa.qp, IB_WR_RDMA_WRITE_WITH_IMM, NULL, 0, IB_SEND_SIGNALED, imm, 0, 0,
			 &st);
	if (r)
		return FAIL("ib_post_send: %d", r);
	r = kv_expect(t->qa.cq, &wc, IB_WC_RDMA_WRITE, st, t->qa.qp, -1, "write completion");
	if (r)
		return r;
	r = kv_expect(t->qb.cq, &wc, IB_WC_RECV_RDMA_WITH_IMM, rt, t->qb.qp, 0, "receive");
	if (r)
		return r;
	if (!(wc.wc_flags & IB_WC_WITH_IMM) || wc.ex.imm_data != imm)
		return FAIL("receive: wc_flags 0x%x imm_data 0x%08x", wc.wc_flags,
			    be32_to_cpu(wc.ex.imm_data));
	kv_to_cpu(t);
	return kv_untouched(t, 0, 16, "the receive buffer");
}

static int check_zero_len_read(struct kv *t)
{
	struct ib_wc wc;
	u32 st;
	int r;

	r = kv_post_send(t->qa.qp, IB_WR_RDMA_READ, NULL, 0, IB_SEND_SIGNALED, 0, 0, 0, &st);
	if (r)
		return FAIL("ib_post_send: %d", r);
	return kv_expect(t->qa.cq, &wc, IB_WC_RDMA_READ, st, t->qa.qp, -1, "read completion");
}

/* A fresh RC pair on its own CQ (checks that leave their QPs in error use one). */
static int kv_pair(struct kv *t, struct kv_cq *cq, struct kv_qp *a, struct kv_qp *b)
{
	int r = kv_qp_create(t, a, IB_QPT_RC, cq, 16, 16, 2, 0);

	if (!r)
		r = kv_qp_create(t, b, IB_QPT_RC, cq, 16, 16, 2, 0);
	if (r)
		return FAIL("ib_create_qp: %d", r);
	r = kv_rc_connect(t, a->qp, b->qp->qp_num, 0x500, 0x600);
	if (!r)
		r = kv_rc_connect(t, b->qp, a->qp->qp_num, 0x600, 0x500);
	return r;
}

/*
 * The device's max_cqe holds for a kernel CQ (ferrdma: 524,287 CQEs, a 32 MiB ring the driver
 * builds from many coherent chunks): 9000 zero-length RDMA WRITEs, 16 at a time, complete on
 * one in order, which takes the device's writes and the driver's reads past the first chunk;
 * a CQ of max_cqe + 1 is refused with EINVAL.
 */
static int check_max_cqe(struct kv *t)
{
	const int total = 9000, batch = 16;
	struct ib_cq_init_attr attr = { .cqe = t->ib->attrs.max_cqe + 1 };
	struct kv_qp a = {}, b = {};
	struct ib_wc wc[16];
	struct kv_cq *big;
	struct ib_cq *past;
	int r = 0, done = 0, posted, i, n;
	unsigned long end;

	past = ib_create_cq(t->ib, kv_comp_handler, NULL, NULL, &attr);
	if (!IS_ERR(past)) {
		ib_destroy_cq(past);
		return FAIL("a CQ of max_cqe + 1 = %d entries was created", attr.cqe);
	}
	if (PTR_ERR(past) != -EINVAL)
		return FAIL("a CQ of max_cqe + 1 entries: %ld, expected -EINVAL", PTR_ERR(past));
	big = kv_cq_alloc(t, "max_cqe", t->ib->attrs.max_cqe, IB_POLL_DIRECT, true, &r);
	if (!big)
		return FAIL("a CQ of max_cqe = %d entries: %d", t->ib->attrs.max_cqe, r);
	r = kv_pair(t, big, &a, &b);
	while (!r && done < total) {
		for (posted = 0; posted < batch; posted++) {
			struct ib_rdma_wr wr = {
				.wr = {
					.wr_id = done + posted,
					.opcode = IB_WR_RDMA_WRITE,
					.send_flags = IB_SEND_SIGNALED,
				},
			};
			const struct ib_send_wr *bad;

			r = ib_post_send(a.qp, &wr.wr, &bad);
			if (r) {
				r = FAIL("ib_post_send of WRITE %d: %d", done + posted, r);
				break;
			}
		}
		end = jiffies + msecs_to_jiffies(KV_TIMEOUT_MS);
		for (n = 0; !r && n < posted;) {
			int got = ib_poll_cq(big->cq, posted - n, wc);

			if (got < 0) {
				r = FAIL("ib_poll_cq: %d", got);
				break;
			}
			for (i = 0; i < got; i++, n++)
				if (wc[i].status != IB_WC_SUCCESS || wc[i].opcode != IB_WC_RDMA_WRITE ||
				    wc[i].wr_id != done + n)
					r = FAIL("completion %d: status %d opcode %d wr_id %llu",
						 done + n, wc[i].status, wc[i].opcode,
						 (unsigned long long)wc[i].wr_id);
			if (!got && time_after(jiffies, end))
				r = FAIL("%d of %d WRITE completions after %d ms", done + n, total,
					 KV_TIMEOUT_MS);
			if (!got)
				cond_resched();
		}
		done += posted;
	}
	if (!r)
		pr_info(KV "# a CQ of max_cqe = %d took %d completions; max_cqe + 1 refused\n",
			t->ib->attrs.max_cqe, done);
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	kv_cq_free(big);
	return r;
}

/* An RDMA WRITE of @len bytes with @rkey that must fail with IB_WC_REM_ACCESS_ERR. */
static int kv_write_refused(struct kv *t, struct kv_qp *a, u32 rkey, u64 raddr, const char *what)
{
	struct ib_sge s = kv_sge(t, true, 0, 256);
	struct ib_wc wc;
	u32 tag;
	int r;

	kv_prep(t, 31);
	r = kv_post_send(a->qp, IB_WR_RDMA_WRITE, &s, 1, IB_SEND_SIGNALED, 0, raddr, rkey, &tag);
	if (r)
		return FAIL("%s: ib_post_send: %d", what, r);
	r = kv_wait(a->cq, &wc);
	if (r)
		return FAIL("%s: no completion (%d)", what, r);
	if (wc.status != IB_WC_REM_ACCESS_ERR || kv_wc_tag(&wc) != tag)
		return FAIL("%s: status %s (%d) tag %u/%u, expected IB_WC_REM_ACCESS_ERR", what,
			    ib_wc_status_msg(wc.status), wc.status, kv_wc_tag(&wc), tag);
	kv_to_cpu(t);
	return kv_untouched(t, raddr - t->dst_dma, 256, what);
}

/*
 * Fast registration end to end, on QP pairs of its own: IB_WR_REG_MR over 20000 bytes of dst,
 * RDMA WRITE and READ through the rkey with the data checked; IB_WR_LOCAL_INV, after which a
 * WRITE with the stale rkey fails with IB_WC_REM_ACCESS_ERR (the pair is then in error); on a
 * new pair a registration under the next key (ib_update_fast_reg_key) works again, and a
 * SEND_WITH_INV invalidates it at the responder (IB_WC_WITH_INVALIDATE), so a WRITE through
 * it fails once more.
 */
static int check_fastreg(struct kv *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
	struct kv_qp a = {}, b = {};
	struct ib_sge s, rs;
	struct kv_cq *cq;
	struct ib_wc wc;
	u32 tag, rt, rkey, old;
	u64 base = t->dst_dma + 2000;
	int r = 0;

	if (!t->fr)
		return SKIP("the device has no IB_DEVICE_MEM_MGT_EXTENSIONS");
	cq = kv_cq_alloc(t, "fastreg", 64, IB_POLL_DIRECT, false, &r);
	if (!cq)
		return FAIL("ib_alloc_cq: %d", r);
	r = kv_pair(t, cq, &a, &b);
	if (r)
		goto out;
	/* b owns the memory: it registers, a writes and reads. */
	r = kv_fastreg(t, &b, base, 20000, acc);
	if (r)
		goto out;
	rkey = t->fr->rkey;
	kv_prep(t, 21);
	s = kv_sge(t, true, 100, 20000);
	r = kv_rdma(&a, IB_WR_RDMA_WRITE, &s, 1, base, rkey, "RDMA WRITE through the rkey");
	if (r)
		goto out;
	kv_to_cpu(t);
	r = kv_cmp(t, 2000, 100, 20000, "data written through the fast-registered rkey");
	if (!r)
		r = kv_untouched(t, 22000, 64, "after the registered range");
	if (r)
		goto out;
	/* Read 5000 bytes from the middle of the region back into dst at 60000. */
	rs = kv_sge(t, false, 60000, 5000);
	r = kv_rdma(&a, IB_WR_RDMA_READ, &rs, 1, base + 7000, rkey, "RDMA READ through the rkey");
	if (r)
		goto out;
	kv_to_cpu(t);
	r = kv_cmp(t, 60000, 7100, 5000, "data read through the fast-registered rkey");
	if (r)
		goto out;
	/* Invalidate; the stale rkey must be refused by the responder. */
	r = kv_local_inv(t, &b);
	if (!r)
		r = kv_write_refused(t, &a, rkey, base, "RDMA WRITE with the invalidated rkey");
	if (r)
		goto out;
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	while (!kv_wait_ms(cq, &wc, KV_QUIET_MS))
		;
	/* A new pair; a registration under the next key. */
	r = kv_pair(t, cq, &a, &b);
	if (r)
		goto out;
	old = rkey;
	r = kv_fastreg(t, &b, base, 4096, acc);
	if (r)
		goto out;
	rkey = t->fr->rkey;
	if (rkey == old || (rkey & ~0xffu) != (old & ~0xffu)) {
		r = FAIL("ib_update_fast_reg_key: rkey 0x%x after 0x%x", rkey, old);
		goto out;
	}
	kv_prep(t, 22);
	s = kv_sge(t, true, 300, 4096);
	r = kv_rdma(&a, IB_WR_RDMA_WRITE, &s, 1, base, rkey, "RDMA WRITE with the new key");
	if (r)
		goto out;
	kv_to_cpu(t);
	r = kv_cmp(t, 2000, 300, 4096, "data written with the new key");
	if (r)
		goto out;
	/* SEND_WITH_INV of the rkey: the responder's MR becomes invalid. */
	rs = kv_sge(t, false, 100000, 64);
	r = kv_post_recv(b.qp, &rs, 1, &rt);
	if (r) {
		r = FAIL("ib_post_recv: %d", r);
		goto out;
	}
	{
		struct ib_sge ss = kv_sge(t, true, 0, 32);
		struct ib_send_wr wr = {
			.opcode = IB_WR_SEND_WITH_INV,
			.sg_list = &ss,
			.num_sge = 1,
			.send_flags = IB_SEND_SIGNALED,
			.ex.invalidate_rkey = rkey,
		};
		const struct ib_send_wr *bad = NULL;

		wr.wr_cqe = kv_newtag(&tag);
		r = ib_post_send(a.qp, &wr, &bad);
		if (r) {
			r = FAIL("SEND_WITH_INV: ib_post_send: %d", r);
			goto out;
		}
	}
	/* One CQ for both: the send and the receive complete in either order. */
	{
		bool sent = false, got = false;

		while (!r && !(sent && got)) {
			r = kv_wait(cq, &wc);
			if (r) {
				r = FAIL("SEND_WITH_INV: missing completions (send %d, receive %d)",
					 sent, got);
				break;
			}
			if (kv_wc_tag(&wc) == tag) {
				r = kv_check_wc(&wc, IB_WC_SEND, tag, a.qp, -1, "SEND_WITH_INV");
				sent = true;
			} else {
				r = kv_check_wc(&wc, IB_WC_RECV, rt, b.qp, 32,
						"receive of a SEND_WITH_INV");
				if (!r && (!(wc.wc_flags & IB_WC_WITH_INVALIDATE) ||
					   wc.ex.invalidate_rkey != rkey))
					r = FAIL("receive of a SEND_WITH_INV: wc_flags 0x%x invalidate_rkey 0x%x, expected IB_WC_WITH_INVALIDATE and 0x%x",
						 wc.wc_flags, wc.ex.invalidate_rkey, rkey);
				got = true;
			}
		}
		if (r)
			goto out;
	}
	t->fr_valid = false;
	r = kv_write_refused(t, &a, rkey, base, "RDMA WRITE with the rkey a SEND_WITH_INV invalidated");
out:
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	kv_cq_free(cq);
	return r;
}

/*
 * IB_WR_REG_MR of an MR that is already valid fails and leaves the registration as it was:
 * ferrdma reports IB_WC_MW_BIND_ERR (rxe: IB_WC_LOC_QP_OP_ERR, or the WR flushed, as its
 * requester does); the old key still works for LOCAL_INV afterwards (on a new pair, the
 * first is in error).
 */
static int check_fastreg_valid_mr(struct kv *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	struct kv_qp a = {}, b = {};
	struct ib_reg_wr wr;
	const struct ib_send_wr *bad = NULL;
	struct kv_cq *cq;
	struct ib_wc wc;
	u32 tag, first;
	int r = 0;

	if (!t->fr)
		return SKIP("the device has no IB_DEVICE_MEM_MGT_EXTENSIONS");
	cq = kv_cq_alloc(t, "fastreg2", 64, IB_POLL_DIRECT, false, &r);
	if (!cq)
		return FAIL("ib_alloc_cq: %d", r);
	r = kv_pair(t, cq, &a, &b);
	if (!r)
		r = kv_fastreg(t, &b, t->dst_dma, 8192, acc);
	if (r)
		goto out;
	first = t->fr->rkey;
	r = kv_reg_wr(t, &wr, t->dst_dma + 65536, 4096, acc);
	if (r)
		goto out;
	wr.wr.send_flags = IB_SEND_SIGNALED;
	wr.wr.wr_cqe = kv_newtag(&tag);
	r = ib_post_send(b.qp, &wr.wr, &bad);
	if (r) {
		r = FAIL("ib_post_send: %d", r);
		goto out;
	}
	r = kv_wait(cq, &wc);
	if (r) {
		r = FAIL("no completion for the second IB_WR_REG_MR (%d)", r);
		goto out;
	}
	if (kv_wc_tag(&wc) != tag) {
		r = FAIL("completion of tag %u, expected %u", kv_wc_tag(&wc), tag);
		goto out;
	}
	if (kv_is_rxe && (wc.status == IB_WC_LOC_QP_OP_ERR || wc.status == IB_WC_WR_FLUSH_ERR)) {
		pr_info(KV "# REG_MR of a valid MR: rxe reports %s, accepted for rxe only\n",
			ib_wc_status_msg(wc.status));
	} else if (wc.status != IB_WC_MW_BIND_ERR) {
		r = FAIL("REG_MR of a valid MR: status %s (%d), vendor_err 0x%x; expected IB_WC_MW_BIND_ERR",
			 ib_wc_status_msg(wc.status), wc.status, wc.vendor_err);
		goto out;
	}
	/* Back to the key the device holds; it invalidates on a fresh pair. */
	ib_update_fast_reg_key(t->fr, first & 0xff);
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	while (!kv_wait_ms(cq, &wc, KV_QUIET_MS))
		;
	r = kv_pair(t, cq, &a, &b);
	if (!r)
		r = kv_local_inv(t, &b);
out:
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	kv_cq_free(cq);
	return r;
}

/* Chunks of the maximal fast registration: 5 distinct 64 KiB blocks, cycled. */
#define KV_FRMAX_CHUNKS		5
#define KV_FRMAX_ORDER		4
#define KV_FRMAX_CHUNK_PAGES	(1u << KV_FRMAX_ORDER)
#define KV_FRMAX_CHUNK		(KV_FRMAX_CHUNK_PAGES * PAGE_SIZE)

struct kv_frmax {
	struct page *page[KV_FRMAX_CHUNKS];
	u64 dma[KV_FRMAX_CHUNKS];
};

/* Where byte @off of the cycled region lives (CPU view) and which chunk holds it. */
static u8 *kv_frmax_byte(struct kv_frmax *m, u64 off, int *chunk)
{
	u64 page = off / PAGE_SIZE;

	*chunk = (page / KV_FRMAX_CHUNK_PAGES) % KV_FRMAX_CHUNKS;
	return (u8 *)page_address(m->page[*chunk]) +
	       (page % KV_FRMAX_CHUNK_PAGES) * PAGE_SIZE + off % PAGE_SIZE;
}

/*
 * A fast-registration MR of max_fast_reg_page_list_len pages (ferrdma: 262144, a two-level
 * page list; rxe: its own maximum), mapped by ib_map_mr_sg from a scatterlist of 64 KiB
 * entries that cycle through five blocks, so 1 GiB of region needs 320 KiB of memory. RDMA
 * WRITEs at the region's start, across the first list page boundary (page 512), in the middle
 * and at its end land in the pages the list names there; an RDMA READ of the end comes back;
 * one page more than the maximum is refused by ib_alloc_mr (EINVAL).
 */
static int check_fastreg_max_pages(struct kv *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
	u32 max = t->ib->attrs.max_fast_reg_page_list_len;
	struct kv_frmax m = {};
	struct kv_qp a = {}, b = {};
	struct sg_table tbl = {};
	struct scatterlist *sg;
	struct ib_mr *mr = NULL, *over;
	struct kv_cq *cq = NULL;
	struct ib_reg_wr wr;
	struct ib_sge s;
	u64 len, offs[4];
	u32 nsg, i, k;
	int r = 0, n, c;

	if (!t->fr)
		return SKIP("the device has no IB_DEVICE_MEM_MGT_EXTENSIONS");
	if (PAGE_SIZE != 4096)
		return SKIP("PAGE_SIZE %lu: the region layout assumes 4 KiB pages", PAGE_SIZE);
	len = (u64)max * PAGE_SIZE;
	over = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, max + 1);
	if (!IS_ERR(over)) {
		ib_dereg_mr(over);
		if (!kv_is_rxe)
			return FAIL("ib_alloc_mr of max_fast_reg_page_list_len + 1 (%u) pages succeeded",
				    max + 1);
		pr_info(KV "# rxe allocates an MR of %u pages, past its max_fast_reg_page_list_len\n",
			max + 1);
	} else if (PTR_ERR(over) != -EINVAL) {
		return FAIL("ib_alloc_mr of %u pages: %ld, expected -EINVAL", max + 1, PTR_ERR(over));
	}
	for (i = 0; i < KV_FRMAX_CHUNKS; i++) {
		m.page[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO, KV_FRMAX_ORDER);
		if (!m.page[i]) {
			r = FAIL("alloc_pages(order %d) failed", KV_FRMAX_ORDER);
			goto out;
		}
		m.dma[i] = ib_dma_map_page(t->ib, m.page[i], 0, KV_FRMAX_CHUNK, DMA_BIDIRECTIONAL);
		if (ib_dma_mapping_error(t->ib, m.dma[i])) {
			__free_pages(m.page[i], KV_FRMAX_ORDER);
			m.page[i] = NULL;
			r = FAIL("ib_dma_map_page failed");
			goto out;
		}
	}
	mr = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, max);
	if (IS_ERR(mr)) {
		r = FAIL("ib_alloc_mr(IB_MR_TYPE_MEM_REG, %u): %ld", max, PTR_ERR(mr));
		mr = NULL;
		goto out;
	}
	nsg = DIV_ROUND_UP(max, KV_FRMAX_CHUNK_PAGES);
	r = sg_alloc_table(&tbl, nsg, GFP_KERNEL);
	if (r) {
		r = FAIL("sg_alloc_table(%u): %d", nsg, r);
		goto out;
	}
	for_each_sg(tbl.sgl, sg, nsg, i) {
		u32 pages = min(KV_FRMAX_CHUNK_PAGES, max - i * KV_FRMAX_CHUNK_PAGES);

		sg->length = pages * PAGE_SIZE;
		sg_dma_address(sg) = m.dma[i % KV_FRMAX_CHUNKS];
		sg_dma_len(sg) = pages * PAGE_SIZE;
	}
	n = ib_map_mr_sg(mr, tbl.sgl, nsg, NULL, PAGE_SIZE);
	if (n != nsg || mr->length != len || mr->iova != m.dma[0]) {
		r = FAIL("ib_map_mr_sg of %u entries (%u pages): %d, iova 0x%llx length %llu",
			 nsg, max, n, mr->iova, mr->length);
		goto out;
	}
	cq = kv_cq_alloc(t, "frmax", 64, IB_POLL_DIRECT, false, &r);
	if (!cq) {
		r = FAIL("ib_alloc_cq: %d", r);
		goto out;
	}
	r = kv_pair(t, cq, &a, &b);
	if (r)
		goto out;
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	wr = (struct ib_reg_wr){ .wr.opcode = IB_WR_REG_MR, .mr = mr, .key = mr->rkey,
				 .access = acc };
	r = kv_post_wait(&b, &wr.wr, IB_WC_REG_MR, "IB_WR_REG_MR of the maximal MR");
	if (r)
		goto out;
	offs[0] = 0x800;
	offs[1] = max > 512 ? 512 * PAGE_SIZE - 0x400 : len / 4;
	offs[2] = len / 2 - 0x10;
	offs[3] = len - 0x1000;
	for (k = 0; k < ARRAY_SIZE(offs); k++) {
		kv_prep(t, 40 + k);
		s = kv_sge(t, true, 64 * k, 0x1000);
		r = kv_rdma(&a, IB_WR_RDMA_WRITE, &s, 1, mr->iova + offs[k], mr->rkey,
			    "RDMA WRITE into the maximal MR");
		if (r)
			goto out;
		for (i = 0; i < KV_FRMAX_CHUNKS; i++)
			ib_dma_sync_single_for_cpu(t->ib, m.dma[i], KV_FRMAX_CHUNK,
						   DMA_BIDIRECTIONAL);
		for (i = 0; i < 0x1000; i++) {
			u8 got = *kv_frmax_byte(&m, offs[k] + i, &c);

			if (got != t->src[64 * k + i]) {
				r = FAIL("WRITE at region offset 0x%llx: byte %u (chunk %d) is 0x%02x, expected 0x%02x",
					 offs[k], i, c, got, t->src[64 * k + i]);
				goto out;
			}
		}
		for (i = 0; i < KV_FRMAX_CHUNKS; i++)
			ib_dma_sync_single_for_device(t->ib, m.dma[i], KV_FRMAX_CHUNK,
						      DMA_BIDIRECTIONAL);
	}
	/* The last WRITE's bytes read back through the same rkey. */
	s = kv_sge(t, false, 0, 0x1000);
	r = kv_rdma(&a, IB_WR_RDMA_READ, &s, 1, mr->iova + offs[3], mr->rkey,
		    "RDMA READ from the maximal MR");
	if (r)
		goto out;
	kv_to_cpu(t);
	r = kv_cmp(t, 0, 64 * 3, 0x1000, "READ from the end of the maximal MR");
	if (r)
		goto out;
	{
		struct ib_send_wr inv = { .opcode = IB_WR_LOCAL_INV,
					  .ex.invalidate_rkey = mr->rkey };

		r = kv_post_wait(&b, &inv, IB_WC_LOCAL_INV, "LOCAL_INV of the maximal MR");
	}
	if (!r)
		pr_info(KV "# a fast registration of %u pages (%llu MiB): 4 WRITEs and a READ checked\n",
			max, len >> 20);
out:
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	if (cq)
		kv_cq_free(cq);
	sg_free_table(&tbl);
	if (mr)
		ib_dereg_mr(mr);
	for (i = 0; i < KV_FRMAX_CHUNKS; i++) {
		if (!m.page[i])
			continue;
		ib_dma_unmap_page(t->ib, m.dma[i], KV_FRMAX_CHUNK, DMA_BIDIRECTIONAL);
		__free_pages(m.page[i], KV_FRMAX_ORDER);
	}
	return r;
}

/* Receives outstanding on both QPs of the main pair, then ib_drain_qp on each. */
static int check_drain(struct kv *t)
{
	struct ib_sge r = kv_sge(t, false, 0, 64);
	struct kv_qp *qps[2] = { &t->qa, &t->qb };
	struct ib_wc wc;
	u32 tags[2][4];
	int q, i, ret;

	for (q = 0; q < 2; q++)
		for (i = 0; i < 4; i++) {
			ret = kv_post_recv(qps[q]->qp, &r, 1, &tags[q][i]);
			if (ret)
				return FAIL("ib_post_recv: %d", ret);
		}
	for (q = 0; q < 2; q++) {
		/* Returns once the drain WRs of both queues have completed. */
		ib_drain_qp(qps[q]->qp);
		for (i = 0; i < 4; i++) {
			ret = kv_wait(qps[q]->cq, &wc);
			if (ret)
				return FAIL("QP %u: receive %d of 4 not flushed by ib_drain_qp", qps[q]->qp->qp_num,
					    i);
			if (wc.status != IB_WC_WR_FLUSH_ERR || kv_wc_tag(&wc) != tags[q][i])
				return FAIL("QP %u: receive %d: status %s (%d) tag %u/%u, expected a flush",
					    qps[q]->qp->qp_num, i, ib_wc_status_msg(wc.status),
					    wc.status, kv_wc_tag(&wc), tags[q][i]);
		}
		ret = kv_qp_state(qps[q]->qp);
		if (ret != IB_QPS_ERR)
			return FAIL("QP %u in state %d after ib_drain_qp", qps[q]->qp->qp_num, ret);
	}
	return 0;
}

/*
 * ib_cm's locking around a kernel ULP's COMM_EST, replayed for lockdep: ib_cm creates and
 * destroys AHs with cm_id_priv->lock held and interrupts off (cm_alloc_msg, cm_free_msg:
 * rdma_create_ah/rdma_destroy_ah without RDMA_CREATE_AH_SLEEPABLE), and a ULP whose QP event
 * handler passes IB_EVENT_COMM_EST on (nvmet-rdma, isert, srpt: rdma_notify -> ib_cm_notify ->
 * cm_establish) takes the same lock in whatever context the provider delivers QP events, hard
 * IRQ for ferrdma's AEQ. kv_cm_lock stands for cm_id_priv->lock (one lockdep class, like all
 * cm_id_privs). A provider lock taken in create_ah/destroy_ah that is also taken with
 * interrupts on elsewhere is then a deadlock lockdep reports ("HARDIRQ-safe -> HARDIRQ-unsafe
 * lock order"), which fails the test. (rdma_cm's own connections do not show it on ferrdma:
 * the passive side goes to RTS before its REP, so no message ever arrives in RTR.)
 *
 * The pair: a in RTS, b left in RTR, a SEND from a makes the device raise COMM_EST for b.
 */
static DEFINE_SPINLOCK(kv_cm_lock);
static atomic_t kv_comm_est, kv_comm_est_hardirq;

static void kv_comm_est_handler(struct ib_event *ev, void *ctx)
{
	unsigned long flags;

	if (ev->event != IB_EVENT_COMM_EST)
		return;
	spin_lock_irqsave(&kv_cm_lock, flags);
	atomic_inc(&kv_comm_est);
	if (in_hardirq())
		atomic_inc(&kv_comm_est_hardirq);
	spin_unlock_irqrestore(&kv_cm_lock, flags);
}

static int kv_ahs_under_cm_lock(struct kv *t, int n)
{
	struct rdma_ah_attr attr;
	struct ib_ah *ah;
	int i;

	kv_ah_attr(t, &attr);
	for (i = 0; i < n; i++) {
		spin_lock_irq(&kv_cm_lock);
		ah = rdma_create_ah(t->pd, &attr, 0);
		spin_unlock_irq(&kv_cm_lock);
		if (IS_ERR(ah))
			return FAIL("rdma_create_ah under the cm lock: %ld", PTR_ERR(ah));
		spin_lock_irq(&kv_cm_lock);
		rdma_destroy_ah(ah, 0);
		spin_unlock_irq(&kv_cm_lock);
	}
	return 0;
}

static int check_comm_est_with_ahs_under_cm_lock(struct kv *t)
{
	struct kv_qp a = {}, b = {};
	struct ib_sge s = kv_sge(t, true, 0, 64), r = kv_sge(t, false, 0, 64);
	struct ib_wc wc;
	unsigned long end;
	u32 st, rt;
	int ret;

	atomic_set(&kv_comm_est, 0);
	atomic_set(&kv_comm_est_hardirq, 0);
	/* Before any COMM_EST too, as ib_cm's REQ/REP path does. */
	ret = kv_ahs_under_cm_lock(t, 4);
	if (ret)
		return ret;
	ret = kv_qp_create(t, &a, IB_QPT_RC, t->cq_direct, 16, 16, 2, 0);
	if (!ret)
		ret = kv_qp_create(t, &b, IB_QPT_RC, t->cq_direct, 16, 16, 2, 0);
	if (ret) {
		ret = FAIL("ib_create_qp: %d", ret);
		goto out;
	}
	b.qp->event_handler = kv_comm_est_handler;
	ret = kv_rc_connect(t, a.qp, b.qp->qp_num, 0x700, 0x800);
	if (ret)
		goto out;
	/* b: INIT and RTR only, as a passive ib_cm side before the RTU. */
	ret = kv_qp_init(t, b.qp, false);
	if (!ret) {
		struct ib_qp_attr at = {
			.qp_state = IB_QPS_RTR,
			.path_mtu = t->mtu,
			.dest_qp_num = a.qp->qp_num,
			.rq_psn = 0x700,
			.max_dest_rd_atomic = 1,
			.min_rnr_timer = 12,
		};

		kv_ah_attr(t, &at.ah_attr);
		ret = ib_modify_qp(b.qp, &at, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
				   IB_QP_DEST_QPN | IB_QP_RQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC |
				   IB_QP_MIN_RNR_TIMER);
	}
	if (ret) {
		ret = FAIL("QP b to INIT/RTR: %d", ret);
		goto out;
	}
	kv_prep(t, 41);
	ret = kv_post_recv(b.qp, &r, 1, &rt);
	if (!ret)
		ret = kv_post_send(a.qp, IB_WR_SEND, &s, 1, IB_SEND_SIGNALED, 0, 0, 0, &st);
	if (ret) {
		ret = FAIL("post: %d", ret);
		goto out;
	}
	/* Both completions (any order: one CQ), then the event. */
	ret = kv_wait(t->cq_direct, &wc);
	if (!ret)
		ret = kv_wait(t->cq_direct, &wc);
	if (ret) {
		ret = FAIL("SEND to a QP in RTR: no completions (%d)", ret);
		goto out;
	}
	end = jiffies + msecs_to_jiffies(KV_TIMEOUT_MS);
	while (!atomic_read(&kv_comm_est) && time_before(jiffies, end))
		msleep(10);
	if (!atomic_read(&kv_comm_est)) {
		ret = kv_is_rxe ? SKIP("no IB_EVENT_COMM_EST from this device") :
				  FAIL("no IB_EVENT_COMM_EST for the first message in RTR");
		goto out;
	}
	/* After the event, the lock is one lockdep has seen in hard IRQ (on ferrdma). */
	ret = kv_ahs_under_cm_lock(t, 4);
	if (!ret)
		pr_info(KV "# COMM_EST %d (in hard IRQ %d)\n", atomic_read(&kv_comm_est),
			atomic_read(&kv_comm_est_hardirq));
	if (!ret && !kv_is_rxe && !atomic_read(&kv_comm_est_hardirq))
		ret = FAIL("COMM_EST was not delivered in hard IRQ: the check proves nothing");
out:
	kv_qp_destroy(&a);
	kv_qp_destroy(&b);
	return ret;
}

/* ---- setup ----------------------------------------------------------------------------- */

static int setup_gid(struct kv *t)
{
	struct ib_port_attr pa;
	u32 i, len;
	int r;

	t->port = rdma_start_port(t->ib);
	if (!rdma_protocol_roce(t->ib, t->port))
		return FAIL("port %u is not RoCE", t->port);
	r = ib_query_port(t->ib, t->port, &pa);
	if (r)
		return FAIL("ib_query_port: %d", r);
	t->mtu = min_t(enum ib_mtu, pa.active_mtu, IB_MTU_4096);
	len = t->ib->port_data[t->port].immutable.gid_tbl_len;
	for (i = 0; i < len; i++) {
		const struct ib_gid_attr *ga = rdma_get_gid_attr(t->ib, t->port, i);
		u16 vlan;

		if (IS_ERR(ga))
			continue;
		if (ga->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		    ipv6_addr_v4mapped((const struct in6_addr *)ga->gid.raw)) {
			t->gid_index = i;
			t->gid = ga->gid;
			r = rdma_read_gid_l2_fields(ga, &vlan, t->mac);
			rdma_put_gid_attr(ga);
			if (r)
				return FAIL("rdma_read_gid_l2_fields: %d", r);
			pr_info(KV "# %s port %u: RoCE v2 GID %u %pI6 (%pI4), MAC %pM, MTU %d\n",
				dev_name(&t->ib->dev), t->port, i, t->gid.raw, &t->gid.raw[12], t->mac,
				ib_mtu_enum_to_int(t->mtu));
			return 0;
		}
		rdma_put_gid_attr(ga);
	}
	return FAIL("no RoCE v2 IPv4 GID on port %u", t->port);
}

static int setup_pd_buffers(struct kv *t)
{
	t->pd = ib_alloc_pd(t->ib, IB_PD_UNSAFE_GLOBAL_RKEY);
	if (IS_ERR(t->pd)) {
		t->pd_rkey_err = PTR_ERR(t->pd);
		t->pd = ib_alloc_pd(t->ib, 0);
		if (IS_ERR(t->pd)) {
			int r = PTR_ERR(t->pd);

			t->pd = NULL;
			return FAIL("ib_alloc_pd: %d", r);
		}
	} else {
		t->global_rkey = true;
	}
	t->lkey = t->pd->local_dma_lkey;
	pr_info(KV "# pd local_dma_lkey 0x%x, %s\n", t->lkey,
		t->global_rkey ? "unsafe global rkey available" : "no global rkey");
	if (t->ib->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS) {
		t->fr = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, KV_FR_PAGES);
		if (IS_ERR(t->fr)) {
			int r = PTR_ERR(t->fr);

			t->fr = NULL;
			return FAIL("ib_alloc_mr(IB_MR_TYPE_MEM_REG, %d): %d", KV_FR_PAGES, r);
		}
		pr_info(KV "# fast registration: max_fast_reg_page_list_len %u, MR rkey 0x%x\n",
			t->ib->attrs.max_fast_reg_page_list_len, t->fr->rkey);
	}
	t->src = kmalloc(KV_BUF, GFP_KERNEL);
	t->dst = kmalloc(KV_BUF, GFP_KERNEL);
	if (!t->src || !t->dst)
		return FAIL("kmalloc of the data buffers failed");
	t->src_dma = ib_dma_map_single(t->ib, t->src, KV_BUF, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(t->ib, t->src_dma)) {
		t->src_dma = 0;
		return FAIL("ib_dma_map_single failed");
	}
	t->dst_dma = ib_dma_map_single(t->ib, t->dst, KV_BUF, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(t->ib, t->dst_dma)) {
		t->dst_dma = 0;
		return FAIL("ib_dma_map_single failed");
	}
	/* The UD receive buffer: coherent DMA memory when the device does real DMA. */
	t->coh_len = 4096;
	if (!ib_uses_virt_dma(t->ib)) {
		t->coh = dma_alloc_coherent(t->ib->dma_device, t->coh_len, &t->coh_dma, GFP_KERNEL);
		if (!t->coh)
			return FAIL("dma_alloc_coherent failed");
		t->coh_is_coherent = true;
	} else {
		t->coh = kmalloc(t->coh_len, GFP_KERNEL);
		if (!t->coh)
			return FAIL("kmalloc failed");
		t->coh_dma = ib_dma_map_single(t->ib, t->coh, t->coh_len, DMA_BIDIRECTIONAL);
		if (ib_dma_mapping_error(t->ib, t->coh_dma)) {
			kfree(t->coh);
			t->coh = NULL;
			return FAIL("ib_dma_map_single failed");
		}
	}
	return 0;
}

static int setup_cqs(struct kv *t)
{
	int r = 0;

	t->cq_direct = kv_cq_alloc(t, "direct", 256, IB_POLL_DIRECT, false, &r);
	if (!t->cq_direct)
		return FAIL("ib_alloc_cq(IB_POLL_DIRECT): %d", r);
	t->cq_soft = kv_cq_alloc(t, "softirq", 256, IB_POLL_SOFTIRQ, false, &r);
	if (!t->cq_soft)
		return FAIL("ib_alloc_cq(IB_POLL_SOFTIRQ): %d", r);
	t->cq_raw = kv_cq_alloc(t, "raw", KV_RAW_CQE, 0, true, &r);
	if (!t->cq_raw)
		return FAIL("ib_create_cq: %d", r);
	t->cq_direct2 = kv_cq_alloc(t, "direct2", 256, IB_POLL_DIRECT, false, &r);
	if (!t->cq_direct2)
		return FAIL("ib_alloc_cq(IB_POLL_DIRECT): %d", r);
	t->cq_ud = kv_cq_alloc(t, "ud", 64, IB_POLL_DIRECT, false, &r);
	if (!t->cq_ud)
		return FAIL("ib_alloc_cq(IB_POLL_DIRECT): %d", r);
	return 0;
}

static int setup_qps(struct kv *t)
{
	int r;

	r = kv_qp_create(t, &t->qa, IB_QPT_RC, t->cq_direct, 64, 128, 13, 64);
	if (!r)
		r = kv_qp_create(t, &t->qb, IB_QPT_RC, t->cq_soft, 64, 128, 13, 64);
	if (!r)
		r = kv_qp_create(t, &t->sa, IB_QPT_RC, t->cq_raw, 16, 16, 1, 0);
	if (!r)
		r = kv_qp_create(t, &t->sb, IB_QPT_RC, t->cq_direct2, 16, 128, 1, 0);
	if (!r)
		r = kv_qp_create(t, &t->ua, IB_QPT_UD, t->cq_ud, 8, 8, 1, 0);
	if (!r)
		r = kv_qp_create(t, &t->ub, IB_QPT_UD, t->cq_ud, 8, 8, 1, 0);
	if (r)
		return FAIL("ib_create_qp: %d", r);
	pr_info(KV "# qa %u qb %u sa %u sb %u ua %u ub %u; qa cap: send %u recv %u sge %u inline %u; sa send %u\n",
		t->qa.qp->qp_num, t->qb.qp->qp_num, t->sa.qp->qp_num, t->sb.qp->qp_num,
		t->ua.qp->qp_num, t->ub.qp->qp_num, t->qa.cap.max_send_wr, t->qa.cap.max_recv_wr,
		t->qa.cap.max_send_sge, t->qa.cap.max_inline_data, t->sa.cap.max_send_wr);
	return 0;
}

static int setup_connect(struct kv *t)
{
	int r;

	r = kv_rc_connect(t, t->qa.qp, t->qb.qp->qp_num, 100, 200);
	if (!r)
		r = kv_rc_connect(t, t->qb.qp, t->qa.qp->qp_num, 200, 100);
	if (!r)
		r = kv_rc_connect(t, t->sa.qp, t->sb.qp->qp_num, 0xfffff0, 0x300);
	if (!r)
		r = kv_rc_connect(t, t->sb.qp, t->sa.qp->qp_num, 0x300, 0xfffff0);
	if (!r)
		r = kv_ud_up(t, t->ua.qp);
	if (!r)
		r = kv_ud_up(t, t->ub.qp);
	return r;
}

static void kv_teardown(struct kv *t)
{
	/* QPs first (they hold the CQs and the PD), then the AH, the CQs, the PD. */
	kv_qp_destroy(&t->qa);
	kv_qp_destroy(&t->qb);
	kv_qp_destroy(&t->sa);
	kv_qp_destroy(&t->sb);
	kv_qp_destroy(&t->ua);
	kv_qp_destroy(&t->ub);
	if (t->ah)
		rdma_destroy_ah(t->ah, RDMA_DESTROY_AH_SLEEPABLE);
	if (t->fr)
		ib_dereg_mr(t->fr);
	kv_cq_free(t->cq_direct);
	kv_cq_free(t->cq_soft);
	kv_cq_free(t->cq_raw);
	kv_cq_free(t->cq_direct2);
	kv_cq_free(t->cq_ud);
	if (t->coh) {
		if (t->coh_is_coherent) {
			dma_free_coherent(t->ib->dma_device, t->coh_len, t->coh, t->coh_dma);
		} else {
			ib_dma_unmap_single(t->ib, t->coh_dma, t->coh_len, DMA_BIDIRECTIONAL);
			kfree(t->coh);
		}
	}
	if (t->src_dma)
		ib_dma_unmap_single(t->ib, t->src_dma, KV_BUF, DMA_BIDIRECTIONAL);
	if (t->dst_dma)
		ib_dma_unmap_single(t->ib, t->dst_dma, KV_BUF, DMA_BIDIRECTIONAL);
	kfree(t->src);
	kfree(t->dst);
	if (t->pd)
		ib_dealloc_pd(t->pd);
}

struct kv_check {
	const char *name;
	int (*fn)(struct kv *t);
	bool setup;	/* a failure skips everything after it */
};

/*
 * Kernel ULPs map scatterlists on the device's DMA device (ib_dma_map_sg), which merges
 * adjacent pages into segments up to its max_segment_size; one SGE describes up to a whole
 * message, so that limit must not be below the port's max_msg_sz (the PCI default is 64 KiB:
 * NVMe-oF's 1 MiB transfers mapped merged segments of more, which DMA-API debug reported).
 */
static int check_dma_max_seg_size(struct kv *t)
{
	struct ib_port_attr pa;
	unsigned int seg = ib_dma_max_seg_size(t->ib);
	int r;

	r = ib_query_port(t->ib, t->port, &pa);
	if (r)
		return FAIL("ib_query_port: %d", r);
	if (seg < pa.max_msg_sz)
		return FAIL("DMA max segment size %u is below the port's max_msg_sz %u", seg,
			    pa.max_msg_sz);
	pr_info(KV "# DMA max segment size %u, max_msg_sz %u\n", seg, pa.max_msg_sz);
	return 0;
}

static const struct kv_check kv_checks[] = {
	{ "find_roce_v2_gid", setup_gid, true },
	{ "alloc_pd_and_map_buffers", setup_pd_buffers, true },
	{ "alloc_cqs", setup_cqs, true },
	{ "create_qps", setup_qps, true },
	{ "connect_rc_and_ud", setup_connect, true },
	{ "dma_max_seg_size_covers_a_message", check_dma_max_seg_size },
	{ "send_1B", check_send_1b },
	{ "send_4KiB_softirq_to_direct", check_send_4k_reverse },
	{ "send_64KiB", check_send_64k },
	{ "send_64KiB_3sge", check_send_64k_3sge },
	{ "send_13sge", check_send_13sge },
	{ "send_with_imm", check_send_with_imm },
	{ "rdma_write", check_rdma_write },
	{ "rdma_write_with_imm", check_rdma_write_with_imm },
	{ "rdma_read", check_rdma_read },
	{ "inline_send_64B", check_inline_send },
	{ "unsignaled_then_signaled", check_unsignaled },
	{ "chain_of_32", check_chain_32 },
	{ "post_and_poll_in_atomic_context", check_atomic_context },
	{ "cq_event_after_req_notify", check_notify_event },
	{ "req_notify_reports_missed_events", check_notify_missed },
	{ "full_send_queue_enomem", check_full_queue },
	{ "bad_lkey_loc_prot_err_then_flush", check_bad_lkey },
	{ "ud_ah_in_atomic_context_grh_ipv4", check_ud },
	{ "query_ah_returns_the_av", check_query_ah },
	{ "cq_of_max_cqe_and_one_more", check_max_cqe },
	{ "zero_length_write_with_imm_rkey0", check_zero_len_write_imm },
	{ "zero_length_read_rkey0", check_zero_len_read },
	{ "fast_reg_write_read_inv_stale_rkey_send_with_inv", check_fastreg },
	{ "fast_reg_of_a_valid_mr_fails", check_fastreg_valid_mr },
	{ "fast_reg_of_max_fast_reg_page_list_len_pages", check_fastreg_max_pages },
	{ "comm_est_in_hard_irq_with_ahs_under_an_irq_safe_lock",
	  check_comm_est_with_ahs_under_cm_lock },
	{ "drain_live_qps", check_drain },
};

static void kv_run(struct ib_device *ib)
{
	struct kv *t = kzalloc(sizeof(*t), GFP_KERNEL);
	ktime_t start = ktime_get();
	unsigned int i;
	int r;

	for (i = 0; i < KV_NTAGS; i++) {
		kv_tags[i].cqe.done = kv_done;
		kv_tags[i].id = i;
	}
	kv_next_tag = 0;
	kv_n = kv_passed = kv_failed = kv_skipped = 0;
	kv_abort = false;
	kv_is_rxe = ib->ops.driver_id == RDMA_DRIVER_RXE;
	pr_info(KV "testing %s\n", dev_name(&ib->dev));
	pr_info(KV "1..%zu\n", ARRAY_SIZE(kv_checks));
	if (!t) {
		pr_info(KV "not ok 1 - setup: out of memory\n");
		pr_info(KV "0 passed, 1 failed\n");
		return;
	}
	t->ib = ib;
	for (i = 0; i < ARRAY_SIZE(kv_checks); i++) {
		const struct kv_check *c = &kv_checks[i];

		kv_n++;
		if (kv_abort) {
			kv_failed++;
			pr_info(KV "not ok %d - %s: not run, setup failed\n", kv_n, c->name);
			continue;
		}
		kv_why[0] = 0;
		r = c->fn(t);
		if (r == 0) {
			kv_passed++;
			pr_info(KV "ok %d - %s\n", kv_n, c->name);
		} else if (r == KV_SKIP) {
			kv_skipped++;
			pr_info(KV "ok %d - %s # SKIP %s\n", kv_n, c->name, kv_why);
		} else {
			kv_failed++;
			pr_info(KV "not ok %d - %s: %s\n", kv_n, c->name,
				kv_why[0] ? kv_why : "failed");
			if (c->setup)
				kv_abort = true;
		}
	}
	kv_teardown(t);
	kfree(t);
	pr_info(KV "# %lld ms\n", ktime_ms_delta(ktime_get(), start));
	if (kv_skipped)
		pr_info(KV "%d passed, %d failed, %d skipped\n", kv_passed, kv_failed, kv_skipped);
	else
		pr_info(KV "%d passed, %d failed\n", kv_passed, kv_failed);
}

/* ---- churn ----------------------------------------------------------------------------- */

struct kv_churn_counts {
	unsigned int created, refused, other;
};

/* Counts a create's result; true when it made the object. */
static bool kv_churn_made(struct kv_churn_counts *c, const char *what, long r)
{
	if (!r) {
		c->created++;
		return true;
	}
	if (r == -ENOMEM) {
		c->refused++;
	} else {
		c->other++;
		pr_err(KV "churn: %s failed with %ld (only ENOMEM is expected)\n", what, r);
	}
	return false;
}

static struct ib_qp *kv_churn_qp(struct kv_churn_counts *c, struct ib_pd *pd, struct ib_cq *cq,
				 enum ib_qp_type type)
{
	struct ib_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = type,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
	};
	struct ib_qp *qp = ib_create_qp(pd, &attr);

	return kv_churn_made(c, type == IB_QPT_RC ? "RC QP" : "UD QP",
			     IS_ERR(qp) ? PTR_ERR(qp) : 0) ? qp : NULL;
}

static void kv_churn_round(struct kv *t, struct kv_churn_counts *c, unsigned int round)
{
	static const enum ib_poll_context ctxs[] = {
		IB_POLL_DIRECT, IB_POLL_SOFTIRQ, IB_POLL_WORKQUEUE,
	};
	struct rdma_ah_attr ah_attr;
	struct ib_qp *rc, *ud;
	struct ib_ah *ah;
	struct ib_mr *mr;
	struct ib_pd *pd;
	struct ib_cq *cq;

	pd = ib_alloc_pd(t->ib, 0);
	if (!kv_churn_made(c, "PD", IS_ERR(pd) ? PTR_ERR(pd) : 0))
		return;
	cq = ib_alloc_cq(t->ib, NULL, 64, 0, ctxs[round % ARRAY_SIZE(ctxs)]);
	if (!kv_churn_made(c, "CQ", IS_ERR(cq) ? PTR_ERR(cq) : 0)) {
		ib_dealloc_pd(pd);
		return;
	}
	rc = kv_churn_qp(c, pd, cq, IB_QPT_RC);
	ud = kv_churn_qp(c, pd, cq, IB_QPT_UD);
	kv_ah_attr(t, &ah_attr);
	ah = rdma_create_ah(pd, &ah_attr, RDMA_CREATE_AH_SLEEPABLE);
	if (!kv_churn_made(c, "AH", IS_ERR(ah) ? PTR_ERR(ah) : 0))
		ah = NULL;
	mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, KV_FR_PAGES);
	if (!kv_churn_made(c, "fast-registration MR", IS_ERR(mr) ? PTR_ERR(mr) : 0))
		mr = NULL;
	if (mr)
		ib_dereg_mr(mr);
	if (ah)
		rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
	if (ud)
		ib_destroy_qp(ud);
	if (rc)
		ib_destroy_qp(rc);
	ib_free_cq(cq);
	ib_dealloc_pd(pd);
}

static int kv_churn(struct ib_device *ib)
{
	struct kv_churn_counts c = {};
	struct kv *t = kzalloc(sizeof(*t), GFP_KERNEL);
	unsigned int i;

	if (!t)
		return -ENOMEM;
	t->ib = ib;
	if (setup_gid(t)) {
		pr_err(KV "churn: %s\n", kv_why);
		kfree(t);
		return -EIO;
	}
	for (i = 0; i < churn; i++)
		kv_churn_round(t, &c, i);
	kfree(t);
	pr_info(KV "churn: %u rounds, %u created, %u refused with ENOMEM, %u other errors\n",
		churn, c.created, c.refused, c.other);
	return c.other ? -EIO : 0;
}

/* ---- the client ------------------------------------------------------------------------ */

static int kv_add(struct ib_device *ib)
{
	mutex_lock(&kv_lock);
	if (!kv_found && !strcmp(dev_name(&ib->dev), dev))
		kv_found = ib;
	mutex_unlock(&kv_lock);
	return 0;
}

static void kv_remove(struct ib_device *ib, void *client_data)
{
	/* Waits for a running test. */
	mutex_lock(&kv_lock);
	if (kv_found == ib)
		kv_found = NULL;
	mutex_unlock(&kv_lock);
}

static struct ib_client kv_client = {
	.name = "ferrdma_kverbs_test",
	.add = kv_add,
	.remove = kv_remove,
};

static noinline int kv_plant_uaf(void)
{
	char *p = kmalloc(64, GFP_KERNEL);
	int v;

	if (!p)
		return -ENOMEM;
	memset(p, 0x5a, 64);
	kfree(p);
	v = READ_ONCE(p[17]);
	pr_info(KV "planted use-after-free read %#x\n", v);
	return -ECANCELED;
}

static int __init kv_init(void)
{
	int r;

	if (plant_uaf)
		return kv_plant_uaf();
	r = ib_register_client(&kv_client);

	if (r)
		return r;
	mutex_lock(&kv_lock);
	if (!kv_found) {
		mutex_unlock(&kv_lock);
		ib_unregister_client(&kv_client);
		pr_err(KV "no RDMA device named %s\n", dev);
		return -EINVAL;
	}
	if (churn) {
		r = kv_churn(kv_found);
	} else {
		kv_run(kv_found);
		r = 0;
	}
	mutex_unlock(&kv_lock);
	if (r)
		ib_unregister_client(&kv_client);
	return r;
}

static void __exit kv_exit(void)
{
	ib_unregister_client(&kv_client);
}

module_init(kv_init);
module_exit(kv_exit);
MODULE_DESCRIPTION("Kernel verbs tests of an RDMA device (ferrdma test harness)");
MODULE_LICENSE("GPL");
