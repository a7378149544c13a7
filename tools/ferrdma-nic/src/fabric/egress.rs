//! The link model of one switch egress port (issue 18): a line rate, a propagation delay and
//! an egress buffer in bytes, with RED-style ECN marking. Pure logic on a clock the caller
//! gives in nanoseconds, and a seeded generator for the marking decisions, so a simulation
//! that steps its own clock gets the same result on an idle or a loaded host.
//!
//! * A frame offered at `now` joins the FIFO if the bytes still queued (not yet serialised
//!   to the last bit) plus its own fit in the buffer; else it is dropped, as lossy Ethernet
//!   does. Lossless mode (`fabric::pfc`) pauses the senders before that happens.
//! * PFC: frames wait in a FIFO per priority (`wire::pfc::priority`); a PFC frame the port's
//!   transmitter receives (`pause`) holds the priorities it names, and a switch sends its own
//!   PFC frames ahead of the queues (`send_control`). `occupancy` is the switch's per-ingress
//!   accounting that decides when to send them.
//! * The line serialises one frame after the other at the line rate, each taking its bytes
//!   plus [`WIRE_OVERHEAD`] (preamble, inter-frame gap and FCS, which frames here lack), so
//!   a 1500-byte MTU link carries as many frames a second as a real one. A frame arrives at
//!   the far end `delay` after its last bit left.
//! * ECN: an ECN-capable frame is marked Congestion Experienced at enqueue with probability
//!   0 while the queue (bytes, before it) is at most `kmin`, rising linearly to `pmax` at
//!   `kmax`, and 1 beyond `kmax` (the RED profile DCQCN's switches run; mlx5 and the DCQCN
//!   paper's Kmin/Kmax/Pmax). Frames that are not ECN-capable are never marked; only the
//!   buffer limit drops them.
//!
//! Time inside is kept in picoseconds, so that back-to-back frames at 100 Gb/s do not
//! accumulate rounding.

use std::collections::{BTreeMap, VecDeque};

use thiserror::Error;

use crate::wire::{ecn, pfc};

/// Bytes a frame occupies on the line besides its own: preamble and SFD (8), FCS (4), the
/// minimum inter-frame gap (12).
pub const WIRE_OVERHEAD: u64 = 24;
/// Highest line rate accepted (1.6 Tb/s, the fastest Ethernet standardised).
pub const MAX_RATE_BPS: u64 = 1_600_000_000_000;
/// Lowest line rate accepted (1 Mb/s): slower would make a jumbo frame take seconds.
pub const MIN_RATE_BPS: u64 = 1_000_000;
/// Largest egress buffer accepted (1 GiB; switch buffers are tens of MiB).
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;
/// Longest propagation delay accepted (1 s).
pub const MAX_DELAY_NS: u64 = 1_000_000_000;

/// Why a link configuration was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EgressError {
    #[error("line rate {0} b/s is outside {MIN_RATE_BPS}..={MAX_RATE_BPS}")]
    Rate(u64),
    #[error("egress buffer of {0} bytes is outside 1..={MAX_BUFFER_BYTES} (a frame must fit)")]
    Buffer(u64),
    #[error("propagation delay {0} ns exceeds {MAX_DELAY_NS}")]
    Delay(u64),
    #[error("ECN thresholds inverted or empty: kmin {kmin} must be below kmax {kmax}")]
    Thresholds { kmin: u64, kmax: u64 },
    #[error("ECN kmax {kmax} exceeds the buffer of {buffer} bytes")]
    KmaxAboveBuffer { kmax: u64, buffer: u64 },
    #[error("ECN pmax {0} is not within (0, 1]")]
    Pmax(f64),
    #[error("link spec {0:?}: expected KEY=VALUE[,KEY=VALUE...] with keys rate-mbps, delay-us, buffer, kmin, kmax, pmax (rate-mbps and buffer required; kmin, kmax and pmax together)")]
    Syntax(String),
}

