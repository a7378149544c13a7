// SPDX-License-Identifier: GPL-2.0
/*
 * verbs-datacheck: moves seeded, self-describing data through every data-path operation of
 * a verbs device and checks every byte and every completion.
 *
 *   verbs-datacheck DEVICE [OPTIONS]                 loopback: a forked server on DEVICE
 *                                                    (or --peer-dev DEV2), over a socketpair
 *   verbs-datacheck DEVICE --server [-p PORT]        wait for a client on TCP PORT
 *   verbs-datacheck DEVICE --client HOST [-p PORT]   drive a server
 *
 * Options (all but -g/-p/--peer-dev are the client's; the server follows the client):
 *   -g IDX       GID index (default: the port's RoCE v2 IPv4-mapped GID)
 *   -o OPS       comma list of send,send_imm,write,write_imm,read,ud (default: all)
 *   -s SIZES     comma list of message sizes in bytes (default: 1 B .. 8 MiB, see below)
 *   -q QPS       QPs used at once per operation (default 3)
 *   -k MSGS      messages in flight per QP and case at most (default 8)
 *   -S SEED      pattern seed (default: from the clock; printed)
 *   -t SECONDS   completion wait per case (default 60)
 *
 * The client is the requester: SEND and WRITE move data client -> server, READ server ->
 * client; run it the other way round for the other direction. Each size is run in cases:
 * one SGE, the most SGEs both ends allow (max_send_sge / max_sge_rd / the receiver's
 * max_recv_sge, from the created QPs), and inline (SEND/WRITE/UD, sizes up to the QP's
 * max_inline_data). Every case posts up to MSGS messages on each of QPS QPs at once, each
 * in its own slot of a registered buffer, at a varying unaligned offset (some cross a page
 * boundary); SGE pieces are separated by gaps. Before a case the receiving side fills each
 * slot with poison: the inverse of the expected byte where the message goes, a seeded
 * filler elsewhere. Byte O of message N carries a hash of (seed, N, O), so a misplaced,
 * stale, duplicated or torn byte shows; so does a byte written in a gap or past the end.
 * Completions are checked: status, opcode, byte_len (receives, READ), wr_id order, qp_num,
 * IBV_WC_WITH_IMM and imm_data, and for UD IBV_WC_GRH, src_qp and the 40-byte GRH holding
 * the sender's IPv4 header. On the first error the checking side prints the operation,
 * message number, first bad offset and expected vs got, and both ends exit 1.
 *
 * Prints a line per operation and size, and a final PASS line with the bytes verified.
 * Device limits (max_sge, max_sge_rd, max_inline_data, MTU, max_msg_sz, max_qp_rd_atom)
 * are queried at run time. The TCP exchange is native-endian: both ends run this program
 * on the same architecture (a magic number refuses anything else).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "verbs-common.h"

#define DC_MAGIC	0x4b434844u	/* "DHCK" */
#define DC_VERSION	1
#define MAX_QPS		8
#define MAX_K		16
#define MAX_SGE		32
#define GRH_LEN		40
#define PAGE		4096u
#define QKEY		0x11111111u
#define MAX_SIZE	(8u << 20)
/* Room in a slot besides the message: the offset (< PAGE), gaps (< 32 per SGE), a tail. */
#define SLOT_SLACK	(PAGE + MAX_SGE * 32 + GRH_LEN + 64)

enum op { OP_SEND, OP_SEND_IMM, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_UD, OP_COUNT };

static const char *const op_names[OP_COUNT] = {
	"send", "send_imm", "write", "write_imm", "read", "ud",
};

/* Sent by each end after creating its QPs. */
struct hello {
	uint32_t magic, version;
	uint64_t seed;
	uint32_t nqp, kmax;
	uint64_t area;		/* bytes per area; a QP has a source area then a target area */
	uint64_t addr;		/* the registered buffer */
	uint32_t rkey;
	uint32_t rc_qpn[MAX_QPS], ud_qpn[MAX_QPS];
	uint8_t gid[16];
	uint32_t mtu;		/* enum ibv_mtu */
	uint32_t max_recv_sge, rd_atom;
};

/* One case, client -> server; phase 0: prepare, phase 1: the client's side is done. */
struct casehdr {
	uint32_t phase, op, size, k;
	uint32_t src_sge, dst_sge, inl;
	uint64_t base_seq;
};

struct reply {
	uint32_t ok;
	uint64_t bytes;
	char text[400];
};

struct tcase {
	enum op op;
	uint32_t size, k, src_sge, dst_sge;
	bool inl;
	uint64_t base_seq;
};

static struct tp_dev dev;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *rc[MAX_QPS], *ud[MAX_QPS];
static struct ibv_ah *ah;
static struct ibv_mr *mr;
static uint8_t *buf;
static struct hello me, peer;
static uint32_t nqp = 3, kmax = 8, max_send_sge, max_recv_sge, max_inline, max_rd_sge;
static uint32_t path_mtu_bytes;
static int timeout_s = 60, gid_override = -1;
static int sock = -1;
static const char *role = "client";
static char failure[400];

/* The splitmix64 finaliser: good mixing, cheap under emulation. */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint64_t msg_key(uint64_t seed, uint64_t seq)
{
	return mix64(seed * 0x9e3779b97f4a7c15ull + seq + 1);
}

/* The byte at offset @off of the message keyed @key. */
static inline uint8_t pat_byte(uint64_t key, uint64_t off)
{
	return mix64(key ^ ((off >> 3) * 0xd6e8feb86659fd93ull)) >> ((off & 7) * 8);
}

/* Writes bytes [@off, @off + @len) of the message keyed @key to @p, inverted if @invert. */
static void pat_fill(uint8_t *p, uint64_t key, uint64_t off, uint64_t len, bool invert)
{
	uint8_t x = invert ? 0xff : 0;
	uint64_t i = 0;

	while (i < len && ((off + i) & 7))
		p[i] = pat_byte(key, off + i) ^ x, i++;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = mix64(key ^ (((off + i) >> 3) * 0xd6e8feb86659fd93ull));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		/* Byte b of the word is bits 8b..8b+7: little-endian order, one store. */
		w ^= invert ? ~0ull : 0;
		memcpy(p + i, &w, 8);
#else
		int b;

		for (b = 0; b < 8; b++)
			p[i + b] = (uint8_t)(w >> (8 * b)) ^ x;
#endif
	}
	for (; i < len; i++)
		p[i] = pat_byte(key, off + i) ^ x;
}

