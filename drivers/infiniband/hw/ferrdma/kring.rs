// SPDX-License-Identifier: GPL-2.0

//! Rings the driver owns in coherent memory, of any size the device takes.
//!
//! A kernel CQ may have up to `MAX_CQ_ENTRIES` (2^20) 32-byte slots: 32 MiB, far more than one
//! coherent allocation can be (the page allocator's largest block is 4 MiB, and a guest that
//! has run for a while rarely has even that free in one piece). So a ring is made of chunks
//! of at most [`CHUNK_BYTES`]; a ring that fits in one chunk is one allocation the device
//! finds by its address alone, a larger one is described by a page list.

use crate::{interface as hw, pbl::PageList};
use kernel::{
    device,
    dma::Coherent,
    io::{io_read, io_write},
    prelude::*,
};

/// Bytes per chunk: an order-6 allocation (256 KiB), which even a fragmented guest can
/// usually give, and few enough chunks (128) for the largest ring.
const CHUNK_BYTES: usize = 256 * 1024;
/// `u64` words per chunk.
const CHUNK_QWORDS: usize = CHUNK_BYTES / 8;
/// `u64` words per ring page.
const PAGE_QWORDS: usize = hw::QUEUE_PAGE_SIZE as usize / 8;

/// Where word `i` of a ring lives: the chunk and the index in it.
const fn locate(i: usize) -> (usize, usize) {
    (i / CHUNK_QWORDS, i % CHUNK_QWORDS)
}

/// The length in words of chunk `c` of a ring of `qwords` words (0 past the end).
const fn chunk_len(qwords: usize, c: usize) -> usize {
    let start = c.saturating_mul(CHUNK_QWORDS);
    if start >= qwords {
        0
    } else if qwords - start < CHUNK_QWORDS {
        qwords - start
    } else {
        CHUNK_QWORDS
    }
}

/// A zeroed ring of `u64` words in coherent chunks, with the page list that describes it to
/// the device.
///
/// # Invariants
///
/// Every chunk but the last holds [`CHUNK_QWORDS`] words, so word `i` is in chunk
/// `locate(i).0`; `pages` names the ring's pages in order.
pub(crate) struct ChunkedRing {
    chunks: KVec<Coherent<[u64]>>,
    pages: PageList,
}

impl ChunkedRing {
    /// A zeroed ring of `qwords` words; `EINVAL` for none.
    pub(crate) fn zeroed(dev: &device::Device<device::Bound>, qwords: usize) -> Result<Self> {
        if qwords == 0 {
            return Err(EINVAL);
        }
        let n = qwords.div_ceil(CHUNK_QWORDS);
        let mut chunks = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut addrs = KVec::with_capacity(qwords.div_ceil(PAGE_QWORDS), GFP_KERNEL)?;
        for c in 0..n {
            let len = chunk_len(qwords, c);
            crate::fault::step()?;
            let chunk = Coherent::<u64>::zeroed_slice(dev, len, GFP_KERNEL)?;
            let base = chunk.dma_address();
            for p in 0..len.div_ceil(PAGE_QWORDS) {
                addrs.push(base + (p as u64) * hw::QUEUE_PAGE_SIZE, GFP_KERNEL)?;
            }
            chunks.push(chunk, GFP_KERNEL)?;
        }
        let pages = PageList::new(dev, &addrs, hw::QUEUE_PAGE_SIZE)?;
        Ok(Self { chunks, pages })
    }

    /// Word `i`; `EINVAL` past the end.
    pub(crate) fn read(&self, i: usize) -> Result<u64> {
        let (c, j) = locate(i);
        let chunk = self.chunks.get(c).ok_or(EINVAL)?;
        Ok(io_read!(chunk, [try: j]))
    }

    /// Writes word `i`; `EINVAL` past the end.
    pub(crate) fn write(&self, i: usize, v: u64) -> Result {
        let (c, j) = locate(i);
        let chunk = self.chunks.get(c).ok_or(EINVAL)?;
        io_write!(chunk, [try: j], v);
        Ok(())
    }

    /// The page list to give the device.
    pub(crate) fn descriptor(&self) -> hw::PageList {
        self.pages.descriptor()
    }
}

#[kunit_tests(ferrdma_kring)]
mod tests {
    use super::*;

    #[test]
    fn words_are_found_in_their_chunk() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(CHUNK_QWORDS - 1), (0, CHUNK_QWORDS - 1));
        assert_eq!(locate(CHUNK_QWORDS), (1, 0));
        assert_eq!(locate(5 * CHUNK_QWORDS + 7), (5, 7));
    }

    #[test]
    fn chunks_are_full_but_the_last() {
        // The largest CQ: 2^20 slots of 4 words, 128 full chunks.
        let biggest = hw::MAX_CQ_ENTRIES as usize * 4;
        assert_eq!(biggest.div_ceil(CHUNK_QWORDS), 128);
        assert_eq!(chunk_len(biggest, 0), CHUNK_QWORDS);
        assert_eq!(chunk_len(biggest, 127), CHUNK_QWORDS);
        assert_eq!(chunk_len(biggest, 128), 0);
        // A ring smaller than a chunk is one chunk of its own size.
        assert_eq!(chunk_len(16, 0), 16);
        assert_eq!(chunk_len(16, 1), 0);
        // One word more than a chunk: a second chunk of one word.
        assert_eq!(chunk_len(CHUNK_QWORDS + 1, 1), 1);
        assert_eq!(chunk_len(usize::MAX, usize::MAX), 0);
    }
}
