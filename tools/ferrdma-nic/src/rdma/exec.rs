//! The data path: SQ processing, local loopback delivery (RC and UD), receive, flushes and
//! the error model of the programming manual ("Errors and flushes").
//!
//! Borrowing rule: QPs are looked up by id for each step and never held across a call that
//! may touch another QP, because requester and responder may be the same QP.

use crate::interface::{
    ae, cqe, eqe_kind, fast_reg_fields, flush, gid_is_multicast, mtu_bytes, qp_state, sq_op,
    wqe as wqef, FastRegFields, PageList, QpAttrs, AV_FLAG_IPV4, MAX_MR_SIZE, MCAST_QPN,
    MR_ACCESS_ALL, PBL_ENTRIES_PER_PAGE, PBL_LEVEL_2, QP_ACCESS_REMOTE_READ,
    QP_ACCESS_REMOTE_WRITE, QP_TYPE_GSI, QP_TYPE_RC, QP_TYPE_UD, QUANTUM, UD_GRH_SIZE,
};

use crate::dma::GuestMemory;

use super::cq::CqeData;
use super::mr::{AccessFault, Need, Seg};
use super::pagelist::{self, PageListError};
use super::path::av_vlan;
use super::qp::Qp;
use super::seglist::SegList;
use super::transport::{rnr_timer_us, LATE_FLUSH_FIRST_US, LATE_FLUSH_MAX_US};
use super::wqe::{self, Sge, SqWqe, WqeError};
use super::{grh, Engine, Env};

/// Largest chunk copied at once between guest buffers.
const COPY_CHUNK: u64 = 64 * 1024;

/// Message payload source.
pub(super) enum Src {
    Bytes(Vec<u8>),
    Segs(Vec<Seg>),
}

/// Which side of a copy faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyFault {
    Src,
    Dst,
}

/// Copies all of `src` into the start of `dst` (which is at least as long), in chunks.
fn copy(env: &Env<'_>, src: &Src, dst: &[Seg]) -> Result<(), CopyFault> {
    let mut di = 0usize;
    let mut doff = 0u64;
    let mut put = |mut data: &[u8]| -> Result<(), CopyFault> {
        while !data.is_empty() {
            let &(addr, len) = dst.get(di).ok_or(CopyFault::Dst)?;
            let take = (len - doff).min(data.len() as u64) as usize;
            let (now, rest) = data.split_at(take);
            env.mem
                .write(addr + doff, now)
                .map_err(|_| CopyFault::Dst)?;
            doff += take as u64;
            if doff == len {
                di += 1;
                doff = 0;
            }
            data = rest;
        }
        Ok(())
    };
    match src {
        Src::Bytes(b) => put(b),
        Src::Segs(segs) => {
            let mut buf = Vec::new();
            for &(addr, len) in segs {
                let mut off = 0u64;
                while off < len {
                    let n = (len - off).min(COPY_CHUNK);
                    buf.resize(n as usize, 0);
                    env.mem
                        .read(addr + off, &mut buf)
                        .map_err(|_| CopyFault::Src)?;
                    put(&buf)?;
                    off += n;
                }
            }
            Ok(())
        }
    }
}

/// Segments of the first `len` bytes of `segs`.
fn prefix(segs: Vec<Seg>, len: u64) -> Vec<Seg> {
    let mut left = len;
    let mut out = Vec::new();
    for (a, l) in segs {
        if left == 0 {
            break;
        }
        let t = l.min(left);
        out.push((a, t));
        left -= t;
    }
    out
}

/// Why a FAST_REG WQE failed (manual, "Fast registration").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum FastRegError {
    #[error("page shift {0} is not supported")]
    PageShift(u8),
    #[error("length {0} out of range")]
    Length(u64),
    #[error("undefined access bits {0:#x}")]
    Access(u32),
    #[error("{0} pages do not cover the region")]
    Pages(u32),
    #[error("no MR at the STag's index")]
    NoMr,
    #[error("the MR was not allocated for fast registration")]
    NotFastReg,
    #[error("the MR belongs to another PD")]
    Pd,
    #[error("the MR is valid (invalidate it first)")]
    Valid,
    #[error("{0} pages exceed the MR's maximum of {1}")]
    TooManyPages(u32, u32),
    #[error("page list address {0:#x} is not 8-byte aligned")]
    ListAlign(u64),
    #[error("page list at {0:#x} is not readable")]
    ListDma(u64),
    #[error("page address {0:#x} is not aligned to the page size")]
    PageAlign(u64),
    #[error("{0} pages in a one-level page list (two levels above {PBL_ENTRIES_PER_PAGE})")]
    OneLevelTooLong(u32),
    #[error("two-level page list: {0} ({1:#x})")]
    TwoLevel(&'static str, u64),
}

impl FastRegError {
    /// The CQE flush code: MW_BIND for the MR's state, PD or size; LOC_PROT for an
    /// unreadable page list; LOC_QP_OP for malformed fields.
    pub(super) fn flush_code(self) -> u16 {
        match self {
            Self::NoMr | Self::NotFastReg | Self::Pd | Self::Valid | Self::TooManyPages(..) => {
                flush::MW_BIND
            }
            Self::ListDma(_) => flush::PROT,
            _ => flush::LOC_QP_OP,
        }
    }
}

/// Outcome of one SQ WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Done(u64),
    Rnr,
    /// Handed to the wire transport: it completes when acknowledged.
    Queued,
    /// The wire transport's window is full: retry the WQE when ACKs free room.
    Busy,
    /// The WQE failed: CQE flush code and the requester's async event.
    Fail(u16, u16),
}

/// What a message delivered to a receive queue looks like.
pub(super) struct Inbound {
    pub src_qpn: u32,
    pub op: u8,
    pub imm: Option<u32>,
    pub solicited: bool,
    pub inv_stag: Option<u32>,
    pub grh: Option<[u8; 40]>,
    pub ipv4: bool,
    /// RDMA WRITE with immediate: consume a WQE, scatter nothing, report `len`.
    pub no_scatter: bool,
    pub len: u64,
    /// UD: the 802.1Q TCI the packet carried, reported in the CQE (RoCE over a VLAN).
    pub vlan_tci: Option<u16>,
    /// UD: the source MAC, reported in the CQE with the VLAN or immediate data.
    pub smac: Option<[u8; 6]>,
}

