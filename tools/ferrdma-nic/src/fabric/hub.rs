//! The running fabric: listening unix sockets that QEMU's `-netdev stream` connects to as a
//! client, the switch, pcap capture and fault injection.
//!
//! The switch is shared ([`Core`], behind one mutex): the threads that bring frames switch
//! them themselves — a NIC's engine (or its vfio-user server thread, after a doorbell) the
//! burst one engine step emitted, a LAN connection's reader what one read decoded — and
//! queue them to the destination ports. So a frame between two NICs crosses no thread of
//! the fabric's own (a switch thread cost a wake-up per burst and a fifth of the CPU of a
//! two-NIC stream); after the switch's lock is released, a burst to an idle NIC may even be
//! delivered on the same thread (`queue.rs`). One timer thread releases frames a fault link delayed and flushes the
//! capture at most [`FLUSH_DELAY`] after its oldest unwritten frame (a write system call per
//! frame cost half the switching time under load); a control request and the process's
//! shutdown flush it too.
//!
//! Per LAN connection a reader (decodes the stream, switches) and a writer (drains a bounded
//! per-port queue; when it is full, frames to that port are dropped and counted, as a
//! congested switch port would).
//!
//! With `--fault` (`--nic-fault`), frames to the ports of a LAN socket (to a NIC's engine)
//! pass through a `fault::Link` first (seeded by `--fault-seed` and the port id, so a run
//! with the same connection order is reproducible).
//!
//! RoCE engine ports: each NIC MAC gets an engine port. Frames switched to it go to that
//! NIC's bounded inbound queue with `try_send` (a full queue drops the frame, as a congested
//! port would; RC recovers it), so switching never waits for a NIC, and a NIC's lock is
//! never taken under the switch's: there is no lock cycle.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use thiserror::Error;

use super::control::{self, Command, PortRef, Reply, SabotageKnob};
use super::egress::{Egress, EgressConfig};
use super::fault::{FaultConfig, FaultCounters, Link};
use super::pcap::{Capture, PcapWriter};
use super::pfc::{PfcConfig, PfcIngress};
use super::queue::FrameSender;
use super::raw::{RawSocket, MAX_FRAME as RAW_MAX_FRAME};
use super::stream::{encode, Decoder};
use super::switch::{Mac, PortId, Switch};
use crate::rdma::congestion::{CcConfig, CcKnob};
use crate::rdma::sabotage::Sabotage;
use crate::vfio::socket::{bind, ServeError, SocketFile};
use crate::wire::icrc::ICRC_LEN;
use crate::wire::pfc as wpfc;
use crate::wire::RxFrame;

/// Frames queued towards one port before further ones are dropped.
const PORT_QUEUE: usize = 256;
/// Longest a captured frame waits in the capture's buffer before the file has it.
pub const FLUSH_DELAY: Duration = Duration::from_millis(20);
/// Concurrent LAN connections over all sockets; more are refused (each costs two threads).
const MAX_CONNECTIONS: usize = 64;
/// Bytes of capture buffered between flushes (the switch flushes when it runs out of work).
const PCAP_BUFFER: usize = 1 << 20;
/// How long `cc nic:N` waits for the NIC's engine to report (it answers within its longest
/// sleep, `shared::IDLE_POLL`).
const REPORT_WAIT: Duration = Duration::from_millis(250);
/// MAC aging in seconds of the switch's clock.
const AGING_SECS: u64 = 300;
/// The line rate a port without a link model has for PFC's pause quanta: a NIC's default
/// (`CcConfig::line_mbps`).
const UNSHAPED_RATE_BPS: u64 = 100_000_000_000;
/// An ingress for frames a fault link held back, which lost where they came in: they count
/// against no port's PFC accounting.
const NO_INGRESS: PortId = PortId::MAX;
/// The transmit queue of a station on a shaped port (its side of the cable, `uplinks`):
/// large, as a NIC's window bounds what it has in flight.
const UPLINK_BUFFER: u64 = 64 << 20;
/// Link model events one catch-up handles at most (a clock jump on a loaded host); the rest
/// wait for the next.
const MAX_EVENTS: usize = 1 << 20;

/// The MAC the switch's port `p` sends its PFC frames from (locally administered).
fn switch_port_mac(p: PortId) -> Mac {
    let b = (p as u32).to_be_bytes();
    [0x02, 0x66, b[0], b[1], b[2], b[3]]
}

