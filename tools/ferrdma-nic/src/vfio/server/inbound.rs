//! The server's reader: messages out of the socket's byte stream, with the descriptors that
//! came along, reading ahead.
//!
//! QEMU posts every doorbell as a 36-byte `REGION_WRITE`; reading its header and then its
//! payload took two `recvmsg` calls a doorbell, each 1.5-2.5 µs on the hosts we run on (a
//! virtualized host charges several times a bare-metal system call). Here a read takes what
//! the socket holds, up to [`READ_AHEAD`] bytes, so a doorbell costs one call and a burst of
//! them one call for all. A read never waits for bytes the current message does not need:
//! more is read only while a header is incomplete, and a payload larger than what is
//! buffered is read straight into the message's buffer up to its end and no further.
//!
//! Descriptors: the kernel hands out the descriptors sent with a `sendmsg` with the first
//! read that takes any of its bytes, and ends that read after those bytes. So descriptors
//! belong to the message that holds the last byte of the read that brought them: a client
//! that sends each message with one `sendmsg` (QEMU does) gets them attached to that
//! message, as before. Whatever a hostile client does, every descriptor ends up with exactly
//! one message (which closes those it does not take) or is closed when the session ends,
//! and a message with more than [`MAX_MSG_FDS`] ends the session.

use std::collections::VecDeque;
use std::os::fd::{OwnedFd, RawFd};

use super::{recv_chunk, reserve_message, ServerError, SessionStats};
use crate::vfio::protocol::{HEADER_SIZE, MAX_MSG_FDS};

/// Bytes read ahead at most: a hundred doorbells.
pub(super) const READ_AHEAD: usize = 4096;

/// The bytes read and not yet taken, with the descriptors that came with them.
///
/// # Invariants
///
/// `start <= end <= buf.len()`; `taken` is the stream offset of `buf[start]`; the offsets
/// in `fds` increase and each is at most the stream offset of `buf[end]`.
pub(super) struct Inbound {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes of the stream taken so far.
    taken: u64,
    /// Descriptors received, each with the stream offset just past the read that brought
    /// them.
    fds: VecDeque<(u64, Vec<OwnedFd>)>,
}

impl Inbound {
    pub(super) fn new() -> Self {
        Self {
            buf: vec![0; READ_AHEAD].into_boxed_slice(),
            start: 0,
            end: 0,
            taken: 0,
            fds: VecDeque::new(),
        }
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// The next message's header, read as far as it is not buffered; `None` when the client
    /// closed the connection between messages.
    pub(super) fn header(
        &mut self,
        fd: RawFd,
        stats: &mut SessionStats,
    ) -> Result<Option<[u8; HEADER_SIZE]>, ServerError> {
        while self.buffered() < HEADER_SIZE {
            if self.fill(fd, stats)? == 0 {
                return match self.buffered() {
                    0 => Ok(None),
                    got => Err(ServerError::Truncated {
                        got,
                        want: HEADER_SIZE,
                    }),
                };
            }
        }
        let mut raw = [0u8; HEADER_SIZE];
        if let Some(h) = self.buf.get(self.start..self.start + HEADER_SIZE) {
            raw.copy_from_slice(h);
        }
        Ok(Some(raw))
    }

    /// Takes the message whose header [`Inbound::header`] returned: its `len`-byte payload
    /// into `payload` (at most `MAX_MESSAGE` bytes: the caller checked `len`) and its
    /// descriptors.
    pub(super) fn take(
        &mut self,
        fd: RawFd,
        len: usize,
        payload: &mut Vec<u8>,
        stats: &mut SessionStats,
    ) -> Result<Vec<OwnedFd>, ServerError> {
        let end_of_message = self.taken + (HEADER_SIZE + len) as u64;
        self.consume(HEADER_SIZE);
        reserve_message(payload, len, stats)?;
        let from_buf = self.buffered().min(len);
        if let Some(b) = self.buf.get(self.start..self.start + from_buf) {
            payload.extend_from_slice(b);
        }
        self.consume(from_buf);
        // Descriptors of reads that ended within this message (all of them earlier than the
        // reads below).
        let mut fds = Vec::new();
        while self
            .fds
            .front()
            .is_some_and(|(at, _)| *at <= end_of_message)
        {
            if let Some((_, f)) = self.fds.pop_front() {
                fds.extend(f);
            }
        }
        let mut got = from_buf;
        payload.resize(len, 0);
        while let Some(rest) = payload.get_mut(got..).filter(|r| !r.is_empty()) {
            let n = recv_chunk(fd, rest, &mut fds)?;
            stats.reads = stats.reads.saturating_add(1);
            match n {
                0 => return Err(ServerError::Truncated { got, want: len }),
                n => {
                    got += n;
                    self.taken += n as u64;
                }
            }
        }
        if fds.len() > MAX_MSG_FDS {
            return Err(ServerError::TooManyFds);
        }
        Ok(fds)
    }

    fn consume(&mut self, n: usize) {
        let n = n.min(self.buffered());
        self.start += n;
        self.taken += n as u64;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// One read into the free end of the buffer (moving what is buffered to its front
    /// first); returns how many bytes came (0: the client closed the connection).
    fn fill(&mut self, fd: RawFd, stats: &mut SessionStats) -> Result<usize, ServerError> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let mut fds = Vec::new();
        let room = self.buf.get_mut(self.end..).unwrap_or_default();
        let n = recv_chunk(fd, room, &mut fds)?;
        stats.reads = stats.reads.saturating_add(1);
        self.end += n;
        if !fds.is_empty() {
            let at = self.taken + self.buffered() as u64;
            self.fds.push_back((at, fds));
        }
        Ok(n)
    }
}
