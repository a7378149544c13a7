//! Hostile input: arbitrary admin commands, WQEs (well-formed ones with hostile SGEs and
//! raw quanta), RQ WQEs, ring sizes and indices in commands, doorbell values, register
//! writes, CQ shadow contents and page lists. After every sequence the device must not
//! have panicked, must not have written the guard pages around guest RAM, and must still
//! work after a reset (QUERY_CAPS succeeds).
//!
//! Half the sequences run with QPs A and B created with `QP_FLAG_PRIVILEGED`, so hostile
//! SGEs with the local DMA STag (raw bus addresses) reach the device's identity path.
//!
//! `cargo test` runs 96 sequences per property (`PROPTEST_CASES=N` for more, with
//! shrinking). The long run is
//! `FERRDMA_FUZZ_OPS=1000000 cargo test --release -- --ignored fuzz_storm --nocapture`, which
//! applies that many operations (in sequences of 128 on a fresh device each) from a
//! deterministic generator and prints the count.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::*;

#[derive(Debug, Clone)]
pub enum Op {
    /// An admin command: opcode and 15 payload qwords.
    Admin(u8, [u64; 15]),
    /// A well-formed SQ WR with hostile fields (remote: selector, rkey, address), then the
    /// doorbell.
    Send(
        u8,
        bool,
        Option<u32>,
        Vec<(u8, u64, u32, u32)>,
        (u8, u32, u64),
    ),
    /// Raw quanta at the SQ head (header polarity from the host's view), then the doorbell.
    RawSq(Vec<[u64; 4]>),
    /// Raw RQ WQE at the RQ head.
    RawRq([u64; 4]),
    /// A well-formed receive with hostile SGEs.
    Recv(Vec<(u8, u64, u32, u32)>),
    /// Both QPs back to RESET and reconnected (rings rewound, as a kernel could do).
    Reconnect,
    /// A doorbell-BAR write.
    Doorbell(u64, Vec<u8>),
    /// A BAR0 register write.
    Reg(usize, u32),
    /// CQ shadow area contents of CQ 1 or 2, then its arm doorbell.
    Shadow(bool, u64, u64),
    /// MODIFY_QP of QP 2 or 3.
    Modify(u32, u32, u8, u32),
    /// Timer tick.
    Tick,
    /// Fast registration: an optional ALLOC_MR (index, PD, max pages), then a FAST_REG WQE on
    /// QP A or B (`bool`: B) with hostile fields: STag, iova, qw2, and either a raw page-list
    /// address or page addresses the host writes into guest memory.
    FastReg(
        Option<(u32, u32, u32)>,
        bool,
        u32,
        u64,
        u64,
        Result<u64, Vec<u64>>,
    ),
    /// A CQ with hostile geometry (shadow address, ring page list, size) used by a
    /// self-connected QP: create both, post a signaled NOP, arm, ring, destroy both.
    CqStress(u64, PageList, u32),
}

fn addr() -> BoxedStrategy<u64> {
    prop_oneof![
        Just(0u64),
        any::<u64>(),
        (0u64..RAM_SIZE).prop_map(|o| RAM_BASE + o),
        (0u64..0x20000).prop_map(|o| VA_OFFSET + RAM_BASE + o),
        (0u64..64).prop_map(|k| RAM_BASE + k * 4096),
        (u64::MAX - 0x1000)..=u64::MAX,
        (RAM_BASE - 0x2000)..(RAM_BASE + 0x2000),
        (RAM_BASE + RAM_SIZE - 0x2000)..(RAM_BASE + RAM_SIZE + 0x2000),
    ]
    .boxed()
}

fn small() -> BoxedStrategy<u64> {
    prop_oneof![
        0u64..16,
        Just(u64::from(u32::MAX)),
        any::<u32>().prop_map(u64::from),
        (1u64..8).prop_map(|s| 1 << (s * 2))
    ]
    .boxed()
}

fn word() -> BoxedStrategy<u64> {
    prop_oneof![
        small(),
        addr(),
        any::<u64>(),
        // Two small u32s (id pairs like qp_id/pd, size/eq_id).
        (0u64..8, 0u64..70).prop_map(|(a, b)| a | (b << 32)),
        // Page-list descriptor tails: npages | level << 32.
        (0u64..600, 0u64..4).prop_map(|(n, l)| n | (l << 32)),
    ]
    .boxed()
}

