// SPDX-License-Identifier: GPL-2.0

//! Interrupt vectors that a bus allocated for a bound device, seen without the bus.
//!
//! A subsystem layer that registers handlers on a device's vectors (an RDMA device's event
//! queues, say) needs the vectors' IRQ numbers and the guarantee that they stay allocated
//! while its handlers live; it has no business knowing whether they are PCI MSI-X vectors or
//! another bus's. The bus implements [`VectorAllocation`] for its allocation type (PCI:
//! [`IrqVectorRegistration`](crate::pci::IrqVectorRegistration)); the layer owns the
//! allocation and frees its handlers first.

use super::IrqRequest;
use crate::{
    device::{Bound, Device},
    prelude::*,
};

/// An allocation of interrupt vectors of one bound device, made by the device's bus.
///
/// Dropping it frees the vectors; every handler registered on them must be freed before.
///
/// # Safety
///
/// For every `index < self.len()`, [`request(index)`](Self::request) returns a request for an
/// interrupt of [`device()`](Self::device) that stays allocated until `self` is dropped; for
/// any other index it fails.
pub unsafe trait VectorAllocation<'a>: Send + Sync {
    /// The device whose vectors these are.
    fn device(&self) -> &'a Device<Bound>;

    /// The number of vectors.
    fn len(&self) -> usize;

    /// The request for vector `index`.
    fn request(&self, index: usize) -> Result<IrqRequest<'_>>;
}
