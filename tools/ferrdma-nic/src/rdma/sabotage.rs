//! Test-only faults of the NIC itself, which only the host can arm (through the fabric's
//! control socket, `sabotage nic:N ...`, see `fabric/control.rs`); nothing a guest writes to
//! the device reaches them, and they survive a device reset (they belong to the host, not to
//! the guest's device state). Both are off by default.
//!
//! - `write-byte=OFFSET`: the responder flips one bit of one byte of every RDMA WRITE (with
//!   or without immediate) it places in guest memory. It proves that the data-checking tests
//!   catch corruption (a test that cannot fail is a defect): with it on they must fail and
//!   name the offset.
//! - `admin=stall`: the admin queue stops answering (commands stay queued, no completion is
//!   written), as a hung device would; `admin=run` answers again. It lets the driver's
//!   timeout and dead-device paths be tested.
//! - `fatal`: the engine enters its fatal state (`DEV_STATUS.FATAL`, one `DEVICE_FATAL` AEQ
//!   entry, admin commands failing with status FATAL) the next time it runs, as E810 does on
//!   an internal firmware error. One request, one fatal state: the guest's reset clears it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a sabotaged byte is XORed with: the lowest bit, the subtlest change (not the
/// inverse, which a checker might take for an unwritten poisoned byte).
pub const FLIP: u8 = 0x01;

const OFF: u64 = u64::MAX;

/// The knob of one NIC, shared by the control socket's thread and the NIC's engine.
#[derive(Debug)]
pub struct Sabotage {
    /// The message offset to corrupt, or `OFF`.
    offset: AtomicU64,
    /// Bytes corrupted so far.
    hits: AtomicU64,
    /// The admin queue does not answer.
    admin_stalled: AtomicBool,
    /// A fatal error is requested and not yet taken by the engine.
    fatal: AtomicBool,
}

impl Default for Sabotage {
    fn default() -> Self {
        Self {
            offset: AtomicU64::new(OFF),
            hits: AtomicU64::new(0),
            admin_stalled: AtomicBool::new(false),
            fatal: AtomicBool::new(false),
        }
    }
}

impl Sabotage {
    /// Stops (`true`) or resumes the admin queue's answers.
    pub fn stall_admin(&self, stalled: bool) {
        self.admin_stalled.store(stalled, Ordering::Relaxed);
    }

    /// Whether the admin queue is to leave commands unanswered.
    pub fn admin_stalled(&self) -> bool {
        self.admin_stalled.load(Ordering::Relaxed)
    }

    /// Asks the engine to fail fatally the next time it runs.
    pub fn request_fatal(&self) {
        self.fatal.store(true, Ordering::Relaxed);
    }

    /// Whether a fatal error is requested and not yet taken.
    pub fn fatal_requested(&self) -> bool {
        self.fatal.load(Ordering::Relaxed)
    }

    /// Whether a fatal error was requested since the last call (the request is consumed).
    pub fn take_fatal(&self) -> bool {
        // Cheap when nothing is requested: the engine asks on every register write,
        // doorbell, frame and tick.
        self.fatal.load(Ordering::Relaxed) && self.fatal.swap(false, Ordering::Relaxed)
    }

    /// Arms the knob for message offset `offset` (every WRITE longer than `offset` bytes
    /// gets the byte there flipped), or disarms it with `None`.
    pub fn set(&self, offset: Option<u64>) {
        // u64::MAX itself cannot be armed: no message is that long anyway.
        self.offset.store(offset.unwrap_or(OFF), Ordering::Relaxed);
    }

    /// The armed offset, if any.
    pub fn offset(&self) -> Option<u64> {
        match self.offset.load(Ordering::Relaxed) {
            OFF => None,
            o => Some(o),
        }
    }

    /// Bytes corrupted since the process started.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The message offset to corrupt in a WRITE of `len` bytes, if any; counts the hit.
    pub fn target(&self, len: u64) -> Option<u64> {
        let off = self.offset()?;
        if off >= len {
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        log::warn!("sabotage: corrupting byte {off} of a {len}-byte RDMA WRITE");
        Some(off)
    }

    /// The payload of one packet of a WRITE, `data` placed at message offset `msg_off`: a
    /// corrupted copy if the armed offset falls inside it, else `data` itself.
    pub fn corrupt_chunk<'a>(&self, msg_off: u64, data: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(off) = self.offset() else {
            return Cow::Borrowed(data);
        };
        let Some(at) = off
            .checked_sub(msg_off)
            .and_then(|d| usize::try_from(d).ok())
            .filter(|&d| d < data.len())
        else {
            return Cow::Borrowed(data);
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        log::warn!("sabotage: corrupting byte {off} of an RDMA WRITE (packet at {msg_off})");
        let mut v = data.to_vec();
        v[at] ^= FLIP;
        Cow::Owned(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_leaves_data_alone() {
        let s = Sabotage::default();
        assert_eq!(s.offset(), None);
        assert_eq!(s.target(100), None);
        assert!(matches!(s.corrupt_chunk(0, &[1, 2, 3]), Cow::Borrowed(_)));
        assert_eq!(s.hits(), 0);
    }

    #[test]
    fn a_fatal_request_is_taken_once() {
        let s = Sabotage::default();
        assert!(!s.take_fatal());
        s.request_fatal();
        assert!(s.take_fatal());
        assert!(!s.take_fatal(), "one request, one fatal state");
    }

    #[test]
    fn flips_exactly_the_armed_byte_of_the_packet_that_holds_it() {
        let s = Sabotage::default();
        s.set(Some(1030));
        let data = [0xaau8; 1024];
        // Packet 0 ([0, 1024)) does not hold byte 1030; packet 1 ([1024, 2048)) does.
        assert!(matches!(s.corrupt_chunk(0, &data), Cow::Borrowed(_)));
        let got = s.corrupt_chunk(1024, &data);
        let diff: Vec<usize> = (0..data.len()).filter(|&i| got[i] != data[i]).collect();
        assert_eq!(diff, vec![6]);
        assert_eq!(got[6], 0xaa ^ FLIP);
        assert_eq!(s.target(1030), None, "a 1030-byte message has no byte 1030");
        assert_eq!(s.target(1031), Some(1030));
        assert_eq!(s.hits(), 2);
        s.set(None);
        assert!(matches!(s.corrupt_chunk(1024, &data), Cow::Borrowed(_)));
    }
}
