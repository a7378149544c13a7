//! The vfio-user wire format (QEMU's `docs/interop/vfio-user.rst`): the message header,
//! the command payloads this server accepts, and the replies it sends.
//!
//! Nothing here does I/O. [`check_size`] decides from a header alone whether a message can
//! be read at all; [`parse`] turns a complete payload into a [`Request`] or says why it is
//! refused. Every length is checked before a field is read, and every size a client
//! declares is compared with a fixed limit before anything is allocated for it.
//!
//! All integers are in the host's byte order, as the specification says.

use thiserror::Error;

/// Size of the message header.
pub const HEADER_SIZE: usize = 16;
/// Largest `count` of a `REGION_READ`/`REGION_WRITE` (advertised as `max_data_xfer_size`;
/// also the size of the largest region).
pub const MAX_DATA_XFER: u32 = 1 << 20;
/// Largest `VERSION` capability string, terminating NUL included.
pub const MAX_VERSION_DATA: usize = 4096;
/// File descriptors received with one message (advertised as `max_msg_fds`).
pub const MAX_MSG_FDS: usize = 16;
/// Size of the region access structure (offset, region, count) before the data.
pub const REGION_ACCESS_SIZE: usize = 16;
/// Largest message accepted: a `REGION_WRITE` of [`MAX_DATA_XFER`] bytes.
pub const MAX_MESSAGE: usize = HEADER_SIZE + REGION_ACCESS_SIZE + MAX_DATA_XFER as usize;

/// The only protocol major version there is.
pub const VERSION_MAJOR: u16 = 0;
/// The minor version this server speaks.
pub const VERSION_MINOR: u16 = 0;

/// Header flags.
pub mod flags {
    /// The message type bits (0-3).
    pub const TYPE_MASK: u32 = 0xf;
    /// Type: a command.
    pub const COMMAND: u32 = 0;
    /// Type: a reply.
    pub const REPLY: u32 = 1;
    /// The sender wants no reply.
    pub const NO_REPLY: u32 = 1 << 4;
    /// The reply reports an error (in the header's error field).
    pub const ERROR: u32 = 1 << 5;
}

/// Command numbers.
pub mod cmd {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const GET_IRQ_INFO: u16 = 7;
    pub const SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DEVICE_RESET: u16 = 13;
}

/// `DMA_MAP` flags as the client sends them (unknown bits are kept for the device to
/// refuse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaMapFlags(pub u32);

impl DmaMapFlags {
    /// The device may read the range.
    pub const READ: u32 = 1 << 0;
    /// The device may write the range.
    pub const WRITE: u32 = 1 << 1;

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

/// `DMA_UNMAP` flags as the client sends them, with VFIO's values (`linux/vfio.h`), which
/// are what QEMU sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaUnmapFlags(pub u32);

impl DmaUnmapFlags {
    /// `VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP`: not supported.
    pub const GET_DIRTY_BITMAP: u32 = 1 << 0;
    /// `VFIO_DMA_UNMAP_FLAG_ALL`: unmap everything (address and size must be 0).
    pub const ALL: u32 = 1 << 1;

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

/// The message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub id: u16,
    pub command: u16,
    /// Size of the whole message, header included.
    pub size: u32,
    pub flags: u32,
    pub error: u32,
}

impl Header {
    /// Decodes a header (any 16 bytes are a header; [`check_size`] and [`parse`] judge it).
    pub fn decode(b: &[u8; HEADER_SIZE]) -> Self {
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            id: u16_at(0),
            command: u16_at(2),
            size: u32_at(4),
            flags: u32_at(8),
            error: u32_at(12),
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..2].copy_from_slice(&self.id.to_ne_bytes());
        b[2..4].copy_from_slice(&self.command.to_ne_bytes());
        b[4..8].copy_from_slice(&self.size.to_ne_bytes());
        b[8..12].copy_from_slice(&self.flags.to_ne_bytes());
        b[12..16].copy_from_slice(&self.error.to_ne_bytes());
        b
    }

    /// Whether the client asked for no reply.
    pub fn no_reply(&self) -> bool {
        self.flags & flags::NO_REPLY != 0
    }
}

