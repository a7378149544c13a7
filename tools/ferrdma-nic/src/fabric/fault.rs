//! Fault injection on one link (one egress port): drop, duplicate, reorder and delay frames
//! with given probabilities, mark ECN-capable frames Congestion Experienced (as a congested
//! switch would, to test a NIC's ECN reaction without congestion), and take the link down
//! or up. Pure logic on a logical clock and
//! a seeded generator, so a run with the same seed and the same inputs is the same run.
//!
//! The hub keeps one `Link` per faulty egress port (`--fault`), passes each frame through
//! `send` and calls `poll` when `next_due` comes; its clock ticks in milliseconds.

use std::collections::VecDeque;

use thiserror::Error;

/// Delayed frames held per link; more are dropped (and counted) rather than buffered.
pub const MAX_DELAYED: usize = 1024;

#[derive(Debug, Error, PartialEq)]
pub enum FaultError {
    #[error("{name} probability {value} is not within 0..=1")]
    Probability { name: &'static str, value: f64 },
    #[error("fault spec {0:?}: expected KEY=VALUE[,KEY=VALUE...] with keys drop, dup, reorder, delay, delay-ms, ce")]
    Syntax(String),
}

/// Per-frame probabilities, each rolled independently in the order drop, duplicate,
/// reorder, delay.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultConfig {
    pub drop: f64,
    pub duplicate: f64,
    /// The frame is held back and sent right after the next one.
    pub reorder: f64,
    /// The frame is sent `delay_ticks` later.
    pub delay: f64,
    pub delay_ticks: u64,
    /// An ECN-capable (ECT) IP frame is marked CE (`wire::ecn`); others pass unchanged.
    pub ce: f64,
}

impl FaultConfig {
    /// Parse `drop=P,dup=P,reorder=P,delay=P,delay-ms=N,ce=P` (any subset, any order).
    pub fn parse(spec: &str) -> Result<Self, FaultError> {
        let bad = || FaultError::Syntax(spec.to_string());
        let mut c = FaultConfig::default();
        for item in spec.split(',') {
            let (k, v) = item.split_once('=').ok_or_else(bad)?;
            match k {
                "delay-ms" => c.delay_ticks = v.parse().map_err(|_| bad())?,
                _ => {
                    let p: f64 = v.parse().map_err(|_| bad())?;
                    match k {
                        "drop" => c.drop = p,
                        "dup" => c.duplicate = p,
                        "reorder" => c.reorder = p,
                        "delay" => c.delay = p,
                        "ce" => c.ce = p,
                        _ => return Err(bad()),
                    }
                }
            }
        }
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), FaultError> {
        for (name, value) in [
            ("drop", self.drop),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("delay", self.delay),
            ("ce", self.ce),
        ] {
            // NaN fails this test too.
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultError::Probability { name, value });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounters {
    pub dropped: u64,
    pub dropped_down: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub delayed: u64,
    pub dropped_delay_full: u64,
    /// Frames marked Congestion Experienced.
    pub ce_marked: u64,
}

/// SplitMix64: tiny, fast, and good enough to drive test faults; chosen so the sequence
/// depends on nothing but the seed.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (53 random bits, so p = 1 is always and p = 0 never).
    fn chance(&mut self, p: f64) -> bool {
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }
}

#[derive(Debug)]
pub struct Link {
    cfg: FaultConfig,
    rng: Rng,
    down: bool,
    held: Option<Vec<u8>>,
    delayed: VecDeque<(u64, Vec<u8>)>,
    counters: FaultCounters,
}

impl Link {
    pub fn new(cfg: FaultConfig, seed: u64) -> Result<Self, FaultError> {
        cfg.validate()?;
        Ok(Link {
            cfg,
            rng: Rng(seed),
            down: false,
            held: None,
            delayed: VecDeque::new(),
            counters: FaultCounters::default(),
        })
    }

    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    pub fn is_down(&self) -> bool {
        self.down
    }

    /// New fault probabilities from now on; the link state, the generator and what the link
    /// holds (delayed or held-back frames) stay.
    pub fn set_config(&mut self, cfg: FaultConfig) -> Result<(), FaultError> {
        cfg.validate()?;
        self.cfg = cfg;
        Ok(())
    }

