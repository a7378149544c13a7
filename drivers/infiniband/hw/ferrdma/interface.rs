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
///
/// 3: event tags ([`CreateCq::event_tag`], [`CreateQp::event_tag`], [`Eqe::tag`]).
/// 4: the fatal state is announced ([`ae::DEVICE_FATAL`]) and admin commands fail in it
///    ([`admin_status::FATAL`]) instead of going unanswered.
/// 5: CQ resize follows the consumer's ring switch ([`cq_shadow::SELECT_MASK`]) and refuses
///    a ring too small for the unpolled CQEs; port counters ([`admin_op::QUERY_COUNTERS`]).
/// 6: multicast groups ([`admin_op::MCAST_ATTACH`], [`Caps::max_mcast_grp`]).
/// 7: two-level FAST_REG page lists ([`fast_reg::TWO_LEVEL`]) and up to
///    [`MAX_FAST_REG_PAGES`] pages per fast registration (512 before); larger tables
///    ([`MAX_QP`], [`MAX_CQ`], [`MAX_MR`]) and [`DB_PAGES`] (`Caps` reports each).
/// 8: link-level flow control: the port obeys PFC and PAUSE frames and counts them
///    ([`PortCounters::pfc_frames_rx`]).
/// 9: the congestion control parameters are the driver's to read and change too
///    ([`admin_op::QUERY_CC`], [`admin_op::SET_CC`], [`cc_param`]).
pub const VERSION_MINOR: u16 = 9;

/// `ID` (RO): always [`DEVICE_ID_MAGIC`].
pub const REG_ID: usize = 0x000;
/// `VERSION` (RO): bits 31:16 major, 15:0 minor.
pub const REG_VERSION: usize = 0x004;
/// `SCRATCH` (RW): no effect; reads return the last value written (reset value 0).
pub const REG_SCRATCH: usize = 0x008;
/// `MSIX_COUNT` (RO): number of MSI-X vectors the function implements.
pub const REG_MSIX_COUNT: usize = 0x00c;
/// `MAC_LO` (RO, since 1.1): bytes 0..3 of the port's Ethernet MAC, byte 0 in bits 7:0.
pub const REG_MAC_LO: usize = 0x018;
/// `MAC_HI` (RO, since 1.1): bytes 4..5 of the port's Ethernet MAC in bits 15:0; bits 31:16 are 0.
pub const REG_MAC_HI: usize = 0x01c;

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

// ============================================================================================
// Interface 2.0 additions: RDMA engine. Everything below is new; nothing above changed.
// The prose for every item is in programming-manual.rst, section by section.
// ============================================================================================

// --------------------------------------------------------------------------------------------
// Wire encoding. Every command, completion and queue entry is a `#[repr(C)]` struct of
// little-endian integers with explicit padding. `encode`/`decode` convert to and from the
// exact byte image without `unsafe`; both are total (no panics).
// --------------------------------------------------------------------------------------------

/// A fixed-size little-endian value that can be placed into or read from a byte image.
pub trait Wire: Sized + Copy {
    /// Bytes occupied on the wire.
    const SIZE: usize;
    /// Writes the value to the first [`Self::SIZE`] bytes of `out` (nothing if `out` is short).
    fn put(&self, out: &mut [u8]);
    /// Reads the value from the first [`Self::SIZE`] bytes of `inp` (zero if `inp` is short).
    fn get(inp: &[u8]) -> Self;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn put(&self, out: &mut [u8]) {
                if let Some(d) = out.get_mut(..Self::SIZE) {
                    d.copy_from_slice(&self.to_le_bytes());
                }
            }
            fn get(inp: &[u8]) -> Self {
                match inp.get(..Self::SIZE).and_then(|s| s.try_into().ok()) {
                    Some(b) => <$t>::from_le_bytes(b),
                    None => 0,
                }
            }
        }
    )*};
}
wire_int!(u8, u16, u32, u64);

impl<const N: usize> Wire for [u8; N] {
    const SIZE: usize = N;
    fn put(&self, out: &mut [u8]) {
        if let Some(d) = out.get_mut(..N) {
            d.copy_from_slice(self);
        }
    }
    fn get(inp: &[u8]) -> Self {
        let mut v = [0u8; N];
        if let Some(s) = inp.get(..N) {
            v.copy_from_slice(s);
        }
        v
    }
}