/* The immediate data of message @seq (network order on the wire, as verbs keeps it). */
static uint32_t imm_of(uint64_t seq)
{
	return htonl((uint32_t)msg_key(me.seed ^ 0x1bad1dea, seq));
}

static void die_peer_io(const char *what)
{
	tp_die("%s: the peer connection failed (%s)", what, errno ? strerror(errno) : "closed");
}

static void xsend(const void *p, size_t n)
{
	const uint8_t *c = p;

	while (n) {
		ssize_t r = send(sock, c, n, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die_peer_io("send");
		c += r;
		n -= r;
	}
}

static void xrecv(void *p, size_t n)
{
	uint8_t *c = p;

	while (n) {
		ssize_t r = recv(sock, c, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = 0;
			die_peer_io("recv");
		}
		c += r;
		n -= r;
	}
}

/* Geometry shared by both ends: a slot holds one message with its offset, gaps and tail. */
static uint64_t area_for(uint32_t maxsize)
{
	return ((uint64_t)maxsize + SLOT_SLACK + PAGE - 1) / PAGE * PAGE;
}

static uint64_t stride_of(uint32_t size)
{
	return area_for(size);
}

static uint32_t k_of(uint32_t size)
{
	uint64_t k = me.area / stride_of(size);

	return k > kmax ? kmax : (uint32_t)k;
}

/* The offset of message @seq in its slot: unaligned, and for small messages page-crossing. */
static uint32_t head_off(uint64_t seq, uint32_t salt)
{
	static const uint32_t offs[] = { 0, 1, 4093, 7, 4095, 61, 2048 + 3, 4090 };

	return offs[(seq + salt) % (sizeof(offs) / sizeof(offs[0]))];
}

/* Where slot @s of QP @q's source or target area starts in an end's buffer. */
static uint64_t slot_off(const struct hello *h, uint32_t q, bool target, uint32_t size, uint32_t s)
{
	return (uint64_t)q * 2 * h->area + (target ? h->area : 0) + s * stride_of(size);
}

static uint8_t *slot(uint32_t q, bool target, uint32_t size, uint32_t s)
{
	return buf + slot_off(&me, q, target, size, s);
}

/*
 * A scatter/gather layout: @n pieces of a @len-byte message starting @head bytes into a
 * slot, of uneven lengths, with a gap of 1..31 bytes after each. Returns the extent used.
 */
struct piece {
	uint32_t off, len;	/* in the slot */
	uint32_t moff;		/* offset in the message */
};

static uint32_t layout(struct piece *pc, uint32_t n, uint32_t len, uint32_t head, uint64_t seq)
{
	uint32_t i, off = head, moff = 0, left = len;

	for (i = 0; i < n; i++) {
		uint32_t rest = n - i - 1, take;

		if (!rest) {
			take = left;
		} else {
			/* Between 1 and twice the fair share, leaving one byte per later piece. */
			uint32_t fair = left / (rest + 1);
			uint32_t want = fair ? fair / 2 + (uint32_t)(mix64(seq * 31 + i) % (fair + 1)) : 1;

			take = want < 1 ? 1 : want;
			if (take > left - rest)
				take = left - rest;
		}
		pc[i].off = off;
		pc[i].len = take;
		pc[i].moff = moff;
		off += take + 1 + (uint32_t)((seq + i * 11) % 31);
		moff += take;
		left -= take;
	}
	return off;
}

/*
 * Fills a slot: the message's bytes (inverted for poison, or the pattern for a source) at
 * the pieces, a seeded filler elsewhere (up to @extent + 64).
 */
static void fill_slot(uint8_t *p, const struct piece *pc, uint32_t n, uint32_t extent,
		      uint64_t seq, bool poison)
{
	uint64_t key = msg_key(me.seed, seq), fkey = msg_key(me.seed ^ 0xf111e7, seq);
	uint32_t i;

	pat_fill(p, fkey, 0, extent + 64, false);
	for (i = 0; i < n; i++)
		pat_fill(p + pc[i].off, key, pc[i].moff, pc[i].len, poison);
}

static void fail_case(const struct tcase *c, uint64_t seq, uint32_t q, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void fail_case(const struct tcase *c, uint64_t seq, uint32_t q, const char *fmt, ...)
{
	char detail[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	snprintf(failure, sizeof(failure),
		 "%s (%s) size %u, message %llu on QP %u (src_sge %u, dst_sge %u%s): %s",
		 op_names[c->op], role, c->size, (unsigned long long)seq, q, c->src_sge,
		 c->dst_sge, c->inl ? ", inline" : "", detail);
}

/*
 * Checks a slot after the message arrived: the pieces hold the pattern, everything else
 * (head, gaps, tail) still holds the filler. @skip bytes at @skip_off are not compared
 * (the GRH). Returns the message bytes verified, or -1 with `failure` set.
 */
static int64_t check_slot(const struct tcase *c, uint8_t *p, const struct piece *pc, uint32_t n,
			  uint32_t extent, uint64_t seq, uint32_t q, uint32_t skip_off,
			  uint32_t skip)
{
	static uint8_t *want;
	static uint32_t want_len;
	uint32_t i, o, len = extent + 64, bad = 0, first = 0, last = 0;
	int64_t verified = 0;

	/* The expected image, built as fast as the source was; compared in one go. */
	if (want_len < len) {
		free(want);
		want = malloc(len);
		if (!want)
			tp_die("out of memory");
		want_len = len;
	}
	fill_slot(want, pc, n, extent, seq, false);
	if (skip)
		memcpy(want + skip_off, p + skip_off, skip);
	for (i = 0; i < n; i++)
		verified += pc[i].len;
	if (!memcmp(p, want, len))
		return verified;

	for (o = 0; o < len; o++) {
		if (p[o] != want[o]) {
			if (!bad++)
				first = o;
			last = o;
		}
	}
	for (i = 0; i < n; i++)
		if (first >= pc[i].off && first < pc[i].off + pc[i].len)
			break;
	if (i < n) {
		uint32_t moff = pc[i].moff + (first - pc[i].off);

		fail_case(c, seq, q,
			  "first bad byte at message offset %u (SGE %u, slot offset %u): expected 0x%02x, got 0x%02x%s; %u bad byte(s), the last at slot offset %u",
			  moff, i, first, want[first], p[first],
			  p[first] == (uint8_t)~want[first] ? " (the poison: never written)" : "",
			  bad, last);
	} else {
		fail_case(c, seq, q,
			  "a byte outside the message was written: slot offset %u (the message starts at %u): expected filler 0x%02x, got 0x%02x; %u bad byte(s), the last at slot offset %u",
			  first, pc[0].off, want[first], p[first], bad, last);
	}
	return -1;
}

/* --- QPs ------------------------------------------------------------------------------- */

static void rc_to_rts(struct ibv_qp *qp, uint32_t remote_qpn, uint32_t rd_atom)
{
	struct ibv_qp_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = TP_PORT;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (ret)
		tp_die("RC QP %u to INIT: %s", qp->qp_num, strerror(ret));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = me.mtu < peer.mtu ? me.mtu : peer.mtu;
	a.dest_qp_num = remote_qpn;
	a.max_dest_rd_atomic = rd_atom;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
	a.ah_attr.grh.sgid_index = dev.gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = TP_PORT;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (ret)
		tp_die("RC QP %u to RTR: %s", qp->qp_num, strerror(ret));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 18;		/* about 1 s: no spurious retransmissions under emulation */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = rd_atom;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret)
		tp_die("RC QP %u to RTS: %s", qp->qp_num, strerror(ret));
}

static void ud_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = TP_PORT;
	a.qkey = QKEY;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (!ret) {
		a.qp_state = IBV_QPS_RTR;
		ret = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	}
	if (!ret) {
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	if (ret)
		tp_die("UD QP %u to RTS: %s", qp->qp_num, strerror(ret));
}

static struct ibv_qp *create_qp(enum ibv_qp_type type, const struct ibv_device_attr *da)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = {
			.max_send_wr = MAX_K * 2,
			.max_recv_wr = MAX_K * 2,
			.max_send_sge = da->max_sge < MAX_SGE ? da->max_sge : MAX_SGE,
			.max_recv_sge = da->max_sge < MAX_SGE ? da->max_sge : MAX_SGE,
		},
		.qp_type = type,
		.sq_sig_all = 1,
	};
	/* The most inline data the provider grants: ask for less until it agrees. */
	static const uint32_t inl[] = { 1024, 512, 256, 220, 128, 101, 64, 32, 0 };
	struct ibv_qp *qp = NULL;
	unsigned int i;

	for (i = 0; !qp && i < sizeof(inl) / sizeof(inl[0]); i++) {
		a.cap.max_inline_data = inl[i];
		qp = ibv_create_qp(dev.pd, &a);
	}
	if (!qp)
		tp_die("ibv_create_qp(%s, %u SGEs): %s", type == IBV_QPT_RC ? "RC" : "UD",
		       a.cap.max_send_sge, strerror(errno));
	/* The created QP's capabilities, as the provider granted them. */
	if (!max_send_sge || a.cap.max_send_sge < max_send_sge)
		max_send_sge = a.cap.max_send_sge;
	if (!max_recv_sge || a.cap.max_recv_sge < max_recv_sge)
		max_recv_sge = a.cap.max_recv_sge;
	if (a.cap.max_inline_data < max_inline)
		max_inline = a.cap.max_inline_data;
	return qp;
}

