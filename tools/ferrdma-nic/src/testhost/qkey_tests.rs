//! Controlled Q_Keys on the loopback path (issue 14, defect 8): a user (unprivileged) UD
//! QP cannot send GSI's controlled Q_Key to the local QP1; its WQE's controlled key is
//! replaced by the QP's own. The wire path is covered in `wire_tests`.

use super::*;

const QP1_QKEY: u32 = 0x8001_0000;
const USER_QKEY: u32 = 0x1234;

/// A GSI QP1 (privileged, as the driver creates it), a user UD QP 10 and a kernel UD QP 11
/// (both PD 3, own Q_Key [`USER_QKEY`]), an AH (id 6, PD 3) to the local GID, and a 512-byte
/// MR (STag 0x311) in PD 3 holding a 256-byte MAD at offset 0.
fn rig() -> (Host, CqH, QpH, QpH, QpH, Buf, Vec<u8>) {
    let mut h = Host::new();
    let (_aeq, _ceq) = h.standard();
    let cq = h.create_cq(1, 64, 1);
    let gsi = h.create_qp_flags(QP_FLAG_PRIVILEGED, 1, QP_TYPE_GSI, 3, 1, 1, 512, 64, 1);
    let user = h.create_qp(10, QP_TYPE_UD, 3, 1, 1, 512, 64, 1);
    let kernel = h.create_qp_flags(QP_FLAG_PRIVILEGED, 11, QP_TYPE_UD, 3, 1, 1, 512, 64, 1);
    h.ud_to_rts(1, QP1_QKEY);
    h.ud_to_rts(10, USER_QKEY);
    h.ud_to_rts(11, USER_QKEY);
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 6,
        pd: 3,
        attrs: QpAttrs {
            dgid: GID0,
            hop_limit: 64,
            av_flags: AV_FLAG_IPV4,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(ah.encode()), admin_status::OK);
    let buf = h.reg_mr(0x311, 3, MR_ACCESS_LOCAL_WRITE, 1024);
    let mad = pattern(256, 0x4d);
    h.buf_write(&buf, 0, &mad);
    (h, cq, gsi, user, kernel, buf, mad)
}

fn send_to(h: &mut Host, qp: &mut QpH, buf: &Buf, dqpn: u32, qkey: u32) {
    h.send(
        qp,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![buf.sg(0, 256)],
            hdr_low: 6,
            qw2: (u64::from(dqpn) << 32) | u64::from(qkey),
            ..Default::default()
        },
    );
}

#[test]
fn unprivileged_ud_qp_cannot_send_the_gsi_qkey_to_local_qp1() {
    let (mut h, mut cq, mut gsi, mut user, mut kernel, buf, mad) = rig();
    h.post_recv(&mut gsi, &[buf.sg(512, 296)]);
    let drops = h.stats().rx_drops;
    send_to(&mut h, &mut user, &buf, 1, QP1_QKEY);
    let c = h.poll_cq(&mut cq);
    assert_eq!(c.len(), 1, "only the send completes: {c:?}");
    assert!(c[0].is_sq() && c[0].error().is_none());
    assert_eq!(h.stats().rx_drops, drops + 1, "Q_Key mismatch counted");
    assert_eq!(
        h.buf_read(&buf, 512 + 40, 256),
        vec![0; 256],
        "QP1 got nothing"
    );
    // A privileged QP's identical WQE is delivered into the receive posted above.
    send_to(&mut h, &mut kernel, &buf, 1, QP1_QKEY);
    let c = h.poll_cq(&mut cq);
    let rq = c.iter().find(|c| !c.is_sq()).expect("QP1 receive CQE");
    assert_eq!((rq.error(), rq.qp_id(), rq.qw[2] as u32), (None, 1, 11));
    assert_eq!(h.buf_read(&buf, 512 + 40, 256), mad);
    assert!(h.guards_intact());
}

/// The user QP's controlled-key WQE carries its own key: a peer UD QP whose Q_Key is that
/// key receives it.
#[test]
fn unprivileged_controlled_qkey_becomes_the_qps_own() {
    let (mut h, mut cq, _gsi, mut user, mut kernel, buf, mad) = rig();
    h.post_recv(&mut kernel, &[buf.sg(512, 296)]);
    let drops = h.stats().rx_drops;
    send_to(&mut h, &mut user, &buf, 11, 0x8000_0000);
    let c = h.poll_cq(&mut cq);
    let rq = c.iter().find(|c| !c.is_sq()).expect("UD QP 11 receive CQE");
    assert_eq!((rq.error(), rq.qp_id(), rq.qw[2] as u32), (None, 11, 10));
    assert_eq!(h.buf_read(&buf, 512 + 40, 256), mad);
    assert_eq!(h.stats().rx_drops, drops);
}
