// SPDX-License-Identifier: GPL-2.0

//! The RDMA device: an `ib_device` named `ferrdma%d` with one RoCEv2 port, speaking the irdma
//! user ABI so that stock libirdma drives it.

use crate::{
    abi::{self, AllocPdResp, AllocUcontextReq, AllocUcontextResp},
    admin::{header, AdminQueue},
    ah::Ah,
    caps::Caps,
    cq::Cq,
    eq::EventQueue,
    event_tag::{EventTag, EventTags, Published},
    graveyard::{Graveyard, Remains},
    id_alloc::{filled, IdBitmap},
    interface as hw,
    kqp::KQp,
    mr::{Mr, RingReg},
    qp::Qp,
    regs::{Bar0, DbPage},
    sizing,
};
use kernel::{
    c_str, device,
    infiniband::{
        self, mcast::McastGid, AbandonedObject, Access, Av, CqEvents, CqInitAttr, CqNotify,
        DebugfsParam, Destroyed, DeviceAttr, DriverId, FwVersion, MmioWindow, Mtu, NewCq, NewMr,
        NewQp, QpAttr, QpAttrMask, QpEvent, QpEvents, QpInitAttr, QpQuery, QpRef, Recovery,
        RecvWrs, RocePort, SendWrs, StatDesc, UContextInit, UData, Umem, UserMrRequest, WcSink,
    },
    irq::IrqReturn,
    new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex, SpinLockIrq,
    },
    task::Kuid,
};

/// The RDMA side of the ferrdma driver.
pub(crate) struct FerrdmaIb;

/// The function as the ib_device callbacks see it: it owns the device's resources.
///
/// Dropping it resets the RDMA engine first (so the device stops using host memory), then the
/// fields go in declaration order: admin rings, event queue rings, the BAR mapping. The
/// registration frees the interrupt handlers before it drops this.
#[pin_data(PinnedDrop)]
pub(crate) struct IbData<'a> {
    /// Taken with interrupts off: commands also come from atomic context.
    #[pin]
    admin: SpinLockIrq<AdminQueue>,
    /// Event queues by id (= MSI-X vector): the AEQ, then the CEQs.
    eqs: KVec<EventQueue>,
    pub(crate) bar: Bar0<'a>,
    /// Doorbell page 0, the kernel's own (manual, "Doorbell BAR"), if the function has a
    /// doorbell BAR.
    kdb: Option<DbPage<'a>>,
    /// The PCI function, for DMA allocations.
    pub(crate) dev: &'a device::Device<device::Bound>,
    /// The port MAC, as the device reports it.
    mac: [u8; 6],
    /// The doorbell BAR, if the function has one: user contexts map their pages of it.
    doorbells: Option<MmioWindow<'a>>,
    /// The device's limits (QUERY_CAPS).
    pub(crate) caps: Caps,
    /// Taken with interrupts off: ib_cm creates and destroys AHs under its `cm_id_priv`
    /// lock, which `cm_establish` takes in hard-IRQ context when a QP event handler passes
    /// COMM_EST on (`rdma_notify`, from our AEQ interrupt). With interrupts on here, that
    /// interrupt could spin on the cm lock held by a CPU that spins on this one.
    #[pin]
    pub(crate) ids: SpinLockIrq<Ids>,
    /// Overflows and unknown entries the event queues delivered: a device can send them as
    /// fast as interrupts run, so only some are logged.
    odd_events: LogLimit,
    /// Event delivery handles by CQ and QP id, read by the interrupt handlers.
    #[pin]
    pub(crate) tables: SpinLockIrq<Tables>,
    /// Tags for the events of new CQs and QPs.
    pub(crate) event_tags: EventTags,
    /// Ring registrations waiting for (or used by) their QP or CQ.
    #[pin]
    pub(crate) rings: Mutex<KVec<Arc<RingReg>>>,
    /// The port link state last set with SET_PORT (`None` before the first): the netdev
    /// notifications that report it come far more often than it changes.
    #[pin]
    link: Mutex<Option<bool>>,
    /// What destroys on a dead device left behind; freed after the reset at removal.
    #[pin]
    pub(crate) graveyard: Graveyard,
    /// The device announced its fatal state (`DEVICE_FATAL`): no command is sent any more.
    fatal: Atomic<bool>,
    /// The admin queue found the device dead (see [`AdminQueue::exec`]); a copy of its flag
    /// that the data path reads without the admin lock.
    admin_dead: Atomic<bool>,
    /// The reset of the function after a fatal error (a re-probe), requested at most once.
    recovery: Recovery,
}

/// Ids handed out to verbs objects.
pub(crate) struct Ids {
    /// Doorbell pages, one per user context.
    db_pages: IdBitmap,
    /// The user (effective uid) that opened the context owning each doorbell page.
    db_owners: KVVec<Option<Kuid>>,
    /// Protection domain numbers; 0 is never used.
    pds: IdBitmap,
    /// CQ ids.
    pub(crate) cqs: IdBitmap,
    /// QP ids (0 and 1 are reserved).
    pub(crate) qps: IdBitmap,
    /// MR table indexes.
    pub(crate) mrs: IdBitmap,
    /// The consumer key each MR table entry had last: its next key differs, so a key kept
    /// after deregistration misses whoever takes the entry next.
    pub(crate) mr_keys: KVVec<u8>,
    /// AH ids.
    pub(crate) ahs: IdBitmap,
}

