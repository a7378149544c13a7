//! UDP header for RoCEv2: destination port 4791; the source port is chosen per QP path (for
//! ECMP entropy). Checksum: RoCEv2 lets senders leave it 0 (the ICRC protects the packet).
//! Over IPv6 plain UDP requires one (RFC 8200 §8.1), so this NIC computes it there, but it
//! accepts 0 too, as RFC 6935/6936 allow for tunnel protocols: Linux soft RoCE (rxe) sends
//! its IPv6 RoCEv2 packets with checksum 0 (found by tests/interop-rxe-ferrdma.sh; golden
//! frame tests/data/roce-rc-send-first-ipv6-rxe.hex). A non-zero checksum is always checked.

use super::checksum;
use super::error::{array, Result, WireError};
use super::ipv4::PROTO_UDP;

pub const UDP_HDR_LEN: usize = 8;
pub const ROCE_V2_PORT: u16 = 4791;

/// Which pseudo-header the UDP checksum covers.
pub enum Pseudo<'a> {
    V4 {
        src: &'a [u8; 4],
        dst: &'a [u8; 4],
    },
    V6 {
        src: &'a [u8; 16],
        dst: &'a [u8; 16],
    },
}

fn pseudo_sum(p: &Pseudo<'_>, udp_len: usize) -> u32 {
    match p {
        Pseudo::V4 { src, dst } => {
            let acc = checksum::add(checksum::add(0, &src[..]), &dst[..]);
            checksum::add(acc, &[0, PROTO_UDP, (udp_len >> 8) as u8, udp_len as u8])
        }
        Pseudo::V6 { src, dst } => {
            let acc = checksum::add(checksum::add(0, &src[..]), &dst[..]);
            let l = (udp_len as u32).to_be_bytes();
            checksum::add(checksum::add(acc, &l), &[0, 0, 0, PROTO_UDP])
        }
    }
}

/// The checksum to store for a whole UDP datagram (header with checksum 0 + data).
pub fn checksum_for(p: &Pseudo<'_>, datagram: &[u8]) -> u16 {
    let c = checksum::finish(checksum::add(pseudo_sum(p, datagram.len()), datagram));
    // 0 means "no checksum" on the wire, so a computed 0 is sent as its other form 0xffff.
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// Append the UDP header; the checksum is filled in later by the packet builder.
pub fn write_header(src_port: u16, udp_len: u16, out: &mut Vec<u8>) {
    out.extend_from_slice(&src_port.to_be_bytes());
    out.extend_from_slice(&ROCE_V2_PORT.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
}

/// Check the UDP header of `datagram` (exactly the IP payload); returns the source port.
/// A checksum is checked when present (non-zero), over IPv4 and IPv6 alike.
pub fn parse(datagram: &[u8], p: &Pseudo<'_>) -> Result<u16> {
    let h = array::<UDP_HDR_LEN>(datagram, 0, "UDP header")?;
    let src = u16::from_be_bytes([h[0], h[1]]);
    let dst = u16::from_be_bytes([h[2], h[3]]);
    if dst != ROCE_V2_PORT {
        return Err(WireError::NotRoce(dst));
    }
    let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    if len != datagram.len() {
        return Err(WireError::UdpLength {
            udp: len,
            ip: datagram.len(),
        });
    }
    let sum = u16::from_be_bytes([h[6], h[7]]);
    if sum != 0 && checksum::finish(checksum::add(pseudo_sum(p, len), datagram)) != 0 {
        return Err(WireError::UdpChecksum);
    }
    Ok(src)
}