/// Declares a wire struct: `#[repr(C)]`, size-checked against the sum of its fields (so it
/// has no implicit padding), with `encode`/`decode` to its `[u8; SIZE]` image.
macro_rules! wire_struct {
    ($(#[$sm:meta])* pub struct $name:ident [$size:expr] {
        $($(#[$fm:meta])* pub $f:ident : $t:ty,)*
    }) => {
        $(#[$sm])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }
        const _: () = assert!(core::mem::size_of::<$name>() == $size);
        const _: () = assert!(0 $(+ <$t as Wire>::SIZE)* == $size);
        impl $name {
            /// Size of the byte image.
            pub const SIZE: usize = $size;
            /// The little-endian byte image.
            pub fn encode(&self) -> [u8; $size] {
                let mut b = [0u8; $size];
                Wire::put(self, &mut b);
                b
            }
            /// Decodes a byte image.
            pub fn decode(b: &[u8; $size]) -> Self {
                <Self as Wire>::get(b)
            }
        }
        impl Wire for $name {
            const SIZE: usize = $size;
            #[allow(unused_assignments)]
            fn put(&self, out: &mut [u8]) {
                let mut off = 0usize;
                $(
                    if let Some(s) = out.get_mut(off..) {
                        Wire::put(&self.$f, s);
                    }
                    off += <$t as Wire>::SIZE;
                )*
            }
            #[allow(unused_assignments)]
            fn get(inp: &[u8]) -> Self {
                let mut off = 0usize;
                $(
                    let $f = <$t as Wire>::get(inp.get(off..).unwrap_or(&[]));
                    off += <$t as Wire>::SIZE;
                )*
                Self { $($f,)* }
            }
        }
    };
}

/// Extracts bits `hi..=lo` of `v`.
pub const fn bits(v: u64, hi: u32, lo: u32) -> u64 {
    (v >> lo) & (u64::MAX >> (63 - hi + lo))
}

/// `v` with bits `hi..=lo` replaced by the low bits of `field`.
pub const fn set_bits(v: u64, hi: u32, lo: u32, field: u64) -> u64 {
    let mask = (u64::MAX >> (63 - hi + lo)) << lo;
    (v & !mask) | ((field << lo) & mask)
}

// --------------------------------------------------------------------------------------------
// BAR0 additions (manual: "BAR0 register map", "Reset and initialisation").
// --------------------------------------------------------------------------------------------

/// `FEATURES` (RO): what this function implements beyond interface 1.0.
pub const REG_FEATURES: usize = 0x010;
/// [`REG_FEATURES`] bit: the admin queue, event queues and RDMA engine of interface 2.0.
pub const FEATURE_RDMA: u32 = 1 << 0;
/// [`REG_FEATURES`] bit: the doorbell BAR ([`DB_BAR_INDEX`]) is present.
pub const FEATURE_DOORBELL_BAR: u32 = 1 << 1;

/// `DEV_CTRL` (WO): writing [`DEV_CTRL_RESET`] resets the RDMA engine (all objects gone,
/// admin queue disabled, registers below at reset values). Complete when the write returns.
pub const REG_DEV_CTRL: usize = 0x200;
/// [`REG_DEV_CTRL`] value that resets the RDMA engine.
pub const DEV_CTRL_RESET: u32 = 1;
/// `DEV_STATUS` (RO): [`DEV_STATUS_READY`], [`DEV_STATUS_FATAL`].
pub const REG_DEV_STATUS: usize = 0x204;
/// [`REG_DEV_STATUS`] bit: the engine is out of reset and accepts admin commands.
pub const DEV_STATUS_READY: u32 = 1 << 0;
/// [`REG_DEV_STATUS`] bit: the engine met an unrecoverable error; only a reset helps. From
/// the moment it is set the engine executes nothing: doorbells and received packets are
/// dropped, timers stop, and every admin command completes with [`admin_status::FATAL`]
/// (1.4 on); the AEQ gets one [`ae::DEVICE_FATAL`] entry. Event queue doorbells still work,
/// so the driver can consume that entry. A [`DEV_CTRL_RESET`] clears the state.
pub const DEV_STATUS_FATAL: u32 = 1 << 1;

/// `AQ_BASE` (RW, 64-bit): bus address of the admin command ring, [`AQ_BASE_ALIGN`]-aligned.
pub const REG_AQ_BASE: usize = 0x210;
/// `ACQ_BASE` (RW, 64-bit): bus address of the admin completion ring, [`AQ_BASE_ALIGN`]-aligned.
pub const REG_ACQ_BASE: usize = 0x218;
/// `AQ_SIZE` (RW): entries in each admin ring, a power of two in
/// [`AQ_MIN_ENTRIES`]..=[`AQ_MAX_ENTRIES`]. Ignored while the queue is enabled.
pub const REG_AQ_SIZE: usize = 0x220;
/// `AQ_CTRL` (RW): [`AQ_CTRL_ENABLE`], [`AQ_CTRL_IRQ`].
pub const REG_AQ_CTRL: usize = 0x224;
/// [`REG_AQ_CTRL`] bit: the admin queue runs. Setting it checks the ring registers (result in
/// [`REG_AQ_STATUS`]) and starts with head = tail = 0 and phase 1.
pub const AQ_CTRL_ENABLE: u32 = 1 << 0;
/// [`REG_AQ_CTRL`] bit: raise MSI-X vector [`AEQ_VECTOR`] after writing admin completions.
pub const AQ_CTRL_IRQ: u32 = 1 << 1;
/// `AQ_TAIL` (RW): the driver's producer index; writing it is the admin doorbell.
pub const REG_AQ_TAIL: usize = 0x228;
/// `AQ_HEAD` (RO): the device's consumer index (next command it will read).
pub const REG_AQ_HEAD: usize = 0x22c;
/// `AQ_STATUS` (RO): an [`AqStatus`] value.
pub const REG_AQ_STATUS: usize = 0x230;
/// `EQ_DOORBELL` (WO): consume and re-arm an event queue; see [`eq_doorbell`].
pub const REG_EQ_DOORBELL: usize = 0x300;

/// Alignment of [`REG_AQ_BASE`] and [`REG_ACQ_BASE`].
pub const AQ_BASE_ALIGN: u64 = 4096;
/// Smallest admin ring.
pub const AQ_MIN_ENTRIES: u32 = 2;
/// Largest admin ring.
pub const AQ_MAX_ENTRIES: u32 = 4096;

/// [`REG_AQ_STATUS`] values.
pub mod aq_status {
    /// Running normally (or disabled without error).
    pub const OK: u32 = 0;
    /// `AQ_CTRL.ENABLE` was set with a bad base alignment or size; the queue stays disabled.
    pub const BAD_CONFIG: u32 = 1;
    /// `AQ_TAIL` was written with a value >= `AQ_SIZE`; the write was ignored.
    pub const BAD_TAIL: u32 = 2;
    /// A ring entry could not be read or a completion written; the queue stopped (disabled).
    pub const DMA_FAULT: u32 = 3;
    /// Bus Master Enable is off: the queue stopped without touching memory.
    pub const NO_BUS_MASTER: u32 = 4;
}

/// Bit 31 of an [`REG_EQ_DOORBELL`] write: re-arm the queue.
pub const EQ_DB_ARM: u32 = 1 << 31;
/// Encodes an [`REG_EQ_DOORBELL`] value: event queue `eq_id` (bits 30:24), new consumer
/// index `cons` (bits 23:0; the index of the next entry software will read), and arm.
pub const fn eq_doorbell(eq_id: u32, cons: u32, arm: bool) -> u32 {
    ((eq_id & 0x7f) << 24) | (cons & 0x00ff_ffff) | if arm { EQ_DB_ARM } else { 0 }
}

// --------------------------------------------------------------------------------------------
// The doorbell BAR (manual: "Doorbell BAR"): irdma GEN_2 doorbell page semantics.
// --------------------------------------------------------------------------------------------

/// BAR2: doorbell pages, 32-bit non-prefetchable memory, write-only, user-mappable per page.
pub const DB_BAR_INDEX: u32 = 2;
/// Bytes per doorbell page (one per user context; the kernel uses page 0 by convention).
pub const DB_PAGE_SIZE: usize = 4096;
/// Doorbell pages in the BAR (256 before 1.7): page 0 and a user context each for 4095.
pub const DB_PAGES: u32 = 4096;
/// Size of the doorbell BAR.
pub const DB_BAR_SIZE: usize = DB_PAGE_SIZE * DB_PAGES as usize;
/// Page offset of the SQ doorbell: a 32-bit write of the QP id (bits 19:0; 31:20 must be 0).
pub const DB_SQ_OFFSET: usize = 0x000;
/// Page offset of the CQ arm doorbell: a 32-bit write of the CQ id.
pub const DB_CQ_ARM_OFFSET: usize = 0x040;
/// Mask of the QP id in an SQ doorbell value.
pub const DB_SQ_QP_MASK: u32 = 0x000f_ffff;

// --------------------------------------------------------------------------------------------
// Limits (manual: "Limits"). QUERY_CAPS reports the same values.
// --------------------------------------------------------------------------------------------

/// QP ids are 0..MAX_QP; 0 is reserved, 1 is the GSI QP: 16,384 QPs with the GSI QP (1024
/// before 1.7).
pub const MAX_QP: u32 = 16384 + 1;
/// CQ ids are 0..MAX_CQ; drivers leave 0 unused: 16,384 CQs (1024 before 1.7).
pub const MAX_CQ: u32 = 16384 + 1;
/// MR table entries (STag index = stag >> 8) are 0..MAX_MR; 0 is the local DMA STag's:
/// 65,536 MRs (4096 before 1.7).
pub const MAX_MR: u32 = 65536 + 1;
/// AH ids are 0..MAX_AH (libirdma carries 17 bits).
pub const MAX_AH: u32 = 1024;
/// PD ids are 0..MAX_PD (allocated by the driver; the device only compares them).
pub const MAX_PD: u32 = 1 << 18;
/// Event queues: ids 0..MAX_EQ, at most one per MSI-X vector.
pub const MAX_EQ: u32 = MSIX_VECTORS;
/// Largest interrupt moderation interval of an EQ, in microseconds (E810's ITR limit).
pub const MAX_EQ_MODERATION_US: u16 = 8160;
/// GID table entries.
pub const MAX_GID: u32 = 32;
/// Multicast groups the device can hold at once (one per multicast GID).
pub const MAX_MCAST_GRP: u32 = 256;
/// QPs attached to one multicast group at most.
pub const MAX_MCAST_QP_ATTACH: u32 = 16;
/// The destination QP number of a multicast packet (IBTA: the permissive QP, 0xFFFFFF).
pub const MCAST_QPN: u32 = 0x00ff_ffff;
/// Largest SQ ring, in 32-byte quanta (the CQE WQE index is 15 bits).
pub const MAX_SQ_QUANTA: u32 = 32768;
/// Largest RQ ring, in quanta.
pub const MAX_RQ_QUANTA: u32 = 32768;
/// Smallest SQ or RQ ring, in quanta.
pub const MIN_WQ_QUANTA: u32 = 8;
/// Largest CQ ring, in 32-byte entries.
pub const MAX_CQ_ENTRIES: u32 = 1 << 20;
/// Smallest CQ ring.
pub const MIN_CQ_ENTRIES: u32 = 4;
/// Largest EQ ring, in 16-byte entries (a power of two).
pub const MAX_EQ_ENTRIES: u32 = 1 << 16;
/// Smallest EQ ring.
pub const MIN_EQ_ENTRIES: u32 = 16;
/// Scatter/gather entries per WQE.
pub const MAX_SGE: u32 = 13;
/// Inline bytes per WQE.
pub const MAX_INLINE: u32 = 101;
/// SQ chunk: no WQE straddles an 8-quantum chunk (libirdma pads with NOPs).
pub const SQ_CHUNK_QUANTA: u32 = 8;
/// Largest message (and MR).
pub const MAX_MSG_SIZE: u32 = 1 << 31;
/// Largest MR length in bytes.
pub const MAX_MR_SIZE: u64 = 1 << 40;
/// Supported MR page sizes, as a bit mask of sizes (4 KiB, 2 MiB, 1 GiB).
pub const PAGE_SIZE_CAP: u64 = (1 << 12) | (1 << 21) | (1 << 30);
/// Page size of every queue ring (SQ, RQ, CQ, EQ) and of page-list pages.
pub const QUEUE_PAGE_SIZE: u64 = 4096;
/// Page addresses per page-list page.
pub const PBL_ENTRIES_PER_PAGE: u32 = 512;
/// Largest page count of one page list (two levels of 512).
pub const MAX_PBL_PAGES: u32 = PBL_ENTRIES_PER_PAGE * PBL_ENTRIES_PER_PAGE;
/// Largest `max_rd_atomic` / `max_dest_rd_atomic`.
pub const MAX_RD_ATOMIC: u8 = 16;
/// MSI-X vector of the asynchronous event queue (and of admin completions).
pub const AEQ_VECTOR: u32 = 0;
/// irdma hardware revision reported to libirdma.
pub const HW_REV_GEN_2: u8 = 2;

// --------------------------------------------------------------------------------------------
// Page lists (manual: "Page lists").
// --------------------------------------------------------------------------------------------

/// `addr` is the first page; the pages are physically contiguous.
pub const PBL_LEVEL_CONTIG: u8 = 0;
/// `addr` points to an array of page addresses (u64 LE), up to 512 in one 4 KiB page.
pub const PBL_LEVEL_1: u8 = 1;
/// `addr` points to an array of up to 512 addresses of level-1 pages, each holding up to
/// 512 page addresses.
pub const PBL_LEVEL_2: u8 = 2;

wire_struct! {
    /// Where the pages of a ring or memory region are.
    pub struct PageList [16] {
        /// Bus address: the first page ([`PBL_LEVEL_CONTIG`]) or the (root) list page.
        pub addr: u64,
        /// Number of pages described.
        pub npages: u32,
        /// [`PBL_LEVEL_CONTIG`], [`PBL_LEVEL_1`] or [`PBL_LEVEL_2`].
        pub level: u8,
        /// Reserved, 0.
        pub rsvd0: u8,
        /// Reserved, 0.
        pub rsvd1: u16,
    }
}

// --------------------------------------------------------------------------------------------
// Admin queue (manual: "Admin queue").
// --------------------------------------------------------------------------------------------

/// Bytes per admin command.
pub const ADMIN_CMD_SIZE: usize = 128;
/// Bytes per admin completion.
pub const ADMIN_CPL_SIZE: usize = 16;
/// [`AdminCompletion::flags`] bit: the phase tag (1 on the first pass, flips each wrap).
pub const ACQ_FLAG_PHASE: u16 = 1 << 15;
/// How long the device may take for one command before the driver should give up and
/// reset (milliseconds).
pub const ADMIN_TIMEOUT_MS: u32 = 1000;

/// Admin command opcodes.
pub mod admin_op {
    /// Writes a [`super::Caps`] to the output buffer.
    pub const QUERY_CAPS: u8 = 0x01;
    /// [`super::CreateEq`].
    pub const CREATE_EQ: u8 = 0x02;
    /// [`super::DestroyObject`] with an EQ id.
    pub const DESTROY_EQ: u8 = 0x03;
    /// [`super::CreateCq`].
    pub const CREATE_CQ: u8 = 0x04;
    /// [`super::ModifyCq`].
    pub const MODIFY_CQ: u8 = 0x05;
    /// [`super::DestroyObject`] with a CQ id.
    pub const DESTROY_CQ: u8 = 0x06;
    /// [`super::CreateQp`].
    pub const CREATE_QP: u8 = 0x07;
    /// [`super::ModifyQp`].
    pub const MODIFY_QP: u8 = 0x08;
    /// [`super::QueryObject`] with a QP id; writes a [`super::QpQueryOut`].
    pub const QUERY_QP: u8 = 0x09;
    /// [`super::DestroyObject`] with a QP id.
    pub const DESTROY_QP: u8 = 0x0a;
    /// [`super::RegMr`].
    pub const REG_MR: u8 = 0x0b;
    /// [`super::DestroyObject`] with an STag.
    pub const DEREG_MR: u8 = 0x0c;
    /// [`super::GidCmd`].
    pub const ADD_GID: u8 = 0x0d;
    /// [`super::GidCmd`] (only the index is used).
    pub const DEL_GID: u8 = 0x0e;
    /// [`super::SetPort`].
    pub const SET_PORT: u8 = 0x0f;
    /// [`super::QueryObject`]; writes a [`super::Stats`]. `id` bit 0 set: clear after read.
    pub const QUERY_STATS: u8 = 0x10;
    /// [`super::CreateAh`].
    pub const CREATE_AH: u8 = 0x11;
    /// [`super::DestroyObject`] with an AH id.
    pub const DESTROY_AH: u8 = 0x12;
    /// [`super::AllocMr`]: an MR table entry for fast registration, initially invalid.
    pub const ALLOC_MR: u8 = 0x13;
    /// [`super::QueryObject`] (`id` 0); writes a [`super::PortCounters`] (since 1.5).
    pub const QUERY_COUNTERS: u8 = 0x14;
    /// [`super::McastCmd`]: attaches a UD QP to the group of a multicast GID, creating the
    /// group if it is new (since 1.6).
    pub const MCAST_ATTACH: u8 = 0x15;
    /// [`super::McastCmd`]: detaches a QP from a group; the last QP out ends the group.
    pub const MCAST_DETACH: u8 = 0x16;
    /// [`super::QueryObject`] with a [`super::cc_param`] id: the completion's `result` is the
    /// parameter's value (since 1.9).
    pub const QUERY_CC: u8 = 0x17;
    /// [`super::SetCc`]: changes one congestion control parameter (since 1.9).
    pub const SET_CC: u8 = 0x18;
}

/// Admin completion status codes ([`AdminCompletion::status`]).
pub mod admin_status {
    /// Done.
    pub const OK: u16 = 0;
    /// Unknown opcode.
    pub const BAD_OPCODE: u16 = 1;
    /// A field is out of range or inconsistent; `detail` holds the byte offset of the field.
    pub const INVALID: u16 = 2;
    /// The id is beyond the table size.
    pub const BAD_ID: u16 = 3;
    /// The id is already in use (create).
    pub const EXISTS: u16 = 4;
    /// The object does not exist.
    pub const NOT_FOUND: u16 = 5;
    /// The object is still referenced (e.g. a CQ used by a QP, an EQ used by a CQ).
    pub const BUSY: u16 = 6;
    /// Illegal QP state transition or missing attributes for it.
    pub const BAD_STATE: u16 = 7;
    /// A buffer, page list or ring named by the command is not accessible to the device.
    pub const DMA_FAULT: u16 = 8;
    /// Valid but not implemented (e.g. a feature bit this device lacks).
    pub const NOT_SUPPORTED: u16 = 9;
    /// The device ran out of an internal resource (e.g. page-list memory).
    pub const NO_RESOURCES: u16 = 10;
    /// The engine is in its fatal state ([`super::DEV_STATUS_FATAL`]); nothing was done, and
    /// nothing will be until a reset (interface 1.4).
    pub const FATAL: u16 = 11;
}

wire_struct! {
    /// The first 8 bytes of every admin command.
    pub struct AdminHeader [8] {
        /// An [`admin_op`] value.
        pub opcode: u8,
        /// Reserved, 0.
        pub flags: u8,
        /// Echoed in the completion.
        pub cmd_id: u16,
        /// Reserved, 0.
        pub rsvd: u32,
    }
}

wire_struct! {
    /// One admin completion, written at the same ring index as its command.
    pub struct AdminCompletion [16] {
        /// The command's `cmd_id`.
        pub cmd_id: u16,
        /// An [`admin_status`] value.
        pub status: u16,
        /// Command-specific result (0 unless documented).
        pub result: u32,
        /// On error: byte offset in the command of the offending field, or 0.
        pub detail: u32,
        /// The command's opcode.
        pub opcode: u8,
        /// Reserved, 0.
        pub rsvd: u8,
        /// [`ACQ_FLAG_PHASE`].
        pub flags: u16,
    }
}

wire_struct! {
    /// Commands that name one object (DESTROY_*, DEREG_MR, QUERY_QP, QUERY_STATS) or
    /// have an output buffer (QUERY_CAPS).
    pub struct QueryObject [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// Object id (QP id, STag, ...); flags for QUERY_STATS.
        pub id: u32,
        /// Bytes available at `out_addr` (must cover the output structure).
        pub out_len: u32,
        /// Bus address of the output buffer (QUERY_* only).
        pub out_addr: u64,
        /// Reserved, 0.
        pub rsvd: [u8; 16],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 32],
        /// Reserved, 0.
        pub rsvd3: [u8; 24],
    }
}

/// DESTROY_* and DEREG_MR use the [`QueryObject`] layout (only `id` matters).
pub type DestroyObject = QueryObject;

/// [`CreateEq::kind`]: the asynchronous event queue (exactly one, on vector 0).
pub const EQ_KIND_AEQ: u8 = 0;
/// [`CreateEq::kind`]: a completion event queue (vectors 1..).
pub const EQ_KIND_CEQ: u8 = 1;

wire_struct! {
    /// CREATE_EQ.
    pub struct CreateEq [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// EQ id, 0..[`MAX_EQ`].
        pub eq_id: u32,
        /// Entries (16 bytes each), a power of two in [`MIN_EQ_ENTRIES`]..=[`MAX_EQ_ENTRIES`].
        pub size: u32,
        /// MSI-X vector: [`AEQ_VECTOR`] for the AEQ, 1..[`MSIX_VECTORS`] for a CEQ.
        pub vector: u32,
        /// [`EQ_KIND_AEQ`] or [`EQ_KIND_CEQ`].
        pub kind: u8,
        /// Reserved, 0.
        pub rsvd0: u8,
        /// Interrupt moderation (since 1.2): the least time in microseconds between two
        /// interrupts of this EQ, 0 for none; at most [`Caps::max_eq_moderation_us`].
        pub moderation_us: u16,
        /// The ring's 4 KiB pages.
        pub ring: PageList,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 24],
    }
}

wire_struct! {
    /// CREATE_CQ, and the new ring of a MODIFY_CQ resize.
    pub struct CreateCq [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// CQ id, 0..[`MAX_CQ`].
        pub cq_id: u32,
        /// Ring entries (32 bytes each), [`MIN_CQ_ENTRIES`]..=[`MAX_CQ_ENTRIES`], any value.
        pub size: u32,
        /// The CEQ that receives this CQ's completion events.
        pub eq_id: u32,
        /// Doorbell page whose CQ-arm doorbell may arm this CQ (0..[`DB_PAGES`]).
        pub db_page: u32,
        /// Bus address of the 64-byte CQ shadow area (8-byte aligned).
        pub shadow_addr: u64,
        /// The ring's 4 KiB pages.
        pub ring: PageList,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Written to [`Eqe::tag`] of every event of this CQ (interface 1.3; reserved before).
        pub event_tag: u32,
        /// Reserved, 0.
        pub rsvd2: [u8; 12],
    }
}

/// [`ModifyCq::flags`] bit: switch to the new ring given in `ring`/`size` (resize).
pub const MODIFY_CQ_RESIZE: u32 = 1 << 0;
/// [`ModifyCq::flags`] bit: move to the CEQ in `eq_id`.
pub const MODIFY_CQ_EQ: u32 = 1 << 1;

wire_struct! {
    /// MODIFY_CQ.
    pub struct ModifyCq [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// CQ id.
        pub cq_id: u32,
        /// New ring entries (with [`MODIFY_CQ_RESIZE`]).
        pub size: u32,
        /// New CEQ (with [`MODIFY_CQ_EQ`]).
        pub eq_id: u32,
        /// [`MODIFY_CQ_RESIZE`], [`MODIFY_CQ_EQ`].
        pub flags: u32,
        /// New shadow area (with [`MODIFY_CQ_RESIZE`]; 0 keeps the old one).
        pub shadow_addr: u64,
        /// New ring (with [`MODIFY_CQ_RESIZE`]).
        pub ring: PageList,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 16],
    }
}