/// Outcome of a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recv {
    Ok,
    Rnr,
    /// UD only: silently dropped.
    Dropped,
    /// The requester's payload could not be read.
    SrcFault,
    /// Failed at the responder: the requester's CQE flush code.
    Nak(u16),
}

pub(super) fn sq_cqe(
    qp_id: u32,
    qp: &Qp,
    idx: u32,
    op: u8,
    bytes: u64,
    err: Option<u16>,
) -> CqeData {
    let mut qw3 = (1u64 << cqe::SQ)
        | (u64::from(op & 0x3f) << cqe::OP_LO)
        | (u64::from(idx & 0x7fff) << cqe::WQEIDX_LO);
    if let Some(minor) = err {
        qw3 |=
            (1 << cqe::ERROR) | (u64::from(cqe::MAJERR_FLUSH) << cqe::MAJERR_LO) | u64::from(minor);
    }
    CqeData {
        qw: [
            bytes & 0xffff_ffff,
            qp.compl_ctx,
            u64::from(qp_id) << cqe::QPID_LO,
            qw3,
        ],
        ext: None,
    }
}

fn rq_flush_cqe(qp_id: u32, qp: &Qp, minor: u16) -> CqeData {
    let idx = (qp.rq_tail << qp.rq_shift) & 0x7fff;
    CqeData {
        qw: [
            0,
            qp.compl_ctx,
            u64::from(qp_id) << cqe::QPID_LO,
            (1 << cqe::ERROR)
                | (u64::from(cqe::MAJERR_FLUSH) << cqe::MAJERR_LO)
                | u64::from(minor)
                | (u64::from(idx) << cqe::WQEIDX_LO)
                | (u64::from(cqe::OP_RECV) << cqe::OP_LO),
        ],
        ext: None,
    }
}

impl Engine {
    pub(super) fn qp(&self, id: u32) -> Option<&Qp> {
        self.qps.get(id)
    }

    pub(super) fn qp_mut(&mut self, id: u32) -> Option<&mut Qp> {
        self.qps.get_mut(id)
    }

    /// An SQ doorbell through doorbell page `page`.
    pub(super) fn sq_doorbell(&mut self, env: &Env<'_>, page: u32, qp_id: u32) {
        match self.qp(qp_id) {
            Some(qp) if qp.db_page == page => {}
            _ => {
                self.stats.spurious_doorbells += 1;
                return;
            }
        }
        self.stats.doorbells += 1;
        self.process_sq(env, qp_id);
    }

    /// Retries every QP whose RNR timer (after a local receiver's RNR NAK) has expired.
    pub(super) fn retry_rnr(&mut self, env: &Env<'_>) {
        let mut next = self.rnr_waiting.first().copied();
        while let Some(id) = next {
            // A QP that waits again is back in the set below `id`: retried next time.
            next = self.rnr_waiting.range(id + 1..).next().copied();
            let due = match self.qp(id).map(|q| q.rnr_retry_at) {
                Some(Some(t)) => t <= env.now_us,
                // Gone, or no longer waiting (reset, error): forget it.
                _ => true,
            };
            if !due {
                continue;
            }
            self.rnr_waiting.remove(&id);
            if let Some(q) = self.qp_mut(id) {
                if q.rnr_retry_at.take().is_some() {
                    self.process_sq(env, id);
                }
            }
        }
    }

    /// Reads the `QUANTUM`-sized entry `index` of a ring at `addr`.
    fn read_quantum(env: &Env<'_>, addr: u64) -> Option<[u8; QUANTUM]> {
        let mut b = [0u8; QUANTUM];
        env.mem.read(addr, &mut b).ok().map(|_| b)
    }