#[derive(Debug, Error)]
pub enum HubError {
    #[error(transparent)]
    Bind(#[from] ServeError),
    #[error("{path}: creating the pcap file: {source}")]
    Pcap {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("spawning a fabric thread: {0}")]
    Spawn(std::io::Error),
    #[error(transparent)]
    Interface(#[from] super::raw::RawError),
}

/// A started fabric. Dropping it does not stop the threads (the process exit does); the
/// socket files are removed when the last `Arc<SocketFile>` goes.
pub struct Hub {
    pub sockets: Vec<Arc<SocketFile>>,
    /// One per NIC given to `start`, in order: where that NIC's engine sends its frames.
    pub engine_ports: Vec<EnginePort>,
    /// Changes the running fabric (links, faults) and reads its counters.
    pub control: HubControl,
    shared: Shared,
    next_port: Arc<AtomicUsize>,
}

/// The switch and the capture, shared by every thread that brings frames, and the timer
/// thread's doorbell (rung when it must plan its sleep again).
#[derive(Clone)]
struct Shared {
    core: Arc<Mutex<Core>>,
    wake: SyncSender<()>,
}

impl Shared {
    /// The core; a panic on another thread while it was locked leaves it usable (every step
    /// under the lock leaves it consistent).
    fn lock(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    /// Switches `frames` from `port`, in order. What goes to NIC engines is handed over
    /// once the switch's lock is released: it may be delivered on this thread
    /// (`queue.rs`), and the NIC's own frames are switched again then.
    fn switch(&self, port: PortId, frames: Vec<Vec<u8>>) {
        if frames.is_empty() {
            return;
        }
        let (wake, batches) = {
            let mut core = self.lock();
            let wake = core.switch_burst(port, frames);
            (wake, core.st.take_batches())
        };
        if wake {
            let _ = self.wake.try_send(());
        }
        for (p, q, batch) in batches {
            let n = batch.len();
            let taken = q.deliver(batch);
            if taken < n {
                self.lock().st.count_engine_drops(p, n - taken);
            }
        }
    }
}

/// Writes the ICRC of a frame an engine sent from `port` unsealed (`EnginePort::send`);
/// false if it could not be (then the frame is dropped: it cannot be an engine's).
fn seal_or_log(port: PortId, frame: &mut [u8]) -> bool {
    match crate::wire::seal(frame) {
        Ok(()) => true,
        Err(e) => {
            log::error!("port {port}: an engine's frame cannot be sealed ({e}); dropped");
            false
        }
    }
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    match core.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The running switch's control handle (see `control.rs` for the commands).
#[derive(Clone)]
pub struct HubControl {
    shared: Shared,
    lans: usize,
    nics: usize,
    /// Each NIC's test-only WRITE corruption knob (shared with its engine through its
    /// [`EnginePort`]).
    sabotage: Vec<Arc<Sabotage>>,
    /// Each NIC's congestion control settings (likewise).
    cc: Vec<Arc<CcKnob>>,
}

impl HubControl {
    /// Gives every NIC `cfg` (the command line's `--cc`, before any guest runs).
    pub fn set_cc_all(&self, cfg: CcConfig) -> Result<(), crate::rdma::congestion::CcError> {
        self.cc.iter().try_for_each(|k| k.set(cfg))
    }

    /// Writes out what the capture holds (at shutdown: the process exits without unwinding).
    pub fn flush_capture(&self) {
        self.shared.lock().flush();
    }
}

impl control::Apply for HubControl {
    /// Applies `cmd` under the switch's lock (every holder keeps it for one burst at most);
    /// the capture is flushed, so whoever asks (say, for `stats`) finds every frame switched
    /// so far in the file.
    fn apply(&self, cmd: Command) -> Reply {
        let ports: &[PortRef] = match &cmd {
            Command::Link { ports, .. } => ports,
            Command::Fault { port, .. }
            | Command::Shape { port, .. }
            | Command::Pfc { port, .. } => std::slice::from_ref(port),
            Command::Sabotage { nic, knob: what } => {
                // The knob is the NIC's, not the switch's: set it here.
                let Some(knob) = self.sabotage.get(*nic) else {
                    return Err(format!("no nic:{nic}: there are {} NICs", self.nics));
                };
                log::warn!("control: nic:{nic} sabotage {what:?} (TEST ONLY)");
                return Ok(vec![match *what {
                    SabotageKnob::WriteByte(write_byte) => {
                        knob.set(write_byte);
                        match write_byte {
                            Some(o) => format!(
                                "nic:{nic} sabotage: flipping byte {o} of every RDMA WRITE it places ({} corrupted so far)",
                                knob.hits()
                            ),
                            None => {
                                format!("nic:{nic} sabotage off ({} bytes corrupted)", knob.hits())
                            }
                        }
                    }
                    SabotageKnob::AdminStall(stalled) => {
                        knob.stall_admin(stalled);
                        if stalled {
                            format!("nic:{nic} sabotage: the admin queue stops answering")
                        } else {
                            format!("nic:{nic} sabotage: the admin queue answers again")
                        }
                    }
                    SabotageKnob::Fatal => {
                        knob.request_fatal();
                        format!("nic:{nic} sabotage: the engine fails fatally at its next step")
                    }
                }]);
            }
            Command::Cc { nic, spec } => {
                let Some(knob) = self.cc.get(*nic) else {
                    return Err(format!("no nic:{nic}: there are {} NICs", self.nics));
                };
                let settings = format!("nic:{nic} {}", knob.get().spec());
                let Some(spec) = spec else {
                    // Shown: the settings, then what the engine did with them.
                    let ticket = knob.request_report();
                    let mut lines = vec![settings];
                    match knob.wait_report(ticket, REPORT_WAIT) {
                        Some(r) => lines.extend(r.lines(&format!("nic:{nic}"))),
                        None => lines.push(format!(
                            "nic:{nic} counters: its engine did not answer within {} ms",
                            REPORT_WAIT.as_millis()
                        )),
                    }
                    return Ok(lines);
                };
                // Under the knob's lock: the guest's driver may change other parameters
                // (SET_CC) at the same time.
                let cfg = knob
                    .update(|c| c.with_spec(spec))
                    .map_err(|e| e.to_string())?;
                log::info!("control: nic:{nic} congestion control {}", cfg.spec());
                return Ok(vec![format!("nic:{nic} {}", knob.get().spec())]);
            }
            Command::Stats | Command::Help => &[],
        };
        for port in ports {
            match *port {
                PortRef::Lan(n) if n >= self.lans => {
                    return Err(format!("no lan:{n}: there are {} --lan sockets", self.lans));
                }
                PortRef::Nic(n) if n >= self.nics => {
                    return Err(format!("no nic:{n}: there are {} NICs", self.nics));
                }
                _ => {}
            }
        }
        let reply = {
            let mut core = self.shared.lock();
            let reply = core.st.control(cmd);
            core.flush();
            reply
        };
        // Links may have changed: the timer thread plans its sleep again.
        let _ = self.shared.wake.try_send(());
        reply
    }
}

/// A NIC engine's way into the switch.
#[derive(Clone)]
pub struct EnginePort {
    port: PortId,
    shared: Shared,
    sabotage: Arc<Sabotage>,
    cc: Arc<CcKnob>,
}

impl EnginePort {
    /// The NIC's congestion control settings, which the command line and the control
    /// socket set.
    pub fn cc(&self) -> Arc<CcKnob> {
        Arc::clone(&self.cc)
    }

    /// The NIC's test-only WRITE corruption knob, which the control socket sets.
    pub fn sabotage(&self) -> Arc<Sabotage> {
        Arc::clone(&self.sabotage)
    }

    /// Switches what one engine step emitted (on the caller's thread): frames its engine
    /// built (`Engine::take_tx_unsealed`) and nothing else. The switch writes their ICRCs
    /// (`wire::seal`) before the capture, a LAN, a host interface or a link model may see
    /// them, and passes them on to other engines as built here, their ICRCs not checked
    /// (`wire/rx_frame.rs`).
    pub fn send(&self, frames: Vec<Vec<u8>>) {
        self.shared.switch(self.port, frames);
    }
}

/// A NIC on the fabric: its MAC and the queue its engine receives RoCE frames from.
pub struct NicAttachment {
    pub mac: Mac,
    pub inbound: FrameSender,
}

/// Frames queued towards one NIC engine.
pub const ENGINE_QUEUE: usize = 1024;

impl Hub {
    /// Bind every LAN socket, open the pcap file, register a RoCE engine port for each NIC,
    /// and start the threads.
    pub fn start(
        lans: &[PathBuf],
        pcap: Option<&Capture>,
        nics: Vec<NicAttachment>,
        faults: Faults,
    ) -> Result<Self, HubError> {
        let mut bound = Vec::new();
        for path in lans {
            let (listener, file) = bind(path)?;
            bound.push((listener, Arc::new(file)));
        }
        let pcap = match pcap {
            Some(cap) => {
                let err = |source| HubError::Pcap {
                    path: cap.path.clone(),
                    source,
                };
                let f = File::create(&cap.path).map_err(err)?;
                let w =
                    PcapWriter::with_snaplen(BufWriter::with_capacity(PCAP_BUFFER, f), cap.snaplen)
                        .map_err(err)?;
                Some(w)
            }
            None => None,
        };
        let sockets = bound.iter().map(|(_, f)| Arc::clone(f)).collect();

        let next_port = Arc::new(AtomicUsize::new(nics.len()));
        let live = Arc::new(AtomicUsize::new(0));
        let sabotage: Vec<Arc<Sabotage>> = nics.iter().map(|_| Arc::default()).collect();
        let cc: Vec<Arc<CcKnob>> = nics.iter().map(|_| Arc::default()).collect();
        let nic_count = nics.len();
        let engines: Vec<(Mac, PortId, FrameSender)> = nics
            .into_iter()
            .zip(0..)
            .map(|(n, p)| (n.mac, p, n.inbound))
            .collect();
        let (wake, wakeups) = sync_channel(1);
        let core = Arc::new(Mutex::new(Core::new(pcap, engines, &faults)));
        let shared = Shared {
            core: Arc::clone(&core),
            wake,
        };
        let engine_ports = (0..nic_count)
            .map(|port| EnginePort {
                port,
                shared: shared.clone(),
                sabotage: Arc::clone(&sabotage[port]),
                cc: Arc::clone(&cc[port]),
            })
            .collect();
        let control = HubControl {
            shared: shared.clone(),
            lans: lans.len(),
            nics: nic_count,
            sabotage,
            cc,
        };
        spawn("fabric-timer", move || run_timer(&core, &wakeups))?;
        for (lan, (listener, file)) in bound.into_iter().enumerate() {
            let shared = shared.clone();
            let next_port = Arc::clone(&next_port);
            let live = Arc::clone(&live);
            spawn("fabric-accept", move || {
                accept_loop(lan, listener, &file, &shared, &next_port, &live)
            })?;
        }
        Ok(Hub {
            sockets,
            engine_ports,
            control,
            shared,
            next_port,
        })
    }

    /// Joins the host's network interface `ifname` to the fabric as one more LAN
    /// (`fabric/raw.rs`): the next `lan:N` after the `--lan` sockets and the interfaces
    /// attached before. Returns its N.
    pub fn attach_interface(&mut self, ifname: &str) -> Result<usize, HubError> {
        let sock = RawSocket::open(ifname)?;
        let writer = sock.try_clone().map_err(HubError::Spawn)?;
        let lan = self.control.lans;
        let port = self.next_port.fetch_add(1, Ordering::SeqCst);
        let (qtx, qrx) = sync_channel(PORT_QUEUE);
        self.shared.lock().join(port, lan, qtx);
        self.control.lans += 1;
        log::info!("interface {ifname}: port {port}, lan:{lan}");
        spawn("fabric-raw-tx", move || raw_write_loop(port, &writer, &qrx))?;
        let shared = self.shared.clone();
        spawn("fabric-raw-rx", move || {
            raw_read_loop(port, &sock, &shared);
            shared.lock().gone(port);
        })?;
        Ok(lan)
    }
}

/// Frames from a host interface into the switch, one at a time as they come.
fn raw_read_loop(port: PortId, sock: &RawSocket, shared: &Shared) {
    let mut buf = vec![0u8; RAW_MAX_FRAME];
    loop {
        match sock.recv(&mut buf) {
            Ok(Some(n)) => shared.switch(port, vec![buf[..n].to_vec()]),
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!("port {port}: interface read: {e}; closing the port");
                break;
            }
        }
    }
}

/// Frames the switch queued for a host interface, out of it.
fn raw_write_loop(port: PortId, sock: &RawSocket, rx: &Receiver<Vec<u8>>) {
    while let Ok(f) = rx.recv() {
        // The interface may be down or the frame too big for it: lost, as on a wire.
        if let Err(e) = sock.send(&f) {
            log::debug!("port {port}: interface send: {e}");
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), HubError> {
    thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map(|_| ())
        .map_err(HubError::Spawn)
}

/// Fault injection settings: per LAN socket index, and the seed.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    pub per_lan: HashMap<usize, FaultConfig>,
    /// Per NIC (position given to `start`): faults on frames the switch hands to its engine.
    pub per_nic: HashMap<usize, FaultConfig>,
    pub seed: u64,
}

fn accept_loop(
    lan: usize,
    listener: UnixListener,
    file: &SocketFile,
    shared: &Shared,
    next_port: &AtomicUsize,
    live: &Arc<AtomicUsize>,
) {
    let name = file.path().display().to_string();
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                log::warn!("{name}: accept: {e}");
                continue;
            }
        };
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            log::warn!("{name}: refusing a connection: {MAX_CONNECTIONS} ports in use");
            continue;
        }
        let port = next_port.fetch_add(1, Ordering::SeqCst);
        log::info!("{name}: port {port} connected");
        if let Err(e) = start_port(port, lan, stream, shared.clone(), Arc::clone(live)) {
            log::error!("{name}: port {port}: {e}");
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn start_port(
    port: PortId,
    lan: usize,
    stream: UnixStream,
    shared: Shared,
    live: Arc<AtomicUsize>,
) -> Result<(), HubError> {
    let writer = stream.try_clone().map_err(HubError::Spawn)?;
    let (qtx, qrx) = sync_channel(PORT_QUEUE);
    // Join before the reader starts, so the switch knows the port before its first frame.
    shared.lock().join(port, lan, qtx);
    spawn("fabric-tx", move || write_loop(port, writer, qrx))?;
    spawn("fabric-rx", move || {
        read_loop(port, stream, &shared);
        shared.lock().gone(port);
        live.fetch_sub(1, Ordering::SeqCst);
    })
}

fn read_loop(port: PortId, mut stream: UnixStream, shared: &Shared) {
    let mut dec = Decoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => {
                if !dec.is_idle() {
                    log::warn!("port {port}: peer closed mid-frame");
                }
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("port {port}: read: {e}");
                break;
            }
        };
        let mut frames = Vec::new();
        let r = dec.feed(&buf[..n], |f| frames.push(f.to_vec()));
        shared.switch(port, frames);
        if let Err(e) = r {
            log::warn!("port {port}: {e}; closing the port");
            break;
        }
    }
    // Wake the writer too.
    let _ = stream.shutdown(Shutdown::Both);
}

fn write_loop(port: PortId, mut stream: UnixStream, rx: Receiver<Vec<u8>>) {
    let mut out = Vec::new();
    for frame in rx {
        out.clear();
        if encode(&frame, &mut out).is_err() {
            continue;
        }
        if let Err(e) = stream.write_all(&out) {
            log::warn!("port {port}: write: {e}");
            let _ = stream.shutdown(Shutdown::Both);
            break;
        }
    }
}

/// What the switch counts per port (`stats`).
#[derive(Debug, Default, Clone, Copy)]
struct PortStats {
    /// Frames taken in from the port.
    rx: u64,
    /// Frames from the port dropped because its link was down.
    rx_down: u64,
    /// Frames queued towards the port.
    tx: u64,
    /// Frames to the port dropped because its queue was full.
    queue_drops: u64,
}

/// A port's link state and faults as set by `--fault`/`--nic-fault` and the control socket;
/// kept per LAN socket (so a VM that reconnects keeps them) and per NIC.
#[derive(Debug, Default, Clone, Copy)]
struct Setting {
    down: bool,
    fault: Option<FaultConfig>,
    /// The link model of the port (`fabric/egress.rs`): line rate, buffer, ECN marking.
    shape: Option<EgressConfig>,
    /// Lossless mode for what comes in from the port (`fabric/pfc.rs`).
    pfc: Option<PfcConfig>,
}

/// Nanoseconds since `start`: the link models' clock.
fn ns_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The switch's state besides the `Switch` itself. Maps keyed by port use FxHash: a few
/// lookups a frame, and ports are the fabric's own numbers, never a guest's.
struct SwitchState {
    sw: Switch,
    start: Instant,
    queues: FxHashMap<PortId, SyncSender<Vec<u8>>>,
    engine_queues: FxHashMap<PortId, FrameSender>,
    /// Frames switched to each engine port during the current burst, queued at its end (one
    /// lock and at most one wake-up per engine and burst).
    engine_batches: FxHashMap<PortId, Vec<RxFrame>>,
    /// LAN ports and the index of the socket they joined on.
    port_lan: FxHashMap<PortId, usize>,
    links: FxHashMap<PortId, Link>,
    /// Ports with a link model: frames leave at its line rate, after its delay.
    shapers: FxHashMap<PortId, Egress>,
    /// The other direction of a shaped port's cable: the station's transmitter, at the same
    /// rate and delay, where frames from the port wait before the switch sees them, and
    /// which obeys the PFC frames the switch sends the port.
    uplinks: FxHashMap<PortId, Egress>,
    /// Ports the switch flow-controls (PFC), by what came in from them.
    pfc: FxHashMap<PortId, PfcIngress>,
    settings: HashMap<PortRef, Setting>,
    stats: BTreeMap<PortId, PortStats>,
    seed: u64,
}

impl SwitchState {
    fn ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn port_ref(&self, port: PortId) -> Option<PortRef> {
        if self.engine_queues.contains_key(&port) {
            Some(PortRef::Nic(port))
        } else {
            self.port_lan.get(&port).map(|&l| PortRef::Lan(l))
        }
    }

