// SPDX-License-Identifier: GPL-2.0

//! User queue pairs: libirdma's ring registration becomes a device QP, and `modify_qp` walks
//! it through the IB state machine with validated RoCEv2 attributes.

use crate::{
    abi::{self, CreateQpReq, CreateQpResp, ModifyQpReq},
    admin::header,
    event_tag::Published,
    ibdev::{IbData, Pd, UContext},
    interface as hw,
    kqp::KQp,
    mr::{RingKind, RingReg},
    pbl::PageList,
    sizing::QpRings,
};
use kernel::{
    infiniband::{
        av::udp_sport, qp::transition_ok, Access, AccessFlag, Av, Destroyed, NewQp, QpAttr,
        QpAttrFlag as F, QpAttrMask, QpCap, QpEvents, QpInitAttr, QpQuery, QpState, QpType, UData,
    },
    new_mutex,
    prelude::*,
    sync::{atomic::Relaxed, Arc, Mutex},
};

/// What the driver remembers of a QP's attributes (for query and for derived fields).
#[derive(Clone, Copy)]
pub(crate) struct Soft {
    state: QpState,
    attrs: hw::QpAttrs,
}

/// Where a QP's rings live.
enum QpMem {
    /// In a user registration, filled by libirdma.
    User {
        ring: Arc<RingReg>,
        _sq: PageList,
        _rq: PageList,
    },
    /// In coherent memory the driver fills.
    Kernel(Arc<KQp>),
}

/// A queue pair.
pub(crate) struct Qp {
    id: u32,
    qp_type: QpType,
    cap: QpCap,
    mem: QpMem,
    soft: Pin<KBox<Mutex<Soft>>>,
}

/// The driver's attributes of a fresh QP.
pub(crate) fn new_soft(id: u32) -> Result<Pin<KBox<Mutex<Soft>>>> {
    crate::fault::step()?;
    let mut attrs = hw::QpAttrs::decode(&[0; hw::QpAttrs::SIZE]);
    attrs.udp_sport = udp_sport(0, id, 0);
    Ok(KBox::pin_init(
        new_mutex!(Soft {
            state: QpState::Reset,
            attrs,
        }),
        GFP_KERNEL,
    )?)
}

impl Qp {
    /// The device's QP id (the QP number).
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The QP's type.
    pub(crate) fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// A kernel QP.
    pub(crate) fn new_kernel(
        id: u32,
        qp_type: QpType,
        cap: QpCap,
        k: Arc<KQp>,
        soft: Pin<KBox<Mutex<Soft>>>,
    ) -> Self {
        Self {
            id,
            qp_type,
            cap,
            mem: QpMem::Kernel(k),
            soft,
        }
    }

    /// The rings of a kernel QP; `None` for a user QP.
    pub(crate) fn kernel_rings(&self) -> Option<&Arc<KQp>> {
        match &self.mem {
            QpMem::Kernel(k) => Some(k),
            QpMem::User { .. } => None,
        }
    }
}

/// The IB modify_qp attributes the device implements.
/// The attributes the device can set.
fn supported_mask() -> QpAttrMask {
    F::State
        | F::CurState
        | F::AccessFlags
        | F::PkeyIndex
        | F::Port
        | F::Qkey
        | F::Av
        | F::PathMtu
        | F::Timeout
        | F::RetryCnt
        | F::RnrRetry
        | F::RqPsn
        | F::MaxQpRdAtomic
        | F::MinRnrTimer
        | F::SqPsn
        | F::MaxDestRdAtomic
        | F::DestQpn
        | F::EnSqdAsyncNotify
}

