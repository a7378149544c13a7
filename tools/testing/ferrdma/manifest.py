# SPDX-License-Identifier: GPL-2.0
"""The manifest of ferrdma's VM suite: what a full run of run-tests (make check) must run.

manifest.txt (next to this file) lists, a line each ("#" starts a comment):

    vm NAME          tests/NAME.sh, a VM test make check runs
    baseline NAME    tests/NAME.sh, a soft RoCE baseline (baseline=yes; run only on request)
    long NAME        tests/NAME.sh, a long suite (long=yes): make check-long runs them
    kunit SUITE      one of ferrdma's KUnit suites (the driver's, rust/kernel/infiniband's)
    upstream SUITE   an upstream kernel KUnit suite the test kernel runs (rust/kernel doctests)

check() compares it with what a full run found and ran; every difference is one problem, which
run-tests reports as a failed TAP line "manifest: ...": a listed test whose script is missing
or that did not run, a listed suite that never reported, and a test script or suite that runs
without being listed (adding a test means adding it here).

Result counting: a KUnit case is upstream's if its suite is listed as upstream, except the
rust/kernel doctests of our own abstractions (rust_doctests_kernel cases whose name has
"infiniband"), which are ferrdma's.
"""

from __future__ import annotations

import dataclasses
import os

KINDS = ("vm", "baseline", "long", "kunit", "upstream")
# The kinds that name test scripts (one name, one kind).
SCRIPT_KINDS = ("vm", "baseline", "long")
PATH = os.path.join(os.path.dirname(os.path.realpath(__file__)), "manifest.txt")


@dataclasses.dataclass
class Manifest:
    vm: list[str] = dataclasses.field(default_factory=list)
    baseline: list[str] = dataclasses.field(default_factory=list)
    long: list[str] = dataclasses.field(default_factory=list)
    kunit: list[str] = dataclasses.field(default_factory=list)
    upstream: list[str] = dataclasses.field(default_factory=list)


def parse(text: str) -> Manifest:
    """Parses manifest.txt; raises ValueError on a bad or repeated line."""
    m = Manifest()
    seen = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] not in KINDS:
            raise ValueError(f"manifest line {n}: expected 'KIND NAME' (KIND: {', '.join(KINDS)}): {raw!r}")
        if (parts[0] in SCRIPT_KINDS, parts[1]) in seen:
            raise ValueError(f"manifest line {n}: {parts[1]} is listed twice")
        seen.add((parts[0] in SCRIPT_KINDS, parts[1]))
        getattr(m, parts[0]).append(parts[1])
    return m


def load(path: str = PATH) -> Manifest:
    with open(path, encoding="utf-8") as f:
        return parse(f.read())


def suite_of(case_name: str) -> str:
    """The suite of a KUnit case named "suite.case[.param]"."""
    return case_name.split(".", 1)[0]


def is_upstream(m: Manifest, case_name: str) -> bool:
    """Whether a KUnit case counts as upstream's (see the module's doc)."""
    suite = suite_of(case_name)
    if suite not in m.upstream:
        return False
    return not (suite == "rust_doctests_kernel" and "infiniband" in case_name)


def check(m: Manifest, scripts: dict[str, str], ran: set[str],
          suites: set[str]) -> list[tuple[str, str]]:
    """Compares the manifest with a full run.

    scripts: every tests/*.sh by name, with the kind its header gives it ("baseline" for
    baseline=yes, "long" for long=yes, else "vm"); ran: the VM tests that ran (their TAP line
    was printed); suites: the KUnit suites that reported. Returns (name, problem) pairs, one
    per difference.
    """
    problems = []
    listed = {name: kind for kind in SCRIPT_KINDS for name in getattr(m, kind)}
    for name in sorted(scripts):
        if name not in listed:
            problems.append((name, f"tests/{name}.sh is not listed in manifest.txt "
                                   f"(as '{scripts[name]} {name}')"))
    for name, kind in listed.items():
        if name not in scripts:
            problems.append((name, f"listed, but tests/{name}.sh is missing"))
        elif scripts[name] != kind:
            header = {"vm": "neither baseline=yes nor long=yes", "baseline": "baseline=yes",
                      "long": "long=yes"}[scripts[name]]
            problems.append((name, f"listed as '{kind}', but its header says {header}"))
        elif kind == "vm" and name not in ran:
            problems.append((name, "listed, but did not run"))
    for suite in m.kunit + m.upstream:
        if suite not in suites:
            problems.append((f"kunit:{suite}", "listed, but no case of it reported"))
    for suite in sorted(suites - set(m.kunit) - set(m.upstream)):
        problems.append((f"kunit:{suite}", "ran, but is not listed in manifest.txt "
                                           "(as 'kunit' or 'upstream')"))
    return problems
