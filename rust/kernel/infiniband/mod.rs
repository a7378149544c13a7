// SPDX-License-Identifier: GPL-2.0

//! RDMA provider abstractions over ib_core.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! A provider implements [`Driver`] and registers an [`Device`] with a [`Registration`]. The
//! registration owns the driver's registration data, which every callback receives; it
//! unregisters the device when dropped. All `unsafe` code a provider needs lives here, so the
//! driver itself stays in safe Rust.

pub mod attr;
pub mod device;
mod netdev;
pub mod ucontext;
pub mod udata;

pub use attr::{DeviceAttr, Mtu, RocePort};
pub use device::{Device, Registration, RegistrationParams};
pub use ucontext::{IoMmap, UContextInit};
pub use udata::UData;

use crate::{bindings, prelude::*};

/// Identifies the user-space provider library that drives a device (`enum rdma_driver_id`).
///
/// libibverbs picks the provider by this id before any PCI id matching, so a new device can
/// reuse an existing provider's user ABI.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverId {
    /// The Intel irdma user ABI (libirdma).
    Irdma = bindings::rdma_driver_id_RDMA_DRIVER_IRDMA,
}

/// An RDMA provider driver.
///
/// One implementation per device type; its associated functions are the ib_device ops.
#[vtable]
pub trait Driver: Sized + Send + Sync + 'static {
    /// Data owned by the [`Registration`] and handed to every callback.
    ///
    /// The lifetime is that of the registration, which lives within the parent device's bound
    /// scope, so it may borrow bound resources such as PCI BARs.
    type RegistrationData<'a>: Send + Sync + 'a
    where
        Self: 'a;

    /// Driver data of a user context (`ib_ucontext`).
    type UContext: Send + Sync;

    /// Driver data of a protection domain (`ib_pd`).
    type Pd: Send + Sync;

    /// The user-space provider this device works with.
    const DRIVER_ID: DriverId;

    /// The provider's user ABI version (`uverbs_abi_ver`).
    const UVERBS_ABI_VER: u32;

    /// Device capabilities (`query_device`).
    fn query_device(data: &Self::RegistrationData<'_>) -> DeviceAttr;

    /// The static properties of RoCE port `port` (`query_port`); the state, speed and active
    /// MTU come from the bound network device.
    fn query_port(data: &Self::RegistrationData<'_>, port: u32) -> RocePort;

    /// Creates a user context (`alloc_ucontext`); `ctx` maps device pages for it.
    fn alloc_ucontext(
        data: &Self::RegistrationData<'_>,
        ctx: &UContextInit<'_>,
        udata: &mut UData<'_>,
    ) -> Result<Self::UContext>;

    /// Destroys a user context (`dealloc_ucontext`); by then every object in it is gone.
    fn dealloc_ucontext(_data: &Self::RegistrationData<'_>, _ctx: Self::UContext) {}

    /// Creates a protection domain (`alloc_pd`); `udata` is `None` for kernel users.
    fn alloc_pd(
        data: &Self::RegistrationData<'_>,
        udata: Option<&mut UData<'_>>,
    ) -> Result<Self::Pd>;

    /// Destroys a protection domain (`dealloc_pd`).
    fn dealloc_pd(_data: &Self::RegistrationData<'_>, _pd: Self::Pd) {}

    /// `gid` was added to the port's GID table at `index` (`add_gid`); it replaces whatever was
    /// there. Runs in process context.
    fn add_gid(
        _data: &Self::RegistrationData<'_>,
        _port: u32,
        _index: u32,
        _gid: &[u8; 16],
    ) -> Result {
        Ok(())
    }

    /// The GID at `index` was removed from the port's GID table (`del_gid`).
    fn del_gid(_data: &Self::RegistrationData<'_>, _port: u32, _index: u32) -> Result {
        Ok(())
    }
}
