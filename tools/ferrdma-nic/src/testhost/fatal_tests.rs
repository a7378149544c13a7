//! The fatal state (manual, "Fatal errors"): entered on the host's request, announced once,
//! inert until the guest resets the engine, and gone after that reset.

use super::*;

/// Posts a 64-byte receive on B and a signaled 64-byte SEND on A, and rings A's doorbell.
fn post_send_to_b(r: &mut Rig) {
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 64)],
            ..Default::default()
        },
    );
}

/// A SEND from A to B that must complete on both sides (the engine is alive).
fn send_passes(r: &mut Rig) {
    post_send_to_b(r);
    let a = r.h.poll_cq(&mut r.cq_a);
    let b = r.h.poll_cq(&mut r.cq_b);
    assert_eq!((a.len(), b.len()), (1, 1));
    assert!(a[0].error().is_none() && b[0].error().is_none());
}

#[test]
fn a_requested_fatal_error_stops_the_engine_until_reset() {
    let mut r = Rig::rc();
    send_passes(&mut r);
    let knob = r.h.dev().engine().sabotage();
    knob.request_fatal();
    assert_eq!(
        r.h.reg(REG_DEV_STATUS),
        DEV_STATUS_READY,
        "nothing happens before the engine runs"
    );
    assert!(
        r.h.dev().next_deadline().is_some(),
        "an idle engine must wake up to take the request"
    );
    r.h.dev().tick();
    assert_eq!(r.h.reg(REG_DEV_STATUS), DEV_STATUS_READY | DEV_STATUS_FATAL);
    assert_eq!(
        r.h.dev().next_deadline(),
        None,
        "no timers in the fatal state"
    );

    // Announced once on the AEQ, with its cause.
    let ev = r.h.poll_eq(&mut r.aeq);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].kind, ev[0].code, ev[0].id, ev[0].info),
        (eqe_kind::DEVICE, ae::DEVICE_FATAL, 0, fatal_cause::INJECTED)
    );

    // Admin commands are answered, with FATAL, and do nothing.
    let c =
        r.h.admin_try(Host::object(admin_op::DESTROY_QP, r.a.id))
            .expect("a fatal engine still answers its admin queue");
    assert_eq!(c.status, admin_status::FATAL);
    // Doorbells and frames are dropped: no completion, no receive.
    post_send_to_b(&mut r);
    r.h.dev().tick();
    assert!(r.h.poll_cq(&mut r.cq_a).is_empty());
    assert!(r.h.poll_cq(&mut r.cq_b).is_empty());
    assert!(r.h.poll_eq(&mut r.aeq).is_empty(), "announced once");

    // The guest's reset ends it; the engine works again from scratch.
    r.h.restart();
    assert_eq!(r.h.reg(REG_DEV_STATUS), DEV_STATUS_READY);
    let mut r = Rig::rc_on(r.h, 0);
    send_passes(&mut r);
}

#[test]
fn a_register_write_takes_a_pending_fatal_request() {
    // Taken at a register write as well as at a tick: a driver polling its admin queue sees
    // the state before its next command completes.
    let mut h = Host::new();
    let (mut aeq, _ceq) = h.standard();
    h.poll_eq(&mut aeq);
    h.dev().engine().sabotage().request_fatal();
    let c = h
        .admin_try(Host::object(admin_op::DESTROY_CQ, 1))
        .expect("answered");
    assert_eq!(c.status, admin_status::FATAL);
    let ev = h.poll_eq(&mut aeq);
    assert_eq!(ev.iter().filter(|e| e.code == ae::DEVICE_FATAL).count(), 1);
    // A reset with no request pending leaves a working engine.
    h.restart();
    assert_eq!(h.reg(REG_DEV_STATUS), DEV_STATUS_READY);
    let c = h
        .admin_try(Host::object(admin_op::DESTROY_CQ, 1))
        .expect("answered");
    assert_eq!(c.status, admin_status::NOT_FOUND);
}