/// Translates a modify_qp into the device's attributes and mask, starting from the QP's
/// current attributes `cur`. Pure: the caller has checked the state transition.
pub(crate) fn device_attrs(
    qp_num: u32,
    cur: &hw::QpAttrs,
    a: &QpAttr,
    mask: QpAttrMask,
) -> Result<(hw::QpAttrs, u32)> {
    if mask.exceeds(supported_mask()) {
        return Err(EOPNOTSUPP);
    }
    let mut out = *cur;
    let mut dm = 0;
    if mask.contains(F::State) {
        out.state = a.state as u8;
        dm |= hw::qp_attr::STATE;
    }
    if mask.contains(F::PkeyIndex) && a.pkey_index != 0 {
        return Err(EINVAL);
    }
    if mask.contains(F::Port) && a.port != 1 {
        return Err(EINVAL);
    }
    if mask.contains(F::AccessFlags) {
        // Atomics are never granted (the device reports no atomic capability), so the bit
        // is harmless to accept; local write is implicit for QPs.
        let mut acc = 0;
        if a.access.contains(AccessFlag::RemoteWrite) {
            acc |= hw::QP_ACCESS_REMOTE_WRITE;
        }
        if a.access.contains(AccessFlag::RemoteRead) {
            acc |= hw::QP_ACCESS_REMOTE_READ;
        }
        out.access = acc;
        dm |= hw::qp_attr::ACCESS;
    }
    if mask.contains(F::Qkey) {
        out.qkey = a.qkey;
        dm |= hw::qp_attr::QKEY;
    }
    if mask.contains(F::DestQpn) {
        if a.dest_qp_num > 0xff_ffff {
            return Err(EINVAL);
        }
        out.dest_qpn = a.dest_qp_num;
        dm |= hw::qp_attr::DEST_QPN;
    }
    if mask.contains(F::PathMtu) {
        let mtu = u8::try_from(a.path_mtu).map_err(|_| EINVAL)?;
        hw::mtu_bytes(mtu).ok_or(EINVAL)?;
        out.path_mtu = mtu;
        dm |= hw::qp_attr::PATH_MTU;
    }
    if mask.contains(F::Timeout) {
        if a.timeout > 31 {
            return Err(EINVAL);
        }
        out.timeout = a.timeout;
        dm |= hw::qp_attr::TIMEOUT;
    }
    if mask.contains(F::RetryCnt) {
        if a.retry_cnt > 7 {
            return Err(EINVAL);
        }
        out.retry_cnt = a.retry_cnt;
        dm |= hw::qp_attr::RETRY_CNT;
    }
    if mask.contains(F::RnrRetry) {
        if a.rnr_retry > 7 {
            return Err(EINVAL);
        }
        out.rnr_retry = a.rnr_retry;
        dm |= hw::qp_attr::RNR_RETRY;
    }
    if mask.contains(F::MinRnrTimer) {
        if a.min_rnr_timer > 31 {
            return Err(EINVAL);
        }
        out.min_rnr_timer = a.min_rnr_timer;
        dm |= hw::qp_attr::MIN_RNR_TIMER;
    }
    if mask.contains(F::RqPsn) {
        out.rq_psn = a.rq_psn & 0xff_ffff;
        dm |= hw::qp_attr::RQ_PSN;
    }
    if mask.contains(F::SqPsn) {
        out.sq_psn = a.sq_psn & 0xff_ffff;
        dm |= hw::qp_attr::SQ_PSN;
    }
    if mask.contains(F::MaxQpRdAtomic) {
        if a.max_rd_atomic > hw::MAX_RD_ATOMIC {
            return Err(EINVAL);
        }
        out.max_rd_atomic = a.max_rd_atomic;
        dm |= hw::qp_attr::MAX_RD_ATOMIC;
    }
    if mask.contains(F::MaxDestRdAtomic) {
        if a.max_dest_rd_atomic > hw::MAX_RD_ATOMIC {
            return Err(EINVAL);
        }
        out.max_dest_rd_atomic = a.max_dest_rd_atomic;
        dm |= hw::qp_attr::MAX_DEST_RD_ATOMIC;
    }
    if let Some(av) = &a.av {
        set_av(&mut out, av, qp_num);
        dm |= hw::qp_attr::AV;
    }
    Ok((out, dm))
}

/// Puts an address vector into device attributes; the UDP source port follows the flow
/// label, or the QP pair when there is none, as RoCEv2 peers expect.
pub(crate) fn set_av(out: &mut hw::QpAttrs, av: &Av, qp_num: u32) {
    out.dgid = av.dgid;
    out.sgid_index = av.sgid_index;
    out.hop_limit = av.hop_limit;
    out.traffic_class = av.traffic_class;
    out.flow_label = av.flow_label;
    out.dmac = av.dmac;
    out.udp_sport = udp_sport(av.flow_label, qp_num, out.dest_qpn);
    out.vlan_id = av.vlan.unwrap_or(0);
    out.av_flags = 0;
    if av.ipv4 {
        out.av_flags |= hw::AV_FLAG_IPV4;
    }
    if av.vlan.is_some() {
        out.av_flags |= hw::AV_FLAG_VLAN;
    }
}

