// SPDX-License-Identifier: GPL-2.0

//! Queue sizes exactly as libirdma computes them for a GEN_2 device (irdma-abi §3.2): the
//! kernel must arrive at the same ring sizes, because user space lays out the rings before
//! the kernel sees the QP and then trusts the sizes the kernel reports.

use crate::{caps::Caps, interface as hw};
use kernel::prelude::*;

/// SQ quanta libirdma reserves on top of the requested WRs.
pub(crate) const SQ_RESERVED: u32 = 258;
/// RQ WQEs libirdma reserves on top of the requested WRs.
const RQ_RESERVED: u32 = 1;

/// log2 of the quanta per WQE for `sge` SGEs and `inline` bytes of inline data.
pub(crate) const fn wqe_shift(sge: u32, inline: u32) -> u8 {
    if sge <= 1 && inline <= 8 {
        0
    } else if sge < 4 && inline <= 39 {
        1
    } else if sge < 8 && inline <= 101 {
        2
    } else {
        3
    }
}

/// A ring depth: `(wrs << shift) + reserved` rounded up to a power of two, at least
/// `min_quanta << shift`, at most `max_quanta`.
fn depth(wrs: u32, shift: u8, reserved: u32, min_quanta: u32, max_quanta: u32) -> Result<u32> {
    let want = u64::from(wrs) << shift;
    let want = (want + u64::from(reserved)).next_power_of_two();
    let floor = u64::from(min_quanta) << shift;
    let d = want.max(floor);
    if d > u64::from(max_quanta) {
        return Err(EINVAL);
    }
    u32::try_from(d).map_err(|_| EINVAL)
}

/// The rings of a user QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpRings {
    /// Quanta per SQ WQE, log2.
    pub(crate) sq_shift: u8,
    /// SQ ring size in quanta.
    pub(crate) sq_depth: u32,
    /// Quanta per RQ WQE, log2.
    pub(crate) rq_shift: u8,
    /// RQ ring size in quanta.
    pub(crate) rq_depth: u32,
}

impl QpRings {
    /// The rings libirdma lays out for these capacities (the application's raw values).
    pub(crate) fn for_caps(
        send_wr: u32,
        send_sge: u32,
        inline: u32,
        recv_wr: u32,
        recv_sge: u32,
        caps: &Caps,
    ) -> Result<Self> {
        if send_sge > u32::from(caps.max_sge)
            || recv_sge > u32::from(caps.max_sge)
            || inline > u32::from(caps.max_inline)
        {
            return Err(EINVAL);
        }
        let min = u32::from(caps.min_wq_quanta);
        // One extra SGE slot: immediate data travels in a fragment slot on GEN_2.
        let sq_shift = wqe_shift(send_sge + 1, inline);
        let rq_shift = wqe_shift(recv_sge, 0);
        Ok(Self {
            sq_shift,
            sq_depth: depth(send_wr, sq_shift, SQ_RESERVED, min, caps.max_sq_quanta)?,
            rq_shift,
            rq_depth: depth(recv_wr, rq_shift, RQ_RESERVED, min, caps.max_rq_quanta)?,
        })
    }

    /// `actual_sq_size` of the create_qp response: SQ WQEs of the largest size.
    pub(crate) const fn actual_sq_size(&self) -> u32 {
        self.sq_depth >> self.sq_shift
    }

    /// `actual_rq_size` of the create_qp response: RQ WQEs.
    pub(crate) const fn actual_rq_size(&self) -> u32 {
        self.rq_depth >> self.rq_shift
    }

    /// 4 KiB pages of the SQ ring.
    pub(crate) const fn sq_pages(&self) -> u32 {
        pages(self.sq_depth)
    }

    /// 4 KiB pages of the RQ ring.
    pub(crate) const fn rq_pages(&self) -> u32 {
        pages(self.rq_depth)
    }
}

