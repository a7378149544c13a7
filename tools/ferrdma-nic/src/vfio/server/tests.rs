//! The server loop over a socket pair, with a backend that records its calls: every
//! command's reply structure, refusals before the backend is called, fd handling,
//! *No_reply*, and the framing errors that end a session.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::dma::mapping::test_util::{memfd, pipe};
use crate::testhost::vfio_client::{self as vc, RawClient, HEADER};
use crate::vfio::protocol::{cmd, flags, MAX_DATA_XFER};

/// What the backend was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Read(u32, u64, usize),
    Write(u32, u64, Vec<u8>),
    Map(u32, u64, u64, u64, bool),
    Unmap(u32, u64, u64),
    Reset,
    SetIrqs(u32, u32, u32, u32, usize),
}

#[derive(Debug, Default)]
struct Mock {
    calls: Vec<Call>,
    /// Refuse every call with this errno.
    fail: Option<i32>,
}

impl Mock {
    fn done(&mut self, c: Call) -> io::Result<()> {
        self.calls.push(c);
        match self.fail {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }
}

impl ServerBackend for Mock {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        data.fill(0xab);
        self.done(Call::Read(region, offset, data.len()))
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        self.done(Call::Write(region, offset, data.to_vec()))
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        self.done(Call::Map(flags.bits(), offset, address, size, fd.is_some()))
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        self.done(Call::Unmap(flags.bits(), address, size))
    }

    fn reset(&mut self) -> io::Result<()> {
        self.done(Call::Reset)
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        self.done(Call::SetIrqs(index, flags, start, count, fds.len()))
    }
}

/// Two regions (0: 0x100 bytes, 1: 0x20_0000 bytes) and two irq indices.
fn server() -> Server {
    Server::new(
        vec![
            IrqInfo {
                index: 0,
                flags: 1,
                count: 0,
            },
            IrqInfo {
                index: 1,
                flags: 1,
                count: 8,
            },
        ],
        vec![
            ServerRegion {
                index: 0,
                flags: 3,
                size: 0x100,
            },
            ServerRegion {
                index: 1,
                flags: 3,
                size: 0x20_0000,
            },
        ],
    )
}

type Outcome = (Result<(), ServerError>, Mock, SessionStats);

/// Runs `script` as the client of a session with `mock`; returns how it ended.
fn session(mock: Mock, script: impl FnOnce(&mut RawClient)) -> Outcome {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut mock = mock;
        let mut stats = SessionStats::default();
        let r = server().serve_with_stats(&theirs, &mut mock, &mut stats);
        drop(theirs);
        let _ = tx.send((r, mock, stats));
    });
    let mut c = RawClient::from_stream(ours).unwrap();
    script(&mut c);
    drop(c);
    let out = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the session ends (no hang, no panic)");
    assert!(out.2.largest_buffer <= MAX_MESSAGE, "{:?}", out.2);
    out
}

fn handshake(c: &mut RawClient) {
    c.handshake();
}