    fn ports_of(&self, r: PortRef) -> Vec<PortId> {
        match r {
            // Engine ports are 0..n in NIC order.
            PortRef::Nic(n) => vec![n]
                .into_iter()
                .filter(|p| self.engine_queues.contains_key(p))
                .collect(),
            PortRef::Lan(l) => {
                let mut v: Vec<PortId> = self
                    .port_lan
                    .iter()
                    .filter(|(_, &lan)| lan == l)
                    .map(|(&p, _)| p)
                    .collect();
                v.sort_unstable();
                v
            }
        }
    }

    fn ns(&self) -> u64 {
        ns_since(self.start)
    }

    /// Gives `port` the link model its setting asks for; a new model starts empty (a changed
    /// one loses what the old held, as a re-cabled port would).
    fn configure_shape(&mut self, port: PortId, shape: Option<EgressConfig>) {
        if self.shapers.get(&port).map(|e| *e.config()) == shape {
            return;
        }
        self.shapers.remove(&port);
        self.uplinks.remove(&port);
        let Some(cfg) = shape else { return };
        let up = EgressConfig {
            buffer_bytes: UPLINK_BUFFER.max(cfg.buffer_bytes),
            red: None,
            ..cfg
        };
        let seed = self.seed ^ (port as u64).rotate_left(32);
        match (Egress::new(cfg, seed), Egress::new(up, seed)) {
            (Ok(e), Ok(u)) => {
                self.shapers.insert(port, e);
                self.uplinks.insert(port, u);
            }
            // Validated when parsed; a failure here would be a bug, so just log.
            (Err(e), _) | (_, Err(e)) => log::error!("port {port}: {e}"),
        }
    }

    /// Gives `port` the flow control its setting asks for; a new one starts with nothing
    /// paused.
    fn configure_pfc(&mut self, port: PortId, pfc: Option<PfcConfig>) {
        if self.pfc.get(&port).map(|p| *p.config()) == pfc {
            return;
        }
        match pfc.map(PfcIngress::new) {
            None => {
                self.pfc.remove(&port);
            }
            Some(Ok(p)) => {
                self.pfc.insert(port, p);
            }
            // Validated when parsed; a failure here would be a bug, so just log.
            Some(Err(e)) => log::error!("port {port}: {e}"),
        }
    }

    /// Gives `port` the link its setting asks for (none when there is nothing to do).
    fn configure(&mut self, port: PortId, set: Setting) {
        self.configure_shape(port, set.shape);
        self.configure_pfc(port, set.pfc);
        if set.down {
            // A pulled cable loses what the line held, both ways.
            for e in [self.shapers.get_mut(&port), self.uplinks.get_mut(&port)]
                .into_iter()
                .flatten()
            {
                e.clear();
            }
        }
        if let Some(link) = self.links.get_mut(&port) {
            if let Err(e) = link.set_config(set.fault.unwrap_or_default()) {
                log::error!("port {port}: {e}");
            }
            link.set_down(set.down);
            return;
        }
        if !set.down && set.fault.is_none() {
            return;
        }
        match Link::new(set.fault.unwrap_or_default(), self.seed ^ port as u64) {
            Ok(mut l) => {
                l.set_down(set.down);
                self.links.insert(port, l);
            }
            // Validated when parsed; a failure here would be a bug, so just log.
            Err(e) => log::error!("port {port}: {e}"),
        }
    }

    /// Changes the setting of `port` with `change` and gives each of its switch ports the
    /// result; `what` names the new value in the log.
    fn change_setting(
        &mut self,
        port: PortRef,
        what: &str,
        change: impl FnOnce(&mut Setting),
    ) -> Reply {
        let set = self.settings.entry(port).or_default();
        change(set);
        let set = *set;
        let ports = self.ports_of(port);
        for &p in &ports {
            self.configure(p, set);
        }
        log::info!("control: {port} {what} (switch ports {ports:?})");
        Ok(Vec::new())
    }

    fn control(&mut self, cmd: Command) -> Reply {
        match cmd {
            Command::Link { ports, up } => {
                for port in ports {
                    let set = self.settings.entry(port).or_default();
                    set.down = !up;
                    let set = *set;
                    let switch_ports = self.ports_of(port);
                    for &p in &switch_ports {
                        self.configure(p, set);
                    }
                    log::info!(
                        "control: {port} link {} (switch ports {switch_ports:?})",
                        if up { "up" } else { "down" }
                    );
                }
                Ok(Vec::new())
            }
            Command::Fault { port, fault } => {
                self.change_setting(port, &format!("faults {fault:?}"), |s| s.fault = fault)
            }
            Command::Shape { port, shape } => {
                self.change_setting(port, &format!("link model {shape:?}"), |s| s.shape = shape)
            }
            Command::Pfc { port, pfc } => {
                self.change_setting(port, &format!("flow control {pfc:?}"), |s| s.pfc = pfc)
            }
            Command::Stats => Ok(self.stats_lines()),
            // Applied by `HubControl` itself; never sent here.
            Command::Help | Command::Sabotage { .. } | Command::Cc { .. } => Ok(Vec::new()),
        }
    }

    fn stats_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let ports: std::collections::BTreeSet<PortId> = self
            .engine_queues
            .keys()
            .chain(self.queues.keys())
            .chain(self.stats.keys())
            .copied()
            .collect();
        for p in ports {
            let st = self.stats.get(&p).copied().unwrap_or_default();
            let name = self
                .port_ref(p)
                .map_or_else(|| "gone".to_string(), |r| r.to_string());
            let (state, fc) = match self.links.get(&p) {
                Some(l) => (if l.is_down() { "down" } else { "up" }, l.counters()),
                None if self.port_ref(p).is_some() => ("up", FaultCounters::default()),
                None => ("gone", FaultCounters::default()),
            };
            lines.push(format!(
                "port {p} {name} {state} rx={} rx_down={} tx={} queue_drops={} \
                 fault_dropped={} down_dropped={} duplicated={} reordered={} delayed={} \
                 ce_marked={}",
                st.rx,
                st.rx_down,
                st.tx,
                st.queue_drops,
                fc.dropped + fc.dropped_delay_full,
                fc.dropped_down,
                fc.duplicated,
                fc.reordered,
                fc.delayed,
                fc.ce_marked
            ));
            if let Some(q) = self.engine_queues.get(&p) {
                let c = q.counters();
                lines.push(format!(
                    "port {p} {name} engine direct_bursts={} queued_bursts={}",
                    c.direct, c.queued
                ));
            }
            if let Some(e) = self.shapers.get(&p) {
                let c = e.counters();
                lines.push(format!(
                    "port {p} {name} link queued={} marked={} dropped={} sent_bytes={} max_depth={}",
                    c.queued, c.marked, c.dropped, c.sent_bytes, c.max_depth
                ));
            }
            if let Some(u) = self.uplinks.get(&p) {
                let c = u.counters();
                lines.push(format!(
                    "port {p} {name} uplink queued={} dropped={} sent_bytes={} max_depth={} pauses_obeyed={}",
                    c.queued, c.dropped, c.sent_bytes, c.max_depth, c.pauses_received
                ));
            }
            if let Some(f) = self.pfc.get(&p) {
                let c = f.counters();
                lines.push(format!(
                    "port {p} {name} pfc pauses={} resumes={} paused={:#04x}",
                    c.pauses,
                    c.resumes,
                    f.paused()
                ));
            }
        }
        let c = self.sw.counters();
        lines.push(format!(
            "switch forwarded={} flooded={} to_engine={} dropped_short={} dropped_bad_source={} \
             dropped_same_port={} table_full={}",
            c.forwarded,
            c.flooded,
            c.to_engine,
            c.dropped_short,
            c.dropped_bad_source,
            c.dropped_same_port,
            c.table_full
        ));
        lines
    }

