//! Paths the connection manager relies on: port events and failing RC sends when the link
//! goes down, COMM_EST on the first receive in RTR, and the GSI QP receiving QP 1's UD traffic.

use super::*;

#[test]
fn link_down_fails_rc_sends_and_raises_port_events() {
    let mut r = Rig::rc();
    let p = SetPort {
        hdr: Host::hdr(admin_op::SET_PORT),
        link: LINK_DOWN,
        mtu: 3,
        ..Default::default()
    };
    assert_eq!(r.h.admin(p.encode()), 0);
    assert!(r
        .h
        .poll_eq(&mut r.aeq)
        .iter()
        .any(|e| e.code == ae::PORT_DOWN));
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
}

#[test]
fn comm_est_on_first_receive_in_rtr() {
    let mut h = Host::new();
    let (mut aeq, _ceq) = h.standard();
    h.poll_eq(&mut aeq);
    let mut cq = h.create_cq(1, 64, 1);
    let mut a = h.create_qp(2, QP_TYPE_RC, 1, 1, 1, 64, 8, 0);
    let mut b = h.create_qp(3, QP_TYPE_RC, 1, 1, 1, 64, 8, 0);
    h.connect_rc(2, 3, 0);
    // B only to RTR.
    let st = |s| QpAttrs {
        state: s,
        dest_qpn: 2,
        dgid: GID0,
        ..Default::default()
    };
    assert_eq!(h.modify(3, qp_attr::STATE, st(qp_state::INIT)), 0);
    assert_eq!(
        h.modify(
            3,
            qp_attr::STATE | qp_attr::AV | qp_attr::DEST_QPN,
            st(qp_state::RTR)
        ),
        0
    );
    let buf = h.reg_mr(0x1_00, 1, MR_ACCESS_LOCAL_WRITE, 0x1000);
    for _ in 0..2 {
        h.post_recv(&mut b, &[buf.sg(0, 64)]);
        h.send(
            &mut a,
            &Wr {
                opcode: sq_op::SEND,
                sges: vec![buf.sg(0x100, 8)],
                ..Default::default()
            },
        );
    }
    assert_eq!(h.poll_cq(&mut cq).len(), 2);
    let ev = h.poll_eq(&mut aeq);
    assert_eq!(ev.len(), 1, "once: {ev:?}");
    assert_eq!((ev[0].code, ev[0].id), (ae::QP_COMM_EST, 3));
}

#[test]
fn gsi_qp_receives_ud_traffic_for_qp1() {
    let mut h = Host::new();
    h.standard();
    let mut cq = h.create_cq(1, 64, 1);
    let mut gsi = h.create_qp(1, QP_TYPE_GSI, 1, 1, 1, 64, 8, 1);
    // A kernel (privileged) UD QP: only those may send GSI's controlled Q_Key 0x80010000
    // (a user QP's controlled key becomes its own, see qkey_tests).
    let mut ud = h.create_qp_flags(QP_FLAG_PRIVILEGED, 5, QP_TYPE_UD, 1, 1, 1, 64, 8, 0);
    h.ud_to_rts(1, 0x8001_0000);
    h.ud_to_rts(5, 7);
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 0,
        pd: 1,
        attrs: QpAttrs {
            dgid: GID0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(ah.encode()), 0);
    let buf = h.reg_mr(0x1_00, 1, MR_ACCESS_LOCAL_WRITE, 0x1000);
    h.buf_write(&buf, 0x800, b"MAD!");
    h.post_recv(&mut gsi, &[buf.sg(0, 0x100)]);
    h.send(
        &mut ud,
        &Wr {
            opcode: sq_op::SEND,
            sges: vec![buf.sg(0x800, 4)],
            qw2: (1 << 32) | 0x8001_0000,
            ..Default::default()
        },
    );
    let c = h.poll_cq(&mut cq);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].qp_id(), c[0].len(), c[0].qw[2] as u32), (1, 44, 5));
    assert_eq!(h.buf_read(&buf, 40, 4), b"MAD!");
    // The IPv6 GRH form when the AH is not IPv4.
    assert_eq!(h.buf_read(&buf, 0, 1)[0] >> 4, 6);
    // A UD SEND with an AH of another PD: local protection error.
    let other = CreateAh {
        ah_id: 1,
        pd: 9,
        ..ah
    };
    assert_eq!(h.admin(other.encode()), 0);
    h.send(
        &mut ud,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![buf.sg(0x800, 4)],
            hdr_low: 1,
            qw2: (1 << 32) | 0x8001_0000,
            ..Default::default()
        },
    );
    assert_eq!(h.poll_cq(&mut cq)[0].error(), Some((1, flush::PROT)));
}
