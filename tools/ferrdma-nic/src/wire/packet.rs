//! Whole RoCEv2 frames: `build` turns headers and a payload into bytes, `parse` turns bytes
//! into headers and a payload slice after checking every layer, the ICRC included.
//!
//! Layout: Ethernet [802.1Q] | IPv4 or IPv6 | UDP (dst 4791) | BTH | DETH | RETH | AETH |
//! ImmDt or IETH | payload | pad to 4 bytes | ICRC (4, little-endian).

use super::aeth::{Aeth, AETH_LEN};
use super::bth::{Bth, BTH_LEN};
use super::error::{Result, WireError};
use super::eth::{EthHeader, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::ext::{self, Deth, Reth, DETH_LEN, IETH_LEN, IMMDT_LEN, RETH_LEN};
use super::frame_pool;
use super::icrc::{self, ICRC_LEN};
use super::ipv4::{Ipv4Header, IPV4_HDR_LEN};
use super::ipv6::{Ipv6Header, IPV6_HDR_LEN};
use super::opcode::{self, OpInfo};
use super::udp::{self, Pseudo, UDP_HDR_LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpHeader {
    V4(Ipv4Header),
    V6(Ipv6Header),
}

impl IpHeader {
    fn len(&self) -> usize {
        match self {
            IpHeader::V4(_) => IPV4_HDR_LEN,
            IpHeader::V6(_) => IPV6_HDR_LEN,
        }
    }
}

/// The extension headers after the BTH; which ones must be present is fixed by the opcode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtHeaders {
    pub deth: Option<Deth>,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    /// Immediate data (ImmDt), as the 32-bit big-endian word on the wire.
    pub immdt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    fn len(&self) -> usize {
        self.deth.map_or(0, |_| DETH_LEN)
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + self.immdt.map_or(0, |_| IMMDT_LEN)
            + self.ieth.map_or(0, |_| IETH_LEN)
    }

    /// Refuse headers the opcode does not carry and missing ones it needs.
    fn check(&self, opcode: u8, info: &OpInfo) -> Result<()> {
        let pairs = [
            ("DETH", self.deth.is_some(), info.deth),
            ("RETH", self.reth.is_some(), info.reth),
            ("AETH", self.aeth.is_some(), info.aeth),
            ("ImmDt", self.immdt.is_some(), info.immdt),
            ("IETH", self.ieth.is_some(), info.ieth),
        ];
        for (header, have, want) in pairs {
            if have != want {
                let problem = if want {
                    "is required"
                } else {
                    "is not carried"
                };
                return Err(WireError::ExtHeader {
                    opcode,
                    header,
                    problem,
                });
            }
        }
        Ok(())
    }
}

/// Everything in a RoCEv2 frame except the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    pub eth: EthHeader,
    pub ip: IpHeader,
    pub udp_src_port: u16,
    /// `pad_count` is ignored by `build` (it follows from the payload length) and reported
    /// by `parse`.
    pub bth: Bth,
    pub ext: ExtHeaders,
}

/// A parsed frame: its headers and the payload without pad bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub headers: Headers,
    pub payload: &'a [u8],
}

/// Pad bytes that round `len` up to a multiple of 4.
pub fn pad_for(len: usize) -> u8 {
    ((4 - len % 4) % 4) as u8
}

/// Serialize a frame. Errors when the headers do not match the opcode, a field does not fit
/// its width, or the packet would not fit the IP length field.
pub fn build(h: &Headers, payload: &[u8]) -> Result<Vec<u8>> {
    build_as(h, payload, Seal::Now)
}

/// [`build`], the ICRC written as `when` says.
pub fn build_as(h: &Headers, payload: &[u8], when: Seal) -> Result<Vec<u8>> {
    let fill = |b: &mut [u8]| {
        b.copy_from_slice(payload);
        Ok::<(), std::convert::Infallible>(())
    };
    match build_frame(h, payload.len(), fill, when)? {
        Ok(frame) => Ok(frame),
        Err(never) => match never {},
    }
}

/// Serialize a frame whose `payload_len` payload bytes `fill` writes in place, into the
/// frame itself: a payload read from guest memory is copied once, not into a buffer of its
/// own first. `fill` must write every byte of its slice or fail: the frame's buffer may be
/// one another frame used before (`frame_pool`), and is not zeroed first. The outer error is
/// [`build`]'s; the inner one is `fill`'s (the frame is then discarded).
pub fn build_with<E>(
    h: &Headers,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> Result<std::result::Result<Vec<u8>, E>> {
    build_frame(h, payload_len, fill, Seal::Now)
}

/// When a frame's ICRC is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// When it is built.
    Now,
    /// By [`seal`], when something may see it: an IPv4 frame is built with four zero bytes
    /// in its place. A frame that goes from one NIC engine to another and nowhere else is
    /// never sealed: nobody can look at its ICRC, and its receiver does not check it
    /// (`Icrc::BuiltHere`). IPv6 frames are sealed at once (their UDP checksum covers the
    /// ICRC).
    Deferred,
}

