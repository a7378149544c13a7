//! Memory regions and the address translation and protection check every data access makes.
//!
//! A lookup checks, in this order: the STag index names a registered MR, its key byte
//! matches, the MR has not been invalidated, the PD matches, the range lies inside the MR
//! (overflow-checked), and the MR grants the right. Only then is the range translated into
//! bus-address segments, one per page (adjacent pages merged).
//!
//! A privileged QP's local accesses may also name [`LOCAL_DMA_STAG`]: the address is then a
//! bus address used as is, checked only against guest memory (see [`MrTable::translate_as`]).

use crate::dma::GuestMemory;
use crate::interface::{
    stag_index, LOCAL_DMA_STAG, MAX_MR, MR_ACCESS_LOCAL_WRITE, MR_ACCESS_REMOTE_READ,
    MR_ACCESS_REMOTE_WRITE, MR_ACCESS_ZERO_BASED,
};

/// One contiguous piece of guest memory: bus address and length.
pub type Seg = (u64, u64);
/// The segments of one access: most packets need one or two, kept inline (no heap
/// allocation a packet on the data path).
pub type Segs = smallvec::SmallVec<[Seg; 4]>;

/// What an access wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Gather for a local send or write source (always allowed).
    LocalRead,
    /// Scatter of a receive or RDMA READ response.
    LocalWrite,
    /// Inbound RDMA READ.
    RemoteRead,
    /// Inbound RDMA WRITE.
    RemoteWrite,
}

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessFault {
    #[error("no MR with this STag index")]
    NoMr,
    #[error("STag key mismatch")]
    Key,
    #[error("MR was invalidated")]
    Invalid,
    #[error("PD mismatch")]
    Pd,
    #[error("range outside the MR")]
    Bounds,
    #[error("MR does not grant the access")]
    Rights,
}

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct Mr {
    pub key: u8,
    pub pd: u32,
    pub access: u32,
    pub iova: u64,
    pub length: u64,
    pub page_shift: u32,
    pub pages: Vec<u64>,
    pub valid: bool,
    /// Non-zero for a fast-registration MR (ALLOC_MR): the most pages a FAST_REG WQE may
    /// install. Its translation exists only while `valid`.
    pub max_pages: u32,
}

impl Mr {
    /// A fast-registration MR as ALLOC_MR creates it: invalid, nothing to translate.
    pub fn fast_reg(key: u8, pd: u32, max_pages: u32) -> Self {
        Self {
            key,
            pd,
            access: 0,
            iova: 0,
            length: 0,
            page_shift: 12,
            pages: Vec::new(),
            valid: false,
            max_pages,
        }
    }

    /// Whether the MR was made by ALLOC_MR for fast registration.
    pub fn is_fast_reg(&self) -> bool {
        self.max_pages != 0
    }

    /// Page addresses this MR counts against [`MAX_TOTAL_PAGES`]: a fast-registration MR
    /// holds its maximum from allocation on, so a FAST_REG never runs out.
    fn held(&self) -> usize {
        if self.is_fast_reg() {
            self.max_pages as usize
        } else {
            self.pages.len()
        }
    }

    /// The offset of `va` in the MR if `[va, va + len)` lies within it.
    fn bounds(&self, va: u64, len: u64) -> Result<u64, AccessFault> {
        let base = if self.access & MR_ACCESS_ZERO_BASED != 0 {
            0
        } else {
            self.iova
        };
        let start = va.checked_sub(base).ok_or(AccessFault::Bounds)?;
        let end = start.checked_add(len).ok_or(AccessFault::Bounds)?;
        if end > self.length {
            return Err(AccessFault::Bounds);
        }
        Ok(start)
    }

    /// Bus-address segments of `[va, va + len)`; `len` must be non-zero.
    fn segments(&self, va: u64, len: u64) -> Result<Segs, AccessFault> {
        let start = self.bounds(va, len)?;
        let ps = 1u64 << self.page_shift;
        let mut off = (self.iova & (ps - 1)) + start;
        let mut left = len;
        let mut segs = Segs::new();
        while left > 0 {
            let page = self
                .pages
                .get((off >> self.page_shift) as usize)
                .copied()
                .ok_or(AccessFault::Bounds)?;
            let in_page = off & (ps - 1);
            let take = (ps - in_page).min(left);
            let addr = page + in_page;
            match segs.last_mut() {
                Some(last) if last.0.checked_add(last.1) == Some(addr) => last.1 += take,
                _ => segs.push((addr, take)),
            }
            off += take;
            left -= take;
        }
        Ok(segs)
    }
}

/// The MR table, indexed by STag index.
#[derive(Debug)]
pub struct MrTable {
    slots: Vec<Option<Mr>>,
    /// Pages held by all MRs (bounded so a driver cannot exhaust device memory).
    pub total_pages: usize,
}

impl Default for MrTable {
    fn default() -> Self {
        Self::new(MAX_MR)
    }
}

