//! The RC requester on the wire: segmentation at the path MTU, the Go-Back-N window, ACK /
//! NAK / READ response processing, retransmission on timeout and RNR back-off, and UD sends
//! to remote destinations.
//!
//! A WQE is queued as a [`Pending`] entry when the SQ is processed; packets are produced by
//! [`Engine::pump_qp`] while the window ([`MAX_INFLIGHT_PKTS`]) and the outbox have room, so
//! one doorbell never produces more than a bounded burst, and the rest follows as ACKs
//! arrive or at the next timer tick. WQEs complete, in SQ order, only when acknowledged.

use crate::dma::GuestMemory;
use crate::interface::{ae, flush, mtu_bytes, qp_state, sq_op, QpAttrs, MAX_RD_ATOMIC, QP_TYPE_RC};
use crate::wire::aeth::{Aeth, NakCode, Syndrome};
use crate::wire::bth::Bth;
use crate::wire::ext::{Deth, Reth};
use crate::wire::opcode as op;
use crate::wire::{ExtHeaders, Headers};

use super::exec::{sq_cqe, Outcome, Src};
use super::mr::{MrTable, Need};
use super::path::{FillError, PathError};
use super::seglist::{MrRange, Piece, SegFault, SegList};
use super::transport::{
    ack_timeout_us, psn_add, psn_diff, rnr_timer_us, Payload, PendKind, Pending, ACK_REQ_EVERY,
    MAX_INFLIGHT_PKTS, MAX_PENDING_WQES, PKEY, PSN_MASK, READ_CHUNK_PKTS,
};
use super::wqe::SqWqe;
use super::{Engine, Env};

/// A BTH with the fields the transport varies.
pub(super) fn bth(opcode: u8, dest_qp: u32, psn: u32) -> Bth {
    Bth {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: PKEY,
        fecn: false,
        becn: false,
        dest_qp: dest_qp & PSN_MASK,
        ack_req: false,
        psn: psn & PSN_MASK,
    }
}

/// Where a request packet's payload comes from: `len` bytes at message offset `off` of its
/// pending entry ([`fill_payload`] copies them into the frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PayloadPart {
    off: u64,
    len: usize,
}

