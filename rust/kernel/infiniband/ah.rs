// SPDX-License-Identifier: GPL-2.0

//! Address handles (`struct ib_ah`): UD destinations.

use super::{
    av::Av,
    device::Device,
    ucontext::{CoreObject, PdObject},
    udata::UData,
    Driver,
};
use crate::{bindings, ffi::c_int, prelude::*};

/// The object of an address handle of driver `T`.
pub(crate) type AhObject<T> = CoreObject<bindings::ib_ah, <T as Driver>::Ah>;

/// `create_ah`.
///
/// # Safety
///
/// Called by ib_core with a zeroed object of `size_ib_ah` bytes whose `device` and `pd` are
/// set, and a resolved AV.
pub(crate) unsafe extern "C" fn create_ah<T: Driver>(
    ah: *mut bindings::ib_ah,
    init: *mut bindings::rdma_ah_init_attr,
    udata: *mut bindings::ib_udata,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: The pointers are valid (callback contract).
        let (dev, pd, flags, attr) = unsafe {
            (
                Device::<T>::from_raw((*ah).device),
                (*ah).pd,
                (*init).flags,
                (*init).ah_attr,
            )
        };
        if pd.is_null() || attr.is_null() {
            return Err(EINVAL);
        }
        let sleepable = flags & bindings::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE != 0;
        // SAFETY: ib_core resolved the AV and holds its source GID attribute.
        let av = unsafe { Av::from_raw(attr) }?;
        // SAFETY: The PD is live and initialised.
        let pd_data = unsafe { (*pd.cast::<PdObject<T>>()).data.assume_init_ref() };
        // SAFETY: `udata` is null or valid for this call.
        let mut ud = unsafe { UData::from_raw(udata) };
        // SAFETY: Called from an ib_core callback.
        let value =
            unsafe { dev.with_data(|d| T::create_ah(d, pd_data, &av, sleepable, ud.as_mut())) }?;
        // SAFETY: `ah` is the head of an `AhObject<T>`.
        unsafe { (*ah.cast::<AhObject<T>>()).data.write(value) };
        Ok(0)
    })
}

/// `query_ah` (`rdma_query_ah`; ib_mad matches responses to requests with it): the AV the
/// driver returns.
///
/// # Safety
///
/// Called by ib_core for a live AH `create_ah` initialised, with a valid `ah_attr`.
pub(crate) unsafe extern "C" fn query_ah<T: Driver>(
    ah: *mut bindings::ib_ah,
    ah_attr: *mut bindings::rdma_ah_attr,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: The AH is live and initialised (function contract).
        let (dev, data) = unsafe {
            (
                Device::<T>::from_raw((*ah).device),
                (*ah.cast::<AhObject<T>>()).data.assume_init_ref(),
            )
        };
        // SAFETY: Called from an ib_core callback.
        let av = unsafe { dev.with_data(|d| T::query_ah(d, data)) }?;
        // SAFETY: `ah_attr` is valid and ours for the call (function contract).
        av.write_to(unsafe { &mut *ah_attr });
        Ok(0)
    })
}

/// `destroy_ah`.
///
/// # Safety
///
/// Called by ib_core once for an AH `create_ah` initialised.
pub(crate) unsafe extern "C" fn destroy_ah<T: Driver>(
    ah: *mut bindings::ib_ah,
    flags: u32,
) -> c_int {
    let obj = ah.cast::<AhObject<T>>();
    let sleepable = flags & bindings::rdma_destroy_ah_flags_RDMA_DESTROY_AH_SLEEPABLE != 0;
    // SAFETY: The AH is live and initialised (function contract).
    let (dev, data) = unsafe {
        (
            Device::<T>::from_raw((*ah).device),
            (*obj).data.assume_init_ref(),
        )
    };
    // SAFETY: Called from an ib_core callback.
    if let Err(e) = unsafe { dev.with_data(|d| T::destroy_ah(d, data, sleepable)) } {
        return e.to_errno();
    }
    // SAFETY: Initialised by `create_ah`, dropped once; ib_core frees the memory afterwards.
    unsafe { (*obj).data.assume_init_drop() };
    0
}
