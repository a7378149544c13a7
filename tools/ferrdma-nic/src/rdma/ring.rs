//! A ring of fixed-size entries spread over 4 KiB guest pages (SQ, RQ, CQ, EQ, admin).
//!
//! Entry sizes divide 4 KiB, so an entry never straddles two pages and one entry is always
//! one DMA access.

use crate::interface::QUEUE_PAGE_SIZE;

/// Ring geometry: where entry `i` lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    pages: Vec<u64>,
    entries: u32,
    entry_size: u32,
}

impl Ring {
    /// A ring of `entries` entries of `entry_size` bytes (a power of two <= 4096) over
    /// `pages`; `None` if the pages are too few or the geometry is impossible.
    pub fn new(pages: Vec<u64>, entries: u32, entry_size: u32) -> Option<Self> {
        if entries == 0 || !entry_size.is_power_of_two() || u64::from(entry_size) > QUEUE_PAGE_SIZE
        {
            return None;
        }
        let bytes = u64::from(entries) * u64::from(entry_size);
        if (pages.len() as u64) * QUEUE_PAGE_SIZE < bytes {
            return None;
        }
        Some(Self {
            pages,
            entries,
            entry_size,
        })
    }

    /// Number of entries.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Bytes per entry.
    pub fn entry_size(&self) -> u32 {
        self.entry_size
    }

    /// Bus address of entry `index % entries`.
    pub fn addr(&self, index: u32) -> u64 {
        let off = u64::from(index % self.entries) * u64::from(self.entry_size);
        // `new` checked that every entry's page exists.
        let page = self
            .pages
            .get((off / QUEUE_PAGE_SIZE) as usize)
            .copied()
            .unwrap_or(0);
        page + off % QUEUE_PAGE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_map_to_their_pages() {
        let r = Ring::new(vec![0x10000, 0x30000], 256, 32).unwrap();
        assert_eq!(r.addr(0), 0x10000);
        assert_eq!(r.addr(127), 0x10000 + 127 * 32);
        assert_eq!(r.addr(128), 0x30000);
        assert_eq!(r.addr(256), 0x10000, "indices wrap");
        assert!(Ring::new(vec![0], 129, 32).is_none());
        assert!(Ring::new(vec![0], 1, 48).is_none());
        assert!(Ring::new(vec![0], 0, 32).is_none());
    }
}
