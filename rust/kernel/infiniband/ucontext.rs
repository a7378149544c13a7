// SPDX-License-Identifier: GPL-2.0

//! User contexts (`struct ib_ucontext`), protection domains (`struct ib_pd`) and user mappings
//! of device pages (`struct rdma_user_mmap_entry`).

use super::Driver;
use crate::{
    bindings,
    error::to_result,
    io::resource::{Flags, Resource},
    page::{PAGE_SHIFT, PAGE_SIZE},
    prelude::*,
    types::Opaque,
};
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
pub(crate) type UContextObject<T> = CoreObject<bindings::ib_ucontext, UContextData<T>>;
/// The object of a protection domain of driver `T`.
pub(crate) type PdObject<T> = CoreObject<bindings::ib_pd, <T as Driver>::Pd>;

/// What a user context holds: the driver's data and the mappings offered to its process.
pub(crate) struct UContextData<T: Driver> {
    pub(crate) driver: T::UContext,
    pub(crate) mmaps: MmapEntries,
}

/// Device memory that user contexts may map: a memory resource of a device (a PCI memory BAR,
/// a platform device's register window).
///
/// Only this type can be offered to a process with [`UContextInit::insert_io_mmap`], so safe
/// code cannot map arbitrary physical memory (RAM, another device, I/O port numbers).
///
/// # Invariants
///
/// `start` and `len` are page-aligned, `len` is not zero, and `start..start + len` is an
/// `IORESOURCE_MEM` resource of a device, which stays assigned for `'a`.
#[derive(Clone, Copy)]
pub struct MmioWindow<'a> {
    start: u64,
    len: u64,
    _resource: core::marker::PhantomData<&'a Resource>,
}

impl<'a> MmioWindow<'a> {
    /// The whole of memory resource `res` (e.g. from `pci::Device::resource`).
    ///
    /// Fails with `EINVAL` for I/O ports, an unassigned or empty resource, or one that does
    /// not start and end on page boundaries (it could not be mapped without exposing the
    /// neighbouring physical memory).
    pub fn from_resource(res: &'a Resource) -> Result<Self> {
        if !res.flags().contains(Flags::IORESOURCE_MEM) {
            return Err(EINVAL);
        }
        let start = u64::try_from(res.start())?;
        let len = u64::try_from(res.size())?;
        let page = PAGE_SIZE as u64;
        if len == 0 || start % page != 0 || len % page != 0 {
            return Err(EINVAL);
        }
        // INVARIANT: checked above; the resource is borrowed for `'a`.
        Ok(Self {
            start,
            len,
            _resource: core::marker::PhantomData,
        })
    }

    /// The window's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The first page frame of `len` bytes at `offset` into the window: both page-aligned,
    /// `len` not zero, and wholly inside.
    fn pfn_of(&self, offset: u64, len: usize) -> Result<u64> {
        subrange_pfn(self.start, self.len, offset, len)
    }
}

/// The first page frame of `len` bytes at `offset` in the window of `win_len` bytes at
/// physical address `start` (page-aligned): `EINVAL` unless the range is non-empty,
/// page-aligned and inside the window.
fn subrange_pfn(start: u64, win_len: u64, offset: u64, len: usize) -> Result<u64> {
    let page = PAGE_SIZE as u64;
    let len = len as u64;
    let end = offset.checked_add(len).ok_or(EINVAL)?;
    if len == 0 || offset % page != 0 || len % page != 0 || end > win_len {
        return Err(EINVAL);
    }
    Ok(start.checked_add(offset).ok_or(EINVAL)? >> PAGE_SHIFT)
}

/// The mappings inserted into one user context, removed together when the context goes.
///
/// # Invariants
///
/// Every element was inserted into the same context with `rdma_user_mmap_entry_insert` and
/// not removed yet.
pub(crate) struct MmapEntries(KVec<NonNull<IoMmapEntry>>);

impl MmapEntries {
    /// Withdraws every offer. ib_core frees each entry once no mapping uses it; none can,
    /// once the context is freed, so this must run before (callers: context teardown).
    pub(crate) fn remove_all(&mut self) {
        while let Some(entry) = self.0.pop() {
            // SAFETY: The entry was inserted and not removed (type invariant); popping it
            // keeps the invariant for the rest.
            unsafe { bindings::rdma_user_mmap_entry_remove(&raw mut (*entry.as_ptr()).raw) };
        }
    }
}

impl Drop for MmapEntries {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// A user context being created: lets the driver offer device memory to its process.
///
/// The offers live as long as the context: the abstraction withdraws them when the context is
/// destroyed, or at once when `alloc_ucontext` fails, so the driver holds no handle that could
/// outlive the context.
pub struct UContextInit<'a> {
    raw: *mut bindings::ib_ucontext,
    mmaps: MmapEntries,
    _p: core::marker::PhantomData<&'a ()>,
}