/// RED-style ECN marking thresholds, in bytes of queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    pub kmin: u64,
    pub kmax: u64,
    /// Marking probability at `kmax`.
    pub pmax: f64,
}

/// One egress port's link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EgressConfig {
    pub rate_bps: u64,
    pub delay_ns: u64,
    pub buffer_bytes: u64,
    /// ECN marking, `None` for a switch that only drops.
    pub red: Option<Red>,
}

impl EgressConfig {
    /// Checks every field; the model assumes a valid configuration.
    pub fn validate(&self) -> Result<(), EgressError> {
        if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&self.rate_bps) {
            return Err(EgressError::Rate(self.rate_bps));
        }
        if !(1..=MAX_BUFFER_BYTES).contains(&self.buffer_bytes) {
            return Err(EgressError::Buffer(self.buffer_bytes));
        }
        if self.delay_ns > MAX_DELAY_NS {
            return Err(EgressError::Delay(self.delay_ns));
        }
        if let Some(r) = self.red {
            if r.kmin >= r.kmax {
                return Err(EgressError::Thresholds {
                    kmin: r.kmin,
                    kmax: r.kmax,
                });
            }
            if r.kmax > self.buffer_bytes {
                return Err(EgressError::KmaxAboveBuffer {
                    kmax: r.kmax,
                    buffer: self.buffer_bytes,
                });
            }
            // NaN fails this test too.
            if !(r.pmax > 0.0 && r.pmax <= 1.0) {
                return Err(EgressError::Pmax(r.pmax));
            }
        }
        Ok(())
    }

    /// Parses `rate-mbps=N,delay-us=N,buffer=BYTES[,kmin=BYTES,kmax=BYTES,pmax=P]` and
    /// validates it.
    pub fn parse(spec: &str) -> Result<Self, EgressError> {
        let bad = || EgressError::Syntax(spec.to_string());
        let (mut rate, mut delay, mut buffer) = (None, 0u64, None);
        let (mut kmin, mut kmax, mut pmax) = (None, None, None);
        for item in spec.split(',') {
            let (k, v) = item.split_once('=').ok_or_else(bad)?;
            // Digits only for the integers: u64 parsing would take a leading '+'.
            let int = || -> Result<u64, EgressError> {
                if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                v.parse().map_err(|_| bad())
            };
            match k {
                "rate-mbps" => rate = Some(int()?.saturating_mul(1_000_000)),
                "delay-us" => delay = int()?.saturating_mul(1000),
                "buffer" => buffer = Some(int()?),
                "kmin" => kmin = Some(int()?),
                "kmax" => kmax = Some(int()?),
                "pmax" => pmax = Some(v.parse::<f64>().map_err(|_| bad())?),
                _ => return Err(bad()),
            }
        }
        let red = match (kmin, kmax, pmax) {
            (None, None, None) => None,
            (Some(kmin), Some(kmax), Some(pmax)) => Some(Red { kmin, kmax, pmax }),
            _ => return Err(bad()),
        };
        let cfg = EgressConfig {
            rate_bps: rate.ok_or_else(bad)?,
            delay_ns: delay,
            buffer_bytes: buffer.ok_or_else(bad)?,
            red,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Picoseconds the line takes to carry a frame of `len` bytes.
    fn serialise_ps(&self, len: usize) -> u64 {
        let bits = (len as u128 + u128::from(WIRE_OVERHEAD)) * 8;
        // Rate >= 1 Mb/s and len < 2^32: at most ~3.4e16 ps, far inside u64.
        (bits * 1_000_000_000_000 / u128::from(self.rate_bps)) as u64
    }
}

/// What happened to an offered frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Queued,
    /// Queued, with its ECN codepoint set to CE.
    Marked,
    /// The buffer had no room.
    Dropped,
}

/// Counters of one egress port since it was created.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EgressCounters {
    pub queued: u64,
    pub marked: u64,
    pub dropped: u64,
    /// Bytes whose last bit left (frames without the wire overhead).
    pub sent_bytes: u64,
    /// The deepest the queue was, in bytes.
    pub max_depth: u64,
    /// Link-layer control frames (PFC) sent.
    pub control_sent: u64,
    /// PFC or PAUSE frames this port's transmitter obeyed.
    pub pauses_received: u64,
}