    /// Taking a link down loses whatever it was holding, as pulling a cable would.
    pub fn set_down(&mut self, down: bool) {
        self.down = down;
        if down {
            let lost = u64::from(self.held.is_some()) + self.delayed.len() as u64;
            self.counters.dropped_down += lost;
            self.held = None;
            self.delayed.clear();
        }
    }

    /// Offer a frame at time `now`; frames to transmit now are appended to `out`.
    pub fn send(&mut self, mut frame: Vec<u8>, now: u64, out: &mut Vec<Vec<u8>>) {
        if self.down {
            self.counters.dropped_down += 1;
            return;
        }
        if self.rng.chance(self.cfg.drop) {
            self.counters.dropped += 1;
            return;
        }
        let dup = self.rng.chance(self.cfg.duplicate);
        let reorder = self.rng.chance(self.cfg.reorder);
        let delay = self.rng.chance(self.cfg.delay);
        // Rolled last and only when asked for, so the other faults' sequence for a seed
        // stays what it was.
        if self.cfg.ce > 0.0
            && self.rng.chance(self.cfg.ce)
            && crate::wire::ecn::mark_ce(&mut frame)
        {
            self.counters.ce_marked += 1;
        }
        let copies = if dup {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let f = frame.clone();
            if delay {
                self.delay(f, now);
            } else if reorder && self.held.is_none() {
                self.counters.reordered += 1;
                self.held = Some(f);
            } else {
                out.push(f);
                if let Some(h) = self.held.take() {
                    out.push(h);
                }
            }
        }
    }

    fn delay(&mut self, f: Vec<u8>, now: u64) {
        if self.delayed.len() >= MAX_DELAYED {
            self.counters.dropped_delay_full += 1;
            return;
        }
        self.counters.delayed += 1;
        // Equal delays keep due times non-decreasing, so a FIFO is enough.
        self.delayed
            .push_back((now.saturating_add(self.cfg.delay_ticks), f));
    }

