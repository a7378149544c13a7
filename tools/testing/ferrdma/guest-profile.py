#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""guest-profile.py: a sampling profiler of a TCG guest, through QEMU's GDB stub.

Boot the VMs with FERRDMA_GDB=1 (vmharness.py then gives each VM a GDB stub on
LOGDIR/gdbN.sock), then run this against one of them:

  FERRDMA_GDB=1 tools/testing/ferrdma/ferrdma-vm --logdir /tmp/p SCRIPT &
  tools/testing/ferrdma/guest-profile.py --socket /tmp/p/gdb1.sock

It stops the vCPU HZ times a second, reads its instruction pointer and lets it go on; at the
end (the VM powered off, or --seconds) it prints where the samples fell: user space, or the
kernel function (from the build's System.map; module addresses as one line). TCG stops a vCPU
between translated blocks, so a sample lands on the start of a block: good enough for where a
guest spends its time, not for which instruction.
"""

import argparse
import bisect
import collections
import os
import socket
import sys
import time

RIP = 16  # the amd64 register number of rip in GDB's remote protocol


class Stub:
    """A GDB remote-protocol connection in no-ack mode."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""
        self.ack = True
        self.request("QStartNoAckMode")
        self.ack = False

    def send(self, data: str):
        body = data.encode()
        self.sock.sendall(b"$" + body + b"#" + f"{sum(body) % 256:02x}".encode())

    def packet(self) -> str:
        while True:
            start = self.buf.find(b"$")
            end = self.buf.find(b"#", start + 1) if start >= 0 else -1
            if start >= 0 and end >= 0 and len(self.buf) >= end + 3:
                body = self.buf[start + 1:end]
                self.buf = self.buf[end + 3:]
                if self.ack:
                    self.sock.sendall(b"+")
                return body.decode(errors="replace")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the GDB stub closed the connection")
            self.buf += chunk

    def request(self, data: str) -> str:
        self.send(data)
        return self.packet()

    def sample(self) -> int:
        """Stops the vCPU, reads rip, lets it run on."""
        self.sock.sendall(b"\x03")
        while not self.packet().startswith(("T", "S")):
            pass
        value = self.request(f"p{RIP:x}")
        self.send("c")
        return int.from_bytes(bytes.fromhex(value), "little")


def load_symbols(path: str) -> tuple[list[int], list[str]]:
    syms = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def name_of(rip: int, addrs: list[int], names: list[str]) -> str:
    if rip < 1 << 63:
        return "[user space]"
    if rip >= 0xffffffffa0000000:
        return "[modules]"
    i = bisect.bisect_right(addrs, rip) - 1
    return names[i] if i >= 0 else f"[unknown {rip:#x}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="the VM's GDB stub (LOGDIR/gdbN.sock)")
    ap.add_argument("--system-map", default=os.path.join(
        os.environ.get("FERRDMA_CACHE", "/var/cache/ferrdma"), "kernel/build/System.map"))
    ap.add_argument("--hz", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: at power off)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--wait", type=float, default=120.0, help="how long to wait for the socket")
    opts = ap.parse_args()

    addrs, names = load_symbols(opts.system_map)
    deadline = time.monotonic() + opts.wait
    while not os.path.exists(opts.socket):
        if time.monotonic() > deadline:
            print(f"guest-profile: no socket {opts.socket}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    stub = Stub(opts.socket)
    stub.send("c")
    counts: collections.Counter[str] = collections.Counter()
    start = time.monotonic()
    try:
        while not opts.seconds or time.monotonic() - start < opts.seconds:
            counts[name_of(stub.sample(), addrs, names)] += 1
            time.sleep(1.0 / opts.hz)
    except (EOFError, OSError, KeyboardInterrupt):
        pass
    total = sum(counts.values())
    print(f"guest-profile: {total} samples over {time.monotonic() - start:.0f} s")
    for name, n in counts.most_common(opts.top):
        print(f"{100.0 * n / max(total, 1):6.2f}% {n:7d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
