// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (`struct ib_qp`): creation, the state machine's attributes, destruction.

use super::{
    av::Av,
    cq::cq_data,
    device::Device,
    events::{QpEvents, QpEventsInner},
    mr::Access,
    ucontext::{udata_context, CoreObject, PdObject},
    udata::UData,
    wc::QpRef,
    AbandonedObject, Destroyed, Driver,
};
use crate::{bindings, ffi::c_int, prelude::*};
use core::ptr::NonNull;

/// QP transport types a provider may be asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
    /// The general services QP (QP1).
    Gsi,
    /// Anything else (UC, XRC, raw packet, ...), by its `ib_qp_type` value.
    Other(u32),
}

impl QpType {
    fn from_raw(t: bindings::ib_qp_type) -> Self {
        match t {
            bindings::ib_qp_type_IB_QPT_RC => Self::Rc,
            bindings::ib_qp_type_IB_QPT_UD => Self::Ud,
            bindings::ib_qp_type_IB_QPT_GSI => Self::Gsi,
            other => Self::Other(other),
        }
    }

    fn to_raw(self) -> bindings::ib_qp_type {
        match self {
            Self::Rc => bindings::ib_qp_type_IB_QPT_RC,
            Self::Ud => bindings::ib_qp_type_IB_QPT_UD,
            Self::Gsi => bindings::ib_qp_type_IB_QPT_GSI,
            Self::Other(t) => t,
        }
    }
}

/// Queue capacities (`struct ib_qp_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Send work requests.
    pub max_send_wr: u32,
    /// Receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
    /// Inline data bytes per send.
    pub max_inline_data: u32,
}

impl QpCap {
    fn from_raw(c: &bindings::ib_qp_cap) -> Self {
        Self {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }

    fn write_to(&self, c: &mut bindings::ib_qp_cap) {
        c.max_send_wr = self.max_send_wr;
        c.max_recv_wr = self.max_recv_wr;
        c.max_send_sge = self.max_send_sge;
        c.max_recv_sge = self.max_recv_sge;
        c.max_inline_data = self.max_inline_data;
    }
}

/// Creation attributes of a QP (`struct ib_qp_init_attr`).
pub struct QpInitAttr<'a, T: Driver> {
    /// Transport type.
    pub qp_type: QpType,
    /// CQ of the send queue.
    pub send_cq: &'a T::Cq,
    /// CQ of the receive queue.
    pub recv_cq: &'a T::Cq,
    /// Requested capacities; the driver may update them to what it provides.
    pub cap: QpCap,
    /// Whether every send completion is signalled (`IB_SIGNAL_ALL_WR`).
    pub signal_all: bool,
    /// `IB_QP_CREATE_*` flags.
    pub create_flags: u32,
    /// Whether a shared receive queue is attached.
    pub has_srq: bool,
    /// The port (GSI QPs).
    pub port: u32,
}

/// A created QP, as the driver returns it.
pub struct NewQp<Q> {
    /// The driver's data.
    pub value: Q,
    /// The QP number.
    pub qp_num: u32,
}

/// QP states (`enum ib_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpState {
    /// Reset.
    Reset = bindings::ib_qp_state_IB_QPS_RESET,
    /// Initialised.
    Init = bindings::ib_qp_state_IB_QPS_INIT,
    /// Ready to receive.
    Rtr = bindings::ib_qp_state_IB_QPS_RTR,
    /// Ready to send.
    Rts = bindings::ib_qp_state_IB_QPS_RTS,
    /// Send queue drained.
    Sqd = bindings::ib_qp_state_IB_QPS_SQD,
    /// Send queue error.
    Sqe = bindings::ib_qp_state_IB_QPS_SQE,
    /// Error.
    Err = bindings::ib_qp_state_IB_QPS_ERR,
}