/// QP type: reliable connected.
pub const QP_TYPE_RC: u8 = 0;
/// QP type: unreliable datagram.
pub const QP_TYPE_UD: u8 = 1;
/// QP type: the GSI QP (UD semantics; id must be 1).
pub const QP_TYPE_GSI: u8 = 2;

wire_struct! {
    /// CREATE_QP. The QP starts in RESET with SQ and RQ tails 0 and expected polarity 1.
    pub struct CreateQp [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// QP id, 1..[`MAX_QP`] (1 only for GSI).
        pub qp_id: u32,
        /// Protection domain.
        pub pd: u32,
        /// CQ for SQ completions.
        pub send_cq: u32,
        /// CQ for RQ completions.
        pub recv_cq: u32,
        /// [`QP_TYPE_RC`], [`QP_TYPE_UD`] or [`QP_TYPE_GSI`].
        pub qp_type: u8,
        /// RQ WQE size is `32 << rq_shift` bytes (0..=3).
        pub rq_shift: u8,
        /// Reserved, 0.
        pub rsvd0: u16,
        /// Doorbell page whose SQ doorbell may ring this QP.
        pub db_page: u32,
        /// SQ ring size in quanta: a power of two, [`MIN_WQ_QUANTA`]..=[`MAX_SQ_QUANTA`].
        pub sq_quanta: u32,
        /// RQ ring size in WQEs: a power of two; `rq_wqes << rq_shift` <= [`MAX_RQ_QUANTA`].
        pub rq_wqes: u32,
        /// The SQ ring's 4 KiB pages.
        pub sq_ring: PageList,
        /// The RQ ring's 4 KiB pages.
        pub rq_ring: PageList,
        /// Bus address of the 64-byte QP shadow area (the device may write qw0).
        pub shadow_addr: u64,
        /// Written verbatim to qw1 of every CQE of this QP (libirdma's `user_compl_ctx`).
        pub compl_ctx: u64,
        /// [`QP_FLAG_PRIVILEGED`]; any other bit set fails the command with INVALID.
        pub flags: u32,
        /// Written to [`Eqe::tag`] of every event of this QP (interface 1.3; reserved before).
        pub event_tag: u32,
        /// Reserved, 0.
        pub rsvd: [u8; 24],
        /// Reserved, 0.
        pub rsvd1: [u8; 8],
    }
}

