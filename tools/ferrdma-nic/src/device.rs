//! One ferrdma NIC: config space, BAR0, the MSI-X BAR, MSI-X vectors and guest memory,
//! glued to the vfio-user server's backend interface ([`crate::vfio::server::ServerBackend`]).

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
};

use crate::dma::{BusMasterGate, DmaPerm, DmaSpace, MapRequestError};
use crate::interface::DB_BAR_SIZE;
use crate::log_limit::LogLimiter;
use crate::pci::bar0::{Bar0, Bar0AccessError};
use crate::pci::config_space::{ConfigAccessError, ConfigSpace};
use crate::pci::msix::{GatedMsix, MsixError, MsixVectors};
use crate::pci::msix_bar::{MsixBar, MsixBarAccessError};
use crate::rdma::{Engine, Env};
use crate::vfio::irq_request::{IrqAction, IrqData, IrqRequest, IrqRequestError};
use crate::vfio::layout::{REGION_BAR0, REGION_CONFIG, REGION_DB, REGION_MSIX_BAR};
use crate::vfio::server::{DmaMapFlags, DmaUnmapFlags, ServerBackend};
use crate::wire::{Icrc, RxFrame};

/// `DMA_MAP` flag: the device may read.
pub const DMA_MAP_READ: u32 = DmaMapFlags::READ;
/// `DMA_MAP` flag: the device may write.
pub const DMA_MAP_WRITE: u32 = DmaMapFlags::WRITE;

