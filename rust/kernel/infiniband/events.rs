// SPDX-License-Identifier: GPL-2.0

//! Completion and asynchronous event delivery to the consumers of CQs and QPs.
//!
//! An interrupt handler finds a CQ or QP by number in a driver table and must never call into
//! an object that ib_core has already freed. The driver gets a [`CqEvents`] or [`QpEvents`]
//! handle at create time; the abstraction revokes it when destroy succeeds, under the lock the
//! delivery takes, so a handle that is still in some table turns into a no-op instead of a
//! use after free.

use crate::{bindings, prelude::*, sync::Arc, sync::SpinLockIrq};

/// A raw object pointer that may be revoked.
struct Target<T>(*mut T);

// SAFETY: The pointer is only dereferenced under the lock, while the object is live.
unsafe impl<T> Send for Target<T> {}

/// Delivers events of one CQ.
///
/// # Invariants
///
/// While `cq` is non-null it points to a live `ib_cq` (it is cleared before ib_core frees it).
#[pin_data]
pub struct CqEventsInner {
    #[pin]
    cq: SpinLockIrq<Target<bindings::ib_cq>>,
}

/// A handle to deliver events of one CQ; see the module documentation.
pub type CqEvents = Arc<CqEventsInner>;

impl CqEventsInner {
    pub(crate) fn new(cq: *mut bindings::ib_cq) -> Result<CqEvents> {
        Arc::pin_init(
            pin_init!(Self { cq <- crate::new_spinlock_irq!(Target(cq), "ib_cq_events") }),
            GFP_ATOMIC,
        )
    }

    /// Calls the CQ's completion handler (`comp_handler`), if the CQ still exists.
    pub fn completion(&self) {
        let guard = self.cq.lock();
        let cq = guard.0;
        if cq.is_null() {
            return;
        }
        // SAFETY: Non-null means live (type invariant), and the lock keeps destroy from
        // finishing while the handler runs.
        unsafe {
            if let Some(handler) = (*cq).comp_handler {
                handler(cq, (*cq).cq_context);
            }
        }
    }

    /// Reports a CQ error (`IB_EVENT_CQ_ERR`) to the CQ's event handler.
    pub fn error(&self) {
        let guard = self.cq.lock();
        let cq = guard.0;
        if cq.is_null() {
            return;
        }
        // SAFETY: As in `completion`; `ev` lives across the call.
        unsafe {
            if let Some(handler) = (*cq).event_handler {
                let mut ev: bindings::ib_event = core::mem::zeroed();
                ev.device = (*cq).device;
                ev.element.cq = cq;
                ev.event = bindings::ib_event_type_IB_EVENT_CQ_ERR;
                handler(&mut ev, (*cq).cq_context);
            }
        }
    }

    pub(crate) fn revoke(&self) {
        self.cq.lock().0 = core::ptr::null_mut();
    }
}

/// Asynchronous QP events (`enum ib_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpEvent {
    /// Local catastrophic error.
    Fatal = bindings::ib_event_type_IB_EVENT_QP_FATAL,
    /// Invalid request (responder).
    RequestError = bindings::ib_event_type_IB_EVENT_QP_REQ_ERR,
    /// Access violation.
    AccessError = bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
    /// First packet received in RTR.
    CommEstablished = bindings::ib_event_type_IB_EVENT_COMM_EST,
    /// The SQ is drained (SQD).
    SqDrained = bindings::ib_event_type_IB_EVENT_SQ_DRAINED,
    /// Last WQE reached (SRQ-attached QPs).
    LastWqeReached = bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
}

/// Delivers asynchronous events of one QP.
///
/// # Invariants
///
/// While `qp` is non-null it points to a live `ib_qp`.
#[pin_data]
pub struct QpEventsInner {
    #[pin]
    qp: SpinLockIrq<Target<bindings::ib_qp>>,
}

/// A handle to deliver events of one QP; see the module documentation.
pub type QpEvents = Arc<QpEventsInner>;

impl QpEventsInner {
    pub(crate) fn new(qp: *mut bindings::ib_qp) -> Result<QpEvents> {
        Arc::pin_init(
            pin_init!(Self { qp <- crate::new_spinlock_irq!(Target(qp), "ib_qp_events") }),
            GFP_KERNEL,
        )
    }

    /// Reports `event` to the QP's event handler, if the QP still exists.
    pub fn event(&self, event: QpEvent) {
        let guard = self.qp.lock();
        let qp = guard.0;
        if qp.is_null() {
            return;
        }
        // SAFETY: Non-null means live (type invariant); `ev` lives across the call.
        unsafe {
            if let Some(handler) = (*qp).event_handler {
                let mut ev: bindings::ib_event = core::mem::zeroed();
                ev.device = (*qp).device;
                ev.element.qp = qp;
                ev.event = event as u32;
                handler(&mut ev, (*qp).qp_context);
            }
        }
    }

    pub(crate) fn revoke(&self) {
        self.qp.lock().0 = core::ptr::null_mut();
    }
}
