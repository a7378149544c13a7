//! A hostile vfio-user client against a real `serve_device` on a temporary socket: crafted
//! messages for every command (see the manual's "vfio-user client input"), malformed and
//! truncated messages, too many fds, disconnects mid-message. The server must answer with an
//! error or close the connection, never panic out, never hang, and the device's DMA map
//! table and vectors must stay consistent; when the connection ends the client's memory is
//! unmapped.

use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use vfio_bindings::bindings::vfio::{
    VFIO_DMA_UNMAP_FLAG_ALL, VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_MSIX_IRQ_INDEX,
};

use super::vfio_client::{self as vc, cmd, RawClient, HEADER};
use crate::device::{Device, DMA_MAP_READ, DMA_MAP_WRITE};
use crate::dma::mapping::test_util::{memfd, pipe};
use crate::dma::MAX_MAPPINGS;
use crate::interface::{MSIX_VECTORS, PCI_DEVICE_ID, PCI_VENDOR_ID};
use crate::pci::msix::test_util::{count, eventfd};
use crate::shared::SharedDevice;
use crate::vfio::layout::{region_size, NUM_REGIONS, REGION_CONFIG, REGION_DB};
use crate::vfio::protocol::MAX_DATA_XFER;
use crate::vfio::server::ServerError;
use crate::vfio::socket::{bind, serve_device, Clients, ServeError};

const RW: u32 = DMA_MAP_READ | DMA_MAP_WRITE;
const EVENTFD_TRIGGER: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
const NONE_TRIGGER: u32 = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
const MSIX: u32 = VFIO_PCI_MSIX_IRQ_INDEX;

/// One device served on a socket in a private directory.
struct Served {
    path: PathBuf,
    dev: SharedDevice,
    done: Receiver<Result<(), ServeError>>,
    dir: PathBuf,
}

impl Served {
    fn start(test: &str) -> Self {
        Self::start_for(test, Clients::One)
    }

