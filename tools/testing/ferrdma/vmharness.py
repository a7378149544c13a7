# SPDX-License-Identifier: GPL-2.0
"""ferrdma VM harness: boots 1 or 2 QEMU guests, each with a ferrdma NIC, and runs a script in each.

This module is the machinery behind the `ferrdma-vm` command and the `run-tests` suite; see
README.md beside it for the user's view. In short, for each VM N (1-based):

  * a ferrdma-nic process serves one vfio-user device on a unix socket (unless no_nic);
  * QEMU boots the ferrdma kernel with the sysroot's `/` as a read-only 9p root and a writable
    9p share (tag "results") on <logdir>/vmN/, RAM in a shared memfd (so the NIC process can
    DMA into it), the NIC as a vfio-user-pci device and a virtio-net NIC with MAC
    52:54:00:fe:10:0N whose stream netdev links it to the other VM;
  * the guest's init (guest/init) reads <share>/job, sets up the system and network
    (10.77.0.N/24 on eth0), runs <share>/script with the job's arguments, stores the output,
    exit status and dmesg in the share, and powers off.

The host waits (bounded by the timeout), stops everything it started, and judges each VM:
the script must exit 0 and the console and dmesg must be free of kernel splats (splat.py).
KUnit results in the log are parsed with ktap.py.

The harness runs inside the sysroot (scripts/in-sysroot.sh): QEMU exports that `/` to the
guests, so every path it hands a guest (kernel module, harness files) is the same path there.
Processes are only ever stopped through the handles of the ones this module started: each runs
in its own process group, which is signalled as a whole, and dies with the harness (the kernel
sends it SIGKILL through PR_SET_PDEATHSIG should the harness itself be killed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Iterable, Iterator, NamedTuple

import ktap
import splat

HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.abspath(os.path.join(HARNESS_DIR, "..", "..", ".."))
GUEST_INIT = os.path.join(HARNESS_DIR, "guest", "init")

# Where the guest mounts its share; the init and lib.sh use the same path.
GUEST_SHARE = "/run/ferrdma"

# The LAN: node N has MAC 52:54:00:fe:10:0N and IPv4 10.77.0.N/24 (N = 1 or 2).
LAN_PREFIX = "10.77.0."
LAN_MASK_BITS = 24


def node_mac(node: int) -> str:
    return f"52:54:00:fe:10:{node:02x}"


def node_mac2(node: int) -> str:
    """The MAC of a node's second virtio-net (Config.rxe_lan)."""
    return f"52:54:00:fe:20:{node:02x}"


def node_ip(node: int) -> str:
    return f"{LAN_PREFIX}{node}"


def cache_dir() -> str:
    """$FERRDMA_CACHE, as seen from where the harness runs (in the sysroot: /ferrdma/cache)."""
    return os.environ.get("FERRDMA_CACHE") or (
        "/ferrdma/cache" if os.path.isdir("/ferrdma/cache") else "/var/cache/ferrdma")