/// Why a message is refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("message size {0} is smaller than the header")]
    SizeBelowHeader(u32),
    #[error("message size {0} exceeds the limit of {MAX_MESSAGE} bytes")]
    SizeTooBig(u32),
    #[error("message type {0:#x} is not a command")]
    NotACommand(u32),
    #[error("command {0} is not supported")]
    UnsupportedCommand(u16),
    #[error("command {command}: payload of {len} bytes, at least {min} expected")]
    Short {
        command: u16,
        len: usize,
        min: usize,
    },
    #[error("command {0}: no reply was asked for, but the reply is the answer")]
    NoReplyRefused(u16),
    #[error("VERSION: major version {0} is not supported")]
    VersionMajor(u16),
    #[error("VERSION: {0} bytes of capabilities, at most {MAX_VERSION_DATA}")]
    VersionDataTooBig(usize),
    #[error("VERSION: the capabilities are not one NUL-terminated UTF-8 string")]
    VersionData,
    #[error("VERSION: the version is already negotiated")]
    VersionAgain,
    #[error("command {0} before VERSION")]
    NotNegotiated(u16),
    #[error("count {0:#x} exceeds the limit of {MAX_DATA_XFER:#x} bytes")]
    CountTooBig(u32),
    #[error("REGION_WRITE: count {count:#x} but {data:#x} bytes of data")]
    CountMismatch { count: u32, data: usize },
    #[error("region index {0} does not exist")]
    NoSuchRegion(u32),
    #[error("irq index {0} does not exist")]
    NoSuchIrq(u32),
    #[error("DMA_MAP with {0} file descriptors, at most 1")]
    TooManyFds(usize),
}

impl ProtocolError {
    /// The errno a refused request's error reply carries.
    pub fn errno(&self) -> i32 {
        match self {
            Self::SizeTooBig(_) | Self::CountTooBig(_) | Self::VersionDataTooBig(_) => libc::E2BIG,
            Self::UnsupportedCommand(_) => libc::EOPNOTSUPP,
            Self::VersionMajor(_) => libc::ENOTSUP,
            _ => libc::EINVAL,
        }
    }
}

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Version {
        major: u16,
        minor: u16,
    },
    DmaMap {
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
    },
    DmaUnmap {
        argsz: u32,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    },
    DeviceGetInfo,
    GetRegionInfo {
        index: u32,
    },
    GetIrqInfo {
        index: u32,
    },
    SetIrqs {
        flags: u32,
        index: u32,
        start: u32,
        count: u32,
    },
    RegionRead {
        offset: u64,
        region: u32,
        count: u32,
    },
    RegionWrite {
        offset: u64,
        region: u32,
        data: &'a [u8],
    },
    DeviceReset,
}

/// The payload size of the message `h` heads, if it can be read: between
/// [`HEADER_SIZE`] and [`MAX_MESSAGE`]. Otherwise the message cannot even be skipped and
/// the connection has to end.
pub fn check_size(h: &Header) -> Result<usize, ProtocolError> {
    let size = usize::try_from(h.size).map_err(|_| ProtocolError::SizeTooBig(h.size))?;
    if size > MAX_MESSAGE {
        return Err(ProtocolError::SizeTooBig(h.size));
    }
    size.checked_sub(HEADER_SIZE)
        .ok_or(ProtocolError::SizeBelowHeader(h.size))
}

/// Host-order field reader over a payload whose length was checked.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn new(command: u16, b: &'a [u8], min: usize) -> Result<Self, ProtocolError> {
        if b.len() < min {
            return Err(ProtocolError::Short {
                command,
                len: b.len(),
                min,
            });
        }
        Ok(Self { b, at: 0 })
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        // `new` checked the length for every field read; a short slice here would be a
        // bug, and it yields zeros rather than a panic.
        if let Some(s) = self.b.get(self.at..self.at.saturating_add(N)) {
            out.copy_from_slice(s);
        }
        self.at = self.at.saturating_add(N);
        out
    }

    fn u16(&mut self) -> u16 {
        u16::from_ne_bytes(self.take())
    }

    fn u32(&mut self) -> u32 {
        u32::from_ne_bytes(self.take())
    }

    fn u64(&mut self) -> u64 {
        u64::from_ne_bytes(self.take())
    }

    /// The bytes after the fields read so far.
    fn rest(&self) -> &'a [u8] {
        self.b.get(self.at..).unwrap_or(&[])
    }
}

