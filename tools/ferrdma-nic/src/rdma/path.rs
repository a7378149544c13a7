//! From a QP's (or AH's) address vector to RoCEv2 frames: source MAC and IP from the GID
//! table entry `sgid_index`, destination from the AV (an IPv4-mapped GID, or
//! `AV_FLAG_IPV4`, means IPv4), UDP source port from `udp_sport`, destination port 4791.
//! Built frames go to the engine's outbox, which the device drains to the fabric.

use std::collections::VecDeque;

use crate::interface::{QpAttrs, AV_FLAG_IPV4, AV_FLAG_VLAN};
use crate::wire::bth::Bth;
use crate::wire::eth::{EthHeader, Vlan};
use crate::wire::ipv4::Ipv4Header;
use crate::wire::ipv6::Ipv6Header;
use crate::wire::{build_as, build_frame, seal, ExtHeaders, Headers, IpHeader, Seal};

use super::transport::{DEFAULT_UDP_SPORT, MAX_OUTBOX, PKEY};
use super::Engine;

/// Whether a GID is an IPv4-mapped address (::ffff:a.b.c.d).
pub fn is_v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// The IPv4-mapped GID of an IPv4 address.
pub fn v4_mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// Why a frame could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PathError {
    #[error("the source GID index has no GID table entry")]
    NoSgid,
    #[error("the port is down")]
    LinkDown,
    #[error("the outbox is full")]
    Full,
    #[error("headers do not fit: {0}")]
    Build(#[from] crate::wire::WireError),
}

/// Why [`Engine::transmit_with`]'s payload could not be written into the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FillError {
    /// Guest memory the payload comes from is not accessible (a DMA fault).
    Fault,
    /// What the payload was for (a WQE, a READ owed) is no longer there.
    Gone,
}

impl Engine {
    /// Whether `gid` is one of this NIC's GIDs (destination served by local loopback).
    pub(super) fn is_local_gid(&self, gid: &[u8; 16]) -> bool {
        self.gids.iter().flatten().any(|g| g.gid == *gid)
    }

    /// Whether the outbox can take `n` more frames.
    pub(super) fn tx_room(&self, n: usize) -> bool {
        self.outbox.len() + n <= MAX_OUTBOX
    }

    /// Whether the outbox is at least half full (of `MAX_OUTBOX`).
    pub fn tx_half_full(&self) -> bool {
        self.outbox.len() >= MAX_OUTBOX / 2
    }

    /// Builds a frame to the path `a` and queues it for the fabric; returns its length.
    pub(super) fn transmit(
        &mut self,
        a: &QpAttrs,
        bth: Bth,
        ext: ExtHeaders,
        payload: &[u8],
    ) -> Result<usize, PathError> {
        let h = self.tx_headers(a, bth, ext)?;
        let frame = build_as(&h, payload, Seal::Deferred)?;
        Ok(self.tx_queue(&h, frame, payload.len()))
    }

    /// Builds a frame to the path `a` whose `len` payload bytes `fill` writes in place (from
    /// guest memory straight into the frame, not into a buffer of its own first) and queues
    /// it; returns its length. `fill` gets the engine back (the headers are made first and
    /// take `&mut self`): what it reads there is as it was before the call. The outer error
    /// is the path's, the inner one `fill`'s (the frame is then dropped, nothing is counted).
    pub(super) fn transmit_with<E>(
        &mut self,
        a: &QpAttrs,
        bth: Bth,
        ext: ExtHeaders,
        len: usize,
        fill: impl FnOnce(&Self, &mut [u8]) -> Result<(), E>,
    ) -> Result<Result<usize, E>, PathError> {
        let h = self.tx_headers(a, bth, ext)?;
        match build_frame(&h, len, |buf| fill(self, buf), Seal::Deferred)? {
            Ok(frame) => Ok(Ok(self.tx_queue(&h, frame, len))),
            Err(e) => Ok(Err(e)),
        }
    }

