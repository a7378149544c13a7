//! BAR0: the control register file, exactly as `interface.rs` documents it.
//!
//! Access rules (the guest is hostile, so every combination is defined):
//! * Any access must lie inside the BAR (`offset + len <= BAR0_SIZE`, overflow-checked);
//!   otherwise it is refused with an error to the client and has no effect.
//! * Reads may have any size and alignment: the BAR reads as the little-endian byte image
//!   of its 32-bit registers. Reads have no side effects. Unused offsets and write-only
//!   registers read 0.
//! * Writes take effect only as aligned 32-bit accesses, or as 64-bit accesses at a 4-byte
//!   aligned offset, which act as two 32-bit writes, low word first. Other writes are
//!   ignored. Writes to read-only registers and unused offsets are ignored.
//!
//! Test commands set `TEST_STATUS`. For a DMA copy the checks run in this order, and the
//! first failing one decides the status: `TEST_DMA_CTRL` value (`BadCommand`), length
//! (`BadLength`), address ranges wrapping past 2^64 (`DmaFault`), source/destination overlap
//! (`Overlap`), source readable and destination writable in mapped guest memory
//! (`DmaFault`). A failed copy writes nothing.

use thiserror::Error;

use crate::dma::GuestMemory;
use crate::interface::{
    mac_to_regs, TestStatus, BAR0_SIZE, DEVICE_ID_MAGIC, MSIX_VECTORS, REG_ID, REG_MAC_HI,
    REG_MAC_LO, REG_MSIX_COUNT, REG_SCRATCH, REG_TEST_DMA_CTRL, REG_TEST_DMA_DST, REG_TEST_DMA_LEN,
    REG_TEST_DMA_SRC, REG_TEST_IRQ, REG_TEST_STATUS, REG_VERSION, TEST_DMA_CTRL_START,
    TEST_DMA_MAX_LEN, VERSION_MAJOR, VERSION_MINOR,
};
use crate::pci::msix::InterruptSink;

/// An access outside BAR0.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("BAR0 access {offset:#x}+{len:#x} outside {BAR0_SIZE:#x} bytes")]
pub struct Bar0AccessError {
    pub offset: u64,
    pub len: usize,
}

/// The register state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bar0 {
    mac: [u8; 6],
    scratch: u32,
    test_status: TestStatus,
    dma_len: u32,
    dma_src: u64,
    dma_dst: u64,
}

impl Default for Bar0 {
    fn default() -> Self {
        Self::new()
    }
}

fn set_low(v: u64, lo: u32) -> u64 {
    (v & 0xffff_ffff_0000_0000) | u64::from(lo)
}

fn set_high(v: u64, hi: u32) -> u64 {
    (v & 0xffff_ffff) | (u64::from(hi) << 32)
}

impl Bar0 {
    /// The reset state: everything 0, `TEST_STATUS` = `Ok`.
    pub fn new() -> Self {
        Self {
            mac: [0; 6],
            scratch: 0,
            test_status: TestStatus::Ok,
            dma_len: 0,
            dma_src: 0,
            dma_dst: 0,
        }
    }

