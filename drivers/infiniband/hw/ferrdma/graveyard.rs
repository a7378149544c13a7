// SPDX-License-Identifier: GPL-2.0

//! Memory a dead device may still access.
//!
//! When the device stops answering, a destroy cannot tell it to let go of an object: ib_core
//! frees the object all the same ([`Destroyed::Abandoned`]), but its rings, page lists and
//! pinned pages stay here, referenced (so kmemleak does not call them leaks), until removal
//! resets the device. A reset the device confirms ends every access, and the graveyard is
//! freed with the rest of the function's state; without a confirmation it is leaked.
//!
//! [`Destroyed::Abandoned`]: kernel::infiniband::Destroyed::Abandoned

use crate::{ibdev::FerrdmaIb, kcq::KCq};
use kernel::{
    infiniband::AbandonedObject,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// One thing the device may still access, held only to be dropped after the reset.
pub(crate) enum Remains {
    /// A CQ, QP or MR whose destroy the dead device never answered.
    Object(#[allow(dead_code)] AbandonedObject<FerrdmaIb>),
    /// A kernel CQ's ring that a live device refused to destroy (ib_core freed the CQ).
    KernelCq(#[allow(dead_code)] Arc<KCq>),
}

/// What abandoned objects left behind, until the device is reset.
#[pin_data]
pub(crate) struct Graveyard {
    #[pin]
    remains: Mutex<KVec<Remains>>,
}

impl Graveyard {
    /// An empty graveyard.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            remains <- new_mutex!(KVec::new()),
        })
    }

    /// Keeps `r` until the device is reset. Leaks it if there is no memory to keep it in.
    pub(crate) fn bury(&self, r: Remains) {
        let mut remains = self.remains.lock();
        // `push` would drop `r` on failure: reserve first, so a failure leaks it instead.
        if remains.reserve(1, GFP_KERNEL).is_err() {
            pr_warn!("no memory to track abandoned device memory; leaked\n");
            core::mem::forget(r);
            return;
        }
        if let Err(e) = remains.push_within_capacity(r) {
            core::mem::forget(e);
        }
    }

    /// The number of things kept.
    pub(crate) fn len(&self) -> usize {
        self.remains.lock().len()
    }

    /// Gives up on freeing what is kept: the device did not confirm a reset, so it may still
    /// access all of it.
    pub(crate) fn leak(&self) {
        let all = core::mem::take(&mut *self.remains.lock());
        core::mem::forget(all);
    }
}
