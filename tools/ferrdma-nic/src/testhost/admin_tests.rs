//! Admin queue mechanics and every admin status code.

use super::*;

#[test]
fn caps_report_the_interface_limits() {
    let mut h = Host::new();
    let out = h.alloc(128, 8);
    let q = |len| {
        QueryObject {
            hdr: Host::hdr(admin_op::QUERY_CAPS),
            out_len: len,
            out_addr: out,
            ..Default::default()
        }
        .encode()
    };
    assert_eq!(h.admin(q(127)), admin_status::INVALID);
    assert_eq!(h.admin(q(128)), admin_status::OK);
    let caps = Caps::decode(&h.read(out, 128).try_into().unwrap());
    assert_eq!(caps.hw_rev, 2);
    assert_eq!(
        (caps.max_sge, caps.max_inline, caps.sq_chunk_quanta),
        (13, 101, 8)
    );
    assert_eq!(caps.max_qp, MAX_QP);
    assert_eq!(caps.max_sq_quanta, 32768);
    assert_eq!(caps.msix_vectors, 8);
    // An unmapped output buffer.
    let bad = QueryObject {
        hdr: Host::hdr(admin_op::QUERY_CAPS),
        out_len: 128,
        out_addr: 0x10,
        ..Default::default()
    };
    assert_eq!(h.admin(bad.encode()), admin_status::DMA_FAULT);
}

/// `--hostile-caps`: the n-th QUERY_CAPS gets the n-th profile, across engine resets (a
/// driver reload); the device still enforces its real limits.
#[test]
fn hostile_caps_plan_answers_query_caps_in_order_across_resets() {
    use crate::rdma::caps::CapsPlan;
    let mut h = Host::new();
    let plan = CapsPlan::parse("oversized,impossible,nominal").unwrap();
    h.dev().set_caps_plan(Some(std::sync::Arc::new(plan)));
    let c = h.caps();
    assert_eq!((c.max_sge, c.max_qp, c.max_rd_atomic), (255, u32::MAX, 255));
    // The real limit still holds: no CQ beyond MAX_CQ.
    let (_aeq, _ceq) = h.standard();
    let st = h.admin(
        CreateCq {
            hdr: Host::hdr(admin_op::CREATE_CQ),
            cq_id: MAX_CQ,
            ..Default::default()
        }
        .encode(),
    );
    assert_eq!(st, admin_status::BAD_ID);
    h.restart();
    let c = h.caps();
    assert_eq!((c.max_sge, c.max_qp, c.page_size_cap), (0, 1, 1 << 21));
    h.restart();
    assert_eq!(h.caps(), crate::rdma::caps::nominal());
    assert_eq!(h.caps(), crate::rdma::caps::nominal());
}

/// `--resources small`: QUERY_CAPS reports the profile and the device refuses every id
/// beyond it, across resets, while ids inside it work.
#[test]
fn a_small_resource_profile_is_reported_and_enforced() {
    use crate::rdma::resources::Resources;
    let mut h = Host::new();
    h.dev().set_resources(Resources::SMALL);
    h.restart();
    let c = h.caps();
    assert_eq!(
        (c.max_qp, c.max_cq, c.max_mr, c.max_ah, c.max_pd),
        (1025, 1025, 4097, 256, 4096)
    );
    assert_eq!(c.max_sge, 13, "the other limits stay nominal");
    let (_aeq, _ceq) = h.standard();
    let _last_cq = h.create_cq(1024, 16, 1);
    let cq = |id| CreateCq {
        hdr: Host::hdr(admin_op::CREATE_CQ),
        cq_id: id,
        size: 16,
        eq_id: 1,
        ..Default::default()
    };
    assert_eq!(h.admin(cq(1025).encode()), admin_status::BAD_ID);
    let qp = CreateQp {
        hdr: Host::hdr(admin_op::CREATE_QP),
        qp_id: 1025,
        ..Default::default()
    };
    assert_eq!(h.admin(qp.encode()), admin_status::BAD_ID);
    let mr = |stag, pd| RegMr {
        hdr: Host::hdr(admin_op::REG_MR),
        stag,
        pd,
        ..Default::default()
    };
    assert_eq!(h.admin(mr(4097 << 8, 1).encode()), admin_status::BAD_ID);
    let c = h.admin_raw(mr(4096 << 8, 4096).encode());
    assert_eq!(
        (c.status, c.detail as usize),
        (admin_status::INVALID, std::mem::offset_of!(RegMr, pd))
    );
    let ah = |id, pd| CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: id,
        pd,
        ..Default::default()
    };
    assert_eq!(h.admin(ah(256, 1).encode()), admin_status::BAD_ID);
    let c = h.admin_raw(ah(255, 4096).encode());
    assert_eq!(
        (c.status, c.detail as usize),
        (admin_status::INVALID, std::mem::offset_of!(CreateAh, pd))
    );
    // The profile is the host's: a device reset keeps it.
    h.restart();
    assert_eq!(h.caps().max_cq, 1025);
}

