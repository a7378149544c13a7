// SPDX-License-Identifier: GPL-2.0

//! User contexts (`struct ib_ucontext`), protection domains (`struct ib_pd`) and user mappings
//! of device pages (`struct rdma_user_mmap_entry`).

use super::Driver;
use crate::{bindings, error::to_result, page::PAGE_SHIFT, prelude::*, types::Opaque};
use core::{mem::MaybeUninit, ptr::NonNull};

/// A verbs object that ib_core allocates (`size_ib_*` bytes) with its C struct at offset 0,
/// followed by the driver's data.
///
/// # Invariants
///
/// `data` is initialised between a successful create callback and the destroy callback.
#[repr(C)]
pub(crate) struct CoreObject<C, D> {
    pub(crate) raw: Opaque<C>,
    pub(crate) data: MaybeUninit<D>,
}

impl<C, D> CoreObject<C, D> {
    /// The allocation size to put in the ops table.
    pub(crate) const SIZE: usize = {
        // ib_core's allocations are only kmalloc-aligned.
        assert!(core::mem::align_of::<Self>() <= 8);
        assert!(core::mem::offset_of!(Self, raw) == 0);
        core::mem::size_of::<Self>()
    };
}

/// The object of a user context of driver `T`.
pub(crate) type UContextObject<T> = CoreObject<bindings::ib_ucontext, <T as Driver>::UContext>;
/// The object of a protection domain of driver `T`.
pub(crate) type PdObject<T> = CoreObject<bindings::ib_pd, <T as Driver>::Pd>;

/// A user context being created: lets the driver map device pages for it.
pub struct UContextInit<'a> {
    raw: *mut bindings::ib_ucontext,
    _p: core::marker::PhantomData<&'a ()>,
}

impl UContextInit<'_> {
    pub(crate) fn new(raw: *mut bindings::ib_ucontext) -> Self {
        Self {
            raw,
            _p: core::marker::PhantomData,
        }
    }

    /// Makes `len` bytes of device memory at physical address `phys` mappable by the context's
    /// process, uncached, at the returned entry's [`IoMmap::offset`].
    pub fn insert_io_mmap(&self, phys: u64, len: usize) -> Result<IoMmap> {
        let entry = KBox::new(
            IoMmapEntry {
                // SAFETY: An all-zero `rdma_user_mmap_entry` is its unset state.
                raw: unsafe { core::mem::zeroed() },
                pfn: phys >> PAGE_SHIFT,
            },
            GFP_KERNEL,
        )?;
        let entry = KBox::into_raw(entry);
        // SAFETY: `raw` is the context being created; `entry` is a live allocation whose
        // ownership passes to ib_core, which hands it back through `mmap_free`.
        let ret =
            unsafe { bindings::rdma_user_mmap_entry_insert(self.raw, &raw mut (*entry).raw, len) };
        if let Err(e) = to_result(ret) {
            // SAFETY: The insert failed, so ib_core did not take the entry.
            drop(unsafe { KBox::from_raw(entry) });
            return Err(e);
        }
        // INVARIANT: the entry was inserted.
        Ok(IoMmap {
            // SAFETY: `entry` is not null (it came from a `KBox`).
            entry: unsafe { NonNull::new_unchecked(entry) },
        })
    }
}

/// The allocation behind an [`IoMmap`], owned by ib_core once inserted.
#[repr(C)]
pub(crate) struct IoMmapEntry {
    raw: bindings::rdma_user_mmap_entry,
    pfn: u64,
}

/// A mapping of device memory offered to a user context.
///
/// Dropping it withdraws the offer; ib_core frees the entry once no mapping uses it.
///
/// # Invariants
///
/// `entry` was inserted into a context with `rdma_user_mmap_entry_insert` and not removed.
pub struct IoMmap {
    entry: NonNull<IoMmapEntry>,
}

// SAFETY: The entry is owned by ib_core and reference counted; the handle only removes it.
unsafe impl Send for IoMmap {}
// SAFETY: `offset` only reads an immutable field.
unsafe impl Sync for IoMmap {}

impl IoMmap {
    /// The `mmap()` offset user space maps the memory at.
    pub fn offset(&self) -> u64 {
        // SAFETY: The entry is live (type invariant); `start_pgoff` is set at insertion.
        let pgoff = unsafe { (*self.entry.as_ptr()).raw.start_pgoff };
        (pgoff as u64) << PAGE_SHIFT
    }
}

impl Drop for IoMmap {
    fn drop(&mut self) {
        // SAFETY: The entry was inserted and not removed (type invariant).
        unsafe { bindings::rdma_user_mmap_entry_remove(&raw mut (*self.entry.as_ptr()).raw) };
    }
}

/// `mmap` of a context of driver `T`: maps an [`IoMmap`] entry, uncached.
///
/// # Safety
///
/// Called by ib_core with a valid context and VMA.
pub(crate) unsafe extern "C" fn mmap<T: Driver>(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> crate::ffi::c_int {
    // SAFETY: Valid pointers (callback contract); a non-null result holds a reference.
    let entry = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: Every entry of our contexts is the `raw` field of an `IoMmapEntry` (offset 0).
    let io = unsafe { &*entry.cast::<IoMmapEntry>() };
    // SAFETY: `vma` and `entry` are valid; `rdma_user_mmap_io` checks the VMA size.
    let ret = unsafe {
        let prot = bindings::pgprot_noncached((*vma).vm_page_prot);
        let size = (*entry).npages << PAGE_SHIFT;
        bindings::rdma_user_mmap_io(uctx, vma, io.pfn as _, size as _, prot, entry)
    };
    // SAFETY: Drops the reference taken by `rdma_user_mmap_entry_get`.
    unsafe { bindings::rdma_user_mmap_entry_put(entry) };
    ret
}

/// `mmap_free`: the last reference to an entry is gone.
///
/// # Safety
///
/// Called by ib_core once per inserted entry.
pub(crate) unsafe extern "C" fn mmap_free(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: The entry came from `KBox::into_raw` in `insert_io_mmap` (`raw` is at offset 0).
    drop(unsafe { KBox::from_raw(entry.cast::<IoMmapEntry>()) });
}

/// The driver data of the user context a uverbs command runs in; `None` for kernel callers.
///
/// # Safety
///
/// `udata` is null or the driver udata of a uverbs command on a device of driver `T`, made in
/// a context `alloc_ucontext` initialised; the result must not outlive the command.
pub(crate) unsafe fn udata_context<'a, T: Driver>(
    udata: *mut bindings::ib_udata,
) -> Option<&'a T::UContext> {
    if udata.is_null() {
        return None;
    }
    // SAFETY: `udata` is embedded in a `uverbs_attr_bundle` (function contract).
    let uctx = unsafe { bindings::rdma_udata_context(udata) };
    if uctx.is_null() {
        return None;
    }
    // SAFETY: The context is a `UContextObject<T>` whose data is initialised and lives at
    // least until the command returns.
    Some(unsafe { (*uctx.cast::<UContextObject<T>>()).data.assume_init_ref() })
}
