//! The emulated PCI configuration space (conventional, 256 bytes, header type 0).
//!
//! Identity, BARs and the MSI-X capability come from `interface.rs`. The space is a byte
//! array plus a per-byte write mask: a write changes only bits set in the mask, so read-only
//! fields stay read-only and BAR sizing works naturally (writing all ones to a BAR reads
//! back its size mask, because the low address bits are not writable). Accesses of any
//! length and alignment inside the 256 bytes are accepted; anything beyond is an error.

use thiserror::Error;

use crate::interface::{
    BAR0_INDEX, BAR0_SIZE, DB_BAR_INDEX, DB_BAR_SIZE, MSIX_BAR_INDEX, MSIX_BAR_SIZE,
    MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, MSIX_VECTORS, PCI_CLASS_CODE, PCI_DEVICE_ID,
    PCI_REVISION_ID, PCI_SUBSYSTEM_ID, PCI_SUBSYSTEM_VENDOR_ID, PCI_VENDOR_ID,
};

/// Size of the configuration space.
pub const CONFIG_SPACE_SIZE: usize = 256;

/// Standard header offsets (PCI Local Bus spec).
pub const VENDOR_ID: usize = 0x00;
pub const DEVICE_ID: usize = 0x02;
pub const COMMAND: usize = 0x04;
pub const STATUS: usize = 0x06;
pub const REVISION_ID: usize = 0x08;
pub const CLASS_PROG_IF: usize = 0x09;
pub const CACHE_LINE_SIZE: usize = 0x0c;
pub const HEADER_TYPE: usize = 0x0e;
pub const BAR_BASE: usize = 0x10;
pub const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
pub const SUBSYSTEM_ID: usize = 0x2e;
pub const EXPANSION_ROM: usize = 0x30;
pub const CAPABILITIES_POINTER: usize = 0x34;
pub const INTERRUPT_LINE: usize = 0x3c;
pub const INTERRUPT_PIN: usize = 0x3d;

/// Command register bits the guest may change: memory space, bus master, parity error
/// response, SERR# enable, INTx disable. (No I/O BARs, so I/O space stays 0.)
pub const COMMAND_WRITABLE: u16 = (1 << 1) | (1 << 2) | (1 << 6) | (1 << 8) | (1 << 10);
/// Status: capabilities list present.
pub const STATUS_CAP_LIST: u16 = 1 << 4;

/// Capability id of MSI-X.
pub const CAP_ID_MSIX: u8 = 0x11;
/// Where the MSI-X capability lives.
pub const MSIX_CAP_OFFSET: usize = 0x40;
/// MSI-X Message Control: MSI-X Enable.
pub const MSIX_CTRL_ENABLE: u16 = 1 << 15;
/// MSI-X Message Control: Function Mask.
pub const MSIX_CTRL_FUNCTION_MASK: u16 = 1 << 14;

/// An access outside the configuration space.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("config space access {offset:#x}+{len:#x} outside {CONFIG_SPACE_SIZE} bytes")]
pub struct ConfigAccessError {
    pub offset: u64,
    pub len: usize,
}

/// The configuration space of one function.
#[derive(Clone)]
pub struct ConfigSpace {
    bytes: [u8; CONFIG_SPACE_SIZE],
    wmask: [u8; CONFIG_SPACE_SIZE],
}

impl std::fmt::Debug for ConfigSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSpace")
            .field("command", &self.read_u16(COMMAND))
            .field("msix_control", &self.read_u16(MSIX_CAP_OFFSET + 2))
            .finish()
    }
}

impl Default for ConfigSpace {
    fn default() -> Self {
        Self::new()
    }
}

/// The write mask of a 32-bit non-prefetchable memory BAR of `size` bytes (a power of two).
const fn bar_mask(size: usize) -> u32 {
    !((size as u32).wrapping_sub(1))
}