impl QpState {
    /// Decodes an `ib_qp_state`.
    pub fn from_raw(s: u32) -> Result<Self> {
        Ok(match s {
            bindings::ib_qp_state_IB_QPS_RESET => Self::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => Self::Init,
            bindings::ib_qp_state_IB_QPS_RTR => Self::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => Self::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => Self::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => Self::Sqe,
            bindings::ib_qp_state_IB_QPS_ERR => Self::Err,
            _ => return Err(EINVAL),
        })
    }
}

crate::impl_flags!(
    /// The attributes a `modify_qp` sets (`enum ib_qp_attr_mask`).
    ///
    /// It holds the bits the caller passed, unknown ones included (see
    /// [`QpAttrMask::from_raw`]), so that a driver can refuse what it does not support.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct QpAttrMask(u32);

    /// One attribute of a `modify_qp`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum QpAttrFlag {
        /// `qp_state`.
        State = bindings::ib_qp_attr_mask_IB_QP_STATE,
        /// `cur_qp_state`.
        CurState = bindings::ib_qp_attr_mask_IB_QP_CUR_STATE,
        /// `en_sqd_async_notify`.
        EnSqdAsyncNotify = bindings::ib_qp_attr_mask_IB_QP_EN_SQD_ASYNC_NOTIFY,
        /// `qp_access_flags`.
        AccessFlags = bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS,
        /// `pkey_index`.
        PkeyIndex = bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX,
        /// `port_num`.
        Port = bindings::ib_qp_attr_mask_IB_QP_PORT,
        /// `qkey`.
        Qkey = bindings::ib_qp_attr_mask_IB_QP_QKEY,
        /// `ah_attr`.
        Av = bindings::ib_qp_attr_mask_IB_QP_AV,
        /// `path_mtu`.
        PathMtu = bindings::ib_qp_attr_mask_IB_QP_PATH_MTU,
        /// `timeout`.
        Timeout = bindings::ib_qp_attr_mask_IB_QP_TIMEOUT,
        /// `retry_cnt`.
        RetryCnt = bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT,
        /// `rnr_retry`.
        RnrRetry = bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY,
        /// `rq_psn`.
        RqPsn = bindings::ib_qp_attr_mask_IB_QP_RQ_PSN,
        /// `max_rd_atomic`.
        MaxQpRdAtomic = bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC,
        /// Alternate path (APM).
        AltPath = bindings::ib_qp_attr_mask_IB_QP_ALT_PATH,
        /// `min_rnr_timer`.
        MinRnrTimer = bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER,
        /// `sq_psn`.
        SqPsn = bindings::ib_qp_attr_mask_IB_QP_SQ_PSN,
        /// `max_dest_rd_atomic`.
        MaxDestRdAtomic = bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC,
        /// Path migration state (APM).
        PathMigState = bindings::ib_qp_attr_mask_IB_QP_PATH_MIG_STATE,
        /// `cap` (resize).
        Cap = bindings::ib_qp_attr_mask_IB_QP_CAP,
        /// `dest_qp_num`.
        DestQpn = bindings::ib_qp_attr_mask_IB_QP_DEST_QPN,
        /// Rate limit.
        RateLimit = bindings::ib_qp_attr_mask_IB_QP_RATE_LIMIT,
    }
);

impl QpAttrMask {
    /// The mask as ib_core passed it, bits no [`QpAttrFlag`] names included.
    pub const fn from_raw(bits: u32) -> Self {
        Self(bits)
    }

    /// The raw mask.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether the mask sets an attribute outside `supported`.
    pub const fn exceeds(self, supported: QpAttrMask) -> bool {
        self.0 & !supported.0 != 0
    }
}

/// QP attributes of a `modify_qp` (fields outside the mask are unspecified).
#[derive(Clone, Copy, Debug)]
pub struct QpAttr {
    /// Target state.
    pub state: QpState,
    /// The state the consumer believes the QP is in (with `CUR_STATE`).
    pub cur_state: QpState,
    /// Path MTU (IB enum, 1..=5).
    pub path_mtu: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// Remote access rights.
    pub access: Access,
    /// P_Key index.
    pub pkey_index: u16,
    /// Port.
    pub port: u32,
    /// RDMA READs as requester.
    pub max_rd_atomic: u8,
    /// RDMA READs as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// The address vector (with `AV`); `None` without it.
    pub av: Option<Av>,
}

