//! A classic libpcap file writer (not pcapng): a 24-byte global header (magic 0xa1b2c3d4 in
//! the writer's byte order, version 2.4, snaplen, LINKTYPE_ETHERNET) and one 16-byte record
//! header (ts_sec, ts_usec, incl_len, orig_len) before each frame. Little-endian like the
//! hosts this runs on; readers detect the order from the magic.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

pub const MAGIC: u32 = 0xa1b2c3d4;
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Frames longer than this are truncated in the file (orig_len keeps the real length).
pub const SNAPLEN: u32 = 65535;

pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone: UTC
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Record one frame with an explicit timestamp.
    pub fn write_at(&mut self, frame: &[u8], ts_sec: u32, ts_usec: u32) -> io::Result<()> {
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&ts_sec.to_le_bytes());
        h[4..8].copy_from_slice(&ts_usec.to_le_bytes());
        h[8..12].copy_from_slice(&incl.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..incl as usize])
    }

    /// Record one frame stamped with the wall clock.
    pub fn write(&mut self, frame: &[u8]) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // The classic format has 32-bit seconds; wrap rather than fail in 2106.
        self.write_at(frame, now.as_secs() as u32, now.subsec_micros())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::super::testframes::{plain, roce};
    use super::*;

    const A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xa];
    const B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xb];

    #[test]
    fn headers_byte_for_byte() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let f1 = plain(A, B);
        let f2 = vec![0x11u8; 70_000];
        w.write_at(&f1, 0x01020304, 999_999).unwrap();
        w.write_at(&f2, 5, 6).unwrap();
        let out = w.into_inner();
        assert_eq!(
            &out[..24],
            &[
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
        let r1 = &out[24..40];
        assert_eq!(&r1[0..4], &[4, 3, 2, 1]);
        assert_eq!(&r1[4..8], &999_999u32.to_le_bytes());
        assert_eq!(&r1[8..12], &(f1.len() as u32).to_le_bytes());
        assert_eq!(&r1[12..16], &(f1.len() as u32).to_le_bytes());
        assert_eq!(&out[40..40 + f1.len()], &f1[..]);
        let r2 = &out[40 + f1.len()..56 + f1.len()];
        assert_eq!(&r2[8..12], &SNAPLEN.to_le_bytes());
        assert_eq!(&r2[12..16], &70_000u32.to_le_bytes());
        assert_eq!(out.len(), 56 + f1.len() + SNAPLEN as usize);
    }

    /// Needs `tshark` (apt-get install tshark). Writes RoCEv2 frames built by `crate::wire`
    /// and checks Wireshark's dissector finds nothing malformed and raises no expert finding.
    /// IP and UDP checksums are verified too. (tshark 4.0 neither shows nor verifies the
    /// RoCE ICRC; that is checked against scapy-generated golden vectors in `wire`.)
    #[test]
    #[ignore]
    fn tshark_dissects_roce_cleanly() {
        let path = std::env::temp_dir().join(format!("ferrdma-fabric-{}.pcap", std::process::id()));
        let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
        for (v6, vlan) in [(false, false), (true, false), (false, true), (true, true)] {
            w.write(&roce(A, B, v6, vlan)).unwrap();
        }
        w.write(&plain(B, A)).unwrap();
        w.flush().unwrap();
        drop(w);
        let out = std::process::Command::new("tshark")
            // Also validate the IPv4 header and UDP checksums the builder wrote.
            .args([
                "-o",
                "ip.check_checksum:TRUE",
                "-o",
                "udp.check_checksum:TRUE",
                "-r",
            ])
            .arg(&path)
            .arg("-V")
            .output()
            .expect("running tshark");
        let text = String::from_utf8_lossy(&out.stdout);
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(text.matches("Base Transport Header").count(), 4, "{text}");
        assert!(!text.contains("Malformed"), "{text}");
        assert!(!text.to_lowercase().contains("incorrect"), "{text}");
        assert!(!text.contains("[Expert Info"), "{text}");
    }
}