    fn start_for(test: &str, clients: Clients) -> Self {
        let dir = std::env::temp_dir().join(format!("ferrdma-vfio-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nic.sock");
        let (listener, file) = bind(&path).unwrap();
        let dev = SharedDevice::new(Device::new(test));
        let served = dev.clone();
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(serve_device(listener, &file, served, None, clients));
        });
        Self {
            path,
            dev,
            done,
            dir,
        }
    }

    fn client(&self) -> RawClient {
        RawClient::connect(&self.path).unwrap()
    }

    /// The serving thread's result; it must end soon after the client is gone.
    fn finish(&self) -> Result<(), ServeError> {
        self.done
            .recv_timeout(Duration::from_secs(10))
            .expect("serve must end (no hang, no escaped panic)")
    }

    /// The map table is consistent and holds exactly `ranges`.
    fn check_maps(&self, ranges: &[(u64, u64)]) {
        let d = self.dev.lock();
        d.dma().check_consistent().unwrap();
        assert_eq!(d.dma().ranges(), ranges);
    }

    /// After the connection ended: nothing of the client stays mapped or wired.
    fn check_released(&self) {
        let d = self.dev.lock();
        assert!(d.dma().is_empty(), "guest memory still mapped");
        assert_eq!(d.dma().mapped_bytes(), 0);
        assert!((0..MSIX_VECTORS).all(|v| !d.vectors().is_wired(v)));
        assert!(!self.path.exists(), "socket file removed");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ok(r: &vc::Reply, what: &str) {
    assert!(!r.is_error(), "{what}: refused ({r:?})");
}

fn err(r: &vc::Reply, what: &str) {
    assert!(r.is_error(), "{what}: accepted ({r:?})");
    assert_eq!(
        r.payload.len(),
        0,
        "{what}: an error reply is a bare header"
    );
}

#[test]
fn hostile_dma_map_and_unmap_are_refused_and_leave_the_table_consistent() {
    let s = Served::start("dma");
    let mut c = s.client();
    c.handshake();
    let ram = memfd(0x10_000);
    let fd = [ram.as_raw_fd()];
    // (payload, fds, accepted?)
    let cases: Vec<(&str, Vec<u8>, Vec<RawFd>, bool)> = vec![
        ("size 0", vc::dma_map(RW, 0, 0x1000, 0), fd.to_vec(), false),
        (
            "wraps",
            vc::dma_map(RW, 0, u64::MAX - 0xfff, 0x2000),
            fd.to_vec(),
            false,
        ),
        ("huge", vc::dma_map(RW, 0, 0, u64::MAX), fd.to_vec(), false),
        (
            "beyond the fd",
            vc::dma_map(RW, 0, 0x1000, 0x20_000),
            fd.to_vec(),
            false,
        ),
        (
            "fd offset past the end",
            vc::dma_map(RW, 0x10_000, 0x1000, 0x1000),
            fd.to_vec(),
            false,
        ),
        (
            "fd offset wraps",
            vc::dma_map(RW, u64::MAX, 0x1000, 0x1000),
            fd.to_vec(),
            false,
        ),
        (
            "unknown flag",
            vc::dma_map(RW | 4, 0, 0x1000, 0x1000),
            fd.to_vec(),
            false,
        ),
        (
            "two fds",
            vc::dma_map(RW, 0, 0x1000, 0x1000),
            vec![fd[0], fd[0]],
            false,
        ),
        (
            "good",
            vc::dma_map(RW, 0x1000, 0x10_000, 0x4000),
            fd.to_vec(),
            true,
        ),
        (
            "overlap inside",
            vc::dma_map(RW, 0, 0x11_000, 0x1000),
            fd.to_vec(),
            false,
        ),
        (
            "overlap below",
            vc::dma_map(RW, 0, 0xf000, 0x2000),
            fd.to_vec(),
            false,
        ),
        (
            "overlap around",
            vc::dma_map(RW, 0, 0x8000, 0x10_000),
            fd.to_vec(),
            false,
        ),
        (
            "same again",
            vc::dma_map(RW, 0x1000, 0x10_000, 0x4000),
            fd.to_vec(),
            false,
        ),
        (
            "adjacent",
            vc::dma_map(DMA_MAP_READ, 0, 0x14_000, 0x1000),
            fd.to_vec(),
            true,
        ),
        (
            "no fd (ROM)",
            vc::dma_map(DMA_MAP_READ, 0, 0x100_0000, 0x1000),
            vec![],
            true,
        ),
        (
            "unmap splits",
            vc::dma_unmap(0, 0x10_000, 0x1000),
            vec![],
            false,
        ),
        (
            "unmap straddles",
            vc::dma_unmap(0, 0x12_000, 0x3000),
            vec![],
            false,
        ),
        ("unmap wraps", vc::dma_unmap(0, u64::MAX, 2), vec![], false),
        (
            "unmap unknown flag",
            vc::dma_unmap(1, 0x10_000, 0x4000),
            vec![],
            false,
        ),
        (
            "unmap-all with a range",
            vc::dma_unmap(VFIO_DMA_UNMAP_FLAG_ALL, 1, 0),
            vec![],
            false,
        ),
        (
            "unmap of nothing",
            vc::dma_unmap(0, 0x9000_0000, 0x1000),
            vec![],
            true,
        ),
        (
            "unmap of size 0",
            vc::dma_unmap(0, 0x10_000, 0),
            vec![],
            true,
        ),
        (
            "unmap with an fd",
            vc::dma_unmap(0, 0x9000_0000, 0x1000),
            fd.to_vec(),
            true,
        ),
    ];
    let mut expect = vec![];
    for (what, payload, fds, accepted) in &cases {
        let command = if payload.len() == 32 {
            cmd::DMA_MAP
        } else {
            cmd::DMA_UNMAP
        };
        let r = c.call(command, payload, fds);
        if *accepted {
            ok(&r, what);
        } else {
            err(&r, what);
        }
        match *what {
            "good" => expect.push((0x10_000, 0x4000)),
            "adjacent" => expect.push((0x14_000, 0x1000)),
            "no fd (ROM)" => expect.push((0x100_0000, 0x1000)),
            _ => {}
        }
        s.check_maps(&expect);
    }
    // A pipe and an eventfd are not memory.
    let (rp, _wp) = pipe();
    err(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(RW, 0, 0x200_0000, 0x1000),
            &[rp.as_raw_fd()],
        ),
        "pipe",
    );
    let e = eventfd();
    err(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(RW, 0, 0x200_0000, 8),
            &[e.as_raw_fd()],
        ),
        "eventfd",
    );
    // A read-only fd cannot be mapped writable.
    let ro = std::fs::File::open(format!("/proc/self/fd/{}", ram.as_raw_fd())).unwrap();
    err(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(RW, 0, 0x200_0000, 0x1000),
            &[ro.as_raw_fd()],
        ),
        "ro fd",
    );
    ok(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(DMA_MAP_READ, 0, 0x200_0000, 0x1000),
            &[ro.as_raw_fd()],
        ),
        "ro fd, read only",
    );
    expect.push((0x200_0000, 0x1000));
    s.check_maps(&expect);
    // Whole regions inside a range unmap together; unmap-all clears the rest.
    ok(
        &c.call(cmd::DMA_UNMAP, &vc::dma_unmap(0, 0x10_000, 0x5000), &[]),
        "unmap two",
    );
    expect.drain(..2);
    s.check_maps(&expect);
    // DEVICE_RESET keeps the client's mappings (they are client state).
    ok(&c.call(cmd::DEVICE_RESET, &[], &[]), "reset");
    s.check_maps(&expect);
    ok(
        &c.call(
            cmd::DMA_UNMAP,
            &vc::dma_unmap(VFIO_DMA_UNMAP_FLAG_ALL, 0, 0),
            &[],
        ),
        "unmap all",
    );
    s.check_maps(&[]);
    // The mapping limit: fd-less maps up to MAX_MAPPINGS, then refusals.
    for i in 0..MAX_MAPPINGS as u64 {
        let r = c.call(
            cmd::DMA_MAP,
            &vc::dma_map(DMA_MAP_READ, 0, i << 12, 0x1000),
            &[],
        );
        ok(&r, "map within the limit");
    }
    err(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(DMA_MAP_READ, 0, 1 << 40, 0x1000),
            &[],
        ),
        "one too many",
    );
    assert_eq!(s.dev.lock().dma().len(), MAX_MAPPINGS);
    // Leave memory mapped: the end of the connection must release it.
    ok(
        &c.call(
            cmd::DMA_UNMAP,
            &vc::dma_unmap(VFIO_DMA_UNMAP_FLAG_ALL, 0, 0),
            &[],
        ),
        "unmap all",
    );
    ok(
        &c.call(cmd::DMA_MAP, &vc::dma_map(RW, 0, 0x10_000, 0x10_000), &fd),
        "map again",
    );
    drop(c);
    s.finish().unwrap();
    s.check_released();
}

