//! Guest memory as the device sees it: the regions the client announced with `DMA_MAP`.
//!
//! Every guest ("bus") address the device uses is resolved here. An access succeeds only if
//! every byte of `[addr, addr + len)` lies in mapped regions (which may be adjacent) that
//! allow the direction of the access; otherwise nothing at all is read or written and a
//! [`DmaError`] says why. Address arithmetic is overflow-checked throughout.

pub mod mapping;

use std::collections::BTreeMap;
use std::fs::File;

use smallvec::SmallVec;
use thiserror::Error;

use crate::dma::mapping::{MapError, Mapping};

/// At most this many live mappings per device; more is refused. Far below VFIO type1's
/// 65535 on purpose: every fd-backed mapping is an `mmap` of this process, and the kernel's
/// `vm.max_map_count` (65530 by default) is shared by all NICs, the allocator and thread
/// stacks, so one client must not be able to use it up. QEMU maps a handful of RAM
/// sections.
pub const MAX_MAPPINGS: usize = 4096;
/// At most this many bytes of fd-backed mappings per device (4 TiB): mappings take
/// address space of the whole process (128 TiB on x86-64), which a client mapping a huge
/// sparse file again and again would otherwise exhaust for every NIC.
pub const MAX_MAPPED_BYTES: u64 = 1 << 42;

/// Why a guest memory access failed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DmaError {
    #[error("address range {addr:#x}+{len:#x} wraps past the end of the address space")]
    Overflow { addr: u64, len: u64 },
    #[error("address {addr:#x} is not in mapped guest memory")]
    Unmapped { addr: u64 },
    #[error("address {addr:#x} is mapped without a file descriptor (not accessible)")]
    NoBacking { addr: u64 },
    #[error("address {addr:#x} is mapped without {access} permission")]
    Permission { addr: u64, access: &'static str },
    #[error("bus mastering is disabled")]
    BusMasterOff,
}

/// Why a `DMA_MAP`/`DMA_UNMAP` request was refused.
#[derive(Debug, Error)]
pub enum MapRequestError {
    #[error("DMA region of zero bytes")]
    Empty,
    #[error("DMA region {iova:#x}+{size:#x} wraps past the end of the address space")]
    Overflow { iova: u64, size: u64 },
    #[error("DMA region {iova:#x}+{size:#x} overlaps an existing mapping")]
    Overlap { iova: u64, size: u64 },
    #[error("too many DMA mappings (limit {MAX_MAPPINGS})")]
    TooMany,
    #[error("DMA region of {size:#x} bytes exceeds the {MAX_MAPPED_BYTES:#x} bytes a device may map ({mapped:#x} mapped)")]
    TooLarge { size: u64, mapped: u64 },
    #[error("unmap {iova:#x}+{size:#x} would split the mapping at {region:#x}")]
    Split { iova: u64, size: u64, region: u64 },
    #[error("unsupported unmap flags {0:#x}")]
    UnmapFlags(u32),
    #[error("unmap-all needs iova and size 0 (got {iova:#x}+{size:#x})")]
    UnmapAllRange { iova: u64, size: u64 },
    #[error(transparent)]
    Map(#[from] MapError),
}

/// Read/write access to guest memory by bus address. Implemented by [`DmaSpace`]; the
/// register file only sees this trait.
pub trait GuestMemory {
    /// Fills `buf` from guest memory at `addr`, or fails without side effects.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;
    /// Writes `data` to guest memory at `addr`, or fails without writing anything.
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError>;
    /// Whether `len` bytes at `addr` could be read (or written, with `write`) now, without
    /// touching them.
    fn probe(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError>;
}

/// Guest memory as seen through the PCI command register: with Bus Master Enable off the
/// device may not issue any DMA, so every access fails without touching memory.
pub struct BusMasterGate<'a> {
    pub mem: &'a dyn GuestMemory,
    pub enabled: bool,
}

impl GuestMemory for BusMasterGate<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        if !self.enabled {
            return Err(DmaError::BusMasterOff);
        }
        self.mem.read(addr, buf)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        if !self.enabled {
            return Err(DmaError::BusMasterOff);
        }
        self.mem.write(addr, data)
    }

    fn probe(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError> {
        if !self.enabled {
            return Err(DmaError::BusMasterOff);
        }
        self.mem.probe(addr, len, write)
    }
}