/// 4 KiB pages holding `quanta` 32-byte quanta (or CQEs); computed in `u64`, so no ring size
/// can overflow it (the result is below 2^28).
pub(crate) const fn pages(quanta: u32) -> u32 {
    ((quanta as u64 * hw::QUANTUM as u64).div_ceil(hw::QUEUE_PAGE_SIZE)) as u32
}

/// The largest power of two at most `x` (0 for 0).
const fn floor_pow2(x: u32) -> u32 {
    if x == 0 {
        0
    } else {
        1 << (31 - x.leading_zeros())
    }
}

/// `max_qp_wr`: the WRs every QP can be given whatever its SGE count and inline size, as
/// libirdma lays the rings out: the largest WQE takes 8 quanta (`wqe_shift` 3), the SQ also
/// holds its reserved quanta and the RQ one WQE, and a ring is a power of two no larger than
/// the device's maximum. With 32768 quanta that is E810's 4063.
pub(crate) fn max_qp_wr(caps: &Caps) -> u32 {
    let sq = floor_pow2(caps.max_sq_quanta).saturating_sub(SQ_RESERVED) >> 3;
    let rq = floor_pow2(caps.max_rq_quanta).saturating_sub(RQ_RESERVED << 3) >> 3;
    sq.min(rq)
}

/// `max_cqe`: the CQEs a consumer may ask for, user or kernel. Both lay a CQ out as libirdma
/// does, `2 * (cqe + 1)` slots (a completion with immediate data takes two), so the device's
/// `max_cq_entries` slots hold half that, less one.
pub(crate) const fn max_cqe(max_cq_entries: u32) -> u32 {
    (max_cq_entries / 2).saturating_sub(1)
}

/// The ucontext's `max_hw_cq_size`: libirdma accepts `cqe <= max_hw_cq_size - 1`, so this is
/// [`max_cqe`] + 1.
pub(crate) const fn max_hw_cq_size(max_cq_entries: u32) -> u32 {
    max_cqe(max_cq_entries) + 1
}

/// `max_mr_size`: what any registration can reach, at most the device's own limit. Memory
/// of 4 KiB pages (the most scattered) takes a page-list entry per page, and two levels of
/// page list hold `MAX_PBL_PAGES` of them: 1 GiB. Larger pages reach further, up to the
/// device's limit, but a consumer cannot count on them.
pub(crate) fn max_mr_size(caps: &Caps) -> u64 {
    caps.max_mr_size
        .min(u64::from(hw::MAX_PBL_PAGES) * hw::QUEUE_PAGE_SIZE)
}

#[kunit_tests(ferrdma_sizing)]
mod tests {
    use super::*;

    fn caps() -> Result<Caps> {
        Caps::validate(&crate::caps::gen2_reply())
            .map(|(c, _)| c)
            .map_err(|e| e.errno())
    }

    fn rings(s: u32, ss: u32, inl: u32, r: u32, rs: u32) -> QpRings {
        match caps().and_then(|c| QpRings::for_caps(s, ss, inl, r, rs, &c)) {
            Ok(q) => q,
            Err(_) => QpRings {
                sq_shift: 9,
                sq_depth: 0,
                rq_shift: 9,
                rq_depth: 0,
            },
        }
    }

    #[test]
    fn shifts_follow_the_gen2_rule() {
        assert_eq!(wqe_shift(1, 8), 0);
        assert_eq!(wqe_shift(1, 9), 1);
        assert_eq!(wqe_shift(3, 39), 1);
        assert_eq!(wqe_shift(4, 0), 2);
        assert_eq!(wqe_shift(7, 101), 2);
        assert_eq!(wqe_shift(8, 0), 3);
        assert_eq!(wqe_shift(2, 102), 3);
    }

