//! DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
//! SIGCOMM 2015): the per-QP rate limiter a CNP slows down and timers and sent bytes speed up
//! again. Pure logic on the device clock (microseconds; pacing in nanoseconds), integer
//! arithmetic only, so a run is the same run on any host.
//!
//! Parameters carry the names of mlx5's `roce_rp` knobs. The algorithm, per QP:
//! * A CNP (at most one cut per `rate_reduce_monitor_period`): target = current; current *=
//!   (1 - alpha / 2), not below `rpg_min_rate`; alpha = (1 - g) alpha + g; the increase
//!   stages restart.
//! * Every `dce_tcp_rtt` without a CNP: alpha = (1 - g) alpha.
//! * Increase events, every `rpg_time_reset` and every `rpg_byte_reset` bytes sent, count
//!   T and B; each then sets current = (target + current) / 2 after raising the target:
//!   by nothing while max(T, B) < `rpg_threshold` (fast recovery), by `rpg_ai_rate` while one
//!   of them is below it (additive increase), by i * `rpg_hai_rate`, i = min(T, B) -
//!   threshold + 1, once both passed it (hyper increase); never above the line rate.
//! * At line rate with nothing to recover the limiter is idle: no timers run.
//!
//! g is `dce_tcp_g` / 1024 as the weight alpha keeps (1019: g = 5/1024, near the paper's
//! 1/256); alpha is kept in 1/1024 units (1024 = 1).

use thiserror::Error;

/// alpha = 1.
pub const ALPHA_ONE: u32 = 1024;
/// Pacing lets a QP that fell behind catch up by this much: a burst allowance as deep as the
/// engine thread's shortest sleep (`shared::MIN_SLEEP`, 100 us), since the engine sends what
/// is due when it wakes; with less, wake-ups rather than the rate would set the pace.
pub const PACING_SLACK_NS: u64 = 100_000;

/// The reaction point's parameters (mlx5 `roce_rp` names; rates in Mb/s, times in us).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpParams {
    pub rpg_time_reset: u32,
    pub rpg_byte_reset: u32,
    pub rpg_threshold: u32,
    pub rpg_ai_rate: u32,
    pub rpg_hai_rate: u32,
    pub rpg_min_rate: u32,
    pub rate_reduce_monitor_period: u32,
    pub dce_tcp_g: u32,
    pub dce_tcp_rtt: u32,
    pub initial_alpha_value: u32,
}

impl Default for RpParams {
    /// The DCQCN paper's values (g = 1/256, alpha and increase timers of 55 us, a 10 MB byte
    /// counter, F = 5, 40 Mb/s additive and 200 Mb/s hyper increase), a rate cut at most
    /// every 4 us (mlx5's default), 10 Mb/s at least.
    fn default() -> Self {
        RpParams {
            rpg_time_reset: 55,
            rpg_byte_reset: 10 << 20,
            rpg_threshold: 5,
            rpg_ai_rate: 40,
            rpg_hai_rate: 200,
            rpg_min_rate: 10,
            rate_reduce_monitor_period: 4,
            dce_tcp_g: 1020,
            dce_tcp_rtt: 55,
            initial_alpha_value: ALPHA_ONE,
        }
    }
}

/// Why reaction point parameters were refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RpError {
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("{name} = {value} exceeds {max}")]
    TooLarge {
        name: &'static str,
        value: u32,
        max: u32,
    },
}

impl RpParams {
    pub fn validate(&self) -> Result<(), RpError> {
        let checks: [(&'static str, u32, u32, u32); 10] = [
            ("rpg_time_reset", self.rpg_time_reset, 1, 10_000_000),
            ("rpg_byte_reset", self.rpg_byte_reset, 1, 1 << 30),
            ("rpg_threshold", self.rpg_threshold, 1, 1000),
            ("rpg_ai_rate", self.rpg_ai_rate, 1, 1_600_000),
            ("rpg_hai_rate", self.rpg_hai_rate, 1, 1_600_000),
            ("rpg_min_rate", self.rpg_min_rate, 1, 1_600_000),
            (
                "rate_reduce_monitor_period",
                self.rate_reduce_monitor_period,
                1,
                10_000_000,
            ),
            ("dce_tcp_g", self.dce_tcp_g, 1, ALPHA_ONE - 1),
            ("dce_tcp_rtt", self.dce_tcp_rtt, 1, 10_000_000),
            (
                "initial_alpha_value",
                self.initial_alpha_value,
                0,
                ALPHA_ONE,
            ),
        ];
        for (name, value, min, max) in checks {
            if value < min {
                return Err(RpError::Zero(name));
            }
            if value > max {
                return Err(RpError::TooLarge { name, value, max });
            }
        }
        Ok(())
    }
}

const MBPS: u64 = 1_000_000;

/// The reaction point state of one QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimiter {
    line_bps: u64,
    /// Current rate (b/s).
    rc: u64,
    /// Target rate (b/s).
    rt: u64,
    /// In 1/1024 units.
    alpha: u32,
    /// Increase events of the timer and of the byte counter since the last cut.
    t_count: u32,
    b_count: u32,
    bytes: u64,
    /// When the last cut was (us); `None` before the first CNP.
    last_cut: Option<u64>,
    cnp_in_period: bool,
    alpha_due: u64,
    increase_due: u64,
    /// Earliest time (ns) the next packet may leave.
    next_tx_ns: u64,
    /// CNPs that cut the rate, and those that came within a monitor period of a cut.
    pub cuts: u64,
    pub cnps_merged: u64,
}

