//! IPv4 header as RoCEv2 uses it: 20 bytes, no options, never fragmented (DF set on send),
//! protocol UDP. The IB traffic class becomes the TOS byte (DSCP in the upper six bits, ECN in
//! the lower two) and the hop limit becomes the TTL, as the RoCEv2 annex maps them.

use super::checksum;
use super::error::{array, Result, WireError};

pub const IPV4_HDR_LEN: usize = 20;
pub const PROTO_UDP: u8 = 17;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Header {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    /// The TOS byte: DSCP << 2 | ECN (the IB traffic class).
    pub traffic_class: u8,
    /// TTL (the IB hop limit).
    pub ttl: u8,
    pub identification: u16,
}

impl Ipv4Header {
    /// Append the header for an IP packet of `total_len` bytes, with its checksum.
    pub fn write(&self, total_len: u16, out: &mut Vec<u8>) {
        let mut h = [0u8; IPV4_HDR_LEN];
        h[0] = 0x45;
        h[1] = self.traffic_class;
        h[2..4].copy_from_slice(&total_len.to_be_bytes());
        h[4..6].copy_from_slice(&self.identification.to_be_bytes());
        // DF: RoCE packets must not be fragmented (the ICRC and PSN logic assume whole packets).
        h[6..8].copy_from_slice(&FLAG_DF.to_be_bytes());
        h[8] = self.ttl;
        h[9] = PROTO_UDP;
        h[12..16].copy_from_slice(&self.src);
        h[16..20].copy_from_slice(&self.dst);
        let c = checksum::finish(checksum::add(0, &h));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        out.extend_from_slice(&h);
    }

    /// Parse and check the header at the start of `ip`; returns it and the total length,
    /// which is checked to fit in `ip` (bytes beyond it are Ethernet padding).
    pub fn parse(ip: &[u8]) -> Result<(Self, usize)> {
        let h = array::<IPV4_HDR_LEN>(ip, 0, "IPv4 header")?;
        if h[0] >> 4 != 4 {
            return Err(WireError::Ipv4("version is not 4"));
        }
        if h[0] & 0x0f != 5 {
            return Err(WireError::Ipv4("options are not supported"));
        }
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        if total < IPV4_HDR_LEN {
            return Err(WireError::Ipv4("total length shorter than the header"));
        }
        if total > ip.len() {
            return Err(WireError::Truncated {
                what: "IPv4 packet",
                need: total,
                have: ip.len(),
            });
        }
        let frag = u16::from_be_bytes([h[6], h[7]]);
        if frag & FLAG_MF != 0 || frag & 0x1fff != 0 {
            return Err(WireError::Ipv4("fragments are not supported"));
        }
        // A correct header sums to 0xffff including its checksum, so finish() gives 0.
        if checksum::finish(checksum::add(0, &h)) != 0 {
            return Err(WireError::Ipv4Checksum);
        }
        if h[9] != PROTO_UDP {
            return Err(WireError::NotUdp(h[9]));
        }
        let hdr = Ipv4Header {
            src: [h[12], h[13], h[14], h[15]],
            dst: [h[16], h[17], h[18], h[19]],
            traffic_class: h[1],
            ttl: h[8],
            identification: u16::from_be_bytes([h[4], h[5]]),
        };
        Ok((hdr, total))
    }
}