/// Permissions of a DMA mapping, from the `DMA_MAP` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaPerm {
    /// The device may read this memory.
    pub read: bool,
    /// The device may write this memory.
    pub write: bool,
}

#[derive(Debug)]
struct Region {
    size: u64,
    perm: DmaPerm,
    /// `None` when the client sent no fd: such memory is only reachable through
    /// `DMA_READ`/`DMA_WRITE` messages, which this device does not use.
    mapping: Option<Mapping>,
}

/// One contiguous piece of an access: region start, offset in the region, bytes.
struct Segment<'a> {
    mapping: &'a Mapping,
    offset: u64,
    len: usize,
}

/// The set of DMA mappings of one client connection, keyed by start iova.
#[derive(Debug, Default)]
pub struct DmaSpace {
    regions: BTreeMap<u64, Region>,
    /// Sum of the sizes of the fd-backed regions (bounded by [`MAX_MAPPED_BYTES`]).
    mapped_bytes: u64,
}

impl DmaSpace {
    /// An empty address space: every access faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live mappings.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether no mapping is live.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Adds a mapping of `size` bytes at `iova`, backed by `file` at `offset` if given.
    pub fn map(
        &mut self,
        iova: u64,
        size: u64,
        offset: u64,
        perm: DmaPerm,
        file: Option<&File>,
    ) -> Result<(), MapRequestError> {
        if size == 0 {
            return Err(MapRequestError::Empty);
        }
        let end = iova
            .checked_add(size)
            .ok_or(MapRequestError::Overflow { iova, size })?;
        if self.regions.len() >= MAX_MAPPINGS {
            return Err(MapRequestError::TooMany);
        }
        // The closest region starting before `end` is the only one that can overlap,
        // because regions never overlap each other.
        if let Some((&start, r)) = self.regions.range(..end).next_back() {
            if start + r.size > iova {
                return Err(MapRequestError::Overlap { iova, size });
            }
        }
        let mapping = match file {
            Some(f) => {
                let total = self
                    .mapped_bytes
                    .checked_add(size)
                    .filter(|&t| t <= MAX_MAPPED_BYTES)
                    .ok_or(MapRequestError::TooLarge {
                        size,
                        mapped: self.mapped_bytes,
                    })?;
                // Mapping::new seals the file against shrinking or, if it cannot, avoids
                // mmap (see mapping.rs).
                let m = Mapping::new(f, offset, size, perm.write)?;
                self.mapped_bytes = total;
                Some(m)
            }
            None => None,
        };
        self.regions.insert(
            iova,
            Region {
                size,
                perm,
                mapping,
            },
        );
        Ok(())
    }

    /// Removes every mapping inside `[iova, iova + size)`; refuses (removing nothing) if a
    /// mapping straddles either end. Returns the number of bytes unmapped.
    pub fn unmap(&mut self, iova: u64, size: u64) -> Result<u64, MapRequestError> {
        let end = iova
            .checked_add(size)
            .ok_or(MapRequestError::Overflow { iova, size })?;
        if size == 0 {
            return Ok(0);
        }
        if let Some((&start, r)) = self.regions.range(..iova).next_back() {
            if start + r.size > iova {
                return Err(MapRequestError::Split {
                    iova,
                    size,
                    region: start,
                });
            }
        }
        let inside: Vec<u64> = self.regions.range(iova..end).map(|(&k, _)| k).collect();
        if let Some(&last) = inside.last() {
            if let Some(r) = self.regions.get(&last) {
                if last + r.size > end {
                    return Err(MapRequestError::Split {
                        iova,
                        size,
                        region: last,
                    });
                }
            }
        }
        let mut bytes = 0u64;
        for k in inside {
            if let Some(r) = self.regions.remove(&k) {
                bytes = bytes.saturating_add(r.size);
                if r.mapping.is_some() {
                    self.mapped_bytes = self.mapped_bytes.saturating_sub(r.size);
                }
            }
        }
        Ok(bytes)
    }