    /// Frames whose delay has passed by `now`.
    pub fn poll(&mut self, now: u64, out: &mut Vec<Vec<u8>>) {
        while self.delayed.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, f)) = self.delayed.pop_front() {
                out.push(f);
            }
        }
    }

    /// When `poll` next has something to give.
    pub fn next_due(&self) -> Option<u64> {
        self.delayed.front().map(|(due, _)| *due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u8) -> Vec<u8> {
        vec![n; 4]
    }

    fn run(cfg: FaultConfig, seed: u64, n: u8) -> (Vec<Vec<u8>>, FaultCounters) {
        let mut l = Link::new(cfg, seed).unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            l.send(frame(i), u64::from(i), &mut out);
            l.poll(u64::from(i), &mut out);
        }
        l.poll(u64::MAX, &mut out);
        (out, l.counters())
    }

    #[test]
    fn no_faults_is_a_wire() {
        let (out, c) = run(FaultConfig::default(), 1, 50);
        assert_eq!(out, (0..50).map(frame).collect::<Vec<_>>());
        assert_eq!(c, FaultCounters::default());
    }

    #[test]
    fn certain_faults() {
        let all = |f: fn(&mut FaultConfig)| {
            let mut c = FaultConfig::default();
            f(&mut c);
            run(c, 7, 10)
        };
        let (out, c) = all(|c| c.drop = 1.0);
        assert!(out.is_empty());
        assert_eq!(c.dropped, 10);
        let (out, _) = all(|c| c.duplicate = 1.0);
        assert_eq!(out.len(), 20);
        assert_eq!(out[0], out[1]);
        // Reorder always: each frame is held until the next passes, pairs swap.
        let (out, _) = all(|c| c.reorder = 1.0);
        assert_eq!(&out[..4], &[frame(1), frame(0), frame(3), frame(2)]);
    }

    #[test]
    fn ce_marks_ecn_capable_frames_only() {
        use crate::wire::ecn::{ecn, Ecn};
        let ip = |e: Ecn| {
            let mut f = vec![0u8; 60];
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f[14] = 0x45;
            f[15] = e.bits();
            f[23] = 17;
            f
        };
        let cfg = FaultConfig::parse("ce=1").unwrap();
        let mut l = Link::new(cfg, 1).unwrap();
        let mut out = Vec::new();
        for e in [Ecn::Ect0, Ecn::NotEct, Ecn::Ect1] {
            l.send(ip(e), 0, &mut out);
        }
        l.send(frame(9), 0, &mut out);
        let got: Vec<_> = out.iter().map(|f| ecn(f)).collect();
        assert_eq!(got, [Some(Ecn::Ce), Some(Ecn::NotEct), Some(Ecn::Ce), None]);
        assert_eq!(l.counters().ce_marked, 2);
        assert!(FaultConfig::parse("ce=1.5").is_err());
    }

    #[test]
    fn delay_releases_on_time() {
        let cfg = FaultConfig {
            delay: 1.0,
            delay_ticks: 5,
            ..Default::default()
        };
        let mut l = Link::new(cfg, 3).unwrap();
        let mut out = Vec::new();
        l.send(frame(1), 10, &mut out);
        assert!(out.is_empty());
        assert_eq!(l.next_due(), Some(15));
        l.poll(14, &mut out);
        assert!(out.is_empty());
        l.poll(15, &mut out);
        assert_eq!(out, vec![frame(1)]);
        assert_eq!(l.next_due(), None);
    }

    #[test]
    fn down_drops_and_loses_held_frames() {
        let cfg = FaultConfig {
            delay: 1.0,
            delay_ticks: 5,
            ..Default::default()
        };
        let mut l = Link::new(cfg, 3).unwrap();
        let mut out = Vec::new();
        l.send(frame(1), 0, &mut out);
        l.set_down(true);
        l.send(frame(2), 1, &mut out);
        l.poll(100, &mut out);
        assert!(out.is_empty());
        assert_eq!(l.counters().dropped_down, 2);
        l.set_down(false);
        l.send(frame(3), 100, &mut out);
        l.poll(105, &mut out);
        assert_eq!(out, vec![frame(3)]);
    }

    #[test]
    fn same_seed_same_run_and_rates_roughly_hold() {
        let cfg = FaultConfig {
            drop: 0.1,
            duplicate: 0.1,
            reorder: 0.1,
            delay: 0.1,
            delay_ticks: 3,
            ce: 0.0,
        };
        let a = run(cfg, 42, 200);
        assert_eq!(a, run(cfg, 42, 200));
        assert_ne!(a.0, run(cfg, 43, 200).0);
        let (_, c) = run(cfg, 42, 200);
        assert!((5..=40).contains(&c.dropped), "{c:?}");
    }

    #[test]
    fn bad_probabilities_are_refused() {
        for bad in [-0.1, 1.5, f64::NAN] {
            let cfg = FaultConfig {
                reorder: bad,
                ..Default::default()
            };
            assert!(Link::new(cfg, 0).is_err());
        }
    }

    #[test]
    fn specs_parse_strictly() {
        assert_eq!(
            FaultConfig::parse("drop=0.5,dup=0.25,reorder=1,delay=0,delay-ms=20,ce=0.5"),
            Ok(FaultConfig {
                drop: 0.5,
                duplicate: 0.25,
                reorder: 1.0,
                delay: 0.0,
                delay_ticks: 20,
                ce: 0.5,
            })
        );
        for bad in [
            "",
            "drop",
            "drop=x",
            "lose=0.1",
            "drop=2",
            "delay-ms=-1",
            "drop=0.1,",
        ] {
            assert!(FaultConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn delay_queue_is_bounded() {
        let cfg = FaultConfig {
            delay: 1.0,
            delay_ticks: 1000,
            ..Default::default()
        };
        let mut l = Link::new(cfg, 0).unwrap();
        let mut out = Vec::new();
        for _ in 0..MAX_DELAYED + 5 {
            l.send(frame(0), 0, &mut out);
        }
        assert_eq!(l.counters().dropped_delay_full, 5);
    }
}
