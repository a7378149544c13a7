//! The QUERY_CAPS reply: the device's real limits, or (test only, `--hostile-caps`) hostile
//! values that prove the driver validates what the device reports.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use thiserror::Error;

use crate::interface::{
    Caps, DB_PAGES, HW_REV_GEN_2, MAX_AH, MAX_CQ, MAX_CQ_ENTRIES, MAX_EQ, MAX_EQ_ENTRIES,
    MAX_EQ_MODERATION_US, MAX_FAST_REG_PAGES, MAX_GID, MAX_INLINE, MAX_MCAST_GRP,
    MAX_MCAST_QP_ATTACH, MAX_MR, MAX_MR_SIZE, MAX_MSG_SIZE, MAX_PD, MAX_QP, MAX_RD_ATOMIC,
    MAX_RQ_QUANTA, MAX_SGE, MAX_SQ_QUANTA, MIN_WQ_QUANTA, MSIX_VECTORS, PAGE_SIZE_CAP,
    SQ_CHUNK_QUANTA,
};

/// The device's real limits (`interface.rs`, "Limits").
pub fn nominal() -> Caps {
    Caps {
        hw_rev: HW_REV_GEN_2,
        max_sge: MAX_SGE as u8,
        max_read_sge: MAX_SGE as u8,
        sq_chunk_quanta: SQ_CHUNK_QUANTA as u8,
        max_inline: MAX_INLINE as u16,
        min_wq_quanta: MIN_WQ_QUANTA as u16,
        max_qp: MAX_QP,
        max_cq: MAX_CQ,
        max_mr: MAX_MR,
        max_ah: MAX_AH,
        max_pd: MAX_PD,
        max_sq_quanta: MAX_SQ_QUANTA,
        max_rq_quanta: MAX_RQ_QUANTA,
        max_cq_entries: MAX_CQ_ENTRIES,
        max_eq_entries: MAX_EQ_ENTRIES,
        max_eq: MAX_EQ,
        max_gid: MAX_GID,
        db_pages: DB_PAGES,
        max_msg_size: MAX_MSG_SIZE,
        rsvd_align: 0,
        max_mr_size: MAX_MR_SIZE,
        page_size_cap: PAGE_SIZE_CAP,
        max_rd_atomic: MAX_RD_ATOMIC,
        max_pbl_level: 2,
        ports: 1,
        rsvd0: 0,
        msix_vectors: MSIX_VECTORS,
        fw_ver: 2 << 32,
        max_fast_reg_pages: MAX_FAST_REG_PAGES,
        max_eq_moderation_us: MAX_EQ_MODERATION_US,
        max_mcast_grp: MAX_MCAST_GRP as u16,
        max_mcast_qp_attach: MAX_MCAST_QP_ATTACH as u16,
        rsvd: [0; 22],
    }
}

/// A QUERY_CAPS reply profile of `--hostile-caps`. The device itself keeps enforcing its
/// real limits whatever it reports: only the driver's trust is tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapsProfile {
    /// The real limits.
    Nominal,
    /// Every limit at its type's maximum (SGEs, inline bytes, QPs, ring sizes, RD atomics,
    /// GIDs, page sizes...): a driver that trusts them overflows `max_rd_atomic * max_qp`,
    /// lets a kernel consumer post more SGEs than its post paths hold, sizes rings past
    /// `u32`. A careful driver clamps them to its own limits and works normally.
    Oversized,
    /// Values no device can work with (no SGE, no QP besides QP 0, no CQ entries, no 4 KiB
    /// pages): a careful driver refuses the device at probe.
    Impossible,
}