    /// Executes valid SQ WQEs from the tail (RTS), or flushes them (ERR).
    pub(super) fn process_sq(&mut self, env: &Env<'_>, qp_id: u32) {
        let Some(qp) = self.qp(qp_id) else { return };
        match qp.state() {
            // The head WQE waits for its RNR timer (`retry_rnr`).
            qp_state::RTS if qp.rnr_retry_at.is_some() => return,
            qp_state::RTS => {}
            qp_state::ERR => {
                self.flush_sq(env, qp_id, true);
                return;
            }
            _ => return,
        }
        let budget = qp.sq.entries();
        for _ in 0..budget {
            let Some(qp) = self.qp(qp_id) else { return };
            if qp.state() != qp_state::RTS {
                return;
            }
            let (tail, pol) = (qp.sq_tail, qp.sq_pol);
            let Some(q0) = Self::read_quantum(env, qp.sq.addr(tail)) else {
                self.stats.dma_faults += 1;
                self.fail_wqe(env, qp_id, tail, 0, 0, flush::FATAL, ae::QP_FATAL);
                return;
            };
            let hdr = wqe::header(&q0);
            if !wqe::is_valid(hdr, pol) {
                return;
            }
            let n = wqe::sq_quanta(hdr).clamp(1, 8);
            let mut buf = Vec::with_capacity(n as usize * QUANTUM);
            buf.extend_from_slice(&q0);
            for k in 1..n {
                let Some(q) = Self::read_quantum(env, qp.sq.addr(tail + k)) else {
                    self.stats.dma_faults += 1;
                    self.fail_wqe(env, qp_id, tail, n, 0, flush::FATAL, ae::QP_FATAL);
                    return;
                };
                buf.extend_from_slice(&q);
            }
            let op = crate::interface::bits(hdr, wqef::OPCODE_HI, wqef::OPCODE_LO) as u8;
            // Completions are in SQ order: while WQEs are on the wire, one that would complete
            // at once (NOP, LOCAL_INV, an error) waits for them.
            let wire_busy = !qp.req.pending.is_empty();
            let w = match wqe::parse_sq(&buf) {
                Ok(w) => w,
                Err(_) if wire_busy => return,
                Err(e) => {
                    log::debug!("QP {qp_id}: malformed WQE at {tail}: {e}");
                    let code = if matches!(e, WqeError::TooLong(_)) {
                        flush::LOC_LEN
                    } else {
                        flush::LOC_QP_OP
                    };
                    self.fail_wqe(env, qp_id, tail, n, op, code, ae::QP_FATAL);
                    return;
                }
            };
            if wire_busy && !self.goes_to_wire(qp_id, &w) {
                return;
            }
            match self.execute_wqe(env, qp_id, tail, n, &w) {
                Outcome::Queued => {
                    let Some(qp) = self.qp_mut(qp_id) else { return };
                    qp.advance_sq(n);
                }
                Outcome::Busy => return,
                Outcome::Done(bytes) => {
                    let Some(qp) = self.qp_mut(qp_id) else { return };
                    qp.rnr_attempts = 0;
                    let cqe = w
                        .signaled
                        .then(|| sq_cqe(qp_id, qp, tail, w.opcode, bytes, None));
                    qp.sq_unreported = cqe.is_none();
                    qp.advance_sq(n);
                    let cq = qp.send_cq;
                    if let Some(c) = cqe {
                        self.post_cqe(env, cq, &c);
                    }
                }
                Outcome::Rnr => {
                    self.stats.rnr_naks += 1;
                    let timer = self
                        .rc_dest(qp_id)
                        .and_then(|d| self.qp(d))
                        .map_or(0, |d| d.attrs.min_rnr_timer);
                    let Some(qp) = self.qp_mut(qp_id) else { return };
                    qp.rnr_attempts += 1;
                    let retry = qp.attrs.rnr_retry;
                    if retry == 0 || (retry != 7 && qp.rnr_attempts > u32::from(retry)) {
                        self.fail_wqe(
                            env,
                            qp_id,
                            tail,
                            n,
                            w.opcode,
                            flush::RNR_RETRY_EXC,
                            ae::QP_RNR_RETRY_EXCEEDED,
                        );
                    } else {
                        qp.rnr_retry_at = Some(env.now_us + rnr_timer_us(timer));
                        self.rnr_waiting.insert(qp_id);
                    }
                    return;
                }
                Outcome::Fail(..) if wire_busy => return,
                Outcome::Fail(code, event) => {
                    self.fail_wqe(env, qp_id, tail, n, w.opcode, code, event);
                    return;
                }
            }
        }
    }

