// SPDX-License-Identifier: GPL-2.0

//! BAR0 register definitions.
//!
//! `register!` needs literal offsets, so the offsets are written out here and checked at
//! compile time against the shared definitions in [`crate::interface`].

use crate::interface as hw;
use kernel::{
    io::{register, register::Register},
    pci,
};

/// The mapped BAR0 of a ferrdma function.
pub(crate) type Bar0<'bound> = pci::Bar<'bound, { hw::BAR0_SIZE }>;

/// The mapped doorbell BAR; the kernel rings its own queues through page 0.
pub(crate) type DbPage<'bound> = pci::Bar<'bound, { hw::DB_PAGE_SIZE }>;

register! {
    /// Device identification: always [`hw::DEVICE_ID_MAGIC`].
    pub(crate) ID(u32) @ 0x000 {
        31:0 value;
    }

    /// Interface version.
    pub(crate) VERSION(u32) @ 0x004 {
        31:16 major;
        15:0 minor;
    }

    /// Scratch register with no side effects.
    pub(crate) SCRATCH(u32) @ 0x008 {
        31:0 value;
    }

    /// Number of MSI-X vectors the function implements.
    pub(crate) MSIX_COUNT(u32) @ 0x00c {
        31:0 count;
    }

    /// What the function implements beyond interface 1.0.
    pub(crate) FEATURES(u32) @ 0x010 {
        1:1 doorbell_bar => bool;
        0:0 rdma => bool;
    }

    /// Bytes 0..3 of the port MAC.
    pub(crate) MAC_LO(u32) @ 0x018 {
        31:0 value;
    }

    /// Bytes 4..5 of the port MAC.
    pub(crate) MAC_HI(u32) @ 0x01c {
        31:0 value;
    }

    /// Raises the given MSI-X vector once.
    pub(crate) TEST_IRQ(u32) @ 0x100 {
        31:0 vector;
    }

    /// Result of the last test command, a [`hw::TestStatus`].
    pub(crate) TEST_STATUS(u32) @ 0x104 {
        31:0 status;
    }

    /// Byte count of the DMA copy test.
    pub(crate) TEST_DMA_LEN(u32) @ 0x108 {
        31:0 len;
    }

    /// Source bus address of the DMA copy test, low word.
    pub(crate) TEST_DMA_SRC_LO(u32) @ 0x110 {
        31:0 value;
    }

    /// Source bus address of the DMA copy test, high word.
    pub(crate) TEST_DMA_SRC_HI(u32) @ 0x114 {
        31:0 value;
    }

    /// Destination bus address of the DMA copy test, low word.
    pub(crate) TEST_DMA_DST_LO(u32) @ 0x118 {
        31:0 value;
    }

    /// Destination bus address of the DMA copy test, high word.
    pub(crate) TEST_DMA_DST_HI(u32) @ 0x11c {
        31:0 value;
    }

    /// Starts the DMA copy test.
    pub(crate) TEST_DMA_CTRL(u32) @ 0x120 {
        31:0 command;
    }

    /// Resets the RDMA engine.
    pub(crate) DEV_CTRL(u32) @ 0x200 {
        31:0 command;
    }

    /// RDMA engine status.
    pub(crate) DEV_STATUS(u32) @ 0x204 {
        31:0 value;
    }

    /// Admin command ring bus address, low word.
    pub(crate) AQ_BASE_LO(u32) @ 0x210 {
        31:0 value;
    }

    /// Admin command ring bus address, high word.
    pub(crate) AQ_BASE_HI(u32) @ 0x214 {
        31:0 value;
    }

    /// Admin completion ring bus address, low word.
    pub(crate) ACQ_BASE_LO(u32) @ 0x218 {
        31:0 value;
    }

    /// Admin completion ring bus address, high word.
    pub(crate) ACQ_BASE_HI(u32) @ 0x21c {
        31:0 value;
    }

    /// Entries in each admin ring.
    pub(crate) AQ_SIZE(u32) @ 0x220 {
        31:0 entries;
    }

    /// Admin queue control.
    pub(crate) AQ_CTRL(u32) @ 0x224 {
        31:0 value;
    }

    /// Admin producer index (the admin doorbell).
    pub(crate) AQ_TAIL(u32) @ 0x228 {
        31:0 value;
    }

    /// Admin queue status.
    pub(crate) AQ_STATUS(u32) @ 0x230 {
        31:0 value;
    }

    /// Event queue consumer index and re-arm ([`hw::eq_doorbell`]).
    pub(crate) EQ_DOORBELL(u32) @ 0x300 {
        31:0 value;
    }
}

// The literal offsets above must match the shared interface definition.
const _: () = {
    assert!(<ID as Register>::OFFSET == hw::REG_ID);
    assert!(<VERSION as Register>::OFFSET == hw::REG_VERSION);
    assert!(<SCRATCH as Register>::OFFSET == hw::REG_SCRATCH);
    assert!(<MSIX_COUNT as Register>::OFFSET == hw::REG_MSIX_COUNT);
    assert!(<FEATURES as Register>::OFFSET == hw::REG_FEATURES);
    assert!(1 << 1 == hw::FEATURE_DOORBELL_BAR && 1 << 0 == hw::FEATURE_RDMA);
    assert!(<MAC_LO as Register>::OFFSET == hw::REG_MAC_LO);
    assert!(<MAC_HI as Register>::OFFSET == hw::REG_MAC_HI);
    assert!(<TEST_IRQ as Register>::OFFSET == hw::REG_TEST_IRQ);
    assert!(<TEST_STATUS as Register>::OFFSET == hw::REG_TEST_STATUS);
    assert!(<TEST_DMA_LEN as Register>::OFFSET == hw::REG_TEST_DMA_LEN);
    assert!(<TEST_DMA_SRC_LO as Register>::OFFSET == hw::REG_TEST_DMA_SRC);
    assert!(<TEST_DMA_SRC_HI as Register>::OFFSET == hw::REG_TEST_DMA_SRC + 4);
    assert!(<TEST_DMA_DST_LO as Register>::OFFSET == hw::REG_TEST_DMA_DST);
    assert!(<TEST_DMA_DST_HI as Register>::OFFSET == hw::REG_TEST_DMA_DST + 4);
    assert!(<TEST_DMA_CTRL as Register>::OFFSET == hw::REG_TEST_DMA_CTRL);
    assert!(<DEV_CTRL as Register>::OFFSET == hw::REG_DEV_CTRL);
    assert!(<DEV_STATUS as Register>::OFFSET == hw::REG_DEV_STATUS);
    assert!(<AQ_BASE_LO as Register>::OFFSET == hw::REG_AQ_BASE);
    assert!(<AQ_BASE_HI as Register>::OFFSET == hw::REG_AQ_BASE + 4);
    assert!(<ACQ_BASE_LO as Register>::OFFSET == hw::REG_ACQ_BASE);
    assert!(<ACQ_BASE_HI as Register>::OFFSET == hw::REG_ACQ_BASE + 4);
    assert!(<AQ_SIZE as Register>::OFFSET == hw::REG_AQ_SIZE);
    assert!(<AQ_CTRL as Register>::OFFSET == hw::REG_AQ_CTRL);
    assert!(<AQ_TAIL as Register>::OFFSET == hw::REG_AQ_TAIL);
    assert!(<AQ_STATUS as Register>::OFFSET == hw::REG_AQ_STATUS);
    assert!(<EQ_DOORBELL as Register>::OFFSET == hw::REG_EQ_DOORBELL);
    assert!(hw::eq_doorbell(0x7f, 0xff_ffff, true) == u32::MAX);
};
