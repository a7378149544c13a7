//! The local DMA STag (Linux `local_dma_lkey`): a privileged QP's local SGEs may carry bus
//! addresses with `LOCAL_DMA_STAG`; everywhere else STag 0 is an unknown STag.

use super::*;

fn events(r: &mut Rig) -> Vec<Eqe> {
    r.h.poll_eq(&mut r.aeq)
}

/// A bus-address SGE through the local DMA STag.
fn dma_sg(addr: u64, len: u32) -> Sg {
    Sg {
        addr,
        len,
        lkey: LOCAL_DMA_STAG,
    }
}

#[test]
fn privileged_rc_loopback_send_write_read_with_local_dma_stag() {
    let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
    let q = r.h.query_qp(2);
    assert_eq!(q.flags, QP_FLAG_PRIVILEGED, "QUERY_QP reports the flag");
    let src = r.h.alloc(0x3000, 4096);
    let dst = r.h.alloc(0x3000, 4096);
    let data = pattern(0x3000, 11);
    r.h.write(src, &data);
    // SEND: a bus-address SGE and an MR SGE in one WQE, into two bus-address receive SGEs.
    r.h.buf_write(&r.buf_a, 0x40, &data[..0x30]);
    let ri = r.h.post_recv(
        &mut r.b,
        &[dma_sg(dst, 0x100), dma_sg(dst + 0x1f00, 0x1080)],
    );
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![dma_sg(src + 0x100, 0x1100), r.buf_a.sg(0x40, 0x30)],
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!((c.len(), c[0].error()), (1, None), "{c:?}");
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(
        (c[0].error(), c[0].op(), c[0].len(), c[0].wqe_idx()),
        (None, cqe::OP_RECV, 0x1130, ri << 2)
    );
    let mut want = data[0x100..0x1200].to_vec();
    want.extend_from_slice(&data[..0x30]);
    let mut got = r.h.read(dst, 0x100);
    got.extend(r.h.read(dst + 0x1f00, 0x1030));
    assert_eq!(got, want);
    // RDMA WRITE from a bus address into B's MR.
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges: vec![dma_sg(src, 0x2000)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x300,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!((c[0].op(), c[0].error()), (sq_op::RDMA_WRITE, None));
    assert_eq!(r.h.buf_read(&r.buf_b, 0x300, 0x2000), data[..0x2000]);
    // RDMA READ of that back into two bus-address SGEs.
    let back = r.h.alloc(0x2000, 4096);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_READ,
            signaled: true,
            sges: vec![dma_sg(back + 0x1800, 0x800), dma_sg(back, 0x1800)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va + 0x300,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(
        (c[0].op(), c[0].error(), c[0].len()),
        (sq_op::RDMA_READ, None, 0x2000)
    );
    assert_eq!(r.h.read(back + 0x1800, 0x800), data[..0x800]);
    assert_eq!(r.h.read(back, 0x1800), data[0x800..0x2000]);
    assert!(events(&mut r).is_empty());
    assert!(r.h.guards_intact());
}

#[test]
fn privileged_gsi_and_ud_with_local_dma_stag_in_any_pd() {
    let mut h = Host::new();
    let (_aeq, _ceq) = h.standard();
    let mut cq = h.create_cq(1, 64, 1);
    // GSI in PD 2, a UD QP in PD 3: the local DMA STag ignores PDs.
    let mut gsi = h.create_qp_flags(QP_FLAG_PRIVILEGED, 1, QP_TYPE_GSI, 2, 1, 1, 512, 64, 1);
    let mut ud = h.create_qp_flags(QP_FLAG_PRIVILEGED, 10, QP_TYPE_UD, 3, 1, 1, 512, 64, 1);
    const GSI_QKEY: u32 = 0x8001_0000;
    h.ud_to_rts(1, GSI_QKEY);
    h.ud_to_rts(10, 0x1234);
    for (id, pd) in [(5, 2), (6, 3)] {
        let ah = CreateAh {
            hdr: Host::hdr(admin_op::CREATE_AH),
            ah_id: id,
            pd,
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
    }
    let mad = pattern(256, 0x5a);
    let tx = h.alloc(256, 64);
    let rx = h.alloc(40 + 256, 64);
    h.write(tx, &mad);
    let check = |h: &mut Host, cq: &mut CqH, src_qpn: u32, dst_qpn: u32| {
        let c = h.poll_cq(cq);
        assert_eq!(c.len(), 2, "{c:?}");
        let (sq, rq) = if c[0].is_sq() {
            (c[0], c[1])
        } else {
            (c[1], c[0])
        };
        assert_eq!((sq.error(), sq.qp_id()), (None, src_qpn));
        assert_eq!(
            (rq.error(), rq.len(), rq.qw[2] as u32, rq.qp_id()),
            (None, 40 + 256, src_qpn, dst_qpn),
            "receive CQE: length with GRH, source QPN"
        );
        assert_eq!(rq.qw[3] >> cqe::STAG_INV & 1, 1, "IPv4 flag");
        let g = h.read(rx, 40);
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(g[20] >> 4, 4, "IPv4 header in bytes 20..39");
        assert_eq!(&g[32..40], &[10, 0, 0, 1, 10, 0, 0, 1]);
        assert_eq!(h.read(rx + 40, 256), mad);
        h.write(rx, &[0; 296]);
    };
    // GSI -> UD: one receive SGE covering GRH and payload.
    h.post_recv(&mut ud, &[dma_sg(rx, 296)]);
    h.send(
        &mut gsi,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![dma_sg(tx, 256)],
            hdr_low: 5,
            qw2: (10u64 << 32) | 0x1234,
            ..Default::default()
        },
    );
    check(&mut h, &mut cq, 1, 10);
    // UD -> GSI: GRH and payload in separate receive SGEs.
    h.post_recv(&mut gsi, &[dma_sg(rx, 40), dma_sg(rx + 40, 256)]);
    h.send(
        &mut ud,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![dma_sg(tx, 128), dma_sg(tx + 128, 128)],
            hdr_low: 6,
            qw2: (1u64 << 32) | u64::from(GSI_QKEY),
            ..Default::default()
        },
    );
    check(&mut h, &mut cq, 10, 1);
    assert!(h.guards_intact());
}

#[test]
fn unprivileged_qp_lkey_zero_is_a_protection_error() {
    let mut r = Rig::rc();
    assert_eq!(r.h.query_qp(2).flags, 0);
    let src = r.h.alloc(64, 64);
    r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 64)]);
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![dma_sg(src, 8)],
            ..Default::default()
        }),
        Some((1, flush::PROT))
    );
    let ev = events(&mut r);
    assert_eq!(
        (ev[0].code, ev[0].id, ev[0].info),
        (ae::QP_LOCAL_ACCESS, 2, u32::from(flush::PROT))
    );
    // Nor in a receive: B's scatter faults (B is the responder).
    let mut r = Rig::rc();
    r.h.post_recv(&mut r.b, &[dma_sg(src, 64)]);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![r.buf_a.sg(0, 8)],
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c[0].error(), Some((1, flush::PROT)));
    let ev = events(&mut r);
    assert!(
        ev.iter()
            .any(|e| (e.code, e.id) == (ae::QP_LOCAL_ACCESS, 3)),
        "{ev:?}"
    );
    // Nor as an RDMA READ destination.
    let mut r = Rig::rc();
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::RDMA_READ,
            signaled: true,
            sges: vec![dma_sg(src, 8)],
            hdr_low: r.buf_b.stag,
            qw2: r.buf_b.va,
            ..Default::default()
        }),
        Some((1, flush::PROT))
    );
}