    /// Queue a frame that came in from `ingress` to a port at `now` (ns) through its link (if
    /// it has one); frames to an engine wait in its batch for
    /// [`SwitchState::deliver_batches`]. `from_engine`: the frame is as an engine of this
    /// process built it (it came straight from an engine port, through no link model).
    fn emit(
        &mut self,
        p: PortId,
        ingress: PortId,
        frame: Vec<u8>,
        from_engine: bool,
        ready: &mut Vec<Vec<u8>>,
        now: u64,
    ) {
        ready.clear();
        // Nothing on a port without a link or link model can change the frame: an engine's
        // frame stays vouched for (`wire/rx_frame.rs`).
        let intact = !self.links.contains_key(&p) && !self.shapers.contains_key(&p);
        match self.links.get_mut(&p) {
            Some(link) => {
                let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
                link.send(frame, now, ready);
            }
            None => ready.push(frame),
        }
        self.shape(p, ingress, ready, now);
        self.queue_to(p, ready, from_engine && intact);
    }

    /// Passes `frames` (from `ingress`) through port `p`'s link model at `now`, if it has
    /// one: they join its queue (or are dropped or marked); the model lets them out in
    /// [`Core::run_models`].
    fn shape(&mut self, p: PortId, ingress: PortId, frames: &mut Vec<Vec<u8>>, now: u64) {
        let Some(e) = self.shapers.get_mut(&p) else {
            return;
        };
        for f in frames.drain(..) {
            e.offer_from(f, ingress, now);
        }
    }

    /// Whether `p` is an engine's port with no fault link or link model: what goes there is
    /// seen by that engine alone, as it is.
    fn is_bare_engine_port(&self, p: PortId) -> bool {
        self.engine_queues.contains_key(&p)
            && !self.links.contains_key(&p)
            && !self.shapers.contains_key(&p)
    }

    /// Queues `frames` (drained) to port `p`. `built_here`: they are exactly as engines of
    /// this process built them, so an engine receiving them need not check their ICRCs.
    fn queue_to(&mut self, p: PortId, frames: &mut Vec<Vec<u8>>, built_here: bool) {
        if let Some(q) = self.queues.get(&p) {
            let st = self.stats.entry(p).or_default();
            for f in frames.drain(..) {
                enqueue(q, p, f, st);
            }
        } else if self.engine_queues.contains_key(&p) {
            let batch = self.engine_batches.entry(p).or_default();
            if built_here {
                batch.extend(frames.drain(..).map(RxFrame::built_here));
            } else {
                batch.extend(frames.drain(..).map(RxFrame::from_wire));
            }
        } else {
            frames.clear();
        }
    }

    /// Takes the frames switched to each engine since the last call, with its queue, for
    /// [`FrameSender::deliver`] after the lock is released; counts them as sent
    /// ([`SwitchState::count_engine_drops`] takes back what did not fit).
    fn take_batches(&mut self) -> Vec<(PortId, FrameSender, Vec<RxFrame>)> {
        let mut out = Vec::new();
        for (p, batch) in self.engine_batches.iter_mut() {
            if batch.is_empty() {
                continue;
            }
            let Some(q) = self.engine_queues.get(p) else {
                batch.clear();
                continue;
            };
            self.stats.entry(*p).or_default().tx += batch.len() as u64;
            out.push((*p, q.clone(), std::mem::take(batch)));
        }
        out
    }

    /// `n` frames taken by [`SwitchState::take_batches`] for engine port `p` did not fit
    /// its queue.
    fn count_engine_drops(&mut self, p: PortId, n: usize) {
        let st = self.stats.entry(p).or_default();
        st.tx = st.tx.saturating_sub(n as u64);
        st.queue_drops += n as u64;
        log::debug!("port {p}: engine queue full, {} drops", st.queue_drops);
    }

    /// Hands each engine the frames switched to it since the last call (queued: under the
    /// switch's lock, never delivered on this thread).
    fn deliver_batches(&mut self) {
        for (p, q, batch) in self.take_batches() {
            let n = batch.len();
            let queued = q.push(batch);
            if queued < n {
                self.count_engine_drops(p, n - queued);
            }
        }
    }
}

/// The switch with its capture: see the module comment.
struct Core {
    st: SwitchState,
    pcap: Option<PcapWriter<BufWriter<File>>>,
    /// When the oldest frame the capture file does not have yet was captured.
    unflushed_since: Option<Instant>,
    /// Scratch: the ports a frame goes to, frames a link releases.
    out: Vec<PortId>,
    ready: Vec<Vec<u8>>,
}

impl Core {
    fn new(
        pcap: Option<PcapWriter<BufWriter<File>>>,
        engines: Vec<(Mac, PortId, FrameSender)>,
        faults: &Faults,
    ) -> Self {
        let mut st = SwitchState {
            sw: Switch::new(AGING_SECS),
            start: Instant::now(),
            queues: FxHashMap::default(),
            engine_queues: FxHashMap::default(),
            engine_batches: FxHashMap::default(),
            port_lan: FxHashMap::default(),
            links: FxHashMap::default(),
            shapers: FxHashMap::default(),
            uplinks: FxHashMap::default(),
            pfc: FxHashMap::default(),
            settings: HashMap::new(),
            stats: BTreeMap::new(),
            seed: faults.seed,
        };
        for (mac, port, q) in engines {
            st.sw.set_engine(mac, port);
            st.engine_queues.insert(port, q);
        }
        for (&lan, cfg) in &faults.per_lan {
            st.settings.insert(
                PortRef::Lan(lan),
                Setting {
                    fault: Some(*cfg),
                    ..Setting::default()
                },
            );
        }
        for (&nic, cfg) in &faults.per_nic {
            if st.engine_queues.contains_key(&nic) {
                let set = Setting {
                    fault: Some(*cfg),
                    ..Setting::default()
                };
                st.settings.insert(PortRef::Nic(nic), set);
                st.configure(nic, set);
            }
        }
        Core {
            st,
            pcap,
            unflushed_since: None,
            out: Vec::new(),
            ready: Vec::new(),
        }
    }

    /// A LAN connection joined on socket `lan`; frames to it go to `q`.
    fn join(&mut self, port: PortId, lan: usize, q: SyncSender<Vec<u8>>) {
        let st = &mut self.st;
        st.sw.add_port(port);
        st.queues.insert(port, q);
        st.port_lan.insert(port, lan);
        st.stats.insert(port, PortStats::default());
        if let Some(set) = st.settings.get(&PortRef::Lan(lan)).copied() {
            st.configure(port, set);
        }
    }

    fn gone(&mut self, port: PortId) {
        log::info!("port {port} disconnected");
        let st = &mut self.st;
        st.sw.remove_port(port);
        st.queues.remove(&port);
        st.port_lan.remove(&port);
        st.stats.remove(&port);
        st.shapers.remove(&port);
        st.uplinks.remove(&port);
        st.pfc.remove(&port);
        if let Some(l) = st.links.remove(&port) {
            log::info!("port {port} faults: {:?}", l.counters());
        }
    }

    /// Switches `frames` from `port` in order: learning, capture, the destination ports'
    /// links and queues. Returns whether the timer thread must plan its sleep again (a
    /// delayed frame is due sooner, or the capture has its first unwritten frame).
    fn switch_burst(&mut self, port: PortId, frames: Vec<Vec<u8>>) -> bool {
        let due_before = self.next_due();
        let clean_before = self.unflushed_since.is_none();
        // Most ports have no link model: no clock read on their frames' path.
        let modelled = !self.st.shapers.is_empty() || !self.st.pfc.is_empty();
        let now = if modelled { self.st.ns() } else { 0 };
        // An engine port's frames come as its engine built them (`wire/rx_frame.rs`), and
        // unsealed (`EnginePort::send`).
        let from_engine = self.st.engine_queues.contains_key(&port);
        if let Some(u) = self.st.uplinks.get_mut(&port) {
            // A shaped port's station sends at its line rate: the switch sees its frames when
            // they have crossed the cable (`run_models`), as any others.
            for mut frame in frames {
                if !from_engine || seal_or_log(port, &mut frame) {
                    u.offer(frame, now);
                }
            }
        } else {
            // One clock read a burst for the MAC table's aging (seconds).
            let secs = self.st.start.elapsed().as_secs();
            for frame in frames {
                self.switch_one(port, frame, from_engine, now, secs);
            }
            self.flow_control(now);
        }
        let sooner = match (self.next_due(), due_before) {
            (Some(now), Some(before)) => now < before,
            (Some(_), None) => true,
            (None, _) => false,
        };
        sooner || (clean_before && self.unflushed_since.is_some())
    }

    /// Switches one frame from `port` that reached the switch at `now` (ns; 0 when no port
    /// has a link model; `secs` on the MAC table's clock): learning, capture, the
    /// destination ports' links and queues.
    fn switch_one(
        &mut self,
        port: PortId,
        mut frame: Vec<u8>,
        from_engine: bool,
        now: u64,
        secs: u64,
    ) {
        if self.st.links.get(&port).is_some_and(Link::is_down) {
            self.st.stats.entry(port).or_default().rx_down += 1;
            return;
        }
        self.st.stats.entry(port).or_default().rx += 1;
        self.st.sw.forward(port, &frame, secs, &mut self.out);
        if self.out.is_empty() {
            return;
        }
        // An engine's frame is sealed unless it goes only to engines, through no link model,
        // and the capture keeps none of its ICRC.
        let seen = self.capture_keeps_icrc(frame.len())
            || self.out.iter().any(|p| !self.st.is_bare_engine_port(*p));
        if from_engine && seen && !seal_or_log(port, &mut frame) {
            return;
        }
        self.capture(&frame);
        // The last port takes the frame itself: one copy fewer per unicast frame.
        let out = std::mem::take(&mut self.out);
        if let Some((&last, rest)) = out.split_last() {
            for &p in rest {
                self.st
                    .emit(p, port, frame.clone(), from_engine, &mut self.ready, now);
            }
            self.st
                .emit(last, port, frame, from_engine, &mut self.ready, now);
        }
        self.out = out;
    }

