// SPDX-License-Identifier: GPL-2.0

//! The GEN_2 data path from the kernel's side: SQ and RQ WQEs built for kernel QPs and the
//! CQEs of kernel CQs decoded into completions. Pure functions over qwords, so the layout
//! (manual, "User data path"; `irdma-abi.md` §3.4–3.9) is tested by KUnit without a device.

use crate::interface as hw;
use kernel::{
    infiniband::{NetworkHdr, WcOpcode, WcStatus},
    prelude::*,
};

/// Qwords of one 32-byte quantum.
pub(crate) const QUANTUM_QWORDS: usize = 4;
/// Quanta of the largest SQ WQE.
pub(crate) const MAX_WQE_QUANTA: u32 = 8;
/// Fragment slots a WQE has room for: slot 0 and 15 more (ADDFRAGCNT is 4 bits, even).
const MAX_SLOTS: usize = 15;

/// One SGE as the device reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Frag {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) stag: u32,
}

/// What an SQ WQE does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SqOp {
    /// SEND on an RC QP (optionally invalidating `inv` at the responder).
    Send { inv: Option<u32> },
    /// SEND on a UD/GSI QP.
    UdSend { ah: u32, qkey: u32, dqpn: u32 },
    /// RDMA WRITE.
    Write { raddr: u64, rkey: u32 },
    /// RDMA READ.
    Read { raddr: u64, rkey: u32 },
    /// Local invalidate of `stag`.
    LocalInv { stag: u32 },
    /// Fast registration of `stag` (an ALLOC_MR entry, new key) at `iova` over the page list
    /// at bus address `pbl`.
    FastReg {
        stag: u32,
        iova: u64,
        fields: hw::FastRegFields,
    },
}

/// The flags of an SQ WQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SqFlags {
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) fence: bool,
    /// Immediate data (host order).
    pub(crate) imm: Option<u32>,
}

/// The data of an SQ WQE.
pub(crate) enum Payload<'a> {
    /// Fragments the device gathers.
    Frags(&'a [Frag]),
    /// Bytes copied into the WQE.
    Inline(&'a [u8]),
}

/// An encoded WQE: `quanta` quanta of qwords, with the header (qword 3) kept apart so it can
/// be written last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wqe {
    pub(crate) qw: [u64; MAX_WQE_QUANTA as usize * QUANTUM_QWORDS],
    pub(crate) quanta: u32,
}

impl Wqe {
    /// The header qword (quantum 0, qword 3).
    pub(crate) fn header(&self) -> u64 {
        self.qw[3]
    }
}

/// The WQE opcode for `op` with `flags`.
const fn opcode(op: &SqOp, solicited: bool) -> u8 {
    match op {
        SqOp::Send { inv: None } | SqOp::UdSend { .. } => {
            if solicited {
                hw::sq_op::SEND_SOL
            } else {
                hw::sq_op::SEND
            }
        }
        SqOp::Send { inv: Some(_) } => {
            if solicited {
                hw::sq_op::SEND_SOL_INV
            } else {
                hw::sq_op::SEND_INV
            }
        }
        SqOp::Write { .. } => {
            if solicited {
                hw::sq_op::RDMA_WRITE_SOL
            } else {
                hw::sq_op::RDMA_WRITE
            }
        }
        SqOp::Read { .. } => hw::sq_op::RDMA_READ,
        SqOp::LocalInv { .. } => hw::sq_op::LOCAL_INV,
        SqOp::FastReg { .. } => hw::sq_op::FAST_REG,
    }
}

