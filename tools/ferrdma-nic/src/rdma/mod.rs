//! The RDMA engine of interface 2.0: admin queue, event queues, CQs, QPs, MRs, AHs, the GID
//! table and local loopback. The register file (BAR0 0x010, 0x200..) and the doorbell BAR
//! enter here; everything else is reached through guest memory and MSI-X.
//!
//! The engine is synchronous: a doorbell or admin tail write does all the work it triggers
//! before it returns, then raises the interrupts that became due (one per armed EQ).

mod ack_coalescing;
mod admin;
pub mod caps;
mod commands;
pub mod congestion;
mod counters;
pub mod cq;
pub mod dcqcn;
pub mod eq;
mod exec;
pub mod grh;
pub mod mcast;
pub mod mr;
pub mod pagelist;
mod path;
pub mod pause;
pub mod qp;
mod requester;
pub mod resources;
mod responder;
pub mod ring;
pub mod sabotage;
pub mod seglist;
mod table;
pub mod transport;
pub mod wqe;

use std::collections::BTreeSet;

use std::collections::VecDeque;
use std::sync::Arc;
use table::Table;

use crate::dma::GuestMemory;
use crate::interface::{
    eqe_kind, Eqe, PortCounters, QpAttrs, Stats, DB_BAR_SIZE, DB_CQ_ARM_OFFSET, DB_PAGE_SIZE,
    DB_SQ_OFFSET, DB_SQ_QP_MASK, DEV_CTRL_RESET, DEV_STATUS_FATAL, DEV_STATUS_READY, EQ_KIND_AEQ,
    FEATURE_DOORBELL_BAR, FEATURE_RDMA, MAX_EQ, MAX_GID, REG_DEV_CTRL, REG_DEV_STATUS,
    REG_EQ_DOORBELL, REG_FEATURES,
};
use crate::pci::msix::InterruptSink;

use admin::AdminQueue;
use cq::{Cq, CqWrite, CqeData};
use eq::{Eq, EqPushError};
use mcast::McastTable;
use mr::MrTable;
use qp::Qp;

/// What the engine needs from the rest of the device for one operation.
pub struct Env<'a> {
    /// Guest memory (already gated by Bus Master Enable).
    pub mem: &'a dyn GuestMemory,
    /// MSI-X.
    pub irq: &'a dyn InterruptSink,
    /// Bus Master Enable: without it doorbells are ignored and the admin queue stops.
    pub bus_master: bool,
    /// The device clock in microseconds (monotonic; the test host drives it by hand).
    pub now_us: u64,
}

/// A UD address handle.
#[derive(Debug, Clone)]
pub struct Ah {
    pub pd: u32,
    pub attrs: QpAttrs,
}

/// A GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gid {
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// The port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    pub mac: [u8; 6],
    pub link_up: bool,
    /// IB MTU enum.
    pub mtu: u8,
}

/// The RDMA engine state of one NIC.
#[derive(Debug)]
pub struct Engine {
    aq: AdminQueue,
    fatal: bool,
    eqs: Vec<Option<Eq>>,
    cqs: Table<Cq>,
    qps: Table<Qp>,
    mrs: MrTable,
    ahs: Vec<Option<Ah>>,
    gids: Vec<Option<Gid>>,
    /// Multicast groups (MCAST_ATTACH).
    mcast: McastTable,
    /// QPs that may wait after a local RNR (a superset: each is checked before a retry).
    rnr_waiting: BTreeSet<u32>,
    port: Port,
    stats: Stats,
    /// The port's RoCEv2 counters (QUERY_COUNTERS), monotonic since the reset.
    counters: PortCounters,
    /// Frames for the fabric (bounded by `transport::MAX_OUTBOX`).
    outbox: VecDeque<Vec<u8>>,
    /// Link-level flow control: the priorities the switch paused (`pause.rs`).
    tx_pause: pause::TxPause,
    /// IPv4 identification of the next frame.
    ip_id: u16,
    /// `--hostile-caps`: the QUERY_CAPS replies (test only; `None`: the real limits). Kept
    /// across engine resets.
    caps_plan: Option<Arc<caps::CapsPlan>>,
    /// The object counts this NIC is provisioned with (`--resources`), a host setting.
    resources: resources::Resources,
    /// The host's test-only WRITE corruption knob (`sabotage.rs`); off unless armed.
    sabotage: Arc<sabotage::Sabotage>,
    /// Congestion control (`congestion.rs`), a host setting kept across resets: the
    /// knob's value as of `cc_generation`.
    cc: congestion::CcConfig,
    cc_knob: Arc<congestion::CcKnob>,
    cc_generation: u64,
    /// The responder's ACKs held during a batch of received frames.
    acks: ack_coalescing::AckCoalescer,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

fn table<T>(n: u32) -> Vec<Option<T>> {
    (0..n).map(|_| None).collect()
}

impl Engine {
    /// The reset state: no objects, admin queue disabled, link down.
    pub fn new() -> Self {
        Self::with_resources(resources::Resources::NOMINAL)
    }

