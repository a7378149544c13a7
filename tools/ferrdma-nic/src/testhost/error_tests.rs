//! The error model: which fault gives which CQE status and which asynchronous event,
//! flushes, reflush, destroy quiescence, CQ overflow and hostile doorbells.

use super::*;
use crate::device::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn events(r: &mut Rig) -> Vec<Eqe> {
    r.h.poll_eq(&mut r.aeq)
}

#[test]
fn out_of_bounds_lkey_gives_prot_error_async_event_and_flushes() {
    let mut r = Rig::rc();
    // Two receives outstanding on A (they get one RQ flush CQE).
    r.h.post_recv(&mut r.a, &[r.buf_a.sg(0, 64)]);
    r.h.post_recv(&mut r.a, &[r.buf_a.sg(64, 64)]);
    // A good unsignaled send, then one reaching past the end of the MR, then one more.
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    r.h.post_send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    let bad = r.h.post_send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0xfff0, 0x20)],
            ..Default::default()
        },
    );
    r.h.post_send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    r.h.ring_sq(&r.a);
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 2, "{c:?}");
    let sq = c.iter().find(|e| e.is_sq()).unwrap();
    assert_eq!(sq.error(), Some((1, flush::PROT)));
    assert_eq!(sq.wqe_idx(), bad);
    let rq = c.iter().find(|e| !e.is_sq()).unwrap();
    assert_eq!(rq.error(), Some((1, flush::GENERAL)));
    let ev = events(&mut r);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].code, ev[0].kind, ev[0].id, ev[0].info),
        (ae::QP_LOCAL_ACCESS, eqe_kind::QP, 2, u32::from(flush::PROT))
    );
    let q = r.h.query_qp(2);
    assert_eq!(
        (q.attrs.state, q.last_error),
        (qp_state::ERR, flush::PROT as u8)
    );
    assert_eq!(q.sq_tail, r.a.sq_head, "the rest of the SQ was consumed");
    // In ERR, a new post gets one flush CQE per doorbell.
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].error(), Some((1, flush::GENERAL)));
    // Reflush of the RQ (libirdma's modify_qp_ex path).
    r.h.post_recv(&mut r.a, &[r.buf_a.sg(0, 64)]);
    let reflush = ModifyQp {
        hdr: Host::hdr(admin_op::MODIFY_QP),
        qp_id: 2,
        attr_mask: qp_attr::STATE,
        flags: MODIFY_QP_RQ_FLUSH,
        attrs: QpAttrs {
            state: qp_state::ERR,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(r.h.admin(reflush.encode()), 0);
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 1);
    assert!(!c[0].is_sq());
    // Unknown lkey and PD mismatch are protection errors too.
    for stag in [0x7_00u32, 0x1_12] {
        let mut r = Rig::rc();
        r.h.send(
            &mut r.a,
            &Wr {
                opcode: sq_op::SEND,
                sges: vec![Sg {
                    addr: r.buf_a.va,
                    len: 8,
                    lkey: stag,
                }],
                ..Default::default()
            },
        );
        let c = r.h.poll_cq(&mut r.cq_a);
        assert_eq!(c[0].error(), Some((1, flush::PROT)), "lkey {stag:#x}");
    }
}

