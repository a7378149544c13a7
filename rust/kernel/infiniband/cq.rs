// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`struct ib_cq`).

use super::{
    device::Device,
    events::{CqEvents, CqEventsInner},
    ucontext::{udata_context, CoreObject},
    udata::UData,
    Driver,
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
        let new = if attrs.is_null() {
            // A kernel consumer (ib_alloc_cq and friends).
            // SAFETY: Called from an ib_core callback.
            unsafe { dev.with_data(|d| T::create_kernel_cq(d, &init, handle)) }?
        } else {
            // SAFETY: The driver udata is the first member of the bundle
            // (`rdma_udata_to_uverbs_attr_bundle`).
            let udata = attrs.cast::<bindings::ib_udata>();
            // SAFETY: A uverbs command on a device of driver `T`.
            let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EINVAL)?;
            // SAFETY: As above; nothing else accesses the udata during the call.
            let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Called from an ib_core callback.
            unsafe { dev.with_data(|d| T::create_cq(d, ctx, &init, handle, &mut ud)) }?
        };
        let cqe = c_int::try_from(new.cqe)?;
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
/// # Safety
///
/// Called by ib_core once for a CQ `create_cq` initialised.
pub(crate) unsafe extern "C" fn destroy_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    _udata: *mut bindings::ib_udata,
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
    if let Err(e) = unsafe { dev.with_data(|d| T::destroy_cq(d, &data.1)) } {
        return e.to_errno();
    }
    data.0.revoke();
    // SAFETY: Initialised by `create_cq`, dropped once; ib_core frees the memory afterwards.
    unsafe { (*obj).data.assume_init_drop() };
    0
}
