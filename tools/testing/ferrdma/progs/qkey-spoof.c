// SPDX-License-Identifier: GPL-2.0
/*
 * qkey-spoof: a user UD QP cannot reach the GSI (QP1) with GSI's controlled Q_Key.
 *
 *   qkey-spoof DEVICE [-w QUIET_MS]
 *
 * Listens for MADs of vendor class 0x09 (GET) on DEVICE's QP1 through ib_umad, as a CM or
 * SA client would for its class. Then, on DEVICE's own RoCE v2 GID:
 *
 *   1. user UD QP A, whose own Q_Key is 0xabcd, sends a 256-byte MAD to QP1 with the
 *      controlled Q_Key 0x80010000 in its work request (a forged MAD). InfiniBand replaces a
 *      controlled WR Q_Key by the QP's own, so QP1 must drop it: nothing may arrive within
 *      QUIET_MS (default 2000);
 *   2. UD QP B, whose own Q_Key root set to 0x80010000 (CAP_NET_RAW), sends the same kind of
 *      MAD the same way: it must arrive, byte for byte, from B's QP number (the listener and
 *      the path work, so step 1's silence means a drop);
 *   3. A's MAD never shows up later either.
 *
 * Must run as root (step 2). Prints one line per step and a verdict; exits 0 only if all
 * passed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/ib_user_mad.h>
#include <rdma/rdma_user_ioctl.h>

#include "verbs-common.h"

#define MAD_SIZE	256
#define GSI_QKEY	0x80010000u
#define USER_QKEY	0x0000abcdu
#define VENDOR_CLASS	0x09
#define METHOD_GET	0x01
#define TID_A		0x5350304641414141ull	/* "SP0FAAAA" */
#define TID_B		0x5350304642424242ull	/* "SP0FBBBB" */

static struct tp_dev dev;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t *buf;	/* [0, MAD_SIZE): A's MAD, [MAD_SIZE, 2 * MAD_SIZE): B's */
static int umad_fd;

/* The /dev/infiniband/umadN of @name's port 1. */
static void open_umad(const char *name)
{
	char path[300], val[64];
	struct dirent *e;
	DIR *d = opendir("/sys/class/infiniband_mad");

	if (!d)
		tp_die("/sys/class/infiniband_mad: %s (ib_umad missing?)", strerror(errno));
	while ((e = readdir(d))) {
		FILE *f;
		int port = 0;

		if (strncmp(e->d_name, "umad", 4))
			continue;
		snprintf(path, sizeof(path), "/sys/class/infiniband_mad/%s/ibdev", e->d_name);
		f = fopen(path, "r");
		if (!f || !fgets(val, sizeof(val), f)) {
			if (f)
				fclose(f);
			continue;
		}
		fclose(f);
		val[strcspn(val, "\n")] = 0;
		snprintf(path, sizeof(path), "/sys/class/infiniband_mad/%s/port", e->d_name);
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%d", &port) != 1)
				port = 0;
			fclose(f);
		}
		if (strcmp(val, name) || port != TP_PORT)
			continue;
		snprintf(path, sizeof(path), "/dev/infiniband/%s", e->d_name);
		closedir(d);
		umad_fd = open(path, O_RDWR | O_NONBLOCK);
		if (umad_fd < 0)
			tp_die("open %s: %s", path, strerror(errno));
		tp_note("listening on %s (%s port %d)", path, name, TP_PORT);
		return;
	}
	closedir(d);
	tp_die("no umad device for %s port %d", name, TP_PORT);
}

static void register_agent(void)
{
	struct ib_user_mad_reg_req req;

	if (ioctl(umad_fd, IB_USER_MAD_ENABLE_PKEY))
		tp_die("IB_USER_MAD_ENABLE_PKEY: %s", strerror(errno));
	memset(&req, 0, sizeof(req));
	req.qpn = 1;
	req.mgmt_class = VENDOR_CLASS;
	req.mgmt_class_version = 1;
	req.method_mask[0] = 1ul << METHOD_GET;
	if (ioctl(umad_fd, IB_USER_MAD_REGISTER_AGENT, &req))
		tp_die("IB_USER_MAD_REGISTER_AGENT (QP1, class %#x): %s", VENDOR_CLASS,
		       strerror(errno));
}

/* A MAD received within @ms: 1 and its TID, data and source QP; 0 if none. */
static int receive(int ms, uint8_t *mad, uint32_t *src_qpn)
{
	uint8_t rb[sizeof(struct ib_user_mad_hdr) + MAD_SIZE];
	struct pollfd p = { .fd = umad_fd, .events = POLLIN };
	struct ib_user_mad_hdr h;
	ssize_t n;

	if (poll(&p, 1, ms) <= 0)
		return 0;
	n = read(umad_fd, rb, sizeof(rb));
	if (n < (ssize_t)sizeof(h))
		tp_die("read umad: %zd (%s)", n, n < 0 ? strerror(errno) : "short");
	memcpy(&h, rb, sizeof(h));
	memset(mad, 0, MAD_SIZE);
	memcpy(mad, rb + sizeof(h), (size_t)n - sizeof(h));
	*src_qpn = ntohl(h.qpn);
	return 1;
}

static uint64_t tid_of(const uint8_t *mad)
{
	uint64_t t = 0;
	int i;

	for (i = 8; i < 16; i++)
		t = t << 8 | mad[i];
	return t;
}

