//! The running fabric: listening unix sockets that QEMU's `-netdev stream` connects to as a
//! client, one switch thread, and pcap capture.
//!
//! Threads: an acceptor per listening socket; per connection a reader (decodes the stream
//! and hands frames to the switch through one bounded queue, so a fast sender is slowed
//! down rather than buffered without limit) and a writer (drains a bounded per-port queue;
//! when it is full, frames to that port are dropped and counted, as a congested switch
//! port would). The switch thread owns the `Switch`, the port queues and the pcap file.
//!
//! With `--fault` (`--nic-fault`), frames to the ports of a LAN socket (to a NIC's engine)
//! pass through a `fault::Link` first
//! (seeded by `--fault-seed` and the port id, so a run with the same connection order is
//! reproducible); delayed frames are released by the switch thread's timer.
//!
//! RoCE engine ports: each NIC MAC gets an engine port. Frames the switch steers to it go to
//! that NIC's bounded inbound queue with `try_send` (a full queue drops the frame, as a
//! congested port would; RC recovers it), so the switch thread never waits for a NIC. A
//! NIC sends through its [`EnginePort`], which blocks while the switch queue is full: the
//! NIC's engine is slowed down rather than its frames dropped.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::fault::{FaultConfig, Link};
use super::pcap::PcapWriter;
use super::stream::{encode, Decoder};
use super::switch::{Mac, PortId, Switch};
use crate::server::{bind, ServeError, SocketFile};

/// Frames queued towards one port before further ones are dropped.
const PORT_QUEUE: usize = 256;
/// Frames queued from all readers towards the switch.
const SWITCH_QUEUE: usize = 1024;
/// Concurrent LAN connections over all sockets; more are refused (each costs two threads).
const MAX_CONNECTIONS: usize = 64;
/// MAC aging in seconds of the switch's clock.
const AGING_SECS: u64 = 300;

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
}

enum Event {
    /// A port connected on the LAN socket with this index.
    Join(PortId, usize, SyncSender<Vec<u8>>),
    Frame(PortId, Vec<u8>),
    Gone(PortId),
}

/// A started fabric. Dropping it does not stop the threads (the process exit does); the
/// socket files are removed when the last `Arc<SocketFile>` goes.
pub struct Hub {
    pub sockets: Vec<Arc<SocketFile>>,
    /// One per NIC given to `start`, in order: where that NIC's engine sends its frames.
    pub engine_ports: Vec<EnginePort>,
}

/// A NIC engine's way into the switch.
#[derive(Clone)]
pub struct EnginePort {
    port: PortId,
    tx: SyncSender<Event>,
}

impl EnginePort {
    /// Hands a frame to the switch (blocks while the switch queue is full).
    pub fn send(&self, frame: Vec<u8>) {
        if self.tx.send(Event::Frame(self.port, frame)).is_err() {
            log::debug!("engine port {}: the switch is gone", self.port);
        }
    }
}

/// A NIC on the fabric: its MAC and the queue its engine receives RoCE frames from.
pub struct NicAttachment {
    pub mac: Mac,
    pub inbound: SyncSender<Vec<u8>>,
}

/// Frames queued towards one NIC engine.
pub const ENGINE_QUEUE: usize = 1024;

