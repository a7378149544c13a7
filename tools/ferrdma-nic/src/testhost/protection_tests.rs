//! Memory the device must not touch or must refuse: SEND_INV of a bad STag, rings it cannot
//! reach, the MR page budget, receives and READ responses into memory without write rights,
//! UD to a foreign GID, and guest addresses at the top of the address space.

use super::*;

#[test]
fn send_with_invalidate_of_a_bad_stag() {
    let mut r = Rig::rc();
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::SEND_SOL_INV,
            sges: vec![r.buf_a.sg(0, 8)],
            hdr_low: 0x777,
            ..Default::default()
        }),
        Some((1, flush::REM_INV_REQ))
    );
    assert_eq!(
        r.h.poll_cq(&mut r.cq_b)[0].error(),
        Some((1, flush::LOC_QP_OP))
    );
    assert!(r
        .h
        .poll_eq(&mut r.aeq)
        .iter()
        .any(|e| (e.code, e.id) == (ae::QP_INVALID_REQUEST, 3)));
}

#[test]
fn rings_the_device_cannot_reach() {
    let mut h = Host::new();
    let (mut aeq, _ceq) = h.standard();
    h.poll_eq(&mut aeq);
    h.arm_eq(&aeq);
    // A CQ whose ring is outside guest memory (level 0 needs no read at create time).
    let bad_cq = CreateCq {
        hdr: Host::hdr(admin_op::CREATE_CQ),
        cq_id: 7,
        size: 16,
        eq_id: 1,
        db_page: 1,
        shadow_addr: RAM_BASE,
        ring: PageList {
            addr: 0x1000,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(bad_cq.encode()), 0);
    let mut good = h.create_cq(8, 16, 1);
    // A QP whose SQ ring is outside guest memory, completing to the good CQ.
    let mut c = CreateQp {
        hdr: Host::hdr(admin_op::CREATE_QP),
        qp_id: 2,
        pd: 1,
        send_cq: 8,
        recv_cq: 8,
        qp_type: QP_TYPE_RC,
        db_page: 1,
        sq_quanta: 8,
        rq_wqes: 8,
        sq_ring: PageList {
            addr: 0x2000,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        rq_ring: PageList {
            addr: RAM_BASE + 0x4000,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(c.encode()), 0);
    h.connect_rc(2, 2, 0);
    h.doorbell(1, DB_SQ_OFFSET, 2);
    let e = h.poll_cq(&mut good);
    assert_eq!(e[0].error(), Some((1, flush::FATAL)));
    assert!(h.poll_eq(&mut aeq).iter().any(|e| e.code == ae::QP_FATAL));
    h.arm_eq(&aeq);
    // A QP completing to the unreachable CQ: the CQ stops with CQ_ACCESS.
    c.qp_id = 3;
    c.send_cq = 7;
    c.sq_ring = PageList {
        addr: RAM_BASE + 0x5000,
        npages: 1,
        level: 0,
        ..Default::default()
    };
    assert_eq!(h.admin(c.encode()), 0);
    h.connect_rc(3, 3, 0);
    h.write(
        RAM_BASE + 0x5000 + 24,
        &((1u64 << 63) | (1 << 62) | (u64::from(sq_op::NOP) << 32)).to_le_bytes(),
    );
    h.doorbell(1, DB_SQ_OFFSET, 3);
    let ev = h.poll_eq(&mut aeq);
    assert!(
        ev.iter()
            .any(|e| (e.code, e.id, e.kind) == (ae::CQ_ACCESS, 7, eqe_kind::CQ)),
        "{ev:?}"
    );
    assert!(h.guards_intact());
}

#[test]
fn mr_page_budget_is_enforced() {
    let mut h = Host::new();
    // Contiguous (level 0) lists need no reads, so the page budget is reached cheaply:
    // 16 MRs of 2^18 pages fill the 4 Mi budget, the 17th is refused.
    let mr = |i: u32| {
        RegMr {
            hdr: Host::hdr(admin_op::REG_MR),
            stag: (i + 1) << 8,
            pd: 1,
            page_shift: 12,
            iova: 0,
            length: (MAX_PBL_PAGES as u64) << 12,
            pages: PageList {
                addr: RAM_BASE,
                npages: MAX_PBL_PAGES,
                level: PBL_LEVEL_CONTIG,
                ..Default::default()
            },
            ..Default::default()
        }
        .encode()
    };
    for i in 0..16 {
        assert_eq!(h.admin(mr(i)), 0, "MR {i}");
    }
    assert_eq!(h.admin(mr(16)), admin_status::NO_RESOURCES);
    assert_eq!(h.admin(Host::object(admin_op::DEREG_MR, 1 << 8)), 0);
    assert_eq!(h.admin(mr(16)), 0, "budget returned on deregistration");
}

/// The other device write into an MR: a RECV scatter needs LOCAL_WRITE too. Without it the
/// receive fails with a protection error and not a byte of the MR changes (the driver pins a
/// user MR writable only when it has a write right, so this is what keeps a read-only
/// registration of a file's page cache read-only).

#[test]
fn a_recv_into_an_mr_without_local_write_fails_and_writes_nothing() {
    let mut r = Rig::rc();
    let ro = r.h.reg_mr(0x9_00, 1, 0, 0x1000);
    let before = pattern(0x100, 3);
    r.h.buf_write(&ro, 0, &before);
    r.h.buf_write(&r.buf_a, 0, &pattern(0x100, 4));
    r.h.post_recv(&mut r.b, &[ro.sg(0, 0x100)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 0x100)],
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c.len(), 1);
    assert!(!c[0].is_sq());
    assert_eq!(c[0].error(), Some((1, flush::PROT)));
    assert!(r.h.poll_cq(&mut r.cq_a)[0].error().is_some());
    assert_eq!(r.h.buf_read(&ro, 0, 0x100), before);
}

#[test]
fn read_into_read_only_memory_and_ud_to_a_foreign_gid() {
    let mut r = Rig::rc();
    let ro = r.h.reg_mr(0x9_00, 1, 0, 0x1000);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_READ,
            sges: vec![ro.sg(0, 8)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va,
            ..Default::default()
        },
    );
    assert_eq!(r.h.poll_cq(&mut r.cq_a)[0].error(), Some((1, flush::PROT)));
    assert!(r
        .h
        .poll_eq(&mut r.aeq)
        .iter()
        .any(|e| (e.code, e.id) == (ae::QP_LOCAL_ACCESS, 2)));
    // UD to a GID this NIC does not own: no wire in 2.0, so it is dropped; the sender
    // still completes successfully.
    let mut h = Host::new();
    h.standard();
    let mut cq = h.create_cq(1, 64, 1);
    let mut ud = h.create_qp(5, QP_TYPE_UD, 1, 1, 1, 64, 8, 0);
    h.ud_to_rts(5, 7);
    let mut far = GID0;
    far[15] = 99;
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 0,
        pd: 1,
        attrs: QpAttrs {
            dgid: far,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(ah.encode()), 0);
    let buf = h.reg_mr(0x1_00, 1, 0, 0x1000);
    h.send(
        &mut ud,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![buf.sg(0, 4)],
            qw2: (5 << 32) | 7,
            ..Default::default()
        },
    );
    let c = h.poll_cq(&mut cq);
    assert_eq!((c.len(), c[0].error(), c[0].is_sq()), (1, None, true));
    // SQ reflush through MODIFY_QP on a QP in ERR.
    assert_eq!(
        h.modify(
            5,
            qp_attr::STATE,
            QpAttrs {
                state: qp_state::ERR,
                ..Default::default()
            }
        ),
        0
    );
    h.poll_cq(&mut cq);
    h.post_send(
        &mut ud,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![buf.sg(0, 4)],
            ..Default::default()
        },
    );
    let reflush = ModifyQp {
        hdr: Host::hdr(admin_op::MODIFY_QP),
        qp_id: 5,
        attr_mask: qp_attr::STATE,
        flags: MODIFY_QP_SQ_FLUSH,
        attrs: QpAttrs {
            state: qp_state::ERR,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(reflush.encode()), 0);
    let c = h.poll_cq(&mut cq);
    assert_eq!(
        (c.len(), c[0].error(), c[0].is_sq()),
        (1, Some((1, flush::GENERAL)), true)
    );
}