/// Most page addresses all MRs may hold together (32 MiB of device memory).
pub const MAX_TOTAL_PAGES: usize = 4 << 20;

impl MrTable {
    /// An empty table of `n` slots (at most [`MAX_MR`]).
    pub fn new(n: u32) -> Self {
        Self {
            slots: (0..n.min(MAX_MR)).map(|_| None).collect(),
            total_pages: 0,
        }
    }

    /// The MR at `stag`'s index, whatever its key.
    pub fn slot(&self, stag: u32) -> Option<&Mr> {
        self.slots.get(stag_index(stag) as usize)?.as_ref()
    }

    /// Whether `stag`'s index is inside the table.
    pub fn in_range(&self, stag: u32) -> bool {
        (stag_index(stag) as usize) < self.slots.len()
    }

    /// Installs `mr` at `stag`'s index (the caller checked that it is free).
    pub fn insert(&mut self, stag: u32, mr: Mr) {
        if let Some(s) = self.slots.get_mut(stag_index(stag) as usize) {
            self.total_pages += mr.held();
            *s = Some(mr);
        }
    }

    /// Removes the MR named by `stag`: the key must match, except for a fast-registration
    /// MR, whose key belongs to the data path (FAST_REG changes it) and is ignored.
    pub fn remove(&mut self, stag: u32) -> Option<Mr> {
        let s = self.slots.get_mut(stag_index(stag) as usize)?;
        let m = s.as_ref()?;
        if !m.is_fast_reg() && m.key != stag as u8 {
            return None;
        }
        let mr = s.take()?;
        self.total_pages = self.total_pages.saturating_sub(mr.held());
        Some(mr)
    }

    /// The MR at `stag`'s index for a FAST_REG (any key), mutable.
    pub fn slot_mut(&mut self, stag: u32) -> Option<&mut Mr> {
        self.slots.get_mut(stag_index(stag) as usize)?.as_mut()
    }

