//! The object counts a NIC is provisioned with (`--resources`), as an E810's RDMA function
//! is given one of several resource profiles (irdma's `limits_sel`): the device reports them
//! in QUERY_CAPS and refuses ids beyond them, so a driver and its users meet the same limits
//! at every size. The manual's "Limits" are the nominal profile; the small one is the 1.6
//! interface's limits, small enough for a test to reach every one of them in seconds.

use std::str::FromStr;

use thiserror::Error;

use crate::interface::{Caps, MAX_AH, MAX_CQ, MAX_MR, MAX_PD, MAX_QP};

/// Table sizes of the objects a guest allocates ids for; each is an exclusive bound on ids,
/// like the manual's `MAX_*` constants, and never above them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// QP ids are 0..max_qp (0 reserved, 1 the GSI QP).
    pub max_qp: u32,
    /// CQ ids are 0..max_cq.
    pub max_cq: u32,
    /// MR table indexes are 0..max_mr (0 is the local DMA STag's).
    pub max_mr: u32,
    /// AH ids are 0..max_ah.
    pub max_ah: u32,
    /// PD ids are 0..max_pd.
    pub max_pd: u32,
}

impl Resources {
    /// The manual's limits.
    pub const NOMINAL: Self = Self {
        max_qp: MAX_QP,
        max_cq: MAX_CQ,
        max_mr: MAX_MR,
        max_ah: MAX_AH,
        max_pd: MAX_PD,
    };

    /// The limits of interface 1.6: 1024 QPs besides QP 0, 1024 CQs, 4096 MRs, 256 AHs and
    /// 4096 PDs.
    pub const SMALL: Self = Self {
        max_qp: 1024 + 1,
        max_cq: 1024 + 1,
        max_mr: 4096 + 1,
        max_ah: 256,
        max_pd: 4096,
    };

    /// Puts these counts into a QUERY_CAPS reply.
    pub fn report(self, caps: &mut Caps) {
        caps.max_qp = self.max_qp;
        caps.max_cq = self.max_cq;
        caps.max_mr = self.max_mr;
        caps.max_ah = self.max_ah;
        caps.max_pd = self.max_pd;
    }
}

impl Default for Resources {
    fn default() -> Self {
        Self::NOMINAL
    }
}

/// A bad `--resources` value.
#[derive(Debug, Error, PartialEq)]
#[error("unknown resource profile {0:?} (nominal or small)")]
pub struct BadResources(String);

impl FromStr for Resources {
    type Err = BadResources;

    fn from_str(s: &str) -> Result<Self, BadResources> {
        match s {
            "nominal" => Ok(Self::NOMINAL),
            "small" => Ok(Self::SMALL),
            _ => Err(BadResources(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_stay_within_the_manual() {
        assert_eq!("nominal".parse(), Ok(Resources::NOMINAL));
        assert_eq!("small".parse(), Ok(Resources::SMALL));
        assert!("huge".parse::<Resources>().is_err());
        for r in [Resources::NOMINAL, Resources::SMALL] {
            assert!(r.max_qp <= MAX_QP && r.max_cq <= MAX_CQ && r.max_mr <= MAX_MR);
            assert!(r.max_ah <= MAX_AH && r.max_pd <= MAX_PD);
            // QP 0 reserved and the GSI QP at 1: a profile leaves room for other QPs.
            assert!(r.max_qp > 2 && r.max_cq > 1 && r.max_mr > 1 && r.max_ah > 0);
        }
    }

    #[test]
    fn the_reply_carries_the_profile() {
        let mut caps = super::super::caps::nominal();
        Resources::SMALL.report(&mut caps);
        assert_eq!(
            (
                caps.max_qp,
                caps.max_cq,
                caps.max_mr,
                caps.max_ah,
                caps.max_pd
            ),
            (1025, 1025, 4097, 256, 4096)
        );
    }
}
