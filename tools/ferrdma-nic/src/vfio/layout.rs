//! What the device reports to the vfio-user client: its regions and irq indices.
//!
//! Regions follow the VFIO PCI numbering: BAR0..BAR5 (0..=5), ROM (6), config space (7),
//! VGA (8). Only BAR0, the doorbell BAR (2), the MSI-X BAR and config space have a size; none is mmap-able, so
//! every access arrives as a `REGION_READ`/`REGION_WRITE` message. Config space is 256
//! bytes, which tells QEMU this is a conventional PCI function (no PCIe capability).
//!
//! Irq indices: INTx (0, count 0: the interrupt pin is 0), MSI (1, count 0: no MSI
//! capability), MSI-X (2, [`MSIX_VECTORS`]). The error and request indices (3, 4) are not
//! reported, so QEMU's queries for them fail quietly and it enables neither.

use crate::vfio::server::{IrqInfo, ServerRegion};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};

use crate::interface::{
    BAR0_INDEX, BAR0_SIZE, DB_BAR_INDEX, DB_BAR_SIZE, MSIX_BAR_INDEX, MSIX_BAR_SIZE, MSIX_VECTORS,
};
use crate::pci::config_space::CONFIG_SPACE_SIZE;

/// Region index of BAR0.
pub const REGION_BAR0: u32 = VFIO_PCI_BAR0_REGION_INDEX + BAR0_INDEX;
/// Region index of the doorbell BAR.
pub const REGION_DB: u32 = VFIO_PCI_BAR0_REGION_INDEX + DB_BAR_INDEX;
/// Region index of the MSI-X BAR.
pub const REGION_MSIX_BAR: u32 = VFIO_PCI_BAR0_REGION_INDEX + MSIX_BAR_INDEX;
/// Region index of config space.
pub const REGION_CONFIG: u32 = VFIO_PCI_CONFIG_REGION_INDEX;
/// Number of regions reported.
pub const NUM_REGIONS: u32 = VFIO_PCI_NUM_REGIONS;

/// The size of region `index` (0 for regions the device does not implement).
pub fn region_size(index: u32) -> u64 {
    match index {
        REGION_BAR0 => BAR0_SIZE as u64,
        REGION_DB => DB_BAR_SIZE as u64,
        REGION_MSIX_BAR => MSIX_BAR_SIZE as u64,
        REGION_CONFIG => CONFIG_SPACE_SIZE as u64,
        _ => 0,
    }
}

/// The region table handed to the vfio-user server.
pub fn server_regions() -> Vec<ServerRegion> {
    (0..NUM_REGIONS)
        .map(|index| {
            let size = region_size(index);
            let flags = if size > 0 {
                VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
            } else {
                0
            };
            ServerRegion { index, flags, size }
        })
        .collect()
}

/// The irq indices handed to the vfio-user server.
pub fn irq_infos() -> Vec<IrqInfo> {
    vec![
        IrqInfo {
            index: VFIO_PCI_INTX_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: 0,
        },
        IrqInfo {
            index: VFIO_PCI_MSI_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: 0,
        },
        IrqInfo {
            index: VFIO_PCI_MSIX_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: MSIX_VECTORS,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_match_the_interface() {
        let regions = server_regions();
        assert_eq!(regions.len(), 9);
        for (i, r) in regions.iter().enumerate() {
            assert_eq!(r.index as usize, i, "regions are indexed by position");
        }
        assert_eq!(regions[0].size, 0x1_0000);
        assert_eq!(regions[4].size, 0x1000);
        assert_eq!(regions[7].size, 256);
        assert_eq!(regions[2].size, 0x100_0000);
        for i in [1, 3, 5, 6, 8] {
            assert_eq!(regions[i].size, 0, "region {i}");
            assert_eq!(regions[i].flags, 0, "region {i}");
        }
        for i in [0, 2, 4, 7] {
            assert_eq!(
                regions[i].flags,
                VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
            );
        }
    }

    #[test]
    fn irqs_match_the_interface() {
        let irqs = irq_infos();
        assert_eq!(irqs.len(), 3, "QEMU needs indices up to MSI-X");
        for (i, irq) in irqs.iter().enumerate() {
            assert_eq!(irq.index as usize, i, "irqs are indexed by position");
        }
        assert_eq!(irqs[2].count, 8);
        assert_eq!(irqs[0].count, 0);
        assert_eq!(irqs[1].count, 0);
    }
}
