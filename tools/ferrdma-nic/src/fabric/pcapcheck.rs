//! `ferrdma-nic --check-pcap FILE`: reads a classic pcap capture (the fabric's, or any
//! Ethernet capture) and runs every RoCEv2 frame in it (UDP to port 4791, as the switch's
//! steering rule sees it) through the NIC's own packet parser, ICRC check included. Counts
//! RoCEv2 frames per direction (source MAC -> destination MAC) and per opcode, and lists the
//! frames that fail. Used by the VM harness after interoperability runs against Linux rxe.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use thiserror::Error;

use super::switch::is_roce;
use crate::wire::{self, IpHeader};

const MAGIC_USEC: u32 = 0xa1b2_c3d4;
const MAGIC_NSEC: u32 = 0xa1b2_3c4d;
const LINKTYPE_ETHERNET: u32 = 1;
/// Bad frames listed in full in the report; the rest are only counted.
const BAD_SHOWN: usize = 20;

#[derive(Debug, Error, PartialEq)]
pub enum PcapError {
    #[error("not a classic pcap file (magic {0:#010x})")]
    Magic(u32),
    #[error("link type {0} is not Ethernet")]
    LinkType(u32),
    #[error("file too short for the pcap header")]
    Short,
}

/// What the check found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub frames: u64,
    pub roce: u64,
    pub other: u64,
    /// RoCEv2 frames per (source MAC, destination MAC).
    pub directions: BTreeMap<([u8; 6], [u8; 6]), DirectionCounts>,
    /// Per BTH opcode, over all good RoCEv2 frames.
    pub opcodes: BTreeMap<u8, u64>,
    /// (frame number, 1-based as in Wireshark; what is wrong) of the first bad frames.
    pub bad: Vec<(u64, String)>,
    pub bad_count: u64,
    /// The file ended inside a record.
    pub truncated_file: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct DirectionCounts {
    pub frames: u64,
    pub ipv4: u64,
    pub ipv6: u64,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.bad_count == 0 && !self.truncated_file
    }

    fn bad(&mut self, n: u64, why: String) {
        self.bad_count += 1;
        if self.bad.len() < BAD_SHOWN {
            self.bad.push((n, why));
        }
    }

    /// The report as printed by `--check-pcap`.
    pub fn text(&self) -> String {
        let mac = |m: &[u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        let mut s = String::new();
        for ((src, dst), c) in &self.directions {
            let _ = writeln!(
                s,
                "roce {} -> {}: {} frames (IPv4 {}, IPv6 {})",
                mac(src),
                mac(dst),
                c.frames,
                c.ipv4,
                c.ipv6
            );
        }
        if !self.opcodes.is_empty() {
            let ops: Vec<String> = self
                .opcodes
                .iter()
                .map(|(op, n)| format!("{op:#04x}:{n}"))
                .collect();
            let _ = writeln!(s, "opcodes {}", ops.join(" "));
        }
        for (n, why) in &self.bad {
            let _ = writeln!(s, "bad frame {n}: {why}");
        }
        if self.truncated_file {
            let _ = writeln!(s, "bad file: it ends inside a record");
        }
        let _ = writeln!(
            s,
            "total {} frames: {} RoCEv2 ({} bad), {} other",
            self.frames, self.roce, self.bad_count, self.other
        );
        s
    }
}

fn u32_at(b: &[u8], at: usize, le: bool) -> Option<u32> {
    let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if le {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    })
}

