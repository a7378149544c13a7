// SPDX-License-Identifier: GPL-2.0

//! The interrupt vectors of a registered device, owned by its [`Registration`].
//!
//! A driver's vector allocation and the IRQ handlers registered on it cannot live side by
//! side in the driver's data: every handler registration borrows the allocation. The
//! registration owns both here, frees the handlers before the vectors, and hands each interrupt
//! to [`Driver::handle_irq`] with the registration data and the vector index, so the driver's
//! event-queue code needs no `unsafe` and no self-references. The allocation comes from the
//! device's bus (PCI MSI-X, for one) as an [`irq::VectorAllocation`]: this layer knows no bus.
//!
//! [`Registration`]: super::Registration

use super::{device::Device, Driver};
use crate::{
    irq::{self, Flags, Handler, IrqRequest, IrqReturn, VectorAllocation},
    prelude::*,
};
use core::ptr::NonNull;

/// The interrupt vectors a [`Registration`](super::Registration) services.
pub struct Interrupts<'a> {
    /// The device's vectors, allocated by its bus (e.g. `pci::Device::alloc_irq_vectors`);
    /// each gets a handler.
    pub vectors: KBox<dyn VectorAllocation<'a> + 'a>,
    /// The name the handlers show in `/proc/interrupts`.
    pub name: &'static CStr,
}

/// The handler of one vector: forwards to [`Driver::handle_irq`].
///
/// # Invariants
///
/// `dev` points to a [`Device<T>`] whose registration data is set and outlives the handler
/// registration this handler belongs to.
struct VectorHandler<T: Driver> {
    dev: NonNull<Device<T>>,
    vector: u32,
}

// SAFETY: The handler only reads the device's registration data, which is `Sync`.
unsafe impl<T: Driver> Send for VectorHandler<T> {}
// SAFETY: See `Send`.
unsafe impl<T: Driver> Sync for VectorHandler<T> {}

impl<T: Driver> Handler for VectorHandler<T> {
    fn handle(&self) -> IrqReturn {
        // SAFETY: The device and its registration data outlive the handler (type invariant).
        let dev = unsafe { self.dev.as_ref() };
        // SAFETY: Handlers run only while the registration data is set (type invariant).
        unsafe { dev.with_data(|d| T::handle_irq(d, dev, self.vector)) }
    }
}

/// A vector allocation with one handler per vector.
///
/// # Invariants
///
/// Every element of `handlers` is registered on a vector of `vectors`.
pub(crate) struct Vectors<'a, T: Driver> {
    // Declared before `vectors`: the handlers are freed first.
    handlers: KVec<Pin<KBox<irq::Registration<'a, VectorHandler<T>>>>>,
    /// Owned only to be freed after `handlers`.
    _vectors: KBox<dyn VectorAllocation<'a> + 'a>,
}

impl<'a, T: Driver> Vectors<'a, T> {
    /// Registers a handler on each of `irqs.vectors`.
    ///
    /// # Safety
    ///
    /// `dev`'s registration data must be set, and the result must be dropped (not leaked)
    /// before that data is freed.
    pub(crate) unsafe fn new(irqs: Interrupts<'a>, dev: NonNull<Device<T>>) -> Result<Self> {
        let vectors = irqs.vectors;
        let mut handlers = KVec::with_capacity(vectors.len(), GFP_KERNEL)?;
        for i in 0..vectors.len() {
            let irq = vectors.request(i)?.irq();
            // SAFETY: `irq` is vector `i` of `vectors.device()` (`VectorAllocation`'s
            // contract), allocated until `vectors` is dropped, which `Self` does only after
            // every handler (field order).
            let request = unsafe { IrqRequest::new(vectors.device(), irq) };
            let vector = u32::try_from(i)?;
            // INVARIANT: the caller keeps the registration data alive while `Self` lives.
            let handler = VectorHandler { dev, vector };
            // SAFETY: The registration is owned by `Self`, which the caller does not leak.
            let reg = KBox::pin_init(
                unsafe {
                    irq::Registration::new(
                        request,
                        Flags::TRIGGER_NONE,
                        irqs.name,
                        Ok::<_, Error>(handler),
                    )
                },
                GFP_KERNEL,
            )?;
            handlers.push(reg, GFP_KERNEL)?;
        }
        Ok(Self {
            handlers,
            _vectors: vectors,
        })
    }
}

impl<T: Driver> Drop for Vectors<'_, T> {
    fn drop(&mut self) {
        // Free every IRQ before `_vectors` releases the allocation.
        self.handlers.clear();
    }
}
