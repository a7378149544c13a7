//! A learning L2 switch, pure logic: the caller hands it a frame, its ingress port and a
//! logical clock, and gets back the ports to send the frame to. No I/O, no real time, so
//! every rule is unit-testable.
//!
//! Rules:
//! * Source MACs are learned on the ingress port (unicast sources only), and forgotten
//!   `aging` ticks after they were last seen. The table is bounded: when full, new MACs are
//!   not learned (their frames are still forwarded, by flooding).
//! * Known unicast goes to the learned port; unknown unicast, broadcast and multicast are
//!   flooded. A frame never goes back out of its ingress port.
//! * RoCE steering: a port registered as the RoCE engine of MAC M receives the frames to M
//!   that are UDP to port 4791 (IPv4 or IPv6, optionally 802.1Q-tagged). Every other frame
//!   to M goes where M was learned, i.e. the VM's virtio-net that shares the NIC's MAC.
//!   Engine ports are never learned from (the engine sends with source M too, and learning
//!   that would pull M's LAN traffic into the engine), and flooding skips them: an engine
//!   only ever gets RoCE frames for its own MAC.
//! * Frames too short for their Ethernet header, or with a multicast source, are dropped and
//!   counted.

use std::collections::{BTreeSet, HashMap};

use rustc_hash::FxHashMap;

pub type PortId = usize;
pub type Mac = [u8; 6];

/// The RoCEv2 UDP destination port.
pub const ROCE_UDP_PORT: u16 = 4791;
/// Default MAC table capacity; hostile sources cannot grow memory past it.
pub const DEFAULT_TABLE_MAX: usize = 4096;

const ETH_HDR: usize = 14;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_UDP: u8 = 17;

/// What the switch counted. Each received frame lands in exactly one of `forwarded`,
/// `flooded` or one of the `dropped_*` counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    pub forwarded: u64,
    pub flooded: u64,
    /// Of `forwarded`: frames steered to a RoCE engine port.
    pub to_engine: u64,
    pub dropped_short: u64,
    pub dropped_bad_source: u64,
    pub dropped_unknown_port: u64,
    /// Frames whose only destination was their ingress port.
    pub dropped_same_port: u64,
    /// Frames to an IEEE 802.1D reserved link-local address (01-80-C2-00-00-00 to -0F:
    /// PAUSE and PFC, LACP, LLDP...), which a bridge consumes and never forwards: a VM's
    /// PFC frame must not pause other stations.
    pub dropped_link_local: u64,
    /// Source MACs not learned because the table was full.
    pub table_full: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    port: PortId,
    seen: u64,
}

#[derive(Debug)]
pub struct Switch {
    ports: BTreeSet<PortId>,
    /// The NICs' MACs (the host's, so FxHash); the learned table keeps SipHash, as guests
    /// choose its keys.
    engines: FxHashMap<Mac, PortId>,
    table: HashMap<Mac, Entry>,
    aging: u64,
    table_max: usize,
    counters: Counters,
}

fn is_multicast(mac: &Mac) -> bool {
    mac[0] & 1 != 0
}

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    let b = frame.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// True when the frame is UDP to port 4791 over IPv4 or IPv6, with at most one 802.1Q tag.
/// IPv6 extension headers are not walked (RoCEv2 does not use them); IPv4 non-first
/// fragments carry no UDP header and are not RoCE.
pub fn is_roce(frame: &[u8]) -> bool {
    let Some(mut ethertype) = be16(frame, 12) else {
        return false;
    };
    let mut l3 = ETH_HDR;
    if ethertype == ETHERTYPE_VLAN {
        let Some(t) = be16(frame, 16) else {
            return false;
        };
        ethertype = t;
        l3 = ETH_HDR + 4;
    }
    let udp = match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(&vihl) = frame.get(l3) else {
                return false;
            };
            let ihl = usize::from(vihl & 0x0f) * 4;
            let frag = be16(frame, l3 + 6).unwrap_or(0xffff) & 0x1fff;
            if vihl >> 4 != 4 || ihl < 20 || frag != 0 {
                return false;
            }
            if frame.get(l3 + 9) != Some(&IPPROTO_UDP) {
                return false;
            }
            l3 + ihl
        }
        ETHERTYPE_IPV6 => {
            if frame.get(l3).map(|b| b >> 4) != Some(6) || frame.get(l3 + 6) != Some(&IPPROTO_UDP) {
                return false;
            }
            l3 + 40
        }
        _ => return false,
    };
    be16(frame, udp + 2) == Some(ROCE_UDP_PORT)
}

