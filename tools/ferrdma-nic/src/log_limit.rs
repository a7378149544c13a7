//! Rate limiting for log lines a client can provoke at will.
//!
//! A vfio-user client (QEMU, or anything that connects to the socket) can repeat a refused
//! request as often as it likes; a warning per refusal would let it grow the NIC's log
//! without bound. [`LogLimiter`] lets a burst through per window and then only counts, and
//! the first line of the next window says how many were held back.

/// Lines allowed per window.
pub const BURST: u32 = 10;
/// The window, in microseconds of the device clock.
pub const WINDOW_US: u64 = 10_000_000;

/// Decides which of a stream of similar log lines are written.
///
/// # Invariants
/// `in_window <= BURST`; `suppressed` counts the lines refused since the last one allowed.
#[derive(Debug, Default)]
pub struct LogLimiter {
    window_start_us: Option<u64>,
    in_window: u32,
    suppressed: u64,
}

/// The verdict for one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Write it; `suppressed` lines were held back before it (say so when non-zero).
    Log { suppressed: u64 },
    /// Drop it.
    Drop,
}

impl LogLimiter {
    /// Whether a line at `now_us` (device clock) may be written.
    pub fn check(&mut self, now_us: u64) -> Verdict {
        let start = *self.window_start_us.get_or_insert(now_us);
        if now_us.saturating_sub(start) >= WINDOW_US {
            self.window_start_us = Some(now_us);
            self.in_window = 0;
        }
        if self.in_window < BURST {
            self.in_window += 1;
            Verdict::Log {
                suppressed: std::mem::take(&mut self.suppressed),
            }
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            Verdict::Drop
        }
    }
}

/// Logs a warning through `limiter` at `now_us`, with a count of held-back lines.
#[macro_export]
macro_rules! warn_limited {
    ($limiter:expr, $now_us:expr, $($arg:tt)+) => {
        match $limiter.check($now_us) {
            $crate::log_limit::Verdict::Log { suppressed: 0 } => log::warn!($($arg)+),
            $crate::log_limit::Verdict::Log { suppressed } => {
                log::warn!($($arg)+);
                log::warn!("({suppressed} similar warnings suppressed)");
            }
            $crate::log_limit::Verdict::Drop => {}
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_lines_are_counted_and_reported_in_the_next_window() {
        let mut l = LogLimiter::default();
        for _ in 0..BURST {
            assert_eq!(l.check(5), Verdict::Log { suppressed: 0 });
        }
        for _ in 0..1000 {
            assert_eq!(l.check(6), Verdict::Drop);
        }
        assert_eq!(l.check(5 + WINDOW_US - 1), Verdict::Drop);
        assert_eq!(l.check(5 + WINDOW_US), Verdict::Log { suppressed: 1001 });
        assert_eq!(l.check(5 + WINDOW_US), Verdict::Log { suppressed: 0 });
    }

    #[test]
    fn a_clock_going_backwards_does_not_reopen_the_window() {
        let mut l = LogLimiter::default();
        for _ in 0..BURST {
            l.check(WINDOW_US * 3);
        }
        assert_eq!(l.check(0), Verdict::Drop);
    }
}
