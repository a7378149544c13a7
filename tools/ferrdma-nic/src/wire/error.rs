//! One error type for everything the packet layer refuses. Parsing returns these instead of
//! panicking: every byte handed to the parser may come from a hostile peer.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("ethertype {0:#06x} is neither IPv4 nor IPv6")]
    EtherType(u16),
    #[error("malformed IPv4 header: {0}")]
    Ipv4(&'static str),
    #[error("IPv4 header checksum mismatch")]
    Ipv4Checksum,
    #[error("malformed IPv6 header: {0}")]
    Ipv6(&'static str),
    #[error("IP protocol / next header {0} is not UDP")]
    NotUdp(u8),
    #[error("UDP destination port {0} is not RoCEv2 (4791)")]
    NotRoce(u16),
    #[error("UDP length {udp} does not match the IP payload length {ip}")]
    UdpLength { udp: usize, ip: usize },
    #[error("UDP checksum mismatch")]
    UdpChecksum,
    #[error("unknown or unsupported BTH opcode {0:#04x}")]
    Opcode(u8),
    #[error("unsupported BTH transport header version {0}")]
    TVer(u8),
    #[error("reserved AETH syndrome {0:#04x}")]
    AethSyndrome(u8),
    #[error("opcode {0:#04x} carries no payload but the packet has one")]
    UnexpectedPayload(u8),
    #[error("pad count {pad} larger than the {len} bytes after the headers")]
    Pad { pad: usize, len: usize },
    #[error("ICRC mismatch: computed {computed:#010x}, packet carries {carried:#010x}")]
    Icrc { computed: u32, carried: u32 },
    // Builder-side errors: the caller asked for something the wire cannot carry.
    #[error("field {field} value {value:#x} does not fit")]
    Field { field: &'static str, value: u64 },
    #[error("opcode {opcode:#04x}: extension header {header} {problem}")]
    ExtHeader {
        opcode: u8,
        header: &'static str,
        problem: &'static str,
    },
    #[error("packet of {0} bytes exceeds the IP length field")]
    TooLong(usize),
}

pub type Result<T> = core::result::Result<T, WireError>;

/// `bytes[at..at + n]`, or a `Truncated` error naming `what`.
pub(crate) fn take<'a>(
    bytes: &'a [u8],
    at: usize,
    n: usize,
    what: &'static str,
) -> Result<&'a [u8]> {
    at.checked_add(n)
        .and_then(|end| bytes.get(at..end))
        .ok_or(WireError::Truncated {
            what,
            need: at.saturating_add(n),
            have: bytes.len(),
        })
}

/// A fixed-size array view of `bytes[at..at + N]`.
pub(crate) fn array<const N: usize>(
    bytes: &[u8],
    at: usize,
    what: &'static str,
) -> Result<[u8; N]> {
    let s = take(bytes, at, N, what)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}