fn stag() -> BoxedStrategy<u32> {
    prop_oneof![
        Just(LOCAL_DMA_STAG),
        Just(0x111u32),
        Just(0x222),
        any::<u32>(),
        (0u32..8).prop_map(|i| (i << 8) | 0x11)
    ]
    .boxed()
}

/// SGEs: `(selector, address or offset, length, stag)`. Selector % 8: 0 raw hostile
/// values, 1 A's buffer with a hostile length, 2-3 B's buffer, else A's buffer.
fn sges() -> BoxedStrategy<Vec<(u8, u64, u32, u32)>> {
    let sge = (
        any::<u8>(),
        prop_oneof![addr(), 0u64..0x10000],
        prop_oneof![0u32..0x100, 0u32..0x20000, any::<u32>()],
        stag(),
    );
    prop_oneof![
        3 => prop::collection::vec(sge.clone(), 0..4),
        1 => prop::collection::vec(sge, 0..14),
    ]
    .boxed()
}

pub fn op() -> BoxedStrategy<Op> {
    prop_oneof![
        2 => (prop_oneof![1u8..=0x13, any::<u8>()], prop::array::uniform15(word()))
            .prop_map(|(o, w)| Op::Admin(o, w)),
        6 => (
            prop_oneof![
                4 => prop::sample::select(vec![0u8, 1, 3, 4, 5, 6, 0x09, 0x0a, 0x0c, 0x0d]),
                1 => 0u8..=0x0d,
                1 => any::<u8>().prop_map(|o| o & 0x3f)
            ],
            any::<bool>(),
            prop::option::of(any::<u32>()),
            sges(),
            (any::<u8>(), stag(), prop_oneof![addr(), 0u64..0x10000])
        )
            .prop_map(|(o, sig, imm, s, remote)| Op::Send(o, sig, imm, s, remote)),
        1 => prop::collection::vec(prop::array::uniform4(word()), 1..9).prop_map(Op::RawSq),
        1 => prop::array::uniform4(word()).prop_map(Op::RawRq),
        4 => sges().prop_map(Op::Recv),
        2 => (
            prop_oneof![0u64..8, (0u64..256).prop_map(|p| p * 4096), (0u64..256).prop_map(|p| p * 4096 + 0x40), any::<u64>()],
            prop_oneof![
                (0u32..6).prop_map(|v| v.to_le_bytes().to_vec()),
                any::<u32>().prop_map(|v| v.to_le_bytes().to_vec()),
                prop::collection::vec(any::<u8>(), 0..9)
            ]
        )
            .prop_map(|(o, d)| Op::Doorbell(o, d)),
        1 => (
            prop_oneof![
                Just(REG_DEV_CTRL),
                Just(REG_AQ_TAIL),
                Just(REG_AQ_CTRL),
                Just(REG_AQ_SIZE),
                Just(REG_AQ_BASE),
                Just(REG_EQ_DOORBELL),
                (0usize..0x400).prop_map(|r| r & !3)
            ],
            prop_oneof![0u32..16, any::<u32>(), (0u32..8, 0u32..70).prop_map(|(e, c)| eq_doorbell(e, c, true))]
        )
            .prop_map(|(r, v)| Op::Reg(r, v)),
        1 => (any::<bool>(), word(), any::<u64>()).prop_map(|(b, h, a)| Op::Shadow(b, h, a)),
        1 => (2u32..4, any::<u32>(), 0u8..8, any::<u32>()).prop_map(|(q, m, s, a)| Op::Modify(q, m, s, a)),
        1 => Just(Op::Tick),
        1 => Just(Op::Reconnect),
        2 => (
            prop::option::of((4u32..8, 0u32..3, prop_oneof![0u32..8, any::<u32>()])),
            any::<bool>(),
            prop_oneof![(4u32..8, any::<u8>()).prop_map(|(i, k)| (i << 8) | u32::from(k)), stag()],
            prop_oneof![addr(), (0u64..0x10000).prop_map(|o| RAM_BASE + o)],
            prop_oneof![
                (0u64..0x4000, prop::sample::select(vec![12u8, 21, 30, 0, 13, 63]), 0u32..16, 0u32..12)
                    .prop_map(|(length, page_shift, access, npages)| fast_reg_qw2(FastRegFields {
                        length,
                        page_shift,
                        access,
                        npages,
                        // Odd counts as two-level lists: qw1 then names a root page.
                        two_level: npages % 2 == 1,
                        list: 0,
                    })),
                any::<u64>()
            ],
            prop_oneof![
                addr().prop_map(Ok),
                prop::collection::vec(prop_oneof![addr(), (0u64..64).prop_map(|k| RAM_BASE + k * 4096)], 0..12).prop_map(Err)
            ]
        )
            .prop_map(|(alloc, b, stag, iova, qw2, list)| Op::FastReg(alloc, b, stag, iova, qw2, list)),
        1 => (
            prop_oneof![addr(), (u64::MAX - 64)..=u64::MAX],
            (addr(), prop_oneof![0u32..4, any::<u32>()], 0u8..4),
            prop_oneof![0u32..300, any::<u32>()]
        )
            .prop_map(|(shadow, (a, n, l), size)| Op::CqStress(
                shadow & !7,
                PageList { addr: a, npages: n, level: l, ..Default::default() },
                size
            )),
    ]
    .boxed()
}

