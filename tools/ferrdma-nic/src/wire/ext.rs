//! The fixed-layout extension headers: RETH (16), DETH (8), ImmDt (4), IETH (4). AETH has
//! its own file because of its syndrome encoding.

use super::error::{array, Result, WireError};

pub const RETH_LEN: usize = 16;
pub const DETH_LEN: usize = 8;
pub const IMMDT_LEN: usize = 4;
pub const IETH_LEN: usize = 4;

/// RDMA Extended Transport Header: remote virtual address, R_Key, DMA length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl Reth {
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.va.to_be_bytes());
        out.extend_from_slice(&self.rkey.to_be_bytes());
        out.extend_from_slice(&self.dma_len.to_be_bytes());
    }

    pub fn parse(b: &[u8], at: usize) -> Result<Self> {
        let h = array::<RETH_LEN>(b, at, "RETH")?;
        let mut va = [0u8; 8];
        va.copy_from_slice(&h[0..8]);
        Ok(Reth {
            va: u64::from_be_bytes(va),
            rkey: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            dma_len: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        })
    }
}

/// Datagram Extended Transport Header: Q_Key, then a reserved byte and the 24-bit source QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deth {
    pub qkey: u32,
    pub src_qp: u32,
}

impl Deth {
    pub fn write(&self, out: &mut Vec<u8>) -> Result<()> {
        if self.src_qp > 0x00ff_ffff {
            return Err(WireError::Field {
                field: "deth.src_qp",
                value: self.src_qp.into(),
            });
        }
        out.extend_from_slice(&self.qkey.to_be_bytes());
        out.extend_from_slice(&self.src_qp.to_be_bytes());
        Ok(())
    }

    pub fn parse(b: &[u8], at: usize) -> Result<Self> {
        let h = array::<DETH_LEN>(b, at, "DETH")?;
        Ok(Deth {
            qkey: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
            src_qp: u32::from_be_bytes([0, h[5], h[6], h[7]]),
        })
    }
}

/// A 4-byte big-endian word header: ImmDt (immediate data) or IETH (the R_Key to invalidate).
pub fn write_u32(v: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn parse_u32(b: &[u8], at: usize, what: &'static str) -> Result<u32> {
    Ok(u32::from_be_bytes(array::<4>(b, at, what)?))
}