#[test]
fn remote_access_errors_hit_both_sides() {
    let mut r = Rig::rc();
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    // WRITE beyond B's MR.
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            sges: vec![r.buf_a.sg(0, 0x20)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0xfff0,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c[0].error(), Some((1, flush::REM_ACCESS)));
    let ev = events(&mut r);
    let codes: Vec<(u16, u32)> = ev.iter().map(|e| (e.code, e.id)).collect();
    assert!(codes.contains(&(ae::QP_REMOTE_ACCESS, 3)), "{codes:?}");
    assert!(codes.contains(&(ae::QP_REMOTE_ERROR, 2)), "{codes:?}");
    assert_eq!(r.h.query_qp(3).attrs.state, qp_state::ERR);
    // B's outstanding receive was flushed.
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c[0].error(), Some((1, flush::GENERAL)));
    // READ without remote-read access on the responder QP.
    let mut r = Rig::rc();
    assert_eq!(
        r.h.modify(
            3,
            qp_attr::ACCESS,
            QpAttrs {
                access: QP_ACCESS_REMOTE_WRITE,
                ..Default::default()
            }
        ),
        0
    );
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::RDMA_READ,
            sges: vec![r.buf_a.sg(0, 8)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va,
            ..Default::default()
        }),
        Some((1, flush::REM_ACCESS))
    );
    // A wrong rkey key byte.
    let mut r = Rig::rc();
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::RDMA_WRITE,
            sges: vec![r.buf_a.sg(0, 8)],
            hdr_low: r.buf_b.stag ^ 0xff,
            qw2: r.buf_b.va,
            ..Default::default()
        }),
        Some((1, flush::REM_ACCESS))
    );
}

/// Sets the manual device clock of `r` to `t` microseconds (returns the clock's handle).
fn manual_clock(r: &mut Rig, t: u64) -> Arc<AtomicU64> {
    let clock = Arc::new(AtomicU64::new(t));
    r.h.dev().set_clock(Clock::Manual(Arc::clone(&clock)));
    clock
}

/// A signaled 8-byte SEND from A to B.
fn send8(r: &mut Rig) {
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
}

#[test]
fn rnr_retry_and_retry_exceeded() {
    let mut r = Rig::rc();
    let clock = manual_clock(&mut r, 1_000_000);
    // The responder's RNR timer, code 14: 1.28 ms.
    assert_eq!(
        r.h.modify(
            3,
            qp_attr::MIN_RNR_TIMER,
            QpAttrs {
                min_rnr_timer: 14,
                ..Default::default()
            }
        ),
        0
    );
    // rnr_retry 7 (infinite): the send waits until a receive is posted and its RNR timer
    // expires; the engine's timer is what retries it (the NIC is told of no receive).
    send8(&mut r);
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    assert_eq!(r.h.stats().rnr_naks, 1);
    assert_eq!(
        r.h.dev().next_deadline(),
        Some(1_001_280),
        "the responder's timer"
    );
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    // Neither a tick before the timer nor another doorbell of the waiting QP retries it.
    clock.store(1_001_279, Ordering::Relaxed);
    r.h.dev().tick();
    send8(&mut r);
    assert!(
        r.h.poll_cq(&mut r.cq_a).is_empty(),
        "retried before its timer"
    );
    assert_eq!(r.h.stats().rnr_naks, 1);
    clock.store(1_001_280, Ordering::Relaxed);
    r.h.dev().tick();
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!((c.len(), c[0].error()), (1, None));
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
    // The second send found no receive: waiting again, 1.28 ms from now.
    assert_eq!(r.h.stats().rnr_naks, 2);
    assert_eq!(r.h.dev().next_deadline(), Some(1_002_560));
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    clock.store(1_002_560, Ordering::Relaxed);
    r.h.dev().tick();
    assert_eq!(r.h.poll_cq(&mut r.cq_a).len(), 1);
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
    assert_eq!(r.h.dev().next_deadline(), None, "nothing waits");
    // rnr_retry 0: immediate RNR_RETRY_EXC.
    assert_eq!(
        r.h.modify(
            2,
            qp_attr::RNR_RETRY,
            QpAttrs {
                rnr_retry: 0,
                ..Default::default()
            }
        ),
        0
    );
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        }),
        Some((1, flush::RNR_RETRY_EXC))
    );
    assert!(events(&mut r)
        .iter()
        .any(|e| e.code == ae::QP_RNR_RETRY_EXCEEDED));
    // rnr_retry 2: fails on the third NAK, each after the responder's timer (0: 655.36 ms).
    let mut r = Rig::rc();
    let clock = manual_clock(&mut r, 0);
    assert_eq!(
        r.h.modify(
            2,
            qp_attr::RNR_RETRY,
            QpAttrs {
                rnr_retry: 2,
                ..Default::default()
            }
        ),
        0
    );
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    clock.store(655_359, Ordering::Relaxed);
    r.h.dev().tick();
    assert_eq!(r.h.stats().rnr_naks, 1, "retried before the timer");
    clock.store(655_360, Ordering::Relaxed);
    r.h.dev().tick();
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    assert_eq!(r.h.stats().rnr_naks, 2);
    clock.store(2 * 655_360, Ordering::Relaxed);
    r.h.dev().tick();
    assert_eq!(
        r.h.poll_cq(&mut r.cq_a)[0].error(),
        Some((1, flush::RNR_RETRY_EXC))
    );
    // Destination not ready (INIT): transport retries exceeded.
    let mut r = Rig::rc();
    assert_eq!(
        r.h.modify(
            3,
            qp_attr::STATE,
            QpAttrs {
                state: qp_state::RESET,
                ..Default::default()
            }
        ),
        0
    );
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::RDMA_WRITE,
            sges: vec![r.buf_a.sg(0, 8)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va,
            ..Default::default()
        }),
        Some((1, flush::RETRY_EXC))
    );
    assert!(events(&mut r)
        .iter()
        .any(|e| e.code == ae::QP_RETRY_EXCEEDED));
}

