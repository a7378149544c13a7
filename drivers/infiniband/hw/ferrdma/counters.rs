// SPDX-License-Identifier: GPL-2.0

//! The port's hardware counters (`rdma statistic`, sysfs `ports/1/hw_counters`): the device's
//! QUERY_COUNTERS under irdma's names where irdma has the counter.

use crate::interface::PortCounters;
use kernel::{c_str, infiniband::StatDesc, prelude::*};

/// Reads one counter.
type Field = fn(&PortCounters) -> u64;

/// Number of counters.
const N: usize = 32;

/// Every counter: its name and where it is. irdma's names where irdma counts the same thing
/// (its GEN_2 IP, UDP, RDMA-operation, ECN and CNP counters, and its GEN_3 RNR, NAK, RTO,
/// out-of-order and CRC ones); mlx5's `duplicate_request` and our `RetransPkts`, `HdrErrors`
/// and `RxPauseFrames` (PFC and PAUSE frames obeyed; an E810 counts those in its netdev's
/// statistics, which ferrdma's port has none of) where it has none.
const TABLE: [(&CStr, Field); N] = [
    (c_str!("ip4InPkts"), |c| c.ip4_rx_pkts),
    (c_str!("ip4InOctets"), |c| c.ip4_rx_octets),
    (c_str!("ip4OutPkts"), |c| c.ip4_tx_pkts),
    (c_str!("ip4OutOctets"), |c| c.ip4_tx_octets),
    (c_str!("ip6InPkts"), |c| c.ip6_rx_pkts),
    (c_str!("ip6InOctets"), |c| c.ip6_rx_octets),
    (c_str!("ip6OutPkts"), |c| c.ip6_tx_pkts),
    (c_str!("ip6OutOctets"), |c| c.ip6_tx_octets),
    (c_str!("ip4InDiscards"), |c| c.ip4_rx_discards),
    (c_str!("ip6InDiscards"), |c| c.ip6_rx_discards),
    (c_str!("RxUDP"), |c| c.rx_udp),
    (c_str!("TxUDP"), |c| c.tx_udp),
    (c_str!("InRdmaSends"), |c| c.rx_sends),
    (c_str!("InRdmaWrites"), |c| c.rx_writes),
    (c_str!("InRdmaReads"), |c| c.rx_reads),
    (c_str!("OutRdmaSends"), |c| c.tx_sends),
    (c_str!("OutRdmaWrites"), |c| c.tx_writes),
    (c_str!("OutRdmaReads"), |c| c.tx_reads),
    (c_str!("RNR sent"), |c| c.rnr_naks_sent),
    (c_str!("RNR received"), |c| c.rnr_naks_rcvd),
    (c_str!("Nak Sequence Error"), |c| c.seq_naks_rcvd),
    (c_str!("Rcvd Out of order packets"), |c| c.out_of_sequence),
    (c_str!("duplicate_request"), |c| c.duplicate_requests),
    (c_str!("RetransPkts"), |c| c.retransmits),
    (c_str!("RTO"), |c| c.local_ack_timeouts),
    (c_str!("CRC errors"), |c| c.icrc_errors),
    (c_str!("HdrErrors"), |c| c.header_errors),
    (c_str!("RxECNMrkd"), |c| c.ecn_marked),
    (c_str!("cnpSent"), |c| c.cnps_sent),
    (c_str!("cnpHandled"), |c| c.cnps_handled),
    (c_str!("cnpIgnored"), |c| c.cnps_ignored),
    (c_str!("RxPauseFrames"), |c| c.pfc_frames_rx),
];

const fn descs() -> [StatDesc; N] {
    const NONE: StatDesc = StatDesc::new(c_str!(""));
    let mut d = [NONE; N];
    let mut i = 0;
    while i < N {
        d[i] = StatDesc::new(TABLE[i].0);
        i += 1;
    }
    d
}

/// The counters' names, for ib_core (which keeps the pointer while the device lives).
pub(crate) static PORT_COUNTERS: [StatDesc; N] = descs();

/// Fills `out` (one value per [`PORT_COUNTERS`] entry) from the device's counters;
/// `EINVAL` if it has another length.
pub(crate) fn values(c: &PortCounters, out: &mut [u64]) -> Result {
    if out.len() != N {
        return Err(EINVAL);
    }
    for (o, (_, f)) in out.iter_mut().zip(TABLE.iter()) {
        *o = f(c);
    }
    Ok(())
}

#[kunit_tests(ferrdma_counters)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_a_name_of_its_own() {
        for (i, (a, _)) in TABLE.iter().enumerate() {
            assert!(!a.is_empty());
            for (b, _) in TABLE.iter().skip(i + 1) {
                assert_ne!(a.to_bytes(), b.to_bytes());
            }
        }
    }

    #[test]
    fn every_device_counter_is_reported_once() {
        // Counter k (in interface order) holds k + 1.
        let mut b = [0u8; PortCounters::SIZE];
        for (k, q) in b.chunks_mut(8).enumerate() {
            q.copy_from_slice(&(k as u64 + 1).to_le_bytes());
        }
        let c = PortCounters::decode(&b);
        let mut v = [0u64; N];
        assert!(values(&c, &mut v).is_ok());
        let mut seen = [false; N];
        for x in v {
            assert!((1..=N as u64).contains(&x));
            assert!(!seen[x as usize - 1]);
            seen[x as usize - 1] = true;
        }
        assert_eq!(values(&c, &mut [0u64; 3]), Err(EINVAL));
    }
}
