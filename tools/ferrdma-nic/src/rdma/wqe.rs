//! Decoding irdma GEN_2 SQ and RQ WQEs. Pure functions of the WQE bytes, so they can be
//! fuzzed on their own; every field is validated and every failure is a [`WqeError`].

use crate::interface::{bits, sq_op, wqe, MAX_INLINE, MAX_MSG_SIZE, MAX_SGE, QUANTUM};

/// One scatter/gather element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub stag: u32,
}

/// Why a WQE is malformed (completes with LOC_QP_OP, or LOC_LEN for [`WqeError::TooLong`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    #[error("push WQEs are not supported")]
    Push,
    #[error("inline length {0} exceeds the maximum")]
    InlineLen(u32),
    #[error("ADDFRAGCNT {0} does not fit the WQE")]
    FragCount(u32),
    #[error("more than {MAX_SGE} non-empty fragments")]
    TooManySges,
    #[error("message of {0} bytes exceeds the maximum")]
    TooLong(u64),
}

/// A decoded SQ WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqWqe {
    pub opcode: u8,
    pub signaled: bool,
    /// Immediate data (host-order integer from qw0 bits 31:0).
    pub imm: Option<u32>,
    /// Inline payload; `None` if the WQE uses SGEs.
    pub inline: Option<Vec<u8>>,
    /// Non-empty fragments, in order.
    pub sges: Vec<Sge>,
    /// Header bits 31:0: rkey, invalidate STag, or AH id (UD).
    pub hdr_low: u32,
    /// qw0: the iova of FAST_REG.
    pub qw0: u64,
    /// qw1: target STag of LOCAL_INV (bits 31:0); page list address of FAST_REG.
    pub qw1: u64,
    /// qw2: remote address, or Q_Key (31:0) and destination QPN (55:32) for UD.
    pub qw2: u64,
    /// Message length: inline length or sum of fragment lengths.
    pub len: u64,
}

fn qword(b: &[u8], at: usize) -> u64 {
    let mut q = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        q.copy_from_slice(s);
    }
    u64::from_le_bytes(q)
}

/// The header qword of a WQE (qw3 of quantum 0).
pub fn header(q0: &[u8]) -> u64 {
    qword(q0, 24)
}

/// Whether a header's valid bit equals `polarity`.
pub fn is_valid(hdr: u64, polarity: bool) -> bool {
    (hdr >> wqe::VALID & 1 == 1) == polarity
}

/// Quanta an SQ WQE occupies (the shared definition in `interface.rs`).
pub fn sq_quanta(hdr: u64) -> u32 {
    crate::interface::sq_wqe_quanta(hdr)
}

/// Fragment slot `k` of a WQE: byte 0 for slot 0, `16 + 16k` after.
fn slot(b: &[u8], k: u32) -> Option<Sge> {
    let at = if k == 0 { 0 } else { 16 + 16 * k as usize };
    if at + 16 > b.len() {
        return None;
    }
    let q1 = qword(b, at + 8);
    Some(Sge {
        addr: qword(b, at),
        len: bits(q1, wqe::FRAG_LEN_HI, wqe::FRAG_LEN_LO) as u32,
        stag: q1 as u32,
    })
}

/// Non-empty fragments in slots `first..=last`.
fn sges(b: &[u8], first: u32, last: u32) -> Result<Vec<Sge>, WqeError> {
    let mut out = Vec::new();
    for k in first..=last {
        let s = slot(b, k).ok_or(WqeError::FragCount(last))?;
        if s.len == 0 {
            continue;
        }
        if out.len() as u32 >= MAX_SGE {
            return Err(WqeError::TooManySges);
        }
        out.push(s);
    }
    Ok(out)
}

/// Decodes an SQ WQE from its quanta (`b.len()` = [`sq_quanta`] × 32).
pub fn parse_sq(b: &[u8]) -> Result<SqWqe, WqeError> {
    let hdr = header(b);
    if hdr >> wqe::PUSHWQE & 1 == 1 {
        return Err(WqeError::Push);
    }
    let opcode = bits(hdr, wqe::OPCODE_HI, wqe::OPCODE_LO) as u8;
    let immflag = hdr >> wqe::IMMDATA & 1 == 1;
    let mut w = SqWqe {
        opcode,
        signaled: hdr >> wqe::SIGCOMPL & 1 == 1,
        imm: immflag.then_some(qword(b, 0) as u32),
        inline: None,
        sges: Vec::new(),
        hdr_low: hdr as u32,
        qw0: qword(b, 0),
        qw1: qword(b, 8),
        qw2: qword(b, 16),
        len: 0,
    };
    match opcode {
        sq_op::NOP | sq_op::LOCAL_INV | sq_op::BIND_MW | sq_op::FAST_REG => {
            w.imm = None;
            return Ok(w);
        }
        _ => {}
    }
    if hdr >> wqe::INLINE & 1 == 1 {
        let len = bits(hdr, wqe::INLINELEN_HI, wqe::INLINELEN_LO) as u32;
        if len > MAX_INLINE {
            return Err(WqeError::InlineLen(len));
        }
        let mut data = Vec::with_capacity(len as usize);
        for i in 0..len as usize {
            let at = if i < 8 {
                8 + i
            } else {
                QUANTUM * (1 + (i - 8) / 31) + (i - 8) % 31
            };
            data.push(b.get(at).copied().unwrap_or(0));
        }
        w.len = u64::from(len);
        w.inline = Some(data);
        return Ok(w);
    }
    let add = bits(hdr, wqe::ADDFRAGCNT_HI, wqe::ADDFRAGCNT_LO) as u32;
    if 1 + add.div_ceil(2) > 8 {
        return Err(WqeError::FragCount(add));
    }
    let first = u32::from(immflag && opcode != sq_op::RDMA_READ);
    if opcode == sq_op::RDMA_READ {
        w.imm = None;
    }
    w.sges = if first > add {
        Vec::new()
    } else {
        sges(b, first, add)?
    };
    w.len = w.sges.iter().map(|s| u64::from(s.len)).sum();
    if w.len > u64::from(MAX_MSG_SIZE) {
        return Err(WqeError::TooLong(w.len));
    }
    Ok(w)
}

