//! Property test of the vfio-user server loop: arbitrary byte streams made of raw bytes and
//! messages with arbitrary headers (any command, flags and declared size, honest or not),
//! payloads and attached fds, thrown at [`Server::serve_with_stats`] over a socket pair with
//! the real device behind it. Properties: the server never panics and always ends once the
//! client stops sending; everything it sends is a well-formed reply (an error reply is a bare
//! header); it never allocates more than [`MAX_MESSAGE`] bytes for a message or reply; the
//! device's map table stays consistent and the end of the session releases it.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;

use crate::device::Device;
use crate::dma::mapping::test_util::{memfd, pipe};
use crate::pci::msix::test_util::eventfd;
use crate::shared::SharedDevice;
use crate::testhost::vfio_client::{self as vc, RawClient};
use crate::vfio::layout::{irq_infos, server_regions};
use crate::vfio::protocol::{flags, Header, HEADER_SIZE, MAX_MESSAGE};
use crate::vfio::server::{Server, SessionStats};

/// How a message's header states its size.
#[derive(Debug, Clone)]
enum Size {
    Honest,
    Off(i8),
    Any(u32),
}

#[derive(Debug, Clone)]
enum Piece {
    Raw(Vec<u8>),
    Message {
        command: u16,
        flags: u32,
        size: Size,
        payload: Vec<u8>,
        fds: Vec<u8>,
    },
}

/// Payloads that often get past the fixed-size checks.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48),
        (
            0u32..12,
            any::<u64>(),
            0u32..=16,
            prop::collection::vec(any::<u8>(), 0..20)
        )
            .prop_map(|(region, offset, count, data)| vc::region(
                region,
                offset % 0x400,
                count,
                &data
            )),
        (any::<u32>(), 0u32..4, 0u32..10, 0u32..10)
            .prop_map(|(fl, index, start, count)| vc::set_irqs(fl % 0x40, index, start, count)),
        (0u32..4, 0u64..0x4000, 0u64..0x8000, 0u64..0x4000)
            .prop_map(|(fl, off, iova, size)| vc::dma_map(fl, off, iova, size)),
        (0u32..3, 0u64..0x8000, 0u64..0x8000)
            .prop_map(|(fl, iova, size)| vc::dma_unmap(fl, iova, size)),
        Just(vc::Payload::default().u16(0).u16(1).bytes(b"{}\0").0),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 1..40).prop_map(Piece::Raw),
        16 => (
            prop_oneof![8 => 1u16..=13, 1 => 0u16..=20, 1 => any::<u16>()],
            prop_oneof![
                6 => Just(0u32),
                2 => Just(flags::NO_REPLY),
                1 => 0u32..0x40,
                1 => any::<u32>(),
            ],
            prop_oneof![
                24 => Just(Size::Honest),
                1 => any::<i8>().prop_map(Size::Off),
                1 => any::<u32>().prop_map(Size::Any),
            ],
            payload(),
            prop::collection::vec(0u8..3, 0..3),
        )
            .prop_map(|(command, flags, size, payload, fds)| Piece::Message {
                command,
                flags,
                size,
                payload,
                fds,
            }),
    ]
}

/// The bytes and fds of one piece.
fn encode(p: &Piece) -> (Vec<u8>, Vec<OwnedFd>) {
    match p {
        Piece::Raw(b) => (b.clone(), vec![]),
        Piece::Message {
            command,
            flags,
            size,
            payload,
            fds,
        } => {
            let honest = (HEADER_SIZE + payload.len()) as u32;
            let declared = match size {
                Size::Honest => honest,
                Size::Off(d) => honest.wrapping_add_signed(i32::from(*d)),
                Size::Any(v) => *v,
            };
            let mut m = vc::header(7, *command, declared, *flags);
            m.extend_from_slice(payload);
            let fds = fds
                .iter()
                .map(|k| match k {
                    0 => OwnedFd::from(eventfd()),
                    1 => OwnedFd::from(pipe().1),
                    _ => OwnedFd::from(memfd(0x4000)),
                })
                .collect();
            (m, fds)
        }
    }
}

/// Splits the server's output into replies and checks each is well-formed.
fn check_replies(out: &[u8]) -> Result<usize, TestCaseError> {
    let mut rest = out;
    let mut n = 0;
    while !rest.is_empty() {
        prop_assert!(rest.len() >= HEADER_SIZE, "a partial header at the end");
        let mut raw = [0u8; HEADER_SIZE];
        raw.copy_from_slice(&rest[..HEADER_SIZE]);
        let h = Header::decode(&raw);
        let size = h.size as usize;
        prop_assert!(size >= HEADER_SIZE && size <= rest.len(), "reply {:?}", h);
        prop_assert_eq!(h.flags & flags::TYPE_MASK, flags::REPLY, "{:?}", h);
        if h.flags & flags::ERROR != 0 {
            prop_assert_eq!(size, HEADER_SIZE, "an error reply is a bare header");
            prop_assert!(h.error != 0);
        }
        rest = &rest[size..];
        n += 1;
    }
    Ok(n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_streams_never_panic_the_server_and_allocation_stays_bounded(
        handshake in any::<bool>(),
        pieces in prop::collection::vec(piece(), 0..16),
    ) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let dev = SharedDevice::new(Device::new("prop-vfio"));
        let served = dev.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut backend = served;
            let mut stats = SessionStats::default();
            let server = Server::new(irq_infos(), server_regions());
            let r = server.serve_with_stats(&theirs, &mut backend, &mut stats);
            drop(theirs);
            let _ = tx.send((r.is_ok(), stats));
        });
        let mut writer = RawClient::from_stream(ours.try_clone().unwrap()).unwrap();
        let mut reader = ours;
        let sender = std::thread::spawn(move || {
            if handshake {
                let v = vc::Payload::default().u16(0).u16(1).bytes(b"{}\0").0;
                let mut m = vc::header(1, 1, (HEADER_SIZE + v.len()) as u32, 0);
                m.extend_from_slice(&v);
                let _ = writer.send_raw(&m, &[]);
            }
            for p in &pieces {
                let (bytes, fds) = encode(p);
                let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
                if writer.send_raw(&bytes, &raw).is_err() {
                    break;
                }
            }
            writer.shutdown_write();
        });
        let mut out = Vec::new();
        // Ends at the server's end of the connection (a reset counts as an end too).
        let _ = reader.read_to_end(&mut out);
        sender.join().unwrap();
        let (_ok, stats) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the server ends, without panicking");
        prop_assert!(stats.largest_buffer <= MAX_MESSAGE, "{:?}", stats);
        let replies = check_replies(&out)? as u64;
        // At most one reply per complete message, plus the refusal of a message that
        // could not be delimited.
        prop_assert!(replies <= stats.messages + 1, "{} replies, {:?}", replies, stats);
        let mut d = dev.lock();
        prop_assert!(d.dma().check_consistent().is_ok());
        d.disconnect();
        prop_assert!(d.dma().is_empty());
    }
}