#[test]
fn every_status_code() {
    let mut h = Host::new();
    let mut raw = [0u8; 128];
    raw[0] = 0x7f;
    let c = h.admin_raw(raw);
    assert_eq!((c.status, c.opcode), (admin_status::BAD_OPCODE, 0x7f));
    let (_aeq, _ceq) = h.standard();
    // BAD_ID, EXISTS, NOT_FOUND, BUSY, INVALID with detail, BAD_STATE, NOT_SUPPORTED.
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_CQ, MAX_CQ)),
        admin_status::BAD_ID
    );
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_CQ, 5)),
        admin_status::NOT_FOUND
    );
    let _cq = h.create_cq(5, 16, 1);
    let dup = CreateCq {
        hdr: Host::hdr(admin_op::CREATE_CQ),
        cq_id: 5,
        size: 16,
        eq_id: 1,
        ..Default::default()
    };
    assert_eq!(h.admin(dup.encode()), admin_status::EXISTS);
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_EQ, 1)),
        admin_status::BUSY
    );
    let bad_size = CreateCq {
        cq_id: 6,
        size: 2,
        ..dup
    };
    let c = h.admin_raw(bad_size.encode());
    assert_eq!((c.status, c.detail), (admin_status::INVALID, 12));
    let ceq_is_aeq = CreateCq {
        cq_id: 6,
        eq_id: 0,
        ..dup
    };
    assert_eq!(h.admin(ceq_is_aeq.encode()), admin_status::INVALID);
    let qp = h.create_qp(4, QP_TYPE_RC, 1, 5, 5, 8, 8, 0);
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_CQ, 5)),
        admin_status::BUSY
    );
    // RESET -> RTS is illegal; INIT -> RTR without an address vector too.
    let rts = QpAttrs {
        state: qp_state::RTS,
        ..Default::default()
    };
    assert_eq!(
        h.modify(qp.id, qp_attr::STATE, rts),
        admin_status::BAD_STATE
    );
    let init = QpAttrs {
        state: qp_state::INIT,
        ..Default::default()
    };
    assert_eq!(h.modify(qp.id, qp_attr::STATE, init), 0);
    let rtr = QpAttrs {
        state: qp_state::RTR,
        ..Default::default()
    };
    assert_eq!(
        h.modify(qp.id, qp_attr::STATE, rtr),
        admin_status::BAD_STATE
    );
    let atomics = QpAttrs {
        access: QP_ACCESS_REMOTE_ATOMIC,
        ..Default::default()
    };
    assert_eq!(
        h.modify(qp.id, qp_attr::ACCESS, atomics),
        admin_status::NOT_SUPPORTED
    );
    let mtu = QpAttrs {
        path_mtu: 9,
        ..Default::default()
    };
    let c = h.admin_raw(
        ModifyQp {
            hdr: Host::hdr(admin_op::MODIFY_QP),
            qp_id: qp.id,
            attr_mask: qp_attr::PATH_MTU,
            attrs: mtu,
            ..Default::default()
        }
        .encode(),
    );
    assert_eq!((c.status, c.detail), (admin_status::INVALID, 25));
    // AV naming a missing GID.
    let av = QpAttrs {
        sgid_index: 3,
        ..Default::default()
    };
    assert_eq!(h.modify(qp.id, qp_attr::AV, av), admin_status::NOT_FOUND);
    let q = h.query_qp(qp.id);
    assert_eq!(q.attrs.state, qp_state::INIT);
    assert_eq!((q.send_cq, q.recv_cq, q.pd), (5, 5, 1));
    // QP 0 is reserved, GSI must be QP 1.
    let mk = |id, ty| CreateQp {
        hdr: Host::hdr(admin_op::CREATE_QP),
        qp_id: id,
        qp_type: ty,
        send_cq: 5,
        recv_cq: 5,
        sq_quanta: 8,
        rq_wqes: 8,
        ..Default::default()
    };
    assert_eq!(h.admin(mk(0, QP_TYPE_RC).encode()), admin_status::BAD_ID);
    assert_eq!(h.admin(mk(7, QP_TYPE_GSI).encode()), admin_status::INVALID);
    assert_eq!(h.admin(mk(1, QP_TYPE_RC).encode()), admin_status::INVALID);
    // A page list that is not readable.
    let mut unreadable = mk(9, QP_TYPE_RC);
    unreadable.sq_ring = PageList {
        addr: 0x1000,
        npages: 2,
        level: PBL_LEVEL_1,
        ..Default::default()
    };
    assert_eq!(h.admin(unreadable.encode()), admin_status::DMA_FAULT);
    // Destroy in order.
    assert_eq!(h.admin(Host::object(admin_op::DESTROY_QP, qp.id)), 0);
    assert_eq!(h.admin(Host::object(admin_op::DESTROY_CQ, 5)), 0);
    assert_eq!(h.admin(Host::object(admin_op::DESTROY_EQ, 1)), 0);
    let s = h.stats();
    assert!(s.admin_errors >= 15, "{s:?}");
}