/// Whether ib_core's QP state table allows going from `cur` to `next` of a QP of type `ty`
/// with attribute `mask` (`ib_modify_qp_is_ok`).
///
/// The table has a column per type below `IB_QPT_MAX` only; any other type (e.g.
/// `IB_QPT_DRIVER`, which ib_core passes for driver-specific QPs) has no transitions.
pub fn transition_ok(cur: QpState, next: QpState, ty: QpType, mask: QpAttrMask) -> bool {
    let ty = ty.to_raw();
    // `ib_modify_qp_is_ok` indexes `req_param[type]` and `opt_param[type]` unchecked.
    if ty >= bindings::ib_qp_type_IB_QPT_MAX {
        return false;
    }
    // SAFETY: A pure lookup in a static table: both states are `enum ib_qp_state` values
    // (a `QpState`) and `ty` is below `IB_QPT_MAX`, so every index is in bounds.
    unsafe { bindings::ib_modify_qp_is_ok(cur as u32, next as u32, ty, mask.bits()) }
}

/// The object of a QP of driver `T`: its event handle and the driver's data.
pub(crate) type QpObject<T> = CoreObject<bindings::ib_qp, (QpEvents, <T as Driver>::Qp)>;

/// The driver data of a live QP.
///
/// # Safety
///
/// `qp` is a QP of a device of driver `T` that `create_qp` initialised and that is not yet
/// destroyed, for the whole of `'a`.
pub(crate) unsafe fn qp_data<'a, T: Driver>(qp: *mut bindings::ib_qp) -> &'a T::Qp {
    // SAFETY: Guaranteed by the caller.
    unsafe { &(*qp.cast::<QpObject<T>>()).data.assume_init_ref().1 }
}

/// `create_qp`.
///
/// # Safety
///
/// Called by ib_core with a zeroed object of `size_ib_qp` bytes whose `device` and `pd` are
/// set.
pub(crate) unsafe extern "C" fn create_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    init: *mut bindings::ib_qp_init_attr,
    udata: *mut bindings::ib_udata,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: `qp` and `init` are valid (callback contract).
        let (dev, pd, ia) = unsafe { (Device::<T>::from_raw((*qp).device), (*qp).pd, &mut *init) };
        if pd.is_null() || ia.send_cq.is_null() || ia.recv_cq.is_null() {
            return Err(EINVAL);
        }
        if !ia.xrcd.is_null() || !ia.rwq_ind_tbl.is_null() || ia.source_qpn != 0 {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: The PD and CQs are live objects of this device that outlive the call.
        let (pd_data, send_cq, recv_cq) = unsafe {
            (
                (*pd.cast::<PdObject<T>>()).data.assume_init_ref(),
                cq_data::<T>(ia.send_cq),
                cq_data::<T>(ia.recv_cq),
            )
        };
        let mut attr = QpInitAttr::<T> {
            qp_type: QpType::from_raw(ia.qp_type),
            send_cq,
            recv_cq,
            cap: QpCap::from_raw(&ia.cap),
            signal_all: ia.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR,
            create_flags: ia.create_flags,
            has_srq: !ia.srq.is_null(),
            port: ia.port_num,
        };
        let events = QpEventsInner::new(qp)?;
        let handle = events.clone();
        let create = || {
            if udata.is_null() {
                let name = QpRef::new(NonNull::new(qp).ok_or(EINVAL)?);
                // SAFETY: Called from an ib_core callback.
                return unsafe {
                    dev.with_data(|d| T::create_kernel_qp(d, pd_data, &mut attr, handle, name))
                };
            }
            // SAFETY: `udata` is valid for this call.
            let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EOPNOTSUPP)?;
            // SAFETY: As above.
            let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Called from an ib_core callback.
            unsafe { dev.with_data(|d| T::create_qp(d, ctx, pd_data, &mut attr, handle, &mut ud)) }
        };
        let created = create();
        // ib_core frees the QP when this fails: a handle the driver may have kept (against
        // its contract) must not reach it.
        let new = created.inspect_err(|_| events.revoke())?;
        attr.cap.write_to(&mut ia.cap);
        // SAFETY: `qp` is the head of a `QpObject<T>`, not yet visible to anyone else.
        unsafe {
            (*qp).qp_num = new.qp_num;
            (*qp.cast::<QpObject<T>>()).data.write((events, new.value));
        }
        Ok(0)
    })
}