impl CapsProfile {
    /// The reply of this profile.
    pub fn reply(self) -> Caps {
        let mut c = nominal();
        match self {
            CapsProfile::Nominal => {}
            CapsProfile::Oversized => {
                c.max_sge = u8::MAX;
                c.max_read_sge = u8::MAX;
                c.max_inline = u16::MAX;
                c.max_qp = u32::MAX;
                c.max_cq = u32::MAX;
                c.max_mr = u32::MAX;
                c.max_ah = u32::MAX;
                c.max_pd = u32::MAX;
                c.max_sq_quanta = u32::MAX;
                c.max_rq_quanta = u32::MAX;
                c.max_cq_entries = u32::MAX;
                c.max_eq_entries = u32::MAX;
                c.max_eq = u32::MAX;
                c.max_gid = u32::MAX;
                c.db_pages = u32::MAX;
                c.max_msg_size = u32::MAX;
                c.max_mr_size = u64::MAX;
                c.page_size_cap = u64::MAX;
                c.max_rd_atomic = u8::MAX;
                c.max_pbl_level = u8::MAX;
                c.ports = u8::MAX;
                c.msix_vectors = u32::MAX;
                c.max_fast_reg_pages = u32::MAX;
                c.max_eq_moderation_us = u16::MAX;
                c.max_mcast_grp = u16::MAX;
                c.max_mcast_qp_attach = u16::MAX;
            }
            CapsProfile::Impossible => {
                c.max_sge = 0;
                c.max_read_sge = 0;
                c.max_qp = 1;
                c.max_cq_entries = 0;
                c.page_size_cap = 1 << 21;
            }
        }
        c
    }
}

/// A bad `--hostile-caps` value.
#[derive(Debug, Error, PartialEq)]
#[error("unknown caps profile {0:?} (nominal, oversized or impossible)")]
pub struct BadProfile(String);

impl FromStr for CapsProfile {
    type Err = BadProfile;

    fn from_str(s: &str) -> Result<Self, BadProfile> {
        match s {
            "nominal" => Ok(CapsProfile::Nominal),
            "oversized" => Ok(CapsProfile::Oversized),
            "impossible" => Ok(CapsProfile::Impossible),
            _ => Err(BadProfile(s.to_string())),
        }
    }
}

/// The replies of one NIC's QUERY_CAPS commands: the n-th command gets the n-th profile, and
/// every command after the last profile gets the last one. The count survives device and
/// engine resets, so that a guest reloading its driver walks through the profiles.
#[derive(Debug)]
pub struct CapsPlan {
    profiles: Vec<CapsProfile>,
    next: AtomicUsize,
}

impl CapsPlan {
    /// A plan of `profiles` (none: always nominal).
    pub fn new(profiles: Vec<CapsProfile>) -> Self {
        Self {
            profiles,
            next: AtomicUsize::new(0),
        }
    }

    /// Parses `PROFILE[,PROFILE...]`.
    pub fn parse(s: &str) -> Result<Self, BadProfile> {
        let profiles = s
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(profiles))
    }

    /// The reply to the next QUERY_CAPS command.
    pub fn next_reply(&self) -> (CapsProfile, Caps) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let p = self
            .profiles
            .get(n)
            .or(self.profiles.last())
            .copied()
            .unwrap_or(CapsProfile::Nominal);
        (p, p.reply())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_walk_in_order_and_the_last_one_stays() {
        let plan = CapsPlan::parse("oversized,impossible,nominal").unwrap();
        let got: Vec<CapsProfile> = (0..5).map(|_| plan.next_reply().0).collect();
        use CapsProfile::*;
        assert_eq!(got, [Oversized, Impossible, Nominal, Nominal, Nominal]);
        assert_eq!(CapsPlan::new(vec![]).next_reply().1, nominal());
        assert!(CapsPlan::parse("oversized,bogus").is_err());
        assert!(CapsPlan::parse("").is_err());
    }

    #[test]
    fn hostile_replies_differ_from_the_real_limits() {
        let o = CapsProfile::Oversized.reply();
        assert_eq!((o.max_sge, o.max_rd_atomic, o.max_qp), (255, 255, u32::MAX));
        assert!(u32::from(o.max_rd_atomic).checked_mul(o.max_qp).is_none());
        let i = CapsProfile::Impossible.reply();
        assert_eq!((i.max_sge, i.max_qp), (0, 1));
        assert_eq!(CapsProfile::Nominal.reply(), nominal());
    }
}
