// SPDX-License-Identifier: GPL-2.0

//! Hardware counters of a port (`struct rdma_hw_stats`): sysfs `ports/N/hw_counters` and
//! `rdma statistic`.

use super::{device::Device, Driver};
use crate::{
    bindings,
    ffi::{c_int, c_ulong},
    prelude::*,
    str::as_char_ptr_in_const_context,
};

/// The name of one hardware counter (`struct rdma_stat_desc`), as sysfs and `rdma statistic`
/// show it.
///
/// # Invariants
///
/// `name` points to a NUL-terminated string that lives forever; `priv` is null.
#[repr(transparent)]
pub struct StatDesc(bindings::rdma_stat_desc);

// SAFETY: A `StatDesc` is never written after it is made, and its name is a `'static`
// string (type invariant), so sharing it between threads is sound.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter named `name`.
    pub const fn new(name: &'static CStr) -> Self {
        // INVARIANT: `name` is `'static` and NUL-terminated; `priv` is null.
        Self(bindings::rdma_stat_desc {
            name: as_char_ptr_in_const_context(name),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }
}

/// `RDMA_HW_STATS_DEFAULT_LIFESPAN`: ib_core reads the counters again at most this often
/// (milliseconds; it converts them to jiffies itself).
const LIFESPAN_MS: c_ulong = bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as c_ulong;

/// `alloc_hw_port_stats`: ib_core's counter set for port `port`, named by
/// [`Driver::PORT_COUNTERS`]; ib_core frees it.
///
/// # Safety
///
/// Called by ib_core for a device of driver `T`.
pub(crate) unsafe extern "C" fn alloc_hw_port_stats<T: Driver>(
    _ib: *mut bindings::ib_device,
    _port: u32,
) -> *mut bindings::rdma_hw_stats {
    let descs = T::PORT_COUNTERS;
    let Ok(n) = c_int::try_from(descs.len()) else {
        return core::ptr::null_mut();
    };
    // SAFETY: `descs` is an array of `n` `rdma_stat_desc`s (`StatDesc` is transparent)
    // that lives forever, as ib_core keeps the pointer.
    unsafe { bindings::rdma_alloc_hw_stats_struct(descs.as_ptr().cast(), n, LIFESPAN_MS) }
}

/// `get_hw_stats`: fills every counter of `stats` from [`Driver::port_counters`]; returns
/// how many it filled (all, or an errno). Port 0 (device-wide counters) has none.
///
/// # Safety
///
/// Called by ib_core for a device of driver `T`, with a counter set [`alloc_hw_port_stats`]
/// made, under its lock.
pub(crate) unsafe extern "C" fn get_hw_stats<T: Driver>(
    ib: *mut bindings::ib_device,
    stats: *mut bindings::rdma_hw_stats,
    port: u32,
    _index: c_int,
) -> c_int {
    crate::error::from_result(|| {
        if port == 0 {
            return Err(EINVAL);
        }
        // SAFETY: `stats` is valid and ours under its lock (function contract).
        let n = unsafe { (*stats).num_counters };
        let len = usize::try_from(n).map_err(|_| EINVAL)?;
        if len != T::PORT_COUNTERS.len() {
            return Err(EINVAL);
        }
        // SAFETY: The set was allocated with room for `num_counters` values after the
        // header, and nothing else accesses them under the lock.
        let values = unsafe { (*stats).value.as_mut_slice(len) };
        // SAFETY: `ib` belongs to a `Device<T>` (function contract).
        let dev = unsafe { Device::<T>::from_raw(ib) };
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| T::port_counters(d, port, values)) }?;
        Ok(n)
    })
}