def _built_dir(tool: str, env: dict[str, str] | None = None) -> str:
    """What `TOOL/build.sh --dir` prints: the directory of what it built for these sources
    ("" outside the sysroot, or if it fails: not built)."""
    if not in_sysroot():
        return ""
    try:
        p = subprocess.run([os.path.join(HARNESS_DIR, tool, "build.sh"), "--dir"],
                           env={**os.environ, **(env or {})},
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout.strip() if p.returncode == 0 else ""


def kverbs_module_dir(kbuild: str) -> str:
    """The kernel-verbs test module's directory for the kernel build KBUILD, as `kmod/build.sh
    --dir` finds it ("" if it is not built or KBUILD is not a build tree). Found here, on the
    host: the guest's own build.sh --dir hashes the build's Module.symvers and runs clang
    --version, 20-60 s under TCG."""
    return _built_dir("kmod", {"FERRDMA_KBUILD": kbuild}) if kbuild else ""


def progs_dir() -> str:
    """The verbs test programs' directory, as `progs/build.sh --dir` finds it ("" if they are
    not built). Found here, on the host, like kverbs_module_dir: in the guest, test_progs_dir's
    build.sh --dir hashes the sources and runs cc --version, ~3.8 s of TCG time a call."""
    return _built_dir("progs")


def _kernel_build(variant: str) -> str:
    """scripts/kernel.sh's build tree; VARIANT "kasan" the KASAN lane's (build-kasan), "ulp"
    the ULP tests' (build-ulp)."""
    return os.path.join(cache_dir(), "kernel/build" + (f"-{variant}" if variant else ""))


def default_kernel(variant: str = "") -> str:
    return os.path.join(_kernel_build(variant), "arch/x86/boot/bzImage")


def default_ko(variant: str = "") -> str:
    return os.path.join(_kernel_build(variant), "drivers/infiniband/hw/ferrdma/ferrdma.ko")


# The line generic KASAN prints at boot (mm/kasan/generic.c).
KASAN_BOOT_LINE = "KernelAddressSanitizer initialized"


def kernel_build_dir(kernel: str) -> str:
    """The kernel build tree of an image at <tree>/arch/x86/boot/bzImage, whose in-tree modules
    (e.g. rdma_rxe.ko) match that kernel; "" for an image elsewhere."""
    suffix = os.path.join("arch", "x86", "boot", "bzImage")
    path = os.path.abspath(kernel)
    return path[:-len(suffix) - 1] if path.endswith(os.sep + suffix) else ""


def default_smp() -> int:
    """The guests' vCPU count: $FERRDMA_SMP (1 to 4), else 1."""
    value = os.environ.get("FERRDMA_SMP", "1")
    if value not in ("1", "2", "3", "4"):
        raise HarnessError(f"FERRDMA_SMP={value!r}: a vCPU count from 1 to 4")
    return int(value)


def default_nic() -> str:
    return os.path.join(cache_dir(), "cargo-target/release/ferrdma-nic")


class HarnessError(Exception):
    """The harness could not do its job (missing file, QEMU or NIC failed to start...)."""


# --------------------------------------------------------------------------------------------
# Running inside the sysroot

def in_sysroot() -> bool:
    """True inside the ferrdma sysroot (scripts/sysroot.sh marks its root with .ferrdma-ready)."""
    return os.path.exists("/.ferrdma-ready") and os.path.isdir("/ferrdma/src")


def to_sysroot_path(path: str) -> str:
    """Maps a host path inside the repository or $FERRDMA_CACHE to its path in the sysroot."""
    real = os.path.realpath(path)
    host_cache = os.path.realpath(os.environ.get("FERRDMA_CACHE") or "/var/cache/ferrdma")
    for base, inside in ((REPO_DIR, "/ferrdma/src"), (host_cache, "/ferrdma/cache")):
        if real == base or real.startswith(base + os.sep):
            return inside + real[len(base):]
    raise HarnessError(f"{path}: outside the repository and $FERRDMA_CACHE, so the sysroot "
                       f"(and the guests) cannot see it; copy it into one of them")


# Environment variables the harness reads; kept when it re-executes itself in the sysroot.
PASSED_ENV = ("FERRDMA_ACCEL", "FERRDMA_APPEND", "FERRDMA_FABRIC", "FERRDMA_INITRD", "FERRDMA_KEEP_RUNS",
              "FERRDMA_PCAP_SNAPLEN")


def reexec_in_sysroot(program: str, args: list[str]) -> None:
    """Replaces this process by `program args` run in the sysroot via scripts/in-sysroot.sh.
    `program` is the sysroot path of the entry point; `args` must already use sysroot paths."""
    runner = os.path.join(REPO_DIR, "scripts", "in-sysroot.sh")
    if not os.access(runner, os.X_OK):
        raise HarnessError(f"not inside the ferrdma sysroot and {runner} is missing")
    # in-sysroot.sh starts from an empty environment: hand over the harness's own variables.
    env = [f"{k}={v}" for k, v in sorted(os.environ.items())
           if k in PASSED_ENV and k != "FERRDMA_CACHE"]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(runner, [runner, "env", *env, "python3", program, *args])


# --------------------------------------------------------------------------------------------
# Child processes

# Every child dies with the harness: util-linux's setpriv sets PR_SET_PDEATHSIG and execs the
# command (a Python preexec_fn would do the same, but is unsafe once run-tests runs tests
# side by side in threads). The signal comes when the thread that started the child ends,
# which is after the child has been waited for, or when the harness dies.
_DIE_WITH_HARNESS = ["setpriv", "--pdeathsig", "KILL", "--"]


class SplitNet:
    """Host networking for Config.split_fabric: per node a network namespace with one end of
    a veth pair, the other end on a bridge in the harness's namespace, all at MTU 9000. The
    fabric's --interface is the veth end ("bridge"), or a VXLAN device (VNI 42, UDP 4789,
    MTU 8950) over it to the other namespace's address on the bridge, 10.99.N.1... ("vxlan").
    Names carry a tag of the harness's PID and of the instance's number in that process, so
    neither concurrent runs nor two split-fabric tests that run-tests runs side by side meet
    (both made "fbr<pid>" until session 27: "File exists"); interface names stay within
    IFNAMSIZ (15 characters). `down` removes everything (deleting a namespace deletes its
    devices)."""

    _instances = itertools.count()
    _lock = threading.Lock()

    def __init__(self, pid: int, mode: str):
        if mode not in ("bridge", "vxlan"):
            raise HarnessError(f"split fabric {mode!r}: bridge or vxlan")
        self.mode = mode
        with SplitNet._lock:
            seq = next(SplitNet._instances)
        self.tag = f"{pid % 100000:05d}{seq % 100:02d}"
        self.bridge = f"fbr{self.tag}"

    def netns(self, n: int) -> str:
        return f"ferrdma-{self.tag}-{n}"

    def inner(self, n: int) -> str:
        return f"fv{self.tag}{n}"

    def outer(self, n: int) -> str:
        return f"fp{self.tag}{n}"

    def vxlan(self, n: int) -> str:
        return f"fx{self.tag}{n}"

    def interface(self, n: int) -> str:
        """The fabric's --interface in node n's namespace."""
        return self.vxlan(n) if self.mode == "vxlan" else self.inner(n)

    @staticmethod
    def underlay_ip(n: int) -> str:
        return f"10.99.0.{n}"

    def enter(self, n: int) -> list[str]:
        """The argv prefix that runs a command in node n's namespace: nsenter, as `ip netns
        exec` remounts / (refused in the sysroot's chroot)."""
        return ["nsenter", f"--net=/run/netns/{self.netns(n)}"]

    @staticmethod
    def _run(argv: list[str]) -> None:
        import subprocess
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise HarnessError(f"{' '.join(argv)}: {r.stderr.strip()}")

    def _ip(self, *args: str) -> None:
        self._run(["ip", *args])

    def _in(self, n: int, *argv: str) -> None:
        self._run([*self.enter(n), *argv])

    def up(self, vms: int) -> None:
        self._ip("link", "add", self.bridge, "mtu", "9000", "type", "bridge")
        self._ip("link", "set", self.bridge, "up")
        for n in range(1, vms + 1):
            ns, inner, outer = self.netns(n), self.inner(n), self.outer(n)
            self._ip("netns", "add", ns)
            self._ip("link", "add", inner, "mtu", "9000", "type", "veth", "peer", "name",
                     outer, "mtu", "9000")
            self._ip("link", "set", inner, "netns", ns)
            self._in(n, "ip", "link", "set", inner, "up")
            self._ip("link", "set", outer, "master", self.bridge)
            self._ip("link", "set", outer, "up")
            if self.mode == "vxlan":
                peer = self.underlay_ip(3 - n) if vms == 2 else self.underlay_ip(n)
                self._in(n, "ip", "addr", "add", f"{self.underlay_ip(n)}/24", "dev", inner)
                self._in(n, "ip", "link", "add", self.vxlan(n), "mtu", "8950", "type", "vxlan",
                         "id", "42", "remote", peer, "dstport", "4789", "dev", inner)
                self._in(n, "ip", "link", "set", self.vxlan(n), "up")

    def down(self, vms: int) -> None:
        import subprocess
        for n in range(1, vms + 1):
            subprocess.run(["ip", "netns", "del", self.netns(n)], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


class Child:
    """A process the harness started, in its own process group, with output to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: str, cwd: str | None = None):
        import subprocess
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.started = time.monotonic()
        self.ended: float | None = None
        self.signalled = False  # the harness had to stop it
        self.killed_on_request = False  # a test asked for its death (`nic kill`)
        with open(log_path, "ab") as log:
            log.write(f"# {shlex.join(argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                _DIE_WITH_HARNESS + argv, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True, close_fds=True)
        self.pid = self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def kill_on_request(self) -> None:
        """SIGKILL, as a test asked: its death is the test's subject, not a failure."""
        self.killed_on_request = True
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def exited(self) -> bool:
        """True once the process has ended. The zombie is left for reap() so that its process
        group id stays reserved until the rest of the group has been killed."""
        if self.popen.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None and self.ended is None:
            self.ended = time.monotonic()
        return info is not None

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            pass

    def reap(self) -> int:
        """After the leader ended: kills what is left of its group, collects the exit status."""
        if self.popen.returncode is None:
            self._killpg(signal.SIGKILL)
            self.popen.wait()
            if self.ended is None:
                self.ended = time.monotonic()
        return self.popen.returncode

    def wait_exit(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.exited():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, grace: float = 5.0) -> int:
        """Ends the process (SIGTERM to its group, then SIGKILL after `grace` seconds)."""
        if not self.exited():
            self.signalled = True
            self._killpg(signal.SIGTERM)
            if not self.wait_exit(grace):
                self._killpg(signal.SIGKILL)
                self.wait_exit(10.0)
        return self.reap()


def _wait_for_socket(path: str, owner: Child, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.stat(path).st_mode):
                return
        if owner.exited():
            rc = owner.reap()
            raise HarnessError(f"{owner.name} exited (status {rc}) before creating {path}; "
                               f"see {owner.log_path}")
        if time.monotonic() >= deadline:
            raise HarnessError(f"{owner.name} did not create {path} within {seconds:.0f}s; "
                               f"see {owner.log_path}")
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# Configuration and results

@dataclasses.dataclass(frozen=True)
class Part:
    """One script of a boot that several share (Config.sequence)."""
    name: str  # a test name: its directory in the share, seq/NAME
    script: str
    timeout: float  # the test's own limit (the script gets guest_script_timeout of it)
    args: tuple[str, ...] = ()


PART_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


@dataclasses.dataclass
class Config:
    script: str  # the guest script (run with bash); unused with a sequence
    args: list[str] = dataclasses.field(default_factory=list)
    vms: int = 1
    timeout: float = 300.0  # seconds, from the first QEMU start to the last guest's power-off
    logdir: str | None = None  # default: $FERRDMA_CACHE/runs/<timestamp>-<pid>
    kernel: str = dataclasses.field(default_factory=default_kernel)
    ko: str = dataclasses.field(default_factory=default_ko)
    nic: str | None = dataclasses.field(default_factory=default_nic)  # None: no ferrdma NIC
    # The nodes that get a ferrdma NIC (when `nic` is set); None: every node. The others are
    # plain VMs whose virtio-net is on the same fabric (e.g. running soft RoCE).
    nic_nodes: tuple[int, ...] | None = None
    # Extra ferrdma-nic arguments for the process serving the NICs (e.g. --hostile-caps).
    nic_args: tuple[str, ...] = ()
    # After the run, check the fabric's capture with `<nic> --check-pcap`: every RoCEv2 frame
    # must pass the NIC's parser and ICRC check and, with two VMs, RoCEv2 frames must have
    # gone both ways between the nodes' MACs (needs the fabric).
    check_pcap: bool = False
    # With check_pcap: operations (PCAP_OPCODES' names) of which the capture must hold at least
    # one RoCEv2 frame, e.g. ("send-inv",) for a ULP that answers with Send With Invalidate.
    pcap_opcodes: tuple[str, ...] = ()
    # Bytes kept of each frame in fabric.pcap when the capture is not checked: every header
    # but little payload, so that long runs do not write gigabytes (a full two-VM perftest
    # run captured 2.4 GB). Checked captures keep whole frames (the ICRC needs them).
    # The fabric writes fabric.pcap (off for make bench: the capture's writes cost the NIC
    # process ~7% of the host's CPU in a two-VM stream at 2 GiB/s, even at 128 bytes a frame).
    capture: bool = True
    pcap_snaplen: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("FERRDMA_PCAP_SNAPLEN", "128")))
    # Each VM gets a second virtio-net on the fabric, MAC node_mac2(node), for soft RoCE beside
    # the ferrdma NIC: the fabric steers RoCEv2 frames to a NIC's MAC to its engine, so rxe
    # needs a MAC of its own to run between VMs that have ferrdma NICs (make bench).
    rxe_lan: bool = False
    # Each VM's NIC and virtio-net join a fabric process of their own, in a network namespace
    # of its own, and the fabrics meet through host networking (issue 20): "bridge", each
    # fabric's --interface a veth pair's end, the other ends bridged in the harness's
    # namespace; "vxlan", each fabric's --interface a VXLAN device over such a pair, the
    # namespaces addressed on the bridge (SplitNet). "" (default): one fabric. No fabric
    # control socket with split fabrics.
    split_fabric: str = ""
    # With split_fabric: a VLAN id (1-4094) that RoCEv2 frames must keep across host
    # networking: each fabricN.pcap must hold a RoCEv2 frame tagged with it whose source MAC
    # is another node's, i.e. one that arrived through the fabric's --interface port with its
    # tag (check_split_vlan). 0: no such check.
    pcap_vlan: int = 0
    mem_mb: int = 512
    # vCPUs per VM: 1 unless a test needs two CPUs in the guest at once (run-tests' smp=2) or
    # $FERRDMA_SMP says otherwise. Under TCG a second vCPU made the same tests ~1.7x slower
    # (four one-VM tests: 151 s with two vCPUs each, 88 s with one; boot to the script
    # 15-20 s vs 8 s): two VMs side by side then need four host threads on two cores, and
    # MTTCG stops every vCPU of a VM for each cross-CPU TLB flush. Device-vs-driver races
    # stay real with one vCPU (the NIC is another process); races between guest threads
    # need smp=2.
    smp: int = dataclasses.field(default_factory=default_smp)
    kunit: bool = True  # run the KUnit suites (built in at boot, ferrdma.ko's at insmod)
    kasan: bool = False  # the kernel must be a KASAN one (its boot line is checked)
    # Each ferrdma function sits behind a PCIe root port and the guest may unplug and plug it
    # (the `pci` request, QMP device_del/device_add); the NICs serve one client after another
    # (ferrdma-nic --replug) and are stopped at the end instead of ending with their VM.
    replug: bool = False
    accel: str = dataclasses.field(default_factory=lambda: os.environ.get("FERRDMA_ACCEL", "tcg"))
    append: str = dataclasses.field(default_factory=lambda: os.environ.get("FERRDMA_APPEND", ""))
    # A GDB stub per VM on the Unix socket LOGDIR/gdbN.sock (FERRDMA_GDB=1), for a debugger or
    # guest-profile.py, the sampling profiler of a TCG guest.
    gdb: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FERRDMA_GDB", "") not in ("", "0"))
    # The VMs' virtio-nets join through a ferrdma-nic fabric process (its learning switch,
    # --lan sockets, a pcap in the log directory); FERRDMA_FABRIC=0 joins them directly.
    fabric: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("FERRDMA_FABRIC", "1") != "0")
    # An initramfs for kernels that need modules to reach the 9p root (not the ferrdma kernel,
    # which has virtio and 9p built in); it must mount the root and exec the init= program.
    initrd: str = dataclasses.field(default_factory=lambda: os.environ.get("FERRDMA_INITRD", ""))
    # Give the script its own, shorter time limit in the guest, so that a hung script still
    # leaves a status, output and dmesg behind. Only the harness's self-test turns it off.
    guest_timeout: bool = True
    # That limit when it is not the one guest_script_timeout derives from `timeout`: only the
    # harness's self-test of the hang report sets it (20 s under a 120 s run), so that a slow
    # boot cannot reach the run's limit before the script reaches its own.
    script_limit: int | None = None
    # Seconds a VM may run on after another VM's script failed (status not 0) before the
    # harness stops it: a peer left alone waits at its next barrier until that barrier's own
    # limit (up to PERFTEST_TIMEOUT + 60 s), doing nothing. The grace lets a peer that failed
    # for a reason of its own at about the same time report it.
    peer_grace: float = 60.0
    # Streams the scripts' output live: called with (node, line) for each complete line.
    on_output: Callable[[int, str], None] | None = None
    # Progress messages (a line of text each).
    on_progress: Callable[[str], None] | None = None
    # One VM runs these scripts one after another in one boot (run-tests' boot-group=)
    # instead of `script`; each gets a VmResult of its own (VmResult.parts). `timeout` is then
    # the whole boot's.
    sequence: tuple[Part, ...] = ()