/// [`CreateQp::flags`] bit: the QP was created by the kernel driver for a kernel consumer;
/// its local accesses may use [`LOCAL_DMA_STAG`].
pub const QP_FLAG_PRIVILEGED: u32 = 1 << 0;
/// Every defined [`CreateQp::flags`] bit.
pub const QP_FLAG_ALL: u32 = QP_FLAG_PRIVILEGED;
/// The local DMA STag (Linux `local_dma_lkey`): index 0, key 0. A local SGE of a
/// [`QP_FLAG_PRIVILEGED`] QP with this lkey carries a bus address used as is (any PD, local
/// read and write). MR table index 0 is reserved for it: REG_MR with index 0 fails INVALID.
/// Anywhere else (an rkey, an unprivileged QP, LOCAL_INV) it is an unknown STag.
pub const LOCAL_DMA_STAG: u32 = 0;

/// QP states.
pub mod qp_state {
    /// Created or reset: doorbells ignored, nothing received.
    pub const RESET: u8 = 0;
    /// Receives may be posted; nothing is received yet; doorbells ignored.
    pub const INIT: u8 = 1;
    /// Ready to receive.
    pub const RTR: u8 = 2;
    /// Ready to send.
    pub const RTS: u8 = 3;
    /// Send queue drained: no new SQ WQEs start.
    pub const SQD: u8 = 4;
    /// Error: every WQE completes in error (flush).
    pub const ERR: u8 = 6;
}

/// [`ModifyQp::attr_mask`] bits: which [`QpAttrs`] fields the command sets.
pub mod qp_attr {
    /// `state`.
    pub const STATE: u32 = 1 << 0;
    /// `access`.
    pub const ACCESS: u32 = 1 << 1;
    /// `qkey`.
    pub const QKEY: u32 = 1 << 2;
    /// Address vector: `dgid`, `sgid_index`, `hop_limit`, `traffic_class`, `flow_label`,
    /// `dmac`, `udp_sport`, `vlan_id`, `av_flags`.
    pub const AV: u32 = 1 << 3;
    /// `path_mtu`.
    pub const PATH_MTU: u32 = 1 << 4;
    /// `timeout`.
    pub const TIMEOUT: u32 = 1 << 5;
    /// `retry_cnt`.
    pub const RETRY_CNT: u32 = 1 << 6;
    /// `rnr_retry`.
    pub const RNR_RETRY: u32 = 1 << 7;
    /// `rq_psn`.
    pub const RQ_PSN: u32 = 1 << 8;
    /// `max_rd_atomic`.
    pub const MAX_RD_ATOMIC: u32 = 1 << 9;
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: u32 = 1 << 10;
    /// `sq_psn`.
    pub const SQ_PSN: u32 = 1 << 11;
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 12;
    /// `dest_qpn`.
    pub const DEST_QPN: u32 = 1 << 13;
    /// Every defined bit.
    pub const ALL: u32 = (1 << 14) - 1;
}

/// [`QpAttrs::access`] bit: remote peers may RDMA WRITE through this QP.
pub const QP_ACCESS_REMOTE_WRITE: u32 = 1 << 0;
/// [`QpAttrs::access`] bit: remote peers may RDMA READ through this QP.
pub const QP_ACCESS_REMOTE_READ: u32 = 1 << 1;
/// [`QpAttrs::access`] bit: remote atomics (not supported; must be 0).
pub const QP_ACCESS_REMOTE_ATOMIC: u32 = 1 << 2;

/// [`QpAttrs::av_flags`] bit: the destination is IPv4 (`dgid` is `::ffff:a.b.c.d`).
pub const AV_FLAG_IPV4: u8 = 1 << 0;
/// [`QpAttrs::av_flags`] bit: `vlan_id` is valid.
pub const AV_FLAG_VLAN: u8 = 1 << 1;

/// Path MTU encodings (IB): 1 = 256 .. 5 = 4096 bytes.
pub const fn mtu_bytes(path_mtu: u8) -> Option<u32> {
    match path_mtu {
        1..=5 => Some(128 << path_mtu),
        _ => None,
    }
}

wire_struct! {
    /// QP attributes, set by MODIFY_QP and returned by QUERY_QP.
    pub struct QpAttrs [64] {
        /// A [`qp_state`] value.
        pub state: u8,
        /// IB MTU enum, see [`mtu_bytes`].
        pub path_mtu: u8,
        /// Local ACK timeout exponent (4.096 us * 2^timeout; 0 = infinite).
        pub timeout: u8,
        /// Transport retries, 0..=7.
        pub retry_cnt: u8,
        /// RNR retries, 0..=7 (7 = infinite).
        pub rnr_retry: u8,
        /// Minimum RNR NAK timer (IB encoding, 0..=31).
        pub min_rnr_timer: u8,
        /// Outstanding RDMA READs as requester, 0..=[`MAX_RD_ATOMIC`].
        pub max_rd_atomic: u8,
        /// Outstanding RDMA READs as responder, 0..=[`MAX_RD_ATOMIC`].
        pub max_dest_rd_atomic: u8,
        /// Source GID table index.
        pub sgid_index: u8,
        /// IPv6 hop limit / IPv4 TTL.
        pub hop_limit: u8,
        /// IPv6 traffic class / IPv4 TOS.
        pub traffic_class: u8,
        /// [`AV_FLAG_IPV4`], [`AV_FLAG_VLAN`].
        pub av_flags: u8,
        /// RoCEv2 UDP source port.
        pub udp_sport: u16,
        /// VLAN id (with [`AV_FLAG_VLAN`]).
        pub vlan_id: u16,
        /// IPv6 flow label (20 bits).
        pub flow_label: u32,
        /// Destination QP number (24 bits).
        pub dest_qpn: u32,
        /// Q_Key (UD, GSI).
        pub qkey: u32,
        /// Next send PSN (24 bits).
        pub sq_psn: u32,
        /// Next expected receive PSN (24 bits).
        pub rq_psn: u32,
        /// [`QP_ACCESS_REMOTE_WRITE`], [`QP_ACCESS_REMOTE_READ`].
        pub access: u32,
        /// Destination MAC.
        pub dmac: [u8; 6],
        /// Reserved, 0.
        pub rsvd: [u8; 2],
        /// Destination GID (IPv6, or IPv4-mapped with [`AV_FLAG_IPV4`]).
        pub dgid: [u8; 16],
    }
}

/// [`ModifyQp::flags`] bit: QP in ERR: flush SQ WQEs posted since the last flush (reflush).
pub const MODIFY_QP_SQ_FLUSH: u32 = 1 << 0;
/// [`ModifyQp::flags`] bit: QP in ERR: flush RQ WQEs posted since the last flush (reflush).
pub const MODIFY_QP_RQ_FLUSH: u32 = 1 << 1;

wire_struct! {
    /// MODIFY_QP.
    pub struct ModifyQp [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// QP id.
        pub qp_id: u32,
        /// [`qp_attr`] bits.
        pub attr_mask: u32,
        /// [`MODIFY_QP_SQ_FLUSH`], [`MODIFY_QP_RQ_FLUSH`].
        pub flags: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// New attributes (fields outside `attr_mask` are ignored).
        pub attrs: QpAttrs,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 8],
    }
}

wire_struct! {
    /// QUERY_QP output.
    pub struct QpQueryOut [96] {
        /// Current attributes.
        pub attrs: QpAttrs,
        /// QP type.
        pub qp_type: u8,
        /// Expected SQ polarity (0/1).
        pub sq_polarity: u8,
        /// Expected RQ polarity (0/1).
        pub rq_polarity: u8,
        /// Last flush code the QP reported (0 if none).
        pub last_error: u8,
        /// Protection domain.
        pub pd: u32,
        /// Send CQ.
        pub send_cq: u32,
        /// Receive CQ.
        pub recv_cq: u32,
        /// SQ tail (quanta).
        pub sq_tail: u32,
        /// RQ tail (WQEs).
        pub rq_tail: u32,
        /// The QP's [`CreateQp::flags`].
        pub flags: u32,
        /// Reserved.
        pub rsvd: [u8; 4],
    }
}

/// MR access: local write (local read is always allowed).
pub const MR_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// MR access: remote write.
pub const MR_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// MR access: remote read.
pub const MR_ACCESS_REMOTE_READ: u32 = 1 << 2;
/// MR access: addresses are offsets from 0, not from `iova`.
pub const MR_ACCESS_ZERO_BASED: u32 = 1 << 3;
/// Every defined MR access bit.
pub const MR_ACCESS_ALL: u32 = (1 << 4) - 1;