/// CQs and QPs the interrupt handlers may deliver events to, with their event tags.
pub(crate) struct Tables {
    cqs: KVVec<Option<Published<CqEvents>>>,
    qps: KVVec<Option<Published<QpEvents>>>,
    /// The rings of kernel QPs, for polling their CQEs.
    kqps: KVVec<Option<Arc<KQp>>>,
}

impl Tables {
    /// Event handles and kernel QP rings still published: CQs, QPs, kernel QPs.
    fn in_use(&self) -> [usize; 3] {
        [
            self.cqs.iter().filter(|e| e.is_some()).count(),
            self.qps.iter().filter(|e| e.is_some()).count(),
            self.kqps.iter().filter(|e| e.is_some()).count(),
        ]
    }

    fn new() -> Result<Self> {
        let mut cqs = KVVec::with_capacity(hw::MAX_CQ as usize, GFP_KERNEL)?;
        let mut qps = KVVec::with_capacity(hw::MAX_QP as usize, GFP_KERNEL)?;
        for _ in 0..hw::MAX_CQ {
            cqs.push(None, GFP_KERNEL)?;
        }
        let mut kqps = KVVec::with_capacity(hw::MAX_QP as usize, GFP_KERNEL)?;
        for _ in 0..hw::MAX_QP {
            qps.push(None, GFP_KERNEL)?;
            kqps.push(None, GFP_KERNEL)?;
        }
        Ok(Self { cqs, qps, kqps })
    }

    pub(crate) fn set_kqp(&mut self, id: u32, v: Option<Arc<KQp>>) {
        if let Some(slot) = self.kqps.get_mut(id as usize) {
            *slot = v;
        }
    }

    /// The rings of kernel QP `id`.
    pub(crate) fn kqp(&self, id: usize) -> Option<Arc<KQp>> {
        self.kqps.get(id).cloned().flatten()
    }

    /// Publishes (or with `None` withdraws) the event handle of CQ `id`.
    pub(crate) fn set_cq(&mut self, id: u32, v: Option<Published<CqEvents>>) {
        if let Some(slot) = self.cqs.get_mut(id as usize) {
            *slot = v;
        }
    }

    /// The event handle of CQ `id`, if it has one and the event's `tag` is its own (a
    /// clone, so delivery runs unlocked).
    fn cq(&self, id: usize, tag: EventTag) -> Option<CqEvents> {
        self.cqs.get(id)?.as_ref()?.for_event(tag)
    }

    /// The event handle of QP `id`, as for [`Self::cq`].
    fn qp(&self, id: usize, tag: EventTag) -> Option<QpEvents> {
        self.qps.get(id)?.as_ref()?.for_event(tag)
    }

    /// Publishes (or with `None` withdraws) the event handle of QP `id`.
    pub(crate) fn set_qp(&mut self, id: u32, v: Option<Published<QpEvents>>) {
        if let Some(slot) = self.qps.get_mut(id as usize) {
            *slot = v;
        }
    }
}

/// Protection domains per function.
const MAX_PD: u32 = 1 << 16;

/// Bounds how often a condition the device can repeat at will is logged (interrupt handlers
/// cannot afford a line per event): the first [`Self::FIRST`], then one in
/// [`Self::EVERY`].
pub(crate) struct LogLimit {
    seen: Atomic<u32>,
}

impl LogLimit {
    const FIRST: u32 = 10;
    const EVERY: u32 = 1000;

    pub(crate) const fn new() -> Self {
        Self {
            seen: Atomic::new(0),
        }
    }

    /// Counts one occurrence; returns the count so far when this one should be logged.
    pub(crate) fn report(&self) -> Option<u32> {
        let n = self.seen.fetch_add(1, Relaxed).wrapping_add(1);
        log_this(n).then_some(n)
    }
}

/// Whether the `n`-th occurrence (from 1) is logged.
const fn log_this(n: u32) -> bool {
    n <= LogLimit::FIRST || n % LogLimit::EVERY == 0
}

/// User contexts one user may hold of a device of `db_pages` doorbell pages: a quarter of
/// them (1024 of [`hw::DB_PAGES`]; page 0 is the kernel's), so that one unprivileged user
/// cannot lock everyone else out of the device.
pub(crate) const fn max_contexts_per_user(db_pages: u32) -> usize {
    db_pages as usize / 4
}

impl Ids {
    /// Every pool empty. Everything big is on the heap (see [`IdBitmap`]): this value is
    /// built on the stack of probe.
    fn new() -> Result<Self> {
        Ok(Self {
            db_pages: IdBitmap::new(hw::DB_PAGES)?,
            db_owners: filled(hw::DB_PAGES, None)?,
            pds: IdBitmap::new(MAX_PD)?,
            cqs: IdBitmap::new(hw::MAX_CQ)?,
            qps: IdBitmap::new(hw::MAX_QP)?,
            mrs: IdBitmap::new(hw::MAX_MR)?,
            mr_keys: filled(hw::MAX_MR, 0)?,
            ahs: IdBitmap::new(hw::MAX_AH)?,
        })
    }

