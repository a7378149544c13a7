//! Base Transport Header (12 bytes), IBA vol. 1 §9.2:
//! byte 0 opcode; byte 1 SE | M | PadCnt(2) | TVer(4); bytes 2-3 P_Key;
//! byte 4 FECN | BECN | 6 reserved (together "resv8a", masked in the ICRC);
//! bytes 5-7 destination QP; byte 8 AckReq | 7 reserved; bytes 9-11 PSN.

use super::error::{array, Result, WireError};

pub const BTH_LEN: usize = 12;
const MASK24: u32 = 0x00ff_ffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    pub solicited: bool,
    pub mig_req: bool,
    /// Pad bytes (0..=3) after the payload. The builder computes it from the payload length.
    pub pad_count: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    pub ack_req: bool,
    /// 24 bits.
    pub psn: u32,
}

impl Bth {
    pub fn write(&self, out: &mut Vec<u8>) -> Result<()> {
        if self.dest_qp > MASK24 {
            return Err(WireError::Field {
                field: "bth.dest_qp",
                value: self.dest_qp.into(),
            });
        }
        if self.psn > MASK24 {
            return Err(WireError::Field {
                field: "bth.psn",
                value: self.psn.into(),
            });
        }
        if self.pad_count > 3 {
            return Err(WireError::Field {
                field: "bth.pad_count",
                value: self.pad_count.into(),
            });
        }
        out.push(self.opcode);
        // TVer is always 0: the only transport version defined.
        out.push(
            (u8::from(self.solicited) << 7) | (u8::from(self.mig_req) << 6) | (self.pad_count << 4),
        );
        out.extend_from_slice(&self.pkey.to_be_bytes());
        out.extend_from_slice(
            &((u32::from(self.fecn) << 31) | (u32::from(self.becn) << 30) | self.dest_qp)
                .to_be_bytes(),
        );
        out.extend_from_slice(&((u32::from(self.ack_req) << 31) | self.psn).to_be_bytes());
        Ok(())
    }

    /// Parse a BTH at `at`. Reserved bits are ignored (IBA: "ignored on receive"); a non-zero
    /// TVer is refused, as the spec requires the packet be dropped.
    pub fn parse(b: &[u8], at: usize) -> Result<Self> {
        let h = array::<BTH_LEN>(b, at, "BTH")?;
        let tver = h[1] & 0x0f;
        if tver != 0 {
            return Err(WireError::TVer(tver));
        }
        let w1 = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let w2 = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        Ok(Bth {
            opcode: h[0],
            solicited: h[1] & 0x80 != 0,
            mig_req: h[1] & 0x40 != 0,
            pad_count: (h[1] >> 4) & 3,
            pkey: u16::from_be_bytes([h[2], h[3]]),
            fecn: w1 & 0x8000_0000 != 0,
            becn: w1 & 0x4000_0000 != 0,
            dest_qp: w1 & MASK24,
            ack_req: w2 & 0x8000_0000 != 0,
            psn: w2 & MASK24,
        })
    }
}