/* Opens the device, creates the CQs, QPs and the buffer; fills in `me` (not the seed). */
static void setup(const char *name, uint32_t maxsize)
{
	struct ibv_device_attr da;
	uint64_t total;
	uint32_t q;
	int ret;

	tp_open(&dev, name);
	if (gid_override >= 0) {
		union ibv_gid g;

		if (ibv_query_gid(dev.ctx, TP_PORT, gid_override, &g))
			tp_die("ibv_query_gid(%s, index %d) failed", name, gid_override);
		dev.gid_index = gid_override;
		dev.gid = g;
	}
	if (ibv_query_device(dev.ctx, &da))
		tp_die("ibv_query_device(%s) failed", name);
	max_rd_sge = da.max_sge_rd ? (uint32_t)da.max_sge_rd : (uint32_t)da.max_sge;
	scq = ibv_create_cq(dev.ctx, 2 * MAX_QPS * MAX_K * 2, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, 2 * MAX_QPS * MAX_K * 2, NULL, NULL, 0);
	if (!scq || !rcq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	max_inline = ~0u;
	for (q = 0; q < nqp; q++) {
		rc[q] = create_qp(IBV_QPT_RC, &da);
		ud[q] = create_qp(IBV_QPT_UD, &da);
		ud_to_rts(ud[q]);
	}
	if (max_rd_sge > max_send_sge)
		max_rd_sge = max_send_sge;

	me.magic = DC_MAGIC;
	me.version = DC_VERSION;
	me.nqp = nqp;
	me.kmax = kmax;
	me.area = area_for(maxsize);
	total = me.area * 2 * nqp;
	ret = posix_memalign((void **)&buf, PAGE, total);
	if (ret)
		tp_die("allocating %llu bytes: %s", (unsigned long long)total, strerror(ret));
	memset(buf, 0, total);
	mr = ibv_reg_mr(dev.pd, buf, total, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ);
	if (!mr)
		tp_die("ibv_reg_mr(%llu bytes): %s", (unsigned long long)total, strerror(errno));
	me.addr = (uintptr_t)buf;
	me.rkey = mr->rkey;
	for (q = 0; q < nqp; q++) {
		me.rc_qpn[q] = rc[q]->qp_num;
		me.ud_qpn[q] = ud[q]->qp_num;
	}
	memcpy(me.gid, dev.gid.raw, 16);
	me.mtu = dev.port_attr.active_mtu;
	me.max_recv_sge = max_recv_sge;
	me.rd_atom = da.max_qp_rd_atom;
	if ((uint32_t)da.max_qp_init_rd_atom < me.rd_atom)
		me.rd_atom = da.max_qp_init_rd_atom;
	if (me.rd_atom > 8)
		me.rd_atom = 8;
	if (maxsize > dev.port_attr.max_msg_sz)
		tp_die("%s: size %u is over the port's max_msg_sz %u", name, maxsize,
		       dev.port_attr.max_msg_sz);
	tp_note("%s: %u RC + %u UD QPs, max_send_sge %u, max_recv_sge %u, max_sge_rd %u, max_inline_data %u, max_qp_rd_atom %d, %llu-byte buffer",
		role, nqp, nqp, max_send_sge, max_recv_sge, max_rd_sge, max_inline,
		da.max_qp_rd_atom, (unsigned long long)total);
}

static void connect_qps(void)
{
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.port_num = TP_PORT,
	};
	uint32_t q, rd = me.rd_atom < peer.rd_atom ? me.rd_atom : peer.rd_atom;

	if (!rd)
		rd = 1;
	for (q = 0; q < nqp; q++)
		rc_to_rts(rc[q], peer.rc_qpn[q], rd);
	memcpy(aa.grh.dgid.raw, peer.gid, 16);
	aa.grh.sgid_index = dev.gid_index;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(dev.pd, &aa);
	if (!ah)
		tp_die("ibv_create_ah: %s", strerror(errno));
	path_mtu_bytes = 128u << (me.mtu < peer.mtu ? me.mtu : peer.mtu);
}