    /// Whether the capture records any byte of the ICRC of a frame `len` bytes long (the
    /// last four; RoCEv2 frames carry no Ethernet padding).
    fn capture_keeps_icrc(&self, len: usize) -> bool {
        self.pcap
            .as_ref()
            .is_some_and(|w| w.snaplen() as usize + ICRC_LEN > len)
    }

    /// Writes `frame` to the capture, if there is one.
    fn capture(&mut self, frame: &[u8]) {
        if let Some(w) = self.pcap.as_mut() {
            match w.write(frame) {
                Ok(()) => {
                    self.unflushed_since.get_or_insert_with(Instant::now);
                }
                Err(e) => {
                    log::error!("pcap: {e}; capture stopped");
                    self.pcap = None;
                }
            }
        }
    }

    /// Lossless mode (`fabric/pfc.rs`): per flow-controlled port, what came in from it and
    /// still waits in the link models; the PFC frames this calls for go out of that port
    /// (ahead of its queue if it has a link model) and into the capture. `now`: the link
    /// models' time (ns).
    fn flow_control(&mut self, now: u64) {
        if self.st.pfc.is_empty() {
            return;
        }
        let mut ports: Vec<PortId> = self.st.pfc.keys().copied().collect();
        ports.sort_unstable();
        for p in ports {
            let mut occ = [0u64; 8];
            for e in self.st.shapers.values_mut() {
                for (o, b) in occ.iter_mut().zip(e.occupancy(p, now)) {
                    *o += b;
                }
            }
            let rate = self
                .st
                .shapers
                .get(&p)
                .map_or(UNSHAPED_RATE_BPS, |e| e.config().rate_bps);
            let Some(f) = self.st.pfc.get_mut(&p) else {
                continue;
            };
            let Some(pfc) = f.update(&occ, now, rate, switch_port_mac(p)) else {
                continue;
            };
            let frame = pfc.build();
            self.capture(&frame);
            if let Some(e) = self.st.shapers.get_mut(&p) {
                e.send_control(frame, now);
            } else {
                self.ready.clear();
                self.ready.push(frame);
                self.st.queue_to(p, &mut self.ready, false);
            }
        }
    }

    /// When the next delayed frame is due, or the next frame leaves a link model, or a PFC
    /// pause must be sent again (switch clock, ns).
    fn next_due(&self) -> Option<u64> {
        let delayed = self
            .st
            .links
            .values()
            .filter_map(Link::next_due)
            // A fault link's ticks are whole milliseconds since the start, counted from the
            // millisecond a frame came in: the end of the due one keeps a delay at least
            // as long as asked.
            .map(|ms| ms.saturating_add(1).saturating_mul(1_000_000));
        let shaped = self.st.shapers.values().filter_map(Egress::next_due);
        let sent = self.st.uplinks.values().filter_map(Egress::next_due);
        let refresh = self.st.pfc.values().filter_map(PfcIngress::next_refresh);
        delayed.chain(shaped).chain(sent).chain(refresh).min()
    }

    /// Queues the delayed frames that are due (through the port's link model, if any) and
    /// what the link models let out.
    fn release_due(&mut self) {
        let now = self.st.ms();
        let ports: Vec<PortId> = self.st.links.keys().copied().collect();
        for p in ports {
            self.ready.clear();
            if let Some(link) = self.st.links.get_mut(&p) {
                link.poll(now, &mut self.ready);
            }
            let now = self.st.ns();
            self.st.shape(p, NO_INGRESS, &mut self.ready, now);
            self.st.queue_to(p, &mut self.ready, false);
        }
        let now = self.st.ns();
        self.run_models(now);
        self.st.deliver_batches();
    }

    /// Runs the link models up to `now` event by event, in the order of their own clock,
    /// however late the timer woke: frames that crossed a station's cable reach the switch
    /// at the time they arrive (and are switched then), frames that crossed the switch's
    /// reach their station, PFC frames among them stop the station's transmitter then, and
    /// the flow control looks at the queues after each step. So a loaded host delays the
    /// figures' delivery, not the figures.
    fn run_models(&mut self, now: u64) {
        // Ports change only under a control request, never in here.
        let mut uplink_ports: Vec<PortId> = self.st.uplinks.keys().copied().collect();
        uplink_ports.sort_unstable();
        let mut shaped_ports: Vec<PortId> = self.st.shapers.keys().copied().collect();
        shaped_ports.sort_unstable();
        for _ in 0..MAX_EVENTS {
            let Some(t) = self
                .st
                .shapers
                .values()
                .chain(self.st.uplinks.values())
                .filter_map(Egress::next_due)
                .min()
                .filter(|&t| t <= now)
            else {
                break;
            };
            for &p in &uplink_ports {
                let mut frames = Vec::new();
                if let Some(u) = self.st.uplinks.get_mut(&p) {
                    u.poll(t, &mut frames);
                }
                for f in frames {
                    // Through a link model (which may mark ECN): no longer as built.
                    self.switch_one(p, f, false, t, self.st.start.elapsed().as_secs());
                }
            }
            for &p in &shaped_ports {
                self.ready.clear();
                if let Some(e) = self.st.shapers.get_mut(&p) {
                    e.poll(t, &mut self.ready);
                }
                if let Some(u) = self.st.uplinks.get_mut(&p) {
                    for f in self.ready.iter().filter(|f| wpfc::is_mac_control(f)) {
                        if let Some(pfc) = wpfc::Pfc::parse(f) {
                            u.pause(&pfc, t);
                        }
                    }
                }
                self.st.queue_to(p, &mut self.ready, false);
            }
            self.flow_control(t);
        }
        // Pauses due again while nothing moved.
        self.flow_control(now);
    }

    fn flush(&mut self) {
        self.unflushed_since = None;
        if let Some(Err(e)) = self.pcap.as_mut().map(PcapWriter::flush) {
            log::error!("pcap: {e}; capture stopped");
            self.pcap = None;
        }
    }

    /// How long the timer thread may sleep (None: until woken).
    fn sleep(&self) -> Option<Duration> {
        let due = self
            .next_due()
            .map(|t| Duration::from_nanos(t.saturating_sub(self.st.ns())));
        let flush = self
            .unflushed_since
            .map(|t| FLUSH_DELAY.saturating_sub(t.elapsed()));
        due.into_iter().chain(flush).min()
    }
}

