//! Property tests of the `ServerBackend` callbacks as the vfio-user server calls
//! them, with arbitrary client-supplied arguments: `DMA_MAP`/`DMA_UNMAP` with any flags,
//! addresses, sizes, offsets and fd kinds; `SET_IRQS` with any index, flags, range and fds;
//! region accesses; resets. Properties: nothing panics; the DMA map table stays consistent;
//! a refused map, unmap or `SET_IRQS` changes nothing; an accepted map adds exactly its
//! range and an accepted unmap removes only whole ranges inside the request.

use std::fs::File;

use crate::vfio::server::{DmaMapFlags, DmaUnmapFlags, ServerBackend};
use proptest::prelude::*;
use vfio_bindings::bindings::vfio::{
    VFIO_DMA_UNMAP_FLAG_ALL, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE,
};

use crate::device::Device;
use crate::dma::mapping::test_util::{memfd, pipe};
use crate::interface::MSIX_VECTORS;
use crate::pci::msix::test_util::eventfd;
use crate::shared::SharedDevice;

const PAGE: u64 = 0x1000;
/// The memfd the maps use: 4 pages.
const RAM: u64 = 4 * PAGE;

/// What a client attaches as a file descriptor.
#[derive(Debug, Clone, Copy)]
enum Fd {
    Ram,
    Pipe,
    Eventfd,
}

#[derive(Debug, Clone)]
enum Call {
    Map {
        flags: u32,
        offset: u64,
        iova: u64,
        size: u64,
        fd: Option<Fd>,
    },
    Unmap {
        flags: u32,
        iova: u64,
        size: u64,
    },
    SetIrqs {
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<Fd>,
    },
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
    Reset,
}

fn fd() -> impl Strategy<Value = Fd> {
    prop_oneof![4 => Just(Fd::Ram), 1 => Just(Fd::Pipe), 1 => Just(Fd::Eventfd)]
}

/// IOVAs in a small window (so maps collide and unmaps hit), and anywhere.
fn iova() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..16).prop_map(|p| p * PAGE),
        1 => 0u64..16 * PAGE,
        1 => (u64::MAX - 4 * PAGE)..=u64::MAX,
        1 => any::<u64>(),
    ]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (1u64..=4).prop_map(|p| p * PAGE),
        1 => Just(0u64),
        1 => 0u64..=RAM + 1,
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        4 => (
            prop_oneof![4 => 1u32..=3, 1 => any::<u32>()],
            prop_oneof![3 => (0u64..4).prop_map(|p| p * PAGE), 1 => 0u64..=RAM, 1 => any::<u64>()],
            iova(),
            size(),
            proptest::option::weighted(0.8, fd()),
        )
            .prop_map(|(flags, offset, iova, size, fd)| Call::Map { flags, offset, iova, size, fd }),
        3 => (
            prop_oneof![4 => Just(0u32), 1 => Just(VFIO_DMA_UNMAP_FLAG_ALL), 1 => any::<u32>()],
            iova(),
            size(),
        )
            .prop_map(|(flags, iova, size)| Call::Unmap { flags, iova, size }),
        3 => (
            prop_oneof![4 => 0u32..4, 1 => any::<u32>()],
            prop_oneof![
                3 => Just(VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER),
                2 => Just(VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER),
                2 => 0u32..64,
                1 => any::<u32>(),
            ],
            prop_oneof![4 => 0u32..=MSIX_VECTORS, 1 => any::<u32>()],
            prop_oneof![4 => 0u32..=MSIX_VECTORS, 1 => any::<u32>()],
            prop::collection::vec(fd(), 0..=4),
        )
            .prop_map(|(index, flags, start, count, fds)| Call::SetIrqs { index, flags, start, count, fds }),
        1 => (0u32..10, prop_oneof![0u64..0x200, any::<u64>()], 0usize..=16)
            .prop_map(|(region, offset, len)| Call::Read { region, offset, len }),
        1 => (0u32..10, prop_oneof![0u64..0x200, any::<u64>()], prop::collection::vec(any::<u8>(), 0..=8))
            .prop_map(|(region, offset, data)| Call::Write { region, offset, data }),
        1 => Just(Call::Reset),
    ]
}

