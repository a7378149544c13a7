//! Event queues (polarity, wrap-around, arming, moderation, overflow) and CQ arming.

use super::*;
use crate::device::Clock;
use crate::rdma::cq::ARM_CHECK_US;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn toggle_link(h: &mut Host, up: bool) {
    let p = SetPort {
        hdr: Host::hdr(admin_op::SET_PORT),
        link: u8::from(up),
        mtu: 3,
        ..Default::default()
    };
    assert_eq!(h.admin(p.encode()), 0);
}

#[test]
fn aeq_wraps_around_with_polarity_and_one_interrupt_per_arm() {
    let mut h = Host::new();
    let mut aeq = h.create_eq(0, EQ_KIND_AEQ, 0, 16);
    // The admin queue's interrupt shares vector 0: turn it off to count EQ interrupts.
    h.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE);
    h.irqs(0);
    // Disarmed: events are written but no interrupt.
    toggle_link(&mut h, true);
    assert_eq!(h.irqs(0), 0);
    let ev = h.poll_eq(&mut aeq);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].code, ev[0].kind), (ae::PORT_ACTIVE, eqe_kind::PORT));
    let up = false;
    for round in 0..50 {
        h.arm_eq(&aeq);
        toggle_link(&mut h, up);
        toggle_link(&mut h, !up);
        assert_eq!(h.irqs(0), 1, "round {round}: one interrupt per arm");
        let ev = h.poll_eq(&mut aeq);
        assert_eq!(ev.len(), 2, "round {round}");
        let want = if up {
            [ae::PORT_ACTIVE, ae::PORT_DOWN]
        } else {
            [ae::PORT_DOWN, ae::PORT_ACTIVE]
        };
        assert_eq!([ev[0].code, ev[1].code], want);
    }
    assert!(aeq.cons != 0 || !aeq.pol, "wrapped several times");
    // Re-arming with unconsumed entries raises at once.
    toggle_link(&mut h, false);
    assert_eq!(h.irqs(0), 0);
    h.arm_eq(&aeq);
    assert_eq!(h.irqs(0), 1);
    // Bad EQ doorbells are ignored.
    h.set_reg(REG_EQ_DOORBELL, eq_doorbell(0, 16, true));
    h.set_reg(REG_EQ_DOORBELL, eq_doorbell(5, 0, true));
    assert!(h.dev().engine().stats().spurious_doorbells >= 2);
}

#[test]
fn full_aeq_drops_and_never_overwrites() {
    let mut h = Host::new();
    let mut aeq = h.create_eq(0, EQ_KIND_AEQ, 0, 16);
    for i in 0..40 {
        toggle_link(&mut h, i % 2 == 0);
    }
    // One slot stays free: 15 entries, the first one PORT_ACTIVE.
    let ev = h.poll_eq(&mut aeq);
    assert_eq!(ev.len(), 15);
    assert_eq!(ev[0].code, ae::PORT_ACTIVE);
    h.arm_eq(&aeq);
    toggle_link(&mut h, true);
    assert_eq!(h.poll_eq(&mut aeq).len(), 1);
}

#[test]
fn eq_creation_rules() {
    let mut h = Host::new();
    let ring = PageList {
        addr: RAM_BASE + 0x10_0000,
        npages: 1,
        level: 0,
        ..Default::default()
    };
    let eq = |id, kind, vector, size, moderation_us| {
        CreateEq {
            hdr: Host::hdr(admin_op::CREATE_EQ),
            eq_id: id,
            size,
            vector,
            kind,
            moderation_us,
            ring,
            ..Default::default()
        }
        .encode()
    };
    assert_eq!(h.admin(eq(0, EQ_KIND_AEQ, 1, 16, 0)), admin_status::INVALID);
    assert_eq!(h.admin(eq(0, EQ_KIND_CEQ, 0, 16, 0)), admin_status::INVALID);
    assert_eq!(h.admin(eq(0, EQ_KIND_CEQ, 8, 16, 0)), admin_status::INVALID);
    assert_eq!(h.admin(eq(0, 7, 1, 16, 0)), admin_status::INVALID);
    assert_eq!(h.admin(eq(0, EQ_KIND_CEQ, 1, 24, 0)), admin_status::INVALID);
    assert_eq!(
        h.admin(eq(0, EQ_KIND_CEQ, 1, 512, 0)),
        admin_status::INVALID,
        "ring too small"
    );
    assert_eq!(
        h.admin(eq(0, EQ_KIND_CEQ, 1, 16, MAX_EQ_MODERATION_US + 1)),
        admin_status::INVALID
    );
    assert_eq!(
        h.admin(eq(MAX_EQ, EQ_KIND_CEQ, 1, 16, 0)),
        admin_status::BAD_ID
    );
    assert_eq!(h.admin(eq(0, EQ_KIND_CEQ, 1, 16, 0)), 0);
    assert_eq!(h.admin(eq(0, EQ_KIND_CEQ, 2, 16, 0)), admin_status::EXISTS);
    assert_eq!(
        h.admin(eq(1, EQ_KIND_CEQ, 1, 16, 0)),
        admin_status::EXISTS,
        "one EQ per vector"
    );
    assert_eq!(h.admin(Host::object(admin_op::DESTROY_EQ, 0)), 0);
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_EQ, 0)),
        admin_status::NOT_FOUND
    );
}