#[test]
fn privileged_local_dma_stag_outside_guest_memory_is_a_protection_error() {
    let end = RAM_BASE + RAM_SIZE;
    let bad = [
        (end - 4, 8),           // straddles the end of guest RAM
        (end + 0x1000, 8),      // beyond it
        (0x1000, 8),            // below it
        (u64::MAX - 3, 8),      // wraps
        (RAM_BASE - 4, 0x1000), // straddles the start
    ];
    for (addr, len) in bad {
        for op in [sq_op::SEND, sq_op::RDMA_WRITE, sq_op::RDMA_READ] {
            let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
            r.h.post_recv(&mut r.b, &[r.buf_b.sg(0, 0x2000)]);
            let err = r.first_error(&Wr {
                opcode: op,
                signaled: true,
                sges: vec![dma_sg(addr, len)],
                hdr_low: r.buf_b.stag,
                qw2: r.buf_b.va,
                ..Default::default()
            });
            assert_eq!(err, Some((1, flush::PROT)), "op {op} at {addr:#x}+{len:#x}");
            let ev = events(&mut r);
            assert_eq!(
                (ev[0].code, ev[0].id),
                (ae::QP_LOCAL_ACCESS, 2),
                "op {op} at {addr:#x}"
            );
            assert!(r.h.guards_intact());
        }
        // A receive scatter outside guest memory.
        let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
        r.h.post_recv(&mut r.b, &[dma_sg(addr, len)]);
        r.h.send(
            &mut r.a,
            &Wr {
                opcode: sq_op::SEND,
                signaled: true,
                sges: vec![r.buf_a.sg(0, 8)],
                ..Default::default()
            },
        );
        let c = r.h.poll_cq(&mut r.cq_b);
        assert_eq!(c[0].error(), Some((1, flush::PROT)), "recv at {addr:#x}");
        let ev = events(&mut r);
        assert!(
            ev.iter()
                .any(|e| (e.code, e.id) == (ae::QP_LOCAL_ACCESS, 3)),
            "{ev:?}"
        );
        assert!(r.h.guards_intact());
    }
}