#[test]
fn hostile_region_accesses_are_refused_and_config_writes_of_every_shape_are_safe() {
    let s = Served::start("region");
    let mut c = s.client();
    c.handshake();
    // Region index, offset and count at and beyond every edge.
    for region in 0..NUM_REGIONS + 2 {
        let size = region_size(region);
        for (offset, n) in [
            (0u64, 4u32),
            (size.saturating_sub(4), 4),
            (size.saturating_sub(2), 4),
            (size, 0),
            (size, 4),
            (u64::MAX, 4),
            (u64::MAX, 0),
            (u64::MAX - 1, 4),
            (0, MAX_DATA_XFER + 1),
            (0, 0x1000_0000),
        ] {
            // Inside the region and within the protocol's transfer size.
            let fits = size > 0
                && n <= MAX_DATA_XFER
                && offset.checked_add(u64::from(n)).is_some_and(|e| e <= size);
            let r = c.call(cmd::REGION_READ, &vc::region(region, offset, n, &[]), &[]);
            let what = format!("read region {region} {offset:#x}+{n:#x}");
            if fits {
                ok(&r, &what);
                assert_eq!(r.payload.len(), HEADER + n as usize, "{what}");
            } else {
                err(&r, &what);
            }
            // The message size delimits every message, so a refused write (unknown region
            // included) never leaves its data in the stream.
            if n <= 0x1000 {
                let data = vec![0u8; n as usize];
                let r = c.call(
                    cmd::REGION_WRITE,
                    &vc::region(region, offset, n, &data),
                    &[],
                );
                let what = format!("write region {region} {offset:#x}+{n:#x}");
                // BAR writes of odd shapes inside the BAR are ignored but accepted.
                if fits {
                    ok(&r, &what);
                } else {
                    err(&r, &what);
                }
            }
        }
    }
    // Config space: every offset and size, all ones. Only writable bits change.
    for offset in 0..=260u64 {
        for n in 0..=8u32 {
            let data = vec![0xffu8; n as usize];
            let r = c.call(
                cmd::REGION_WRITE,
                &vc::region(REGION_CONFIG, offset, n, &data),
                &[],
            );
            let what = format!("config write {offset:#x}+{n}");
            if offset + u64::from(n) <= 256 {
                ok(&r, &what);
            } else {
                err(&r, &what);
            }
        }
    }
    let r = c.call(cmd::REGION_READ, &vc::region(REGION_CONFIG, 0, 4, &[]), &[]);
    ok(&r, "identity");
    let id = u32::from_le_bytes(r.payload[HEADER..HEADER + 4].try_into().unwrap());
    assert_eq!(
        id,
        u32::from(PCI_VENDOR_ID) | (u32::from(PCI_DEVICE_ID) << 16)
    );
    // A declared count that disagrees with the data the message size delimits is refused
    // (EINVAL) and the session stays in step; so is a count above the transfer limit
    // (E2BIG), whatever data follows, without the server allocating for it.
    for (count, data) in [(8u32, 4usize), (4, 8), (0, 1), (0xffff_ffff, 4)] {
        let r = c.call(
            cmd::REGION_WRITE,
            &vc::region(REGION_DB, 0, count, &vec![0; data]),
            &[],
        );
        err(&r, &format!("count {count:#x} with {data} bytes"));
        let want = if count == 0xffff_ffff {
            libc::E2BIG
        } else {
            libc::EINVAL
        };
        assert_eq!(r.error, want as u32, "count {count:#x}");
    }
    let r = c.call(
        cmd::REGION_WRITE,
        &vc::region(REGION_DB, 0, 8, &[0; 8]),
        &[],
    );
    ok(&r, "8-byte doorbell write (ignored)");
    // DEVICE_RESET at any point, twice, and the device still answers.
    ok(&c.call(cmd::DEVICE_RESET, &[], &[]), "reset");
    ok(&c.call(cmd::DEVICE_RESET, &[], &[]), "reset again");
    let r = c.call(cmd::REGION_READ, &vc::region(REGION_CONFIG, 0, 4, &[]), &[]);
    ok(&r, "identity after reset");
    drop(c);
    s.finish().unwrap();
    s.check_released();
}

