// SPDX-License-Identifier: GPL-2.0

//! The PCI driver: probe brings the function up and proves it works, remove undoes it all.

use crate::{
    admin::AdminQueue,
    caps::Caps,
    eq::EventQueue,
    ibdev::{self, FerrdmaIb, FunctionInfo, IbData, MacFmt},
    interface as hw, regs,
    regs::{Bar0, DbPage},
    selftest::{self, Version},
};
use kernel::{
    device::Core,
    infiniband::{Interrupts, MmioWindow, Registration, RegistrationParams},
    io::Io,
    pci,
    prelude::*,
};

/// The ferrdma PCI driver.
pub(crate) struct FerrdmaDriver;

/// Per-function state: the registered RDMA device, which owns the function's resources (see
/// [`IbData`]). Unregistering it is the first step of teardown.
pub(crate) struct FerrdmaData<'bound> {
    _ib: Registration<'bound, FerrdmaIb>,
    pdev: &'bound pci::Device,
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

        let bar: Bar0<'bound> =
            pdev.iomap_region_sized::<{ hw::BAR0_SIZE }>(hw::BAR0_INDEX, c"ferrdma")?;

        let id = bar.read(regs::ID).into_raw();
        if id != hw::DEVICE_ID_MAGIC {
            dev_err!(
                pdev,
                "unexpected device id {:#x} (want {:#x})\n",
                id,
                hw::DEVICE_ID_MAGIC
            );
            return Err(ENODEV);
        }
        let version = Version::decode(bar.read(regs::VERSION).into_raw());
        if !version.is_supported() {
            dev_err!(
                pdev,
                "unsupported interface version {}.{} (driver speaks {}.{} and later {}.x)\n",
                version.major,
                version.minor,
                hw::VERSION_MAJOR,
                Version::MIN_MINOR,
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

        // Interface 2.0: the RDMA engine. A 1.x function has nothing to register.
        if !bar.read(regs::FEATURES).rdma() {
            dev_err!(pdev, "no RDMA engine (an interface 1.x device)\n");
            return Err(ENODEV);
        }
        let mut admin = AdminQueue::new(pdev.as_ref(), &bar)?;
        let mut eqs = KVec::new();
        let caps = match bring_up_engine(pdev, &bar, &mut admin, &mut eqs, nvec) {
            Ok(caps) => caps,
            Err(e) => {
                release_engine(pdev, &bar, admin, eqs);
                return Err(e);
            }
        };

        // The doorbell BAR is what user contexts map; without it there are no user verbs.
        let (doorbells, kdb) = match map_doorbells(pdev, &bar, caps.db_pages) {
            Ok(d) => d,
            Err(e) => {
                release_engine(pdev, &bar, admin, eqs);
                return Err(e);
            }
        };

        let params = RegistrationParams {
            name: c"ferrdma%d",
            node_guid: ibdev::node_guid(mac),
            num_comp_vectors: nvec.saturating_sub(1).max(1),
            netdev_mac: mac,
            // An SGE describes up to a whole message; kernel ULPs (NVMe-oF) map merged
            // segments well beyond the PCI default of 64 KiB.
            max_dma_segment: caps.max_msg_size.min(hw::MAX_MSG_SIZE),
        };
        // SAFETY: The registration is stored in the driver data, which the driver core drops
        // when the device is unbound; it is never leaked.
        let ib: Registration<'_, FerrdmaIb> = unsafe {
            Registration::new(
                pdev.as_ref(),
                kernel::module::this_module::<crate::LocalModule>(),
                params,
                Some(Interrupts {
                    vectors: KBox::new(vectors, GFP_KERNEL)?,
                    name: c"ferrdma",
                }),
                IbData::new(
                    pdev.as_ref(),
                    bar,
                    admin,
                    eqs,
                    FunctionInfo {
                        kdb,
                        mac,
                        doorbells,
                        caps,
                        event_tags: version.has_event_tags(),
                    },
                ),
            )
        }?;
        ib.data().arm_eqs();
        dev_info!(pdev, "registered {}\n", ib.device().name());

        // The port's link (SET_PORT) follows the network device it is bound to: the
        // registration's netdev notifier sets it, replaying the device's current state.

        Ok(FerrdmaData { _ib: ib, pdev })
    }
}

