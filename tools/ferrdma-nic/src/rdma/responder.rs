//! Frames from the fabric: parsing (every layer and the ICRC; a bad frame is dropped and
//! counted), dispatch to the requester (ACKs, READ responses) or the responder, the RC
//! responder (PSN checks, duplicates, NAKs, RNR, multi-packet SEND and WRITE, READ
//! responses) and UD receive.
//!
//! Errors at the responder follow the loopback path: the responder QP gets the completion
//! and async event it would get there and moves to ERR, and the requester gets the NAK
//! whose completion status matches the loopback one.

use crate::interface::{
    ae, cqe, eqe_kind, flush, MCAST_QPN, QP_ACCESS_REMOTE_READ, QP_ACCESS_REMOTE_WRITE,
    QP_TYPE_GSI, QP_TYPE_RC, QP_TYPE_UD, QUANTUM,
};
use crate::wire::aeth::{Aeth, NakCode, Syndrome};
use crate::wire::opcode as op;
use crate::wire::{self, ExtHeaders, Headers, IpHeader};

use super::ack_coalescing::NO_CREDITS;
use super::exec::{Inbound, Recv, Src};
use super::grh;
use super::mr::Need;
use super::path::{v4_mapped, FillError, PathError};
use super::requester::bth;
use super::seglist::{MrRange, Piece, SegFault};
use super::transport::{psn_add, psn_diff, ReadResp, RecvCtx, WriteCtx, PSN_MASK};
use super::wqe;
use super::{Engine, Env};

/// How a request packet ended at the responder.
enum Verdict {
    /// Accepted: the expected PSN advances by this many.
    Accept(u32),
    /// Not accepted, nothing to answer (or already answered).
    Silent,
    /// RNR NAK.
    Rnr,
    /// NAK with this code (the responder already did its own error handling).
    Nak(NakCode),
}

/// The NAK for a loopback-style receive failure (`Recv::Nak` carries the requester's flush
/// code).
fn nak_for(code: u16) -> NakCode {
    match code {
        flush::REM_ACCESS => NakCode::RemoteAccessError,
        flush::REM_INV_REQ => NakCode::InvalidRequest,
        _ => NakCode::RemoteOperationalError,
    }
}

impl Engine {
    /// One frame from the fabric (`icrc`: what is known of its ICRC).
    pub(super) fn receive_frame(&mut self, env: &Env<'_>, frame: &[u8], icrc: wire::Icrc) {
        let parsed = match wire::parse_with(frame, icrc) {
            Ok(p) => p,
            Err(e) => {
                log::debug!("dropping a frame: {e}");
                self.stats.rx_drops += 1;
                self.count_rx_error(&e);
                return;
            }
        };
        let h = parsed.headers;
        let payload = parsed.payload;
        // The NIC's multicast filter: a frame to a multicast MAC is heard only when this NIC
        // has a group for its destination GID (as a NIC programs its MAC filter on attach),
        // so flooded traffic of other groups counts nowhere.
        let to_group = frame.first().is_some_and(|b| b & 1 != 0);
        if to_group && !self.mcast.has_group(&dest_gid(&h.ip)) {
            return;
        }
        let ipv4 = self.count_rx(&h.ip, h.eth.vlan.is_some(), frame.len(), h.bth.opcode);
        self.notify_congestion(env, &h);
        // Every drop of a valid frame below counts in rx_drops: one more is a discard.
        let drops = self.stats.rx_drops;
        match h.bth.opcode {
            op::UD_SEND_ONLY | op::UD_SEND_ONLY_IMM if h.bth.dest_qp == MCAST_QPN => {
                self.rx_mcast(env, &h, payload)
            }
            // Multicast is a UD SEND to the multicast QPN: nothing else to a group's MAC
            // reaches a QP (an RC request or a datagram naming one QP is not for a group).
            o if to_group => {
                log::debug!("dropping opcode {o:#x} to a multicast MAC");
                self.stats.rx_drops += 1;
            }
            op::UD_SEND_ONLY | op::UD_SEND_ONLY_IMM => self.rx_ud(env, &h, payload, h.bth.dest_qp),
            op::RC_ACK
            | op::RC_READ_RESPONSE_FIRST
            | op::RC_READ_RESPONSE_MIDDLE
            | op::RC_READ_RESPONSE_LAST
            | op::RC_READ_RESPONSE_ONLY => self.rx_response(env, &h, payload),
            op::RC_SEND_FIRST..=op::RC_READ_REQUEST
            | op::RC_SEND_LAST_INV
            | op::RC_SEND_ONLY_INV => self.rx_request(env, &h, payload),
            op::CNP => self.rx_cnp(env, &h),
            o => {
                log::debug!("dropping opcode {o:#x} (not supported)");
                self.stats.rx_drops += 1;
            }
        }
        if self.stats.rx_drops != drops {
            self.count_rx_discard(ipv4);
        }
    }