/// A send from A to B, for arming tests: B's CQ gets an RQ CQE.
fn one_send(r: &mut Rig, solicited: bool) {
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    let wr = Wr {
        opcode: if solicited {
            sq_op::SEND_SOL
        } else {
            sq_op::SEND
        },
        signaled: false,
        sges: vec![r.buf_a.sg(0, 16)],
        ..Default::default()
    };
    r.h.send(&mut r.a, &wr);
}

#[test]
fn cq_arm_next_and_solicited_one_event_per_arm() {
    let mut r = Rig::rc();
    r.h.irqs(1);
    // Not armed: no CEQ entry.
    one_send(&mut r, false);
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    // Armed for any: exactly one event for two completions.
    r.h.arm_cq(&r.cq_b, false);
    one_send(&mut r, false);
    one_send(&mut r, false);
    let ev = r.h.poll_eq(&mut r.ceq);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].id, ev[0].kind, ev[0].code),
        (2, eqe_kind::CQ, ae::CQ_COMPLETION)
    );
    assert_eq!(r.h.irqs(1), 1);
    r.h.arm_eq(&r.ceq);
    // Without an arm, no event.
    one_send(&mut r, false);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    assert_eq!(r.h.irqs(1), 0);
    // Solicited-only: a plain send does not trigger, a solicited one does.
    r.h.arm_cq(&r.cq_b, true);
    one_send(&mut r, false);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    one_send(&mut r, true);
    let ev = r.h.poll_eq(&mut r.ceq);
    assert_eq!(ev.len(), 1);
    assert_eq!(r.h.irqs(1), 1);
    let cqes = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(cqes.len(), 5);
    assert!(cqes[4].solicited() && !cqes[3].solicited());
    // A doorbell from the wrong page is ignored.
    let before = r.h.dev().engine().stats().spurious_doorbells;
    r.h.doorbell(0, DB_CQ_ARM_OFFSET, 2);
    assert_eq!(r.h.dev().engine().stats().spurious_doorbells, before + 1);
}

/// Every event names its object by id and by the tag the object was created with (interface
/// 1.3): an entry written just before a DESTROY_CQ may be read after the id was given to a new
/// CQ, and only the tag tells the driver it is not the new CQ's. Events without an object
/// (port) carry 0.
#[test]
fn events_carry_the_event_tag_of_their_object() {
    let mut r = Rig::rc();
    r.h.arm_cq(&r.cq_b, false);
    one_send(&mut r, false);
    let ev = r.h.poll_eq(&mut r.ceq);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].kind, ev[0].id, ev[0].tag),
        (eqe_kind::CQ, r.cq_b.id, Host::cq_tag(r.cq_b.id))
    );
    // A QP's asynchronous event: SEND from an lkey range past the end of its MR.
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![r.buf_a.sg(0xfff0, 0x20)],
            ..Default::default()
        },
    );
    let ev = r.h.poll_eq(&mut r.aeq);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].kind, ev[0].code, ev[0].id, ev[0].tag),
        (
            eqe_kind::QP,
            ae::QP_LOCAL_ACCESS,
            r.a.id,
            Host::qp_tag(r.a.id)
        )
    );
    toggle_link(&mut r.h, false);
    let ev = r.h.poll_eq(&mut r.aeq);
    assert!(
        ev.iter().any(|e| e.kind == eqe_kind::PORT && e.tag == 0),
        "{ev:?}"
    );
}

/// Doorbells are processed after software wrote them; a consumer that arms four times
/// (events taken back to back) before the device reads the first doorbell leaves the 2-bit
/// `ARM_SEQ` where it was. Those arms still count: the next completion raises an event.
#[test]
fn cq_arms_whose_sequence_number_wrapped_still_arm() {
    let mut r = Rig::rc();
    r.h.irqs(1);
    for _ in 0..4 {
        r.h.write_arm_word(&r.cq_b, false);
    }
    for _ in 0..4 {
        r.h.doorbell(1, DB_CQ_ARM_OFFSET, 2);
    }
    one_send(&mut r, false);
    let ev = r.h.poll_eq(&mut r.ceq);
    assert_eq!(ev.len(), 1, "the wrapped arms were lost");
    assert_eq!(r.h.irqs(1), 1);
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
    // The arm was used up by that completion: the next one raises nothing.
    r.h.arm_eq(&r.ceq);
    one_send(&mut r, false);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    assert_eq!(r.h.irqs(1), 0);
}

