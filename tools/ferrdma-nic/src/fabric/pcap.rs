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
/// The shortest snap length a capture may use: Ethernet with an 802.1Q tag, an IPv6 header,
/// UDP, BTH and the longest RoCEv2 extension header stack (RETH + ImmDt) still fit (98 bytes).
pub const MIN_SNAPLEN: u32 = 128;

/// Where the switch records the frames it forwards, and how much of each.
#[derive(Debug, Clone)]
pub struct Capture {
    pub path: std::path::PathBuf,
    /// Bytes kept of each frame, [`MIN_SNAPLEN`]..=[`SNAPLEN`]. A full capture is needed to
    /// check ICRCs; headers alone keep long test runs from writing gigabytes.
    pub snaplen: u32,
}

pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header; frames are kept whole (up to [`SNAPLEN`]).
    pub fn new(out: W) -> io::Result<Self> {
        Self::with_snaplen(out, SNAPLEN)
    }

    /// Write the global header; frames are cut to `snaplen` bytes, which is clamped to
    /// [`MIN_SNAPLEN`]..=[`SNAPLEN`].
    pub fn with_snaplen(mut out: W, snaplen: u32) -> io::Result<Self> {
        let snaplen = snaplen.clamp(MIN_SNAPLEN, SNAPLEN);
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone: UTC
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, snaplen })
    }

    /// Bytes kept of each frame.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Record one frame with an explicit timestamp.
    pub fn write_at(&mut self, frame: &[u8], ts_sec: u32, ts_usec: u32) -> io::Result<()> {
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(self.snaplen);
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

    #[test]
    fn snaplen_cuts_frames_and_is_clamped() {
        let mut w = PcapWriter::with_snaplen(Vec::new(), 200).unwrap();
        let f: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        w.write_at(&f, 1, 2).unwrap();
        let short = plain(A, B);
        w.write_at(&short, 1, 2).unwrap();
        let out = w.into_inner();
        assert_eq!(&out[16..20], &200u32.to_le_bytes());
        assert_eq!(&out[32..36], &200u32.to_le_bytes());
        assert_eq!(&out[36..40], &(f.len() as u32).to_le_bytes());
        assert_eq!(&out[40..240], &f[..200]);
        assert_eq!(&out[240 + 8..240 + 12], &(short.len() as u32).to_le_bytes());
        assert_eq!(out.len(), 240 + 16 + short.len());
        // Hostile or silly values are clamped, never a capture of nothing.
        let w = PcapWriter::with_snaplen(Vec::new(), 0)
            .unwrap()
            .into_inner();
        assert_eq!(&w[16..20], &MIN_SNAPLEN.to_le_bytes());
        let w = PcapWriter::with_snaplen(Vec::new(), u32::MAX)
            .unwrap()
            .into_inner();
        assert_eq!(&w[16..20], &SNAPLEN.to_le_bytes());
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
