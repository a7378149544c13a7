//! ACK coalescing at the RC responder.
//!
//! The engine takes frames from the fabric in batches (`shared.rs`: up to 64 a lock). Within
//! a batch, an ACK that a request asked for (AckReq) is owed rather than sent: a later
//! accepted request of the same QP that asks again replaces it, and every owed ACK goes out
//! when the batch ends. An ACK is cumulative, so the requester completes the same WQEs from
//! one ACK of the batch's last PSN as from one ACK a message; what changes is the number of
//! ACK frames and of wake-ups of the requester's engine when the responder runs behind
//! (a two-VM WRITE stream: one per 64 KiB message at MTU 4096 before). A responder that keeps
//! up sees batches of one message and acknowledges each at once, so latency does not change.
//!
//! Order on the wire is kept: anything else the responder sends for a QP (a NAK, an RNR NAK,
//! a duplicate's ACK, READ responses) is preceded by the ACK that QP owes. The delay an owed
//! ACK adds is bounded by one batch, far below any retransmission timer (`MIN_TIMER_US`).
//! Frames delivered one at a time (`Engine::rx_frame` outside a batch, the loopback tests)
//! are acknowledged as they arrive.

use crate::wire::aeth::Syndrome;

use super::transport::PSN_MASK;
use super::Engine;

/// The responder's ACKs held during a batch of received frames.
#[derive(Debug, Default)]
pub(super) struct AckCoalescer {
    /// A batch is being received: ACKs are owed, not sent.
    batch: bool,
    /// QPs that owe an ACK (each once; `RespState::owed_ack` holds what it owes).
    owing: Vec<u32>,
    /// ACKs replaced by a later one of the same batch, since the reset.
    coalesced: u64,
}

/// An ACK held back: the PSN it acknowledges and the MSN when that PSN was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwedAck {
    pub psn: u32,
    pub msn: u32,
}

impl Engine {
    /// Starts a batch of received frames: from now on ACKs are owed until
    /// [`Engine::end_rx_batch`].
    pub fn begin_rx_batch(&mut self) {
        self.acks.batch = true;
    }

    /// Ends a batch: sends every ACK owed, in the order the QPs came to owe one.
    pub fn end_rx_batch(&mut self) {
        self.acks.batch = false;
        let mut owing = std::mem::take(&mut self.acks.owing);
        for qpn in owing.drain(..) {
            self.send_owed_ack(qpn);
        }
        // Keep the allocation for the next batch.
        self.acks.owing = owing;
    }

    /// Acknowledges accepted request `psn` of responder QP `qpn` that asked for it: at once
    /// outside a batch, else when the batch ends (or before anything else this QP sends).
    pub(super) fn ack_accepted(&mut self, qpn: u32, psn: u32) {
        if !self.acks.batch {
            self.send_ack(
                qpn,
                psn,
                Syndrome::Ack {
                    credits: NO_CREDITS,
                },
            );
            return;
        }
        let Some(q) = self.qp_mut(qpn) else { return };
        let msn = q.resp.msn;
        let was_owing = q.resp.owed_ack.replace(OwedAck { psn, msn }).is_some();
        if !was_owing {
            self.acks.owing.push(qpn);
        }
        self.acks.coalesced += u64::from(was_owing);
    }

    /// ACKs not sent because a later ACK of the same batch covered them, since the reset.
    pub fn acks_coalesced(&self) -> u64 {
        self.acks.coalesced
    }

    /// Sends the ACK responder QP `qpn` owes, if any (before any other frame of that QP).
    pub(super) fn send_owed_ack(&mut self, qpn: u32) {
        let Some(owed) = self.qp_mut(qpn).and_then(|q| q.resp.owed_ack.take()) else {
            return;
        };
        self.send_aeth(
            qpn,
            owed.psn,
            Syndrome::Ack {
                credits: NO_CREDITS,
            },
            owed.msn & PSN_MASK,
        );
    }
}

/// AETH credit field meaning "no end-to-end credits" (this NIC does no credit flow control).
pub(super) const NO_CREDITS: u8 = 0x1f;