static void teardown(void)
{
	uint32_t q;

	if (ah && ibv_destroy_ah(ah))
		tp_die("ibv_destroy_ah failed");
	for (q = 0; q < nqp; q++)
		if (ibv_destroy_qp(rc[q]) || ibv_destroy_qp(ud[q]))
			tp_die("ibv_destroy_qp failed");
	if (ibv_destroy_cq(scq) || ibv_destroy_cq(rcq))
		tp_die("ibv_destroy_cq failed");
	if (ibv_dereg_mr(mr))
		tp_die("ibv_dereg_mr failed");
	tp_close(&dev);
	free(buf);
}

/* --- A case ---------------------------------------------------------------------------- */

/* Message m of a case goes on QP m % nqp, in slot m / nqp. */
static inline uint32_t q_of(uint32_t m) { return m % nqp; }
static inline uint32_t s_of(uint32_t m) { return m / nqp; }

/* The receiver's layout of message m (SEND: its scatter list; WRITE/READ: the target). */
static uint32_t dst_layout(const struct tcase *c, uint32_t m, struct piece *pc, uint32_t *n)
{
	uint64_t seq = c->base_seq + m;
	uint32_t head = head_off(seq, 3);

	switch (c->op) {
	case OP_WRITE:
	case OP_WRITE_IMM:
		*n = 1;
		pc[0] = (struct piece){ .off = head, .len = c->size, .moff = 0 };
		return head + c->size;
	case OP_UD:
		/* The GRH's 40 bytes first, in a piece of their own before the payload. */
		*n = c->dst_sge - 1;
		return layout(pc, *n, c->size, head + GRH_LEN, seq);
	default:
		*n = c->dst_sge;
		/* A receive buffer 16 bytes longer than the message: nothing goes there. */
		return layout(pc, *n, c->size, head, seq);
	}
}

/* The requester's gather list (SEND/WRITE) or the READ source at the responder. */
static uint32_t src_layout(const struct tcase *c, uint32_t m, struct piece *pc, uint32_t *n)
{
	uint64_t seq = c->base_seq + m;
	uint32_t head = head_off(seq, 0);

	if (c->op == OP_READ) {
		*n = 1;
		pc[0] = (struct piece){ .off = head, .len = c->size, .moff = 0 };
		return head + c->size;
	}
	*n = c->src_sge;
	return layout(pc, *n, c->size, head, seq);
}

/* The receiving end before a case: poison the targets, post the receives. */
static void prepare_receiver(const struct tcase *c)
{
	struct piece pc[MAX_SGE];
	uint32_t m, n, i, total = c->k * nqp;

	for (m = 0; m < total; m++) {
		uint32_t q = q_of(m), s = s_of(m), ext = dst_layout(c, m, pc, &n);
		uint64_t seq = c->base_seq + m;
		uint8_t *p = slot(q, true, c->size, s);
		struct ibv_sge sge[MAX_SGE];
		struct ibv_recv_wr wr = { .wr_id = seq, .sg_list = sge }, *bad;
		int ret;

		fill_slot(p, pc, n, ext, seq, true);
		if (c->op == OP_WRITE)
			continue;
		if (c->op == OP_WRITE_IMM) {
			/* Nothing is scattered; give the receive a buffer anyway (it stays poison). */
			sge[0] = (struct ibv_sge){ (uintptr_t)(p + ext + 8), 16, mr->lkey };
			wr.num_sge = 1;
		} else {
			uint32_t j = 0;

			if (c->op == OP_UD)
				sge[j++] = (struct ibv_sge){ (uintptr_t)(p + pc[0].off - GRH_LEN),
							     GRH_LEN, mr->lkey };
			for (i = 0; i < n; i++) {
				uint32_t len = pc[i].len;

				if (i == n - 1)
					len += 16;
				sge[j++] = (struct ibv_sge){ (uintptr_t)(p + pc[i].off), len, mr->lkey };
			}
			wr.num_sge = j;
		}
		ret = ibv_post_recv(c->op == OP_UD ? ud[q] : rc[q], &wr, &bad);
		if (ret)
			tp_die("%s: ibv_post_recv (%d SGEs): %s", op_names[c->op], wr.num_sge,
			       strerror(ret));
	}
}

