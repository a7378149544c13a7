// SPDX-License-Identifier: GPL-2.0

//! Memory regions (`struct ib_mr`): user memory registrations, the kernel's DMA MR and
//! fast-registration MRs (`ib_alloc_mr`, `ib_map_mr_sg`, posted with `IB_WR_REG_MR`).
//!
//! Unlike PDs, CQs and QPs, MRs are allocated by the provider: the object is a [`KBox`] with
//! the `ib_mr` at offset 0, handed to ib_core on registration and freed when the driver agrees
//! to deregister.

use super::{
    device::Device,
    ucontext::{udata_context, PdObject},
    udata::UData,
    umem::Umem,
    AbandonedObject, Destroyed, Driver,
};
use crate::{bindings, ffi::c_int, prelude::*, types::Opaque};

/// A fresh consumer key for a memory region's lkey and rkey (the low byte of an STag),
/// drawn from the kernel's random pool, so that a process cannot guess another's keys from
/// its own.
pub fn new_key() -> u8 {
    // SAFETY: `get_random_u8` has no preconditions and may be called from any context.
    unsafe { bindings::get_random_u8() }
}

crate::impl_flags!(
    /// IB access rights of a memory registration or QP (`enum ib_access_flags`).
    ///
    /// It holds the bits ib_core passed, unknown ones included (see [`Access::from_raw`]), so
    /// that a driver can refuse what it does not support ([`Access::unsupported`]).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Access(u32);

    /// One IB access right.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum AccessFlag {
        /// Local write (`IB_ACCESS_LOCAL_WRITE`); local read is always allowed.
        LocalWrite = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE,
        /// Remote write.
        RemoteWrite = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
        /// Remote read.
        RemoteRead = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ,
        /// Remote atomic.
        RemoteAtomic = bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC,
        /// Memory window binding.
        MwBind = bindings::ib_access_flags_IB_ACCESS_MW_BIND,
        /// Zero-based addressing: the device address of the first byte is 0 plus its offset in
        /// the first page, not the user's iova.
        ZeroBased = bindings::ib_access_flags_IB_ZERO_BASED,
        /// On-demand paging.
        OnDemand = bindings::ib_access_flags_IB_ACCESS_ON_DEMAND,
    }
);

impl Access {
    /// Optional hints (relaxed ordering and friends) a device may ignore.
    const OPTIONAL: u32 = bindings::ib_access_flags_IB_ACCESS_OPTIONAL;

    /// The flags as ib_core or a consumer passed them, bits no [`AccessFlag`] names included.
    pub const fn from_raw(bits: u32) -> Self {
        Self(bits)
    }

    /// The raw flags.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The bits outside `supported`, ignoring the optional hints; 0 when the device can
    /// honour every right asked for.
    pub const fn unsupported(self, supported: Access) -> u32 {
        self.0 & !(supported.0 | Self::OPTIONAL)
    }
}

/// A `reg_user_mr` request.
#[derive(Clone, Copy, Debug)]
pub struct UserMrRequest {
    /// User address of the first byte.
    pub start: u64,
    /// Length in bytes.
    pub length: u64,
    /// Device (virtual) address of the first byte.
    pub iova: u64,
    /// Access rights.
    pub access: Access,
}

/// A registered memory region, as the driver returns it.
pub struct NewMr<M> {
    /// The driver's data.
    pub value: M,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// What a memory region was made of, as far as a re-registration needs to know.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// The kernel's own (the DMA MR, fast-registration MRs): never re-registered.
    Kernel,
    /// Process memory, as this request asked: a re-registration keeps the range or the
    /// access rights it does not change.
    User(UserMrRequest),
    /// A dma-buf (`start` is an offset in the buffer): cannot be re-registered.
    DmaBuf(UserMrRequest),
}

/// The allocation of a memory region of driver `T`.
#[repr(C)]
struct MrObject<T: Driver> {
    raw: Opaque<bindings::ib_mr>,
    source: Source,
    data: T::Mr,
}

/// The `ib_device`, the [`Device`] and the driver's data of PD `pd`, which every MR callback
/// starts from.
///
/// # Safety
///
/// `pd` is a live PD of a `Device<T>` that `alloc_pd` initialised, and stays so for `'a`.
unsafe fn pd_parts<'a, T: Driver>(
    pd: *mut bindings::ib_pd,
) -> (*mut bindings::ib_device, &'a Device<T>, &'a T::Pd) {
    // SAFETY: Guaranteed by the caller.
    let (ib, pd_data) = unsafe {
        (
            (*pd).device,
            (*pd.cast::<PdObject<T>>()).data.assume_init_ref(),
        )
    };
    // SAFETY: `ib` is the device of a PD of driver `T`, so a device of driver `T`.
    (ib, unsafe { Device::<T>::from_raw(ib) }, pd_data)
}