    /// Completes the WQE at `tail` (of `n` quanta) in error and moves the QP to ERR.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fail_wqe(
        &mut self,
        env: &Env<'_>,
        qp_id: u32,
        tail: u32,
        n: u32,
        op: u8,
        code: u16,
        event: u16,
    ) {
        self.stats.wqe_errors += 1;
        let Some(qp) = self.qp_mut(qp_id) else { return };
        let c = sq_cqe(qp_id, qp, tail, op, 0, Some(code));
        qp.advance_sq(n);
        qp.sq_unreported = false;
        qp.last_error = code;
        let cq = qp.send_cq;
        self.post_cqe(env, cq, &c);
        self.async_event(env, eqe_kind::QP, qp_id, event, u32::from(code));
        self.enter_err(env, qp_id, false, true);
    }

    /// Moves a QP to ERR and flushes; `sq_cqe`/`rq_cqe` say whether those queues still need
    /// a flush CQE (the queue whose WQE failed already has its error CQE).
    pub(super) fn enter_err(&mut self, env: &Env<'_>, qp_id: u32, sq_cqe: bool, rq_cqe: bool) {
        let Some(qp) = self.qp_mut(qp_id) else { return };
        qp.attrs.state = qp_state::ERR;
        qp.rnr_retry_at = None;
        qp.err_scan = Some((
            env.now_us.saturating_add(LATE_FLUSH_FIRST_US),
            LATE_FLUSH_FIRST_US,
        ));
        qp.resp = Default::default();
        self.flush_sq(env, qp_id, sq_cqe);
        self.flush_rq(env, qp_id, rq_cqe);
    }

    /// Consumes every valid SQ WQE; writes one flush CQE if `write` and there was
    /// outstanding work. Returns whether there was.
    pub(super) fn flush_sq(&mut self, env: &Env<'_>, qp_id: u32, write: bool) -> bool {
        let Some(qp) = self.qp(qp_id) else {
            return false;
        };
        // WQEs still on the wire were consumed from the ring but not completed: the flush
        // reports from the oldest of them.
        let start = qp.req.pending.front().map_or(qp.sq_tail, |p| p.tail);
        let mut outstanding = qp.sq_unreported || !qp.req.pending.is_empty();
        let mut steps = Vec::new();
        let (mut tail, mut pol) = (qp.sq_tail, qp.sq_pol);
        let size = qp.sq.entries();
        for _ in 0..size {
            let Some(q0) = Self::read_quantum(env, qp.sq.addr(tail)) else {
                break;
            };
            let hdr = wqe::header(&q0);
            if !wqe::is_valid(hdr, pol) {
                break;
            }
            let n = wqe::sq_quanta(hdr).clamp(1, 8);
            steps.push(n);
            outstanding = true;
            tail += n;
            if tail >= size {
                tail -= size;
                pol = !pol;
            }
        }
        let Some(qp) = self.qp_mut(qp_id) else {
            return false;
        };
        qp.req = Default::default();
        for n in steps {
            qp.advance_sq(n);
        }
        qp.sq_unreported = false;
        if write && outstanding {
            let c = sq_cqe(qp_id, qp, start, 0, 0, Some(flush::GENERAL));
            let cq = qp.send_cq;
            self.post_cqe(env, cq, &c);
        }
        outstanding
    }

    /// Whether the RQ WQE at the tail is valid (`None` if the ring is not readable).
    pub(super) fn rq_head_valid(&self, env: &Env<'_>, qp_id: u32) -> Option<bool> {
        let qp = self.qp(qp_id)?;
        let q0 = Self::read_quantum(env, qp.rq.addr(qp.rq_tail))?;
        Some(wqe::is_valid(wqe::header(&q0), qp.rq_pol))
    }

    /// Flushes what was posted to QPs in ERR since their last flush, without a doorbell or
    /// a reflush request. libirdma rings no doorbell for a receive and asks for a reflush
    /// only if libibverbs' cached QP state already says ERR; a receive posted between the
    /// device's flush and that update (an application reposting from its completion thread
    /// while another thread disconnects, as rping does) was otherwise never completed, and
    /// whoever waited for its completion waited forever (seen once in make check:
    /// cm-failures-ferrdma's rping server, 63 s after its peer was killed). Each QP in ERR
    /// is looked at LATE_FLUSH_FIRST_US after it entered ERR, then at doubling intervals up
    /// to LATE_FLUSH_MAX_US (back to the first after a flush), so that a guest's QPs left
    /// in ERR cost the engine little.
    pub(super) fn late_flushes(&mut self, env: &Env<'_>) {
        let mut next = self.qps.next_id(0);
        while let Some(id) = next {
            next = self.qps.next_id(id + 1);
            let Some(qp) = self.qp_mut(id) else { continue };
            let Some((at, interval)) = qp.err_scan else {
                continue;
            };
            if env.now_us < at {
                continue;
            }
            if qp.state() != qp_state::ERR {
                qp.err_scan = None;
                continue;
            }
            let flushed = self.flush_rq(env, id, true) | self.flush_sq(env, id, true);
            let interval = if flushed {
                LATE_FLUSH_FIRST_US
            } else {
                interval.saturating_mul(2).min(LATE_FLUSH_MAX_US)
            };
            if let Some(qp) = self.qp_mut(id) {
                qp.err_scan = Some((env.now_us.saturating_add(interval), interval));
            }
        }
    }

    /// Consumes every valid RQ WQE; one flush CQE if `write` and there was one. Returns
    /// whether there was one.
    pub(super) fn flush_rq(&mut self, env: &Env<'_>, qp_id: u32, write: bool) -> bool {
        let Some(entries) = self.qp(qp_id).map(|q| q.rq.entries()) else {
            return false;
        };
        let mut first: Option<CqeData> = None;
        for _ in 0..entries {
            if self.rq_head_valid(env, qp_id) != Some(true) {
                break;
            }
            let Some(qp) = self.qp_mut(qp_id) else {
                return false;
            };
            if first.is_none() {
                first = Some(rq_flush_cqe(qp_id, qp, flush::GENERAL));
            }
            qp.advance_rq();
        }
        let found = first.is_some();
        if let (true, Some(c)) = (write, first) {
            if let Some(cq) = self.qp(qp_id).map(|q| q.recv_cq) {
                self.post_cqe(env, cq, &c);
            }
        }
        found
    }

    /// A responder-side failure: error CQE for the RQ WQE at the tail (consumed), async
    /// event, and ERR (with an SQ flush CQE).
    pub(super) fn responder_fail(&mut self, env: &Env<'_>, qp_id: u32, code: u16, event: u16) {
        self.stats.wqe_errors += 1;
        let Some(qp) = self.qp_mut(qp_id) else { return };
        let c = rq_flush_cqe(qp_id, qp, code);
        qp.advance_rq();
        qp.last_error = code;
        let cq = qp.recv_cq;
        self.post_cqe(env, cq, &c);
        self.async_event(env, eqe_kind::QP, qp_id, event, u32::from(code));
        self.enter_err(env, qp_id, true, false);
    }

    /// The local payload of a send or write. `dma` is the guest memory for a privileged QP
    /// (which may use the local DMA STag), `None` otherwise.
    pub(super) fn gather(
        &self,
        dma: Option<&dyn GuestMemory>,
        pd: u32,
        w: &SqWqe,
    ) -> Result<Src, AccessFault> {
        if let Some(d) = &w.inline {
            return Ok(Src::Bytes(d.clone()));
        }
        let mut segs = Vec::new();
        for s in &w.sges {
            segs.extend(self.mrs.translate_as(
                dma,
                s.stag,
                pd,
                s.addr,
                u64::from(s.len),
                Need::LocalRead,
            )?);
        }
        Ok(Src::Segs(segs))
    }

    /// Scatter segments for `len` bytes over `sges` (checked up to what is needed); `dma` as
    /// for [`Engine::gather`].
    pub(super) fn scatter(
        &self,
        dma: Option<&dyn GuestMemory>,
        pd: u32,
        sges: &[Sge],
        len: u64,
    ) -> Result<Vec<Seg>, AccessFault> {
        let mut left = len;
        let mut segs = Vec::new();
        for s in sges {
            if left == 0 {
                break;
            }
            let take = u64::from(s.len).min(left);
            segs.extend(
                self.mrs
                    .translate_as(dma, s.stag, pd, s.addr, take, Need::LocalWrite)?,
            );
            left -= take;
        }
        Ok(segs)
    }

    /// The RC destination QP of `qp_id`, if the message would be answered.
    fn rc_dest(&self, qp_id: u32) -> Option<u32> {
        let qp = self.qp(qp_id)?;
        if !self.port.link_up || !self.gids.iter().flatten().any(|g| g.gid == qp.attrs.dgid) {
            return None;
        }
        let d = qp.attrs.dest_qpn;
        let dq = self.qp(d)?;
        (dq.qp_type == QP_TYPE_RC && dq.can_receive()).then_some(d)
    }

    /// Whether `w` on RC QP `qp_id` would go to a peer on the wire.
    fn goes_to_wire(&self, qp_id: u32, w: &SqWqe) -> bool {
        let Some(qp) = self.qp(qp_id) else {
            return false;
        };
        qp.qp_type == QP_TYPE_RC
            && !self.is_local_gid(&qp.attrs.dgid)
            && matches!(
                w.opcode,
                sq_op::SEND
                    | sq_op::SEND_SOL
                    | sq_op::SEND_INV
                    | sq_op::SEND_SOL_INV
                    | sq_op::RDMA_WRITE
                    | sq_op::RDMA_WRITE_SOL
                    | sq_op::RDMA_READ
            )
    }

    fn execute_wqe(
        &mut self,
        env: &Env<'_>,
        qp_id: u32,
        tail: u32,
        quanta: u32,
        w: &SqWqe,
    ) -> Outcome {
        let Some(qp) = self.qp(qp_id) else {
            return Outcome::Fail(flush::FATAL, ae::QP_FATAL);
        };
        let (pd, ty) = (qp.pd, qp.qp_type);
        let dma = qp.privileged.then_some(env.mem);
        let ud = matches!(ty, QP_TYPE_UD | QP_TYPE_GSI);
        match w.opcode {
            sq_op::NOP => return Outcome::Done(0),
            sq_op::SEND | sq_op::SEND_SOL => {}
            sq_op::LOCAL_INV if !ud => {
                return match self.mrs.invalidate(w.qw1 as u32, pd) {
                    Ok(()) => Outcome::Done(0),
                    Err(_) => Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
                };
            }
            sq_op::FAST_REG if !ud => {
                if dma.is_none() {
                    log::debug!("QP {qp_id}: FAST_REG on an unprivileged QP");
                    return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS);
                }
                return match self.fast_register(env, pd, w) {
                    Ok(()) => Outcome::Done(0),
                    Err(e) => {
                        log::debug!("QP {qp_id}: FAST_REG of {:#x}: {e}", w.hdr_low);
                        Outcome::Fail(e.flush_code(), ae::QP_LOCAL_ACCESS)
                    }
                };
            }
            sq_op::SEND_INV
            | sq_op::SEND_SOL_INV
            | sq_op::RDMA_WRITE
            | sq_op::RDMA_WRITE_SOL
            | sq_op::RDMA_READ
                if !ud => {}
            _ => return Outcome::Fail(flush::LOC_QP_OP, ae::QP_FATAL),
        }
        if self.goes_to_wire(qp_id, w) {
            return self.queue_remote(env, qp_id, tail, quanta, w);
        }
        if w.opcode == sq_op::RDMA_READ {
            return self.rdma_read(env, qp_id, pd, w);
        }
        let src = match self.gather(dma, pd, w) {
            Ok(s) => s,
            Err(_) => return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
        };
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += w.len;
        if ud {
            return self.ud_send(env, qp_id, w, &src);
        }
        let Some(dest) = self.rc_dest(qp_id) else {
            return Outcome::Fail(flush::RETRY_EXC, ae::QP_RETRY_EXCEEDED);
        };
        if matches!(w.opcode, sq_op::RDMA_WRITE | sq_op::RDMA_WRITE_SOL) {
            return self.rdma_write(env, qp_id, dest, w, &src);
        }
        let inv = matches!(w.opcode, sq_op::SEND_INV | sq_op::SEND_SOL_INV);
        let msg = Inbound {
            src_qpn: qp_id,
            op: cqe::OP_RECV,
            imm: w.imm,
            solicited: matches!(w.opcode, sq_op::SEND_SOL | sq_op::SEND_SOL_INV),
            inv_stag: inv.then_some(w.hdr_low),
            grh: None,
            ipv4: false,
            no_scatter: false,
            len: w.len,
            vlan_tci: None,
            smac: None,
        };
        match self.receive(env, dest, &msg, &src) {
            Recv::Ok => Outcome::Done(w.len),
            Recv::Rnr => Outcome::Rnr,
            Recv::Dropped => Outcome::Done(w.len),
            Recv::SrcFault => Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
            Recv::Nak(code) => Outcome::Fail(code, ae::QP_REMOTE_ERROR),
        }
    }

    /// Executes a FAST_REG WQE of a privileged QP of PD `pd`: checks every field, reads the
    /// page list, then installs the translation and makes the MR valid under the new key.
    /// Nothing changes unless everything is right.
    fn fast_register(&mut self, env: &Env<'_>, pd: u32, w: &SqWqe) -> Result<(), FastRegError> {
        let stag = w.hdr_low;
        let iova = w.qw0;
        let f = fast_reg_fields(w.qw1, w.qw2);
        if !matches!(f.page_shift, 12 | 21 | 30) {
            return Err(FastRegError::PageShift(f.page_shift));
        }
        if !(1..=MAX_MR_SIZE).contains(&f.length) || iova.checked_add(f.length).is_none() {
            return Err(FastRegError::Length(f.length));
        }
        if f.access & !MR_ACCESS_ALL != 0 {
            return Err(FastRegError::Access(f.access));
        }
        let ps = 1u64 << f.page_shift;
        let need = ((iova & (ps - 1)) + f.length).div_ceil(ps);
        if f.npages == 0 || u64::from(f.npages) < need {
            return Err(FastRegError::Pages(f.npages));
        }
        let mr = self.mrs.slot(stag).ok_or(FastRegError::NoMr)?;
        if !mr.is_fast_reg() {
            return Err(FastRegError::NotFastReg);
        }
        if mr.pd != pd {
            return Err(FastRegError::Pd);
        }
        if mr.valid {
            return Err(FastRegError::Valid);
        }
        if f.npages > mr.max_pages {
            return Err(FastRegError::TooManyPages(f.npages, mr.max_pages));
        }
        let pages = if f.two_level {
            self.fast_reg_two_level(env, &f)?
        } else {
            self.fast_reg_one_level(env, &f)?
        };
        let mr = self.mrs.slot_mut(stag).ok_or(FastRegError::NoMr)?;
        mr.key = stag as u8;
        mr.access = f.access;
        mr.iova = iova;
        mr.length = f.length;
        mr.page_shift = u32::from(f.page_shift);
        mr.pages = pages;
        mr.valid = true;
        Ok(())
    }

    /// The pages of a one-level FAST_REG list: `npages` (at most 512) contiguous addresses.
    fn fast_reg_one_level(
        &mut self,
        env: &Env<'_>,
        f: &FastRegFields,
    ) -> Result<Vec<u64>, FastRegError> {
        if f.npages > PBL_ENTRIES_PER_PAGE {
            return Err(FastRegError::OneLevelTooLong(f.npages));
        }
        if f.list % 8 != 0 {
            return Err(FastRegError::ListAlign(f.list));
        }
        // At most 512 entries: 4 KiB read.
        let mut raw = vec![0u8; f.npages as usize * 8];
        env.mem.read(f.list, &mut raw).map_err(|_| {
            self.stats.dma_faults += 1;
            FastRegError::ListDma(f.list)
        })?;
        let pages: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let ps = 1u64 << f.page_shift;
        if let Some(&bad) = pages.iter().find(|&&a| a % ps != 0) {
            return Err(FastRegError::PageAlign(bad));
        }
        Ok(pages)
    }

    /// The pages of a two-level FAST_REG list: a root page of list pages, read like a
    /// REG_MR page list of [`PBL_LEVEL_2`].
    fn fast_reg_two_level(
        &mut self,
        env: &Env<'_>,
        f: &FastRegFields,
    ) -> Result<Vec<u64>, FastRegError> {
        let pl = PageList {
            addr: f.list,
            npages: f.npages,
            level: PBL_LEVEL_2,
            rsvd0: 0,
            rsvd1: 0,
        };
        pagelist::resolve(env.mem, &pl, u32::from(f.page_shift)).map_err(|e| match e {
            PageListError::Dma(_) => {
                self.stats.dma_faults += 1;
                FastRegError::ListDma(f.list)
            }
            PageListError::Misaligned { addr } => {
                FastRegError::TwoLevel("a list page or page address is misaligned", addr)
            }
            PageListError::Count(n) => FastRegError::Pages(n),
            PageListError::Level(_) | PageListError::Wrap { .. } => {
                FastRegError::TwoLevel("unexpected list shape", f.list)
            }
        })
    }

    fn ud_send(&mut self, env: &Env<'_>, qp_id: u32, w: &SqWqe, src: &Src) -> Outcome {
        let Some(qp) = self.qp(qp_id) else {
            return Outcome::Fail(flush::FATAL, ae::QP_FATAL);
        };
        let ah_id = (u64::from(w.hdr_low) & wqef::AH_ID_MASK) as usize;
        let Some(ah) = self
            .ahs
            .get(ah_id)
            .and_then(Option::as_ref)
            .filter(|a| a.pd == qp.pd)
        else {
            return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS);
        };
        let mtu = u64::from(mtu_bytes(self.port.mtu).unwrap_or(4096));
        if w.len > mtu {
            return Outcome::Fail(flush::LOC_LEN, ae::QP_FATAL);
        }
        let qkey = qp.send_qkey(w.qw2 as u32);
        let dqpn = ((w.qw2 >> 32) & 0xff_ffff) as u32;
        let a = ah.attrs;
        let sgid = self
            .gids
            .get(a.sgid_index as usize)
            .and_then(Option::as_ref)
            .map(|g| g.gid)
            .unwrap_or([0; 16]);
        // DCQCN paces a UD QP's packets to the wire: a SEND that is not due waits in the SQ
        // (before any copy is made) until the limiter lets it go (`cc_tick`).
        let paced = !self.qp(qp_id).is_none_or(|q| q.cc.may_send(env.now_us));
        if dqpn == MCAST_QPN && gid_is_multicast(&a.dgid) {
            // Multicast: every attached QP of this NIC gets a copy (the sender's own QP
            // too, as on hardware without multicast loopback blocking), and the wire one.
            if !self.port.link_up {
                return Outcome::Done(w.len);
            }
            if paced {
                return Outcome::Busy;
            }
            for member in self.mcast.members(&a.dgid).to_vec() {
                if let Err(o) = self.ud_local(env, qp_id, member, qkey, &a, &sgid, w, src) {
                    return o;
                }
            }
            return self.ud_to_wire(env, qp_id, &a, dqpn, qkey, w, src);
        }
        let local = self.port.link_up && self.gids.iter().flatten().any(|g| g.gid == a.dgid);
        if self.port.link_up && !local {
            if paced {
                return Outcome::Busy;
            }
            return self.ud_to_wire(env, qp_id, &a, dqpn, qkey, w, src);
        }
        if !local {
            return Outcome::Done(w.len);
        }
        match self.ud_local(env, qp_id, dqpn, qkey, &a, &sgid, w, src) {
            Ok(()) => Outcome::Done(w.len),
            Err(o) => o,
        }
    }

    /// Delivers UD send `w` of QP `qp_id` to QP `dqpn` of this NIC; `Err` carries the
    /// sender's failure (its own memory could not be read). A receiver that cannot take it
    /// (no such QP, wrong Q_Key, no receive posted) loses it, counted in `rx_drops`.
    #[allow(clippy::too_many_arguments)]
    fn ud_local(
        &mut self,
        env: &Env<'_>,
        qp_id: u32,
        dqpn: u32,
        qkey: u32,
        a: &QpAttrs,
        sgid: &[u8; 16],
        w: &SqWqe,
        src: &Src,
    ) -> Result<(), Outcome> {
        let target = self.qp(dqpn).filter(|d| {
            matches!(d.qp_type, QP_TYPE_UD | QP_TYPE_GSI) && d.can_receive() && d.attrs.qkey == qkey
        });
        if target.is_none() {
            self.stats.rx_drops += 1;
            return Ok(());
        }
        let ipv4 = a.av_flags & AV_FLAG_IPV4 != 0;
        let msg = Inbound {
            src_qpn: qp_id,
            op: cqe::OP_RECV,
            imm: w.imm,
            solicited: w.opcode == sq_op::SEND_SOL,
            inv_stag: None,
            grh: Some(grh::grh(
                ipv4,
                sgid,
                &a.dgid,
                a.traffic_class,
                a.hop_limit,
                a.flow_label,
                w.len as u32,
            )),
            ipv4,
            no_scatter: false,
            len: w.len,
            vlan_tci: av_vlan(a).and_then(|v| v.tci().ok()),
            smac: Some(self.port.mac),
        };
        match self.receive(env, dqpn, &msg, src) {
            Recv::SrcFault => Err(Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS)),
            Recv::Rnr | Recv::Dropped => {
                self.stats.rx_drops += 1;
                Ok(())
            }
            Recv::Ok | Recv::Nak(_) => Ok(()),
        }
    }

    fn rdma_write(
        &mut self,
        env: &Env<'_>,
        qp_id: u32,
        dest: u32,
        w: &SqWqe,
        src: &Src,
    ) -> Outcome {
        let Some(d) = self.qp(dest) else {
            return Outcome::Fail(flush::RETRY_EXC, ae::QP_RETRY_EXCEEDED);
        };
        let (dpd, access) = (d.pd, d.attrs.access);
        let segs = if access & QP_ACCESS_REMOTE_WRITE == 0 {
            Err(AccessFault::Rights)
        } else {
            self.mrs
                .translate(w.hdr_low, dpd, w.qw2, w.len, Need::RemoteWrite)
        };
        let segs = match segs {
            Ok(s) => s,
            Err(f) => {
                log::debug!("QP {dest}: inbound RDMA WRITE refused: {f}");
                self.remote_access_violation(env, dest);
                return Outcome::Fail(flush::REM_ACCESS, ae::QP_REMOTE_ERROR);
            }
        };
        if w.imm.is_some() && self.rq_head_valid(env, dest) != Some(true) {
            return Outcome::Rnr;
        }
        match copy(env, src, &segs) {
            Ok(()) => {}
            Err(CopyFault::Src) => return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
            Err(CopyFault::Dst) => {
                self.remote_access_violation(env, dest);
                return Outcome::Fail(flush::REM_ACCESS, ae::QP_REMOTE_ERROR);
            }
        }
        if let Some(off) = self.sabotage.target(w.len) {
            // The host's test-only corruption knob: flip one placed byte.
            let placed = SegList::new(segs.into_vec());
            let mut b = [0u8];
            if placed.read_at(env.mem, off, &mut b).is_ok() {
                b[0] ^= super::sabotage::FLIP;
                let _ = placed.write_at(env.mem, off, &b);
            }
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += w.len;
        let Some(imm) = w.imm else {
            return Outcome::Done(w.len);
        };
        let msg = Inbound {
            src_qpn: qp_id,
            op: cqe::OP_RECV_RDMA_IMM,
            imm: Some(imm),
            solicited: w.opcode == sq_op::RDMA_WRITE_SOL,
            inv_stag: None,
            grh: None,
            ipv4: false,
            no_scatter: true,
            len: w.len,
            vlan_tci: None,
            smac: None,
        };
        match self.receive(env, dest, &msg, &Src::Bytes(Vec::new())) {
            Recv::Ok | Recv::Dropped => Outcome::Done(w.len),
            Recv::Rnr => Outcome::Rnr,
            Recv::SrcFault => Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
            Recv::Nak(code) => Outcome::Fail(code, ae::QP_REMOTE_ERROR),
        }
    }

    fn rdma_read(&mut self, env: &Env<'_>, qp_id: u32, pd: u32, w: &SqWqe) -> Outcome {
        let dma = self.qp(qp_id).filter(|q| q.privileged).map(|_| env.mem);
        let local = match self.scatter(dma, pd, &w.sges, w.len) {
            Ok(s) => s,
            Err(_) => return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
        };
        let Some(dest) = self.rc_dest(qp_id) else {
            return Outcome::Fail(flush::RETRY_EXC, ae::QP_RETRY_EXCEEDED);
        };
        self.stats.tx_packets += 1;
        let Some(d) = self.qp(dest) else {
            return Outcome::Fail(flush::RETRY_EXC, ae::QP_RETRY_EXCEEDED);
        };
        let remote = if d.attrs.access & QP_ACCESS_REMOTE_READ == 0 {
            Err(AccessFault::Rights)
        } else {
            self.mrs
                .translate(w.hdr_low, d.pd, w.qw2, w.len, Need::RemoteRead)
        };
        let remote = match remote {
            Ok(s) => s,
            Err(f) => {
                log::debug!("QP {dest}: inbound RDMA READ refused: {f}");
                self.remote_access_violation(env, dest);
                return Outcome::Fail(flush::REM_ACCESS, ae::QP_REMOTE_ERROR);
            }
        };
        match copy(env, &Src::Segs(remote.into_vec()), &local) {
            Ok(()) => {
                self.stats.rx_bytes += w.len;
                self.stats.rx_packets += 1;
                Outcome::Done(w.len)
            }
            Err(CopyFault::Src) => {
                self.remote_access_violation(env, dest);
                Outcome::Fail(flush::REM_ACCESS, ae::QP_REMOTE_ERROR)
            }
            Err(CopyFault::Dst) => Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS),
        }
    }

    /// The responder QP saw an inbound access violation: async event and ERR.
    pub(super) fn remote_access_violation(&mut self, env: &Env<'_>, dest: u32) {
        if let Some(d) = self.qp_mut(dest) {
            d.last_error = flush::REM_ACCESS;
        }
        self.async_event(
            env,
            eqe_kind::QP,
            dest,
            ae::QP_REMOTE_ACCESS,
            u32::from(flush::REM_ACCESS),
        );
        self.enter_err(env, dest, true, true);
    }

    /// Delivers `msg` with payload `src` to the RQ of `dest`.
    pub(super) fn receive(&mut self, env: &Env<'_>, dest: u32, msg: &Inbound, src: &Src) -> Recv {
        let ud = msg.grh.is_some();
        let Some(d) = self.qp(dest) else {
            return Recv::Dropped;
        };
        let (pd, shift, tail) = (d.pd, d.rq_shift, d.rq_tail);
        let dma = d.privileged.then_some(env.mem);
        let wqe_bytes = QUANTUM << shift;
        let mut b = vec![0u8; wqe_bytes];
        if env.mem.read(d.rq.addr(tail), &mut b).is_err() {
            self.stats.dma_faults += 1;
            if ud {
                return Recv::Dropped;
            }
            self.responder_fail(env, dest, flush::FATAL, ae::QP_FATAL);
            return Recv::Nak(flush::REM_OP);
        }
        if !wqe::is_valid(wqe::header(&b), d.rq_pol) {
            return Recv::Rnr;
        }
        let sges = match wqe::parse_rq(&b) {
            Ok(s) => s,
            Err(_) => {
                self.responder_fail(env, dest, flush::LOC_QP_OP, ae::QP_FATAL);
                return if ud {
                    Recv::Dropped
                } else {
                    Recv::Nak(flush::REM_OP)
                };
            }
        };
        let grh_len = if ud { u64::from(UD_GRH_SIZE) } else { 0 };
        let need = if msg.no_scatter { 0 } else { grh_len + msg.len };
        let cap: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if need > cap {
            if ud {
                return Recv::Dropped;
            }
            self.responder_fail(env, dest, flush::LOC_LEN, ae::QP_INVALID_REQUEST);
            return Recv::Nak(flush::REM_INV_REQ);
        }
        if let Some(stag) = msg.inv_stag {
            if !self.can_invalidate(stag, pd) {
                self.responder_fail(env, dest, flush::LOC_QP_OP, ae::QP_INVALID_REQUEST);
                return Recv::Nak(flush::REM_INV_REQ);
            }
        }
        let segs = match self.scatter(dma, pd, &sges, need) {
            Ok(s) => s,
            Err(f) => {
                log::debug!("QP {dest}: receive scatter refused: {f}");
                self.responder_fail(env, dest, flush::PROT, ae::QP_LOCAL_ACCESS);
                return if ud {
                    Recv::Dropped
                } else {
                    Recv::Nak(flush::REM_OP)
                };
            }
        };
        let mut copied = Ok(());
        if let Some(g) = msg.grh {
            copied = copy(env, &Src::Bytes(g.to_vec()), &prefix(segs.clone(), grh_len));
            let rest = skip(&segs, grh_len);
            if copied.is_ok() {
                copied = copy(env, src, &rest);
            }
        } else if !msg.no_scatter {
            copied = copy(env, src, &segs);
        }
        match copied {
            Ok(()) => {}
            Err(CopyFault::Src) => return Recv::SrcFault,
            Err(CopyFault::Dst) => {
                self.stats.dma_faults += 1;
                self.responder_fail(env, dest, flush::PROT, ae::QP_LOCAL_ACCESS);
                return if ud {
                    Recv::Dropped
                } else {
                    Recv::Nak(flush::REM_OP)
                };
            }
        }
        let bytes = if msg.no_scatter { msg.len } else { need };
        self.complete_recv(env, dest, msg, bytes)
    }

    /// Whether `stag` may be invalidated by an inbound SEND with invalidate to PD `pd`.
    pub(super) fn can_invalidate(&self, stag: u32, pd: u32) -> bool {
        self.mrs
            .slot(stag)
            .is_some_and(|m| m.key == stag as u8 && m.pd == pd && m.valid)
    }

    /// The end of a receive whose data is in place: invalidate, the receive CQE for the RQ
    /// WQE at the tail (consumed), and COMM_EST for the first message in RTR.
    pub(super) fn complete_recv(
        &mut self,
        env: &Env<'_>,
        dest: u32,
        msg: &Inbound,
        bytes: u64,
    ) -> Recv {
        let ud = msg.grh.is_some();
        let Some(pd) = self.qp(dest).map(|d| d.pd) else {
            return Recv::Dropped;
        };
        if let Some(stag) = msg.inv_stag {
            let _ = self.mrs.invalidate(stag, pd);
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += msg.len;
        let Some(d) = self.qp_mut(dest) else {
            return Recv::Ok;
        };
        let idx = (d.rq_tail << d.rq_shift) & 0x7fff;
        let mut qw2 = u64::from(dest) << cqe::QPID_LO;
        let mut qw3 = (u64::from(msg.op) << cqe::OP_LO) | (u64::from(idx) << cqe::WQEIDX_LO);
        if ud {
            qw2 |= u64::from(msg.src_qpn);
            if msg.ipv4 {
                qw3 |= 1 << cqe::STAG_INV;
            }
        } else if let Some(stag) = msg.inv_stag {
            qw2 |= u64::from(stag);
            qw3 |= 1 << cqe::STAG_INV;
        }
        if msg.solicited {
            qw3 |= 1 << cqe::SOEVENT;
        }
        let c = CqeData {
            qw: [bytes & 0xffff_ffff, d.compl_ctx, qw2, qw3],
            ext: recv_ext(msg),
        };
        d.advance_rq();
        let first = d.state() == qp_state::RTR && !d.comm_est_sent;
        if first {
            d.comm_est_sent = true;
        }
        let cq = d.recv_cq;
        self.post_cqe(env, cq, &c);
        if first {
            self.async_event(env, eqe_kind::QP, dest, ae::QP_COMM_EST, 0);
        }
        Recv::Ok
    }
}

/// The extension slot of a receive CQE: needed for immediate data and for a datagram that
/// came over a VLAN (its TCI, and the source MAC with it, as GEN_2 reports them; Linux's CM
/// picks the VLAN GID to answer from by that VLAN).
fn recv_ext(msg: &Inbound) -> Option<[u64; 4]> {
    if msg.imm.is_none() && msg.vlan_tci.is_none() {
        return None;
    }
    let mut e = [0u64; 4];
    if let Some(imm) = msg.imm {
        e[0] = u64::from(imm);
        e[3] |= 1 << cqe::IMMVALID;
    }
    if let Some(tci) = msg.vlan_tci {
        e[2] |= u64::from(tci) << 48;
        e[3] |= 1 << cqe::UDVLANVALID;
        if let Some(mac) = msg.smac {
            e[2] |= mac.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            e[3] |= 1 << cqe::UDSMACVALID;
        }
    }
    Some(e)
}

/// Segments after the first `n` bytes of `segs`.
fn skip(segs: &[Seg], n: u64) -> Vec<Seg> {
    let mut left = n;
    let mut out = Vec::new();
    for &(a, l) in segs {
        if left >= l {
            left -= l;
            continue;
        }
        out.push((a + left, l - left));
        left = 0;
    }
    out
}