impl UContextInit<'_> {
    pub(crate) fn new(raw: *mut bindings::ib_ucontext) -> Self {
        Self {
            raw,
            // INVARIANT: empty.
            mmaps: MmapEntries(KVec::new()),
            _p: core::marker::PhantomData,
        }
    }

    /// Hands the offers over to the created context.
    pub(crate) fn into_mmaps(mut self) -> MmapEntries {
        core::mem::replace(&mut self.mmaps, MmapEntries(KVec::new()))
    }

    /// Makes `len` bytes at `offset` into `window` mappable by the context's process,
    /// uncached; returns the `mmap()` offset the process maps them at.
    ///
    /// `offset` and `len` must be page-aligned, `len` non-zero and the range inside the window
    /// (else `EINVAL`).
    pub fn insert_io_mmap(
        &mut self,
        window: &MmioWindow<'_>,
        offset: u64,
        len: usize,
    ) -> Result<u64> {
        let pfn = window.pfn_of(offset, len)?;
        // Room first, so a failure after the insertion cannot strand the entry.
        self.mmaps.0.reserve(1, GFP_KERNEL)?;
        let entry = KBox::new(
            IoMmapEntry {
                // SAFETY: An all-zero `rdma_user_mmap_entry` is its unset state.
                raw: unsafe { core::mem::zeroed() },
                pfn,
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
        // SAFETY: `entry` is not null (it came from a `KBox`).
        let entry = unsafe { NonNull::new_unchecked(entry) };
        // SAFETY: The entry is live; `start_pgoff` was set by the insertion.
        let pgoff = unsafe { (*entry.as_ptr()).raw.start_pgoff };
        // INVARIANT: the entry was inserted into this context; the room was reserved above.
        self.mmaps
            .0
            .push_within_capacity(entry)
            .map_err(|_| ENOMEM)?;
        Ok((pgoff as u64) << PAGE_SHIFT)
    }
}

/// The allocation behind an offered mapping, owned by ib_core once inserted.
#[repr(C)]
pub(crate) struct IoMmapEntry {
    raw: bindings::rdma_user_mmap_entry,
    pfn: u64,
}

/// `mmap` of a context of driver `T`: maps an entry offered with
/// [`UContextInit::insert_io_mmap`], uncached.
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
    // SAFETY: Every entry of our contexts is the `raw` field of an `IoMmapEntry` (offset 0),
    // kept alive by the reference just taken.
    let pfn = unsafe { (*entry.cast::<IoMmapEntry>()).pfn };
    // SAFETY: `vma` and `entry` are valid; `rdma_user_mmap_io` checks the VMA size against
    // the entry's, and the pfns are a MMIO window's (`MmioWindow` invariant).
    let ret = unsafe {
        let prot = bindings::pgprot_noncached((*vma).vm_page_prot);
        let size = (*entry).npages << PAGE_SHIFT;
        bindings::rdma_user_mmap_io(uctx, vma, pfn as _, size as _, prot, entry)
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
    Some(unsafe {
        &(*uctx.cast::<UContextObject<T>>())
            .data
            .assume_init_ref()
            .driver
    })
}

#[macros::kunit_tests(rust_infiniband_ucontext)]
mod tests {
    use super::*;

    const PAGE: u64 = PAGE_SIZE as u64;

    #[test]
    fn subrange_inside_maps_its_pages() -> Result {
        let start = 0xfe00_0000;
        assert_eq!(
            subrange_pfn(start, 16 * PAGE, 0, PAGE_SIZE)?,
            start >> PAGE_SHIFT
        );
        assert_eq!(
            subrange_pfn(start, 16 * PAGE, 15 * PAGE, PAGE_SIZE)?,
            (start >> PAGE_SHIFT) + 15
        );
        assert_eq!(
            subrange_pfn(start, 16 * PAGE, 0, 16 * PAGE_SIZE)?,
            start >> PAGE_SHIFT
        );
        Ok(())
    }

    #[test]
    fn subrange_outside_or_unaligned_is_refused() {
        let start = 0xfe00_0000;
        // Past the end, straddling the end, empty, unaligned offset or length, overflow.
        assert_eq!(
            subrange_pfn(start, 16 * PAGE, 16 * PAGE, PAGE_SIZE),
            Err(EINVAL)
        );
        assert_eq!(
            subrange_pfn(start, 16 * PAGE, 15 * PAGE, 2 * PAGE_SIZE),
            Err(EINVAL)
        );
        assert_eq!(subrange_pfn(start, 16 * PAGE, 0, 0), Err(EINVAL));
        assert_eq!(subrange_pfn(start, 16 * PAGE, 8, PAGE_SIZE), Err(EINVAL));
        assert_eq!(subrange_pfn(start, 16 * PAGE, 0, 100), Err(EINVAL));
        assert_eq!(
            subrange_pfn(start, u64::MAX, u64::MAX - PAGE + 1, 2 * PAGE_SIZE),
            Err(EINVAL)
        );
    }
}