/// [`build_with`], the ICRC written as `when` says.
pub fn build_frame<E>(
    h: &Headers,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    when: Seal,
) -> Result<std::result::Result<Vec<u8>, E>> {
    let opcode = h.bth.opcode;
    let info = opcode::info(opcode).ok_or(WireError::Opcode(opcode))?;
    h.ext.check(opcode, &info)?;
    if !info.payload && payload_len != 0 {
        return Err(WireError::UnexpectedPayload(opcode));
    }
    let pad = pad_for(payload_len);
    let udp_len = UDP_HDR_LEN + BTH_LEN + h.ext.len() + payload_len + usize::from(pad) + ICRC_LEN;
    let ip_len = h.ip.len() + udp_len;
    let ip_len_field = match h.ip {
        IpHeader::V4(_) => ip_len,
        IpHeader::V6(_) => udp_len,
    };
    let ip_len_field = u16::try_from(ip_len_field).map_err(|_| WireError::TooLong(ip_len))?;
    let udp_len16 = u16::try_from(udp_len).map_err(|_| WireError::TooLong(ip_len))?;

    // The headers go to this thread's scratch buffer first (they are written by appending),
    // then into the frame's buffer, whose old bytes are overwritten rather than zeroed.
    let mut hdr = HEADERS.with(std::cell::Cell::take);
    hdr.clear();
    let written = write_headers(h, pad, ip_len_field, udp_len16, &mut hdr);
    let frame = written.map(|ip_start| {
        let at = hdr.len();
        let total = at + payload_len + usize::from(pad) + ICRC_LEN;
        let mut out = frame_pool::take(total);
        out[..at].copy_from_slice(&hdr);
        (out, ip_start, at, total)
    });
    HEADERS.with(|c| c.set(hdr));
    let (mut out, ip_start, at, total) = frame?;
    let udp_start = ip_start + h.ip.len();
    let payload_end = at + payload_len;
    if let Err(e) = fill(&mut out[at..payload_end]) {
        frame_pool::recycle([out]);
        return Ok(Err(e));
    }
    let icrc_at = total - ICRC_LEN;
    out[payload_end..icrc_at].fill(0);
    if when == Seal::Deferred && matches!(h.ip, IpHeader::V4(_)) {
        out[icrc_at..].fill(0);
        return Ok(Ok(out));
    }
    // The ICRC masks the UDP checksum, so it can be computed before the checksum is known.
    let crc = icrc::compute(&out[ip_start..icrc_at])?;
    out[icrc_at..].copy_from_slice(&crc.to_le_bytes());
    if let IpHeader::V6(v6) = &h.ip {
        let sum = udp::checksum_for(
            &Pseudo::V6 {
                src: &v6.src,
                dst: &v6.dst,
            },
            &out[udp_start..],
        );
        out[udp_start + 6..udp_start + 8].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(Ok(out))
}

/// Writes the ICRC of a frame built with [`Seal::Deferred`]; an IPv6 frame (sealed when
/// built) is left as it is. Writing it again into a sealed frame changes nothing. Errors
/// when the frame is not an IPv4 or IPv6 RoCEv2 frame.
pub fn seal(frame: &mut [u8]) -> Result<()> {
    let (_, ethertype, l2) = EthHeader::parse(frame)?;
    match ethertype {
        ETHERTYPE_IPV4 => {
            let (_, total) = Ipv4Header::parse(&frame[l2..])?;
            // Ipv4Header::parse checked that `total` bytes follow the Ethernet header.
            let have = frame.len() - l2;
            let ip = frame.get_mut(l2..l2 + total).ok_or(WireError::Truncated {
                what: "IP packet",
                need: total,
                have,
            })?;
            let at = ip.len().checked_sub(ICRC_LEN).ok_or(WireError::Truncated {
                what: "ICRC",
                need: ICRC_LEN,
                have: ip.len(),
            })?;
            let crc = icrc::compute(&ip[..at])?;
            ip[at..].copy_from_slice(&crc.to_le_bytes());
            Ok(())
        }
        ETHERTYPE_IPV6 => Ok(()),
        t => Err(WireError::EtherType(t)),
    }
}

thread_local! {
    /// [`build_with`]'s scratch buffer for a frame's headers.
    static HEADERS: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Appends the headers of a frame (Ethernet through the last extension header) to `out`;
/// returns where the IP header starts.
fn write_headers(
    h: &Headers,
    pad: u8,
    ip_len_field: u16,
    udp_len: u16,
    out: &mut Vec<u8>,
) -> Result<usize> {
    let ethertype = match h.ip {
        IpHeader::V4(_) => ETHERTYPE_IPV4,
        IpHeader::V6(_) => ETHERTYPE_IPV6,
    };
    h.eth.write(ethertype, out)?;
    let ip_start = out.len();
    match &h.ip {
        IpHeader::V4(v4) => v4.write(ip_len_field, out),
        IpHeader::V6(v6) => v6.write(ip_len_field, out)?,
    }
    udp::write_header(h.udp_src_port, udp_len, out);
    Bth {
        pad_count: pad,
        ..h.bth
    }
    .write(out)?;
    if let Some(d) = &h.ext.deth {
        d.write(out)?;
    }
    if let Some(r) = &h.ext.reth {
        r.write(out);
    }
    if let Some(a) = &h.ext.aeth {
        a.write(out)?;
    }
    if let Some(i) = h.ext.immdt {
        ext::write_u32(i, out);
    }
    if let Some(k) = h.ext.ieth {
        ext::write_u32(k, out);
    }
    Ok(ip_start)
}

/// What a receiver knows of a frame's ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icrc {
    /// Nothing: it is computed and compared (every frame from a wire, a LAN, a test).
    Verify,
    /// It is good: the bytes are exactly those a NIC engine of this process built (and
    /// computed the ICRC over), handed from engine to engine with nothing between that
    /// could change them (`crate::wire::rx_frame`). Its presence is still checked.
    BuiltHere,
}

/// Parse and check a frame (without FCS). Trailing bytes after the IP packet (Ethernet
/// minimum-size padding) are ignored.
pub fn parse(frame: &[u8]) -> Result<Parsed<'_>> {
    parse_with(frame, Icrc::Verify)
}

