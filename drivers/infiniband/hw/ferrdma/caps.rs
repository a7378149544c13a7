// SPDX-License-Identifier: GPL-2.0

//! The device's capabilities (QUERY_CAPS), validated once at probe.
//!
//! The device is not trusted: a QUERY_CAPS reply is a value from the other side of a
//! security boundary. Unchecked, a large `max_sge` lets a kernel ULP post more SGEs than the
//! kernel post paths have room for, `max_rd_atomic * max_qp` overflows, and ring sizes
//! multiply past `u32`. [`Caps::validate`] is the only way to make a [`Caps`], and the rest
//! of the driver sees nothing else: a value above what the driver supports is clamped to
//! the driver's own limit (`interface.rs`, "Limits"), which is always safe because a lower
//! limit only offers the consumers less; a value that makes the device unusable or that
//! contradicts the GEN_2 queue layout refuses probe.

use crate::interface as hw;
use kernel::prelude::*;

/// The smallest SQ ring any QP needs: the SQ WQEs libirdma reserves, rounded up to a power
/// of two (`sizing::QpRings`).
const MIN_SQ_RING: u32 = crate::sizing::SQ_RESERVED.next_power_of_two();

/// Fewest QPs the driver can work with: QP 0 is reserved and QP 1 is the GSI QP.
const MIN_QPS: u32 = 2;

/// A QUERY_CAPS reply that probe must refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The QUERY_CAPS field.
    pub(crate) field: &'static str,
    /// What the device reported.
    pub(crate) value: u64,
    /// Why the value is impossible.
    pub(crate) why: &'static str,
}

impl Refusal {
    /// The probe error: `ENODEV` for a device of another generation, else `EINVAL`.
    pub(crate) fn errno(&self) -> Error {
        if self.field == "hw_rev" {
            ENODEV
        } else {
            EINVAL
        }
    }
}

/// A value the device reported above the driver's limit, and the limit used instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clamp {
    /// The QUERY_CAPS field.
    pub(crate) field: &'static str,
    /// What the device reported.
    pub(crate) reported: u64,
    /// What the driver uses.
    pub(crate) used: u64,
}

/// Most clamps one reply can cause (one per clamped field).
const MAX_CLAMPS: usize = 24;

/// The clamps [`Caps::validate`] applied, for probe to report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clamps {
    list: [Clamp; MAX_CLAMPS],
    len: usize,
}

impl Clamps {
    const fn new() -> Self {
        Self {
            list: [Clamp {
                field: "",
                reported: 0,
                used: 0,
            }; MAX_CLAMPS],
            len: 0,
        }
    }

    /// `value` limited to `max`, recording a clamp of `field` when it was above.
    fn limit<T: Copy + PartialOrd + Into<u64>>(
        &mut self,
        field: &'static str,
        value: T,
        max: T,
    ) -> T {
        if value <= max {
            return value;
        }
        if let Some(slot) = self.list.get_mut(self.len) {
            *slot = Clamp {
                field,
                reported: value.into(),
                used: max.into(),
            };
            self.len += 1;
        }
        max
    }

    /// The clamps applied, in field order.
    pub(crate) fn as_slice(&self) -> &[Clamp] {
        self.list.get(..self.len).unwrap_or(&[])
    }
}