/// Parses a command's payload. Fixed-size payloads may be longer than their structure
/// (trailing bytes are ignored, as a later minor version may extend a structure), never
/// shorter. Region and irq indices are checked by the server, which knows the tables.
pub fn parse<'a>(h: &Header, payload: &'a [u8]) -> Result<Request<'a>, ProtocolError> {
    if h.flags & flags::TYPE_MASK != flags::COMMAND {
        return Err(ProtocolError::NotACommand(h.flags & flags::TYPE_MASK));
    }
    let c = h.command;
    let answer_needed = |r: Request<'a>| {
        if h.no_reply() {
            Err(ProtocolError::NoReplyRefused(c))
        } else {
            Ok(r)
        }
    };
    match c {
        cmd::VERSION => answer_needed(parse_version(payload)?),
        cmd::DMA_MAP => {
            let mut f = Fields::new(c, payload, 32)?;
            let _argsz = f.u32();
            Ok(Request::DmaMap {
                flags: DmaMapFlags(f.u32()),
                offset: f.u64(),
                address: f.u64(),
                size: f.u64(),
            })
        }
        cmd::DMA_UNMAP => {
            let mut f = Fields::new(c, payload, 24)?;
            Ok(Request::DmaUnmap {
                argsz: f.u32(),
                flags: DmaUnmapFlags(f.u32()),
                address: f.u64(),
                size: f.u64(),
            })
        }
        cmd::DEVICE_GET_INFO => {
            Fields::new(c, payload, 16)?;
            answer_needed(Request::DeviceGetInfo)
        }
        cmd::DEVICE_GET_REGION_INFO => {
            let mut f = Fields::new(c, payload, 32)?;
            let (_argsz, _flags) = (f.u32(), f.u32());
            answer_needed(Request::GetRegionInfo { index: f.u32() })
        }
        cmd::GET_IRQ_INFO => {
            let mut f = Fields::new(c, payload, 16)?;
            let (_argsz, _flags) = (f.u32(), f.u32());
            answer_needed(Request::GetIrqInfo { index: f.u32() })
        }
        cmd::SET_IRQS => {
            let mut f = Fields::new(c, payload, 20)?;
            let _argsz = f.u32();
            Ok(Request::SetIrqs {
                flags: f.u32(),
                index: f.u32(),
                start: f.u32(),
                count: f.u32(),
            })
        }
        cmd::REGION_READ => {
            let mut f = Fields::new(c, payload, REGION_ACCESS_SIZE)?;
            let (offset, region, count) = (f.u64(), f.u32(), f.u32());
            if count > MAX_DATA_XFER {
                return Err(ProtocolError::CountTooBig(count));
            }
            answer_needed(Request::RegionRead {
                offset,
                region,
                count,
            })
        }
        cmd::REGION_WRITE => {
            let mut f = Fields::new(c, payload, REGION_ACCESS_SIZE)?;
            let (offset, region, count) = (f.u64(), f.u32(), f.u32());
            if count > MAX_DATA_XFER {
                return Err(ProtocolError::CountTooBig(count));
            }
            let data = f.rest();
            if usize::try_from(count).ok() != Some(data.len()) {
                return Err(ProtocolError::CountMismatch {
                    count,
                    data: data.len(),
                });
            }
            Ok(Request::RegionWrite {
                offset,
                region,
                data,
            })
        }
        cmd::DEVICE_RESET => Ok(Request::DeviceReset),
        other => Err(ProtocolError::UnsupportedCommand(other)),
    }
}

