//! Ethernet flow control frames: IEEE 802.1Qbb priority-based flow control (PFC) and the
//! 802.3x PAUSE it extends, both MAC control frames (EtherType 0x8808) to the reserved
//! multicast address 01-80-C2-00-00-01 that a switch sends out of a congested ingress port and
//! the station on the other end obeys: it stops transmitting frames of the paused priorities
//! for the given time. A pause time is in quanta of 512 bit times at the link's rate; a PFC
//! frame with time 0 resumes a priority at once (XON).
//!
//! Which priority a frame travels in: its 802.1Q tag's PCP if tagged, else its IP DSCP's
//! upper three bits (the DSCP-trust mapping of RoCE NICs and switches without VLANs: RoCE's
//! DSCP 26 is priority 3, the CNP's DSCP 48 priority 6); anything else (ARP) priority 0.

use super::eth::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN};

/// EtherType of MAC control frames.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// Opcode of an 802.3x PAUSE (one time for all traffic).
pub const OPCODE_PAUSE: u16 = 0x0001;
/// Opcode of an 802.1Qbb PFC frame (a time per priority).
pub const OPCODE_PFC: u16 = 0x0101;
/// The destination of flow control frames (never forwarded by a bridge).
pub const PAUSE_DST: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];
/// Length of a PFC frame without the FCS: the 60-byte Ethernet minimum.
pub const FRAME_LEN: usize = 60;
/// Bit times in one pause quantum.
pub const QUANTUM_BITS: u64 = 512;

/// A PFC frame: the priorities it speaks for and the pause time of each, in quanta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pfc {
    pub src: [u8; 6],
    /// Bit p set: `quanta[p]` applies to priority p; others are left as they are.
    pub enable: u8,
    pub quanta: [u16; 8],
}

impl Pfc {
    /// A frame that pauses (or, with `quanta` 0, resumes) the priorities in `enable`.
    pub fn new(src: [u8; 6], enable: u8, quanta: u16) -> Self {
        let mut q = [0u16; 8];
        for (p, v) in q.iter_mut().enumerate() {
            if enable & (1 << p) != 0 {
                *v = quanta;
            }
        }
        Pfc {
            src,
            enable,
            quanta: q,
        }
    }

    /// The frame's bytes (60, zero padded).
    pub fn build(&self) -> Vec<u8> {
        let mut f = vec![0u8; FRAME_LEN];
        f[0..6].copy_from_slice(&PAUSE_DST);
        f[6..12].copy_from_slice(&self.src);
        f[12..14].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
        f[14..16].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        f[16..18].copy_from_slice(&u16::from(self.enable).to_be_bytes());
        for (p, q) in self.quanta.iter().enumerate() {
            f[18 + 2 * p..20 + 2 * p].copy_from_slice(&q.to_be_bytes());
        }
        f
    }

    /// Reads a PFC frame, or an 802.3x PAUSE as one that speaks for every priority; `None`
    /// for anything else (not MAC control, another opcode, too short). Bits of the class
    /// enable vector above 7 are reserved and ignored.
    pub fn parse(frame: &[u8]) -> Option<Self> {
        let be16 = |at: usize| -> Option<u16> {
            let b = frame.get(at..at + 2)?;
            Some(u16::from_be_bytes([b[0], b[1]]))
        };
        if be16(12)? != ETHERTYPE_MAC_CONTROL {
            return None;
        }
        let mut src = [0u8; 6];
        src.copy_from_slice(frame.get(6..12)?);
        match be16(14)? {
            OPCODE_PAUSE => Some(Pfc::new(src, 0xff, be16(16)?)),
            OPCODE_PFC => {
                let enable = (be16(16)? & 0xff) as u8;
                let mut quanta = [0u16; 8];
                for (p, q) in quanta.iter_mut().enumerate() {
                    *q = be16(18 + 2 * p)?;
                }
                Some(Pfc {
                    src,
                    enable,
                    quanta,
                })
            }
            _ => None,
        }
    }
}

/// Nanoseconds `quanta` pause quanta last at `rate_bps` (rounded up).
pub fn quanta_ns(quanta: u16, rate_bps: u64) -> u64 {
    let bits = u128::from(quanta) * u128::from(QUANTUM_BITS) * 1_000_000_000;
    let rate = u128::from(rate_bps.max(1));
    // At most 65535 * 512 * 1e9 / 1: fits u64.
    bits.div_ceil(rate) as u64
}

/// Whether the frame is a MAC control frame (PFC, PAUSE or another opcode): a link layer
/// frame that a bridge consumes and never forwards.
pub fn is_mac_control(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&ETHERTYPE_MAC_CONTROL.to_be_bytes())
}