impl IbData<'_> {
    pub(crate) fn create_qp(
        &self,
        ctx: &UContext,
        pd: &Pd,
        attr: &mut QpInitAttr<'_, crate::ibdev::FerrdmaIb>,
        events: QpEvents,
        udata: &mut UData<'_>,
    ) -> Result<NewQp<Qp>> {
        let hw_type = match attr.qp_type {
            QpType::Rc => hw::QP_TYPE_RC,
            QpType::Ud => hw::QP_TYPE_UD,
            _ => return Err(EOPNOTSUPP),
        };
        if attr.create_flags != 0 || attr.has_srq {
            return Err(EOPNOTSUPP);
        }
        if udata.inlen() < CreateQpReq::SIZE || udata.outlen() < CreateQpResp::MIN_SIZE {
            return Err(EINVAL);
        }
        let mut b = [0u8; CreateQpReq::SIZE];
        udata.read_in(&mut b)?;
        let req = CreateQpReq::decode(&b);
        let c = attr.cap;
        let rings = QpRings::for_caps(
            c.max_send_wr,
            c.max_send_sge,
            c.max_inline_data,
            c.max_recv_wr,
            c.max_recv_sge,
            &self.caps,
        )?;
        let ring = self.claim_ring(ctx, req.user_wqe_bufs, true)?;
        let RingKind::Qp { sq_pages, rq_pages } = ring.kind else {
            ring.release();
            return Err(EINVAL);
        };
        let built = (|| -> Result<(PageList, PageList, u64)> {
            if rings.sq_pages() > sq_pages || rings.rq_pages() > rq_pages {
                return Err(EINVAL);
            }
            crate::fault::step()?;
            let sq = PageList::new(
                self.dev,
                ring.pages(0, rings.sq_pages())?,
                hw::QUEUE_PAGE_SIZE,
            )?;
            crate::fault::step()?;
            let rq = PageList::new(
                self.dev,
                ring.pages(sq_pages, rings.rq_pages())?,
                hw::QUEUE_PAGE_SIZE,
            )?;
            Ok((sq, rq, ring.page(sq_pages + rq_pages)?))
        })();
        let (sq, rq, shadow) = match built {
            Ok(v) => v,
            Err(e) => {
                ring.release();
                return Err(e);
            }
        };
        let limit = self.caps.max_qp.min(hw::MAX_QP);
        let Some(id) = self.ids.lock().qps.alloc_in(2, limit) else {
            ring.release();
            return Err(ENOMEM);
        };
        let undo = |e: Error| {
            self.ids.lock().qps.free(id);
            ring.release();
            e
        };
        let soft = new_soft(id).map_err(undo)?;
        let mut cmd = hw::CreateQp::decode(&[0; hw::CreateQp::SIZE]);
        cmd.hdr = header(hw::admin_op::CREATE_QP);
        cmd.qp_id = id;
        cmd.pd = pd.id();
        cmd.send_cq = attr.send_cq.id();
        cmd.recv_cq = attr.recv_cq.id();
        cmd.qp_type = hw_type;
        cmd.rq_shift = rings.rq_shift;
        cmd.db_page = ctx.db_page();
        cmd.sq_quanta = rings.sq_depth;
        cmd.rq_wqes = rings.actual_rq_size();
        cmd.sq_ring = sq.descriptor();
        cmd.rq_ring = rq.descriptor();
        cmd.shadow_addr = shadow;
        cmd.compl_ctx = req.user_compl_ctx;
        let tag = self.event_tags.next();
        cmd.event_tag = tag.raw();
        crate::fault::step().map_err(undo)?;
        self.admin(&cmd.encode()).map_err(undo)?;

        let caps = abi::QP_CAP_SEND_WITH_IMM
            | abi::QP_CAP_ROCE
            | if hw_type == hw::QP_TYPE_RC {
                abi::QP_CAP_WRITE_WITH_IMM
            } else {
                0
            };
        let resp = CreateQpResp {
            qp_id: id,
            actual_sq_size: rings.actual_sq_size(),
            actual_rq_size: rings.actual_rq_size(),
            qp_caps: caps,
        };
        if let Err(e) = crate::fault::step().and_then(|()| udata.respond(&resp.encode())) {
            let _ = self.destroy_object(hw::admin_op::DESTROY_QP, id);
            return Err(undo(e));
        }
        let qp = Qp {
            id,
            qp_type: attr.qp_type,
            cap: attr.cap,
            mem: QpMem::User {
                ring,
                _sq: sq,
                _rq: rq,
            },
            soft,
        };
        self.tables
            .lock()
            .set_qp(id, Some(Published::new(tag, events)));
        Ok(NewQp {
            value: qp,
            qp_num: id,
        })
    }

    pub(crate) fn modify_qp(
        &self,
        qp: &Qp,
        a: &QpAttr,
        mask: QpAttrMask,
        udata: Option<&mut UData<'_>>,
    ) -> Result {
        let mut soft = qp.soft.lock();
        // The driver's own state decides (as in irdma); a consumer's claim must match it.
        let cur = soft.state;
        if mask.contains(F::CurState) && a.cur_state != cur {
            return Err(EINVAL);
        }
        let next = if mask.contains(F::State) {
            a.state
        } else {
            cur
        };
        if !transition_ok(cur, next, qp.qp_type, mask) {
            return Err(EINVAL);
        }
        if next == QpState::Err && self.device_dead() {
            // The device cannot be told and need not be: it executes nothing any more, and
            // the driver completes a kernel QP's work requests as flushed itself. Refusing
            // would leave ULPs unable to drain (`ib_drain_qp` warns and gives up).
            soft.state = QpState::Err;
            if let Some(k) = qp.kernel_rings() {
                k.in_error.store(1, Relaxed);
                self.kick_dead_qp(k);
            }
            return Ok(());
        }

        // libirdma's reflush: a QP already in ERR is "moved" to ERR again to flush WQEs
        // posted since (irdma-abi §2.7). The table allows no other attribute with it.
        if cur == QpState::Err && next == QpState::Err {
            let mut flags = 0;
            if let Some(u) = udata {
                if u.inlen() >= ModifyQpReq::SIZE {
                    let mut b = [0u8; ModifyQpReq::SIZE];
                    u.read_in(&mut b)?;
                    let r = ModifyQpReq::decode(&b);
                    if r.sq_flush {
                        flags |= hw::MODIFY_QP_SQ_FLUSH;
                    }
                    if r.rq_flush {
                        flags |= hw::MODIFY_QP_RQ_FLUSH;
                    }
                }
            }
            let mut cmd = hw::ModifyQp::decode(&[0; hw::ModifyQp::SIZE]);
            cmd.hdr = header(hw::admin_op::MODIFY_QP);
            cmd.qp_id = qp.id;
            cmd.attr_mask = hw::qp_attr::STATE;
            cmd.flags = flags;
            cmd.attrs = soft.attrs;
            return self.admin(&cmd.encode()).map(|_| ());
        }
        // A QP cannot be reused after an error (the device keeps its ring indices).
        if soft.state == QpState::Err && next == QpState::Reset {
            return Err(EINVAL);
        }
        let (attrs, dm) = device_attrs(qp.id, &soft.attrs, a, mask)?;
        if dm != 0 {
            let mut cmd = hw::ModifyQp::decode(&[0; hw::ModifyQp::SIZE]);
            cmd.hdr = header(hw::admin_op::MODIFY_QP);
            cmd.qp_id = qp.id;
            cmd.attr_mask = dm;
            cmd.attrs = attrs;
            self.admin(&cmd.encode())?;
        }
        soft.attrs = attrs;
        soft.state = next;
        if let Some(k) = qp.kernel_rings() {
            k.qkey.store(attrs.qkey, Relaxed);
            k.in_error.store(u32::from(next == QpState::Err), Relaxed);
        }
        Ok(())
    }

    pub(crate) fn query_qp(&self, qp: &Qp) -> Result<QpQuery> {
        let mut soft = qp.soft.lock();
        // A fault moves the QP to ERR in the device without a modify_qp (irdma learns it
        // from the AE); the device's state is the truth.
        if soft.state != QpState::Err
            && self.query_device_qp(qp.id)?.attrs.state == hw::qp_state::ERR
        {
            soft.state = QpState::Err;
            if let Some(k) = qp.kernel_rings() {
                k.in_error.store(1, Relaxed);
            }
        }
        let s = *soft;
        drop(soft);
        let a = &s.attrs;
        let mut access = Access::empty();
        if a.access & hw::QP_ACCESS_REMOTE_WRITE != 0 {
            access |= AccessFlag::RemoteWrite;
        }
        if a.access & hw::QP_ACCESS_REMOTE_READ != 0 {
            access |= AccessFlag::RemoteRead;
        }
        Ok(QpQuery {
            state: s.state,
            path_mtu: a.path_mtu.into(),
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qpn,
            access,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            cap: qp.cap,
        })
    }

    /// Destroys the device QP, then forgets it. If DESTROY_QP fails on a live device nothing
    /// changes: the QP lives on in ib_core (which frees no QP whose destroy failed) and keeps
    /// its events. On a dead device the QP is forgotten and its memory abandoned: the ring's
    /// claim is dropped, so its registration can go, but the abandoned QP keeps a reference
    /// to it and with it the pinned pages.
    pub(crate) fn destroy_qp(&self, qp: &Qp) -> Result<Destroyed> {
        let how = self.retire(hw::admin_op::DESTROY_QP, qp.id)?;
        self.tables.lock().set_qp(qp.id, None);
        match &qp.mem {
            QpMem::User { ring, .. } => ring.release(),
            QpMem::Kernel(k) => self.forget_kernel_qp(k),
        }
        self.ids.lock().qps.free(qp.id);
        Ok(how)
    }
}