/* Polls @cq for @want completions within the timeout; fails on an error completion. */
static int poll_n(const struct tcase *c, struct ibv_cq *cq, struct ibv_wc *wc, uint32_t want,
		  const char *what)
{
	double deadline = tp_now() + timeout_s;
	uint32_t got = 0;

	while (got < want) {
		int r = ibv_poll_cq(cq, want - got, wc + got);

		if (r < 0)
			tp_die("ibv_poll_cq failed");
		got += r;
		if (got < want && tp_now() > deadline) {
			fail_case(c, c->base_seq + got, 0, "%u of %u %s completions within %d s",
				  got, want, what, timeout_s);
			return -1;
		}
		if (!r)
			usleep(50);
	}
	/* Nothing more: a duplicate or stray completion is an error. */
	if (ibv_poll_cq(cq, 1, wc + want) > 0) {
		fail_case(c, wc[want].wr_id, 0, "an extra %s completion (wr_id %llu, status %s, opcode %d)",
			  what, (unsigned long long)wc[want].wr_id,
			  ibv_wc_status_str(wc[want].status), wc[want].opcode);
		return -1;
	}
	return 0;
}

/*
 * Checks completions of a case: each QP's in posting order, with the status, opcode and
 * QP expected. Returns 0 or -1 with `failure` set.
 */
static int check_wcs(const struct tcase *c, struct ibv_wc *wc, uint32_t n, bool recv)
{
	uint32_t next[MAX_QPS] = { 0 }, i;

	for (i = 0; i < n; i++) {
		struct ibv_wc *w = &wc[i];
		uint64_t m = w->wr_id - c->base_seq;
		uint32_t q = m < (uint64_t)c->k * nqp ? q_of(m) : 0;
		struct ibv_qp *qp = c->op == OP_UD ? ud[q] : rc[q];
		enum ibv_wc_opcode want_op;

		if (w->status != IBV_WC_SUCCESS) {
			fail_case(c, w->wr_id, q, "%s completion status %s (vendor error 0x%x)",
				  recv ? "receive" : "send", ibv_wc_status_str(w->status),
				  w->vendor_err);
			return -1;
		}
		if (m >= (uint64_t)c->k * nqp || s_of(m) != next[q] || w->qp_num != qp->qp_num) {
			fail_case(c, w->wr_id, q,
				  "%s completion out of order or on the wrong QP: wr_id %llu on QP number %u, expected slot %u of QP number %u",
				  recv ? "receive" : "send", (unsigned long long)w->wr_id, w->qp_num,
				  next[q], qp->qp_num);
			return -1;
		}
		next[q]++;
		if (recv)
			want_op = c->op == OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
		else if (c->op == OP_WRITE || c->op == OP_WRITE_IMM)
			want_op = IBV_WC_RDMA_WRITE;
		else if (c->op == OP_READ)
			want_op = IBV_WC_RDMA_READ;
		else
			want_op = IBV_WC_SEND;
		if (w->opcode != want_op) {
			fail_case(c, w->wr_id, q, "completion opcode %d, expected %d", w->opcode,
				  want_op);
			return -1;
		}
		if (c->op == OP_READ && w->byte_len != c->size) {
			fail_case(c, w->wr_id, q, "READ completion byte_len %u, expected %u",
				  w->byte_len, c->size);
			return -1;
		}
		if (!recv)
			continue;
		{
			uint32_t want_len = c->size + (c->op == OP_UD ? GRH_LEN : 0);
			bool want_imm = c->op == OP_SEND_IMM || c->op == OP_WRITE_IMM;

			if (w->byte_len != want_len) {
				fail_case(c, w->wr_id, q, "receive byte_len %u, expected %u",
					  w->byte_len, want_len);
				return -1;
			}
			if (!!(w->wc_flags & IBV_WC_WITH_IMM) != want_imm ||
			    (want_imm && w->imm_data != imm_of(w->wr_id))) {
				fail_case(c, w->wr_id, q,
					  "immediate data: IBV_WC_WITH_IMM %s, imm_data 0x%08x; expected %s, 0x%08x",
					  w->wc_flags & IBV_WC_WITH_IMM ? "set" : "clear",
					  ntohl(w->imm_data), want_imm ? "set" : "clear",
					  want_imm ? ntohl(imm_of(w->wr_id)) : 0);
				return -1;
			}
			if (c->op == OP_UD && (!(w->wc_flags & IBV_WC_GRH) ||
					       w->src_qp != peer.ud_qpn[q])) {
				fail_case(c, w->wr_id, q,
					  "UD receive: IBV_WC_GRH %s, src_qp %u; expected set, %u",
					  w->wc_flags & IBV_WC_GRH ? "set" : "clear", w->src_qp,
					  peer.ud_qpn[q]);
				return -1;
			}
		}
	}
	return 0;
}

/* The receiving end after the requester finished: completions, then every slot. */
static int64_t check_receiver(const struct tcase *c)
{
	uint32_t total = c->k * nqp, m, n;
	struct ibv_wc wc[MAX_QPS * MAX_K + 1];
	struct piece pc[MAX_SGE];
	int64_t bytes = 0;

	if (c->op != OP_WRITE && c->op != OP_READ) {
		if (poll_n(c, rcq, wc, total, "receive") || check_wcs(c, wc, total, true))
			return -1;
	}
	for (m = 0; m < total; m++) {
		uint32_t q = q_of(m), ext = dst_layout(c, m, pc, &n);
		uint64_t seq = c->base_seq + m;
		uint8_t *p = slot(q, true, c->size, s_of(m));
		int64_t v;

		if (c->op == OP_UD) {
			const uint8_t *grh = p + pc[0].off - GRH_LEN;

			/* RoCE v2 over IPv4: the IPv4 header fills the GRH's last 20 bytes. */
			if (grh[20] >> 4 != 4 || memcmp(grh + 32, peer.gid + 12, 4)) {
				fail_case(c, seq, q,
					  "UD GRH: IPv4 version nibble %u, source %u.%u.%u.%u; expected 4, %u.%u.%u.%u",
					  grh[20] >> 4, grh[32], grh[33], grh[34], grh[35],
					  peer.gid[12], peer.gid[13], peer.gid[14], peer.gid[15]);
				return -1;
			}
			v = check_slot(c, p, pc, n, ext, seq, q, pc[0].off - GRH_LEN, GRH_LEN);
		} else {
			v = check_slot(c, p, pc, n, ext, seq, q, 0, 0);
		}
		if (v < 0)
			return -1;
		bytes += v;
	}
	return bytes;
}