    /// The port MAC reported in `MAC_LO`/`MAC_HI`. It is configuration, like an EEPROM
    /// value: a device reset keeps it.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Sets the port MAC.
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.mac = mac;
    }

    /// The status of the last test command.
    pub fn test_status(&self) -> TestStatus {
        self.test_status
    }

    fn check(offset: u64, len: usize) -> Result<usize, Bar0AccessError> {
        let err = || Bar0AccessError { offset, len };
        let start = usize::try_from(offset).map_err(|_| err())?;
        start
            .checked_add(len)
            .filter(|&end| end <= BAR0_SIZE)
            .ok_or_else(err)?;
        Ok(start)
    }

    /// The value of the 32-bit register at the 4-aligned offset `reg`.
    fn read_reg(&self, reg: usize) -> u32 {
        match reg {
            REG_ID => DEVICE_ID_MAGIC,
            REG_VERSION => (u32::from(VERSION_MAJOR) << 16) | u32::from(VERSION_MINOR),
            REG_SCRATCH => self.scratch,
            REG_MSIX_COUNT => MSIX_VECTORS,
            REG_MAC_LO => mac_to_regs(self.mac).0,
            REG_MAC_HI => mac_to_regs(self.mac).1,
            REG_TEST_STATUS => self.test_status as u32,
            REG_TEST_DMA_LEN => self.dma_len,
            r if r == REG_TEST_DMA_SRC => self.dma_src as u32,
            r if r == REG_TEST_DMA_SRC + 4 => (self.dma_src >> 32) as u32,
            r if r == REG_TEST_DMA_DST => self.dma_dst as u32,
            r if r == REG_TEST_DMA_DST + 4 => (self.dma_dst >> 32) as u32,
            // REG_TEST_IRQ and REG_TEST_DMA_CTRL are write-only; the rest is unused.
            _ => 0,
        }
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Bar0AccessError> {
        self.read_with(offset, buf, &|_| None)
    }

    /// Reads `buf.len()` bytes at `offset`; `ext` supplies the registers of the RDMA engine
    /// (interface 2.0), which take precedence.
    pub fn read_with(
        &self,
        offset: u64,
        buf: &mut [u8],
        ext: &dyn Fn(usize) -> Option<u32>,
    ) -> Result<(), Bar0AccessError> {
        let start = Self::check(offset, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            let at = start + i;
            let reg = ext(at & !3).unwrap_or_else(|| self.read_reg(at & !3));
            *b = reg.to_le_bytes()[at & 3];
        }
        Ok(())
    }

    /// Writes `data` at `offset`, running any command it triggers.
    pub fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        mem: &dyn GuestMemory,
        irq: &dyn InterruptSink,
    ) -> Result<(), Bar0AccessError> {
        self.write_with(offset, data, mem, irq, &mut |_, _| false)
    }

    /// Like [`Bar0::write`]; `ext` gets every 32-bit register write first and returns `true`
    /// if it was an RDMA engine register (interface 2.0).
    pub fn write_with(
        &mut self,
        offset: u64,
        data: &[u8],
        mem: &dyn GuestMemory,
        irq: &dyn InterruptSink,
        ext: &mut dyn FnMut(usize, u32) -> bool,
    ) -> Result<(), Bar0AccessError> {
        let start = Self::check(offset, data.len())?;
        if start % 4 != 0 {
            log::debug!("BAR0: ignoring unaligned write at {start:#x}");
            return Ok(());
        }
        let mut one = |this: &mut Self, reg: usize, v: u32| {
            if !ext(reg, v) {
                this.write_reg(reg, v, mem, irq);
            }
        };
        match *data {
            [a, b, c, d] => one(self, start, u32::from_le_bytes([a, b, c, d])),
            [a, b, c, d, e, f, g, h] => {
                one(self, start, u32::from_le_bytes([a, b, c, d]));
                one(self, start + 4, u32::from_le_bytes([e, f, g, h]));
            }
            _ => log::debug!("BAR0: ignoring {}-byte write at {start:#x}", data.len()),
        }
        Ok(())
    }

    fn write_reg(
        &mut self,
        reg: usize,
        value: u32,
        mem: &dyn GuestMemory,
        irq: &dyn InterruptSink,
    ) {
        match reg {
            REG_SCRATCH => self.scratch = value,
            REG_TEST_IRQ => self.test_status = Self::test_irq(value, irq),
            REG_TEST_DMA_LEN => self.dma_len = value,
            r if r == REG_TEST_DMA_SRC => self.dma_src = set_low(self.dma_src, value),
            r if r == REG_TEST_DMA_SRC + 4 => self.dma_src = set_high(self.dma_src, value),
            r if r == REG_TEST_DMA_DST => self.dma_dst = set_low(self.dma_dst, value),
            r if r == REG_TEST_DMA_DST + 4 => self.dma_dst = set_high(self.dma_dst, value),
            REG_TEST_DMA_CTRL => self.test_status = self.test_dma(value, mem),
            // Read-only registers and unused offsets.
            _ => log::trace!("BAR0: ignoring write of {value:#x} to {reg:#x}"),
        }
    }

    fn test_irq(vector: u32, irq: &dyn InterruptSink) -> TestStatus {
        if vector >= MSIX_VECTORS {
            return TestStatus::BadVector;
        }
        match irq.raise(vector) {
            Ok(()) => TestStatus::Ok,
            Err(e) => {
                log::debug!("TEST_IRQ {vector}: {e}");
                TestStatus::BadVector
            }
        }
    }

    fn test_dma(&self, command: u32, mem: &dyn GuestMemory) -> TestStatus {
        if command != TEST_DMA_CTRL_START {
            return TestStatus::BadCommand;
        }
        let len = self.dma_len;
        if len == 0 || len > TEST_DMA_MAX_LEN {
            return TestStatus::BadLength;
        }
        let len64 = u64::from(len);
        let (src, dst) = (self.dma_src, self.dma_dst);
        let (Some(src_end), Some(dst_end)) = (src.checked_add(len64), dst.checked_add(len64))
        else {
            return TestStatus::DmaFault;
        };
        if src < dst_end && dst < src_end {
            return TestStatus::Overlap;
        }
        // len <= TEST_DMA_MAX_LEN (1 MiB), so the buffer is bounded.
        let mut buf = vec![0u8; len as usize];
        if let Err(e) = mem.read(src, &mut buf) {
            log::debug!("TEST_DMA: source {src:#x}+{len:#x}: {e}");
            return TestStatus::DmaFault;
        }
        if let Err(e) = mem.write(dst, &buf) {
            log::debug!("TEST_DMA: destination {dst:#x}+{len:#x}: {e}");
            return TestStatus::DmaFault;
        }
        log::debug!("TEST_DMA: copied {len:#x} bytes {src:#x} -> {dst:#x}");
        TestStatus::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::mapping::test_util::memfd;
    use crate::dma::{DmaPerm, DmaSpace};
    use crate::pci::msix::test_util::{count, eventfd};
    use crate::pci::msix::{GatedMsix, MsixVectors};
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    const RW: DmaPerm = DmaPerm {
        read: true,
        write: true,
    };

    struct Rig {
        bar: Bar0,
        mem: DmaSpace,
        vectors: MsixVectors,
        enabled: bool,
        files: Vec<File>,
    }

    impl Rig {
        /// Guest memory: 64 KiB at 0x100000 (memfd A) followed directly by 64 KiB at
        /// 0x110000 (memfd B, from file offset 0x10000); nothing else.
        fn new() -> Self {
            let a = memfd(0x10000);
            let b = memfd(0x20000);
            let mut mem = DmaSpace::new();
            mem.map(0x100000, 0x10000, 0, RW, Some(&a)).unwrap();
            mem.map(0x110000, 0x10000, 0x10000, RW, Some(&b)).unwrap();
            Self {
                bar: Bar0::new(),
                mem,
                vectors: MsixVectors::new(),
                enabled: true,
                files: vec![a, b],
            }
        }

        fn w32(&mut self, reg: usize, v: u32) {
            let irq = GatedMsix {
                vectors: &self.vectors,
                enabled: self.enabled,
            };
            self.bar
                .write(reg as u64, &v.to_le_bytes(), &self.mem, &irq)
                .unwrap();
        }

        fn w64(&mut self, reg: usize, v: u64) {
            self.w32(reg, v as u32);
            self.w32(reg + 4, (v >> 32) as u32);
        }

        fn r32(&self, reg: usize) -> u32 {
            let mut b = [0u8; 4];
            self.bar.read(reg as u64, &mut b).unwrap();
            u32::from_le_bytes(b)
        }

        fn status(&self) -> Option<TestStatus> {
            TestStatus::from_u32(self.r32(REG_TEST_STATUS))
        }

        fn copy(&mut self, src: u64, dst: u64, len: u32) -> Option<TestStatus> {
            self.w64(REG_TEST_DMA_SRC, src);
            self.w64(REG_TEST_DMA_DST, dst);
            self.w32(REG_TEST_DMA_LEN, len);
            self.w32(REG_TEST_DMA_CTRL, TEST_DMA_CTRL_START);
            self.status()
        }
    }

    #[test]
    fn identification_registers() {
        let mut r = Rig::new();
        assert_eq!(r.r32(REG_ID), DEVICE_ID_MAGIC);
        assert_eq!(r.r32(REG_ID), 0x4652_444d);
        assert_eq!(r.r32(REG_VERSION), 0x0001_0009);
        assert_eq!(r.r32(REG_VERSION) >> 16, u32::from(VERSION_MAJOR));
        assert_eq!(r.r32(REG_MSIX_COUNT), MSIX_VECTORS);
        // Read-only: writes are ignored.
        r.w32(REG_ID, 0);
        r.w32(REG_VERSION, 0);
        r.w32(REG_MSIX_COUNT, 0);
        r.w32(REG_TEST_STATUS, 5);
        assert_eq!(r.r32(REG_ID), DEVICE_ID_MAGIC);
        assert_eq!(r.r32(REG_VERSION), 0x0001_0009);
        assert_eq!(r.r32(REG_MSIX_COUNT), MSIX_VECTORS);
        assert_eq!(r.status(), Some(TestStatus::Ok));
        // Byte-wise reads see the little-endian image: "MDRF".
        let mut b = [0u8; 4];
        r.bar.read(REG_ID as u64, &mut b).unwrap();
        assert_eq!(&b, b"MDRF");
        let mut one = [0u8];
        r.bar.read(REG_ID as u64 + 3, &mut one).unwrap();
        assert_eq!(one[0], 0x46);
    }

    #[test]
    fn mac_registers_report_the_configured_mac() {
        let mut r = Rig::new();
        assert_eq!((r.r32(REG_MAC_LO), r.r32(REG_MAC_HI)), (0, 0));
        r.bar.set_mac([0x52, 0x54, 0x00, 0xfe, 0x10, 0x02]);
        assert_eq!(r.r32(REG_MAC_LO), 0xfe00_5452);
        assert_eq!(r.r32(REG_MAC_HI), 0x0000_0210);
        // Read-only: writes change nothing.
        r.w32(REG_MAC_LO, 0);
        r.w32(REG_MAC_HI, 0xffff_ffff);
        assert_eq!(r.bar.mac(), [0x52, 0x54, 0x00, 0xfe, 0x10, 0x02]);
    }

    #[test]
    fn scratch_and_rw_registers() {
        let mut r = Rig::new();
        assert_eq!(r.r32(REG_SCRATCH), 0);
        r.w32(REG_SCRATCH, 0xdead_beef);
        assert_eq!(r.r32(REG_SCRATCH), 0xdead_beef);
        r.w32(REG_TEST_DMA_LEN, 1234);
        assert_eq!(r.r32(REG_TEST_DMA_LEN), 1234);
        r.w64(REG_TEST_DMA_SRC, 0x1122_3344_5566_7788);
        r.w64(REG_TEST_DMA_DST, 0x99aa_bbcc_ddee_ff00);
        assert_eq!(r.r32(REG_TEST_DMA_SRC), 0x5566_7788);
        assert_eq!(r.r32(REG_TEST_DMA_SRC + 4), 0x1122_3344);
        assert_eq!(r.r32(REG_TEST_DMA_DST), 0xddee_ff00);
        assert_eq!(r.r32(REG_TEST_DMA_DST + 4), 0x99aa_bbcc);
        // Writing the high word keeps the low word and vice versa.
        r.w32(REG_TEST_DMA_SRC + 4, 0);
        assert_eq!(r.r32(REG_TEST_DMA_SRC), 0x5566_7788);
        // A 64-bit access writes both halves.
        let irq = GatedMsix {
            vectors: &r.vectors,
            enabled: true,
        };
        r.bar
            .write(
                REG_TEST_DMA_DST as u64,
                &0x0102_0304_0506_0708u64.to_le_bytes(),
                &r.mem,
                &irq,
            )
            .unwrap();
        let mut q = [0u8; 8];
        r.bar.read(REG_TEST_DMA_DST as u64, &mut q).unwrap();
        assert_eq!(u64::from_le_bytes(q), 0x0102_0304_0506_0708);
        // Write-only registers read 0.
        assert_eq!(r.r32(REG_TEST_IRQ), 0);
        assert_eq!(r.r32(REG_TEST_DMA_CTRL), 0);
        // Unused offsets read 0 and ignore writes.
        r.w32(0x200, 0xffff_ffff);
        assert_eq!(r.r32(0x200), 0);
        assert_eq!(r.r32(BAR0_SIZE - 4), 0);
    }

    #[test]
    fn odd_writes_are_ignored_and_out_of_range_refused() {
        let mut r = Rig::new();
        let irq = GatedMsix {
            vectors: &r.vectors,
            enabled: true,
        };
        r.bar
            .write(REG_SCRATCH as u64, &[1, 2], &r.mem, &irq)
            .unwrap();
        r.bar
            .write(REG_SCRATCH as u64 + 1, &[1, 2, 3, 4], &r.mem, &irq)
            .unwrap();
        r.bar.write(REG_SCRATCH as u64, &[1], &r.mem, &irq).unwrap();
        assert_eq!(r.r32(REG_SCRATCH), 0);
        let mut b = [0u8; 4];
        assert!(r.bar.read(BAR0_SIZE as u64 - 2, &mut b).is_err());
        assert!(r.bar.read(u64::MAX, &mut b).is_err());
        assert!(r
            .bar
            .write(BAR0_SIZE as u64, &[0; 4], &r.mem, &irq)
            .is_err());
        assert!(r.bar.write(u64::MAX - 3, &[0; 4], &r.mem, &irq).is_err());
        r.w32(REG_SCRATCH, 7);
        assert_eq!(r.r32(REG_SCRATCH), 7);
    }

    #[test]
    fn test_irq_raises_the_vector() {
        let mut r = Rig::new();
        let e = eventfd();
        r.vectors.set(5, 1, vec![e.try_clone().unwrap()]).unwrap();
        r.w32(REG_TEST_IRQ, 5);
        assert_eq!(r.status(), Some(TestStatus::Ok));
        assert_eq!(count(&e), 1);
    }

    #[test]
    fn test_irq_bad_vector() {
        let mut r = Rig::new();
        let e = eventfd();
        r.vectors.set(0, 1, vec![e.try_clone().unwrap()]).unwrap();
        // Out of range.
        r.w32(REG_TEST_IRQ, MSIX_VECTORS);
        assert_eq!(r.status(), Some(TestStatus::BadVector));
        r.w32(REG_TEST_IRQ, u32::MAX);
        assert_eq!(r.status(), Some(TestStatus::BadVector));
        // In range but not wired.
        r.w32(REG_TEST_IRQ, 1);
        assert_eq!(r.status(), Some(TestStatus::BadVector));
        // Wired but MSI-X disabled.
        r.enabled = false;
        r.w32(REG_TEST_IRQ, 0);
        assert_eq!(r.status(), Some(TestStatus::BadVector));
        assert_eq!(count(&e), 0);
        // A later good command resets the status.
        r.enabled = true;
        r.w32(REG_TEST_IRQ, 0);
        assert_eq!(r.status(), Some(TestStatus::Ok));
        assert_eq!(count(&e), 1);
    }

    #[test]
    fn dma_copy_across_two_regions() {
        let mut r = Rig::new();
        // Source straddles the boundary between the two memfds.
        let src = 0x10fff0u64;
        let dst = 0x118000u64;
        let len = 0x40u32;
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        r.files[0].write_all_at(&pattern[..0x10], 0xfff0).unwrap();
        r.files[1].write_all_at(&pattern[0x10..], 0x10000).unwrap();
        assert_eq!(r.copy(src, dst, len), Some(TestStatus::Ok));
        let mut out = vec![0u8; len as usize];
        r.files[1]
            .read_exact_at(&mut out, 0x10000 + 0x8000)
            .unwrap();
        assert_eq!(
            out, pattern,
            "destination must match the source byte for byte"
        );
        // Bytes around the destination are untouched.
        let mut edge = [0u8; 2];
        r.files[1]
            .read_exact_at(&mut edge[..1], 0x10000 + 0x8000 - 1)
            .unwrap();
        r.files[1]
            .read_exact_at(&mut edge[1..], 0x10000 + 0x8000 + u64::from(len))
            .unwrap();
        assert_eq!(edge, [0, 0]);
        // And the other direction, destination straddling the boundary.
        assert_eq!(r.copy(dst, 0x10fff8, len), Some(TestStatus::Ok));
        let mut back = vec![0u8; len as usize];
        r.mem.read(0x10fff8, &mut back).unwrap();
        assert_eq!(back, pattern);
    }

    #[test]
    fn dma_max_length_copy() {
        let mut r = Rig::new();
        // 64 KiB is the largest that fits twice in our 128 KiB; TEST_DMA_MAX_LEN itself
        // is checked as a length below.
        assert_eq!(r.copy(0x100000, 0x110000, 0x10000), Some(TestStatus::Ok));
        assert_eq!(
            r.copy(0x100000, 0x300000, TEST_DMA_MAX_LEN),
            Some(TestStatus::DmaFault)
        );
    }

    #[test]
    fn dma_bad_length() {
        let mut r = Rig::new();
        assert_eq!(r.copy(0x100000, 0x110000, 0), Some(TestStatus::BadLength));
        assert_eq!(
            r.copy(0x100000, 0x110000, TEST_DMA_MAX_LEN + 1),
            Some(TestStatus::BadLength)
        );
        assert_eq!(
            r.copy(0x100000, 0x110000, u32::MAX),
            Some(TestStatus::BadLength)
        );
    }

    #[test]
    fn dma_fault_outside_mapped_memory() {
        let mut r = Rig::new();
        let mark = [0x5au8; 16];
        r.files[0].write_all_at(&mark, 0).unwrap();
        // Source unmapped.
        assert_eq!(r.copy(0x0, 0x100000, 16), Some(TestStatus::DmaFault));
        // Destination runs past the end of the mapped memory: nothing may be written.
        assert_eq!(r.copy(0x100000, 0x11fff8, 16), Some(TestStatus::DmaFault));
        let mut tail = [0u8; 8];
        r.files[1].read_exact_at(&mut tail, 0x1fff8).unwrap();
        assert_eq!(
            tail, [0u8; 8],
            "a faulting copy must not write a partial prefix"
        );
        // Source starting just past the end.
        assert_eq!(r.copy(0x120000, 0x100000, 1), Some(TestStatus::DmaFault));
        // Address + length wraps past 2^64.
        assert_eq!(
            r.copy(u64::MAX - 3, 0x100000, 16),
            Some(TestStatus::DmaFault)
        );
        assert_eq!(r.copy(0x100000, u64::MAX, 2), Some(TestStatus::DmaFault));
    }

    #[test]
    fn dma_overlap() {
        let mut r = Rig::new();
        assert_eq!(r.copy(0x100000, 0x100000, 16), Some(TestStatus::Overlap));
        assert_eq!(r.copy(0x100000, 0x10000f, 16), Some(TestStatus::Overlap));
        assert_eq!(r.copy(0x10000f, 0x100000, 16), Some(TestStatus::Overlap));
        // Touching but not overlapping is fine.
        assert_eq!(r.copy(0x100000, 0x100010, 16), Some(TestStatus::Ok));
        assert_eq!(r.copy(0x100010, 0x100000, 16), Some(TestStatus::Ok));
        // Overlap is reported even for unmapped addresses (checked before memory).
        assert_eq!(r.copy(0x5000, 0x5008, 16), Some(TestStatus::Overlap));
    }

    #[test]
    fn dma_bad_command() {
        let mut r = Rig::new();
        r.w64(REG_TEST_DMA_SRC, 0x100000);
        r.w64(REG_TEST_DMA_DST, 0x110000);
        r.w32(REG_TEST_DMA_LEN, 16);
        for bad in [0u32, 2, 3, u32::MAX] {
            r.w32(REG_TEST_DMA_CTRL, bad);
            assert_eq!(r.status(), Some(TestStatus::BadCommand), "value {bad}");
        }
        r.w32(REG_TEST_DMA_CTRL, TEST_DMA_CTRL_START);
        assert_eq!(r.status(), Some(TestStatus::Ok));
    }
}
