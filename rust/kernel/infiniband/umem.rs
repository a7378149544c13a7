// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`struct ib_umem`).
//!
//! C header: [`include/rdma/ib_umem.h`](srctree/include/rdma/ib_umem.h).

use super::mr::Access;
use crate::{bindings, error::from_err_ptr, prelude::*};
use core::ptr::NonNull;

/// User memory pinned and DMA-mapped for a device.
///
/// # Invariants
///
/// `raw` came from `ib_umem_get_va()`, or is the `umem` of an `ib_umem_dmabuf` from
/// `ib_umem_dmabuf_get_pinned()`, and is released exactly once, on drop (`ib_umem_release`
/// releases either kind).
pub struct Umem {
    raw: NonNull<bindings::ib_umem>,
}

// SAFETY: An `ib_umem` is not tied to the thread that pinned it; release may run anywhere
// that may sleep, which is where the owning objects are destroyed.
unsafe impl Send for Umem {}
// SAFETY: Shared references only read fields and the SG table; what writes the `ib_umem`
// (`ib_umem_find_best_pgsz` sets its `iova`) takes `&mut self`.
unsafe impl Sync for Umem {}

impl Umem {
    /// Pins `[addr, addr + len)` of the calling process for `ib` with IB access flags
    /// `access`: writable (`FOLL_WRITE`) only if `access` has a write right
    /// (`ib_access_writable`: local or remote write, remote atomic, MW bind); see
    /// [`Self::is_writable`].
    ///
    /// # Safety
    ///
    /// `ib` is a valid, registered `ib_device`, and the call is made from a uverbs command of
    /// the process that owns the memory.
    pub(crate) unsafe fn get(
        ib: *mut bindings::ib_device,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<Self> {
        let addr = usize::try_from(addr)?;
        let len = usize::try_from(len)?;
        // SAFETY: Guaranteed by the caller; the function checks the range and the flags.
        let raw = from_err_ptr(unsafe {
            bindings::ib_umem_get_va(ib, addr as _, len, access.bits() as _)
        })?;
        let raw = NonNull::new(raw).ok_or(EFAULT)?;
        // INVARIANT: `raw` was just returned by `ib_umem_get_va()`.
        Ok(Self { raw })
    }

    /// Pins `len` bytes at `offset` of dma-buf `fd` for `ib` with IB access flags `access`
    /// (`ib_umem_dmabuf_get_pinned`): the exporter keeps the pages where they are until the
    /// region is released, and they are mapped for the device. An `fd` that is not a dma-buf
    /// fails (`EBADF` or `EINVAL` from the dma-buf core), as does a range beyond the buffer.
    ///
    /// # Safety
    ///
    /// `ib` is a valid, registered `ib_device`, and the call is made from a uverbs command of
    /// the process that passed `fd`.
    pub(crate) unsafe fn get_dmabuf_pinned(
        ib: *mut bindings::ib_device,
        offset: u64,
        len: u64,
        fd: i32,
        access: Access,
    ) -> Result<Self> {
        let offset = usize::try_from(offset)?;
        let len = usize::try_from(len)?;
        // SAFETY: Guaranteed by the caller; the function checks the fd, range and flags.
        let d = from_err_ptr(unsafe {
            bindings::ib_umem_dmabuf_get_pinned(ib, offset as _, len, fd, access.bits() as _)
        })?;
        // SAFETY: `d` is a live `ib_umem_dmabuf` just returned; its `umem` is what
        // `ib_umem_release` takes back.
        let raw = NonNull::new(unsafe { &raw mut (*d).umem }).ok_or(EFAULT)?;
        // INVARIANT: `raw` is the `umem` of the `ib_umem_dmabuf` just returned.
        Ok(Self { raw })
    }

    /// The user address the memory starts at (for a dma-buf, the offset in the buffer).
    pub fn address(&self) -> u64 {
        // SAFETY: `raw` is valid (type invariant); the field is immutable.
        unsafe { (*self.raw.as_ptr()).address as u64 }
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        // SAFETY: `raw` is valid (type invariant); the field is immutable.
        unsafe { (*self.raw.as_ptr()).length as u64 }
    }

    /// Whether the pages were pinned for writing (`FOLL_WRITE`).
    ///
    /// Only then may the device write them. A region pinned without it may be the page
    /// cache of a file the process can only read (a `PROT_READ`, `MAP_SHARED` mapping): a
    /// device write there changes the file. The pin follows the access flags the user gave,
    /// so a driver that makes the device write into a registration for its own reasons
    /// (rings, CQEs, shadow areas named in driver data) must refuse one that is not writable.
    pub fn is_writable(&self) -> bool {
        // SAFETY: `raw` is valid (type invariant); the flag is set once by `ib_umem_get_va`.
        unsafe { bindings::ib_umem_is_writable(self.raw.as_ptr()) }
    }

    /// Whether the region is empty (never, for a pinned region).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest page size in `pgsz_bitmap` that can map the memory with `iova` as the
    /// device address of its first byte; `None` if none can. Records `iova` as the region's
    /// device address (which [`Self::num_blocks`] counts from), hence `&mut self`.
    pub fn best_page_size(&mut self, pgsz_bitmap: u64, iova: u64) -> Option<u64> {
        // SAFETY: `raw` is valid (type invariant); `&mut self` excludes concurrent readers of
        // the `iova` this writes.
        let pgsz =
            unsafe { bindings::ib_umem_find_best_pgsz(self.raw.as_ptr(), pgsz_bitmap as _, iova) };
        (pgsz != 0).then_some(pgsz as u64)
    }

    /// Number of `pgsz` blocks covering the memory.
    pub fn num_blocks(&self, pgsz: u64) -> usize {
        // SAFETY: `raw` is valid (type invariant).
        unsafe { bindings::ib_umem_num_dma_blocks(self.raw.as_ptr(), pgsz as _) }
    }

    /// The bus addresses of the memory's `pgsz` blocks, in order.
    ///
    /// `pgsz` must be at most `PAGE_SIZE` or a value [`Self::best_page_size`] returned;
    /// otherwise `EINVAL`.
    pub fn dma_blocks(&mut self, pgsz: u64) -> Result<DmaBlocks<'_>> {
        if !pgsz.is_power_of_two() {
            return Err(EINVAL);
        }
        // SAFETY: `raw` is valid (type invariant).
        let iova = unsafe { (*self.raw.as_ptr()).iova };
        // The check keeps the device address a `best_page_size` call recorded.
        if pgsz > crate::page::PAGE_SIZE as u64 && self.best_page_size(pgsz, iova) != Some(pgsz) {
            return Err(EINVAL);
        }
        // SAFETY: An all-zero iterator is its initial state; it is started below.
        let mut iter: bindings::ib_block_iter = unsafe { core::mem::zeroed() };
        // SAFETY: `raw` is valid and `pgsz` fits the mapping (checked above).
        unsafe { bindings::__rdma_umem_block_iter_start(&mut iter, self.raw.as_ptr(), pgsz as _) };
        Ok(DmaBlocks { iter, _umem: self })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `raw` is released exactly once (type invariant).
        unsafe { bindings::ib_umem_release(self.raw.as_ptr()) };
    }
}

/// Iterator over the bus addresses of a [`Umem`]'s blocks; see [`Umem::dma_blocks`].
pub struct DmaBlocks<'a> {
    iter: bindings::ib_block_iter,
    _umem: &'a Umem,
}

impl Iterator for DmaBlocks<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        // SAFETY: The iterator was started on the umem, which `'a` keeps alive.
        if unsafe { bindings::__rdma_umem_block_iter_next(&mut self.iter) } {
            // SAFETY: The iterator holds a current block.
            Some(unsafe { bindings::rdma_block_iter_dma_address(&mut self.iter) })
        } else {
            None
        }
    }
}
