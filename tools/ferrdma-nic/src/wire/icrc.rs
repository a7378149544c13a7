//! The RoCEv2 invariant CRC (ICRC).
//!
//! Rules (InfiniBand Architecture Specification, Annex A17 "RoCEv2", which reuses the ICRC of
//! volume 1 §7.8.1 with the IP/UDP headers in place of the GRH):
//! * CRC-32 with the Ethernet polynomial, initial value all ones, final complement (the
//!   `crc32fast` crate's CRC).
//! * The CRC first runs over 8 bytes of ones standing in for the masked LRH that RoCEv2 packets
//!   do not carry.
//! * Then the IP header with the fields routers may change masked to ones — IPv4: type of
//!   service (DSCP+ECN), TTL and header checksum; IPv6: traffic class, flow label, hop limit.
//! * Then the UDP header with its checksum masked to ones.
//! * Then the BTH with its reserved byte resv8a (byte 4: FECN, BECN and six reserved bits)
//!   masked to ones.
//! * Then everything after the BTH up to, not including, the ICRC (extension headers,
//!   payload, pad bytes).
//! * The 32-bit result is appended least significant byte first.
//!
//! These are checked against a ConnectX-4 Lx capture and a scapy test vector in
//! `tests/data/` (see `wire::tests`).

use super::error::{array, take, Result, WireError};

pub const ICRC_LEN: usize = 4;
const LRH_STANDIN: [u8; 8] = [0xff; 8];
const IPV4_HDR: usize = 20;
const IPV6_HDR: usize = 40;
const UDP_HDR: usize = 8;
const BTH_LEN: usize = 12;
/// The largest masked prefix: IPv6 + UDP + BTH.
const MAX_MASKED: usize = IPV6_HDR + UDP_HDR + BTH_LEN;

/// The byte ranges (offsets from the IP header) that the ICRC treats as all ones, per IP
/// version. Public so tests can flip bits inside and outside them.
pub fn masked_ranges(ipv6: bool) -> &'static [(usize, usize)] {
    if ipv6 {
        // byte 0 low nibble + bytes 1..4: traffic class and flow label; byte 7: hop limit.
        // Byte 0's high nibble (version) is not masked: handled by masking only 0x0f below.
        &[(1, 4), (7, 8), (46, 48), (52, 53)]
    } else {
        // TOS, TTL, header checksum; UDP checksum at 20+6; BTH resv8a at 20+8+4.
        &[(1, 2), (8, 9), (10, 12), (26, 28), (32, 33)]
    }
}

/// Whether bit `bit` (0 = least significant) of byte `offset` of the IP packet is masked.
pub fn is_masked(ipv6: bool, offset: usize, bit: u8) -> bool {
    if ipv6 && offset == 0 {
        return bit < 4;
    }
    masked_ranges(ipv6)
        .iter()
        .any(|&(s, e)| offset >= s && offset < e)
}

/// The ICRC of `covered`: an IP packet (IPv4 without options, or IPv6 without extension
/// headers) carrying UDP and a BTH, from the IP header up to but not including the ICRC.
pub fn compute(covered: &[u8]) -> Result<u32> {
    let (ipv6, hdr_len) = masked_headers(covered)?;
    let head = take(covered, 0, hdr_len, "ICRC-covered headers")?;
    let mut masked = [0u8; MAX_MASKED];
    let m = &mut masked[..hdr_len];
    m.copy_from_slice(head);
    for &(s, e) in masked_ranges(ipv6) {
        m[s..e].fill(0xff);
    }
    if ipv6 {
        m[0] |= 0x0f;
    }
    // crc32fast: CRC-32/ISO-HDLC (initial ones, final complement), with PCLMULQDQ where the
    // CPU has it: the ICRC covers every payload byte twice per hop (sender and receiver).
    let mut crc = crc32fast::Hasher::new();
    crc.update(&LRH_STANDIN);
    crc.update(m);
    crc.update(&covered[hdr_len..]);
    Ok(crc.finalize())
}

/// Whether `covered` starts with an IPv6 header, and the length of the headers the ICRC
/// masks (IP, UDP, BTH).
fn masked_headers(covered: &[u8]) -> Result<(bool, usize)> {
    let first = *covered.first().ok_or(WireError::Truncated {
        what: "IP header",
        need: 1,
        have: 0,
    })?;
    let ipv6 = match first >> 4 {
        4 => false,
        6 => true,
        _ => return Err(WireError::Ipv4("IP version is neither 4 nor 6")),
    };
    Ok((
        ipv6,
        if ipv6 { IPV6_HDR } else { IPV4_HDR } + UDP_HDR + BTH_LEN,
    ))
}

/// What [`verify`] checks of `ip_packet`'s shape without computing the CRC: an IP version
/// the ICRC knows, the headers it masks and an ICRC after them. For a frame whose ICRC is
/// known good ([`crate::wire::packet::Icrc::BuiltHere`]): the parser relies on these
/// bounds either way.
pub fn check_present(ip_packet: &[u8]) -> Result<()> {
    let (_, hdr_len) = masked_headers(ip_packet)?;
    take(
        ip_packet,
        0,
        hdr_len + ICRC_LEN,
        "ICRC-covered headers and ICRC",
    )
    .map(|_| ())
}

/// Check the ICRC that ends `ip_packet` (IP header through ICRC).
pub fn verify(ip_packet: &[u8]) -> Result<()> {
    let split = ip_packet
        .len()
        .checked_sub(ICRC_LEN)
        .ok_or(WireError::Truncated {
            what: "ICRC",
            need: ICRC_LEN,
            have: ip_packet.len(),
        })?;
    let carried = u32::from_le_bytes(array::<4>(ip_packet, split, "ICRC")?);
    let computed = compute(&ip_packet[..split])?;
    if computed == carried {
        Ok(())
    } else {
        Err(WireError::Icrc { computed, carried })
    }
}