#[test]
fn mr_registration_rules() {
    let mut h = Host::new();
    let buf = h.reg_mr(0x1_05, 2, MR_ACCESS_LOCAL_WRITE, 0x3000);
    assert_eq!(buf.len, 0x3000);
    let base = RegMr {
        hdr: Host::hdr(admin_op::REG_MR),
        stag: 0x2_01,
        pd: 2,
        page_shift: 12,
        iova: 0x1000,
        length: 0x1000,
        pages: PageList {
            addr: RAM_BASE,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(base.encode()), 0);
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x2_07,
                ..base
            }
            .encode()
        ),
        admin_status::EXISTS
    );
    assert_eq!(
        h.admin(
            RegMr {
                stag: MAX_MR << 8,
                ..base
            }
            .encode()
        ),
        admin_status::BAD_ID
    );
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x3_00,
                page_shift: 13,
                ..base
            }
            .encode()
        ),
        admin_status::INVALID
    );
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x3_00,
                length: 0,
                ..base
            }
            .encode()
        ),
        admin_status::INVALID
    );
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x3_00,
                iova: 0x1800,
                ..base
            }
            .encode()
        ),
        admin_status::INVALID,
        "needs 2 pages"
    );
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x3_00,
                access: 1 << 9,
                ..base
            }
            .encode()
        ),
        admin_status::INVALID
    );
    let misaligned = PageList {
        addr: RAM_BASE + 8,
        ..base.pages
    };
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x3_00,
                pages: misaligned,
                ..base
            }
            .encode()
        ),
        admin_status::INVALID
    );
    let level3 = PageList {
        level: 3,
        ..base.pages
    };
    assert_eq!(
        h.admin(
            RegMr {
                stag: 0x3_00,
                pages: level3,
                ..base
            }
            .encode()
        ),
        admin_status::INVALID
    );
    // A two-level list: 600 pages of 4 KiB through two leaf pages.
    let leaf1 = h.alloc(4096, 4096);
    let leaf2 = h.alloc(4096, 4096);
    let root = h.alloc(16, 4096);
    let data = h.alloc(600 * 4096, 4096);
    let all: Vec<u8> = (0..600u64)
        .flat_map(|i| (data + i * 4096).to_le_bytes())
        .collect();
    h.write(leaf1, &all[..4096]);
    h.write(leaf2, &all[4096..]);
    h.w64(root, leaf1);
    h.w64(root + 8, leaf2);
    let two = RegMr {
        stag: 0x4_00,
        length: 600 * 4096,
        pages: PageList {
            addr: root,
            npages: 600,
            level: PBL_LEVEL_2,
            ..Default::default()
        },
        ..base
    };
    assert_eq!(h.admin(two.encode()), 0);
    // Deregistration needs the exact key.
    assert_eq!(
        h.admin(Host::object(admin_op::DEREG_MR, 0x4_01)),
        admin_status::NOT_FOUND
    );
    assert_eq!(h.admin(Host::object(admin_op::DEREG_MR, 0x4_00)), 0);
    assert_eq!(
        h.admin(Host::object(admin_op::DEREG_MR, 0x4_00)),
        admin_status::NOT_FOUND
    );
}