/// `VERSION`: major and minor, then optionally a NUL-terminated UTF-8 JSON string. The
/// string is checked for its shape only: nothing the client offers changes what this
/// server does.
fn parse_version(payload: &[u8]) -> Result<Request<'_>, ProtocolError> {
    let mut f = Fields::new(cmd::VERSION, payload, 4)?;
    let (major, minor) = (f.u16(), f.u16());
    if major != VERSION_MAJOR {
        return Err(ProtocolError::VersionMajor(major));
    }
    let data = f.rest();
    if data.len() > MAX_VERSION_DATA {
        return Err(ProtocolError::VersionDataTooBig(data.len()));
    }
    if !data.is_empty() {
        let Some((&0, text)) = data.split_last() else {
            return Err(ProtocolError::VersionData);
        };
        if text.contains(&0) || std::str::from_utf8(text).is_err() {
            return Err(ProtocolError::VersionData);
        }
    }
    Ok(Request::Version { major, minor })
}

/// A reply header for `h` carrying `payload_len` bytes after the header.
pub fn reply_header(h: &Header, payload_len: usize) -> Header {
    Header {
        id: h.id,
        command: h.command,
        // Replies are at most HEADER_SIZE + REGION_ACCESS_SIZE + MAX_DATA_XFER bytes.
        size: u32::try_from(HEADER_SIZE.saturating_add(payload_len)).unwrap_or(u32::MAX),
        flags: flags::REPLY,
        error: 0,
    }
}

/// An error reply to `h`: a bare header.
pub fn error_reply(h: &Header, errno: i32) -> [u8; HEADER_SIZE] {
    Header {
        id: h.id,
        command: h.command,
        size: HEADER_SIZE as u32,
        flags: flags::REPLY | flags::ERROR,
        error: u32::try_from(errno).unwrap_or(libc::EINVAL as u32),
    }
    .encode()
}