@dataclasses.dataclass
class VmResult:
    node: int
    status: int | None = None  # the script's exit status; None if the guest never reported it
    timed_out: bool = False  # the harness had to kill QEMU
    stopped_for_peer: bool = False  # stopped after another VM's script failed (peer_grace)
    qemu_status: int | None = None
    output: str = ""  # the script's stdout and stderr
    splats: list[splat.Splat] = dataclasses.field(default_factory=list)  # incl. expected ones
    kunit: list[ktap.Case] = dataclasses.field(default_factory=list)
    boot_seconds: float | None = None  # guest uptime when the script started
    script_seconds: float | None = None
    leakcheck_seconds: float | None = None  # guest/init's kmemleak check after the script
    wall_seconds: float | None = None  # QEMU start to exit
    problems: list[str] = dataclasses.field(default_factory=list)  # why it failed
    # The script's announced retries ("PART: CAUSE", from guest/lib.sh's `retrying`).
    retries: list[str] = dataclasses.field(default_factory=list)
    # With Config.sequence: the result of each part that ran, by name, in order (those after
    # a failed one are missing: not run). The VM's own problems are also its last part's.
    parts: dict[str, VmResult] = dataclasses.field(default_factory=dict)
    share: str = ""  # the directory with this result's output, dmesg, status...

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def kunit_failed(self) -> list[ktap.Case]:
        return [c for c in self.kunit if c.status == ktap.FAIL]


def has_nic(cfg: Config, node: int) -> bool:
    """True if node `node` of this run gets a ferrdma NIC."""
    return cfg.nic is not None and (cfg.nic_nodes is None or node in cfg.nic_nodes)


@dataclasses.dataclass
class RunResult:
    logdir: str
    vms: list[VmResult]
    wall_seconds: float
    problems: list[str] = dataclasses.field(default_factory=list)  # harness-level failures

    @property
    def ok(self) -> bool:
        """Every script exited 0, every guest log is clean and the harness had no trouble."""
        return not self.problems and all(vm.ok for vm in self.vms)

    @property
    def kunit_failed(self) -> list[ktap.Case]:
        return [c for vm in self.vms for c in vm.kunit_failed]


# --------------------------------------------------------------------------------------------
# The guest's job file

def job_file_text(env: dict[str, str], args: list[str], script_timeout: int,
                  sequence: list[str] | None = None) -> str:
    """The guest init sources this (bash): exported env, the script's arguments, its timeout
    and, for a shared boot, the names of its parts (each has a job of its own)."""
    lines = ["# Written by the ferrdma VM harness for guest/init (bash syntax)."]
    for k, v in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise HarnessError(f"bad environment variable name {k!r}")
        lines.append(f"export {k}={shlex.quote(v)}")
    lines.append(f"ferrdma_script_timeout={int(script_timeout)}")
    lines.append("ferrdma_args=(" + " ".join(shlex.quote(a) for a in args) + ")")
    if sequence:
        lines.append("ferrdma_sequence=(" + " ".join(shlex.quote(n) for n in sequence) + ")")
    return "\n".join(lines) + "\n"


def guest_script_timeout(timeout: float) -> int:
    """The script's limit in the guest: the run's timeout less a margin for boot and shutdown
    (a quarter of it, at least 20 and at most 90 seconds)."""
    margin = min(max(timeout / 4, 20.0), 90.0)
    return max(int(timeout - margin), 5)


# --------------------------------------------------------------------------------------------
# Log directories

RUN_NAME = re.compile(r"^\d{8}-\d{6}-\d+$")


def new_run_dir(keep: int | None = None) -> str:
    """Creates $FERRDMA_CACHE/runs/<timestamp>-<pid>/, pruning all but the newest `keep` runs
    (default $FERRDMA_KEEP_RUNS or 30)."""
    runs = os.path.join(cache_dir(), "runs")
    os.makedirs(runs, exist_ok=True)
    if keep is None:
        keep = int(os.environ.get("FERRDMA_KEEP_RUNS", "30"))
    old = sorted(d for d in os.listdir(runs) if RUN_NAME.match(d))
    for d in old[:max(len(old) - (keep - 1), 0)]:
        shutil.rmtree(os.path.join(runs, d), ignore_errors=True)
    name = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    path = os.path.join(runs, name)
    os.makedirs(path)
    return path


def _prepare_logdir(logdir: str, vms: int) -> None:
    os.makedirs(logdir, exist_ok=True)
    for n in (1, 2):  # leftovers of an earlier run in the same directory
        shutil.rmtree(os.path.join(logdir, f"vm{n}"), ignore_errors=True)
        for f in (f"vm{n}.console", f"nic{n}.log", f"qemu{n}.log"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(logdir, f))
    for n in range(1, vms + 1):
        os.makedirs(os.path.join(logdir, f"vm{n}", "results"))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# QEMU

def kernel_cmdline(cfg: Config) -> str:
    parts = [
        "console=ttyS0,115200",
        "root=root", "rootfstype=9p",
        # cache=loose: the root is read-only and nothing on it should change during a run;
        # caching halves the boot under TCG (every exec reads its libraries over 9p).
        "rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose", "ro",
        f"init={GUEST_INIT}",
        "panic=-1",  # reboot at once on panic; with -no-reboot, QEMU then exits
        "log_buf_len=8M",  # room for many KUnit runs: the dmesg dump must be complete
        "printk.devkmsg=on",  # tests may write markers to /dev/kmsg without rate limits
        "mitigations=off",  # nothing to protect, and TCG is slow enough
        # TCG's TSC runs on the host's clock, like the HPET the watchdog compares it with; under
        # load the watchdog saw "skew", switched the guest to the HPET mid-run, and perftest's
        # TSC-vs-gettimeofday calibration then failed (r^2 < 0.9). The TSC is the better clock.
        "tsc=reliable",
        # A periodic tick from the local APIC's own periodic mode: with the default one-shot
        # tick (NO_HZ_IDLE, high-resolution timers) the guest rewrote the APIC timer on every
        # tick and idle entry, each an MMIO exit to QEMU's APIC model (6.4% of a guest's TCG
        # time, guest-profile.py; 0% with these; cm-loopback-ferrdma 117-133 s against 162-174 s,
        # session 32). Timers keep the tick's 4 ms resolution; an idle VM costs more (12% of a
        # host core against 4%).
        "nohz=off", "highres=off",
        # kmemleak's minimum object age, 5 s in the kernel (parameter: kernel-patches/0007):
        # a leak check waits that long between its two scans (guest/lib.sh, kmemleak).
        "kmemleak.min_age_ms=1000",
    ]
    if cfg.kasan:
        # 4-level paging: with -cpu max's LA57 the KASAN kernel reported a wild-memory-access
        # in do_raw_spin_lock from an interrupt during identify_cpu, at 0.006 s of every boot
        # (7.3.4, TCG; none with no5lvl).
        parts.append("no5lvl")
    if not cfg.kunit:
        # The test kernel's KUnit suites take ~4 s of each boot under TCG and ferrdma.ko's run
        # at every insmod; one test (probe) runs them all, the others boot without.
        parts.append("kunit.enable=0")
    if cfg.append:
        parts.append(cfg.append)
    return " ".join(parts)


def qmp_sock_path(sockdir: str, node: int) -> str:
    return os.path.join(sockdir, f"qmp{node}.sock")


def gdb_sock_path(logdir: str, node: int) -> str:
    return os.path.join(logdir, f"gdb{node}.sock")


def qemu_argv(cfg: Config, node: int, logdir: str, lan_sock: str,
              nic_sock: str | None, qmp_sock: str | None = None) -> list[str]:
    share = os.path.join(logdir, f"vm{node}")
    if cfg.accel == "kvm":
        accel = ["-accel", "kvm", "-cpu", "host"]
    elif cfg.accel == "tcg":
        accel = ["-accel", "tcg,thread=multi", "-cpu", "max"]
    else:
        raise HarnessError(f"FERRDMA_ACCEL={cfg.accel!r}: use tcg (the default) or kvm")
    argv = [
        "qemu-system-x86_64",
        "-name", f"ferrdma-vm{node}",
        "-nographic", "-nodefaults", "-no-user-config", "-no-reboot", "-monitor", "none",
        *accel,
        "-machine", "q35,memory-backend=mem",
        "-object", f"memory-backend-memfd,id=mem,size={cfg.mem_mb}M,share=on",
        "-m", f"{cfg.mem_mb}M",
        "-smp", str(cfg.smp),
        "-kernel", cfg.kernel,
        "-append", kernel_cmdline(cfg),
        *(["-initrd", cfg.initrd] if cfg.initrd else []),
        "-chardev", f"file,id=con,path={os.path.join(logdir, f'vm{node}.console')}",
        "-serial", "chardev:con",
        "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=root,mount_tag=root",
        "-fsdev", f"local,id=results,path={share},security_model=none,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=results,mount_tag=results",
        "-device", "virtio-rng-pci",
    ]
    if cfg.gdb:
        argv += ["-gdb", f"unix:{gdb_sock_path(logdir, node)},server=on,wait=off"]
    if qmp_sock is not None:
        # The harness's handle on the VM's virtual hardware (the cable's carrier: set_link).
        argv += ["-qmp", f"unix:{qmp_sock},server=on,wait=off"]
    # The LAN: node 1 listens on the stream socket, node 2 connects to it; with the fabric,
    # both connect to their own port of the fabric's switch.
    if cfg.fabric:
        lan_sock = f"{lan_sock}.{node}"
        netdev = f"stream,id=lan,server=off,addr.type=unix,addr.path={lan_sock},reconnect-ms=500"
    elif node == 1:
        netdev = f"stream,id=lan,server=on,addr.type=unix,addr.path={lan_sock}"
    else:
        netdev = f"stream,id=lan,server=off,addr.type=unix,addr.path={lan_sock},reconnect-ms=500"
    argv += ["-netdev", netdev, "-device", f"virtio-net-pci,netdev=lan,mac={node_mac(node)}"]
    if cfg.rxe_lan:
        argv += ["-netdev", f"stream,id=lan2,server=off,addr.type=unix,"
                            f"addr.path={lan_sock}.rxe,reconnect-ms=500",
                 "-device", f"virtio-net-pci,netdev=lan2,mac={node_mac2(node)}"]
    if nic_sock is not None:
        if cfg.replug:
            argv += ["-device", f"pcie-root-port,id={NIC_ROOT_PORT},chassis=1,slot=1"]
        argv += ["-device", json.dumps(nic_device(cfg, nic_sock))]
    return argv


