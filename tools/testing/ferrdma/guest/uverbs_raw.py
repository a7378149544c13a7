#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Raw uverbs commands with hand-made driver data (udata), for hostile-input tests.

Bypasses libibverbs: every command is a legacy uverbs write() on /dev/infiniband/uverbsN with
the layouts of include/uapi/rdma/ib_user_verbs.h and the irdma driver structs of
include/uapi/rdma/irdma-abi.h.

    uverbs_raw.py get-context DEV REQ_HEX OUTLEN
        GET_CONTEXT on a fresh file with any request bytes and any response length; prints
        {"errno": 0 or E..., "resp": hex of the driver response}.

    uverbs_raw.py scenario DEV GID_INDEX GID_HEX [leave-open]
        On one file: a valid GET_CONTEXT and ALLOC_PD, then hostile and valid REG_MR, DEREG_MR,
        CREATE_CQ, DESTROY_CQ, CREATE_QP, MODIFY_QP, DESTROY_QP, CREATE_AH and DESTROY_AH
        commands on buffers mmap()ed here, and the kernel-verbs commands POLL_CQ, REQ_NOTIFY_CQ,
        POST_SEND, POST_RECV and POST_SRQ_RECV against these user objects. Prints one line per case:
            case NAME ERRNO [KEY=VALUE ...]
        (ERRNO is 0 or a name such as EINVAL; 95 is printed as EOPNOTSUPP). It does not judge
        the errnos: the calling test holds the expectations. GID_INDEX/GID_HEX name a RoCE v2
        GID of the device (for address vectors). With "leave-open" it instead creates one of
        each object and exits without destroying anything, so that the kernel cleans up on
        file release. Exits 0 unless the scenario itself broke (a setup step failed).

    uverbs_raw.py context-quota DEV
        A child process drops to uid/gid 65534 and opens user contexts (GET_CONTEXT, one file
        each) until one is refused or 5000 are open (its file limit raised to hold them);
        while it holds them, root opens one more.
        Prints "case nobody.contexts ERRNO opened=N" (ERRNO of the refusal, 0 if none) and
        "case root.context_while_nobody_holds ERRNO".

    uverbs_raw.py context-cycles DEV N
        A child process drops to uid/gid 65534 and, N times, opens a file, creates a user
        context (GET_CONTEXT), maps its doorbell page, allocates a PD and closes everything but
        the PD, which the file's release must free. With N above the per-user quota (1024 of
        the 4096 doorbell pages), a context, doorbell page or quota slot that a close does not
        give back makes a later cycle fail. Prints
        "case nobody.context_cycles ERRNO done=N" (ERRNO of the first failure, 0 if none).

    uverbs_raw.py readonly-ring DEV FILE
        As root: drops to uid/gid 65534, then registers a PROT_READ, MAP_SHARED mapping of
        FILE (which that user can only read) as CQ and QP rings and as a memory MR, and where
        a CQ gets created on it makes the device write a flush CQE there; a control CQ in the
        process's own memory shows that the flush writes one. Prints "case" lines as above;
        "file.bytes_changed_in_mapping ... changed=N" counts the bytes that changed.
