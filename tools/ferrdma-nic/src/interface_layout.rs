//! The byte offsets the programming manual's tables give, checked against `interface.rs`,
//! so the prose and the shared definitions cannot drift apart.

use std::mem::offset_of;

use crate::interface::*;

#[test]
fn manual_offsets_match_the_structs() {
    assert_eq!(offset_of!(AdminCompletion, status), 2);
    assert_eq!(offset_of!(AdminCompletion, result), 4);
    assert_eq!(offset_of!(AdminCompletion, detail), 8);
    assert_eq!(offset_of!(AdminCompletion, opcode), 12);
    assert_eq!(offset_of!(AdminCompletion, flags), 14);
    assert_eq!(offset_of!(QueryObject, id), 8);
    assert_eq!(offset_of!(QueryObject, out_len), 12);
    assert_eq!(offset_of!(QueryObject, out_addr), 16);
    assert_eq!(offset_of!(CreateEq, size), 12);
    assert_eq!(offset_of!(CreateEq, vector), 16);
    assert_eq!(offset_of!(CreateEq, kind), 20);
    assert_eq!(offset_of!(CreateEq, moderation_us), 22);
    assert_eq!(offset_of!(CreateEq, ring), 24);
    assert_eq!(offset_of!(CreateCq, size), 12);
    assert_eq!(offset_of!(CreateCq, eq_id), 16);
    assert_eq!(offset_of!(CreateCq, db_page), 20);
    assert_eq!(offset_of!(CreateCq, shadow_addr), 24);
    assert_eq!(offset_of!(CreateCq, ring), 32);
    assert_eq!(offset_of!(ModifyCq, flags), 20);
    assert_eq!(offset_of!(ModifyCq, ring), 32);
    assert_eq!(offset_of!(CreateQp, pd), 12);
    assert_eq!(offset_of!(CreateQp, send_cq), 16);
    assert_eq!(offset_of!(CreateQp, recv_cq), 20);
    assert_eq!(offset_of!(CreateQp, qp_type), 24);
    assert_eq!(offset_of!(CreateQp, rq_shift), 25);
    assert_eq!(offset_of!(CreateQp, db_page), 28);
    assert_eq!(offset_of!(CreateQp, sq_quanta), 32);
    assert_eq!(offset_of!(CreateQp, rq_wqes), 36);
    assert_eq!(offset_of!(CreateQp, sq_ring), 40);
    assert_eq!(offset_of!(CreateQp, rq_ring), 56);
    assert_eq!(offset_of!(CreateQp, shadow_addr), 72);
    assert_eq!(offset_of!(CreateQp, compl_ctx), 80);
    assert_eq!(offset_of!(CreateQp, flags), 88);
    assert_eq!(offset_of!(ModifyQp, attr_mask), 12);
    assert_eq!(offset_of!(ModifyQp, flags), 16);
    assert_eq!(offset_of!(ModifyQp, attrs), 24);
    assert_eq!(offset_of!(QpAttrs, sgid_index), 8);
    assert_eq!(offset_of!(QpAttrs, av_flags), 11);
    assert_eq!(offset_of!(QpAttrs, udp_sport), 12);
    assert_eq!(offset_of!(QpAttrs, flow_label), 16);
    assert_eq!(offset_of!(QpAttrs, dest_qpn), 20);
    assert_eq!(offset_of!(QpAttrs, qkey), 24);
    assert_eq!(offset_of!(QpAttrs, sq_psn), 28);
    assert_eq!(offset_of!(QpAttrs, rq_psn), 32);
    assert_eq!(offset_of!(QpAttrs, access), 36);
    assert_eq!(offset_of!(QpAttrs, dmac), 40);
    assert_eq!(offset_of!(QpAttrs, dgid), 48);
    assert_eq!(offset_of!(QpQueryOut, qp_type), 64);
    assert_eq!(offset_of!(QpQueryOut, last_error), 67);
    assert_eq!(offset_of!(QpQueryOut, pd), 68);
    assert_eq!(offset_of!(QpQueryOut, sq_tail), 80);
    assert_eq!(offset_of!(QpQueryOut, rq_tail), 84);
    assert_eq!(offset_of!(QpQueryOut, flags), 88);
    assert_eq!(offset_of!(RegMr, pd), 12);
    assert_eq!(offset_of!(RegMr, access), 16);
    assert_eq!(offset_of!(RegMr, page_shift), 20);
    assert_eq!(offset_of!(RegMr, iova), 24);
    assert_eq!(offset_of!(RegMr, length), 32);
    assert_eq!(offset_of!(RegMr, pages), 40);
    assert_eq!(offset_of!(GidCmd, gid), 16);
    assert_eq!(offset_of!(GidCmd, mac), 32);
    assert_eq!(offset_of!(McastCmd, qp_id), 8);
    assert_eq!(offset_of!(McastCmd, gid), 16);
    assert_eq!(offset_of!(Caps, max_mcast_grp), 102);
    assert_eq!(offset_of!(Caps, max_mcast_qp_attach), 104);
    assert_eq!(offset_of!(SetPort, mac), 8);
    assert_eq!(offset_of!(SetPort, link), 14);
    assert_eq!(offset_of!(SetPort, mtu), 15);
    assert_eq!(offset_of!(SetCc, param), 8);
    assert_eq!(offset_of!(SetCc, value), 12);
    assert_eq!(offset_of!(CreateAh, pd), 12);
    assert_eq!(offset_of!(CreateAh, attrs), 16);
    assert_eq!(offset_of!(Caps, max_qp), 8);
    assert_eq!(offset_of!(Caps, max_msg_size), 56);
    assert_eq!(offset_of!(Caps, max_mr_size), 64);
    assert_eq!(offset_of!(Caps, page_size_cap), 72);
    assert_eq!(offset_of!(Caps, max_rd_atomic), 80);
    assert_eq!(offset_of!(Caps, msix_vectors), 84);
    assert_eq!(offset_of!(Caps, fw_ver), 88);
    // The manual's QUERY_COUNTERS table: 32 qwords in this order.
    assert_eq!(PortCounters::SIZE, 256);
    assert_eq!(offset_of!(PortCounters, ip6_rx_pkts), 32);
    assert_eq!(offset_of!(PortCounters, rx_sends), 96);
    assert_eq!(offset_of!(PortCounters, rnr_naks_sent), 144);
    assert_eq!(offset_of!(PortCounters, retransmits), 184);
    assert_eq!(offset_of!(PortCounters, cnps_ignored), 240);
    assert_eq!(offset_of!(Eqe, tag), 4);
    assert_eq!(offset_of!(Eqe, info), 8);
    assert_eq!(offset_of!(CreateCq, event_tag), 112);
    assert_eq!(offset_of!(CreateQp, event_tag), 92);
    assert_eq!(offset_of!(Eqe, code), 12);
    assert_eq!(offset_of!(Eqe, kind), 14);
    assert_eq!(offset_of!(Eqe, flags), 15);
    assert_eq!(offset_of!(PageList, npages), 8);
    assert_eq!(offset_of!(PageList, level), 12);
}