/// Host-order payload builder for replies.
#[derive(Debug, Default)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// The capabilities this server advertises in its `VERSION` reply, NUL-terminated.
pub fn server_capabilities(page_size: u64) -> Vec<u8> {
    let mut s = format!(
        "{{\"capabilities\":{{\"max_msg_fds\":{MAX_MSG_FDS},\
         \"max_data_xfer_size\":{MAX_DATA_XFER},\"migration\":{{\"pgsize\":{page_size}}}}}}}"
    )
    .into_bytes();
    s.push(0);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(command: u16, payload_len: usize, fl: u32) -> Header {
        Header {
            id: 7,
            command,
            size: (HEADER_SIZE + payload_len) as u32,
            flags: fl,
            error: 0,
        }
    }

    fn p(command: u16, payload: &[u8]) -> Result<Request<'_>, ProtocolError> {
        parse(&hdr(command, payload.len(), 0), payload)
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn header_round_trips_and_sizes_are_checked_before_anything_is_read() {
        let h = Header {
            id: 0xbeef,
            command: 10,
            size: 48,
            flags: flags::NO_REPLY,
            error: 5,
        };
        assert_eq!(Header::decode(&h.encode()), h);
        assert!(h.no_reply());
        for (size, want) in [
            (0u32, Err(ProtocolError::SizeBelowHeader(0))),
            (15, Err(ProtocolError::SizeBelowHeader(15))),
            (16, Ok(0)),
            (17, Ok(1)),
            (MAX_MESSAGE as u32, Ok(MAX_MESSAGE - HEADER_SIZE)),
            (
                MAX_MESSAGE as u32 + 1,
                Err(ProtocolError::SizeTooBig(MAX_MESSAGE as u32 + 1)),
            ),
            (u32::MAX, Err(ProtocolError::SizeTooBig(u32::MAX))),
        ] {
            let h = Header { size, ..h };
            assert_eq!(check_size(&h), want, "size {size}");
        }
        assert_eq!(ProtocolError::SizeTooBig(u32::MAX).errno(), libc::E2BIG);
        assert_eq!(ProtocolError::SizeBelowHeader(3).errno(), libc::EINVAL);
    }

    #[test]
    fn every_command_parses_with_its_fixed_part_and_not_without() {
        let map = [
            words(&[32, 3]),
            1u64.to_ne_bytes().to_vec(),
            2u64.to_ne_bytes().to_vec(),
            3u64.to_ne_bytes().to_vec(),
        ]
        .concat();
        let unmap = [
            words(&[24, 2]),
            4u64.to_ne_bytes().to_vec(),
            5u64.to_ne_bytes().to_vec(),
        ]
        .concat();
        let access = |region: u32, count: u32| {
            [9u64.to_ne_bytes().to_vec(), words(&[region, count])].concat()
        };
        let cases: Vec<(u16, Vec<u8>, Request<'static>)> = vec![
            (
                cmd::VERSION,
                [0u16.to_ne_bytes(), 1u16.to_ne_bytes()].concat(),
                Request::Version { major: 0, minor: 1 },
            ),
            (
                cmd::DMA_MAP,
                map,
                Request::DmaMap {
                    flags: DmaMapFlags(3),
                    offset: 1,
                    address: 2,
                    size: 3,
                },
            ),
            (
                cmd::DMA_UNMAP,
                unmap,
                Request::DmaUnmap {
                    argsz: 24,
                    flags: DmaUnmapFlags(DmaUnmapFlags::ALL),
                    address: 4,
                    size: 5,
                },
            ),
            (
                cmd::DEVICE_GET_INFO,
                words(&[16, 0, 0, 0]),
                Request::DeviceGetInfo,
            ),
            (
                cmd::DEVICE_GET_REGION_INFO,
                words(&[32, 0, 4, 0, 0, 0, 0, 0]),
                Request::GetRegionInfo { index: 4 },
            ),
            (
                cmd::GET_IRQ_INFO,
                words(&[16, 0, 2, 0]),
                Request::GetIrqInfo { index: 2 },
            ),
            (
                cmd::SET_IRQS,
                words(&[20, 0x24, 2, 1, 3]),
                Request::SetIrqs {
                    flags: 0x24,
                    index: 2,
                    start: 1,
                    count: 3,
                },
            ),
            (
                cmd::REGION_READ,
                access(7, 4),
                Request::RegionRead {
                    offset: 9,
                    region: 7,
                    count: 4,
                },
            ),
            (cmd::DEVICE_RESET, vec![], Request::DeviceReset),
        ];
        for (command, payload, want) in &cases {
            assert_eq!(p(*command, payload).as_ref(), Ok(want), "command {command}");
            // Longer is fine (trailing bytes are ignored) ...
            let mut long = payload.clone();
            if *command == cmd::VERSION {
                long.extend_from_slice(b"{\"capabilities\":{}}\0");
            } else {
                long.extend_from_slice(&[0xaa; 9]);
            }
            assert_eq!(
                p(*command, &long).as_ref(),
                Ok(want),
                "long command {command}"
            );
            // ... shorter is refused, at every length.
            for len in 0..payload.len() {
                let r = p(*command, &payload[..len]);
                assert!(
                    matches!(r, Err(ProtocolError::Short { .. })),
                    "command {command} with {len} bytes: {r:?}"
                );
                assert_eq!(r.unwrap_err().errno(), libc::EINVAL);
            }
        }
        let w = [access(0, 3), vec![1, 2, 3]].concat();
        assert_eq!(
            p(cmd::REGION_WRITE, &w),
            Ok(Request::RegionWrite {
                offset: 9,
                region: 0,
                data: &[1, 2, 3]
            })
        );
    }

    #[test]
    fn region_counts_are_checked_against_the_limit_and_the_data() {
        let access = |count: u32, data: &[u8]| {
            [
                0u64.to_ne_bytes().to_vec(),
                words(&[0, count]),
                data.to_vec(),
            ]
            .concat()
        };
        for count in [MAX_DATA_XFER + 1, u32::MAX] {
            let e = p(cmd::REGION_READ, &access(count, &[])).unwrap_err();
            assert_eq!(e, ProtocolError::CountTooBig(count));
            assert_eq!(e.errno(), libc::E2BIG);
            let e = p(cmd::REGION_WRITE, &access(count, &[0; 4])).unwrap_err();
            assert_eq!(e, ProtocolError::CountTooBig(count));
        }
        assert!(p(cmd::REGION_READ, &access(MAX_DATA_XFER, &[])).is_ok());
        for (count, data) in [(4u32, &[0u8; 3][..]), (4, &[0; 5]), (0, &[1])] {
            assert_eq!(
                p(cmd::REGION_WRITE, &access(count, data)),
                Err(ProtocolError::CountMismatch {
                    count,
                    data: data.len()
                })
            );
        }
        assert!(p(cmd::REGION_WRITE, &access(0, &[])).is_ok());
    }

    #[test]
    fn version_data_must_be_one_bounded_nul_terminated_utf8_string() {
        let v = |major: u16, data: &[u8]| {
            [
                major.to_ne_bytes().to_vec(),
                1u16.to_ne_bytes().to_vec(),
                data.to_vec(),
            ]
            .concat()
        };
        assert!(p(cmd::VERSION, &v(0, b"{}\0")).is_ok());
        assert!(p(cmd::VERSION, &v(0, b"\0")).is_ok());
        for bad in [&b"{}"[..], b"{\0}\0", b"\xff\xfe\0", b"x"] {
            assert_eq!(
                p(cmd::VERSION, &v(0, bad)),
                Err(ProtocolError::VersionData),
                "{bad:?}"
            );
        }
        let mut big = vec![b' '; MAX_VERSION_DATA];
        big.push(0);
        assert_eq!(
            p(cmd::VERSION, &v(0, &big)),
            Err(ProtocolError::VersionDataTooBig(MAX_VERSION_DATA + 1))
        );
        big.truncate(MAX_VERSION_DATA - 1);
        big.push(0);
        assert!(p(cmd::VERSION, &v(0, &big)).is_ok());
        assert_eq!(
            p(cmd::VERSION, &v(1, b"\0")),
            Err(ProtocolError::VersionMajor(1))
        );
    }

    #[test]
    fn replies_unknown_commands_and_no_reply_are_refused() {
        for command in [0u16, 6, 11, 12, 14, 15, 16, 99, u16::MAX] {
            let e = p(command, &[0; 64]).unwrap_err();
            assert_eq!(e, ProtocolError::UnsupportedCommand(command));
            assert_eq!(e.errno(), libc::EOPNOTSUPP);
        }
        for t in 1..=0xf {
            let r = parse(&hdr(cmd::DEVICE_RESET, 0, t), &[]);
            assert_eq!(r, Err(ProtocolError::NotACommand(t)));
        }
        // Commands whose reply is the answer cannot be sent without one.
        for (command, payload) in [
            (cmd::VERSION, vec![0u8; 4]),
            (cmd::DEVICE_GET_INFO, vec![0; 16]),
            (cmd::DEVICE_GET_REGION_INFO, vec![0; 32]),
            (cmd::GET_IRQ_INFO, vec![0; 16]),
            (cmd::REGION_READ, vec![0; 16]),
        ] {
            let r = parse(&hdr(command, payload.len(), flags::NO_REPLY), &payload);
            assert_eq!(r, Err(ProtocolError::NoReplyRefused(command)));
        }
        // The others can (posted writes).
        let r = parse(&hdr(cmd::REGION_WRITE, 16, flags::NO_REPLY), &[0; 16]);
        assert!(r.is_ok());
        assert!(parse(&hdr(cmd::DEVICE_RESET, 0, flags::NO_REPLY), &[]).is_ok());
    }

    #[test]
    fn error_replies_are_bare_headers_and_capabilities_are_json() {
        let h = hdr(cmd::REGION_READ, 16, 0);
        let e = Header::decode(&error_reply(&h, libc::E2BIG));
        assert_eq!(
            e,
            Header {
                id: 7,
                command: cmd::REGION_READ,
                size: 16,
                flags: flags::REPLY | flags::ERROR,
                error: libc::E2BIG as u32,
            }
        );
        let r = reply_header(&h, 20);
        assert_eq!((r.size, r.flags, r.id), (36, flags::REPLY, 7));
        let caps = server_capabilities(4096);
        assert_eq!(caps.last(), Some(&0));
        let text = std::str::from_utf8(&caps[..caps.len() - 1]).unwrap();
        assert_eq!(
            text,
            "{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576,\
             \"migration\":{\"pgsize\":4096}}}"
        );
    }
}