"""
import ctypes
import errno
import json
import mmap
import os
import resource
import struct
import sys
import time

# enum ib_uverbs_write_cmds (legacy write commands)
CMD_GET_CONTEXT = 0
CMD_ALLOC_PD = 3
CMD_DEALLOC_PD = 4
CMD_CREATE_AH = 5
CMD_DESTROY_AH = 8
CMD_REG_MR = 9
CMD_REREG_MR = 11
CMD_DEREG_MR = 13
CMD_CREATE_CQ = 18
CMD_RESIZE_CQ = 19
CMD_POLL_CQ = 22
CMD_REQ_NOTIFY_CQ = 23
CMD_DESTROY_CQ = 20
CMD_CREATE_QP = 24
CMD_MODIFY_QP = 26
CMD_DESTROY_QP = 27
CMD_POST_SEND = 28
CMD_POST_RECV = 29
CMD_POST_SRQ_RECV = 30

CORE_RESP = 8  # struct ib_uverbs_get_context_resp: async_fd, num_comp_vectors

# enum irdma_memreg_type
MEMREG_MEM, MEMREG_QP, MEMREG_CQ = 0, 1, 2
# enum ib_uverbs_qp_type
QPT_RC, QPT_UC, QPT_UD = 2, 3, 4
# enum ib_qp_state
RESET, INIT, RTR, RTS, SQD, SQE, ERR = range(7)
# enum ib_qp_attr_mask
M_STATE = 1 << 0
M_CUR_STATE = 1 << 1
M_ACCESS_FLAGS = 1 << 3
M_PKEY_INDEX = 1 << 4
M_PORT = 1 << 5
M_QKEY = 1 << 6
M_AV = 1 << 7
M_PATH_MTU = 1 << 8
M_TIMEOUT = 1 << 9
M_RETRY_CNT = 1 << 10
M_RNR_RETRY = 1 << 11
M_RQ_PSN = 1 << 12
M_MAX_QP_RD_ATOMIC = 1 << 13
M_ALT_PATH = 1 << 14
M_MIN_RNR_TIMER = 1 << 15
M_SQ_PSN = 1 << 16
M_MAX_DEST_RD_ATOMIC = 1 << 17
M_DEST_QPN = 1 << 20
# enum ib_access_flags
ACC_LOCAL_WRITE, ACC_REMOTE_WRITE, ACC_REMOTE_READ, ACC_REMOTE_ATOMIC = 1, 2, 4, 8
# enum ib_uverbs_wr_opcode
WR_RDMA_WRITE, WR_SEND, WR_ATOMIC_FETCH_AND_ADD = 0, 2, 6
# enum ib_uverbs_send_flags
SEND_SIGNALED = 2
# sizeof struct ib_uverbs_wc, ib_uverbs_send_wr, ib_uverbs_recv_wr, ib_uverbs_sge
WC_SIZE, SEND_WR_SIZE, RECV_WR_SIZE, SGE_SIZE = 32, 56, 16, 16
U32_MAX = 0xffffffff
BOGUS_HANDLE = 0xdeadbeef

PAGE = 4096
REREG_TRANS, REREG_PD, REREG_ACCESS = 1, 2, 4
ROCE_SQ_RESERVED, ROCE_RQ_RESERVED = 258, 1


def errname(err: int):
    if not err:
        return 0
    if err == errno.EOPNOTSUPP:
        return "EOPNOTSUPP"
    return errno.errorcode.get(err, str(err))


def get_context(dev: str, req: bytes, outlen: int) -> dict:
    # Requests are whole 32-bit words; pad the driver part.
    req = req + b"\0" * (-len(req) % 4)
    resp = ctypes.create_string_buffer(CORE_RESP + outlen + 8)
    count = 8 + 8 + len(req)
    out_words = (CORE_RESP + outlen) // 4
    cmd = struct.pack("<IHHQ", CMD_GET_CONTEXT, count // 4, out_words,
                      ctypes.addressof(resp)) + req
    fd = os.open(dev, os.O_RDWR)
    try:
        os.write(fd, cmd)
        err = 0
    except OSError as e:
        err = e.errno
    finally:
        os.close(fd)
    # (errno.errorcode's names: 95 is ENOTSUP here, as tests/verbs-bad-udata.sh expects)
    return {"errno": errno.errorcode.get(err, str(err)) if err else 0,
            "resp": resp.raw[CORE_RESP:CORE_RESP + outlen].hex()}


# ---- user memory -------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20


def mmap_pages(n: int) -> int:
    """Page-aligned, zero-filled, private anonymous memory of n 4 KiB pages; its address."""
    a = _libc.mmap(None, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if a in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    ctypes.memset(a, 0, n * PAGE)  # fault the pages in
    return a


def munmap(addr: int, n: int) -> None:
    if _libc.munmap(addr, n * PAGE) != 0:
        raise OSError(ctypes.get_errno(), "munmap")


def unmapped_address() -> int:
    """The address of a page that is not mapped (mapped, then unmapped)."""
    a = mmap_pages(1)
    munmap(a, 1)
    return a


# ---- libirdma's GEN_2 ring sizing (irdma-abi.md §3.2) -------------------------------------

def wqe_shift(sge: int, inline: int) -> int:
    if sge <= 1 and inline <= 8:
        return 0
    if sge < 4 and inline <= 39:
        return 1
    if sge < 8 and inline <= 101:
        return 2
    return 3


def _pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def qp_rings(send_wr, send_sge, inline, recv_wr, recv_sge, min_wq=8):
    """(sq_depth, sq_shift, rq_depth, rq_shift) as libirdma lays the rings out."""
    sq_shift = wqe_shift(send_sge + 1, inline)
    rq_shift = wqe_shift(recv_sge, 0)
    sq_depth = max(_pow2((send_wr << sq_shift) + ROCE_SQ_RESERVED), min_wq << sq_shift)
    rq_depth = max(_pow2((recv_wr << rq_shift) + ROCE_RQ_RESERVED), min_wq << rq_shift)
    return sq_depth, sq_shift, rq_depth, rq_shift


def ring_pages(quanta: int) -> int:
    return (quanta * 32 + PAGE - 1) // PAGE


# ---- the uverbs file ----------------------------------------------------------------------

class Uverbs:
    """One /dev/infiniband/uverbsN file and its legacy write commands."""

    def __init__(self, dev: str):
        self.fd = os.open(dev, os.O_RDWR)
        self.async_fd = -1

    def close(self) -> None:
        if self.async_fd >= 0:
            os.close(self.async_fd)
            self.async_fd = -1
        os.close(self.fd)

    def write(self, command: int, core: bytes, drv_in: bytes = b"", core_out: int = 0,
              drv_out: int = 0, has_resp: bool = True, resp_addr: int | None = None):
        """Issues one legacy command. `core` is the core request; when has_resp, its first
        8 bytes are the response pointer and are filled in here (resp_addr overrides the
        buffer made here, e.g. with an unmapped address). Returns (errno name or 0, core
        response bytes, driver response bytes)."""
        drv_in = drv_in + b"\0" * (-len(drv_in) % 4)
        resp = ctypes.create_string_buffer(core_out + drv_out + 8)
        if has_resp:
            addr = ctypes.addressof(resp) if resp_addr is None else resp_addr
            core = struct.pack("<Q", addr) + core[8:]
        body = core + drv_in
        assert (core_out + drv_out) % 4 == 0 and len(body) % 4 == 0
        cmd = struct.pack("<IHH", command, (8 + len(body)) // 4, (core_out + drv_out) // 4) + body
        try:
            os.write(self.fd, cmd)
            err = 0
        except OSError as e:
            err = e.errno
        raw = resp.raw
        return errname(err), raw[:core_out], raw[core_out:core_out + drv_out]

    # -- verbs, each returning (errno, handle-ish result or None)

    def get_context(self):
        req = struct.pack("<IB3xQ", 0, 5, 1)  # irdma_alloc_ucontext_req: userspace_ver 5, raw attrs
        e, core, drv = self.write(CMD_GET_CONTEXT, bytes(8), req, CORE_RESP, 80)
        if e:
            return e, None
        self.async_fd, _ = struct.unpack("<II", core)
        return e, drv

    def alloc_pd(self, drv_out=8, resp_addr=None):
        e, core, _ = self.write(CMD_ALLOC_PD, bytes(8), b"", 4, drv_out, resp_addr=resp_addr)
        return e, (struct.unpack("<I", core)[0] if not e else None)

    def dealloc_pd(self, pd):
        return self.write(CMD_DEALLOC_PD, struct.pack("<I", pd), has_resp=False)[0]

    def reg_mr(self, pd, start, length, drv=None, access=ACC_LOCAL_WRITE, iova=None,
               resp_addr=None):
        """drv: irdma_mem_reg_req bytes (None: no driver data). Returns (errno, (handle, lkey,
        rkey))."""
        core = struct.pack("<QQQQII", 0, start, length, start if iova is None else iova, pd,
                           access)
        e, r, _ = self.write(CMD_REG_MR, core, drv or b"", 12, resp_addr=resp_addr)
        if e:
            return e, None
        return e, struct.unpack("<III", r)

    def rereg_mr(self, mr, flags, start=0, length=0, iova=None, pd=0, access=0, drv=None):
        """REREG_MR of MR handle `mr`. drv: irdma_mem_reg_req bytes (None: no driver data).
        Returns (errno, (lkey, rkey))."""
        core = struct.pack("<QIIQQQII", 0, mr, flags, start, length,
                           start if iova is None else iova, pd, access)
        e, r, _ = self.write(CMD_REREG_MR, core, drv or b"", 8)
        return e, (struct.unpack("<II", r) if not e else None)

    def dereg_mr(self, mr):
        return self.write(CMD_DEREG_MR, struct.pack("<I", mr), has_resp=False)[0]

    def create_cq(self, cqe, drv, drv_out=8, resp_addr=None):
        core = struct.pack("<QQIIiI", 0, 0x1234, cqe, 0, -1, 0)
        e, r, d = self.write(CMD_CREATE_CQ, core, drv, 8, drv_out, resp_addr=resp_addr)
        if e:
            return e, None
        h, _ = struct.unpack("<II", r)
        cq_id, cq_size = struct.unpack("<II", d) if len(d) >= 8 else (None, None)
        return e, (h, cq_id, cq_size)

    def resize_cq(self, cq, cqe, drv):
        """Returns (errno, the cqe ib_core reports)."""
        core = struct.pack("<QII", 0, cq, cqe)
        e, r, _ = self.write(CMD_RESIZE_CQ, core, drv, 8)
        return e, (None if e else struct.unpack("<I", r[:4])[0])

    def destroy_cq(self, cq):
        return self.write(CMD_DESTROY_CQ, struct.pack("<QII", 0, cq, 0), core_out=8)[0]

    def create_qp(self, pd, cq, qp_type, caps, drv, drv_out=24, resp_addr=None):
        """caps: (send_wr, recv_wr, send_sge, recv_sge, inline). Returns (errno, (handle,
        qpn, irdma_create_qp_resp dict))."""
        core = struct.pack("<QQIIIIIIIIIBBBB", 0, 0x5678, pd, cq, cq, 0, *caps, 0, qp_type, 0, 0)
        e, r, d = self.write(CMD_CREATE_QP, core, drv, 32, drv_out, resp_addr=resp_addr)
        if e:
            return e, None
        h, qpn = struct.unpack("<II", r[:8])
        info = {}
        if len(d) >= 24:
            qp_id, sq, rq, _opt, _push, lsmm, _r, qcaps = struct.unpack("<IIIIHBBI", d)
            info = {"qp_id": qp_id, "actual_sq_size": sq, "actual_rq_size": rq, "lsmm": lsmm,
                    "qp_caps": qcaps}
        return e, (h, qpn, info)

    def modify_qp(self, qp, mask, state=0, cur_state=0, dest=None, alt=None, **kw):
        """kw: qkey rq_psn sq_psn dest_qp_num access pkey_index path_mtu max_rd_atomic
        max_dest_rd_atomic min_rnr_timer port_num timeout retry_cnt rnr_retry alt_port_num."""
        g = kw.get
        body = (dest or qp_dest()) + (alt or qp_dest())
        body += struct.pack("<IIIIIIIHHBBBBBBBBBBBBBB2x", qp, mask, g("qkey", 0), g("rq_psn", 0),
                            g("sq_psn", 0), g("dest_qp_num", 0), g("access", 0),
                            g("pkey_index", 0), 0, state, cur_state, g("path_mtu", 0), 0, 0,
                            g("max_rd_atomic", 0), g("max_dest_rd_atomic", 0),
                            g("min_rnr_timer", 0), g("port_num", 0), g("timeout", 0),
                            g("retry_cnt", 0), g("rnr_retry", 0), g("alt_port_num", 0), 0)
        assert len(body) == 112
        return self.write(CMD_MODIFY_QP, body, has_resp=False)[0]

    def destroy_qp(self, qp):
        return self.write(CMD_DESTROY_QP, struct.pack("<QII", 0, qp, 0), core_out=4)[0]

    def create_ah(self, pd, gid: bytes, sgid_index, is_global=1, port=1, drv_out=8,
                  resp_addr=None):
        attr = struct.pack("<16sIBBBBHBBBBBB", gid, 0, sgid_index, 64, 0, 0, 0, 0, 0, 0,
                           is_global, port, 0)
        core = struct.pack("<QQII", 0, 0x9abc, pd, 0) + attr
        e, r, d = self.write(CMD_CREATE_AH, core, b"", 4, drv_out, resp_addr=resp_addr)
        if e:
            return e, None
        return e, (struct.unpack("<I", r)[0], struct.unpack("<I", d[:4])[0] if d else None)

    def destroy_ah(self, ah):
        return self.write(CMD_DESTROY_AH, struct.pack("<I", ah), has_resp=False)[0]

    # -- the kernel-verbs commands (uverbs' own work-request marshalling, no udata)

    def poll_cq(self, cq, ne, room=None):
        """POLL_CQ asking for ne completions, with a response of room (default min(ne, 4))
        struct ib_uverbs_wc after the 8-byte header (room -1: no response room at all).
        Returns (errno, count)."""
        room = min(ne, 4) if room is None else room
        out = 0 if room < 0 else 8 + room * WC_SIZE
        e, r, _ = self.write(CMD_POLL_CQ, struct.pack("<QII", 0, cq, ne), core_out=out)
        return e, (struct.unpack_from("<I", r)[0] if not e and r else None)

    def req_notify_cq(self, cq, solicited_only):
        return self.write(CMD_REQ_NOTIFY_CQ, struct.pack("<II", cq, solicited_only),
                          has_resp=False)[0]

    def _post(self, command, handle, wrs, sges, wr_count, sge_count, wqe_size):
        """POST_SEND/POST_RECV/POST_SRQ_RECV: the 24-byte header, the work requests (each
        wqe_size bytes as given), then the SGEs. wr_count/sge_count default to the numbers
        given. Returns (errno, bad_wr)."""
        core = struct.pack("<QIIII", 0, handle, len(wrs) if wr_count is None else wr_count,
                           len(sges) if sge_count is None else sge_count, wqe_size)
        e, r, _ = self.write(command, core + b"".join(wrs) + b"".join(sges), core_out=4)
        return e, struct.unpack("<I", r)[0]

    def post_send(self, qp, wrs, sges, wr_count=None, sge_count=None, wqe_size=SEND_WR_SIZE):
        return self._post(CMD_POST_SEND, qp, wrs, sges, wr_count, sge_count, wqe_size)

    def post_recv(self, qp, wrs, sges, wr_count=None, sge_count=None, wqe_size=RECV_WR_SIZE):
        return self._post(CMD_POST_RECV, qp, wrs, sges, wr_count, sge_count, wqe_size)

    def post_srq_recv(self, srq, wrs, sges, wr_count=None, sge_count=None,
                      wqe_size=RECV_WR_SIZE):
        return self._post(CMD_POST_SRQ_RECV, srq, wrs, sges, wr_count, sge_count, wqe_size)


def send_wr(opcode, num_sge=1, wr_id=0x5e4d, flags=SEND_SIGNALED, rdma=None, atomic=None,
            ud=None) -> bytes:
    """struct ib_uverbs_send_wr; rdma=(remote_addr, rkey), atomic=(remote_addr, compare_add,
    swap, rkey), ud=(ah handle, remote_qpn, qkey)."""
    head = struct.pack("<QIIII", wr_id, num_sge, opcode, flags, 0)
    if rdma:
        union = struct.pack("<QII", rdma[0], rdma[1], 0)
    elif atomic:
        union = struct.pack("<QQQII", *atomic, 0)
    elif ud:
        union = struct.pack("<IIII", *ud, 0)
    else:
        union = b""
    wr = head + union + bytes(32 - len(union))
    assert len(wr) == SEND_WR_SIZE
    return wr


def recv_wr(num_sge=1, wr_id=0x4ec7) -> bytes:
    """struct ib_uverbs_recv_wr."""
    return struct.pack("<QII", wr_id, num_sge, 0)


def sge(addr, length, lkey) -> bytes:
    """struct ib_uverbs_sge (struct ib_sge's layout)."""
    return struct.pack("<QII", addr, length, lkey)


def qp_dest(gid: bytes = bytes(16), sgid_index=0, is_global=0, port=0) -> bytes:
    """struct ib_uverbs_qp_dest."""
    return struct.pack("<16sIHHBBBBBBBB", gid, 0, 0, 0, sgid_index, 64, 0, 0, 0, 0,
                       is_global, port)


def memreg(reg_type, cq_pages=0, rq_pages=0, sq_pages=0) -> bytes:
    """struct irdma_mem_reg_req."""
    return struct.pack("<HHHH", reg_type, cq_pages, rq_pages, sq_pages)


def resize_req(buf) -> bytes:
    """struct irdma_resize_cq_req: the new ring's address."""
    return struct.pack("<Q", buf)


def cq_req(buf, shadow) -> bytes:
    """struct irdma_create_cq_req."""
    return struct.pack("<QQ", buf, shadow)


def qp_req(bufs, compl_ctx=0xfeed0000) -> bytes:
    """struct irdma_create_qp_req (the 16 bytes of rdma-core 56)."""
    return struct.pack("<QQ", bufs, compl_ctx)


# ---- the scenario -------------------------------------------------------------------------

class Broken(Exception):
    """A setup step the later cases depend on failed."""


class Scenario:
    def __init__(self, dev, gid_index, gid):
        self.dev = dev
        self.u = Uverbs(dev)
        self.gid_index = gid_index
        self.gid = gid

    def case(self, name, err, **extra):
        line = f"case {name} {err}"
        for k, v in extra.items():
            line += f" {k}={v}"
        print(line, flush=True)
        return err

    def need(self, name, res):
        """Records a setup case that must succeed; returns its value."""
        e, v = res
        self.case(name, e)
        if e:
            raise Broken(f"{name}: {e}")
        return v

    def ring_mr(self, pd, name, pages, drv, u=None):
        """Maps `pages` pages and registers them with driver data `drv`; returns (addr, mr)."""
        buf = mmap_pages(pages)
        mr = self.need(name, (u or self.u).reg_mr(pd, buf, pages * PAGE, drv))
        return buf, mr[0]

    def cq_mem(self, pd, name, u=None):
        """A one-page CQ ring (8 entries) and, as irdma's CQ_RESIZE layout has it, a
        shadow area registered on its own (setup cases `name` and `name`.shadow); returns
        (ring, shadow, ring_mr, shadow_mr)."""
        ring, ring_mr = self.ring_mr(pd, name, 1, memreg(MEMREG_CQ, cq_pages=1), u=u)
        shadow, shadow_mr = self.ring_mr(pd, name + ".shadow", 1, memreg(MEMREG_CQ, cq_pages=1),
                                         u=u)
        return ring, shadow, ring_mr, shadow_mr

    def setup(self):
        u = self.u
        ctx = self.need("get_context", u.get_context())
        (self.max_hw_cq_size,) = struct.unpack_from("<I", ctx, 56)
        self.pd = self.need("alloc_pd", u.alloc_pd())

    def pd_cases(self):
        u = self.u
        # The driver cannot write irdma_alloc_pd_resp: the PD must be undone.
        self.case("alloc_pd.resp_unmapped", u.alloc_pd(resp_addr=unmapped_address())[0])
        # No room for it at all (if that is accepted, the PD goes again at once; a PD left
        # behind shows in the test's object check).
        e, pd = u.alloc_pd(drv_out=0)
        self.case("alloc_pd.resp_no_room", e)
        if not e:
            u.dealloc_pd(pd)

    def mr_cases(self):
        u, pd = self.u, self.pd
        buf = mmap_pages(8)
        # No driver data at all: irdma needs the 8-byte irdma_mem_reg_req.
        self.case("reg_mr.no_udata", u.reg_mr(pd, buf, 4 * PAGE)[0])
        self.case("reg_mr.short_udata", u.reg_mr(pd, buf, 4 * PAGE, bytes(4))[0])
        # QP rings: sq + rq + shadow pages must fit in the registration.
        self.case("reg_mr.qp_pages_beyond_length",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_QP, rq_pages=2, sq_pages=2))[0])
        self.case("reg_mr.qp_rq_pages_0",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_QP, rq_pages=0, sq_pages=2))[0])
        # CQ rings (CQ_RESIZE layout: no shadow page after them) must fit too.
        self.case("reg_mr.cq_pages_beyond_length",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_CQ, cq_pages=5))[0])
        # Ring registrations are found by 4 KiB page: the address must be aligned.
        self.case("reg_mr.qp_unaligned",
                  u.reg_mr(pd, buf + 64, 4 * PAGE, memreg(MEMREG_QP, rq_pages=1, sq_pages=1))[0])
        self.case("reg_mr.cq_unaligned",
                  u.reg_mr(pd, buf + 64, 4 * PAGE, memreg(MEMREG_CQ, cq_pages=1))[0])
        self.case("reg_mr.qp_iova_differs",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_QP, rq_pages=1, sq_pages=1),
                           iova=0x40000000)[0])
        self.case("reg_mr.cq_pages_0",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_CQ, cq_pages=0))[0])
        self.case("reg_mr.type_srq",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(3, cq_pages=1))[0])
        self.case("reg_mr.type_9", u.reg_mr(pd, buf, 4 * PAGE, memreg(9))[0])
        # Memory registrations.
        self.case("reg_mr.mem_atomic",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_MEM),
                           access=ACC_LOCAL_WRITE | ACC_REMOTE_ATOMIC)[0])
        self.case("reg_mr.mem_length_0", u.reg_mr(pd, buf, 0, memreg(MEMREG_MEM))[0])
        e, mr = u.reg_mr(pd, buf, 8 * PAGE, memreg(MEMREG_MEM),
                         access=ACC_LOCAL_WRITE | ACC_REMOTE_WRITE | ACC_REMOTE_READ)
        self.case("reg_mr.mem_valid", e, lkey_nonzero=int(bool(mr and mr[1])))
        if not e:
            self.case("dereg_mr.mem", u.dereg_mr(mr[0]))
        # libirdma sends garbage page counts with MEM registrations; they must be ignored.
        e, mr = u.reg_mr(pd, buf + 3 * PAGE + 100, 1000, memreg(MEMREG_MEM, 7, 7, 7),
                         iova=0x10000064)
        self.case("reg_mr.mem_unaligned_counts_ignored", e)
        if not e:
            self.case("dereg_mr.mem_unaligned", u.dereg_mr(mr[0]))
        # An I/O virtual range that wraps around 2^64.
        e, mr = u.reg_mr(pd, buf, 8 * PAGE, memreg(MEMREG_MEM), iova=(1 << 64) - 4 * PAGE)
        self.case("reg_mr.mem_iova_wraps", e)
        if not e:
            self.case("dereg_mr.mem_iova_wraps", u.dereg_mr(mr[0]))
        # ib_core cannot write the response after the driver registered: it undoes the MR.
        self.case("reg_mr.mem_resp_unmapped",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_MEM),
                           resp_addr=unmapped_address())[0])
        self.case("reg_mr.cq_resp_unmapped",
                  u.reg_mr(pd, buf, 4 * PAGE, memreg(MEMREG_CQ, cq_pages=1),
                           resp_addr=unmapped_address())[0])
        # ... and the ring registration is gone with it (nothing to create a CQ on).
        self.case("create_cq.on_undone_registration", u.create_cq(8, cq_req(buf, buf + PAGE))[0])
        # Longer than the mapping: pinning fails.
        part = mmap_pages(4)
        munmap(part + 2 * PAGE, 2)
        self.case("reg_mr.mem_beyond_mapping",
                  u.reg_mr(pd, part, 4 * PAGE, memreg(MEMREG_MEM))[0])
        self.case("reg_mr.cq_beyond_mapping",
                  u.reg_mr(pd, part, 4 * PAGE, memreg(MEMREG_CQ, cq_pages=1))[0])
        self.case("reg_mr.mem_unmapped",
                  u.reg_mr(pd, unmapped_address(), PAGE, memreg(MEMREG_MEM))[0])

    def cq_cases(self):
        """Leaves self.cq (a valid CQ for the QP cases) and its ring registrations."""
        u, pd = self.u, self.pd
        # libirdma for ibv_create_cq(cqe=3): cq_size = max(4, 2*(3+1)) = 8 entries, one ring page,
        # and (CQ_RESIZE) the shadow area in a registration of its own.
        ring, shadow, ring_mr, shadow_mr = self.cq_mem(pd, "reg_mr.cq_ring")
        other = mmap_pages(2)
        self.case("create_cq.unregistered_buf", u.create_cq(8, cq_req(other, shadow))[0])
        self.case("create_cq.udata_4_bytes", u.create_cq(8, cq_req(ring, shadow)[:4])[0])
        self.case("create_cq.udata_0_bytes", u.create_cq(8, b"")[0])
        self.case("create_cq.resp_no_room", u.create_cq(8, cq_req(ring, shadow), drv_out=4)[0])
        self.case("create_cq.cqe_3", u.create_cq(3, cq_req(ring, shadow))[0])
        self.case("create_cq.cqe_0", u.create_cq(0, cq_req(ring, shadow))[0])
        self.case("create_cq.cqe_above_max",
                  u.create_cq(self.max_hw_cq_size + 1, cq_req(ring, shadow))[0])
        # 1024 entries need 8 ring pages; the registration has 1.
        self.case("create_cq.ring_too_small", u.create_cq(1024, cq_req(ring, shadow))[0])
        self.case("create_cq.shadow_unregistered", u.create_cq(8, cq_req(ring, other))[0])
        self.case("create_cq.shadow_in_ring", u.create_cq(8, cq_req(ring, ring + 64))[0])
        # One registration cannot be both: claimed as the ring, it is not free as the shadow.
        self.case("create_cq.shadow_is_ring", u.create_cq(8, cq_req(ring, ring))[0])
        # The driver's response cannot be written: the CQ must be undone and the ring freed
        # again (the valid create below reuses it).
        self.case("create_cq.resp_unmapped",
                  u.create_cq(8, cq_req(ring, shadow), resp_addr=unmapped_address())[0])
        e, cq = u.create_cq(8, cq_req(ring, shadow))
        self.case("create_cq.valid", e, cq_size=cq[2] if cq else None)
        if e:
            raise Broken("create_cq.valid")
        self.cq, self.cq_ring_mr, self.cq_ring_buf = cq[0], ring_mr, ring
        self.cq_shadow_mr, self.cq_shadow_buf = shadow_mr, shadow
        self.case("create_cq.ring_in_use", u.create_cq(8, cq_req(ring, shadow))[0])
        self.case("dereg_mr.cq_ring_in_use", u.dereg_mr(ring_mr))
        self.case("dereg_mr.cq_shadow_in_use", u.dereg_mr(shadow_mr))
        self.cq_verb_cases()
        self.resize_cases()
        # A second CQ whose rings go after it is destroyed.
        ring2, shadow2, ring2_mr, shadow2_mr = self.cq_mem(pd, "reg_mr.cq_ring2")
        e, cq2 = u.create_cq(8, cq_req(ring2, shadow2))
        self.case("create_cq.valid2", e)
        if not e:
            self.case("dereg_mr.cq_ring2_in_use", u.dereg_mr(ring2_mr))
            self.case("destroy_cq.cq2", u.destroy_cq(cq2[0]))
            # The handle of the CQ just destroyed (before any new object can take the id).
            self.case("poll_cq.destroyed", u.poll_cq(cq2[0], 1)[0])
            self.case("req_notify_cq.destroyed", u.req_notify_cq(cq2[0], 0))
            self.case("resize_cq.destroyed", u.resize_cq(cq2[0], 16, resize_req(ring2))[0])
        self.case("dereg_mr.cq_ring2_after_destroy", u.dereg_mr(ring2_mr))
        self.case("dereg_mr.cq_shadow2_after_destroy", u.dereg_mr(shadow2_mr))

    def resize_cases(self):
        """RESIZE_CQ on self.cq (8 entries, no CQEs): hostile requests, then a resize to 256
        entries on a new ring, after which the old ring registration is free to go."""
        u, pd, cq = self.u, self.pd, self.cq
        new, new_mr = self.ring_mr(pd, "reg_mr.cq_resize_ring", 2, memreg(MEMREG_CQ, cq_pages=2))
        other = mmap_pages(1)
        self.case("resize_cq.unregistered_buf", u.resize_cq(cq, 16, resize_req(other))[0])
        self.case("resize_cq.udata_4_bytes", u.resize_cq(cq, 16, resize_req(new)[:4])[0])
        self.case("resize_cq.udata_0_bytes", u.resize_cq(cq, 16, b"")[0])
        self.case("resize_cq.cqe_0", u.resize_cq(cq, 0, resize_req(new))[0])
        self.case("resize_cq.cqe_3", u.resize_cq(cq, 3, resize_req(new))[0])
        self.case("resize_cq.cqe_above_max",
                  u.resize_cq(cq, self.max_hw_cq_size + 1, resize_req(new))[0])
        self.case("resize_cq.cqe_huge", u.resize_cq(cq, U32_MAX, resize_req(new))[0])
        # 1024 entries need 8 ring pages; the registration has 2.
        self.case("resize_cq.ring_too_small", u.resize_cq(cq, 1024, resize_req(new))[0])
        self.case("resize_cq.current_ring", u.resize_cq(cq, 8, resize_req(self.cq_ring_buf))[0])
        self.case("resize_cq.shadow_as_ring",
                  u.resize_cq(cq, 8, resize_req(self.cq_shadow_buf))[0])
        self.case("resize_cq.bogus_handle", u.resize_cq(BOGUS_HANDLE, 16, resize_req(new))[0])
        self.case("resize_cq.pd_handle", u.resize_cq(self.pd, 16, resize_req(new))[0])
        e, cqe = u.resize_cq(cq, 256, resize_req(new))
        self.case("resize_cq.valid", e, cqe=cqe)
        if e:
            raise Broken("resize_cq.valid")
        # The device writes the new ring now: the old one is free, the new one in use.
        self.case("dereg_mr.cq_ring_after_resize", u.dereg_mr(self.cq_ring_mr))
        self.case("dereg_mr.cq_resize_ring_in_use", u.dereg_mr(new_mr))
        self.cq_ring_mr, self.cq_ring_buf = new_mr, new

    def rereg_cases(self):
        """REREG_MR: what it may change, what it must refuse, and that a refusal leaves the
        region working (it deregisters)."""
        u, pd = self.u, self.pd
        mem = memreg(MEMREG_MEM)
        rw = ACC_LOCAL_WRITE | ACC_REMOTE_WRITE
        buf, other = mmap_pages(4), mmap_pages(4)
        mr = self.need("rereg_mr.setup_mr", u.reg_mr(pd, buf, 4 * PAGE, mem, access=rw))
        pd2 = self.need("rereg_mr.setup_pd2", u.alloc_pd())
        h, keys = mr[0], mr[1:]
        e, k = u.rereg_mr(h, REREG_ACCESS, access=ACC_LOCAL_WRITE | ACC_REMOTE_READ, drv=mem)
        self.case("rereg_mr.access", e, new_keys=int(bool(k and k != tuple(keys))))
        e, k = u.rereg_mr(h, REREG_TRANS, other + 64, 2 * PAGE, iova=0x7000040, drv=mem)
        self.case("rereg_mr.translation", e, lkey_is_rkey=int(bool(k and k[0] == k[1])))
        self.case("rereg_mr.pd", u.rereg_mr(h, REREG_PD, pd=pd2, drv=mem)[0])
        self.case("rereg_mr.all_three",
                  u.rereg_mr(h, REREG_TRANS | REREG_PD | REREG_ACCESS, buf, 4 * PAGE, pd=pd,
                             access=rw, drv=mem)[0])
        self.case("rereg_mr.flags_0", u.rereg_mr(h, 0, drv=mem)[0])
        self.case("rereg_mr.flags_8", u.rereg_mr(h, 8, drv=mem)[0])
        self.case("rereg_mr.offsets_differ",
                  u.rereg_mr(h, REREG_TRANS, buf + 64, PAGE, iova=0x7000000, drv=mem)[0])
        self.case("rereg_mr.length_0", u.rereg_mr(h, REREG_TRANS, buf, 0, drv=mem)[0])
        self.case("rereg_mr.unmapped",
                  u.rereg_mr(h, REREG_TRANS, unmapped_address(), PAGE, drv=mem)[0])
        self.case("rereg_mr.atomic",
                  u.rereg_mr(h, REREG_ACCESS, access=ACC_LOCAL_WRITE | ACC_REMOTE_ATOMIC,
                             drv=mem)[0])
        self.case("rereg_mr.no_udata", u.rereg_mr(h, REREG_ACCESS, access=rw)[0])
        self.case("rereg_mr.short_udata", u.rereg_mr(h, REREG_ACCESS, access=rw, drv=bytes(4))[0])
        self.case("rereg_mr.type_qp",
                  u.rereg_mr(h, REREG_ACCESS, access=rw,
                             drv=memreg(MEMREG_QP, rq_pages=1, sq_pages=1))[0])
        self.case("rereg_mr.bogus_pd", u.rereg_mr(h, REREG_PD, pd=BOGUS_HANDLE, drv=mem)[0])
        self.case("rereg_mr.bogus_handle",
                  u.rereg_mr(BOGUS_HANDLE, REREG_ACCESS, access=rw, drv=mem)[0])
        self.case("rereg_mr.pd_handle", u.rereg_mr(pd2, REREG_ACCESS, access=rw, drv=mem)[0])
        # Ring registrations are no memory regions: busy while their CQ lives.
        ring, shadow, ring_mr, shadow_mr = self.cq_mem(pd, "rereg_mr.cq_ring")
        cq = self.need("rereg_mr.create_cq", u.create_cq(8, cq_req(ring, shadow)))[0]
        self.case("rereg_mr.cq_ring_in_use",
                  u.rereg_mr(ring_mr, REREG_ACCESS, access=rw, drv=mem)[0])
        unused, unused_mr = self.ring_mr(pd, "rereg_mr.reg_cq_ring_unused", 1,
                                         memreg(MEMREG_CQ, cq_pages=1))
        self.case("rereg_mr.cq_ring_unused",
                  u.rereg_mr(unused_mr, REREG_ACCESS, access=rw, drv=mem)[0])
        self.case("rereg_mr.destroy_cq", u.destroy_cq(cq))
        for name, m in (("ring", ring_mr), ("shadow", shadow_mr), ("unused", unused_mr)):
            self.case(f"rereg_mr.dereg_{name}", u.dereg_mr(m))
        # After every refusal the region is still there, and goes.
        self.case("rereg_mr.dereg_after_refusals", u.dereg_mr(h))
        self.case("rereg_mr.dealloc_pd2", u.dealloc_pd(pd2))

    def cq_verb_cases(self):
        """POLL_CQ and REQ_NOTIFY_CQ (kernel verbs) on the user CQ self.cq and on handles
        that are not a CQ."""
        u, cq = self.u, self.cq
        self.case("poll_cq.ne_1", u.poll_cq(cq, 1)[0])
        self.case("poll_cq.ne_0", u.poll_cq(cq, 0)[0])
        # 2^32-1 completions asked for, room for one.
        self.case("poll_cq.ne_huge", u.poll_cq(cq, U32_MAX, room=1)[0])
        self.case("poll_cq.no_resp_room", u.poll_cq(cq, 1, room=-1)[0])
        self.case("req_notify_cq.next_comp", u.req_notify_cq(cq, 0))
        self.case("req_notify_cq.solicited", u.req_notify_cq(cq, 1))
        self.case("poll_cq.bogus_handle", u.poll_cq(BOGUS_HANDLE, 1)[0])
        self.case("poll_cq.pd_handle", u.poll_cq(self.pd, 1)[0])
        self.case("req_notify_cq.bogus_handle", u.req_notify_cq(BOGUS_HANDLE, 1))
        self.case("req_notify_cq.pd_handle", u.req_notify_cq(self.pd, 0))

    def post_buf(self, name):
        """A 1-page MEM registration for work requests to point at; returns (addr, (handle,
        lkey, rkey))."""
        buf = mmap_pages(1)
        return buf, self.need(name, self.u.reg_mr(
            self.pd, buf, PAGE, memreg(MEMREG_MEM),
            access=ACC_LOCAL_WRITE | ACC_REMOTE_WRITE | ACC_REMOTE_READ))

    def qp_post_cases(self, h):
        """POST_SEND, POST_RECV and POST_SRQ_RECV (kernel verbs) on the user RC QP h (in
        RTS) with valid and hostile work requests, and on handles that are not a QP/SRQ."""
        u = self.u
        buf, (mr, lkey, rkey) = self.post_buf("reg_mr.post_buf")
        one = [sge(buf, 64, lkey)]
        self.case("post_send.rc_send", u.post_send(h, [send_wr(WR_SEND)], one)[0])
        self.case("post_send.rc_rdma_write", u.post_send(
            h, [send_wr(WR_RDMA_WRITE, rdma=(buf + 1024, rkey))], one)[0])
        self.case("post_send.rc_atomic", u.post_send(
            h, [send_wr(WR_ATOMIC_FETCH_AND_ADD, atomic=(buf + 1024, 1, 0, rkey))],
            [sge(buf, 8, lkey)])[0])
        self.case("post_send.rc_opcode_bogus", u.post_send(h, [send_wr(0x55)], one)[0])
        self.case("post_send.wr_count_0", u.post_send(h, [], [])[0])
        # The counts claim more than the command carries (2^32-1 WRs of 56 bytes, 2^32-1
        # SGEs of 16 bytes).
        self.case("post_send.wr_count_overflow",
                  u.post_send(h, [send_wr(WR_SEND)], one, wr_count=U32_MAX)[0])
        self.case("post_send.sge_count_overflow",
                  u.post_send(h, [send_wr(WR_SEND)], one, sge_count=U32_MAX)[0])
        # A WR with more SGEs than the command's sge_count.
        self.case("post_send.num_sge_beyond_sge_count",
                  u.post_send(h, [send_wr(WR_SEND, num_sge=2)], one)[0])
        # wqe_size 16 (< sizeof(struct ib_uverbs_send_wr)), the command consistent with it.
        self.case("post_send.wqe_size_16",
                  u.post_send(h, [send_wr(WR_SEND)[:16]], one, wqe_size=16)[0])
        self.case("post_send.bogus_handle",
                  u.post_send(BOGUS_HANDLE, [send_wr(WR_SEND)], one)[0])
        self.case("post_send.cq_handle", u.post_send(self.cq, [send_wr(WR_SEND)], one)[0])
        self.case("post_recv.rc_1_sge", u.post_recv(h, [recv_wr()], one)[0])
        self.case("post_recv.wr_count_0", u.post_recv(h, [], [])[0])
        self.case("post_recv.wqe_size_8", u.post_recv(h, [recv_wr()[:8]], one, wqe_size=8)[0])
        self.case("post_recv.sge_count_overflow",
                  u.post_recv(h, [recv_wr()], one, sge_count=U32_MAX)[0])
        self.case("post_recv.num_sge_beyond_sge_count",
                  u.post_recv(h, [recv_wr(num_sge=3)], one)[0])
        self.case("post_recv.bogus_handle", u.post_recv(BOGUS_HANDLE, [recv_wr()], one)[0])
        self.case("post_srq_recv.bogus_handle",
                  u.post_srq_recv(BOGUS_HANDLE, [recv_wr()], one)[0])
        self.case("post_srq_recv.qp_handle", u.post_srq_recv(h, [recv_wr()], one)[0])
        self.case("dereg_mr.post_buf", u.dereg_mr(mr))

    def ud_post_cases(self, h):
        """POST_SEND on the user UD QP h with a valid AH and with bad ones."""
        u = self.u
        buf, (mr, lkey, _) = self.post_buf("reg_mr.post_buf_ud")
        ah = self.need("create_ah.for_ud", u.create_ah(self.pd, self.gid, self.gid_index))[0]
        one = [sge(buf, 64, lkey)]
        self.case("post_send.ud_send", u.post_send(
            h, [send_wr(WR_SEND, ud=(ah, 2, 0x11111111))], one)[0])
        self.case("post_send.ud_bad_ah", u.post_send(
            h, [send_wr(WR_SEND, ud=(BOGUS_HANDLE, 2, 0x11111111))], one)[0])
        self.case("post_send.ud_ah_is_qp", u.post_send(
            h, [send_wr(WR_SEND, ud=(h, 2, 0x11111111))], one)[0])
        self.case("post_send.ud_rdma_write", u.post_send(
            h, [send_wr(WR_RDMA_WRITE, rdma=(buf, 0))], one)[0])
        self.case("post_recv.ud_1_sge", u.post_recv(h, [recv_wr()], one)[0])
        self.case("destroy_ah.for_ud", u.destroy_ah(ah))
        # The AH's handle, just destroyed.
        self.case("post_send.ud_destroyed_ah", u.post_send(
            h, [send_wr(WR_SEND, ud=(ah, 2, 0x11111111))], one)[0])
        self.case("dereg_mr.post_buf_ud", u.dereg_mr(mr))

    # QP caps (send_wr, recv_wr, send_sge, recv_sge, inline): irdma-abi.md §3.2's worked
    # example (4, 3, 0, 16, 2) -> sq_shift 2, sq_depth 512 (4 pages), actual_sq_size 128;
    # rq_shift 1, rq_depth 64 (1 page), actual_rq_size 32.
    CAPS = (4, 16, 3, 2, 0)

    def qp_ring(self, name, caps=CAPS, sq_pages=None, rq_pages=None):
        sq_depth, _, rq_depth, _ = qp_rings(caps[0], caps[2], caps[4], caps[1], caps[3])
        sq = ring_pages(sq_depth) if sq_pages is None else sq_pages
        rq = ring_pages(rq_depth) if rq_pages is None else rq_pages
        return self.ring_mr(self.pd, name, sq + rq + 1, memreg(MEMREG_QP, rq_pages=rq, sq_pages=sq))

    def qp_cases(self):
        u, pd, cq = self.u, self.pd, self.cq
        buf, mr = self.qp_ring("reg_mr.qp_ring")
        other = mmap_pages(6)
        c = list(self.CAPS)
        self.case("create_qp.unregistered_buf", u.create_qp(pd, cq, QPT_RC, c, qp_req(other))[0])
        self.case("create_qp.udata_8_bytes", u.create_qp(pd, cq, QPT_RC, c, qp_req(buf)[:8])[0])
        self.case("create_qp.resp_16_bytes",
                  u.create_qp(pd, cq, QPT_RC, c, qp_req(buf), drv_out=16)[0])
        self.case("create_qp.type_uc", u.create_qp(pd, cq, QPT_UC, c, qp_req(buf))[0])
        self.case("create_qp.send_sge_14",
                  u.create_qp(pd, cq, QPT_RC, [4, 16, 14, 2, 0], qp_req(buf))[0])
        self.case("create_qp.recv_sge_14",
                  u.create_qp(pd, cq, QPT_RC, [4, 16, 3, 14, 0], qp_req(buf))[0])
        self.case("create_qp.inline_102",
                  u.create_qp(pd, cq, QPT_RC, [4, 16, 3, 2, 102], qp_req(buf))[0])
        self.case("create_qp.send_wr_huge",
                  u.create_qp(pd, cq, QPT_RC, [0xffffffff, 16, 3, 2, 0], qp_req(buf))[0])
        # The CQ's ring registration is not a QP registration.
        self.case("create_qp.cq_registration",
                  u.create_qp(pd, cq, QPT_RC, c, qp_req(self.cq_ring_buf))[0])
        # Rings too small for the sizes the caps give: SQ (4 pages needed, 2 registered) and
        # RQ (512 recv_wr of 1 SGE -> rq_depth 1024, 8 pages needed, 1 registered).
        small, small_mr = self.qp_ring("reg_mr.qp_ring_small_sq", sq_pages=2, rq_pages=1)
        self.case("create_qp.sq_ring_too_small", u.create_qp(pd, cq, QPT_RC, c, qp_req(small))[0])
        self.case("create_qp.rq_ring_too_small",
                  u.create_qp(pd, cq, QPT_RC, [4, 512, 3, 1, 0], qp_req(small))[0])
        self.case("dereg_mr.qp_ring_small", u.dereg_mr(small_mr))
        self.case("create_qp.resp_unmapped",
                  u.create_qp(pd, cq, QPT_RC, c, qp_req(buf), resp_addr=unmapped_address())[0])
        # Valid, with rdma-core 65's 32-byte request (legacy_dontuse zero).
        e, qp = u.create_qp(pd, cq, QPT_RC, c, qp_req(buf) + bytes(16))
        info = qp[2] if qp else {}
        self.case("create_qp.valid", e, qpn_is_qp_id=int(bool(qp) and qp[1] == info.get("qp_id")),
                  **info)
        if e:
            raise Broken("create_qp.valid")
        h, qpn = qp[0], qp[1]
        self.case("create_qp.ring_in_use", u.create_qp(pd, cq, QPT_RC, c, qp_req(buf))[0])
        self.case("dereg_mr.qp_ring_in_use", u.dereg_mr(mr))
        self.case("dealloc_pd.in_use", u.dealloc_pd(pd))
        self.case("destroy_cq.in_use", u.destroy_cq(cq))
        self.other_context_cases()
        self.modify_cases(h, qpn)
        self.case("destroy_qp.valid", u.destroy_qp(h))
        # The handle of the QP just destroyed.
        self.case("post_send.destroyed_qp", u.post_send(h, [send_wr(WR_SEND, num_sge=0)], [])[0])
        self.case("post_recv.destroyed_qp", u.post_recv(h, [recv_wr(num_sge=0)], [])[0])
        self.case("dereg_mr.qp_ring_after_destroy", u.dereg_mr(mr))
        self.spoof_case()
        self.ud_case()

    def other_context_cases(self):
        """Ring registrations belong to their context: a second context (another uverbs
        file of the same process, so the same addresses) cannot create on them."""
        u2 = Uverbs(self.dev)
        try:
            self.need("ctx2.get_context", u2.get_context())
            pd2 = self.need("ctx2.alloc_pd", u2.alloc_pd())
            ring, shadow, ring_mr, shadow_mr = self.cq_mem(pd2, "ctx2.reg_mr.cq_ring", u=u2)
            cq2 = self.need("ctx2.create_cq", u2.create_cq(8, cq_req(ring, shadow)))[0]
            # Free registrations of the first context, at the addresses they were made at.
            ring1, self.cq_ring1_mr = self.ring_mr(self.pd, "reg_mr.cq_ring_ctx1", 2,
                                                   memreg(MEMREG_CQ, cq_pages=1))
            qbuf1, qmr1 = self.qp_ring("reg_mr.qp_ring_ctx1")
            self.case("ctx2.create_cq_on_ctx1_ring",
                      u2.create_cq(8, cq_req(ring1, shadow))[0])
            self.case("ctx2.create_qp_on_ctx1_ring",
                      u2.create_qp(pd2, cq2, QPT_RC, list(self.CAPS), qp_req(qbuf1))[0])
            self.case("dereg_mr.qp_ring_ctx1", self.u.dereg_mr(qmr1))
            self.case("ctx2.destroy_cq", u2.destroy_cq(cq2))
            self.case("ctx2.dereg_mr.cq_ring", u2.dereg_mr(ring_mr))
            self.case("ctx2.dereg_mr.cq_shadow", u2.dereg_mr(shadow_mr))
            self.case("ctx2.dealloc_pd", u2.dealloc_pd(pd2))
        finally:
            u2.close()

    def dest(self, gid=None):
        return qp_dest(gid or self.gid, self.gid_index, is_global=1, port=1)

    def modify_cases(self, h, qpn):
        u = self.u
        rts = M_STATE | M_SQ_PSN | M_TIMEOUT | M_RETRY_CNT | M_RNR_RETRY | M_MAX_QP_RD_ATOMIC
        rts_kw = {"sq_psn": 1, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7, "max_rd_atomic": 1}
        self.case("modify_qp.reset_to_rts", u.modify_qp(h, rts, RTS, **rts_kw))
        self.case("modify_qp.reset_to_rtr", u.modify_qp(h, M_STATE, RTR))
        init = M_STATE | M_PKEY_INDEX | M_PORT | M_ACCESS_FLAGS
        self.case("modify_qp.init_port_2",
                  u.modify_qp(h, init, INIT, port_num=2, access=ACC_LOCAL_WRITE))
        self.case("modify_qp.init_pkey_index_1",
                  u.modify_qp(h, init, INIT, port_num=1, pkey_index=1, access=ACC_LOCAL_WRITE))
        self.case("modify_qp.state_8", u.modify_qp(h, M_STATE, 8))
        self.case("modify_qp.init", u.modify_qp(
            h, init, INIT, port_num=1, access=ACC_LOCAL_WRITE | ACC_REMOTE_WRITE | ACC_REMOTE_READ))
        rtr = (M_STATE | M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN | M_MAX_DEST_RD_ATOMIC
               | M_MIN_RNR_TIMER)
        rtr_kw = {"path_mtu": 3, "dest_qp_num": qpn, "rq_psn": 1, "max_dest_rd_atomic": 1,
                  "min_rnr_timer": 12}
        self.case("modify_qp.rtr_path_mtu_7",
                  u.modify_qp(h, rtr, RTR, dest=self.dest(), **dict(rtr_kw, path_mtu=7)))
        self.case("modify_qp.rtr_path_mtu_0",
                  u.modify_qp(h, rtr, RTR, dest=self.dest(), **dict(rtr_kw, path_mtu=0)))
        self.case("modify_qp.rtr_dest_qpn_2^24",
                  u.modify_qp(h, rtr, RTR, dest=self.dest(), **dict(rtr_kw, dest_qp_num=1 << 24)))
        self.case("modify_qp.rtr_max_dest_rd_atomic_255",
                  u.modify_qp(h, rtr, RTR, dest=self.dest(),
                              **dict(rtr_kw, max_dest_rd_atomic=255)))
        self.case("modify_qp.rtr_alt_path",
                  u.modify_qp(h, rtr | M_ALT_PATH, RTR, dest=self.dest(), alt=self.dest(),
                              alt_port_num=1, **rtr_kw))
        self.case("modify_qp.rtr_bad_sgid_index",
                  u.modify_qp(h, rtr, RTR, dest=qp_dest(self.gid, 200, 1, 1), **rtr_kw))
        self.case("modify_qp.rtr", u.modify_qp(h, rtr, RTR, dest=self.dest(), **rtr_kw))
        self.case("modify_qp.rts_retry_cnt_8", u.modify_qp(h, rts, RTS, **dict(rts_kw, retry_cnt=8)))
        self.case("modify_qp.rts_timeout_32", u.modify_qp(h, rts, RTS, **dict(rts_kw, timeout=32)))
        self.case("modify_qp.rts_max_rd_atomic_255",
                  u.modify_qp(h, rts, RTS, **dict(rts_kw, max_rd_atomic=255)))
        self.case("modify_qp.rts", u.modify_qp(h, rts, RTS, **rts_kw))
        self.qp_post_cases(h)
        self.case("modify_qp.rts_to_sqd", u.modify_qp(h, M_STATE, SQD))
        self.case("modify_qp.sqd_to_rts", u.modify_qp(h, M_STATE, RTS))
        self.case("modify_qp.rts_to_init", u.modify_qp(h, M_STATE, INIT))
        self.case("modify_qp.err", u.modify_qp(h, M_STATE, ERR))
        self.case("modify_qp.err_again", u.modify_qp(h, M_STATE, ERR))
        # ERR -> ERR takes no attributes (ib_modify_qp_is_ok), and attributes without a state
        # change are still checked in ERR.
        self.case("modify_qp.err_to_err_with_qkey",
                  u.modify_qp(h, M_STATE | M_QKEY, ERR, qkey=0x11111111))
        self.case("modify_qp.err_path_mtu_7_no_state", u.modify_qp(h, M_PATH_MTU, path_mtu=7))
        self.case("modify_qp.err_timeout_32_no_state", u.modify_qp(h, M_TIMEOUT, timeout=32))
        self.case("modify_qp.err_cur_state_spoofed_rts",
                  u.modify_qp(h, M_STATE | M_CUR_STATE, RTS, cur_state=RTS))
        # A QP is never reused after an error (irdma-abi.md §2.7, "no QP reuse after ERR").
        self.case("modify_qp.err_to_reset", u.modify_qp(h, M_STATE, RESET))

    def spoof_case(self):
        """MODIFY_QP that claims a current state (IB_QP_CUR_STATE) the QP is not in."""
        u, pd, cq = self.u, self.pd, self.cq
        buf, mr = self.qp_ring("reg_mr.qp_ring_spoof")
        h, _, _ = self.need("create_qp.spoof", u.create_qp(pd, cq, QPT_RC, list(self.CAPS),
                                                             qp_req(buf)))
        self.case("modify_qp.spoof_init", u.modify_qp(
            h, M_STATE | M_PKEY_INDEX | M_PORT | M_ACCESS_FLAGS, INIT, port_num=1,
            access=ACC_LOCAL_WRITE))
        # The QP is in INIT; "RTS -> RTS" with cur_state RTS would skip RTR (stock irdma checks
        # the transition against the QP's real state and answers EINVAL).
        self.case("modify_qp.cur_state_spoofed_rts",
                  u.modify_qp(h, M_STATE | M_CUR_STATE, RTS, cur_state=RTS))
        self.case("destroy_qp.spoof", u.destroy_qp(h))
        self.case("dereg_mr.qp_ring_spoof", u.dereg_mr(mr))

    def ud_case(self):
        u, pd, cq = self.u, self.pd, self.cq
        buf, mr = self.qp_ring("reg_mr.qp_ring_ud")
        e, qp = u.create_qp(pd, cq, QPT_UD, list(self.CAPS), qp_req(buf))
        self.case("create_qp.ud_valid", e, **(qp[2] if qp else {}))
        if not e:
            self.ud_post_cases(qp[0])
            self.case("destroy_qp.ud", u.destroy_qp(qp[0]))
        self.case("dereg_mr.qp_ring_ud", u.dereg_mr(mr))

    def ah_cases(self):
        u, pd = self.u, self.pd
        self.case("create_ah.no_grh", u.create_ah(pd, self.gid, self.gid_index, is_global=0)[0])
        self.case("create_ah.port_2", u.create_ah(pd, self.gid, self.gid_index, port=2)[0])
        self.case("create_ah.bad_sgid_index", u.create_ah(pd, self.gid, 200)[0])
        self.case("create_ah.resp_no_room", *self._ah(drv_out=0))
        self.case("create_ah.resp_4_bytes", *self._ah(drv_out=4))
        self.case("create_ah.resp_unmapped",
                  u.create_ah(pd, self.gid, self.gid_index, resp_addr=unmapped_address())[0])
        e, ah = u.create_ah(pd, self.gid, self.gid_index)
        self.case("create_ah.valid", e, ah_id_small=int(bool(ah) and ah[1] < (1 << 17)))
        if not e:
            self.case("destroy_ah.valid", u.destroy_ah(ah[0]))

    def _ah(self, drv_out):
        """Creates an AH whose driver response has drv_out bytes of room; destroys it if it
        was made. Returns (errno,) for case()."""
        e, ah = self.u.create_ah(self.pd, self.gid, self.gid_index, drv_out=drv_out)
        if not e:
            self.u.destroy_ah(ah[0])
        return (e,)

    def teardown(self):
        u = self.u
        self.case("destroy_cq.valid", u.destroy_cq(self.cq))
        self.case("dereg_mr.cq_ring_after_destroy", u.dereg_mr(self.cq_ring_mr))
        self.case("dereg_mr.cq_shadow_after_destroy", u.dereg_mr(self.cq_shadow_mr))
        self.case("dereg_mr.cq_ring_ctx1", u.dereg_mr(self.cq_ring1_mr))
        self.case("dealloc_pd", u.dealloc_pd(self.pd))
        u.close()

    def run(self):
        self.setup()
        self.pd_cases()
        self.mr_cases()
        self.cq_cases()
        self.rereg_cases()
        self.qp_cases()
        self.ah_cases()
        self.teardown()

    def leave_open(self):
        """One of each object, some in use, then exit without destroying anything."""
        u = self.u
        self.setup()
        buf = mmap_pages(4)
        self.need("reg_mr.mem", u.reg_mr(self.pd, buf, 4 * PAGE, memreg(MEMREG_MEM)))
        ring, shadow, _, _ = self.cq_mem(self.pd, "reg_mr.cq_ring")
        self.cq = self.need("create_cq", u.create_cq(8, cq_req(ring, shadow)))[0]
        # A ring registration with no CQ on it yet.
        self.ring_mr(self.pd, "reg_mr.cq_ring_unused", 2, memreg(MEMREG_CQ, cq_pages=1))
        qbuf, _ = self.qp_ring("reg_mr.qp_ring")
        h, qpn, _ = self.need("create_qp", u.create_qp(self.pd, self.cq, QPT_RC, list(self.CAPS),
                                                       qp_req(qbuf)))
        self.need("modify_qp.init", (u.modify_qp(h, M_STATE | M_PKEY_INDEX | M_PORT
                                                 | M_ACCESS_FLAGS, INIT, port_num=1), None))
        self.need("modify_qp.rtr", (u.modify_qp(
            h, M_STATE | M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN | M_MAX_DEST_RD_ATOMIC
            | M_MIN_RNR_TIMER, RTR, dest=self.dest(), path_mtu=3, dest_qp_num=qpn, rq_psn=1,
            max_dest_rd_atomic=1, min_rnr_timer=12), None))
        ubuf, _ = self.qp_ring("reg_mr.qp_ring_ud")
        self.need("create_qp.ud", u.create_qp(self.pd, self.cq, QPT_UD, list(self.CAPS),
                                              qp_req(ubuf)))
        self.need("create_ah", u.create_ah(self.pd, self.gid, self.gid_index))
        # Exit with everything open (the fds close with the process).


