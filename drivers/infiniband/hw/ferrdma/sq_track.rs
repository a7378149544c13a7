// SPDX-License-Identifier: GPL-2.0

//! The send-queue bookkeeping of a kernel QP, apart from its ring memory: which WQE starts at
//! which quantum, which are outstanding, and what a CQE completes. The device names a WQE by
//! the quantum it starts at and writes CQEs only for signaled (or failed) WQEs, so a CQE also
//! retires every unsignaled WQE before it; a flush reports them all, padding excepted.

use kernel::{infiniband::WcOpcode, prelude::*};

/// What the driver remembers of a posted send WQE, at the index of its first quantum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SqEntry {
    pub(crate) wr_id: u64,
    pub(crate) opcode: WcOpcode,
    pub(crate) bytes: u32,
    pub(crate) quanta: u8,
    /// Padding: never reported.
    pub(crate) nop: bool,
}

impl SqEntry {
    /// A NOP quantum written to keep a WQE inside its 8-quantum chunk.
    pub(crate) const PADDING: Self = Self {
        wr_id: 0,
        opcode: WcOpcode::Send,
        bytes: 0,
        quanta: 1,
        nop: true,
    };
}

/// Producer `head` (and the pass polarity there), oldest unreported WQE `tail`, and the
/// quanta in between (`used`), over a ring of `size` quanta.
///
/// # Invariants
///
/// `head`, `tail` < `size` = `entries.len()`; `used` <= `size`; walking from `tail` by each
/// entry's quanta reaches `head` after exactly `used` quanta.
pub(crate) struct SqTrack {
    size: u32,
    head: u32,
    tail: u32,
    used: u32,
    polarity: bool,
    entries: KVec<SqEntry>,
}

impl SqTrack {
    /// An empty queue of `size` quanta (a power of two, at least 8).
    pub(crate) fn new(size: u32) -> Result<Self> {
        if size < 8 || !size.is_power_of_two() {
            return Err(EINVAL);
        }
        let mut entries = KVec::with_capacity(size as usize, GFP_KERNEL)?;
        for _ in 0..size {
            entries.push(SqEntry::PADDING, GFP_KERNEL)?;
        }
        Ok(Self {
            size,
            head: 0,
            tail: 0,
            used: 0,
            polarity: true,
            entries,
        })
    }

    /// Where the next WQE goes.
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    /// The valid-bit value of the pass `head` is on.
    pub(crate) fn polarity(&self) -> bool {
        self.polarity
    }

    /// Whether `quanta` more quanta fit.
    pub(crate) fn has_room(&self, quanta: u32) -> bool {
        self.used.saturating_add(quanta) <= self.size
    }

    /// Records `e` at `head` and moves `head` past it. The caller checked [`Self::has_room`]
    /// and that `e` does not cross the end of the ring.
    pub(crate) fn push(&mut self, e: SqEntry) {
        let q = u32::from(e.quanta.max(1));
        if let Some(slot) = self.entries.get_mut(self.head as usize) {
            *slot = e;
        }
        self.head += q;
        if self.head >= self.size {
            self.head -= self.size;
            self.polarity = !self.polarity;
        }
        self.used += q;
    }

    /// Retires the WQE at the tail.
    fn retire_tail(&mut self) -> Option<SqEntry> {
        if self.used == 0 {
            return None;
        }
        let e = *self.entries.get(self.tail as usize)?;
        let q = u32::from(e.quanta.max(1));
        self.tail = (self.tail + q) % self.size;
        self.used = self.used.saturating_sub(q);
        Some(e)
    }

    /// A successful CQE for the WQE at quantum `idx`: retires the WQEs before it and returns
    /// it. `None`, changing nothing, if no outstanding WQE is there.
    pub(crate) fn complete(&mut self, idx: u32) -> Option<SqEntry> {
        if !self.starts_outstanding_wqe(idx) {
            return None;
        }
        loop {
            let t = self.tail;
            let e = self.retire_tail()?;
            if t == idx {
                return Some(e);
            }
        }
    }

