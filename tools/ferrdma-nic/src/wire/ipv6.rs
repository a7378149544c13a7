//! IPv6 header as RoCEv2 uses it: 40 bytes, next header UDP directly (no extension headers).
//! Traffic class, flow label and hop limit come straight from the IB GRH fields.

use super::error::{array, Result, WireError};
use super::ipv4::PROTO_UDP;

pub const IPV6_HDR_LEN: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Header {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
    pub hop_limit: u8,
}

impl Ipv6Header {
    /// Append the header for `payload_len` bytes after it.
    pub fn write(&self, payload_len: u16, out: &mut Vec<u8>) -> Result<()> {
        if self.flow_label > 0xf_ffff {
            return Err(WireError::Field {
                field: "ipv6.flow_label",
                value: self.flow_label.into(),
            });
        }
        let first = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&payload_len.to_be_bytes());
        out.push(PROTO_UDP);
        out.push(self.hop_limit);
        out.extend_from_slice(&self.src);
        out.extend_from_slice(&self.dst);
        Ok(())
    }

    /// Parse the header at the start of `ip`; returns it and the whole packet length (header
    /// plus payload length), checked to fit in `ip`.
    pub fn parse(ip: &[u8]) -> Result<(Self, usize)> {
        let h = array::<IPV6_HDR_LEN>(ip, 0, "IPv6 header")?;
        let first = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if first >> 28 != 6 {
            return Err(WireError::Ipv6("version is not 6"));
        }
        if h[6] != PROTO_UDP {
            return Err(WireError::NotUdp(h[6]));
        }
        let total = IPV6_HDR_LEN + usize::from(u16::from_be_bytes([h[4], h[5]]));
        if total > ip.len() {
            return Err(WireError::Truncated {
                what: "IPv6 packet",
                need: total,
                have: ip.len(),
            });
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&h[8..24]);
        dst.copy_from_slice(&h[24..40]);
        let hdr = Ipv6Header {
            src,
            dst,
            traffic_class: ((first >> 20) & 0xff) as u8,
            flow_label: first & 0xf_ffff,
            hop_limit: h[7],
        };
        Ok((hdr, total))
    }
}
