// SPDX-License-Identifier: GPL-2.0
/*
 * Shared helpers of ferrdma's verbs test programs; see verbs-common.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "verbs-common.h"

const char *tp_prog = "ferrdma-test";

void tp_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: FAIL: ", tp_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void tp_note(const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", tp_prog);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

double tp_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

unsigned long tp_parse_ulong(const char *what, const char *s, unsigned long min,
			     unsigned long max)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || end == s || *end || v < min || v > max)
		tp_die("bad %s '%s' (want %lu..%lu)", what, s, min, max);
	return v;
}

/* True if sysfs says GID @index of @dev's port is a RoCE v2 GID. */
static bool gid_is_rocev2(const char *dev, int index)
{
	char path[256], type[32] = "";
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
		 dev, TP_PORT, index);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	n = read(fd, type, sizeof(type) - 1);	/* fails (EINVAL) for an empty entry */
	close(fd);
	if (n <= 0)
		return false;
	type[n] = '\0';
	return strncmp(type, "RoCE v2", 7) == 0;
}

static bool gid_is_ipv4_mapped(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

struct ibv_context *tp_open_context(const char *name)
{
	struct ibv_context *ctx;
	struct ibv_device **list;
	int i, n;

	list = ibv_get_device_list(&n);
	if (!list)
		tp_die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			break;
	if (i == n)
		tp_die("no RDMA device named %s (%d device(s) present)", name, n);
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		tp_die("ibv_open_device(%s): %s", name, strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

void tp_open(struct tp_dev *dev, const char *name)
{
	int i;

	memset(dev, 0, sizeof(*dev));
	dev->name = name;
	dev->ctx = tp_open_context(name);
	dev->pd = ibv_alloc_pd(dev->ctx);
	if (!dev->pd)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
	if (ibv_query_port(dev->ctx, TP_PORT, &dev->port_attr))
		tp_die("ibv_query_port(%s, %d) failed", name, TP_PORT);
	if (dev->port_attr.state != IBV_PORT_ACTIVE)
		tp_die("%s port %d is %s, not active", name, TP_PORT,
		       ibv_port_state_str(dev->port_attr.state));

	dev->gid_index = -1;
	for (i = 0; i < dev->port_attr.gid_tbl_len; i++) {
		union ibv_gid gid;

		if (!gid_is_rocev2(name, i) || ibv_query_gid(dev->ctx, TP_PORT, i, &gid))
			continue;
		if (gid_is_ipv4_mapped(&gid)) {
			dev->gid_index = i;
			dev->gid = gid;
			break;
		}
	}
	if (dev->gid_index < 0)
		tp_die("%s port %d has no RoCE v2 GID with an IPv4-mapped address (is the netdev up with an IPv4 address?)",
		       name, TP_PORT);
	tp_note("device %s: port %d active, MTU %d, RoCE v2 GID index %d (%u.%u.%u.%u)", name,
		TP_PORT, 128 << dev->port_attr.active_mtu, dev->gid_index, dev->gid.raw[12],
		dev->gid.raw[13], dev->gid.raw[14], dev->gid.raw[15]);
}

void tp_close(struct tp_dev *dev)
{
	if (ibv_dealloc_pd(dev->pd))
		tp_die("ibv_dealloc_pd failed");
	if (ibv_close_device(dev->ctx))
		tp_die("ibv_close_device failed");
}

struct ibv_qp *tp_create_rc_qp(struct tp_dev *dev, struct ibv_cq *send_cq,
			       struct ibv_cq *recv_cq, uint32_t send_wr, uint32_t recv_wr)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = send_cq,
		.recv_cq = recv_cq,
		.cap = {
			.max_send_wr = send_wr,
			.max_recv_wr = recv_wr,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = sizeof(struct tp_msg),
		},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp;

	qp = ibv_create_qp(dev->pd, &attr);
	if (!qp)
		tp_die("ibv_create_qp(RC, %u send, %u recv WRs): %s", send_wr, recv_wr,
		       strerror(errno));
	return qp;
}

static void to_rts(struct tp_dev *dev, struct ibv_qp *qp, uint32_t remote_qpn)
{
	struct ibv_qp_attr attr;
	int ret;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = TP_PORT;
	attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ;
	ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (ret)
		tp_die("QP %u to INIT: %s", qp->qp_num, strerror(ret));

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = dev->port_attr.active_mtu;
	attr.dest_qp_num = remote_qpn;
	attr.rq_psn = 0;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.grh.dgid = dev->gid;
	attr.ah_attr.grh.sgid_index = dev->gid_index;
	attr.ah_attr.grh.hop_limit = 64;
	attr.ah_attr.port_num = TP_PORT;
	ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER);
	if (ret)
		tp_die("QP %u to RTR: %s", qp->qp_num, strerror(ret));

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = 0;
	attr.timeout = 18;	/* about 1 s: no spurious retransmissions under emulation */
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;	/* retry RNR NAKs for ever */
	attr.max_rd_atomic = 1;
	ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret)
		tp_die("QP %u to RTS: %s", qp->qp_num, strerror(ret));
}

void tp_connect_pair(struct tp_dev *dev, struct ibv_qp *a, struct ibv_qp *b)
{
	to_rts(dev, a, b->qp_num);
	to_rts(dev, b, a->qp_num);
}

int tp_post_send(struct ibv_qp *qp, const struct tp_msg *msg, uint64_t wr_id,
		 unsigned int flags)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)msg,
		.length = sizeof(*msg),
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | flags,
	};
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, &wr, &bad);
}

int tp_post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint64_t wr_id)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)buf,
		.length = sizeof(struct tp_msg),
		.lkey = mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

int tp_channel_ready(struct ibv_comp_channel *ch, int timeout_ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int ret;

	do
		ret = poll(&pfd, 1, timeout_ms);
	while (ret < 0 && errno == EINTR);
	if (ret < 0)
		tp_die("poll on the completion channel: %s", strerror(errno));
	return ret > 0;
}

int tp_next_async_event(struct ibv_context *ctx, double deadline, struct ibv_async_event *ev)
{
	for (;;) {
		struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
		int left = (deadline - tp_now()) * 1000, ret;

		if (left <= 0)
			return 0;
		ret = poll(&pfd, 1, left);
		if (ret < 0 && errno != EINTR)
			tp_die("poll on the async event fd: %s", strerror(errno));
		if (ret <= 0)
			continue;
		if (!ibv_get_async_event(ctx, ev))
			return 1;
		if (errno != EAGAIN && errno != EINTR)
			tp_die("ibv_get_async_event: %s", strerror(errno));
	}
}

void tp_set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		tp_die("fcntl(O_NONBLOCK): %s", strerror(errno));
}

struct ibv_comp_channel *tp_create_channel(struct tp_dev *dev)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(dev->ctx);

	if (!ch)
		tp_die("ibv_create_comp_channel: %s", strerror(errno));
	tp_set_nonblock(ch->fd);
	return ch;
}