# The ferrdma function's QEMU device id and, with replug, its root port.
NIC_QDEV_ID = "ferrdma_nic"
NIC_ROOT_PORT = "ferrdma_rp"


def nic_device(cfg: Config, nic_sock: str) -> dict:
    """The vfio-user-pci device of a node's NIC, as -device JSON or device_add arguments."""
    dev = {"driver": "vfio-user-pci", "socket": {"path": nic_sock, "type": "unix"}}
    if cfg.replug:
        dev.update(bus=NIC_ROOT_PORT, id=NIC_QDEV_ID)
    return dev


# --------------------------------------------------------------------------------------------
# The fabric's control socket, for the guests, and the capture check

def nic_nodes_text(cfg: Config) -> str:
    nodes = [n for n in range(1, cfg.vms + 1) if has_nic(cfg, n)]
    return ",".join(map(str, nodes)) if nodes else "none"


# Where a guest drops its requests for the fabric's control socket: <share>/fabric-ctl/ (in
# the guest /run/ferrdma/fabric-ctl/). See README.md, "The fabric's control socket".
CTL_DIR = "fabric-ctl"
CTL_REQ = re.compile(r"^([A-Za-z0-9_-]{1,64})\.req$")
CTL_LINE_MAX = 512


class _CableOut(NamedTuple):
    """A `cable NODE out SECONDS` request whose cable is out."""
    back_at: float  # time.monotonic() when the cable goes back in and the guest is answered
    node: int  # the VM that asked
    dir: str  # its request directory
    ident: str
    line: str
    cable_node: str  # NODE
    down: list[str]  # the reply lines of the `down`, without its "ok"


