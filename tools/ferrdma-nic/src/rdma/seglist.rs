//! Random access by byte offset into a message's memory. The wire transport reads and
//! writes one packet's worth at an arbitrary offset of a message (a retransmission, a READ
//! response in the middle), so pieces carry their start offsets and a lookup is a binary
//! search, not a walk from the beginning.
//!
//! [`SegList`] holds guest-physical segments. [`MrRange`] holds what the WQE or RETH named
//! (STag, address, length) and translates only the bytes of one access, when it happens:
//! a message of any size costs a few words of memory however many pages it spans, which
//! keeps what a guest (or a peer) can make the device hold bounded by the object counts.

use crate::dma::GuestMemory;

use super::mr::{AccessFault, MrTable, Need, Seg};

/// Segments and the message offset each one starts at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegList {
    segs: Vec<Seg>,
    starts: Vec<u64>,
    len: u64,
}

/// A guest access through a `SegList` failed: the range is outside it, or the memory is not
/// accessible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegFault;

impl SegList {
    pub fn new(segs: Vec<Seg>) -> Self {
        let mut starts = Vec::with_capacity(segs.len());
        let mut len = 0u64;
        for &(_, l) in &segs {
            starts.push(len);
            len = len.saturating_add(l);
        }
        Self { segs, starts, len }
    }

    /// Total bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Walks the pieces of `[off, off + n)`, calling `f(addr, piece_offset, piece_len)`.
    fn walk(
        &self,
        off: u64,
        n: usize,
        mut f: impl FnMut(u64, usize, usize) -> Result<(), SegFault>,
    ) -> Result<(), SegFault> {
        let end = off.checked_add(n as u64).ok_or(SegFault)?;
        if end > self.len {
            return Err(SegFault);
        }
        if n == 0 {
            return Ok(());
        }
        // The last segment starting at or before `off`.
        let mut i = self.starts.partition_point(|&s| s <= off).saturating_sub(1);
        let mut pos = off;
        let mut done = 0usize;
        while done < n {
            let (&(addr, l), &start) = self.segs.get(i).zip(self.starts.get(i)).ok_or(SegFault)?;
            let within = pos - start;
            if within >= l {
                i += 1;
                continue;
            }
            let take = (l - within).min((n - done) as u64) as usize;
            f(addr + within, done, take)?;
            done += take;
            pos += take as u64;
            i += 1;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at message offset `off`.
    pub fn read_at(&self, mem: &dyn GuestMemory, off: u64, buf: &mut [u8]) -> Result<(), SegFault> {
        self.walk(off, buf.len(), |addr, at, n| {
            let piece = buf.get_mut(at..at + n).ok_or(SegFault)?;
            mem.read(addr, piece).map_err(|_| SegFault)
        })
    }

    /// Writes `data` at message offset `off`.
    pub fn write_at(&self, mem: &dyn GuestMemory, off: u64, data: &[u8]) -> Result<(), SegFault> {
        self.walk(off, data.len(), |addr, at, n| {
            let piece = data.get(at..at + n).ok_or(SegFault)?;
            mem.write(addr, piece).map_err(|_| SegFault)
        })
    }
}

/// Message offsets of consecutive pieces of `lens`, and the total.
fn starts(lens: impl Iterator<Item = u64>) -> (Vec<u64>, u64) {
    let mut v = Vec::new();
    let mut len = 0u64;
    for l in lens {
        v.push(len);
        len = len.saturating_add(l);
    }
    (v, len)
}

/// One piece of an [`MrRange`]: `len` bytes at `va` through `stag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub stag: u32,
    pub va: u64,
    pub len: u64,
}

/// A message's memory as (STag, address, length) pieces of one PD, checked for `need`.
/// A privileged QP's local range may use the local DMA STag ([`MrTable::translate_as`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrRange {
    pd: u32,
    need: Need,
    privileged: bool,
    pieces: Vec<Piece>,
    starts: Vec<u64>,
    len: u64,
}

impl MrRange {
    /// The first `len` bytes of `pieces` (later pieces, and the rest of the last one, are
    /// left out, as a receive or READ uses only what the message needs).
    pub fn new(pd: u32, need: Need, pieces: impl IntoIterator<Item = Piece>, len: u64) -> Self {
        let mut left = len;
        let mut kept = Vec::new();
        for p in pieces {
            if left == 0 {
                break;
            }
            if p.len == 0 {
                continue;
            }
            let take = p.len.min(left);
            kept.push(Piece { len: take, ..p });
            left -= take;
        }
        let (starts, len) = starts(kept.iter().map(|p| p.len));
        Self {
            pd,
            need,
            privileged: false,
            pieces: kept,
            starts,
            len,
        }
    }

