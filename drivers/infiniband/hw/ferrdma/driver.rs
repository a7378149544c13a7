// SPDX-License-Identifier: GPL-2.0

//! The PCI driver: probe brings the function up and proves it works, remove undoes it all.

use crate::{
    ibdev::{self, FerrdmaIb, IbData, MacFmt},
    interface as hw,
    regs,
    selftest::{self, Bar0, Version},
};
use kernel::{
    device::Core,
    infiniband::{Registration, RegistrationParams},
    io::Io,
    pci,
    prelude::*,
};

/// The ferrdma PCI driver.
pub(crate) struct FerrdmaDriver;

/// Per-function state.
///
/// Fields are dropped in declaration order, which is the teardown order: the RDMA device is
/// unregistered first, then interrupt vectors are freed, then the BAR is unmapped.
pub(crate) struct FerrdmaData<'bound> {
    _ib: Registration<'bound, FerrdmaIb>,
    pdev: &'bound pci::Device,
    _vectors: pci::IrqVectorRegistration<'bound>,
    _bar: Bar0<'bound>,
}

kernel::pci_device_table!(
    PCI_TABLE,
    <FerrdmaDriver as pci::Driver>::IdInfo,
    [(
        pci::DeviceId::from_id(pci::Vendor::QEMU_EMULATED, hw::PCI_DEVICE_ID as u32),
        ()
    )]
);

const _: () = assert!(pci::Vendor::QEMU_EMULATED.as_raw() == hw::PCI_VENDOR_ID);

impl pci::Driver for FerrdmaDriver {
    type IdInfo = ();
    type Data<'bound> = FerrdmaData<'bound>;
    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pdev.enable_device_mem()?;
        pdev.set_master();

        let bar: Bar0<'bound> = pdev.iomap_region_sized::<{ hw::BAR0_SIZE }>(
            hw::BAR0_INDEX,
            c"ferrdma",
        )?;

        let id = bar.read(regs::ID).into_raw();
        if id != hw::DEVICE_ID_MAGIC {
            dev_err!(pdev, "unexpected device id {:#x} (want {:#x})\n", id, hw::DEVICE_ID_MAGIC);
            return Err(ENODEV);
        }
        let version = Version::decode(bar.read(regs::VERSION).into_raw());
        if !version.is_supported() {
            dev_err!(
                pdev,
                "unsupported interface version {}.{} (driver speaks {}.x)\n",
                version.major,
                version.minor,
                hw::VERSION_MAJOR
            );
            return Err(ENODEV);
        }

        // The device tells how many vectors it has; trust only a sane number, and need them all.
        let nvec = bar.read(regs::MSIX_COUNT).into_raw();
        if nvec == 0 || nvec > hw::MSIX_VECTORS {
            dev_err!(pdev, "device reports {} MSI-X vectors\n", nvec);
            return Err(EINVAL);
        }
        let vectors = pdev.alloc_irq_vectors(
            nvec,
            nvec,
            pci::IrqTypes::default().with(pci::IrqType::MsiX),
        )?;

        let delivered = selftest::msix(pdev, &bar, &vectors)?;
        let copied = selftest::dma_copy(pdev, &bar)?;
        let mac = hw::mac_from_regs(
            bar.read(regs::MAC_LO).into_raw(),
            bar.read(regs::MAC_HI).into_raw(),
        );

        dev_info!(
            pdev,
            "probe ok: id {:#x} version {}.{}, {}/{} MSI-X vectors delivered, DMA copy of {} bytes verified, MAC {}\n",
            id,
            version.major,
            version.minor,
            delivered,
            nvec,
            copied,
            MacFmt(mac)
        );

        // The doorbell BAR is what user contexts map; without it there are no user verbs.
        let doorbells = if bar.read(regs::FEATURES).doorbell_bar()
            && pdev.resource_len(hw::DB_BAR_INDEX)? >= hw::DB_BAR_SIZE as u64
        {
            Some(pdev.resource_start(hw::DB_BAR_INDEX)?)
        } else {
            dev_warn!(pdev, "no doorbell BAR: user verbs unavailable\n");
            None
        };

        let params = RegistrationParams {
            name: c"ferrdma%d",
            node_guid: ibdev::node_guid(mac),
            num_comp_vectors: nvec.saturating_sub(1).max(1),
            netdev_mac: mac,
        };
        // SAFETY: The registration is stored in the driver data, which the driver core drops
        // when the device is unbound; it is never leaked.
        let ib = unsafe {
            Registration::new(
                pdev.as_ref(),
                kernel::module::this_module::<crate::LocalModule>(),
                params,
                IbData::new(mac, doorbells),
            )
        }?;
        dev_info!(pdev, "registered {}\n", ib.device().name());

        Ok(FerrdmaData {
            _ib: ib,
            pdev,
            _vectors: vectors,
            _bar: bar,
        })
    }
}

impl Drop for FerrdmaData<'_> {
    fn drop(&mut self) {
        dev_info!(self.pdev, "removed\n");
    }
}