class FabricControl:
    """Forwards the guests' requests to the fabric's control socket (`ferrdma-nic --control`)
    and writes the replies back. A request is a file <share>/fabric-ctl/ID.req holding one
    line; the harness removes it, sends the line and writes the reply (the lines the fabric
    answered, the last "ok" or "error: ...") to ID.rep, through a rename, so the guest never
    sees half a reply. Every exchange is logged in <logdir>/fabric-ctl.log."""

    def __init__(self, sock: str, logdir: str, vms: int,
                 nic_port: dict[int, int] | None = None, qmp: dict[int, str] | None = None,
                 replug: dict[int, dict] | None = None,
                 kill_nic: "Callable[[], None] | None" = None):
        self.sock = sock
        # Kills the process serving the NICs and the fabric (`nic kill`).
        self.kill_nic = kill_nic
        # Node -> the device_add arguments of its ferrdma function, in runs with replug.
        self.replug = replug or {}
        # Node -> the fabric's nic:K port of its ferrdma NIC (NICs are numbered in node order).
        self.nic_port = nic_port or {}
        # Node -> its QEMU's QMP socket.
        self.qmp = qmp or {}
        self.log = os.path.join(logdir, "fabric-ctl.log")
        # `cable NODE out SECONDS` requests whose cable is out, each answered when it is back.
        self.cables_out: list[_CableOut] = []
        self.dirs = []
        for n in range(1, vms + 1):
            d = os.path.join(logdir, f"vm{n}", CTL_DIR)
            os.makedirs(d, exist_ok=True)
            self.dirs.append((n, d))

    def poll(self) -> None:
        now = time.monotonic()
        for out in [c for c in self.cables_out if c.back_at <= now]:
            self.cables_out.remove(out)
            self._reply(out.node, out.dir, out.ident, out.line,
                        out.down + self.cable([out.cable_node, "up"]))
        for node, d in self.dirs:
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            for name in names:
                m = CTL_REQ.match(name)
                if m:
                    self._serve(node, d, m.group(1))

    def _serve(self, node: int, d: str, ident: str) -> None:
        path = os.path.join(d, f"{ident}.req")
        try:
            with open(path, "rb") as f:
                raw = f.read(CTL_LINE_MAX + 1)
            os.unlink(path)
        except OSError:
            return
        line = raw.decode("utf-8", errors="replace").strip()
        args = line.split()
        if len(raw) > CTL_LINE_MAX or "\n" in line:
            reply = ["error: the harness takes one line of at most 512 bytes"]
        elif args[:1] == ["cable"] and args[2:3] == ["out"]:
            reply, secs = self.cable_out(args[1:])
            if secs is not None:
                # Answered when the cable is back (poll), so the guest waits for that.
                self.cables_out.append(_CableOut(time.monotonic() + secs, node, d, ident, line,
                                                 args[1], reply[:-1]))
                return
        elif args[:1] == ["cable"]:
            reply = self.cable(args[1:])
        elif args[:1] == ["pci"]:
            reply = self.pci(args[1:])
        elif args == ["nic", "kill"]:
            reply = self.nic_kill()
        else:
            reply = self.request(line)
        self._reply(node, d, ident, line, reply)

    def _reply(self, node: int, d: str, ident: str, line: str, reply: list[str]) -> None:
        with open(self.log, "a") as log:
            log.write(f"[{time.strftime('%H:%M:%S')}] vm{node} {ident}: {line!r} -> "
                      f"{' | '.join(reply)}\n")
        tmp = os.path.join(d, f"{ident}.rep.tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(reply) + "\n")
        os.rename(tmp, os.path.join(d, f"{ident}.rep"))

    def cable(self, args: list[str]) -> list[str]:
        """`cable NODE up|down`, the harness's own request: plugs or pulls node NODE's
        cable. The fabric takes the links of its virtio-net (lan:NODE-1) and of its NIC's
        RoCE engine (nic:K) up or down, and QEMU sets the virtio-net's link status (QMP
        set_link), so the guest sees the carrier go and come back as with a real cable: the
        netdev's NO-CARRIER, the RDMA port's state and IB_EVENT_PORT_ERR/PORT_ACTIVE."""
        if (len(args) != 2 or args[1] not in ("up", "down") or not args[0].isdigit()
                or int(args[0]) not in self.qmp):
            return [f"error: cable NODE up|down, NODE one of {sorted(self.qmp)}"]
        node, up = int(args[0]), args[1] == "up"
        ports = [f"lan:{node - 1}"]
        if node in self.nic_port:
            ports.append(f"nic:{self.nic_port[node]}")
        # The fabric's links first, the carrier second, either way: when the guest sees the
        # carrier come back, its frames get through.
        reply = self.request(f"link {' '.join(ports)} {args[1]}")
        if reply[-1:] != ["ok"]:
            return reply
        err = qmp_command(self.qmp[node], "set_link", {"name": "lan", "up": up})
        if err:
            return reply[:-1] + [f"error: QMP set_link on node {node}: {err}"]
        return reply[:-1] + [f"node {node}: cable {args[1]} ({' '.join(ports)}, carrier)", "ok"]

    def cable_out(self, args: list[str]) -> tuple[list[str], float | None]:
        """`cable NODE out SECONDS`, the harness's own request: pulls node NODE's cable now
        (as `cable NODE down`) and plugs it back SECONDS (0.1 to 600) later on the harness's
        clock, then answers. The outage lasts what was asked, however long the guest takes
        to see the reply to a `down` and send an `up` (on a loaded host: 4-8 s, session 32).
        Returns the reply to the `down` and SECONDS, or an error reply and None."""
        try:
            secs = float(args[2]) if len(args) == 3 else -1.0
        except ValueError:
            secs = -1.0
        if not 0.1 <= secs <= 600.0:
            return ["error: cable NODE out SECONDS, SECONDS from 0.1 to 600"], None
        reply = self.cable([args[0], "down"])
        return reply, (secs if reply[-1:] == ["ok"] else None)

    def pci(self, args: list[str]) -> list[str]:
        """`pci NODE unplug|plug`, the harness's own request in runs with replug: QMP
        device_del of node NODE's ferrdma function (the guest is told through ACPI, its driver
        removes the device, and the NIC's connection ends), or device_add of it again on the
        same root port, which the NIC serves as a new client on a reset device. QEMU frees an
        unplugged function only once the guest has ejected it, so a plug retries while the old
        one is still there (10 s at most)."""
        if (len(args) != 2 or args[1] not in ("unplug", "plug") or not args[0].isdigit()
                or int(args[0]) not in self.replug):
            return [f"error: pci NODE unplug|plug, NODE one of {sorted(self.replug)} "
                    "(tests with replug=yes)"]
        node = int(args[0])
        if args[1] == "unplug":
            err = qmp_command(self.qmp[node], "device_del", {"id": NIC_QDEV_ID})
        else:
            deadline = time.monotonic() + 10.0
            while True:
                err = qmp_command(self.qmp[node], "device_add", self.replug[node])
                if not err or "uplicate" not in err or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        if err:
            return [f"error: QMP {'device_del' if args[1] == 'unplug' else 'device_add'} "
                    f"on node {node}: {err}"]
        return [f"node {node}: ferrdma function {args[1]}ged", "ok"]

    def nic_kill(self) -> list[str]:
        """`nic kill`, the harness's own request: SIGKILL to the ferrdma-nic process, which
        serves every VM's NIC and the fabric (so the LAN and this control socket go too), as
        a crash of the device model would. QEMU and the guests keep running; what they do is
        the test's subject."""
        if self.kill_nic is None:
            return ["error: nic kill: no NIC process to kill"]
        self.kill_nic()
        return ["the ferrdma-nic process (NICs and fabric) was killed", "ok"]

    def request(self, line: str, timeout: float = 10.0) -> list[str]:
        """Sends one line to the control socket; returns the reply's lines."""
        import socket
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(self.sock)
                s.sendall(line.encode() + b"\n")
                data = b""
                while True:
                    lines = data.decode("utf-8", errors="replace").split("\n")
                    done = [ln for ln in lines[:-1] if ln == "ok" or ln.startswith("error:")]
                    if done:
                        return lines[:lines.index(done[0]) + 1]
                    chunk = s.recv(65536)
                    if not chunk:
                        return [*(ln for ln in lines if ln),
                                "error: the control socket closed without a reply"]
                    data += chunk
        except OSError as e:
            return [f"error: control socket {self.sock}: {e}"]


def qmp_command(sock: str, command: str, arguments: dict, timeout: float = 10.0) -> str | None:
    """Runs one QMP command on a QEMU's QMP socket; returns None on success, else the error."""
    import json
    import socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(sock)
            f = s.makefile("rwb")

            def exchange(msg: dict | None) -> dict:
                if msg is not None:
                    f.write(json.dumps(msg).encode() + b"\n")
                    f.flush()
                while True:  # skip asynchronous events
                    line = f.readline()
                    if not line:
                        raise OSError("QEMU closed the QMP socket")
                    reply = json.loads(line)
                    if msg is None and "QMP" in reply:
                        return reply
                    if "return" in reply or "error" in reply:
                        return reply

            exchange(None)  # the greeting
            for msg in ({"execute": "qmp_capabilities"},
                        {"execute": command, "arguments": arguments}):
                reply = exchange(msg)
                if "error" in reply:
                    return reply["error"].get("desc", str(reply["error"]))
            return None
    except (OSError, ValueError) as e:
        return f"{sock}: {e}"


ROCE_DIRECTION = re.compile(r"^roce ([0-9a-f:]{17}) -> ([0-9a-f:]{17}): (\d+) frames")


PCAP_TOTAL = re.compile(r"^total \d+ frames: (\d+) RoCEv2")
PCAP_OPCODE_COUNTS = re.compile(r"^opcodes (.*)$")
def roce_frames_by_vlan(path: str) -> dict[tuple[str, int], int]:
    """Counts the RoCEv2 frames (IPv4 or IPv6, UDP port 4791) of a pcap file by (source MAC,
    VLAN id; 0 when untagged). Reads the classic pcap format the fabric writes (Ethernet
    link type, either byte order); a truncated last record ends the count."""
    counts: dict[tuple[str, int], int] = {}
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return counts
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise HarnessError(f"{path}: not a pcap file")
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(frame) < 14:
            continue
        src = ":".join(f"{b:02x}" for b in frame[6:12])
        etype, l3, vid = int.from_bytes(frame[12:14], "big"), 14, 0
        if etype == 0x8100 and len(frame) >= 18:
            vid = int.from_bytes(frame[14:16], "big") & 0xFFF
            etype, l3 = int.from_bytes(frame[16:18], "big"), 18
        if etype == 0x0800 and len(frame) >= l3 + 20:
            l4 = l3 + (frame[l3] & 0x0F) * 4
            proto = frame[l3 + 9]
        elif etype == 0x86DD and len(frame) >= l3 + 40:
            l4, proto = l3 + 40, frame[l3 + 6]
        else:
            continue
        if proto == 17 and len(frame) >= l4 + 4 and int.from_bytes(frame[l4 + 2:l4 + 4], "big") == 4791:
            counts[(src, vid)] = counts.get((src, vid), 0) + 1
    return counts


def check_split_vlan(logdir: str, vms: int, vid: int) -> list[str]:
    """Config.pcap_vlan: each node's fabric must have captured RoCEv2 frames tagged with VID
    from the other node's MAC (they crossed host networking, whose packet sockets hand frames
    over without their tag unless the port puts it back). Returns the problems."""
    problems = []
    for n in range(1, vms + 1):
        path = os.path.join(logdir, f"fabric{n}.pcap")
        if not os.path.exists(path):
            problems.append(f"fabric{n}.pcap is missing: cannot check VLAN {vid} across hosts")
            continue
        counts = roce_frames_by_vlan(path)
        for m in range(1, vms + 1):
            if m == n:
                continue
            mac = node_mac(m)
            if counts.get((mac, vid), 0) == 0:
                seen = ", ".join(f"VLAN {v or 'none'}: {c}" for (src, v), c in sorted(counts.items())
                                 if src == mac) or "none"
                problems.append(f"fabric{n}.pcap: no RoCEv2 frame from node {m} ({mac}) tagged "
                                f"with VLAN {vid} arrived through host networking (its RoCEv2 "
                                f"frames by tag: {seen})")
    return problems


# The operations a test can require on the wire (Config.pcap_opcodes): their RC BTH opcodes.
PCAP_OPCODES = {
    "send": (0x00, 0x01, 0x02, 0x03, 0x04, 0x05),
    "send-inv": (0x16, 0x17),
    "write": (0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b),
    "read": (0x0c,),
    "atomic": (0x13, 0x14),
}


def missing_opcodes(check_output: str, wanted: Iterable[str]) -> list[str]:
    """Of the operations `wanted` (PCAP_OPCODES' names), those without a single frame in the
    opcode census (the "opcodes 0xNN:count ..." line) of `ferrdma-nic --check-pcap`'s output."""
    seen: dict[int, int] = {}
    for line in check_output.splitlines():
        m = PCAP_OPCODE_COUNTS.match(line)
        if m:
            for item in m.group(1).split():
                op, _, n = item.partition(":")
                seen[int(op, 16)] = seen.get(int(op, 16), 0) + int(n)
    return [w for w in wanted if not any(seen.get(op, 0) for op in PCAP_OPCODES[w])]
# Wireshark's finding on UDP checksum 0 over IPv6. Linux rxe sends RoCEv2 that way (RFC 6935
# allows a zero checksum for tunnel protocols); the NIC accepts it, so it is not a defect.
ZERO_UDP6_CHECKSUM = "Illegal checksum value (0)"


def tshark_check(pcap: str, roce: int, logdir: str,
                 progress: Callable[[str], None]) -> list[str]:
    """Wireshark's view of the capture (output in <logdir>/tshark-check.log): it must dissect
    as InfiniBand (RoCEv2) exactly the `roce` frames the NIC's checker counted, none of them
    malformed and none with an expert finding of warning or worse, except the zero UDP
    checksum of IPv6 frames from rxe. Wireshark does not verify the ICRC; the NIC's checker
    does. Returns the problems found."""
    import subprocess
    # The RPC-over-RDMA heuristic dissector tries every SEND payload as an RPC header and
    # calls test patterns malformed; that is not about the RoCE packet.
    base = ["tshark", "-n", "--disable-protocol", "rpcordma", "-r", pcap]
    runs = {
        "count": ["-Y", "infiniband", "-T", "fields", "-e", "frame.number"],
        "findings": ["-Y", "infiniband && (_ws.malformed || _ws.expert.severity >= warning)",
                     "-T", "fields", "-E", "separator=|", "-e", "frame.number", "-e", "ipv6.src",
                     "-e", "udp.checksum", "-e", "_ws.malformed", "-e", "_ws.expert.message",
                     "-e", "frame.protocols"],
    }
    out = {}
    for name, args in runs.items():
        try:
            p = subprocess.run(base + args, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=600)
        except FileNotFoundError:
            return ["tshark is missing (scripts/sysroot-packages.txt lists it: rebuild the "
                    "sysroot)"]
        except (OSError, subprocess.TimeoutExpired) as e:
            return [f"tshark on {pcap}: {e}"]
        if p.returncode != 0:
            return [f"tshark on {pcap} failed (status {p.returncode}): {p.stderr.strip()[-300:]}"]
        out[name] = p.stdout.splitlines()
    findings, guesses = [], []
    for line in out["findings"]:
        number, src6, csum, malformed, messages, protocols = (line.split("|") + [""] * 6)[:6]
        if (src6 and int(csum or "1", 0) == 0 and not malformed
                and set(messages.split(",")) == {ZERO_UDP6_CHECKSUM}):
            continue
        # Wireshark guesses at a SEND's payload (a byte pair that reads as an Ethertype, an
        # EoIB header) and calls the guess malformed when the application's bytes do not
        # fit it: a protocol after "infiniband" is such a guess, not the RoCE packet.
        layers = protocols.split(":")
        if "infiniband" in layers and layers[-1] != "infiniband":
            guesses.append(f"frame {number}: payload read as {':'.join(layers[layers.index('infiniband') + 1:])}")
            continue
        findings.append(f"frame {number}: {malformed or messages}")
    dissected = len(out["count"])
    with open(os.path.join(logdir, "tshark-check.log"), "w") as f:
        f.write(f"{dissected} frames dissected as InfiniBand (RoCEv2); the NIC counted {roce}\n")
        f.write(f"{len(out['findings']) - len(findings) - len(guesses)} IPv6 frames with UDP "
                "checksum 0\n")
        f.write(f"{len(guesses)} payloads Wireshark misread (not findings)\n")
        f.writelines(ln + "\n" for ln in guesses + findings)
    progress(f"tshark: {dissected} RoCEv2 frames dissected, {len(findings)} findings")
    problems = []
    if dissected != roce:
        problems.append(f"tshark dissected {dissected} frames as RoCEv2, the NIC's checker {roce}")
    if findings:
        problems.append(f"tshark: {len(findings)} RoCEv2 frames malformed or with an expert "
                        f"finding, first: {findings[0]} (see {logdir}/tshark-check.log)")
    return problems


def check_pcap(nic: str, logdir: str, vms: int, progress: Callable[[str], None],
               opcodes: Iterable[str] = ()) -> list[str]:
    """Runs `nic --check-pcap <logdir>/fabric.pcap` (output in <logdir>/pcap-check.log):
    every RoCEv2 frame must parse and pass the ICRC check; then tshark must agree
    (tshark_check); with two VMs, RoCEv2 frames must have gone both ways between node 1's
    and node 2's MAC; each operation of `opcodes` must be on the wire. Returns the problems
    found."""
    import subprocess
    pcap = os.path.join(logdir, "fabric.pcap")
    out_path = os.path.join(logdir, "pcap-check.log")
    try:
        p = subprocess.run([nic, "--check-pcap", pcap], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"pcap check of {pcap}: {e}"]
    with open(out_path, "w") as f:
        f.write(p.stdout + p.stderr)
    for line in p.stdout.splitlines():
        if line.startswith(("roce ", "total")):
            progress(f"pcap: {line}")
    problems = []
    if p.returncode != 0:
        bad = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith(("bad", "error"))]
        problems.append(f"pcap check failed (status {p.returncode}): "
                        f"{bad[0] if bad else 'see ' + out_path}")
    total = next(filter(None, map(PCAP_TOTAL.match, p.stdout.splitlines())), None)
    if total is not None:
        problems += tshark_check(pcap, int(total.group(1)), logdir, progress)
    if vms == 2:
        seen = {(m.group(1), m.group(2)): int(m.group(3))
                for m in map(ROCE_DIRECTION.match, p.stdout.splitlines()) if m}
        for a, b in ((1, 2), (2, 1)):
            if not seen.get((node_mac(a), node_mac(b))):
                problems.append(f"the capture has no RoCEv2 frame from node {a} to node {b} "
                                f"(see {out_path})")
    for op in missing_opcodes(p.stdout, opcodes):
        problems.append(f"the capture has no {op} frame (BTH opcodes "
                        f"{', '.join(f'{o:#04x}' for o in PCAP_OPCODES[op])}; see {out_path})")
    return problems


