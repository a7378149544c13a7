//! The vfio-user server: reads one client's messages from a Unix stream socket, answers the
//! protocol's own questions (version, device, region and irq info) from fixed tables and
//! hands everything the device does to a [`ServerBackend`].
//!
//! The client is hostile. The rules, in the order they apply to each message:
//!
//! * The 16-byte header is read first (with any file descriptors sent along: at most
//!   [`MAX_MSG_FDS`] per message, more end the connection; the kernel closes the excess).
//!   Reads take what the socket holds, up to 4 KiB, so several small messages cost one
//!   read; descriptors go with the message that holds the last byte of the read that
//!   brought them (see `server/inbound.rs`).
//! * Its message size must lie in `16..=`[`MAX_MESSAGE`] (1 MiB of data plus the region
//!   access structure) before anything is allocated; otherwise the message cannot be
//!   delimited, so the server sends an error reply and ends the connection.
//! * The payload is read into a buffer of that size (reused from message to message),
//!   then parsed ([`crate::vfio::protocol::parse`]): a short payload, an unknown command, a
//!   reply or a region access count above the limit or not matching the data is refused
//!   with an error reply (the message boundary is known, so the session goes on).
//! * `VERSION` must come first and only once; region and irq indices are checked against the
//!   tables; `DMA_MAP` takes at most one file descriptor, `SET_IRQS` gets all of them, every
//!   other command's file descriptors are closed.
//! * A command sent with *No_reply* gets no reply, also when it fails (QEMU posts region
//!   writes that way and has no request to match a reply to); the commands whose reply is
//!   the answer are refused when sent without one.
//!
//! Nothing here panics on client input: no indexing that can fail, no unchecked arithmetic
//! on client values, no allocation larger than [`MAX_MESSAGE`].

use std::fs::File;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};

use thiserror::Error;
use vfio_bindings::bindings::vfio::{VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET};

use crate::vfio::protocol::{
    check_size, error_reply, parse, reply_header, server_capabilities, Header, Out, ProtocolError,
    Request, HEADER_SIZE, MAX_MESSAGE, MAX_MSG_FDS, REGION_ACCESS_SIZE, VERSION_MAJOR,
    VERSION_MINOR,
};
pub use crate::vfio::protocol::{DmaMapFlags, DmaUnmapFlags};

/// What the device does for the client's commands. Every argument comes from the client
/// unchecked, except that region and irq indices exist in the server's tables and region
/// access data is at most [`crate::vfio::protocol::MAX_DATA_XFER`] bytes.
pub trait ServerBackend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()>;
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()>;
    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()>;
    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()>;
    fn reset(&mut self) -> io::Result<()>;
    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()>;
}

/// One irq index as `GET_IRQ_INFO` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqInfo {
    pub index: u32,
    pub flags: u32,
    pub count: u32,
}

/// One region as `DEVICE_GET_REGION_INFO` reports it (no capabilities, not mmap-able).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRegion {
    pub index: u32,
    pub flags: u32,
    pub size: u64,
}