    /// The reset state of a NIC provisioned with `r`.
    pub fn with_resources(r: resources::Resources) -> Self {
        Self {
            aq: AdminQueue::default(),
            fatal: false,
            eqs: table(MAX_EQ),
            cqs: Table::new(r.max_cq),
            qps: Table::new(r.max_qp),
            mrs: MrTable::new(r.max_mr),
            ahs: table(r.max_ah),
            gids: table(MAX_GID),
            mcast: McastTable::default(),
            rnr_waiting: BTreeSet::new(),
            port: Port {
                mac: [0; 6],
                link_up: false,
                mtu: 5,
            },
            stats: Stats::default(),
            counters: PortCounters::default(),
            outbox: VecDeque::new(),
            tx_pause: pause::TxPause::default(),
            ip_id: 0,
            caps_plan: None,
            resources: r,
            sabotage: Arc::default(),
            cc: congestion::CcConfig::default(),
            cc_knob: Arc::default(),
            cc_generation: 0,
            acks: ack_coalescing::AckCoalescer::default(),
        }
    }

    /// Returns the engine to its reset state but keeps the host's knobs (`--hostile-caps`,
    /// `--resources`, the WRITE sabotage, congestion control): they are not guest state.
    pub fn reset_keeping_host_knobs(&mut self) {
        let plan = self.caps_plan.take();
        let sabotage = std::mem::take(&mut self.sabotage);
        let (cc, cc_knob, cc_generation) = (self.cc, Arc::clone(&self.cc_knob), self.cc_generation);
        *self = Self::with_resources(self.resources);
        self.caps_plan = plan;
        self.sabotage = sabotage;
        (self.cc, self.cc_knob, self.cc_generation) = (cc, cc_knob, cc_generation);
    }

    /// Provisions the NIC with `r` (`--resources`): a reset, for the tables take its sizes.
    pub fn set_resources(&mut self, r: resources::Resources) {
        self.resources = r;
        self.reset_keeping_host_knobs();
    }

    /// Answers QUERY_CAPS from `plan` from now on (`--hostile-caps`, test only).
    pub fn set_caps_plan(&mut self, plan: Option<Arc<caps::CapsPlan>>) {
        self.caps_plan = plan;
    }

    /// The QUERY_CAPS plan (kept across resets).
    pub fn caps_plan(&self) -> Option<Arc<caps::CapsPlan>> {
        self.caps_plan.clone()
    }

    /// Shares the host's WRITE corruption knob with this engine (test-only, `sabotage.rs`).
    pub fn set_sabotage(&mut self, knob: Arc<sabotage::Sabotage>) {
        self.sabotage = knob;
    }

    /// The engine's WRITE corruption knob.
    pub fn sabotage(&self) -> Arc<sabotage::Sabotage> {
        Arc::clone(&self.sabotage)
    }

    /// The MR table (for tests and diagnostics).
    pub fn mrs(&self) -> &MrTable {
        &self.mrs
    }

    /// Counters (for tests and logs).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The value of an engine register, or `None` if `reg` is not one.
    pub fn read_reg(&self, reg: usize) -> Option<u32> {
        match reg {
            REG_FEATURES => Some(FEATURE_RDMA | FEATURE_DOORBELL_BAR),
            REG_DEV_CTRL | REG_EQ_DOORBELL => Some(0),
            REG_DEV_STATUS => Some(if self.fatal {
                DEV_STATUS_READY | DEV_STATUS_FATAL
            } else {
                DEV_STATUS_READY
            }),
            _ => self.aq.read_reg(reg),
        }
    }

    /// Whether the engine is in its fatal state (only a reset leaves it).
    pub fn is_fatal(&self) -> bool {
        self.fatal
    }

    /// Enters the fatal state if the host asked for it (`sabotage nic:N fatal`). Called at
    /// every entry into the engine, so the state begins at a well-defined point between two
    /// operations, never inside one.
    fn take_host_fatal(&mut self, env: &Env<'_>) {
        // The host's other knob, congestion control, is taken at the same points.
        self.take_host_cc();
        if self.sabotage.take_fatal() {
            self.enter_fatal(env, crate::interface::fatal_cause::INJECTED);
        }
    }