impl RateLimiter {
    /// A limiter at `line_bps` (the port's speed); idle until the first CNP.
    pub fn new(line_bps: u64, p: &RpParams) -> Self {
        RateLimiter {
            line_bps,
            rc: line_bps,
            rt: line_bps,
            alpha: p.initial_alpha_value.min(ALPHA_ONE),
            t_count: 0,
            b_count: 0,
            bytes: 0,
            last_cut: None,
            cnp_in_period: false,
            alpha_due: 0,
            increase_due: 0,
            next_tx_ns: 0,
            cuts: 0,
            cnps_merged: 0,
        }
    }

    /// The current rate (b/s).
    pub fn rate(&self) -> u64 {
        self.rc
    }

    pub fn target(&self) -> u64 {
        self.rt
    }

    /// alpha in 1/1024 units.
    pub fn alpha(&self) -> u32 {
        self.alpha
    }

    /// Whether the limiter holds the QP below line rate (its timers run).
    pub fn active(&self) -> bool {
        self.last_cut.is_some() && (self.rc < self.line_bps || self.alpha > 0)
    }

    /// A CNP for this QP arrived at `now` (us).
    pub fn on_cnp(&mut self, now: u64, p: &RpParams) {
        self.cnp_in_period = true;
        let first = self.last_cut.is_none();
        if let Some(t) = self.last_cut {
            if now < t.saturating_add(u64::from(p.rate_reduce_monitor_period)) {
                self.cnps_merged += 1;
                return;
            }
        }
        self.cuts += 1;
        self.rt = self.rc;
        // rc * (1 - alpha/2), alpha in 1/1024: rc * (2048 - alpha) / 2048.
        let cut = u128::from(self.rc) * u128::from(2 * ALPHA_ONE - self.alpha)
            / u128::from(2 * ALPHA_ONE);
        self.rc = (cut as u64)
            .max(u64::from(p.rpg_min_rate) * MBPS)
            .min(self.rc);
        self.alpha = self.alpha_step(true, p);
        self.cnp_in_period = false;
        self.t_count = 0;
        self.b_count = 0;
        self.bytes = 0;
        self.last_cut = Some(now);
        self.increase_due = now + u64::from(p.rpg_time_reset);
        if first {
            self.alpha_due = now + u64::from(p.dce_tcp_rtt);
        }
    }

    fn alpha_step(&self, cnp: bool, p: &RpParams) -> u32 {
        let kept = self.alpha * p.dce_tcp_g / ALPHA_ONE;
        if cnp {
            (kept + (ALPHA_ONE - p.dce_tcp_g)).min(ALPHA_ONE)
        } else {
            kept
        }
    }

    /// One increase event (the timer's or the byte counter's).
    fn increase(&mut self, p: &RpParams) {
        let f = p.rpg_threshold;
        let (hi, lo) = (
            self.t_count.max(self.b_count),
            self.t_count.min(self.b_count),
        );
        if hi < f {
            // Fast recovery: towards the rate before the cut.
        } else if lo < f {
            self.rt = self.rt.saturating_add(u64::from(p.rpg_ai_rate) * MBPS);
        } else {
            let i = u64::from(lo - f + 1);
            self.rt = self.rt.saturating_add(i * u64::from(p.rpg_hai_rate) * MBPS);
        }
        self.rt = self.rt.min(self.line_bps);
        self.rc = (self.rt + self.rc).div_ceil(2).min(self.line_bps);
    }