/// A CEQ with a moderation interval: the first interrupt goes at once, the next one not
/// before the interval has passed since it (the entry itself is written at once), and the
/// engine's timer raises it then.
#[test]
fn ceq_moderation_spaces_interrupts() {
    let mut r = Rig::rc();
    let clock = Arc::new(AtomicU64::new(1_000_000));
    r.h.dev().set_clock(Clock::Manual(Arc::clone(&clock)));
    let mut ceq = r.h.create_eq_moderated(2, EQ_KIND_CEQ, 2, 64, 100);
    r.h.arm_eq(&ceq);
    let to_eq2 = ModifyCq {
        hdr: Host::hdr(admin_op::MODIFY_CQ),
        cq_id: r.cq_b.id,
        eq_id: 2,
        flags: MODIFY_CQ_EQ,
        ..Default::default()
    };
    assert_eq!(r.h.admin(to_eq2.encode()), 0);
    r.h.irqs(2);
    let event = |r: &mut Rig, ceq: &mut EqH| {
        r.h.arm_cq(&r.cq_b, false);
        one_send(r, false);
        r.h.poll_cq(&mut r.cq_b);
        let ev = r.h.poll_eq(ceq);
        assert_eq!(ev.len(), 1, "the entry is written at once");
        r.h.arm_eq(ceq);
    };
    event(&mut r, &mut ceq);
    assert_eq!(r.h.irqs(2), 1, "the first interrupt is not held");
    assert_eq!(r.h.dev().next_deadline(), None);

    clock.fetch_add(10, Ordering::Relaxed);
    event(&mut r, &mut ceq);
    assert_eq!(r.h.irqs(2), 0, "held: 10 us after the last interrupt");
    assert_eq!(r.h.dev().next_deadline(), Some(1_000_100));
    clock.store(1_000_099, Ordering::Relaxed);
    r.h.dev().tick();
    assert_eq!(r.h.irqs(2), 0);
    clock.store(1_000_100, Ordering::Relaxed);
    r.h.dev().tick();
    assert_eq!(r.h.irqs(2), 1, "raised when the interval has passed");
    assert_eq!(r.h.dev().next_deadline(), None);

    // Long after the last interrupt, the next one goes at once again; the other CEQ, without
    // moderation, never waits.
    clock.fetch_add(1_000, Ordering::Relaxed);
    event(&mut r, &mut ceq);
    assert_eq!(r.h.irqs(2), 1);
    r.h.irqs(1);
    for _ in 0..2 {
        r.h.arm_cq(&r.cq_a, false);
        r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
        let wr = Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 16)],
            ..Default::default()
        };
        r.h.send(&mut r.a, &wr);
        r.h.poll_cq(&mut r.cq_a);
        r.h.poll_cq(&mut r.cq_b);
        assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1);
        r.h.arm_eq(&r.ceq);
    }
    assert_eq!(r.h.irqs(1), 2);
}

#[test]
fn ceq_overflow_is_reported_on_the_aeq() {
    let mut h = Host::new();
    let mut aeq = h.create_eq(0, EQ_KIND_AEQ, 0, 16);
    let mut ceq = h.create_eq(1, EQ_KIND_CEQ, 1, 16);
    assert_eq!(h.admin(gid_cmd(admin_op::ADD_GID, 0, GID0)), 0);
    let p = SetPort {
        hdr: Host::hdr(admin_op::SET_PORT),
        link: 1,
        mtu: 3,
        ..Default::default()
    };
    assert_eq!(h.admin(p.encode()), 0);
    h.poll_eq(&mut aeq);
    let mut cq = h.create_cq(3, 256, 1);
    let mut qp = h.create_qp(2, QP_TYPE_RC, 1, 3, 3, 512, 8, 0);
    h.connect_rc(2, 2, 0);
    // Each NOP completion with the CQ re-armed produces one CEQ entry; 15 fit.
    for _ in 0..20 {
        h.arm_cq(&cq, false);
        h.send(
            &mut qp,
            &Wr {
                opcode: sq_op::NOP,
                signaled: true,
                ..Default::default()
            },
        );
    }
    assert_eq!(h.poll_cq(&mut cq).len(), 20);
    assert_eq!(h.poll_eq(&mut ceq).len(), 15);
    let ev = h.poll_eq(&mut aeq);
    assert_eq!(ev.len(), 1, "overflow reported once: {ev:?}");
    assert_eq!((ev[0].code, ev[0].id), (ae::EQ_OVERFLOW, 1));
}

