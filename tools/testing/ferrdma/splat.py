# SPDX-License-Identifier: GPL-2.0
"""Kernel splat scanner for ferrdma's VM tests.

A *splat* is any kernel log line that shows the kernel (or a user program it runs) went wrong:
an oops, BUG, WARNING, panic, lockdep or RCU report, sanitizer report, kmemleak report, stall,
Rust panic or stray backtrace. A test run is clean only if its guest console and dmesg contain
none. The scanner works on plain text, so it reads both the serial console log and the `dmesg`
dump, with or without printk timestamps.

What is matched (case-sensitive; see PATTERNS for the exact expressions):

  * oops, ``BUG:`` (includes ``BUG: sleeping function called from invalid context`` and NULL
    dereferences), ``kernel BUG at``, SLUB's ``BUG <cache> (...)``
  * ``WARNING:`` (WARN_ON and the lockdep/RCU reports that start with it)
  * ``Kernel panic``, ``general protection fault``, ``Unable to handle kernel``
  * lockdep, a kind each: ``possible recursive locking`` (lockdep-recursive), ``circular
    locking dependency`` (lockdep-circular), ``inconsistent lock state``
    (lockdep-inconsistent), ``possible irq lock inversion`` (lockdep-irq-inversion), ``INFO:
    trying to register non-static key`` (lockdep-non-static-key); ``suspicious RCU usage``
  * KASAN, UBSAN, KFENCE and KCSAN reports
  * ``kmemleak: N new suspected memory leaks`` with N > 0
  * hung tasks, RCU stalls, workqueue lockups
  * KFENCE (``BUG: KFENCE: use-after-free read in ...``), UBSAN (``UBSAN: array-index-out-of-bounds
    in ...``), soft lockups (``watchdog: BUG: soft lockup - CPU#0 stuck for 22s!``) and hung
    tasks (``INFO: task X:123 blocked for more than 122 seconds.``) each as their own kind
  * ``Call Trace:`` (a backtrace without one of the above is still a bug), except inside KUnit's
    own output: KTAP diagnostic lines (``# ...``) are not scanned for it
  * Rust panics: ``rust_panic``, ``panicked at``
  * user programs killed by a fault: ``segfault at``, ``trap invalid opcode``

Lines that are never splats: the ``Kernel command line:`` echo (it repeats whatever the harness
passed) and lines matching ALLOWED (known-benign messages; keep that list short and justified).

A test that *provokes* a splat on purpose (fault injection, say) brackets it with the lines
``ferrdma-test: expected splat begin KIND...`` and ``ferrdma-test: expected splat end``
written to /dev/kmsg; matches between them of exactly the kinds named (e.g. ``kmemleak``, or
``lockdep-circular call-trace``; see PATTERNS) are reported as expected and do not fail the
run. Every other splat inside the region still fails it, and a marker that names no kind, or
a kind that does not exist, allows nothing (the unknown name is itself reported as a splat of
kind "marker", so a typo cannot pass unnoticed).

Usage as a program: ``python3 splat.py FILE...`` prints the splats and exits 1 if there are any.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Iterable

# printk's "[    1.234567] " prefix, and the optional caller id "[T123]"/"[C1]" after it.
_TIMESTAMP = re.compile(r"^\s*\[\s*\d+\.\d+\]\s?(?:\[\s*[TC]\d+\]\s?)?")

# (kind, regex). Order matters only for the kind reported when a line matches several.
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (kind, re.compile(rx))
    for kind, rx in [
        ("kasan", r"\bBUG: KASAN\b|\bKASAN: "),
        # Before the generic "BUG: ": the detectors that report with it say which they are.
        ("kfence", r"\bBUG: KFENCE\b|\bKFENCE: "),
        ("kcsan", r"\bBUG: KCSAN\b"),
        ("sleep-in-atomic", r"\bBUG: sleeping function called from invalid context"),
        ("lockup", r"\bworkqueue lockup\b|\bsoft lockup\b|\bhard LOCKUP\b"),
        ("bug", r"\bBUG: "),
        ("bug", r"\bkernel BUG at\b"),
        ("bug", r"^BUG [\w.:-]+ \((?:Not tainted|Tainted)"),  # SLUB debug reports
        ("oops", r"\bOops\b"),
        ("panic", r"\bKernel panic\b"),
        ("gpf", r"\bgeneral protection fault\b"),
        ("oops", r"\bUnable to handle (?:kernel|page fault)"),
        # lockdep, one kind per report so that an allowance can name exactly the one it expects.
        ("lockdep-recursive", r"possible recursive locking"),
        ("lockdep-circular", r"circular locking dependency"),
        ("lockdep-inconsistent", r"inconsistent lock state"),
        ("lockdep-irq-inversion", r"possible irq lock inversion"),
        ("lockdep-non-static-key", r"INFO: trying to register non-static key"),
        ("rcu", r"suspicious RCU usage"),
        # DMA-API debug's report of coherent/streaming mappings still held when a driver lets
        # go of its device: a leak, except where a test abandons them on purpose (a dead
        # device's memory, tests/admin-hang-ferrdma.sh). Before the generic "WARNING: ".
        ("dma-debug-leak", r"\bWARNING: kernel/dma/debug\.c:\d+ at dma_debug_device_change\b"),
        ("warning", r"\bWARNING: "),
        ("ubsan", r"\bUBSAN: "),
        ("kmemleak", r"\bkmemleak: [1-9]\d* new suspected memory leaks?\b"),
        ("hung-task", r"\bINFO: task .* blocked for more than\b"),
        ("rcu-stall", r"\brcu: INFO: .*detected stalls?\b|\bself-detected stall\b"),
        ("rust-panic", r"\brust_panic\b|\bpanicked at\b"),
        ("user-fault", r"\bsegfault at\b|\btrap invalid opcode\b"),
        ("call-trace", r"\bCall Trace:"),
    ]
]

# Every kind, for checking the kinds an expected-splat marker names.
KINDS: frozenset[str] = frozenset(kind for kind, _ in PATTERNS)

# Known-benign lines that would otherwise match. Each entry needs a reason.
ALLOWED: list[re.Pattern[str]] = [
    # printk's own echo of the kernel command line can contain anything the harness passed.
    re.compile(r"^(?:Kernel c|C)ommand line: "),
    # The harness's splat self-test writes these words to /dev/kmsg *inside a marker region*;
    # nothing else needs allowing yet.
]

EXPECT_BEGIN = "ferrdma-test: expected splat begin"
EXPECT_END = "ferrdma-test: expected splat end"

# KTAP diagnostic lines ("# ...", possibly indented): KUnit's output, where a printed backtrace
# is part of a test's expected output.
_KTAP_DIAG = re.compile(r"^\s*# ")


@dataclasses.dataclass(frozen=True)
class Splat:
    """One matching line."""

    kind: str  # e.g. "warning", "lockdep-circular", "kmemleak"
    line: str  # the line without its printk timestamp
    source: str = ""  # where it came from, e.g. "vm1.console"
    lineno: int = 0  # 1-based line number in the source
    expected: bool = False  # inside an expected-splat marker region

    def __str__(self) -> str:
        where = f"{self.source}:{self.lineno}: " if self.source else ""
        tag = "expected " if self.expected else ""
        return f"{where}{tag}{self.kind}: {self.line}"


def strip_timestamp(line: str) -> str:
    """Returns `line` without printk's "[    1.234567] " prefix (and trailing whitespace)."""
    return _TIMESTAMP.sub("", line, count=1).rstrip()


