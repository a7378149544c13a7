//! The NIC's port under link-level flow control (`rdma/pause.rs`): a PFC frame holds the
//! frames of the priorities it pauses, for its time, while other frames go; a PAUSE holds
//! everything; XON releases at once; the engine's timer wakes when a pause ends; frames that
//! only look like flow control pause nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::wire_tests::{Nic, Path, QPN};
use super::*;
use crate::device::Clock;
use crate::wire::pfc::{self, Pfc};

const SWITCH: [u8; 6] = [2, 0, 0, 0, 0, 9];

/// Two connected NICs at 10 Gb/s: the sender's frames stay in its outbox until taken.
fn pair(clock: &Arc<AtomicU64>) -> (Nic, Nic) {
    let path = Path {
        mtu: 5,
        ..Path::default()
    };
    let mut rx = Nic::build(1, Clock::Manual(Arc::clone(clock)), 1 << 20, false);
    let mut tx = Nic::build(2, Clock::Manual(Arc::clone(clock)), 1 << 20, false);
    for nic in [&mut rx, &mut tx] {
        let mut cc = nic.h.dev().engine().cc().clone();
        cc.line_mbps = 10_000;
        nic.h.dev().set_cc(cc).unwrap();
    }
    rx.connect_qp(QPN, QPN, 2, path, 0x100, 0x200);
    tx.connect_qp(QPN, QPN, 1, path, 0x200, 0x100);
    (rx, tx)
}

fn write(tx: &mut Nic, rx: &Nic, len: u32) {
    let wr = rx.dst.write_from(&tx.src, len);
    tx.h.send(&mut tx.qp, &wr);
}

#[test]
fn a_pfc_pause_holds_its_priority_until_its_time_or_an_xon() {
    let clock = Arc::new(AtomicU64::new(1_000_000));
    let (rx, mut tx) = pair(&clock);
    let data = pattern(8192, 5);
    tx.h.write(tx.src.gpa, &data);
    // The path's traffic class 0x60 (`connect_qp`): DSCP 24, priority 3. Pause it for
    // 0xffff quanta: 3356 us at 10 Gb/s.
    tx.h.dev()
        .rx_frame(&Pfc::new(SWITCH, 1 << 3, 0xffff).build());
    write(&mut tx, &rx, 8192);
    assert!(tx.h.dev().take_tx().is_empty(), "priority 3 is held");
    let now = clock.load(Ordering::Relaxed);
    assert_eq!(tx.h.dev().next_deadline(), Some(now + 3356));
    clock.fetch_add(3355, Ordering::Relaxed);
    tx.h.dev().tick();
    assert!(tx.h.dev().take_tx().is_empty(), "one microsecond early");
    clock.fetch_add(1, Ordering::Relaxed);
    let frames = tx.h.dev().take_tx();
    assert_eq!(
        frames.len(),
        2,
        "the WRITE's two packets go when the pause ends"
    );
    assert!(frames.iter().all(|f| pfc::priority(f) == 3));
    // Paused again, then XON: the next WRITE goes at once.
    tx.h.dev()
        .rx_frame(&Pfc::new(SWITCH, 1 << 3, 0xffff).build());
    write(&mut tx, &rx, 4096);
    assert!(tx.h.dev().take_tx().is_empty());
    tx.h.dev().rx_frame(&Pfc::new(SWITCH, 1 << 3, 0).build());
    assert_eq!(tx.h.dev().take_tx().len(), 1);
    // Another priority's pause holds nothing of priority 3.
    tx.h.dev()
        .rx_frame(&Pfc::new(SWITCH, 1 << 6, 0xffff).build());
    write(&mut tx, &rx, 4096);
    assert_eq!(tx.h.dev().take_tx().len(), 1);
    let c = tx.h.dev().engine().counters().clone();
    assert_eq!(c.pfc_frames_rx, 4);
    assert_eq!(c.retransmits, 0);
    // The bytes: every packet still arrives whole at the responder.
    for f in &frames {
        rx.h.dev().rx_frame(f);
    }
    assert_eq!(rx.h.read(rx.dst.gpa, 8192), data);
}

#[test]
fn an_802_3x_pause_holds_every_priority() {
    let clock = Arc::new(AtomicU64::new(1_000_000));
    let (rx, mut tx) = pair(&clock);
    let mut pause = vec![0u8; 60];
    pause[0..6].copy_from_slice(&pfc::PAUSE_DST);
    pause[6..12].copy_from_slice(&SWITCH);
    // 100 quanta: 5.12 us at 10 Gb/s, 6 us on the engine's clock.
    pause[12..18].copy_from_slice(&[0x88, 0x08, 0x00, 0x01, 0x00, 100]);
    tx.h.dev().rx_frame(&pause);
    write(&mut tx, &rx, 64);
    assert!(tx.h.dev().take_tx().is_empty());
    clock.fetch_add(6, Ordering::Relaxed);
    assert_eq!(tx.h.dev().take_tx().len(), 1);
}

#[test]
fn frames_that_only_look_like_flow_control_pause_nothing() {
    let clock = Arc::new(AtomicU64::new(1_000_000));
    let (rx, mut tx) = pair(&clock);
    let good = Pfc::new(SWITCH, 0xff, 0xffff).build();
    let drops = tx.h.dev().engine().stats().rx_drops;
    // Another MAC control opcode, and a PFC frame cut short.
    let mut other = good.clone();
    other[15] = 0x03;
    tx.h.dev().rx_frame(&other);
    tx.h.dev().rx_frame(&good[..20]);
    write(&mut tx, &rx, 64);
    assert_eq!(tx.h.dev().take_tx().len(), 1);
    assert_eq!(tx.h.dev().engine().stats().rx_drops, drops + 2);
    assert_eq!(tx.h.dev().engine().counters().pfc_frames_rx, 0);
}
