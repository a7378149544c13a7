// SPDX-License-Identifier: GPL-2.0

//! Probe-time self tests: every MSI-X vector is delivered and the DMA engine copies correctly.
//!
//! These prove the whole path (registers, interrupts, guest memory mapped into the device
//! model) before anything is built on it. The pure parts are KUnit-tested below.

use crate::{interface as hw, regs, regs::Bar0};
use kernel::{
    device,
    dma::{Coherent, CoherentBox},
    io::Io,
    irq::{self, IrqReturn},
    pci,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    time::{delay::fsleep, Delta},
};

/// How long to wait for one test interrupt: generous, as TCG guests can be slow.
const IRQ_TIMEOUT_MS: u32 = 2000;

/// Byte count of the DMA copy test: two pages, so the copy crosses a page boundary.
pub(crate) const DMA_TEST_LEN: usize = 8192;

/// The interface version as read from the `VERSION` register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) major: u16,
    pub(crate) minor: u16,
}

impl Version {
    /// Decodes a raw `VERSION` register value.
    pub(crate) const fn decode(raw: u32) -> Self {
        Self {
            major: (raw >> 16) as u16,
            minor: raw as u16,
        }
    }

    /// The oldest minor this driver drives: 1.5 brought what its CQ resize relies on (the
    /// device follows the consumer's ring switch) and the port counters, which ib_core
    /// reads at registration (an older device would fail it).
    pub(crate) const MIN_MINOR: u16 = 5;

    /// Whether this driver can drive a device of this version: majors must match, and the
    /// minor be at least [`Version::MIN_MINOR`].
    pub(crate) const fn is_supported(self) -> bool {
        self.major == hw::VERSION_MAJOR && self.minor >= Self::MIN_MINOR
    }

    /// Whether the device echoes event tags in its events (1.3 on).
    pub(crate) const fn has_event_tags(self) -> bool {
        self.minor >= 3
    }
}

/// Byte `i` of the DMA test pattern: a multiplicative hash of the position, so that shifted,
/// truncated, repeated and zero-filled copies all differ from it.
pub(crate) const fn pattern_byte(i: usize) -> u8 {
    ((i as u32 ^ 0x5a5a_5a5a).wrapping_mul(0x9e37_79b1) >> 24) as u8
}

/// Index of the first byte of `data` that differs from the test pattern.
pub(crate) fn first_mismatch(data: &[u8]) -> Option<usize> {
    data.iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern_byte(i))
        .map(|(i, _)| i)
}