/// The device's capabilities as the driver uses them.
///
/// # Invariants
///
/// Only [`Caps::validate`] creates a `Caps` (the private field), and every value is within
/// the driver's limits of `interface.rs`:
/// - `hw_rev` is [`hw::HW_REV_GEN_2`] and `sq_chunk_quanta` is [`hw::SQ_CHUNK_QUANTA`];
/// - `1 <= max_sge <= MAX_SGE`, `1 <= max_read_sge <= max_sge`, `max_inline <= MAX_INLINE`;
/// - `2 <= max_qp <= MAX_QP`; `max_cq`, `max_mr`, `max_ah`, `max_pd`, `max_gid` are at least
///   1 and at most `MAX_CQ`, `MAX_MR`, `MAX_AH`, `MAX_PD`, `MAX_GID`;
/// - `min_wq_quanta` is a power of two, `MIN_WQ_QUANTA <= min_wq_quanta <= max_rq_quanta`;
///   `512 <= max_sq_quanta <= MAX_SQ_QUANTA`, `max_rq_quanta <= MAX_RQ_QUANTA`;
/// - `MIN_CQ_ENTRIES <= max_cq_entries <= MAX_CQ_ENTRIES`;
/// - `1 <= max_msg_size <= MAX_MSG_SIZE`, `1 <= max_mr_size <= MAX_MR_SIZE`;
/// - `page_size_cap` is a subset of `PAGE_SIZE_CAP` holding 4 KiB;
/// - `max_rd_atomic <= MAX_RD_ATOMIC`, `max_fast_reg_pages <= MAX_FAST_REG_PAGES`,
///   `max_eq_moderation_us <= MAX_EQ_MODERATION_US`;
/// - `max_mcast_grp <= MAX_MCAST_GRP`, `max_mcast_qp_attach <= MAX_MCAST_QP_ATTACH` (0: the
///   device has no multicast, as before interface 1.6);
/// - `2 <= db_pages <= DB_PAGES` (the kernel's page 0 and at least one user context).
///
/// So every product the driver forms from them (`max_rd_atomic * max_qp`, ring quanta times
/// the quantum size) fits in `u32`, and no consumer is offered more SGEs or inline bytes than
/// the kernel post paths hold. The fields QUERY_CAPS also carries but the driver does not use
/// (`max_eq_entries`, `max_eq`, `max_pbl_level`, `ports`, `msix_vectors`) are not
/// kept: the driver works from its own constants and the MSI-X count register for those.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    pub(crate) hw_rev: u8,
    pub(crate) max_sge: u8,
    pub(crate) max_read_sge: u8,
    pub(crate) sq_chunk_quanta: u8,
    pub(crate) max_inline: u16,
    pub(crate) min_wq_quanta: u16,
    pub(crate) max_qp: u32,
    pub(crate) max_cq: u32,
    pub(crate) max_mr: u32,
    pub(crate) max_ah: u32,
    pub(crate) max_pd: u32,
    pub(crate) max_sq_quanta: u32,
    pub(crate) max_rq_quanta: u32,
    pub(crate) max_cq_entries: u32,
    pub(crate) max_gid: u32,
    pub(crate) max_msg_size: u32,
    pub(crate) max_mr_size: u64,
    pub(crate) page_size_cap: u64,
    pub(crate) max_rd_atomic: u8,
    pub(crate) fw_ver: u64,
    pub(crate) max_fast_reg_pages: u32,
    pub(crate) max_eq_moderation_us: u16,
    pub(crate) max_mcast_grp: u16,
    pub(crate) max_mcast_qp_attach: u16,
    /// Doorbell pages of the doorbell BAR (page 0 is the kernel's).
    pub(crate) db_pages: u32,
    /// Only [`Caps::validate`] can fill this in.
    _validated: (),
}

/// `Err` of `field` = `value` for reason `why` unless `ok`.
fn require(
    ok: bool,
    field: &'static str,
    value: impl Into<u64>,
    why: &'static str,
) -> Result<(), Refusal> {
    if ok {
        Ok(())
    } else {
        Err(Refusal {
            field,
            value: value.into(),
            why,
        })
    }
}