    // The worked examples of irdma-abi.md §3.2 (libirdma's own output).
    #[test]
    fn libirdma_worked_examples() {
        let q = rings(128, 1, 0, 512, 1);
        assert_eq!((q.sq_shift, q.sq_depth, q.actual_sq_size()), (1, 1024, 512));
        assert_eq!(
            (q.rq_shift, q.rq_depth, q.actual_rq_size()),
            (0, 1024, 1024)
        );
        let q = rings(128, 1, 101, 512, 1);
        assert_eq!((q.sq_shift, q.sq_depth, q.actual_sq_size()), (2, 1024, 256));
        let q = rings(16, 1, 0, 2, 1);
        assert_eq!((q.sq_shift, q.sq_depth, q.actual_sq_size()), (1, 512, 256));
        assert_eq!((q.rq_shift, q.rq_depth, q.actual_rq_size()), (0, 8, 8));
        let q = rings(4, 3, 0, 16, 2);
        assert_eq!((q.sq_shift, q.sq_depth, q.actual_sq_size()), (2, 512, 128));
        assert_eq!((q.rq_shift, q.rq_depth, q.actual_rq_size()), (1, 64, 32));
        let q = rings(128, 13, 0, 128, 13);
        assert_eq!((q.sq_shift, q.sq_depth, q.actual_sq_size()), (3, 2048, 256));
        assert_eq!((q.rq_shift, q.rq_depth, q.actual_rq_size()), (3, 2048, 256));
        assert_eq!((q.sq_pages(), q.rq_pages()), (16, 16));
    }

    #[test]
    fn limits_are_enforced() -> Result {
        let c = caps()?;
        assert!(QpRings::for_caps(32768, 1, 0, 1, 1, &c).is_err());
        assert!(QpRings::for_caps(1, 14, 0, 1, 1, &c).is_err());
        assert!(QpRings::for_caps(1, 1, 102, 1, 1, &c).is_err());
        assert!(QpRings::for_caps(1, 1, 0, 32768, 1, &c).is_err());
        assert!(QpRings::for_caps(u32::MAX, 1, 0, 1, 1, &c).is_err());
        // The smallest rings: 512 quanta of SQ, 8 RQ WQEs.
        let q = rings(0, 0, 0, 0, 0);
        assert_eq!((q.sq_depth, q.rq_depth), (512, 8));
        assert_eq!(pages(8), 1);
        assert_eq!(pages(129), 2);
        // No u32 overflow, whatever the quanta.
        assert_eq!(pages(u32::MAX), 1 << 25);
        Ok(())
    }

    #[test]
    fn reported_limits_fit_the_rings() -> Result {
        let c = caps()?;
        // E810's figure, and the rings libirdma lays out for it at every SGE count fit.
        let wr = max_qp_wr(&c);
        assert_eq!(wr, 4063);
        for sge in 1..=13 {
            assert!(QpRings::for_caps(wr, sge, 0, wr, sge, &c).is_ok());
        }
        assert!(QpRings::for_caps(wr, 1, 101, wr, 1, &c).is_ok());
        // One more WR does not fit with the most SGEs.
        assert!(QpRings::for_caps(wr + 1, 13, 0, 1, 1, &c).is_err());
        let mut odd = c;
        odd.max_sq_quanta = 20000;
        odd.max_rq_quanta = 3000;
        assert_eq!(max_qp_wr(&odd), (2048 - 1) >> 3);
        odd.max_rq_quanta = 0;
        assert_eq!(max_qp_wr(&odd), 0);

        assert_eq!(max_cqe(hw::MAX_CQ_ENTRIES), 524_287);
        assert_eq!(2 * (max_cqe(hw::MAX_CQ_ENTRIES) + 1), hw::MAX_CQ_ENTRIES);
        assert_eq!(max_hw_cq_size(hw::MAX_CQ_ENTRIES), 524_288);
        assert_eq!(max_cqe(hw::MIN_CQ_ENTRIES), 1);
        assert_eq!(max_cqe(1), 0);
        assert_eq!(
            (floor_pow2(0), floor_pow2(1), floor_pow2(32769)),
            (0, 1, 32768)
        );
        assert_eq!(max_mr_size(&c), 1 << 30);
        Ok(())
    }
}
