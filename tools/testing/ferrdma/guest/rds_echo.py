#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""RDS over RDMA echo (guest/ulp.sh, tests/ulp-rds-*.sh).

    rds_echo.py server MY_IP PORT
    rds_echo.py client MY_IP PORT SERVER_IP

Both bind an AF_RDS socket to MY_IP:PORT. The client sends MESSAGES messages of the sizes in
SIZES, each a pseudo-random pattern that depends on its index and size only; the server checks
each against the pattern it expects next (RDS is reliable and ordered between two sockets) and
sends it back; the client checks every echo. A last message "end" ends the server. Exit status
0 only if every byte matched.
"""

import random
import socket
import sys

SIZES = [1, 200, 4096, 4097, 65536, 262144, 1048576]
ROUNDS = 3


def pattern(i: int, size: int) -> bytes:
    return random.Random(f"rds/{i}/{size}").randbytes(size)


def messages():
    i = 0
    for _ in range(ROUNDS):
        for size in SIZES:
            yield i, size
            i += 1


def rds_socket(ip: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    # Room for a few of the largest messages in flight (RDS counts queued bytes per socket).
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        s.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
    s.bind((ip, port))
    s.settimeout(120)
    return s


def server(ip: str, port: int) -> int:
    s = rds_socket(ip, port)
    print(f"rds server: bound to {ip}:{port}", flush=True)
    n = total = 0
    for i, size in messages():
        data, peer = s.recvfrom(2 << 20)
        if data != pattern(i, size):
            print(f"rds server: message {i} ({len(data)} bytes from {peer}) is not pattern "
                  f"{i} of {size} bytes", flush=True)
            return 1
        s.sendto(data, peer)
        n += 1
        total += size
    data, peer = s.recvfrom(2 << 20)
    if data != b"end":
        print(f"rds server: expected the end message, got {len(data)} bytes", flush=True)
        return 1
    print(f"rds server: {n} messages ({total} bytes) checked and echoed", flush=True)
    return 0


def client(ip: str, port: int, server_ip: str) -> int:
    s = rds_socket(ip, port)
    n = total = 0
    for i, size in messages():
        s.sendto(pattern(i, size), (server_ip, port))
        data, peer = s.recvfrom(2 << 20)
        if data != pattern(i, size):
            print(f"rds client: echo {i} ({len(data)} bytes from {peer}) differs from what "
                  f"was sent ({size} bytes)", flush=True)
            return 1
        n += 1
        total += size
    s.sendto(b"end", (server_ip, port))
    print(f"rds client: {n} messages of {min(SIZES)}..{max(SIZES)} bytes ({total} bytes) sent "
          f"to {server_ip}:{port} and echoed back identical", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "server":
        return server(argv[2], int(argv[3]))
    if len(argv) == 5 and argv[1] == "client":
        return client(argv[2], int(argv[3]), argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except OSError as e:
        print(f"rds_echo: {e}", file=sys.stderr)
        sys.exit(1)