wire_struct! {
    /// REG_MR: memory region `[iova, iova + length)` backed by `pages`.
    pub struct RegMr [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// STag = lkey = rkey: table index in bits 31:8, consumer key in 7:0.
        pub stag: u32,
        /// Protection domain.
        pub pd: u32,
        /// MR_ACCESS_* bits.
        pub access: u32,
        /// log2 of the page size: 12, 21 or 30.
        pub page_shift: u8,
        /// Reserved, 0.
        pub rsvd0: [u8; 3],
        /// First byte's address (offset of `iova` within the first page = `iova % page size`).
        pub iova: u64,
        /// Length in bytes, 1..=[`MAX_MR_SIZE`].
        pub length: u64,
        /// The pages; at least `ceil((iova % ps + length) / ps)`.
        pub pages: PageList,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 8],
    }
}

/// Largest page list of one fast registration ([`AllocMr::max_pages`], the FAST_REG WQE's
/// page count): two levels of [`PBL_ENTRIES_PER_PAGE`], irdma's `IRDMA_MAX_PAGES_PER_FMR`.
/// Devices before 1.7 report 512 in [`Caps::max_fast_reg_pages`] (one level only).
pub const MAX_FAST_REG_PAGES: u32 = MAX_PBL_PAGES;

wire_struct! {
    /// ALLOC_MR: reserves MR table entry `stag` for fast registration by a privileged QP's
    /// FAST_REG WQE. The MR starts *invalid*: no translation, every access refused.
    pub struct AllocMr [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// STag: table index in bits 31:8, initial key in 7:0.
        pub stag: u32,
        /// Protection domain; a FAST_REG WQE must come from a QP of this PD.
        pub pd: u32,
        /// Largest page count a FAST_REG may install, 1..=[`MAX_FAST_REG_PAGES`].
        pub max_pages: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 32],
        /// Reserved, 0.
        pub rsvd3: [u8; 8],
    }
}

/// FAST_REG WQE (one quantum; manual, "Fast registration"): qw0 is the iova, qw1 the page
/// list ([`fast_reg_qw1`]), qw2 the fields below, header bits 31:0 the STag to install (index
/// of an ALLOC_MR entry, new key).
///
/// A one-level list is up to [`PBL_ENTRIES_PER_PAGE`] contiguous page addresses at qw1. A
/// two-level list ([`TWO_LEVEL`](fast_reg::TWO_LEVEL)) names a 4 KiB-aligned root page of
/// list-page addresses, each list page holding up to 512 page addresses (as a
/// [`PBL_LEVEL_2`] page list); the root's alignment frees qw1 bits 11:0 for the high bits of
/// the page count, which qw2's 12-bit field cannot hold.
pub mod fast_reg {
    /// qw2: MR length in bytes, bits 40:0 (1..=`MAX_MR_SIZE`).
    pub const LEN_HI: u32 = 40;
    /// qw2: the page list has two levels (since 1.7).
    pub const TWO_LEVEL: u32 = 41;
    /// qw2: log2 of the page size (12, 21 or 30), bits 47:42.
    pub const SHIFT_LO: u32 = 42;
    /// qw2: page shift high bit.
    pub const SHIFT_HI: u32 = 47;
    /// qw2: `MR_ACCESS_*` bits, bits 51:48.
    pub const ACCESS_LO: u32 = 48;
    /// qw2: access high bit.
    pub const ACCESS_HI: u32 = 51;
    /// qw2: page count bits 11:0, in bits 63:52.
    pub const NPAGES_LO: u32 = 52;
    /// qw2: page count high bit.
    pub const NPAGES_HI: u32 = 63;
    /// Page count bits qw2 holds.
    pub const NPAGES_QW2_BITS: u32 = NPAGES_HI - NPAGES_LO + 1;
    /// qw1 of a two-level list: page count bits 23:12, in bits 11:0 below the root address.
    pub const QW1_NPAGES_MASK: u64 = 0xfff;
}

/// The decoded qw1 and qw2 of a FAST_REG WQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastRegFields {
    /// MR length in bytes.
    pub length: u64,
    /// log2 of the page size.
    pub page_shift: u8,
    /// `MR_ACCESS_*` bits.
    pub access: u32,
    /// Pages in the page list.
    pub npages: u32,
    /// The list has two levels: `list` is a root page of list pages.
    pub two_level: bool,
    /// Bus address of the page list (two levels: of the root page, 4 KiB-aligned).
    pub list: u64,
}

/// Encodes qw1 of a FAST_REG WQE (a two-level list's root address loses bits 11:0).
pub const fn fast_reg_qw1(f: FastRegFields) -> u64 {
    if f.two_level {
        (f.list & !fast_reg::QW1_NPAGES_MASK)
            | ((f.npages >> fast_reg::NPAGES_QW2_BITS) as u64 & fast_reg::QW1_NPAGES_MASK)
    } else {
        f.list
    }
}

/// Encodes qw2 of a FAST_REG WQE (fields too wide for theirs are truncated).
pub const fn fast_reg_qw2(f: FastRegFields) -> u64 {
    set_bits(
        set_bits(
            set_bits(
                set_bits(
                    bits(f.length, fast_reg::LEN_HI, 0),
                    fast_reg::SHIFT_HI,
                    fast_reg::SHIFT_LO,
                    f.page_shift as u64,
                ),
                fast_reg::ACCESS_HI,
                fast_reg::ACCESS_LO,
                f.access as u64,
            ),
            fast_reg::NPAGES_HI,
            fast_reg::NPAGES_LO,
            f.npages as u64,
        ),
        fast_reg::TWO_LEVEL,
        fast_reg::TWO_LEVEL,
        f.two_level as u64,
    )
}

/// Decodes qw1 and qw2 of a FAST_REG WQE.
pub const fn fast_reg_fields(qw1: u64, qw2: u64) -> FastRegFields {
    let two_level = bits(qw2, fast_reg::TWO_LEVEL, fast_reg::TWO_LEVEL) != 0;
    let low = bits(qw2, fast_reg::NPAGES_HI, fast_reg::NPAGES_LO) as u32;
    let (npages, list) = if two_level {
        (
            low | ((qw1 & fast_reg::QW1_NPAGES_MASK) as u32) << fast_reg::NPAGES_QW2_BITS,
            qw1 & !fast_reg::QW1_NPAGES_MASK,
        )
    } else {
        (low, qw1)
    };
    FastRegFields {
        length: bits(qw2, fast_reg::LEN_HI, 0),
        page_shift: bits(qw2, fast_reg::SHIFT_HI, fast_reg::SHIFT_LO) as u8,
        access: bits(qw2, fast_reg::ACCESS_HI, fast_reg::ACCESS_LO) as u32,
        npages,
        two_level,
        list,
    }
}

// One level fits qw2's count; two levels fit qw2's and qw1's together.
const _: () = assert!(PBL_ENTRIES_PER_PAGE < 1 << fast_reg::NPAGES_QW2_BITS);
const _: () = assert!((MAX_FAST_REG_PAGES as u64) < 1 << (fast_reg::NPAGES_QW2_BITS + 12));
const _: () = assert!(MAX_FAST_REG_PAGES <= MAX_PBL_PAGES);
const _: () = assert!(MAX_MR_SIZE < 1 << (fast_reg::LEN_HI + 1));
const _: () = assert!(MR_ACCESS_ALL < 1 << (fast_reg::ACCESS_HI - fast_reg::ACCESS_LO + 1));

/// STag table index.
pub const fn stag_index(stag: u32) -> u32 {
    stag >> 8
}

wire_struct! {
    /// ADD_GID / DEL_GID. RoCEv2 GIDs only.
    pub struct GidCmd [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// Table index, 0..[`MAX_GID`].
        pub index: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// The GID (IPv6, or IPv4-mapped `::ffff:a.b.c.d`).
        pub gid: [u8; 16],
        /// Source MAC for packets from this GID.
        pub mac: [u8; 6],
        /// Reserved, 0.
        pub rsvd1: [u8; 2],
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 32],
        /// Reserved, 0.
        pub rsvd3: [u8; 24],
    }
}

wire_struct! {
    /// MCAST_ATTACH / MCAST_DETACH.
    pub struct McastCmd [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// The QP (UD).
        pub qp_id: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// The group's GID: IPv6 multicast (`ff00::/8`) or IPv4-mapped `::ffff:224.0.0.0/100`.
        pub gid: [u8; 16],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 32],
        /// Reserved, 0.
        pub rsvd3: [u8; 32],
    }
}

/// Whether `gid` is a multicast GID: IPv6 `ff00::/8` or IPv4-mapped `224.0.0.0/4`.
pub fn gid_is_multicast(gid: &[u8; 16]) -> bool {
    let v4_mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    gid[0] == 0xff || (v4_mapped && gid[12] & 0xf0 == 0xe0)
}

/// [`SetPort::link`]: link down.
pub const LINK_DOWN: u8 = 0;
/// [`SetPort::link`]: link up.
pub const LINK_UP: u8 = 1;

wire_struct! {
    /// SET_PORT.
    pub struct SetPort [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// Port MAC address.
        pub mac: [u8; 6],
        /// [`LINK_DOWN`] or [`LINK_UP`].
        pub link: u8,
        /// Port MTU (IB enum, see [`mtu_bytes`]).
        pub mtu: u8,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 32],
        /// Reserved, 0.
        pub rsvd3: [u8; 16],
    }
}

