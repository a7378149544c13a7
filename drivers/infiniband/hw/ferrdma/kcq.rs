// SPDX-License-Identifier: GPL-2.0

//! Kernel completion queues: the driver owns the ring and the shadow area (in coherent
//! memory), polls CQEs into `ib_wc`s and arms through doorbell page 0. Everything here may
//! run in atomic context.

use crate::{
    admin::header,
    cq::{ceq_for_vector, Cq},
    event_tag::Published,
    ibdev::IbData,
    interface as hw,
    kqp::KQp,
    kring::ChunkedRing,
    kwqe::{self, Cqe},
    sizing,
};
use kernel::{
    dma::Coherent,
    infiniband::{CqEvents, CqInitAttr, CqNotify, NewCq, Wc, WcOpcode, WcSink, WcStatus},
    io::{io_read, io_write, Io},
    new_spinlock_irq,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        barrier::{dma_mb, Read},
        Arc, SpinLockIrq,
    },
};

/// The consumer position in a CQ ring.
struct CqPos {
    /// Next slot to read.
    head: u32,
    /// Valid-bit value of the current pass.
    polarity: bool,
}

impl CqPos {
    /// Moves past `slots` slots of a ring of `size`, flipping the polarity on wrap.
    fn step(&mut self, slots: u32, size: u32) {
        for _ in 0..slots {
            self.head += 1;
            if self.head == size {
                self.head = 0;
                self.polarity = !self.polarity;
            }
        }
    }
}

/// A kernel CQ's ring.
#[pin_data]
pub(crate) struct KCq {
    id: u32,
    size: u32,
    ring: ChunkedRing,
    shadow: Coherent<[u64]>,
    /// Taken by poll, arm and QP cleanup; orders them.
    #[pin]
    pos: SpinLockIrq<CqPos>,
    /// The consumer's completion handler, for the events a dead device can no longer raise.
    events: CqEvents,
    /// Armed (`req_notify_cq`) since the last event the driver raised itself. The device
    /// tracks arming for its own events; this only matters once it is dead, so that no
    /// consumer gets an event it did not ask for (an `IB_POLL_DIRECT` CQ never arms, and
    /// ib_core warns about an event on one).
    armed: Atomic<bool>,
}

/// What polling one CQE did.
enum Step {
    /// The CQE is done with: advance past it.
    Consume,
    /// The CQE stays (a flush CQE with more WQEs of its queue to report).
    Park,
}

impl KCq {
    fn cqe_qwords(&self, slot: u32) -> Result<[u64; 4]> {
        let b = slot as usize * 4;
        Ok([
            self.ring.read(b)?,
            self.ring.read(b + 1)?,
            self.ring.read(b + 2)?,
            self.ring.read(b + 3)?,
        ])
    }

    /// The CQE at `pos`, if the device has written it; with the number of slots it takes.
    fn peek(&self, pos: &CqPos) -> Result<Option<(Cqe, u32)>> {
        let qw3 = self.ring.read(pos.head as usize * 4 + 3)?;
        if (qw3 >> hw::cqe::VALID & 1 == 1) != pos.polarity {
            return Ok(None);
        }
        // qw3 is written last: read the rest only after seeing it.
        dma_mb(Read);
        let qw = self.cqe_qwords(pos.head)?;
        if hw::cqe_info(qw[3]).ext {
            let next = (pos.head + 1) % self.size;
            let pol = if next == 0 {
                !pos.polarity
            } else {
                pos.polarity
            };
            let e = self.cqe_qwords(next)?;
            // The device writes the extension before slot 0's qw3, so a mismatch is a
            // broken device: skip the CQE rather than read garbage.
            if (e[3] >> hw::cqe::VALID & 1 == 1) != pol {
                return Ok(Some((kwqe::decode_cqe([0, 0, 0, qw[3]], None), 2)));
            }
            return Ok(Some((kwqe::decode_cqe(qw, Some(e)), 2)));
        }
        Ok(Some((kwqe::decode_cqe(qw, None), 1)))
    }

    fn advance(&self, pos: &mut CqPos, slots: u32) -> Result {
        pos.step(slots, self.size);
        io_write!(self.shadow, [try: hw::cq_shadow::HEAD_OFFSET / 8], u64::from(pos.head));
        Ok(())
    }

    /// Marks the CQEs of QP `qp_id` still in the ring as stale (context 0), so that they are
    /// skipped: the QP is being destroyed and its id may be reused.
    pub(crate) fn forget_qp(&self, qp_id: u32) {
        let pos = self.pos.lock();
        let mut p = CqPos {
            head: pos.head,
            polarity: pos.polarity,
        };
        for _ in 0..self.size {
            let Ok(Some((c, slots))) = self.peek(&p) else {
                break;
            };
            if c.qp_id == qp_id {
                let _ = self.ring.write(p.head as usize * 4 + 1, 0);
            }
            p.step(slots, self.size);
        }
    }

