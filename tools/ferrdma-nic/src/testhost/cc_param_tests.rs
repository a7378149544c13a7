//! The congestion control parameters through the admin queue (QUERY_CC, SET_CC, interface
//! 1.9): the driver's view of the settings the host also holds.

use std::mem::offset_of;
use std::sync::Arc;

use super::*;
use crate::rdma::congestion::{CcConfig, CcKnob};

fn query_cc(h: &mut Host, id: u32) -> AdminCompletion {
    h.admin_raw(Host::object(admin_op::QUERY_CC, id))
}

fn set_cc(h: &mut Host, param: u32, value: u32) -> AdminCompletion {
    h.admin_raw(
        SetCc {
            hdr: Host::hdr(admin_op::SET_CC),
            param,
            value,
            ..Default::default()
        }
        .encode(),
    )
}

/// A host whose engine shares `knob` with the test, as the fabric's control socket does.
fn host_with_knob() -> (Host, Arc<CcKnob>) {
    let h = Host::new();
    let knob = Arc::new(CcKnob::default());
    h.dev().set_cc_knob(knob.clone());
    (h, knob)
}

#[test]
fn query_cc_reports_every_parameter_of_the_host_settings() {
    let (mut h, knob) = host_with_knob();
    let cfg = CcConfig::default()
        .with_spec("ecn=on,line-mbps=25000,cnp_dscp=26,rpg_ai_rate=7,dce_tcp_g=1000")
        .unwrap();
    knob.set(cfg).unwrap();
    let want = [
        (cc_param::ECN_ENABLE, 1),
        (cc_param::DCQCN_ENABLE, 0),
        (
            cc_param::NP_MIN_TIME_BETWEEN_CNPS,
            cfg.np.min_time_between_cnps,
        ),
        (cc_param::NP_CNP_DSCP, 26),
        (cc_param::RP_TIME_RESET, cfg.rp.rpg_time_reset),
        (cc_param::RP_BYTE_RESET, cfg.rp.rpg_byte_reset),
        (cc_param::RP_THRESHOLD, cfg.rp.rpg_threshold),
        (cc_param::RP_AI_RATE, 7),
        (cc_param::RP_HAI_RATE, cfg.rp.rpg_hai_rate),
        (cc_param::RP_MIN_RATE, cfg.rp.rpg_min_rate),
        (
            cc_param::RP_RATE_REDUCE_MONITOR_PERIOD,
            cfg.rp.rate_reduce_monitor_period,
        ),
        (cc_param::RP_DCE_TCP_G, 1000),
        (cc_param::RP_DCE_TCP_RTT, cfg.rp.dce_tcp_rtt),
        (cc_param::RP_INITIAL_ALPHA_VALUE, cfg.rp.initial_alpha_value),
        (cc_param::LINE_RATE_MBPS, 25000),
    ];
    assert_eq!(want.len() as u32, cc_param::COUNT);
    for (id, value) in want {
        let c = query_cc(&mut h, id);
        assert_eq!(
            (c.status, c.result),
            (admin_status::OK, value),
            "param {id}"
        );
    }
    for id in [cc_param::COUNT, 255, u32::MAX] {
        let c = query_cc(&mut h, id);
        assert_eq!(c.status, admin_status::INVALID, "param {id}");
        assert_eq!(c.detail as usize, offset_of!(QueryObject, id));
    }
}

#[test]
fn set_cc_changes_the_shared_settings_and_the_engine_at_once() {
    let (mut h, knob) = host_with_knob();
    let writable = [
        (cc_param::ECN_ENABLE, 1),
        (cc_param::DCQCN_ENABLE, 1),
        (cc_param::NP_MIN_TIME_BETWEEN_CNPS, 4),
        (cc_param::NP_CNP_DSCP, 63),
        (cc_param::RP_TIME_RESET, 300),
        (cc_param::RP_BYTE_RESET, 1 << 20),
        (cc_param::RP_THRESHOLD, 3),
        (cc_param::RP_AI_RATE, 40),
        (cc_param::RP_HAI_RATE, 400),
        (cc_param::RP_MIN_RATE, 10),
        (cc_param::RP_RATE_REDUCE_MONITOR_PERIOD, 2),
        (cc_param::RP_DCE_TCP_G, 1019),
        (cc_param::RP_DCE_TCP_RTT, 60),
        (cc_param::RP_INITIAL_ALPHA_VALUE, 512),
    ];
    for (id, value) in writable {
        let c = set_cc(&mut h, id, value);
        assert_eq!(c.status, admin_status::OK, "param {id}");
        assert_eq!(
            knob.get().param(id),
            Some(value),
            "the host sees param {id}"
        );
        assert_eq!(query_cc(&mut h, id).result, value, "QUERY_CC param {id}");
    }
    let cfg = knob.get();
    assert!(cfg.ecn && cfg.dcqcn);
    // In effect in the engine, not only in the knob.
    assert_eq!(*h.dev().engine().cc(), cfg);
    // An engine reset (a driver reload) keeps them, as it keeps the host's.
    h.restart();
    assert_eq!(*h.dev().engine().cc(), cfg);
    assert_eq!(query_cc(&mut h, cc_param::RP_AI_RATE).result, 40);
}

#[test]
fn hostile_set_cc_is_refused_and_changes_nothing() {
    let (mut h, knob) = host_with_knob();
    let before = knob.get();
    let value = offset_of!(SetCc, value) as u32;
    let param = offset_of!(SetCc, param) as u32;
    let cases = [
        // Read-only: the line rate is the host's link.
        (cc_param::LINE_RATE_MBPS, 1, param),
        (cc_param::COUNT, 0, param),
        (u32::MAX, 0, param),
        (cc_param::ECN_ENABLE, 2, value),
        (cc_param::DCQCN_ENABLE, u32::MAX, value),
        (cc_param::NP_CNP_DSCP, 64, value),
        (cc_param::NP_CNP_DSCP, 256 + 5, value),
        (cc_param::NP_MIN_TIME_BETWEEN_CNPS, 1_000_001, value),
        (cc_param::RP_TIME_RESET, 0, value),
        (cc_param::RP_BYTE_RESET, 0, value),
        (cc_param::RP_AI_RATE, 1_600_001, value),
        (cc_param::RP_MIN_RATE, 0, value),
        (cc_param::RP_DCE_TCP_G, 1024, value),
        (cc_param::RP_DCE_TCP_G, 0, value),
        (cc_param::RP_INITIAL_ALPHA_VALUE, 1025, value),
    ];
    for (id, v, detail) in cases {
        let c = set_cc(&mut h, id, v);
        assert_eq!(
            (c.status, c.detail),
            (admin_status::INVALID, detail),
            "param {id} = {v}"
        );
        assert_eq!(knob.get(), before, "param {id} = {v} changed the settings");
    }
    assert_eq!(*h.dev().engine().cc(), before);
}