#[test]
fn hostile_set_irqs_are_refused_and_only_eventfds_are_wired() {
    let s = Served::start("irqs");
    let mut c = s.client();
    c.handshake();
    let e = eventfd();
    let (rp, wp) = pipe();
    let file = memfd(8);
    let ev = e.as_raw_fd();
    let wired = |s: &Served| -> Vec<bool> {
        let d = s.dev.lock();
        (0..MSIX_VECTORS).map(|v| d.vectors().is_wired(v)).collect()
    };
    let none = vec![false; MSIX_VECTORS as usize];
    let cases: Vec<(&str, Vec<u8>, Vec<RawFd>)> = vec![
        ("index 3", vc::set_irqs(EVENTFD_TRIGGER, 3, 0, 1), vec![ev]),
        (
            "index u32::MAX",
            vc::set_irqs(EVENTFD_TRIGGER, u32::MAX, 0, 1),
            vec![ev],
        ),
        ("flags 0", vc::set_irqs(0, MSIX, 0, 1), vec![ev]),
        ("all flags", vc::set_irqs(u32::MAX, MSIX, 0, 1), vec![ev]),
        (
            "bool data",
            vc::set_irqs(
                VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER,
                MSIX,
                0,
                1,
            ),
            vec![],
        ),
        (
            "mask",
            vc::set_irqs(
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK,
                MSIX,
                0,
                1,
            ),
            vec![],
        ),
        (
            "start past the vectors",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, MSIX_VECTORS, 1),
            vec![ev],
        ),
        (
            "start + count wraps",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, u32::MAX, 2),
            vec![ev, ev],
        ),
        (
            "count u32::MAX",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, u32::MAX),
            vec![ev],
        ),
        (
            "fewer fds than count",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 2),
            vec![ev],
        ),
        (
            "more fds than count",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 1),
            vec![ev, ev],
        ),
        (
            "16 fds",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 16),
            vec![ev; 16],
        ),
        (
            "fds with data none",
            vc::set_irqs(NONE_TRIGGER, MSIX, 0, 1),
            vec![ev],
        ),
        (
            "pipe read end",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 1),
            vec![rp.as_raw_fd()],
        ),
        (
            "pipe write end",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 1),
            vec![wp.as_raw_fd()],
        ),
        (
            "regular file",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 1),
            vec![file.as_raw_fd()],
        ),
        (
            "one pipe among eventfds",
            vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 2),
            vec![ev, wp.as_raw_fd()],
        ),
        (
            "trigger unwired",
            vc::set_irqs(NONE_TRIGGER, MSIX, 0, 1),
            vec![],
        ),
        (
            "trigger count u32::MAX",
            vc::set_irqs(NONE_TRIGGER, MSIX, 0, u32::MAX),
            vec![],
        ),
        (
            "INTx eventfd",
            vc::set_irqs(EVENTFD_TRIGGER, 0, 0, 1),
            vec![ev],
        ),
    ];
    for (what, payload, fds) in &cases {
        err(&c.call(cmd::SET_IRQS, payload, fds), what);
        assert_eq!(wired(&s), none, "{what}: a refused request wires nothing");
    }
    ok(
        &c.call(
            cmd::SET_IRQS,
            &vc::set_irqs(EVENTFD_TRIGGER, MSIX, 7, 1),
            &[ev],
        ),
        "wire 7",
    );
    ok(
        &c.call(cmd::SET_IRQS, &vc::set_irqs(NONE_TRIGGER, MSIX, 7, 1), &[]),
        "loopback 7",
    );
    assert_eq!(count(&e), 1);
    err(
        &c.call(cmd::SET_IRQS, &vc::set_irqs(NONE_TRIGGER, MSIX, 6, 2), &[]),
        "loopback 6..8",
    );
    assert_eq!(count(&e), 0, "a refused trigger raises nothing");
    // Unknown and unsupported commands get an error reply and the session goes on.
    for command in [0u16, cmd::DMA_READ, 14, 15, 99, u16::MAX] {
        let r = c.call(command, &[], &[]);
        err(&r, &format!("command {command}"));
    }
    err(
        &c.call(cmd::GET_IRQ_INFO, &vc::set_irqs(0, 5, 0, 0)[..16], &[]),
        "irq info 5",
    );
    let r = c.call(cmd::DEVICE_GET_INFO, &[0; 16], &[]);
    ok(&r, "get info after all that");
    let mut w = wired(&s);
    w[7] = false;
    assert_eq!(w, none);
    drop(c);
    s.finish().unwrap();
    s.check_released();
}