/* The requester (client): fills its sources, posts every message, waits for completions. */
static int run_requester(const struct tcase *c)
{
	uint32_t total = c->k * nqp, m, n, i;
	struct ibv_wc wc[MAX_QPS * MAX_K + 1];
	struct piece pc[MAX_SGE], rpc[MAX_SGE];

	for (m = 0; m < total; m++) {
		uint32_t q = q_of(m), s = s_of(m), rn;
		uint64_t seq = c->base_seq + m;
		uint8_t *p = slot(q, false, c->size, s);
		struct ibv_sge sge[MAX_SGE];
		struct ibv_send_wr wr = {
			.wr_id = seq,
			.sg_list = sge,
			.send_flags = IBV_SEND_SIGNALED | (c->inl ? IBV_SEND_INLINE : 0),
		}, *bad;
		int ret;

		if (c->op == OP_READ) {
			/* The scatter list here; the remote source is one range at the server. */
			layout(pc, c->dst_sge, c->size, head_off(seq, 5), seq ^ 0x5a5a);
			n = c->dst_sge;
			src_layout(c, m, rpc, &rn);
			p = slot(q, true, c->size, s);
			fill_slot(p, pc, n, pc[n - 1].off + pc[n - 1].len, seq, true);
			wr.opcode = IBV_WR_RDMA_READ;
			wr.wr.rdma.remote_addr = peer.addr + slot_off(&peer, q, false, c->size, s) + rpc[0].off;
			wr.wr.rdma.rkey = peer.rkey;
		} else {
			uint32_t ext = src_layout(c, m, pc, &n);

			/* The source's gaps hold the filler: gathering one shows. */
			fill_slot(p, pc, n, ext, seq, false);
			switch (c->op) {
			case OP_SEND:
				wr.opcode = IBV_WR_SEND;
				break;
			case OP_SEND_IMM:
				wr.opcode = IBV_WR_SEND_WITH_IMM;
				wr.imm_data = imm_of(seq);
				break;
			case OP_UD:
				wr.opcode = IBV_WR_SEND;
				wr.wr.ud.ah = ah;
				wr.wr.ud.remote_qpn = peer.ud_qpn[q];
				wr.wr.ud.remote_qkey = QKEY;
				break;
			default: {
				struct piece tpc[MAX_SGE];
				uint32_t tn;

				wr.opcode = c->op == OP_WRITE ? IBV_WR_RDMA_WRITE
							      : IBV_WR_RDMA_WRITE_WITH_IMM;
				if (c->op == OP_WRITE_IMM)
					wr.imm_data = imm_of(seq);
				dst_layout(c, m, tpc, &tn);
				wr.wr.rdma.remote_addr = peer.addr + slot_off(&peer, q, true, c->size, s) +
							 tpc[0].off;
				wr.wr.rdma.rkey = peer.rkey;
			}
			}
		}
		for (i = 0; i < n; i++)
			sge[i] = (struct ibv_sge){ (uintptr_t)(p + pc[i].off), pc[i].len, mr->lkey };
		wr.num_sge = n;
		ret = ibv_post_send(c->op == OP_UD ? ud[q] : rc[q], &wr, &bad);
		if (ret)
			tp_die("%s size %u: ibv_post_send (%u SGEs%s): %s", op_names[c->op], c->size,
			       n, c->inl ? ", inline" : "", strerror(ret));
	}
	if (poll_n(c, scq, wc, total, "send") || check_wcs(c, wc, total, false))
		return -1;
	return 0;
}

/* The client's check of its READ targets. */
static int64_t check_read(const struct tcase *c)
{
	uint32_t total = c->k * nqp, m, n;
	struct piece pc[MAX_SGE];
	int64_t bytes = 0;

	for (m = 0; m < total; m++) {
		uint64_t seq = c->base_seq + m;
		uint32_t q = q_of(m), s = s_of(m), ext;
		int64_t v;

		n = c->dst_sge;
		ext = layout(pc, n, c->size, head_off(seq, 5), seq ^ 0x5a5a);
		v = check_slot(c, slot(q, true, c->size, s), pc, n,
			       pc[n - 1].off + pc[n - 1].len, seq, q, 0, 0);
		(void)ext;
		if (v < 0)
			return -1;
		bytes += v;
	}
	return bytes;
}

/* --- Server ---------------------------------------------------------------------------- */

static void send_reply(bool ok, uint64_t bytes)
{
	struct reply r = { .ok = ok, .bytes = bytes };

	snprintf(r.text, sizeof(r.text), "%s", ok ? "" : failure);
	xsend(&r, sizeof(r));
}

static int serve(void)
{
	uint64_t bytes = 0, msgs = 0;
	struct casehdr h;
	struct tcase c;

	for (;;) {
		int64_t v;

		xrecv(&h, sizeof(h));
		if (h.phase == 2)
			break;
		if (h.phase != 0 || h.op >= OP_COUNT || h.k > kmax || h.k < 1 || h.size < 1 ||
		    h.size > MAX_SIZE || h.src_sge > MAX_SGE || h.dst_sge > MAX_SGE ||
		    h.dst_sge < 1 || stride_of(h.size) * h.k > me.area)
			tp_die("a malformed case from the client");
		c = (struct tcase){ h.op, h.size, h.k, h.src_sge, h.dst_sge, h.inl, h.base_seq };
		if (c.op == OP_READ) {
			/* The READ source: the pattern at one range of each source slot. */
			struct piece pc[1];
			uint32_t m, n;

			for (m = 0; m < c.k * nqp; m++) {
				uint32_t ext = src_layout(&c, m, pc, &n);

				fill_slot(slot(q_of(m), false, c.size, s_of(m)), pc, n, ext,
					  c.base_seq + m, false);
			}
		} else {
			prepare_receiver(&c);
		}
		send_reply(true, 0);
		xrecv(&h, sizeof(h));
		if (h.phase != 1)
			tp_die("the client skipped a phase");
		if (c.op == OP_READ) {
			send_reply(true, 0);
			continue;
		}
		v = check_receiver(&c);
		if (v < 0) {
			fprintf(stderr, "%s: FAIL: %s\n", tp_prog, failure);
			send_reply(false, 0);
			return 1;
		}
		bytes += v;
		msgs += c.k * nqp;
		send_reply(true, v);
	}
	tp_note("server: PASS: %llu messages received and %llu bytes verified here",
		(unsigned long long)msgs, (unsigned long long)bytes);
	return 0;
}