    /// The range of a QP created with `QP_FLAG_PRIVILEGED` if `privileged`.
    pub fn privileged(mut self, privileged: bool) -> Self {
        self.privileged = privileged;
        self
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Checks every piece against the MR table now (key, PD, rights, bounds), or a local
    /// DMA STag piece against guest memory.
    pub fn check(&self, mrs: &MrTable, mem: &dyn GuestMemory) -> Result<(), AccessFault> {
        let dma = self.privileged.then_some(mem);
        self.pieces
            .iter()
            .try_for_each(|p| mrs.check_as(dma, p.stag, self.pd, p.va, p.len, self.need))
    }

    /// Walks the translated segments of `[off, off + n)`, calling `f(addr, at, len)`.
    fn walk(
        &self,
        mrs: &MrTable,
        mem: &dyn GuestMemory,
        off: u64,
        n: usize,
        mut f: impl FnMut(u64, usize, usize) -> Result<(), SegFault>,
    ) -> Result<(), SegFault> {
        let end = off.checked_add(n as u64).ok_or(SegFault)?;
        if end > self.len {
            return Err(SegFault);
        }
        let dma = self.privileged.then_some(mem);
        let mut i = self.starts.partition_point(|&s| s <= off).saturating_sub(1);
        let mut pos = off;
        let mut done = 0usize;
        while done < n {
            let (p, &start) = self.pieces.get(i).zip(self.starts.get(i)).ok_or(SegFault)?;
            let within = pos - start;
            if within >= p.len {
                i += 1;
                continue;
            }
            let take = (p.len - within).min((n - done) as u64);
            let va = p.va.wrapping_add(within);
            let segs = mrs
                .translate_as(dma, p.stag, self.pd, va, take, self.need)
                .map_err(|_| SegFault)?;
            let mut at = done;
            for (addr, l) in segs {
                f(addr, at, l as usize)?;
                at += l as usize;
            }
            done += take as usize;
            pos += take;
            i += 1;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at message offset `off`.
    pub fn read_at(
        &self,
        mrs: &MrTable,
        mem: &dyn GuestMemory,
        off: u64,
        buf: &mut [u8],
    ) -> Result<(), SegFault> {
        self.walk(mrs, mem, off, buf.len(), |addr, at, n| {
            let piece = buf.get_mut(at..at + n).ok_or(SegFault)?;
            mem.read(addr, piece).map_err(|_| SegFault)
        })
    }

    /// Writes `data` at message offset `off`.
    pub fn write_at(
        &self,
        mrs: &MrTable,
        mem: &dyn GuestMemory,
        off: u64,
        data: &[u8],
    ) -> Result<(), SegFault> {
        self.walk(mrs, mem, off, data.len(), |addr, at, n| {
            let piece = data.get(at..at + n).ok_or(SegFault)?;
            mem.write(addr, piece).map_err(|_| SegFault)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::DmaError;
    use crate::interface::MAX_MR;
    use std::cell::RefCell;

    struct Mem(RefCell<Vec<u8>>);

    impl GuestMemory for Mem {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
            let m = self.0.borrow();
            let a = addr as usize;
            buf.copy_from_slice(&m[a..a + buf.len()]);
            Ok(())
        }
        fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
            let a = addr as usize;
            self.0.borrow_mut()[a..a + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn probe(&self, addr: u64, len: u64, _write: bool) -> Result<(), DmaError> {
            let end = addr
                .checked_add(len)
                .ok_or(DmaError::Overflow { addr, len })?;
            if end > self.0.borrow().len() as u64 {
                return Err(DmaError::Unmapped { addr });
            }
            Ok(())
        }
    }

    #[test]
    fn random_access_across_segments() {
        let mem = Mem(RefCell::new(vec![0u8; 256]));
        // Message bytes 0..10 at 100, 10..13 at 10, 13..33 at 200.
        let s = SegList::new(vec![(100, 10), (10, 3), (200, 20)]);
        assert_eq!(s.len(), 33);
        let data: Vec<u8> = (0..33).collect();
        s.write_at(&mem, 0, &data[..5]).unwrap();
        s.write_at(&mem, 5, &data[5..]).unwrap();
        assert_eq!(mem.0.borrow()[10..13], [10, 11, 12]);
        let mut b = [0u8; 9];
        s.read_at(&mem, 8, &mut b).unwrap();
        assert_eq!(b, [8, 9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(s.read_at(&mem, 30, &mut b), Err(SegFault));
        assert_eq!(s.read_at(&mem, u64::MAX, &mut b), Err(SegFault));
        s.read_at(&mem, 33, &mut []).unwrap();
    }

    #[test]
    fn mr_ranges_translate_each_access() {
        use crate::interface::MR_ACCESS_LOCAL_WRITE;
        use crate::rdma::mr::Mr;
        let mem = Mem(RefCell::new(vec![0u8; 0x400]));
        let mut mrs = MrTable::new(MAX_MR);
        // One MR, iova 0x1000.., 0x100-byte pages scattered in memory (reversed).
        let stag = (3 << 8) | 0x44;
        mrs.insert(
            stag,
            Mr {
                key: 0x44,
                pd: 1,
                access: MR_ACCESS_LOCAL_WRITE,
                iova: 0x1000,
                length: 0x300,
                page_shift: 8,
                pages: vec![0x300, 0x200, 0x100],
                valid: true,
                max_pages: 0,
            },
        );
        let pieces = [
            Piece {
                stag,
                va: 0x10f0,
                len: 0x20,
            },
            Piece {
                stag,
                va: 0x1200,
                len: 0x100,
            },
        ];
        // Only the first 0x30 bytes are used.
        let r = MrRange::new(1, Need::LocalWrite, pieces, 0x30);
        assert_eq!(r.len(), 0x30);
        r.check(&mrs, &mem).unwrap();
        let data: Vec<u8> = (0..0x30).collect();
        r.write_at(&mrs, &mem, 0, &data).unwrap();
        let m = mem.0.borrow().clone();
        assert_eq!(m[0x3f0..0x400], data[..0x10]);
        assert_eq!(m[0x200..0x210], data[0x10..0x20]);
        assert_eq!(m[0x100..0x110], data[0x20..]);
        let mut b = [0u8; 0x18];
        r.read_at(&mrs, &mem, 0x0c, &mut b).unwrap();
        assert_eq!(b[..], data[0x0c..0x24]);
        assert_eq!(r.read_at(&mrs, &mem, 0x20, &mut b), Err(SegFault));
        // Checked against the table as it is at each access.
        let bad = MrRange::new(2, Need::LocalWrite, pieces, 0x30);
        assert_eq!(bad.check(&mrs, &mem), Err(AccessFault::Pd));
        let huge = MrRange::new(
            1,
            Need::LocalRead,
            [Piece {
                stag,
                va: 0x1000,
                len: 1 << 40,
            }],
            1 << 40,
        );
        assert_eq!(huge.check(&mrs, &mem), Err(AccessFault::Bounds));
        mrs.invalidate(stag, 1).unwrap();
        assert_eq!(r.read_at(&mrs, &mem, 0, &mut b), Err(SegFault));
    }

    #[test]
    fn local_dma_stag_is_identity_for_privileged_ranges_only() {
        use crate::interface::LOCAL_DMA_STAG;
        let mem = Mem(RefCell::new(vec![0u8; 0x400]));
        let mrs = MrTable::new(MAX_MR);
        let piece = |va, len| Piece {
            stag: LOCAL_DMA_STAG,
            va,
            len,
        };
        let r = MrRange::new(
            7,
            Need::LocalWrite,
            [piece(0x100, 0x10), piece(0x380, 0x10)],
            0x20,
        )
        .privileged(true);
        r.check(&mrs, &mem).unwrap();
        let data: Vec<u8> = (1..=0x20).collect();
        r.write_at(&mrs, &mem, 0, &data).unwrap();
        assert_eq!(mem.0.borrow()[0x100..0x110], data[..0x10]);
        assert_eq!(mem.0.borrow()[0x380..0x390], data[0x10..]);
        // Unprivileged: STag 0 names no MR.
        let plain = MrRange::new(7, Need::LocalWrite, [piece(0x100, 0x10)], 0x10);
        assert_eq!(plain.check(&mrs, &mem), Err(AccessFault::NoMr));
        // Outside guest memory, or wrapping: a bounds fault.
        let out = MrRange::new(7, Need::LocalRead, [piece(0x3f8, 0x10)], 0x10).privileged(true);
        assert_eq!(out.check(&mrs, &mem), Err(AccessFault::Bounds));
        let wrap = MrRange::new(7, Need::LocalRead, [piece(u64::MAX, 2)], 2).privileged(true);
        assert_eq!(wrap.check(&mrs, &mem), Err(AccessFault::Bounds));
        // Never for a remote access.
        let remote =
            MrRange::new(7, Need::RemoteWrite, [piece(0x100, 0x10)], 0x10).privileged(true);
        assert_eq!(remote.check(&mrs, &mem), Err(AccessFault::NoMr));
    }
}