    /// Rewrites the parked flush CQE at `head` to a general flush, so later polls report the
    /// remaining WQEs as flushed (the first one got the specific error).
    fn downgrade_to_flush(&self, head: u32) -> Result {
        let i = head as usize * 4 + 3;
        let qw3 = self.ring.read(i)?;
        let v = (qw3 & !0xffff_ffff)
            | u64::from(hw::cqe::MAJERR_FLUSH) << hw::cqe::MAJERR_LO
            | u64::from(hw::flush::GENERAL);
        self.ring.write(i, v)
    }
}

impl IbData<'_> {
    pub(crate) fn create_kernel_cq(
        &self,
        attr: &CqInitAttr,
        events: CqEvents,
    ) -> Result<NewCq<Cq>> {
        if attr.flags != 0 {
            return Err(EOPNOTSUPP);
        }
        if attr.cqe == 0 || attr.cqe > sizing::max_cqe(self.caps.max_cq_entries) {
            return Err(EINVAL);
        }
        self.kernel_doorbells()?;
        // Every completion may take two slots (immediate data), and one slot stays free.
        let size = (2 * (attr.cqe + 1)).max(hw::MIN_CQ_ENTRIES);
        crate::fault::step()?;
        let ring = ChunkedRing::zeroed(self.dev, size as usize * 4)?;
        crate::fault::step()?;
        let shadow = Coherent::<u64>::zeroed_slice(self.dev, 8, GFP_KERNEL)?;
        crate::fault::step()?;
        let id = self
            .ids
            .lock()
            .cqs
            .alloc_in(1, self.caps.max_cq.min(hw::MAX_CQ))
            .ok_or(ENOMEM)?;
        let mut cmd = hw::CreateCq::decode(&[0; hw::CreateCq::SIZE]);
        cmd.hdr = header(hw::admin_op::CREATE_CQ);
        cmd.cq_id = id;
        cmd.size = size;
        cmd.eq_id = ceq_for_vector(attr.comp_vector, self.ceqs());
        cmd.db_page = 0;
        cmd.shadow_addr = shadow.dma_address();
        let tag = self.event_tags.next();
        cmd.event_tag = tag.raw();
        cmd.ring = ring.descriptor();
        let kcq_events = events.clone();
        let kcq = crate::fault::step().and_then(|()| {
            Arc::pin_init(
                pin_init!(KCq {
                    id,
                    size,
                    ring,
                    shadow,
                    pos <- new_spinlock_irq!(CqPos { head: 0, polarity: true }),
                    events: kcq_events,
                    armed: Atomic::new(false),
                }),
                GFP_KERNEL,
            )
        });
        let made = kcq.and_then(|k| {
            crate::fault::step()?;
            self.admin(&cmd.encode()).map(|_| k)
        });
        match made {
            Ok(k) => {
                self.tables
                    .lock()
                    .set_cq(id, Some(Published::new(tag, events)));
                Ok(NewCq {
                    value: Cq::new_kernel(id, k),
                    cqe: attr.cqe,
                })
            }
            Err(e) => {
                self.ids.lock().cqs.free(id);
                Err(e)
            }
        }
    }

    /// `poll_cq` of a kernel CQ.
    pub(crate) fn poll_kernel_cq(&self, cq: &KCq, out: &mut WcSink<'_>) -> Result {
        let mut pos = cq.pos.lock();
        // A parked flush CQE yields one completion per WQE; bound the loop by the ring so a
        // misbehaving device cannot keep us here.
        for _ in 0..2 * cq.size + 64 {
            if out.is_full() {
                break;
            }
            let Some((c, slots)) = cq.peek(&pos)? else {
                break;
            };
            match self.complete(cq, pos.head, &c, out)? {
                Step::Consume => cq.advance(&mut pos, slots)?,
                Step::Park => {}
            }
        }
        drop(pos);
        if self.device_dead() {
            self.flush_dead(cq, out);
        }
        Ok(())
    }

    /// Completes, with `WR_FLUSH_ERR`, work requests that a dead device will never complete:
    /// those outstanding on the queues of every kernel QP that reports to `cq`, oldest first,
    /// as a device flushes a QP in error. The CQEs the device wrote before it died come
    /// first (the caller polled the ring). So every work request posted to a kernel QP ends
    /// with a completion even on a dead device, which is what lets ULPs drain their QPs
    /// (`ib_drain_qp`) and tear down.
    fn flush_dead(&self, cq: &KCq, out: &mut WcSink<'_>) {
        for (qp, sends, recvs) in self.kernel_qps_on(cq) {
            while sends && !out.is_full() {
                let Some((e, _)) = qp.sq_pop_oldest() else {
                    break;
                };
                out.push(qp.wc(e.wr_id, WcStatus::WrFlush, e.opcode, 0, 0));
            }
            while recvs && !out.is_full() {
                let Some((wr_id, _)) = qp.rq_pop_oldest() else {
                    break;
                };
                out.push(qp.wc(wr_id, WcStatus::WrFlush, WcOpcode::Recv, 0, 0));
            }
            if out.is_full() {
                return;
            }
        }
    }

    /// The kernel QPs that report to `cq`, each with whether its sends and its receives do.
    fn kernel_qps_on<'c>(
        &'c self,
        cq: &'c KCq,
    ) -> impl Iterator<Item = (Arc<KQp>, bool, bool)> + 'c {
        (0..hw::MAX_QP as usize).filter_map(move |id| {
            let qp = self.tables.lock().kqp(id)?;
            let sends = core::ptr::eq(&*qp.send_cq, cq);
            let recvs = core::ptr::eq(&*qp.recv_cq, cq);
            (sends || recvs).then_some((qp, sends, recvs))
        })
    }

    /// Raises `cq`'s completion event if its consumer armed it: for work a dead device
    /// will not complete (see [`Self::flush_dead`]). Any context; no driver lock held.
    pub(crate) fn kick_dead_cq(&self, cq: &KCq) {
        if cq.armed.xchg(false, Relaxed) {
            cq.events.completion();
        }
    }

    /// Whether kernel QPs reporting to `cq` have work a dead device will flush.
    fn dead_cq_has_work(&self, cq: &KCq) -> bool {
        self.kernel_qps_on(cq)
            .any(|(qp, sends, recvs)| (sends && qp.sq_has_work()) || (recvs && qp.rq_has_work()))
    }

    /// Turns one CQE into at most one completion.
    fn complete(&self, cq: &KCq, head: u32, c: &Cqe, out: &mut WcSink<'_>) -> Result<Step> {
        if c.ctx == 0 {
            return Ok(Step::Consume);
        }
        let Some(qp) = self.tables.lock().kqp(c.qp_id as usize) else {
            return Ok(Step::Consume);
        };
        // What every completion of this QP without receive details carries.
        let plain = |wr_id, status, opcode, vendor_err, byte_len| {
            qp.wc(wr_id, status, opcode, vendor_err, byte_len)
        };
        if c.info.error {
            let status = kwqe::error_status(c.info.major, c.info.minor);
            let vendor_err = u32::from(c.info.major) << 16 | u32::from(c.info.minor);
            let popped = if c.info.sq {
                qp.sq_pop_oldest()
                    .map(|(e, more)| (plain(e.wr_id, status, e.opcode, vendor_err, e.bytes), more))
            } else {
                qp.rq_pop_oldest()
                    .map(|(id, more)| (plain(id, status, WcOpcode::Recv, vendor_err, 0), more))
            };
            let Some((wc, more)) = popped else {
                return Ok(Step::Consume);
            };
            out.push(wc);
            if !more {
                return Ok(Step::Consume);
            }
            if status != WcStatus::WrFlush {
                cq.downgrade_to_flush(head)?;
            }
            return Ok(Step::Park);
        }
        if c.info.sq {
            if let Some(e) = qp.sq_complete(u32::from(c.info.wqe_idx)) {
                out.push(plain(e.wr_id, WcStatus::Success, e.opcode, 0, e.bytes));
            }
        } else if let Some(wr_id) = qp.rq_complete() {
            let r = kwqe::recv_info(c, qp.is_ud(), qp.id);
            out.push(Wc {
                imm: r.imm,
                invalidated: r.invalidated,
                src_qp: r.src_qp,
                network: r.network,
                vlan_tci: r.vlan_tci,
                smac: r.smac,
                ..plain(wr_id, WcStatus::Success, r.opcode, 0, r.byte_len)
            });
        }
        Ok(Step::Consume)
    }

    /// `req_notify_cq` of a kernel CQ: the arm word in the shadow area, then the CQ-arm
    /// doorbell of page 0. Returns whether CQEs are already waiting.
    pub(crate) fn arm_kernel_cq(&self, cq: &KCq, how: CqNotify) -> Result<bool> {
        let db = self.kernel_doorbells()?;
        let pos = cq.pos.lock();
        let i = hw::cq_shadow::ARM_OFFSET / 8;
        let prev: u64 = io_read!(cq.shadow, [try: i]);
        io_write!(cq.shadow, [try: i], hw::cq_arm_word(prev, how.solicited_only));
        cq.armed.store(true, Relaxed);
        // writel() orders the shadow store before the doorbell.
        db.write32(cq.id, hw::DB_CQ_ARM_OFFSET);
        let waiting = cq.peek(&pos)?.is_some();
        drop(pos);
        Ok(how.report_missed && (waiting || (self.device_dead() && self.dead_cq_has_work(cq))))
    }
}