/* --- Client ---------------------------------------------------------------------------- */

static uint64_t total_bytes, total_msgs, next_seq;

/* Runs one case; returns the bytes verified or -1. */
static int64_t run_case(struct tcase *c)
{
	struct casehdr h = {
		.phase = 0, .op = c->op, .size = c->size, .k = c->k, .src_sge = c->src_sge,
		.dst_sge = c->dst_sge, .inl = c->inl, .base_seq = c->base_seq,
	};
	struct reply r;
	int64_t v = 0;

	xsend(&h, sizeof(h));
	xrecv(&r, sizeof(r));
	if (!r.ok)
		tp_die("the server could not prepare: %.*s", (int)sizeof(r.text), r.text);
	if (run_requester(c)) {
		fprintf(stderr, "%s: FAIL: %s\n", tp_prog, failure);
		return -1;
	}
	if (c->op == OP_READ) {
		v = check_read(c);
		if (v < 0) {
			fprintf(stderr, "%s: FAIL: %s\n", tp_prog, failure);
			return -1;
		}
	}
	h.phase = 1;
	xsend(&h, sizeof(h));
	xrecv(&r, sizeof(r));
	if (!r.ok) {
		fprintf(stderr, "%s: FAIL: the server found: %.*s\n", tp_prog, (int)sizeof(r.text),
			r.text);
		return -1;
	}
	return v + (int64_t)r.bytes;
}

static int drive(uint32_t ops, const uint32_t *sizes, uint32_t nsizes)
{
	double t0 = tp_now();
	uint32_t o, i;

	for (o = 0; o < OP_COUNT; o++) {
		if (!(ops & (1u << o)))
			continue;
		for (i = 0; i < nsizes; i++) {
			uint32_t size = sizes[i], v, cases = 0, msgs = 0, sges_max = 1;
			double ts = tp_now();
			int64_t bytes = 0;

			if (o == OP_UD && size > path_mtu_bytes)
				continue;
			/* Variants: one SGE; the most SGEs; inline. */
			for (v = 0; v < 3; v++) {
				struct tcase c = { .op = o, .size = size, .k = k_of(size) };
				uint32_t src_max = o == OP_READ ? max_rd_sge : max_send_sge;
				uint32_t dst_max = o == OP_READ ? max_rd_sge : peer.max_recv_sge;
				int64_t got;

				if (o == OP_UD)
					dst_max--;	/* one receive SGE holds the GRH */
				c.src_sge = c.dst_sge = 1;
				if (v == 1) {
					c.src_sge = size < src_max ? size : src_max;
					c.dst_sge = size < dst_max ? size : dst_max;
					if (c.src_sge == 1 && c.dst_sge == 1)
						continue;
				}
				if (v == 2) {
					if (o == OP_READ || size > max_inline)
						continue;
					c.inl = true;
					c.src_sge = size < 3 ? size : 3;
					if (c.src_sge > max_send_sge)
						c.src_sge = max_send_sge;
				}
				if (o == OP_WRITE || o == OP_WRITE_IMM)
					c.dst_sge = 1;
				if (o == OP_UD)
					c.dst_sge++;
				c.base_seq = next_seq;
				next_seq += c.k * nqp;
				got = run_case(&c);
				if (got < 0)
					return 1;
				bytes += got;
				cases++;
				msgs += c.k * nqp;
				if (c.src_sge > sges_max)
					sges_max = c.src_sge;
				if (c.dst_sge - (o == OP_UD) > sges_max)
					sges_max = c.dst_sge - (o == OP_UD);
			}
			total_bytes += bytes;
			total_msgs += msgs;
			printf("%s: %-9s %8u B: %u cases, %3u messages on %u QPs, SGEs up to %2u%s: %10lld bytes verified (%.2f s)\n",
			       tp_prog, op_names[o], size, cases, msgs, nqp, sges_max,
			       o != OP_READ && size <= max_inline ? ", inline" : "",
			       (long long)bytes, tp_now() - ts);
			fflush(stdout);
		}
	}
	{
		struct casehdr h = { .phase = 2 };

		xsend(&h, sizeof(h));
	}
	printf("%s: PASS: %llu messages, %llu bytes verified, seed %llu (%.1f s)\n", tp_prog,
	       (unsigned long long)total_msgs, (unsigned long long)total_bytes,
	       (unsigned long long)me.seed, tp_now() - t0);
	return 0;
}

/* --- Setup ----------------------------------------------------------------------------- */

static void exchange_hello(bool client)
{
	if (client) {
		xsend(&me, sizeof(me));
		xrecv(&peer, sizeof(peer));
	} else {
		xrecv(&peer, sizeof(peer));
	}
	if (peer.magic != DC_MAGIC || peer.version != DC_VERSION)
		tp_die("the peer is not verbs-datacheck version %u (or has another byte order)",
		       DC_VERSION);
	if (peer.nqp < 1 || peer.nqp > MAX_QPS)
		tp_die("the peer sent a bad QP count %u", peer.nqp);
}

