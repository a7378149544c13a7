# SPDX-License-Identifier: GPL-2.0
"""KTAP (KUnit) result parser for ferrdma's VM tests.

The driver's KUnit suites run when the module is loaded and print KTAP to the kernel log::

    [  3.1] KTAP version 1
    [  3.1] 1..1
    [  3.1]     KTAP version 1
    [  3.1]     # Subtest: ferrdma_ring
    [  3.1]     # module: ferrdma
    [  3.1]     1..3
    [  3.1]     ok 1 push_pop
    [  3.1]     # wraps: EXPECTATION FAILED at drivers/.../ring.rs:42
    [  3.1]     not ok 2 wraps
    [  3.1]     ok 3 huge # SKIP needs 1 GiB
    [  3.1] # ferrdma_ring: pass:1 fail:1 skip:1 total:3
    [  3.1] not ok 1 ferrdma_ring

parse() turns a log into one Case per test case, named "suite.case" (parameterised cases, which
KUnit nests one level deeper, are "suite.case.param"). Each result line that closes a
"# Subtest:" block is the suite's (or parameterised case's) own result and is not counted as a
case, unless the block had no case results at all (a suite skipped or failed as a whole), in
which case the block itself is the case. A block the log never closes (the kernel crashed or the
module hung mid-suite) yields a failed case "<suite>.<incomplete>".

The same suite may run several times in one log (the module is loaded repeatedly); every run
yields its own Case objects, and summarize() folds them per name.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Iterable

_TIMESTAMP = re.compile(r"^\s*\[\s*\d+\.\d+\]\s?(?:\[\s*[TC]\d+\]\s?)?")
_VERSION = re.compile(r"^(\s*)K?TAP version \d+\s*$")
_SUBTEST = re.compile(r"^(\s*)# Subtest: (\S.*?)\s*$")
_RESULT = re.compile(r"^(\s*)(ok|not ok) (\d+)(?: -)?(?: ([^#]*?))?\s*(?:#\s*(.*?))?\s*$")
_DIAG = re.compile(r"^(\s*)# ?(.*?)\s*$")
# Diagnostic lines that are not worth keeping: "# suite: pass:1 fail:0 ..." summaries and
# the "# [case.]speed: normal" attribute lines.
_NOISE = re.compile(r"^(?:(?:\S+|Totals): pass:\d+|(?:\S+\.)?speed: \S+$|module: )")

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclasses.dataclass
class Case:
    """One KUnit test case result."""

    name: str  # "suite.case" or "suite.case.param"
    status: str  # PASS, FAIL or SKIP
    directive: str = ""  # text after '#' on the result line, e.g. "SKIP needs 1 GiB"
    diagnostics: list[str] = dataclasses.field(default_factory=list)  # "# ..." lines before it
    runs: int = 1  # how many runs summarize() folded into this one


@dataclasses.dataclass
class _Block:
    indent: int
    name: str
    leaves: int = 0
    diagnostics: list[str] = dataclasses.field(default_factory=list)


def _status(ok: str, directive: str) -> str:
    word = directive.split(None, 1)[0].upper() if directive else ""
    if word == "SKIP":
        return SKIP
    if ok == "ok" or word == "TODO":
        return PASS
    return FAIL


def parse(lines: Iterable[str]) -> list[Case]:
    """Parses every KTAP document in a kernel log (timestamps allowed) into test cases."""
    cases: list[Case] = []
    stack: list[_Block] = []

    def path(name: str) -> str:
        return ".".join([b.name for b in stack] + [name])

    def abandon_top() -> None:
        """Pops a block the log never closed and records it as an incomplete, failed case."""
        b = stack.pop()
        cases.append(Case(path(b.name) + ".<incomplete>", FAIL, "no result line in the log",
                          b.diagnostics[-10:]))
        if stack:
            stack[-1].leaves += 1

    for raw in lines:
        line = _TIMESTAMP.sub("", raw.rstrip("\n"), count=1).rstrip()
        if m := _VERSION.match(line):
            # A new top-level document while blocks are open: the previous run never finished.
            if not m.group(1):
                while stack:
                    abandon_top()
            continue
        if m := _SUBTEST.match(line):
            indent = len(m.group(1))
            while stack and stack[-1].indent >= indent:  # an unclosed sibling (or its child)
                abandon_top()
            stack.append(_Block(indent, m.group(2)))
            continue
        if m := _RESULT.match(line):
            indent = len(m.group(1))
            name = (m.group(4) or "").strip() or f"test{m.group(3)}"
            directive = (m.group(5) or "").strip()
            status = _status(m.group(2), directive)
            closed = None
            while stack and stack[-1].indent > indent:
                if closed is not None:  # a nested block closed without its own result line
                    stack.append(closed)
                    abandon_top()
                closed = stack.pop()
            if closed is not None:
                # The result line of a whole block: a case only if the block had none.
                if closed.leaves == 0:
                    cases.append(Case(path(closed.name), status, directive,
                                      closed.diagnostics[-10:]))
                if stack:
                    stack[-1].leaves += 1
            elif stack and stack[-1].indent == indent:
                blk = stack[-1]
                cases.append(Case(path(name), status, directive, blk.diagnostics))
                blk.leaves += 1
                blk.diagnostics = []
            # Else: a top-level result whose block we never saw begin; nothing to count.
            continue
        if stack and (m := _DIAG.match(line)) and len(m.group(1)) >= stack[-1].indent:
            text = m.group(2)
            if not _NOISE.match(text):
                stack[-1].diagnostics.append(text)
    while stack:
        abandon_top()
    return cases


def parse_text(text: str) -> list[Case]:
    return parse(text.splitlines())


def parse_file(path: str) -> list[Case]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse(f)


def summarize(cases: Iterable[Case]) -> dict[str, Case]:
    """Folds repeated runs of the same case (in first-seen order): failed if any run failed,
    else skipped if any run skipped, else passed. Each returned case is a copy of its worst run
    with `runs` set to the number of runs."""
    out: dict[str, Case] = {}
    rank = {PASS: 0, SKIP: 1, FAIL: 2}
    for c in cases:
        cur = out.get(c.name)
        if cur is None or rank[c.status] > rank[cur.status]:
            runs = cur.runs if cur is not None else 0
            cur = out[c.name] = dataclasses.replace(c, diagnostics=list(c.diagnostics), runs=runs)
        cur.runs += 1
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ktap.py LOGFILE...", file=sys.stderr)
        return 2
    bad = 0
    for path in argv:
        for c in parse_file(path):
            print(f"{c.status:4} {c.name}" + (f"  # {c.directive}" if c.directive else ""))
            bad += c.status == FAIL
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