#[test]
fn encode_decode_round_trip_and_byte_order() {
    let c = CreateQp {
        hdr: AdminHeader {
            opcode: admin_op::CREATE_QP,
            flags: 0,
            cmd_id: 0x1234,
            rsvd: 0,
        },
        qp_id: 0x0102_0304,
        sq_ring: PageList {
            addr: 0x1122_3344_5566_7788,
            npages: 9,
            level: 1,
            ..Default::default()
        },
        compl_ctx: u64::MAX - 1,
        ..Default::default()
    };
    let b = c.encode();
    assert_eq!(&b[..4], &[0x07, 0, 0x34, 0x12]);
    assert_eq!(&b[8..12], &[4, 3, 2, 1]);
    assert_eq!(&b[40..48], &0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(b[52], 1);
    assert_eq!(CreateQp::decode(&b), c);
    let e = Eqe {
        id: 7,
        tag: 0xa1b2_c3d4,
        info: 2,
        code: ae::QP_FATAL,
        kind: eqe_kind::QP,
        flags: EQE_FLAG_VALID,
    };
    assert_eq!(e.encode()[15], 0x80, "valid bit in the last byte");
    assert_eq!(&e.encode()[..8], &[7, 0, 0, 0, 0xd4, 0xc3, 0xb2, 0xa1]);
    assert_eq!(Eqe::decode(&e.encode()), e);
    // Register encodings.
    assert_eq!(eq_doorbell(3, 17, true), 0x8300_0011);
    assert_eq!(eq_doorbell(0x80, 0x0100_0000, false), 0);
    assert_eq!(mtu_bytes(1), Some(256));
    assert_eq!(mtu_bytes(5), Some(4096));
    assert_eq!(mtu_bytes(6), None);
    assert_eq!(bits(0xc000_8085_0000_0000, 37, 32), 5);
    assert_eq!(set_bits(0, 63, 63, 1), 1 << 63);
    assert_eq!(stag_index(0xabcd12), 0xabcd);
    // Offsets the 1.x driver uses are unchanged.
    assert_eq!((REG_ID, REG_VERSION, REG_TEST_DMA_CTRL), (0, 4, 0x120));
    assert_eq!((VERSION_MAJOR, VERSION_MINOR), (1, 9));
    assert_eq!((REG_FEATURES, REG_MAC_LO, REG_MAC_HI), (0x10, 0x18, 0x1c));
}

#[test]
fn data_path_helpers_match_the_irdma_test_vectors() {
    // irdma-abi.md Appendix A.
    let h = SqHeader {
        opcode: sq_op::SEND_SOL,
        valid: true,
        signaled: true,
        imm: true,
        addfragcnt: addfragcnt(3) as u8,
        ..Default::default()
    };
    assert_eq!(sq_wqe_header(h), 0xc000_8085_0000_0000);
    assert_eq!(addfragcnt(2), 2);
    assert_eq!(addfragcnt(1), 0);
    assert_eq!(addfragcnt(4), 4);
    let w = SqHeader {
        opcode: sq_op::RDMA_WRITE_SOL,
        valid: true,
        signaled: true,
        imm: true,
        inline_len: Some(8),
        low: 0x9988_7766,
        ..Default::default()
    };
    assert_eq!(sq_wqe_header(w), 0xc208_800d_9988_7766);
    assert_eq!(
        wqe_fragment_qw1(0x100, 0xaaaa01, true),
        0x8000_0100_00aa_aa01
    );
    assert_eq!(sq_wqe_quanta(0xc232_0003_0000_0000), 3);
    assert_eq!(sq_wqe_quanta(0xc000_0100_9988_7766), 3);
    assert_eq!(sq_wqe_quanta(0x8000_000c_0000_0000), 1);
    assert_eq!(cq_arm_word(0, false), 0x1c000);
    assert_eq!(cq_arm_word(0x1c000, true), 0x28000);
    let i = cqe_info(0xc300_0000_0000_0000);
    assert!(i.valid && i.sq && !i.error);
    assert_eq!((i.op, i.wqe_idx), (3, 0));
    let e = cqe_info((1 << 63) | (1 << 55) | (1 << 16) | 3 | (5 << 32));
    assert_eq!(
        (e.error, e.major, e.minor, e.wqe_idx, e.sq),
        (true, 1, 3, 5, false)
    );
}
