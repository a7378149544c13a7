//! Lossless Ethernet for the fabric's switch (issue 18, item 5): priority-based flow control,
//! IEEE 802.1Qbb, decided per ingress port. The switch counts, per ingress port and priority,
//! the bytes that came in there and still wait in its egress queues (`Egress::occupancy`).
//! When a priority's count reaches XOFF, the switch sends the station on that port a PFC frame
//! that pauses the priority for `quanta`; while the count stays above XON it sends another
//! before the pause runs out (at half its time); at XON or below it sends time 0, which
//! resumes at once.
//!
//! XOFF must leave headroom below the buffer: what is on the wire and in the sender's
//! transmitter when the pause leaves still arrives (about two propagation delays at the line
//! rate plus two maximum frames per paused port). `PfcIngress` is pure: the caller gives the
//! occupancy and the time, and sends the frame it returns.

use thiserror::Error;

use crate::wire::pfc::{self, Pfc};

use super::egress::MAX_BUFFER_BYTES;

/// Why a PFC configuration was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PfcError {
    #[error("PFC thresholds: xon {xon} must be below xoff {xoff}, and xoff within 1..={MAX_BUFFER_BYTES}")]
    Thresholds { xoff: u64, xon: u64 },
    #[error("PFC pause time of 0 quanta would never pause")]
    Quanta,
    #[error("PFC needs at least one priority")]
    Priorities,
    #[error("PFC spec {0:?}: expected xoff=BYTES,xon=BYTES[,quanta=N][,prio=DIGITS] (priorities 0-7, e.g. prio=3 or prio=36)")]
    Syntax(String),
}

/// When a switch port pauses its station, and for which priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcConfig {
    /// Bytes queued from the port at which a priority is paused.
    pub xoff: u64,
    /// Bytes at or below which a paused priority is resumed.
    pub xon: u64,
    /// The pause time of each PFC frame, in quanta of 512 bit times.
    pub quanta: u16,
    /// The priorities flow-controlled (bit p: priority p); others are dropped when the
    /// buffer is full, as on a lossy switch.
    pub priorities: u8,
}

impl Default for PfcConfig {
    /// RoCE's priority 3, the longest pause, thresholds for a 10 Gb/s port with 1 µs links.
    fn default() -> Self {
        PfcConfig {
            xoff: 64 << 10,
            xon: 32 << 10,
            quanta: 0xffff,
            priorities: 1 << 3,
        }
    }
}

impl PfcConfig {
    pub fn validate(&self) -> Result<(), PfcError> {
        if self.xon >= self.xoff || !(1..=MAX_BUFFER_BYTES).contains(&self.xoff) {
            return Err(PfcError::Thresholds {
                xoff: self.xoff,
                xon: self.xon,
            });
        }
        if self.quanta == 0 {
            return Err(PfcError::Quanta);
        }
        if self.priorities == 0 {
            return Err(PfcError::Priorities);
        }
        Ok(())
    }

    /// Parses `xoff=BYTES,xon=BYTES[,quanta=N][,prio=DIGITS]` and validates it; `prio`
    /// defaults to 3 and `quanta` to 65535.
    pub fn parse(spec: &str) -> Result<Self, PfcError> {
        let bad = || PfcError::Syntax(spec.to_string());
        let mut c = PfcConfig::default();
        let (mut xoff, mut xon) = (None, None);
        for item in spec.split(',') {
            let (k, v) = item.split_once('=').ok_or_else(bad)?;
            if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            match k {
                "xoff" => xoff = Some(v.parse().map_err(|_| bad())?),
                "xon" => xon = Some(v.parse().map_err(|_| bad())?),
                "quanta" => c.quanta = v.parse().map_err(|_| bad())?,
                "prio" => {
                    c.priorities = 0;
                    for d in v.bytes() {
                        if d > b'7' {
                            return Err(bad());
                        }
                        c.priorities |= 1 << (d - b'0');
                    }
                }
                _ => return Err(bad()),
            }
        }
        c.xoff = xoff.ok_or_else(bad)?;
        c.xon = xon.ok_or_else(bad)?;
        c.validate()?;
        Ok(c)
    }
}

/// What one switch port's flow control counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PfcCounters {
    /// PFC frames sent that paused (or re-paused) a priority.
    pub pauses: u64,
    /// PFC frames sent that only resumed.
    pub resumes: u64,
}

/// The flow control of one switch port towards the station on it.
#[derive(Debug, Clone)]
pub struct PfcIngress {
    cfg: PfcConfig,
    /// The priorities the station was last told to pause.
    paused: u8,
    /// Per priority: when (ns) to re-send its pause while still above XON.
    refresh_ns: [u64; 8],
    counters: PfcCounters,
}

impl PfcIngress {
    pub fn new(cfg: PfcConfig) -> Result<Self, PfcError> {
        cfg.validate()?;
        Ok(PfcIngress {
            cfg,
            paused: 0,
            refresh_ns: [0; 8],
            counters: PfcCounters::default(),
        })
    }

    pub fn config(&self) -> &PfcConfig {
        &self.cfg
    }

    pub fn counters(&self) -> PfcCounters {
        self.counters
    }

    /// The priorities paused now.
    pub fn paused(&self) -> u8 {
        self.paused
    }

    /// When a pause must be sent again (ns), if any priority is paused.
    pub fn next_refresh(&self) -> Option<u64> {
        (0..8)
            .filter(|p| self.paused & (1 << p) != 0)
            .map(|p| self.refresh_ns[p])
            .min()
    }