/// SplitMix64, as the fault injection uses: the marking sequence depends on the seed alone.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn chance(&mut self, p: f64) -> bool {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// A frame waiting for the line.
#[derive(Debug)]
struct Waiting {
    /// When it was offered (ps): it cannot start earlier.
    enq_ps: u64,
    /// The port it came in from (PFC's per-ingress accounting).
    ingress: usize,
    frame: Vec<u8>,
}

/// The frame being serialised.
#[derive(Debug)]
struct OnLine {
    /// When its last bit leaves (ps).
    done_ps: u64,
    /// Its priority and ingress, `None` for a control frame (not in the buffer).
    data: Option<(u8, usize)>,
    frame: Vec<u8>,
}

/// Which queue the next frame comes from.
#[derive(Debug, Clone, Copy)]
enum Next {
    Control,
    Priority(usize),
}

/// One egress port: a FIFO per priority, the line and the frames propagating on it.
///
/// Frames are scheduled when the line frees, not when offered, so that PFC can hold a
/// priority: a pause received at `t` lets the frame on the line finish and starts no frame of
/// a paused priority until the pause ends. The line takes the frame that can start first;
/// among those that can start at the same time, link-layer control frames (`send_control`)
/// come first, then the priorities in round robin, a frame each.
#[derive(Debug)]
pub struct Egress {
    cfg: EgressConfig,
    rng: Rng,
    control: VecDeque<Waiting>,
    queues: [VecDeque<Waiting>; 8],
    /// Bytes queued (the frame on the line included) per ingress port and priority.
    by_ingress: BTreeMap<usize, [u64; 8]>,
    queued_bytes: u64,
    on_line: Option<OnLine>,
    /// When the line is free (ps): the last bit of the last frame started.
    line_free_ps: u64,
    /// Until when (ps) each priority may start no frame: the PFC pauses this transmitter got.
    paused_until_ps: [u64; 8],
    /// The priority the round robin looks at first.
    rr: usize,
    /// Frames on the wire, with their arrival time (ns) at the far end.
    flight: VecDeque<(u64, Vec<u8>)>,
    counters: EgressCounters,
}

impl Egress {
    pub fn new(cfg: EgressConfig, seed: u64) -> Result<Self, EgressError> {
        cfg.validate()?;
        Ok(Egress {
            cfg,
            rng: Rng(seed),
            control: VecDeque::new(),
            queues: Default::default(),
            by_ingress: BTreeMap::new(),
            queued_bytes: 0,
            on_line: None,
            line_free_ps: 0,
            paused_until_ps: [0; 8],
            rr: 0,
            flight: VecDeque::new(),
            counters: EgressCounters::default(),
        })
    }

    pub fn config(&self) -> &EgressConfig {
        &self.cfg
    }

    pub fn counters(&self) -> EgressCounters {
        self.counters
    }

    /// The frame that can start first, when (ps) and how long it is, if any waits and the
    /// line is not busy.
    fn next_start(&self) -> Option<(u64, Next, usize)> {
        if self.on_line.is_some() {
            return None;
        }
        let mut best: Option<(u64, Next, usize)> = self.control.front().map(|w| {
            (
                self.line_free_ps.max(w.enq_ps),
                Next::Control,
                w.frame.len(),
            )
        });
        for i in 0..8 {
            let p = (self.rr + i) % 8;
            if let Some(w) = self.queues[p].front() {
                let t = self.line_free_ps.max(w.enq_ps).max(self.paused_until_ps[p]);
                if best.is_none_or(|(b, _, _)| t < b) {
                    best = Some((t, Next::Priority(p), w.frame.len()));
                }
            }
        }
        best
    }