    /// The headers of the next frame to the path `a` (an IPv4 identification is used up).
    /// Fails while the port is down, the outbox is full or the source GID is gone.
    fn tx_headers(&mut self, a: &QpAttrs, bth: Bth, ext: ExtHeaders) -> Result<Headers, PathError> {
        if !self.port.link_up {
            return Err(PathError::LinkDown);
        }
        if !self.tx_room(1) {
            return Err(PathError::Full);
        }
        let sgid = self
            .gids
            .get(usize::from(a.sgid_index))
            .and_then(Option::as_ref)
            .copied()
            .ok_or(PathError::NoSgid)?;
        let v4 = a.av_flags & AV_FLAG_IPV4 != 0 || is_v4_mapped(&a.dgid);
        let traffic_class = self.tx_traffic_class(a.traffic_class);
        let ip = if v4 {
            self.ip_id = self.ip_id.wrapping_add(1);
            IpHeader::V4(Ipv4Header {
                src: [sgid.gid[12], sgid.gid[13], sgid.gid[14], sgid.gid[15]],
                dst: [a.dgid[12], a.dgid[13], a.dgid[14], a.dgid[15]],
                traffic_class,
                ttl: if a.hop_limit == 0 { 64 } else { a.hop_limit },
                identification: self.ip_id,
            })
        } else {
            IpHeader::V6(Ipv6Header {
                src: sgid.gid,
                dst: a.dgid,
                traffic_class,
                flow_label: a.flow_label & 0xf_ffff,
                hop_limit: if a.hop_limit == 0 { 64 } else { a.hop_limit },
            })
        };
        let src_mac = if sgid.mac == [0; 6] {
            self.port.mac
        } else {
            sgid.mac
        };
        let vlan = av_vlan(a);
        Ok(Headers {
            eth: EthHeader {
                dst: a.dmac,
                src: src_mac,
                vlan,
            },
            ip,
            udp_src_port: if a.udp_sport == 0 {
                DEFAULT_UDP_SPORT
            } else {
                a.udp_sport
            },
            bth: Bth { pkey: PKEY, ..bth },
            ext,
        })
    }

    /// Counts `frame` (built from `h`, `payload_len` payload bytes) and queues it for the
    /// fabric; returns its length.
    fn tx_queue(&mut self, h: &Headers, frame: Vec<u8>, payload_len: usize) -> usize {
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += payload_len as u64;
        let v4 = matches!(h.ip, IpHeader::V4(_));
        self.count_tx(v4, h.eth.vlan.is_some(), frame.len(), h.bth.opcode);
        let len = frame.len();
        self.outbox.push_back(frame);
        len
    }

    /// [`Engine::take_tx_unsealed`], each frame's ICRC written (`wire::seal`).
    pub fn take_tx(&mut self, now_us: u64) -> Vec<Vec<u8>> {
        let mut frames = self.take_tx_unsealed(now_us);
        // Every frame here was built by this engine: sealing cannot fail (if it did, the
        // frame would go without its ICRC and its receiver would drop and count it).
        for f in &mut frames {
            if let Err(e) = seal(f) {
                log::error!("a frame built here cannot be sealed: {e}");
            }
        }
        frames
    }

    /// Frames that may leave for the fabric at `now_us`, oldest first (the caller sends them
    /// in order): all but those of priorities the switch paused (`pause.rs`), which wait.
    /// IPv4 frames come without their ICRC (`wire::Seal::Deferred`): for a switch, which
    /// seals what anything but another engine may see.
    pub fn take_tx_unsealed(&mut self, now_us: u64) -> Vec<Vec<u8>> {
        if !self.tx_pause.any(now_us) {
            return self.outbox.drain(..).collect();
        }
        let mut go = Vec::new();
        let mut held = VecDeque::new();
        for f in self.outbox.drain(..) {
            if self.tx_pause.holds(crate::wire::pfc::priority(&f), now_us) {
                held.push_back(f);
            } else {
                go.push(f);
            }
        }
        self.outbox = held;
        go
    }

    /// Frames held by a pause (`pause.rs`) and when the first of them may leave.
    pub(super) fn held_tx_release(&self, now_us: u64) -> Option<u64> {
        if self.outbox.is_empty() {
            None
        } else {
            self.tx_pause.next_release(now_us)
        }
    }
}

/// The 802.1Q tag of a path: its VLAN with the priority from the traffic class (DSCP's top
/// three bits), if the AV has `AV_FLAG_VLAN`.
pub(super) fn av_vlan(a: &QpAttrs) -> Option<Vlan> {
    (a.av_flags & AV_FLAG_VLAN != 0).then_some(Vlan {
        pcp: a.traffic_class >> 5,
        dei: false,
        vid: a.vlan_id & 0xfff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_mapping() {
        let g = v4_mapped([10, 0, 0, 1]);
        assert!(is_v4_mapped(&g));
        assert_eq!(g[12..], [10, 0, 0, 1]);
        let mut v6 = g;
        v6[0] = 0xfe;
        assert!(!is_v4_mapped(&v6));
    }
}