    /// Looks at the port's occupancy at `now`; returns the PFC frame to send it, if any
    /// (`src`: the switch port's MAC; `rate_bps`: the port's line rate, which sets how long
    /// a quantum is).
    pub fn update(
        &mut self,
        occupancy: &[u64; 8],
        now_ns: u64,
        rate_bps: u64,
        src: [u8; 6],
    ) -> Option<Pfc> {
        let (mut pause, mut resume) = (0u8, 0u8);
        for (p, &bytes) in occupancy.iter().enumerate() {
            let bit = 1u8 << p;
            if self.cfg.priorities & bit == 0 {
                continue;
            }
            if self.paused & bit == 0 {
                if bytes >= self.cfg.xoff {
                    pause |= bit;
                }
            } else if bytes <= self.cfg.xon {
                resume |= bit;
            } else if now_ns >= self.refresh_ns[p] {
                pause |= bit;
            }
        }
        if pause | resume == 0 {
            return None;
        }
        let half = pfc::quanta_ns(self.cfg.quanta, rate_bps) / 2;
        let mut frame = Pfc::new(src, pause | resume, 0);
        for p in 0..8 {
            if pause & (1 << p) != 0 {
                frame.quanta[p] = self.cfg.quanta;
                self.refresh_ns[p] = now_ns.saturating_add(half.max(1));
            }
        }
        self.paused = (self.paused | pause) & !resume;
        if pause != 0 {
            self.counters.pauses += 1;
        } else {
            self.counters.resumes += 1;
        }
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const GBPS10: u64 = 10_000_000_000;

    fn occ(p3: u64) -> [u64; 8] {
        let mut o = [0; 8];
        o[3] = p3;
        o
    }

    #[test]
    fn xoff_pauses_xon_resumes_and_a_long_pause_is_refreshed() {
        let cfg = PfcConfig {
            xoff: 10_000,
            xon: 5_000,
            quanta: 1000, // 51.2 us at 10 Gb/s: refreshed every 25.6 us
            priorities: 1 << 3,
        };
        let mut f = PfcIngress::new(cfg).unwrap();
        assert_eq!(f.update(&occ(9_999), 0, GBPS10, SRC), None);
        let p = f.update(&occ(10_000), 100, GBPS10, SRC).unwrap();
        assert_eq!((p.src, p.enable, p.quanta[3]), (SRC, 1 << 3, 1000));
        assert_eq!(f.paused(), 1 << 3);
        // Between the thresholds nothing changes until the refresh is due.
        assert_eq!(f.update(&occ(7_000), 10_000, GBPS10, SRC), None);
        assert_eq!(f.update(&occ(7_000), 100 + 25_599, GBPS10, SRC), None);
        let again = f.update(&occ(7_000), 100 + 25_600, GBPS10, SRC).unwrap();
        assert_eq!(again.quanta[3], 1000);
        // At XON: time 0 for priority 3.
        let xon = f.update(&occ(5_000), 30_000, GBPS10, SRC).unwrap();
        assert_eq!((xon.enable, xon.quanta), (1 << 3, [0; 8]));
        assert_eq!(f.paused(), 0);
        assert_eq!(f.update(&occ(0), 40_000, GBPS10, SRC), None);
        assert_eq!(
            f.counters(),
            PfcCounters {
                pauses: 2,
                resumes: 1
            }
        );
    }

    #[test]
    fn priorities_not_flow_controlled_are_never_paused() {
        let mut f = PfcIngress::new(PfcConfig::default()).unwrap();
        let mut o = [1u64 << 30; 8];
        o[3] = 0;
        assert_eq!(f.update(&o, 0, GBPS10, SRC), None);
        let two = PfcIngress::new(PfcConfig::parse("xoff=100,xon=50,prio=36").unwrap());
        let mut two = two.unwrap();
        let mut o = [0u64; 8];
        o[3] = 100;
        o[6] = 100;
        o[5] = 100;
        assert_eq!(
            two.update(&o, 0, GBPS10, SRC).map(|p| p.enable),
            Some(0b0100_1000)
        );
    }

    #[test]
    fn specs_parse_and_hostile_ones_are_refused() {
        let c = PfcConfig::parse("xoff=65536,xon=32768,quanta=100,prio=3").unwrap();
        assert_eq!(
            c,
            PfcConfig {
                xoff: 65536,
                xon: 32768,
                quanta: 100,
                priorities: 1 << 3
            }
        );
        assert_eq!(PfcConfig::parse("xon=1,xoff=2").unwrap().quanta, 0xffff);
        for bad in [
            "",
            "xoff=100",
            "xon=100",
            "xoff=100,xon=100",
            "xoff=100,xon=200",
            "xoff=0,xon=0",
            "xoff=99999999999,xon=1",
            "xoff=100,xon=50,quanta=0",
            "xoff=100,xon=50,quanta=65536",
            "xoff=100,xon=50,prio=8",
            "xoff=100,xon=50,prio=",
            "xoff=100,xon=50,prio=-1",
            "xoff=+100,xon=50",
            "xoff=100,xon=50,speed=1",
            "xoff=100;xon=50",
        ] {
            assert!(PfcConfig::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            PfcIngress::new(PfcConfig {
                priorities: 0,
                ..PfcConfig::default()
            })
            .err(),
            Some(PfcError::Priorities)
        );
    }
}