#[kunit_tests(ferrdma_qp)]
mod tests {
    use super::*;

    fn attr(state: QpState) -> QpAttr {
        QpAttr {
            state,
            cur_state: QpState::Reset,
            path_mtu: 3,
            qkey: 0x1111_1111,
            rq_psn: 0x0100_0005,
            sq_psn: 7,
            dest_qp_num: 9,
            access: AccessFlag::RemoteWrite | AccessFlag::RemoteRead | AccessFlag::LocalWrite,
            pkey_index: 0,
            port: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            av: None,
        }
    }

    fn zero() -> hw::QpAttrs {
        hw::QpAttrs::decode(&[0; hw::QpAttrs::SIZE])
    }

    #[test]
    fn rtr_attributes_translate() {
        let mask =
            F::State | F::PathMtu | F::DestQpn | F::RqPsn | F::MaxDestRdAtomic | F::MinRnrTimer;
        let r = device_attrs(5, &zero(), &attr(QpState::Rtr), mask);
        assert!(r.is_ok());
        if let Ok((a, dm)) = r {
            assert_eq!(a.state, hw::qp_state::RTR);
            assert_eq!((a.path_mtu, a.dest_qpn, a.rq_psn), (3, 9, 5));
            assert_eq!((a.max_dest_rd_atomic, a.min_rnr_timer), (1, 12));
            assert_eq!(
                dm,
                hw::qp_attr::STATE
                    | hw::qp_attr::PATH_MTU
                    | hw::qp_attr::DEST_QPN
                    | hw::qp_attr::RQ_PSN
                    | hw::qp_attr::MAX_DEST_RD_ATOMIC
                    | hw::qp_attr::MIN_RNR_TIMER
            );
        }
    }