    /// Whether an outstanding WQE starts at quantum `idx` (not just covers it).
    fn starts_outstanding_wqe(&self, idx: u32) -> bool {
        let (mut i, mut left) = (self.tail, self.used);
        while left > 0 {
            if i == idx {
                return true;
            }
            let Some(e) = self.entries.get(i as usize) else {
                return false;
            };
            let q = u32::from(e.quanta.max(1));
            i = (i + q) % self.size;
            left = left.saturating_sub(q);
        }
        false
    }

    /// Retires the oldest outstanding WQE other than padding, for a flush; returns it and
    /// whether more remain.
    pub(crate) fn pop_oldest(&mut self) -> Option<(SqEntry, bool)> {
        while let Some(e) = self.retire_tail() {
            if !e.nop {
                return Some((e, self.has_work()));
            }
        }
        None
    }

    /// Whether a WQE other than padding is outstanding.
    pub(crate) fn has_work(&self) -> bool {
        let (mut i, mut left) = (self.tail, self.used);
        while left > 0 {
            let Some(e) = self.entries.get(i as usize) else {
                return false;
            };
            if !e.nop {
                return true;
            }
            let q = u32::from(e.quanta.max(1));
            i = (i + q) % self.size;
            left = left.saturating_sub(q);
        }
        false
    }
}

#[kunit_tests(ferrdma_sq_track)]
mod tests {
    use super::*;

    fn wqe(wr_id: u64, quanta: u8) -> SqEntry {
        SqEntry {
            wr_id,
            opcode: WcOpcode::RdmaWrite,
            bytes: 100,
            quanta,
            nop: false,
        }
    }

    #[test]
    fn a_cqe_retires_the_unsignaled_wqes_before_it() -> Result {
        let mut t = SqTrack::new(16)?;
        t.push(wqe(1, 1));
        t.push(wqe(2, 2));
        t.push(wqe(3, 1));
        // Only WQE 3 (at quantum 3) was signaled.
        assert_eq!(t.complete(3).map(|e| e.wr_id), Some(3));
        assert!(!t.has_work());
        assert!(t.has_room(16));
        Ok(())
    }

    #[test]
    fn a_cqe_for_no_outstanding_wqe_changes_nothing() -> Result {
        let mut t = SqTrack::new(16)?;
        t.push(wqe(1, 2));
        assert_eq!(t.complete(1), None);
        assert_eq!(t.complete(5), None);
        assert_eq!(t.complete(99), None);
        assert_eq!(t.complete(0).map(|e| e.wr_id), Some(1));
        assert_eq!(t.complete(0), None);
        Ok(())
    }

    #[test]
    fn the_head_wraps_and_flips_the_polarity() -> Result {
        let mut t = SqTrack::new(8)?;
        for i in 0..4 {
            t.push(wqe(i, 2));
        }
        assert!(!t.has_room(1));
        assert_eq!((t.head(), t.polarity()), (0, false));
        assert_eq!(t.complete(6).map(|e| e.wr_id), Some(3));
        t.push(wqe(9, 1));
        assert_eq!(t.complete(0).map(|e| e.wr_id), Some(9));
        Ok(())
    }

    #[test]
    fn a_flush_reports_every_wqe_but_padding() -> Result {
        let mut t = SqTrack::new(16)?;
        t.push(wqe(1, 1));
        t.push(SqEntry::PADDING);
        t.push(wqe(2, 4));
        t.push(SqEntry::PADDING);
        assert_eq!(
            t.pop_oldest().map(|(e, more)| (e.wr_id, more)),
            Some((1, true))
        );
        assert_eq!(
            t.pop_oldest().map(|(e, more)| (e.wr_id, more)),
            Some((2, false))
        );
        assert_eq!(t.pop_oldest(), None);
        assert!(t.has_room(16));
        Ok(())
    }

    #[test]
    fn sizes_must_be_powers_of_two() {
        assert!(SqTrack::new(12).is_err());
        assert!(SqTrack::new(4).is_err());
        assert!(SqTrack::new(32).is_ok());
    }
}