#[test]
fn gids_ports_ahs_and_stats() {
    let mut h = Host::new();
    assert_eq!(
        h.admin(gid_cmd(admin_op::ADD_GID, MAX_GID, GID0)),
        admin_status::BAD_ID
    );
    assert_eq!(
        h.admin(gid_cmd(admin_op::DEL_GID, 4, GID0)),
        admin_status::NOT_FOUND
    );
    assert_eq!(h.admin(gid_cmd(admin_op::ADD_GID, 4, GID0)), 0);
    assert_eq!(h.admin(gid_cmd(admin_op::DEL_GID, 4, GID0)), 0);
    let port = SetPort {
        hdr: Host::hdr(admin_op::SET_PORT),
        link: 2,
        mtu: 3,
        ..Default::default()
    };
    assert_eq!(h.admin(port.encode()), admin_status::INVALID);
    assert_eq!(
        h.admin(
            SetPort {
                link: 1,
                mtu: 0,
                ..port
            }
            .encode()
        ),
        admin_status::INVALID
    );
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 3,
        pd: 1,
        attrs: QpAttrs {
            sgid_index: 0,
            dgid: GID0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        h.admin(ah.encode()),
        admin_status::NOT_FOUND,
        "no GID 0 yet"
    );
    assert_eq!(h.admin(gid_cmd(admin_op::ADD_GID, 0, GID0)), 0);
    assert_eq!(h.admin(ah.encode()), 0);
    assert_eq!(h.admin(ah.encode()), admin_status::EXISTS);
    assert_eq!(
        h.admin(
            CreateAh {
                ah_id: MAX_AH,
                ..ah
            }
            .encode()
        ),
        admin_status::BAD_ID
    );
    assert_eq!(h.admin(Host::object(admin_op::DESTROY_AH, 3)), 0);
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_AH, 3)),
        admin_status::NOT_FOUND
    );
    let s = h.stats();
    assert!(s.admin_cmds >= 12);
    // Clearing read.
    let out = h.alloc(128, 8);
    let clear = QueryObject {
        hdr: Host::hdr(admin_op::QUERY_STATS),
        id: STATS_CLEAR,
        out_len: 128,
        out_addr: out,
        ..Default::default()
    };
    assert_eq!(h.admin(clear.encode()), 0);
    assert_eq!(
        h.admin(QueryObject { id: 2, ..clear }.encode()),
        admin_status::INVALID
    );
    let s = h.stats();
    assert!(s.admin_cmds <= 2, "{s:?}");
}