/// The timer thread: releases delayed frames when due and flushes the capture.
fn run_timer(core: &Mutex<Core>, wakeups: &Receiver<()>) {
    loop {
        let sleep = lock(core).sleep();
        let r = match sleep {
            None => wakeups.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(d) => wakeups.recv_timeout(d),
        };
        match r {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => {
                let mut c = lock(core);
                c.release_due();
                if c.unflushed_since
                    .is_some_and(|t| t.elapsed() >= FLUSH_DELAY)
                {
                    c.flush();
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                lock(core).flush();
                return;
            }
        }
    }
}

/// Queue a frame to a port; a full queue drops it, as a congested switch port would.
fn enqueue(q: &SyncSender<Vec<u8>>, port: PortId, frame: Vec<u8>, st: &mut PortStats) {
    match q.try_send(frame) {
        Ok(()) => st.tx += 1,
        Err(TrySendError::Full(_)) => {
            st.queue_drops += 1;
            log::debug!("port {port}: queue full, {} drops", st.queue_drops);
        }
        Err(TrySendError::Disconnected(_)) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::testframes::plain;
    use super::*;

    fn tmpdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ferrdma-hub-{}-{:?}",
            std::process::id(),
            thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn send(s: &mut UnixStream, f: &[u8]) {
        let mut out = Vec::new();
        encode(f, &mut out).unwrap();
        s.write_all(&out).unwrap();
    }

    fn recv(s: &mut UnixStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut f = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut f).unwrap();
        f
    }

    #[test]
    fn two_clients_talk_through_the_switch_and_the_pcap_records_it() {
        let d = tmpdir();
        let (a, b, cap) = (d.join("a.sock"), d.join("b.sock"), d.join("cap.pcap"));
        let hub = Hub::start(
            &[a.clone(), b.clone()],
            Some(&Capture {
                path: cap.clone(),
                snaplen: 128,
            }),
            vec![NicAttachment {
                mac: [2, 0, 0, 0, 0, 9],
                inbound: super::super::queue::frame_queue(1).0,
            }],
            Faults::default(),
        )
        .unwrap();
        let mut ca = UnixStream::connect(&a).unwrap();
        let mut cb = UnixStream::connect(&b).unwrap();
        ca.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        cb.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let ma = [0x52, 0x54, 0, 0, 0, 0xa];
        let mb = [0x52, 0x54, 0, 0, 0, 0xb];
        // B may not be joined yet when A's broadcast arrives: retry until it floods to B.
        let bcast = plain([0xff; 6], ma);
        let mut got = None;
        for _ in 0..50 {
            send(&mut ca, &bcast);
            cb.set_read_timeout(Some(std::time::Duration::from_millis(100)))
                .unwrap();
            let mut len = [0u8; 4];
            if cb.read_exact(&mut len).is_ok() {
                let mut f = vec![0u8; u32::from_be_bytes(len) as usize];
                cb.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                cb.read_exact(&mut f).unwrap();
                got = Some(f);
                break;
            }
        }
        assert_eq!(got.as_deref(), Some(&bcast[..]));
        cb.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        send(&mut cb, &plain(ma, mb));
        assert_eq!(recv(&mut ca), plain(ma, mb));
        // A bad length closes that port only.
        ca.write_all(&[0, 0, 0, 0]).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(ca.read(&mut byte).unwrap_or(0), 0);
        hub.control.flush_capture();
        let pcap = std::fs::read(&cap).unwrap();
        assert!(pcap.len() >= 24 + 2 * (16 + 60));
        assert_eq!(
            &pcap[16..20],
            &128u32.to_le_bytes(),
            "the snap length asked for"
        );
        drop(hub);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn faults_apply_to_the_ports_of_their_lan_socket() {
        let d = tmpdir();
        let (a, b) = (d.join("a.sock"), d.join("b.sock"));
        let mut per_lan = HashMap::new();
        per_lan.insert(1, FaultConfig::parse("dup=1,delay=1,delay-ms=30").unwrap());
        let faults = Faults {
            per_lan,
            per_nic: HashMap::new(),
            seed: 1,
        };
        let hub = Hub::start(&[a.clone(), b.clone()], None, Vec::new(), faults).unwrap();
        let mut ca = UnixStream::connect(&a).unwrap();
        let mut cb = UnixStream::connect(&b).unwrap();
        cb.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        // Both joins are sent by the acceptors right after accept; give them a moment.
        thread::sleep(std::time::Duration::from_millis(300));
        let f = plain([0x52, 0x54, 0, 0, 0, 0xb], [0x52, 0x54, 0, 0, 0, 0xa]);
        let t0 = Instant::now();
        send(&mut ca, &f);
        assert_eq!(recv(&mut cb), f);
        assert!(t0.elapsed() >= std::time::Duration::from_millis(30));
        assert_eq!(recv(&mut cb), f, "duplicate");
        drop(hub);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A fabric of two NICs and no LAN, for the control tests.
    /// Two NICs' attachments, MACs 52:54:00:00:TAG:00 and :01, and their engines' queues.
    fn two_nics(
        tag: u8,
    ) -> (
        [Mac; 2],
        Vec<NicAttachment>,
        [super::super::queue::FrameReceiver; 2],
    ) {
        use super::super::queue::frame_queue;
        let macs = [[0x52, 0x54, 0, 0, tag, 0], [0x52, 0x54, 0, 0, tag, 1]];
        let (tx_a, rx_a) = frame_queue(64);
        let (tx_b, rx_b) = frame_queue(256);
        let nics = vec![
            NicAttachment {
                mac: macs[0],
                inbound: tx_a,
            },
            NicAttachment {
                mac: macs[1],
                inbound: tx_b,
            },
        ];
        (macs, nics, [rx_a, rx_b])
    }

    /// A frame from one engine to another with nothing between arrives vouched for (its
    /// ICRC is not checked, `wire/rx_frame.rs`) and as the engine sent it, unsealed; through
    /// a fault link on the receiving port, or from a LAN, it arrives sealed and is checked;
    /// an engine's frame to a LAN station leaves sealed.
    #[test]
    fn only_frames_straight_from_an_engine_skip_the_icrc() {
        use super::super::control::handle_line;
        use super::super::queue::Received;
        use super::super::testframes::{plain, roce};
        use crate::wire::Icrc;
        let d = tmpdir();
        let lan = d.join("lan.sock");
        let ([a, b], nics, [rx_a, _rx_b]) = two_nics(12);
        let hub = Hub::start(std::slice::from_ref(&lan), None, nics, Faults::default()).unwrap();
        // As an engine sends an IPv4 frame: its ICRC not written yet (`wire::Seal`).
        let unsealed = |f: &[u8]| {
            let mut u = f.to_vec();
            let n = u.len();
            u[n - 4..].fill(0);
            u
        };
        let f = roce(a, b, false, false);
        let take = |n: usize| {
            let mut got = Vec::new();
            let t0 = Instant::now();
            while got.len() < n && t0.elapsed() < std::time::Duration::from_secs(5) {
                if let Received::Frames(fr) = rx_a.recv(16, std::time::Duration::from_millis(50)) {
                    got.extend(fr);
                }
            }
            got.into_iter()
                .map(|g| (g.icrc(), g.into_bytes()))
                .collect::<Vec<_>>()
        };
        hub.engine_ports[1].send(vec![unsealed(&f)]);
        assert_eq!(
            take(1),
            [(Icrc::BuiltHere, unsealed(&f))],
            "engine to engine"
        );
        let mut c = UnixStream::connect(&lan).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        thread::sleep(std::time::Duration::from_millis(300));
        send(&mut c, &f);
        assert_eq!(take(1), [(Icrc::Verify, f.clone())], "from a LAN");
        // The station's MAC is learned from its frame; RoCE to it goes to its port.
        let m = [0x52, 0x54, 0, 0, 12, 9];
        send(&mut c, &plain([0xff; 6], m));
        thread::sleep(std::time::Duration::from_millis(100));
        let to_lan = roce(m, b, false, false);
        hub.engine_ports[1].send(vec![unsealed(&to_lan)]);
        assert_eq!(recv(&mut c), to_lan, "sealed for the LAN");
        handle_line(b"fault nic:0 dup=1", &hub.control)
            .unwrap()
            .unwrap();
        hub.engine_ports[1].send(vec![unsealed(&f)]);
        assert_eq!(
            take(2),
            [(Icrc::Verify, f.clone()), (Icrc::Verify, f.clone())],
            "through a fault link"
        );
        drop(hub);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The capture sees an engine's frame sealed when it keeps any of its ICRC, as it is
    /// when it keeps only headers.
    #[test]
    fn the_capture_sees_an_engines_frame_sealed_when_it_keeps_the_icrc() {
        use super::super::pcap::Capture;
        for snaplen in [128u32, 65535] {
            let d = tmpdir();
            let cap = d.join("c.pcap");
            let ([a, b], nics, [rx_a, _rx_b]) = two_nics(13);
            let capture = Capture {
                path: cap.clone(),
                snaplen,
            };
            let hub = Hub::start(&[], Some(&capture), nics, Faults::default()).unwrap();
            // Long enough for a header-only capture to miss its ICRC.
            let mut h =
                crate::wire::tests::headers(crate::wire::opcode::RC_SEND_ONLY, false, false);
            (h.eth.dst, h.eth.src) = (a, b);
            let f = crate::wire::build(&h, &[0x5a; 1000]).unwrap();
            let mut u = f.clone();
            let n = u.len();
            u[n - 4..].fill(0);
            hub.engine_ports[1].send(vec![u.clone()]);
            let t0 = Instant::now();
            let got = loop {
                if let super::super::queue::Received::Frames(fr) =
                    rx_a.recv(16, std::time::Duration::from_millis(50))
                {
                    break fr;
                }
                assert!(t0.elapsed() < std::time::Duration::from_secs(5));
            };
            hub.control.flush_capture();
            let pcap = std::fs::read(&cap).unwrap();
            let kept = &pcap[24 + 16..];
            let whole = snaplen as usize >= n;
            let want = if whole { &f[..] } else { &u[..] };
            assert_eq!(kept, &want[..kept.len()], "snaplen {snaplen}");
            assert_eq!(kept.len(), n.min(snaplen as usize));
            assert_eq!(
                got[0].bytes(),
                want,
                "snaplen {snaplen}: the engine gets it as captured"
            );
            drop(hub);
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    fn two_nic_hub() -> Hub {
        let nics = (0..2)
            .map(|i| NicAttachment {
                mac: [0x52, 0x54, 0, 0, 1, i],
                inbound: super::super::queue::frame_queue(4).0,
            })
            .collect();
        Hub::start(&[], None, nics, Faults::default()).unwrap()
    }

    /// `sabotage nic:N ...` reaches exactly NIC N's knob (the one its engine gets through
    /// its `EnginePort`), is off until asked, and refuses a NIC that does not exist.
    #[test]
    fn control_arms_and_disarms_one_nics_sabotage() {
        use super::super::control::{handle_line, Apply, Command, SabotageKnob};
        let hub = two_nic_hub();
        let knobs: Vec<_> = hub.engine_ports.iter().map(|p| p.sabotage()).collect();
        assert!(knobs.iter().all(|k| k.offset().is_none()), "off by default");
        let reply = handle_line(b"sabotage nic:1 write-byte=4097", &hub.control).unwrap();
        assert!(reply.unwrap()[0].contains("flipping byte 4097"));
        assert_eq!((knobs[0].offset(), knobs[1].offset()), (None, Some(4097)));
        let off = Command::Sabotage {
            nic: 1,
            knob: SabotageKnob::WriteByte(None),
        };
        assert!(hub.control.apply(off).is_ok());
        assert_eq!(knobs[1].offset(), None);
        let none = Command::Sabotage {
            nic: 2,
            knob: SabotageKnob::WriteByte(Some(1)),
        };
        assert!(hub.control.apply(none).unwrap_err().contains("no nic:2"));
    }

    /// `shape nic:N SPEC` puts a link model on the frames to NIC N's engine: they arrive no
    /// sooner than the line rate lets them, what the buffer cannot hold is dropped and
    /// counted in `stats`, and `shape nic:N off` takes the model away.
    #[test]
    fn a_shaped_port_paces_and_drops() {
        use super::super::control::handle_line;
        use super::super::queue::Received;
        use super::super::testframes::roce;
        let ([a, b], nics, [rx_a, _]) = two_nics(2);
        let hub = Hub::start(&[], None, nics, Faults::default()).unwrap();
        let f = roce(a, b, false, false);
        // 1 Mb/s: each 70-byte frame (94 on the line) takes 752 us; room for three.
        let spec = format!(
            "shape nic:0 rate-mbps=1,delay-us=100,buffer={}",
            3 * f.len()
        );
        assert!(handle_line(spec.as_bytes(), &hub.control).unwrap().is_ok());
        let t0 = Instant::now();
        hub.engine_ports[1].send(vec![f.clone(); 10]);
        let mut got = Vec::new();
        while got.len() < 3 && t0.elapsed() < std::time::Duration::from_secs(10) {
            if let Received::Frames(fr) = rx_a.recv(16, std::time::Duration::from_millis(50)) {
                got.extend(fr);
            }
        }
        // The third frame's last bit leaves 3 x 752 us after the burst, then 100 us on the
        // wire: never sooner, however fast the host.
        assert_eq!(got.len(), 3);
        assert!(t0.elapsed() >= std::time::Duration::from_micros(3 * 752 + 100));
        assert!(got.iter().all(|g| g.bytes() == f));
        // Through a link model: no longer vouched for.
        assert!(got.iter().all(|g| g.icrc() == crate::wire::Icrc::Verify));
        let stats = handle_line(b"stats", &hub.control).unwrap().unwrap();
        let line = stats
            .iter()
            .find(|l| l.contains(" link "))
            .unwrap_or_else(|| panic!("no link line: {stats:?}"));
        // Offered within microseconds of each other: 3 queued, 7 dropped (at least 6 on a
        // host so slow that the first frame left during the burst).
        let field = |k: &str| -> u64 {
            line.split(' ')
                .find_map(|w| w.strip_prefix(k))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{k} in {line}"))
        };
        assert_eq!(field("queued=") + field("dropped="), 10, "{line}");
        assert!(field("dropped=") >= 6, "{line}");
        assert!(handle_line(b"shape nic:0 off", &hub.control)
            .unwrap()
            .is_ok());
        hub.engine_ports[1].send(vec![f.clone(); 10]);
        let mut n = 0;
        while n < 10 {
            match rx_a.recv(16, std::time::Duration::from_secs(5)) {
                Received::Frames(fr) => n += fr.len(),
                _ => break,
            }
        }
        assert_eq!(n, 10, "without the model nothing is dropped");
        assert!(
            handle_line(b"shape nic:0 rate-mbps=0,buffer=10", &hub.control)
                .unwrap()
                .is_err()
        );
    }

    /// `cc nic:N SPEC` changes exactly NIC N's settings, which an engine sharing the knob
    /// takes at its next step; a bad SPEC changes nothing.
    #[test]
    fn pfc_pauses_the_port_whose_frames_fill_the_queue_and_resumes_it() {
        use super::super::control::handle_line;
        use super::super::queue::Received;
        use super::super::testframes::roce;
        use crate::wire::pfc::Pfc;
        let dir = tmpdir();
        let cap = dir.join("pfc.pcap");
        let ([a, b], nics, [rx_a, rx_b]) = two_nics(3);
        let capture = Capture {
            path: cap.clone(),
            snaplen: 128,
        };
        let hub = Hub::start(&[], Some(&capture), nics, Faults::default()).unwrap();
        let f = roce(a, b, false, false);
        let len = f.len();
        // NIC 0's port drains at 1 Mb/s (752 us a frame); what NIC 1 sends it is paused at
        // two frames queued and resumed at one. The test frames are priority 0.
        let shape = format!("shape nic:0 rate-mbps=1,buffer={}", 100 * len);
        let pfc = format!("pfc nic:1 xoff={},xon={},prio=0", 2 * len, len);
        for cmd in [shape, pfc] {
            assert!(handle_line(cmd.as_bytes(), &hub.control).unwrap().is_ok());
        }
        hub.engine_ports[1].send(vec![f.clone(); 6]);
        let t0 = Instant::now();
        let (mut to_a, mut pfc_to_b) = (0, Vec::new());
        while (to_a < 6 || pfc_to_b.last().is_none_or(|p: &Pfc| p.quanta[0] != 0))
            && t0.elapsed() < std::time::Duration::from_secs(10)
        {
            if let Received::Frames(fr) = rx_a.recv(16, std::time::Duration::from_millis(1)) {
                to_a += fr.len();
            }
            while let Received::Frames(fr) = rx_b.recv(16, std::time::Duration::ZERO) {
                pfc_to_b.extend(
                    fr.iter()
                        .map(|g| Pfc::parse(g.bytes()).expect("only PFC to NIC 1")),
                );
            }
        }
        assert_eq!(to_a, 6, "lossless: every frame arrives");
        // The first pauses priority 0 from the switch port's MAC; the last resumes it.
        let first = pfc_to_b.first().expect("a pause");
        assert_eq!((first.enable, first.quanta[0]), (1, 0xffff));
        assert_eq!(first.src, switch_port_mac(1));
        assert_eq!(pfc_to_b.last().map(|p| p.quanta), Some([0; 8]));
        let stats = handle_line(b"stats", &hub.control).unwrap().unwrap();
        let line = stats
            .iter()
            .find(|l| l.contains(" pfc "))
            .unwrap_or_else(|| panic!("no pfc line: {stats:?}"));
        assert!(
            line.contains("nic:1") && line.contains("resumes=1") && line.contains("paused=0x00"),
            "{line}"
        );
        // Every PFC frame is in the capture (`stats` flushed it).
        let pcap = std::fs::read(&cap).unwrap();
        let n = pcap
            .windows(18)
            .filter(|w| w[..6] == crate::wire::pfc::PAUSE_DST && w[12..14] == [0x88, 0x08])
            .count();
        assert_eq!(n, pfc_to_b.len());
        assert!(handle_line(b"pfc nic:1 xoff=1,xon=2", &hub.control)
            .unwrap()
            .is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A shaped port is a cable both ways: the station's frames reach the switch at the
    /// line rate, and PFC stops the station's side of it. A sender 10x faster than the
    /// receiver's port overflows its 4-frame buffer; with PFC on the sender's port, nothing
    /// is lost.
    #[test]
    fn pfc_on_a_shaped_port_stops_its_station_before_the_buffer_overflows() {
        use super::super::control::handle_line;
        use super::super::queue::Received;
        use super::super::testframes::roce;
        let ([a, b], nics, [rx_a, rx_b]) = two_nics(4);
        let hub = Hub::start(&[], None, nics, Faults::default()).unwrap();
        let f = roce(a, b, false, false);
        let len = f.len();
        let field = |line: &str, k: &str| -> u64 {
            line.split(' ')
                .find_map(|w| w.strip_prefix(k))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{k} in {line}"))
        };
        let stats_line = |what: &str| -> String {
            let stats = handle_line(b"stats", &hub.control).unwrap().unwrap();
            stats
                .into_iter()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no {what:?} line"))
        };
        // A burst of 12 frames from NIC 1 to NIC 0; returns the frames NIC 0 got.
        let burst = || -> usize {
            hub.engine_ports[1].send(vec![f.clone(); 12]);
            let mut got = 0;
            while let Received::Frames(fr) = rx_a.recv(16, std::time::Duration::from_millis(200)) {
                got += fr.len();
            }
            got
        };
        let setup = [
            format!("shape nic:1 rate-mbps=10,buffer={}", 100 * len),
            format!("shape nic:0 rate-mbps=1,buffer={}", 4 * len),
        ];
        for cmd in &setup {
            assert!(handle_line(cmd.as_bytes(), &hub.control).unwrap().is_ok());
        }
        let lossy = burst();
        let dropped = field(&stats_line(" nic:0 link "), "dropped=");
        assert!(
            lossy < 12 && dropped == (12 - lossy) as u64,
            "lossy: {lossy} arrived, {dropped} dropped"
        );
        // The same with PFC on NIC 1's port (new models: the counters start again).
        let pfc = format!("pfc nic:1 xoff={},xon={},prio=0", 2 * len, len);
        for cmd in ["shape nic:0 off", "shape nic:1 off"]
            .iter()
            .map(|c| c.to_string())
            .chain(setup)
            .chain([pfc])
        {
            assert!(handle_line(cmd.as_bytes(), &hub.control).unwrap().is_ok());
        }
        assert_eq!(burst(), 12, "lossless: every frame arrives");
        assert_eq!(field(&stats_line(" nic:0 link "), "dropped="), 0);
        let up = stats_line(" nic:1 uplink ");
        assert!(
            field(&up, "pauses_obeyed=") >= 2,
            "paused and resumed: {up}"
        );
        assert!(field(&stats_line(" nic:1 pfc "), "pauses=") >= 1);
        // NIC 1's engine heard the same PFC frames (its counters count them).
        let mut heard = 0;
        while let Received::Frames(fr) = rx_b.recv(16, std::time::Duration::ZERO) {
            assert!(fr
                .iter()
                .all(|g| crate::wire::pfc::Pfc::parse(g.bytes()).is_some()));
            heard += fr.len() as u64;
        }
        assert_eq!(heard, field(&up, "pauses_obeyed="));
    }

    /// Two fabrics joined through host interfaces (issue 20): a veth pair in a network
    /// namespace of the test's own (needs root, as make check runs). A RoCE frame from a NIC
    /// on fabric A reaches the NIC on fabric B through the pair and back, byte for byte; the
    /// host's own frames on an interface are not switched back; a bad interface is refused.
    #[test]
    fn host_interfaces_join_two_fabrics() {
        use super::super::queue::{frame_queue, Received};
        use super::super::testframes::roce;
        use std::process::Command;
        let t = thread::spawn(|| {
            // SAFETY: unshare only changes this thread's network namespace.
            let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                r,
                0,
                "unshare(CLONE_NEWNET): {} (this test needs root)",
                std::io::Error::last_os_error()
            );
            for args in [
                &["link", "add", "fa0", "type", "veth", "peer", "name", "fb0"][..],
                &["link", "set", "fa0", "up"],
                &["link", "set", "fb0", "up"],
            ] {
                let st = Command::new("ip").args(args).status().expect("running ip");
                assert!(st.success(), "ip {args:?}");
            }
            let (a, b) = ([0x52, 0x54, 0, 0, 5, 0], [0x52, 0x54, 0, 0, 5, 1]);
            let mut hubs = Vec::new();
            let mut rx = Vec::new();
            for (mac, ifname) in [(a, "fa0"), (b, "fb0")] {
                let (tx, r) = frame_queue(64);
                let mut hub = Hub::start(
                    &[],
                    None,
                    vec![NicAttachment { mac, inbound: tx }],
                    Faults::default(),
                )
                .unwrap();
                assert_eq!(hub.attach_interface(ifname).unwrap(), 0, "lan:0");
                assert!(matches!(
                    hub.attach_interface("fz9"),
                    Err(HubError::Interface(_))
                ));
                hubs.push(hub);
                rx.push(r);
            }
            let recv = |r: &super::super::queue::FrameReceiver| -> Vec<Vec<u8>> {
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(5) {
                    if let Received::Frames(f) = r.recv(16, Duration::from_millis(50)) {
                        return f.into_iter().map(RxFrame::into_bytes).collect();
                    }
                }
                Vec::new()
            };
            let ab = roce(b, a, false, false);
            hubs[0].engine_ports[0].send(vec![ab.clone()]);
            assert_eq!(recv(&rx[1]), vec![ab], "A to B over the veth pair");
            let ba = roce(a, b, true, false);
            hubs[1].engine_ports[0].send(vec![ba.clone()]);
            assert_eq!(recv(&rx[0]), vec![ba], "and B to A");
            // A frame the host sends on fa0 reaches fabric B (its NIC), not fabric A.
            let sock = RawSocket::open("fa0").unwrap();
            let hostframe = roce(b, [0x52, 0x54, 0, 0, 5, 9], false, false);
            sock.send(&hostframe).unwrap();
            assert_eq!(recv(&rx[1]), vec![hostframe]);
            assert!(recv_none(&rx[0]));
            let stats = super::super::control::handle_line(b"stats", &hubs[1].control)
                .unwrap()
                .unwrap();
            // A's frame and the host's, and whatever the kernel sends on a new interface
            // (IPv6 neighbour discovery).
            let rx = stats
                .iter()
                .find(|l| l.contains(" lan:0 up "))
                .and_then(|l| l.split(' ').find_map(|w| w.strip_prefix("rx=")))
                .and_then(|v| v.parse::<u64>().ok());
            assert!(rx.is_some_and(|n| n >= 2), "{stats:?}");
        });
        t.join().unwrap();
    }

    /// Nothing arrives on `r` within 200 ms.
    fn recv_none(r: &super::super::queue::FrameReceiver) -> bool {
        use super::super::queue::Received;
        !matches!(r.recv(16, Duration::from_millis(200)), Received::Frames(_))
    }

    #[test]
    fn control_sets_one_nics_congestion_control() {
        use super::super::control::handle_line;
        let hub = two_nic_hub();
        let knobs: Vec<_> = hub.engine_ports.iter().map(|p| p.cc()).collect();
        let mut engine = crate::rdma::Engine::new();
        engine.set_cc_knob(Arc::clone(&knobs[1]));
        assert!(!engine.cc().ecn, "off by default");
        let reply = handle_line(b"cc nic:1 ecn=on,dcqcn=on,rpg_ai_rate=5", &hub.control)
            .unwrap()
            .unwrap();
        assert!(reply[0].starts_with("nic:1 ecn=on,dcqcn=on,"), "{reply:?}");
        assert!(!knobs[0].get().ecn && knobs[1].get().ecn);
        engine.set_cc_knob(Arc::clone(&knobs[1]));
        assert_eq!(engine.cc().rp.rpg_ai_rate, 5);
        let bad = handle_line(b"cc nic:1 ecn=off,dce_tcp_g=5000", &hub.control).unwrap();
        assert!(bad.unwrap_err().contains("dce_tcp_g"));
        assert!(knobs[1].get().ecn, "a refused SPEC changes nothing");
        let shown = handle_line(b"cc nic:0", &hub.control).unwrap().unwrap();
        assert!(
            shown[0].starts_with("nic:0 ecn=off,dcqcn=off,"),
            "{shown:?}"
        );
        // No engine thread serves NIC 0 here: the report says so.
        assert_eq!(
            shown[1],
            "nic:0 counters: its engine did not answer within 250 ms"
        );
        // NIC 1's engine answers from its thread.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    engine.serve_cc_report();
                    thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let shown = handle_line(b"cc nic:1", &hub.control).unwrap().unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        assert_eq!(
            shown[1],
            "nic:1 counters ecn_marked=0 cnps_sent=0 cnps_handled=0 cnps_ignored=0 pfc_frames_rx=0 rate_limited_qps=0",
            "{shown:?}"
        );
        assert!(handle_line(b"cc nic:2", &hub.control)
            .unwrap()
            .unwrap_err()
            .contains("no nic:2"));
        assert!(handle_line(b"cc lan:0 ecn=on", &hub.control)
            .unwrap()
            .is_err());
        hub.control.set_cc_all(knobs[1].get()).unwrap();
        assert!(knobs[0].get().dcqcn);
    }

    #[test]
    fn control_takes_a_lan_link_down_both_ways_and_changes_faults() {
        use super::super::control::{Apply, Command, PortRef};
        let d = tmpdir();
        let (a, b) = (d.join("a.sock"), d.join("b.sock"));
        let hub = Hub::start(&[a.clone(), b.clone()], None, Vec::new(), Faults::default()).unwrap();
        let ctl = hub.control.clone();
        let mut ca = UnixStream::connect(&a).unwrap();
        let mut cb = UnixStream::connect(&b).unwrap();
        let short = std::time::Duration::from_millis(300);
        ca.set_read_timeout(Some(short)).unwrap();
        cb.set_read_timeout(Some(short)).unwrap();
        thread::sleep(std::time::Duration::from_millis(300));
        let (ma, mb) = ([0x52, 0x54, 0, 0, 0, 0xa], [0x52, 0x54, 0, 0, 0, 0xb]);
        // Learn both MACs.
        send(&mut ca, &plain(mb, ma));
        assert_eq!(recv(&mut cb), plain(mb, ma));
        send(&mut cb, &plain(ma, mb));
        assert_eq!(recv(&mut ca), plain(ma, mb));
        let link = |up| {
            ctl.apply(Command::Link {
                ports: vec![PortRef::Lan(1)],
                up,
            })
        };
        assert_eq!(link(false), Ok(Vec::new()));
        // Neither direction passes while B's link is down.
        send(&mut ca, &plain(mb, ma));
        send(&mut cb, &plain(ma, mb));
        let mut byte = [0u8; 4];
        assert!(
            cb.read_exact(&mut byte).is_err(),
            "B received with its link down"
        );
        assert!(
            ca.read_exact(&mut byte).is_err(),
            "A received from a down link"
        );
        let stats = ctl.apply(Command::Stats).unwrap();
        assert!(
            stats
                .iter()
                .any(|l| l.contains("lan:1 down") && l.contains("rx_down=1")),
            "{stats:?}"
        );
        assert_eq!(link(true), Ok(Vec::new()));
        send(&mut ca, &plain(mb, ma));
        assert_eq!(recv(&mut cb), plain(mb, ma));
        // Faults at run time: everything to B dropped, then off again.
        let drop_all = super::super::fault::FaultConfig::parse("drop=1").unwrap();
        let fault = |f| {
            ctl.apply(Command::Fault {
                port: PortRef::Lan(1),
                fault: f,
            })
        };
        assert_eq!(fault(Some(drop_all)), Ok(Vec::new()));
        send(&mut ca, &plain(mb, ma));
        assert!(cb.read_exact(&mut byte).is_err(), "dropped frame arrived");
        assert_eq!(fault(None), Ok(Vec::new()));
        send(&mut ca, &plain(mb, ma));
        assert_eq!(recv(&mut cb), plain(mb, ma));
        // Out-of-range ports are refused.
        assert!(ctl
            .apply(Command::Link {
                ports: vec![PortRef::Lan(2)],
                up: true
            })
            .is_err());
        assert!(ctl
            .apply(Command::Link {
                ports: vec![PortRef::Nic(0)],
                up: true
            })
            .is_err());
        drop(hub);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_control_socket_answers_over_unix() {
        use std::io::{BufRead, BufReader};
        let d = tmpdir();
        let (a, c) = (d.join("a.sock"), d.join("ctl.sock"));
        let hub = Hub::start(
            std::slice::from_ref(&a),
            None,
            Vec::new(),
            Faults::default(),
        )
        .unwrap();
        let (listener, file) = bind(&c).unwrap();
        super::super::control::spawn_server(listener, Arc::new(hub.control.clone())).unwrap();
        let s = UnixStream::connect(&c).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        let mut ask = |req: &str| {
            w.write_all(req.as_bytes()).unwrap();
            let mut lines = Vec::new();
            loop {
                line.clear();
                r.read_line(&mut line).unwrap();
                let l = line.trim_end().to_string();
                let end = l == "ok" || l.starts_with("error:");
                lines.push(l);
                if end {
                    return lines;
                }
            }
        };
        assert_eq!(ask("link 0 down\n"), ["ok"]);
        assert_eq!(ask("link lan:0 up\n"), ["ok"]);
        assert!(ask("link lan:3 up\n")[0].starts_with("error: no lan:3"));
        // All or nothing: one bad port refuses the whole request.
        assert!(ask("link 0 lan:3 down\n")[0].starts_with("error: no lan:3"));
        let stats = ask("stats\n");
        assert!(!stats.iter().any(|l| l.contains("lan:0 down")), "{stats:?}");
        assert_eq!(ask("link lan:0 0 down\n"), ["ok"]);
        assert_eq!(ask("link 0 up\n"), ["ok"]);
        assert!(ask("fault 0 drop=7\n")[0].starts_with("error: drop probability"));
        assert_eq!(ask("fault 0 drop=0.5\n"), ["ok"]);
        assert_eq!(ask("fault 0 off\n"), ["ok"]);
        let stats = ask("stats\n");
        assert_eq!(stats.last().map(String::as_str), Some("ok"));
        assert!(stats.iter().any(|l| l.starts_with("switch forwarded=")));
        assert!(ask("\u{0}\u{1}garbage\n")[0].starts_with("error:"));
        file.remove();
        drop(hub);
        let _ = std::fs::remove_dir_all(&d);
    }
}
