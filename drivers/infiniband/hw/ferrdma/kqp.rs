// SPDX-License-Identifier: GPL-2.0

//! Kernel queue pairs: SQ and RQ rings in coherent memory that the driver fills with GEN_2
//! WQEs for kernel consumers (ib_mad's GSI QP, ib_cm, kernel ULPs), and the bookkeeping that
//! turns CQEs back into work request ids. Posting and completing may run in atomic context.

use crate::{
    admin::header,
    event_tag::Published,
    ibdev::{IbData, Pd},
    id_alloc::filled,
    interface as hw,
    kcq::KCq,
    kwqe::{self, Frag, Payload, SqFlags, SqOp, QUANTUM_QWORDS},
    qp::{new_soft, Qp},
    sizing::{self, QpRings},
    sq_track::{SqEntry, SqTrack},
};
use kernel::{
    dma::Coherent,
    infiniband::{
        NewQp, QpEvents, QpInitAttr, QpRef, QpType, RecvWrs, SendOp, SendWr, SendWrs, Wc, WcOpcode,
        WcStatus,
    },
    io::{io_write, Io},
    new_spinlock_irq,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        barrier::{dma_mb, Write},
        Arc, SpinLockIrq,
    },
};

/// The send queue: its ring and what was posted to it.
struct Sq {
    ring: Coherent<[u64]>,
    track: SqTrack,
}

/// The receive queue, in WQEs.
struct Rq {
    ring: Coherent<[u64]>,
    wqes: u32,
    shift: u8,
    head: u32,
    tail: u32,
    used: u32,
    polarity: bool,
    wr_ids: KVVec<u64>,
}

/// A kernel QP's rings and their state.
#[pin_data]
pub(crate) struct KQp {
    pub(crate) id: u32,
    name: QpRef,
    ud: bool,
    signal_all: bool,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline: u32,
    /// The QP's Q_Key, for datagrams that ask for it (key with bit 31 set).
    pub(crate) qkey: Atomic<u32>,
    /// Non-zero once the consumer moved the QP to ERR: receives posted then need a flush.
    pub(crate) in_error: Atomic<u32>,
    pub(crate) send_cq: Arc<KCq>,
    pub(crate) recv_cq: Arc<KCq>,
    _shadow: Coherent<[u64]>,
    #[pin]
    sq: SpinLockIrq<Sq>,
    #[pin]
    rq: SpinLockIrq<Rq>,
}

impl KQp {
    /// Whether this is a datagram (UD or GSI) QP.
    pub(crate) fn is_ud(&self) -> bool {
        self.ud
    }

    /// A successful SQ CQE for the WQE at quantum `idx` (see [`SqTrack::complete`]).
    pub(crate) fn sq_complete(&self, idx: u32) -> Option<SqEntry> {
        self.sq.lock().track.complete(idx)
    }

    /// Retires the oldest outstanding send WQE for a flush; returns it and whether more
    /// remain.
    pub(crate) fn sq_pop_oldest(&self) -> Option<(SqEntry, bool)> {
        self.sq.lock().track.pop_oldest()
    }

    /// A completion of this QP without receive details (sends, errors, flushes).
    pub(crate) fn wc(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        vendor_err: u32,
        byte_len: u32,
    ) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            qp: self.name,
            imm: None,
            invalidated: None,
            src_qp: self.id,
            network: None,
            vlan_tci: None,
            smac: None,
        }
    }

    /// Whether send WQEs are outstanding.
    pub(crate) fn sq_has_work(&self) -> bool {
        self.sq.lock().track.has_work()
    }

    /// Whether receives are outstanding.
    pub(crate) fn rq_has_work(&self) -> bool {
        self.rq.lock().used > 0
    }

    /// A successful RQ CQE: RQ completions come in order.
    pub(crate) fn rq_complete(&self) -> Option<u64> {
        self.rq.lock().retire_tail()
    }

    /// Retires the oldest receive for a flush; returns its id and whether more remain.
    pub(crate) fn rq_pop_oldest(&self) -> Option<(u64, bool)> {
        let mut rq = self.rq.lock();
        let id = rq.retire_tail()?;
        Some((id, rq.used > 0))
    }
}