#[test]
fn guest_addresses_at_the_top_of_the_address_space() {
    let mut h = Host::new();
    let (mut aeq, _ceq) = h.standard();
    h.poll_eq(&mut aeq);
    h.arm_eq(&aeq);
    // A CQ whose shadow area would wrap past 2^64: arming and writing fail cleanly.
    let ring = h.alloc(4096, 4096);
    let c = CreateCq {
        hdr: Host::hdr(admin_op::CREATE_CQ),
        cq_id: 3,
        size: 16,
        eq_id: 1,
        db_page: 1,
        shadow_addr: u64::MAX - 7,
        ring: PageList {
            addr: ring,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(c.encode()), 0);
    h.doorbell(1, DB_CQ_ARM_OFFSET, 3);
    let mut qp = h.create_qp(2, QP_TYPE_RC, 1, 3, 3, 64, 8, 0);
    h.connect_rc(2, 2, 0);
    h.send(
        &mut qp,
        &Wr {
            opcode: sq_op::NOP,
            signaled: true,
            ..Default::default()
        },
    );
    assert!(h
        .poll_eq(&mut aeq)
        .iter()
        .any(|e| (e.code, e.id) == (ae::CQ_ACCESS, 3)));
    // An admin ring at the very top of the address space.
    h.set_reg(REG_AQ_CTRL, 0);
    h.set_reg64(REG_AQ_BASE, u64::MAX - 4095);
    h.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE);
    h.set_reg(REG_AQ_TAIL, 1);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::DMA_FAULT);
    assert!(h.guards_intact());
}