impl ConfigSpace {
    /// The reset state.
    pub fn new() -> Self {
        let mut c = Self {
            bytes: [0; CONFIG_SPACE_SIZE],
            wmask: [0; CONFIG_SPACE_SIZE],
        };
        c.put16(VENDOR_ID, PCI_VENDOR_ID, 0);
        c.put16(DEVICE_ID, PCI_DEVICE_ID, 0);
        c.put16(COMMAND, 0, COMMAND_WRITABLE);
        c.put16(STATUS, STATUS_CAP_LIST, 0);
        c.bytes[REVISION_ID] = PCI_REVISION_ID;
        let class = PCI_CLASS_CODE.to_le_bytes();
        c.bytes[CLASS_PROG_IF..CLASS_PROG_IF + 3].copy_from_slice(&class[..3]);
        c.wmask[CACHE_LINE_SIZE] = 0xff;
        c.bytes[HEADER_TYPE] = 0x00;
        // BAR0 and the MSI-X BAR: 32-bit, non-prefetchable memory (type bits all zero).
        c.put32(BAR_BASE + 4 * BAR0_INDEX as usize, 0, bar_mask(BAR0_SIZE));
        c.put32(
            BAR_BASE + 4 * DB_BAR_INDEX as usize,
            0,
            bar_mask(DB_BAR_SIZE),
        );
        c.put32(
            BAR_BASE + 4 * MSIX_BAR_INDEX as usize,
            0,
            bar_mask(MSIX_BAR_SIZE),
        );
        c.put16(SUBSYSTEM_VENDOR_ID, PCI_SUBSYSTEM_VENDOR_ID, 0);
        c.put16(SUBSYSTEM_ID, PCI_SUBSYSTEM_ID, 0);
        // No expansion ROM: the register stays 0, so ROM sizing reads back 0.
        c.bytes[CAPABILITIES_POINTER] = MSIX_CAP_OFFSET as u8;
        c.wmask[INTERRUPT_LINE] = 0xff;
        // Interrupt pin 0: no INTx, MSI-X only.
        c.bytes[INTERRUPT_PIN] = 0;
        // MSI-X capability, the last in the list.
        c.bytes[MSIX_CAP_OFFSET] = CAP_ID_MSIX;
        c.bytes[MSIX_CAP_OFFSET + 1] = 0;
        c.put16(
            MSIX_CAP_OFFSET + 2,
            (MSIX_VECTORS - 1) as u16,
            MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK,
        );
        c.put32(MSIX_CAP_OFFSET + 4, MSIX_TABLE_OFFSET | MSIX_BAR_INDEX, 0);
        c.put32(MSIX_CAP_OFFSET + 8, MSIX_PBA_OFFSET | MSIX_BAR_INDEX, 0);
        c
    }

    fn put16(&mut self, off: usize, value: u16, wmask: u16) {
        self.bytes[off..off + 2].copy_from_slice(&value.to_le_bytes());
        self.wmask[off..off + 2].copy_from_slice(&wmask.to_le_bytes());
    }

    fn put32(&mut self, off: usize, value: u32, wmask: u32) {
        self.bytes[off..off + 4].copy_from_slice(&value.to_le_bytes());
        self.wmask[off..off + 4].copy_from_slice(&wmask.to_le_bytes());
    }

