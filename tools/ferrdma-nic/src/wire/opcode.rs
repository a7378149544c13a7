//! The BTH opcodes this NIC speaks and which extension headers each carries (IBA vol. 1
//! §9.2.1 table 38 and §9.3 figure 83). The top three bits are the transport (RC 000,
//! UC 001, UD 011), the low five the operation. Extension headers appear on the wire in the
//! order DETH, RETH, AETH, ImmDt/IETH. Atomics and RD are not supported (the NIC does not
//! advertise them); UC is parsed because it shares RC's layout and costs nothing. The RoCEv2
//! CNP (0x81) is recognised so congestion notifications can be consumed.

pub const RC_SEND_FIRST: u8 = 0x00;
pub const RC_SEND_MIDDLE: u8 = 0x01;
pub const RC_SEND_LAST: u8 = 0x02;
pub const RC_SEND_LAST_IMM: u8 = 0x03;
pub const RC_SEND_ONLY: u8 = 0x04;
pub const RC_SEND_ONLY_IMM: u8 = 0x05;
pub const RC_WRITE_FIRST: u8 = 0x06;
pub const RC_WRITE_MIDDLE: u8 = 0x07;
pub const RC_WRITE_LAST: u8 = 0x08;
pub const RC_WRITE_LAST_IMM: u8 = 0x09;
pub const RC_WRITE_ONLY: u8 = 0x0a;
pub const RC_WRITE_ONLY_IMM: u8 = 0x0b;
pub const RC_READ_REQUEST: u8 = 0x0c;
pub const RC_READ_RESPONSE_FIRST: u8 = 0x0d;
pub const RC_READ_RESPONSE_MIDDLE: u8 = 0x0e;
pub const RC_READ_RESPONSE_LAST: u8 = 0x0f;
pub const RC_READ_RESPONSE_ONLY: u8 = 0x10;
pub const RC_ACK: u8 = 0x11;
pub const RC_SEND_LAST_INV: u8 = 0x16;
pub const RC_SEND_ONLY_INV: u8 = 0x17;
/// UC opcodes are the RC ones for SEND and WRITE (0x00..=0x0b) plus this.
pub const UC_BASE: u8 = 0x20;
pub const UD_SEND_ONLY: u8 = 0x64;
pub const UD_SEND_ONLY_IMM: u8 = 0x65;
pub const CNP: u8 = 0x81;

/// What follows the BTH for one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    pub name: &'static str,
    pub deth: bool,
    pub reth: bool,
    pub aeth: bool,
    pub immdt: bool,
    pub ieth: bool,
    /// Whether a payload may follow the headers (false: exactly nothing but the ICRC).
    pub payload: bool,
}

const fn op(
    name: &'static str,
    deth: bool,
    reth: bool,
    aeth: bool,
    immdt: bool,
    ieth: bool,
    payload: bool,
) -> OpInfo {
    OpInfo {
        name,
        deth,
        reth,
        aeth,
        immdt,
        ieth,
        payload,
    }
}

/// The RC/UC layout of operation `low` (the low five bits), shared by both transports.
#[rustfmt::skip]
const fn connected(low: u8) -> Option<OpInfo> {
    // Flags in order: DETH, RETH, AETH, ImmDt, IETH, payload allowed.
    Some(match low {
        0x00 => op("SEND_FIRST", false, false, false, false, false, true),
        0x01 => op("SEND_MIDDLE", false, false, false, false, false, true),
        0x02 => op("SEND_LAST", false, false, false, false, false, true),
        0x03 => op("SEND_LAST_WITH_IMMEDIATE", false, false, false, true, false, true),
        0x04 => op("SEND_ONLY", false, false, false, false, false, true),
        0x05 => op("SEND_ONLY_WITH_IMMEDIATE", false, false, false, true, false, true),
        0x06 => op("RDMA_WRITE_FIRST", false, true, false, false, false, true),
        0x07 => op("RDMA_WRITE_MIDDLE", false, false, false, false, false, true),
        0x08 => op("RDMA_WRITE_LAST", false, false, false, false, false, true),
        0x09 => op("RDMA_WRITE_LAST_WITH_IMMEDIATE", false, false, false, true, false, true),
        0x0a => op("RDMA_WRITE_ONLY", false, true, false, false, false, true),
        0x0b => op("RDMA_WRITE_ONLY_WITH_IMMEDIATE", false, true, false, true, false, true),
        _ => return None,
    })
}

/// The layout of `opcode`, or `None` for opcodes this NIC does not speak.
#[rustfmt::skip]
pub const fn info(opcode: u8) -> Option<OpInfo> {
    match opcode {
        0x00..=0x0b => connected(opcode),
        RC_READ_REQUEST => Some(op("RDMA_READ_REQUEST", false, true, false, false, false, false)),
        RC_READ_RESPONSE_FIRST => Some(op("RDMA_READ_RESPONSE_FIRST", false, false, true, false, false, true)),
        RC_READ_RESPONSE_MIDDLE => Some(op("RDMA_READ_RESPONSE_MIDDLE", false, false, false, false, false, true)),
        RC_READ_RESPONSE_LAST => Some(op("RDMA_READ_RESPONSE_LAST", false, false, true, false, false, true)),
        RC_READ_RESPONSE_ONLY => Some(op("RDMA_READ_RESPONSE_ONLY", false, false, true, false, false, true)),
        RC_ACK => Some(op("ACKNOWLEDGE", false, false, true, false, false, false)),
        RC_SEND_LAST_INV => Some(op("SEND_LAST_WITH_INVALIDATE", false, false, false, false, true, true)),
        RC_SEND_ONLY_INV => Some(op("SEND_ONLY_WITH_INVALIDATE", false, false, false, false, true, true)),
        0x20..=0x2b => connected(opcode - UC_BASE),
        UD_SEND_ONLY => Some(op("UD_SEND_ONLY", true, false, false, false, false, true)),
        UD_SEND_ONLY_IMM => Some(op("UD_SEND_ONLY_WITH_IMMEDIATE", true, false, false, true, false, true)),
        // The CNP carries 16 reserved bytes after the BTH, treated as its payload.
        CNP => Some(op("CNP", false, false, false, false, false, true)),
        _ => None,
    }
}

/// Every opcode `info` knows, for tests and tools.
pub fn all() -> impl Iterator<Item = u8> {
    (0u8..=255).filter(|&o| info(o).is_some())
}