/// The fds of one call: fresh each time, as the library hands over received fds.
fn files(kinds: &[Fd], ram: &File) -> Vec<File> {
    kinds
        .iter()
        .map(|k| match k {
            Fd::Ram => ram.try_clone().unwrap(),
            Fd::Pipe => pipe().1,
            Fd::Eventfd => eventfd(),
        })
        .collect()
}

fn wired(dev: &SharedDevice) -> Vec<bool> {
    let d = dev.lock();
    (0..MSIX_VECTORS).map(|v| d.vectors().is_wired(v)).collect()
}

fn ranges(dev: &SharedDevice) -> Vec<(u64, u64)> {
    dev.lock().dma().ranges()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn backend_callbacks_never_panic_and_refusals_change_nothing(
        calls in prop::collection::vec(call(), 1..48)
    ) {
        let ram = memfd(RAM);
        let mut dev = SharedDevice::new(Device::new("prop-backend"));
        for c in &calls {
            let (maps, vecs) = (ranges(&dev), wired(&dev));
            match c {
                Call::Map { flags, offset, iova, size, fd } => {
                    let f = fd.and_then(|k| files(&[k], &ram).pop());
                    let r = dev.dma_map(DmaMapFlags(*flags), *offset, *iova, *size, f);
                    let mut expect = maps.clone();
                    if r.is_ok() {
                        expect.push((*iova, *size));
                        expect.sort_unstable();
                    }
                    prop_assert_eq!(ranges(&dev), expect, "map {:?} -> {:?}", c, r.err());
                }
                Call::Unmap { flags, iova, size } => {
                    let r = dev.dma_unmap(DmaUnmapFlags(*flags), *iova, *size);
                    let after = ranges(&dev);
                    if r.is_err() {
                        prop_assert_eq!(&after, &maps, "refused unmap {:?} changed the table", c);
                    } else if *flags == VFIO_DMA_UNMAP_FLAG_ALL {
                        prop_assert!(after.is_empty());
                    } else {
                        let end = iova + size;
                        for m in &maps {
                            let inside = m.0 >= *iova && m.0 + m.1 <= end;
                            prop_assert_eq!(after.contains(m), !inside, "{:?} after {:?}", m, c);
                        }
                    }
                }
                Call::SetIrqs { index, flags, start, count, fds } => {
                    let r = dev.set_irqs(*index, *flags, *start, *count, files(fds, &ram));
                    if r.is_err() {
                        prop_assert_eq!(wired(&dev), vecs, "refused SET_IRQS {:?} changed vectors", c);
                    }
                    prop_assert_eq!(ranges(&dev), maps);
                }
                Call::Read { region, offset, len } => {
                    let mut buf = vec![0u8; *len];
                    let _ = dev.region_read(*region, *offset, &mut buf);
                    prop_assert_eq!(ranges(&dev), maps);
                }
                Call::Write { region, offset, data } => {
                    let _ = dev.region_write(*region, *offset, data);
                    prop_assert_eq!(ranges(&dev), maps);
                }
                Call::Reset => {
                    dev.reset().unwrap();
                    prop_assert_eq!(ranges(&dev), maps, "mappings are client state");
                    prop_assert_eq!(wired(&dev), vecs, "eventfds are client state");
                }
            }
            let d = dev.lock();
            prop_assert!(d.dma().check_consistent().is_ok(), "{:?}", d.dma().check_consistent());
        }
        dev.lock().disconnect();
        prop_assert!(ranges(&dev).is_empty());
        prop_assert!(wired(&dev).iter().all(|w| !w));
    }
}