/// The congestion control parameters of QUERY_CC and SET_CC (manual "Congestion control"),
/// named as mlx5's `cc_params`. One set per function, shared with the host that runs the
/// device (its command line and control socket): the last writer wins, and an engine reset
/// keeps them.
pub mod cc_param {
    /// Send RoCEv2 as ECT(0) and answer Congestion Experienced with CNPs (0 or 1).
    pub const ECN_ENABLE: u32 = 0;
    /// Run DCQCN's reaction point on received CNPs (0 or 1).
    pub const DCQCN_ENABLE: u32 = 1;
    /// Least time between two CNPs of one QP, microseconds (at most 1000000).
    pub const NP_MIN_TIME_BETWEEN_CNPS: u32 = 2;
    /// DSCP of the CNPs sent (0..=63).
    pub const NP_CNP_DSCP: u32 = 3;
    /// DCQCN rate increase timer, microseconds.
    pub const RP_TIME_RESET: u32 = 4;
    /// DCQCN rate increase byte counter, bytes.
    pub const RP_BYTE_RESET: u32 = 5;
    /// Fast recovery steps before additive increase.
    pub const RP_THRESHOLD: u32 = 6;
    /// Additive increase step, Mb/s.
    pub const RP_AI_RATE: u32 = 7;
    /// Hyper increase step, Mb/s.
    pub const RP_HAI_RATE: u32 = 8;
    /// The lowest rate a cut reaches, Mb/s.
    pub const RP_MIN_RATE: u32 = 9;
    /// Least time between two rate cuts, microseconds.
    pub const RP_RATE_REDUCE_MONITOR_PERIOD: u32 = 10;
    /// The share of alpha an update keeps, 1/1024 units (1..=1023; g = 1 - this / 1024).
    pub const RP_DCE_TCP_G: u32 = 11;
    /// alpha's update period, microseconds.
    pub const RP_DCE_TCP_RTT: u32 = 12;
    /// alpha at the first CNP, 1/1024 units.
    pub const RP_INITIAL_ALPHA_VALUE: u32 = 13;
    /// The port's line rate, Mb/s: the rate limiter's ceiling. Read only (the host's link).
    pub const LINE_RATE_MBPS: u32 = 14;
    /// Parameters there are; ids from here on are refused ([`super::admin_status::INVALID`]).
    pub const COUNT: u32 = 15;
}

wire_struct! {
    /// SET_CC: one congestion control parameter. The device checks the new set as a whole
    /// (the ranges of the manual) and refuses it with [`admin_status::INVALID`] (`detail`
    /// the offset of `value`), leaving the set as it was; an unknown or read-only `param` is
    /// refused likewise (`detail` its offset).
    pub struct SetCc [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// A [`cc_param`] id.
        pub param: u32,
        /// Its new value.
        pub value: u32,
        /// Reserved, 0.
        pub rsvd: [u8; 24],
        /// Reserved, 0.
        pub rsvd1: [u8; 32],
        /// Reserved, 0.
        pub rsvd2: [u8; 32],
        /// Reserved, 0.
        pub rsvd3: [u8; 24],
    }
}

wire_struct! {
    /// CREATE_AH: a UD address handle.
    pub struct CreateAh [128] {
        /// Header.
        pub hdr: AdminHeader,
        /// AH id, 0..[`MAX_AH`].
        pub ah_id: u32,
        /// Protection domain (must match the QP's on use).
        pub pd: u32,
        /// Address vector (only the AV fields and nothing else are used).
        pub attrs: QpAttrs,
        /// Reserved, 0.
        pub rsvd: [u8; 32],
        /// Reserved, 0.
        pub rsvd1: [u8; 16],
    }
}

wire_struct! {
    /// QUERY_CAPS output.
    pub struct Caps [128] {
        /// [`HW_REV_GEN_2`].
        pub hw_rev: u8,
        /// [`MAX_SGE`].
        pub max_sge: u8,
        /// Largest RDMA READ SGE count ([`MAX_SGE`]).
        pub max_read_sge: u8,
        /// [`SQ_CHUNK_QUANTA`].
        pub sq_chunk_quanta: u8,
        /// [`MAX_INLINE`].
        pub max_inline: u16,
        /// [`MIN_WQ_QUANTA`].
        pub min_wq_quanta: u16,
        /// [`MAX_QP`].
        pub max_qp: u32,
        /// [`MAX_CQ`].
        pub max_cq: u32,
        /// [`MAX_MR`].
        pub max_mr: u32,
        /// [`MAX_AH`].
        pub max_ah: u32,
        /// [`MAX_PD`].
        pub max_pd: u32,
        /// [`MAX_SQ_QUANTA`].
        pub max_sq_quanta: u32,
        /// [`MAX_RQ_QUANTA`].
        pub max_rq_quanta: u32,
        /// [`MAX_CQ_ENTRIES`].
        pub max_cq_entries: u32,
        /// [`MAX_EQ_ENTRIES`].
        pub max_eq_entries: u32,
        /// [`MAX_EQ`].
        pub max_eq: u32,
        /// [`MAX_GID`].
        pub max_gid: u32,
        /// [`DB_PAGES`].
        pub db_pages: u32,
        /// [`MAX_MSG_SIZE`].
        pub max_msg_size: u32,
        /// Reserved.
        pub rsvd_align: u32,
        /// [`MAX_MR_SIZE`].
        pub max_mr_size: u64,
        /// [`PAGE_SIZE_CAP`].
        pub page_size_cap: u64,
        /// [`MAX_RD_ATOMIC`].
        pub max_rd_atomic: u8,
        /// Largest page-list level (2).
        pub max_pbl_level: u8,
        /// Physical ports (1).
        pub ports: u8,
        /// Reserved.
        pub rsvd0: u8,
        /// MSI-X vectors.
        pub msix_vectors: u32,
        /// Firmware version: major in 47:32, minor in 15:0.
        pub fw_ver: u64,
        /// [`MAX_FAST_REG_PAGES`] (0 from a device without fast registration).
        pub max_fast_reg_pages: u32,
        /// Largest `CreateEq::moderation_us` (since 1.2; 0: no time-based moderation).
        pub max_eq_moderation_us: u16,
        /// [`MAX_MCAST_GRP`] (since 1.6; 0: no multicast).
        pub max_mcast_grp: u16,
        /// [`MAX_MCAST_QP_ATTACH`] (since 1.6).
        pub max_mcast_qp_attach: u16,
        /// Reserved.
        pub rsvd: [u8; 22],
    }
}

wire_struct! {
    /// QUERY_STATS output: counters since reset (or since the last clearing read).
    pub struct Stats [128] {
        /// RoCE packets sent (one per message in the loopback model).
        pub tx_packets: u64,
        /// Payload bytes sent.
        pub tx_bytes: u64,
        /// Messages delivered to a receive queue or memory.
        pub rx_packets: u64,
        /// Payload bytes received.
        pub rx_bytes: u64,
        /// Inbound messages dropped (UD without receive WQE, bad Q_Key, no such QP, ...).
        pub rx_drops: u64,
        /// RNR NAKs generated.
        pub rnr_naks: u64,
        /// CQEs written.
        pub cqes: u64,
        /// Completion event queue entries written.
        pub ceqes: u64,
        /// Asynchronous event queue entries written.
        pub aeqes: u64,
        /// Admin commands completed.
        pub admin_cmds: u64,
        /// Admin commands completed with an error status.
        pub admin_errors: u64,
        /// SQ and CQ doorbells accepted.
        pub doorbells: u64,
        /// Doorbells ignored (unknown id, wrong page, bad value).
        pub spurious_doorbells: u64,
        /// WQEs completed in error (not counting flushes).
        pub wqe_errors: u64,
        /// Guest memory accesses that faulted.
        pub dma_faults: u64,
        /// Interrupts raised.
        pub interrupts: u64,
    }
}

/// [`QueryObject::id`] bit for QUERY_STATS: clear the counters after reading them.
pub const STATS_CLEAR: u32 = 1 << 0;

wire_struct! {
    /// QUERY_COUNTERS output (since 1.5): the port's RoCEv2 counters, monotonic since the
    /// engine was reset (software computes deltas; nothing clears them). Packets are the
    /// frames the engine sends to and takes from the fabric; traffic between QPs of one
    /// function is delivered inside the engine and counted in none of them.
    pub struct PortCounters [256] {
        /// RoCEv2 packets received over IPv4 (ICRC and every header valid).
        pub ip4_rx_pkts: u64,
        /// Their IP octets (IP header through ICRC).
        pub ip4_rx_octets: u64,
        /// RoCEv2 packets sent over IPv4.
        pub ip4_tx_pkts: u64,
        /// Their IP octets.
        pub ip4_tx_octets: u64,
        /// RoCEv2 packets received over IPv6.
        pub ip6_rx_pkts: u64,
        /// Their IP octets.
        pub ip6_rx_octets: u64,
        /// RoCEv2 packets sent over IPv6.
        pub ip6_tx_pkts: u64,
        /// Their IP octets.
        pub ip6_tx_octets: u64,
        /// Valid IPv4 RoCEv2 packets dropped: no such QP, wrong Q_Key or state, no receive
        /// WQE for a UD SEND, an unsupported opcode.
        pub ip4_rx_discards: u64,
        /// Valid IPv6 RoCEv2 packets dropped, likewise.
        pub ip6_rx_discards: u64,
        /// UDP datagrams to port 4791 received (every frame the fabric steered here).
        pub rx_udp: u64,
        /// UDP datagrams sent (= RoCEv2 packets sent).
        pub tx_udp: u64,
        /// SEND requests received (first or only packet of a message).
        pub rx_sends: u64,
        /// RDMA WRITE requests received (first or only packet).
        pub rx_writes: u64,
        /// RDMA READ requests received.
        pub rx_reads: u64,
        /// SEND requests sent (first or only packet, retransmissions included).
        pub tx_sends: u64,
        /// RDMA WRITE requests sent (first or only packet, retransmissions included).
        pub tx_writes: u64,
        /// RDMA READ requests sent (retransmissions included).
        pub tx_reads: u64,
        /// RNR NAKs sent (a SEND found no receive WQE).
        pub rnr_naks_sent: u64,
        /// RNR NAKs received.
        pub rnr_naks_rcvd: u64,
        /// PSN sequence error NAKs received (the responder saw a gap).
        pub seq_naks_rcvd: u64,
        /// Requests received with a PSN beyond the expected one (out of sequence; answered
        /// with a PSN sequence error NAK).
        pub out_of_sequence: u64,
        /// Requests received with a PSN already seen (duplicates: answered again, not
        /// executed again).
        pub duplicate_requests: u64,
        /// Request packets sent again (go-back-N after a timeout or NAK).
        pub retransmits: u64,
        /// Local ACK timeouts (the retransmission timer expired).
        pub local_ack_timeouts: u64,
        /// Frames dropped for a bad ICRC.
        pub icrc_errors: u64,
        /// Frames dropped for a malformed or inconsistent header (Ethernet, IP, UDP, BTH or
        /// extension headers, length).
        pub header_errors: u64,
        /// RoCEv2 packets received with ECN Congestion Experienced.
        pub ecn_marked: u64,
        /// Congestion notification packets sent.
        pub cnps_sent: u64,
        /// Congestion notification packets received and acted on.
        pub cnps_handled: u64,
        /// Congestion notification packets received and ignored.
        pub cnps_ignored: u64,
        /// PFC (802.1Qbb) or PAUSE (802.3x) frames the port obeyed (since 1.8; reserved, 0,
        /// before).
        pub pfc_frames_rx: u64,
    }
}

