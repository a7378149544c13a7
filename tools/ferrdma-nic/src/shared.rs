//! A NIC shared between its vfio-user server thread and its engine thread.
//!
//! Threading: the [`Device`] sits behind one `Mutex`. The vfio-user server thread locks it
//! for every client message (through [`SharedDevice`], its `ServerBackend`); the engine
//! thread ([`spawn_engine`]) locks it to deliver RoCE frames from the fabric and to run the
//! transport timers. Frames the engine emits go to the fabric through the device's sink
//! while the lock is held: the sink switches them under the fabric's lock, which is never
//! held while waiting for a NIC (frames to a full engine queue are dropped), so there is no
//! lock cycle.
//!
//! Frames may also be delivered on the sending thread (`fabric/queue.rs`, direct
//! delivery), which only try-locks this device: with the sender's device locked, a thread
//! never waits for another device's lock.
//!
//! The engine thread sleeps until a frame arrives or the engine's next deadline, and at
//! most [`IDLE_POLL`] (a timer armed by a doorbell on the server thread is picked up by
//! then; one armed by a direct delivery wakes it). Timers are at least
//! `transport::MIN_TIMER_US` apart and each wake-up does bounded work, so a guest cannot
//! make the thread spin.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::vfio::server::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

use crate::device::Device;
use crate::fabric::queue::{Deliver, FrameReceiver, Received};
use crate::wire::RxFrame;

/// Longest sleep of the engine thread.
pub const IDLE_POLL: Duration = Duration::from_millis(10);
/// Shortest sleep: even work that is due at once waits this long, which bounds the wake-up
/// rate whatever the engine reports.
const MIN_SLEEP: Duration = Duration::from_micros(100);
/// Frames delivered per lock of the device, so the server thread is not starved.
const RX_BATCH: usize = 64;

/// The device behind its mutex.
#[derive(Clone, Debug)]
pub struct SharedDevice(pub Arc<Mutex<Device>>);

impl SharedDevice {
    pub fn new(device: Device) -> Self {
        Self(Arc::new(Mutex::new(device)))
    }

    /// The device; a panic on another thread while it was locked does not make it unusable
    /// (every device operation leaves it consistent between guest-visible steps).
    pub fn lock(&self) -> MutexGuard<'_, Device> {
        match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Deliver for SharedDevice {
    fn try_deliver(&self, frames: &[RxFrame]) -> Option<Option<u64>> {
        let mut d = match self.0.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        d.rx_queued(frames);
        Some(d.next_deadline())
    }
}

impl ServerBackend for SharedDevice {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        self.lock().region_read(region, offset, data)
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        self.lock().region_write(region, offset, data)
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<std::fs::File>,
    ) -> Result<(), std::io::Error> {
        ServerBackend::dma_map(&mut *self.lock(), flags, offset, address, size, fd)
    }

    fn dma_unmap(
        &mut self,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        ServerBackend::dma_unmap(&mut *self.lock(), flags, address, size)
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        ServerBackend::reset(&mut *self.lock())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> Result<(), std::io::Error> {
        ServerBackend::set_irqs(&mut *self.lock(), index, flags, start, count, fds)
    }
}

/// A running engine thread; dropping the handle stops it.
pub struct EngineThread {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<Option<FrameReceiver>>>,
}

impl EngineThread {
    /// Stops the thread and gives back its fabric queue, for the engine of the next client.
    pub fn finish(mut self) -> Option<FrameReceiver> {
        self.stop.store(true, Ordering::SeqCst);
        self.join.take().and_then(|j| j.join().ok()).flatten()
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Starts the engine thread of `dev`: frames from `inbound` (the fabric's queue for this
/// NIC, if it has one) and the transport timers.
pub fn spawn_engine(
    name: &str,
    dev: SharedDevice,
    inbound: Option<FrameReceiver>,
) -> std::io::Result<EngineThread> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let join = std::thread::Builder::new()
        .name(format!("{name}-engine"))
        .spawn(move || {
            let direct: Arc<dyn Deliver> = Arc::new(dev.clone());
            if let Some(rx) = &inbound {
                rx.set_direct(Some(&direct));
            }
            engine_loop(&dev, inbound.as_ref(), &flag);
            if let Some(rx) = &inbound {
                rx.set_direct(None);
            }
            inbound
        })?;
    Ok(EngineThread {
        stop,
        join: Some(join),
    })
}

fn engine_loop(dev: &SharedDevice, inbound: Option<&FrameReceiver>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let (wait, wakes_at) = {
            let d = dev.lock();
            let now = d.now_us();
            let wait = match d.next_deadline() {
                Some(t) => Duration::from_micros(t.saturating_sub(now)).clamp(MIN_SLEEP, IDLE_POLL),
                None => IDLE_POLL,
            };
            let wait_us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
            (wait, now.saturating_add(wait_us))
        };
        let frames = match inbound.map(|rx| rx.recv_or_wake(RX_BATCH, wait, Some(wakes_at))) {
            Some(Received::Frames(f)) => f,
            Some(Received::Timeout) => Vec::new(),
            Some(Received::Closed) | None => {
                std::thread::sleep(wait);
                Vec::new()
            }
        };
        let mut d = dev.lock();
        if !frames.is_empty() {
            d.rx_queued(&frames);
        }
        d.serve_host_requests();
        if d.next_deadline().is_some_and(|t| t <= d.now_us()) {
            d.tick();
        }
        drop(d);
        crate::wire::frame_pool::recycle(frames.into_iter().map(RxFrame::into_bytes));
    }
}
