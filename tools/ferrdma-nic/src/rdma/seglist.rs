//! A message's guest-physical segments with random access by byte offset. The wire
//! transport reads and writes one packet's worth at an arbitrary offset of a message (a
//! retransmission, a READ response in the middle), so the segments carry their start
//! offsets and a lookup is a binary search, not a walk from the beginning.

use crate::dma::GuestMemory;

use super::mr::Seg;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::DmaError;
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
}