#[test]
fn rkey_zero_and_invalidating_stag_zero_fail_like_unknown_stags() {
    for op in [sq_op::RDMA_WRITE, sq_op::RDMA_READ] {
        // Even between privileged QPs, with the address of real guest memory.
        let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
        let target = r.h.alloc(64, 64);
        assert_eq!(
            r.first_error(&Wr {
                opcode: op,
                signaled: true,
                sges: vec![r.buf_a.sg(0, 8)],
                hdr_low: LOCAL_DMA_STAG,
                qw2: target,
                ..Default::default()
            }),
            Some((1, flush::REM_ACCESS)),
            "op {op}"
        );
        let codes: Vec<(u16, u32)> = events(&mut r).iter().map(|e| (e.code, e.id)).collect();
        assert!(codes.contains(&(ae::QP_REMOTE_ACCESS, 3)), "{codes:?}");
    }
    // LOCAL_INV of STag 0.
    let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
    assert_eq!(
        r.first_error(&Wr {
            opcode: sq_op::LOCAL_INV,
            signaled: true,
            qw1: u64::from(LOCAL_DMA_STAG),
            ..Default::default()
        }),
        Some((1, flush::PROT))
    );
    // SEND_INV of STag 0: the responder's invalidation fails.
    let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
    r.send_inv(LOCAL_DMA_STAG, 8);
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c[0].error(), Some((1, flush::LOC_QP_OP)));
}

#[test]
fn reg_mr_index_zero_and_unknown_qp_flags_are_invalid() {
    let mut h = Host::new();
    let (_aeq, _ceq) = h.standard();
    h.create_cq(1, 64, 1);
    let pages = h.scattered_pages(1);
    let list = h.page_list(&pages);
    for stag in [LOCAL_DMA_STAG, 0x12] {
        let c = h.admin_raw(
            RegMr {
                hdr: Host::hdr(admin_op::REG_MR),
                stag,
                pd: 1,
                page_shift: 12,
                iova: 0x1000,
                length: 0x1000,
                pages: list,
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(
            (c.status, c.detail as usize),
            (admin_status::INVALID, std::mem::offset_of!(RegMr, stag)),
            "stag {stag:#x}"
        );
    }
    let sq = h.scattered_pages(1);
    let rq = h.scattered_pages(1);
    let sq_ring = h.page_list(&sq);
    let rq_ring = h.page_list(&rq);
    for flags in [1 << 1, 1 << 31, QP_FLAG_PRIVILEGED | 1 << 7] {
        let c = h.admin_raw(
            CreateQp {
                hdr: Host::hdr(admin_op::CREATE_QP),
                qp_id: 2,
                pd: 1,
                send_cq: 1,
                recv_cq: 1,
                qp_type: QP_TYPE_RC,
                db_page: 1,
                sq_quanta: 64,
                rq_wqes: 64,
                sq_ring,
                rq_ring,
                flags,
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(
            (c.status, c.detail as usize),
            (admin_status::INVALID, std::mem::offset_of!(CreateQp, flags)),
            "flags {flags:#x}"
        );
    }
    // The QP does not exist after the failures; a privileged one can be created.
    h.create_qp_flags(QP_FLAG_PRIVILEGED, 2, QP_TYPE_RC, 1, 1, 1, 64, 64, 0);
    assert_eq!(h.query_qp(2).flags, QP_FLAG_PRIVILEGED);
}