#[test]
fn cq_ring_wraps_with_extended_cqes_straddling_the_end() {
    let mut r = Rig::rc();
    // CQ B has 64 slots; completions with immediate data take 2. 100 of them wrap three
    // times and some straddle the end (poll_cq checks the extension's polarity).
    for i in 0..100u32 {
        r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
        let wr = Wr {
            opcode: sq_op::SEND,
            imm: Some(0x1000 + i),
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        };
        r.h.send(&mut r.a, &wr);
        // Consume every few sends so the ring never overflows.
        if i % 8 == 7 {
            let c = r.h.poll_cq(&mut r.cq_b);
            assert_eq!(c.len(), 8);
            for (k, e) in c.iter().enumerate() {
                assert_eq!(e.imm(), Some(0x1000 + i - 7 + k as u32));
            }
        }
    }
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 4);
}

/// A [`Rig`] whose device runs on a clock the test sets.
fn rig_with_clock() -> (Rig, Arc<AtomicU64>) {
    let r = Rig::rc();
    let clock = Arc::new(AtomicU64::new(1_000_000));
    r.h.dev().set_clock(Clock::Manual(Arc::clone(&clock)));
    (r, clock)
}

/// Lets the device clock run `us` and the device's timers fire.
fn run_for(r: &mut Rig, clock: &AtomicU64, us: u64) {
    clock.fetch_add(us, Ordering::Relaxed);
    r.h.dev().tick();
}

/// Doorbells are posted writes: an arm can reach the device after CQEs the consumer has not
/// polled yet. If the consumer does not poll them (it polled before they came and now
/// sleeps), the arm check raises the event [`ARM_CHECK_US`] later (solicited-only: if one of
/// them is solicited), so the classic "arm, then poll" consumer never sleeps on a completion
/// that raced the arm.
#[test]
fn arm_with_unpolled_cqes_fires_if_they_stay_unpolled() {
    let (mut r, clock) = rig_with_clock();
    r.h.irqs(1);
    one_send(&mut r, false);
    // Armed for any with one unpolled CQE: nothing yet, the event after the check.
    r.h.arm_cq(&r.cq_b, false);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    assert_eq!(r.h.dev().next_deadline(), Some(1_000_000 + ARM_CHECK_US));
    run_for(&mut r, &clock, ARM_CHECK_US - 1);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    run_for(&mut r, &clock, 1);
    assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1);
    assert_eq!(r.h.irqs(1), 1);
    r.h.arm_eq(&r.ceq);
    // That arm is used up: another completion gives no event.
    one_send(&mut r, false);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    // Solicited-only with only unsolicited CQEs unpolled: nothing, and no check.
    r.h.arm_cq(&r.cq_b, true);
    assert_eq!(r.h.dev().next_deadline(), None);
    run_for(&mut r, &clock, ARM_CHECK_US);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    // Once everything is polled, a new arm waits for a new completion.
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 2);
    r.h.arm_cq(&r.cq_b, false);
    assert!(r.h.poll_eq(&mut r.ceq).is_empty());
    one_send(&mut r, true);
    assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1);
    r.h.arm_eq(&r.ceq);
    // A solicited CQE left unpolled satisfies a solicited-only arm after the check.
    r.h.arm_cq(&r.cq_b, true);
    run_for(&mut r, &clock, ARM_CHECK_US);
    assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1);
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
}

/// The usual consumer: take the event, arm, then poll the CQEs that raised it. The arm found
/// them unpolled, but the consumer took them before the check: no second event for them
/// (perftest `-e` polls once per event and falls out of step on spurious ones), and the arm
/// still stands for the next completion.
#[test]
fn arm_then_poll_raises_no_event_for_what_was_polled() {
    let (mut r, clock) = rig_with_clock();
    r.h.irqs(1);
    for round in 0..3 {
        one_send(&mut r, round % 2 == 1);
        one_send(&mut r, false);
        r.h.arm_cq(&r.cq_b, round % 2 == 1);
        assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 2);
        run_for(&mut r, &clock, ARM_CHECK_US);
        assert!(
            r.h.poll_eq(&mut r.ceq).is_empty(),
            "round {round}: an event for CQEs polled after the arm"
        );
        assert_eq!(r.h.irqs(1), 0);
        // Still armed: the next (solicited) completion raises the event.
        one_send(&mut r, true);
        assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1, "round {round}");
        assert_eq!(r.h.irqs(1), 1);
        r.h.arm_eq(&r.ceq);
        assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
    }
    // Polling only part of what the arm found (one CQE per event, as perftest does) leaves
    // the consumer with CQEs and no event: the check raises one.
    one_send(&mut r, false);
    one_send(&mut r, false);
    r.h.arm_cq(&r.cq_b, false);
    assert_eq!(r.h.poll_cq_n(&mut r.cq_b, 1).len(), 1);
    run_for(&mut r, &clock, ARM_CHECK_US);
    assert_eq!(r.h.poll_eq(&mut r.ceq).len(), 1);
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
}