    /// Takes one of the first `db_pages` doorbell pages for a context of user `uid`: `EDQUOT`
    /// when the user holds [`max_contexts_per_user`] already, `ENOMEM` when none is free.
    fn alloc_db_page(&mut self, uid: Kuid, db_pages: u32) -> Result<u32> {
        let held = self
            .db_owners
            .iter()
            .filter(|o| o.is_some_and(|u| u == uid))
            .count();
        if held >= max_contexts_per_user(db_pages) {
            return Err(EDQUOT);
        }
        let page = self.db_pages.alloc_in(1, db_pages).ok_or(ENOMEM)?;
        if let Some(o) = self.db_owners.get_mut(page as usize) {
            *o = Some(uid);
        }
        Ok(page)
    }

    fn free_db_page(&mut self, page: u32) {
        if let Some(o) = self.db_owners.get_mut(page as usize) {
            *o = None;
        }
        self.db_pages.free(page);
    }

    /// Ids still taken, by kind: doorbell pages, PDs, CQs, QPs, MRs, AHs.
    fn in_use(&self) -> [u32; 6] {
        [
            self.db_pages.in_use(),
            self.pds.in_use(),
            self.cqs.in_use(),
            self.qps.in_use(),
            self.mrs.in_use(),
            self.ahs.in_use(),
        ]
    }
}

/// What probe found out about the function.
pub(crate) struct FunctionInfo<'a> {
    pub(crate) kdb: Option<DbPage<'a>>,
    pub(crate) mac: [u8; 6],
    pub(crate) doorbells: Option<MmioWindow<'a>>,
    pub(crate) caps: Caps,
    /// The device echoes event tags (interface 1.3).
    pub(crate) event_tags: bool,
}

