//! Event queues: rings of 16-byte entries the device writes, with a valid bit equal to the
//! pass polarity, an arm flag, and one interrupt per arm.
//!
//! Interrupts are not raised while entries are written: a batch (one doorbell or admin
//! command) may write several entries, and [`Eq::take_interrupt`] is asked once at the end.
//! On top of that an EQ may have a moderation interval (E810's ITR): after an interrupt, the
//! next one waits until the interval has passed, while entries keep being written; the
//! engine's timer raises it then ([`Eq::held_until`]).

use crate::dma::{DmaError, GuestMemory};
use crate::interface::{Eqe, EQE_FLAG_VALID, EQE_SIZE};

use super::ring::Ring;

/// Why an entry could not be written.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EqPushError {
    #[error("event queue full")]
    Full,
    #[error("event queue ring not writable: {0}")]
    Dma(DmaError),
}

/// One event queue.
#[derive(Debug)]
pub struct Eq {
    pub kind: u8,
    pub vector: u32,
    ring: Ring,
    /// Next slot the device writes.
    prod: u32,
    /// Polarity of the current pass (true = 1).
    polarity: bool,
    /// Software's consumer index from the last doorbell.
    cons: u32,
    armed: bool,
    /// Entries were written since the last interrupt.
    fresh: bool,
    /// An overflow was already reported for this EQ since it was last armed.
    pub overflow_reported: bool,
    /// Least time between two interrupts, in microseconds (0: none).
    moderation_us: u64,
    /// Device time of the last interrupt.
    last_irq_us: Option<u64>,
}

impl Eq {
    /// A new, disarmed EQ.
    pub fn new(kind: u8, vector: u32, ring: Ring) -> Self {
        Self {
            kind,
            vector,
            ring,
            prod: 0,
            polarity: true,
            cons: 0,
            armed: false,
            fresh: false,
            overflow_reported: false,
            moderation_us: 0,
            last_irq_us: None,
        }
    }

    /// The same EQ with a moderation interval of `us` microseconds.
    pub fn with_moderation(mut self, us: u16) -> Self {
        self.moderation_us = u64::from(us);
        self
    }

    /// When an interrupt that is due is held back by moderation: the time it may go.
    pub fn held_until(&self) -> Option<u64> {
        let last = self.last_irq_us?;
        (self.armed && self.fresh && self.moderation_us > 0)
            .then(|| last.saturating_add(self.moderation_us))
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.entries()
    }

    /// Writes `e` (its valid bit is set here) unless the ring is full.
    pub fn push(&mut self, mem: &dyn GuestMemory, mut e: Eqe) -> Result<(), EqPushError> {
        let size = self.ring.entries();
        if (self.prod + 1) % size == self.cons % size {
            return Err(EqPushError::Full);
        }
        e.flags = if self.polarity { EQE_FLAG_VALID } else { 0 };
        let bytes = e.encode();
        let addr = self.ring.addr(self.prod);
        // Everything but the flags byte first, so software never sees a valid entry with
        // stale contents.
        let body = bytes.get(..EQE_SIZE - 1).unwrap_or(&[]);
        let flag = bytes.get(EQE_SIZE - 1..).unwrap_or(&[]);
        mem.write(addr, body).map_err(EqPushError::Dma)?;
        mem.write(addr + (EQE_SIZE as u64 - 1), flag)
            .map_err(EqPushError::Dma)?;
        self.prod += 1;
        if self.prod == size {
            self.prod = 0;
            self.polarity = !self.polarity;
        }
        self.fresh = true;
        Ok(())
    }

    /// `EQ_DOORBELL`: software consumed up to `cons` and maybe re-armed. `false` if `cons`
    /// is out of range (ignored).
    pub fn doorbell(&mut self, cons: u32, arm: bool) -> bool {
        if cons >= self.ring.entries() {
            return false;
        }
        self.cons = cons;
        if arm {
            self.armed = true;
            self.overflow_reported = false;
            // Entries software has not consumed yet deserve an interrupt now.
            if self.prod != self.cons {
                self.fresh = true;
            }
        }
        true
    }

    /// Whether an interrupt is due at device time `now_us`; if so the EQ disarms.
    pub fn take_interrupt(&mut self, now_us: u64) -> bool {
        if !(self.armed && self.fresh) || self.held_until().is_some_and(|t| now_us < t) {
            return false;
        }
        self.armed = false;
        self.fresh = false;
        self.last_irq_us = Some(now_us);
        true
    }
}
