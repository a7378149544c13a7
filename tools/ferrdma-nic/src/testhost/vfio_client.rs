//! A raw vfio-user client for tests: it speaks the wire protocol byte by byte (no library),
//! so a test can send exactly the malformed, oversized or out-of-order messages a hostile
//! client would, with any file descriptors attached.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// vfio-user command numbers (the specification's).
pub mod cmd {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const GET_IRQ_INFO: u16 = 7;
    pub const SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DMA_READ: u16 = 11;
    pub const DEVICE_RESET: u16 = 13;
}

/// Header flag bits.
pub const FLAG_REPLY: u32 = 1;
pub const FLAG_NO_REPLY: u32 = 1 << 4;
pub const FLAG_ERROR: u32 = 1 << 5;
/// Size of the message header.
pub const HEADER: usize = 16;
/// Replies larger than this are not read (the device's largest region is 1 MiB).
const MAX_REPLY: usize = 2 << 20;

/// A reply from the server.
#[derive(Debug)]
pub struct Reply {
    pub id: u16,
    pub command: u16,
    pub flags: u32,
    pub error: u32,
    pub payload: Vec<u8>,
}

impl Reply {
    /// Whether the server answered with an error.
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }
}

/// Encodes a header.
pub fn header(id: u16, command: u16, size: u32, flags: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER);
    h.extend_from_slice(&id.to_le_bytes());
    h.extend_from_slice(&command.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h
}

/// Little-endian field builder for payloads.
#[derive(Default)]
pub struct Payload(pub Vec<u8>);

impl Payload {
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// One connection to a vfio-user server.
pub struct RawClient {
    stream: UnixStream,
    next_id: u16,
}

impl RawClient {
    /// Connects; every read gives up after a few seconds, so a server that hangs fails the
    /// test instead of hanging it.
    pub fn connect(path: &Path) -> std::io::Result<Self> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(Self { stream, next_id: 0 })
    }

    /// A client on an already connected stream (one end of a socket pair), with the same
    /// read timeouts.
    pub fn from_stream(stream: UnixStream) -> std::io::Result<Self> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(Self { stream, next_id: 0 })
    }

    /// Sends raw bytes with `fds` attached (SCM_RIGHTS on the first byte).
    pub fn send_raw(&mut self, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
        if fds.is_empty() {
            return self.stream.write_all(bytes);
        }
        let fd_bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // SAFETY: an all-zero msghdr is valid; the fields are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` bytes, enough for one cmsghdr carrying
        // `fds`; CMSG_FIRSTHDR/CMSG_DATA stay inside it.
        let sent = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
            libc::sendmsg(self.stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
        };
        if sent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sent = sent as usize;
        if sent < bytes.len() {
            self.stream.write_all(&bytes[sent..])?;
        }
        Ok(())
    }

    /// Sends a well-formed message (size = header + payload); returns its id.
    pub fn send(
        &mut self,
        command: u16,
        flags: u32,
        payload: &[u8],
        fds: &[RawFd],
    ) -> std::io::Result<u16> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut msg = header(id, command, (HEADER + payload.len()) as u32, flags);
        msg.extend_from_slice(payload);
        self.send_raw(&msg, fds)?;
        Ok(id)
    }

    /// Reads one reply.
    pub fn recv(&mut self) -> std::io::Result<Reply> {
        let mut h = [0u8; HEADER];
        self.stream.read_exact(&mut h)?;
        let size = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let body = size
            .checked_sub(HEADER)
            .filter(|&b| b <= MAX_REPLY)
            .ok_or_else(|| std::io::Error::other(format!("reply size {size}")))?;
        let mut payload = vec![0u8; body];
        self.stream.read_exact(&mut payload)?;
        Ok(Reply {
            id: u16::from_le_bytes([h[0], h[1]]),
            command: u16::from_le_bytes([h[2], h[3]]),
            flags: u32::from_le_bytes([h[8], h[9], h[10], h[11]]),
            error: u32::from_le_bytes([h[12], h[13], h[14], h[15]]),
            payload,
        })
    }

    /// Sends a message and reads its reply, checking the reply answers it.
    pub fn call(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> Reply {
        let id = self.send(command, 0, payload, fds).expect("send");
        let r = self.recv().expect("the server must answer");
        assert_eq!((r.id, r.command), (id, command), "reply to another message");
        assert!(r.flags & FLAG_REPLY != 0);
        r
    }

    /// The VERSION handshake.
    pub fn handshake(&mut self) {
        let r = self.call(cmd::VERSION, &version_payload(), &[]);
        assert!(!r.is_error(), "VERSION refused: {r:?}");
    }

    /// Whether the server closed the connection (a read returns end of file).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }

    /// Half-closes the connection (the server sees end of file).
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }
}

/// A DMA_MAP payload.
/// The payload of the client's `VERSION`: 0.1, 16 descriptors a message.
pub fn version_payload() -> Vec<u8> {
    let json = b"{\"capabilities\":{\"max_msg_fds\":16}}\0";
    Payload::default().u16(0).u16(1).bytes(json).0
}

pub fn dma_map(flags: u32, offset: u64, iova: u64, size: u64) -> Vec<u8> {
    Payload::default()
        .u32(32)
        .u32(flags)
        .u64(offset)
        .u64(iova)
        .u64(size)
        .0
}

/// A DMA_UNMAP payload.
pub fn dma_unmap(flags: u32, iova: u64, size: u64) -> Vec<u8> {
    Payload::default().u32(24).u32(flags).u64(iova).u64(size).0
}

/// A REGION_READ/REGION_WRITE payload (data follows for a write).
pub fn region(region: u32, offset: u64, count: u32, data: &[u8]) -> Vec<u8> {
    Payload::default()
        .u64(offset)
        .u32(region)
        .u32(count)
        .bytes(data)
        .0
}

/// A SET_IRQS payload.
pub fn set_irqs(flags: u32, index: u32, start: u32, count: u32) -> Vec<u8> {
    Payload::default()
        .u32(20)
        .u32(flags)
        .u32(index)
        .u32(start)
        .u32(count)
        .0
}