impl<'a> IbData<'a> {
    /// Takes over a probed function's BAR, running admin queue and created event queues.
    pub(crate) fn new(
        dev: &'a device::Device<device::Bound>,
        bar: Bar0<'a>,
        admin: AdminQueue,
        eqs: KVec<EventQueue>,
        info: FunctionInfo<'a>,
    ) -> impl PinInit<Self, Error> + 'a {
        try_pin_init!(Self {
            admin <- new_spinlock_irq!(admin),
            eqs,
            bar,
            kdb: info.kdb,
            dev,
            mac: info.mac,
            doorbells: info.doorbells,
            caps: info.caps,
            ids <- new_spinlock_irq!(Ids::new()?),
            odd_events: LogLimit::new(),
            tables <- new_spinlock_irq!(Tables::new()?),
            event_tags: EventTags::new(info.event_tags),
            rings <- new_mutex!(KVec::new()),
            link <- new_mutex!(None),
            graveyard <- Graveyard::new(),
            fatal: Atomic::new(false),
            admin_dead: Atomic::new(false),
            recovery: Recovery::new()?,
        }? Error)
    }

    /// Doorbell page 0, for kernel QPs and CQs; `EOPNOTSUPP` without a doorbell BAR.
    pub(crate) fn kernel_doorbells(&self) -> Result<&DbPage<'a>> {
        self.kdb.as_ref().ok_or(EOPNOTSUPP)
    }

    /// Runs one admin command; `EIO` at once on a device in its fatal state.
    pub(crate) fn admin(&self, cmd: &[u8; hw::ADMIN_CMD_SIZE]) -> Result<u32> {
        self.with_admin(|q, bar| q.exec(bar, cmd))
    }

    /// The device's view of QP `id`.
    pub(crate) fn query_device_qp(&self, id: u32) -> Result<hw::QpQueryOut> {
        self.with_admin(|q, bar| q.query_qp(bar, id))
    }

    /// The port's counters from the device (QUERY_COUNTERS).
    pub(crate) fn query_port_counters(&self) -> Result<hw::PortCounters> {
        self.with_admin(|q, bar| q.query_counters(bar))
    }

    /// Runs `f` on the admin queue unless the device is in its fatal state (`EIO`), then
    /// notes whether the queue found the device dead.
    fn with_admin<R>(&self, f: impl FnOnce(&mut AdminQueue, &Bar0<'a>) -> Result<R>) -> Result<R> {
        if self.is_fatal() {
            return Err(EIO);
        }
        let mut q = self.admin.lock();
        let r = f(&mut q, &self.bar);
        let death = q.death();
        drop(q);
        self.note_admin_dead(death);
        r
    }

    /// After an admin command: if the queue found the device dead (a timeout, a stray
    /// completion, the FATAL status), the data path learns it and, the first time, the
    /// function is reset by probing it again, as irdma asks ice for a reset when a CQP
    /// command times out. A device that still does not answer then fails that probe and
    /// stays unbound. Any context.
    fn note_admin_dead(&self, death: Option<&'static str>) {
        let Some(why) = death else {
            return;
        };
        if self.admin_dead.xchg(true, Relaxed) || self.is_fatal() {
            // Known already; `on_fatal` does the rest for an announced fatal state.
            return;
        }
        dev_err!(self.dev, "admin queue: {}; resetting the device\n", why);
        self.request_reset();
    }

    /// Asks for the dead device's reset by a re-probe (at most once; see [`Recovery`]).
    fn request_reset(&self) {
        if let Err(e) = self.recovery.request(self.dev) {
            dev_err!(
                self.dev,
                "cannot queue the reset ({:?}); the device stays dead until it is removed\n",
                e
            );
        }
    }

    /// Whether the device announced its fatal state.
    fn is_fatal(&self) -> bool {
        self.fatal.load(Relaxed)
    }

    /// The device announced its fatal state (manual, "Fatal errors"). Interrupt context.
    ///
    /// From now on no command is sent (each would fail) and destroys abandon their objects
    /// to the graveyard; ib_core's clients and user contexts get `IB_EVENT_DEVICE_FATAL`,
    /// and the function is reset by probing it again: the removal this starts resets the
    /// device and frees the graveyard, the probe registers a new RDMA device.
    fn on_fatal(&self, dev: &infiniband::Device<FerrdmaIb>, cause: u32) {
        if self.fatal.xchg(true, Relaxed) {
            return;
        }
        dev_err!(
            self.dev,
            "the device reported a fatal error (cause {}); resetting it\n",
            cause
        );
        dev.report_fatal();
        // Work outstanding on kernel QPs will never complete in the device: consumers
        // waiting for it get their flushes now (ULPs drain their QPs before they let go).
        for id in 0..hw::MAX_QP as usize {
            let qp = self.tables.lock().kqp(id);
            if let Some(qp) = qp {
                self.kick_dead_qp(&qp);
            }
        }
        self.request_reset();
    }

    /// Runs a DESTROY_* or DEREG_MR command for object `id`.
    pub(crate) fn destroy_object(&self, opcode: u8, id: u32) -> Result {
        let mut cmd = hw::DestroyObject::decode(&[0; hw::DestroyObject::SIZE]);
        cmd.hdr = header(opcode);
        cmd.id = id;
        self.admin(&cmd.encode()).map(|_| ())
    }

    /// Whether the device is in its fatal state or stopped following the admin protocol (a
    /// command timed out).
    pub(crate) fn device_dead(&self) -> bool {
        self.is_fatal() || self.admin_dead.load(Relaxed)
    }

    /// Destroys device object `id` for a destroy verb: `Released` when the device did;
    /// `Abandoned` when the device is dead, so the verb still succeeds (ib_core and its
    /// users can tear down) while the object's memory is leaked, not freed under a device
    /// that may still access it; the device's error otherwise (the object stays).
    pub(crate) fn retire(&self, opcode: u8, id: u32) -> Result<Destroyed> {
        match self.destroy_object(opcode, id) {
            Ok(()) => Ok(Destroyed::Released),
            Err(_) if self.device_dead() => Ok(Destroyed::Abandoned),
            Err(e) => Err(e),
        }
    }

    /// Number of completion event queues.
    pub(crate) fn ceqs(&self) -> u32 {
        self.eqs.len().saturating_sub(1) as u32
    }

    /// Arms every event queue; called once the interrupt handlers are registered.
    pub(crate) fn arm_eqs(&self) {
        for eq in self.eqs.iter() {
            eq.arm_current(&self.bar);
        }
    }

    /// Delivers one event queue entry of `dev`. Interrupt context.
    fn dispatch(&self, dev: &infiniband::Device<FerrdmaIb>, e: &hw::Eqe) {
        use hw::{ae, eqe_kind};
        let id = e.id as usize;
        let tag = EventTag::from_eqe(e.tag);
        match (e.kind, e.code) {
            (eqe_kind::CQ, ae::CQ_COMPLETION) => {
                let h = self.tables.lock().cq(id, tag);
                if let Some(h) = h {
                    h.completion();
                }
            }
            (eqe_kind::CQ, ae::CQ_OVERFLOW | ae::CQ_ACCESS) => {
                let h = self.tables.lock().cq(id, tag);
                if let Some(h) = h {
                    h.error();
                }
            }
            (eqe_kind::QP, code) => {
                let ev = match code {
                    ae::QP_LOCAL_ACCESS | ae::QP_REMOTE_ACCESS => QpEvent::AccessError,
                    ae::QP_INVALID_REQUEST => QpEvent::RequestError,
                    ae::QP_COMM_EST => QpEvent::CommEstablished,
                    ae::QP_SQ_DRAINED => QpEvent::SqDrained,
                    _ => QpEvent::Fatal,
                };
                let h = self.tables.lock().qp(id, tag);
                if let Some(h) = h {
                    h.event(ev);
                }
            }
            // Port state follows the bound netdev in ib_core; nothing to add here.
            (eqe_kind::PORT, _) => {}
            (eqe_kind::DEVICE, ae::DEVICE_FATAL) => self.on_fatal(dev, e.info),
            (_, ae::EQ_OVERFLOW) => {
                if let Some(n) = self.odd_events.report() {
                    pr_warn!(
                        "event queue {} overflowed, events lost ({} odd events)\n",
                        e.id,
                        n
                    );
                }
            }
            _ => {
                if let Some(n) = self.odd_events.report() {
                    pr_warn!(
                        "unknown event kind {} code {:#x} ({} odd events)\n",
                        e.kind,
                        e.code,
                        n
                    );
                }
            }
        }
    }
}