    /// Sends an ACK or NAK from responder QP `qpn`, after the ACK it owes (if any).
    pub(super) fn send_ack(&mut self, qpn: u32, psn: u32, syndrome: Syndrome) {
        self.send_owed_ack(qpn);
        let Some(qp) = self.qp(qpn) else { return };
        let msn = qp.resp.msn & PSN_MASK;
        self.send_aeth(qpn, psn, syndrome, msn);
    }

    /// Sends an ACK or NAK with this MSN from responder QP `qpn`.
    pub(super) fn send_aeth(&mut self, qpn: u32, psn: u32, syndrome: Syndrome, msn: u32) {
        let Some(qp) = self.qp(qpn) else { return };
        let attrs = qp.attrs;
        let ext = ExtHeaders {
            aeth: Some(Aeth { syndrome, msn }),
            ..Default::default()
        };
        if matches!(syndrome, Syndrome::RnrNak { .. }) {
            self.count_rnr_nak_sent();
        }
        if let Err(e) = self.transmit(&attrs, bth(op::RC_ACK, attrs.dest_qpn, psn), ext, &[]) {
            // A lost ACK is recovered by the requester's timer.
            log::debug!("QP {qpn}: ACK not sent: {e}");
        }
    }

    fn rx_request(&mut self, env: &Env<'_>, h: &Headers, payload: &[u8]) {
        let qpn = h.bth.dest_qp;
        let Some(qp) = self.qp(qpn) else {
            self.stats.rx_drops += 1;
            return;
        };
        if qp.qp_type != QP_TYPE_RC || !qp.can_receive() {
            self.stats.rx_drops += 1;
            return;
        }
        let epsn = qp.attrs.rq_psn;
        let d = psn_diff(h.bth.psn, epsn);
        if d > 0 {
            // A gap: one NAK per expected PSN, the requester goes back to it.
            let nak_sent = qp.resp.nak_sent;
            self.count_out_of_sequence();
            if !nak_sent {
                if let Some(q) = self.qp_mut(qpn) {
                    q.resp.nak_sent = true;
                }
                self.send_ack(qpn, epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            self.stats.rx_drops += 1;
            return;
        }
        if d < 0 {
            // A duplicate: READs are answered again, everything else re-acknowledged.
            self.count_duplicate();
            if h.bth.opcode == op::RC_READ_REQUEST {
                self.duplicate_read(env, qpn, h);
            } else if h.bth.ack_req {
                self.send_ack(
                    qpn,
                    psn_add(epsn, PSN_MASK),
                    Syndrome::Ack {
                        credits: NO_CREDITS,
                    },
                );
            }
            return;
        }
        let verdict = match h.bth.opcode {
            op::RC_READ_REQUEST => self.rx_read_request(env, qpn, h),
            op::RC_WRITE_FIRST..=op::RC_WRITE_ONLY_IMM => self.rx_write(env, qpn, h, payload),
            _ => self.rx_send(env, qpn, h, payload),
        };
        match verdict {
            Verdict::Accept(n) => {
                let Some(qp) = self.qp_mut(qpn) else { return };
                qp.attrs.rq_psn = psn_add(epsn, n);
                qp.resp.nak_sent = false;
                if h.bth.ack_req && h.bth.opcode != op::RC_READ_REQUEST {
                    self.ack_accepted(qpn, h.bth.psn);
                }
                self.pump_reads(env, qpn);
            }
            Verdict::Silent => {}
            Verdict::Rnr => {
                self.stats.rnr_naks += 1;
                let timer = self.qp(qpn).map_or(0, |q| q.attrs.min_rnr_timer);
                self.send_ack(qpn, h.bth.psn, Syndrome::RnrNak { timer });
            }
            Verdict::Nak(code) => self.send_ack(qpn, h.bth.psn, Syndrome::Nak(code)),
        }
    }

    /// An invalid request (opcode out of sequence, bad length): async event, ERR, NAK.
    fn invalid_request(&mut self, env: &Env<'_>, qpn: u32) -> Verdict {
        log::debug!("QP {qpn}: invalid inbound request");
        if let Some(q) = self.qp_mut(qpn) {
            q.last_error = flush::REM_INV_REQ;
        }
        self.async_event(
            env,
            eqe_kind::QP,
            qpn,
            ae::QP_INVALID_REQUEST,
            u32::from(flush::REM_INV_REQ),
        );
        self.enter_err(env, qpn, true, true);
        Verdict::Nak(NakCode::InvalidRequest)
    }

    /// Whether a packet's payload length fits its place in the message.
    fn length_ok(&self, qpn: u32, last: bool, len: usize) -> bool {
        let mtu = self.qp_mtu(qpn) as usize;
        if last {
            len <= mtu
        } else {
            len == mtu
        }
    }

    fn rx_send(&mut self, env: &Env<'_>, qpn: u32, h: &Headers, payload: &[u8]) -> Verdict {
        let o = h.bth.opcode;
        let first = matches!(
            o,
            op::RC_SEND_FIRST | op::RC_SEND_ONLY | op::RC_SEND_ONLY_IMM | op::RC_SEND_ONLY_INV
        );
        let last = o != op::RC_SEND_FIRST && o != op::RC_SEND_MIDDLE;
        let busy = self
            .qp(qpn)
            .is_some_and(|q| q.resp.recv.is_some() || q.resp.write.is_some());
        if first == busy || !self.length_ok(qpn, last, payload.len()) {
            return self.invalid_request(env, qpn);
        }
        if first {
            match self.rq_head_valid(env, qpn) {
                Some(true) => {}
                Some(false) => return Verdict::Rnr,
                None => {
                    self.stats.dma_faults += 1;
                    self.responder_fail(env, qpn, flush::FATAL, ae::QP_FATAL);
                    return Verdict::Nak(NakCode::RemoteOperationalError);
                }
            }
        }
        let msg = Inbound {
            src_qpn: 0,
            op: cqe::OP_RECV,
            imm: h.ext.immdt,
            solicited: h.bth.solicited,
            inv_stag: h.ext.ieth,
            grh: None,
            ipv4: false,
            no_scatter: false,
            len: payload.len() as u64,
            vlan_tci: None,
            smac: None,
        };
        if first && last {
            // The whole message is here: the loopback receive does it all.
            return match self.receive(env, qpn, &msg, &Src::Bytes(payload.to_vec())) {
                Recv::Ok => {
                    self.message_done(qpn);
                    Verdict::Accept(1)
                }
                Recv::Rnr => Verdict::Rnr,
                Recv::Nak(code) => Verdict::Nak(nak_for(code)),
                Recv::SrcFault | Recv::Dropped => Verdict::Silent,
            };
        }
        let ctx = if first {
            match self.rq_buffers(env, qpn) {
                Ok(segs) => RecvCtx { segs, off: 0 },
                Err(v) => return v,
            }
        } else {
            match self.qp_mut(qpn).and_then(|q| q.resp.recv.take()) {
                Some(c) => c,
                None => return self.invalid_request(env, qpn),
            }
        };
        let end = ctx.off + payload.len() as u64;
        if end > ctx.segs.len() {
            self.responder_fail(env, qpn, flush::LOC_LEN, ae::QP_INVALID_REQUEST);
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        if let Some(stag) = h.ext.ieth {
            let pd = self.qp(qpn).map_or(u32::MAX, |q| q.pd);
            if !self.can_invalidate(stag, pd) {
                self.responder_fail(env, qpn, flush::LOC_QP_OP, ae::QP_INVALID_REQUEST);
                return Verdict::Nak(NakCode::InvalidRequest);
            }
        }
        if ctx
            .segs
            .write_at(&self.mrs, env.mem, ctx.off, payload)
            .is_err()
        {
            self.stats.dma_faults += 1;
            self.responder_fail(env, qpn, flush::PROT, ae::QP_LOCAL_ACCESS);
            return Verdict::Nak(NakCode::RemoteOperationalError);
        }
        if last {
            let msg = Inbound { len: end, ..msg };
            self.complete_recv(env, qpn, &msg, end);
            self.message_done(qpn);
        } else if let Some(q) = self.qp_mut(qpn) {
            q.resp.recv = Some(RecvCtx { off: end, ..ctx });
        }
        Verdict::Accept(1)
    }

    /// The buffers of the receive WQE at the RQ tail (not consumed).
    fn rq_buffers(&mut self, env: &Env<'_>, qpn: u32) -> Result<MrRange, Verdict> {
        let Some(q) = self.qp(qpn) else {
            return Err(Verdict::Silent);
        };
        let (pd, privileged, addr) = (q.pd, q.privileged, q.rq.addr(q.rq_tail));
        let mut b = vec![0u8; QUANTUM << q.rq_shift];
        if env.mem.read(addr, &mut b).is_err() {
            self.stats.dma_faults += 1;
            self.responder_fail(env, qpn, flush::FATAL, ae::QP_FATAL);
            return Err(Verdict::Nak(NakCode::RemoteOperationalError));
        }
        let Ok(sges) = wqe::parse_rq(&b) else {
            self.responder_fail(env, qpn, flush::LOC_QP_OP, ae::QP_FATAL);
            return Err(Verdict::Nak(NakCode::RemoteOperationalError));
        };
        let cap: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        let pieces = sges.iter().map(|s| Piece {
            stag: s.stag,
            va: s.addr,
            len: u64::from(s.len),
        });
        let segs = MrRange::new(pd, Need::LocalWrite, pieces, cap).privileged(privileged);
        match segs.check(&self.mrs, env.mem) {
            Ok(()) => Ok(segs),
            Err(f) => {
                log::debug!("QP {qpn}: receive scatter refused: {f}");
                self.responder_fail(env, qpn, flush::PROT, ae::QP_LOCAL_ACCESS);
                Err(Verdict::Nak(NakCode::RemoteOperationalError))
            }
        }
    }

    fn message_done(&mut self, qpn: u32) {
        if let Some(q) = self.qp_mut(qpn) {
            q.resp.msn = psn_add(q.resp.msn, 1);
        }
    }

    /// Remote memory for an inbound RDMA request, or the remote access error handling.
    fn remote_segs(
        &mut self,
        env: &Env<'_>,
        qpn: u32,
        h: &Headers,
        need: Need,
    ) -> Result<MrRange, Verdict> {
        let (Some(q), Some(reth)) = (self.qp(qpn), h.ext.reth) else {
            return Err(Verdict::Silent);
        };
        let right = match need {
            Need::RemoteRead => QP_ACCESS_REMOTE_READ,
            _ => QP_ACCESS_REMOTE_WRITE,
        };
        let len = u64::from(reth.dma_len);
        let piece = Piece {
            stag: reth.rkey,
            va: reth.va,
            len,
        };
        let range = MrRange::new(q.pd, need, [piece], len);
        let checked = if q.attrs.access & right == 0 {
            Err(super::mr::AccessFault::Rights)
        } else {
            range.check(&self.mrs, env.mem)
        };
        match checked {
            Ok(()) => Ok(range),
            Err(f) => {
                log::debug!("QP {qpn}: inbound RDMA request refused: {f}");
                self.remote_access_violation(env, qpn);
                Err(Verdict::Nak(NakCode::RemoteAccessError))
            }
        }
    }

    fn rx_write(&mut self, env: &Env<'_>, qpn: u32, h: &Headers, payload: &[u8]) -> Verdict {
        let o = h.bth.opcode;
        let first = matches!(
            o,
            op::RC_WRITE_FIRST | op::RC_WRITE_ONLY | op::RC_WRITE_ONLY_IMM
        );
        let last = matches!(
            o,
            op::RC_WRITE_LAST | op::RC_WRITE_LAST_IMM | op::RC_WRITE_ONLY | op::RC_WRITE_ONLY_IMM
        );
        let imm = h.ext.immdt;
        let busy = self
            .qp(qpn)
            .is_some_and(|q| q.resp.recv.is_some() || q.resp.write.is_some());
        if first == busy || !self.length_ok(qpn, last, payload.len()) {
            return self.invalid_request(env, qpn);
        }
        if imm.is_some() {
            match self.rq_head_valid(env, qpn) {
                Some(true) => {}
                Some(false) => return Verdict::Rnr,
                None => {
                    self.stats.dma_faults += 1;
                    self.responder_fail(env, qpn, flush::FATAL, ae::QP_FATAL);
                    return Verdict::Nak(NakCode::RemoteOperationalError);
                }
            }
        }
        let ctx = if first {
            let total = h.ext.reth.map_or(0, |r| u64::from(r.dma_len));
            match self.remote_segs(env, qpn, h, Need::RemoteWrite) {
                Ok(segs) => WriteCtx {
                    segs,
                    off: 0,
                    total,
                },
                Err(v) => return v,
            }
        } else {
            match self.qp_mut(qpn).and_then(|q| q.resp.write.take()) {
                Some(c) => c,
                None => return self.invalid_request(env, qpn),
            }
        };
        let end = ctx.off + payload.len() as u64;
        if end > ctx.total || (last && end != ctx.total) {
            return self.invalid_request(env, qpn);
        }
        // Unchanged unless the host armed its test-only corruption knob.
        let placed = self.sabotage.corrupt_chunk(ctx.off, payload);
        if ctx
            .segs
            .write_at(&self.mrs, env.mem, ctx.off, &placed)
            .is_err()
        {
            self.stats.dma_faults += 1;
            self.remote_access_violation(env, qpn);
            return Verdict::Nak(NakCode::RemoteAccessError);
        }
        if !last {
            if let Some(q) = self.qp_mut(qpn) {
                q.resp.write = Some(WriteCtx { off: end, ..ctx });
            }
            return Verdict::Accept(1);
        }
        self.message_done(qpn);
        let Some(imm) = imm else {
            // (With immediate, the receive completion counts the message.)
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += ctx.total;
            return Verdict::Accept(1);
        };
        let msg = Inbound {
            src_qpn: 0,
            op: cqe::OP_RECV_RDMA_IMM,
            imm: Some(imm),
            solicited: h.bth.solicited,
            inv_stag: None,
            grh: None,
            ipv4: false,
            no_scatter: true,
            len: ctx.total,
            vlan_tci: None,
            smac: None,
        };
        match self.receive(env, qpn, &msg, &Src::Bytes(Vec::new())) {
            Recv::Ok | Recv::Dropped | Recv::SrcFault => Verdict::Accept(1),
            Recv::Rnr => Verdict::Rnr,
            Recv::Nak(code) => Verdict::Nak(nak_for(code)),
        }
    }

    fn read_packets(&self, qpn: u32, len: u64) -> u32 {
        len.div_ceil(u64::from(self.qp_mtu(qpn))).max(1) as u32
    }

    fn rx_read_request(&mut self, env: &Env<'_>, qpn: u32, h: &Headers) -> Verdict {
        let busy = self
            .qp(qpn)
            .is_some_and(|q| q.resp.recv.is_some() || q.resp.write.is_some());
        if busy {
            return self.invalid_request(env, qpn);
        }
        let src = match self.remote_segs(env, qpn, h, Need::RemoteRead) {
            Ok(s) => s,
            Err(v) => return v,
        };
        let npkts = self.read_packets(qpn, src.len());
        let Some(q) = self.qp_mut(qpn) else {
            return Verdict::Silent;
        };
        if !q.resp.read_room() {
            // More READs than the QP allows in flight (max_dest_rd_atomic).
            return self.invalid_request(env, qpn);
        }
        q.resp.reads.push_back(ReadResp {
            src,
            first_psn: h.bth.psn,
            npkts,
            sent: 0,
        });
        self.message_done(qpn);
        Verdict::Accept(npkts)
    }

    /// A READ request for PSNs already accepted: the requester lost responses. Answer again
    /// from there; queued answers from that PSN on are superseded.
    fn duplicate_read(&mut self, env: &Env<'_>, qpn: u32, h: &Headers) {
        let Some(q) = self.qp(qpn) else { return };
        let (Some(reth), pd, access) = (h.ext.reth, q.pd, q.attrs.access) else {
            return;
        };
        let epsn = q.attrs.rq_psn;
        let len = u64::from(reth.dma_len);
        let npkts = self.read_packets(qpn, len);
        if psn_diff(psn_add(h.bth.psn, npkts), epsn) > 0 {
            return;
        }
        let piece = Piece {
            stag: reth.rkey,
            va: reth.va,
            len,
        };
        let src = MrRange::new(pd, Need::RemoteRead, [piece], len);
        if access & QP_ACCESS_REMOTE_READ == 0 || src.check(&self.mrs, env.mem).is_err() {
            return;
        }
        let psn = h.bth.psn;
        let Some(q) = self.qp_mut(qpn) else { return };
        q.resp
            .reads
            .retain(|r| psn_diff(psn_add(r.first_psn, r.npkts), psn) <= 0);
        if !q.resp.read_room() {
            q.resp.reads.pop_front();
        }
        q.resp.reads.push_back(ReadResp {
            src,
            first_psn: psn,
            npkts,
            sent: 0,
        });
        self.pump_reads(env, qpn);
    }

    /// Emits READ response packets while the outbox has room.
    pub(super) fn pump_reads(&mut self, env: &Env<'_>, qpn: u32) {
        if self.qp(qpn).is_some_and(|q| !q.resp.reads.is_empty()) {
            // READ responses acknowledge what came before them: the owed ACK goes first.
            self.send_owed_ack(qpn);
        }
        let mtu = u64::from(self.qp_mtu(qpn));
        loop {
            if !self.tx_room(1) {
                return;
            }
            let Some(q) = self.qp(qpn) else { return };
            if !q.can_receive() || !q.cc.may_send(env.now_us) {
                return;
            }
            let Some(r) = q.resp.reads.front() else {
                return;
            };
            let (k, n) = (r.sent, r.npkts);
            let off = u64::from(k) * mtu;
            let len = r.src.len().saturating_sub(off).min(mtu) as usize;
            let psn = psn_add(r.first_psn, k);
            let opcode = match (k == 0, k + 1 >= n) {
                (true, true) => op::RC_READ_RESPONSE_ONLY,
                (true, false) => op::RC_READ_RESPONSE_FIRST,
                (false, true) => op::RC_READ_RESPONSE_LAST,
                (false, false) => op::RC_READ_RESPONSE_MIDDLE,
            };
            let ext = ExtHeaders {
                aeth: (opcode != op::RC_READ_RESPONSE_MIDDLE).then_some(Aeth {
                    syndrome: Syndrome::Ack {
                        credits: NO_CREDITS,
                    },
                    msn: q.resp.msn & PSN_MASK,
                }),
                ..Default::default()
            };
            let attrs = q.attrs;
            // The payload goes from guest memory straight into the frame.
            let sent = self.transmit_with(
                &attrs,
                bth(opcode, attrs.dest_qpn, psn),
                ext,
                len,
                |eng, buf| {
                    // Building the headers changed no QP: the READ is still first.
                    let r = eng.qp(qpn).and_then(|q| q.resp.reads.front());
                    let r = r.ok_or(FillError::Gone)?;
                    r.src
                        .read_at(&eng.mrs, env.mem, off, buf)
                        .map_err(|SegFault| FillError::Fault)
                },
            );
            match sent {
                Ok(Ok(bytes)) => self.cc_sent(env, qpn, bytes),
                Ok(Err(FillError::Fault)) => {
                    self.stats.dma_faults += 1;
                    self.send_ack(qpn, psn, Syndrome::Nak(NakCode::RemoteOperationalError));
                    self.remote_access_violation(env, qpn);
                    return;
                }
                Ok(Err(FillError::Gone)) => return,
                Err(PathError::Full) => return,
                Err(e) => {
                    log::debug!("QP {qpn}: READ response not sent: {e}");
                    if let Some(q) = self.qp_mut(qpn) {
                        q.resp.reads.pop_front();
                    }
                    continue;
                }
            }
            let Some(q) = self.qp_mut(qpn) else { return };
            if let Some(r) = q.resp.reads.front_mut() {
                r.sent += 1;
                if r.sent >= r.npkts {
                    q.resp.reads.pop_front();
                }
            }
        }
    }

    /// A UD SEND to the multicast QPN: delivered to every QP attached to the group of the
    /// destination GID, each with its own Q_Key check (no group: dropped).
    fn rx_mcast(&mut self, env: &Env<'_>, h: &Headers, payload: &[u8]) {
        let members = self.mcast.members(&dest_gid(&h.ip)).to_vec();
        if members.is_empty() {
            self.stats.rx_drops += 1;
        }
        for qpn in members {
            self.rx_ud(env, h, payload, qpn);
        }
    }

    fn rx_ud(&mut self, env: &Env<'_>, h: &Headers, payload: &[u8], qpn: u32) {
        let Some(deth) = h.ext.deth else { return };
        let ok = self.qp(qpn).is_some_and(|d| {
            matches!(d.qp_type, QP_TYPE_UD | QP_TYPE_GSI)
                && d.can_receive()
                && d.attrs.qkey == deth.qkey
        });
        if !ok {
            self.stats.rx_drops += 1;
            return;
        }
        let (ipv4, sgid, dgid, tc, hop, flow) = match h.ip {
            IpHeader::V4(v4) => (
                true,
                v4_mapped(v4.src),
                v4_mapped(v4.dst),
                v4.traffic_class,
                v4.ttl,
                0,
            ),
            IpHeader::V6(v6) => (
                false,
                v6.src,
                v6.dst,
                v6.traffic_class,
                v6.hop_limit,
                v6.flow_label,
            ),
        };
        let len = payload.len() as u64;
        let msg = Inbound {
            src_qpn: deth.src_qp,
            op: cqe::OP_RECV,
            imm: h.ext.immdt,
            solicited: h.bth.solicited,
            inv_stag: None,
            grh: Some(grh::grh(ipv4, &sgid, &dgid, tc, hop, flow, len as u32)),
            ipv4,
            no_scatter: false,
            len,
            vlan_tci: h.eth.vlan.and_then(|v| v.tci().ok()),
            smac: Some(h.eth.src),
        };
        match self.receive(env, qpn, &msg, &Src::Bytes(payload.to_vec())) {
            Recv::Ok => {}
            _ => self.stats.rx_drops += 1,
        }
    }
}

/// The destination GID of a packet (IPv4 as `::ffff:a.b.c.d`).
fn dest_gid(ip: &IpHeader) -> [u8; 16] {
    match ip {
        IpHeader::V4(v4) => v4_mapped(v4.dst),
        IpHeader::V6(v6) => v6.dst,
    }
}
