// SPDX-License-Identifier: GPL-2.0

//! RDMA provider abstractions over ib_core.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! A provider implements [`Driver`] and registers an [`Device`] with a [`Registration`]. The
//! registration owns the driver's registration data, which every callback receives; it
//! unregisters the device when dropped. All `unsafe` code a provider needs lives here, so the
//! driver itself stays in safe Rust.

pub mod ah;
pub mod attr;
pub mod av;
pub mod cq;
pub mod debugfs;
pub mod device;
pub mod events;
pub mod hw_stats;
pub mod irq;
pub mod mcast;
pub mod mr;
mod netdev;
pub mod qp;
pub mod recovery;
pub mod ucontext;
pub mod udata;
pub mod umem;
pub mod wc;
pub mod wr;

pub use attr::{DeviceAttr, FwVersion, Mtu, RocePort};
pub use av::Av;
pub use cq::{CqInitAttr, NewCq};
pub use debugfs::DebugfsParam;
pub use device::{Device, Registration, RegistrationParams};
pub use events::{CqEvents, QpEvent, QpEvents};
pub use hw_stats::StatDesc;
pub use irq::Interrupts;
pub use mr::{Access, AccessFlag, NewMr, UserMrRequest};
pub use qp::{NewQp, QpAttr, QpAttrFlag, QpAttrMask, QpCap, QpInitAttr, QpQuery, QpState, QpType};
pub use recovery::Recovery;
pub use ucontext::{MmioWindow, UContextInit};
pub use udata::UData;
pub use umem::Umem;
pub use wc::{CqNotify, NetworkHdr, QpRef, Wc, WcOpcode, WcSink, WcStatus};
pub use wr::{RecvWr, RecvWrs, SendOp, SendWr, SendWrs, Sge, UdDest};

use crate::{bindings, irq::IrqReturn, prelude::*};

/// How a destroy callback (CQ, QP, MR) left the device object.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destroyed {
    /// The device released the object and will not touch its memory again: the abstraction
    /// drops the driver data.
    Released,
    /// The device could not be told (it stopped answering): ib_core still frees its object
    /// and the abstraction revokes the object's events, then hands the driver data to
    /// [`Driver::abandon`], as the device may still read or write its rings, page lists and
    /// pinned pages.
    Abandoned,
}

