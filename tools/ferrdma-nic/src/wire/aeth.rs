//! ACK Extended Transport Header (4 bytes), IBA vol. 1 §9.3.5: a syndrome byte and a 24-bit
//! MSN. Syndrome: bit 7 reserved, bits 6-5 the kind (00 ACK, 01 RNR NAK, 11 NAK, 10
//! reserved), bits 4-0 the kind's value (credit count, RNR timer code, NAK code).

use super::error::{array, Result, WireError};

pub const AETH_LEN: usize = 4;

/// NAK codes (syndrome value when the kind is 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
}

impl NakCode {
    fn value(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }

    fn from_value(v: u8) -> Option<Self> {
        Some(match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    /// Positive ACK with an end-to-end credit count (5 bits; 31 = "invalid", no flow control).
    Ack {
        credits: u8,
    },
    /// Receiver not ready; `timer` is the 5-bit RNR timer code (IBA table 45).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

impl Syndrome {
    pub fn to_byte(self) -> Result<u8> {
        let (kind, v, field) = match self {
            Syndrome::Ack { credits } => (0u8, credits, "aeth.credits"),
            Syndrome::RnrNak { timer } => (1, timer, "aeth.rnr_timer"),
            Syndrome::Nak(c) => (3, c.value(), "aeth.nak"),
        };
        if v > 0x1f {
            return Err(WireError::Field {
                field,
                value: v.into(),
            });
        }
        Ok((kind << 5) | v)
    }

    pub fn from_byte(b: u8) -> Result<Self> {
        let v = b & 0x1f;
        match (b >> 5) & 3 {
            0 => Ok(Syndrome::Ack { credits: v }),
            1 => Ok(Syndrome::RnrNak { timer: v }),
            3 => NakCode::from_value(v)
                .map(Syndrome::Nak)
                .ok_or(WireError::AethSyndrome(b)),
            _ => Err(WireError::AethSyndrome(b)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: Syndrome,
    /// Message sequence number, 24 bits.
    pub msn: u32,
}

impl Aeth {
    pub fn write(&self, out: &mut Vec<u8>) -> Result<()> {
        if self.msn > 0x00ff_ffff {
            return Err(WireError::Field {
                field: "aeth.msn",
                value: self.msn.into(),
            });
        }
        let w = (u32::from(self.syndrome.to_byte()?) << 24) | self.msn;
        out.extend_from_slice(&w.to_be_bytes());
        Ok(())
    }

    pub fn parse(b: &[u8], at: usize) -> Result<Self> {
        let w = u32::from_be_bytes(array::<4>(b, at, "AETH")?);
        Ok(Aeth {
            syndrome: Syndrome::from_byte((w >> 24) as u8)?,
            msn: w & 0x00ff_ffff,
        })
    }
}