/// `reg_user_mr`.
///
/// # Safety
///
/// Called by ib_core for a user PD of a device of driver `T`.
pub(crate) unsafe extern "C" fn reg_user_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    start: u64,
    length: u64,
    iova: u64,
    access: c_int,
    dmah: *mut bindings::ib_dmah,
    udata: *mut bindings::ib_udata,
) -> *mut bindings::ib_mr {
    let run = || -> Result<*mut bindings::ib_mr> {
        if !dmah.is_null() {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: `udata` is null or valid for this call (callback contract).
        let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EOPNOTSUPP)?;
        // SAFETY: As above.
        let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
        // SAFETY: `pd` is a live PD of a device of driver `T` (callback contract).
        let (ib, dev, pd_data) = unsafe { pd_parts::<T>(pd) };
        let access = Access(access as u32);
        let req = UserMrRequest {
            start,
            length,
            iova,
            access,
        };
        // Allocate before the driver programs the device, so nothing can fail afterwards.
        let slot = KBox::<MrObject<T>>::new_uninit(GFP_KERNEL)?;
        // SAFETY: A uverbs command of the process that owns the memory, on a live device.
        let umem = unsafe { Umem::get(ib, start, length, access) }?;
        // SAFETY: Called from an ib_core callback.
        let mr =
            unsafe { dev.with_data(|d| T::reg_user_mr(d, ctx, pd_data, &req, umem, &mut ud)) }?;
        Ok(install::<T>(slot, mr, Source::User(req)))
    };
    run().unwrap_or_else(|e| e.to_ptr())
}

/// `reg_user_mr_dmabuf`: registers `length` bytes at `offset` of dma-buf `fd`, pinned (the
/// exporter keeps the pages in place until deregistration; exporters that can only move
/// their buffers are refused by the dma-buf core).
///
/// # Safety
///
/// Called by ib_core (uverbs' `REG_DMABUF_MR` method) for a user PD of a device of driver `T`.
pub(crate) unsafe extern "C" fn reg_user_mr_dmabuf<T: Driver>(
    pd: *mut bindings::ib_pd,
    offset: u64,
    length: u64,
    iova: u64,
    fd: c_int,
    access: c_int,
    dmah: *mut bindings::ib_dmah,
    attrs: *mut bindings::uverbs_attr_bundle,
) -> *mut bindings::ib_mr {
    let run = || -> Result<*mut bindings::ib_mr> {
        if !dmah.is_null() || attrs.is_null() {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: `attrs` is the command's attribute bundle, valid for this call; its header
        // is the active member of the union (the C side is a `struct_group`).
        let udata = unsafe { &raw mut (*attrs).__bindgen_anon_1.__bindgen_anon_1.driver_udata };
        // SAFETY: `udata` is embedded in that bundle.
        let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EOPNOTSUPP)?;
        // SAFETY: As above.
        let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
        // SAFETY: `pd` is a live PD of a device of driver `T` (callback contract).
        let (ib, dev, pd_data) = unsafe { pd_parts::<T>(pd) };
        let req = UserMrRequest {
            start: offset,
            length,
            iova,
            access: Access(access as u32),
        };
        let slot = KBox::<MrObject<T>>::new_uninit(GFP_KERNEL)?;
        // SAFETY: A uverbs command of the process that passed `fd`, on a live device.
        let umem = unsafe { Umem::get_dmabuf_pinned(ib, offset, length, fd, req.access) }?;
        // SAFETY: Called from an ib_core callback.
        let mr = unsafe {
            dev.with_data(|d| T::reg_user_mr_dmabuf(d, ctx, pd_data, &req, umem, &mut ud))
        }?;
        Ok(install::<T>(slot, mr, Source::DmaBuf(req)))
    };
    run().unwrap_or_else(|e| e.to_ptr())
}

