#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Draws `make incast`'s time series (issue 18): incast.png from incast.csv.

usage: incast_plot.py CSV OUTDIR

CSV is what the NIC's ignored test incast_time_series writes (one row per 100 us sample and
sender: scenario, senders, line_gbps, kmin, kmax, t_us, queue_bytes, drops, marks, pauses,
sender, gbps, rate_gbps; a CSV without pauses, from before PFC, reads as none). One row of
plots per scenario (lossy: no congestion control; pfc: lossless, PFC; dcqcn): each sender's
throughput through the bottleneck and, for DCQCN, its rate limiter's rate; the bottleneck's
queue with the marking thresholds, and the drops and PFC pauses. Also prints a summary line
per scenario. Exits 1 on a CSV it cannot read.
"""

import csv
import os
import sys
from collections import defaultdict


def load(path):
    """{scenario: {"t": [...], "queue": [...], "drops": [...], "flows": {k: ([gbps], [rate])},
    "kmin", "kmax", "line"}}, in file order."""
    runs = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                name = row["scenario"]
                t = int(row["t_us"])
                k = int(row["sender"])
                r = runs.setdefault(name, {
                    "t": [], "queue": [], "drops": [], "pauses": [],
                    "flows": defaultdict(lambda: ([], [])),
                    "kmin": int(row["kmin"]), "kmax": int(row["kmax"]),
                    "line": float(row["line_gbps"]),
                })
                if not r["t"] or r["t"][-1] != t:
                    r["t"].append(t)
                    r["queue"].append(int(row["queue_bytes"]))
                    r["drops"].append(int(row["drops"]))
                    r["pauses"].append(int(row.get("pauses") or 0))
                gbps, rate = r["flows"][k]
                gbps.append(float(row["gbps"]))
                rate.append(float(row["rate_gbps"]))
            except (KeyError, TypeError, ValueError) as e:
                raise SystemExit(f"incast_plot: {path}: bad row {row}: {e}")
    if not runs:
        raise SystemExit(f"incast_plot: {path}: no rows")
    return runs


def summary(name, r):
    n = len(r["flows"])
    ms = r["t"][-1] / 1000
    per = [sum(g) / len(g) for g, _ in r["flows"].values()]
    total = sum(per)
    jain = total * total / (n * sum(p * p for p in per)) if total else 0.0
    return (f"{name}: {n} senders, {ms:.0f} ms: {total:.2f} Gb/s of {r['line']:.0f} through the "
            f"bottleneck, Jain {jain:.3f}, drops {sum(r['drops'])}, PFC pauses "
            f"{sum(r['pauses'])}, queue max {max(r['queue']) // 1024} KiB")


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    runs = load(argv[1])
    for name, r in runs.items():
        print(summary(name, r))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 4 * len(runs)), squeeze=False)
    for row, (name, r) in zip(axes, runs.items()):
        ms = [t / 1000 for t in r["t"]]
        ax = row[0]
        for k, (gbps, rate) in sorted(r["flows"].items()):
            line, = ax.plot(ms, gbps, lw=0.8, label=f"sender {k}")
            if name == "dcqcn":
                ax.plot(ms, rate, lw=0.8, ls="--", color=line.get_color(),
                        label=f"sender {k} DCQCN rate")
        ax.set_title(f"{name}: throughput per sender (100 us bins)")
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("Gb/s")
        ax.set_ylim(0, r["line"] * 1.05)
        ax.legend(fontsize=7, ncol=2, loc="upper right")
        ax = row[1]
        ax.plot(ms, [q / 1024 for q in r["queue"]], lw=0.8, label="queue")
        ax.axhline(r["kmin"] / 1024, color="green", ls=":", label="Kmin")
        ax.axhline(r["kmax"] / 1024, color="red", ls=":", label="Kmax")
        drops = [(m, d) for m, d in zip(ms, r["drops"]) if d]
        pauses = [(m, p) for m, p in zip(ms, r["pauses"]) if p]
        if drops or pauses:
            twin = ax.twinx()
            for what, color, label in ((drops, "black", "drops"), (pauses, "purple", "PFC pauses")):
                if what:
                    twin.bar([m for m, _ in what], [d for _, d in what], width=0.1, color=color,
                             alpha=0.5, label=label)
            twin.set_ylabel("drops, pauses per bin")
            twin.legend(fontsize=7, loc="upper left")
        ax.set_title(f"{name}: bottleneck queue")
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("KiB")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out = os.path.join(argv[2], "incast.png")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"incast_plot: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