/// `modify_qp`.
///
/// # Safety
///
/// Called by ib_core with a live QP of driver `T` and valid pointers.
pub(crate) unsafe extern "C" fn modify_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    attr: *mut bindings::ib_qp_attr,
    mask: c_int,
    udata: *mut bindings::ib_udata,
) -> c_int {
    crate::error::from_result(|| {
        let mask = QpAttrMask::from_raw(mask as u32);
        // SAFETY: `attr` is valid (callback contract).
        let a = unsafe { &*attr };
        let av = if mask.contains(QpAttrFlag::Av) {
            // SAFETY: With `IB_QP_AV` the AV was resolved and its source GID is held.
            Some(unsafe { Av::from_raw(&a.ah_attr) }?)
        } else {
            None
        };
        let decoded = QpAttr {
            state: if mask.contains(QpAttrFlag::State) {
                QpState::from_raw(a.qp_state)?
            } else {
                QpState::Reset
            },
            cur_state: if mask.contains(QpAttrFlag::CurState) {
                QpState::from_raw(a.cur_qp_state)?
            } else {
                QpState::Reset
            },
            path_mtu: a.path_mtu,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            access: Access::from_raw(a.qp_access_flags as u32),
            pkey_index: a.pkey_index,
            port: a.port_num,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            av,
        };
        // SAFETY: `udata` is null or valid for this call.
        let mut ud = unsafe { UData::from_raw(udata) };
        // SAFETY: The QP is live and initialised (callback contract).
        let (dev, data) = unsafe {
            (
                Device::<T>::from_raw((*qp).device),
                &(*qp.cast::<QpObject<T>>()).data.assume_init_ref().1,
            )
        };
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| T::modify_qp(d, data, &decoded, mask, ud.as_mut())) }?;
        Ok(0)
    })
}

/// What `query_qp` reports.
#[derive(Clone, Copy, Debug)]
pub struct QpQuery {
    /// Current state.
    pub state: QpState,
    /// Path MTU (IB enum).
    pub path_mtu: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// Remote access rights.
    pub access: Access,
    /// RDMA READs as requester.
    pub max_rd_atomic: u8,
    /// RDMA READs as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Capacities.
    pub cap: QpCap,
}

/// `query_qp`.
///
/// # Safety
///
/// Called by ib_core with a live QP of driver `T` and valid pointers.
pub(crate) unsafe extern "C" fn query_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    attr: *mut bindings::ib_qp_attr,
    _mask: c_int,
    init: *mut bindings::ib_qp_init_attr,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: The QP is live and initialised (callback contract).
        let (dev, data) = unsafe {
            (
                Device::<T>::from_raw((*qp).device),
                &(*qp.cast::<QpObject<T>>()).data.assume_init_ref().1,
            )
        };
        // SAFETY: Called from an ib_core callback.
        let q = unsafe { dev.with_data(|d| T::query_qp(d, data)) }?;
        // SAFETY: `attr` and `init` are valid for writes (callback contract).
        let (a, ia) = unsafe { (&mut *attr, &mut *init) };
        a.qp_state = q.state as u32;
        a.cur_qp_state = q.state as u32;
        a.path_mtu = q.path_mtu;
        a.qkey = q.qkey;
        a.rq_psn = q.rq_psn;
        a.sq_psn = q.sq_psn;
        a.dest_qp_num = q.dest_qp_num;
        a.qp_access_flags = q.access.bits() as c_int;
        a.max_rd_atomic = q.max_rd_atomic;
        a.max_dest_rd_atomic = q.max_dest_rd_atomic;
        a.min_rnr_timer = q.min_rnr_timer;
        a.timeout = q.timeout;
        a.retry_cnt = q.retry_cnt;
        a.rnr_retry = q.rnr_retry;
        a.port_num = 1;
        q.cap.write_to(&mut a.cap);
        q.cap.write_to(&mut ia.cap);
        Ok(0)
    })
}

