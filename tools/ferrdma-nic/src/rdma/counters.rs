//! The port's RoCEv2 counters (QUERY_COUNTERS, manual "Port counters"): what crossed the
//! port, per IP version and operation, and what went wrong on the way (retransmissions,
//! timeouts, NAKs, sequence errors, bad frames). Counted where frames enter and leave the
//! engine and where the transport decides; traffic between QPs of this function never
//! becomes a frame and is not counted.

use crate::interface::PortCounters;
use crate::wire::{opcode as op, IpHeader, WireError};

use super::Engine;

/// Ethernet header bytes before the IP header: 14, plus 4 with a VLAN tag.
fn l2_len(vlan: bool) -> usize {
    if vlan {
        18
    } else {
        14
    }
}

/// What the opcode of a request's first or only packet starts, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Send,
    Write,
    Read,
}

fn request_kind(opcode: u8) -> Option<Request> {
    match opcode {
        op::RC_SEND_FIRST
        | op::RC_SEND_ONLY
        | op::RC_SEND_ONLY_IMM
        | op::RC_SEND_ONLY_INV
        | op::UD_SEND_ONLY
        | op::UD_SEND_ONLY_IMM => Some(Request::Send),
        op::RC_WRITE_FIRST | op::RC_WRITE_ONLY | op::RC_WRITE_ONLY_IMM => Some(Request::Write),
        op::RC_READ_REQUEST => Some(Request::Read),
        _ => None,
    }
}

impl Engine {
    /// The counters as QUERY_COUNTERS reports them.
    pub fn counters(&self) -> &PortCounters {
        &self.counters
    }

    /// A frame of `len` bytes (with a VLAN tag if `vlan`) carrying `opcode` left for the
    /// fabric.
    pub(super) fn count_tx(&mut self, ipv4: bool, vlan: bool, len: usize, opcode: u8) {
        let c = &mut self.counters;
        let octets = len.saturating_sub(l2_len(vlan)) as u64;
        if ipv4 {
            c.ip4_tx_pkts += 1;
            c.ip4_tx_octets += octets;
        } else {
            c.ip6_tx_pkts += 1;
            c.ip6_tx_octets += octets;
        }
        c.tx_udp += 1;
        match request_kind(opcode) {
            Some(Request::Send) => c.tx_sends += 1,
            Some(Request::Write) => c.tx_writes += 1,
            Some(Request::Read) => c.tx_reads += 1,
            None => {}
        }
    }

    /// A valid frame of `len` bytes arrived; returns whether it is IPv4 (for
    /// [`Engine::count_rx_discard`]).
    pub(super) fn count_rx(&mut self, ip: &IpHeader, vlan: bool, len: usize, opcode: u8) -> bool {
        let c = &mut self.counters;
        let octets = len.saturating_sub(l2_len(vlan)) as u64;
        let (ipv4, tclass) = match ip {
            IpHeader::V4(h) => (true, h.traffic_class),
            IpHeader::V6(h) => (false, h.traffic_class),
        };
        if ipv4 {
            c.ip4_rx_pkts += 1;
            c.ip4_rx_octets += octets;
        } else {
            c.ip6_rx_pkts += 1;
            c.ip6_rx_octets += octets;
        }
        c.rx_udp += 1;
        // ECN codepoint 11: Congestion Experienced.
        if tclass & 3 == 3 {
            c.ecn_marked += 1;
        }
        match request_kind(opcode) {
            Some(Request::Send) => c.rx_sends += 1,
            Some(Request::Write) => c.rx_writes += 1,
            Some(Request::Read) => c.rx_reads += 1,
            None => {}
        }

        ipv4
    }

    /// A valid frame was dropped (no such QP, wrong state or Q_Key, nowhere to put it).
    pub(super) fn count_rx_discard(&mut self, ipv4: bool) {
        if ipv4 {
            self.counters.ip4_rx_discards += 1;
        } else {
            self.counters.ip6_rx_discards += 1;
        }
    }

    /// A frame failed to parse.
    pub(super) fn count_rx_error(&mut self, e: &WireError) {
        match e {
            WireError::Icrc { .. } => self.counters.icrc_errors += 1,
            _ => self.counters.header_errors += 1,
        }
    }

    pub(super) fn count_rnr_nak_sent(&mut self) {
        self.counters.rnr_naks_sent += 1;
    }

    pub(super) fn count_rnr_nak_rcvd(&mut self) {
        self.counters.rnr_naks_rcvd += 1;
    }

    pub(super) fn count_seq_nak_rcvd(&mut self) {
        self.counters.seq_naks_rcvd += 1;
    }

    pub(super) fn count_out_of_sequence(&mut self) {
        self.counters.out_of_sequence += 1;
    }

    pub(super) fn count_duplicate(&mut self) {
        self.counters.duplicate_requests += 1;
    }

    pub(super) fn count_retransmit(&mut self) {
        self.counters.retransmits += 1;
    }

    pub(super) fn count_ack_timeout(&mut self) {
        self.counters.local_ack_timeouts += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_their_first_packet() {
        assert_eq!(request_kind(op::RC_SEND_FIRST), Some(Request::Send));
        assert_eq!(request_kind(op::RC_SEND_MIDDLE), None);
        assert_eq!(request_kind(op::RC_SEND_LAST_IMM), None);
        assert_eq!(request_kind(op::UD_SEND_ONLY_IMM), Some(Request::Send));
        assert_eq!(request_kind(op::RC_WRITE_ONLY_IMM), Some(Request::Write));
        assert_eq!(request_kind(op::RC_WRITE_LAST), None);
        assert_eq!(request_kind(op::RC_READ_REQUEST), Some(Request::Read));
        assert_eq!(request_kind(op::RC_READ_RESPONSE_ONLY), None);
        assert_eq!(request_kind(op::RC_ACK), None);
    }

    #[test]
    fn octets_are_ip_octets() {
        let mut e = Engine::new();
        e.count_tx(true, false, 14 + 100, op::RC_ACK);
        e.count_tx(false, true, 18 + 200, op::RC_WRITE_ONLY);
        let c = e.counters();
        assert_eq!((c.ip4_tx_pkts, c.ip4_tx_octets), (1, 100));
        assert_eq!((c.ip6_tx_pkts, c.ip6_tx_octets), (1, 200));
        assert_eq!((c.tx_udp, c.tx_writes, c.tx_sends), (2, 1, 0));
    }
}