// --------------------------------------------------------------------------------------------
// Event queue entries (manual: "Event queues").
// --------------------------------------------------------------------------------------------

/// Bytes per event queue entry.
pub const EQE_SIZE: usize = 16;
/// [`Eqe::flags`] bit: valid; equals the ring pass polarity (1 on the first pass).
pub const EQE_FLAG_VALID: u8 = 1 << 7;

/// [`Eqe::kind`] values: what `id` names.
pub mod eqe_kind {
    /// A CQ (CEQ entries, and CQ errors on the AEQ).
    pub const CQ: u8 = 1;
    /// A QP.
    pub const QP: u8 = 2;
    /// The port.
    pub const PORT: u8 = 3;
    /// The device or an EQ.
    pub const DEVICE: u8 = 4;
}

/// Asynchronous event codes ([`Eqe::code`] on the AEQ).
pub mod ae {
    /// CEQ entry: the CQ has a new completion (the only code on CEQs).
    pub const CQ_COMPLETION: u16 = 0x00;
    /// QP: local catastrophic error (malformed WQE, ring not accessible). -> QP_FATAL.
    pub const QP_FATAL: u16 = 0x01;
    /// QP: local protection error on one of its own WQEs (lkey, bounds, PD, rights).
    /// -> QP_ACCESS_ERR.
    pub const QP_LOCAL_ACCESS: u16 = 0x02;
    /// QP (responder): an inbound RDMA request violated an rkey, bounds, PD or rights.
    /// -> QP_ACCESS_ERR.
    pub const QP_REMOTE_ACCESS: u16 = 0x03;
    /// QP (responder): invalid inbound request (too long for the receive WQE, bad
    /// invalidate). -> QP_REQ_ERR.
    pub const QP_INVALID_REQUEST: u16 = 0x04;
    /// QP (requester): transport retries exhausted. -> QP_FATAL.
    pub const QP_RETRY_EXCEEDED: u16 = 0x05;
    /// QP (requester): RNR retries exhausted. -> QP_FATAL.
    pub const QP_RNR_RETRY_EXCEEDED: u16 = 0x06;
    /// QP (requester): the responder reported an error (NAK). -> QP_FATAL.
    pub const QP_REMOTE_ERROR: u16 = 0x07;
    /// QP: first message received while in RTR. -> COMM_EST.
    pub const QP_COMM_EST: u16 = 0x08;
    /// QP: SQ drained after a move to SQD. -> SQ_DRAINED.
    pub const QP_SQ_DRAINED: u16 = 0x09;
    /// CQ: overflow; the CQE was dropped and the CQ stopped. -> CQ_ERR.
    pub const CQ_OVERFLOW: u16 = 0x10;
    /// CQ: ring or shadow area not accessible; the CQ stopped. -> CQ_ERR.
    pub const CQ_ACCESS: u16 = 0x11;
    /// A CEQ overflowed; events were lost (`id` = EQ id, kind DEVICE).
    pub const EQ_OVERFLOW: u16 = 0x18;
    /// The engine entered its fatal state ([`super::DEV_STATUS_FATAL`]; kind DEVICE, `id`
    /// 0, `info` a [`super::fatal_cause`] value). The last entry before a reset; the driver
    /// must reset the function to use it again (interface 1.4). -> DEVICE_FATAL.
    pub const DEVICE_FATAL: u16 = 0x19;
    /// Port became active. -> PORT_ACTIVE.
    pub const PORT_ACTIVE: u16 = 0x20;
    /// Port went down. -> PORT_ERR.
    pub const PORT_DOWN: u16 = 0x21;
}

/// Why the engine entered its fatal state ([`Eqe::info`] of [`ae::DEVICE_FATAL`]).
pub mod fatal_cause {
    /// An internal error of the engine.
    pub const INTERNAL: u32 = 0;
    /// The host injected it (the NIC's test-only `sabotage nic:N fatal`).
    pub const INJECTED: u32 = 1;
}

wire_struct! {
    /// One event queue entry. The device writes bytes 0..15 with the valid bit last.
    pub struct Eqe [16] {
        /// CQ id (CEQ), or the object named by `kind` (AEQ).
        pub id: u32,
        /// The `event_tag` of the CQ or QP named by `id` (CREATE_CQ, CREATE_QP), else 0. An
        /// entry the device wrote before DESTROY_* may be consumed after the id has been given
        /// to a new object: the tag tells the two apart (manual, "Event tags").
        pub tag: u32,
        /// AEQ: the CQE flush code (`flush::*`) for QP errors, else 0.
        pub info: u32,
        /// [`ae`] code.
        pub code: u16,
        /// [`eqe_kind`] value.
        pub kind: u8,
        /// [`EQE_FLAG_VALID`].
        pub flags: u8,
    }
}

// --------------------------------------------------------------------------------------------
// irdma GEN_2 data path (manual: "User data path"; facts from irdma-abi.md §3-4).
// All bit positions are in the little-endian qword named.
// --------------------------------------------------------------------------------------------

/// Bytes per SQ/RQ quantum and per CQE.
pub const QUANTUM: usize = 32;
/// Bytes per CQE.
pub const CQE_SIZE: usize = 32;

/// SQ/RQ WQE header (qw3 of quantum 0) fields.
pub mod wqe {
    /// Valid (= ring pass polarity), bit 63.
    pub const VALID: u32 = 63;
    /// Signaled completion, bit 62.
    pub const SIGCOMPL: u32 = 62;
    /// Local fence, bit 61.
    pub const LOCALFENCE: u32 = 61;
    /// Read fence, bit 60.
    pub const READFENCE: u32 = 60;
    /// Inline data, bit 57.
    pub const INLINE: u32 = 57;
    /// Push WQE (must be 0), bit 56.
    pub const PUSHWQE: u32 = 56;
    /// Inline length, bits 55:48.
    pub const INLINELEN_HI: u32 = 55;
    /// Inline length low bit.
    pub const INLINELEN_LO: u32 = 48;
    /// Immediate data present, bit 47.
    pub const IMMDATA: u32 = 47;
    /// Additional fragment slots, bits 41:38.
    pub const ADDFRAGCNT_HI: u32 = 41;
    /// ADDFRAGCNT low bit.
    pub const ADDFRAGCNT_LO: u32 = 38;
    /// Opcode, bits 37:32.
    pub const OPCODE_HI: u32 = 37;
    /// Opcode low bit.
    pub const OPCODE_LO: u32 = 32;
    /// Fragment second qword: valid bit 63, length 62:32, STag 31:0.
    pub const FRAG_LEN_HI: u32 = 62;
    /// Fragment length low bit.
    pub const FRAG_LEN_LO: u32 = 32;
    /// UD SEND: AH id in header bits 16:0.
    pub const AH_ID_MASK: u64 = 0x1_ffff;
}

/// SQ WQE opcodes (GEN_2).
pub mod sq_op {
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x00;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x01;
    /// SEND.
    pub const SEND: u8 = 0x03;
    /// SEND with invalidate.
    pub const SEND_INV: u8 = 0x04;
    /// Solicited SEND.
    pub const SEND_SOL: u8 = 0x05;
    /// Solicited SEND with invalidate.
    pub const SEND_SOL_INV: u8 = 0x06;
    /// Bind memory window (not supported: completes with LOC_QP_OP_ERR).
    pub const BIND_MW: u8 = 0x08;
    /// Fast register an ALLOC_MR entry (irdma's FAST_REG_NSMR opcode; privileged QPs only).
    pub const FAST_REG: u8 = 0x09;
    /// Local invalidate.
    pub const LOCAL_INV: u8 = 0x0a;
    /// RDMA READ with local invalidate (not supported).
    pub const READ_LOC_INV: u8 = 0x0b;
    /// NOP (padding).
    pub const NOP: u8 = 0x0c;
    /// Solicited RDMA WRITE (solicited event with immediate).
    pub const RDMA_WRITE_SOL: u8 = 0x0d;
}