def classify(line: str) -> str | None:
    """Returns the splat kind of one (timestamp-stripped) line, or None if it is clean."""
    if any(rx.search(line) for rx in ALLOWED):
        return None
    for kind, rx in PATTERNS:
        if rx.search(line):
            if kind == "call-trace" and _KTAP_DIAG.match(line):
                continue
            return kind
    return None


def scan_lines(lines: Iterable[str], source: str = "") -> list[Splat]:
    """Scans lines of a kernel log; returns every splat line, in order."""
    found = []
    expecting: set[str] = set()  # the kinds expected now (inside a marker region)
    for lineno, raw in enumerate(lines, 1):
        line = strip_timestamp(raw)
        if EXPECT_BEGIN in line:
            expecting = set(line.split(EXPECT_BEGIN, 1)[1].split())
            unknown = sorted(expecting - KINDS) if expecting else ["(no kind named)"]
            if unknown:
                found.append(Splat("marker", f"{line} [unknown kind: {' '.join(unknown)}]",
                                   source, lineno))
            expecting &= KINDS
            continue
        if EXPECT_END in line:
            expecting = set()
            continue
        kind = classify(line)
        if kind is not None:
            found.append(Splat(kind, line, source, lineno, kind in expecting))
    return found


def scan_text(text: str, source: str = "") -> list[Splat]:
    """Scans a whole log held in a string."""
    return scan_lines(text.splitlines(), source)


def scan_file(path: str, source: str | None = None) -> list[Splat]:
    """Scans a log file (undecodable bytes are replaced, not fatal)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return scan_lines(f, source if source is not None else path)


def failures(splats: Iterable[Splat]) -> list[Splat]:
    """The splats that fail a run: all but the expected ones."""
    return [s for s in splats if not s.expected]


def dedup(splats: Iterable[Splat]) -> list[Splat]:
    """Drops splats already seen: the console and dmesg repeat each other.

    A splat is the same as an earlier one only if its text and whether it was expected are the
    same: an unexpected line must never be swallowed by an expected twin (a bare ``Call
    Trace:`` inside an allowance and another one outside it, say).
    """
    seen: set[tuple[str, bool]] = set()
    out = []
    for s in splats:
        key = (s.line, s.expected)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: splat.py FILE...", file=sys.stderr)
        return 2
    bad = 0
    for path in argv:
        for s in scan_file(path):
            print(s)
            bad += not s.expected
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