#[pinned_drop]
impl PinnedDrop for IbData<'_> {
    fn drop(self: Pin<&mut Self>) {
        // ib_core has destroyed every object by now (the registration unregistered the
        // device first): an id or handle still held is a create or destroy path that forgot
        // to give it back.
        let ids = self.ids.lock().in_use();
        let handles = self.tables.lock().in_use();
        if kernel::warn_on!(ids.iter().any(|&n| n != 0) || handles.iter().any(|&n| n != 0)) {
            dev_err!(
                self.dev,
                "leaked at removal: {} doorbell pages, {} PDs, {} CQs, {} QPs, {} MRs, {} AHs; \
                 published: {} CQ handles, {} QP handles, {} kernel QPs\n",
                ids[0],
                ids[1],
                ids[2],
                ids[3],
                ids[4],
                ids[5],
                handles[0],
                handles[1],
                handles[2]
            );
        }
        if crate::fault::injected() > 0 {
            dev_info!(
                self.dev,
                "fault injection: {} steps failed\n",
                crate::fault::injected()
            );
        }
        let reset = crate::admin::reset_engine(&self.bar);
        let buried = self.graveyard.len();
        if buried > 0 {
            match reset {
                Ok(()) => dev_info!(
                    self.dev,
                    "freeing {} objects abandoned by the dead device after its reset\n",
                    buried
                ),
                Err(_) if crate::admin::device_gone(&self.bar) => dev_info!(
                    self.dev,
                    "freeing {} objects abandoned by the dead device: it is gone (all-ones reads)\n",
                    buried
                ),
                Err(status) => {
                    dev_err!(
                        self.dev,
                        "device did not confirm its reset (status {:#x}): leaking {} abandoned objects\n",
                        status,
                        buried
                    );
                    self.graveyard.leak();
                }
            }
        }
    }
}

/// The ADD_GID or DEL_GID command for table entry `index`.
pub(crate) fn gid_cmd(opcode: u8, index: u32, gid: [u8; 16], mac: [u8; 6]) -> hw::GidCmd {
    hw::GidCmd {
        hdr: header(opcode),
        index,
        rsvd0: 0,
        gid,
        mac,
        rsvd1: [0; 2],
        rsvd: [0; 32],
        rsvd2: [0; 32],
        rsvd3: [0; 24],
    }
}

/// The SET_PORT command: port MAC, link state and MTU (an IB MTU enum value).
pub(crate) fn set_port_cmd(mac: [u8; 6], up: bool, mtu: Mtu) -> hw::SetPort {
    hw::SetPort {
        hdr: header(hw::admin_op::SET_PORT),
        mac,
        link: if up { hw::LINK_UP } else { hw::LINK_DOWN },
        mtu: mtu as u8,
        rsvd: [0; 32],
        rsvd1: [0; 32],
        rsvd2: [0; 32],
        rsvd3: [0; 16],
    }
}

impl IbData<'_> {
    /// Sets the port's link state (with its MAC and the largest MTU).
    pub(crate) fn set_link(&self, up: bool) -> Result {
        self.admin(&set_port_cmd(self.mac, up, Mtu::Mtu4096).encode())
            .map(|_| ())
    }
}

/// A user context: it owns one doorbell page, mapped into its process.
pub(crate) struct UContext {
    db_page: u32,
}

impl UContext {
    /// The context's doorbell page (also its unique id).
    pub(crate) fn db_page(&self) -> u32 {
        self.db_page
    }
}

/// A protection domain.
pub(crate) struct Pd {
    id: u32,
}

impl Pd {
    /// The PD number.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

/// The user context response for a device with limits `caps`.
fn ucontext_resp(caps: &Caps, db_mmap_key: u64) -> AllocUcontextResp {
    AllocUcontextResp {
        max_pds: caps.max_pd.min(MAX_PD) - 1,
        max_qps: caps.max_qp - 1,
        wq_size: caps.max_sq_quanta,
        kernel_ver: abi::IRDMA_ABI_VER as u8,
        feature_flags: abi::FEATURE_CQ_RESIZE,
        db_mmap_key,
        max_hw_wq_frags: caps.max_sge.into(),
        max_hw_read_sges: caps.max_read_sge.into(),
        max_hw_inline: caps.max_inline.into(),
        max_hw_rq_quanta: caps.max_rq_quanta,
        max_hw_wq_quanta: caps.max_sq_quanta,
        min_hw_cq_size: 1,
        max_hw_cq_size: sizing::max_hw_cq_size(caps.max_cq_entries),
        max_hw_sq_chunk: caps.sq_chunk_quanta.into(),
        hw_rev: caps.hw_rev,
        comp_mask: abi::ALLOC_UCTX_USE_RAW_ATTR | abi::ALLOC_UCTX_MIN_HW_WQ_SIZE,
        min_hw_wq_size: caps.min_wq_quanta,
    }
}

/// The node GUID of a function: the modified EUI-64 of its MAC, as RoCE devices do.
pub(crate) const fn node_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// Formats a MAC the usual way, for log lines.
pub(crate) struct MacFmt(pub(crate) [u8; 6]);

impl kernel::fmt::Display for MacFmt {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

#[vtable]
impl infiniband::Driver for FerrdmaIb {
    type RegistrationData<'a> = IbData<'a>;
    type UContext = UContext;
    type Pd = Pd;
    type Mr = Mr;
    type Cq = Cq;
    type Qp = Qp;
    type Ah = Ah;

    const DRIVER_ID: DriverId = DriverId::Irdma;
    // The irdma user ABI version libirdma accepts (0..=5).
    const UVERBS_ABI_VER: u32 = 5;

    const PORT_COUNTERS: &'static [StatDesc] = &crate::counters::PORT_COUNTERS;

    const DEBUGFS_DIR: &'static CStr = c_str!("ferrdma");
    const DEBUGFS_PARAMS: &'static [DebugfsParam] = &crate::cc_params::PARAMS;