#[test]
fn message_too_long_for_the_receive() {
    let mut r = Rig::rc();
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 16)]);
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0, 17)],
            ..Default::default()
        }),
        Some((1, flush::REM_INV_REQ))
    );
    assert_eq!(
        r.h.poll_cq(&mut r.cq_b)[0].error(),
        Some((1, flush::LOC_LEN))
    );
    let ev = events(&mut r);
    assert!(ev
        .iter()
        .any(|e| (e.code, e.id) == (ae::QP_INVALID_REQUEST, 3)));
    // Receive scatter into an MR without local write: PROT at the responder, REM_OP here.
    let mut r = Rig::rc();
    let ro = r.h.reg_mr(0x9_00, 1, 0, 0x1000);
    r.h.post_recv(&mut r.b, &[ro.sg(0, 64)]);
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        }),
        Some((1, flush::REM_OP))
    );
    assert_eq!(r.h.poll_cq(&mut r.cq_b)[0].error(), Some((1, flush::PROT)));
}

#[test]
fn malformed_and_unsupported_wqes() {
    for (hdr_bits, want) in [
        (1u64 << 56, flush::LOC_QP_OP),                      // push bit
        ((0x70u64 << 48) | (1 << 57), flush::LOC_QP_OP),     // inline length 112
        (u64::from(sq_op::BIND_MW) << 32, flush::LOC_QP_OP), // not supported
        (0x3fu64 << 32, flush::LOC_QP_OP),                   // unknown opcode
    ] {
        let mut r = Rig::rc();
        let at = r.a.sq_pages[0];
        let hdr = (1u64 << 63)
            | (1 << 62)
            | hdr_bits
            | if hdr_bits >> 32 & 0x3f == 0 {
                3 << 32
            } else {
                0
            };
        r.h.w64(at + 24, hdr);
        r.h.ring_sq(&r.a);
        let c = r.h.poll_cq(&mut r.cq_a);
        assert_eq!(c[0].error(), Some((1, want)), "{hdr:#x}");
        assert!(events(&mut r).iter().any(|e| e.code == ae::QP_FATAL));
    }
    // An RDMA WRITE on a UD QP.
    let mut h = Host::new();
    h.standard();
    let mut cq = h.create_cq(1, 64, 1);
    let mut ud = h.create_qp(9, QP_TYPE_UD, 1, 1, 1, 64, 8, 0);
    h.ud_to_rts(9, 1);
    h.send(
        &mut ud,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            ..Default::default()
        },
    );
    assert_eq!(h.poll_cq(&mut cq)[0].error(), Some((1, flush::LOC_QP_OP)));
}

