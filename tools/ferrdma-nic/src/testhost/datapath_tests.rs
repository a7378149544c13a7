//! Loopback traffic with data verified: every supported SQ opcode, RC and UD.

use super::*;

#[test]
fn rc_send_variants_deliver_the_data() {
    let mut r = Rig::rc();
    let data = pattern(0x3000, 7);
    r.h.buf_write(&r.buf_a, 0, &data);
    // 1 SGE.
    let ri = r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 0x1000)]);
    let si = r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 100)],
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 1);
    assert!(c[0].is_sq() && c[0].error().is_none());
    assert_eq!(
        (c[0].op(), c[0].wqe_idx(), c[0].qp_id(), c[0].qw[1]),
        (sq_op::SEND, si, 2, r.a.compl_ctx)
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c.len(), 1);
    assert!(!c[0].is_sq());
    assert_eq!(
        (c[0].op(), c[0].len(), c[0].wqe_idx(), c[0].qp_id()),
        (cqe::OP_RECV, 100, ri << 2, 3)
    );
    assert_eq!(c[0].qw[1], r.b.compl_ctx);
    assert_eq!(r.h.buf_read(&r.buf_b, 0, 100), data[..100]);
    // Three SGEs gathered into two receive SGEs (crossing pages on both sides).
    r.h.post_recv(
        &mut r.b,
        &[r.buf_b.sg(0x100, 0x7f0), r.buf_b.sg(0x2000, 0x2000)],
    );
    let sges = vec![
        r.buf_a.sg(0, 0x900),
        r.buf_a.sg(0x1000, 0x10),
        r.buf_a.sg(0x1500, 0x1000),
    ];
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c[0].len(), 0x1910);
    let mut want = data[..0x900].to_vec();
    want.extend_from_slice(&data[0x1000..0x1010]);
    want.extend_from_slice(&data[0x1500..0x2500]);
    let mut got = r.h.buf_read(&r.buf_b, 0x100, 0x7f0);
    got.extend(r.h.buf_read(&r.buf_b, 0x2000, 0x1910 - 0x7f0));
    assert_eq!(got, want);
    // Inline 50 bytes with immediate, solicited.
    let inline: Vec<u8> = (0..50u8).map(|i| 0xa0 ^ i).collect();
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0x8000, 64)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND_SOL,
            signaled: true,
            imm: Some(0x1234_5678),
            inline: Some(inline.clone()),
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].len(), c[0].imm(), c[0].solicited()),
        (50, Some(0x1234_5678), true)
    );
    assert_eq!(r.h.buf_read(&r.buf_b, 0x8000, 50), inline);
    // Non-inline immediate with 13 SGEs (the maximum; 8 quanta).
    let sges: Vec<Sg> = (0..13).map(|i| r.buf_a.sg(i * 16, 16)).collect();
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0x9000, 0x1000)]);
    let si = r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            imm: Some(9),
            sges,
            ..Default::default()
        },
    );
    assert_eq!(
        si % 8,
        0,
        "an 8-quantum WQE starts a chunk (NOP padding before it)"
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!((c[0].len(), c[0].imm()), (13 * 16, Some(9)));
    assert_eq!(r.h.buf_read(&r.buf_b, 0x9000, 208), data[..208]);
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.len(), 3, "NOPs complete silently");
}