    fn read_param(data: &IbData<'_>, index: usize) -> Result<u32> {
        data.admin(&crate::cc_params::query_cmd(crate::cc_params::id(index)?))
    }

    fn write_param(data: &IbData<'_>, index: usize, value: u32) -> Result {
        let cmd = crate::cc_params::set_cmd(crate::cc_params::id(index)?, value);
        data.admin(&cmd).map(|_| ())
    }

    fn port_counters(data: &IbData<'_>, _port: u32, values: &mut [u64]) -> Result {
        let c = data.query_port_counters()?;
        crate::counters::values(&c, values)
    }

    fn fw_version(data: &IbData<'_>) -> Option<FwVersion> {
        Some(FwVersion {
            major: (data.caps.fw_ver >> 32) as u32 & 0xffff,
            minor: data.caps.fw_ver as u32 & 0xffff,
        })
    }

    fn query_device(data: &IbData<'_>) -> DeviceAttr {
        let c = &data.caps;
        let fast_reg_pages = if data.kdb.is_some() {
            c.max_fast_reg_pages.min(hw::MAX_FAST_REG_PAGES)
        } else {
            0
        };
        DeviceAttr {
            fw_ver: c.fw_ver,
            sys_image_guid: node_guid(data.mac),
            max_mr_size: sizing::max_mr_size(c),
            page_size_cap: c.page_size_cap,
            vendor_id: u32::from(crate::interface::PCI_VENDOR_ID),
            vendor_part_id: u32::from(crate::interface::PCI_DEVICE_ID),
            hw_ver: c.hw_rev.into(),
            // The object limits are what can exist, as irdma reports them: the driver never
            // hands out id 0 of the QP, CQ, MR (STag index), AH and PD tables.
            max_qp: c.max_qp - 1,
            max_qp_wr: sizing::max_qp_wr(c),
            max_send_sge: c.max_sge.into(),
            max_recv_sge: c.max_sge.into(),
            max_sge_rd: c.max_read_sge.into(),
            max_cq: c.max_cq - 1,
            max_cqe: sizing::max_cqe(c.max_cq_entries),
            max_mr: c.max_mr - 1,
            max_pd: c.max_pd.min(MAX_PD) - 1,
            max_qp_rd_atom: c.max_rd_atomic.into(),
            max_qp_init_rd_atom: c.max_rd_atomic.into(),
            max_res_rd_atom: u32::from(c.max_rd_atomic).saturating_mul(c.max_qp),
            max_ah: c.max_ah - 1,
            max_mcast_grp: c.max_mcast_grp.into(),
            max_mcast_qp_attach: c.max_mcast_qp_attach.into(),
            max_total_mcast_qp_attach: u32::from(c.max_mcast_grp)
                * u32::from(c.max_mcast_qp_attach),
            max_pkeys: 1,
            local_ca_ack_delay: 16,
            local_dma_lkey: data.kdb.as_ref().map(|_| hw::LOCAL_DMA_STAG),
            // Fast registration needs kernel QPs (privileged, on the kernel doorbell page).
            device_cap_flags: if fast_reg_pages > 0 {
                DeviceAttr::CAP_MEM_MGT_EXTENSIONS
            } else {
                0
            },
            max_fast_reg_page_list_len: fast_reg_pages,
            ..DeviceAttr::default()
        }
    }

    fn alloc_ucontext(
        data: &IbData<'_>,
        ctx: &mut UContextInit<'_>,
        udata: &mut UData<'_>,
    ) -> Result<UContext> {
        let mut req = [0u8; AllocUcontextReq::SIZE];
        udata.read_in(&mut req)?;
        let req = AllocUcontextReq::decode(&req);
        // libirdma sends 5 and retries with 4; unknown comp_mask bits are ignored on purpose
        // (the retry repeats them, so refusing would lock out newer libraries).
        if !(4..=5).contains(&req.userspace_ver) {
            return Err(EINVAL);
        }
        // 16 bytes of response is the legacy i40iw library, which cannot drive GEN_2 queues.
        if udata.outlen() < 64 {
            return Err(EOPNOTSUPP);
        }
        let doorbells = data.doorbells.as_ref().ok_or(EOPNOTSUPP)?;
        crate::fault::step()?;
        // Page 0 is the kernel's own (manual, "Doorbell BAR").
        let db_page = data
            .ids
            .lock()
            .alloc_db_page(Kuid::current_euid(), data.caps.db_pages)?;
        // A failure after the insertion needs no undo here: the abstraction withdraws the
        // offer when alloc_ucontext fails.
        let offered = crate::fault::step()
            .and_then(|()| {
                ctx.insert_io_mmap(
                    doorbells,
                    u64::from(db_page) * hw::DB_PAGE_SIZE as u64,
                    hw::DB_PAGE_SIZE,
                )
            })
            .and_then(|key| {
                crate::fault::step()?;
                udata.respond(&ucontext_resp(&data.caps, key).encode())
            });
        match offered {
            Ok(()) => Ok(UContext { db_page }),
            Err(e) => {
                data.ids.lock().free_db_page(db_page);
                Err(e)
            }
        }
    }

    fn dealloc_ucontext(data: &IbData<'_>, ctx: UContext) {
        // The abstraction has withdrawn the page's mapping offer by now.
        data.ids.lock().free_db_page(ctx.db_page);
    }