/// Why a client request failed.
#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("region {0} is not implemented")]
    NoSuchRegion(u32),
    #[error("region {region} access {offset:#x}+{len:#x} is outside the region")]
    OutOfRange {
        region: u32,
        offset: u64,
        len: usize,
    },
    #[error(transparent)]
    Config(#[from] ConfigAccessError),
    #[error(transparent)]
    Bar0(#[from] Bar0AccessError),
    #[error(transparent)]
    MsixBar(#[from] MsixBarAccessError),
    #[error(transparent)]
    Dma(#[from] MapRequestError),
    #[error("unsupported DMA_MAP flags {0:#x}")]
    DmaMapFlags(u32),
    #[error(transparent)]
    IrqRequest(#[from] IrqRequestError),
    #[error(transparent)]
    Msix(#[from] MsixError),
    #[error(
        "SET_IRQS: {action:?} on irq index {index} (start {start}, count {count}) is not supported"
    )]
    UnsupportedIrq {
        index: u32,
        action: IrqAction,
        start: u32,
        count: u32,
    },
}

/// Whether `[offset, offset + len)` lies inside a region of `size` bytes.
fn in_region(offset: u64, len: usize, size: usize) -> bool {
    offset
        .checked_add(len as u64)
        .is_some_and(|end| end <= size as u64)
}

impl From<DeviceError> for std::io::Error {
    fn from(e: DeviceError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// The device clock the transport's timers run on.
#[derive(Debug, Clone)]
pub enum Clock {
    /// Microseconds since the device was created.
    Real(Instant),
    /// Set by hand (tests: timers fire exactly when the test says).
    Manual(Arc<AtomicU64>),
}

impl Clock {
    pub fn now_us(&self) -> u64 {
        match self {
            Clock::Real(t) => u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
            Clock::Manual(v) => v.load(Ordering::Relaxed),
        }
    }
}

/// An engine step (a doorbell, a batch of frames, a tick) that took this long was stopped by
/// the host rather than busy: a step's work is bounded (at most a window of 128 packets, a
/// batch of 64 frames), and in the NIC-level stream a packet costs both NICs together about
/// 2 us of one core, so a full window delivered to a NIC of the same process takes well
/// under a millisecond.
pub const STALL_US: u64 = 10_000;

/// Where the device's RoCE frames go (the fabric); without one they wait in the engine's
/// bounded outbox for [`Device::take_tx`].
/// It takes what one engine step emitted at once, so the fabric is woken once per burst,
/// as the engine built it: IPv4 frames without their ICRC, which the sink writes
/// (`wire::seal`) before anything but another NIC engine may see the frame (the fabric's
/// switch does, `fabric/hub.rs`).
pub struct TxSink(pub Box<dyn Fn(Vec<Vec<u8>>) + Send>);

impl std::fmt::Debug for TxSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TxSink")
    }
}

/// One emulated NIC function.
#[derive(Debug)]
pub struct Device {
    name: String,
    config: ConfigSpace,
    bar0: Bar0,
    msix_bar: MsixBar,
    vectors: MsixVectors,
    dma: DmaSpace,
    engine: Engine,
    clock: Clock,
    sink: Option<TxSink>,
    /// Steps that took [`STALL_US`] or more (see [`Device::step_done`]).
    stalls: u64,
    /// Refused DMA_MAP/DMA_UNMAP/SET_IRQS requests: a client can repeat them at will.
    client_warnings: LogLimiter,
}

impl Device {
    /// A device in its reset state with no guest memory and no vectors wired. `name`
    /// prefixes its log lines.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            config: ConfigSpace::new(),
            bar0: Bar0::new(),
            msix_bar: MsixBar::new(),
            vectors: MsixVectors::new(),
            dma: DmaSpace::new(),
            engine: Engine::new(),
            clock: Clock::Real(Instant::now()),
            sink: None,
            stalls: 0,
            client_warnings: LogLimiter::default(),
        }
    }

    /// Replaces the device clock.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// Sends the engine's frames to `sink` from now on.
    pub fn set_sink(&mut self, sink: TxSink) {
        self.sink = Some(sink);
    }

    /// Runs `f` on the engine with the current environment, then hands queued frames to the
    /// sink (if any).
    fn run<R>(&mut self, f: impl FnOnce(&mut Engine, &Env<'_>) -> R) -> R {
        let start = self.clock.now_us();
        let r = self.with_env_at(start, f);
        self.flush_tx();
        self.step_done(start);
        r
    }

    /// Ends an engine step that began at device time `start`: a step that took
    /// [`STALL_US`] or more did not run all that time but was stopped by the host (a step's
    /// work takes well under a millisecond), and the engine's timers are told
    /// ([`Engine::stalled`]).
    fn step_done(&mut self, start: u64) {
        let took = self.clock.now_us().saturating_sub(start);
        if took >= STALL_US {
            log::debug!("{}: a step took {took} us: timers pushed back", self.name);
            self.stalls += 1;
            self.engine.stalled(took);
        }
    }

    /// Steps the engine took [`STALL_US`] or more for (see [`Device::step_done`]).
    pub fn stalls(&self) -> u64 {
        self.stalls
    }

    /// Runs `f` on the engine with the current environment (the clock read now).
    fn with_env<R>(&mut self, f: impl FnOnce(&mut Engine, &Env<'_>) -> R) -> R {
        let now_us = self.clock.now_us();
        self.with_env_at(now_us, f)
    }

    /// [`Device::with_env`] at device time `now_us`, read by the caller.
    fn with_env_at<R>(&mut self, now_us: u64, f: impl FnOnce(&mut Engine, &Env<'_>) -> R) -> R {
        let mem = BusMasterGate {
            mem: &self.dma,
            enabled: self.config.bus_master(),
        };
        let irq = GatedMsix {
            vectors: &self.vectors,
            enabled: self.config.msix_enabled(),
        };
        let env = Env {
            mem: &mem,
            irq: &irq,
            bus_master: mem.enabled,
            now_us,
        };
        f(&mut self.engine, &env)
    }

    fn flush_tx(&mut self) {
        if let Some(sink) = &self.sink {
            let frames = self.engine.take_tx_unsealed(self.clock.now_us());
            if !frames.is_empty() {
                (sink.0)(frames);
            }
        }
    }

    /// A RoCE frame from the fabric.
    pub fn rx_frame(&mut self, frame: &[u8]) {
        self.run(|e, env| e.rx_frame(env, frame));
    }

    /// A batch of RoCE frames from the fabric, each at the time it is taken: the responder
    /// coalesces the ACKs asked for within it (`rdma/ack_coalescing.rs`), and the frames the
    /// engine queued go to the sink at the end (or when half the outbox is taken, so that
    /// the ACKs and packets the batch opens the window for find room).
    pub fn rx_frames(&mut self, frames: &[Vec<u8>]) {
        self.rx_batch(frames.iter().map(|f| (f.as_slice(), Icrc::Verify)));
    }

    /// [`Device::rx_frames`] for frames from the fabric's queue, some of whose ICRCs are
    /// known good (`wire/rx_frame.rs`).
    pub fn rx_queued(&mut self, frames: &[RxFrame]) {
        self.rx_batch(frames.iter().map(|f| (f.bytes(), f.icrc())));
    }

    fn rx_batch<'a>(&mut self, frames: impl Iterator<Item = (&'a [u8], Icrc)>) {
        let start = self.clock.now_us();
        self.engine.begin_rx_batch();
        for (f, icrc) in frames {
            self.with_env(|e, env| e.rx_frame_with(env, f, icrc));
            if self.engine.tx_half_full() {
                self.flush_tx();
            }
        }
        self.engine.end_rx_batch();
        self.flush_tx();
        self.step_done(start);
    }

    /// Frames the engine queued (when there is no sink).
    pub fn take_tx(&mut self) -> Vec<Vec<u8>> {
        self.engine.take_tx(self.clock.now_us())
    }

    /// [`Device::take_tx`] for a switch: IPv4 frames without their ICRC, which the switch
    /// writes (`wire::seal`) before anything but another engine may see them.
    pub fn take_tx_unsealed(&mut self) -> Vec<Vec<u8>> {
        self.engine.take_tx_unsealed(self.clock.now_us())
    }

    /// The device clock now.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// When [`Device::tick`] next has work (device clock), if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        // Without Bus Master Enable the engine can do nothing: its timers wait.
        if !self.config.bus_master() {
            return None;
        }
        self.engine.next_deadline(self.clock.now_us())
    }

    /// Shares the host's test-only WRITE corruption knob with the engine (kept across
    /// device resets; see `rdma/sabotage.rs`).
    pub fn set_sabotage(&mut self, knob: std::sync::Arc<crate::rdma::sabotage::Sabotage>) {
        self.engine.set_sabotage(knob);
    }

    /// Sets the port MAC the device reports (kept across device resets).
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.bar0.set_mac(mac);
    }

    /// Provisions the NIC's object tables (`--resources`), kept across resets; before the
    /// guest sees the device.
    pub fn set_resources(&mut self, r: crate::rdma::resources::Resources) {
        self.engine.set_resources(r);
    }

    /// Answers QUERY_CAPS from `plan` (`--hostile-caps`, test only), across resets.
    pub fn set_caps_plan(&mut self, plan: Option<std::sync::Arc<crate::rdma::caps::CapsPlan>>) {
        self.engine.set_caps_plan(plan);
    }

    /// Shares the host's congestion control knob (the fabric's control socket) with the
    /// engine.
    pub fn set_cc_knob(&mut self, knob: std::sync::Arc<crate::rdma::congestion::CcKnob>) {
        self.engine.set_cc_knob(knob);
    }

    /// Congestion control settings (ECN, DCQCN), kept across resets: a host setting.
    pub fn set_cc(
        &mut self,
        cc: crate::rdma::congestion::CcConfig,
    ) -> Result<(), crate::rdma::congestion::CcError> {
        self.engine.set_cc(cc)
    }

    /// Answers the host's pending requests that need the engine (a congestion control
    /// report for `cc nic:N`).
    pub fn serve_host_requests(&mut self) {
        self.engine.serve_cc_report();
    }

    /// The RDMA engine (for inspection).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Runs the RDMA engine's timer work (RNR retries, retransmission, deferred packets).
    pub fn tick(&mut self) {
        self.run(|e, env| e.tick(env));
    }

    /// Config space (for inspection).
    pub fn config(&self) -> &ConfigSpace {
        &self.config
    }

    /// Guest memory as currently mapped.
    pub fn dma(&self) -> &DmaSpace {
        &self.dma
    }

    /// MSI-X vectors as currently wired.
    pub fn vectors(&self) -> &MsixVectors {
        &self.vectors
    }

    /// Handles `REGION_READ`.
    pub fn read_region(
        &self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), DeviceError> {
        match region {
            REGION_CONFIG => self.config.read(offset, data)?,
            REGION_BAR0 => {
                let engine = &self.engine;
                self.bar0
                    .read_with(offset, data, &|reg| engine.read_reg(reg))?
            }
            REGION_MSIX_BAR => self.msix_bar.read(offset, data)?,
            // The doorbell BAR is write-only.
            REGION_DB => {
                if !in_region(offset, data.len(), DB_BAR_SIZE) {
                    return Err(DeviceError::OutOfRange {
                        region,
                        offset,
                        len: data.len(),
                    });
                }
                data.fill(0);
            }
            _ => return Err(DeviceError::NoSuchRegion(region)),
        }
        Ok(())
    }

    /// Handles `REGION_WRITE`.
    pub fn write_region(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), DeviceError> {
        let start = self.clock.now_us();
        match region {
            REGION_CONFIG => {
                let was = self.config.msix_enabled();
                self.config.write(offset, data)?;
                let now = self.config.msix_enabled();
                if was != now {
                    log::debug!(
                        "{}: MSI-X {}",
                        self.name,
                        if now { "enabled" } else { "disabled" }
                    );
                }
            }
            REGION_BAR0 | REGION_DB => {
                // Doorbell writes of odd sizes are ignored (counted as spurious) like
                // BAR0's, but one reaching past the BAR is refused, as a read is.
                if region == REGION_DB && !in_region(offset, data.len(), DB_BAR_SIZE) {
                    return Err(DeviceError::OutOfRange {
                        region,
                        offset,
                        len: data.len(),
                    });
                }
                let irq = GatedMsix {
                    vectors: &self.vectors,
                    enabled: self.config.msix_enabled(),
                };
                // No DMA without Bus Master Enable.
                let mem = BusMasterGate {
                    mem: &self.dma,
                    enabled: self.config.bus_master(),
                };
                let env = Env {
                    mem: &mem,
                    irq: &irq,
                    bus_master: mem.enabled,
                    now_us: start,
                };
                let engine = &mut self.engine;
                if region == REGION_DB {
                    engine.doorbell(&env, offset, data);
                } else {
                    self.bar0
                        .write_with(offset, data, &mem, &irq, &mut |reg, v| {
                            engine.write_reg(&env, reg, v)
                        })?;
                }
            }
            REGION_MSIX_BAR => self.msix_bar.write(offset, data)?,
            _ => return Err(DeviceError::NoSuchRegion(region)),
        }
        self.flush_tx();
        self.step_done(start);
        Ok(())
    }

    /// Handles `DMA_MAP`.
    pub fn dma_map(
        &mut self,
        flags: u32,
        offset: u64,
        iova: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), DeviceError> {
        if flags & !(DMA_MAP_READ | DMA_MAP_WRITE) != 0 {
            return Err(DeviceError::DmaMapFlags(flags));
        }
        let perm = DmaPerm {
            read: flags & DMA_MAP_READ != 0,
            write: flags & DMA_MAP_WRITE != 0,
        };
        self.dma.map(iova, size, offset, perm, fd.as_ref())?;
        log::info!(
            "{}: DMA map iova {iova:#x}+{size:#x} {}{} {}",
            self.name,
            if perm.read { "r" } else { "-" },
            if perm.write { "w" } else { "-" },
            if fd.is_some() {
                format!("fd offset {offset:#x}")
            } else {
                "without fd (inaccessible)".to_string()
            }
        );
        Ok(())
    }

    /// Handles `DMA_UNMAP`.
    pub fn dma_unmap(&mut self, flags: u32, iova: u64, size: u64) -> Result<(), DeviceError> {
        let bytes = if flags == DmaUnmapFlags::ALL {
            if iova != 0 || size != 0 {
                return Err(MapRequestError::UnmapAllRange { iova, size }.into());
            }
            self.dma.unmap_all()
        } else if flags == 0 {
            self.dma.unmap(iova, size)?
        } else {
            return Err(MapRequestError::UnmapFlags(flags).into());
        };
        log::info!(
            "{}: DMA unmap iova {iova:#x}+{size:#x} ({bytes:#x} bytes)",
            self.name
        );
        Ok(())
    }

    /// Handles `SET_IRQS`.
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), DeviceError> {
        let req = IrqRequest::decode(index, flags, start, count, fds)?;
        let unsupported = DeviceError::UnsupportedIrq {
            index,
            action: req.action,
            start,
            count,
        };
        match (req.index, req.action, req.data) {
            (VFIO_PCI_MSIX_IRQ_INDEX, IrqAction::Trigger, IrqData::None) if count == 0 => {
                self.vectors.clear();
                log::info!("{}: MSI-X vectors all unwired", self.name);
            }
            (VFIO_PCI_MSIX_IRQ_INDEX, IrqAction::Trigger, IrqData::None) => {
                // Loopback: fire the wired vectors of the range (all or none).
                self.vectors.raise_range(start, count)?;
            }
            (VFIO_PCI_MSIX_IRQ_INDEX, IrqAction::Trigger, IrqData::Eventfds(fds)) => {
                let wiring = !fds.is_empty();
                self.vectors.set(start, count, fds)?;
                log::info!(
                    "{}: MSI-X vectors {start}..{} {}",
                    self.name,
                    u64::from(start) + u64::from(count),
                    if wiring {
                        "wired to eventfds"
                    } else {
                        "unwired"
                    }
                );
            }
            // Disabling INTx or MSI, which the function does not have, is a no-op.
            (
                VFIO_PCI_INTX_IRQ_INDEX | VFIO_PCI_MSI_IRQ_INDEX,
                IrqAction::Trigger,
                IrqData::None,
            ) if count == 0 => {
                log::debug!(
                    "{}: irq index {index} disabled (not implemented)",
                    self.name
                );
            }
            _ => return Err(unsupported),
        }
        Ok(())
    }

    /// Handles `DEVICE_RESET`: registers and config space return to their reset state.
    /// Guest memory mappings and eventfds are client state and stay.
    pub fn reset(&mut self) {
        self.config = ConfigSpace::new();
        let mac = self.bar0.mac();
        self.bar0 = Bar0::new();
        self.bar0.set_mac(mac);
        self.msix_bar = MsixBar::new();
        self.engine.reset_keeping_host_knobs();
        log::info!("{}: reset", self.name);
    }
}