    /// Removes every mapping.
    pub fn unmap_all(&mut self) -> u64 {
        let bytes = self
            .regions
            .values()
            .fold(0u64, |a, r| a.saturating_add(r.size));
        self.regions.clear();
        self.mapped_bytes = 0;
        bytes
    }

    /// The mapped ranges (iova, size) in address order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.regions.iter().map(|(&k, r)| (k, r.size)).collect()
    }

    /// Bytes of fd-backed mappings (what counts against [`MAX_MAPPED_BYTES`]).
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped_bytes
    }

    /// Checks the table's invariants: regions do not overlap or wrap, and the byte count
    /// matches. For tests that throw hostile requests at it.
    pub fn check_consistent(&self) -> Result<(), String> {
        let mut prev_end = 0u64;
        let mut first = true;
        let mut fd_bytes = 0u64;
        for (&start, r) in &self.regions {
            let end = start
                .checked_add(r.size)
                .ok_or_else(|| format!("region {start:#x}+{:#x} wraps", r.size))?;
            if r.size == 0 || (!first && start < prev_end) {
                return Err(format!(
                    "region {start:#x}+{:#x} overlaps or is empty",
                    r.size
                ));
            }
            if let Some(m) = &r.mapping {
                if m.len() != r.size {
                    return Err(format!(
                        "region {start:#x}: mapping of {:#x} bytes",
                        m.len()
                    ));
                }
                fd_bytes += r.size;
            }
            prev_end = end;
            first = false;
        }
        if fd_bytes != self.mapped_bytes || self.regions.len() > MAX_MAPPINGS {
            return Err(format!(
                "{} regions, {fd_bytes:#x} fd-backed bytes, counted {:#x}",
                self.regions.len(),
                self.mapped_bytes
            ));
        }
        Ok(())
    }

    /// Resolves `[addr, addr + len)` into segments of accessible mappings, checking every
    /// byte before anything is copied.
    fn segments(
        &self,
        addr: u64,
        len: usize,
        write: bool,
    ) -> Result<SmallVec<[Segment<'_>; 4]>, DmaError> {
        let len64 = len as u64;
        let end = addr
            .checked_add(len64)
            .ok_or(DmaError::Overflow { addr, len: len64 })?;
        // Inline: an access spans one or two mappings, and this runs twice a packet.
        let mut segs = SmallVec::new();
        let mut cur = addr;
        while cur < end {
            let (start, r) = self
                .regions
                .range(..=cur)
                .next_back()
                .filter(|(&s, r)| cur - s < r.size)
                .ok_or(DmaError::Unmapped { addr: cur })?;
            let allowed = if write { r.perm.write } else { r.perm.read };
            if !allowed {
                return Err(DmaError::Permission {
                    addr: cur,
                    access: if write { "write" } else { "read" },
                });
            }
            let mapping = r
                .mapping
                .as_ref()
                .ok_or(DmaError::NoBacking { addr: cur })?;
            let offset = cur - start;
            let avail = r.size - offset;
            let take = avail.min(end - cur);
            // `take <= len`, which is a usize.
            let take_usize =
                usize::try_from(take).map_err(|_| DmaError::Overflow { addr, len: len64 })?;
            segs.push(Segment {
                mapping,
                offset,
                len: take_usize,
            });
            cur += take;
        }
        Ok(segs)
    }
}