impl Caps {
    /// Checks a QUERY_CAPS reply: refuses an impossible value, clamps one above the driver's
    /// limit (see the type's invariants); on success returns the capabilities and the clamps
    /// applied.
    pub(crate) fn validate(raw: &hw::Caps) -> Result<(Self, Clamps), Refusal> {
        let mut c = Clamps::new();
        let r = raw;
        require(
            r.hw_rev == hw::HW_REV_GEN_2,
            "hw_rev",
            r.hw_rev,
            "not a GEN_2 data path",
        )?;
        require(
            u32::from(r.sq_chunk_quanta) == hw::SQ_CHUNK_QUANTA,
            "sq_chunk_quanta",
            r.sq_chunk_quanta,
            "GEN_2 WQEs never straddle an 8-quantum chunk",
        )?;
        require(
            r.max_sge > 0,
            "max_sge",
            r.max_sge,
            "no WQE could carry data",
        )?;
        require(
            r.max_read_sge > 0,
            "max_read_sge",
            r.max_read_sge,
            "no READ could land",
        )?;
        let max_sge = c.limit("max_sge", r.max_sge, hw::MAX_SGE as u8);
        let max_read_sge = c.limit("max_read_sge", r.max_read_sge, max_sge);
        let max_inline = c.limit("max_inline", r.max_inline, hw::MAX_INLINE as u16);

        require(
            r.max_qp >= MIN_QPS,
            "max_qp",
            r.max_qp,
            "fewer than QP 0 and the GSI QP",
        )?;
        for (field, v) in [
            ("max_cq", r.max_cq),
            ("max_mr", r.max_mr),
            ("max_ah", r.max_ah),
            ("max_pd", r.max_pd),
            ("max_gid", r.max_gid),
            ("max_msg_size", r.max_msg_size),
        ] {
            require(v > 0, field, v, "zero")?;
        }
        require(r.max_mr_size > 0, "max_mr_size", r.max_mr_size, "zero")?;
        let max_qp = c.limit("max_qp", r.max_qp, hw::MAX_QP);
        let max_cq = c.limit("max_cq", r.max_cq, hw::MAX_CQ);
        let max_mr = c.limit("max_mr", r.max_mr, hw::MAX_MR);
        let max_ah = c.limit("max_ah", r.max_ah, hw::MAX_AH);
        let max_pd = c.limit("max_pd", r.max_pd, hw::MAX_PD);
        let max_gid = c.limit("max_gid", r.max_gid, hw::MAX_GID);
        let max_msg_size = c.limit("max_msg_size", r.max_msg_size, hw::MAX_MSG_SIZE);
        let max_mr_size = c.limit("max_mr_size", r.max_mr_size, hw::MAX_MR_SIZE);

        let max_sq_quanta = c.limit("max_sq_quanta", r.max_sq_quanta, hw::MAX_SQ_QUANTA);
        let max_rq_quanta = c.limit("max_rq_quanta", r.max_rq_quanta, hw::MAX_RQ_QUANTA);
        require(
            max_sq_quanta >= MIN_SQ_RING,
            "max_sq_quanta",
            r.max_sq_quanta,
            "smaller than the smallest SQ (512 quanta)",
        )?;
        let min = u32::from(r.min_wq_quanta);
        require(
            min.is_power_of_two() && min >= hw::MIN_WQ_QUANTA && min <= max_rq_quanta,
            "min_wq_quanta",
            r.min_wq_quanta,
            "not a power of two between 8 and max_rq_quanta",
        )?;
        require(
            r.max_cq_entries >= hw::MIN_CQ_ENTRIES,
            "max_cq_entries",
            r.max_cq_entries,
            "smaller than the smallest CQ",
        )?;
        let max_cq_entries = c.limit("max_cq_entries", r.max_cq_entries, hw::MAX_CQ_ENTRIES);
        require(
            r.db_pages >= 2,
            "db_pages",
            r.db_pages,
            "no doorbell page for a user context",
        )?;
        let db_pages = c.limit("db_pages", r.db_pages, hw::DB_PAGES);

        let page_size_cap = r.page_size_cap & hw::PAGE_SIZE_CAP;
        require(
            page_size_cap & hw::QUEUE_PAGE_SIZE != 0,
            "page_size_cap",
            r.page_size_cap,
            "no 4 KiB pages",
        )?;
        if page_size_cap != r.page_size_cap {
            c.limit("page_size_cap", r.page_size_cap, page_size_cap);
        }
        let max_rd_atomic = c.limit("max_rd_atomic", r.max_rd_atomic, hw::MAX_RD_ATOMIC);
        let max_fast_reg_pages = c.limit(
            "max_fast_reg_pages",
            r.max_fast_reg_pages,
            hw::MAX_FAST_REG_PAGES,
        );
        let max_eq_moderation_us = c.limit(
            "max_eq_moderation_us",
            r.max_eq_moderation_us,
            hw::MAX_EQ_MODERATION_US,
        );
        let max_mcast_grp = c.limit("max_mcast_grp", r.max_mcast_grp, hw::MAX_MCAST_GRP as u16);
        let max_mcast_qp_attach = c.limit(
            "max_mcast_qp_attach",
            r.max_mcast_qp_attach,
            hw::MAX_MCAST_QP_ATTACH as u16,
        );
        // INVARIANT: every field checked or clamped above.
        let caps = Self {
            hw_rev: r.hw_rev,
            max_sge,
            max_read_sge,
            sq_chunk_quanta: r.sq_chunk_quanta,
            max_inline,
            min_wq_quanta: r.min_wq_quanta,
            max_qp,
            max_cq,
            max_mr,
            max_ah,
            max_pd,
            max_sq_quanta,
            max_rq_quanta,
            max_cq_entries,
            max_gid,
            max_msg_size,
            max_mr_size,
            page_size_cap,
            max_rd_atomic,
            fw_ver: r.fw_ver,
            max_fast_reg_pages,
            max_eq_moderation_us,
            max_mcast_grp,
            max_mcast_qp_attach,
            db_pages,
            _validated: (),
        };
        Ok((caps, c))
    }
}