fn refused(r: &vc::Reply, errno: i32, what: &str) {
    assert!(r.is_error(), "{what}: accepted ({r:?})");
    assert_eq!(r.error, errno as u32, "{what}: {r:?}");
    assert!(
        r.payload.is_empty(),
        "{what}: an error reply is a bare header"
    );
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes(b[i..i + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(b[i..i + 8].try_into().unwrap())
}

/// Whether every copy of a pipe's write end is closed (the read end sees end of file).
fn write_end_closed(r: &File) -> bool {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(r.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(r.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut b = [0u8; 1];
    matches!((&*r).read(&mut b), Ok(0))
}

#[test]
fn every_command_is_answered_with_its_reply_structure() {
    let ram = memfd(0x1000);
    let (r, mock, stats) = session(Mock::default(), |c| {
        let json = b"{\"capabilities\":{\"max_msg_fds\":8}}\0";
        let v = c.call(
            cmd::VERSION,
            &vc::Payload::default().u16(0).u16(3).bytes(json).0,
            &[],
        );
        assert!(!v.is_error(), "{v:?}");
        assert_eq!(&v.payload[..4], &[0, 0, 0, 0], "version 0.0");
        let caps = &v.payload[4..];
        assert_eq!(caps.last(), Some(&0));
        assert!(std::str::from_utf8(&caps[..caps.len() - 1])
            .unwrap()
            .contains("\"max_data_xfer_size\":1048576"));

        let i = c.call(cmd::DEVICE_GET_INFO, &[0; 16], &[]);
        assert_eq!(i.payload.len(), 16);
        assert_eq!(u32_at(&i.payload, 0), 16);
        assert_eq!(
            u32_at(&i.payload, 4),
            VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET
        );
        assert_eq!((u32_at(&i.payload, 8), u32_at(&i.payload, 12)), (2, 2));

        let q = vc::Payload::default()
            .u32(32)
            .u32(0)
            .u32(1)
            .u32(0)
            .u64(0)
            .u64(0);
        let ri = c.call(cmd::DEVICE_GET_REGION_INFO, &q.0, &[]);
        assert_eq!(ri.payload.len(), 32);
        assert_eq!(
            (
                u32_at(&ri.payload, 0),
                u32_at(&ri.payload, 4),
                u32_at(&ri.payload, 8)
            ),
            (32, 3, 1)
        );
        assert_eq!(u64_at(&ri.payload, 16), 0x20_0000);

        let irq = c.call(
            cmd::GET_IRQ_INFO,
            &vc::Payload::default().u32(16).u32(0).u32(1).u32(0).0,
            &[],
        );
        assert_eq!(irq.payload.len(), 16);
        assert_eq!((u32_at(&irq.payload, 8), u32_at(&irq.payload, 12)), (1, 8));

        let rd = c.call(cmd::REGION_READ, &vc::region(0, 0x10, 4, &[]), &[]);
        assert_eq!(rd.payload.len(), HEADER + 4);
        assert_eq!(u64_at(&rd.payload, 0), 0x10);
        assert_eq!((u32_at(&rd.payload, 8), u32_at(&rd.payload, 12)), (0, 4));
        assert_eq!(&rd.payload[16..], &[0xab; 4]);

        let wr = c.call(cmd::REGION_WRITE, &vc::region(0, 8, 2, &[1, 2]), &[]);
        assert_eq!(wr.payload.len(), 16);
        assert_eq!(u32_at(&wr.payload, 12), 2);

        let m = c.call(
            cmd::DMA_MAP,
            &vc::dma_map(3, 0, 0x1000, 0x1000),
            &[ram.as_raw_fd()],
        );
        assert!(!m.is_error() && m.payload.is_empty(), "{m:?}");
        let u = c.call(cmd::DMA_UNMAP, &vc::dma_unmap(2, 0, 0), &[]);
        assert_eq!(u.payload, vc::dma_unmap(2, 0, 0), "the entry is echoed");

        let e = crate::pci::msix::test_util::eventfd();
        let s = c.call(
            cmd::SET_IRQS,
            &vc::set_irqs(0x24, 1, 0, 2),
            &[e.as_raw_fd(), e.as_raw_fd()],
        );
        assert!(!s.is_error() && s.payload.is_empty());
        let z = c.call(cmd::DEVICE_RESET, &[], &[]);
        assert!(!z.is_error() && z.payload.is_empty());
    });
    r.unwrap();
    assert_eq!(
        mock.calls,
        vec![
            Call::Read(0, 0x10, 4),
            Call::Write(0, 8, vec![1, 2]),
            Call::Map(3, 0, 0x1000, 0x1000, true),
            Call::Unmap(2, 0, 0),
            Call::SetIrqs(1, 0x24, 0, 2, 2),
            Call::Reset,
        ]
    );
    assert_eq!((stats.messages, stats.refused), (10, 0));
}

#[test]
fn bad_indices_counts_and_fd_counts_are_refused_before_the_device_is_called() {
    let ram = memfd(0x1000);
    let (rp, wp) = pipe();
    let (r, mock, _) = session(Mock::default(), |c| {
        handshake(c);
        let w = wp.as_raw_fd();
        for region in [2u32, 9, u32::MAX] {
            let r = c.call(cmd::REGION_READ, &vc::region(region, 0, 4, &[]), &[]);
            refused(&r, libc::EINVAL, "read of a region that does not exist");
            let r = c.call(cmd::REGION_WRITE, &vc::region(region, 0, 4, &[0; 4]), &[]);
            refused(&r, libc::EINVAL, "write to a region that does not exist");
            let q = vc::Payload::default().u32(32).u32(0).u32(region).0;
            let r = c.call(cmd::DEVICE_GET_REGION_INFO, &[q, vec![0; 20]].concat(), &[]);
            refused(&r, libc::EINVAL, "info of a region that does not exist");
        }
        for index in [2u32, 3, u32::MAX] {
            let q = vc::Payload::default().u32(16).u32(0).u32(index).u32(0).0;
            refused(
                &c.call(cmd::GET_IRQ_INFO, &q, &[]),
                libc::EINVAL,
                "irq info",
            );
            let r = c.call(cmd::SET_IRQS, &vc::set_irqs(0x24, index, 0, 1), &[w]);
            refused(&r, libc::EINVAL, "SET_IRQS of an index that does not exist");
        }
        let r = c.call(
            cmd::REGION_READ,
            &vc::region(1, 0, MAX_DATA_XFER + 1, &[]),
            &[],
        );
        refused(&r, libc::E2BIG, "read over the limit");
        let r = c.call(cmd::REGION_WRITE, &vc::region(1, 0, u32::MAX, &[0; 8]), &[]);
        refused(&r, libc::E2BIG, "write count over the limit");
        let r = c.call(
            cmd::DMA_MAP,
            &vc::dma_map(3, 0, 0, 0x1000),
            &[ram.as_raw_fd(), w],
        );
        refused(&r, libc::EINVAL, "DMA_MAP with two fds");
        // Fds on commands that take none are closed, and the command goes on.
        for (command, payload) in [
            (cmd::DEVICE_RESET, vec![]),
            (cmd::DEVICE_GET_INFO, vec![0; 16]),
            (cmd::REGION_READ, vc::region(0, 0, 4, &[])),
            (cmd::DMA_UNMAP, vc::dma_unmap(0, 0, 0x1000)),
        ] {
            let r = c.call(command, &payload, &[w, w, w]);
            assert!(!r.is_error(), "command {command}: {r:?}");
        }
        // A maximal write is fine.
        let data = vec![7u8; MAX_DATA_XFER as usize];
        let r = c.call(
            cmd::REGION_WRITE,
            &vc::region(1, 0, MAX_DATA_XFER, &data),
            &[],
        );
        assert!(!r.is_error());
    });
    r.unwrap();
    drop(wp);
    assert!(write_end_closed(&rp), "the server kept a descriptor");
    let n = mock.calls.len();
    assert_eq!(n, 4, "{:?}", &mock.calls[..n.min(8)]);
    assert!(matches!(mock.calls[0], Call::Reset));
}

#[test]
fn version_comes_first_and_once_and_replies_and_no_reply_are_handled() {
    let (r, mock, stats) = session(Mock::default(), |c| {
        refused(
            &c.call(cmd::DEVICE_RESET, &[], &[]),
            libc::EINVAL,
            "before VERSION",
        );
        refused(
            &c.call(cmd::VERSION, &vc::Payload::default().u16(1).u16(0).0, &[]),
            libc::ENOTSUP,
            "major 1",
        );
        refused(
            &c.call(cmd::VERSION, &[0, 0], &[]),
            libc::EINVAL,
            "VERSION shorter than its structure",
        );
        handshake(c);
        refused(
            &c.call(cmd::VERSION, &[0; 4], &[]),
            libc::EINVAL,
            "second VERSION",
        );
        // A "reply" from the client is refused; the session goes on.
        let id = c.send(cmd::DEVICE_RESET, flags::REPLY, &[], &[]).unwrap();
        let r = c.recv().unwrap();
        assert_eq!(r.id, id);
        refused(&r, libc::EINVAL, "reply flag");
        // Unknown commands.
        for command in [0u16, 6, 11, 12, 14, 15, 16, 17, 18, 0x8000, u16::MAX] {
            refused(&c.call(command, &[0; 8], &[]), libc::EOPNOTSUPP, "unknown");
        }
        // No_reply on a command whose reply is the answer: refused out loud.
        let id = c
            .send(
                cmd::REGION_READ,
                flags::NO_REPLY,
                &vc::region(0, 0, 4, &[]),
                &[],
            )
            .unwrap();
        let r = c.recv().unwrap();
        assert_eq!(r.id, id);
        refused(&r, libc::EINVAL, "REGION_READ without a reply");
        // Posted writes get no reply, also when refused; the next call's reply is the
        // next thing on the wire.
        c.send(
            cmd::REGION_WRITE,
            flags::NO_REPLY,
            &vc::region(0, 0, 1, &[5]),
            &[],
        )
        .unwrap();
        c.send(
            cmd::REGION_WRITE,
            flags::NO_REPLY,
            &vc::region(7, 0, 1, &[5]),
            &[],
        )
        .unwrap();
        c.send(
            cmd::REGION_WRITE,
            flags::NO_REPLY,
            &vc::region(0, 0, 2, &[5]),
            &[],
        )
        .unwrap();
        let r = c.call(cmd::DEVICE_GET_INFO, &[0; 16], &[]);
        assert!(!r.is_error());
    });
    r.unwrap();
    assert_eq!(mock.calls, vec![Call::Write(0, 0, vec![5])]);
    assert_eq!(stats.refused, 19);
}

#[test]
fn device_refusals_carry_their_errno_and_posted_ones_stay_silent() {
    let mock = Mock {
        fail: Some(libc::EPERM),
        ..Mock::default()
    };
    let (r, mock, _) = session(mock, |c| {
        handshake(c);
        c.send(
            cmd::REGION_WRITE,
            flags::NO_REPLY,
            &vc::region(0, 0, 1, &[1]),
            &[],
        )
        .unwrap();
        let r = c.call(cmd::DEVICE_RESET, &[], &[]);
        refused(&r, libc::EPERM, "reset refused by the device");
    });
    r.unwrap();
    assert_eq!(mock.calls.len(), 2);
}

/// Runs a session whose client sends `bytes` (with `fds`) after the handshake, expects
/// an error reply with `errno` (if any) and returns how the session ended.
fn framing(bytes: &[u8], fds: &[RawFd], errno: Option<i32>) -> Result<(), ServerError> {
    let (r, mock, stats) = session(Mock::default(), |c| {
        handshake(c);
        c.send_raw(bytes, fds).unwrap();
        c.shutdown_write();
        if let Some(e) = errno {
            refused(&c.recv().unwrap(), e, "framing");
        }
        assert!(c.closed());
    });
    assert!(mock.calls.is_empty());
    assert!(stats.largest_buffer <= MAX_MESSAGE);
    r
}

#[test]
fn messages_that_cannot_be_delimited_end_the_session() {
    for size in [0u32, 4, 15] {
        let r = framing(
            &vc::header(1, cmd::VERSION, size, 0),
            &[],
            Some(libc::EINVAL),
        );
        assert!(matches!(r, Err(ServerError::Framing(_))), "{r:?}");
    }
    // Oversized: refused from the header, the body never read or allocated.
    for size in [MAX_MESSAGE as u32 + 1, 0xffff_ffff] {
        let mut m = vc::header(1, cmd::REGION_WRITE, size, 0);
        m.extend_from_slice(&vc::region(0, 0, 0xffff_ffff, &[0; 64]));
        let r = framing(&m, &[], Some(libc::E2BIG));
        assert!(matches!(r, Err(ServerError::Framing(_))), "{r:?}");
    }
    // A truncated header or body.
    let r = framing(&vc::header(1, cmd::DEVICE_RESET, 16, 0)[..9], &[], None);
    assert!(
        matches!(r, Err(ServerError::Truncated { got: 9, want: 16 })),
        "{r:?}"
    );
    let mut m = vc::header(1, cmd::REGION_WRITE, 16 + 20, 0);
    m.extend_from_slice(&[0; 12]);
    let r = framing(&m, &[], None);
    assert!(
        matches!(r, Err(ServerError::Truncated { got: 12, want: 20 })),
        "{r:?}"
    );
    // Too many descriptors: all of them closed.
    let (rp, wp) = pipe();
    let r = framing(
        &vc::header(1, cmd::DEVICE_RESET, 16, 0),
        &[wp.as_raw_fd(); 17],
        None,
    );
    assert!(matches!(r, Err(ServerError::TooManyFds)), "{r:?}");
    drop(wp);
    assert!(write_end_closed(&rp), "the server kept a descriptor");
}

/// A session whose client sent `first` (bytes with descriptors, in that many `sendmsg`
/// calls) before the server read anything, then runs `script`; returns how it ended.
fn session_after(first: &[(Vec<u8>, Vec<RawFd>)], script: impl FnOnce(&mut RawClient)) -> Outcome {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut c = RawClient::from_stream(ours).unwrap();
    for (bytes, fds) in first {
        c.send_raw(bytes, fds).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut mock = Mock::default();
        let mut stats = SessionStats::default();
        let r = server().serve_with_stats(&theirs, &mut mock, &mut stats);
        drop(theirs);
        let _ = tx.send((r, mock, stats));
    });
    script(&mut c);
    drop(c);
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the session ends (no hang, no panic)")
}

fn message(id: u16, command: u16, flags: u32, payload: &[u8]) -> Vec<u8> {
    let mut m = vc::header(id, command, (HEADER + payload.len()) as u32, flags);
    m.extend_from_slice(payload);
    m
}

/// Posted writes (QEMU's doorbells) that reach the socket together are read together: a
/// hundred of them, sent before the server reads, take a few reads, not two each, and
/// reach the device in order.
#[test]
fn posted_writes_sent_together_are_read_together_in_order() {
    let mut burst = message(0, cmd::VERSION, 0, &vc::version_payload());
    for i in 0..100u32 {
        let w = vc::region(1, u64::from(i) * 4, 4, &i.to_ne_bytes());
        burst.extend(message(
            1 + i as u16,
            cmd::REGION_WRITE,
            flags::NO_REPLY,
            &w,
        ));
    }
    let (r, mock, stats) = session_after(&[(burst, vec![])], |c| {
        assert!(!c.recv().unwrap().is_error(), "VERSION");
        let r = c.call(cmd::REGION_READ, &vc::region(0, 0, 4, &[]), &[]);
        assert!(!r.is_error());
    });
    r.unwrap();
    let writes: Vec<_> = (0..100u32)
        .map(|i| Call::Write(1, u64::from(i) * 4, i.to_ne_bytes().to_vec()))
        .collect();
    assert_eq!(mock.calls[..100], writes[..]);
    assert_eq!(mock.calls[100], Call::Read(0, 0, 4));
    // 101 messages in 3.7 KiB, then the READ and the end of the connection.
    assert!(stats.reads <= 4, "{stats:?}");
    assert_eq!(stats.messages, 102);
}

/// Descriptors go with the message that carried them also when the server reads it
/// together with others: a posted write, a DMA_MAP with its file and another posted write,
/// each sent with one `sendmsg` before the server reads; a large write that arrives in
/// pieces still gets its payload whole.
#[test]
fn descriptors_stay_with_their_message_when_messages_are_read_together() {
    let ram = memfd(0x1000);
    let (rp, wp) = pipe();
    let big = vec![0x5au8; 64 << 10];
    let first = vec![
        (message(0, cmd::VERSION, 0, &vc::version_payload()), vec![]),
        (
            message(
                1,
                cmd::REGION_WRITE,
                flags::NO_REPLY,
                &vc::region(1, 0, 4, &[1; 4]),
            ),
            vec![],
        ),
        (
            message(2, cmd::DMA_MAP, 0, &vc::dma_map(3, 0, 0x10_0000, 0x1000)),
            vec![ram.as_raw_fd()],
        ),
        (
            message(
                3,
                cmd::REGION_WRITE,
                flags::NO_REPLY,
                &vc::region(1, 8, 4, &[2; 4]),
            ),
            vec![],
        ),
        // Descriptors on a command that takes none: closed, the command goes on.
        (
            message(4, cmd::DEVICE_RESET, 0, &[]),
            vec![wp.as_raw_fd(), wp.as_raw_fd()],
        ),
        (
            message(
                5,
                cmd::REGION_WRITE,
                flags::NO_REPLY,
                &vc::region(1, 0x1000, big.len() as u32, &big),
            ),
            vec![],
        ),
    ];
    let (r, mock, _) = session_after(&first, |c| {
        for what in ["VERSION", "DMA_MAP", "DEVICE_RESET"] {
            assert!(!c.recv().unwrap().is_error(), "{what}");
        }
    });
    r.unwrap();
    assert_eq!(
        mock.calls,
        vec![
            Call::Write(1, 0, vec![1; 4]),
            Call::Map(3, 0, 0x10_0000, 0x1000, true),
            Call::Write(1, 8, vec![2; 4]),
            Call::Reset,
            Call::Write(1, 0x1000, big),
        ]
    );
    drop(wp);
    assert!(write_end_closed(&rp), "the server kept a descriptor");
}