/// Builds an SQ WQE for ring pass `polarity`. `EINVAL` if the data does not fit the format
/// (more than 13 fragments with immediate data, inline beyond 101 bytes or on a READ).
pub(crate) fn sq_wqe(op: SqOp, flags: SqFlags, data: Payload<'_>, polarity: bool) -> Result<Wqe> {
    let mut w = Wqe {
        qw: [0; MAX_WQE_QUANTA as usize * QUANTUM_QWORDS],
        quanta: 1,
    };
    let (low, qw2) = match op {
        SqOp::Send { inv } => (inv.unwrap_or(0), 0),
        SqOp::UdSend { ah, qkey, dqpn } => (
            ah & hw::wqe::AH_ID_MASK as u32,
            u64::from(qkey) | u64::from(dqpn & 0xff_ffff) << 32,
        ),
        SqOp::Write { raddr, rkey } | SqOp::Read { raddr, rkey } => (rkey, raddr),
        SqOp::LocalInv { stag } => {
            w.qw[1] = u64::from(stag);
            (0, 0)
        }
        SqOp::FastReg { stag, iova, fields } => {
            w.qw[0] = iova;
            w.qw[1] = hw::fast_reg_qw1(fields);
            (stag, hw::fast_reg_qw2(fields))
        }
    };
    w.qw[2] = qw2;
    let mut hdr = hw::SqHeader {
        opcode: opcode(&op, flags.solicited),
        valid: polarity,
        signaled: flags.signaled,
        read_fence: flags.fence,
        imm: flags.imm.is_some(),
        inline_len: None,
        addfragcnt: 0,
        low,
    };
    if matches!(op, SqOp::LocalInv { .. } | SqOp::FastReg { .. }) {
        hdr.imm = false;
        w.qw[3] = hw::sq_wqe_header(hdr);
        return Ok(w);
    }
    match data {
        Payload::Inline(bytes) => {
            if matches!(op, SqOp::Read { .. }) || bytes.len() > hw::MAX_INLINE as usize {
                return Err(EINVAL);
            }
            let mut b = [0u8; MAX_WQE_QUANTA as usize * 32];
            if let Some(imm) = flags.imm {
                b[..8].copy_from_slice(&u64::from(imm).to_le_bytes());
            }
            b[16..24].copy_from_slice(&qw2.to_le_bytes());
            for (i, &v) in bytes.iter().enumerate() {
                let off = if i < 8 {
                    8 + i
                } else {
                    32 * (1 + (i - 8) / 31) + (i - 8) % 31
                };
                b[off] = v;
            }
            hdr.inline_len = Some(bytes.len() as u8);
            let h = hw::sq_wqe_header(hdr);
            w.quanta = hw::sq_wqe_quanta(h);
            for q in 1..w.quanta as usize {
                b[32 * q + 31] = u8::from(polarity) << 7;
            }
            for (i, c) in b.chunks_exact(8).enumerate() {
                let mut x = [0u8; 8];
                x.copy_from_slice(c);
                w.qw[i] = u64::from_le_bytes(x);
            }
            w.qw[3] = h;
        }
        Payload::Frags(frags) => {
            // With immediate data, slot 0 carries it and the SGEs start at slot 1.
            let first = usize::from(flags.imm.is_some());
            let used = first + frags.len();
            if frags.len() > hw::MAX_SGE as usize || used > MAX_SLOTS {
                return Err(EINVAL);
            }
            if let Some(imm) = flags.imm {
                w.qw[0] = u64::from(imm);
            }
            let slot = |k: usize| if k == 0 { 0 } else { 2 + 2 * k };
            for (i, f) in frags.iter().enumerate() {
                let s = slot(first + i);
                w.qw[s] = f.addr;
                w.qw[s + 1] = hw::wqe_fragment_qw1(f.len, f.stag, polarity);
            }
            let add = hw::addfragcnt(used as u32);
            if used == 0 {
                // An empty message still has slot 0: length 0, valid.
                w.qw[1] = hw::wqe_fragment_qw1(0, 0, polarity);
            } else if used % 2 == 0 {
                // The GEN_2 padding slot: only its valid bit.
                w.qw[slot(used) + 1] = hw::wqe_fragment_qw1(0, 0, polarity);
            }
            hdr.addfragcnt = add as u8;
            let h = hw::sq_wqe_header(hdr);
            w.quanta = hw::sq_wqe_quanta(h);
            w.qw[3] = h;
        }
    }
    Ok(w)
}

/// A NOP quantum (padding to the next 8-quantum chunk).
pub(crate) fn nop(polarity: bool) -> u64 {
    hw::sq_wqe_header(hw::SqHeader {
        opcode: hw::sq_op::NOP,
        valid: polarity,
        ..hw::SqHeader::default()
    })
}

/// NOP quanta needed before a WQE of `quanta` at ring position `head`, so that it stays in
/// one 8-quantum chunk (and so in one 4 KiB page).
pub(crate) const fn padding_before(head: u32, quanta: u32) -> u32 {
    let avail = MAX_WQE_QUANTA - head % MAX_WQE_QUANTA;
    if quanta > avail {
        avail
    } else {
        0
    }
}

