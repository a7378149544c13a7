//! QEMU's `-netdev stream` framing: on a stream socket every Ethernet frame is preceded by
//! its length as a 4-byte big-endian integer. The peer is hostile, so the decoder bounds
//! every length before buffering and turns nonsense into an error that closes the port.

use thiserror::Error;

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;

/// Largest frame accepted: a 64 KiB frame (what a 16-bit IP total length allows) plus room
/// for link headers and tags. Nothing real is larger; anything larger is garbage.
pub const MAX_FRAME: usize = 65535 + 64;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum StreamError {
    #[error("stream frame length 0")]
    Empty,
    #[error("stream frame length {0} exceeds the maximum {MAX_FRAME}")]
    TooLong(u32),
    #[error("stream already broken by an earlier bad length")]
    Broken,
}

/// Incremental decoder: feed it whatever `read` returned, take out whole frames. Holds at
/// most one partial frame (bounded by `MAX_FRAME + LEN_PREFIX`).
#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes of the length prefix seen so far.
    prefix: [u8; LEN_PREFIX],
    prefix_len: usize,
    /// The frame being assembled once its length is known.
    frame: Vec<u8>,
    want: usize,
    /// Sticky: once the stream is broken nothing more is decoded.
    failed: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume `data`, calling `on_frame` for every completed frame. On error the stream
    /// cannot be resynchronized: the caller must close the port.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        mut on_frame: impl FnMut(&[u8]),
    ) -> Result<(), StreamError> {
        if self.failed {
            return Err(StreamError::Broken);
        }
        while !data.is_empty() {
            if self.prefix_len < LEN_PREFIX {
                let take = (LEN_PREFIX - self.prefix_len).min(data.len());
                self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
                self.prefix_len += take;
                data = &data[take..];
                if self.prefix_len < LEN_PREFIX {
                    break;
                }
                let len = u32::from_be_bytes(self.prefix);
                if len == 0 {
                    self.failed = true;
                    return Err(StreamError::Empty);
                }
                if len as usize > MAX_FRAME {
                    self.failed = true;
                    return Err(StreamError::TooLong(len));
                }
                self.want = len as usize;
                self.frame.clear();
                continue;
            }
            let take = (self.want - self.frame.len()).min(data.len());
            self.frame.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.frame.len() == self.want {
                on_frame(&self.frame);
                self.prefix_len = 0;
                self.want = 0;
            }
        }
        Ok(())
    }

    /// True when no partial frame is buffered (a clean place for the peer to hang up).
    pub fn is_idle(&self) -> bool {
        self.prefix_len == 0
    }
}

/// Append `frame` with its length prefix to `out`. Refuses what the decoder would refuse.
pub fn encode(frame: &[u8], out: &mut Vec<u8>) -> Result<(), StreamError> {
    if frame.is_empty() {
        return Err(StreamError::Empty);
    }
    if frame.len() > MAX_FRAME {
        return Err(StreamError::TooLong(
            u32::try_from(frame.len()).unwrap_or(u32::MAX),
        ));
    }
    out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    out.extend_from_slice(frame);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Result<(), StreamError>) {
        let mut d = Decoder::new();
        let mut frames = Vec::new();
        for c in chunks {
            if let Err(e) = d.feed(c, |f| frames.push(f.to_vec())) {
                return (frames, Err(e));
            }
        }
        (frames, Ok(()))
    }

    #[test]
    fn prefix_is_big_endian() {
        let mut out = Vec::new();
        encode(&[0xaa; 0x0102], &mut out).unwrap();
        assert_eq!(&out[..4], &[0, 0, 1, 2]);
        assert_eq!(out.len(), 4 + 0x102);
    }

    #[test]
    fn byte_at_a_time() {
        let mut out = Vec::new();
        encode(b"hello", &mut out).unwrap();
        encode(b"x", &mut out).unwrap();
        let chunks: Vec<&[u8]> = out.chunks(1).collect();
        let (frames, r) = decode_all(&chunks);
        assert_eq!(r, Ok(()));
        assert_eq!(frames, vec![b"hello".to_vec(), b"x".to_vec()]);
    }

    #[test]
    fn zero_and_huge_lengths_break_the_stream() {
        assert_eq!(decode_all(&[&[0, 0, 0, 0]]).1, Err(StreamError::Empty));
        let big = (MAX_FRAME as u32 + 1).to_be_bytes();
        assert_eq!(
            decode_all(&[&big]).1,
            Err(StreamError::TooLong(MAX_FRAME as u32 + 1))
        );
        // Sticky: later bytes are not decoded.
        let mut d = Decoder::new();
        assert!(d.feed(&[0xff; 4], |_| {}).is_err());
        let mut n = 0;
        assert!(d.feed(&[0, 0, 0, 1, 7], |_| n += 1).is_err());
        assert_eq!(n, 0);
    }

    #[test]
    fn max_frame_is_accepted_and_one_more_refused_by_encode() {
        let mut out = Vec::new();
        encode(&vec![1u8; MAX_FRAME], &mut out).unwrap();
        let (frames, r) = decode_all(&[&out]);
        assert_eq!(r, Ok(()));
        assert_eq!(frames[0].len(), MAX_FRAME);
        assert!(encode(&vec![1u8; MAX_FRAME + 1], &mut out).is_err());
        assert!(encode(&[], &mut out).is_err());
    }

    #[test]
    fn idle_only_between_frames() {
        let mut d = Decoder::new();
        assert!(d.is_idle());
        d.feed(&[0, 0], |_| {}).unwrap();
        assert!(!d.is_idle());
        d.feed(&[0, 1, 9], |_| {}).unwrap();
        assert!(d.is_idle());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let mut d = Decoder::new();
            let mut rest: &[u8] = &data;
            for c in cuts {
                let at = if rest.is_empty() { 0 } else { c % rest.len() };
                let (a, b) = rest.split_at(at);
                let _ = d.feed(a, |f| assert!(!f.is_empty() && f.len() <= MAX_FRAME));
                rest = b;
            }
            let _ = d.feed(rest, |f| assert!(!f.is_empty() && f.len() <= MAX_FRAME));
        }

        #[test]
        fn round_trip_with_arbitrary_splits(
            frames in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 1..300), 0..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..16),
        ) {
            let mut wire = Vec::new();
            for f in &frames {
                encode(f, &mut wire).unwrap();
            }
            let mut points: Vec<usize> =
                cuts.iter().map(|c| if wire.is_empty() { 0 } else { c % wire.len() }).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(&wire[last..p]);
                last = p;
            }
            chunks.push(&wire[last..]);
            let (got, r) = decode_all(&chunks);
            prop_assert_eq!(r, Ok(()));
            prop_assert_eq!(got, frames);
        }
    }
}