/// The QUERY_CAPS reply of a GEN_2 device at the limits of `interface.rs` (what ferrdma-nic
/// reports), for tests of the code that uses [`Caps`].
#[cfg(CONFIG_KUNIT)]
pub(crate) fn gen2_reply() -> hw::Caps {
    let mut r = hw::Caps::decode(&[0; hw::Caps::SIZE]);
    r.hw_rev = hw::HW_REV_GEN_2;
    r.max_sge = hw::MAX_SGE as u8;
    r.max_read_sge = hw::MAX_SGE as u8;
    r.sq_chunk_quanta = hw::SQ_CHUNK_QUANTA as u8;
    r.max_inline = hw::MAX_INLINE as u16;
    r.min_wq_quanta = hw::MIN_WQ_QUANTA as u16;
    r.max_qp = hw::MAX_QP;
    r.max_cq = hw::MAX_CQ;
    r.max_mr = hw::MAX_MR;
    r.max_ah = hw::MAX_AH;
    r.max_pd = hw::MAX_PD;
    r.max_sq_quanta = hw::MAX_SQ_QUANTA;
    r.max_rq_quanta = hw::MAX_RQ_QUANTA;
    r.max_cq_entries = hw::MAX_CQ_ENTRIES;
    r.max_eq_entries = hw::MAX_EQ_ENTRIES;
    r.max_eq = hw::MAX_EQ;
    r.max_gid = hw::MAX_GID;
    r.db_pages = hw::DB_PAGES;
    r.max_msg_size = hw::MAX_MSG_SIZE;
    r.max_mr_size = hw::MAX_MR_SIZE;
    r.page_size_cap = hw::PAGE_SIZE_CAP;
    r.max_rd_atomic = hw::MAX_RD_ATOMIC;
    r.max_pbl_level = 2;
    r.ports = 1;
    r.msix_vectors = hw::MSIX_VECTORS;
    r.fw_ver = 2 << 32;
    r.max_fast_reg_pages = hw::MAX_FAST_REG_PAGES;
    r.max_eq_moderation_us = hw::MAX_EQ_MODERATION_US;
    r.max_mcast_grp = hw::MAX_MCAST_GRP as u16;
    r.max_mcast_qp_attach = hw::MAX_MCAST_QP_ATTACH as u16;
    r
}

#[kunit_tests(ferrdma_caps)]
mod tests {
    use super::*;