#[test]
fn rc_rdma_write_write_imm_and_read() {
    let mut r = Rig::rc();
    let data = pattern(0x4000, 3);
    r.h.buf_write(&r.buf_a, 0, &data);
    // WRITE with 4 SGEs to B at offset 0x100.
    let sges = vec![
        r.buf_a.sg(0, 0x100),
        r.buf_a.sg(0x200, 0x200),
        r.buf_a.sg(0x800, 0x300),
        r.buf_a.sg(0x2000, 0x1400),
    ];
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges,
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x100,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!((c[0].op(), c[0].error()), (sq_op::RDMA_WRITE, None));
    let mut want = data[..0x100].to_vec();
    want.extend_from_slice(&data[0x200..0x400]);
    want.extend_from_slice(&data[0x800..0xb00]);
    want.extend_from_slice(&data[0x2000..0x3400]);
    assert_eq!(r.h.buf_read(&r.buf_b, 0x100, want.len()), want);
    assert!(
        r.h.poll_cq(&mut r.cq_b).is_empty(),
        "a plain WRITE consumes no receive"
    );
    // WRITE with immediate (solicited): consumes a receive, reports the length and imm.
    let ri = r.h.post_recv(&mut r.b, &[r.buf_b.sg(0xf000, 16)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE_SOL,
            signaled: true,
            imm: Some(0xcafe_f00d),
            sges: vec![r.buf_a.sg(0, 8)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x5000,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (
            c[0].op(),
            c[0].len(),
            c[0].imm(),
            c[0].solicited(),
            c[0].wqe_idx()
        ),
        (cqe::OP_RECV_RDMA_IMM, 8, Some(0xcafe_f00d), true, ri << 2)
    );
    assert_eq!(r.h.buf_read(&r.buf_b, 0x5000, 8), data[..8]);
    // Inline WRITE.
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            inline: Some(b"inline write!".to_vec()),
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x6000,
            ..Default::default()
        },
    );
    assert_eq!(r.h.buf_read(&r.buf_b, 0x6000, 13), b"inline write!");
    // READ B's 0x100.. into A's 0x8000 (two SGEs).
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_READ,
            signaled: true,
            sges: vec![r.buf_a.sg(0x8000, 0x300), r.buf_a.sg(0xa000, 0x1300)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x100,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    let last = c.last().unwrap();
    assert_eq!(
        (last.op(), last.error(), last.len()),
        (sq_op::RDMA_READ, None, 0x1600)
    );
    let mut got = r.h.buf_read(&r.buf_a, 0x8000, 0x300);
    got.extend(r.h.buf_read(&r.buf_a, 0xa000, 0x1300));
    assert_eq!(got, want[..0x1600]);
    let s = r.h.stats();
    assert!(s.tx_packets >= 4 && s.rx_bytes > 0x3000, "{s:?}");
}

#[test]
fn send_with_invalidate_and_local_invalidate() {
    let mut r = Rig::rc();
    // An extra MR on B that A's SEND_INV invalidates.
    let victim = r.h.reg_mr(
        0x300 | 0x33,
        1,
        MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE,
        0x1000,
    );
    r.send_inv(victim.stag, 32);
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].qw[2] as u32, victim.stag, "invalidated STag reported");
    assert_eq!(c[0].qw[3] >> cqe::STAG_INV & 1, 1);
    // A WRITE to the invalidated MR is now a remote access error.
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 8)],
            hdr_low: victim.stag,
            qw2: victim.va,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c.last().unwrap().error(), Some((1, flush::REM_ACCESS)));
    // LOCAL_INV on a fresh rig: the lkey stops working.
    let mut r = Rig::rc();
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::LOCAL_INV,
            signaled: true,
            qw1: u64::from(r.buf_a.stag),
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!((c[0].op(), c[0].error()), (sq_op::LOCAL_INV, None));
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(c[0].error(), Some((1, flush::PROT)));
}

#[test]
fn unsignaled_wqes_and_sq_wrap_around() {
    let mut r = Rig::rc();
    let data = pattern(64, 1);
    r.h.buf_write(&r.buf_a, 0, &data);
    // 700 two-quantum WQEs in a 512-quantum SQ: wraps twice (with NOP padding at chunk
    // ends), every 10th signaled.
    for i in 0..700u32 {
        let wr = Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: i % 10 == 9,
            sges: vec![r.buf_a.sg(0, 64), r.buf_a.sg(0, 0)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + u64::from(i % 100) * 64,
            ..Default::default()
        };
        r.h.send(&mut r.a, &wr);
        if i % 10 == 9 {
            let c = r.h.poll_cq(&mut r.cq_a);
            assert_eq!(c.len(), 1, "WQE {i}");
            assert_eq!(c[0].error(), None);
        }
    }
    assert_eq!(r.h.buf_read(&r.buf_b, 99 * 64, 64), data);
    let q = r.h.query_qp(2);
    assert_eq!(q.sq_tail, r.a.sq_head);
    assert_eq!(q.sq_polarity, u8::from(r.a.sq_pol));
}