/// The priority (0..=7) the frame travels in: the PCP of its 802.1Q tag, else its IPv4 or
/// IPv6 DSCP >> 3, else 0.
pub fn priority(frame: &[u8]) -> u8 {
    let be16 = |at: usize| -> Option<u16> {
        let b = frame.get(at..at + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    };
    match be16(12) {
        Some(ETHERTYPE_VLAN) => frame.get(14).map_or(0, |b| b >> 5),
        Some(ETHERTYPE_IPV4) => frame.get(15).map_or(0, |tos| tos >> 5),
        Some(ETHERTYPE_IPV6) => match (frame.get(14), frame.get(15)) {
            // The traffic class spans the low nibble of byte 14 and the high one of 15; its
            // top three bits are the low three of byte 14's nibble.
            (Some(b0), Some(_)) => (b0 & 0x0f) >> 1,
            _ => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xfe, 0x10, 0x01];

    #[test]
    fn a_pfc_frame_is_built_as_802_1qbb_says_and_parses_back() {
        let p = Pfc::new(MAC, 1 << 3, 0xffff);
        let f = p.build();
        assert_eq!(f.len(), 60);
        assert_eq!(&f[0..6], &PAUSE_DST);
        assert_eq!(&f[6..12], &MAC);
        assert_eq!(&f[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
        // Priority 3's time is the fourth of eight.
        assert_eq!(
            &f[18..34],
            &[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert!(f[34..].iter().all(|&b| b == 0));
        assert_eq!(Pfc::parse(&f), Some(p));
        assert!(is_mac_control(&f));
        let resume = Pfc::new(MAC, 0b1000_1000, 0);
        assert_eq!(Pfc::parse(&resume.build()), Some(resume));
    }

    #[test]
    fn an_802_3x_pause_speaks_for_every_priority() {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&PAUSE_DST);
        f[6..12].copy_from_slice(&MAC);
        f[12..18].copy_from_slice(&[0x88, 0x08, 0x00, 0x01, 0x12, 0x34]);
        let p = Pfc::parse(&f).unwrap();
        assert_eq!((p.enable, p.quanta), (0xff, [0x1234; 8]));
    }

    #[test]
    fn hostile_frames_are_not_flow_control() {
        let good = Pfc::new(MAC, 0xff, 7).build();
        // Every truncation that loses a field, another opcode, another EtherType.
        for n in 0..34 {
            assert_eq!(Pfc::parse(&good[..n]), None, "{n} bytes");
        }
        let mut other = good.clone();
        other[15] = 0x02;
        assert_eq!(Pfc::parse(&other), None);
        let mut ip = good.clone();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(Pfc::parse(&ip), None);
        assert!(!is_mac_control(&ip) && !is_mac_control(&[]));
        // Reserved enable bits are ignored, not an error.
        let mut reserved = good;
        reserved[16] = 0xff;
        assert_eq!(Pfc::parse(&reserved).map(|p| p.enable), Some(0xff));
    }

    #[test]
    fn quanta_are_512_bit_times() {
        // 10 Gb/s: 51.2 ns a quantum.
        assert_eq!(quanta_ns(1, 10_000_000_000), 52);
        assert_eq!(quanta_ns(10, 10_000_000_000), 512);
        assert_eq!(quanta_ns(0xffff, 10_000_000_000), 3_355_392);
        assert_eq!(quanta_ns(0, 10_000_000_000), 0);
        assert_eq!(quanta_ns(0xffff, 0), 65535 * 512 * 1_000_000_000);
    }

    #[test]
    fn priorities_come_from_the_pcp_or_the_dscp() {
        let mut v4 = vec![0u8; 34];
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4[15] = (26 << 2) | 2;
        assert_eq!(priority(&v4), 3);
        v4[15] = 48 << 2;
        assert_eq!(priority(&v4), 6);
        let mut v6 = vec![0u8; 54];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        // Version 6, traffic class DSCP 26 ECT(0): 0x6a, 0x60...
        let tc: u8 = (26 << 2) | 2;
        v6[14] = 0x60 | (tc >> 4);
        v6[15] = (tc & 0x0f) << 4;
        assert_eq!(priority(&v6), 3);
        let mut tagged = vec![0u8; 18];
        tagged[12..14].copy_from_slice(&[0x81, 0x00]);
        tagged[14] = 5 << 5;
        assert_eq!(priority(&tagged), 5);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(priority(&arp), 0);
        for n in 0..16 {
            assert!(priority(&v4[..n]) < 8);
        }
    }
}