impl Device {
    /// The client is gone (disconnected, or its connection ended in an error or a panic of
    /// the protocol library): drops its guest memory mappings and eventfds, so nothing of
    /// the client's stays mapped or referenced whoever still holds the device, and resets
    /// the engine so no timer touches memory again.
    pub fn disconnect(&mut self) {
        let bytes = self.dma.unmap_all();
        self.vectors.clear();
        self.reset();
        log::info!(
            "{}: client gone: {bytes:#x} bytes of guest memory unmapped",
            self.name
        );
    }
}

impl ServerBackend for Device {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        self.read_region(region, offset, data).map_err(|e| {
            log::debug!("{}: REGION_READ: {e}", self.name);
            e.into()
        })
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        self.write_region(region, offset, data).map_err(|e| {
            log::debug!("{}: REGION_WRITE: {e}", self.name);
            e.into()
        })
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        Device::dma_map(self, flags.bits(), offset, address, size, fd).map_err(|e| {
            crate::warn_limited!(
                self.client_warnings,
                self.clock.now_us(),
                "{}: DMA_MAP {address:#x}+{size:#x}: {e}",
                self.name
            );
            e.into()
        })
    }

    fn dma_unmap(
        &mut self,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        // `DmaUnmapFlags` carries VFIO's values (ALL is bit 1), which QEMU sends.
        Device::dma_unmap(self, flags.bits(), address, size).map_err(|e| {
            crate::warn_limited!(
                self.client_warnings,
                self.clock.now_us(),
                "{}: DMA_UNMAP {address:#x}+{size:#x}: {e}",
                self.name
            );
            e.into()
        })
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        Device::reset(self);
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        Device::set_irqs(self, index, flags, start, count, fds).map_err(|e| {
            crate::warn_limited!(
                self.client_warnings,
                self.clock.now_us(),
                "{}: SET_IRQS: {e}",
                self.name
            );
            e.into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::mapping::test_util::memfd;
    use crate::interface::{
        TestStatus, MSIX_VECTORS, REG_ID, REG_TEST_DMA_CTRL, REG_TEST_DMA_DST, REG_TEST_DMA_LEN,
        REG_TEST_DMA_SRC, REG_TEST_IRQ, REG_TEST_STATUS, TEST_DMA_CTRL_START,
    };
    use crate::pci::config_space::MSIX_CAP_OFFSET;
    use crate::pci::msix::test_util::{count, eventfd};
    use std::os::unix::fs::FileExt;
    use vfio_bindings::bindings::vfio::{
        VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
        VFIO_IRQ_SET_DATA_NONE,
    };

    const EVENTFD_TRIGGER: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    const NONE_TRIGGER: u32 = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;

    fn r32(d: &Device, region: u32, off: usize) -> u32 {
        let mut b = [0u8; 4];
        d.read_region(region, off as u64, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    fn w32(d: &mut Device, region: u32, off: usize, v: u32) {
        d.write_region(region, off as u64, &v.to_le_bytes())
            .unwrap();
    }

    fn enable_msix(d: &mut Device) {
        d.write_region(REGION_CONFIG, MSIX_CAP_OFFSET as u64 + 3, &[0x80])
            .unwrap();
    }

    #[test]
    fn regions_route_to_their_models() {
        let mut d = Device::new("t");
        assert_eq!(r32(&d, REGION_CONFIG, 0), 0xfe10_1234);
        assert_eq!(r32(&d, REGION_BAR0, REG_ID), 0x4652_444d);
        let mut b = [0u8; 4];
        for region in [1, 3, 5, 6, 8, 9, u32::MAX] {
            assert!(matches!(
                d.read_region(region, 0, &mut b),
                Err(DeviceError::NoSuchRegion(_))
            ));
            assert!(d.write_region(region, 0, &b).is_err());
        }
        assert!(d.read_region(REGION_CONFIG, 256, &mut b).is_err());
        assert!(d.read_region(REGION_MSIX_BAR, 0x1000, &mut b).is_err());
        // io::Error conversion for the client.
        let e: std::io::Error = DeviceError::NoSuchRegion(3).into();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn test_irq_end_to_end() {
        let mut d = Device::new("t");
        let e = eventfd();
        d.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            EVENTFD_TRIGGER,
            2,
            1,
            vec![e.try_clone().unwrap()],
        )
        .unwrap();
        // MSI-X not yet enabled in config space.
        w32(&mut d, REGION_BAR0, REG_TEST_IRQ, 2);
        assert_eq!(
            r32(&d, REGION_BAR0, REG_TEST_STATUS),
            TestStatus::BadVector as u32
        );
        assert_eq!(count(&e), 0);
        enable_msix(&mut d);
        w32(&mut d, REGION_BAR0, REG_TEST_IRQ, 2);
        assert_eq!(r32(&d, REGION_BAR0, REG_TEST_STATUS), TestStatus::Ok as u32);
        assert_eq!(count(&e), 1);
        // Unwire by sending no fds for the range; then disable all.
        d.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD_TRIGGER, 2, 1, vec![])
            .unwrap();
        assert!(!d.vectors().is_wired(2));
        d.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            EVENTFD_TRIGGER,
            0,
            1,
            vec![eventfd()],
        )
        .unwrap();
        d.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, NONE_TRIGGER, 0, 0, vec![])
            .unwrap();
        assert!(!d.vectors().is_wired(0));
    }

    #[test]
    fn set_irqs_refusals() {
        let mut d = Device::new("t");
        assert!(d
            .set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                EVENTFD_TRIGGER,
                MSIX_VECTORS,
                1,
                vec![eventfd()]
            )
            .is_err());
        assert!(d
            .set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                EVENTFD_TRIGGER,
                u32::MAX,
                2,
                vec![]
            )
            .is_err());
        assert!(d
            .set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK,
                0,
                1,
                vec![]
            )
            .is_err());
        assert!(d
            .set_irqs(
                VFIO_PCI_INTX_IRQ_INDEX,
                EVENTFD_TRIGGER,
                0,
                1,
                vec![eventfd()]
            )
            .is_err());
        assert!(d
            .set_irqs(VFIO_PCI_INTX_IRQ_INDEX, NONE_TRIGGER, 0, 0, vec![])
            .is_ok());
        assert!(d.set_irqs(7, NONE_TRIGGER, 0, 0, vec![]).is_err());
        // Loopback trigger of an unwired vector fails; of a wired one fires it.
        assert!(d
            .set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, NONE_TRIGGER, 0, 1, vec![])
            .is_err());
        let e = eventfd();
        d.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            EVENTFD_TRIGGER,
            0,
            1,
            vec![e.try_clone().unwrap()],
        )
        .unwrap();
        d.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, NONE_TRIGGER, 0, 1, vec![])
            .unwrap();
        assert_eq!(count(&e), 1);
    }

    #[test]
    fn dma_map_unmap_and_copy() {
        let mut d = Device::new("t");
        let f = memfd(0x4000);
        d.dma_map(
            DMA_MAP_READ | DMA_MAP_WRITE,
            0x1000,
            0x8000_0000,
            0x2000,
            Some(f.try_clone().unwrap()),
        )
        .unwrap();
        assert!(
            d.dma_map(4, 0, 0x9000_0000, 0x1000, None).is_err(),
            "unknown flag"
        );
        f.write_all_at(b"ferrdma!", 0x1000).unwrap();
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_SRC, 0x8000_0000);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_SRC + 4, 0);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_DST, 0x8000_1000);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_DST + 4, 0);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_LEN, 8);
        // Without Bus Master Enable the device may not touch memory.
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_CTRL, TEST_DMA_CTRL_START);
        assert_eq!(
            r32(&d, REGION_BAR0, REG_TEST_STATUS),
            TestStatus::DmaFault as u32
        );
        w32(&mut d, REGION_CONFIG, 4, 0x6);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_SRC, 0x8000_0000);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_SRC + 4, 0);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_DST, 0x8000_1000);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_DST + 4, 0);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_LEN, 8);
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_CTRL, TEST_DMA_CTRL_START);
        assert_eq!(r32(&d, REGION_BAR0, REG_TEST_STATUS), TestStatus::Ok as u32);
        let mut out = [0u8; 8];
        f.read_exact_at(&mut out, 0x2000).unwrap();
        assert_eq!(&out, b"ferrdma!");
        // After unmap the same copy faults.
        d.dma_unmap(0, 0x8000_0000, 0x2000).unwrap();
        w32(&mut d, REGION_BAR0, REG_TEST_DMA_CTRL, TEST_DMA_CTRL_START);
        assert_eq!(
            r32(&d, REGION_BAR0, REG_TEST_STATUS),
            TestStatus::DmaFault as u32
        );
        // Unmap-all semantics.
        d.dma_map(DMA_MAP_READ, 0, 0x1000, 0x1000, None).unwrap();
        assert_eq!(
            DmaUnmapFlags::ALL,
            vfio_bindings::bindings::vfio::VFIO_DMA_UNMAP_FLAG_ALL
        );
        assert!(d.dma_unmap(DmaUnmapFlags::ALL, 0x1000, 0).is_err());
        assert!(d
            .dma_unmap(DmaUnmapFlags::GET_DIRTY_BITMAP, 0x1000, 0x1000)
            .is_err());
        d.dma_unmap(DmaUnmapFlags::ALL, 0, 0).unwrap();
        assert!(d.dma().is_empty());
    }

    #[test]
    fn reset_restores_registers_and_config() {
        let mut d = Device::new("t");
        w32(&mut d, REGION_BAR0, crate::interface::REG_SCRATCH, 42);
        w32(&mut d, REGION_CONFIG, 4, 0x6);
        enable_msix(&mut d);
        let e = eventfd();
        d.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD_TRIGGER, 0, 1, vec![e])
            .unwrap();
        d.reset();
        assert_eq!(r32(&d, REGION_BAR0, crate::interface::REG_SCRATCH), 0);
        assert_eq!(r32(&d, REGION_CONFIG, 4) & 0xffff, 0);
        assert!(!d.config().msix_enabled());
        assert!(d.vectors().is_wired(0), "eventfds are client state");
    }
}