impl Switch {
    /// A switch forgetting MACs `aging` ticks after they were last seen.
    pub fn new(aging: u64) -> Self {
        Self::with_table_max(aging, DEFAULT_TABLE_MAX)
    }

    pub fn with_table_max(aging: u64, table_max: usize) -> Self {
        Switch {
            ports: BTreeSet::new(),
            engines: FxHashMap::default(),
            table: HashMap::new(),
            aging,
            table_max,
            counters: Counters::default(),
        }
    }

    pub fn add_port(&mut self, port: PortId) {
        self.ports.insert(port);
    }

    /// Remove a port with everything learned on or registered for it.
    pub fn remove_port(&mut self, port: PortId) {
        self.ports.remove(&port);
        self.table.retain(|_, e| e.port != port);
        self.engines.retain(|_, p| *p != port);
    }

    /// Make `port` the RoCE engine of `mac` (adding the port if needed).
    pub fn set_engine(&mut self, mac: Mac, port: PortId) {
        self.ports.insert(port);
        self.engines.insert(mac, port);
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The port `mac` is learned on at time `now`, if the entry has not aged out.
    pub fn lookup(&self, mac: &Mac, now: u64) -> Option<PortId> {
        self.table
            .get(mac)
            .filter(|e| now.saturating_sub(e.seen) <= self.aging)
            .map(|e| e.port)
    }

    /// Drop aged-out entries (lookups already ignore them; this frees the room).
    pub fn expire(&mut self, now: u64) {
        let aging = self.aging;
        self.table
            .retain(|_, e| now.saturating_sub(e.seen) <= aging);
    }

    fn is_engine_port(&self, port: PortId) -> bool {
        self.engines.values().any(|p| *p == port)
    }

    fn learn(&mut self, src: Mac, port: PortId, now: u64) {
        if self.is_engine_port(port) {
            return;
        }
        if !self.table.contains_key(&src) && self.table.len() >= self.table_max {
            self.expire(now);
            if self.table.len() >= self.table_max {
                self.counters.table_full += 1;
                return;
            }
        }
        self.table.insert(src, Entry { port, seen: now });
    }

    /// Decide where `frame`, received on `ingress` at logical time `now`, goes. `out` is
    /// cleared and filled with the egress ports (empty: dropped).
    pub fn forward(&mut self, ingress: PortId, frame: &[u8], now: u64, out: &mut Vec<PortId>) {
        out.clear();
        if !self.ports.contains(&ingress) {
            self.counters.dropped_unknown_port += 1;
            return;
        }
        let hdr = match be16(frame, 12) {
            Some(ETHERTYPE_VLAN) => ETH_HDR + 4,
            Some(_) => ETH_HDR,
            None => 0,
        };
        if hdr == 0 || frame.len() < hdr {
            self.counters.dropped_short += 1;
            return;
        }
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        if is_multicast(&src) {
            self.counters.dropped_bad_source += 1;
            return;
        }
        if dst[..5] == [0x01, 0x80, 0xc2, 0x00, 0x00] && dst[5] <= 0x0f {
            self.counters.dropped_link_local += 1;
            return;
        }
        self.learn(src, ingress, now);

        let roce = is_roce(frame);
        if !is_multicast(&dst) {
            if roce {
                if let Some(&engine) = self.engines.get(&dst) {
                    if engine == ingress {
                        self.counters.dropped_same_port += 1;
                    } else {
                        out.push(engine);
                        self.counters.forwarded += 1;
                        self.counters.to_engine += 1;
                    }
                    return;
                }
            }
            if let Some(port) = self.lookup(&dst, now) {
                if port == ingress {
                    self.counters.dropped_same_port += 1;
                } else {
                    out.push(port);
                    self.counters.forwarded += 1;
                }
                return;
            }
        }
        if roce && is_multicast(&dst) {
            // Multicast RoCE goes to every RoCE station: every engine, and every LAN port
            // that is not an engine's twin (a soft-RoCE host hears RoCE on its LAN port; a
            // NIC's VM hears it through its engine only, as with unicast).
            let twins: BTreeSet<PortId> = self
                .engines
                .keys()
                .filter_map(|m| self.lookup(m, now))
                .collect();
            for &p in &self.ports {
                if p != ingress && (self.is_engine_port(p) || !twins.contains(&p)) {
                    out.push(p);
                }
            }
            if out.is_empty() {
                self.counters.dropped_same_port += 1;
            } else {
                self.counters.flooded += 1;
            }
            return;
        }
        // Flood to every other non-engine port.
        for &p in &self.ports {
            if p != ingress && !self.engines.values().any(|e| *e == p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            self.counters.dropped_same_port += 1;
        } else {
            self.counters.flooded += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testframes::{plain, roce};
    use super::*;

    const A: Mac = [0x52, 0x54, 0, 0, 0, 0xa];
    const B: Mac = [0x52, 0x54, 0, 0, 0, 0xb];
    const C: Mac = [0x52, 0x54, 0, 0, 0, 0xc];
    const BCAST: Mac = [0xff; 6];

    fn fwd(sw: &mut Switch, ingress: PortId, frame: &[u8], now: u64) -> Vec<PortId> {
        let mut out = Vec::new();
        sw.forward(ingress, frame, now, &mut out);
        out
    }

    fn switch(ports: &[PortId]) -> Switch {
        let mut sw = Switch::new(100);
        ports.iter().for_each(|p| sw.add_port(*p));
        sw
    }

    #[test]
    fn floods_unknown_then_forwards_learned() {
        let mut sw = switch(&[1, 2, 3]);
        assert_eq!(fwd(&mut sw, 1, &plain(B, A), 0), vec![2, 3]);
        assert_eq!(fwd(&mut sw, 2, &plain(A, B), 1), vec![1]);
        assert_eq!(fwd(&mut sw, 1, &plain(B, A), 2), vec![2]);
        let c = sw.counters();
        assert_eq!((c.flooded, c.forwarded), (1, 2));
    }

    #[test]
    fn broadcast_and_multicast_flood_but_not_back() {
        let mut sw = switch(&[1, 2, 3]);
        assert_eq!(fwd(&mut sw, 2, &plain(BCAST, A), 0), vec![1, 3]);
        let mcast = [0x01, 0x00, 0x5e, 0, 0, 1];
        assert_eq!(fwd(&mut sw, 3, &plain(mcast, B), 0), vec![1, 2]);
        // Only one port: nothing to flood to.
        let mut lone = switch(&[1]);
        assert!(fwd(&mut lone, 1, &plain(BCAST, A), 0).is_empty());
    }

    #[test]
    fn multicast_roce_reaches_every_engine_and_soft_roce_hosts_but_no_engine_twin() {
        // Ports: 1 = VM A's virtio-net, 2 = A's engine, 3 = VM B's engine (B's LAN side
        // not learned yet), 4 = a soft-RoCE VM C on its LAN port.
        let mut sw = switch(&[1, 3, 4]);
        sw.set_engine(A, 2);
        sw.set_engine(B, 3);
        fwd(&mut sw, 1, &plain(BCAST, A), 0);
        let group = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];
        // From A's engine: B's engine and C, not A's own virtio-net, not back.
        assert_eq!(
            fwd(&mut sw, 2, &roce(group, A, false, false), 1),
            vec![3, 4]
        );
        // From soft-RoCE C: both engines; A's LAN twin is skipped.
        let v6group = [0x33, 0x33, 0, 0, 0, 9];
        assert_eq!(
            fwd(&mut sw, 4, &roce(v6group, C, true, true), 2),
            vec![2, 3]
        );
        // Plain (non-RoCE) multicast still floods the LAN ports only.
        assert_eq!(fwd(&mut sw, 4, &plain(group, C), 3), vec![1]);
    }

    #[test]
    fn never_back_out_the_ingress_port() {
        let mut sw = switch(&[1, 2]);
        fwd(&mut sw, 1, &plain(BCAST, A), 0);
        fwd(&mut sw, 1, &plain(BCAST, B), 0);
        assert!(fwd(&mut sw, 1, &plain(B, A), 0).is_empty());
        assert_eq!(sw.counters().dropped_same_port, 1);
    }

    #[test]
    fn entries_age_out_by_the_logical_clock() {
        let mut sw = switch(&[1, 2, 3]);
        fwd(&mut sw, 2, &plain(BCAST, B), 10);
        assert_eq!(sw.lookup(&B, 110), Some(2));
        assert_eq!(sw.lookup(&B, 111), None);
        assert_eq!(fwd(&mut sw, 1, &plain(B, A), 111), vec![2, 3]);
        sw.expire(1000);
        assert_eq!(sw.lookup(&A, 111), None);
    }

    #[test]
    fn a_moved_mac_is_relearned() {
        let mut sw = switch(&[1, 2, 3]);
        fwd(&mut sw, 2, &plain(BCAST, B), 0);
        fwd(&mut sw, 3, &plain(BCAST, B), 1);
        assert_eq!(fwd(&mut sw, 1, &plain(B, A), 2), vec![3]);
    }

    #[test]
    fn table_is_bounded() {
        let mut sw = Switch::with_table_max(100, 2);
        [1, 2].iter().for_each(|p| sw.add_port(*p));
        fwd(&mut sw, 1, &plain(BCAST, A), 0);
        fwd(&mut sw, 1, &plain(BCAST, B), 0);
        fwd(&mut sw, 1, &plain(BCAST, C), 0);
        assert_eq!(sw.lookup(&C, 0), None);
        assert_eq!(sw.counters().table_full, 1);
        // Once old entries age out there is room again.
        fwd(&mut sw, 1, &plain(BCAST, C), 500);
        assert_eq!(sw.lookup(&C, 500), Some(1));
    }

    #[test]
    fn roce_to_the_nic_mac_goes_to_its_engine_the_rest_to_the_lan() {
        // Port 1: VM A's virtio-net (MAC A); port 9: NIC A's RoCE engine; port 2: VM B.
        let mut sw = switch(&[1, 2]);
        sw.set_engine(A, 9);
        fwd(&mut sw, 1, &plain(BCAST, A), 0);
        for (v6, vlan) in [(false, false), (true, false), (false, true), (true, true)] {
            assert_eq!(
                fwd(&mut sw, 2, &roce(A, B, v6, vlan), 1),
                vec![9],
                "{v6} {vlan}"
            );
        }
        assert_eq!(fwd(&mut sw, 2, &plain(A, B), 1), vec![1]);
        assert_eq!(sw.counters().to_engine, 4);
    }

    #[test]
    fn engine_ports_are_not_learned_from_nor_flooded_to() {
        let mut sw = switch(&[1, 2]);
        sw.set_engine(A, 9);
        // The engine sends RoCE with source A before the VM has spoken.
        assert_eq!(fwd(&mut sw, 9, &roce(B, A, false, false), 0), vec![1, 2]);
        assert_eq!(sw.lookup(&A, 0), None);
        // Broadcasts do not reach the engine.
        assert_eq!(fwd(&mut sw, 2, &plain(BCAST, B), 0), vec![1]);
        // Unknown non-RoCE unicast to A floods LAN ports only.
        assert_eq!(fwd(&mut sw, 2, &plain(A, B), 0), vec![1]);
        // The engine's own RoCE to itself is not reflected.
        assert!(fwd(&mut sw, 9, &roce(A, A, false, false), 0).is_empty());
    }

    #[test]
    fn roce_to_a_mac_without_engine_is_ordinary_traffic() {
        // A plain VM running rxe: its RoCE frames go where its MAC was learned.
        let mut sw = switch(&[1, 2]);
        fwd(&mut sw, 1, &plain(BCAST, C), 0);
        assert_eq!(fwd(&mut sw, 2, &roce(C, B, false, false), 1), vec![1]);
        assert_eq!(sw.counters().to_engine, 0);
    }

    #[test]
    fn roce_classification() {
        assert!(is_roce(&roce(A, B, false, false)));
        assert!(is_roce(&roce(A, B, true, true)));
        assert!(!is_roce(&plain(A, B)));
        // Other UDP port.
        let mut f = roce(A, B, false, false);
        f[14 + 20 + 2] = 0x13;
        assert!(!is_roce(&f));
        // Non-first IPv4 fragment.
        let mut f = roce(A, B, false, false);
        f[14 + 7] = 1;
        assert!(!is_roce(&f));
        // TCP.
        let mut f = roce(A, B, false, false);
        f[14 + 9] = 6;
        assert!(!is_roce(&f));
        // Truncated anywhere: never true unless the port is there, never panics.
        let full = roce(A, B, true, true);
        for n in 0..full.len() {
            assert_eq!(is_roce(&full[..n]), n >= 18 + 40 + 4, "{n}");
        }
    }

    #[test]
    fn short_and_bad_frames_are_dropped_and_counted() {
        let mut sw = switch(&[1, 2]);
        assert!(fwd(&mut sw, 1, &[], 0).is_empty());
        assert!(fwd(&mut sw, 1, &[0xff; 13], 0).is_empty());
        let mut tagged = plain(BCAST, A);
        tagged[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        assert!(fwd(&mut sw, 1, &tagged[..17], 0).is_empty());
        assert_eq!(sw.counters().dropped_short, 3);
        assert_eq!(fwd(&mut sw, 1, &tagged[..18], 0), vec![2]);
        assert!(fwd(&mut sw, 1, &plain(B, BCAST), 0).is_empty());
        assert_eq!(sw.counters().dropped_bad_source, 1);
        assert!(fwd(&mut sw, 7, &plain(B, A), 0).is_empty());
        assert_eq!(sw.counters().dropped_unknown_port, 1);
    }

    #[test]
    fn link_local_frames_such_as_pfc_are_never_forwarded() {
        let mut sw = switch(&[1, 2, 3]);
        sw.set_engine(C, 3);
        let pfc = crate::wire::pfc::Pfc::new(A, 0xff, 0xffff).build();
        assert!(fwd(&mut sw, 1, &pfc, 0).is_empty());
        for last in [0x00, 0x0e, 0x0f] {
            let f = plain([0x01, 0x80, 0xc2, 0, 0, last], A);
            assert!(fwd(&mut sw, 1, &f, 0).is_empty(), "{last:#x}");
        }
        assert_eq!(sw.counters().dropped_link_local, 4);
        // 01-80-C2-00-00-10 and up are ordinary multicast.
        assert_eq!(
            fwd(&mut sw, 1, &plain([0x01, 0x80, 0xc2, 0, 0, 0x10], A), 0),
            vec![2]
        );
    }

    #[test]
    fn removing_a_port_forgets_it() {
        let mut sw = switch(&[1, 2, 3]);
        sw.set_engine(C, 3);
        fwd(&mut sw, 2, &plain(BCAST, B), 0);
        sw.remove_port(2);
        sw.remove_port(3);
        assert_eq!(sw.lookup(&B, 0), None);
        assert!(fwd(&mut sw, 1, &plain(B, A), 0).is_empty());
        assert!(fwd(&mut sw, 1, &roce(C, A, false, false), 0).is_empty());
    }

    proptest::proptest! {
        /// Hostile frames on arbitrary ports at arbitrary times: no panic, a frame never
        /// goes back out of its ingress port nor to a port that was never added, an engine
        /// port only ever gets RoCE frames, and every frame is counted exactly once.
        #[test]
        fn arbitrary_frames_keep_the_invariants(
            ops in proptest::collection::vec(
                (0usize..5, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
                 0u64..400, proptest::prelude::any::<bool>()),
                0..64),
        ) {
            let mut sw = Switch::with_table_max(100, 8);
            [1, 2, 3].iter().for_each(|p| sw.add_port(*p));
            sw.set_engine(A, 4);
            let mut out = Vec::new();
            let mut now = 0;
            for (n, (port, mut frame, dt, to_a)) in ops.into_iter().enumerate() {
                // Often aim at the NIC's MAC so steering is exercised.
                if to_a && frame.len() >= 6 {
                    frame[..6].copy_from_slice(&A);
                }
                now += dt;
                sw.forward(port, &frame, now, &mut out);
                proptest::prop_assert!(!out.contains(&port));
                proptest::prop_assert!(out.iter().all(|p| (1..=4).contains(p)));
                if out.contains(&4) {
                    proptest::prop_assert!(is_roce(&frame));
                }
                let c = sw.counters();
                let total = c.forwarded + c.flooded + c.dropped_short + c.dropped_bad_source
                    + c.dropped_unknown_port + c.dropped_same_port + c.dropped_link_local;
                proptest::prop_assert_eq!(total, n as u64 + 1);
            }
        }
    }
}