/// Probe's part after the admin queue is up: validates QUERY_CAPS and creates the event
/// queues (into `eqs`, so that the caller can release what was made on an error).
fn bring_up_engine<'bound>(
    pdev: &'bound pci::Device<Core<'_>>,
    bar: &Bar0<'bound>,
    admin: &mut AdminQueue,
    eqs: &mut KVec<EventQueue>,
    nvec: u32,
) -> Result<Caps> {
    // The device's limits are checked here, once: the rest of the driver sees only the
    // validated `Caps`.
    let (caps, clamps) = Caps::validate(&admin.query_caps(bar)?).map_err(|r| {
        dev_err!(
            pdev,
            "QUERY_CAPS: {} = {:#x} is impossible ({}); refusing the device\n",
            r.field,
            r.value,
            r.why
        );
        r.errno()
    })?;
    for c in clamps.as_slice() {
        dev_warn!(
            pdev,
            "QUERY_CAPS: {} = {:#x} exceeds the driver's limit; using {:#x}\n",
            c.field,
            c.reported,
            c.used
        );
    }
    dev_info!(
        pdev,
        "admin queue up: fw {}.{}, {} QPs, {} CQs, {} MRs, {} PDs, {} GIDs\n",
        caps.fw_ver >> 32,
        caps.fw_ver & 0xffff,
        caps.max_qp,
        caps.max_cq,
        caps.max_mr,
        caps.max_pd,
        caps.max_gid
    );

    // One AEQ on vector 0, a CEQ on every other vector (manual, "Initialisation").
    let requested = crate::module_parameters::ceq_moderation_us.value();
    let moderation =
        crate::eq::moderation(requested, caps.max_eq_moderation_us).inspect_err(|_| {
            dev_err!(
                pdev,
                "ceq_moderation_us={} exceeds the device's limit of {} us\n",
                requested,
                caps.max_eq_moderation_us
            )
        })?;
    if moderation > 0 {
        dev_info!(pdev, "CEQ interrupt moderation: {} us\n", moderation);
    }
    eqs.reserve(nvec as usize, GFP_KERNEL)?;
    for id in 0..nvec {
        let eq = EventQueue::new(pdev.as_ref(), id)?;
        let cmd = eq.create_cmd(moderation).encode();
        // Kept before the device learns of it: a failed CREATE_EQ may still have reached it.
        eqs.push(eq, GFP_KERNEL)?;
        admin.exec(bar, &cmd)?;
    }
    Ok(caps)
}

/// The doorbell BAR of `pages` doorbell pages, which user contexts map, and page 0 of it for
/// the kernel's own queues; `(None, None)` without one (no user or kernel verbs then).
fn map_doorbells<'bound>(
    pdev: &'bound pci::Device<Core<'_>>,
    bar: &Bar0<'bound>,
    pages: u32,
) -> Result<(Option<MmioWindow<'bound>>, Option<DbPage<'bound>>)> {
    let bytes = u64::from(pages) * hw::DB_PAGE_SIZE as u64;
    if bar.read(regs::FEATURES).doorbell_bar() && pdev.resource_len(hw::DB_BAR_INDEX)? >= bytes {
        Ok((
            Some(MmioWindow::from_resource(pdev.resource(hw::DB_BAR_INDEX)?)?),
            Some(pdev.iomap_region_sized::<{ hw::DB_PAGE_SIZE }>(hw::DB_BAR_INDEX, c"ferrdma-db")?),
        ))
    } else {
        dev_warn!(pdev, "no doorbell BAR: user and kernel verbs unavailable\n");
        Ok((None, None))
    }
}

/// A probe that fails after the admin queue is up: the device knows the admin and event
/// queue rings, so they are freed only after a confirmed reset or once the function is gone
/// (all-ones reads); a device that does not confirm it but still answers may still write
/// them, and they are leaked instead.
fn release_engine(
    pdev: &pci::Device<Core<'_>>,
    bar: &Bar0<'_>,
    admin: AdminQueue,
    eqs: KVec<EventQueue>,
) {
    if let Err(status) = crate::admin::reset_engine(bar) {
        if crate::admin::device_gone(bar) {
            return;
        }
        dev_err!(
            pdev,
            "probe failed and the device did not confirm its reset (status {:#x}): leaking its admin and {} event queue rings\n",
            status,
            eqs.len()
        );
        core::mem::forget(admin);
        core::mem::forget(eqs);
    }
}

impl Drop for FerrdmaData<'_> {
    fn drop(&mut self) {
        dev_info!(self.pdev, "removed\n");
    }
}