/// [`parse`], knowing `icrc` of the frame's ICRC.
pub fn parse_with(frame: &[u8], icrc: Icrc) -> Result<Parsed<'_>> {
    let (eth, ethertype, l2) = EthHeader::parse(frame)?;
    let l3 = &frame[l2..];
    let (ip, ip_total, ip_hdr) = match ethertype {
        ETHERTYPE_IPV4 => {
            let (h, total) = Ipv4Header::parse(l3)?;
            (IpHeader::V4(h), total, IPV4_HDR_LEN)
        }
        ETHERTYPE_IPV6 => {
            let (h, total) = Ipv6Header::parse(l3)?;
            (IpHeader::V6(h), total, IPV6_HDR_LEN)
        }
        t => return Err(WireError::EtherType(t)),
    };
    // Both parsers checked ip_total <= l3.len() and ip_total >= ip_hdr.
    let ip_packet = l3.get(..ip_total).ok_or(WireError::Truncated {
        what: "IP packet",
        need: ip_total,
        have: l3.len(),
    })?;
    let datagram = ip_packet.get(ip_hdr..).unwrap_or(&[]);
    let pseudo = match &ip {
        IpHeader::V4(h) => Pseudo::V4 {
            src: &h.src,
            dst: &h.dst,
        },
        IpHeader::V6(h) => Pseudo::V6 {
            src: &h.src,
            dst: &h.dst,
        },
    };
    let udp_src_port = udp::parse(datagram, &pseudo)?;
    match icrc {
        Icrc::Verify => icrc::verify(ip_packet)?,
        Icrc::BuiltHere => icrc::check_present(ip_packet)?,
    }

    // Offsets below are within the datagram; either ICRC check proved it holds at least
    // UDP + BTH + ICRC bytes, and every read is bounds-checked anyway.
    let transport_end = datagram.len() - ICRC_LEN;
    let transport = &datagram[..transport_end];
    let bth = Bth::parse(transport, UDP_HDR_LEN)?;
    let info = opcode::info(bth.opcode).ok_or(WireError::Opcode(bth.opcode))?;
    let mut at = UDP_HDR_LEN + BTH_LEN;
    let mut ext = ExtHeaders::default();
    if info.deth {
        ext.deth = Some(Deth::parse(transport, at)?);
        at += DETH_LEN;
    }
    if info.reth {
        ext.reth = Some(Reth::parse(transport, at)?);
        at += RETH_LEN;
    }
    if info.aeth {
        ext.aeth = Some(Aeth::parse(transport, at)?);
        at += AETH_LEN;
    }
    if info.immdt {
        ext.immdt = Some(ext::parse_u32(transport, at, "ImmDt")?);
        at += IMMDT_LEN;
    }
    if info.ieth {
        ext.ieth = Some(ext::parse_u32(transport, at, "IETH")?);
        at += IETH_LEN;
    }
    let rest = transport.get(at..).unwrap_or(&[]);
    let pad = usize::from(bth.pad_count);
    if pad > rest.len() {
        return Err(WireError::Pad {
            pad,
            len: rest.len(),
        });
    }
    let payload = &rest[..rest.len() - pad];
    if !info.payload && !rest.is_empty() {
        return Err(WireError::UnexpectedPayload(bth.opcode));
    }
    Ok(Parsed {
        headers: Headers {
            eth,
            ip,
            udp_src_port,
            bth,
            ext,
        },
        payload,
    })
}