/// `rereg_user_mr`: changes the translation (`IB_MR_REREG_TRANS`), the PD or the access
/// rights of a user registration.
///
/// Always by a new region, made before the old one goes (ib_core then puts it in the old
/// one's place and deregisters the old one through `dereg_mr`): a failure leaves the old
/// region exactly as it was, and no access the device is still carrying out under the old
/// keys meets a half-changed region. The new region has new keys, which ib_core reports.
///
/// # Safety
///
/// Called by ib_core with a user MR of driver `T`, which uverbs holds exclusively for the
/// call, and a user PD of the same context.
pub(crate) unsafe extern "C" fn rereg_user_mr<T: Driver>(
    mr: *mut bindings::ib_mr,
    flags: c_int,
    start: u64,
    length: u64,
    virt_addr: u64,
    access: c_int,
    pd: *mut bindings::ib_pd,
    udata: *mut bindings::ib_udata,
) -> *mut bindings::ib_mr {
    let run = || -> Result<*mut bindings::ib_mr> {
        // SAFETY: `udata` is null or valid for this call (callback contract).
        let ctx = unsafe { udata_context::<T>(udata) }.ok_or(EOPNOTSUPP)?;
        // SAFETY: As above.
        let mut ud = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
        let obj = mr.cast::<MrObject<T>>();
        // SAFETY: `mr` heads a live `MrObject<T>` (callback contract).
        let (old, source) = unsafe { (&(*obj).data, (*obj).source) };
        let prev = match source {
            Source::User(prev) => prev,
            // Its range is in the buffer, not in the process.
            Source::DmaBuf(_) => return Err(EOPNOTSUPP),
            // The kernel's MRs never come here.
            Source::Kernel => return Err(EINVAL),
        };
        let flags = flags as u32;
        let trans = flags & bindings::ib_mr_rereg_flags_IB_MR_REREG_TRANS != 0;
        let req = UserMrRequest {
            start: if trans { start } else { prev.start },
            length: if trans { length } else { prev.length },
            iova: if trans { virt_addr } else { prev.iova },
            access: if flags & bindings::ib_mr_rereg_flags_IB_MR_REREG_ACCESS != 0 {
                Access(access as u32)
            } else {
                prev.access
            },
        };
        // SAFETY: `pd` is a live PD of a device of driver `T` (callback contract; ib_core
        // passes the MR's own PD when the consumer keeps it).
        let (ib, dev, pd_data) = unsafe { pd_parts::<T>(pd) };
        let slot = KBox::<MrObject<T>>::new_uninit(GFP_KERNEL)?;
        // SAFETY: A uverbs command of the process that owns the memory, on a live device.
        let umem = unsafe { Umem::get(ib, req.start, req.length, req.access) }?;
        // SAFETY: Called from an ib_core callback.
        let new = unsafe {
            dev.with_data(|d| T::rereg_user_mr(d, ctx, old, pd_data, &req, umem, &mut ud))
        }?;
        Ok(install::<T>(slot, new, Source::User(req)))
    };
    run().unwrap_or_else(|e| e.to_ptr())
}