impl Rq {
    /// Retires the receive at the tail.
    fn retire_tail(&mut self) -> Option<u64> {
        if self.used == 0 {
            return None;
        }
        let id = *self.wr_ids.get(self.tail as usize)?;
        self.tail = (self.tail + 1) % self.wqes;
        self.used -= 1;
        Some(id)
    }
}

impl Sq {
    /// Writes `w` at the head, header qword last.
    fn write(&mut self, w: &kwqe::Wqe) -> Result {
        let base = self.track.head() as usize * QUANTUM_QWORDS;
        let n = w.quanta as usize * QUANTUM_QWORDS;
        for i in (0..n).filter(|&i| i != 3) {
            io_write!(self.ring, [try: base + i], w.qw[i]);
        }
        dma_mb(Write);
        io_write!(self.ring, [try: base + 3], w.qw[3]);
        Ok(())
    }

    /// Writes `quanta` NOP quanta at the head.
    fn pad(&mut self, quanta: u32) -> Result {
        for _ in 0..quanta {
            let base = self.track.head() as usize * QUANTUM_QWORDS;
            for i in 0..3 {
                io_write!(self.ring, [try: base + i], 0u64);
            }
            dma_mb(Write);
            io_write!(self.ring, [try: base + 3], kwqe::nop(self.track.polarity()));
            self.track.push(SqEntry::PADDING);
        }
        Ok(())
    }
}

/// The device operation of a send request.
fn sq_op<T: kernel::infiniband::Driver<Ah = crate::ah::Ah, Mr = crate::mr::Mr>>(
    qp: &KQp,
    wr: &SendWr<'_, T>,
) -> Result<(SqOp, Option<u32>)> {
    Ok(match (wr.op, &wr.ud) {
        (
            SendOp::Send {
                imm,
                invalidate: None,
            },
            Some(d),
        ) => {
            // A Q_Key with bit 31 set asks for the QP's own (IB spec, "Q_Keys").
            let own = qp.qkey.load(Relaxed);
            let qkey = if d.remote_qkey & (1 << 31) != 0 && own != 0 {
                own
            } else {
                d.remote_qkey
            };
            (
                SqOp::UdSend {
                    ah: d.ah.id(),
                    qkey,
                    dqpn: d.remote_qpn,
                },
                imm,
            )
        }
        (_, Some(_)) => return Err(EINVAL),
        (SendOp::Send { imm, invalidate }, None) => (SqOp::Send { inv: invalidate }, imm),
        (
            SendOp::RdmaWrite {
                remote_addr,
                rkey,
                imm,
            },
            None,
        ) => (
            SqOp::Write {
                raddr: remote_addr,
                rkey,
            },
            imm,
        ),
        (SendOp::RdmaRead { remote_addr, rkey }, None) => (
            SqOp::Read {
                raddr: remote_addr,
                rkey,
            },
            None,
        ),
        (SendOp::LocalInv { rkey }, None) => (SqOp::LocalInv { stag: rkey }, None),
        (
            SendOp::RegMr {
                key,
                access,
                iova,
                length,
                page_size,
            },
            None,
        ) => {
            let Some(crate::mr::Mr::FastReg(f)) = wr.mr else {
                return Err(EINVAL);
            };
            let fields = f.wqe_fields(key, access, length, page_size)?;
            (
                SqOp::FastReg {
                    stag: key,
                    iova,
                    fields,
                },
                None,
            )
        }
    })
}