    /// Runs the timers due by `now` (us).
    pub fn tick(&mut self, now: u64, p: &RpParams) {
        if !self.active() {
            return;
        }
        while self.alpha_due <= now {
            if !self.cnp_in_period {
                self.alpha = self.alpha_step(false, p);
            }
            self.cnp_in_period = false;
            self.alpha_due += u64::from(p.dce_tcp_rtt);
        }
        while self.increase_due <= now && self.active() {
            self.t_count = self.t_count.saturating_add(1);
            self.increase(p);
            self.increase_due += u64::from(p.rpg_time_reset);
        }
    }

    /// When `tick` next has work (us), if the limiter is active.
    pub fn next_timer(&self) -> Option<u64> {
        self.active().then(|| self.alpha_due.min(self.increase_due))
    }

    /// Whether a packet may leave at `now_ns`.
    pub fn may_send(&self, now_ns: u64) -> bool {
        self.rc >= self.line_bps || now_ns >= self.next_tx_ns
    }

    /// When (ns) the next packet may leave, if the limiter holds it back at `now_ns`.
    pub fn send_at(&self, now_ns: u64) -> Option<u64> {
        (!self.may_send(now_ns)).then_some(self.next_tx_ns)
    }

    /// A packet of `bytes` (as on the wire) left at `now_ns`: paces the next one and counts
    /// the bytes towards the byte counter's increase events.
    pub fn on_sent(&mut self, bytes: u64, now_ns: u64, p: &RpParams) {
        if self.rc < self.line_bps {
            let start = self.next_tx_ns.max(now_ns.saturating_sub(PACING_SLACK_NS));
            let ns = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(self.rc.max(1));
            self.next_tx_ns = start.saturating_add(ns as u64);
        }
        if self.active() {
            self.bytes += bytes;
            while self.bytes >= u64::from(p.rpg_byte_reset) {
                self.bytes -= u64::from(p.rpg_byte_reset);
                self.b_count = self.b_count.saturating_add(1);
                self.increase(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: u64 = 25_000 * MBPS;

    /// The values the expectations below were worked out for (not the defaults, which may
    /// be tuned): T = 300 us, B = 32767 bytes, F = 5, AI 40 and HAI 100 Mb/s, g = 5/1024.
    fn params() -> RpParams {
        RpParams {
            rpg_time_reset: 300,
            rpg_byte_reset: 32_767,
            rpg_threshold: 5,
            rpg_ai_rate: 40,
            rpg_hai_rate: 100,
            rpg_min_rate: 10,
            rate_reduce_monitor_period: 4,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 55,
            initial_alpha_value: ALPHA_ONE,
        }
    }

    #[test]
    fn idle_at_line_rate_until_a_cnp() {
        let p = params();
        let mut r = RateLimiter::new(LINE, &p);
        assert!(!r.active());
        assert_eq!(r.next_timer(), None);
        assert!(r.may_send(0));
        r.on_sent(1 << 20, 0, &p);
        assert!(r.may_send(0), "no pacing at line rate");
        r.tick(1_000_000, &p);
        assert_eq!(r.rate(), LINE);
    }

    #[test]
    fn a_cnp_halves_the_rate_with_alpha_one_and_updates_alpha() {
        let p = params();
        let mut r = RateLimiter::new(LINE, &p);
        r.on_cnp(100, &p);
        assert_eq!(r.rate(), LINE / 2);
        assert_eq!(r.target(), LINE);
        // alpha = (1 - g) * 1 + g = 1.
        assert_eq!(r.alpha(), ALPHA_ONE);
        // A second CNP within the monitor period changes nothing.
        r.on_cnp(103, &p);
        assert_eq!((r.rate(), r.cuts, r.cnps_merged), (LINE / 2, 1, 1));
        r.on_cnp(104, &p);
        assert_eq!((r.rate(), r.cuts), (LINE / 4, 2));
        assert_eq!(r.target(), LINE / 2);
    }

    #[test]
    fn alpha_decays_without_cnps_and_cuts_get_gentler() {
        let p = params();
        let mut r = RateLimiter::new(LINE, &p);
        r.on_cnp(0, &p);
        // 100 alpha periods without a CNP: alpha *= 1019/1024 each, rounded down: 590/1024.
        r.tick(100 * 55, &p);
        assert_eq!(r.alpha(), 590);
        let before = r.rate();
        assert!(
            before > LINE / 100 * 99,
            "recovered by the increase timer meanwhile"
        );
        r.on_cnp(100 * 55 + 1, &p);
        // 1 - alpha/2 = 1 - 590/2048.
        assert_eq!(r.rate(), before * (2048 - 590) / 2048);
    }

    #[test]
    fn recovery_fast_then_additive_then_hyper() {
        let p = RpParams {
            rpg_threshold: 2,
            ..params()
        };
        let mut r = RateLimiter::new(LINE, &p);
        r.on_cnp(0, &p);
        let half = LINE / 2;
        assert_eq!(r.rate(), half);
        // Timer event 1 (< F): fast recovery halves the distance to the target.
        r.tick(300, &p);
        assert_eq!(r.rate(), (LINE + half).div_ceil(2));
        assert_eq!(r.target(), LINE);
        // Bring the target down to see additive and hyper increase below the line rate.
        let mut r = RateLimiter::new(LINE, &p);
        r.on_cnp(0, &p);
        r.on_cnp(10, &p);
        let target = r.target();
        assert_eq!(target, LINE / 2);
        // T = 1, 2 by the timer: the second (T = F, B = 0) is additive.
        r.tick(310, &p);
        assert_eq!(r.target(), target);
        r.tick(610, &p);
        assert_eq!(r.target(), target + 40 * MBPS);
        // Two byte events (B = 1 fast... B = 2 = F): then min(T, B) = 2 >= F: hyper, i = 1.
        let t = r.target();
        r.on_sent(32_767, 1_000_000, &p);
        assert_eq!(r.target(), t + 40 * MBPS, "B = 1, T = 2: additive");
        let t = r.target();
        r.on_sent(32_767, 1_000_000, &p);
        assert_eq!(r.target(), t + 100 * MBPS, "B = 2, T = 2: hyper, i = 1");
    }

    #[test]
    fn recovers_to_line_rate_and_goes_idle() {
        let p = params();
        let mut r = RateLimiter::new(LINE, &p);
        r.on_cnp(0, &p);
        let mut now = 0;
        while r.active() && now < 100_000_000 {
            now = r.next_timer().unwrap();
            r.tick(now, &p);
        }
        assert_eq!(r.rate(), LINE);
        assert!(!r.active(), "idle after {now} us");
    }

    #[test]
    fn pacing_spaces_packets_at_the_current_rate() {
        // No byte-counter increase events during the test: the rate stays put.
        let p = RpParams {
            rpg_byte_reset: 1 << 30,
            ..params()
        };
        let mut r = RateLimiter::new(LINE, &p);
        r.on_cnp(0, &p);
        r.on_cnp(10, &p);
        // 6.25 Gb/s: a 4096-byte packet every 5242.88 ns.
        assert_eq!(r.rate(), LINE / 4);
        let t0 = 1_000_000_000;
        assert!(r.may_send(t0));
        // After a pause a QP may run ahead by the slack (100 us: 20 packets), no more.
        let mut sent = 0;
        while r.may_send(t0) {
            r.on_sent(4096, t0, &p);
            sent += 1;
        }
        assert_eq!(sent, 20);
        assert_eq!(r.send_at(t0), Some(t0 - PACING_SLACK_NS + 20 * 5242));
        // Over a long run the rate holds within rounding.
        let mut t = t0 + 20 * 5242;
        let mut sent = 0u64;
        for _ in 0..10_000 {
            if let Some(at) = r.send_at(t) {
                t = at;
            }
            r.on_sent(
                4096,
                t,
                &RpParams {
                    rpg_byte_reset: u32::MAX >> 2,
                    ..p
                },
            );
            sent += 4096;
        }
        let rate = sent as f64 * 8.0 / ((t - t0) as f64 / 1e9);
        assert!((rate / (LINE / 4) as f64 - 1.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn never_below_the_minimum_rate() {
        let p = params();
        let mut r = RateLimiter::new(LINE, &p);
        for i in 0..100 {
            r.on_cnp(i * 10, &p);
        }
        assert_eq!(r.rate(), u64::from(p.rpg_min_rate) * MBPS);
    }

    #[test]
    fn hostile_parameters_are_refused() {
        assert!(RpParams::default().validate().is_ok());
        let bad = |f: fn(&mut RpParams)| {
            let mut p = RpParams::default();
            f(&mut p);
            p.validate().err()
        };
        assert_eq!(
            bad(|p| p.rpg_time_reset = 0),
            Some(RpError::Zero("rpg_time_reset"))
        );
        assert!(matches!(
            bad(|p| p.dce_tcp_g = 1024),
            Some(RpError::TooLarge { .. })
        ));
        assert!(matches!(
            bad(|p| p.initial_alpha_value = 5000),
            Some(RpError::TooLarge { .. })
        ));
        assert!(matches!(
            bad(|p| p.rpg_ai_rate = u32::MAX),
            Some(RpError::TooLarge { .. })
        ));
    }
}