/// `dereg_mr`.
///
/// # Safety
///
/// Called by ib_core with an MR returned by [`reg_user_mr`].
pub(crate) unsafe extern "C" fn dereg_mr<T: Driver>(
    mr: *mut bindings::ib_mr,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    let obj = mr.cast::<MrObject<T>>();
    // SAFETY: `mr` is the head of a live `MrObject<T>` (it came from `reg_user_mr`).
    let (dev, data) = unsafe { (Device::<T>::from_raw((*mr).device), &(*obj).data) };
    // SAFETY: Called from an ib_core callback.
    match unsafe { dev.with_data(|d| T::dereg_mr(d, data)) } {
        Ok(Destroyed::Released) => {
            // SAFETY: The driver released the MR; ib_core forgets it when we return 0.
            drop(unsafe { KBox::from_raw(obj) });
            0
        }
        Ok(Destroyed::Abandoned) => {
            // SAFETY: As above; the data moves to the driver, as the device may still access
            // what the MR maps.
            let obj = unsafe { KBox::from_raw(obj) };
            let MrObject {
                raw: _,
                source: _,
                data,
            } = KBox::into_inner(obj);
            // SAFETY: Called from an ib_core callback.
            unsafe { dev.with_data(|d| T::abandon(d, AbandonedObject::Mr(data))) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `get_dma_mr`.
///
/// # Safety
///
/// Called by ib_core for a kernel PD of a device of driver `T`.
pub(crate) unsafe extern "C" fn get_dma_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    access: c_int,
) -> *mut bindings::ib_mr {
    let run = || -> Result<*mut bindings::ib_mr> {
        // SAFETY: `pd` is a live PD of a device of driver `T` (callback contract).
        let (_, dev, pd_data) = unsafe { pd_parts::<T>(pd) };
        let slot = KBox::<MrObject<T>>::new_uninit(GFP_KERNEL)?;
        // SAFETY: Called from an ib_core callback.
        let mr = unsafe { dev.with_data(|d| T::get_dma_mr(d, pd_data, Access(access as u32))) }?;
        Ok(install::<T>(slot, mr, Source::Kernel))
    };
    run().unwrap_or_else(|e| e.to_ptr())
}

/// `alloc_mr`: a fast-registration MR of at most `max_num_sg` pages, initially invalid.
///
/// Only `IB_MR_TYPE_MEM_REG` is supported; other types fail with `EOPNOTSUPP`.
///
/// # Safety
///
/// Called by ib_core for a kernel PD of a device of driver `T`.
pub(crate) unsafe extern "C" fn alloc_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    mr_type: bindings::ib_mr_type,
    max_num_sg: u32,
) -> *mut bindings::ib_mr {
    let run = || -> Result<*mut bindings::ib_mr> {
        if mr_type != bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: `pd` is a live PD of a device of driver `T` (callback contract).
        let (_, dev, pd_data) = unsafe { pd_parts::<T>(pd) };
        let slot = KBox::<MrObject<T>>::new_uninit(GFP_KERNEL)?;
        // SAFETY: Called from an ib_core callback.
        let mr = unsafe { dev.with_data(|d| T::alloc_mr(d, pd_data, max_num_sg)) }?;
        Ok(install::<T>(slot, mr, Source::Kernel))
    };
    run().unwrap_or_else(|e| e.to_ptr())
}

/// The driver data of an MR this driver made.
///
/// # Safety
///
/// `mr` is a live `ib_mr` returned by one of this module's callbacks for driver `T`.
pub(crate) unsafe fn mr_data<'a, T: Driver>(mr: *mut bindings::ib_mr) -> &'a T::Mr {
    // SAFETY: Guaranteed by the caller: `mr` heads an `MrObject<T>`.
    unsafe { &(*mr.cast::<MrObject<T>>()).data }
}

/// `set_page` of `ib_sg_to_pages`: one page address of the mapping in progress.
///
/// # Safety
///
/// Called by `ib_sg_to_pages` from [`map_mr_sg`] with the MR it was given.
unsafe extern "C" fn set_page<T: Driver>(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
    // SAFETY: `mr` is the MR `map_mr_sg` passed on (function contract).
    let data = unsafe { mr_data::<T>(mr) };
    match T::mr_set_page(data, addr) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `map_mr_sg`: the driver forgets the MR's previous page list, then C `ib_sg_to_pages`
/// splits the DMA-mapped scatterlist into pages of `mr->page_size` (which `ib_map_mr_sg` set),
/// hands each to the driver and sets `mr->iova` and `mr->length`. Returns the number of
/// scatterlist entries mapped, as `ib_sg_to_pages` does.
///
/// # Safety
///
/// Called by ib_core with an MR of driver `T` and a DMA-mapped scatterlist of `sg_nents`
/// entries.
pub(crate) unsafe extern "C" fn map_mr_sg<T: Driver>(
    mr: *mut bindings::ib_mr,
    sg: *mut bindings::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut crate::ffi::c_uint,
) -> c_int {
    // SAFETY: `mr` is a live MR of driver `T` (function contract).
    let data = unsafe { mr_data::<T>(mr) };
    if let Err(e) = T::mr_reset_pages(data) {
        return e.to_errno();
    }
    // SAFETY: The arguments are ib_core's, valid for this call; `set_page::<T>` only reads
    // the driver data of this MR.
    unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(set_page::<T>)) }
}

/// Hands a new MR to ib_core: the object with the driver's data and the keys.
fn install<T: Driver>(
    slot: KBox<core::mem::MaybeUninit<MrObject<T>>>,
    mr: NewMr<T::Mr>,
    source: Source,
) -> *mut bindings::ib_mr {
    let obj = KBox::write(
        slot,
        MrObject {
            // SAFETY: An all-zero `ib_mr` is the state ib_core expects from a provider.
            raw: unsafe { core::mem::zeroed() },
            source,
            data: mr.value,
        },
    );
    let raw = KBox::into_raw(obj).cast::<bindings::ib_mr>();
    // SAFETY: `raw` is the fresh, not yet shared `ib_mr`.
    unsafe {
        (*raw).lkey = mr.lkey;
        (*raw).rkey = mr.rkey;
        // ib_core sets these after `reg_user_mr`, but not for a dma-buf region or the
        // region a rereg makes.
        if let Source::User(req) | Source::DmaBuf(req) = source {
            (*raw).iova = req.iova;
            (*raw).length = req.length;
        }
    }
    raw
}
