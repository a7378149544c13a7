#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Creates and destroys verbs objects in random order through stock pyverbs/libirdma.

    verbs_churn.py DEVICE OPERATIONS SEED [exit|faults]

Keeps a random population of open contexts, each with PDs, CQs, MRs (pinned user memory of
random size and access) and RC/UD QPs (random caps, some moved to INIT), and OPERATIONS
times creates, resizes (a CQ), re-registers (an MR's access rights) or destroys one of them,
or closes a whole context with whatever it still holds (as a process exit would). pyverbs destroys dependants first (QPs before their CQs and PD,
MRs before their PD), the order libirdma itself uses. Prints a summary line; exits non-zero on
the first unexpected error. With "exit", the process ends without closing what is still open,
so the kernel's cleanup of a dying process's uverbs files destroys the rest. With "faults"
(the driver loaded with fault_every=N), a create refused with ENOMEM is counted, not fatal:
the test judges what such failures leave behind, not that creates succeed.
"""
import errno
import os
import random
import sys

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

MAX_CONTEXTS = 6
MAX_PER_KIND = 8


class Ctx:
    def __init__(self, dev: str):
        self.ctx = Context(name=dev)
        self.vectors = max(1, self.ctx.num_comp_vectors)
        self.pds: list[PD] = []
        self.cqs: list[CQ] = []
        self.mrs: list[tuple[PD, MR]] = []
        self.qps: list[tuple[PD, CQ, CQ, QP]] = []

    def drop_pd(self, pd: PD) -> None:
        self.mrs = [m for m in self.mrs if m[0] is not pd]
        self.qps = [q for q in self.qps if q[0] is not pd]
        self.pds.remove(pd)
        pd.close()

    def drop_cq(self, cq: CQ) -> None:
        self.qps = [q for q in self.qps if q[1] is not cq and q[2] is not cq]
        self.cqs.remove(cq)
        cq.close()

    def close(self) -> None:
        self.ctx.close()


def new_qp(rng: random.Random, c: Ctx) -> None:
    pd, scq, rcq = rng.choice(c.pds), rng.choice(c.cqs), rng.choice(c.cqs)
    rc = rng.random() < 0.5
    cap = QPCap(max_send_wr=rng.randint(1, 256), max_recv_wr=rng.randint(1, 256),
                max_send_sge=rng.randint(1, 13), max_recv_sge=rng.randint(1, 13),
                max_inline_data=rng.choice([0, 8, 39, 101]))
    init = QPInitAttr(qp_type=e.IBV_QPT_RC if rc else e.IBV_QPT_UD, scq=scq, rcq=rcq, cap=cap)
    qp = QP(pd, init)
    if rng.random() < 0.5:
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        attr.pkey_index = 0
        mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
        if rc:
            attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
            mask |= e.IBV_QP_ACCESS_FLAGS
        else:
            attr.qkey = 0x11111111
            mask |= e.IBV_QP_QKEY
        qp.modify(attr, mask)
    c.qps.append((pd, scq, rcq, qp))


def main() -> int:
    dev, ops, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    abandon = sys.argv[4:] == ["exit"]
    faults = sys.argv[4:] == ["faults"]
    rng = random.Random(seed)
    ctxs: list[Ctx] = []
    n = {k: 0 for k in ("ctx", "pd", "cq", "resize", "mr", "rereg", "qp", "close", "refused")}
    for _ in range(ops):
        try:
            step(rng, dev, ctxs, n)
        except PyverbsRDMAError as err:
            if not (faults and err.error_code == errno.ENOMEM):
                raise
            n["refused"] += 1
    print("churn:", ", ".join(f"{k} {v}" for k, v in n.items()),
          f"(left open: {len(ctxs)} contexts, {sum(len(c.qps) for c in ctxs)} QPs,"
          f" {sum(len(c.mrs) for c in ctxs)} MRs)")
    if abandon:
        sys.stdout.flush()
        os._exit(0)
    for c in ctxs:
        c.close()
    return 0


def step(rng: random.Random, dev: str, ctxs: list[Ctx], n: dict[str, int]) -> None:
    """One random create or destroy; a refused create leaves the population as it was."""
    access = [e.IBV_ACCESS_LOCAL_WRITE,
              e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
              e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ,
              e.IBV_ACCESS_REMOTE_READ, 0]
    r = rng.random()
    if not ctxs or (r < 0.08 and len(ctxs) < MAX_CONTEXTS):
        ctxs.append(Ctx(dev))
        n["ctx"] += 1
        return
    c = rng.choice(ctxs)
    if r < 0.08 or r >= 0.95:
        ctxs.remove(c)
        c.close()
        n["close"] += 1
    elif r < 0.25:
        if len(c.pds) < MAX_PER_KIND:
            c.pds.append(PD(c.ctx))
            n["pd"] += 1
        elif c.pds:
            c.drop_pd(rng.choice(c.pds))
    elif r < 0.42:
        if c.cqs and rng.random() < 0.25:
            # ibv_resize_cq: a new ring registered, MODIFY_CQ, the old ring deregistered.
            rng.choice(c.cqs).resize(rng.randint(1, 1024))
            n["resize"] += 1
        elif len(c.cqs) < MAX_PER_KIND:
            c.cqs.append(CQ(c.ctx, rng.randint(1, 512), None, None, rng.randrange(c.vectors)))
            n["cq"] += 1
        else:
            c.drop_cq(rng.choice(c.cqs))
    elif r < 0.62:
        if c.mrs and rng.random() < 0.2:
            # ibv_rereg_mr of the access rights: a new registration, then the old one goes
            # (a refused one must leave the old one as it was).
            rng.choice(c.mrs)[1].rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0,
                                       rng.choice(access))
            n["rereg"] += 1
        elif c.pds and len(c.mrs) < MAX_PER_KIND:
            pd = rng.choice(c.pds)
            size = rng.choice([1, 4096, 5000, 65536, 1 << 20, rng.randint(1, 300000)])
            c.mrs.append((pd, MR(pd, size, rng.choice(access))))
            n["mr"] += 1
        elif c.mrs:
            c.mrs.pop(rng.randrange(len(c.mrs)))[1].close()
    elif r < 0.85:
        if c.pds and c.cqs and len(c.qps) < MAX_PER_KIND:
            new_qp(rng, c)
            n["qp"] += 1
        elif c.qps:
            c.qps.pop(rng.randrange(len(c.qps)))[3].close()
    else:
        if c.pds and rng.random() < 0.5:
            c.drop_pd(rng.choice(c.pds))
        elif c.cqs:
            c.drop_cq(rng.choice(c.cqs))


if __name__ == "__main__":
    sys.exit(main())