# --------------------------------------------------------------------------------------------
# A run

class _OutputTail:
    """Follows a growing text file and hands out its complete lines."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""

    def lines(self, final: bool = False) -> Iterator[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            data = b""
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        if final and self.partial:
            complete.append(self.partial)
            self.partial = b""
        for raw in complete:
            yield raw.decode("utf-8", errors="replace")


class _Interrupted(BaseException):
    pass


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt the run like Ctrl-C does, so cleanup still happens."""
    if threading.current_thread() is not threading.main_thread():
        # Runs side by side (run-tests --jobs): only the main thread gets signals; when it
        # ends, the children die with it (PR_SET_PDEATHSIG).
        yield
        return

    def handler(signum, _frame):
        raise _Interrupted(signal.Signals(signum).name)
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(cfg: Config) -> RunResult:
    """Boots cfg.vms guests, runs cfg.script in each and returns the verdicts. Raises
    HarnessError for problems found before anything was started (bad arguments, missing
    files); later trouble is reported in the result. Re-raises KeyboardInterrupt after
    stopping everything."""
    progress = cfg.on_progress or (lambda _msg: None)
    if cfg.vms not in (1, 2):
        raise HarnessError(f"--vms {cfg.vms}: only 1 or 2 VMs are supported")
    if cfg.rxe_lan and not cfg.fabric:
        raise HarnessError("a second LAN for rxe (rxe_lan) needs the fabric (FERRDMA_FABRIC=1)")
    if cfg.pcap_opcodes and not cfg.check_pcap:
        raise HarnessError("operations required on the wire (pcap_opcodes) need check_pcap")
    unknown = [op for op in cfg.pcap_opcodes if op not in PCAP_OPCODES]
    if unknown:
        raise HarnessError(f"unknown operations {unknown} (known: {sorted(PCAP_OPCODES)})")
    if not in_sysroot():
        raise HarnessError("the VM harness must run inside the ferrdma sysroot "
                           "(scripts/in-sysroot.sh)")
    if cfg.sequence:
        names = [p.name for p in cfg.sequence]
        if cfg.vms != 1 or cfg.kasan or cfg.check_pcap or cfg.split_fabric or cfg.replug:
            raise HarnessError("a shared boot (sequence) is for one VM, without KASAN, capture "
                               "checks, split fabrics or replugging")
        bad = [n for n in names if not PART_NAME.match(n)]
        if bad or len(set(names)) != len(names):
            raise HarnessError(f"sequence names {names}: distinct, of [a-z0-9_.-]")
    scripts = [p.script for p in cfg.sequence] or [cfg.script]
    for what, path in [*(("script", p) for p in scripts), ("kernel", cfg.kernel)]:
        if not os.path.isfile(path):
            raise HarnessError(f"{what} {path} does not exist")
    if cfg.nic is not None and not os.access(cfg.nic, os.X_OK):
        raise HarnessError(f"NIC binary {cfg.nic} does not exist (build it, or use --no-nic)")
    if cfg.nic_nodes is not None and not set(cfg.nic_nodes) <= set(range(1, cfg.vms + 1)):
        raise HarnessError(f"NICs for nodes {sorted(cfg.nic_nodes)}: the run has {cfg.vms} VM(s)")
    if cfg.check_pcap and not cfg.fabric:
        raise HarnessError("checking the fabric's capture needs the fabric (FERRDMA_FABRIC=1)")
    if cfg.pcap_vlan and not (cfg.split_fabric and cfg.capture and 1 <= cfg.pcap_vlan <= 4094):
        raise HarnessError(f"pcap_vlan={cfg.pcap_vlan}: a VLAN id 1-4094, with split_fabric "
                           f"and the capture")
    if cfg.split_fabric not in ("", "bridge", "vxlan"):
        raise HarnessError(f"split fabric {cfg.split_fabric!r}: bridge or vxlan")
    if cfg.split_fabric and (not cfg.fabric or cfg.rxe_lan or cfg.replug or cfg.check_pcap):
        raise HarnessError("split fabrics need the fabric and go without rxe_lan, replug and "
                           "check_pcap")
    if shutil.which("qemu-system-x86_64") is None:
        raise HarnessError("qemu-system-x86_64 is not installed")
    if not os.access(GUEST_INIT, os.X_OK):
        raise HarnessError(f"{GUEST_INIT} is missing or not executable")

    logdir = os.path.abspath(cfg.logdir) if cfg.logdir else new_run_dir()
    _prepare_logdir(logdir, cfg.vms)
    script_timeout = ((cfg.script_limit or guest_script_timeout(cfg.timeout))
                      if cfg.guest_timeout else 0)
    kverbs_dir = kverbs_module_dir(kernel_build_dir(cfg.kernel))
    progs = progs_dir()
    for node in range(1, cfg.vms + 1):
        share = os.path.join(logdir, f"vm{node}")
        if not cfg.sequence:
            shutil.copyfile(cfg.script, os.path.join(share, "script"))
        env = {
            "FERRDMA_NODE": str(node),
            "FERRDMA_NVMS": str(cfg.vms),
            "FERRDMA_IP": node_ip(node),
            "FERRDMA_PEER_IP": node_ip(3 - node) if cfg.vms == 2 else "",
            "FERRDMA_PREFIXLEN": str(LAN_MASK_BITS),
            "FERRDMA_MAC": node_mac(node),
            "FERRDMA_KO": cfg.ko,
            "FERRDMA_KBUILD": kernel_build_dir(cfg.kernel),
            "FERRDMA_RESULTS": f"{GUEST_SHARE}/results",
            "FERRDMA_HARNESS": HARNESS_DIR,
            "FERRDMA_SCRIPT_NAME": os.path.basename(cfg.script) if not cfg.sequence else "",
            "FERRDMA_HAVE_NIC": "1" if has_nic(cfg, node) else "0",
            "FERRDMA_ACCEL": cfg.accel,
            "FERRDMA_KVERBS_DIR": kverbs_dir,
            "FERRDMA_PROGS_DIR": progs,
            # guest/init's KASAN-lane proof after the script (guest/kverbs.sh:
            # kasan_plant_check), judged below from the share's kasan-proof.
            "FERRDMA_KASAN_PROOF": "1" if cfg.kasan else "0",
        }
        with open(os.path.join(share, "job"), "w") as f:
            f.write(job_file_text(env, cfg.args, script_timeout,
                                  [p.name for p in cfg.sequence]))
        for part in cfg.sequence:
            pdir = os.path.join(share, "seq", part.name)
            os.makedirs(os.path.join(pdir, "results"))
            shutil.copyfile(part.script, os.path.join(pdir, "script"))
            penv = {"FERRDMA_SCRIPT_NAME": os.path.basename(part.script),
                    "FERRDMA_RESULTS": f"{GUEST_SHARE}/seq/{part.name}/results"}
            with open(os.path.join(pdir, "job"), "w") as f:
                f.write(job_file_text(penv, list(part.args),
                                      guest_script_timeout(part.timeout)
                                      if cfg.guest_timeout else 0))
    with open(os.path.join(logdir, "command"), "w") as f:
        what = (" ".join(p.name for p in cfg.sequence) if cfg.sequence
                else f"{cfg.script} {shlex.join(cfg.args)}")
        f.write(f"script{'s in one boot' if cfg.sequence else ''}: {what}\nvms: {cfg.vms}\n"
                f"timeout: {cfg.timeout:.0f}s (script in guest: {script_timeout or 'none'})\n"
                f"kernel: {cfg.kernel}\nko: {cfg.ko}\nnic: {cfg.nic or 'none'}\n"
                f"nodes with a NIC: {nic_nodes_text(cfg)}\n"
                f"accel: {cfg.accel}\n")

    results = [VmResult(n) for n in range(1, cfg.vms + 1)]
    run_problems: list[str] = []
    nics: list[Child | None] = [None] * cfg.vms
    qemus: list[Child | None] = [None] * cfg.vms
    tails = [_OutputTail(os.path.join(logdir, f"vm{n}", "output")) for n in range(1, cfg.vms + 1)]
    sockdir = tempfile.mkdtemp(prefix="ferrdma-vm-")  # short paths: sun_path is 108 bytes
    lan_sock = os.path.join(sockdir, "lan.sock")
    ctl_sock = os.path.join(sockdir, "control.sock")
    fabric_ctl: FabricControl | None = None
    start = time.monotonic()

    def drain(final: bool = False) -> None:
        if cfg.on_output:
            for i, tail in enumerate(tails):
                for line in tail.lines(final):
                    cfg.on_output(i + 1, line)

    fabric: Child | None = None
    split = SplitNet(os.getpid(), cfg.split_fabric) if cfg.split_fabric else None
    try:
        with _signals_raise():
            # 0. The fabric, when asked for: one switch port per VM. With NICs, the same
            #    ferrdma-nic process serves every VM's NIC, so the NICs' RoCE engines sit on
            #    that switch too (RDMA between the VMs goes through it). Split: a process
            #    per VM in its own namespace, joined through host networking.
            if split is not None:
                split.up(cfg.vms)
                for n in range(1, cfg.vms + 1):
                    argv = [*split.enter(n), cfg.nic or default_nic(),
                            "--lan", f"{lan_sock}.{n}", "--interface", split.interface(n)]
                    if cfg.capture:
                        argv += ["--pcap", os.path.join(logdir, f"fabric{n}.pcap"),
                                 "--pcap-snaplen", str(cfg.pcap_snaplen)]
                    if has_nic(cfg, n):
                        argv += ["--socket", os.path.join(sockdir, f"nic{n}.sock"),
                                 "--mac", node_mac(n)]
                    argv += list(cfg.nic_args)
                    child = Child(f"fabric{n}", argv, os.path.join(logdir, f"fabric{n}.log"))
                    _wait_for_socket(f"{lan_sock}.{n}", child, 15.0)
                    if has_nic(cfg, n):
                        _wait_for_socket(os.path.join(sockdir, f"nic{n}.sock"), child, 15.0)
                    nics[n - 1] = child
            elif cfg.fabric:
                fabric_bin = cfg.nic or default_nic()
                argv = [fabric_bin]
                if cfg.capture or cfg.check_pcap:
                    argv += ["--pcap", os.path.join(logdir, "fabric.pcap")]
                if cfg.capture and not cfg.check_pcap:
                    argv += ["--pcap-snaplen", str(cfg.pcap_snaplen)]
                for n in range(1, cfg.vms + 1):
                    argv += ["--lan", f"{lan_sock}.{n}"]
                for n in range(1, cfg.vms + 1) if cfg.rxe_lan else ():
                    argv += ["--lan", f"{lan_sock}.{n}.rxe"]
                for n in range(1, cfg.vms + 1):
                    if has_nic(cfg, n):
                        argv += ["--socket", os.path.join(sockdir, f"nic{n}.sock"),
                                 "--mac", node_mac(n)]
                if cfg.replug:
                    argv += ["--replug"]
                argv += ["--control", ctl_sock]
                argv += list(cfg.nic_args)
                fabric = Child("fabric", argv, os.path.join(logdir, "fabric.log"))
                _wait_for_socket(f"{lan_sock}.{cfg.vms}", fabric, 15.0)
                _wait_for_socket(ctl_sock, fabric, 15.0)
                fabric_ctl = FabricControl(ctl_sock, logdir, cfg.vms,
                                           nic_port={n: k for k, n in enumerate(
                                               n for n in range(1, cfg.vms + 1)
                                               if has_nic(cfg, n))},
                                           qmp={n: qmp_sock_path(sockdir, n)
                                                for n in range(1, cfg.vms + 1)},
                                           replug={n: nic_device(cfg, os.path.join(
                                               sockdir, f"nic{n}.sock"))
                                               for n in range(1, cfg.vms + 1)
                                               if cfg.replug and has_nic(cfg, n)},
                                           kill_nic=fabric.kill_on_request)
                for n in range(1, cfg.vms + 1):
                    if has_nic(cfg, n):
                        _wait_for_socket(os.path.join(sockdir, f"nic{n}.sock"), fabric, 15.0)
                        nics[n - 1] = fabric
            # 1. Without the fabric, the NICs run one process each.
            for i in range(cfg.vms):
                if not has_nic(cfg, i + 1) or nics[i] is not None:
                    continue
                sock = os.path.join(sockdir, f"nic{i + 1}.sock")
                nics[i] = Child(f"nic{i + 1}", [cfg.nic, "--socket", sock, "--mac", node_mac(i + 1),
                                                *(["--replug"] if cfg.replug else []),
                                                *cfg.nic_args],
                                os.path.join(logdir, f"nic{i + 1}.log"))
                _wait_for_socket(sock, nics[i], 15.0)
            # 2. The VMs; node 1 first, as it creates the LAN socket node 2 connects to.
            progress(f"booting {cfg.vms} VM(s) ({cfg.accel}), logs in {logdir}")
            start = time.monotonic()
            for i in range(cfg.vms):
                nic_sock = (os.path.join(sockdir, f"nic{i + 1}.sock") if has_nic(cfg, i + 1)
                            else None)
                qemus[i] = Child(f"vm{i + 1}",
                                 qemu_argv(cfg, i + 1, logdir, lan_sock, nic_sock,
                                           qmp_sock_path(sockdir, i + 1)),
                                 os.path.join(logdir, f"qemu{i + 1}.log"))
                if i == 0 and cfg.vms > 1 and not cfg.fabric:
                    _wait_for_socket(lan_sock, qemus[0], 15.0)
            # 3. Wait for every guest to power off, or for the deadline.
            deadline = start + cfg.timeout
            peer_failed: tuple[float, str] | None = None  # (when to stop the rest, why)
            while True:
                drain()
                if fabric_ctl is not None:
                    fabric_ctl.poll()
                running = [q for q in qemus if q is not None and not q.exited()]
                if not running:
                    break
                for i, q in enumerate(qemus):
                    if q is None or not q.exited() or q.returncode is not None:
                        continue
                    if q.reap() != 0:
                        # QEMU itself failed (e.g. it could not attach the NIC): the other VM
                        # would only wait for its peer until the timeout.
                        for j, other in enumerate(qemus):
                            if other is not None and not other.exited():
                                results[j].problems.append(f"stopped early: vm{i + 1} failed")
                                other.stop()
                    elif peer_failed is None and cfg.vms > 1:
                        status = _read(os.path.join(logdir, f"vm{i + 1}", "status"))
                        if status is not None and status.strip() not in ("", "0"):
                            peer_failed = (time.monotonic() + cfg.peer_grace,
                                           f"vm{i + 1}'s script failed (status "
                                           f"{status.strip()})")
                if peer_failed is not None and time.monotonic() >= peer_failed[0]:
                    for j, other in enumerate(qemus):
                        if other is not None and not other.exited():
                            results[j].problems.append(
                                f"stopped {cfg.peer_grace:.0f} s after {peer_failed[1]}: "
                                "it would only have waited for its peer")
                            results[j].stopped_for_peer = True
                            other.stop()
                for i, nic in enumerate(nics):
                    q = qemus[i]
                    if (nic is not None and nic.exited() and q is not None and not q.exited()
                            and not nic.killed_on_request):
                        results[i].problems.append(
                            f"nic{i + 1} exited (status {nic.reap()}) while vm{i + 1} was running;"
                            f" see {nic.log_path}")
                        q.stop()
                if time.monotonic() >= deadline:
                    for q in running:
                        results[int(q.name[2:]) - 1].timed_out = True
                        q.stop()
                    break
                time.sleep(0.2)
    except _Interrupted as e:  # cleaned up by the finally clause
        raise KeyboardInterrupt(str(e)) from None
    except HarnessError as e:
        run_problems.append(str(e))
    finally:
        # A NIC that serves one client after another does not end with its VM.
        _stop_all(qemus, nics, nic_grace=0.0 if cfg.replug else 5.0)
        if fabric is not None:
            fabric.stop()
        if split is not None:
            split.down(cfg.vms)
        shutil.rmtree(sockdir, ignore_errors=True)
    wall = time.monotonic() - start
    drain(final=True)
    if cfg.check_pcap and fabric is not None:
        run_problems += check_pcap(cfg.nic or default_nic(), logdir, cfg.vms, progress,
                                   cfg.pcap_opcodes)
    if cfg.pcap_vlan and split is not None:
        run_problems += check_split_vlan(logdir, cfg.vms, cfg.pcap_vlan)

    for i, vm in enumerate(results):
        q, nic = qemus[i], nics[i]
        if q is None:
            vm.problems.append("not started (see above)")
            continue
        vm.qemu_status = q.returncode
        if q.ended is not None:
            vm.wall_seconds = q.ended - q.started
        if vm.qemu_status not in (0, None) and not vm.timed_out and not q.signalled:
            vm.problems.append(f"QEMU exited with status {vm.qemu_status}: "
                               f"{_last_line(q.log_path)} (see {q.log_path})")
        if nic is not None:
            if nic.signalled and not cfg.replug:
                progress(f"nic{i + 1} did not exit by itself when vm{i + 1} ended; stopped it")
            elif nic.returncode not in (0, None) and not nic.killed_on_request:
                vm.problems.append(f"nic{i + 1} exited with status {nic.returncode}; "
                                   f"see {nic.log_path}")
            nic_log = _read(nic.log_path) or ""
            for line in nic_log.splitlines():
                if "panicked at" in line:
                    vm.problems.append(f"nic{i + 1} panicked: {line.strip()}")
        if cfg.sequence:
            _collect_sequence(vm, logdir, cfg)
        else:
            _collect(vm, logdir, cfg, script_timeout)
    return RunResult(logdir, results, wall, run_problems)