#[test]
fn modify_to_err_flushes_and_destroy_quiesces() {
    let mut r = Rig::rc();
    // B is in RESET: A's WQEs do not run while A is only RTR.
    assert_eq!(
        r.h.modify(
            2,
            qp_attr::STATE,
            QpAttrs {
                state: qp_state::SQD,
                ..Default::default()
            }
        ),
        0
    );
    assert!(events(&mut r).iter().any(|e| e.code == ae::QP_SQ_DRAINED));
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::NOP,
            signaled: true,
            ..Default::default()
        },
    );
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty(), "SQD starts nothing");
    r.h.post_recv(&mut r.a, &[r.buf_a.sg(0, 8)]);
    assert_eq!(
        r.h.modify(
            2,
            qp_attr::STATE,
            QpAttrs {
                state: qp_state::ERR,
                ..Default::default()
            }
        ),
        0
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 2, "one SQ and one RQ flush CQE");
    assert!(c.iter().all(|e| e.error() == Some((1, flush::GENERAL))));
    assert_eq!(
        r.h.modify(
            2,
            qp_attr::STATE,
            QpAttrs {
                state: qp_state::RTS,
                ..Default::default()
            }
        ),
        admin_status::BAD_STATE
    );
    // Destroy: afterwards nothing is written for the QP, whatever is posted and rung.
    r.h.post_send(
        &mut r.a,
        &Wr {
            opcode: sq_op::NOP,
            signaled: true,
            ..Default::default()
        },
    );
    assert_eq!(r.h.admin(Host::object(admin_op::DESTROY_QP, 2)), 0);
    r.h.ring_sq(&r.a);
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    // Sends to the destroyed QP fail with RETRY_EXC.
    r.h.send(
        &mut r.b,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_b.sg(0, 8)],
            ..Default::default()
        },
    );
    assert_eq!(
        r.h.poll_cq(&mut r.cq_b)[0].error(),
        Some((1, flush::RETRY_EXC))
    );
    // ERR -> RESET -> INIT works and rewinds the rings.
    assert_eq!(
        r.h.modify(
            3,
            qp_attr::STATE,
            QpAttrs {
                state: qp_state::RESET,
                ..Default::default()
            }
        ),
        0
    );
    let q = r.h.query_qp(3);
    assert_eq!((q.sq_tail, q.rq_tail, q.sq_polarity), (0, 0, 1));
}

#[test]
fn cq_overflow_stops_the_cq_and_raises_an_event() {
    let mut h = Host::new();
    let (mut aeq, _ceq) = h.standard();
    let mut cq = h.create_cq(1, 4, 1);
    let mut qp = h.create_qp(2, QP_TYPE_RC, 1, 1, 1, 64, 8, 0);
    h.connect_rc(2, 2, 0);
    h.poll_eq(&mut aeq);
    for _ in 0..4 {
        h.send(
            &mut qp,
            &Wr {
                opcode: sq_op::NOP,
                signaled: true,
                ..Default::default()
            },
        );
    }
    let ev = h.poll_eq(&mut aeq);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].code, ev[0].kind, ev[0].id),
        (ae::CQ_OVERFLOW, eqe_kind::CQ, 1)
    );
    assert_eq!(h.poll_cq(&mut cq).len(), 3, "one slot always stays free");
    // The CQ stays stopped.
    h.send(
        &mut qp,
        &Wr {
            opcode: sq_op::NOP,
            signaled: true,
            ..Default::default()
        },
    );
    assert!(h.poll_cq(&mut cq).is_empty());
}