impl IbData<'_> {
    pub(crate) fn create_kernel_qp(
        &self,
        pd: &Pd,
        attr: &mut QpInitAttr<'_, crate::ibdev::FerrdmaIb>,
        events: QpEvents,
        name: QpRef,
    ) -> Result<NewQp<Qp>> {
        let (hw_type, ud) = match attr.qp_type {
            QpType::Rc => (hw::QP_TYPE_RC, false),
            QpType::Ud => (hw::QP_TYPE_UD, true),
            QpType::Gsi => (hw::QP_TYPE_GSI, true),
            QpType::Other(_) => return Err(EOPNOTSUPP),
        };
        if attr.create_flags != 0 || attr.has_srq {
            return Err(EOPNOTSUPP);
        }
        self.kernel_doorbells()?;
        let (send_cq, recv_cq) = match (attr.send_cq.kernel(), attr.recv_cq.kernel()) {
            (Some(s), Some(r)) => (s.clone(), r.clone()),
            _ => return Err(EINVAL),
        };
        let c = attr.cap;
        let rings = QpRings::for_caps(
            c.max_send_wr.max(1),
            c.max_send_sge.max(1),
            c.max_inline_data,
            c.max_recv_wr.max(1),
            c.max_recv_sge.max(1),
            &self.caps,
        )?;
        crate::fault::step()?;
        let sq_ring = Coherent::<u64>::zeroed_slice(
            self.dev,
            rings.sq_depth as usize * QUANTUM_QWORDS,
            GFP_KERNEL,
        )?;
        let rq_wqes = rings.actual_rq_size();
        crate::fault::step()?;
        let rq_ring = Coherent::<u64>::zeroed_slice(
            self.dev,
            rings.rq_depth as usize * QUANTUM_QWORDS,
            GFP_KERNEL,
        )?;
        crate::fault::step()?;
        let shadow = Coherent::<u64>::zeroed_slice(self.dev, 8, GFP_KERNEL)?;
        let contig = |addr: u64, quanta: u32| hw::PageList {
            addr,
            npages: sizing::pages(quanta),
            level: hw::PBL_LEVEL_CONTIG,
            rsvd0: 0,
            rsvd1: 0,
        };
        let sq_list = contig(sq_ring.dma_address(), rings.sq_depth);
        let rq_list = contig(rq_ring.dma_address(), rings.rq_depth);
        let shadow_addr = shadow.dma_address();

        // The GSI QP is QP 1 (one per device: ib_mad creates it once for the port).
        let limit = self.caps.max_qp.min(hw::MAX_QP);
        let id = if hw_type == hw::QP_TYPE_GSI {
            self.ids.lock().qps.alloc_in(1, 2)
        } else {
            self.ids.lock().qps.alloc_in(2, limit)
        }
        .ok_or(ENOMEM)?;
        let undo = |e: Error| {
            self.ids.lock().qps.free(id);
            e
        };
        let signal_all = attr.signal_all;
        crate::fault::step().map_err(undo)?;
        let track = SqTrack::new(rings.sq_depth).map_err(undo)?;
        crate::fault::step().map_err(undo)?;
        let wr_ids = filled(rq_wqes, 0u64).map_err(undo)?;
        crate::fault::step().map_err(undo)?;
        let kqp = Arc::pin_init(
            pin_init!(KQp {
                id,
                name,
                ud,
                signal_all,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline: c.max_inline_data,
                qkey: Atomic::new(0),
                in_error: Atomic::new(0),
                send_cq,
                recv_cq,
                _shadow: shadow,
                sq <- new_spinlock_irq!(Sq {
                    ring: sq_ring,
                    track,
                }),
                rq <- new_spinlock_irq!(Rq {
                    ring: rq_ring,
                    wqes: rq_wqes,
                    shift: rings.rq_shift,
                    head: 0,
                    tail: 0,
                    used: 0,
                    polarity: true,
                    wr_ids,
                }),
            }),
            GFP_KERNEL,
        )
        .map_err(undo)?;

        let mut cmd = hw::CreateQp::decode(&[0; hw::CreateQp::SIZE]);
        cmd.hdr = header(hw::admin_op::CREATE_QP);
        cmd.qp_id = id;
        cmd.pd = pd.id();
        cmd.send_cq = attr.send_cq.id();
        cmd.recv_cq = attr.recv_cq.id();
        cmd.qp_type = hw_type;
        cmd.rq_shift = rings.rq_shift;
        cmd.db_page = 0;
        cmd.sq_quanta = rings.sq_depth;
        cmd.rq_wqes = rq_wqes;
        cmd.sq_ring = sq_list;
        cmd.rq_ring = rq_list;
        cmd.shadow_addr = shadow_addr;
        // Non-zero: CQEs of a destroyed QP get context 0 and are skipped.
        cmd.compl_ctx = 1 << 63 | u64::from(id);
        cmd.flags = hw::QP_FLAG_PRIVILEGED;
        let tag = self.event_tags.next();
        cmd.event_tag = tag.raw();
        // Everything that can fail comes before the device command, and nothing is
        // published before it succeeded: a failure here leaves no device QP, no handle in
        // the tables and no id behind.
        let soft = new_soft(id).map_err(undo)?;
        crate::fault::step().map_err(undo)?;
        self.admin(&cmd.encode()).map_err(undo)?;

        // What the rings really hold, as libirdma computes it for its own QPs.
        attr.cap.max_send_wr = (rings.sq_depth - sizing::SQ_RESERVED) >> rings.sq_shift;
        attr.cap.max_recv_wr = rq_wqes - 1;
        let qp = Qp::new_kernel(id, attr.qp_type, attr.cap, kqp.clone(), soft);
        let mut tables = self.tables.lock();
        tables.set_kqp(id, Some(kqp));
        tables.set_qp(id, Some(Published::new(tag, events)));
        Ok(NewQp {
            value: qp,
            qp_num: id,
        })
    }

    /// `post_send` on a kernel QP.
    pub(crate) fn post_kernel_send(
        &self,
        qp: &KQp,
        wrs: &mut SendWrs<'_, crate::ibdev::FerrdmaIb>,
    ) -> Result {
        let db = self.kernel_doorbells()?;
        let mut sq = qp.sq.lock();
        let mut posted = false;
        let mut res = Ok(());
        for wr in wrs {
            let r = wr.and_then(|wr| Self::post_one_send(qp, &mut sq, &wr));
            if let Err(e) = r {
                res = Err(e);
                break;
            }
            posted = true;
        }
        drop(sq);
        if posted {
            // writel() orders the WQE stores before the doorbell.
            db.write32(qp.id, hw::DB_SQ_OFFSET);
            if self.device_dead() {
                // Nothing will execute them: they complete as flushed (`flush_dead`).
                self.kick_dead_cq(&qp.send_cq);
            }
        }
        res
    }

    fn post_one_send(qp: &KQp, sq: &mut Sq, wr: &SendWr<'_, crate::ibdev::FerrdmaIb>) -> Result {
        let (op, imm) = sq_op(qp, wr)?;
        let flags = SqFlags {
            signaled: wr.signaled || qp.signal_all,
            solicited: wr.solicited,
            fence: wr.fence,
            imm,
        };
        let mut inline = [0u8; hw::MAX_INLINE as usize];
        let mut frags = [Frag::default(); hw::MAX_SGE as usize];
        let bytes = wr.total_length();
        let payload = if wr.inline() {
            if bytes > qp.max_inline {
                return Err(EINVAL);
            }
            let mut at = 0usize;
            for i in 0..wr.sges.len() {
                let seg = wr.inline_segment(i).ok_or(EINVAL)?;
                let dst = inline.get_mut(at..at + seg.len()).ok_or(EINVAL)?;
                dst.copy_from_slice(seg);
                at += seg.len();
            }
            Payload::Inline(&inline[..at])
        } else {
            if wr.sges.len() > qp.max_send_sge as usize {
                return Err(EINVAL);
            }
            for (f, s) in frags.iter_mut().zip(wr.sges.iter()) {
                *f = Frag {
                    addr: s.addr(),
                    len: s.length(),
                    stag: s.lkey(),
                };
            }
            Payload::Frags(frags.get(..wr.sges.len()).ok_or(EINVAL)?)
        };
        let quanta = kwqe::sq_wqe(op, flags, payload_ref(&payload), true)?.quanta;
        let pad = kwqe::padding_before(sq.track.head(), quanta);
        if !sq.track.has_room(pad + quanta) {
            return Err(ENOMEM);
        }
        sq.pad(pad)?;
        let w = kwqe::sq_wqe(op, flags, payload, sq.track.polarity())?;
        sq.write(&w)?;
        sq.track.push(SqEntry {
            wr_id: wr.wr_id,
            opcode: kwqe::sq_wc_opcode(&op),
            bytes,
            quanta: w.quanta as u8,
            nop: false,
        });
        Ok(())
    }

    /// `post_recv` on a kernel QP.
    pub(crate) fn post_kernel_recv(&self, qp: &KQp, wrs: &mut RecvWrs<'_>) -> Result {
        let mut rq = qp.rq.lock();
        let mut res = Ok(());
        let mut posted = false;
        for wr in wrs {
            let r = wr.and_then(|wr| {
                if wr.sges.len() > qp.max_recv_sge as usize || rq.used >= rq.wqes {
                    return Err(if rq.used >= rq.wqes { ENOMEM } else { EINVAL });
                }
                let mut frags = [Frag::default(); hw::MAX_SGE as usize];
                for (f, s) in frags.iter_mut().zip(wr.sges.iter()) {
                    *f = Frag {
                        addr: s.addr(),
                        len: s.length(),
                        stag: s.lkey(),
                    };
                }
                let w = kwqe::rq_wqe(
                    frags.get(..wr.sges.len()).ok_or(EINVAL)?,
                    rq.shift,
                    rq.polarity,
                )?;
                let base = rq.head as usize * (w.quanta as usize) * QUANTUM_QWORDS;
                for i in (0..w.quanta as usize * QUANTUM_QWORDS).filter(|&i| i != 3) {
                    io_write!(rq.ring, [try: base + i], w.qw[i]);
                }
                dma_mb(Write);
                io_write!(rq.ring, [try: base + 3], w.qw[3]);
                let h = rq.head as usize;
                if let Some(slot) = rq.wr_ids.get_mut(h) {
                    *slot = wr.wr_id;
                }
                rq.head = (rq.head + 1) % rq.wqes;
                if rq.head == 0 {
                    rq.polarity = !rq.polarity;
                }
                rq.used += 1;
                Ok(())
            });
            if let Err(e) = r {
                res = Err(e);
                break;
            }
            posted = true;
        }
        drop(rq);
        if posted && self.device_dead() {
            // Nothing will fill or flush them: they complete as flushed (`flush_dead`).
            self.kick_dead_cq(&qp.recv_cq);
            return res;
        }
        // There is no RQ doorbell; in ERR the device flushes new receives on request.
        if posted && qp.in_error.load(Relaxed) != 0 {
            let mut cmd = hw::ModifyQp::decode(&[0; hw::ModifyQp::SIZE]);
            cmd.hdr = header(hw::admin_op::MODIFY_QP);
            cmd.qp_id = qp.id;
            cmd.attr_mask = hw::qp_attr::STATE;
            cmd.flags = hw::MODIFY_QP_RQ_FLUSH;
            cmd.attrs.state = hw::qp_state::ERR;
            self.admin(&cmd.encode())?;
        }
        res
    }

    /// Raises the completion events of `qp`'s CQs, if armed, once the device is dead.
    pub(crate) fn kick_dead_qp(&self, qp: &KQp) {
        self.kick_dead_cq(&qp.send_cq);
        if !core::ptr::eq(&*qp.send_cq, &*qp.recv_cq) {
            self.kick_dead_cq(&qp.recv_cq);
        }
    }

    /// Tears down what `create_kernel_qp` set up once the device forgot the QP: no CQE of it
    /// may be mistaken for one of a later QP with the same id.
    pub(crate) fn forget_kernel_qp(&self, qp: &KQp) {
        self.tables.lock().set_kqp(qp.id, None);
        qp.send_cq.forget_qp(qp.id);
        qp.recv_cq.forget_qp(qp.id);
    }
}

fn payload_ref<'a>(p: &'a Payload<'a>) -> Payload<'a> {
    match p {
        Payload::Frags(f) => Payload::Frags(f),
        Payload::Inline(b) => Payload::Inline(b),
    }
}