/// CQE qw3 (and extension) fields.
pub mod cqe {
    /// Minor error, bits 15:0 of qw3.
    pub const MINERR_HI: u32 = 15;
    /// Major error, bits 31:16 of qw3.
    pub const MAJERR_LO: u32 = 16;
    /// WQE index, bits 46:32 of qw3.
    pub const WQEIDX_LO: u32 = 32;
    /// WQE index high bit.
    pub const WQEIDX_HI: u32 = 46;
    /// Extended CQE (next slot is the extension), bit 50.
    pub const EXTCQE: u32 = 50;
    /// Remote invalidate happened (RC RQ) / IPv4 (UD), bit 53.
    pub const STAG_INV: u32 = 53;
    /// Solicited event, bit 54.
    pub const SOEVENT: u32 = 54;
    /// Error, bit 55.
    pub const ERROR: u32 = 55;
    /// Opcode, bits 61:56.
    pub const OP_LO: u32 = 56;
    /// Opcode high bit.
    pub const OP_HI: u32 = 61;
    /// SQ completion, bit 62.
    pub const SQ: u32 = 62;
    /// Valid (= ring pass polarity), bit 63.
    pub const VALID: u32 = 63;
    /// qw2: local QP id in bits 55:32.
    pub const QPID_LO: u32 = 32;
    /// Extension qw7: immediate valid, bit 62.
    pub const IMMVALID: u32 = 62;
    /// Extension qw7: UD source MAC valid, bit 61 (the MAC in qw6 47:0, `smac[0]` in 47:40).
    pub const UDSMACVALID: u32 = 61;
    /// Extension qw7: UD VLAN valid, bit 60 (the packet's 802.1Q TCI in qw6 63:48).
    pub const UDVLANVALID: u32 = 60;
    /// Major error of every error CQE this device writes (a "flush" major).
    pub const MAJERR_FLUSH: u16 = 1;
    /// RQ CQE opcode for a received SEND.
    pub const OP_RECV: u8 = 0x3e;
    /// RQ CQE opcode for a received RDMA WRITE with immediate.
    pub const OP_RECV_RDMA_IMM: u8 = 0x0b;
}

/// CQE minor error codes (MAJERR = [`cqe::MAJERR_FLUSH`]) and what libirdma reports.
pub mod flush {
    /// WR_FLUSH_ERR: flushed because the QP is in ERR.
    pub const GENERAL: u16 = 1;
    /// LOC_PROT_ERR: local lkey/bounds/PD/rights violation.
    pub const PROT: u16 = 2;
    /// REM_ACCESS_ERR: the responder refused the rkey/bounds/rights.
    pub const REM_ACCESS: u16 = 3;
    /// LOC_QP_OP_ERR: malformed or unsupported WQE.
    pub const LOC_QP_OP: u16 = 4;
    /// REM_OP_ERR: the responder failed to execute the request.
    pub const REM_OP: u16 = 5;
    /// LOC_LEN_ERR: message longer than the receive buffer or the limit.
    pub const LOC_LEN: u16 = 6;
    /// FATAL_ERR: local DMA fault on a ring.
    pub const FATAL: u16 = 7;
    /// RETRY_EXC_ERR: no responder (destination absent or not ready).
    pub const RETRY_EXC: u16 = 8;
    /// MW_BIND_ERR.
    pub const MW_BIND: u16 = 9;
    /// REM_INV_REQ_ERR: the responder found the request invalid.
    pub const REM_INV_REQ: u16 = 10;
    /// RNR_RETRY_EXC_ERR: no receive WQE at the responder after `rnr_retry` retries.
    pub const RNR_RETRY_EXC: u16 = 11;
}

/// CQ shadow area (64 bytes, written by software only) fields.
pub mod cq_shadow {
    /// Byte offset of qw0: the consumer index in bits 19:0.
    pub const HEAD_OFFSET: usize = 0;
    /// Consumer index mask.
    pub const HEAD_MASK: u64 = 0xf_ffff;
    /// Byte offset of qw4: the arm word.
    pub const ARM_OFFSET: usize = 32;
    /// Arm word: event on the next completion of any kind, bit 14.
    pub const ARM_NEXT: u32 = 14;
    /// Arm word: event on the next solicited (or error) completion, bit 15.
    pub const ARM_NEXT_SE: u32 = 15;
    /// Arm word: arm sequence number, bits 17:16.
    pub const ARM_SEQ_LO: u32 = 16;
    /// Arm word bits 13:0 (`SW_CQ_SELECT`): how many rings the consumer has retired after
    /// resizes, modulo 2^14 (since 1.5). Until it equals the number of resizes the device
    /// has made, the consumer index refers to an older ring, and the device takes the
    /// consumer to be at index 0 of the current one.
    pub const SELECT_MASK: u64 = 0x3fff;
}

/// Bytes of the GRH area at the start of every UD receive buffer.
pub const UD_GRH_SIZE: u32 = 40;

// --------------------------------------------------------------------------------------------
// Data-path encode/decode helpers (for kernel-owned QPs and CQs, and the device model).
// --------------------------------------------------------------------------------------------

/// The fields of an SQ WQE header (qw3 of quantum 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqHeader {
    /// [`sq_op`] value.
    pub opcode: u8,
    /// The ring pass polarity.
    pub valid: bool,
    /// Write a CQE on completion.
    pub signaled: bool,
    /// Read fence.
    pub read_fence: bool,
    /// Immediate data present (in slot 0 qw0, or qw0 of an inline WQE).
    pub imm: bool,
    /// Inline data length, if inline.
    pub inline_len: Option<u8>,
    /// Fragment slots after slot 0 (even on GEN_2: see [`addfragcnt`]).
    pub addfragcnt: u8,
    /// Bits 31:0: rkey, invalidate STag, or AH id.
    pub low: u32,
}

/// Encodes an SQ WQE header.
pub const fn sq_wqe_header(h: SqHeader) -> u64 {
    let mut v = ((h.opcode as u64) & 0x3f) << wqe::OPCODE_LO
        | ((h.addfragcnt as u64) & 0xf) << wqe::ADDFRAGCNT_LO
        | h.low as u64;
    if h.valid {
        v |= 1 << wqe::VALID;
    }
    if h.signaled {
        v |= 1 << wqe::SIGCOMPL;
    }
    if h.read_fence {
        v |= 1 << wqe::READFENCE;
    }
    if h.imm {
        v |= 1 << wqe::IMMDATA;
    }
    if let Some(len) = h.inline_len {
        v |= 1 << wqe::INLINE | (len as u64) << wqe::INLINELEN_LO;
    }
    v
}

/// ADDFRAGCNT for `frags` used fragment slots (SGEs plus one for immediate data): GEN_2
/// adds a zero padding slot when the count is even.
pub const fn addfragcnt(frags: u32) -> u32 {
    if frags == 0 {
        0
    } else if frags & 1 == 0 {
        frags
    } else {
        frags - 1
    }
}

/// Second qword of a fragment slot.
pub const fn wqe_fragment_qw1(len: u32, stag: u32, valid: bool) -> u64 {
    (valid as u64) << wqe::VALID | ((len as u64) & 0x7fff_ffff) << wqe::FRAG_LEN_LO | stag as u64
}

/// Quanta an SQ WQE with this header occupies. Well-formed headers give 1..=8; a bad
/// ADDFRAGCNT can give 9, which the device rejects.
pub const fn sq_wqe_quanta(hdr: u64) -> u32 {
    let op = bits(hdr, wqe::OPCODE_HI, wqe::OPCODE_LO) as u8;
    if (hdr >> wqe::INLINE) & 1 == 1 {
        let len = bits(hdr, wqe::INLINELEN_HI, wqe::INLINELEN_LO) as u32;
        return if len <= 8 {
            1
        } else {
            let q = 1 + (len - 8).div_ceil(31);
            if q > 8 {
                8
            } else {
                q
            }
        };
    }
    match op {
        sq_op::NOP | sq_op::LOCAL_INV | sq_op::BIND_MW | sq_op::FAST_REG => 1,
        _ => 1 + (bits(hdr, wqe::ADDFRAGCNT_HI, wqe::ADDFRAGCNT_LO) as u32).div_ceil(2),
    }
}

/// The decoded qw3 of a CQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqeInfo {
    /// Valid bit (compare with the expected polarity).
    pub valid: bool,
    /// SQ completion (else RQ).
    pub sq: bool,
    /// Error (MAJERR/MINERR meaningful).
    pub error: bool,
    /// The next slot is the extension.
    pub ext: bool,
    /// Solicited event.
    pub solicited: bool,
    /// RC RQ: remote invalidate happened (STag in qw2 31:0). UD: IPv4.
    pub stag_inv: bool,
    /// SQ: the WQE opcode; RQ: [`cqe::OP_RECV`] or [`cqe::OP_RECV_RDMA_IMM`].
    pub op: u8,
    /// Major error ([`cqe::MAJERR_FLUSH`] for every error this device writes).
    pub major: u16,
    /// Minor error ([`flush`] code).
    pub minor: u16,
    /// SQ: first quantum of the WQE; RQ: `wqe << rq_shift`.
    pub wqe_idx: u16,
}

/// Decodes CQE qw3.
pub const fn cqe_info(qw3: u64) -> CqeInfo {
    CqeInfo {
        valid: (qw3 >> cqe::VALID) & 1 == 1,
        sq: (qw3 >> cqe::SQ) & 1 == 1,
        error: (qw3 >> cqe::ERROR) & 1 == 1,
        ext: (qw3 >> cqe::EXTCQE) & 1 == 1,
        solicited: (qw3 >> cqe::SOEVENT) & 1 == 1,
        stag_inv: (qw3 >> cqe::STAG_INV) & 1 == 1,
        op: bits(qw3, cqe::OP_HI, cqe::OP_LO) as u8,
        major: (qw3 >> cqe::MAJERR_LO) as u16,
        minor: qw3 as u16,
        wqe_idx: bits(qw3, cqe::WQEIDX_HI, cqe::WQEIDX_LO) as u16,
    }
}

/// The CQ shadow arm word (qw4) after an arm request, given its previous value: sequence
/// number + 1, ARM_NEXT_SE always, ARM_NEXT unless solicited-only, SW_CQ_SELECT kept. Store
/// it, then write the CQ id to the CQ-arm doorbell.
pub const fn cq_arm_word(prev: u64, solicited_only: bool) -> u64 {
    let seq = (bits(prev, cq_shadow::ARM_SEQ_LO + 1, cq_shadow::ARM_SEQ_LO) + 1) & 3;
    let mut v = (prev & cq_shadow::SELECT_MASK)
        | seq << cq_shadow::ARM_SEQ_LO
        | 1 << cq_shadow::ARM_NEXT_SE;
    if !solicited_only {
        v |= 1 << cq_shadow::ARM_NEXT;
    }
    v
}