/// `destroy_qp`.
///
/// # Safety
///
/// Called by ib_core once for a QP `create_qp` initialised.
pub(crate) unsafe extern "C" fn destroy_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    let obj = qp.cast::<QpObject<T>>();
    // SAFETY: The QP is live and initialised (function contract).
    let (dev, data) = unsafe {
        (
            Device::<T>::from_raw((*qp).device),
            (*obj).data.assume_init_ref(),
        )
    };
    // SAFETY: Called from an ib_core callback.
    let how = match unsafe { dev.with_data(|d| T::destroy_qp(d, &data.1)) } {
        Ok(how) => how,
        Err(e) => return e.to_errno(),
    };
    data.0.revoke();
    if how == Destroyed::Abandoned {
        // SAFETY: Initialised by `create_qp`, moved out once and not used again; ib_core
        // frees the memory afterwards.
        let (_events, qp) = unsafe { (*obj).data.assume_init_read() };
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| T::abandon(d, AbandonedObject::Qp(qp))) };
    } else {
        // SAFETY: Initialised by `create_qp`, dropped once; ib_core frees the memory
        // afterwards.
        unsafe { (*obj).data.assume_init_drop() };
    }
    0
}

#[macros::kunit_tests(rust_infiniband_qp)]
mod tests {
    use super::*;

    fn init() -> QpAttrMask {
        QpAttrFlag::State | QpAttrFlag::PkeyIndex | QpAttrFlag::Port | QpAttrFlag::AccessFlags
    }

    #[test]
    fn transition_ok_follows_ib_cores_table_for_known_types() {
        assert!(transition_ok(
            QpState::Reset,
            QpState::Init,
            QpType::Rc,
            init()
        ));
        assert!(!transition_ok(
            QpState::Reset,
            QpState::Init,
            QpType::Rc,
            QpAttrFlag::State.into()
        ));
        // UC is in the table although this enum has no name for it.
        let uc = QpType::Other(bindings::ib_qp_type_IB_QPT_UC);
        assert!(transition_ok(QpState::Reset, QpState::Init, uc, init()));
        assert!(transition_ok(
            QpState::Reset,
            QpState::Reset,
            QpType::Ud,
            QpAttrMask::empty()
        ));
    }

    #[test]
    fn transition_ok_refuses_qp_types_outside_ib_cores_table() {
        // ib_modify_qp_is_ok() indexes `req_param[type]`/`opt_param[type]`, arrays of
        // IB_QPT_MAX entries: these types would read past them (IB_QPT_DRIVER is what
        // ib_core passes for driver-specific QPs). Values far beyond would fault, so only
        // ones that stay inside the static table are probed here.
        for t in [
            bindings::ib_qp_type_IB_QPT_MAX,
            bindings::ib_qp_type_IB_QPT_MAX + 1,
            bindings::ib_qp_type_IB_QPT_DRIVER,
        ] {
            let ty = QpType::Other(t);
            assert!(!transition_ok(
                QpState::Reset,
                QpState::Reset,
                ty,
                QpAttrMask::empty()
            ));
            assert!(!transition_ok(QpState::Reset, QpState::Init, ty, init()));
            assert!(!transition_ok(
                QpState::Rts,
                QpState::Err,
                ty,
                QpAttrFlag::State.into()
            ));
        }
    }
}
