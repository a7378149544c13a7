//! RC transport state of one QP for peers on the wire (not local loopback), PSN arithmetic
//! and the limits that keep a guest from making the engine spin or allocate without bound.
//!
//! Requester: every SQ WQE sent to the wire becomes a [`Pending`] entry, in SQ order, until
//! it is acknowledged (ACK, or the last READ response); only then does it complete. Packets
//! are emitted lazily from the entries (a retransmission re-reads guest memory, which the
//! application may not touch before the completion), so memory per QP is bounded by
//! [`MAX_PENDING_WQES`] entries and the outbox, whatever the message sizes.
//!
//! Responder: the expected PSN lives in `attrs.rq_psn`, the message being received (SEND or
//! WRITE spanning packets) in [`RespState`], and accepted READ requests wait in a queue of at
//! most [`MAX_RD_ATOMIC`] entries whose response packets are generated a burst at a time.

use std::collections::VecDeque;

use crate::interface::MAX_RD_ATOMIC;

use super::seglist::MrRange;

/// Unacknowledged packets per QP (READ response packets count); the window of Go-Back-N.
/// Small enough that one loss costs a bounded resend, large enough to keep a link busy.
pub const MAX_INFLIGHT_PKTS: u32 = 128;
/// A READ WQE asks for at most this many response packets per READ request message, so a
/// lost response costs a bounded resend and the responder never runs far ahead.
pub const READ_CHUNK_PKTS: u32 = 32;
/// WQEs sent and not yet acknowledged, per QP.
pub const MAX_PENDING_WQES: usize = 128;
/// The requester asks for an ACK at least every this many packets (and on every last one).
pub const ACK_REQ_EVERY: u32 = 32;
/// A QP in ERR is first looked at for WQEs posted since its flush this long after it
/// entered ERR (`Engine::late_flushes`).
pub const LATE_FLUSH_FIRST_US: u64 = 1_000;
/// The longest interval between two such looks.
pub const LATE_FLUSH_MAX_US: u64 = 1_000_000;
/// Frames the engine holds for the fabric; producers stop (and resume later) when full.
pub const MAX_OUTBOX: usize = 1024;
/// Shortest retransmission timer, so a tiny `timeout` cannot make the timer thread spin.
pub const MIN_TIMER_US: u64 = 1_000;
/// Longest retransmission timer (the IB encoding reaches hours).
pub const MAX_TIMER_US: u64 = 10_000_000;
/// The RoCEv2 P_Key (default partition, full member).
pub const PKEY: u16 = 0xffff;
/// UDP source port when the path gives none.
pub const DEFAULT_UDP_SPORT: u16 = 0xc000;

/// 24-bit PSN mask.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// `a + n` in PSN space.
pub fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// Signed distance `a - b` in PSN space (-2^23..2^23).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// Local ACK timeout in microseconds for the `timeout` exponent (4.096 us * 2^t), `None` for
/// 0 (infinite), clamped to [`MIN_TIMER_US`]..=[`MAX_TIMER_US`].
pub fn ack_timeout_us(t: u8) -> Option<u64> {
    if t == 0 {
        return None;
    }
    let us = (4096u64 << t.min(31)) / 1000;
    Some(us.clamp(MIN_TIMER_US, MAX_TIMER_US))
}

/// The RNR NAK timer field (IBA table 45) in microseconds; 0 means 655.36 ms.
pub fn rnr_timer_us(code: u8) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760,
        327680, 491520,
    ];
    T[usize::from(code & 31)]
}

/// What a pending WQE does on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendKind {
    /// SEND (with immediate / invalidate / solicited as given).
    Send {
        imm: Option<u32>,
        inv: Option<u32>,
        solicited: bool,
    },
    /// RDMA WRITE (with immediate).
    Write {
        va: u64,
        rkey: u32,
        imm: Option<u32>,
        solicited: bool,
    },
    /// RDMA READ into `dst`.
    Read { va: u64, rkey: u32, dst: MrRange },
}

/// Payload source of a SEND or WRITE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    Inline(Vec<u8>),
    Guest(MrRange),
    None,
}