static void build_mad(uint8_t *mad, uint64_t tid)
{
	int i;

	memset(mad, 0, MAD_SIZE);
	mad[0] = 1;		/* base version */
	mad[1] = VENDOR_CLASS;
	mad[2] = 1;		/* class version */
	mad[3] = METHOD_GET;
	for (i = 0; i < 8; i++)
		mad[8 + i] = tid >> (56 - 8 * i);
	for (i = 24; i < MAD_SIZE; i++)
		mad[i] = (uint8_t)(i ^ tid);
}

static struct ibv_qp *ud_qp(uint32_t qkey)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a;
	struct ibv_qp *qp = ibv_create_qp(dev.pd, &ia);

	if (!qp)
		tp_die("ibv_create_qp(UD): %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = TP_PORT;
	a.qkey = qkey;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		tp_die("UD QP to INIT with Q_Key %#x: %s", qkey, strerror(errno));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		tp_die("UD QP to RTR: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		tp_die("UD QP to RTS: %s", strerror(errno));
	return qp;
}

/* Sends @mad from @qp to QP1 of the device's own GID with WR Q_Key @qkey; waits for the
 * send completion. */
static void send_to_qp1(struct ibv_qp *qp, struct ibv_ah *ah, uint8_t *mad, uint32_t qkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mad, .length = MAD_SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = qp->qp_num,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = 1, .remote_qkey = qkey },
	}, *bad;
	struct ibv_wc wc;
	double end = tp_now() + 10;
	int n;

	if (ibv_post_send(qp, &wr, &bad))
		tp_die("ibv_post_send (QP %u): %s", qp->qp_num, strerror(errno));
	do {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			tp_die("ibv_poll_cq failed");
	} while (n == 0 && tp_now() < end);
	if (n == 0)
		tp_die("no send completion from QP %u", qp->qp_num);
	if (wc.status != IBV_WC_SUCCESS)
		tp_die("send from QP %u: %s", qp->qp_num, ibv_wc_status_str(wc.status));
}

int main(int argc, char **argv)
{
	unsigned long quiet_ms = 2000;
	struct ibv_ah_attr aa;
	struct ibv_qp *qa, *qb;
	struct ibv_ah *ah;
	uint8_t got[MAD_SIZE];
	uint32_t src;
	int c, failed = 0;

	tp_prog = "qkey-spoof";
	while ((c = getopt(argc, argv, "w:")) != -1) {
		if (c == 'w')
			quiet_ms = tp_parse_ulong("-w", optarg, 1, 60000);
		else
			tp_die("usage: qkey-spoof DEVICE [-w QUIET_MS]");
	}
	if (optind + 1 != argc)
		tp_die("usage: qkey-spoof DEVICE [-w QUIET_MS]");
	tp_open(&dev, argv[optind]);
	open_umad(argv[optind]);
	register_agent();

	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	if (!cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	buf = calloc(2, MAD_SIZE);
	if (!buf)
		tp_die("out of memory");
	mr = ibv_reg_mr(dev.pd, buf, 2 * MAD_SIZE, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.grh.dgid = dev.gid;
	aa.grh.sgid_index = dev.gid_index;
	aa.grh.hop_limit = 64;
	aa.port_num = TP_PORT;
	ah = ibv_create_ah(dev.pd, &aa);
	if (!ah)
		tp_die("ibv_create_ah: %s", strerror(errno));
	qa = ud_qp(USER_QKEY);
	qb = ud_qp(GSI_QKEY);
	build_mad(buf, TID_A);
	build_mad(buf + MAD_SIZE, TID_B);

	/* 1. The forged MAD. */
	send_to_qp1(qa, ah, buf, GSI_QKEY);
	if (receive(quiet_ms, got, &src)) {
		printf("step 1 FAILED: QP1 delivered a MAD (TID %#llx, from QP %u) after QP %u (own Q_Key %#x) sent with WR Q_Key %#x\n",
		       (unsigned long long)tid_of(got), src, qa->qp_num, USER_QKEY, GSI_QKEY);
		failed = 1;
	} else {
		printf("step 1 ok: QP %u's MAD with WR Q_Key %#x did not reach QP1 within %lu ms\n",
		       qa->qp_num, GSI_QKEY, quiet_ms);
	}

	/* 2. The privileged user's MAD. */
	send_to_qp1(qb, ah, buf + MAD_SIZE, GSI_QKEY);
	if (!receive(10000, got, &src)) {
		printf("step 2 FAILED: QP %u's MAD (own Q_Key %#x) did not reach QP1 within 10 s\n",
		       qb->qp_num, GSI_QKEY);
		failed = 1;
	} else if (tid_of(got) != TID_B || src != qb->qp_num || memcmp(got, buf + MAD_SIZE, MAD_SIZE)) {
		printf("step 2 FAILED: QP1 delivered TID %#llx from QP %u, expected TID %#llx from QP %u with the bytes sent\n",
		       (unsigned long long)tid_of(got), src, (unsigned long long)TID_B, qb->qp_num);
		failed = 1;
	} else {
		printf("step 2 ok: QP %u's MAD (own Q_Key %#x) reached QP1 intact\n", qb->qp_num,
		       GSI_QKEY);
	}

	/* 3. Nothing late. */
	if (receive(500, got, &src)) {
		printf("step 3 FAILED: a late MAD (TID %#llx, from QP %u)\n",
		       (unsigned long long)tid_of(got), src);
		failed = 1;
	} else {
		printf("step 3 ok: no other MAD\n");
	}

	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	free(buf);
	close(umad_fd);
	tp_close(&dev);
	printf("qkey-spoof: %s\n", failed ? "FAIL" : "PASS");
	return failed;
}
