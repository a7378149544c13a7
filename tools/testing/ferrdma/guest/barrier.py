#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A barrier between the VMs of one ferrdma-vm run, over TCP on the LAN.

    barrier.py NAME [SECONDS] [--say WORD]
    barrier.py --daemon

Returns (exit 0) once every VM of the run has called `barrier.py NAME`; exits 1 if that has
not happened within SECONDS (default 120). With --say, every node brings a word (no spaces)
and, once released, prints every node's word as lines "N WORD" (node 1 first), so the nodes
can agree on outcomes they saw separately. Node 1 coordinates: it listens on TCP port 7700
and answers "go NAME" to every other node once all of them have sent "NAME <node>". The other
nodes connect to node 1 ($FERRDMA_PEER_IP in a 2-VM run), retrying while it is not yet
listening. With one VM it returns at once. Barriers must be passed in the same order on
every node; a node that arrives at a different NAME makes both sides fail.

--daemon serves the same barriers to the guest's scripts on 127.0.0.1:7701, one at a time: a
request is a line "NAME SECONDS [WORD]", the answer the lines "N WORD" of every node's word
(none without WORD) and then "ok", or one line "fail NAME". guest/init starts it in 2-VM runs,
so that a barrier costs the shell a connection instead of a Python start (1-2 s of TCG time
each; a two-VM test passes hundreds of barriers).
"""

import os
import socket
import sys
import time

PORT = 7700
LOCAL_PORT = 7701


def log(msg: str) -> None:
    print(f"barrier: {msg}", file=sys.stderr)


def coordinate(name: str, others: int, deadline: float, say: str) -> list[str] | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", PORT))
        srv.listen(8)
        arrived = []
        words = [f"1={say}"] if say else []
        try:
            while len(arrived) < others:
                left = deadline - time.monotonic()
                if left <= 0:
                    log(f"{name}: {len(arrived)} of {others} peers arrived in time")
                    return None
                srv.settimeout(left)
                try:
                    conn, peer = srv.accept()
                except socket.timeout:
                    continue
                conn.settimeout(max(deadline - time.monotonic(), 0.1))
                try:
                    msg = conn.makefile().readline().split()
                except OSError:
                    conn.close()
                    continue
                if not msg or msg[0] != name:
                    log(f"{name}: {peer[0]} arrived at barrier {msg[0] if msg else '?'} instead")
                    conn.sendall(f"mismatch {name}\n".encode())
                    conn.close()
                    return None
                arrived.append(conn)
                if len(msg) >= 3:
                    words.append(f"{msg[1]}={msg[2]}")
            for conn in arrived:
                conn.sendall(" ".join(["go", name, *words]).encode() + b"\n")
            return words
        finally:
            for conn in arrived:
                conn.close()


def join(name: str, node: str, coordinator: str, deadline: float,
         say: str) -> list[str] | None:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((coordinator, PORT), timeout=2) as conn:
                conn.sendall(" ".join([name, node, *([say] if say else [])]).encode() + b"\n")
                conn.settimeout(max(deadline - time.monotonic(), 0.1))
                reply = conn.makefile().readline().split()
                if reply[:2] == ["go", name]:
                    return reply[2:]
                if reply:
                    log(f"{name}: coordinator answered {' '.join(reply)}")
                    return None
        except OSError:
            pass  # not listening yet, or the link is not up yet
        time.sleep(0.2)
    log(f"{name}: node 1 ({coordinator}) did not release the barrier in time")
    return None


def barrier(name: str, deadline: float, say: str) -> list[str] | None:
    nvms = int(os.environ.get("FERRDMA_NVMS", "1"))
    node = os.environ.get("FERRDMA_NODE", "1")
    if nvms <= 1:
        return [f"1={say}"] if say else []
    if node == "1":
        return coordinate(name, nvms - 1, deadline, say)
    return join(name, node, os.environ["FERRDMA_PEER_IP"], deadline, say)


def daemon() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", LOCAL_PORT))
        srv.listen(8)
        while True:
            conn, _ = srv.accept()
            with conn:
                try:
                    conn.settimeout(10)
                    req = conn.makefile().readline().split()
                    conn.settimeout(None)
                except OSError:
                    continue
                if len(req) not in (2, 3):
                    log(f"daemon: bad request {' '.join(req)!r}")
                    reply = "fail ?\n"
                else:
                    try:
                        secs = float(req[1])
                    except ValueError:
                        secs = -1.0
                    words = None if secs < 0 else barrier(
                        req[0], time.monotonic() + secs, req[2] if len(req) == 3 else "")
                    if words is None:
                        reply = f"fail {req[0]}\n"
                    else:
                        reply = "".join(f"{n} {w}\n" for n, _, w in
                                        (x.partition("=") for x in sorted(words))) + "ok\n"
                try:
                    conn.sendall(reply.encode())
                except OSError:
                    pass  # the caller gave up


def main() -> int:
    args = sys.argv[1:]
    if args == ["--daemon"]:
        return daemon()
    say = ""
    if "--say" in args:
        i = args.index("--say")
        if i + 1 >= len(args) or not args[i + 1] or any(c.isspace() for c in args[i + 1]):
            print(__doc__, file=sys.stderr)
            return 2
        say = args[i + 1]
        del args[i:i + 2]
    if len(args) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    name = args[0]
    deadline = time.monotonic() + (float(args[1]) if len(args) == 2 else 120.0)
    words = barrier(name, deadline, say)
    if words is None:
        return 1
    for w in sorted(words):
        n, _, word = w.partition("=")
        print(n, word)
    return 0


if __name__ == "__main__":
    sys.exit(main())