#[test]
fn ud_loopback_with_grh_and_qkey() {
    let mut h = Host::new();
    let (_aeq, _ceq) = h.standard();
    let mut cq = h.create_cq(1, 64, 1);
    let mut a = h.create_qp(10, QP_TYPE_UD, 1, 1, 1, 512, 64, 1);
    let mut b = h.create_qp(11, QP_TYPE_UD, 1, 1, 1, 512, 64, 1);
    h.ud_to_rts(10, 0x1111);
    h.ud_to_rts(11, 0x2222);
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 5,
        pd: 1,
        attrs: QpAttrs {
            sgid_index: 0,
            dgid: GID0,
            hop_limit: 64,
            av_flags: AV_FLAG_IPV4,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(h.admin(ah.encode()), 0);
    let src = h.reg_mr(0x1_00, 1, 0, 0x1000);
    let dst = h.reg_mr(0x2_00, 1, MR_ACCESS_LOCAL_WRITE, 0x1000);
    let data = pattern(200, 9);
    h.buf_write(&src, 0, &data);
    h.post_recv(&mut b, &[dst.sg(0, 40), dst.sg(0x100, 0x400)]);
    let ud = |qkey: u32| Wr {
        opcode: sq_op::SEND,
        signaled: true,
        imm: Some(77),
        sges: vec![src.sg(0, 200)],
        hdr_low: 5,
        qw2: (11u64 << 32) | u64::from(qkey),
        ..Default::default()
    };
    h.send(&mut a, &ud(0x2222));
    let c = h.poll_cq(&mut cq);
    assert_eq!(c.len(), 2);
    let (sq, rq) = if c[0].is_sq() {
        (c[0], c[1])
    } else {
        (c[1], c[0])
    };
    assert_eq!(sq.error(), None);
    assert_eq!(
        (rq.len(), rq.qw[2] as u32, rq.imm(), rq.qp_id()),
        (240, 10, Some(77), 11)
    );
    assert_eq!(rq.qw[3] >> cqe::STAG_INV & 1, 1, "IPv4 flag");
    let g = h.buf_read(&dst, 0, 40);
    assert_eq!(&g[..20], &[0u8; 20]);
    assert_eq!(g[20], 0x45);
    assert_eq!(&g[32..40], &[10, 0, 0, 1, 10, 0, 0, 1]);
    assert_eq!(h.buf_read(&dst, 0x100, 200), data);
    // Wrong Q_Key: dropped, sender still succeeds; the receive stays posted.
    h.post_recv(&mut b, &[dst.sg(0, 0x400)]);
    h.send(&mut a, &ud(0x9999));
    let c = h.poll_cq(&mut cq);
    assert_eq!(c.len(), 1);
    assert!(c[0].is_sq() && c[0].error().is_none());
    assert!(h.stats().rx_drops >= 1);
    // Larger than the path MTU (1024 with mtu 3): LOC_LEN.
    let big = h.reg_mr(0x3_00, 1, 0, 0x2000);
    h.send(
        &mut a,
        &Wr {
            sges: vec![big.sg(0, 1025)],
            ..ud(0x2222)
        },
    );
    let c = h.poll_cq(&mut cq);
    assert_eq!(c[0].error(), Some((1, flush::LOC_LEN)));
    // RDMA WRITE on a UD QP is a local QP operation error.
    let _ = &mut b;
}

/// The host's test-only WRITE corruption knob (`rdma/sabotage.rs`) on the loopback path:
/// armed, a WRITE gathered from 3 SGEs lands with exactly the armed byte flipped (inline
/// too); a SEND is untouched; the knob belongs to the host and survives a device reset.
#[test]
fn sabotage_knob_flips_one_byte_of_a_loopback_write() {
    use crate::rdma::sabotage::FLIP;
    let mut r = Rig::rc();
    let knob = r.h.dev().engine().sabotage();
    let data = pattern(0x3000, 5);
    r.h.buf_write(&r.buf_a, 0, &data);
    knob.set(Some(0x155));
    let write = |r: &mut Rig, at: u64| {
        let sges = vec![
            r.buf_a.sg(0, 0x100),
            r.buf_a.sg(0x200, 0x200),
            r.buf_a.sg(0x800, 0x300),
        ];
        r.h.send(
            &mut r.a,
            &Wr {
                opcode: sq_op::RDMA_WRITE,
                signaled: true,
                sges,
                hdr_low: r.buf_b.stag,
                qw2: r.buf_b.va + at,
                ..Default::default()
            },
        );
        let c = r.h.poll_cq(&mut r.cq_a);
        assert_eq!((c[0].op(), c[0].error()), (sq_op::RDMA_WRITE, None));
    };
    write(&mut r, 0x101);
    let mut want = data[..0x100].to_vec();
    want.extend_from_slice(&data[0x200..0x400]);
    want.extend_from_slice(&data[0x800..0xb00]);
    let got = r.h.buf_read(&r.buf_b, 0x101, want.len());
    let diff: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    assert_eq!(diff, vec![0x155]);
    assert_eq!(got[0x155], want[0x155] ^ FLIP);
    // Inline: 13 bytes, armed at 5.
    knob.set(Some(5));
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            inline: Some(b"inline write!".to_vec()),
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x6000,
            ..Default::default()
        },
    );
    let mut want = b"inline write!".to_vec();
    want[5] ^= FLIP;
    assert_eq!(r.h.buf_read(&r.buf_b, 0x6000, 13), want);
    // A SEND is not a WRITE.
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0x8000, 0x100)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 0x100)],
            ..Default::default()
        },
    );
    assert_eq!(r.h.poll_cq(&mut r.cq_b).len(), 1);
    assert_eq!(r.h.poll_cq(&mut r.cq_a).len(), 1);
    assert_eq!(r.h.buf_read(&r.buf_b, 0x8000, 0x100), data[..0x100]);
    assert_eq!(knob.hits(), 2);
    // Off: intact again.
    knob.set(None);
    write(&mut r, 0x4001);
    let mut want = data[..0x100].to_vec();
    want.extend_from_slice(&data[0x200..0x400]);
    want.extend_from_slice(&data[0x800..0xb00]);
    assert_eq!(r.h.buf_read(&r.buf_b, 0x4001, want.len()), want);
    // Neither the guest's engine reset (the driver writes DEV_CTRL_RESET when it probes)
    // nor a device reset replaces the host's knob.
    r.h.set_reg(REG_DEV_CTRL, DEV_CTRL_RESET);
    let same = |r: &Rig| std::sync::Arc::ptr_eq(&knob, &r.h.dev().engine().sabotage());
    assert!(same(&r), "the engine reset dropped the knob");
    r.h.dev().reset();
    assert!(same(&r), "the device reset dropped the knob");
}
