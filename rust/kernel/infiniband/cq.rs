// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`struct ib_cq`).

use super::{
    device::Device,
    events::{CqEvents, CqEventsInner},
    ucontext::{udata_context, CoreObject},
    udata::UData,
    AbandonedObject, Destroyed, Driver,
};
use crate::{bindings, ffi::c_int, prelude::*};

/// Creation attributes of a CQ (`struct ib_cq_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct CqInitAttr {
    /// Entries requested (as passed by the consumer; libirdma passes its ring size).
    pub cqe: u32,
    /// Completion vector (`0..num_comp_vectors`, checked by ib_core).
    pub comp_vector: u32,
    /// `IB_UVERBS_CQ_FLAGS_*`.
    pub flags: u32,
}

/// A created CQ, as the driver returns it.
pub struct NewCq<C> {
    /// The driver's data.
    pub value: C,
    /// The capacity reported to the consumer (`ib_cq.cqe`).
    pub cqe: u32,
}

/// The object of a CQ of driver `T`: its event handle and the driver's data.
pub(crate) type CqObject<T> = CoreObject<bindings::ib_cq, (CqEvents, <T as Driver>::Cq)>;

/// The driver data of a live CQ.
///
/// # Safety
///
/// `cq` is a CQ of a device of driver `T` that `create_cq` initialised and that is not yet
/// destroyed, for the whole of `'a`.
pub(crate) unsafe fn cq_data<'a, T: Driver>(cq: *mut bindings::ib_cq) -> &'a T::Cq {
    // SAFETY: Guaranteed by the caller.
    unsafe { &(*cq.cast::<CqObject<T>>()).data.assume_init_ref().1 }
}

/// `create_cq`.
///
/// # Safety
///
/// Called by ib_core with a zeroed object of `size_ib_cq` bytes.
pub(crate) unsafe extern "C" fn create_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    attr: *const bindings::ib_cq_init_attr,
    attrs: *mut bindings::uverbs_attr_bundle,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: `attr` and `cq` are valid (callback contract).
        let (init, dev) = unsafe {
            (
                CqInitAttr {
                    cqe: (*attr).cqe,
                    comp_vector: (*attr).comp_vector,
                    flags: (*attr).flags,
                },
                Device::<T>::from_raw((*cq).device),
            )
        };
        let events = CqEventsInner::new(cq)?;
        let handle = events.clone();
        let create = || {
            if attrs.is_null() {
                // A kernel consumer (ib_alloc_cq and friends).
                // SAFETY: Called from an ib_core callback.
                return unsafe { dev.with_data(|d| T::create_kernel_cq(d, &init, handle)) };
            }
            // SAFETY: The driver udata is the first member of the bundle
            // (`rdma_udata_to_uverbs_attr_bundle`).
            let udata = attrs.cast::<bindings::ib_udata>();
            // SAFETY: A uverbs command on a device of driver `T`.
            let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EINVAL)?;
            // SAFETY: As above; nothing else accesses the udata during the call.
            let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Called from an ib_core callback.
            unsafe { dev.with_data(|d| T::create_cq(d, ctx, &init, handle, &mut ud)) }
        };
        let created = create();
        // ib_core frees the CQ when this fails: a handle the driver may have kept (against
        // its contract) must not reach it.
        let new = created.inspect_err(|_| events.revoke())?;
        let Ok(cqe) = c_int::try_from(new.cqe) else {
            // The device object exists: undo it before ib_core frees the CQ.
            // SAFETY: Called from an ib_core callback.
            if let Err(e) = unsafe { dev.with_data(|d| T::destroy_cq(d, &new.value)) } {
                pr_err!(
                    "infiniband: undoing a CQ of {} entries failed ({:?})\n",
                    new.cqe,
                    e
                );
            }
            events.revoke();
            return Err(EINVAL);
        };
        // SAFETY: `cq` is the head of a `CqObject<T>`, not yet visible to anyone else.
        unsafe {
            (*cq).cqe = cqe;
            (*cq.cast::<CqObject<T>>()).data.write((events, new.value));
        }
        Ok(0)
    })
}