impl GuestMemory for DmaSpace {
    fn probe(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError> {
        let n = usize::try_from(len).map_err(|_| DmaError::Overflow { addr, len })?;
        self.segments(addr, n, write).map(|_| ())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let segs = self.segments(addr, buf.len(), false)?;
        let mut done = 0usize;
        for s in segs {
            let chunk = buf
                .get_mut(done..done + s.len)
                .ok_or(DmaError::Unmapped { addr })?;
            s.mapping
                .read_at(s.offset, chunk)
                .map_err(|_| DmaError::Unmapped { addr })?;
            done += s.len;
        }
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        let segs = self.segments(addr, data.len(), true)?;
        let mut done = 0usize;
        for s in segs {
            let chunk = data
                .get(done..done + s.len)
                .ok_or(DmaError::Unmapped { addr })?;
            s.mapping
                .write_at(s.offset, chunk)
                .map_err(|_| DmaError::Unmapped { addr })?;
            done += s.len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::mapping::test_util::memfd;
    use std::os::unix::fs::FileExt;

    const RW: DmaPerm = DmaPerm {
        read: true,
        write: true,
    };
    const RO: DmaPerm = DmaPerm {
        read: true,
        write: false,
    };

    /// Two 4 KiB regions at 0x10000 and 0x11000 (adjacent), backed by different memfds,
    /// and one at 0x20000 after a gap.
    fn space() -> (DmaSpace, File, File, File) {
        let a = memfd(0x1000);
        let b = memfd(0x2000);
        let c = memfd(0x1000);
        let mut s = DmaSpace::new();
        s.map(0x10000, 0x1000, 0, RW, Some(&a)).unwrap();
        s.map(0x11000, 0x1000, 0x1000, RW, Some(&b)).unwrap();
        s.map(0x20000, 0x1000, 0, RO, Some(&c)).unwrap();
        (s, a, b, c)
    }

    #[test]
    fn access_spanning_adjacent_regions() {
        let (s, a, b, _c) = space();
        let data: Vec<u8> = (0..32u8).collect();
        s.write(0x10ff0, &data).unwrap();
        let mut tail = [0u8; 16];
        a.read_exact_at(&mut tail, 0xff0).unwrap();
        assert_eq!(&tail[..], &data[..16]);
        let mut head = [0u8; 16];
        b.read_exact_at(&mut head, 0x1000).unwrap();
        assert_eq!(&head[..], &data[16..]);
        let mut back = [0u8; 32];
        s.read(0x10ff0, &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
    }

    #[test]
    fn straddling_the_end_faults_without_writing() {
        let (s, _a, b, _c) = space();
        let data = [0xaau8; 32];
        assert_eq!(
            s.write(0x11ff0, &data),
            Err(DmaError::Unmapped { addr: 0x12000 })
        );
        let mut check = [0u8; 16];
        b.read_exact_at(&mut check, 0x1ff0).unwrap();
        assert_eq!(
            check, [0u8; 16],
            "a failed access must not write a partial prefix"
        );
    }

    #[test]
    fn gaps_and_unmapped_addresses_fault() {
        let (s, _a, _b, _c) = space();
        let mut buf = [0u8; 8];
        assert_eq!(s.read(0, &mut buf), Err(DmaError::Unmapped { addr: 0 }));
        assert_eq!(
            s.read(0x12000, &mut buf),
            Err(DmaError::Unmapped { addr: 0x12000 })
        );
        // A range covering the gap between 0x12000 and 0x20000.
        let mut big = vec![0u8; 0x10000];
        assert_eq!(
            s.read(0x11000, &mut big),
            Err(DmaError::Unmapped { addr: 0x12000 })
        );
    }

    #[test]
    fn address_overflow_is_refused() {
        let (s, _a, _b, _c) = space();
        let mut buf = [0u8; 2];
        assert_eq!(
            s.read(u64::MAX, &mut buf),
            Err(DmaError::Overflow {
                addr: u64::MAX,
                len: 2
            })
        );
        assert!(s.write(u64::MAX - 1, &[0u8; 4]).is_err());
        // Zero-length accesses touch nothing and succeed anywhere.
        assert!(s.read(u64::MAX, &mut []).is_ok());
    }

    #[test]
    fn permissions_are_enforced() {
        let (s, _a, _b, c) = space();
        assert_eq!(
            s.write(0x20000, &[1]),
            Err(DmaError::Permission {
                addr: 0x20000,
                access: "write"
            })
        );
        c.write_all_at(&[7], 5).unwrap();
        let mut one = [0u8; 1];
        s.read(0x20005, &mut one).unwrap();
        assert_eq!(one, [7]);
    }

    #[test]
    fn fdless_regions_are_not_accessible() {
        let mut s = DmaSpace::new();
        s.map(0x1000, 0x1000, 0, RW, None).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(
            s.read(0x1000, &mut buf),
            Err(DmaError::NoBacking { addr: 0x1000 })
        );
    }

    #[test]
    fn map_rejects_overlap_overflow_and_empty() {
        let (mut s, a, _b, _c) = space();
        assert!(matches!(
            s.map(0x10800, 0x1000, 0, RW, Some(&a)),
            Err(MapRequestError::Overlap { .. })
        ));
        assert!(matches!(
            s.map(0xf000, 0x1001, 0, RW, None),
            Err(MapRequestError::Overlap { .. })
        ));
        assert!(matches!(
            s.map(u64::MAX - 10, 0x1000, 0, RW, None),
            Err(MapRequestError::Overflow { .. })
        ));
        assert!(matches!(
            s.map(0x50000, 0, 0, RW, None),
            Err(MapRequestError::Empty)
        ));
        assert!(matches!(
            s.map(0x50000, 0x2000, 0, RW, Some(&a)),
            Err(MapRequestError::Map(MapError::BeyondFile { .. }))
        ));
        // Exactly adjacent on both sides is fine.
        s.map(0xf000, 0x1000, 0, RW, None).unwrap();
        s.map(0x12000, 0x1000, 0, RW, None).unwrap();
        assert_eq!(s.len(), 5);
    }

    #[test]
    fn mapped_bytes_and_count_are_capped() {
        // A sparse memfd: the mappings take address space, not memory.
        let half = MAX_MAPPED_BYTES / 2;
        let f = memfd(half + 0x1000);
        let mut s = DmaSpace::new();
        s.map(0, half, 0, RW, Some(&f)).unwrap();
        s.map(half, half, 0x1000, RW, Some(&f)).unwrap();
        assert!(matches!(
            s.map(1 << 60, 0x1000, 0, RW, Some(&f)),
            Err(MapRequestError::TooLarge { .. })
        ));
        // Memory without an fd takes no address space and does not count.
        s.map(1 << 60, 0x1000, 0, RW, None).unwrap();
        assert_eq!(s.mapped_bytes(), MAX_MAPPED_BYTES);
        s.check_consistent().unwrap();
        assert_eq!(s.unmap(0, half).unwrap(), half);
        s.map(0, 0x1000, 0, RW, Some(&f)).unwrap();
        assert_eq!(s.mapped_bytes(), half + 0x1000);
        s.unmap_all();
        assert_eq!(s.mapped_bytes(), 0);
        for i in 0..MAX_MAPPINGS as u64 {
            s.map(i * 0x1000, 0x1000, 0, RO, None).unwrap();
        }
        assert!(matches!(
            s.map(1 << 50, 0x1000, 0, RO, None),
            Err(MapRequestError::TooMany)
        ));
        s.check_consistent().unwrap();
    }

    #[test]
    fn unmap_semantics() {
        let (mut s, _a, _b, _c) = space();
        assert!(matches!(
            s.unmap(0x10800, 0x1000),
            Err(MapRequestError::Split {
                region: 0x10000,
                ..
            })
        ));
        assert!(matches!(
            s.unmap(0x10000, 0x1800),
            Err(MapRequestError::Split {
                region: 0x11000,
                ..
            })
        ));
        assert_eq!(s.len(), 3, "a refused unmap removes nothing");
        assert_eq!(s.unmap(0x10000, 0x2000).unwrap(), 0x2000);
        let mut buf = [0u8; 1];
        assert_eq!(
            s.read(0x10000, &mut buf),
            Err(DmaError::Unmapped { addr: 0x10000 })
        );
        assert_eq!(s.unmap(0x30000, 0x1000).unwrap(), 0);
        assert!(s.unmap(u64::MAX, 2).is_err());
        assert_eq!(s.unmap_all(), 0x1000);
        assert!(s.is_empty());
    }
}