/// Why a connection ended other than by the client closing it between messages.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("accepting a client: {0}")]
    Accept(#[source] io::Error),
    #[error("receiving: {0}")]
    Recv(#[source] io::Error),
    #[error("sending a reply: {0}")]
    Send(#[source] io::Error),
    #[error("the client closed the connection inside a message ({got} of {want} bytes)")]
    Truncated { got: usize, want: usize },
    #[error("undelimitable message: {0}")]
    Framing(#[source] ProtocolError),
    #[error("more than {MAX_MSG_FDS} file descriptors with one message")]
    TooManyFds,
    #[error("cannot allocate {0} bytes")]
    Alloc(usize),
}

/// What one session did (tests check the allocation bound with it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SessionStats {
    /// Messages read completely.
    pub messages: u64,
    /// Of those, refused (error reply, or none for a *No_reply* command).
    pub refused: u64,
    /// The largest buffer allocated for a message or a reply.
    pub largest_buffer: usize,
    /// Reads from the socket (`recvmsg` calls that returned).
    pub reads: u64,
}

/// Why one command failed; the session goes on.
#[derive(Debug, Error)]
enum Refusal {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("device: {0}")]
    Backend(#[from] io::Error),
}

impl Refusal {
    fn errno(&self) -> i32 {
        match self {
            Self::Protocol(e) => e.errno(),
            Self::Backend(e) => e.raw_os_error().filter(|&n| n > 0).unwrap_or(libc::EINVAL),
        }
    }
}

/// The server for one device: its region and irq tables.
#[derive(Debug, Clone)]
pub struct Server {
    irqs: Vec<IrqInfo>,
    regions: Vec<ServerRegion>,
    page_size: u64,
}

impl Server {
    /// A server reporting `irqs` and `regions` (each indexed by position).
    pub fn new(irqs: Vec<IrqInfo>, regions: Vec<ServerRegion>) -> Self {
        // SAFETY: sysconf has no memory effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Self {
            irqs,
            regions,
            page_size: u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096),
        }
    }

    /// Serves the first client that connects to `listener`, until it disconnects.
    pub fn run(
        &self,
        listener: &UnixListener,
        backend: &mut dyn ServerBackend,
    ) -> Result<(), ServerError> {
        let (stream, _) = listener.accept().map_err(ServerError::Accept)?;
        self.serve(&stream, backend)
    }

    /// Serves one connected client until it closes the connection (`Ok`) or the
    /// connection has to end (`Err`).
    pub fn serve(
        &self,
        stream: &UnixStream,
        backend: &mut dyn ServerBackend,
    ) -> Result<(), ServerError> {
        self.serve_with_stats(stream, backend, &mut SessionStats::default())
    }

    /// [`Server::serve`], recording what the session did in `stats`.
    pub fn serve_with_stats(
        &self,
        stream: &UnixStream,
        backend: &mut dyn ServerBackend,
        stats: &mut SessionStats,
    ) -> Result<(), ServerError> {
        let mut session = Session {
            server: self,
            fd: stream.as_raw_fd(),
            backend,
            negotiated: false,
            stats,
            inbound: Inbound::new(),
            payload: Vec::new(),
        };
        while session.next_message()? {}
        log::debug!("vfio-user: client closed the connection");
        Ok(())
    }

    fn region(&self, index: u32) -> Result<&ServerRegion, ProtocolError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.regions.get(i))
            .ok_or(ProtocolError::NoSuchRegion(index))
    }

    fn irq(&self, index: u32) -> Result<&IrqInfo, ProtocolError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.irqs.get(i))
            .ok_or(ProtocolError::NoSuchIrq(index))
    }
}

/// One client connection.
struct Session<'a> {
    server: &'a Server,
    fd: RawFd,
    backend: &'a mut dyn ServerBackend,
    /// `VERSION` was accepted.
    negotiated: bool,
    stats: &'a mut SessionStats,
    /// The bytes read from the socket and not yet taken.
    inbound: Inbound,
    /// The current message's payload (its allocation reused).
    payload: Vec<u8>,
}