/// One WQE on the wire, waiting for its acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// SQ index and quanta of the WQE (for its CQE).
    pub tail: u32,
    pub quanta: u32,
    pub opcode: u8,
    pub signaled: bool,
    pub len: u64,
    pub kind: PendKind,
    pub payload: Payload,
    /// First PSN and PSNs used (packets of the message, or READ response packets).
    pub first_psn: u32,
    pub npkts: u32,
    /// Packets emitted in the current pass (a READ: response packets requested); a
    /// retransmission lowers it.
    pub sent: u32,
    /// The most packets `sent` has reached: emitting below it is a retransmission.
    pub high: u32,
    /// Packets acknowledged (a READ: responses received in order).
    pub acked: u32,
}

impl Pending {
    pub fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts.saturating_sub(1))
    }

    pub fn is_read(&self) -> bool {
        matches!(self.kind, PendKind::Read { .. })
    }

    /// Whether every packet of this entry has been emitted in the current pass.
    pub fn all_sent(&self) -> bool {
        self.sent >= self.npkts
    }

    /// READ request messages outstanding (each asks for up to [`READ_CHUNK_PKTS`]).
    pub fn read_requests(&self) -> u32 {
        if self.is_read() {
            self.sent
                .saturating_sub(self.acked)
                .div_ceil(READ_CHUNK_PKTS)
        } else {
            0
        }
    }
}

/// Requester side.
#[derive(Debug, Clone, Default)]
pub struct ReqState {
    pub pending: VecDeque<Pending>,
    /// Transport retries used since the last progress.
    pub retries: u32,
    /// RNR NAKs received since the last progress.
    pub rnr_naks: u32,
    /// Retransmission deadline (device clock, us) while packets are unacknowledged.
    pub deadline: Option<u64>,
    /// Resend (from the oldest unacknowledged PSN) once this passes: RNR back-off.
    pub rnr_until: Option<u64>,
    /// An ACK covering PSNs after the READ at the head (still missing responses): those
    /// WQEs complete as soon as the READ does, without waiting for a retransmission.
    pub acked_beyond: Option<u32>,
    /// A sequence-error NAK or gap already triggered a resend at this PSN; ignore repeats
    /// until there is progress, so one loss does not cause one resend per later packet.
    pub resent_at: Option<u32>,
}

impl ReqState {
    /// Packets that count against the window: emitted and not acknowledged.
    pub fn inflight_pkts(&self) -> u32 {
        self.pending
            .iter()
            .map(|p| p.sent.saturating_sub(p.acked))
            .fold(0u32, u32::saturating_add)
    }
}

/// A SEND being received across packets: its receive WQE's buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvCtx {
    pub segs: MrRange,
    pub off: u64,
}

/// A WRITE being received across packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteCtx {
    pub segs: MrRange,
    pub off: u64,
    pub total: u64,
}

/// A READ request being answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResp {
    pub src: MrRange,
    pub first_psn: u32,
    pub npkts: u32,
    /// Response packets emitted.
    pub sent: u32,
}

/// Responder side.
#[derive(Debug, Clone, Default)]
pub struct RespState {
    /// Messages completed (the AETH MSN).
    pub msn: u32,
    /// A NAK (sequence error) was sent for the current expected PSN.
    pub nak_sent: bool,
    pub recv: Option<RecvCtx>,
    pub write: Option<WriteCtx>,
    pub reads: VecDeque<ReadResp>,
    /// The ACK held until the end of the batch of frames being received
    /// (`ack_coalescing.rs`).
    pub owed_ack: Option<super::ack_coalescing::OwedAck>,
}

impl RespState {
    /// Whether another READ may be queued.
    pub fn read_room(&self) -> bool {
        self.reads.len() < usize::from(MAX_RD_ATOMIC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_add(PSN_MASK, 1), 0);
        assert_eq!(psn_diff(0, PSN_MASK), 1);
        assert_eq!(psn_diff(PSN_MASK, 0), -1);
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(psn_diff(3, 5), -2);
    }

    #[test]
    fn timers() {
        assert_eq!(ack_timeout_us(0), None);
        assert_eq!(ack_timeout_us(1), Some(MIN_TIMER_US));
        assert_eq!(ack_timeout_us(14), Some(67_108));
        assert_eq!(ack_timeout_us(31), Some(MAX_TIMER_US));
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(31), 491_520);
    }
}
