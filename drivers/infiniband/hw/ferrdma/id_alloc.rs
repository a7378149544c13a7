// SPDX-License-Identifier: GPL-2.0

//! A fixed-size allocator of small integer ids (doorbell pages, PD numbers).

use kernel::prelude::*;

/// `n` copies of `v` in a heap vector (tables and pools too big for the kernel stack).
pub(crate) fn filled<T: Copy>(n: u32, v: T) -> Result<KVVec<T>> {
    let mut out = KVVec::with_capacity(n as usize, GFP_KERNEL)?;
    for _ in 0..n {
        out.push(v, GFP_KERNEL)?;
    }
    Ok(out)
}

/// Ids `0..n` (`n` rounded up to a multiple of 64), lowest free first.
///
/// The bitmap lives on the heap: the pools of one function add up to kilobytes (8 KiB of PD
/// numbers alone), which must never be built on the kernel stack (probe runs deep in
/// insmod's).
pub(crate) struct IdBitmap {
    words: KVVec<u64>,
}

impl IdBitmap {
    /// `n` ids, all free.
    pub(crate) fn new(n: u32) -> Result<Self> {
        Ok(Self {
            words: filled(n.div_ceil(64), 0)?,
        })
    }

    /// Takes the lowest free id at or above `min`; `None` when all are taken.
    pub(crate) fn alloc(&mut self, min: u32) -> Option<u32> {
        for (i, w) in self.words.iter_mut().enumerate() {
            let base = (i * 64) as u32;
            let mask = if min <= base {
                !0u64
            } else if min - base >= 64 {
                0
            } else {
                !0u64 << (min - base)
            };
            let free = !*w & mask;
            if free != 0 {
                let bit = free.trailing_zeros();
                *w |= 1 << bit;
                return Some(base + bit);
            }
        }
        None
    }

    /// Takes the lowest free id in `min..limit` (a device limit below the pool's size);
    /// `None` when all of them are taken.
    pub(crate) fn alloc_in(&mut self, min: u32, limit: u32) -> Option<u32> {
        let id = self.alloc(min)?;
        if id < limit {
            Some(id)
        } else {
            self.free(id);
            None
        }
    }

    /// How many ids are taken.
    pub(crate) fn in_use(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// Returns `id` to the pool; ids out of range or not taken are ignored.
    pub(crate) fn free(&mut self, id: u32) {
        if let Some(w) = self.words.get_mut((id / 64) as usize) {
            *w &= !(1u64 << (id % 64));
        }
    }
}

#[kunit_tests(ferrdma_id_alloc)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_id_first_and_reuse() -> Result {
        let mut b = IdBitmap::new(128)?;
        assert_eq!(b.alloc(0), Some(0));
        assert_eq!(b.alloc(0), Some(1));
        b.free(0);
        assert_eq!(b.alloc(0), Some(0));
        assert_eq!(b.alloc(0), Some(2));
        Ok(())
    }

    #[test]
    fn minimum_is_honoured_across_words() -> Result {
        let mut b = IdBitmap::new(128)?;
        assert_eq!(b.alloc(1), Some(1));
        assert_eq!(b.alloc(70), Some(70));
        assert_eq!(b.alloc(64), Some(64));
        assert_eq!(b.alloc(128), None);
        Ok(())
    }

    #[test]
    fn exhaustion_and_bad_frees() -> Result {
        let mut b = IdBitmap::new(64)?;
        for i in 0..64 {
            assert_eq!(b.alloc(0), Some(i));
        }
        assert_eq!(b.alloc(0), None);
        b.free(1000);
        assert_eq!(b.alloc(0), None);
        b.free(63);
        assert_eq!(b.alloc(0), Some(63));
        Ok(())
    }

    #[test]
    fn alloc_in_respects_the_limit() -> Result {
        let mut b = IdBitmap::new(128)?;
        assert_eq!(b.alloc_in(1, 3), Some(1));
        assert_eq!(b.alloc_in(1, 3), Some(2));
        assert_eq!(b.alloc_in(1, 3), None);
        // The refused id went back: a wider limit gets it.
        assert_eq!(b.alloc_in(1, 4), Some(3));
        b.free(2);
        assert_eq!(b.alloc_in(1, 3), Some(2));
        Ok(())
    }
}
