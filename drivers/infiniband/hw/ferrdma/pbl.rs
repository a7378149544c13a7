// SPDX-License-Identifier: GPL-2.0

//! Page lists: how the device finds the pages of a ring or memory region (manual, "Page
//! lists"). One page is named directly, a few pages through one list page, many through a
//! root page of list pages.

use crate::interface as hw;
use kernel::{device, dma::Coherent, io::io_write, prelude::*};

/// Page addresses one list page holds.
const PER_PAGE: usize = hw::PBL_ENTRIES_PER_PAGE as usize;

/// How `n` pages of size `pgsz` at `addrs` are described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Physically contiguous: the first address says it all.
    Contiguous,
    /// One list page.
    Level1,
    /// A root page naming this many list pages.
    Level2(usize),
}

/// The cheapest description of `addrs` (pages of `pgsz` bytes); `EINVAL` when there are no
/// pages or more than two levels can hold.
pub(crate) fn shape(addrs: &[u64], pgsz: u64) -> Result<Shape> {
    let n = addrs.len();
    if n == 0 || n > hw::MAX_PBL_PAGES as usize {
        return Err(EINVAL);
    }
    let contiguous = addrs
        .iter()
        .enumerate()
        .all(|(i, &a)| Some(a) == addrs[0].checked_add(i as u64 * pgsz));
    Ok(if contiguous {
        Shape::Contiguous
    } else if n <= PER_PAGE {
        Shape::Level1
    } else {
        Shape::Level2(n.div_ceil(PER_PAGE))
    })
}

/// A page list and the list pages it needs, kept for as long as the device may read them.
pub(crate) struct PageList {
    list: hw::PageList,
    _pages: KVec<Coherent<[u64]>>,
}

impl PageList {
    /// Describes `addrs`, pages of `pgsz` bytes.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        addrs: &[u64],
        pgsz: u64,
    ) -> Result<Self> {
        let npages = u32::try_from(addrs.len())?;
        let mut pages = KVec::new();
        let (addr, level) = match shape(addrs, pgsz)? {
            Shape::Contiguous => (addrs[0], hw::PBL_LEVEL_CONTIG),
            Shape::Level1 => {
                let p = list_page(dev, addrs)?;
                let a = p.dma_address();
                pages.push(p, GFP_KERNEL)?;
                (a, hw::PBL_LEVEL_1)
            }
            Shape::Level2(leaves) => {
                let (root, list_pages) = two_levels(dev, leaves, addrs.chunks(PER_PAGE))?;
                let a = root.dma_address();
                pages = list_pages;
                pages.push(root, GFP_KERNEL)?;
                (a, hw::PBL_LEVEL_2)
            }
        };
        Ok(Self {
            list: hw::PageList {
                addr,
                npages,
                level,
                rsvd0: 0,
                rsvd1: 0,
            },
            _pages: pages,
        })
    }

    /// The descriptor to put in an admin command.
    pub(crate) fn descriptor(&self) -> hw::PageList {
        self.list
    }
}

/// The pages of a two-level list: a list page for each of the `n` `chunks` (at most 512
/// addresses each) and a root page naming them; returns the root and the list pages.
pub(crate) fn two_levels<'a>(
    dev: &device::Device<device::Bound>,
    n: usize,
    chunks: impl Iterator<Item = &'a [u64]>,
) -> Result<(Coherent<[u64]>, KVec<Coherent<[u64]>>)> {
    let mut leaves = KVec::with_capacity(n, GFP_KERNEL)?;
    let mut addrs = KVec::with_capacity(n, GFP_KERNEL)?;
    for chunk in chunks {
        let leaf = list_page(dev, chunk)?;
        addrs.push(leaf.dma_address(), GFP_KERNEL)?;
        leaves.push(leaf, GFP_KERNEL)?;
    }
    Ok((list_page(dev, &addrs)?, leaves))
}

/// A coherent 4 KiB page holding `addrs` (at most 512; the rest zero).
fn list_page(dev: &device::Device<device::Bound>, addrs: &[u64]) -> Result<Coherent<[u64]>> {
    let page = Coherent::<u64>::zeroed_slice(dev, PER_PAGE, GFP_KERNEL)?;
    for (i, &a) in addrs.iter().enumerate() {
        io_write!(page, [try: i], a.to_le());
    }
    Ok(page)
}

#[kunit_tests(ferrdma_pbl)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let pg = 4096u64;
        assert!(shape(&[], pg).is_err());
        assert_eq!(shape(&[0x1000], pg).ok(), Some(Shape::Contiguous));
        assert_eq!(
            shape(&[0x1000, 0x2000, 0x3000], pg).ok(),
            Some(Shape::Contiguous)
        );
        assert_eq!(shape(&[0x1000, 0x3000], pg).ok(), Some(Shape::Level1));
        assert_eq!(shape(&[0x3000, 0x2000], pg).ok(), Some(Shape::Level1));
        // An address whose successor would overflow is not contiguous with anything.
        assert_eq!(shape(&[u64::MAX - 4095, 0], pg).ok(), Some(Shape::Level1));
        let mut v = KVec::new();
        for i in 0..1025u64 {
            assert!(v.push(i * 2 * pg, GFP_KERNEL).is_ok());
        }
        assert_eq!(shape(&v[..512], pg).ok(), Some(Shape::Level1));
        assert_eq!(shape(&v[..513], pg).ok(), Some(Shape::Level2(2)));
        assert_eq!(shape(&v, pg).ok(), Some(Shape::Level2(3)));
    }
}