def _last_line(path: str) -> str:
    lines = [ln.strip() for ln in (_read(path) or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def _stop_all(qemus: list[Child | None], nics: list[Child | None],
              nic_grace: float = 5.0) -> None:
    """Stops every QEMU, then gives each NIC `nic_grace` seconds to exit by itself before
    stopping it."""
    for q in qemus:
        if q is not None:
            q.stop()
    for nic in nics:
        if nic is not None:
            nic.wait_exit(nic_grace)
            nic.stop()


# A retry announced by a guest script (guest/lib.sh: retrying PART CAUSE...).
RETRY_PREFIX = "ferrdma-retry: "


# How much of a failed test's diagnostics the recap at the end of a run repeats.
RECAP_HEAD = 3
RECAP_LINES = 12


def failure_recap(failures: list[tuple[str, list[str]]]) -> list[str]:
    """The failed tests again, for the end of a run, where a reader of a long log (or of only
    its tail, as CI shows it) looks: per test its name and the first RECAP_HEAD diagnostic
    lines, then the lines that say why ("FAIL", "timed out", "splat", "KASAN", "error"), at
    most RECAP_LINES in all; the full diagnostics stay where the test reported."""
    if not failures:
        return []
    lines = [f"failed, again (the full diagnostics are at each 'not ok'): {len(failures)}"]
    why = ("FAIL", "timed out", "timeout", "splat", "KASAN", "error", "Error")
    for name, diags in failures:
        picked = diags[:RECAP_HEAD] + [d for d in diags[RECAP_HEAD:] if any(w in d for w in why)]
        shown = picked[:RECAP_LINES]
        lines.append(f"  {name}")
        lines += [f"    {d}".rstrip() for d in shown]
        if len(picked) > len(shown):
            lines.append(f"    ... ({len(diags)} diagnostic lines in all)")
    return lines


def retries(output: str) -> list[str]:
    """The retries a script's output announces, each as "PART: CAUSE", in order."""
    return [line[len(RETRY_PREFIX):].strip() for line in output.splitlines()
            if line.startswith(RETRY_PREFIX)]


def _collect_sequence(vm: VmResult, logdir: str, cfg: Config) -> None:
    """A shared boot's results: vm.parts gets one VmResult for each part that ran, read from
    its directory like a boot of its own (_collect), but with the console's splats only for
    a part that left no status (the guest crashed, hung or was killed while it ran: what the
    console shows is its). The VM's own problems (QEMU, the NIC, the harness's timeout) go to
    the part that was running, else to the last that ran; if none ran, to the first part."""
    share = os.path.join(logdir, f"vm{vm.node}")
    vm.share = share
    for part in cfg.sequence:
        pdir = os.path.join(share, "seq", part.name)
        if not os.path.exists(os.path.join(pdir, "timing")):
            break  # never started: the guest went down, or an earlier part ended the sequence
        r = VmResult(vm.node)
        _collect(r, logdir, cfg, guest_script_timeout(part.timeout) if cfg.guest_timeout else 0,
                 share=pdir, console=None)
        left = _read(os.path.join(pdir, "left-behind"))
        if left:
            r.problems.append(left.strip())
        vm.parts[part.name] = r
        if r.status is None:
            break
    if not vm.parts:
        first = cfg.sequence[0]
        r = VmResult(vm.node)
        _collect(r, logdir, cfg, 0, share=os.path.join(share, "seq", first.name), console=True)
        vm.parts[first.name] = r
    last = next(reversed(vm.parts.values()))
    if vm.timed_out:
        last.problems.append(_timeout_problem(cfg, " (the shared boot's limit)"))
    last.problems += vm.problems
    vm.status = last.status


def _timeout_problem(cfg: Config, limit: str = "") -> str:
    """What a VM killed at the harness's time limit is told."""
    return f"timed out: the guest was still running after {cfg.timeout:.0f}s{limit} and was killed"


def _collect(vm: VmResult, logdir: str, cfg: Config, script_timeout: int,
             share: str | None = None, console: bool | None = True) -> None:
    """Reads a finished VM's share (or `share`: a part's directory in it) and console, and
    records what went wrong. console: scan the console for splats; None: only when the script
    left no status (a part of a shared boot, whose own kernel log is its dmesg)."""
    n = vm.node
    share = share or os.path.join(logdir, f"vm{n}")
    vm.share = share
    vm.output = _read(os.path.join(share, "output")) or ""
    vm.retries = retries(vm.output)
    status = _read(os.path.join(share, "status"))
    if status is not None and status.strip().lstrip("-").isdigit():
        vm.status = int(status.strip())
    timing = dict(re.findall(r"^(\w+)=([\d.]+)$", _read(os.path.join(share, "timing")) or "",
                             re.M))
    if "script_start" in timing:
        vm.boot_seconds = float(timing["script_start"])
        if "script_end" in timing:
            vm.script_seconds = float(timing["script_end"]) - vm.boot_seconds

    console_path = os.path.join(logdir, f"vm{n}.console")
    dmesg_path = os.path.join(share, "dmesg")
    found: list[splat.Splat] = []
    scan_console = console or (console is None and vm.status is None)
    dmesg_label = os.path.relpath(dmesg_path, logdir)
    for path, label in ((console_path, f"vm{n}.console"), (dmesg_path, dmesg_label)):
        if os.path.exists(path) and (path != console_path or scan_console):
            found += splat.scan_file(path, label)
    vm.splats = splat.dedup(found)
    # KUnit: the dmesg dump is complete (log_buf_len); the console is the fallback after a crash.
    log_for_kunit = dmesg_path if os.path.exists(dmesg_path) else console_path
    if os.path.exists(log_for_kunit) and (log_for_kunit != console_path or scan_console):
        vm.kunit = ktap.parse_file(log_for_kunit)

    if cfg.kasan and os.path.exists(console_path):
        with open(console_path, encoding="utf-8", errors="replace") as f:
            if KASAN_BOOT_LINE not in f.read():
                vm.problems.append(f"the kernel ran without KASAN (no \"{KASAN_BOOT_LINE}\" "
                                   f"in vm{n}.console), but the test is in the KASAN lane")
        # The lane must prove it looks: a use-after-free planted after the script
        # (guest/init, 5b) must have been reported.
        if vm.status is not None and vm.status != 124:
            proof = (_read(os.path.join(share, "kasan-proof")) or "").strip()
            if not proof.startswith("reported: "):
                vm.problems.append("KASAN did not prove it looks: the use-after-free planted "
                                   "after the script (guest/kverbs.sh: kasan_plant_check) "
                                   f"gave {proof.splitlines()[0] if proof else 'no result'!r}")
    if vm.timed_out:
        vm.problems.append(_timeout_problem(cfg))
    if vm.status is None:
        if not vm.timed_out and not vm.stopped_for_peer:
            vm.problems.append("the guest did not report the script's exit status "
                               f"(crashed or failed to boot? see {console_path})")
    elif vm.status == 124 and script_timeout:
        vm.problems.append(f"the script timed out in the guest after {script_timeout}s")
        vm.problems += hang_summary(_read(os.path.join(share, "hang-report")) or "", n)
    elif vm.status != 0:
        vm.problems.append(f"the script exited with status {vm.status}")
    bad = splat.failures(vm.splats)
    if bad:
        vm.problems.append(f"{len(bad)} kernel splat line(s), first: {bad[0]}")
    leaks = _read(os.path.join(share, "kmemleak")) or ""
    n_leaks = len(re.findall(r"^unreferenced object", leaks, re.M))
    if n_leaks:
        vm.problems.append(f"kmemleak after the script: {n_leaks} suspected leak(s) from ferrdma "
                           f"or the RDMA core (vm{n}/kmemleak)")
        vm.problems += ["kmemleak: " + ln for ln in leaks.splitlines()[:12]]
    leak_error = _read(os.path.join(share, "kmemleak-error"))
    if leak_error:
        vm.problems.append(f"the kmemleak check after the script {leak_error.strip()} "
                           f"(see the end of the output)")
    if "leakcheck_end" in timing and "script_end" in timing:
        vm.leakcheck_seconds = float(timing["leakcheck_end"]) - float(timing["script_end"])


HANG_THREADS_SHOWN = 12


def hang_summary(report: str, node: int) -> list[str]:
    """The one-line-per-thread part of the guest's hang report (guest/init: hang_report)."""
    lines = report.split("\n--- ", 1)[0].splitlines()
    if not lines:
        return ["no hang report from the guest"]
    shown = [f"hang: {ln}" for ln in lines[:HANG_THREADS_SHOWN + 1]]
    if len(lines) > HANG_THREADS_SHOWN + 1:
        shown.append(f"hang: ... {len(lines) - HANG_THREADS_SHOWN - 1} more thread(s) "
                     f"in vm{node}/hang-report")
    return shown


# --------------------------------------------------------------------------------------------
# Reporting

def describe(vm: VmResult) -> str:
    """One line about a VM's run."""
    bits = []
    bits.append("no exit status" if vm.status is None else f"exit status {vm.status}")
    if vm.boot_seconds is not None:
        bits.append(f"boot-to-script {vm.boot_seconds:.1f}s")
    if vm.script_seconds is not None:
        bits.append(f"script {vm.script_seconds:.1f}s")
    if vm.leakcheck_seconds is not None:
        bits.append(f"kmemleak check {vm.leakcheck_seconds:.1f}s")
    if vm.wall_seconds is not None:
        bits.append(f"VM {vm.wall_seconds:.1f}s")
    if vm.kunit:
        counts = {s: sum(c.status == s for c in vm.kunit)
                  for s in (ktap.PASS, ktap.FAIL, ktap.SKIP)}
        bits.append(f"kunit {counts['pass']} passed, {counts['fail']} failed, "
                    f"{counts['skip']} skipped")
    bad = splat.failures(vm.splats)
    bits.append(f"{len(bad)} splat line(s)" if bad else "log clean")
    return ", ".join(bits)
