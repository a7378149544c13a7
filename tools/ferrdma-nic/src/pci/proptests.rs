//! Property tests: arbitrary guest/client accesses never panic and never touch memory
//! outside what was mapped.

use std::fs::File;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use crate::device::{Device, DMA_MAP_READ, DMA_MAP_WRITE};
use crate::dma::mapping::test_util::memfd;
use crate::interface::{
    BAR0_SIZE, MSIX_BAR_SIZE, REG_TEST_DMA_CTRL, REG_TEST_DMA_DST, REG_TEST_DMA_LEN,
    REG_TEST_DMA_SRC, REG_TEST_IRQ,
};
use crate::pci::config_space::CONFIG_SPACE_SIZE;
use crate::pci::msix::test_util::eventfd;
use crate::vfio::layout::{region_size, REGION_BAR0, REGION_CONFIG, REGION_DB, REGION_MSIX_BAR};

const PAGE: u64 = 0x1000;
/// Guest memory: one memfd of 3 pages of which only the middle page is mapped, at IOVA.
const IOVA: u64 = 0x4000_0000;
const SENTINEL: u8 = 0xa5;

#[derive(Debug, Clone)]
enum Op {
    Read {
        region: u32,
        offset: u64,
        len: usize,
    },
    Write {
        region: u32,
        offset: u64,
        data: Vec<u8>,
    },
    /// Program and start a DMA copy, biased towards addresses near the mapped page.
    Copy {
        src: u64,
        dst: u64,
        len: u32,
        ctrl: u32,
    },
    Irq {
        vector: u32,
    },
}

fn interesting_offset(size: usize) -> impl Strategy<Value = u64> {
    let s = size.max(16) as u64;
    prop_oneof![
        0..(s + 16),
        (0..s / 4).prop_map(|d| d * 4),
        Just(u64::MAX),
        any::<u64>(),
        (s - 8)..(s + 8),
    ]
}

fn interesting_addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        (IOVA - 2 * PAGE)..(IOVA + 3 * PAGE),
        any::<u64>(),
        (u64::MAX - 2 * PAGE)..=u64::MAX,
    ]
}

fn region() -> impl Strategy<Value = (u32, usize)> {
    prop_oneof![
        Just((REGION_CONFIG, CONFIG_SPACE_SIZE)),
        Just((REGION_BAR0, BAR0_SIZE)),
        Just((REGION_MSIX_BAR, MSIX_BAR_SIZE)),
        (0u32..16).prop_map(|r| (r, region_size(r) as usize)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        region()
            .prop_flat_map(|(region, size)| (Just(region), interesting_offset(size), 0usize..=16))
            .prop_map(|(region, offset, len)| Op::Read {
                region,
                offset,
                len
            }),
        region()
            .prop_flat_map(|(region, size)| (
                Just(region),
                interesting_offset(size),
                prop::collection::vec(any::<u8>(), 0..=16)
            ))
            .prop_map(|(region, offset, data)| Op::Write {
                region,
                offset,
                data
            }),
        (
            interesting_addr(),
            interesting_addr(),
            prop_oneof![0u32..=(2 * PAGE as u32), any::<u32>()],
            prop_oneof![Just(1u32), any::<u32>()],
        )
            .prop_map(|(src, dst, len, ctrl)| Op::Copy {
                src,
                dst,
                len,
                ctrl
            }),
        prop_oneof![0u32..10, any::<u32>()].prop_map(|vector| Op::Irq { vector }),
    ]
}

fn w32(d: &mut Device, reg: usize, v: u32) {
    let _ = d.write_region(REGION_BAR0, reg as u64, &v.to_le_bytes());
}

fn apply(d: &mut Device, op: &Op) {
    match op {
        Op::Read {
            region,
            offset,
            len,
        } => {
            let mut buf = vec![0u8; *len];
            let _ = d.read_region(*region, *offset, &mut buf);
        }
        Op::Write {
            region,
            offset,
            data,
        } => {
            let _ = d.write_region(*region, *offset, data);
        }
        Op::Copy {
            src,
            dst,
            len,
            ctrl,
        } => {
            w32(d, REG_TEST_DMA_SRC, *src as u32);
            w32(d, REG_TEST_DMA_SRC + 4, (*src >> 32) as u32);
            w32(d, REG_TEST_DMA_DST, *dst as u32);
            w32(d, REG_TEST_DMA_DST + 4, (*dst >> 32) as u32);
            w32(d, REG_TEST_DMA_LEN, *len);
            w32(d, REG_TEST_DMA_CTRL, *ctrl);
        }
        Op::Irq { vector } => w32(d, REG_TEST_IRQ, *vector),
    }
}

fn rig() -> (Device, File) {
    let f = memfd(3 * PAGE);
    f.write_all_at(&vec![SENTINEL; 3 * PAGE as usize], 0)
        .unwrap();
    let mut d = Device::new("prop");
    d.dma_map(
        DMA_MAP_READ | DMA_MAP_WRITE,
        PAGE,
        IOVA,
        PAGE,
        Some(f.try_clone().unwrap()),
    )
    .unwrap();
    d.set_irqs(
        vfio_bindings::bindings::vfio::VFIO_PCI_MSIX_IRQ_INDEX,
        vfio_bindings::bindings::vfio::VFIO_IRQ_SET_DATA_EVENTFD
            | vfio_bindings::bindings::vfio::VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        2,
        vec![eventfd(), eventfd()],
    )
    .unwrap();
    (d, f)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_accesses_never_panic_or_escape_mapped_memory(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        let (mut d, f) = rig();
        for op in &ops {
            apply(&mut d, op);
        }
        // The unmapped first and last pages of the memfd must be untouched.
        let mut outside = vec![0u8; PAGE as usize];
        f.read_exact_at(&mut outside, 0).unwrap();
        prop_assert!(outside.iter().all(|&b| b == SENTINEL), "page before the mapping was written");
        f.read_exact_at(&mut outside, 2 * PAGE).unwrap();
        prop_assert!(outside.iter().all(|&b| b == SENTINEL), "page after the mapping was written");
        // The identity survives whatever the guest wrote.
        let mut id = [0u8; 4];
        d.read_region(REGION_CONFIG, 0, &mut id).unwrap();
        prop_assert_eq!(u32::from_le_bytes(id), 0xfe10_1234);
    }

    #[test]
    fn region_reads_respect_bounds(
        (region, size) in region(),
        offset in interesting_offset(BAR0_SIZE),
        len in 0usize..64,
    ) {
        let (d, _f) = rig();
        let mut buf = vec![0u8; len];
        let r = d.read_region(region, offset, &mut buf);
        let real = matches!(region, REGION_CONFIG | REGION_BAR0 | REGION_MSIX_BAR | REGION_DB);
        let in_bounds = offset.checked_add(len as u64).is_some_and(|e| e <= size as u64);
        prop_assert_eq!(r.is_ok(), real && in_bounds);
    }
}