# ---- ring registrations over memory the user may not write ---------------------------------

MAP_SHARED = 0x01
NOBODY = 65534


def mmap_file_readonly(path: str, n: int) -> int:
    """The first n pages of the file at path, mapped PROT_READ, MAP_SHARED (its page cache)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        a = _libc.mmap(None, n * PAGE, PROT_READ, MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if a in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    return a


def cqe_valid(ring: int, i: int = 0) -> bool:
    """Whether CQE i of a CQ ring (32-byte entries, VALID = qw3 bit 63) has been written."""
    return bool(struct.unpack_from("<Q", ctypes.string_at(ring + 32 * i, 32), 24)[0] >> 63)


class ReadonlyRing(Scenario):
    """An unprivileged process registers its read-only MAP_SHARED mapping of a file it cannot
    write as CQ and QP rings (access 0, and LOCAL_WRITE) and as a memory MR; where a CQ gets
    created on it, a flushed receive makes the device write a CQE there. The same flush on a
    ring in the process's own memory (the control) must produce that CQE, so the traffic is
    real. The caller compares the file before and after."""

    # The file's pages: enough for the QP ring registration (CAPS: 4 SQ + 1 RQ + shadow).
    FILE_PAGES = 8

    def __init__(self, dev, path):
        self.dev, self.path = dev, path
        self.gid_index, self.gid = 0, bytes(16)

    def flush_one_recv(self, name, cq):
        """A QP on its own (writable) ring with send and receive CQ `cq`: one valid RQ WQE,
        INIT, then ERR, which makes the device write one flush CQE for it into `cq`."""
        u = self.u
        buf, mr = self.qp_ring(f"{name}.reg_mr.qp_ring")
        sq_depth, _, _, _ = qp_rings(*(self.CAPS[i] for i in (0, 2, 4, 1, 3)))
        rq = buf + ring_pages(sq_depth) * PAGE
        # RQ WQE 0: quantum 0's header (qw3) with the valid bit of the first pass.
        ctypes.memmove(rq + 24, struct.pack("<Q", 1 << 63), 8)
        h, _, _ = self.need(f"{name}.create_qp",
                            u.create_qp(self.pd, cq, QPT_RC, list(self.CAPS), qp_req(buf)))
        self.need(f"{name}.modify_qp.init", (u.modify_qp(
            h, M_STATE | M_PKEY_INDEX | M_PORT | M_ACCESS_FLAGS, INIT, port_num=1,
            access=ACC_LOCAL_WRITE), None))
        self.need(f"{name}.modify_qp.err", (u.modify_qp(h, M_STATE, ERR), None))
        return h, mr

    def run(self):
        u = None
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        try:
            os.close(os.open(self.path, os.O_RDWR))
            e = 0
        except OSError as err:
            e = errname(err.errno)
        self.case("file.open_rdwr_as_nobody", e, uid=os.getuid(), euid=os.geteuid())
        self.u = u = Uverbs(self.dev)
        self.setup()
        ro = mmap_file_readonly(self.path, self.FILE_PAGES)
        orig = ctypes.string_at(ro, self.FILE_PAGES * PAGE)
        n = self.FILE_PAGES * PAGE
        ring_cq = memreg(MEMREG_CQ, cq_pages=1)
        # The control: a CQ ring in the process's own memory gets the flush CQE.
        own, own_shadow, own_mr, own_shadow_mr = self.cq_mem(self.pd, "control.reg_mr.cq_ring")
        cq = self.need("control.create_cq", u.create_cq(8, cq_req(own, own_shadow)))[0]
        h, qmr = self.flush_one_recv("control", cq)
        for _ in range(100):
            if cqe_valid(own):
                break
            time.sleep(0.05)
        self.case("control.flush_cqe_written", 0, written=int(cqe_valid(own)))
        self.case("control.destroy_qp", u.destroy_qp(h))
        self.case("control.dereg_mr.qp_ring", u.dereg_mr(qmr))
        self.case("control.destroy_cq", u.destroy_cq(cq))
        self.case("control.dereg_mr.cq_ring", u.dereg_mr(own_mr))
        # The shadow area stays registered (free again) for the attack below.

        # Ring registrations over the file: the device would write them.
        e, mr = u.reg_mr(self.pd, ro, 2 * PAGE, ring_cq, access=0)
        self.case("reg_mr.cq_ring_readonly_file_access_0", e)
        e2, mr2 = u.reg_mr(self.pd, ro, 6 * PAGE, memreg(MEMREG_QP, rq_pages=1, sq_pages=4),
                           access=0)
        self.case("reg_mr.qp_ring_readonly_file_access_0", e2)
        if not e2:
            u.dereg_mr(mr2[0])
        # Asking for write access pins for writing, which the mapping refuses.
        e3, mr3 = u.reg_mr(self.pd, ro, 2 * PAGE, ring_cq, access=ACC_LOCAL_WRITE)
        self.case("reg_mr.cq_ring_readonly_file_local_write", e3)
        if not e3:
            u.dereg_mr(mr3[0])
        # A memory MR without write rights is fine: the device only reads it.
        e4, mr4 = u.reg_mr(self.pd, ro, n, memreg(MEMREG_MEM), access=ACC_REMOTE_READ)
        self.case("reg_mr.mem_readonly_file_remote_read", e4)
        if not e4:
            self.case("dereg_mr.mem_readonly_file", u.dereg_mr(mr4[0]))
        # The attack: a CQ on the file's page, and a CQE the device writes there.
        e5, cqf = u.create_cq(8, cq_req(ro, own_shadow))
        self.case("create_cq.on_readonly_file", e5)
        if not e5:
            h, qmr = self.flush_one_recv("attack", cqf[0])
            for _ in range(100):
                if cqe_valid(ro):
                    break
                time.sleep(0.05)
            u.destroy_qp(h)
            u.dereg_mr(qmr)
            u.destroy_cq(cqf[0])
        if not e:
            self.case("dereg_mr.cq_ring_readonly_file", u.dereg_mr(mr[0]))
        now = ctypes.string_at(ro, n)
        changed = sum(1 for a, b in zip(orig, now) if a != b)
        self.case("file.bytes_changed_in_mapping", 0, changed=changed)
        self.case("control.dereg_mr.cq_shadow", u.dereg_mr(own_shadow_mr))
        self.case("dealloc_pd", u.dealloc_pd(self.pd))
        u.close()


def context_quota(dev) -> int:
    """One unprivileged user cannot take every user context of the device."""
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)
        # One file per context: room for more than any quota before dropping root.
        resource.setrlimit(resource.RLIMIT_NOFILE, (5100, 5100))
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        held, err = [], 0
        while len(held) < 5000:
            u = Uverbs(dev)
            e, _ = u.get_context()
            if e:
                err = e
                u.close()
                break
            held.append(u)
        os.write(w, f"{err} {len(held)}\n".encode())
        os.read(go_r, 1)
        os._exit(0)
    os.close(w)
    os.close(go_r)
    line = os.read(r, 100).decode().split()
    u = Uverbs(dev)
    e, _ = u.get_context()
    u.close()
    os.write(go_w, b"x")
    os.waitpid(pid, 0)
    print(f"case nobody.contexts {line[0]} opened={line[1]}", flush=True)
    print(f"case root.context_while_nobody_holds {e}", flush=True)
    return 0


def context_cycles(dev, n) -> int:
    """Open/close cycles as an unprivileged user; see the module doc."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        done, err = 0, 0
        while done < n and not err:
            u = Uverbs(dev)
            try:
                err, drv = u.get_context()
                if not err:
                    # irdma_alloc_ucontext_resp.db_mmap_key: the doorbell page's mmap offset.
                    key = struct.unpack_from("<Q", drv, 24)[0]
                    try:
                        mapping = mmap.mmap(u.fd, PAGE, mmap.MAP_SHARED,
                                            mmap.PROT_READ | mmap.PROT_WRITE, offset=key)
                        mapping.close()
                        err, _ = u.alloc_pd()
                    except OSError as e:
                        err = errname(e.errno)
            finally:
                u.close()
            if not err:
                done += 1
        os.write(w, f"{err} {done}\n".encode())
        os._exit(0)
    os.close(w)
    line = os.read(r, 100).decode().split()
    os.waitpid(pid, 0)
    print(f"case nobody.context_cycles {line[0]} done={line[1]}", flush=True)
    return 0


def readonly_ring(dev, path) -> int:
    try:
        ReadonlyRing(dev, path).run()
    except Broken as e:
        print(f"scenario broken: {e}", flush=True)
        return 1
    return 0


def scenario(dev, gid_index, gid_hex, leave_open=False) -> int:
    s = Scenario(dev, gid_index, bytes.fromhex(gid_hex))
    try:
        if leave_open:
            s.leave_open()
        else:
            s.run()
    except Broken as e:
        print(f"scenario broken: {e}", flush=True)
        return 1
    return 0


def main() -> int:
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "get-context":
        print(json.dumps(get_context(a[1], bytes.fromhex(a[2]), int(a[3]))))
        return 0
    if len(a) == 2 and a[0] == "context-quota":
        return context_quota(a[1])
    if len(a) == 3 and a[0] == "context-cycles":
        return context_cycles(a[1], int(a[2]))
    if len(a) == 3 and a[0] == "readonly-ring":
        return readonly_ring(a[1], a[2])
    if len(a) in (4, 5) and a[0] == "scenario" and (len(a) == 4 or a[4] == "leave-open"):
        return scenario(a[1], int(a[2]), a[3], len(a) == 5)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