static int tcp_listen_accept(const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res;
	int fd, c, one = 1;

	if (getaddrinfo(NULL, port, &hints, &res))
		tp_die("bad port %s", port);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		tp_die("socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1))
		tp_die("listening on TCP port %s: %s", port, strerror(errno));
	freeaddrinfo(res);
	tp_note("server: listening on TCP port %s", port);
	c = accept(fd, NULL, NULL);
	if (c < 0)
		tp_die("accept: %s", strerror(errno));
	close(fd);
	return c;
}

static int tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	int fd = -1, tries;

	if (getaddrinfo(host, port, &hints, &res))
		tp_die("cannot resolve %s", host);
	for (tries = 0; tries < 50 && fd < 0; tries++) {
		for (ai = res; ai; ai = ai->ai_next) {
			fd = socket(ai->ai_family, SOCK_STREAM, 0);
			if (fd >= 0 && !connect(fd, ai->ai_addr, ai->ai_addrlen))
				break;
			if (fd >= 0)
				close(fd);
			fd = -1;
		}
		if (fd < 0)
			usleep(100000);
	}
	freeaddrinfo(res);
	if (fd < 0)
		tp_die("cannot connect to %s port %s: %s", host, port, strerror(errno));
	return fd;
}

static int run_server(const char *devname)
{
	int ret;

	role = "server";
	/* Wait for the client's hello first: it sets the QP count and the sizes. */
	exchange_hello(false);
	nqp = peer.nqp;
	kmax = peer.kmax > MAX_K ? MAX_K : peer.kmax;
	if (peer.area < area_for(1) || peer.area > area_for(MAX_SIZE))
		tp_die("the client sent a bad area size");
	setup(devname, (uint32_t)(peer.area - SLOT_SLACK));
	me.seed = peer.seed;
	if (me.area != peer.area)
		tp_die("area sizes differ: %llu here, %llu at the client",
		       (unsigned long long)me.area, (unsigned long long)peer.area);
	connect_qps();
	xsend(&me, sizeof(me));
	ret = serve();
	teardown();
	return ret;
}

static int run_client(const char *devname, uint64_t seed, uint32_t ops, const uint32_t *sizes,
		      uint32_t nsizes, uint32_t maxsize)
{
	int ret;

	setup(devname, maxsize);
	me.seed = seed;
	exchange_hello(true);
	if (peer.nqp != nqp || peer.area != me.area)
		tp_die("the server did not take the client's geometry");
	connect_qps();
	tp_note("client: seed %llu, %u QPs, up to %u messages per QP and case, path MTU %u",
		(unsigned long long)seed, nqp, kmax, path_mtu_bytes);
	ret = drive(ops, sizes, nsizes);
	teardown();
	return ret;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s DEVICE [--server | --client HOST] [-p PORT] [--peer-dev DEV] [-g GIDX]\n"
		"       [-o OPS] [-s SIZES] [-q QPS] [-k MSGS] [-S SEED] [-t SECONDS]\n", tp_prog);
	exit(2);
}

static uint32_t parse_ops(char *s)
{
	uint32_t ops = 0, o;
	char *tok;

	for (tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		for (o = 0; o < OP_COUNT; o++)
			if (!strcmp(tok, op_names[o]))
				break;
		if (o == OP_COUNT)
			tp_die("unknown operation '%s'", tok);
		ops |= 1u << o;
	}
	return ops;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "server", no_argument, NULL, 'L' },
		{ "client", required_argument, NULL, 'C' },
		{ "peer-dev", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ }
	};
	static const uint32_t default_sizes[] = {
		1, 2, 3, 7, 8, 63, 64, 100, 101, 102, 255, 1000, 1023, 1024, 1025, 1500, 4095, 4096,
		4097, 9000, 65535, 65537, 262143, 1048577, 4194305, 8388608,
	};
	uint32_t sizes[64], nsizes = 0, ops = (1u << OP_COUNT) - 1, maxsize = 0, i;
	const char *port = "18516", *host = NULL, *peer_dev = NULL;
	uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	bool server = false;
	int opt, sv[2], status, ret;
	pid_t child;

	tp_prog = "verbs-datacheck";
	while ((opt = getopt_long(argc, argv, "g:o:s:q:k:S:t:p:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'g':
			gid_override = tp_parse_ulong("GID index", optarg, 0, 255);
			break;
		case 'o':
			ops = parse_ops(optarg);
			break;
		case 's': {
			char *tok;

			for (tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
				if (nsizes == 64)
					tp_die("at most 64 sizes");
				sizes[nsizes++] = tp_parse_ulong("size", tok, 1, MAX_SIZE);
			}
			break;
		}
		case 'q':
			nqp = tp_parse_ulong("QPS", optarg, 1, MAX_QPS);
			break;
		case 'k':
			kmax = tp_parse_ulong("MSGS", optarg, 1, MAX_K);
			break;
		case 'S':
			seed = tp_parse_ulong("SEED", optarg, 0, ~0ul);
			break;
		case 't':
			timeout_s = tp_parse_ulong("SECONDS", optarg, 1, 3600);
			break;
		case 'p':
			port = optarg;
			break;
		case 'L':
			server = true;
			break;
		case 'C':
			host = optarg;
			break;
		case 'D':
			peer_dev = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1 || (server && host))
		usage();
	if (!nsizes) {
		nsizes = sizeof(default_sizes) / sizeof(default_sizes[0]);
		memcpy(sizes, default_sizes, sizeof(default_sizes));
	}
	for (i = 0; i < nsizes; i++)
		if (sizes[i] > maxsize)
			maxsize = sizes[i];

	if (server) {
		sock = tcp_listen_accept(port);
		return run_server(argv[optind]);
	}
	if (host) {
		sock = tcp_connect(host, port);
		return run_client(argv[optind], seed, ops, sizes, nsizes, maxsize);
	}
	/* Loopback: a forked server on the other end of a socketpair. */
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		tp_die("socketpair: %s", strerror(errno));
	fflush(stdout);
	child = fork();
	if (child < 0)
		tp_die("fork: %s", strerror(errno));
	if (!child) {
		close(sv[0]);
		sock = sv[1];
		exit(run_server(peer_dev ? peer_dev : argv[optind]));
	}
	close(sv[1]);
	sock = sv[0];
	ret = run_client(argv[optind], seed, ops, sizes, nsizes, maxsize);
	close(sock);
	if (waitpid(child, &status, 0) < 0)
		tp_die("waitpid: %s", strerror(errno));
	if (status) {
		fprintf(stderr, "%s: FAIL: the loopback server ended with status 0x%x\n", tp_prog,
			status);
		return 1;
	}
	return ret;
}