/// Runs `script` as the client of a fresh server and returns how serving ended.
fn end_with(test: &str, script: impl FnOnce(&mut RawClient)) -> Result<(), ServeError> {
    let s = Served::start(test);
    let mut c = s.client();
    c.handshake();
    // Some guest memory and a vector, which the end of the connection must release.
    let ram = memfd(0x4000);
    ok(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(RW, 0, 0x10_000, 0x4000),
            &[ram.as_raw_fd()],
        ),
        "map",
    );
    let e = eventfd();
    ok(
        &c.call(
            cmd::SET_IRQS,
            &vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 1),
            &[e.as_raw_fd()],
        ),
        "wire",
    );
    script(&mut c);
    drop(c);
    let r = s.finish();
    s.check_released();
    // The device lock is usable (not left poisoned in a way that panics).
    let _ = s.dev.lock().dma().len();
    r
}

/// Reads the error reply the server sends before it ends a connection, then the end.
fn refused_then_closed(c: &mut RawClient, errno: i32) {
    let r = c.recv().expect("an error reply before the end");
    assert!(r.is_error(), "{r:?}");
    assert_eq!(r.error, errno as u32, "{r:?}");
    assert!(c.closed(), "the connection ends after the reply");
}

#[test]
fn malformed_messages_end_only_their_connection_and_release_the_client() {
    // VERSION whose capabilities string has no NUL (the vfio_user crate used to panic on
    // it): refused, and the session goes on.
    let r = end_with("version-nul", |c| {
        let p = vc::Payload::default().u16(0).u16(0).bytes(b"{}");
        err(&c.call(cmd::VERSION, &p.0, &[]), "VERSION without NUL");
        ok(&c.call(cmd::DEVICE_RESET, &[], &[]), "still serving");
    });
    r.unwrap();
    // VERSION declaring a size smaller than a header (the crate's subtraction underflowed):
    // the message cannot be delimited, so an error reply and the end.
    let r = end_with("version-small", |c| {
        let mut m = vc::header(9, cmd::VERSION, 4, 0);
        m.extend_from_slice(&[0; 4]);
        let _ = c.send_raw(&m, &[]);
        refused_then_closed(c, libc::EINVAL);
    });
    assert!(
        matches!(r, Err(ServeError::Protocol(ServerError::Framing(_)))),
        "{r:?}"
    );
    // A declared size of 64 MiB: refused from the header alone (E2BIG), nothing allocated
    // for it, the connection ends.
    let r = end_with("version-huge", |c| {
        let mut m = vc::header(9, cmd::VERSION, (64 << 20) + 20, 0);
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(b"{\"capabilities\":{}}");
        let _ = c.send_raw(&m, &[]);
        refused_then_closed(c, libc::E2BIG);
    });
    assert!(
        matches!(r, Err(ServeError::Protocol(ServerError::Framing(_)))),
        "{r:?}"
    );
    // Half a header, then end of file.
    let r = end_with("half-header", |c| {
        let _ = c.send_raw(&vc::header(1, cmd::REGION_READ, 32, 0)[..5], &[]);
        c.shutdown_write();
    });
    assert!(
        matches!(r, Err(ServeError::Protocol(ServerError::Truncated { .. }))),
        "{r:?}"
    );
    // A header whose body never comes: DMA_MAP, REGION_WRITE with data missing.
    for command in [
        cmd::DMA_MAP,
        cmd::DMA_UNMAP,
        cmd::SET_IRQS,
        cmd::REGION_READ,
    ] {
        let r = end_with("no-body", |c| {
            let _ = c.send_raw(&vc::header(1, command, 48, 0), &[]);
            c.shutdown_write();
        });
        assert!(r.is_err(), "command {command}: {r:?}");
    }
    // A write whose count disagrees with its message size: refused, the session goes on
    // until the client ends it.
    let r = end_with("short-write", |c| {
        let r = c.call(
            cmd::REGION_WRITE,
            &vc::region(REGION_CONFIG, 0, 64, &[1; 10]),
            &[],
        );
        err(&r, "count 64 with 10 bytes");
        c.shutdown_write();
    });
    r.unwrap();
    // More fds than the server receives (16): the kernel truncates and closes the rest,
    // the server closes what it got and ends the connection.
    let r = end_with("17-fds", |c| {
        let e = eventfd();
        let _ = c.send(cmd::DEVICE_RESET, 0, &[], &[e.as_raw_fd(); 17]);
        assert!(c.closed());
    });
    assert!(
        matches!(r, Err(ServeError::Protocol(ServerError::TooManyFds))),
        "{r:?}"
    );
    // A plain disconnect in the middle of a session is a normal end.
    let r = end_with("disconnect", |c| {
        ok(&c.call(cmd::DEVICE_RESET, &[], &[]), "reset");
    });
    r.unwrap();
}

