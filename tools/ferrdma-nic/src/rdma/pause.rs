//! The port's transmitter under link-level flow control (issue 18, item 5): a PFC frame
//! (IEEE 802.1Qbb) or 802.3x PAUSE from the switch holds the priorities it names for its time
//! (quanta of 512 bit times at the port's line rate, `CcConfig::line_mbps`); time 0 resumes
//! at once. Held frames stay in the engine's outbox, in order per priority, while frames of
//! other priorities go; once the bounded outbox is full, the QPs wait for room as behind any
//! slow port. The engine's clock is in microseconds: a pause lasts at least its time,
//! rounded up to the next microsecond.

use crate::wire::pfc::{self, Pfc};

/// The transmitter's pause state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxPause {
    /// Per priority: until when (µs) it may send nothing.
    until_us: [u64; 8],
}

impl TxPause {
    /// Obeys `p`, received at `now_us` by a port of `line_mbps`.
    pub fn obey(&mut self, p: &Pfc, now_us: u64, line_mbps: u32) {
        let rate = u64::from(line_mbps).saturating_mul(1_000_000);
        for (prio, &q) in p.quanta.iter().enumerate() {
            if p.enable & (1 << prio) != 0 {
                let us = pfc::quanta_ns(q, rate).div_ceil(1000);
                self.until_us[prio] = now_us.saturating_add(us);
            }
        }
    }

    /// Whether `prio` may send nothing at `now_us`.
    pub fn holds(&self, prio: u8, now_us: u64) -> bool {
        self.until_us
            .get(usize::from(prio))
            .is_some_and(|&t| t > now_us)
    }

    /// Whether any priority is held at `now_us`.
    pub fn any(&self, now_us: u64) -> bool {
        self.until_us.iter().any(|&t| t > now_us)
    }

    /// When the next held priority is released, if any is held at `now_us`.
    pub fn next_release(&self, now_us: u64) -> Option<u64> {
        self.until_us.iter().copied().filter(|&t| t > now_us).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_holds_only_its_priorities_for_its_time() {
        let mut t = TxPause::default();
        assert!(!t.any(0));
        // 0xffff quanta at 10 Gb/s: 3,355,392 ns = 3356 µs, rounded up.
        t.obey(&Pfc::new([0; 6], 1 << 3, 0xffff), 100, 10_000);
        assert!(t.holds(3, 100) && t.holds(3, 3455) && !t.holds(3, 3456));
        assert!(!t.holds(0, 100) && !t.holds(6, 100) && !t.holds(8, 100));
        assert_eq!(t.next_release(100), Some(3456));
        // Priorities a frame does not enable keep their state; time 0 releases.
        t.obey(&Pfc::new([0; 6], 1 << 5, 10), 200, 100_000);
        assert!(t.holds(3, 200) && t.holds(5, 200));
        t.obey(&Pfc::new([0; 6], 1 << 3, 0), 300, 10_000);
        assert!(!t.holds(3, 300) && !t.any(300));
        assert_eq!(t.next_release(300), None);
        // Absurd values saturate.
        t.obey(&Pfc::new([0; 6], 0xff, 0xffff), u64::MAX - 1, 0);
        assert!(t.holds(0, u64::MAX - 1));
    }
}