    /// Drops every MR.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
        self.total_pages = 0;
    }

    fn lookup(&self, stag: u32, pd: u32) -> Result<&Mr, AccessFault> {
        let mr = self.slot(stag).ok_or(AccessFault::NoMr)?;
        if mr.key != stag as u8 {
            return Err(AccessFault::Key);
        }
        if !mr.valid {
            return Err(AccessFault::Invalid);
        }
        if mr.pd != pd {
            return Err(AccessFault::Pd);
        }
        Ok(mr)
    }

    /// The MR `stag` names if it may be used for `need` by `pd`.
    fn permitted(&self, stag: u32, pd: u32, need: Need) -> Result<&Mr, AccessFault> {
        let mr = self.lookup(stag, pd)?;
        let right = match need {
            Need::LocalRead => 0,
            Need::LocalWrite => MR_ACCESS_LOCAL_WRITE,
            Need::RemoteRead => MR_ACCESS_REMOTE_READ,
            Need::RemoteWrite => MR_ACCESS_REMOTE_WRITE,
        };
        if mr.access & right != right {
            return Err(AccessFault::Rights);
        }
        Ok(mr)
    }

    /// Checks an access and translates it. A zero-length access is always allowed.
    pub fn translate(
        &self,
        stag: u32,
        pd: u32,
        va: u64,
        len: u64,
        need: Need,
    ) -> Result<Segs, AccessFault> {
        if len == 0 {
            return Ok(Segs::new());
        }
        self.permitted(stag, pd, need)?.segments(va, len)
    }

    /// Checks an access like [`MrTable::translate`] without building its segments (so a
    /// check of a huge range costs nothing).
    pub fn check(
        &self,
        stag: u32,
        pd: u32,
        va: u64,
        len: u64,
        need: Need,
    ) -> Result<(), AccessFault> {
        if len == 0 {
            return Ok(());
        }
        self.permitted(stag, pd, need)?.bounds(va, len).map(|_| ())
    }

    /// Whether an access of a QP that may use the local DMA STag (`dma` is `Some` for a
    /// privileged QP) is an identity translation: a local access through [`LOCAL_DMA_STAG`].
    fn local_dma(dma: Option<&dyn GuestMemory>, stag: u32, need: Need) -> Option<&dyn GuestMemory> {
        let local = matches!(need, Need::LocalRead | Need::LocalWrite);
        dma.filter(|_| local && stag == LOCAL_DMA_STAG)
    }

    /// A local DMA STag access: `[va, va + len)` must not wrap and must be accessible guest
    /// memory (writable for a scatter); a fault is reported like a range outside an MR.
    fn probe(mem: &dyn GuestMemory, va: u64, len: u64, need: Need) -> Result<(), AccessFault> {
        va.checked_add(len).ok_or(AccessFault::Bounds)?;
        mem.probe(va, len, need == Need::LocalWrite)
            .map_err(|_| AccessFault::Bounds)
    }

    /// [`MrTable::translate`] for a QP that may use [`LOCAL_DMA_STAG`] when `dma` is `Some`
    /// (its guest memory): a local access through that STag translates to itself, for any
    /// PD, and is refused if the range is not accessible guest memory. Remote accesses and
    /// QPs without `dma` see STag 0 as an unknown STag (MR index 0 is never registered).
    pub fn translate_as(
        &self,
        dma: Option<&dyn GuestMemory>,
        stag: u32,
        pd: u32,
        va: u64,
        len: u64,
        need: Need,
    ) -> Result<Segs, AccessFault> {
        match Self::local_dma(dma, stag, need) {
            Some(_) if len == 0 => Ok(Segs::new()),
            Some(mem) => Self::probe(mem, va, len, need).map(|()| smallvec::smallvec![(va, len)]),
            None => self.translate(stag, pd, va, len, need),
        }
    }

    /// [`MrTable::check`] with the local DMA STag rule of [`MrTable::translate_as`].
    pub fn check_as(
        &self,
        dma: Option<&dyn GuestMemory>,
        stag: u32,
        pd: u32,
        va: u64,
        len: u64,
        need: Need,
    ) -> Result<(), AccessFault> {
        match Self::local_dma(dma, stag, need) {
            Some(_) if len == 0 => Ok(()),
            Some(mem) => Self::probe(mem, va, len, need),
            None => self.check(stag, pd, va, len, need),
        }
    }

    /// Invalidates the MR named by `stag` if it belongs to `pd`.
    pub fn invalidate(&mut self, stag: u32, pd: u32) -> Result<(), AccessFault> {
        self.lookup(stag, pd)?;
        if let Some(Some(mr)) = self.slots.get_mut(stag_index(stag) as usize) {
            mr.valid = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(access: u32) -> Mr {
        Mr {
            key: 0x12,
            pd: 3,
            access,
            iova: 0x7000_0800,
            length: 0x2000,
            page_shift: 12,
            pages: vec![0x10000, 0x11000, 0x40000],
            valid: true,
            max_pages: 0,
        }
    }

    #[test]
    fn translation_and_checks() {
        let mut t = MrTable::new(MAX_MR);
        let stag = (5 << 8) | 0x12;
        t.insert(stag, mr(MR_ACCESS_LOCAL_WRITE));
        // Offset 0x800 into page 0; 0x1000 bytes spans pages 0 and 1 (adjacent: merged).
        assert_eq!(
            t.translate(stag, 3, 0x7000_0800, 0x1000, Need::LocalRead),
            Ok(smallvec::smallvec![(0x10800, 0x1000)])
        );
        assert_eq!(
            t.translate(stag, 3, 0x7000_1f00, 0x200, Need::LocalWrite),
            Ok(smallvec::smallvec![(0x11f00, 0x100), (0x40000, 0x100)])
        );
        assert_eq!(
            t.translate(stag, 3, 0x7000_2700, 0x100, Need::LocalRead),
            Ok(smallvec::smallvec![(0x40700, 0x100)])
        );
        let bad = |va, len, need| t.translate(stag, 3, va, len, need).unwrap_err();
        assert_eq!(bad(0x7000_07ff, 1, Need::LocalRead), AccessFault::Bounds);
        assert_eq!(bad(0x7000_2800, 1, Need::LocalRead), AccessFault::Bounds);
        assert_eq!(bad(u64::MAX, 2, Need::LocalRead), AccessFault::Bounds);
        assert_eq!(bad(0x7000_0800, 1, Need::RemoteWrite), AccessFault::Rights);
        assert_eq!(
            t.translate(stag ^ 1, 3, 0x7000_0800, 1, Need::LocalRead),
            Err(AccessFault::Key)
        );
        assert_eq!(
            t.translate(stag, 4, 0x7000_0800, 1, Need::LocalRead),
            Err(AccessFault::Pd)
        );
        assert_eq!(
            t.translate(6 << 8, 3, 0, 1, Need::LocalRead),
            Err(AccessFault::NoMr)
        );
        assert_eq!(
            t.translate(u32::MAX, 3, 0, 0, Need::LocalRead),
            Ok(smallvec::smallvec![])
        );
        t.invalidate(stag, 3).unwrap();
        assert_eq!(
            t.translate(stag, 3, 0x7000_0800, 1, Need::LocalRead),
            Err(AccessFault::Invalid)
        );
        assert!(t.remove(stag ^ 1).is_none());
        assert!(t.remove(stag).is_some());
        assert_eq!(t.total_pages, 0);
    }

    #[test]
    fn zero_based() {
        let mut t = MrTable::new(MAX_MR);
        t.insert(0x112, mr(MR_ACCESS_ZERO_BASED));
        assert_eq!(
            t.translate(0x112, 3, 0, 0x10, Need::LocalRead),
            Ok(smallvec::smallvec![(0x10800, 0x10)])
        );
        assert!(t.translate(0x112, 3, 0x2000, 1, Need::LocalRead).is_err());
    }
}
