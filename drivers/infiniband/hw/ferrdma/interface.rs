// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The ferrdma hardware interface: PCI identity, BAR layout and register map.
//!
//! This file is the single definition of the interface between the ferrdma driver and the
//! ferrdma-nic device model. The driver includes it as a module of its crate (`mod interface;`)
//! and the device model includes it with `#[path]`, so the two cannot drift. It may only use
//! `core`: no kernel or std items. The prose specification is
//! `Documentation/infiniband/ferrdma/programming-manual.rst`.
//!
//! All registers are 32 bits wide and little-endian; 64-bit values are split into a low word
//! at the given offset and a high word at offset + 4. The driver writes the low word first.

#![allow(dead_code)]

/// PCI vendor id. 0x1234 is the id QEMU's emulated devices (bochs-display, edu) use; no in-tree
/// driver binds 0x1234 with our device id. Never an Intel E810 id.
pub const PCI_VENDOR_ID: u16 = 0x1234;
/// PCI device id of the ferrdma function.
pub const PCI_DEVICE_ID: u16 = 0xfe10;
/// PCI subsystem vendor id.
pub const PCI_SUBSYSTEM_VENDOR_ID: u16 = 0x1234;
/// PCI subsystem id.
pub const PCI_SUBSYSTEM_ID: u16 = 0xfe10;
/// PCI revision id.
pub const PCI_REVISION_ID: u8 = 0x01;
/// PCI class code: network controller (0x02), "other" subclass (0x80), prog-if 0.
pub const PCI_CLASS_CODE: u32 = 0x02_80_00;

/// BAR0: control registers, 32-bit non-prefetchable memory.
pub const BAR0_INDEX: u32 = 0;
/// Size of BAR0 in bytes.
pub const BAR0_SIZE: usize = 0x1_0000;
/// BAR4: MSI-X table and pending-bit array, 32-bit non-prefetchable memory.
pub const MSIX_BAR_INDEX: u32 = 4;
/// Size of the MSI-X BAR in bytes.
pub const MSIX_BAR_SIZE: usize = 0x1000;
/// Offset of the MSI-X table in the MSI-X BAR.
pub const MSIX_TABLE_OFFSET: u32 = 0x0;
/// Offset of the MSI-X pending-bit array in the MSI-X BAR.
pub const MSIX_PBA_OFFSET: u32 = 0x800;
/// Number of MSI-X vectors: vector 0 will carry the AEQ, vectors 1.. the CEQs.
pub const MSIX_VECTORS: u32 = 8;

/// Device identification value read from [`REG_ID`]: "FRDM" in ASCII.
pub const DEVICE_ID_MAGIC: u32 = 0x4652_444d;
/// Interface major version; the driver refuses a device whose major differs.
pub const VERSION_MAJOR: u16 = 1;
/// Interface minor version; additions that keep older drivers working bump it.
pub const VERSION_MINOR: u16 = 1;

/// `ID` (RO): always [`DEVICE_ID_MAGIC`].
pub const REG_ID: usize = 0x000;
/// `VERSION` (RO): bits 31:16 major, 15:0 minor.
pub const REG_VERSION: usize = 0x004;
/// `SCRATCH` (RW): no effect; reads return the last value written (reset value 0).
pub const REG_SCRATCH: usize = 0x008;
/// `MSIX_COUNT` (RO): number of MSI-X vectors the function implements.
pub const REG_MSIX_COUNT: usize = 0x00c;
/// `MAC_LO` (RO, since 1.1): bytes 0..3 of the port's Ethernet MAC, byte 0 in bits 7:0.
pub const REG_MAC_LO: usize = 0x010;
/// `MAC_HI` (RO, since 1.1): bytes 4..5 of the port's Ethernet MAC in bits 15:0; bits 31:16 are 0.
pub const REG_MAC_HI: usize = 0x014;

/// Splits a MAC into the (`MAC_LO`, `MAC_HI`) register values.
pub const fn mac_to_regs(mac: [u8; 6]) -> (u32, u32) {
    (
        u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]),
        u32::from_le_bytes([mac[4], mac[5], 0, 0]),
    )
}

/// Joins the (`MAC_LO`, `MAC_HI`) register values into a MAC; bits 31:16 of `hi` are ignored.
pub const fn mac_from_regs(lo: u32, hi: u32) -> [u8; 6] {
    let l = lo.to_le_bytes();
    let h = hi.to_le_bytes();
    [l[0], l[1], l[2], l[3], h[0], h[1]]
}

/// `TEST_IRQ` (WO): writing a vector number raises that MSI-X vector once.
/// A number >= [`MSIX_VECTORS`] sets [`REG_TEST_STATUS`] to [`TestStatus::BadVector`].
pub const REG_TEST_IRQ: usize = 0x100;
/// `TEST_STATUS` (RO): the [`TestStatus`] of the last test command.
pub const REG_TEST_STATUS: usize = 0x104;
/// `TEST_DMA_LEN` (RW): byte count of the DMA copy test, 1..=[`TEST_DMA_MAX_LEN`].
pub const REG_TEST_DMA_LEN: usize = 0x108;
/// `TEST_DMA_SRC` (RW, 64-bit): guest physical (bus) address the copy test reads from.
pub const REG_TEST_DMA_SRC: usize = 0x110;
/// `TEST_DMA_DST` (RW, 64-bit): guest physical (bus) address the copy test writes to.
pub const REG_TEST_DMA_DST: usize = 0x118;
/// `TEST_DMA_CTRL` (WO): writing [`TEST_DMA_CTRL_START`] copies `TEST_DMA_LEN` bytes from
/// `TEST_DMA_SRC` to `TEST_DMA_DST`. The copy is complete when the write returns (the device
/// handles it synchronously); the result is in [`REG_TEST_STATUS`].
pub const REG_TEST_DMA_CTRL: usize = 0x120;
/// Value written to [`REG_TEST_DMA_CTRL`] to start a copy.
pub const TEST_DMA_CTRL_START: u32 = 1;
/// Largest byte count of one DMA copy test.
pub const TEST_DMA_MAX_LEN: u32 = 1 << 20;

/// Result codes in [`REG_TEST_STATUS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestStatus {
    /// The last test command succeeded.
    Ok = 0,
    /// `TEST_IRQ` named a vector the function does not have, or vectors are not enabled.
    BadVector = 1,
    /// `TEST_DMA_LEN` was 0 or larger than [`TEST_DMA_MAX_LEN`].
    BadLength = 2,
    /// A DMA address range was not inside guest memory mapped to the device.
    DmaFault = 3,
    /// The source and destination ranges overlap.
    Overlap = 4,
    /// `TEST_DMA_CTRL` was written with a value other than [`TEST_DMA_CTRL_START`].
    BadCommand = 5,
}

impl TestStatus {
    /// Decodes a `TEST_STATUS` value; `None` for values the interface does not define.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Ok),
            1 => Some(Self::BadVector),
            2 => Some(Self::BadLength),
            3 => Some(Self::DmaFault),
            4 => Some(Self::Overlap),
            5 => Some(Self::BadCommand),
            _ => None,
        }
    }
}