/// Builds an RQ WQE of `32 << shift` bytes for ring pass `polarity`.
pub(crate) fn rq_wqe(frags: &[Frag], shift: u8, polarity: bool) -> Result<Wqe> {
    let slots = (2usize << shift) - 1;
    if frags.len() > hw::MAX_SGE as usize || frags.len() + usize::from(frags.len() % 2 == 0) > slots
    {
        return Err(EINVAL);
    }
    let mut w = Wqe {
        qw: [0; MAX_WQE_QUANTA as usize * QUANTUM_QWORDS],
        quanta: 1 << shift,
    };
    let slot = |k: usize| if k == 0 { 0 } else { 2 + 2 * k };
    for (i, f) in frags.iter().enumerate() {
        let s = slot(i);
        w.qw[s] = f.addr;
        w.qw[s + 1] = hw::wqe_fragment_qw1(f.len, f.stag, polarity);
    }
    if frags.is_empty() {
        w.qw[1] = hw::wqe_fragment_qw1(0, 0, polarity);
    } else if frags.len() % 2 == 0 {
        w.qw[slot(frags.len()) + 1] = hw::wqe_fragment_qw1(0, 0, polarity);
    }
    w.qw[3] = (u64::from(polarity) << hw::wqe::VALID)
        | u64::from(hw::addfragcnt(frags.len() as u32)) << hw::wqe::ADDFRAGCNT_LO;
    Ok(w)
}

/// The completion opcode of a send WQE.
pub(crate) const fn sq_wc_opcode(op: &SqOp) -> WcOpcode {
    match op {
        SqOp::Send { .. } | SqOp::UdSend { .. } => WcOpcode::Send,
        SqOp::Write { .. } => WcOpcode::RdmaWrite,
        SqOp::Read { .. } => WcOpcode::RdmaRead,
        SqOp::LocalInv { .. } => WcOpcode::LocalInv,
        SqOp::FastReg { .. } => WcOpcode::RegMr,
    }
}

/// The status an error CQE reports (`irdma-abi.md` §4.4).
pub(crate) const fn error_status(major: u16, minor: u16) -> WcStatus {
    use hw::flush as f;
    if major != hw::cqe::MAJERR_FLUSH {
        return WcStatus::General;
    }
    match minor {
        f::GENERAL => WcStatus::WrFlush,
        f::PROT => WcStatus::LocProt,
        f::REM_ACCESS => WcStatus::RemAccess,
        f::LOC_QP_OP => WcStatus::LocQpOp,
        f::REM_OP => WcStatus::RemOp,
        f::LOC_LEN => WcStatus::LocLen,
        f::RETRY_EXC => WcStatus::RetryExc,
        f::MW_BIND => WcStatus::MwBind,
        f::REM_INV_REQ => WcStatus::RemInvReq,
        f::RNR_RETRY_EXC => WcStatus::RnrRetryExc,
        _ => WcStatus::Fatal,
    }
}

/// A CQE read from a kernel CQ (one slot, or two with the extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cqe {
    pub(crate) info: hw::CqeInfo,
    /// PAYLDLEN.
    pub(crate) bytes: u32,
    /// Completion context (0: the QP was destroyed, skip).
    pub(crate) ctx: u64,
    /// The local QP id.
    pub(crate) qp_id: u32,
    /// qw2 31:0: source QPN (UD) or invalidated STag.
    pub(crate) qw2_low: u32,
    /// Immediate data from the extension, if valid.
    pub(crate) imm: Option<u32>,
    /// UD: the 802.1Q TCI of the datagram, from the extension, if valid.
    pub(crate) vlan_tci: Option<u16>,
    /// UD: the source MAC, from the extension, if valid.
    pub(crate) smac: Option<[u8; 6]>,
}

/// Decodes a CQE from its qwords (`ext` = the extension slot's, if EXTCQE is set).
pub(crate) fn decode_cqe(qw: [u64; 4], ext: Option<[u64; 4]>) -> Cqe {
    let info = hw::cqe_info(qw[3]);
    let imm = ext.and_then(|e| {
        if (e[3] >> hw::cqe::IMMVALID) & 1 == 1 {
            Some(e[0] as u32)
        } else {
            None
        }
    });
    let flag = |bit: u32| ext.filter(|e| (e[3] >> bit) & 1 == 1);
    let vlan_tci = flag(hw::cqe::UDVLANVALID).map(|e| (e[2] >> 48) as u16);
    let smac = flag(hw::cqe::UDSMACVALID).map(|e| {
        let b = e[2].to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    });
    Cqe {
        info,
        bytes: qw[0] as u32,
        ctx: qw[1],
        qp_id: ((qw[2] >> hw::cqe::QPID_LO) & 0xff_ffff) as u32,
        qw2_low: qw[2] as u32,
        imm,
        vlan_tci,
        smac,
    }
}