#[test]
fn admin_ring_wraps_with_the_phase_bit_and_interrupts() {
    let mut h = Host::new();
    h.irqs(0);
    for _ in 0..(3 * AQ_ENTRIES + 1) {
        // admin_raw checks the phase and cmd_id of every completion.
        assert_eq!(h.admin(gid_cmd(admin_op::ADD_GID, 1, GID0)), 0);
    }
    assert_eq!(
        h.irqs(0),
        u64::from(3 * AQ_ENTRIES + 1),
        "one interrupt per batch"
    );
}

#[test]
fn admin_queue_configuration_errors() {
    let mut h = Host::new();
    // Geometry is frozen while enabled.
    h.set_reg(REG_AQ_SIZE, 3);
    assert_eq!(h.reg(REG_AQ_SIZE), AQ_ENTRIES);
    h.set_reg(REG_AQ_TAIL, AQ_ENTRIES);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::BAD_TAIL);
    // Disable, break the size, enable: BAD_CONFIG and stays off.
    h.set_reg(REG_AQ_CTRL, 0);
    h.set_reg(REG_AQ_SIZE, 3);
    h.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::BAD_CONFIG);
    assert_eq!(h.reg(REG_AQ_CTRL) & AQ_CTRL_ENABLE, 0);
    h.set_reg(REG_AQ_SIZE, 8);
    h.set_reg64(REG_AQ_BASE, 0x123);
    h.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::BAD_CONFIG);
    // A ring in unmapped memory: the first command stops the queue.
    h.set_reg64(REG_AQ_BASE, 0x1000);
    h.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::OK);
    h.set_reg(REG_AQ_TAIL, 1);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::DMA_FAULT);
    assert_eq!(h.reg(REG_AQ_CTRL) & AQ_CTRL_ENABLE, 0);
    assert_eq!(h.reg(REG_AQ_HEAD), 0);
    // Bus mastering off: the queue stops without touching memory.
    let mut h = Host::new();
    h.cfg_w16(4, 0x2);
    let slot_before = h.read(h.acq, 16);
    h.set_reg(REG_AQ_TAIL, 1);
    assert_eq!(h.reg(REG_AQ_STATUS), aq_status::NO_BUS_MASTER);
    assert_eq!(h.read(h.acq, 16), slot_before);
    // Reset clears everything, including the admin registers.
    h.set_reg(REG_DEV_CTRL, DEV_CTRL_RESET);
    assert_eq!(h.reg(REG_AQ_SIZE), 0);
    assert_eq!(h.reg(REG_AQ_STATUS), 0);
    assert_eq!(h.reg(REG_DEV_STATUS), DEV_STATUS_READY);
}

#[test]
fn reset_drops_every_object() {
    let mut r = Rig::rc();
    r.h.set_reg(REG_DEV_CTRL, DEV_CTRL_RESET);
    // Doorbells now name nothing.
    r.h.doorbell(1, DB_SQ_OFFSET, r.a.id);
    assert!(r.h.dev().engine().stats().spurious_doorbells >= 1);
}

/// The host's admin stall knob (`rdma/sabotage.rs`): a hung device leaves commands
/// unanswered; resumed, it answers the waiting one and the next in order.
#[test]
fn admin_stall_knob_leaves_commands_unanswered_until_resumed() {
    let mut h = Host::new();
    let knob = h.dev().engine().sabotage();
    knob.stall_admin(true);
    let bad = || Host::object(admin_op::DESTROY_CQ, MAX_CQ);
    assert!(h.admin_try(bad()).is_none(), "a stalled queue answered");
    assert_eq!(h.reg(REG_AQ_HEAD), 0);
    knob.stall_admin(false);
    let c = h
        .admin_try(bad())
        .expect("the resumed queue did not answer");
    assert_eq!(c.status, admin_status::BAD_ID);
    assert_eq!(
        h.reg(REG_AQ_HEAD),
        2,
        "the waiting command was answered first"
    );
}