/// Checks a whole capture held in memory.
pub fn check(file: &[u8]) -> Result<Report, PcapError> {
    let magic_le = u32_at(file, 0, true).ok_or(PcapError::Short)?;
    let le = match magic_le {
        MAGIC_USEC | MAGIC_NSEC => true,
        m if m.swap_bytes() == MAGIC_USEC || m.swap_bytes() == MAGIC_NSEC => false,
        m => return Err(PcapError::Magic(m)),
    };
    let linktype = u32_at(file, 20, le).ok_or(PcapError::Short)?;
    if linktype & 0x0fff_ffff != LINKTYPE_ETHERNET {
        return Err(PcapError::LinkType(linktype));
    }
    let mut r = Report::default();
    let mut at = 24usize;
    while at < file.len() {
        let (Some(incl), Some(orig)) = (u32_at(file, at + 8, le), u32_at(file, at + 12, le)) else {
            r.truncated_file = true;
            break;
        };
        let start = at + 16;
        let Some(frame) = start
            .checked_add(incl as usize)
            .and_then(|end| file.get(start..end))
        else {
            r.truncated_file = true;
            break;
        };
        at = start + incl as usize;
        r.frames += 1;
        let n = r.frames;
        if !is_roce(frame) {
            r.other += 1;
            continue;
        }
        r.roce += 1;
        if incl != orig {
            r.bad(n, format!("captured {incl} of {orig} bytes: cannot check"));
            continue;
        }
        match wire::parse(frame) {
            Ok(p) => {
                let h = &p.headers;
                let d = r.directions.entry((h.eth.src, h.eth.dst)).or_default();
                d.frames += 1;
                match h.ip {
                    IpHeader::V4(_) => d.ipv4 += 1,
                    IpHeader::V6(_) => d.ipv6 += 1,
                }
                *r.opcodes.entry(h.bth.opcode).or_default() += 1;
            }
            Err(e) => {
                let mac = |m: &[u8]| {
                    m.iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(":")
                };
                let dir = match (frame.get(6..12), frame.get(0..6)) {
                    (Some(s), Some(d)) => format!("{} -> {}", mac(s), mac(d)),
                    _ => String::new(),
                };
                r.bad(n, format!("{dir}: {e}"));
            }
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::super::pcap::PcapWriter;
    use super::*;

    fn capture(frames: &[&[u8]]) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            w.write_at(f, i as u32, 0).unwrap();
        }
        w.into_inner()
    }

    fn roce_frame() -> Vec<u8> {
        crate::fabric::testframes::roce([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], false, false)
    }

    #[test]
    fn good_frames_are_counted_per_direction() {
        let f = roce_frame();
        let other = crate::fabric::testframes::plain([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
        let r = check(&capture(&[&f, &other, &f])).unwrap();
        assert!(r.ok(), "{}", r.text());
        assert_eq!((r.frames, r.roce, r.other), (3, 2, 1));
        assert_eq!(r.directions.len(), 1);
        assert!(r
            .text()
            .contains("roce 02:00:00:00:00:01 -> 02:00:00:00:00:02: 2 frames"));
    }

    #[test]
    fn a_bad_icrc_is_reported() {
        let mut f = roce_frame();
        let last = f.len() - 1;
        f[last] ^= 1;
        let r = check(&capture(&[&f])).unwrap();
        assert!(!r.ok());
        assert_eq!(r.bad_count, 1);
        assert!(r.text().contains("bad frame 1:"), "{}", r.text());
        assert!(r.text().contains("ICRC"), "{}", r.text());
    }

    #[test]
    fn hostile_files_are_refused_or_flagged() {
        assert_eq!(check(b"abc"), Err(PcapError::Short));
        assert!(matches!(check(&[0u8; 24]), Err(PcapError::Magic(0))));
        let mut c = capture(&[&roce_frame()]);
        c.truncate(c.len() - 3);
        assert!(check(&c).unwrap().truncated_file);
        // A record claiming 4 GiB.
        let mut c = capture(&[]);
        c.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert!(check(&c).unwrap().truncated_file);
    }

    #[test]
    fn the_golden_frames_pass() {
        for text in [
            include_str!("../../tests/data/roce-cnp-connectx4lx.hex"),
            include_str!("../../tests/data/roce-rc-send-only-ipv6-scapy.hex"),
            include_str!("../../tests/data/roce-rc-send-only-ipv4-vlan-scapy.hex"),
            include_str!("../../tests/data/roce-rc-send-first-ipv6-rxe.hex"),
            include_str!("../../tests/data/roce-rc-ack-ipv4-rxe.hex"),
        ] {
            let f = crate::wire::tests::unhex(text);
            let r = check(&capture(&[&f])).unwrap();
            assert!(r.ok() && r.roce == 1, "{}", r.text());
        }
    }
}