#[test]
fn hostile_doorbells_are_harmless_and_bus_master_gates_dma() {
    let mut r = Rig::rc();
    let before = r.h.dev().engine().stats().spurious_doorbells;
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    r.h.post_send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    r.h.doorbell(0, DB_SQ_OFFSET, r.a.id); // wrong page
    r.h.doorbell(1, DB_SQ_OFFSET, 0xfff0_0002); // push bits set
    r.h.doorbell(1, DB_SQ_OFFSET, 999); // no such QP
    r.h.doorbell(1, 0x80, r.a.id); // unused offset
    r.h.dev()
        .write_region(crate::vfio::layout::REGION_DB, 4096, &[1, 2])
        .unwrap();
    // Past the BAR is an access to nothing: refused to the client, as a read is.
    assert!(r
        .h
        .dev()
        .write_region(crate::vfio::layout::REGION_DB, DB_BAR_SIZE as u64, &[0; 4])
        .is_err());
    assert!(r
        .h
        .dev()
        .write_region(crate::vfio::layout::REGION_DB, u64::MAX - 1, &[0; 4])
        .is_err());
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    assert!(r.h.dev().engine().stats().spurious_doorbells >= before + 4);
    // Bus mastering off: the doorbell is ignored; back on, the next doorbell runs it.
    r.h.cfg_w16(4, 0x2);
    r.h.ring_sq(&r.a);
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    r.h.cfg_w16(4, 0x6);
    r.h.ring_sq(&r.a);
    assert_eq!(r.h.poll_cq(&mut r.cq_a).len(), 1);
    // Reads of the doorbell BAR return 0.
    let mut b = [0xffu8; 4];
    r.h.dev()
        .read_region(crate::vfio::layout::REGION_DB, 0, &mut b)
        .unwrap();
    assert_eq!(b, [0; 4]);
}

/// A receive posted to a QP in ERR with no doorbell and no reflush request (libirdma's
/// post_recv when libibverbs' cached QP state was not yet ERR: a completion thread reposting
/// while another thread disconnects) is flushed by the device on its own, 1 ms after the QP
/// entered ERR and then at doubling intervals, and an armed CQ gets its event; a QP that
/// leaves ERR is no longer looked at.
#[test]
fn receives_posted_after_the_flush_are_flushed_without_a_doorbell() {
    let mut r = Rig::rc();
    let clock = manual_clock(&mut r, 1_000_000);
    let err = QpAttrs {
        state: qp_state::ERR,
        ..Default::default()
    };
    r.h.post_recv(&mut r.a, &[r.buf_a.sg(0, 8)]);
    assert_eq!(r.h.modify(2, qp_attr::STATE, err), 0);
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].error(), Some((1, flush::GENERAL)));
    // The repost, no doorbell; the application sleeps until its CQ's next event.
    r.h.post_recv(&mut r.a, &[r.buf_a.sg(0, 8)]);
    r.h.arm_cq(&r.cq_a, false);
    r.h.poll_eq(&mut r.ceq);
    r.h.arm_eq(&r.ceq);
    r.h.dev().tick();
    assert!(
        r.h.poll_cq(&mut r.cq_a).is_empty(),
        "looked at before its time"
    );
    assert_eq!(r.h.dev().next_deadline(), Some(1_001_000));
    clock.store(1_001_000, Ordering::Relaxed);
    r.h.dev().tick();
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 1, "the late receive's flush CQE");
    assert_eq!(c[0].error(), Some((1, flush::GENERAL)));
    assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1, "the armed CQ's event");
    // Nothing new: the next looks come 1 ms, then 2 ms, later.
    assert_eq!(r.h.dev().next_deadline(), Some(1_002_000));
    clock.store(1_002_000, Ordering::Relaxed);
    r.h.dev().tick();
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    assert_eq!(r.h.dev().next_deadline(), Some(1_004_000));
    // Out of ERR, no more looks.
    let reset = QpAttrs {
        state: qp_state::RESET,
        ..Default::default()
    };
    assert_eq!(r.h.modify(2, qp_attr::STATE, reset), 0);
    clock.store(1_004_000, Ordering::Relaxed);
    r.h.dev().tick();
    assert_eq!(r.h.dev().next_deadline(), None);
}