#[test]
fn truncating_guest_memory_under_the_device_faults_dma_instead_of_killing_the_process() {
    use crate::dma::mapping::test_util::unsealable_memfd;
    use crate::interface::{
        TestStatus, REG_TEST_DMA_CTRL, REG_TEST_DMA_DST, REG_TEST_DMA_LEN, REG_TEST_DMA_SRC,
        REG_TEST_STATUS, TEST_DMA_CTRL_START,
    };
    use crate::vfio::layout::REGION_BAR0;
    let s = Served::start("truncate");
    let mut c = s.client();
    c.handshake();
    let mut w32 = |c: &mut RawClient, region: u32, off: usize, v: u32| {
        let r = c.call(
            cmd::REGION_WRITE,
            &vc::region(region, off as u64, 4, &v.to_le_bytes()),
            &[],
        );
        ok(&r, "register write");
    };
    let status = |c: &mut RawClient| {
        let r = c.call(
            cmd::REGION_READ,
            &vc::region(REGION_BAR0, REG_TEST_STATUS as u64, 4, &[]),
            &[],
        );
        u32::from_le_bytes(r.payload[HEADER..HEADER + 4].try_into().unwrap())
    };
    // Guest RAM the client can shrink (not sealable).
    let ram = unsealable_memfd(0x4000);
    ok(
        &c.call(
            cmd::DMA_MAP,
            &vc::dma_map(RW, 0, 0x10_000, 0x4000),
            &[ram.as_raw_fd()],
        ),
        "map",
    );
    w32(&mut c, REGION_CONFIG, 4, 0x6); // memory space + bus master
    let copy = |c: &mut RawClient, w32: &mut dyn FnMut(&mut RawClient, u32, usize, u32)| {
        w32(c, REGION_BAR0, REG_TEST_DMA_SRC, 0x10_000);
        w32(c, REGION_BAR0, REG_TEST_DMA_SRC + 4, 0);
        w32(c, REGION_BAR0, REG_TEST_DMA_DST, 0x12_000);
        w32(c, REGION_BAR0, REG_TEST_DMA_DST + 4, 0);
        w32(c, REGION_BAR0, REG_TEST_DMA_LEN, 0x100);
        w32(c, REGION_BAR0, REG_TEST_DMA_CTRL, TEST_DMA_CTRL_START);
    };
    copy(&mut c, &mut w32);
    assert_eq!(status(&mut c), TestStatus::Ok as u32);
    // The client truncates its RAM under the device; the next DMA faults, nothing dies.
    ram.set_len(0).unwrap();
    copy(&mut c, &mut w32);
    assert_eq!(status(&mut c), TestStatus::DmaFault as u32);
    ok(
        &c.call(cmd::DEVICE_GET_INFO, &[0; 16], &[]),
        "still serving",
    );
    drop(c);
    s.finish().unwrap();
    s.check_released();
}