/// Copies the part `at` of `p`'s payload into `buf` (the frame's payload bytes).
fn fill_payload(
    mem: &dyn GuestMemory,
    mrs: &MrTable,
    p: &Pending,
    at: PayloadPart,
    buf: &mut [u8],
) -> Result<(), SegFault> {
    match &p.payload {
        Payload::Inline(b) => {
            let start = usize::try_from(at.off).map_err(|_| SegFault)?;
            let src = b.get(start..start + at.len).ok_or(SegFault)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        Payload::Guest(s) => s.read_at(mrs, mem, at.off, buf),
        Payload::None if buf.is_empty() => Ok(()),
        Payload::None => Err(SegFault),
    }
}

/// The next packet of a pending entry (its `sent`-th): its headers, where its payload comes
/// from, and how many PSNs it covers.
fn request_packet(p: &Pending, mtu: u32, dqpn: u32) -> (Bth, ExtHeaders, PayloadPart, u32) {
    let mtu64 = u64::from(mtu);
    let mut ext = ExtHeaders::default();
    if let PendKind::Read { va, rkey, .. } = &p.kind {
        // The rest of the current chunk of responses. Chunks are aligned to the READ's
        // start, so a request resumed from the middle never reaches past what the first
        // pass asked for (the responder would take that part for a new request).
        let chunk_end = (p.sent / READ_CHUNK_PKTS + 1).saturating_mul(READ_CHUNK_PKTS);
        let count = chunk_end.min(p.npkts).saturating_sub(p.sent).max(1);
        let off = u64::from(p.sent) * mtu64;
        let len = p.len.saturating_sub(off).min(u64::from(count) * mtu64);
        let b = bth(op::RC_READ_REQUEST, dqpn, psn_add(p.first_psn, p.sent));
        ext.reth = Some(Reth {
            va: va.wrapping_add(off),
            rkey: *rkey,
            dma_len: len as u32,
        });
        return (b, ext, PayloadPart { off: 0, len: 0 }, count);
    }
    let k = p.sent;
    let off = u64::from(k) * mtu64;
    let n = match &p.payload {
        Payload::None => 0,
        _ => p.len.saturating_sub(off).min(mtu64) as usize,
    };
    let payload = PayloadPart { off, len: n };
    let first = k == 0;
    let last = k + 1 >= p.npkts;
    let mut b = bth(0, dqpn, psn_add(p.first_psn, k));
    b.ack_req = last || (k + 1) % ACK_REQ_EVERY == 0;
    match &p.kind {
        PendKind::Send {
            imm,
            inv,
            solicited,
        } => {
            let (imm, inv) = match (imm, inv) {
                (Some(i), _) => (Some(*i), None),
                (None, i) => (None, *i),
            };
            b.opcode = match (first, last) {
                (true, true) if imm.is_some() => op::RC_SEND_ONLY_IMM,
                (true, true) if inv.is_some() => op::RC_SEND_ONLY_INV,
                (true, true) => op::RC_SEND_ONLY,
                (true, false) => op::RC_SEND_FIRST,
                (false, false) => op::RC_SEND_MIDDLE,
                (false, true) if imm.is_some() => op::RC_SEND_LAST_IMM,
                (false, true) if inv.is_some() => op::RC_SEND_LAST_INV,
                (false, true) => op::RC_SEND_LAST,
            };
            if last {
                ext.immdt = imm;
                ext.ieth = inv;
                b.solicited = *solicited;
            }
        }
        PendKind::Write {
            va,
            rkey,
            imm,
            solicited,
        } => {
            b.opcode = match (first, last, imm.is_some()) {
                (true, true, true) => op::RC_WRITE_ONLY_IMM,
                (true, true, false) => op::RC_WRITE_ONLY,
                (true, false, _) => op::RC_WRITE_FIRST,
                (false, false, _) => op::RC_WRITE_MIDDLE,
                (false, true, true) => op::RC_WRITE_LAST_IMM,
                (false, true, false) => op::RC_WRITE_LAST,
            };
            if first {
                ext.reth = Some(Reth {
                    va: *va,
                    rkey: *rkey,
                    dma_len: p.len as u32,
                });
            }
            if last {
                ext.immdt = *imm;
                b.solicited = *solicited && imm.is_some();
            }
        }
        PendKind::Read { .. } => {}
    }
    (b, ext, payload, 1)
}

impl Engine {
    /// Path MTU of a QP in bytes (the port's if the QP has none).
    pub(super) fn qp_mtu(&self, qp_id: u32) -> u32 {
        self.qp(qp_id)
            .and_then(|q| mtu_bytes(q.attrs.path_mtu))
            .or_else(|| mtu_bytes(self.port.mtu))
            .unwrap_or(1024)
    }

    /// Takes an RC WQE for a peer on the wire. `Queued`: the SQ moves on and the WQE
    /// completes when acknowledged; `Busy`: no room now, the WQE stays at the SQ tail.
    pub(super) fn queue_remote(
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
        let (pd, privileged) = (qp.pd, qp.privileged);
        let is_read = w.opcode == sq_op::RDMA_READ;
        let reads = qp.req.pending.iter().filter(|p| p.is_read()).count();
        let max_reads = usize::from(qp.attrs.max_rd_atomic.clamp(1, MAX_RD_ATOMIC));
        if qp.req.pending.len() >= MAX_PENDING_WQES
            || qp.req.inflight_pkts() >= MAX_INFLIGHT_PKTS
            || (is_read && reads >= max_reads)
        {
            return Outcome::Busy;
        }
        let mtu = u64::from(self.qp_mtu(qp_id));
        // MAX_MSG_SIZE / 256 is far below 2^24, so this fits a PSN span.
        let npkts = w.len.div_ceil(mtu).max(1) as u32;
        // Buffers are checked now (the error belongs to this WQE) and translated packet by
        // packet later.
        let pieces = w.sges.iter().map(|s| Piece {
            stag: s.stag,
            va: s.addr,
            len: u64::from(s.len),
        });
        let (kind, payload) = if is_read {
            let dst = MrRange::new(pd, Need::LocalWrite, pieces, w.len).privileged(privileged);
            if dst.check(&self.mrs, env.mem).is_err() {
                return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS);
            }
            let kind = PendKind::Read {
                va: w.qw2,
                rkey: w.hdr_low,
                dst,
            };
            (kind, Payload::None)
        } else {
            let payload = match &w.inline {
                Some(d) => Payload::Inline(d.clone()),
                None => {
                    let src =
                        MrRange::new(pd, Need::LocalRead, pieces, w.len).privileged(privileged);
                    if src.check(&self.mrs, env.mem).is_err() {
                        return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS);
                    }
                    Payload::Guest(src)
                }
            };
            let kind = match w.opcode {
                sq_op::RDMA_WRITE | sq_op::RDMA_WRITE_SOL => PendKind::Write {
                    va: w.qw2,
                    rkey: w.hdr_low,
                    imm: w.imm,
                    solicited: w.opcode == sq_op::RDMA_WRITE_SOL,
                },
                sq_op::SEND_INV | sq_op::SEND_SOL_INV => PendKind::Send {
                    imm: None,
                    inv: Some(w.hdr_low),
                    solicited: w.opcode == sq_op::SEND_SOL_INV,
                },
                _ => PendKind::Send {
                    imm: w.imm,
                    inv: None,
                    solicited: w.opcode == sq_op::SEND_SOL,
                },
            };
            (kind, payload)
        };
        let Some(qp) = self.qp_mut(qp_id) else {
            return Outcome::Fail(flush::FATAL, ae::QP_FATAL);
        };
        let first_psn = qp.attrs.sq_psn;
        qp.attrs.sq_psn = psn_add(first_psn, npkts);
        qp.req.pending.push_back(Pending {
            tail,
            quanta,
            opcode: w.opcode,
            signaled: w.signaled,
            len: w.len,
            kind,
            payload,
            first_psn,
            npkts,
            sent: 0,
            high: 0,
            acked: 0,
        });
        self.pump_qp(env, qp_id);
        Outcome::Queued
    }

    /// Emits packets of QP `qp_id` while its window and the outbox have room.
    pub(super) fn pump_qp(&mut self, env: &Env<'_>, qp_id: u32) {
        let mtu = self.qp_mtu(qp_id);
        loop {
            let Some(qp) = self.qp(qp_id) else { return };
            if !matches!(qp.state(), qp_state::RTS | qp_state::SQD)
                || qp.req.rnr_until.is_some()
                || !self.tx_room(1)
                || qp.req.inflight_pkts() >= MAX_INFLIGHT_PKTS
                || !qp.cc.may_send(env.now_us)
            {
                return;
            }
            let Some(i) = qp.req.pending.iter().position(|p| !p.all_sent()) else {
                return;
            };
            let Some(p) = qp.req.pending.get(i) else {
                return;
            };
            // No more READ requests in flight than the responder accepts. Counted only for a
            // READ: summing the whole queue (up to 128 WQEs) for every packet of a WRITE
            // stream made pump_qp 3.8% of the NIC-level bench's samples (2.5% without).
            if p.is_read() {
                let max_reads = u32::from(qp.attrs.max_rd_atomic.clamp(1, MAX_RD_ATOMIC));
                let reads: u32 = qp.req.pending.iter().map(Pending::read_requests).sum();
                if reads >= max_reads {
                    return;
                }
            }
            let attrs = qp.attrs;
            // A QP DCQCN paces asks for an ACK with every packet: at a low rate the next
            // ACK request could be further away than the retransmission timer.
            let paced = qp.cc.limiter.is_some();
            let (mut b, ext, part, covers) = request_packet(p, mtu, attrs.dest_qpn);
            b.ack_req |= paced;
            // The payload goes from guest memory straight into the frame.
            let sent = self.transmit_with(&attrs, b, ext, part.len, |eng, buf| {
                // Building the headers changed no QP: the WQE is still at `i`.
                let p = eng.qp(qp_id).and_then(|q| q.req.pending.get(i));
                let p = p.ok_or(FillError::Gone)?;
                fill_payload(env.mem, &eng.mrs, p, part, buf).map_err(|SegFault| FillError::Fault)
            });
            let len = match sent {
                Ok(Ok(len)) => len,
                Ok(Err(FillError::Gone)) | Err(PathError::Full) => return,
                Ok(Err(FillError::Fault)) => {
                    self.stats.dma_faults += 1;
                    self.fail_pending(env, qp_id, i, flush::PROT, ae::QP_LOCAL_ACCESS);
                    return;
                }
                Err(e) => {
                    log::debug!("QP {qp_id}: cannot send: {e}");
                    self.fail_pending(env, qp_id, i, flush::RETRY_EXC, ae::QP_RETRY_EXCEEDED);
                    return;
                }
            };
            self.cc_sent(env, qp_id, len);
            let Some(qp) = self.qp_mut(qp_id) else { return };
            let mut resent = false;
            if let Some(p) = qp.req.pending.get_mut(i) {
                resent = p.sent < p.high;
                p.sent += covers;
                p.high = p.high.max(p.sent);
            }
            if resent {
                self.count_retransmit();
            }
            // The timer runs from the last request packet sent (as rxe's does), not from the
            // first one unacknowledged: when the NIC process itself is not scheduled halfway
            // through a window (a loaded host; 93 ms in a make check run), the rest of the
            // window leaves after the pause and the first packets' timer must not expire
            // before the answer to them could come back (fabric-link-ferrdma saw 128 packets
            // sent again on a clean link).
            let Some(qp) = self.qp_mut(qp_id) else { return };
            qp.req.deadline = ack_timeout_us(qp.attrs.timeout).map(|t| env.now_us + t);
        }
    }

    /// Completes pending entry `i` in error (earlier ones are dropped unreported) and moves
    /// the QP to ERR.
    fn fail_pending(&mut self, env: &Env<'_>, qp_id: u32, i: usize, code: u16, event: u16) {
        let Some(qp) = self.qp_mut(qp_id) else { return };
        let mut victim = None;
        for _ in 0..=i {
            victim = qp.req.pending.pop_front();
        }
        let Some(p) = victim else { return };
        log::debug!(
            "QP {qp_id}: WQE at {} failed with flush code {code}, event {event:#x}",
            p.tail
        );
        let c = sq_cqe(qp_id, qp, p.tail, p.opcode, 0, Some(code));
        qp.sq_unreported = false;
        qp.last_error = code;
        let cq = qp.send_cq;
        self.stats.wqe_errors += 1;
        self.post_cqe(env, cq, &c);
        self.async_event(
            env,
            crate::interface::eqe_kind::QP,
            qp_id,
            event,
            u32::from(code),
        );
        self.enter_err(env, qp_id, false, true);
    }

    /// Completes the entries acknowledged up to and including `psn`; returns whether
    /// anything was acknowledged that was not before.
    fn ack_upto(&mut self, env: &Env<'_>, qp_id: u32, psn: u32) -> bool {
        // An ACK that reached past a READ still missing responses was kept: apply it now.
        let psn = match self.qp(qp_id).and_then(|q| q.req.acked_beyond) {
            Some(m) if psn_diff(m, psn) > 0 => m,
            _ => psn,
        };
        let mut progress = false;
        while let Some(qp) = self.qp_mut(qp_id) {
            let Some(head) = qp.req.pending.front_mut() else {
                break;
            };
            let covered = psn_diff(psn, head.first_psn);
            if covered < 0 {
                break;
            }
            if head.is_read() {
                // Only READ responses acknowledge a READ.
                if head.acked < head.npkts {
                    break;
                }
            } else if psn_diff(psn, head.last_psn()) < 0 {
                // Part of a long message: room in the window, no completion yet.
                let now = covered as u32 + 1;
                if now > head.acked {
                    head.acked = now;
                    progress = true;
                }
                break;
            }
            let Some(p) = qp.req.pending.pop_front() else {
                break;
            };
            progress = true;
            if p.signaled {
                let c = sq_cqe(qp_id, qp, p.tail, p.opcode, p.len, None);
                qp.sq_unreported = false;
                let cq = qp.send_cq;
                self.post_cqe(env, cq, &c);
            } else {
                qp.sq_unreported = true;
            }
        }
        if let Some(qp) = self.qp_mut(qp_id) {
            qp.req.acked_beyond = qp
                .req
                .pending
                .front()
                .filter(|head| head.is_read() && psn_diff(psn, head.last_psn()) > 0)
                .map(|_| psn);
        }
        if progress {
            self.progress(env, qp_id);
        }
        progress
    }

    /// Something was acknowledged: retry counters restart, the timer restarts.
    fn progress(&mut self, env: &Env<'_>, qp_id: u32) {
        let Some(qp) = self.qp_mut(qp_id) else { return };
        let r = &mut qp.req;
        r.retries = 0;
        r.rnr_naks = 0;
        r.resent_at = None;
        r.deadline = if r.inflight_pkts() > 0 {
            ack_timeout_us(qp.attrs.timeout).map(|t| env.now_us + t)
        } else {
            None
        };
    }

    /// Go-Back-N: the next pass emits from `psn` on.
    fn rewind(&mut self, qp_id: u32, psn: u32) {
        let Some(qp) = self.qp_mut(qp_id) else { return };
        for p in qp.req.pending.iter_mut() {
            let d = psn_diff(psn, p.first_psn);
            if d <= 0 {
                p.sent = 0;
            } else if (d as u32) < p.npkts {
                p.sent = d as u32;
            }
        }
        qp.req.deadline = None;
    }

    /// The oldest PSN not acknowledged.
    fn oldest_unacked(&self, qp_id: u32) -> Option<u32> {
        let p = self.qp(qp_id)?.req.pending.front()?;
        Some(psn_add(p.first_psn, p.acked))
    }

    /// An ACK, NAK or READ response for requester QP `qp_id`.
    pub(super) fn rx_response(&mut self, env: &Env<'_>, h: &Headers, payload: &[u8]) {
        let qp_id = h.bth.dest_qp;
        let Some(qp) = self.qp(qp_id) else {
            self.stats.rx_drops += 1;
            return;
        };
        if qp.qp_type != QP_TYPE_RC || !matches!(qp.state(), qp_state::RTS | qp_state::SQD) {
            self.stats.rx_drops += 1;
            return;
        }
        // Nothing may acknowledge a PSN that was never assigned.
        let newest = psn_add(qp.attrs.sq_psn, PSN_MASK);
        let psn = h.bth.psn;
        let Some(oldest) = self.oldest_unacked(qp_id) else {
            return;
        };
        if psn_diff(psn, newest) > 0 || psn_diff(psn, psn_add(oldest, PSN_MASK)) < 0 {
            return;
        }
        if h.bth.opcode != op::RC_ACK {
            self.rx_read_response(env, qp_id, h, payload);
        } else if let Some(Aeth { syndrome, .. }) = h.ext.aeth {
            self.rx_ack(env, qp_id, psn, syndrome);
        }
        self.process_sq(env, qp_id);
        self.pump_qp(env, qp_id);
    }

    fn rx_ack(&mut self, env: &Env<'_>, qp_id: u32, psn: u32, syndrome: Syndrome) {
        let before = psn_add(psn, PSN_MASK);
        match syndrome {
            Syndrome::Ack { .. } => {
                self.ack_upto(env, qp_id, psn);
            }
            Syndrome::RnrNak { timer } => {
                self.count_rnr_nak_rcvd();
                self.ack_upto(env, qp_id, before);
                if self.oldest_unacked(qp_id) != Some(psn) {
                    return;
                }
                let Some(qp) = self.qp_mut(qp_id) else { return };
                qp.req.rnr_naks += 1;
                let retry = qp.attrs.rnr_retry;
                if retry != 7 && qp.req.rnr_naks > u32::from(retry) {
                    self.fail_pending(
                        env,
                        qp_id,
                        0,
                        flush::RNR_RETRY_EXC,
                        ae::QP_RNR_RETRY_EXCEEDED,
                    );
                    return;
                }
                qp.req.rnr_until = Some(env.now_us + rnr_timer_us(timer));
                self.rewind(qp_id, psn);
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.count_seq_nak_rcvd();
                self.ack_upto(env, qp_id, before);
                let Some(qp) = self.qp_mut(qp_id) else { return };
                if qp.req.resent_at != Some(psn) {
                    qp.req.resent_at = Some(psn);
                    self.rewind(qp_id, psn);
                }
            }
            Syndrome::Nak(code) => {
                self.ack_upto(env, qp_id, before);
                // The NAK names the failed request; it may sit behind a READ still waiting
                // for responses (which then can never complete: the responder is in ERR).
                let Some(i) = self.qp(qp_id).and_then(|q| {
                    q.req.pending.iter().position(|p| {
                        psn_diff(psn, p.first_psn) >= 0 && psn_diff(psn, p.last_psn()) <= 0
                    })
                }) else {
                    return;
                };
                let flush_code = match code {
                    NakCode::RemoteAccessError => flush::REM_ACCESS,
                    NakCode::RemoteOperationalError => flush::REM_OP,
                    _ => flush::REM_INV_REQ,
                };
                self.fail_pending(env, qp_id, i, flush_code, ae::QP_REMOTE_ERROR);
            }
        }
    }

    fn rx_read_response(&mut self, env: &Env<'_>, qp_id: u32, h: &Headers, payload: &[u8]) {
        let mtu = self.qp_mtu(qp_id);
        let q = h.bth.psn;
        let Some(qp) = self.qp(qp_id) else { return };
        // Responses answer the oldest READ not yet complete.
        let Some(i) = qp
            .req
            .pending
            .iter()
            .position(|p| p.is_read() && p.acked < p.npkts)
        else {
            return;
        };
        let Some(p) = qp.req.pending.get(i) else {
            return;
        };
        let expected = psn_add(p.first_psn, p.acked);
        let d = psn_diff(q, expected);
        if d < 0 {
            return;
        }
        if d > 0 {
            // Responses were lost: ask again from the first missing one.
            if qp.req.resent_at != Some(expected) {
                if let Some(qp) = self.qp_mut(qp_id) {
                    qp.req.resent_at = Some(expected);
                }
                self.rewind(qp_id, expected);
            }
            return;
        }
        let k = p.acked;
        let n = p.npkts;
        let off = u64::from(k) * u64::from(mtu);
        let want = p.len.saturating_sub(off).min(u64::from(mtu)) as usize;
        // Each READ request message (a chunk, or a request resumed from the middle) is
        // answered by its own FIRST..LAST sequence, so only the end of the whole READ is
        // checked against the opcode; the length pins the position.
        let ends = matches!(
            h.bth.opcode,
            op::RC_READ_RESPONSE_LAST | op::RC_READ_RESPONSE_ONLY
        );
        if (k + 1 == n && !ends) || payload.len() != want {
            log::debug!(
                "QP {qp_id}: READ response {:#x} of {} bytes at packet {k} of {n} ({want} due)",
                h.bth.opcode,
                payload.len()
            );
            return;
        }
        // A READ response acknowledges every request before the READ.
        if i > 0 {
            self.ack_upto(env, qp_id, psn_add(expected, PSN_MASK));
        }
        let Some(qp) = self.qp(qp_id) else { return };
        let Some(PendKind::Read { dst, .. }) = qp.req.pending.front().map(|p| &p.kind) else {
            return;
        };
        if dst.write_at(&self.mrs, env.mem, off, payload).is_err() {
            self.stats.dma_faults += 1;
            self.fail_pending(env, qp_id, 0, flush::PROT, ae::QP_LOCAL_ACCESS);
            return;
        }
        self.stats.rx_bytes += payload.len() as u64;
        let Some(qp) = self.qp_mut(qp_id) else { return };
        let Some(p) = qp.req.pending.front_mut() else {
            return;
        };
        p.acked += 1;
        if p.acked == p.npkts {
            let last = p.last_psn();
            self.stats.rx_packets += 1;
            self.ack_upto(env, qp_id, last);
        } else {
            self.progress(env, qp_id);
        }
    }

    /// Timers and deferred transmissions of every QP (and READ responses owed).
    pub(super) fn transport_tick(&mut self, env: &Env<'_>) {
        let mut next = self.qps.next_id(0);
        while let Some(id) = next {
            next = self.qps.next_id(id + 1);
            let Some(qp) = self.qp(id) else { continue };
            if qp.req.pending.is_empty() && qp.resp.reads.is_empty() {
                continue;
            }
            let (rnr, deadline) = (qp.req.rnr_until, qp.req.deadline);
            if rnr.is_some_and(|t| env.now_us >= t) {
                if let Some(qp) = self.qp_mut(id) {
                    qp.req.rnr_until = None;
                }
            }
            if deadline.is_some_and(|t| env.now_us >= t) {
                self.retransmit_timeout(env, id);
            }
            self.pump_qp(env, id);
            self.pump_reads(env, id);
        }
    }

    /// The NIC stopped for `us` microseconds in the middle of one of its steps: its process
    /// was not scheduled (a loaded host), and the timers that step armed from the clock read
    /// at its start are already `us` old. The requesters' timers (retransmission, RNR wait)
    /// count the NIC's own running time, as a NIC's hardware timers would: each is pushed back
    /// by `us`, so that a pause of the emulator is not taken for a silent peer.
    pub fn stalled(&mut self, us: u64) {
        let mut next = self.qps.next_id(0);
        while let Some(id) = next {
            next = self.qps.next_id(id + 1);
            let Some(qp) = self.qp_mut(id) else { continue };
            let r = &mut qp.req;
            r.deadline = r.deadline.map(|t| t.saturating_add(us));
            r.rnr_until = r.rnr_until.map(|t| t.saturating_add(us));
        }
    }

    fn retransmit_timeout(&mut self, env: &Env<'_>, qp_id: u32) {
        self.count_ack_timeout();
        let Some(qp) = self.qp_mut(qp_id) else { return };
        qp.req.retries += 1;
        if qp.req.retries > u32::from(qp.attrs.retry_cnt) {
            self.fail_pending(env, qp_id, 0, flush::RETRY_EXC, ae::QP_RETRY_EXCEEDED);
            return;
        }
        qp.req.resent_at = None;
        let Some(from) = self.oldest_unacked(qp_id) else {
            return;
        };
        log::debug!("QP {qp_id}: ACK timeout, resending from PSN {from}");
        self.rewind(qp_id, from);
    }

    /// When `tick` next has work: the earliest timer (transport, interrupt moderation, CQ arm
    /// checks), or
    /// `now` if packets wait for room.
    pub fn next_deadline(&self, now: u64) -> Option<u64> {
        if self.sabotage.fatal_requested() {
            // The engine takes the request on its next tick.
            return Some(now);
        }
        if self.fatal {
            return None;
        }
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        // A full outbox (frames held by a PFC pause) frees no room before the pause ends:
        // QPs with packets to send are due then, not now.
        let room = self.tx_room(1);
        if let Some(t) = self.held_tx_release(now) {
            at(t);
        }
        for (_, qp) in self.qps.iter() {
            if let Some(t) = qp.req.rnr_until {
                at(t);
            } else if room
                && qp.req.pending.iter().any(|p| !p.all_sent())
                && qp.req.inflight_pkts() < MAX_INFLIGHT_PKTS
                && matches!(qp.state(), qp_state::RTS | qp_state::SQD)
                && qp.cc.may_send(now)
            {
                at(now);
            }
            // DCQCN: the limiter's timers, and when a paced packet may leave.
            if let Some(t) = qp.cc.deadline(now) {
                at(t);
            }
            if let Some(t) = qp.req.deadline {
                at(t);
            }
            if room && !qp.resp.reads.is_empty() && qp.cc.may_send(now) {
                at(now);
            }
            if let Some(t) = qp.rnr_retry_at {
                at(t);
            }
            if let Some((t, _)) = qp.err_scan {
                at(t);
            }
        }
        // Interrupts held back by moderation, and CQ arm checks.
        for t in self.eqs.iter().flatten().filter_map(|e| e.held_until()) {
            at(t);
        }
        for t in self.cqs.iter().filter_map(|(_, c)| c.check_deadline()) {
            at(t);
        }
        next
    }

    /// A UD send to a destination that is not local: one packet, unacknowledged.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ud_to_wire(
        &mut self,
        env: &Env<'_>,
        qp_id: u32,
        a: &QpAttrs,
        dqpn: u32,
        qkey: u32,
        w: &SqWqe,
        src: &Src,
    ) -> Outcome {
        let payload = match src {
            Src::Bytes(b) => b.clone(),
            Src::Segs(s) => {
                let segs = SegList::new(s.clone());
                let mut buf = vec![0u8; segs.len() as usize];
                if segs.read_at(env.mem, 0, &mut buf).is_err() {
                    return Outcome::Fail(flush::PROT, ae::QP_LOCAL_ACCESS);
                }
                buf
            }
        };
        let Some(qp) = self.qp_mut(qp_id) else {
            return Outcome::Fail(flush::FATAL, ae::QP_FATAL);
        };
        let psn = qp.attrs.sq_psn;
        qp.attrs.sq_psn = psn_add(psn, 1);
        let mut b = bth(
            if w.imm.is_some() {
                op::UD_SEND_ONLY_IMM
            } else {
                op::UD_SEND_ONLY
            },
            dqpn,
            psn,
        );
        b.solicited = w.opcode == sq_op::SEND_SOL;
        let ext = ExtHeaders {
            deth: Some(Deth {
                qkey,
                src_qp: qp_id,
            }),
            immdt: w.imm,
            ..Default::default()
        };
        match self.transmit(a, b, ext, &payload) {
            Ok(len) => self.cc_sent(env, qp_id, len),
            // UD is unreliable: a send that cannot go out is lost, not failed.
            Err(e) => log::debug!("QP {qp_id}: UD send dropped: {e}"),
        }
        Outcome::Done(w.len)
    }
}
