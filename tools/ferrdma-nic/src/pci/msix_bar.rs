//! BAR4: the MSI-X table and pending-bit array.
//!
//! QEMU's vfio-user client emulates the MSI-X table itself (it never forwards table
//! accesses) but forwards PBA reads to the server. The table is still kept here, as plain
//! 16-byte entries, so that a client that does forward it sees sane memory. The device
//! never holds a vector pending (it signals the eventfd and QEMU latches masked vectors),
//! so the PBA reads 0. Everything else in the BAR reads 0 and ignores writes.

use thiserror::Error;

use crate::interface::{MSIX_BAR_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, MSIX_VECTORS};

/// Bytes per MSI-X table entry.
pub const MSIX_ENTRY_SIZE: usize = 16;
const TABLE_START: usize = MSIX_TABLE_OFFSET as usize;
const TABLE_LEN: usize = MSIX_VECTORS as usize * MSIX_ENTRY_SIZE;
/// Vector Control: Mask Bit, set at reset.
const ENTRY_MASKED: u32 = 1;

// The layout in interface.rs must be self-consistent.
const _: () = assert!(TABLE_START + TABLE_LEN <= MSIX_PBA_OFFSET as usize);
const _: () = assert!(MSIX_PBA_OFFSET as usize + 8 <= MSIX_BAR_SIZE);

/// An access outside BAR4.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("MSI-X BAR access {offset:#x}+{len:#x} outside {MSIX_BAR_SIZE:#x} bytes")]
pub struct MsixBarAccessError {
    pub offset: u64,
    pub len: usize,
}

/// The MSI-X BAR contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsixBar {
    table: Vec<u8>,
}

impl Default for MsixBar {
    fn default() -> Self {
        Self::new()
    }
}

impl MsixBar {
    /// Reset state: all entries zero with the mask bit set.
    pub fn new() -> Self {
        let mut table = vec![0u8; TABLE_LEN];
        for entry in table.chunks_exact_mut(MSIX_ENTRY_SIZE) {
            entry[12..16].copy_from_slice(&ENTRY_MASKED.to_le_bytes());
        }
        Self { table }
    }

    fn check(offset: u64, len: usize) -> Result<usize, MsixBarAccessError> {
        let err = || MsixBarAccessError { offset, len };
        let start = usize::try_from(offset).map_err(|_| err())?;
        start
            .checked_add(len)
            .filter(|&e| e <= MSIX_BAR_SIZE)
            .ok_or_else(err)?;
        Ok(start)
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MsixBarAccessError> {
        let start = Self::check(offset, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            let at = start + i;
            *b = at
                .checked_sub(TABLE_START)
                .and_then(|t| self.table.get(t))
                .copied()
                .unwrap_or(0);
        }
        Ok(())
    }

    /// Writes `data` at `offset`; only table bytes change.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), MsixBarAccessError> {
        let start = Self::check(offset, data.len())?;
        for (i, &v) in data.iter().enumerate() {
            if let Some(slot) = (start + i)
                .checked_sub(TABLE_START)
                .and_then(|t| self.table.get_mut(t))
            {
                *slot = v;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_storage_and_pba_is_zero() {
        let mut bar = MsixBar::new();
        let mut ctrl = [0u8; 4];
        bar.read(TABLE_START as u64 + 12, &mut ctrl).unwrap();
        assert_eq!(u32::from_le_bytes(ctrl), ENTRY_MASKED);
        bar.write(TABLE_START as u64 + 16, &0xfee0_0000u32.to_le_bytes())
            .unwrap();
        let mut addr = [0u8; 4];
        bar.read(TABLE_START as u64 + 16, &mut addr).unwrap();
        assert_eq!(u32::from_le_bytes(addr), 0xfee0_0000);
        bar.write(MSIX_PBA_OFFSET as u64, &[0xff; 8]).unwrap();
        let mut pba = [0xffu8; 8];
        bar.read(MSIX_PBA_OFFSET as u64, &mut pba).unwrap();
        assert_eq!(pba, [0; 8]);
    }

    #[test]
    fn bounds() {
        let mut bar = MsixBar::new();
        let mut b = [0u8; 8];
        assert!(bar.read(MSIX_BAR_SIZE as u64 - 4, &mut b).is_err());
        assert!(bar.read(u64::MAX, &mut b).is_err());
        assert!(bar.write(u64::MAX - 1, &b).is_err());
        assert!(bar.read(MSIX_BAR_SIZE as u64 - 8, &mut b).is_ok());
        // Past the table but inside the BAR: reads 0, writes are dropped.
        bar.write(TABLE_LEN as u64, &[1, 2, 3]).unwrap();
        bar.read(TABLE_LEN as u64, &mut b[..3]).unwrap();
        assert_eq!(&b[..3], &[0, 0, 0]);
    }
}
