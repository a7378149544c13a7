// SPDX-License-Identifier: GPL-2.0

//! A fixed-size allocator of small integer ids (doorbell pages, PD numbers).

use kernel::prelude::*;

/// Ids `0..64 * WORDS`, lowest free first.
pub(crate) struct IdBitmap<const WORDS: usize> {
    words: [u64; WORDS],
}

impl<const WORDS: usize> IdBitmap<WORDS> {
    /// All ids free.
    pub(crate) const fn new() -> Self {
        Self { words: [0; WORDS] }
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
    fn lowest_free_id_first_and_reuse() {
        let mut b = IdBitmap::<2>::new();
        assert_eq!(b.alloc(0), Some(0));
        assert_eq!(b.alloc(0), Some(1));
        b.free(0);
        assert_eq!(b.alloc(0), Some(0));
        assert_eq!(b.alloc(0), Some(2));
    }

    #[test]
    fn minimum_is_honoured_across_words() {
        let mut b = IdBitmap::<2>::new();
        assert_eq!(b.alloc(1), Some(1));
        assert_eq!(b.alloc(70), Some(70));
        assert_eq!(b.alloc(64), Some(64));
        assert_eq!(b.alloc(128), None);
    }

    #[test]
    fn exhaustion_and_bad_frees() {
        let mut b = IdBitmap::<1>::new();
        for i in 0..64 {
            assert_eq!(b.alloc(0), Some(i));
        }
        assert_eq!(b.alloc(0), None);
        b.free(1000);
        assert_eq!(b.alloc(0), None);
        b.free(63);
        assert_eq!(b.alloc(0), Some(63));
    }

    #[test]
    fn alloc_in_respects_the_limit() {
        let mut b = IdBitmap::<2>::new();
        assert_eq!(b.alloc_in(1, 3), Some(1));
        assert_eq!(b.alloc_in(1, 3), Some(2));
        assert_eq!(b.alloc_in(1, 3), None);
        // The refused id went back: a wider limit gets it.
        assert_eq!(b.alloc_in(1, 4), Some(3));
        b.free(2);
        assert_eq!(b.alloc_in(1, 3), Some(2));
    }
}