    /// Runs the line up to `now`: finishes frames whose last bit left, starts the next ones.
    fn advance(&mut self, now_ns: u64) {
        let now_ps = now_ns.saturating_mul(1000);
        loop {
            if let Some(cur) = &self.on_line {
                if cur.done_ps > now_ps {
                    break;
                }
                let Some(cur) = self.on_line.take() else {
                    break;
                };
                let len = cur.frame.len() as u64;
                if let Some((p, ingress)) = cur.data {
                    self.queued_bytes -= len;
                    if let Some(b) = self.by_ingress.get_mut(&ingress) {
                        b[usize::from(p)] -= len;
                        if b.iter().all(|&v| v == 0) {
                            self.by_ingress.remove(&ingress);
                        }
                    }
                    self.counters.sent_bytes += len;
                }
                let arrive = cur.done_ps.div_ceil(1000).saturating_add(self.cfg.delay_ns);
                self.flight.push_back((arrive, cur.frame));
            }
            let Some((start, next, len)) = self.next_start() else {
                break;
            };
            if start > now_ps {
                break;
            }
            let (w, data) = match next {
                Next::Control => (self.control.pop_front(), None),
                Next::Priority(p) => {
                    self.rr = (p + 1) % 8;
                    (self.queues[p].pop_front(), Some(p as u8))
                }
            };
            let Some(w) = w else { break };
            let done_ps = start.saturating_add(self.cfg.serialise_ps(len));
            self.line_free_ps = done_ps;
            self.on_line = Some(OnLine {
                done_ps,
                data: data.map(|p| (p, w.ingress)),
                frame: w.frame,
            });
        }
    }

    /// Bytes queued at `now` (the frame on the line counts until its last bit left).
    pub fn depth(&mut self, now_ns: u64) -> u64 {
        self.advance(now_ns);
        self.queued_bytes
    }

    /// Bytes queued at `now` that came in from `ingress`, per priority (a switch's PFC
    /// accounting sums these over its egress ports).
    pub fn occupancy(&mut self, ingress: usize, now_ns: u64) -> [u64; 8] {
        self.advance(now_ns);
        self.by_ingress.get(&ingress).copied().unwrap_or([0; 8])
    }

    /// The probability of marking an ECN-capable frame that finds `depth` bytes queued.
    fn mark_probability(&self, depth: u64) -> f64 {
        let Some(r) = self.cfg.red else { return 0.0 };
        if depth <= r.kmin {
            0.0
        } else if depth > r.kmax {
            1.0
        } else {
            r.pmax * (depth - r.kmin) as f64 / (r.kmax - r.kmin) as f64
        }
    }

    /// Offers `frame` at `now` (from ingress port 0).
    pub fn offer(&mut self, frame: Vec<u8>, now_ns: u64) -> Verdict {
        self.offer_from(frame, 0, now_ns)
    }

    /// Offers `frame`, which came in from port `ingress`, at `now`.
    pub fn offer_from(&mut self, mut frame: Vec<u8>, ingress: usize, now_ns: u64) -> Verdict {
        self.advance(now_ns);
        let len = frame.len() as u64;
        if self.queued_bytes + len > self.cfg.buffer_bytes {
            self.counters.dropped += 1;
            return Verdict::Dropped;
        }
        let p = self.mark_probability(self.queued_bytes);
        // Roll only for ECN-capable frames, so other traffic does not move the sequence.
        let capable = p > 0.0 && ecn::ecn(&frame).is_some_and(|e| e.is_capable());
        let marked = capable && self.rng.chance(p) && ecn::mark_ce(&mut frame);
        let prio = pfc::priority(&frame);
        self.queued_bytes += len;
        self.by_ingress.entry(ingress).or_default()[usize::from(prio)] += len;
        self.counters.max_depth = self.counters.max_depth.max(self.queued_bytes);
        self.queues[usize::from(prio)].push_back(Waiting {
            enq_ps: now_ns.saturating_mul(1000),
            ingress,
            frame,
        });
        self.counters.queued += 1;
        // An idle line starts it now.
        self.advance(now_ns);
        if marked {
            self.counters.marked += 1;
            Verdict::Marked
        } else {
            Verdict::Queued
        }
    }