    fn field_of(r: Result<(Caps, Clamps), Refusal>) -> &'static str {
        match r {
            Ok(_) => "accepted",
            Err(e) => e.field,
        }
    }

    #[test]
    fn the_nominal_reply_is_taken_as_is() -> Result {
        let (c, clamps) = Caps::validate(&gen2_reply()).map_err(|e| e.errno())?;
        assert!(clamps.as_slice().is_empty());
        assert_eq!((c.max_sge, c.max_qp, c.max_rd_atomic), (13, hw::MAX_QP, 16));
        assert_eq!(c.db_pages, hw::DB_PAGES);
        assert_eq!(c.page_size_cap, hw::PAGE_SIZE_CAP);
        Ok(())
    }

    // Issue 14, defect 7: the hostile values the driver once trusted are clamped, and every
    // product the driver forms from them fits.
    #[test]
    fn values_above_the_driver_limits_are_clamped() -> Result {
        let mut r = gen2_reply();
        r.max_sge = 255;
        r.max_read_sge = 200;
        r.max_inline = u16::MAX;
        r.max_qp = u32::MAX;
        r.max_cq = u32::MAX;
        r.max_mr = u32::MAX;
        r.max_ah = u32::MAX;
        r.max_pd = u32::MAX;
        r.max_sq_quanta = u32::MAX;
        r.max_rq_quanta = u32::MAX;
        r.max_cq_entries = u32::MAX;
        r.max_gid = u32::MAX;
        r.max_msg_size = u32::MAX;
        r.max_mr_size = u64::MAX;
        r.page_size_cap = u64::MAX;
        r.max_rd_atomic = u8::MAX;
        r.max_fast_reg_pages = u32::MAX;
        r.max_eq_moderation_us = u16::MAX;
        r.max_mcast_grp = u16::MAX;
        r.max_mcast_qp_attach = u16::MAX;
        r.db_pages = u32::MAX;
        let (c, clamps) = Caps::validate(&r).map_err(|e| e.errno())?;
        assert_eq!((c.max_sge, c.max_read_sge, c.max_inline), (13, 13, 101));
        assert_eq!(
            (c.max_qp, c.max_cq, c.max_mr, c.max_ah),
            (16385, 16385, 65537, 1024)
        );
        assert_eq!(c.db_pages, 4096);
        assert_eq!((c.max_pd, c.max_gid), (hw::MAX_PD, 32));
        assert_eq!((c.max_sq_quanta, c.max_rq_quanta), (32768, 32768));
        assert_eq!(c.max_cq_entries, hw::MAX_CQ_ENTRIES);
        assert_eq!(
            (c.max_msg_size, c.max_mr_size),
            (hw::MAX_MSG_SIZE, hw::MAX_MR_SIZE)
        );
        assert_eq!(c.page_size_cap, hw::PAGE_SIZE_CAP);
        assert_eq!(c.max_rd_atomic, 16);
        assert_eq!(
            (c.max_fast_reg_pages, c.max_eq_moderation_us),
            (262_144, 8160)
        );
        assert_eq!((c.max_mcast_grp, c.max_mcast_qp_attach), (256, 16));
        assert_eq!(clamps.as_slice().len(), 21);
        assert_eq!(
            clamps.as_slice()[0],
            Clamp {
                field: "max_sge",
                reported: 255,
                used: 13
            }
        );
        // The products of the driver: max_res_rd_atom and ring bytes.
        assert!(u32::from(c.max_rd_atomic).checked_mul(c.max_qp).is_some());
        assert!(c.max_sq_quanta.checked_mul(hw::QUANTUM as u32).is_some());
        assert!(c.max_cq_entries.checked_mul(hw::QUANTUM as u32).is_some());
        Ok(())
    }

    #[test]
    fn read_sges_never_exceed_sges() {
        let mut r = gen2_reply();
        r.max_sge = 4;
        let c = Caps::validate(&r).map(|(c, _)| (c.max_sge, c.max_read_sge));
        assert_eq!(c.ok(), Some((4, 4)));
    }

    #[test]
    fn impossible_values_are_refused() {
        let cases: [(&str, fn(&mut hw::Caps)); 18] = [
            ("hw_rev", |r| r.hw_rev = 1),
            ("sq_chunk_quanta", |r| r.sq_chunk_quanta = 0),
            ("max_sge", |r| r.max_sge = 0),
            ("max_read_sge", |r| r.max_read_sge = 0),
            ("max_qp", |r| r.max_qp = 1),
            ("max_cq", |r| r.max_cq = 0),
            ("max_mr", |r| r.max_mr = 0),
            ("max_ah", |r| r.max_ah = 0),
            ("max_pd", |r| r.max_pd = 0),
            ("max_gid", |r| r.max_gid = 0),
            ("max_msg_size", |r| r.max_msg_size = 0),
            ("max_mr_size", |r| r.max_mr_size = 0),
            ("max_sq_quanta", |r| r.max_sq_quanta = 256),
            ("min_wq_quanta", |r| r.min_wq_quanta = 12),
            ("min_wq_quanta", |r| r.min_wq_quanta = 0),
            ("max_cq_entries", |r| r.max_cq_entries = 3),
            ("page_size_cap", |r| r.page_size_cap = 1 << 21),
            ("db_pages", |r| r.db_pages = 1),
        ];
        for (field, spoil) in cases {
            let mut r = gen2_reply();
            spoil(&mut r);
            assert_eq!(field_of(Caps::validate(&r)), field);
        }
        let mut r = gen2_reply();
        r.hw_rev = 3;
        assert_eq!(Caps::validate(&r).err().map(|e| e.errno()), Some(ENODEV));
        let mut r = gen2_reply();
        r.max_qp = 0;
        assert_eq!(Caps::validate(&r).err().map(|e| e.errno()), Some(EINVAL));
        // A min_wq_quanta above a (clamped) max_rq_quanta.
        let mut r = gen2_reply();
        r.max_rq_quanta = 4;
        assert_eq!(field_of(Caps::validate(&r)), "min_wq_quanta");
    }
}