    /// Stops executing anything (manual, "Fatal errors"): `DEV_STATUS.FATAL` reads set, the
    /// AEQ gets one `DEVICE_FATAL` entry, and from now on doorbells, frames and timers do
    /// nothing and admin commands fail with status FATAL, until the guest resets the engine.
    fn enter_fatal(&mut self, env: &Env<'_>, cause: u32) {
        if self.fatal {
            return;
        }
        log::error!("RDMA engine: fatal error (cause {cause}); only a reset recovers");
        self.fatal = true;
        self.outbox.clear();
        self.async_event(
            env,
            eqe_kind::DEVICE,
            0,
            crate::interface::ae::DEVICE_FATAL,
            cause,
        );
        // Commands already queued fail now rather than at the next tail write.
        self.process_admin(env);
        self.flush_interrupts(env);
    }

    /// A 32-bit register write; `false` if `reg` is not an engine register.
    pub fn write_reg(&mut self, env: &Env<'_>, reg: usize, value: u32) -> bool {
        if reg != REG_DEV_CTRL {
            self.take_host_fatal(env);
        }
        match reg {
            REG_DEV_CTRL => {
                if value == DEV_CTRL_RESET {
                    log::info!("RDMA engine reset");
                    self.reset_keeping_host_knobs();
                }
            }
            REG_EQ_DOORBELL => {
                let id = (value >> 24) & 0x7f;
                let cons = value & 0x00ff_ffff;
                let arm = value & crate::interface::EQ_DB_ARM != 0;
                let accepted = self
                    .eqs
                    .get_mut(id as usize)
                    .and_then(Option::as_mut)
                    .is_some_and(|eq| eq.doorbell(cons, arm));
                match accepted {
                    true => {}
                    false => {
                        log::debug!("EQ doorbell {value:#x} ignored");
                        self.stats.spurious_doorbells += 1;
                    }
                }
            }
            _ => {
                if !self.aq.is_reg(reg) {
                    return false;
                }
                if admin::write_reg(self, env, reg, value) {
                    self.process_admin(env);
                }
            }
        }
        self.flush_interrupts(env);
        true
    }

    /// A write to the doorbell BAR. Only aligned 32-bit writes at the two doorbell offsets
    /// of a page do anything.
    pub fn doorbell(&mut self, env: &Env<'_>, offset: u64, data: &[u8]) {
        self.take_host_fatal(env);
        let (Ok(off), [a, b, c, d]) = (usize::try_from(offset), data) else {
            self.stats.spurious_doorbells += 1;
            return;
        };
        if self.fatal {
            self.stats.spurious_doorbells += 1;
            return;
        }
        if off >= DB_BAR_SIZE || !env.bus_master {
            self.stats.spurious_doorbells += 1;
            return;
        }
        let value = u32::from_le_bytes([*a, *b, *c, *d]);
        let page = (off / DB_PAGE_SIZE) as u32;
        match off % DB_PAGE_SIZE {
            DB_SQ_OFFSET if value & !DB_SQ_QP_MASK == 0 => self.sq_doorbell(env, page, value),
            DB_CQ_ARM_OFFSET => self.cq_arm_doorbell(env, page, value),
            _ => self.stats.spurious_doorbells += 1,
        }
        self.flush_interrupts(env);
    }

    /// Timer tick: retries local RC sends whose RNR timer expired, and runs the wire
    /// transport's timers (retransmission, RNR back-off) and pending transmissions.
    pub fn tick(&mut self, env: &Env<'_>) {
        self.take_host_fatal(env);
        if env.bus_master && !self.fatal {
            self.retry_rnr(env);
            self.cc_tick(env);
            self.transport_tick(env);
            self.late_flushes(env);
            self.cq_arm_checks(env);
        }
        self.flush_interrupts(env);
    }

    /// Raises the completion events of arm checks that are due (see [`cq`]).
    fn cq_arm_checks(&mut self, env: &Env<'_>) {
        let mut next = self.cqs.next_id(0);
        while let Some(id) = next {
            if self
                .cqs
                .get_mut(id)
                .is_some_and(|cq| cq.check_due(env.mem, env.now_us))
            {
                self.completion_event(env, id);
            }
            next = self.cqs.next_id(id + 1);
        }
    }

    /// A RoCEv2 frame from the fabric for this NIC's MAC.
    pub fn rx_frame(&mut self, env: &Env<'_>, frame: &[u8]) {
        self.rx_frame_with(env, frame, crate::wire::Icrc::Verify);
    }

    /// [`Engine::rx_frame`], knowing `icrc` of the frame's ICRC.
    pub fn rx_frame_with(&mut self, env: &Env<'_>, frame: &[u8], icrc: crate::wire::Icrc) {
        self.take_host_fatal(env);
        if !self.port.link_up || self.fatal {
            // A port whose link is down hears nothing, as it sends nothing.
            self.stats.rx_drops += 1;
        } else if crate::wire::pfc::is_mac_control(frame) {
            // Link-level flow control is the MAC's: no DMA, no RoCE counters.
            match crate::wire::pfc::Pfc::parse(frame) {
                Some(p) => {
                    self.tx_pause.obey(&p, env.now_us, self.cc.line_mbps);
                    self.counters.pfc_frames_rx += 1;
                }
                None => self.stats.rx_drops += 1,
            }
        } else if env.bus_master {
            self.receive_frame(env, frame, icrc);
        } else {
            // No DMA without Bus Master Enable: the packet is lost, as on a real NIC.
            self.stats.rx_drops += 1;
        }
        self.flush_interrupts(env);
    }

