#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The physical reference of `make bench`: this host's single-thread memcpy bandwidth.

Copies a 256 MiB buffer into another (bytearray slice assignment is one memmove in CPython,
so the interpreter adds nothing per byte) REPS times after a warm-up copy that faults both
buffers in, and prints one CSV row per copy: host,host,memcpy,SIZE,REP,MiBps,VALUE.
"""

import sys
import time

SIZE = 256 << 20


def measure(reps: int) -> list[float]:
    src = bytearray(b"\x5a") * SIZE
    dst = bytearray(SIZE)
    dst[:] = src
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        dst[:] = src
        out.append(SIZE / (1 << 20) / (time.perf_counter() - t0))
    return out


def main() -> int:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for rep, mibps in enumerate(measure(reps), 1):
        print(f"host,host,memcpy,{SIZE},{rep},MiBps,{mibps:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
