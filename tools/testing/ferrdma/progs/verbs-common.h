/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers of ferrdma's verbs test programs (tools/testing/ferrdma/progs): open a device
 * by name, find its RoCEv2 IPv4-mapped GID, create RC QPs and connect two of them to each
 * other through that GID (loopback on one device), wait on a completion channel with a
 * timeout. Everything here is plain libibverbs, so the programs run on any RoCE device.
 */
#ifndef FERRDMA_VERBS_COMMON_H
#define FERRDMA_VERBS_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <infiniband/verbs.h>

/* The payload of every SEND of the test programs (sent inline). */
struct tp_msg {
	uint32_t magic;
	uint32_t stream;	/* which QP pair sent it */
	uint64_t seq;		/* its number within the stream */
};

#define TP_MSG_MAGIC	0x46524556u	/* "FREV" */
#define TP_PORT		1

struct tp_dev {
	const char *name;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_port_attr port_attr;
	int gid_index;
	union ibv_gid gid;
};

extern const char *tp_prog;

void tp_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void tp_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double tp_now(void);
unsigned long tp_parse_ulong(const char *what, const char *s, unsigned long min, unsigned long max);

/* Opens the device named @name. */
struct ibv_context *tp_open_context(const char *name);
/* Opens @name, allocates a PD, queries port 1 and picks its RoCEv2 IPv4-mapped GID. */
void tp_open(struct tp_dev *dev, const char *name);
void tp_close(struct tp_dev *dev);

/* An RC QP with inline data room for a struct tp_msg. */
struct ibv_qp *tp_create_rc_qp(struct tp_dev *dev, struct ibv_cq *send_cq,
			       struct ibv_cq *recv_cq, uint32_t send_wr, uint32_t recv_wr);
/* Moves @a and @b to RTS, each aimed at the other through the device's own GID. */
void tp_connect_pair(struct tp_dev *dev, struct ibv_qp *a, struct ibv_qp *b);

/* Posts one SEND of @msg, inline, signalled; @flags adds e.g. IBV_SEND_SOLICITED. */
int tp_post_send(struct ibv_qp *qp, const struct tp_msg *msg, uint64_t wr_id,
		 unsigned int flags);
/* Posts one receive of sizeof(struct tp_msg) bytes at @buf (in @mr). */
int tp_post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint64_t wr_id);

/* A completion channel on @dev whose fd is non-blocking (for poll() with a timeout). */
struct ibv_comp_channel *tp_create_channel(struct tp_dev *dev);
/* Waits up to @timeout_ms for the channel's fd to become readable: 1 if it did, 0 if not. */
int tp_channel_ready(struct ibv_comp_channel *ch, int timeout_ms);
void tp_set_nonblock(int fd);
/*
 * Reads the next asynchronous event of @ctx (whose async_fd is non-blocking) into @ev, waiting
 * until tp_now() reaches @deadline: 1 if it read one (the caller acknowledges it), 0 if the
 * deadline passed first.
 */
int tp_next_async_event(struct ibv_context *ctx, double deadline, struct ibv_async_event *ev);

#endif /* FERRDMA_VERBS_COMMON_H */
