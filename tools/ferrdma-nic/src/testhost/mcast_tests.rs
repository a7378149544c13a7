//! Multicast group commands (MCAST_ATTACH / MCAST_DETACH): validation, limits, and what a
//! QP's destruction or a reset does to its groups. Delivery over the wire and the loopback
//! copy are in `wire_tests`.

use super::*;

fn group(n: u8) -> [u8; 16] {
    [0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, n]
}

fn mcast(h: &mut Host, op: u8, qp: u32, gid: [u8; 16]) -> u16 {
    h.admin(
        McastCmd {
            hdr: Host::hdr(op),
            qp_id: qp,
            gid,
            ..Default::default()
        }
        .encode(),
    )
}

/// A host with UD QPs 10..10+n (PD 1) in RTS and RC QP 2.
fn rig(n: u32) -> Host {
    let mut h = Host::new();
    let _ = h.standard();
    h.create_cq(1, 256, 1);
    for q in 10..10 + n {
        h.create_qp(q, QP_TYPE_UD, 1, 1, 1, 64, 8, 1);
        h.ud_to_rts(q, 0x1234);
    }
    h.create_qp(2, QP_TYPE_RC, 1, 1, 1, 64, 8, 1);
    h
}

#[test]
fn attach_refuses_what_is_not_a_ud_qp_or_a_multicast_gid() {
    let mut h = rig(1);
    let a = admin_op::MCAST_ATTACH;
    assert_eq!(h.caps().max_mcast_grp, MAX_MCAST_GRP as u16);
    assert_eq!(h.caps().max_mcast_qp_attach, MAX_MCAST_QP_ATTACH as u16);
    assert_eq!(mcast(&mut h, a, MAX_QP, group(1)), admin_status::BAD_ID);
    assert_eq!(mcast(&mut h, a, u32::MAX, group(1)), admin_status::BAD_ID);
    assert_eq!(mcast(&mut h, a, 11, group(1)), admin_status::NOT_FOUND);
    assert_eq!(mcast(&mut h, a, 2, group(1)), admin_status::INVALID, "RC");
    let unicast = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
    assert_eq!(mcast(&mut h, a, 10, unicast), admin_status::INVALID);
    assert_eq!(mcast(&mut h, a, 10, [0; 16]), admin_status::INVALID);
    let v4_group = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 224, 0, 0, 251];
    assert_eq!(mcast(&mut h, a, 10, v4_group), admin_status::OK);
    assert_eq!(mcast(&mut h, a, 10, v4_group), admin_status::EXISTS);
    assert_eq!(mcast(&mut h, a, 10, group(1)), admin_status::OK);
    let d = admin_op::MCAST_DETACH;
    assert_eq!(mcast(&mut h, d, 10, group(2)), admin_status::NOT_FOUND);
    assert_eq!(mcast(&mut h, d, 11, group(1)), admin_status::NOT_FOUND);
    assert_eq!(mcast(&mut h, d, 10, group(1)), admin_status::OK);
    assert_eq!(mcast(&mut h, d, 10, group(1)), admin_status::NOT_FOUND);
    assert_eq!(mcast(&mut h, d, 10, v4_group), admin_status::OK);
}

#[test]
fn group_and_table_limits_hold() {
    let mut h = rig(MAX_MCAST_QP_ATTACH + 1);
    let a = admin_op::MCAST_ATTACH;
    for q in 10..10 + MAX_MCAST_QP_ATTACH {
        assert_eq!(mcast(&mut h, a, q, group(0)), admin_status::OK);
    }
    let last = 10 + MAX_MCAST_QP_ATTACH;
    assert_eq!(mcast(&mut h, a, last, group(0)), admin_status::NO_RESOURCES);
    let mut g = [0xffu8; 16];
    for n in 1..MAX_MCAST_GRP {
        g[12..].copy_from_slice(&n.to_be_bytes());
        assert_eq!(mcast(&mut h, a, last, g), admin_status::OK, "group {n}");
    }
    g[12..].copy_from_slice(&MAX_MCAST_GRP.to_be_bytes());
    assert_eq!(mcast(&mut h, a, last, g), admin_status::NO_RESOURCES);
}

#[test]
fn destroying_a_qp_or_resetting_the_device_ends_its_memberships() {
    let mut h = rig(2);
    let a = admin_op::MCAST_ATTACH;
    assert_eq!(mcast(&mut h, a, 10, group(1)), admin_status::OK);
    assert_eq!(mcast(&mut h, a, 11, group(1)), admin_status::OK);
    assert_eq!(
        h.admin(Host::object(admin_op::DESTROY_QP, 10)),
        admin_status::OK
    );
    // QP 10 is gone from the group: a new QP 10 is not a member.
    h.create_qp(10, QP_TYPE_UD, 1, 1, 1, 64, 8, 1);
    let d = admin_op::MCAST_DETACH;
    assert_eq!(mcast(&mut h, d, 10, group(1)), admin_status::NOT_FOUND);
    assert_eq!(mcast(&mut h, d, 11, group(1)), admin_status::OK);
    assert_eq!(mcast(&mut h, a, 11, group(2)), admin_status::OK);
    h.restart();
    let _ = h.standard();
    h.create_cq(1, 256, 1);
    h.create_qp(11, QP_TYPE_UD, 1, 1, 1, 64, 8, 1);
    assert_eq!(mcast(&mut h, d, 11, group(2)), admin_status::NOT_FOUND);
}
