//! Ethernet II header with an optional 802.1Q tag. No FCS: frames are handled without it, as
//! a host NIC hands them over and as pcap stores them.

use super::error::{array, Result, WireError};

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
pub const ETHERTYPE_VLAN: u16 = 0x8100;

/// An 802.1Q tag: priority code point, drop eligible indicator, VLAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vlan {
    pub pcp: u8,
    pub dei: bool,
    pub vid: u16,
}

impl Vlan {
    /// The tag control information; `Err` for a PCP or VID out of range.
    pub fn tci(&self) -> Result<u16> {
        if self.pcp > 7 {
            return Err(WireError::Field {
                field: "vlan.pcp",
                value: self.pcp.into(),
            });
        }
        if self.vid > 0xfff {
            return Err(WireError::Field {
                field: "vlan.vid",
                value: self.vid.into(),
            });
        }
        Ok((u16::from(self.pcp) << 13) | (u16::from(self.dei) << 12) | self.vid)
    }

    fn from_tci(tci: u16) -> Self {
        Vlan {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0xfff,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthHeader {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub vlan: Option<Vlan>,
}

impl EthHeader {
    /// Bytes the header occupies: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
        }
    }

    /// Append the header with the given ethertype of the payload.
    pub fn write(&self, ethertype: u16, out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(&self.dst);
        out.extend_from_slice(&self.src);
        if let Some(v) = &self.vlan {
            out.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            out.extend_from_slice(&v.tci()?.to_be_bytes());
        }
        out.extend_from_slice(&ethertype.to_be_bytes());
        Ok(())
    }

    /// Parse the header; returns it, the payload ethertype and the header length. One tag at
    /// most: a second 0x8100 (QinQ) is reported as an unsupported ethertype.
    pub fn parse(frame: &[u8]) -> Result<(Self, u16, usize)> {
        let dst = array::<6>(frame, 0, "Ethernet header")?;
        let src = array::<6>(frame, 6, "Ethernet header")?;
        let t = u16::from_be_bytes(array::<2>(frame, 12, "Ethernet header")?);
        if t == ETHERTYPE_VLAN {
            let tci = u16::from_be_bytes(array::<2>(frame, 14, "802.1Q tag")?);
            let inner = u16::from_be_bytes(array::<2>(frame, 16, "802.1Q tag")?);
            let h = EthHeader {
                dst,
                src,
                vlan: Some(Vlan::from_tci(tci)),
            };
            Ok((h, inner, 18))
        } else {
            Ok((
                EthHeader {
                    dst,
                    src,
                    vlan: None,
                },
                t,
                14,
            ))
        }
    }
}
