#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Raw uverbs commands with hand-made driver data (udata), for hostile-input tests.

Issues the legacy GET_CONTEXT write command on a fresh /dev/infiniband/uverbsN file with any
request bytes and any response length, bypassing libibverbs, and prints the result as JSON:
{"errno": 0 or E..., "resp": hex of the driver response}.

    uverbs_raw.py get-context DEV REQ_HEX OUTLEN
"""
import ctypes
import errno
import json
import os
import struct
import sys

IB_USER_VERBS_CMD_GET_CONTEXT = 0
CORE_RESP = 8  # struct ib_uverbs_get_context_resp: async_fd, num_comp_vectors


def get_context(dev: str, req: bytes, outlen: int) -> dict:
    # Requests are whole 32-bit words; pad the driver part.
    req = req + b"\0" * (-len(req) % 4)
    resp = ctypes.create_string_buffer(CORE_RESP + outlen + 8)
    count = 8 + 8 + len(req)
    out_words = (CORE_RESP + outlen) // 4
    cmd = struct.pack("<IHHQ", IB_USER_VERBS_CMD_GET_CONTEXT, count // 4, out_words,
                      ctypes.addressof(resp)) + req
    fd = os.open(dev, os.O_RDWR)
    try:
        os.write(fd, cmd)
        err = 0
    except OSError as e:
        err = e.errno
    finally:
        os.close(fd)
    return {"errno": errno.errorcode.get(err, str(err)) if err else 0,
            "resp": resp.raw[CORE_RESP:CORE_RESP + outlen].hex()}


def main() -> int:
    if len(sys.argv) != 5 or sys.argv[1] != "get-context":
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(get_context(sys.argv[2], bytes.fromhex(sys.argv[3]), int(sys.argv[4]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
