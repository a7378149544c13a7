//! Page lists: resolving a [`PageList`] descriptor into the page addresses it names.
//!
//! The list is read once, when the command that names it runs, so later changes by the
//! driver cannot race with the device. Every address and count is checked: page addresses
//! must be aligned to the page size, list arrays must stay inside one 4 KiB page, and the
//! page count is bounded by [`MAX_PBL_PAGES`].

use thiserror::Error;

use crate::dma::{DmaError, GuestMemory};
use crate::interface::{
    PageList, MAX_PBL_PAGES, PBL_ENTRIES_PER_PAGE, PBL_LEVEL_1, PBL_LEVEL_2, PBL_LEVEL_CONTIG,
    QUEUE_PAGE_SIZE,
};

/// Why a page list was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PageListError {
    #[error("page list with {0} pages (1..={MAX_PBL_PAGES} allowed)")]
    Count(u32),
    #[error("page list level {0} does not exist")]
    Level(u8),
    #[error("page list entry {addr:#x} is not aligned to the page or list size")]
    Misaligned { addr: u64 },
    #[error("contiguous pages from {addr:#x} wrap past 2^64")]
    Wrap { addr: u64 },
    #[error("reading the page list: {0}")]
    Dma(#[from] DmaError),
}

/// Reads `count` little-endian u64 entries at `addr`; the array must lie in one 4 KiB page.
fn read_array(mem: &dyn GuestMemory, addr: u64, count: u32) -> Result<Vec<u64>, PageListError> {
    let bytes = u64::from(count) * 8;
    if addr % 8 != 0 || (addr % QUEUE_PAGE_SIZE) + bytes > QUEUE_PAGE_SIZE {
        return Err(PageListError::Misaligned { addr });
    }
    // count <= 512, so at most 4 KiB.
    let mut raw = vec![0u8; bytes as usize];
    mem.read(addr, &mut raw)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect())
}

/// The page addresses `pl` names, each checked to be aligned to `1 << page_shift`.
pub fn resolve(
    mem: &dyn GuestMemory,
    pl: &PageList,
    page_shift: u32,
) -> Result<Vec<u64>, PageListError> {
    if pl.npages == 0 || pl.npages > MAX_PBL_PAGES {
        return Err(PageListError::Count(pl.npages));
    }
    let page_size = 1u64 << page_shift.min(40);
    let pages = match pl.level {
        PBL_LEVEL_CONTIG => {
            let span = u64::from(pl.npages) * page_size;
            if pl.addr.checked_add(span).is_none() {
                return Err(PageListError::Wrap { addr: pl.addr });
            }
            (0..u64::from(pl.npages))
                .map(|i| pl.addr + i * page_size)
                .collect()
        }
        PBL_LEVEL_1 => {
            if pl.npages > PBL_ENTRIES_PER_PAGE {
                return Err(PageListError::Count(pl.npages));
            }
            read_array(mem, pl.addr, pl.npages)?
        }
        PBL_LEVEL_2 => {
            let roots = pl.npages.div_ceil(PBL_ENTRIES_PER_PAGE);
            let mut pages = Vec::with_capacity(pl.npages as usize);
            let mut left = pl.npages;
            for leaf in read_array(mem, pl.addr, roots)? {
                let n = left.min(PBL_ENTRIES_PER_PAGE);
                pages.extend(read_array(mem, leaf, n)?);
                left -= n;
            }
            pages
        }
        other => return Err(PageListError::Level(other)),
    };
    if let Some(&bad) = pages.iter().find(|&&a| a % page_size != 0) {
        return Err(PageListError::Misaligned { addr: bad });
    }
    Ok(pages)
}