fn sg_list(r: &Rig, v: &[(u8, u64, u32, u32)]) -> Vec<Sg> {
    v.iter()
        .map(|&(sel, addr, len, lkey)| {
            let off = addr % 0x10000;
            let fit = (0x10000 - off) as u32;
            match sel % 8 {
                0 => Sg {
                    addr,
                    len: len & 0x7fff_ffff,
                    lkey,
                },
                1 => r.buf_a.sg(off, len & 0x7fff_ffff),
                2 | 3 => r.buf_b.sg(off, len % fit.min(0x2000)),
                _ => r.buf_a.sg(off, len % fit.min(0x2000)),
            }
        })
        .collect()
}

/// Remote address and rkey: mostly B's buffer, sometimes hostile.
fn remote(r: &Rig, (sel, rkey, va): (u8, u32, u64)) -> (u32, u64) {
    match sel % 8 {
        0 => (rkey, va),
        1 => (r.buf_b.stag, r.buf_b.va + va % 0x10000),
        _ => (r.buf_b.stag, r.buf_b.va + va % 0x8000),
    }
}

fn reconnect(r: &mut Rig) {
    let reset = QpAttrs {
        state: qp_state::RESET,
        ..Default::default()
    };
    for qp in [2u32, 3] {
        let c = ModifyQp {
            hdr: Host::hdr(admin_op::MODIFY_QP),
            qp_id: qp,
            attr_mask: qp_attr::STATE,
            attrs: reset,
            ..Default::default()
        };
        match r.h.admin_try(c.encode()) {
            Some(c) if c.status == 0 => {}
            Some(_) => return,
            None => {
                fresh(r);
                return;
            }
        }
    }
    for q in [&mut r.a, &mut r.b] {
        for p in q.sq_pages.iter().chain(&q.rq_pages) {
            r.h.write(*p, &[0u8; 4096]);
        }
        q.sq_head = 0;
        q.sq_pol = true;
        q.rq_head = 0;
        q.rq_pol = true;
    }
    let all = QP_ACCESS_REMOTE_READ | QP_ACCESS_REMOTE_WRITE;
    for (qp, dest) in [(2u32, 3u32), (3, 2)] {
        for (mask, state) in [
            (qp_attr::STATE | qp_attr::ACCESS, qp_state::INIT),
            (
                qp_attr::STATE | qp_attr::AV | qp_attr::DEST_QPN,
                qp_state::RTR,
            ),
            (qp_attr::STATE | qp_attr::RNR_RETRY, qp_state::RTS),
        ] {
            let c = ModifyQp {
                hdr: Host::hdr(admin_op::MODIFY_QP),
                qp_id: qp,
                attr_mask: mask,
                attrs: QpAttrs {
                    state,
                    access: all,
                    dest_qpn: dest,
                    dgid: GID0,
                    rnr_retry: 2,
                    ..Default::default()
                },
                ..Default::default()
            };
            if r.h.admin_try(c.encode()).is_none() {
                fresh(r);
                return;
            }
        }
    }
}

/// Hostile register writes broke the admin queue: check this device's invariants and
/// carry on with a fresh one.
fn fresh(r: &mut Rig) {
    assert!(r.h.guards_intact(), "device wrote outside guest memory");
    *r = Rig::rc_flags(r.qp_flags);
}