impl Session<'_> {
    /// Reads and answers one message; `false` when the client closed the connection
    /// between messages.
    fn next_message(&mut self) -> Result<bool, ServerError> {
        let Some(raw) = self.inbound.header(self.fd, self.stats)? else {
            return Ok(false);
        };
        let h = Header::decode(&raw);
        let len = match check_size(&h) {
            Ok(len) => len,
            Err(e) => {
                log::warn!("vfio-user: command {} id {}: {e}", h.command, h.id);
                // Best effort: the connection ends either way.
                let _ = send_all(self.fd, &error_reply(&h, e.errno()));
                return Err(ServerError::Framing(e));
            }
        };
        // The payload buffer is kept from message to message (a doorbell allocated one).
        let mut payload = std::mem::take(&mut self.payload);
        let fds = self.inbound.take(self.fd, len, &mut payload, self.stats)?;
        self.stats.messages = self.stats.messages.saturating_add(1);
        let handled = self.handle(&h, &payload, fds);
        self.payload = payload;
        handled?;
        Ok(true)
    }

    /// Answers one complete message (or refuses it).
    fn handle(&mut self, h: &Header, payload: &[u8], fds: Vec<OwnedFd>) -> Result<(), ServerError> {
        match self.answer(h, payload, fds) {
            Ok(reply) if !h.no_reply() => send_all(self.fd, &reply),
            Ok(_) => Ok(()),
            Err(e) => {
                self.stats.refused = self.stats.refused.saturating_add(1);
                log::debug!("vfio-user: command {} id {} refused: {e}", h.command, h.id);
                // A command sent without wanting a reply gets none, also on failure,
                // unless the missing reply is the refusal's reason.
                let silent = h.no_reply()
                    && !matches!(
                        e,
                        Refusal::Protocol(
                            ProtocolError::NoReplyRefused(_) | ProtocolError::NotACommand(_)
                        )
                    );
                if silent {
                    Ok(())
                } else {
                    send_all(self.fd, &error_reply(h, e.errno()))
                }
            }
        }
    }

    /// Checks the session state and the fds a command may take, then runs it.
    fn answer(
        &mut self,
        h: &Header,
        payload: &[u8],
        mut fds: Vec<OwnedFd>,
    ) -> Result<Vec<u8>, Refusal> {
        let req = parse(h, payload)?;
        match (&req, self.negotiated) {
            (Request::Version { .. }, true) => return Err(ProtocolError::VersionAgain.into()),
            (Request::Version { .. }, false) => {}
            (_, false) => return Err(ProtocolError::NotNegotiated(h.command).into()),
            (_, true) => {}
        }
        let takes_fds = matches!(req, Request::DmaMap { .. } | Request::SetIrqs { .. });
        if !takes_fds && !fds.is_empty() {
            log::debug!(
                "vfio-user: command {}: closing {} file descriptors it does not take",
                h.command,
                fds.len()
            );
            fds.clear();
        }
        self.run(h, req, fds)
    }

    /// The full reply (header included) to a command.
    fn run(
        &mut self,
        h: &Header,
        req: Request<'_>,
        mut fds: Vec<OwnedFd>,
    ) -> Result<Vec<u8>, Refusal> {
        let server = self.server;
        let reply = |out: Out| reply_bytes(h, &out.0);
        match req {
            Request::Version { .. } => {
                self.negotiated = true;
                // The reply's minor version may not exceed the client's; ours is 0.
                let out = Out::default()
                    .u16(VERSION_MAJOR)
                    .u16(VERSION_MINOR)
                    .bytes(&server_capabilities(server.page_size));
                Ok(reply(out))
            }
            Request::DmaMap {
                flags,
                offset,
                address,
                size,
            } => {
                if fds.len() > 1 {
                    return Err(ProtocolError::TooManyFds(fds.len()).into());
                }
                let fd = fds.pop().map(File::from);
                self.backend.dma_map(flags, offset, address, size, fd)?;
                Ok(reply(Out::default()))
            }
            Request::DmaUnmap {
                argsz,
                flags,
                address,
                size,
            } => {
                self.backend.dma_unmap(flags, address, size)?;
                let out = Out::default()
                    .u32(argsz)
                    .u32(flags.bits())
                    .u64(address)
                    .u64(size);
                Ok(reply(out))
            }
            Request::DeviceGetInfo => {
                let out = Out::default()
                    .u32(16)
                    .u32(VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET)
                    .u32(table_len(server.regions.len()))
                    .u32(table_len(server.irqs.len()));
                Ok(reply(out))
            }
            Request::GetRegionInfo { index } => {
                let r = server.region(index)?;
                let out = Out::default()
                    .u32(32)
                    .u32(r.flags)
                    .u32(r.index)
                    .u32(0)
                    .u64(r.size)
                    .u64(0);
                Ok(reply(out))
            }
            Request::GetIrqInfo { index } => {
                let irq = server.irq(index)?;
                let out = Out::default()
                    .u32(16)
                    .u32(irq.flags)
                    .u32(irq.index)
                    .u32(irq.count);
                Ok(reply(out))
            }
            Request::SetIrqs {
                flags,
                index,
                start,
                count,
            } => {
                server.irq(index)?;
                let files = fds.into_iter().map(File::from).collect();
                self.backend.set_irqs(index, flags, start, count, files)?;
                Ok(reply(Out::default()))
            }
            Request::RegionRead {
                offset,
                region,
                count,
            } => {
                server.region(region)?;
                self.read_reply(h, offset, region, count)
            }
            Request::RegionWrite {
                offset,
                region,
                data,
            } => {
                server.region(region)?;
                self.backend.region_write(region, offset, data)?;
                let count = u32::try_from(data.len()).unwrap_or(u32::MAX);
                Ok(reply(Out::default().u64(offset).u32(region).u32(count)))
            }
            Request::DeviceReset => {
                self.backend.reset()?;
                Ok(reply(Out::default()))
            }
        }
    }

    /// The reply to a `REGION_READ` of `count` (at most `MAX_DATA_XFER`) bytes, read by
    /// the backend straight into the reply buffer.
    fn read_reply(
        &mut self,
        h: &Header,
        offset: u64,
        region: u32,
        count: u32,
    ) -> Result<Vec<u8>, Refusal> {
        let n = usize::try_from(count).map_err(|_| ProtocolError::CountTooBig(count))?;
        let fixed = HEADER_SIZE + REGION_ACCESS_SIZE;
        let total = fixed.saturating_add(n);
        let mut out = buffer(total, self.stats).map_err(|_| ProtocolError::CountTooBig(count))?;
        let head = Out::default()
            .bytes(&reply_header(h, REGION_ACCESS_SIZE.saturating_add(n)).encode())
            .u64(offset)
            .u32(region)
            .u32(count);
        if let Some(dst) = out.get_mut(..fixed) {
            dst.copy_from_slice(&head.0);
        }
        if let Some(data) = out.get_mut(fixed..) {
            self.backend.region_read(region, offset, data)?;
        }
        Ok(out)
    }
}