    fn range(offset: u64, len: usize) -> Result<std::ops::Range<usize>, ConfigAccessError> {
        let err = || ConfigAccessError { offset, len };
        let start = usize::try_from(offset).map_err(|_| err())?;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= CONFIG_SPACE_SIZE)
            .ok_or_else(err)?;
        Ok(start..end)
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ConfigAccessError> {
        let r = Self::range(offset, buf.len())?;
        let src = self.bytes.get(r).ok_or(ConfigAccessError {
            offset,
            len: buf.len(),
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    /// Writes `data` at `offset`; only writable bits change.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), ConfigAccessError> {
        let r = Self::range(offset, data.len())?;
        let start = r.start;
        for (i, &v) in data.iter().enumerate() {
            let at = start + i;
            if let (Some(b), Some(&m)) = (self.bytes.get_mut(at), self.wmask.get(at)) {
                *b = (*b & !m) | (v & m);
            }
        }
        Ok(())
    }

    /// A little-endian 16-bit field (offsets are internal constants, always in range).
    pub fn read_u16(&self, off: usize) -> u16 {
        let mut b = [0u8; 2];
        if let Some(s) = self.bytes.get(off..off.saturating_add(2)) {
            b.copy_from_slice(s);
        }
        u16::from_le_bytes(b)
    }

    /// A little-endian 32-bit field.
    pub fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        if let Some(s) = self.bytes.get(off..off.saturating_add(4)) {
            b.copy_from_slice(s);
        }
        u32::from_le_bytes(b)
    }

    /// Whether the guest set MSI-X Enable.
    pub fn msix_enabled(&self) -> bool {
        self.read_u16(MSIX_CAP_OFFSET + 2) & MSIX_CTRL_ENABLE != 0
    }

    /// Whether the guest set Bus Master Enable.
    pub fn bus_master(&self) -> bool {
        self.read_u16(COMMAND) & (1 << 2) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r32(c: &ConfigSpace, off: u64) -> u32 {
        let mut b = [0u8; 4];
        c.read(off, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    fn w32(c: &mut ConfigSpace, off: u64, v: u32) {
        c.write(off, &v.to_le_bytes()).unwrap();
    }

    #[test]
    fn identity_and_class() {
        let c = ConfigSpace::new();
        assert_eq!(r32(&c, 0), 0xfe10_1234);
        assert_eq!(c.read_u16(VENDOR_ID), PCI_VENDOR_ID);
        assert_eq!(c.read_u16(DEVICE_ID), PCI_DEVICE_ID);
        assert_eq!(r32(&c, 8), (0x02_80_00 << 8) | PCI_REVISION_ID as u32);
        assert_eq!(r32(&c, 8) >> 8, PCI_CLASS_CODE);
        assert_eq!(c.read_u16(SUBSYSTEM_VENDOR_ID), PCI_SUBSYSTEM_VENDOR_ID);
        assert_eq!(c.read_u16(SUBSYSTEM_ID), PCI_SUBSYSTEM_ID);
        let mut ht = [0u8];
        c.read(HEADER_TYPE as u64, &mut ht).unwrap();
        assert_eq!(ht[0], 0);
        assert_ne!(c.read_u16(STATUS) & STATUS_CAP_LIST, 0);
        let mut pin = [0xffu8];
        c.read(INTERRUPT_PIN as u64, &mut pin).unwrap();
        assert_eq!(pin[0], 0, "no INTx");
    }

    #[test]
    fn bar_sizing() {
        let mut c = ConfigSpace::new();
        let bar0 = BAR_BASE as u64;
        let bar4 = (BAR_BASE + 16) as u64;
        assert_eq!(r32(&c, bar0), 0, "32-bit non-prefetchable memory BAR");
        w32(&mut c, bar0, 0xffff_ffff);
        let mask = r32(&c, bar0);
        assert_eq!(mask, 0xffff_0000);
        assert_eq!((!mask).wrapping_add(1) as usize, BAR0_SIZE);
        w32(&mut c, bar4, 0xffff_ffff);
        let mask4 = r32(&c, bar4);
        assert_eq!((!mask4).wrapping_add(1) as usize, MSIX_BAR_SIZE);
        // Programming an address keeps only the aligned bits.
        w32(&mut c, bar0, 0xfebc_1234);
        assert_eq!(r32(&c, bar0), 0xfebc_0000);
        let bar2 = (BAR_BASE + 8) as u64;
        w32(&mut c, bar2, 0xffff_ffff);
        let mask2 = r32(&c, bar2);
        assert_eq!((!mask2).wrapping_add(1) as usize, DB_BAR_SIZE);
        // Unimplemented BARs and the ROM BAR read 0 after all-ones writes.
        for bar in [1u64, 3, 5] {
            let off = BAR_BASE as u64 + 4 * bar;
            w32(&mut c, off, 0xffff_ffff);
            assert_eq!(r32(&c, off), 0, "BAR{bar}");
        }
        w32(&mut c, EXPANSION_ROM as u64, 0xffff_ffff);
        assert_eq!(r32(&c, EXPANSION_ROM as u64), 0);
    }

    #[test]
    fn read_only_fields_stay_read_only() {
        let mut c = ConfigSpace::new();
        let before = {
            let mut b = [0u8; CONFIG_SPACE_SIZE];
            c.read(0, &mut b).unwrap();
            b
        };
        // Hammer every byte with ones.
        c.write(0, &[0xff; CONFIG_SPACE_SIZE]).unwrap();
        let mut after = [0u8; CONFIG_SPACE_SIZE];
        c.read(0, &mut after).unwrap();
        for off in 0..CONFIG_SPACE_SIZE {
            let writable = matches!(
                off,
                0x04 | 0x05 | 0x0c | 0x10..=0x13 | 0x18..=0x1b | 0x20..=0x23 | 0x3c | 0x43
            );
            if !writable {
                assert_eq!(after[off], before[off], "byte {off:#x} changed");
            }
        }
        assert_eq!(c.read_u16(COMMAND), COMMAND_WRITABLE);
        assert_eq!(c.read_u16(VENDOR_ID), PCI_VENDOR_ID);
        assert_eq!(c.read_u16(STATUS), STATUS_CAP_LIST);
        // Table size and BIRs unchanged; only enable/mask took.
        assert_eq!(
            c.read_u16(MSIX_CAP_OFFSET + 2),
            MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK | (MSIX_VECTORS as u16 - 1)
        );
    }

    #[test]
    fn command_register_is_writable() {
        let mut c = ConfigSpace::new();
        c.write(COMMAND as u64, &0x0006u16.to_le_bytes()).unwrap();
        assert_eq!(c.read_u16(COMMAND), 0x0006);
        assert!(c.bus_master());
        c.write(COMMAND as u64, &0u16.to_le_bytes()).unwrap();
        assert!(!c.bus_master());
    }

    #[test]
    fn capability_chain_walks_to_msix() {
        let c = ConfigSpace::new();
        let mut ptr = [0u8];
        c.read(CAPABILITIES_POINTER as u64, &mut ptr).unwrap();
        let mut pos = ptr[0] as u64 & !3;
        let mut seen = Vec::new();
        while pos != 0 {
            assert!((0x40..256).contains(&pos), "capability at {pos:#x}");
            assert!(seen.len() < 48, "capability list loops");
            let mut hdr = [0u8; 2];
            c.read(pos, &mut hdr).unwrap();
            seen.push((hdr[0], pos));
            pos = hdr[1] as u64 & !3;
        }
        assert_eq!(seen, vec![(CAP_ID_MSIX, MSIX_CAP_OFFSET as u64)]);
    }

    #[test]
    fn msix_capability_fields() {
        let mut c = ConfigSpace::new();
        let ctrl = c.read_u16(MSIX_CAP_OFFSET + 2);
        assert_eq!((ctrl & 0x7ff) as u32 + 1, MSIX_VECTORS);
        assert_eq!(ctrl & (MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK), 0);
        let table = c.read_u32(MSIX_CAP_OFFSET + 4);
        assert_eq!(table & 7, MSIX_BAR_INDEX);
        assert_eq!(table & !7, MSIX_TABLE_OFFSET);
        let pba = c.read_u32(MSIX_CAP_OFFSET + 8);
        assert_eq!(pba & 7, MSIX_BAR_INDEX);
        assert_eq!(pba & !7, MSIX_PBA_OFFSET);
        // The table and PBA fit in the BAR.
        assert!(
            MSIX_TABLE_OFFSET as usize + 16 * MSIX_VECTORS as usize <= MSIX_PBA_OFFSET as usize
        );
        assert!(MSIX_PBA_OFFSET as usize + 8 <= MSIX_BAR_SIZE);
        assert!(!c.msix_enabled());
        c.write(MSIX_CAP_OFFSET as u64 + 3, &[0x80]).unwrap();
        assert!(c.msix_enabled());
        assert_eq!(
            (c.read_u16(MSIX_CAP_OFFSET + 2) & 0x7ff) as u32 + 1,
            MSIX_VECTORS
        );
    }

    #[test]
    fn out_of_range_and_odd_accesses() {
        let mut c = ConfigSpace::new();
        let mut b = [0u8; 4];
        assert!(c.read(253, &mut b).is_err());
        assert!(c.read(256, &mut b[..1]).is_err());
        assert!(c.read(u64::MAX, &mut b).is_err());
        assert!(c.write(u64::MAX - 1, &b).is_err());
        assert!(c.read(256, &mut []).is_ok(), "empty access at the end");
        // Unaligned but in range: allowed, byte-exact.
        c.read(1, &mut b).unwrap();
        assert_eq!(b, [0x12, 0x10, 0xfe, 0x00]);
        c.write(3, &[0xff, 0xff]).unwrap();
        assert_eq!(c.read_u16(DEVICE_ID), PCI_DEVICE_ID);
        let mut whole = [0u8; 256];
        c.read(0, &mut whole).unwrap();
    }
}