    #[test]
    fn bad_values_are_rejected() {
        let z = zero();
        let mut a = attr(QpState::Rts);
        a.path_mtu = 6;
        assert!(device_attrs(2, &z, &a, F::PathMtu.into()).is_err());
        a = attr(QpState::Rts);
        a.retry_cnt = 8;
        assert!(device_attrs(2, &z, &a, F::RetryCnt.into()).is_err());
        a = attr(QpState::Rts);
        a.max_rd_atomic = 17;
        assert!(device_attrs(2, &z, &a, F::MaxQpRdAtomic.into()).is_err());
        a = attr(QpState::Rts);
        a.dest_qp_num = 1 << 24;
        assert!(device_attrs(2, &z, &a, F::DestQpn.into()).is_err());
        a = attr(QpState::Init);
        a.pkey_index = 1;
        assert!(device_attrs(2, &z, &a, F::PkeyIndex.into()).is_err());
        // Alternate paths and rate limits are not implemented.
        assert!(matches!(device_attrs(2, &z, &a, F::AltPath.into()), Err(e) if e == EOPNOTSUPP));
        assert!(matches!(device_attrs(2, &z, &a, F::RateLimit.into()), Err(e) if e == EOPNOTSUPP));
    }

    #[test]
    fn access_and_av() {
        let r = device_attrs(2, &zero(), &attr(QpState::Init), F::AccessFlags.into());
        assert!(
            matches!(r, Ok((a, _)) if a.access == hw::QP_ACCESS_REMOTE_WRITE | hw::QP_ACCESS_REMOTE_READ)
        );
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        let av = Av {
            dmac: [2, 0, 0, 0, 0, 1],
            dgid: g,
            sgid: g,
            sgid_index: 3,
            smac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            ipv4: true,
        };
        let mut out = zero();
        out.dest_qpn = 3;
        set_av(&mut out, &av, 2);
        assert_eq!(out.udp_sport, 0xc006);
        assert_eq!(out.av_flags, hw::AV_FLAG_IPV4);
        assert_eq!(
            (out.sgid_index, out.hop_limit, out.dmac),
            (3, 64, [2, 0, 0, 0, 0, 1])
        );
    }
}