/// `destroy_cq`.
///
/// A user CQ whose destroy fails stays alive in ib_core (`ib_destroy_cq_user` returns the
/// error and frees nothing; the handle stays valid), so it keeps its data and its events.
/// A kernel CQ (`udata` null) is gone whatever the driver answers: `ib_free_cq` frees it
/// even when `destroy_cq` fails. Its event handle is therefore revoked and its data dropped
/// unconditionally, and the call reports success, so that the legacy `ib_destroy_cq` (which
/// would keep the memory on an error) cannot be told the CQ still exists when its data is
/// gone; the driver's error is logged.
///
/// # Safety
///
/// Called by ib_core once for a CQ `create_cq` initialised.
pub(crate) unsafe extern "C" fn destroy_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    udata: *mut bindings::ib_udata,
) -> c_int {
    let obj = cq.cast::<CqObject<T>>();
    // SAFETY: The CQ is live and initialised (function contract).
    let (dev, data) = unsafe {
        (
            Device::<T>::from_raw((*cq).device),
            (*obj).data.assume_init_ref(),
        )
    };
    // SAFETY: Called from an ib_core callback.
    let res = unsafe { dev.with_data(|d| T::destroy_cq(d, &data.1)) };
    let abandoned = res == Ok(Destroyed::Abandoned);
    match destroy_outcome(res.map(|_| ()), udata.is_null()) {
        DestroyOutcome::Keep(e) => return e.to_errno(),
        DestroyOutcome::Drop(Some(e)) => {
            pr_err!(
                "infiniband: destroy of a kernel CQ failed ({:?}); dropped anyway\n",
                e
            )
        }
        DestroyOutcome::Drop(None) => {}
    }
    data.0.revoke();
    if abandoned {
        // SAFETY: Initialised by `create_cq`, moved out once and not used again; ib_core
        // frees the memory afterwards.
        let (_events, cq) = unsafe { (*obj).data.assume_init_read() };
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| T::abandon(d, AbandonedObject::Cq(cq))) };
    } else {
        // SAFETY: Initialised by `create_cq`, dropped once; ib_core frees the memory
        // afterwards.
        unsafe { (*obj).data.assume_init_drop() };
    }
    0
}

/// `resize_user_cq`: the driver's new capacity becomes `ib_cq.cqe`, which uverbs reports.
///
/// # Safety
///
/// Called by ib_core for a live CQ of driver `T` that `create_cq` initialised, with the
/// driver udata of the uverbs command.
pub(crate) unsafe extern "C" fn resize_user_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    cqe: u32,
    udata: *mut bindings::ib_udata,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: The CQ is live and initialised (function contract).
        let (dev, data) = unsafe { (Device::<T>::from_raw((*cq).device), cq_data::<T>(cq)) };
        // SAFETY: A uverbs command on a device of driver `T`.
        let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EINVAL)?;
        // SAFETY: As above; nothing else accesses the udata during the call.
        let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
        // SAFETY: Called from an ib_core callback.
        let new = unsafe { dev.with_data(|d| T::resize_user_cq(d, ctx, data, cqe, &mut ud)) }?;
        let new = c_int::try_from(new).map_err(|_| EINVAL)?;
        // SAFETY: `cq` is live. Concurrent resizes of the CQ may store here too: a volatile
        // store of a whole `int` (WRITE_ONCE) each, the last one wins, as in C drivers.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*cq).cqe), new) };
        Ok(0)
    })
}

/// What a destroy callback does with the object after the driver's answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DestroyOutcome {
    /// ib_core keeps the object: keep its data and event handle, return the error.
    Keep(Error),
    /// ib_core frees the object: revoke its event handle and drop its data (the driver's
    /// error, if any, is only reported).
    Drop(Option<Error>),
}

/// The outcome of a destroy the driver answered with `res`, for an object that ib_core frees
/// even on an error (`core_frees_anyway`: a kernel CQ) or only on success (everything else).
pub(crate) fn destroy_outcome(res: Result, core_frees_anyway: bool) -> DestroyOutcome {
    match res {
        Ok(()) => DestroyOutcome::Drop(None),
        Err(e) if core_frees_anyway => DestroyOutcome::Drop(Some(e)),
        Err(e) => DestroyOutcome::Keep(e),
    }
}

#[macros::kunit_tests(rust_infiniband_cq)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_destroy_keeps_objects_ib_core_keeps() {
        assert_eq!(destroy_outcome(Err(EIO), false), DestroyOutcome::Keep(EIO));
        assert_eq!(destroy_outcome(Ok(()), false), DestroyOutcome::Drop(None));
    }

    #[test]
    fn a_kernel_cq_is_revoked_and_dropped_even_when_its_destroy_fails() {
        assert_eq!(
            destroy_outcome(Err(EIO), true),
            DestroyOutcome::Drop(Some(EIO))
        );
        assert_eq!(destroy_outcome(Ok(()), true), DestroyOutcome::Drop(None));
    }
}