    /// Sends a link-layer control frame (PFC) at `now`: after the frame on the line, before
    /// anything queued, outside the buffer and never paused, as a MAC sends its pause frames.
    pub fn send_control(&mut self, frame: Vec<u8>, now_ns: u64) {
        self.advance(now_ns);
        self.control.push_back(Waiting {
            enq_ps: now_ns.saturating_mul(1000),
            ingress: 0,
            frame,
        });
        self.counters.control_sent += 1;
        self.advance(now_ns);
    }

    /// Obeys a PFC (or PAUSE) frame received at `now` by this port's transmitter: each
    /// priority it enables starts no frame for its time (0: at once again). A frame on the
    /// line finishes.
    pub fn pause(&mut self, pfc: &pfc::Pfc, now_ns: u64) {
        self.advance(now_ns);
        let now_ps = now_ns.saturating_mul(1000);
        for (p, q) in pfc.quanta.iter().enumerate() {
            if pfc.enable & (1 << p) != 0 {
                let ns = pfc::quanta_ns(*q, self.cfg.rate_bps);
                self.paused_until_ps[p] = now_ps.saturating_add(ns.saturating_mul(1000));
            }
        }
        self.counters.pauses_received += 1;
        self.advance(now_ns);
    }

    /// Whether priority `prio` is paused at `now`.
    pub fn is_paused(&self, prio: u8, now_ns: u64) -> bool {
        self.paused_until_ps
            .get(usize::from(prio))
            .is_some_and(|&t| t > now_ns.saturating_mul(1000))
    }