/// Decodes the fragments of an RQ WQE of `b.len()` bytes (32 << rq_shift).
pub fn parse_rq(b: &[u8]) -> Result<Vec<Sge>, WqeError> {
    let hdr = header(b);
    let add = bits(hdr, wqe::ADDFRAGCNT_HI, wqe::ADDFRAGCNT_LO) as u32;
    sges(b, 0, add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(words: &[[u64; 4]]) -> Vec<u8> {
        words
            .iter()
            .flat_map(|w| w.iter().flat_map(|x| x.to_le_bytes()))
            .collect()
    }

    // Test vectors from irdma-abi.md Appendix A.
    #[test]
    fn appendix_a_send_one_sge() {
        let b = q(&[[
            0x1111000010000000,
            0x8000010000aaaa01,
            0,
            0xc000000300000000,
        ]]);
        assert_eq!(sq_quanta(header(&b)), 1);
        let w = parse_sq(&b).unwrap();
        assert_eq!(w.opcode, sq_op::SEND);
        assert!(w.signaled);
        assert_eq!(
            w.sges,
            vec![Sge {
                addr: 0x1111000010000000,
                len: 0x100,
                stag: 0xaaaa01
            }]
        );
    }

    #[test]
    fn appendix_a_send_sol_imm_two_sges() {
        let b = q(&[
            [0x12345678, 0, 0, 0xc000808500000000],
            [
                0x1111000010000000,
                0x8000010000aaaa01,
                0x2222000020000000,
                0x8000020000bbbb02,
            ],
        ]);
        assert_eq!(sq_quanta(header(&b)), 2);
        let w = parse_sq(&b).unwrap();
        assert_eq!(w.opcode, sq_op::SEND_SOL);
        assert_eq!(w.imm, Some(0x12345678));
        assert_eq!(w.sges.len(), 2);
        assert_eq!(w.len, 0x300);
    }

    #[test]
    fn appendix_a_write_four_sges_and_read() {
        let b = q(&[
            [
                0x1111000010000000,
                0x8000010000aaaa01,
                0x7777000070000000,
                0xc000010099887766,
            ],
            [
                0x2222000020000000,
                0x8000020000bbbb02,
                0x3333000030000000,
                0x8000030000cccc03,
            ],
            [
                0x4444000040000000,
                0x8000040000dddd04,
                0,
                0x8000000000000000,
            ],
        ]);
        assert_eq!(sq_quanta(header(&b)), 3);
        let w = parse_sq(&b).unwrap();
        assert_eq!(
            (w.opcode, w.hdr_low, w.qw2),
            (0, 0x99887766, 0x7777000070000000)
        );
        assert_eq!(w.len, 0x100 + 0x200 + 0x300 + 0x400);
        let r = q(&[
            [
                0x1111000010000000,
                0x8000010000aaaa01,
                0x8888000080000000,
                0xc000008155443322,
            ],
            [
                0x2222000020000000,
                0x8000020000bbbb02,
                0,
                0x8000000000000000,
            ],
        ]);
        let w = parse_sq(&r).unwrap();
        assert_eq!((w.opcode, w.hdr_low, w.sges.len()), (1, 0x55443322, 2));
    }

    #[test]
    fn appendix_a_inline_send_50_bytes() {
        let b = q(&[
            [0, 0xa7a6a5a4a3a2a1a0, 0, 0xc232000300000000],
            [
                0xafaeadacabaaa9a8,
                0xb7b6b5b4b3b2b1b0,
                0xbfbebdbcbbbab9b8,
                0x80a6a5a4a3a2a1a0,
            ],
            [
                0xaeadacabaaa9a8a7,
                0x0000000000b1b0af,
                0,
                0x8000000000000000,
            ],
        ]);
        assert_eq!(sq_quanta(header(&b)), 3);
        let w = parse_sq(&b).unwrap();
        let want: Vec<u8> = (0..50u32).map(|i| 0xa0 + (i % 32) as u8).collect();
        assert_eq!(w.inline.as_deref(), Some(&want[..]));
    }

    #[test]
    fn appendix_a_rq_wqes() {
        let b = q(&[
            [
                0x1111000010000000,
                0x8000010000aaaa01,
                0,
                0x8000008000000000,
            ],
            [
                0x2222000020000000,
                0x8000020000bbbb02,
                0,
                0x8000000000000000,
            ],
        ]);
        assert_eq!(parse_rq(&b).unwrap().len(), 2);
    }

    #[test]
    fn malformed() {
        let push = q(&[[0, 0, 0, 0x8100000300000000]]);
        assert_eq!(parse_sq(&push), Err(WqeError::Push));
        let inl = q(&[[0, 0, 0, 0x8266000300000000]]);
        assert_eq!(parse_sq(&inl), Err(WqeError::InlineLen(0x66)));
        let frag = 0x8000000300000000u64 | (15 << 38);
        assert_eq!(sq_quanta(frag), 9);
        assert_eq!(
            parse_sq(&q(&[[0, 0, 0, frag]])),
            Err(WqeError::FragCount(15))
        );
        // Short buffer: the slots are missing.
        let two = 0x8000000300000000u64 | (2 << 38);
        assert_eq!(parse_sq(&q(&[[0, 0, 0, two]])), Err(WqeError::FragCount(2)));
    }
}