    fn alloc_pd(data: &IbData<'_>, udata: Option<&mut UData<'_>>) -> Result<Pd> {
        crate::fault::step()?;
        let id = data
            .ids
            .lock()
            .pds
            .alloc_in(1, data.caps.max_pd.min(MAX_PD))
            .ok_or(ENOMEM)?;
        if let Some(u) = udata {
            if let Err(e) =
                crate::fault::step().and_then(|()| u.respond(&AllocPdResp { pd_id: id }.encode()))
            {
                data.ids.lock().pds.free(id);
                return Err(e);
            }
        }
        Ok(Pd { id })
    }

    fn dealloc_pd(data: &IbData<'_>, pd: Pd) {
        data.ids.lock().pds.free(pd.id);
    }

    fn add_gid(data: &IbData<'_>, _port: u32, index: u32, gid: &[u8; 16]) -> Result {
        let cmd = gid_cmd(hw::admin_op::ADD_GID, index, *gid, data.mac);
        data.admin(&cmd.encode()).map(|_| ())
    }

    fn del_gid(data: &IbData<'_>, _port: u32, index: u32) -> Result {
        let cmd = gid_cmd(hw::admin_op::DEL_GID, index, [0; 16], [0; 6]);
        data.admin(&cmd.encode()).map(|_| ())
    }

    fn query_port(data: &IbData<'_>, _port: u32) -> RocePort {
        RocePort {
            gid_tbl_len: data.caps.max_gid,
            max_mtu: Mtu::Mtu4096,
            max_msg_sz: data.caps.max_msg_size,
        }
    }

    fn netdev_link(data: &IbData<'_>, up: bool) {
        // One port for LAN and RDMA: the interface going down or losing its carrier takes
        // the RDMA link with it (RC requests then fail with RETRY_EXC, as on a pulled cable).
        let mut last = data.link.lock();
        if *last == Some(up) {
            return;
        }
        match data.set_link(up) {
            Ok(()) => *last = Some(up),
            Err(e) => pr_warn!("SET_PORT link {} failed: {:?}\n", up, e),
        }
    }

    fn handle_irq(
        data: &IbData<'_>,
        dev: &infiniband::Device<FerrdmaIb>,
        vector: u32,
    ) -> IrqReturn {
        let Some(eq) = data.eqs.get(vector as usize) else {
            return IrqReturn::None;
        };
        eq.drain(&data.bar, |e| data.dispatch(dev, e));
        // MSI-X vectors are never shared: an interrupt without entries is still ours.
        IrqReturn::Handled
    }

    fn reg_user_mr(
        data: &IbData<'_>,
        ctx: &UContext,
        pd: &Pd,
        req: &UserMrRequest,
        umem: Umem,
        udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        data.reg_user_mr(ctx, pd, req, umem, udata)
    }

    fn reg_user_mr_dmabuf(
        data: &IbData<'_>,
        _ctx: &UContext,
        pd: &Pd,
        req: &UserMrRequest,
        umem: Umem,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        // An ordinary memory region whose pages the exporter pinned: libirdma sends no driver
        // data with it (ring registrations are never dma-bufs).
        data.reg_mem(pd, req, umem)
    }

    fn rereg_user_mr(
        data: &IbData<'_>,
        _ctx: &UContext,
        old: &Mr,
        pd: &Pd,
        req: &UserMrRequest,
        umem: Umem,
        udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        data.rereg_user_mr(old, pd, req, umem, udata)
    }

    fn dereg_mr(data: &IbData<'_>, mr: &Mr) -> Result<Destroyed> {
        data.dereg_mr(mr)
    }

    fn create_cq(
        data: &IbData<'_>,
        ctx: &UContext,
        attr: &CqInitAttr,
        events: CqEvents,
        udata: &mut UData<'_>,
    ) -> Result<NewCq<Cq>> {
        data.create_cq(ctx, attr, events, udata)
    }

    fn destroy_cq(data: &IbData<'_>, cq: &Cq) -> Result<Destroyed> {
        data.destroy_cq(cq)
    }

    fn create_kernel_cq(
        data: &IbData<'_>,
        attr: &CqInitAttr,
        events: CqEvents,
    ) -> Result<NewCq<Cq>> {
        data.create_kernel_cq(attr, events)
    }

    fn resize_user_cq(
        data: &IbData<'_>,
        ctx: &UContext,
        cq: &Cq,
        cqe: u32,
        udata: &mut UData<'_>,
    ) -> Result<u32> {
        data.resize_user_cq(ctx, cq, cqe, udata)
    }

    fn poll_cq(data: &IbData<'_>, cq: &Cq, out: &mut WcSink<'_>) -> Result {
        // User CQs are libirdma's to poll. ib_core keeps the legacy uverbs POLL_CQ command
        // away from us (it is not in uverbs_cmd_mask); refusing is the backstop.
        data.poll_kernel_cq(cq.kernel().ok_or(EINVAL)?, out)
    }

    fn req_notify_cq(data: &IbData<'_>, cq: &Cq, how: CqNotify) -> Result<bool> {
        data.arm_kernel_cq(cq.kernel().ok_or(EINVAL)?, how)
    }