/// The driver data of an object whose destroy answered [`Destroyed::Abandoned`].
pub enum AbandonedObject<T: Driver> {
    /// A CQ's data.
    Cq(T::Cq),
    /// A QP's data.
    Qp(T::Qp),
    /// A memory region's data.
    Mr(T::Mr),
}

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

    /// Driver data of a memory region (`ib_mr`).
    type Mr: Send + Sync;

    /// Driver data of a completion queue (`ib_cq`).
    type Cq: Send + Sync;

    /// Driver data of a queue pair (`ib_qp`).
    type Qp: Send + Sync;

    /// Driver data of an address handle (`ib_ah`).
    type Ah: Send + Sync;

    /// The user-space provider this device works with.
    const DRIVER_ID: DriverId;

    /// The provider's user ABI version (`uverbs_abi_ver`).
    const UVERBS_ABI_VER: u32;

    /// Device capabilities (`query_device`).
    fn query_device(data: &Self::RegistrationData<'_>) -> DeviceAttr;

    /// The names of the port's hardware counters (sysfs `ports/N/hw_counters`, `rdma
    /// statistic`), in the order [`Driver::port_counters`] fills them. With none (the
    /// default), the device has no counters.
    const PORT_COUNTERS: &'static [StatDesc] = &[];

    /// Reads the counters of port `port` into `values` (one per [`Driver::PORT_COUNTERS`]
    /// entry; they must only grow, ib_core reports them as they are). Process context.
    fn port_counters(
        _data: &Self::RegistrationData<'_>,
        _port: u32,
        _values: &mut [u64],
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// The driver's debugfs directory (`<debugfs>/<name>/`), with one directory per device
    /// (named after its parent) for [`Driver::DEBUGFS_PARAMS`].
    const DEBUGFS_DIR: &'static CStr = c"infiniband";

    /// The device's tunable parameters, each a file in debugfs (see [`debugfs`]). With none
    /// (the default), the device has no debugfs directory. The parameters of one group must
    /// be next to each other: a group's directory is made at its first parameter, and a
    /// group that comes back later would collide with it (its files would not be made).
    const DEBUGFS_PARAMS: &'static [DebugfsParam] = &[];

    /// Reads parameter `index` of [`Driver::DEBUGFS_PARAMS`]. Process context, may sleep.
    fn read_param(_data: &Self::RegistrationData<'_>, _index: usize) -> Result<u32> {
        Err(EOPNOTSUPP)
    }

    /// Sets parameter `index` of [`Driver::DEBUGFS_PARAMS`] to `value` (root only: the file
    /// is writable by root). Process context, may sleep.
    fn write_param(_data: &Self::RegistrationData<'_>, _index: usize, _value: u32) -> Result {
        Err(EOPNOTSUPP)
    }

    /// The firmware version sysfs `fw_ver` shows (`get_dev_fw_str`, as `major.minor`);
    /// `None` leaves it empty.
    fn fw_version(_data: &Self::RegistrationData<'_>) -> Option<FwVersion> {
        None
    }

    /// The static properties of RoCE port `port` (`query_port`); the state, speed and active
    /// MTU come from the bound network device.
    fn query_port(data: &Self::RegistrationData<'_>, port: u32) -> RocePort;

    /// Creates a user context (`alloc_ucontext`); `ctx` maps device pages for it.
    fn alloc_ucontext(
        data: &Self::RegistrationData<'_>,
        ctx: &mut UContextInit<'_>,
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

    /// The link state of the network device port 1 is bound to: `true` when it is up and has
    /// a carrier. Called when it was bound and whenever the state may have changed (so the
    /// same state can be reported again). Process context, under RTNL; the default does
    /// nothing.
    fn netdev_link(_data: &Self::RegistrationData<'_>, _up: bool) {}

    /// Interrupt `vector` of the registration's [`Interrupts`] fired on `dev`. Hard IRQ
    /// context.
    fn handle_irq(
        _data: &Self::RegistrationData<'_>,
        _dev: &Device<Self>,
        _vector: u32,
    ) -> IrqReturn {
        IrqReturn::None
    }

    /// Registers user memory (`reg_user_mr`), already pinned as `umem`, in context `ctx`.
    fn reg_user_mr(
        _data: &Self::RegistrationData<'_>,
        _ctx: &Self::UContext,
        _pd: &Self::Pd,
        _req: &UserMrRequest,
        _umem: Umem,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Self::Mr>> {
        Err(EOPNOTSUPP)
    }

    /// Registers `req.length` bytes at offset `req.start` of a dma-buf (`reg_user_mr_dmabuf`),
    /// pinned by the exporter and mapped for the device as `umem`, in context `ctx`.
    fn reg_user_mr_dmabuf(
        _data: &Self::RegistrationData<'_>,
        _ctx: &Self::UContext,
        _pd: &Self::Pd,
        _req: &UserMrRequest,
        _umem: Umem,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Self::Mr>> {
        Err(EOPNOTSUPP)
    }

    /// Re-registers user memory region `old` (`rereg_user_mr`) as a new region in PD `pd`:
    /// `req` holds what the consumer changed (translation, access rights) and what it kept
    /// from `old`, pinned as `umem`. ib_core puts the new region in `old`'s place and then
    /// deregisters `old` through [`Driver::dereg_mr`]; after an error `old` is unchanged.
    fn rereg_user_mr(
        _data: &Self::RegistrationData<'_>,
        _ctx: &Self::UContext,
        _old: &Self::Mr,
        _pd: &Self::Pd,
        _req: &UserMrRequest,
        _umem: Umem,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Self::Mr>> {
        Err(EOPNOTSUPP)
    }

    /// Deregisters a memory region (`dereg_mr`); see [`Destroyed`] for what the abstraction
    /// does with `mr` after `Ok`. An error (e.g. `EBUSY` while something uses it) keeps the
    /// region.
    fn dereg_mr(_data: &Self::RegistrationData<'_>, _mr: &Self::Mr) -> Result<Destroyed> {
        Err(EOPNOTSUPP)
    }

    /// Creates a user CQ (`create_cq`); `events` delivers its completion and error events.
    fn create_cq(
        _data: &Self::RegistrationData<'_>,
        _ctx: &Self::UContext,
        _attr: &CqInitAttr,
        _events: CqEvents,
        _udata: &mut UData<'_>,
    ) -> Result<NewCq<Self::Cq>> {
        Err(EOPNOTSUPP)
    }

    /// Creates a kernel CQ (`create_cq` without user data): the driver owns its ring and
    /// completes it through [`Driver::poll_cq`].
    fn create_kernel_cq(
        _data: &Self::RegistrationData<'_>,
        _attr: &CqInitAttr,
        _events: CqEvents,
    ) -> Result<NewCq<Self::Cq>> {
        Err(EOPNOTSUPP)
    }

    /// Resizes a user CQ to `cqe` entries as the consumer asked (`resize_user_cq`, from
    /// `ibv_resize_cq`) and returns the capacity to report (`ib_cq.cqe`). Process context;
    /// resizes of one CQ may run concurrently (uverbs holds the CQ shared), never against its
    /// destroy. Linux 7.3 has no resize for kernel CQs.
    fn resize_user_cq(
        _data: &Self::RegistrationData<'_>,
        _ctx: &Self::UContext,
        _cq: &Self::Cq,
        _cqe: u32,
        _udata: &mut UData<'_>,
    ) -> Result<u32> {
        Err(EOPNOTSUPP)
    }

    /// Moves completions of a CQ into `out` (`poll_cq`), at most as many as fit. Any context;
    /// must not sleep. Also reachable from user space for user CQs, which it must refuse.
    fn poll_cq(
        _data: &Self::RegistrationData<'_>,
        _cq: &Self::Cq,
        _out: &mut WcSink<'_>,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Arms a CQ for one completion event (`req_notify_cq`). Any context; must not sleep.
    /// With `how.report_missed`, returns whether completions may already be waiting.
    fn req_notify_cq(
        _data: &Self::RegistrationData<'_>,
        _cq: &Self::Cq,
        _how: CqNotify,
    ) -> Result<bool> {
        Err(EOPNOTSUPP)
    }

    /// Destroys a CQ (`destroy_cq`). After `Ok` the abstraction revokes its event handle and
    /// drops `cq` ([`Destroyed::Released`]: the device no longer writes it) or leaks it
    /// ([`Destroyed::Abandoned`]).
    fn destroy_cq(_data: &Self::RegistrationData<'_>, _cq: &Self::Cq) -> Result<Destroyed> {
        Err(EOPNOTSUPP)
    }

    /// Creates a user QP (`create_qp`); the driver may update `attr.cap`.
    fn create_qp(
        _data: &Self::RegistrationData<'_>,
        _ctx: &Self::UContext,
        _pd: &Self::Pd,
        _attr: &mut QpInitAttr<'_, Self>,
        _events: QpEvents,
        _udata: &mut UData<'_>,
    ) -> Result<NewQp<Self::Qp>> {
        Err(EOPNOTSUPP)
    }

    /// Creates a kernel QP (`create_qp` without user data); `qp` names it in completions.
    fn create_kernel_qp(
        _data: &Self::RegistrationData<'_>,
        _pd: &Self::Pd,
        _attr: &mut QpInitAttr<'_, Self>,
        _events: QpEvents,
        _qp: QpRef,
    ) -> Result<NewQp<Self::Qp>> {
        Err(EOPNOTSUPP)
    }

    /// Posts send work requests (`post_send`). Any context; must not sleep. On error the
    /// request the iterator yielded last is reported as the failing one. Also reachable from
    /// user space for user QPs, which it must refuse.
    fn post_send(
        _data: &Self::RegistrationData<'_>,
        _qp: &Self::Qp,
        _wrs: &mut SendWrs<'_, Self>,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Posts receive work requests (`post_recv`); see [`Driver::post_send`].
    fn post_recv(
        _data: &Self::RegistrationData<'_>,
        _qp: &Self::Qp,
        _wrs: &mut RecvWrs<'_>,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// A memory region covering all of memory for local access (`get_dma_mr`), for kernel
    /// consumers that want an lkey under which SGE addresses are DMA addresses.
    fn get_dma_mr(
        _data: &Self::RegistrationData<'_>,
        _pd: &Self::Pd,
        _access: Access,
    ) -> Result<NewMr<Self::Mr>> {
        Err(EOPNOTSUPP)
    }

    /// Allocates a fast-registration MR of at most `max_num_sg` pages in a kernel PD
    /// (`alloc_mr` with `IB_MR_TYPE_MEM_REG`; the abstraction refuses other types). It starts
    /// invalid; an `IB_WR_REG_MR` ([`SendOp::RegMr`]) makes it valid.
    fn alloc_mr(
        _data: &Self::RegistrationData<'_>,
        _pd: &Self::Pd,
        _max_num_sg: u32,
    ) -> Result<NewMr<Self::Mr>> {
        Err(EOPNOTSUPP)
    }

    /// `map_mr_sg` begins: forget the page list of fast-registration MR `mr` (`EINVAL` for
    /// other MRs). Any context; must not sleep.
    fn mr_reset_pages(_mr: &Self::Mr) -> Result {
        Err(EINVAL)
    }

    /// `map_mr_sg` continues: append the DMA address of one page (of `mr->page_size` bytes)
    /// to `mr`'s page list; an error (`ENOMEM` when full) stops the mapping there. Any
    /// context; must not sleep. Implementing it enables `map_mr_sg`.
    fn mr_set_page(_mr: &Self::Mr, _addr: u64) -> Result {
        Err(EINVAL)
    }

    /// Modifies a QP (`modify_qp`): the attributes in `mask` are set.
    fn modify_qp(
        _data: &Self::RegistrationData<'_>,
        _qp: &Self::Qp,
        _attr: &QpAttr,
        _mask: QpAttrMask,
        _udata: Option<&mut UData<'_>>,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Reports a QP's attributes (`query_qp`).
    fn query_qp(_data: &Self::RegistrationData<'_>, _qp: &Self::Qp) -> Result<QpQuery> {
        Err(EOPNOTSUPP)
    }

    /// Destroys a QP (`destroy_qp`); see [`Driver::destroy_cq`] for what `Ok` promises.
    fn destroy_qp(_data: &Self::RegistrationData<'_>, _qp: &Self::Qp) -> Result<Destroyed> {
        Err(EOPNOTSUPP)
    }

    /// Creates an address handle (`create_ah`); `sleepable` is false in atomic context.
    fn create_ah(
        _data: &Self::RegistrationData<'_>,
        _pd: &Self::Pd,
        _av: &Av,
        _sleepable: bool,
        _udata: Option<&mut UData<'_>>,
    ) -> Result<Self::Ah> {
        Err(EOPNOTSUPP)
    }

    /// The address vector of an address handle (`query_ah`, for `rdma_query_ah`). Any
    /// context (ib_mad asks under a spinlock); must not sleep.
    fn query_ah(_data: &Self::RegistrationData<'_>, _ah: &Self::Ah) -> Result<Av> {
        Err(EOPNOTSUPP)
    }

    /// Destroys an address handle (`destroy_ah`).
    fn destroy_ah(_data: &Self::RegistrationData<'_>, _ah: &Self::Ah, _sleepable: bool) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Attaches UD QP `qp` to the multicast group of `gid` (`attach_mcast`).
    fn attach_mcast(
        _data: &Self::RegistrationData<'_>,
        _qp: &Self::Qp,
        _gid: &mcast::McastGid,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Detaches `qp` from the multicast group of `gid` (`detach_mcast`).
    fn detach_mcast(
        _data: &Self::RegistrationData<'_>,
        _qp: &Self::Qp,
        _gid: &mcast::McastGid,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Takes the data of an object whose destroy answered [`Destroyed::Abandoned`].
    ///
    /// The device may still access the memory `obj` owns, so the driver must not drop it
    /// before the device is known to have stopped (a reset it confirmed); a driver that
    /// cannot tell leaks it. The default leaks it.
    fn abandon(_data: &Self::RegistrationData<'_>, obj: AbandonedObject<Self>) {
        core::mem::forget(obj);
    }
}