/// Whether every copy of a pipe's write end is closed (the read end sees end of file).
fn write_end_closed(r: &std::fs::File) -> bool {
    use std::io::Read;
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(r.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(r.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    matches!((&*r).read(&mut [0u8; 1]), Ok(0))
}

#[test]
fn short_versions_client_replies_and_stray_fds_are_refused_and_the_session_goes_on() {
    let s = Served::start("short-version");
    let mut c = s.client();
    // VERSION shorter than its fixed part (major, minor), and one before VERSION.
    for payload in [&[][..], &[0u8][..], &[0, 0, 1][..]] {
        let r = c.call(cmd::VERSION, payload, &[]);
        err(&r, &format!("VERSION of {} bytes", payload.len()));
        assert_eq!(r.error, libc::EINVAL as u32);
    }
    err(&c.call(cmd::DEVICE_RESET, &[], &[]), "reset before VERSION");
    c.handshake();
    // A message flagged as a reply (or any type but command) is refused.
    for fl in [vc::FLAG_REPLY, vc::FLAG_REPLY | vc::FLAG_ERROR, 0xf] {
        let id = c.send(cmd::DEVICE_RESET, fl, &[], &[]).unwrap();
        let r = c.recv().unwrap();
        assert_eq!(r.id, id);
        err(&r, &format!("flags {fl:#x}"));
    }
    // Descriptors on commands that take none are closed, every one, and the commands run.
    let (rp, wp) = pipe();
    let w = wp.as_raw_fd();
    for (command, payload) in [
        (cmd::DEVICE_RESET, vec![]),
        (cmd::DEVICE_GET_INFO, vec![0; 16]),
        (cmd::REGION_READ, vc::region(REGION_CONFIG, 0, 4, &[])),
        (cmd::REGION_WRITE, vc::region(REGION_CONFIG, 0x3c, 1, &[0])),
        (cmd::DMA_UNMAP, vc::dma_unmap(0, 0, 0x1000)),
    ] {
        ok(
            &c.call(command, &payload, &[w; 4]),
            &format!("command {command} with fds"),
        );
    }
    // Refused commands close theirs too: unknown, too many for DMA_MAP, SET_IRQS refused.
    err(&c.call(99, &[0; 8], &[w; 2]), "unknown command with fds");
    err(
        &c.call(cmd::DMA_MAP, &vc::dma_map(RW, 0, 0x1000, 0x1000), &[w, w]),
        "DMA_MAP with two fds",
    );
    err(
        &c.call(
            cmd::SET_IRQS,
            &vc::set_irqs(EVENTFD_TRIGGER, MSIX, 0, 1),
            &[w],
        ),
        "a pipe as an eventfd",
    );
    drop(wp);
    assert!(
        write_end_closed(&rp),
        "the server kept a descriptor it was sent"
    );
    s.check_maps(&[]);
    drop(c);
    s.finish().unwrap();
    s.check_released();
}

#[test]
fn a_region_write_declaring_four_gib_is_refused_at_once_without_allocating_it() {
    let s = Served::start("huge-write");
    let mut c = s.client();
    c.handshake();
    // count 0xffff_ffff inside a message of honest size: refused (E2BIG), session goes on.
    let r = c.call(
        cmd::REGION_WRITE,
        &vc::region(REGION_CONFIG, 0, 0xffff_ffff, &[0; 16]),
        &[],
    );
    err(&r, "count 0xffff_ffff");
    assert_eq!(r.error, libc::E2BIG as u32);
    ok(&c.call(cmd::DEVICE_RESET, &[], &[]), "still serving");
    // The same with a message size to match (the largest a header can declare): refused
    // from the header, before any allocation, and the connection ends at once.
    let started = std::time::Instant::now();
    let mut m = vc::header(7, cmd::REGION_WRITE, u32::MAX, 0);
    m.extend_from_slice(&vc::region(REGION_CONFIG, 0, 0xffff_ffff, &[0; 64]));
    c.send_raw(&m, &[]).unwrap();
    let r = c.recv().expect("an error reply");
    assert_eq!(r.id, 7);
    err(&r, "message size u32::MAX");
    assert_eq!(r.error, libc::E2BIG as u32);
    assert!(c.closed(), "the connection ends");
    let end = s.finish();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused promptly, not after reading 4 GiB"
    );
    assert!(
        matches!(end, Err(ServeError::Protocol(ServerError::Framing(_)))),
        "{end:?}"
    );
    s.check_released();
    // The process is fine: a fresh server on a fresh socket serves a full session.
    let s = Served::start("huge-write-after");
    let mut c = s.client();
    c.handshake();
    ok(
        &c.call(cmd::DEVICE_GET_INFO, &[0; 16], &[]),
        "a new session",
    );
    drop(c);
    s.finish().unwrap();
}

/// With `Clients::UntilStopped` a client that disconnects is a hot-unplugged function: its
/// memory is unmapped and its vectors unwired, and the next client (the function plugged in
/// again) finds a reset device: the scratch register it wrote is 0 again.
#[test]
fn a_replugged_client_finds_a_reset_device() {
    use crate::interface::REG_SCRATCH;
    use crate::vfio::layout::REGION_BAR0;
    let s = Served::start_for("replug", Clients::UntilStopped);
    let scratch = |c: &mut RawClient| {
        let r = c.call(
            cmd::REGION_READ,
            &vc::region(REGION_BAR0, REG_SCRATCH as u64, 4, &[]),
            &[],
        );
        ok(&r, "scratch read");
        u32::from_le_bytes(r.payload[HEADER..HEADER + 4].try_into().unwrap())
    };
    for round in 0..3u32 {
        let mut c = s.client();
        c.handshake();
        assert_eq!(
            scratch(&mut c),
            0,
            "round {round}: the device was not reset"
        );
        let ram = memfd(0x2000);
        ok(
            &c.call(
                cmd::DMA_MAP,
                &vc::dma_map(RW, 0, 0x10_000, 0x2000),
                &[ram.as_raw_fd()],
            ),
            "map",
        );
        let r = c.call(
            cmd::REGION_WRITE,
            &vc::region(
                REGION_BAR0,
                REG_SCRATCH as u64,
                4,
                &(0x5ca1_ab1e + round).to_le_bytes(),
            ),
            &[],
        );
        ok(&r, "scratch write");
        assert_eq!(scratch(&mut c), 0x5ca1_ab1e + round);
        drop(c);
        // The server is still there for the next one, and forgot this one.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !s.dev.lock().dma().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: memory still mapped"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(s.done.try_recv().is_err(), "round {round}: serving ended");
        assert!(s.path.exists(), "round {round}: socket file removed");
    }
}