    fn create_kernel_qp(
        data: &IbData<'_>,
        pd: &Pd,
        attr: &mut QpInitAttr<'_, Self>,
        events: QpEvents,
        qp: QpRef,
    ) -> Result<NewQp<Qp>> {
        data.create_kernel_qp(pd, attr, events, qp)
    }

    fn post_send(data: &IbData<'_>, qp: &Qp, wrs: &mut SendWrs<'_, Self>) -> Result {
        // User QPs post through libirdma; as for poll_cq, refusing is the backstop.
        data.post_kernel_send(qp.kernel_rings().ok_or(EINVAL)?, wrs)
    }

    fn post_recv(data: &IbData<'_>, qp: &Qp, wrs: &mut RecvWrs<'_>) -> Result {
        data.post_kernel_recv(qp.kernel_rings().ok_or(EINVAL)?, wrs)
    }

    fn get_dma_mr(data: &IbData<'_>, _pd: &Pd, access: Access) -> Result<NewMr<Mr>> {
        data.kernel_doorbells()?;
        data.get_dma_mr(access)
    }

    fn alloc_mr(data: &IbData<'_>, pd: &Pd, max_num_sg: u32) -> Result<NewMr<Mr>> {
        data.alloc_fast_reg_mr(pd, max_num_sg)
    }

    fn mr_reset_pages(mr: &Mr) -> Result {
        match mr {
            Mr::FastReg(f) => {
                f.reset();
                Ok(())
            }
            _ => Err(EINVAL),
        }
    }

    fn mr_set_page(mr: &Mr, addr: u64) -> Result {
        match mr {
            Mr::FastReg(f) => f.push(addr),
            _ => Err(EINVAL),
        }
    }

    fn create_qp(
        data: &IbData<'_>,
        ctx: &UContext,
        pd: &Pd,
        attr: &mut QpInitAttr<'_, Self>,
        events: QpEvents,
        udata: &mut UData<'_>,
    ) -> Result<NewQp<Qp>> {
        data.create_qp(ctx, pd, attr, events, udata)
    }

    fn modify_qp(
        data: &IbData<'_>,
        qp: &Qp,
        attr: &QpAttr,
        mask: QpAttrMask,
        udata: Option<&mut UData<'_>>,
    ) -> Result {
        data.modify_qp(qp, attr, mask, udata)
    }

    fn query_qp(data: &IbData<'_>, qp: &Qp) -> Result<QpQuery> {
        data.query_qp(qp)
    }

    fn destroy_qp(data: &IbData<'_>, qp: &Qp) -> Result<Destroyed> {
        data.destroy_qp(qp)
    }

    fn abandon(data: &IbData<'_>, obj: AbandonedObject<Self>) {
        data.graveyard.bury(Remains::Object(obj));
    }

    fn create_ah(
        data: &IbData<'_>,
        pd: &Pd,
        av: &Av,
        _sleepable: bool,
        udata: Option<&mut UData<'_>>,
    ) -> Result<Ah> {
        data.create_ah(pd, av, udata)
    }

    fn destroy_ah(data: &IbData<'_>, ah: &Ah, _sleepable: bool) -> Result {
        data.destroy_ah(ah)
    }

    fn query_ah(_data: &IbData<'_>, ah: &Ah) -> Result<Av> {
        Ok(ah.av())
    }

    fn attach_mcast(data: &IbData<'_>, qp: &Qp, gid: &McastGid) -> Result {
        data.mcast(true, qp, gid)
    }

    fn detach_mcast(data: &IbData<'_>, qp: &Qp, gid: &McastGid) -> Result {
        data.mcast(false, qp, gid)
    }
}

#[kunit_tests(ferrdma_ibdev)]
mod tests {
    use super::*;

    #[test]
    fn odd_events_are_logged_first_then_sparsely() {
        let logged: KVec<u32> = {
            let mut v = KVec::new();
            for n in 1..=3000 {
                if log_this(n) {
                    let _ = v.push(n, GFP_KERNEL);
                }
            }
            v
        };
        assert_eq!(logged.len(), 13);
        assert_eq!(logged[9], 10);
        assert_eq!(&logged[10..], &[1000, 2000, 3000]);
    }

    #[test]
    fn gid_and_port_commands_put_fields_at_the_manuals_offsets() {
        let gid = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0xfe, 0x10, 0x01,
        ];
        let b = gid_cmd(hw::admin_op::ADD_GID, 3, gid, [1, 2, 3, 4, 5, 6]).encode();
        assert_eq!(b[0], 0x0d);
        assert_eq!(b[8], 3);
        assert_eq!(&b[16..32], &gid);
        assert_eq!(&b[32..38], &[1, 2, 3, 4, 5, 6]);
        let b = set_port_cmd([1, 2, 3, 4, 5, 6], true, Mtu::Mtu4096).encode();
        assert_eq!(b[0], 0x0f);
        assert_eq!(&b[8..14], &[1, 2, 3, 4, 5, 6]);
        assert_eq!((b[14], b[15]), (hw::LINK_UP, 5));
    }

    #[test]
    fn node_guid_is_the_modified_eui64_of_the_mac() {
        assert_eq!(
            node_guid([0x52, 0x54, 0x00, 0xfe, 0x10, 0x01]),
            0x5054_00ff_fefe_1001
        );
        assert_eq!(node_guid([0, 0, 0, 0, 0, 0]), 0x0200_00ff_fe00_0000);
    }
}
