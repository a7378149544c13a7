//! ECN (RFC 3168) on a whole Ethernet frame, for the fabric's switch: read the codepoint of an
//! IPv4 or IPv6 packet (at most one 802.1Q tag) and mark it Congestion Experienced.
//!
//! Marking changes the low two bits of the IPv4 TOS or IPv6 traffic class and, for IPv4, the
//! header checksum (RFC 1624 incremental update). RoCEv2's ICRC masks both fields, so a marked
//! packet keeps a valid ICRC, as through a real switch. Like every parser here, these take the
//! frame as hostile: a frame too short or not IP is left alone and reported as such.

use super::eth::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN};

/// The two ECN bits of an IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    /// 00: the sender does not do ECN; a congested switch drops instead of marking.
    NotEct,
    /// 01.
    Ect1,
    /// 10: what RoCEv2 senders with congestion control set.
    Ect0,
    /// 11: Congestion Experienced, set by a switch.
    Ce,
}

impl Ecn {
    /// The codepoint of the low two bits of `tos`.
    pub fn from_bits(tos: u8) -> Self {
        match tos & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two bits.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// Whether a switch may mark it (ECT(0) or ECT(1)).
    pub fn is_capable(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }
}

/// Where the IP header starts and whether it is IPv4, if the frame carries IPv4 or IPv6.
fn ip_start(frame: &[u8]) -> Option<(usize, bool)> {
    let be16 = |at: usize| -> Option<u16> {
        let b = frame.get(at..at + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    };
    let (ethertype, l3) = match be16(12)? {
        ETHERTYPE_VLAN => (be16(16)?, 18),
        t => (t, 14),
    };
    match ethertype {
        // The whole header must be there: the checksum update reads it.
        ETHERTYPE_IPV4 if frame.len() >= l3 + 20 && frame[l3] >> 4 == 4 => Some((l3, true)),
        ETHERTYPE_IPV6 if frame.len() >= l3 + 40 && frame[l3] >> 4 == 6 => Some((l3, false)),
        _ => None,
    }
}

/// The ECN codepoint of the frame's IP header, `None` if it is not IPv4 or IPv6.
pub fn ecn(frame: &[u8]) -> Option<Ecn> {
    let (l3, v4) = ip_start(frame)?;
    let tos = if v4 {
        frame[l3 + 1]
    } else {
        // Traffic class: the low nibble of byte 0 and the high nibble of byte 1.
        (frame[l3] << 4) | (frame[l3 + 1] >> 4)
    };
    Some(Ecn::from_bits(tos))
}

/// Marks the frame CE if it is ECN-capable; returns whether it did. A frame already CE, not
/// ECN-capable or not IP is left as it is.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Some(e) = ecn(frame) else { return false };
    if !e.is_capable() {
        return false;
    }
    let Some((l3, v4)) = ip_start(frame) else {
        return false;
    };
    if v4 {
        // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m the 16-bit word holding the TOS.
        let old = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
        frame[l3 + 1] |= 3;
        let new = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
        let hc = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
        let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        frame[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    } else {
        // The ECN bits are bits 4..5 of the traffic class: bits 4 and 5 of byte 1.
        frame[l3 + 1] |= 0x30;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::eth::Vlan;
    use crate::wire::tests::unhex;
    use crate::wire::{build, parse, IpHeader};

    const V4: &str = include_str!("../../tests/data/roce-cnp-connectx4lx.hex");
    const V6: &str = include_str!("../../tests/data/roce-rc-send-only-ipv6-scapy.hex");

    /// A golden RoCEv2 frame rebuilt with traffic class `tclass` (and an 802.1Q tag).
    fn frame(v6: bool, tclass: u8, vlan: bool) -> Vec<u8> {
        let golden = unhex(if v6 { V6 } else { V4 });
        let p = parse(&golden).unwrap();
        let mut h = p.headers;
        match &mut h.ip {
            IpHeader::V4(ip) => ip.traffic_class = tclass,
            IpHeader::V6(ip) => ip.traffic_class = tclass,
        }
        if vlan {
            h.eth.vlan = Some(Vlan {
                pcp: 3,
                dei: false,
                vid: 7,
            });
        }
        build(&h, p.payload).unwrap()
    }

    #[test]
    fn marking_ect_gives_ce_and_a_frame_that_still_parses() {
        for v6 in [false, true] {
            for vlan in [false, true] {
                for ect in [Ecn::Ect0, Ecn::Ect1] {
                    let tclass = (46 << 2) | ect.bits();
                    let mut f = frame(v6, tclass, vlan);
                    assert_eq!(ecn(&f), Some(ect));
                    assert!(mark_ce(&mut f));
                    assert_eq!(ecn(&f), Some(Ecn::Ce));
                    // The IPv4 checksum and the ICRC hold; the DSCP is untouched.
                    let p = parse(&f).unwrap_or_else(|e| panic!("v6 {v6} vlan {vlan}: {e}"));
                    let tc = match p.headers.ip {
                        IpHeader::V4(ip) => ip.traffic_class,
                        IpHeader::V6(ip) => ip.traffic_class,
                    };
                    assert_eq!(tc, (46 << 2) | 3);
                    assert!(!mark_ce(&mut f), "already CE");
                }
            }
        }
    }

    #[test]
    fn not_ect_and_not_ip_are_left_alone() {
        let mut f = frame(false, 46 << 2, false);
        let before = f.clone();
        assert_eq!(ecn(&f), Some(Ecn::NotEct));
        assert!(!mark_ce(&mut f));
        assert_eq!(f, before);
        let mut arp = vec![0xffu8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        assert_eq!(ecn(&arp), None);
        assert!(!mark_ce(&mut arp));
        for n in 0..f.len().min(34) {
            let mut short = f[..n].to_vec();
            assert!(!mark_ce(&mut short), "{n} bytes");
        }
    }

    #[test]
    fn incremental_checksum_matches_a_full_recompute() {
        for tos in 0u8..=255 {
            if !Ecn::from_bits(tos).is_capable() {
                continue;
            }
            let mut f = frame(false, tos, false);
            mark_ce(&mut f);
            let ip = &f[14..34];
            let sum = crate::wire::checksum::add(0, ip);
            assert_eq!(crate::wire::checksum::finish(sum), 0, "TOS {tos:#x}");
        }
    }
}