    fn cq_arm_doorbell(&mut self, env: &Env<'_>, page: u32, cq_id: u32) {
        let Some(cq) = self.cqs.get_mut(cq_id) else {
            self.stats.spurious_doorbells += 1;
            return;
        };
        if cq.db_page != page {
            self.stats.spurious_doorbells += 1;
            return;
        }
        self.stats.doorbells += 1;
        match cq.arm_doorbell(env.mem, env.now_us) {
            Ok(()) => {}
            Err(_) => {
                self.stats.dma_faults += 1;
                log::debug!("CQ {cq_id}: shadow area not readable on arm");
            }
        }
    }

    /// Raises the vector of every EQ that became due.
    fn flush_interrupts(&mut self, env: &Env<'_>) {
        for eq in self.eqs.iter_mut().flatten() {
            if eq.take_interrupt(env.now_us) {
                self.stats.interrupts += 1;
                if let Err(e) = env.irq.raise(eq.vector) {
                    log::debug!("EQ interrupt on vector {}: {e}", eq.vector);
                }
            }
        }
    }

    /// Queues an asynchronous event on the AEQ (dropped if there is none or it is full),
    /// with the event tag of the CQ or QP it names.
    fn async_event(&mut self, env: &Env<'_>, kind: u8, id: u32, code: u16, info: u32) {
        log::debug!("async event {code:#x} kind {kind} id {id} info {info}");
        let tag = match kind {
            eqe_kind::CQ => self.cq_tag(id),
            eqe_kind::QP => self.qps.get(id).map(|q| q.event_tag),
            _ => None,
        };
        let Some(aeq) = self
            .eqs
            .iter_mut()
            .flatten()
            .find(|e| e.kind == EQ_KIND_AEQ)
        else {
            return;
        };
        let e = Eqe {
            id,
            tag: tag.unwrap_or(0),
            info,
            code,
            kind,
            flags: 0,
        };
        match aeq.push(env.mem, e) {
            Ok(()) => self.stats.aeqes += 1,
            Err(EqPushError::Full) => log::warn!("AEQ full: event {code:#x} dropped"),
            Err(EqPushError::Dma(err)) => {
                self.stats.dma_faults += 1;
                log::warn!("AEQ not writable: {err}");
            }
        }
    }

    /// The event tag of CQ `id`, if it exists.
    fn cq_tag(&self, id: u32) -> Option<u32> {
        self.cqs.get(id).map(|c| c.event_tag)
    }

    /// A completion event for `cq_id` on its CEQ.
    fn completion_event(&mut self, env: &Env<'_>, cq_id: u32) {
        let Some((eq_id, tag)) = self.cqs.get(cq_id).map(|c| (c.eq_id, c.event_tag)) else {
            return;
        };
        let Some(eq) = self.eqs.get_mut(eq_id as usize).and_then(Option::as_mut) else {
            return;
        };
        let e = Eqe {
            id: cq_id,
            tag,
            info: 0,
            code: crate::interface::ae::CQ_COMPLETION,
            kind: eqe_kind::CQ,
            flags: 0,
        };
        match eq.push(env.mem, e) {
            Ok(()) => self.stats.ceqes += 1,
            Err(err) => {
                if matches!(err, EqPushError::Dma(_)) {
                    self.stats.dma_faults += 1;
                }
                let first = !eq.overflow_reported;
                eq.overflow_reported = true;
                if first {
                    self.async_event(
                        env,
                        eqe_kind::DEVICE,
                        eq_id,
                        crate::interface::ae::EQ_OVERFLOW,
                        0,
                    );
                }
            }
        }
    }

    /// Writes a CQE to `cq_id` and raises the completion event the arm state asks for.
    fn post_cqe(&mut self, env: &Env<'_>, cq_id: u32, c: &CqeData) {
        let Some(cq) = self.cqs.get_mut(cq_id) else {
            return;
        };
        match cq.write(env.mem, c) {
            CqWrite::Written { event } => {
                self.stats.cqes += 1;
                if event {
                    self.completion_event(env, cq_id);
                }
            }
            CqWrite::Dropped(Some(code)) => {
                log::warn!("CQ {cq_id} stopped (event {code:#x})");
                self.async_event(env, eqe_kind::CQ, cq_id, code, 0);
            }
            CqWrite::Dropped(None) => {}
        }
    }
}