impl Hub {
    /// Bind every LAN socket, open the pcap file, register a RoCE engine port for each NIC,
    /// and start the threads.
    pub fn start(
        lans: &[PathBuf],
        pcap: Option<&Path>,
        nics: Vec<NicAttachment>,
        faults: Faults,
    ) -> Result<Self, HubError> {
        let mut bound = Vec::new();
        for path in lans {
            let (listener, file) = bind(path)?;
            bound.push((listener, Arc::new(file)));
        }
        let pcap = match pcap {
            Some(path) => {
                let f = File::create(path).map_err(|source| HubError::Pcap {
                    path: path.to_path_buf(),
                    source,
                })?;
                let w = PcapWriter::new(BufWriter::new(f)).map_err(|source| HubError::Pcap {
                    path: path.to_path_buf(),
                    source,
                })?;
                Some(w)
            }
            None => None,
        };
        let sockets = bound.iter().map(|(_, f)| Arc::clone(f)).collect();

        let (tx, rx) = sync_channel(SWITCH_QUEUE);
        let next_port = Arc::new(AtomicUsize::new(nics.len()));
        let live = Arc::new(AtomicUsize::new(0));
        let engine_ports = (0..nics.len())
            .map(|port| EnginePort {
                port,
                tx: tx.clone(),
            })
            .collect();
        let engines: Vec<(Mac, PortId, SyncSender<Vec<u8>>)> = nics
            .into_iter()
            .zip(0..)
            .map(|(n, p)| (n.mac, p, n.inbound))
            .collect();
        spawn("fabric-switch", move || {
            run_switch(rx, pcap, engines, faults)
        })?;
        for (lan, (listener, file)) in bound.into_iter().enumerate() {
            let tx = tx.clone();
            let next_port = Arc::clone(&next_port);
            let live = Arc::clone(&live);
            spawn("fabric-accept", move || {
                accept_loop(lan, listener, &file, tx, &next_port, &live)
            })?;
        }
        Ok(Hub {
            sockets,
            engine_ports,
        })
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
    tx: SyncSender<Event>,
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
        if let Err(e) = start_port(port, lan, stream, tx.clone(), Arc::clone(live)) {
            log::error!("{name}: port {port}: {e}");
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn start_port(
    port: PortId,
    lan: usize,
    stream: UnixStream,
    tx: SyncSender<Event>,
    live: Arc<AtomicUsize>,
) -> Result<(), HubError> {
    let writer = stream.try_clone().map_err(HubError::Spawn)?;
    let (qtx, qrx) = sync_channel(PORT_QUEUE);
    // Join before the reader starts, so the switch knows the port before its first frame.
    if tx.send(Event::Join(port, lan, qtx)).is_err() {
        return Ok(());
    }
    spawn("fabric-tx", move || write_loop(port, writer, qrx))?;
    spawn("fabric-rx", move || {
        read_loop(port, stream, &tx);
        let _ = tx.send(Event::Gone(port));
        live.fetch_sub(1, Ordering::SeqCst);
    })
}

fn read_loop(port: PortId, mut stream: UnixStream, tx: &SyncSender<Event>) {
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
        let mut closed = false;
        let r = dec.feed(&buf[..n], |f| {
            closed |= tx.send(Event::Frame(port, f.to_vec())).is_err();
        });
        if let Err(e) = r {
            log::warn!("port {port}: {e}; closing the port");
            break;
        }
        if closed {
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

fn run_switch(
    rx: Receiver<Event>,
    mut pcap: Option<PcapWriter<BufWriter<File>>>,
    engines: Vec<(Mac, PortId, SyncSender<Vec<u8>>)>,
    faults: Faults,
) {
    let start = Instant::now();
    let mut sw = Switch::new(AGING_SECS);
    let mut queues: HashMap<PortId, SyncSender<Vec<u8>>> = HashMap::new();
    let mut engine_queues: HashMap<PortId, SyncSender<Vec<u8>>> = HashMap::new();
    for (mac, port, q) in engines {
        sw.set_engine(mac, port);
        engine_queues.insert(port, q);
    }
    let mut out = Vec::new();
    let mut queue_drops = 0u64;
    let mut links: HashMap<PortId, Link> = HashMap::new();
    // Engine ports are 0..n in NIC order.
    for (&nic, cfg) in &faults.per_nic {
        if engine_queues.contains_key(&nic) {
            match Link::new(*cfg, faults.seed ^ nic as u64) {
                Ok(l) => {
                    links.insert(nic, l);
                }
                Err(e) => log::error!("NIC {nic}: {e}"),
            }
        }
    }
    let mut ready = Vec::new();
    let ms = |start: Instant| u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    loop {
        // Sleep no longer than the next delayed frame is due.
        let due = links.values().filter_map(Link::next_due).min();
        let ev = match due {
            None => match rx.recv() {
                Ok(ev) => ev,
                Err(_) => return,
            },
            Some(due) => {
                let wait = Duration::from_millis(due.saturating_sub(ms(start)));
                match rx.recv_timeout(wait) {
                    Ok(ev) => ev,
                    Err(RecvTimeoutError::Timeout) => {
                        let now = ms(start);
                        for (p, link) in links.iter_mut() {
                            ready.clear();
                            link.poll(now, &mut ready);
                            if let Some(q) = queues.get(p).or_else(|| engine_queues.get(p)) {
                                for f in ready.drain(..) {
                                    enqueue(q, *p, f, &mut queue_drops);
                                }
                            }
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        };
        match ev {
            Event::Join(port, lan, q) => {
                sw.add_port(port);
                queues.insert(port, q);
                if let Some(cfg) = faults.per_lan.get(&lan) {
                    // Validated when parsed; a failure here would be a bug, so just log.
                    match Link::new(*cfg, faults.seed ^ port as u64) {
                        Ok(l) => {
                            links.insert(port, l);
                        }
                        Err(e) => log::error!("port {port}: {e}"),
                    }
                }
            }
            Event::Gone(port) => {
                log::info!("port {port} disconnected");
                sw.remove_port(port);
                queues.remove(&port);
                if let Some(l) = links.remove(&port) {
                    log::info!("port {port} faults: {:?}", l.counters());
                }
            }
            Event::Frame(port, frame) => {
                sw.forward(port, &frame, start.elapsed().as_secs(), &mut out);
                if out.is_empty() {
                    continue;
                }
                if let Some(w) = pcap.as_mut() {
                    // Flushed per frame so a capture is complete whenever the process ends.
                    if let Err(e) = w.write(&frame).and_then(|_| w.flush()) {
                        log::error!("pcap: {e}; capture stopped");
                        pcap = None;
                    }
                }
                for p in &out {
                    if let Some(q) = queues.get(p).or_else(|| engine_queues.get(p)) {
                        if let Some(link) = links.get_mut(p) {
                            ready.clear();
                            link.send(frame.clone(), ms(start), &mut ready);
                            for f in ready.drain(..) {
                                enqueue(q, *p, f, &mut queue_drops);
                            }
                        } else {
                            enqueue(q, *p, frame.clone(), &mut queue_drops);
                        }
                    }
                }
            }
        }
    }
}

/// Queue a frame to a port; a full queue drops it, as a congested switch port would.
fn enqueue(q: &SyncSender<Vec<u8>>, port: PortId, frame: Vec<u8>, drops: &mut u64) {
    match q.try_send(frame) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            *drops += 1;
            log::debug!("port {port}: queue full, {drops} drops");
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
            Some(&cap),
            vec![NicAttachment {
                mac: [2, 0, 0, 0, 0, 9],
                inbound: sync_channel(1).0,
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
        let pcap = std::fs::read(&cap).unwrap();
        assert!(pcap.len() >= 24 + 2 * (16 + 60));
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
}
