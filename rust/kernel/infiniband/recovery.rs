// SPDX-License-Identifier: GPL-2.0

//! Recovery of a failed function by probing it again.
//!
//! A device that reports a fatal error needs a reset, and everything built on it (the RDMA
//! device, every verbs object, user contexts, kernel ULPs' queues) has to be torn down and
//! made again. A driver already knows how to do both: its remove and its probe. [`Recovery`]
//! asks the driver core to unbind the function and probe it again, from a work item, as
//! ice does for irdma on a PF reset (the RDMA auxiliary device is unplugged and plugged
//! again): removal unregisters the RDMA device (ib_core disassociates user contexts, which
//! get `IB_EVENT_DEVICE_FATAL`; rdma_cm users see `RDMA_CM_EVENT_DEVICE_REMOVAL`; kernel
//! clients' `remove` runs), and probe resets the function and registers a new device.
//!
//! The work item's code is built into the kernel with this layer, not into the driver
//! module, and holds a reference to the function: it may run after the module is gone.

use crate::{
    bindings, device,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc,
    },
    workqueue,
};

/// No recovery requested.
const IDLE: u32 = 0;
/// Requested; the work item has not started to unbind the function.
const REQUESTED: u32 = 1;
/// The work item unbinds and probes the function.
const RESETTING: u32 = 2;
/// The driver instance went away before the work item started (an unbind or rmmod of its
/// own): the function stays unbound.
const CANCELLED: u32 = 3;

/// The state shared by a driver instance and its recovery work item.
struct State {
    step: Atomic<u32>,
}

/// The recovery of one bound driver instance: at most one re-probe of its function.
///
/// Drop it in the driver's removal (it is part of the data the removal frees): a request
/// not yet carried out is then cancelled, so an unbind or rmmod the user asked for is not
/// undone by a re-probe queued just before it.
pub struct Recovery {
    state: Arc<State>,
}

impl Recovery {
    /// A recovery with nothing requested.
    pub fn new() -> Result<Self> {
        Ok(Self {
            state: Arc::new(
                State {
                    step: Atomic::new(IDLE),
                },
                GFP_KERNEL,
            )?,
        })
    }

    /// Whether a re-probe has been requested.
    pub fn requested(&self) -> bool {
        self.state.step.load(Relaxed) != IDLE
    }

    /// Requests the unbind and re-probe of `function`, the device this driver instance is
    /// bound to. Only the first call does anything; it returns whether it made the request.
    /// Any context (the work item is allocated with `GFP_ATOMIC`); `ENOMEM` leaves the
    /// request unmade, so a later call may try again.
    pub fn request(&self, function: &device::Device<device::Bound>) -> Result<bool> {
        if self.state.step.cmpxchg(IDLE, REQUESTED, Relaxed).is_err() {
            return Ok(false);
        }
        let dev: &device::Device = function;
        queue_reprobe(ARef::from(dev), self.state.clone()).inspect_err(|_| {
            self.state.step.store(IDLE, Relaxed);
        })?;
        Ok(true)
    }
}

impl Drop for Recovery {
    fn drop(&mut self) {
        // A work item that already began (RESETTING) is the removal's own cause: leave it.
        let _ = self.state.step.cmpxchg(REQUESTED, CANCELLED, Relaxed);
    }
}

/// Queues the work item that unbinds `dev` and probes it again unless the request is
/// cancelled first.
///
/// Not generic, so that the closure's code is built here, into the kernel, and not into the
/// module that asks.
fn queue_reprobe(dev: ARef<device::Device>, state: Arc<State>) -> Result {
    workqueue::system_long()
        .try_spawn(GFP_ATOMIC, move || {
            if state.step.cmpxchg(REQUESTED, RESETTING, Relaxed).is_err() {
                dev_info!(dev, "recovery cancelled: the driver was removed first\n");
                return;
            }
            dev_warn!(
                dev,
                "recovery: unbinding the failed function and probing it again\n"
            );
            // SAFETY: `dev` is a live device (we hold a reference); the driver core takes the
            // device lock itself.
            unsafe { bindings::device_release_driver(dev.as_raw()) };
            // SAFETY: As above.
            let ret = unsafe { bindings::device_attach(dev.as_raw()) };
            match ret {
                1 => dev_info!(dev, "recovery: the function is bound again\n"),
                0 => dev_err!(dev, "recovery: no driver took the function\n"),
                e => dev_err!(dev, "recovery: probing the function failed ({})\n", e),
            }
        })
        .map_err(|_| ENOMEM)
}
