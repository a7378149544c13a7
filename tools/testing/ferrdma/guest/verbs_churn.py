#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Creates and destroys verbs objects in random order through stock pyverbs/libirdma.

    verbs_churn.py DEVICE OPERATIONS SEED [exit]

Keeps a random population of open contexts (each with PDs) and, OPERATIONS times, either opens
a context, allocates a PD in a random open context, deallocates a random PD, or closes a random
context (with whatever PDs it still has, as a process exit would). Objects only the driver
supports so far are used (contexts, PDs); CQs, QPs and MRs join when the driver has them.
Prints a summary line; exits non-zero on the first unexpected error. With "exit", the process
ends without closing what is still open, so the kernel's cleanup of a dying process's uverbs
files destroys the rest.
"""
import os
import random
import sys

from pyverbs.device import Context
from pyverbs.pd import PD

MAX_CONTEXTS = 8
MAX_PDS = 16


def main() -> int:
    dev, ops, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    abandon = sys.argv[4:] == ["exit"]
    rng = random.Random(seed)
    contexts: list[tuple[Context, list[PD]]] = []
    counts = {"open": 0, "close": 0, "alloc_pd": 0, "dealloc_pd": 0}
    for _ in range(ops):
        choice = rng.random()
        if not contexts or (choice < 0.25 and len(contexts) < MAX_CONTEXTS):
            contexts.append((Context(name=dev), []))
            counts["open"] += 1
        elif choice < 0.6:
            ctx, pds = rng.choice(contexts)
            if len(pds) < MAX_PDS:
                pds.append(PD(ctx))
                counts["alloc_pd"] += 1
        elif choice < 0.85:
            ctx, pds = rng.choice(contexts)
            if pds:
                pds.pop(rng.randrange(len(pds))).close()
                counts["dealloc_pd"] += 1
        else:
            ctx, pds = contexts.pop(rng.randrange(len(contexts)))
            for pd in pds:
                pd.close()
            ctx.close()
            counts["close"] += 1
    print("churn:", ", ".join(f"{k} {v}" for k, v in counts.items()),
          f"(left open: {len(contexts)} contexts, {sum(len(p) for _, p in contexts)} PDs)")
    if abandon:
        sys.stdout.flush()
        os._exit(0)
    for ctx, pds in contexts:
        for pd in pds:
            pd.close()
        ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