/// What a successful RQ CQE reports beyond the WQE's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecvInfo {
    pub(crate) opcode: WcOpcode,
    pub(crate) byte_len: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) invalidated: Option<u32>,
    pub(crate) src_qp: u32,
    pub(crate) network: Option<NetworkHdr>,
    pub(crate) vlan_tci: Option<u16>,
    pub(crate) smac: Option<[u8; 6]>,
}

/// Decodes a receive completion of a QP (`ud`: datagram QP, `qp_id` its own id).
pub(crate) fn recv_info(c: &Cqe, ud: bool, qp_id: u32) -> RecvInfo {
    let with_imm = c.info.op == hw::cqe::OP_RECV_RDMA_IMM || c.info.op == 0x09;
    RecvInfo {
        opcode: if with_imm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        },
        byte_len: c.bytes,
        imm: c.imm,
        invalidated: if !ud && c.info.stag_inv {
            Some(c.qw2_low)
        } else {
            None
        },
        src_qp: if ud { c.qw2_low & 0xff_ffff } else { qp_id },
        network: if !ud {
            None
        } else if c.info.stag_inv {
            Some(NetworkHdr::Ipv4)
        } else {
            Some(NetworkHdr::Ipv6)
        },
        vlan_tci: c.vlan_tci.filter(|_| ud),
        smac: c.smac.filter(|_| ud),
    }
}

#[kunit_tests(ferrdma_kwqe)]
mod tests {
    use super::*;

    fn f(addr: u64, len: u32, stag: u32) -> Frag {
        Frag { addr, len, stag }
    }

    #[test]
    fn send_with_two_sges_and_immediate_uses_slots_0_to_3() -> Result {
        let frags = [f(0x1000, 16, 7), f(0x2000, 32, 8)];
        let flags = SqFlags {
            signaled: true,
            imm: Some(0x1234_5678),
            ..SqFlags::default()
        };
        let w = sq_wqe(
            SqOp::Send { inv: None },
            flags,
            Payload::Frags(&frags),
            true,
        )?;
        // imm + 2 SGEs = 3 slots: ADDFRAGCNT 2, 2 quanta.
        assert_eq!(w.quanta, 2);
        assert_eq!(w.qw[0], 0x1234_5678);
        assert_eq!((w.qw[4], w.qw[6]), (0x1000, 0x2000));
        assert_eq!(w.qw[5], hw::wqe_fragment_qw1(16, 7, true));
        assert_eq!(w.qw[7], hw::wqe_fragment_qw1(32, 8, true));
        let h = w.header();
        assert_eq!(h >> 63, 1);
        assert_eq!((h >> 62) & 1, 1);
        assert_eq!((h >> 47) & 1, 1);
        assert_eq!((h >> 38) & 0xf, 2);
        assert_eq!((h >> 32) & 0x3f, u64::from(hw::sq_op::SEND));
        Ok(())
    }

    #[test]
    fn even_fragment_counts_get_a_padding_slot() -> Result {
        let frags = [f(0x1000, 1, 1), f(0x2000, 2, 2)];
        let w = sq_wqe(
            SqOp::Write {
                raddr: 0xdead_0000,
                rkey: 0x77,
            },
            SqFlags::default(),
            Payload::Frags(&frags),
            false,
        )?;
        // 2 slots: ADDFRAGCNT 2 (one SGE slot and the padding slot), 2 quanta.
        assert_eq!((w.header() >> 38) & 0xf, 2);
        assert_eq!(w.quanta, 2);
        assert_eq!(w.qw[2], 0xdead_0000);
        assert_eq!(w.header() as u32, 0x77);
        assert_eq!(w.qw[7], hw::wqe_fragment_qw1(0, 0, false));
        assert_eq!(w.header() >> 63, 0);
        Ok(())
    }

    #[test]
    fn ud_send_carries_ah_qkey_and_qpn() -> Result {
        let w = sq_wqe(
            SqOp::UdSend {
                ah: 5,
                qkey: 0x8001_0000,
                dqpn: 1,
            },
            SqFlags {
                solicited: true,
                ..SqFlags::default()
            },
            Payload::Frags(&[f(0x3000, 256, 0)]),
            true,
        )?;
        assert_eq!(w.quanta, 1);
        assert_eq!(w.qw[2], 0x8001_0000 | 1 << 32);
        assert_eq!(w.header() & 0x1_ffff, 5);
        assert_eq!((w.header() >> 32) & 0x3f, u64::from(hw::sq_op::SEND_SOL));
        Ok(())
    }