/// Applies one operation; the device must not panic. Broken admin queues are restarted.
pub fn apply(r: &mut Rig, op: &Op) {
    match op {
        Op::Admin(opcode, words) => {
            let mut cmd = [0u8; 128];
            cmd[0] = *opcode;
            for (i, w) in words.iter().enumerate() {
                cmd[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
            }
            // Keep the test host's own objects (EQs 0/1, QPs 2/3, CQs 1/2, MRs 1/2) most of
            // the time so the data path keeps running; destroying them is fine too.
            if r.h.admin_try(cmd).is_none() {
                fresh(r);
            }
        }
        Op::Send(opcode, signaled, imm, sges, rem) => {
            let (rkey, va) = remote(r, *rem);
            let mut sg = sg_list(r, sges);
            sg.truncate(if imm.is_some() { 12 } else { 13 });
            let wr = Wr {
                opcode: *opcode,
                signaled: *signaled,
                imm: *imm,
                sges: sg,
                hdr_low: rkey,
                qw1: u64::from(rkey),
                qw2: va,
                ..Default::default()
            };
            r.h.send(&mut r.a, &wr);
        }
        Op::FastReg(alloc, on_b, stag, iova, qw2, list) => {
            if let Some((index, pd, max_pages)) = alloc {
                let c = AllocMr {
                    hdr: Host::hdr(admin_op::ALLOC_MR),
                    stag: (index << 8) | 1,
                    pd: *pd,
                    max_pages: *max_pages,
                    ..Default::default()
                };
                if r.h.admin_try(c.encode()).is_none() {
                    fresh(r);
                }
            }
            let pbl = match list {
                Ok(a) => *a,
                Err(pages) => r.h.alloc_u64s(pages, 8),
            };
            let wr = Wr {
                opcode: sq_op::FAST_REG,
                signaled: true,
                hdr_low: *stag,
                qw0: *iova,
                qw1: pbl,
                qw2: *qw2,
                ..Default::default()
            };
            if *on_b {
                r.h.send(&mut r.b, &wr);
            } else {
                r.h.send(&mut r.a, &wr);
            }
        }
        Op::RawSq(quanta) => {
            let pol = u64::from(r.a.sq_pol) << 63;
            for (k, q) in quanta.iter().enumerate() {
                let mut q = *q;
                if k == 0 {
                    q[3] = (q[3] & !(1 << 63)) | pol;
                }
                let b: Vec<u8> = q.iter().flat_map(|w| w.to_le_bytes()).collect();
                let at = r.a.sq_head + k as u32;
                let off = u64::from(at % r.a.sq_quanta) * 32;
                r.h.write(r.a.sq_pages[(off / 4096) as usize] + off % 4096, &b);
            }
            r.h.ring_sq(&r.a);
        }
        Op::RawRq(q) => {
            let mut q = *q;
            q[3] = (q[3] & !(1 << 63)) | (u64::from(r.b.rq_pol) << 63);
            let b: Vec<u8> = q.iter().flat_map(|w| w.to_le_bytes()).collect();
            let off = u64::from(r.b.rq_head % r.b.rq_wqes) * (32 << r.b.rq_shift);
            r.h.write(r.b.rq_pages[(off / 4096) as usize] + off % 4096, &b);
            r.b.rq_head = (r.b.rq_head + 1) % r.b.rq_wqes;
            if r.b.rq_head == 0 {
                r.b.rq_pol = !r.b.rq_pol;
            }
        }
        Op::Reconnect => reconnect(r),
        Op::Recv(sges) => {
            let mut sg = sg_list(r, sges);
            sg.truncate(7);
            r.h.post_recv(&mut r.b, &sg);
        }
        Op::Doorbell(off, data) => {
            let _ =
                r.h.dev()
                    .write_region(crate::vfio::layout::REGION_DB, *off, data);
        }
        Op::Reg(reg, v) => {
            let _ =
                r.h.dev()
                    .write_region(REGION_BAR0, *reg as u64, &v.to_le_bytes());
        }
        Op::Shadow(which, head, arm) => {
            let cq = if *which { &r.cq_a } else { &r.cq_b };
            r.h.w64(cq.shadow, *head);
            r.h.w64(cq.shadow + 32, *arm);
            let (page, id) = (cq.db_page, cq.id);
            r.h.doorbell(page, DB_CQ_ARM_OFFSET, id);
        }
        Op::Modify(qp, mask, state, access) => {
            // Bits of `access` above the two rights pick a GID that is not the device's
            // own (the QP then talks through the wire transport, see `Op::Tick`) and short
            // transport timers.
            let mut remote = GID0;
            remote[15] ^= 0x40;
            let attrs = QpAttrs {
                state: *state,
                access: *access & 3,
                dest_qpn: 5 - qp,
                dgid: if *access & 4 != 0 { remote } else { GID0 },
                timeout: ((*access >> 3) & 3) as u8,
                retry_cnt: ((*access >> 5) & 7) as u8,
                path_mtu: 1 + ((*access >> 8) % 5) as u8,
                rnr_retry: 3,
                ..Default::default()
            };
            if r.h
                .admin_try(
                    ModifyQp {
                        hdr: Host::hdr(admin_op::MODIFY_QP),
                        qp_id: *qp,
                        attr_mask: *mask & qp_attr::ALL,
                        attrs,
                        ..Default::default()
                    }
                    .encode(),
                )
                .is_none()
            {
                fresh(r);
            }
        }
        Op::Tick => {
            // The wire is a mirror: frames the device sent come back to it, where their
            // destination QP is the peer QP (so QPs 2 and 3 talk RoCE to each other), and
            // whatever the guest did to the QPs in between applies.
            let frames = r.h.dev().take_tx();
            for f in frames {
                r.h.dev().rx_frame(&f);
            }
            r.h.dev().tick();
        }
        Op::CqStress(shadow, ring, size) => cq_stress(r, *shadow, *ring, *size),
    }
    // Keep draining CQs and EQs like a driver would, so the device keeps producing.
    r.h.poll_cq(&mut r.cq_a);
    r.h.poll_cq(&mut r.cq_b);
}

fn cq_stress(r: &mut Rig, shadow: u64, ring: PageList, size: u32) {
    let cq = CreateCq {
        hdr: Host::hdr(admin_op::CREATE_CQ),
        cq_id: 9,
        size,
        eq_id: 1,
        db_page: 1,
        shadow_addr: shadow,
        ring,
        ..Default::default()
    };
    let Some(c) = r.h.admin_try(cq.encode()) else {
        return fresh(r);
    };
    if c.status != 0 {
        return;
    }
    let sq = r.h.alloc(4096, 4096);
    let rq = r.h.alloc(4096, 4096);
    let qp = CreateQp {
        hdr: Host::hdr(admin_op::CREATE_QP),
        qp_id: 9,
        pd: 1,
        send_cq: 9,
        recv_cq: 9,
        qp_type: QP_TYPE_RC,
        db_page: 1,
        sq_quanta: 8,
        rq_wqes: 8,
        flags: r.qp_flags,
        sq_ring: PageList {
            addr: sq,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        rq_ring: PageList {
            addr: rq,
            npages: 1,
            level: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    if r.h.admin_try(qp.encode()).is_some() {
        for state in [qp_state::INIT, qp_state::RTR, qp_state::RTS] {
            let m = ModifyQp {
                hdr: Host::hdr(admin_op::MODIFY_QP),
                qp_id: 9,
                attr_mask: qp_attr::STATE | qp_attr::AV | qp_attr::DEST_QPN,
                attrs: QpAttrs {
                    state,
                    dest_qpn: 9,
                    dgid: GID0,
                    ..Default::default()
                },
                ..Default::default()
            };
            if r.h.admin_try(m.encode()).is_none() {
                return fresh(r);
            }
        }
        for k in 0..3u64 {
            let hdr = (1u64 << 63) | (1 << 62) | (u64::from(sq_op::NOP) << 32);
            r.h.write(sq + k * 32 + 24, &hdr.to_le_bytes());
        }
        r.h.doorbell(1, DB_CQ_ARM_OFFSET, 9);
        r.h.doorbell(1, DB_SQ_OFFSET, 9);
        r.h.doorbell(1, DB_CQ_ARM_OFFSET, 9);
        let _ = r.h.admin_try(Host::object(admin_op::DESTROY_QP, 9));
    }
    if r.h
        .admin_try(Host::object(admin_op::DESTROY_CQ, 9))
        .is_none()
    {
        fresh(r);
    }
}

/// The invariants after a sequence.
pub fn check(r: &mut Rig) -> Result<(), String> {
    if !r.h.guards_intact() {
        return Err("device wrote outside guest memory".into());
    }
    r.h.restart();
    let out = r.h.alloc(128, 8);
    let q = QueryObject {
        hdr: Host::hdr(admin_op::QUERY_CAPS),
        out_len: 128,
        out_addr: out,
        ..Default::default()
    };
    match r.h.admin_try(q.encode()) {
        Some(c) if c.status == 0 => Ok(()),
        other => Err(format!("device did not recover: {other:?}")),
    }
}

/// Cases per property: 96, or `PROPTEST_CASES` for long runs.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn hostile_sequences_never_panic_escape_or_wedge(
        privileged in any::<bool>(),
        ops in prop::collection::vec(op(), 1..48),
    ) {
        let mut r = Rig::rc_flags(if privileged { QP_FLAG_PRIVILEGED } else { 0 });
        for op in &ops {
            apply(&mut r, op);
        }
        prop_assert_eq!(check(&mut r), Ok(()));
    }

    #[test]
    fn fast_reg_fields_round_trip(
        length in 0u64..(2 << 40),
        page_shift in 0u8..64,
        access in 0u32..16,
        npages in 0u32..(1 << 24),
        two_level in any::<bool>(),
        list in any::<u64>(),
    ) {
        // One level: qw1 is the list, qw2 holds 12 bits of count; two levels: a 4 KiB root
        // and 24 bits of count.
        let (npages, list) = if two_level { (npages, list & !0xfff) } else { (npages & 0xfff, list) };
        let f = FastRegFields { length, page_shift, access, npages, two_level, list };
        prop_assert_eq!(fast_reg_fields(fast_reg_qw1(f), fast_reg_qw2(f)), f);
    }

    #[test]
    fn wqe_decoding_is_total(words in prop::collection::vec(any::<u64>(), 4..=32)) {
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let _ = crate::rdma::wqe::parse_sq(&b);
        let _ = crate::rdma::wqe::parse_rq(&b);
        let n = crate::rdma::wqe::sq_quanta(crate::rdma::wqe::header(&b));
        prop_assert!((1..=9).contains(&n));
    }
}

/// The long run: `FERRDMA_FUZZ_OPS` operations (default 10^6) from a seeded generator, on
/// a fresh device every 256 operations, checking the invariants after each sequence.
#[test]
#[ignore = "long fuzz run; see the module documentation"]
fn fuzz_storm() {
    let total: u64 = std::env::var("FERRDMA_FUZZ_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut runner = TestRunner::deterministic();
    let strategy = op();
    let mut done = 0u64;
    let mut sequences = 0u64;
    let mut totals = [0u64; 10];
    let start = std::time::Instant::now();
    while done < total {
        let mut r = Rig::rc_flags(if sequences % 2 == 1 {
            QP_FLAG_PRIVILEGED
        } else {
            0
        });
        for _ in 0..128 {
            let op = strategy.new_tree(&mut runner).unwrap().current();
            apply(&mut r, &op);
            done += 1;
        }
        sequences += 1;
        let st = *r.h.dev().engine().stats();
        for (sum, v) in totals.iter_mut().zip([
            st.admin_cmds,
            st.admin_errors,
            st.doorbells,
            st.spurious_doorbells,
            st.cqes,
            st.wqe_errors,
            st.rx_packets,
            st.aeqes,
            st.tx_packets,
            st.rx_drops,
        ]) {
            *sum += v;
        }
        if let Err(e) = check(&mut r) {
            panic!("after {done} operations: {e}");
        }
        if sequences % 100 == 0 {
            eprintln!("fuzz_storm: {done} operations, {:?}", start.elapsed());
        }
    }
    eprintln!(
        "fuzz_storm: {done} operations in {sequences} sequences, no finding ({:?})",
        start.elapsed()
    );
    eprintln!(
        "fuzz_storm: device saw admin_cmds {} (errors {}), doorbells {} (spurious {}), \
         cqes {}, wqe_errors {}, messages delivered {}, async events {}, \
         packets sent {} (mirrored back), inbound drops {}",
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[4],
        totals[5],
        totals[6],
        totals[7],
        totals[8],
        totals[9]
    );
}