fn table_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A reply: header for `h`, then `payload`.
fn reply_bytes(h: &Header, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_SIZE.saturating_add(payload.len()));
    out.extend_from_slice(&reply_header(h, payload.len()).encode());
    out.extend_from_slice(payload);
    out
}

/// Empties `b` and makes room in it for a message of `len` bytes, `len` at most
/// [`MAX_MESSAGE`]; allocation failure is an error, not an abort.
fn reserve_message(
    b: &mut Vec<u8>,
    len: usize,
    stats: &mut SessionStats,
) -> Result<(), ServerError> {
    if len > MAX_MESSAGE {
        return Err(ServerError::Alloc(len));
    }
    b.clear();
    b.try_reserve_exact(len)
        .map_err(|_| ServerError::Alloc(len))?;
    stats.largest_buffer = stats.largest_buffer.max(b.capacity());
    Ok(())
}

/// A zeroed buffer of `len` bytes, `len` at most [`MAX_MESSAGE`]; allocation failure is an
/// error, not an abort.
fn buffer(len: usize, stats: &mut SessionStats) -> Result<Vec<u8>, ServerError> {
    let mut b = Vec::new();
    reserve_message(&mut b, len, stats)?;
    b.resize(len, 0);
    Ok(b)
}

/// Sends all of `bytes` (no SIGPIPE if the client is gone).
fn send_all(fd: RawFd, mut bytes: &[u8]) -> Result<(), ServerError> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of its length; `fd` is the connected socket.
        let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ServerError::Send(e));
        }
        let n = usize::try_from(n).unwrap_or(0);
        if n == 0 {
            return Err(ServerError::Send(io::ErrorKind::WriteZero.into()));
        }
        bytes = bytes.get(n..).unwrap_or(&[]);
    }
    Ok(())
}

/// Room for the control message of [`MAX_MSG_FDS`] descriptors (CMSG_SPACE(64) is 80 bytes
/// on Linux), 8-byte aligned.
const CONTROL_WORDS: usize = 16;

/// One `recvmsg` into `buf`. Every descriptor received becomes an [`OwnedFd`] before
/// anything else is checked, so every exit closes what it does not keep. More than
/// [`MAX_MSG_FDS`] with one message, or a truncated control message (the kernel closes
/// what did not fit), is an error.
fn recv_chunk(fd: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<usize, ServerError> {
    let mut control = [0u64; CONTROL_WORDS];
    let fd_bytes = u32::try_from(MAX_MSG_FDS * size_of::<libc::c_int>()).unwrap_or(u32::MAX);
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let space = space.min(size_of::<[u64; CONTROL_WORDS]>());
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the fields used are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: msg points at `iov` (covering `buf`) and `control` (`space` bytes), which
        // outlive the call.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r >= 0 {
            break usize::try_from(r).unwrap_or(0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(ServerError::Recv(e));
        }
    };
    take_fds(&msg, fds);
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > MAX_MSG_FDS {
        return Err(ServerError::TooManyFds);
    }
    Ok(n)
}

/// Moves the descriptors of every `SCM_RIGHTS` control message in `msg` into `fds`.
fn take_fds(msg: &libc::msghdr, fds: &mut Vec<OwnedFd>) {
    // SAFETY: the CMSG_* macros walk the control buffer `recvmsg` filled in and stop at
    // its end (msg_controllen is what the kernel wrote); every descriptor in an
    // SCM_RIGHTS message is a new open descriptor this process owns.
    unsafe {
        let header = libc::CMSG_LEN(0) as usize;
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let len = ((*c).cmsg_len as usize).saturating_sub(header);
                let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                for i in 0..len / size_of::<libc::c_int>() {
                    let raw = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

mod inbound;
use inbound::Inbound;

#[cfg(test)]
mod tests;