    #[test]
    fn inline_bytes_follow_the_gen2_layout() -> Result {
        let mut data = [0u8; 40];
        for (i, b) in data.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let w = sq_wqe(
            SqOp::Send { inv: None },
            SqFlags::default(),
            Payload::Inline(&data),
            true,
        )?;
        // 8 bytes in qw1, then 31 per quantum: 40 bytes need 3 quanta.
        assert_eq!(w.quanta, 3);
        assert_eq!(w.qw[1].to_le_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
        // Byte 8 of the message is at WQE byte 32; byte 39 at 32*2 + 0.
        assert_eq!(w.qw[4] as u8, 9);
        assert_eq!(w.qw[8] as u8, 40);
        // Inline valid bytes at 32q + 31.
        assert_eq!(w.qw[7] >> 56, 0x80);
        assert_eq!(w.qw[11] >> 56, 0x80);
        assert_eq!((w.header() >> 48) & 0xff, 40);
        assert!(sq_wqe(
            SqOp::Send { inv: None },
            SqFlags::default(),
            Payload::Inline(&[0; 102]),
            true
        )
        .is_err());
        Ok(())
    }

    #[test]
    fn too_many_fragments_are_refused() {
        let frags = [Frag::default(); 14];
        assert!(sq_wqe(
            SqOp::Send { inv: None },
            SqFlags::default(),
            Payload::Frags(&frags),
            true
        )
        .is_err());
        let thirteen = [Frag::default(); 13];
        assert!(sq_wqe(
            SqOp::Send { inv: None },
            SqFlags {
                imm: Some(1),
                ..SqFlags::default()
            },
            Payload::Frags(&thirteen),
            true
        )
        .is_ok());
    }

    #[test]
    fn fast_reg_is_one_quantum_with_iova_list_and_fields() -> Result {
        let fields = hw::FastRegFields {
            length: 0x2d00,
            page_shift: 12,
            access: hw::MR_ACCESS_LOCAL_WRITE | hw::MR_ACCESS_REMOTE_WRITE,
            npages: 3,
            two_level: false,
            list: 0x8000_0040,
        };
        let flags = SqFlags {
            signaled: true,
            fence: true,
            // Ignored: a FAST_REG carries no immediate data.
            imm: Some(9),
            ..SqFlags::default()
        };
        let op = |fields| SqOp::FastReg {
            stag: 0x507,
            iova: 0x1_2345_6100,
            fields,
        };
        let w = sq_wqe(op(fields), flags, Payload::Frags(&[]), true)?;
        assert_eq!(w.quanta, 1);
        assert_eq!(w.qw[0], 0x1_2345_6100);
        assert_eq!(w.qw[1], 0x8000_0040);
        // Length in 40:0, page shift in 47:42, access in 51:48, page count in 63:52.
        assert_eq!(w.qw[2], 0x2d00 | 12 << 42 | 3 << 48 | 3 << 52);
        let h = w.header();
        assert_eq!(h as u32, 0x507);
        assert_eq!((h >> 32) & 0x3f, 0x09);
        assert_eq!((h >> 63, (h >> 62) & 1, (h >> 60) & 1), (1, 1, 1));
        assert_eq!((h >> 47) & 1, 0);
        assert_eq!((h >> 38) & 0xf, 0);
        assert_eq!(hw::sq_wqe_quanta(h), 1);
        assert_eq!(hw::fast_reg_fields(w.qw[1], w.qw[2]), fields);
        // Two levels: a 4 KiB root, count bits 23:12 in qw1 11:0, bits 11:0 in qw2 63:52.
        let two = hw::FastRegFields {
            npages: 0x1234,
            two_level: true,
            list: 0x9000_0000,
            ..fields
        };
        let w = sq_wqe(op(two), flags, Payload::Frags(&[]), true)?;
        assert_eq!(w.qw[1], 0x9000_0001);
        assert_eq!(w.qw[2], 0x2d00 | 1 << 41 | 12 << 42 | 3 << 48 | 0x234 << 52);
        assert_eq!(hw::fast_reg_fields(w.qw[1], w.qw[2]), two);
        Ok(())
    }

    #[test]
    fn fast_reg_completes_as_reg_mr() {
        let op = SqOp::FastReg {
            stag: 0x100,
            iova: 0,
            fields: hw::FastRegFields::default(),
        };
        assert_eq!(sq_wc_opcode(&op), WcOpcode::RegMr);
        assert_eq!(error_status(1, hw::flush::MW_BIND), WcStatus::MwBind);
        assert_eq!(error_status(1, hw::flush::PROT), WcStatus::LocProt);
    }

    #[test]
    fn padding_keeps_wqes_in_8_quantum_chunks() {
        assert_eq!(padding_before(0, 8), 0);
        assert_eq!(padding_before(6, 2), 0);
        assert_eq!(padding_before(7, 2), 1);
        assert_eq!(padding_before(5, 4), 3);
        assert_eq!(padding_before(9, 1), 0);
    }

    #[test]
    fn rq_wqe_layout() -> Result {
        let w = rq_wqe(&[f(0x4000, 296, 0)], 0, true)?;
        assert_eq!(
            (w.qw[0], w.qw[1]),
            (0x4000, hw::wqe_fragment_qw1(296, 0, true))
        );
        assert_eq!(w.qw[3], 1 << 63);
        assert!(rq_wqe(&[f(0, 1, 0), f(0, 1, 0)], 0, true).is_err());
        let w = rq_wqe(&[f(0, 1, 0), f(0x10, 2, 3)], 1, false)?;
        assert_eq!(w.qw[3] >> 38 & 0xf, 2);
        assert_eq!(w.qw[5], hw::wqe_fragment_qw1(2, 3, false));
        Ok(())
    }

    #[test]
    fn cqes_decode_into_completions() {
        // A UD receive over IPv4 from QPN 1 into QP 1, 296 bytes.
        let qw3 = 1u64 << 63 | u64::from(hw::cqe::OP_RECV) << 56 | 1 << 53 | 5 << 32;
        let c = decode_cqe([296, 0x8000_0000_0000_0001, 1 << 32 | 1, qw3], None);
        assert_eq!((c.qp_id, c.bytes, c.info.wqe_idx), (1, 296, 5));
        let r = recv_info(&c, true, 1);
        assert_eq!(r.src_qp, 1);
        assert_eq!(r.network, Some(NetworkHdr::Ipv4));
        assert_eq!(r.opcode, WcOpcode::Recv);
        // An RC WRITE with immediate.
        let qw3 = 1u64 << 63 | 1 << 50 | u64::from(hw::cqe::OP_RECV_RDMA_IMM) << 56;
        let ext = [0xabcd, 0, 0, 1u64 << 63 | 1 << 62];
        let c = decode_cqe([64, 1, 7 << 32, qw3], Some(ext));
        let r = recv_info(&c, false, 7);
        assert_eq!(
            (r.opcode, r.imm, r.src_qp),
            (WcOpcode::RecvRdmaWithImm, Some(0xabcd), 7)
        );
        assert_eq!(r.network, None);
        assert_eq!((r.vlan_tci, r.smac), (None, None));
        // A UD receive over VLAN 100 with PCP 3, from 02:00:00:00:10:01, no immediate.
        let qw3 = 1u64 << 63 | 1 << 50 | u64::from(hw::cqe::OP_RECV) << 56;
        let ext = [
            0,
            0,
            (3 << 13 | 100) << 48 | 0x0200_0000_1001,
            1u64 << 63 | 3 << 60,
        ];
        let c = decode_cqe([104, 1, 1 << 32 | 9, qw3], Some(ext));
        let r = recv_info(&c, true, 1);
        assert_eq!(r.imm, None);
        assert_eq!(r.vlan_tci, Some(3 << 13 | 100));
        assert_eq!(r.smac, Some([2, 0, 0, 0, 0x10, 1]));
    }

    #[test]
    fn error_codes_map_to_statuses() {
        assert_eq!(error_status(1, hw::flush::GENERAL), WcStatus::WrFlush);
        assert_eq!(error_status(1, hw::flush::RETRY_EXC), WcStatus::RetryExc);
        assert_eq!(error_status(1, hw::flush::REM_ACCESS), WcStatus::RemAccess);
        assert_eq!(error_status(1, 99), WcStatus::Fatal);
        assert_eq!(error_status(2, hw::flush::PROT), WcStatus::General);
    }
}
