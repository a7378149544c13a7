//! CQ resize (MODIFY_CQ RESIZE) as libirdma drives it: CQEs written before stay in the old
//! ring and later ones go to the new one; until the consumer's SW_CQ_SELECT catches up, its
//! consumer index (still the old ring's) does not count against the new ring; a ring too small
//! for the unpolled CQEs is refused. Also the move to another CEQ.

use super::*;

fn nop(r: &mut Rig) {
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::NOP,
            signaled: true,
            ..Default::default()
        },
    );
}

/// MODIFY_CQ RESIZE of CQ 1 (QP a's) to a fresh ring of `size`, the shadow area kept.
fn resize(r: &mut Rig, size: u32) -> (u16, CqH) {
    let pages = (size * 32).div_ceil(4096);
    let ring = r.h.alloc(u64::from(pages) * 4096, 4096);
    let st = r.h.admin(
        ModifyCq {
            hdr: Host::hdr(admin_op::MODIFY_CQ),
            cq_id: 1,
            size,
            flags: MODIFY_CQ_RESIZE,
            ring: PageList {
                addr: ring,
                npages: pages,
                level: 0,
                ..Default::default()
            },
            ..Default::default()
        }
        .encode(),
    );
    let new = CqH {
        id: 1,
        ring,
        shadow: r.cq_a.shadow,
        size,
        head: 0,
        pol: true,
        db_page: 1,
    };
    (st, new)
}

fn overflowed(r: &mut Rig) -> bool {
    r.h.poll_eq(&mut r.aeq)
        .iter()
        .any(|e| (e.code, e.kind, e.id) == (ae::CQ_OVERFLOW, eqe_kind::CQ, 1))
}

#[test]
fn the_old_rings_consumer_index_does_not_count_against_the_new_ring() {
    let mut r = Rig::rc();
    for _ in 0..10 {
        nop(&mut r);
    }
    // The consumer index is 10 on the old ring.
    assert_eq!(r.h.poll_cq(&mut r.cq_a).len(), 10);
    let (st, mut new) = resize(&mut r, 16);
    assert_eq!(st, admin_status::OK);
    // Taken for an index on the new ring, 10 would leave room for 9 CQEs; SW_CQ_SELECT (0)
    // says the consumer is still on an older ring, so all 15 fit.
    for _ in 0..15 {
        nop(&mut r);
    }
    assert!(
        !overflowed(&mut r),
        "false overflow from the old ring's index"
    );
    assert_eq!(r.h.poll_cq(&mut new).len(), 15);
    // The consumer retires the old ring: its index (15) now counts. Had the device kept taking
    // it as 0, the next CQE would overflow.
    let w = r.h.r64(new.shadow + 32);
    r.h.w64(new.shadow + 32, w + 1);
    for _ in 0..15 {
        nop(&mut r);
    }
    assert!(
        !overflowed(&mut r),
        "the retired ring's count was not honoured"
    );
    assert_eq!(r.h.poll_cq(&mut new).len(), 15);
    // And a real overflow is still one.
    for _ in 0..16 {
        nop(&mut r);
    }
    assert!(overflowed(&mut r), "no overflow on a full new ring");
}

#[test]
fn a_ring_too_small_for_the_unpolled_cqes_is_refused() {
    let mut r = Rig::rc();
    for _ in 0..5 {
        nop(&mut r);
    }
    let (st, _) = resize(&mut r, 5);
    assert_eq!(
        st,
        admin_status::INVALID,
        "5 unpolled CQEs, a ring of 5 holds 4"
    );
    // Nothing changed: new CQEs still go to the old ring.
    nop(&mut r);
    assert_eq!(r.h.poll_cq(&mut r.cq_a).len(), 6);
    for _ in 0..5 {
        nop(&mut r);
    }
    let (st, mut new) = resize(&mut r, 6);
    assert_eq!(st, admin_status::OK, "5 unpolled CQEs fit a ring of 6");
    nop(&mut r);
    assert_eq!(
        r.h.poll_cq(&mut r.cq_a).len(),
        5,
        "the old ring keeps its CQEs"
    );
    assert_eq!(
        r.h.poll_cq(&mut new).len(),
        1,
        "later ones go to the new ring"
    );
    assert!(!overflowed(&mut r));
}

#[test]
fn modify_cq_resizes_and_moves_between_ceqs() {
    let mut r = Rig::rc();
    let mut ceq2 = r.h.create_eq(2, EQ_KIND_CEQ, 2, 16);
    r.h.arm_eq(&ceq2);
    // Two completions in the old ring, then resize to a new ring of 16 and move to CEQ 2.
    for _ in 0..2 {
        r.h.send(
            &mut r.a,
            &Wr {
                opcode: sq_op::NOP,
                signaled: true,
                ..Default::default()
            },
        );
    }
    let ring = r.h.alloc(4096, 4096);
    let c = ModifyCq {
        hdr: Host::hdr(admin_op::MODIFY_CQ),
        cq_id: 1,
        size: 16,
        eq_id: 2,
        flags: MODIFY_CQ_RESIZE | MODIFY_CQ_EQ,
        ring: PageList {
            addr: ring,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(r.h.admin(c.encode()), 0);
    assert_eq!(
        r.h.poll_cq(&mut r.cq_a).len(),
        2,
        "old CQEs stay in the old ring"
    );
    let mut new = CqH {
        id: 1,
        ring,
        shadow: r.cq_a.shadow,
        size: 16,
        head: 0,
        pol: true,
        db_page: 1,
    };
    r.h.w64(new.shadow, 0);
    r.h.arm_cq(&new, false);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::NOP,
            signaled: true,
            ..Default::default()
        },
    );
    assert_eq!(r.h.poll_cq(&mut new).len(), 1);
    let ev = r.h.poll_eq(&mut ceq2);
    assert_eq!((ev.len(), ev[0].id), (1, 1));
    // Invalid modifications.
    assert_eq!(
        r.h.admin(ModifyCq { flags: 4, ..c }.encode()),
        admin_status::INVALID
    );
    assert_eq!(
        r.h.admin(
            ModifyCq {
                eq_id: 0,
                flags: MODIFY_CQ_EQ,
                ..c
            }
            .encode()
        ),
        admin_status::INVALID
    );
    assert_eq!(
        r.h.admin(
            ModifyCq {
                size: 129,
                flags: MODIFY_CQ_RESIZE,
                ..c
            }
            .encode()
        ),
        admin_status::INVALID,
        "ring too small"
    );
    assert_eq!(
        r.h.admin(ModifyCq { cq_id: 99, ..c }.encode()),
        admin_status::NOT_FOUND
    );
}