    /// Frames that have arrived at the far end by `now`, in order.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.advance(now_ns);
        while self.flight.front().is_some_and(|(t, _)| *t <= now_ns) {
            if let Some((_, f)) = self.flight.pop_front() {
                out.push(f);
            }
        }
    }

    /// When `poll` next has a frame to give (ns), if any frame is queued or on the wire. A
    /// paused priority's frames are due after the pause.
    pub fn next_due(&self) -> Option<u64> {
        let arrive = |done_ps: u64| done_ps.div_ceil(1000).saturating_add(self.cfg.delay_ns);
        let line = match &self.on_line {
            Some(cur) => Some(arrive(cur.done_ps)),
            None => self
                .next_start()
                .map(|(t, _, len)| arrive(t.saturating_add(self.cfg.serialise_ps(len)))),
        };
        match (self.flight.front().map(|(t, _)| *t), line) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Loses everything queued or on the wire (a link taken down); returns how many frames.
    pub fn clear(&mut self) -> usize {
        let n = self.control.len()
            + self.queues.iter().map(VecDeque::len).sum::<usize>()
            + usize::from(self.on_line.is_some())
            + self.flight.len();
        self.control.clear();
        for q in &mut self.queues {
            q.clear();
        }
        self.on_line = None;
        self.flight.clear();
        self.by_ingress.clear();
        self.queued_bytes = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ecn::Ecn;

    const GBPS: u64 = 1_000_000_000;

    fn cfg(rate_gbps: u64, buffer: u64, red: Option<Red>) -> EgressConfig {
        EgressConfig {
            rate_bps: rate_gbps * GBPS,
            delay_ns: 1000,
            buffer_bytes: buffer,
            red,
        }
    }

    /// An IPv4 UDP frame of `len` bytes (>= 34) with ECN codepoint `e` and a valid checksum.
    fn ip_frame(len: usize, e: Ecn) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[15] = (26 << 2) | e.bits();
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        let c = crate::wire::checksum::finish(crate::wire::checksum::add(0, &f[14..34]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn hostile_configurations_are_refused() {
        let ok = cfg(25, 1 << 20, None);
        assert!(ok.validate().is_ok());
        let bad = |f: &dyn Fn(&mut EgressConfig)| {
            let mut c = ok;
            f(&mut c);
            Egress::new(c, 1).err()
        };
        assert_eq!(bad(&|c| c.rate_bps = 0), Some(EgressError::Rate(0)));
        assert!(matches!(
            bad(&|c| c.rate_bps = u64::MAX),
            Some(EgressError::Rate(_))
        ));
        assert_eq!(bad(&|c| c.buffer_bytes = 0), Some(EgressError::Buffer(0)));
        assert!(matches!(
            bad(&|c| c.buffer_bytes = u64::MAX),
            Some(EgressError::Buffer(_))
        ));
        assert!(matches!(
            bad(&|c| c.delay_ns = u64::MAX),
            Some(EgressError::Delay(_))
        ));
        let red = |kmin, kmax, pmax| {
            move |c: &mut EgressConfig| {
                c.red = Some(Red { kmin, kmax, pmax });
            }
        };
        assert!(matches!(
            bad(&red(200, 100, 0.1)),
            Some(EgressError::Thresholds { .. })
        ));
        assert!(matches!(
            bad(&red(100, 100, 0.1)),
            Some(EgressError::Thresholds { .. })
        ));
        assert!(matches!(
            bad(&red(100, 2 << 20, 0.1)),
            Some(EgressError::KmaxAboveBuffer { .. })
        ));
        for p in [0.0, -0.5, 1.5, f64::NAN] {
            assert!(
                matches!(bad(&red(1, 2, p)), Some(EgressError::Pmax(_))),
                "{p}"
            );
        }
    }

    #[test]
    fn specs_parse_and_hostile_ones_are_refused() {
        let c = EgressConfig::parse(
            "rate-mbps=2000,delay-us=5,buffer=262144,kmin=20000,kmax=100000,pmax=0.2",
        )
        .unwrap();
        assert_eq!(c.rate_bps, 2 * GBPS);
        assert_eq!((c.delay_ns, c.buffer_bytes), (5000, 262_144));
        assert_eq!(
            c.red,
            Some(Red {
                kmin: 20_000,
                kmax: 100_000,
                pmax: 0.2
            })
        );
        assert_eq!(
            EgressConfig::parse("buffer=1000,rate-mbps=10").unwrap().red,
            None
        );
        for bad in [
            "",
            "rate-mbps=10",
            "buffer=1000",
            "rate-mbps=0,buffer=1000",
            "rate-mbps=10,buffer=0",
            "rate-mbps=+10,buffer=1000",
            "rate-mbps=99999999999999999999,buffer=1000",
            "rate-mbps=10,buffer=1000,kmin=5",
            "rate-mbps=10,buffer=1000,kmin=500,kmax=100,pmax=0.1",
            "rate-mbps=10,buffer=1000,kmin=5,kmax=100,pmax=NaN",
            "rate-mbps=10,buffer=1000,speed=9",
            "rate-mbps=10,buffer=1000,delay-us=2000000",
        ] {
            assert!(EgressConfig::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn frames_leave_at_the_line_rate_and_arrive_after_the_delay() {
        // 10 Gb/s: a 1476-byte frame plus 24 bytes overhead is 1500 bytes = 1200 ns.
        let mut e = Egress::new(cfg(10, 1 << 20, None), 1).unwrap();
        for _ in 0..3 {
            assert_eq!(e.offer(vec![0; 1476], 0), Verdict::Queued);
        }
        assert_eq!(e.depth(0), 3 * 1476);
        assert_eq!(e.next_due(), Some(1200 + 1000));
        let mut out = Vec::new();
        e.poll(2199, &mut out);
        assert!(out.is_empty());
        e.poll(2200, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            e.depth(2400),
            1476,
            "the third is on the line until 3600 ns"
        );
        e.poll(4600, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(e.depth(4600), 0);
        assert_eq!(e.next_due(), None);
        // An idle line starts a new frame when it comes, not where the last one ended.
        e.offer(vec![0; 1476], 10_000);
        assert_eq!(e.next_due(), Some(10_000 + 1200 + 1000));
        assert_eq!(e.counters().sent_bytes, 3 * 1476);
    }

    #[test]
    fn a_pause_holds_its_priority_and_lets_the_frame_on_the_line_finish() {
        use crate::wire::pfc::Pfc;
        // 10 Gb/s; 1476 + 24 bytes take 1200 ns. Priority 3 (DSCP 26) and priority 0 (not IP).
        let mut e = Egress::new(cfg(10, 1 << 20, None), 1).unwrap();
        let mut data = ip_frame(1476, Ecn::Ect0);
        data[15] = (26 << 2) | 2;
        for _ in 0..3 {
            e.offer_from(data.clone(), 4, 0);
        }
        e.offer_from(vec![0; 1476], 5, 0);
        assert_eq!(e.occupancy(4, 0)[3], 3 * 1476);
        assert_eq!(e.occupancy(5, 0)[0], 1476);
        // At 600 ns the first frame is half out; a pause of priority 3 for 100 quanta
        // (5120 ns) lets it finish at 1200, then only the priority-0 frame may go.
        e.pause(&Pfc::new([0; 6], 1 << 3, 100), 600);
        assert!(e.is_paused(3, 600) && !e.is_paused(0, 600));
        let mut out = Vec::new();
        e.poll(1200 + 1000, &mut out);
        assert_eq!(out.len(), 1);
        e.poll(2400 + 1000, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].len(), 1476);
        assert_eq!(
            out[1][12..14],
            [0, 0],
            "the priority-0 frame overtook the paused ones"
        );
        assert_eq!(e.occupancy(5, 3400), [0; 8]);
        // Nothing more until the pause ends at 5720 ns; next_due says so.
        assert_eq!(e.next_due(), Some(5720 + 1200 + 1000));
        e.poll(5720 + 1000, &mut out);
        assert_eq!(out.len(), 2);
        e.poll(5720 + 2 * 1200 + 1000, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(e.occupancy(4, 9120), [0; 8]);
        // An XON (time 0) resumes at once.
        e.offer_from(data.clone(), 4, 10_000);
        e.offer_from(data.clone(), 4, 10_000);
        e.pause(&Pfc::new([0; 6], 1 << 3, 0xffff), 10_000);
        e.pause(&Pfc::new([0; 6], 1 << 3, 0), 12_000);
        assert!(!e.is_paused(3, 12_000));
        e.poll(12_000 + 1200 + 1000, &mut out);
        assert_eq!(out.len(), 6);
        assert_eq!(e.counters().pauses_received, 3);
    }

    #[test]
    fn control_frames_go_before_the_queue_and_outside_the_buffer() {
        let mut e = Egress::new(cfg(10, 3000, None), 1).unwrap();
        e.offer(vec![1; 1476], 0);
        e.offer(vec![2; 1476], 0);
        // The buffer is full, yet a control frame goes: after the frame on the line.
        assert_eq!(e.offer(vec![3; 100], 0), Verdict::Dropped);
        e.send_control(vec![9; 60], 100);
        assert_eq!(e.depth(100), 2 * 1476);
        let mut out = Vec::new();
        e.poll(u64::MAX / 2, &mut out);
        let first: Vec<u8> = out.iter().map(|f| f[0]).collect();
        assert_eq!(first, [1, 9, 2]);
        assert_eq!(e.counters().control_sent, 1);
        assert_eq!(
            e.counters().sent_bytes,
            2 * 1476,
            "control frames are not data"
        );
    }

    #[test]
    fn no_rounding_drift_at_high_rates() {
        // 100 Gb/s, 64-byte frames: 88 bytes = 7.04 ns each; a million of them take exactly
        // 7.04 ms of line time.
        let mut e = Egress::new(cfg(100, 1 << 30, None), 1).unwrap();
        for _ in 0..1_000_000 {
            e.offer(vec![0; 64], 0);
        }
        let mut out = Vec::new();
        e.poll(7_040_000 + 999, &mut out);
        assert_eq!(out.len(), 999_999);
        e.poll(7_040_000 + 1000, &mut out);
        assert_eq!(out.len(), 1_000_000);
    }

    #[test]
    fn a_full_buffer_drops() {
        let mut e = Egress::new(cfg(10, 4000, None), 1).unwrap();
        assert_eq!(e.offer(vec![0; 2000], 0), Verdict::Queued);
        assert_eq!(e.offer(vec![0; 2000], 0), Verdict::Queued);
        assert_eq!(e.offer(vec![0; 1], 0), Verdict::Dropped);
        // Once the first frame's last bit left (2024 bytes at 10 Gb/s = 1619.2 ns) there is
        // room again.
        assert_eq!(e.offer(vec![0; 2000], 1619), Verdict::Dropped);
        assert_eq!(e.offer(vec![0; 2000], 1620), Verdict::Queued);
        let c = e.counters();
        assert_eq!((c.queued, c.dropped, c.max_depth), (3, 2, 4000));
        assert_eq!(e.clear(), 2 + 1);
        assert_eq!(e.depth(1620), 0);
    }

    #[test]
    fn red_marks_ect_frames_by_queue_depth() {
        let red = Red {
            kmin: 10_000,
            kmax: 50_000,
            pmax: 0.2,
        };
        let mut e = Egress::new(cfg(1, 1 << 20, Some(red)), 7).unwrap();
        // Below kmin nothing is marked.
        for _ in 0..9 {
            assert_eq!(e.offer(ip_frame(1000, Ecn::Ect0), 0), Verdict::Queued);
        }
        // Fill to just past kmax with frames that cannot be marked, then count marks.
        for _ in 0..42 {
            assert_eq!(e.offer(ip_frame(1000, Ecn::NotEct), 0), Verdict::Queued);
        }
        assert_eq!(e.depth(0), 51_000);
        let mut f = ip_frame(1000, Ecn::Ect0);
        assert_eq!(e.offer(f.clone(), 0), Verdict::Marked, "above kmax: always");
        let mut out = Vec::new();
        e.poll(u64::MAX / 2, &mut out);
        let last = out.last().unwrap();
        assert_eq!(ecn::ecn(last), Some(Ecn::Ce));
        assert!(ecn::mark_ce(&mut f));
        assert_eq!(last, &f, "marked exactly as mark_ce does");
        assert_eq!(e.counters().marked, 1);
    }

    #[test]
    fn red_marking_probability_is_linear_between_the_thresholds() {
        let red = Red {
            kmin: 0,
            kmax: 100_000,
            pmax: 0.5,
        };
        let e = Egress::new(cfg(1, 1 << 20, Some(red)), 1).unwrap();
        assert_eq!(e.mark_probability(0), 0.0);
        assert!((e.mark_probability(50_000) - 0.25).abs() < 1e-12);
        assert!((e.mark_probability(100_000) - 0.5).abs() < 1e-12);
        assert_eq!(e.mark_probability(100_001), 1.0);
        // Statistically: the marks match the sum of the probabilities along a growing queue
        // (10,000 frames at a rate at which none leaves).
        let red = Red {
            kmin: 0,
            kmax: 10_000_000,
            pmax: 0.5,
        };
        let mut e = Egress::new(cfg(1, 1 << 30, Some(red)), 3).unwrap();
        let (mut marked, mut expected) = (0u32, 0.0);
        for _ in 0..10_000 {
            let depth = e.depth(0);
            expected += e.mark_probability(depth);
            if e.offer(ip_frame(1000, Ecn::Ect0), 0) == Verdict::Marked {
                marked += 1;
            }
        }
        // expected = 2499.75; the standard deviation is below 50.
        assert!(
            (f64::from(marked) - expected).abs() < 200.0,
            "{marked} vs {expected}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_marks() {
        let red = Some(Red {
            kmin: 1000,
            kmax: 20_000,
            pmax: 0.5,
        });
        let run = |seed| {
            let mut e = Egress::new(cfg(1, 1 << 20, red), seed).unwrap();
            (0..100)
                .map(|i| e.offer(ip_frame(500, Ecn::Ect1), i * 10))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }
}