/// Splits a 64-bit bus address into the (low, high) register words.
pub(crate) const fn split_u64(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

/// Reads `TEST_STATUS` and turns anything but success into an error.
fn test_status(bar: &Bar0<'_>) -> Result {
    let raw = bar.read(regs::TEST_STATUS).into_raw();
    match hw::TestStatus::from_u32(raw) {
        Some(hw::TestStatus::Ok) => Ok(()),
        Some(hw::TestStatus::BadVector) => Err(ENXIO),
        Some(hw::TestStatus::BadLength) | Some(hw::TestStatus::BadCommand) => Err(EINVAL),
        Some(hw::TestStatus::DmaFault) | Some(hw::TestStatus::Overlap) => Err(EFAULT),
        None => Err(EIO),
    }
}

/// Counts the interrupts of one vector.
struct VectorProbe {
    hits: Atomic<u32>,
}

impl irq::Handler for VectorProbe {
    fn handle(&self) -> IrqReturn {
        self.hits.fetch_add(1, Relaxed);
        IrqReturn::Handled
    }
}

/// Raises every allocated vector through `TEST_IRQ` and waits for each to arrive exactly once.
///
/// Returns the number of vectors delivered, which is `vectors.len()` on success.
pub(crate) fn msix(
    pdev: &pci::Device<device::Bound>,
    bar: &Bar0<'_>,
    vectors: &pci::IrqVectorRegistration<'_>,
) -> Result<usize> {
    let mut delivered = 0;
    for index in 0..vectors.len() {
        let vector = u32::try_from(index)?;
        let request = vectors.index(index)?.into();
        let hits = irq::scoped::with_handler(
            request,
            irq::Flags::TRIGGER_NONE,
            c"ferrdma-selftest",
            Ok::<_, Error>(VectorProbe {
                hits: Atomic::new(0),
            }),
            |probe| -> Result<u32> {
                bar.write_reg(regs::TEST_IRQ::zeroed().with_vector(vector));
                test_status(bar)?;
                for _ in 0..IRQ_TIMEOUT_MS {
                    if probe.hits.load(Relaxed) > 0 {
                        break;
                    }
                    fsleep(Delta::from_millis(1));
                }
                Ok(probe.hits.load(Relaxed))
            },
        )??;
        if hits != 1 {
            dev_err!(
                pdev,
                "MSI-X vector {}: {} interrupts, expected 1\n",
                vector,
                hits
            );
            return Err(ETIMEDOUT);
        }
        delivered += 1;
    }
    Ok(delivered)
}

/// Has the device copy a pattern between two coherent buffers and verifies every byte.
pub(crate) fn dma_copy(pdev: &pci::Device<device::Bound>, bar: &Bar0<'_>) -> Result<usize> {
    let dev: &device::Device<device::Bound> = pdev.as_ref();
    let mut src = CoherentBox::<[u8]>::zeroed_slice(dev, DMA_TEST_LEN, GFP_KERNEL)?;
    for (i, b) in src.iter_mut().enumerate() {
        *b = pattern_byte(i);
    }
    let src: Coherent<[u8]> = src.into();
    let dst = Coherent::<u8>::zeroed_slice(dev, DMA_TEST_LEN, GFP_KERNEL)?;

    let (src_lo, src_hi) = split_u64(src.dma_address());
    let (dst_lo, dst_hi) = split_u64(dst.dma_address());
    bar.write_reg(regs::TEST_DMA_SRC_LO::zeroed().with_value(src_lo));
    bar.write_reg(regs::TEST_DMA_SRC_HI::zeroed().with_value(src_hi));
    bar.write_reg(regs::TEST_DMA_DST_LO::zeroed().with_value(dst_lo));
    bar.write_reg(regs::TEST_DMA_DST_HI::zeroed().with_value(dst_hi));
    bar.write_reg(regs::TEST_DMA_LEN::zeroed().with_len(u32::try_from(DMA_TEST_LEN)?));
    bar.write_reg(regs::TEST_DMA_CTRL::zeroed().with_command(hw::TEST_DMA_CTRL_START));
    test_status(bar)?;

    let mut copy = KVec::from_elem(0u8, DMA_TEST_LEN, GFP_KERNEL)?;
    (&dst).copy_to_slice(&mut copy);
    if let Some(i) = first_mismatch(&copy) {
        dev_err!(
            pdev,
            "DMA copy: byte {} is {:#x}, expected {:#x}\n",
            i,
            copy[i],
            pattern_byte(i)
        );
        return Err(EIO);
    }
    Ok(DMA_TEST_LEN)
}

#[kunit_tests(ferrdma_selftest)]
mod tests {
    use super::*;

    #[test]
    fn version_decodes_major_and_minor() {
        assert_eq!(Version::decode(0x0001_0000), Version { major: 1, minor: 0 });
        assert_eq!(
            Version::decode(0xabcd_1234),
            Version {
                major: 0xabcd,
                minor: 0x1234
            }
        );
    }

    #[test]
    fn our_major_from_the_oldest_minor_is_supported() {
        assert!(Version::decode(u32::from(hw::VERSION_MAJOR) << 16 | 7).is_supported());
        assert!(!Version::decode(u32::from(hw::VERSION_MAJOR + 1) << 16).is_supported());
        assert!(!Version::decode(0).is_supported());
        assert!(!Version::decode(u32::from(hw::VERSION_MAJOR) << 16 | 4).is_supported());
        assert!(
            Version::decode(u32::from(hw::VERSION_MAJOR) << 16 | u32::from(hw::VERSION_MINOR))
                .is_supported()
        );
    }

    #[test]
    fn event_tags_come_with_minor_3() {
        assert!(!Version::decode(0x0001_0002).has_event_tags());
        assert!(Version::decode(0x0001_0003).has_event_tags());
        assert!(
            Version::decode(u32::from(hw::VERSION_MAJOR) << 16 | u32::from(hw::VERSION_MINOR))
                .has_event_tags()
        );
    }

    #[test]
    fn shifted_or_repeated_copies_do_not_match() -> Result {
        let mut buf = KVec::from_elem(0u8, DMA_TEST_LEN, GFP_KERNEL)?;
        // A copy that starts `shift` bytes late, as after an off-by-some address bug.
        for shift in [1usize, 8, 64, 256, 4096] {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern_byte(i + shift);
            }
            assert!(first_mismatch(&buf).is_some());
        }
        // The first page copied twice.
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern_byte(i % 4096);
        }
        assert!(first_mismatch(&buf).is_some_and(|i| i >= 4096));
        // All zeroes, as when the device wrote nothing.
        buf.iter_mut().for_each(|b| *b = 0);
        assert!(first_mismatch(&buf).is_some());
        Ok(())
    }

    #[test]
    fn first_mismatch_finds_the_first_bad_byte() {
        let mut buf = [0u8; 300];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern_byte(i);
        }
        assert_eq!(first_mismatch(&buf), None);
        buf[299] ^= 1;
        buf[17] ^= 0x80;
        assert_eq!(first_mismatch(&buf), Some(17));
        assert_eq!(first_mismatch(&[]), None);
    }

    #[test]
    fn split_u64_puts_the_low_word_first() {
        assert_eq!(split_u64(0x1234_5678_9abc_def0), (0x9abc_def0, 0x1234_5678));
        assert_eq!(split_u64(u64::MAX), (u32::MAX, u32::MAX));
    }
}
