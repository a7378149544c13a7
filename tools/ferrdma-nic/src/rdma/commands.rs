//! Admin command handlers. Each validates every field before changing anything, so a failed
//! command has no effect; `detail` names the offending field by its byte offset.

use std::mem::offset_of;

use crate::interface::{
    admin_op, admin_status as st, ae, eqe_kind, gid_is_multicast, mtu_bytes, qp_attr, qp_state,
    stag_index, AdminHeader, AllocMr, CreateAh, CreateCq, CreateEq, CreateQp, GidCmd, McastCmd,
    ModifyCq, ModifyQp, PageList, QpAttrs, QpQueryOut, QueryObject, RegMr, SetCc, SetPort, Stats,
    ADMIN_CMD_SIZE, AV_FLAG_IPV4, AV_FLAG_VLAN, CQE_SIZE, DB_PAGES, DB_SQ_QP_MASK, EQE_SIZE,
    EQ_KIND_AEQ, EQ_KIND_CEQ, LINK_UP, MAX_CQ_ENTRIES, MAX_EQ_ENTRIES, MAX_EQ_MODERATION_US,
    MAX_FAST_REG_PAGES, MAX_GID, MAX_MR_SIZE, MAX_PBL_PAGES, MAX_QP, MAX_RD_ATOMIC, MAX_RQ_QUANTA,
    MAX_SQ_QUANTA, MIN_CQ_ENTRIES, MIN_EQ_ENTRIES, MIN_WQ_QUANTA, MODIFY_CQ_EQ, MODIFY_CQ_RESIZE,
    MODIFY_QP_RQ_FLUSH, MODIFY_QP_SQ_FLUSH, MR_ACCESS_ALL, MSIX_VECTORS, QP_ACCESS_REMOTE_ATOMIC,
    QP_ACCESS_REMOTE_READ, QP_ACCESS_REMOTE_WRITE, QP_FLAG_ALL, QP_FLAG_PRIVILEGED, QP_TYPE_GSI,
    QP_TYPE_RC, QP_TYPE_UD, QUANTUM, STATS_CLEAR,
};

use super::congestion::ParamError;
use super::cq::Cq;
use super::eq::Eq;
use super::mcast::McastError;
use super::mr::{Mr, MAX_TOTAL_PAGES};
use super::pagelist::{self, PageListError};
use super::qp::{transition_ok, Qp};
use super::ring::Ring;
use super::{Ah, Engine, Env, Gid};

/// A failed command: status and the byte offset of the offending field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdError {
    pub status: u16,
    pub detail: u32,
}

type CmdResult = Result<u32, CmdError>;

fn err(status: u16, detail: usize) -> CmdError {
    CmdError {
        status,
        detail: detail as u32,
    }
}

fn check(ok: bool, status: u16, detail: usize) -> Result<(), CmdError> {
    if ok {
        Ok(())
    } else {
        Err(err(status, detail))
    }
}

/// Resolves a ring page list at command offset `at` into a ring.
fn ring(
    env: &Env<'_>,
    pl: &PageList,
    at: usize,
    entries: u32,
    esize: u32,
) -> Result<Ring, CmdError> {
    let pages = pagelist::resolve(env.mem, pl, 12).map_err(|e| match e {
        PageListError::Dma(_) => err(st::DMA_FAULT, at),
        _ => err(st::INVALID, at),
    })?;
    Ring::new(pages, entries, esize).ok_or(err(st::INVALID, at))
}

fn write_out(env: &Env<'_>, q: &QueryObject, bytes: &[u8]) -> Result<(), CmdError> {
    check(
        q.out_len as usize >= bytes.len(),
        st::INVALID,
        offset_of!(QueryObject, out_len),
    )?;
    env.mem
        .write(q.out_addr, bytes)
        .map_err(|_| err(st::DMA_FAULT, offset_of!(QueryObject, out_addr)))
}

impl Engine {
    /// Executes one admin command; `Ok` carries the completion's `result`.
    pub(super) fn execute(&mut self, env: &Env<'_>, cmd: &[u8; ADMIN_CMD_SIZE]) -> CmdResult {
        let hdr = AdminHeader::decode(cmd.first_chunk::<8>().unwrap_or(&[0; 8]));
        match hdr.opcode {
            admin_op::QUERY_CAPS => self.query_caps(env, &QueryObject::decode(cmd)),
            admin_op::CREATE_EQ => self.create_eq(env, &CreateEq::decode(cmd)),
            admin_op::DESTROY_EQ => self.destroy_eq(QueryObject::decode(cmd).id),
            admin_op::CREATE_CQ => self.create_cq(env, &CreateCq::decode(cmd)),
            admin_op::MODIFY_CQ => self.modify_cq(env, &ModifyCq::decode(cmd)),
            admin_op::DESTROY_CQ => self.destroy_cq(QueryObject::decode(cmd).id),
            admin_op::CREATE_QP => self.create_qp(env, &CreateQp::decode(cmd)),
            admin_op::MODIFY_QP => self.modify_qp(env, &ModifyQp::decode(cmd)),
            admin_op::QUERY_QP => self.query_qp(env, &QueryObject::decode(cmd)),
            admin_op::DESTROY_QP => self.destroy_qp(QueryObject::decode(cmd).id),
            admin_op::REG_MR => self.reg_mr(env, &RegMr::decode(cmd)),
            admin_op::ALLOC_MR => self.alloc_mr(&AllocMr::decode(cmd)),
            admin_op::DEREG_MR => {
                let id = QueryObject::decode(cmd).id;
                self.mrs
                    .remove(id)
                    .map(|_| 0)
                    .ok_or(err(st::NOT_FOUND, offset_of!(QueryObject, id)))
            }
            admin_op::ADD_GID => self.add_gid(&GidCmd::decode(cmd)),
            admin_op::DEL_GID => {
                let c = GidCmd::decode(cmd);
                let at = offset_of!(GidCmd, index);
                let slot = self
                    .gids
                    .get_mut(c.index as usize)
                    .ok_or(err(st::BAD_ID, at))?;
                slot.take().map(|_| 0).ok_or(err(st::NOT_FOUND, at))
            }
            admin_op::SET_PORT => self.set_port(env, &SetPort::decode(cmd)),
            admin_op::QUERY_STATS => self.query_stats(env, &QueryObject::decode(cmd)),
            admin_op::QUERY_COUNTERS => self.query_counters(env, &QueryObject::decode(cmd)),
            admin_op::CREATE_AH => self.create_ah(&CreateAh::decode(cmd)),
            admin_op::DESTROY_AH => {
                let id = QueryObject::decode(cmd).id;
                let at = offset_of!(QueryObject, id);
                let slot = self.ahs.get_mut(id as usize).ok_or(err(st::BAD_ID, at))?;
                slot.take().map(|_| 0).ok_or(err(st::NOT_FOUND, at))
            }
            admin_op::QUERY_CC => {
                let id = QueryObject::decode(cmd).id;
                self.cc_param(id)
                    .ok_or(err(st::INVALID, offset_of!(QueryObject, id)))
            }
            admin_op::SET_CC => self.set_cc_command(&SetCc::decode(cmd)),
            admin_op::MCAST_ATTACH => self.mcast_attach(&McastCmd::decode(cmd)),
            admin_op::MCAST_DETACH => {
                let c = McastCmd::decode(cmd);
                self.mcast
                    .detach(&c.gid, c.qp_id)
                    .map(|()| 0)
                    .map_err(|_| err(st::NOT_FOUND, offset_of!(McastCmd, gid)))
            }
            _ => Err(err(st::BAD_OPCODE, 0)),
        }
    }

    fn set_cc_command(&mut self, c: &SetCc) -> CmdResult {
        match self.set_cc_param(c.param, c.value) {
            Ok(cfg) => {
                log::debug!("congestion control set by the driver: {}", cfg.spec());
                Ok(0)
            }
            Err(ParamError::Param) => Err(err(st::INVALID, offset_of!(SetCc, param))),
            Err(ParamError::Value) => Err(err(st::INVALID, offset_of!(SetCc, value))),
        }
    }

    fn mcast_attach(&mut self, c: &McastCmd) -> CmdResult {
        let at = offset_of!(McastCmd, qp_id);
        let slot = self.qps.slot(c.qp_id).ok_or(err(st::BAD_ID, at))?;
        let qp = slot.ok_or(err(st::NOT_FOUND, at))?;
        // Multicast is a UD service; the GSI QP (QP1) is not a member of any group.
        check(qp.qp_type == QP_TYPE_UD, st::INVALID, at)?;
        let gid_at = offset_of!(McastCmd, gid);
        check(gid_is_multicast(&c.gid), st::INVALID, gid_at)?;
        self.mcast
            .attach(&c.gid, c.qp_id)
            .map(|()| 0)
            .map_err(|e| match e {
                McastError::AlreadyAttached => err(st::EXISTS, at),
                McastError::TableFull | McastError::GroupFull => err(st::NO_RESOURCES, gid_at),
                McastError::NotAttached => err(st::INVALID, gid_at),
            })
    }

    fn query_caps(&mut self, env: &Env<'_>, q: &QueryObject) -> CmdResult {
        let mut caps = super::caps::nominal();
        self.resources.report(&mut caps);
        if let Some(plan) = &self.caps_plan {
            let (profile, hostile) = plan.next_reply();
            log::warn!("QUERY_CAPS: answering with the {profile:?} profile (--hostile-caps)");
            if profile != super::caps::CapsProfile::Nominal {
                caps = hostile;
            }
        }
        write_out(env, q, &caps.encode())?;
        Ok(0)
    }

    fn create_eq(&mut self, env: &Env<'_>, c: &CreateEq) -> CmdResult {
        let id = offset_of!(CreateEq, eq_id);
        let slot = self.eqs.get(c.eq_id as usize).ok_or(err(st::BAD_ID, id))?;
        check(slot.is_none(), st::EXISTS, id)?;
        check(
            c.size.is_power_of_two() && (MIN_EQ_ENTRIES..=MAX_EQ_ENTRIES).contains(&c.size),
            st::INVALID,
            offset_of!(CreateEq, size),
        )?;
        let vec_at = offset_of!(CreateEq, vector);
        match c.kind {
            EQ_KIND_AEQ => check(c.vector == 0, st::INVALID, vec_at)?,
            EQ_KIND_CEQ => check((1..MSIX_VECTORS).contains(&c.vector), st::INVALID, vec_at)?,
            _ => return Err(err(st::INVALID, offset_of!(CreateEq, kind))),
        }
        check(
            c.moderation_us <= MAX_EQ_MODERATION_US,
            st::INVALID,
            offset_of!(CreateEq, moderation_us),
        )?;
        check(
            !self.eqs.iter().flatten().any(|e| e.vector == c.vector),
            st::EXISTS,
            vec_at,
        )?;
        let r = ring(
            env,
            &c.ring,
            offset_of!(CreateEq, ring),
            c.size,
            EQE_SIZE as u32,
        )?;
        if let Some(s) = self.eqs.get_mut(c.eq_id as usize) {
            *s = Some(Eq::new(c.kind, c.vector, r).with_moderation(c.moderation_us));
        }
        Ok(0)
    }

    fn destroy_eq(&mut self, eq_id: u32) -> CmdResult {
        let at = offset_of!(QueryObject, id);
        let slot = self.eqs.get(eq_id as usize).ok_or(err(st::BAD_ID, at))?;
        check(slot.is_some(), st::NOT_FOUND, at)?;
        check(
            !self.cqs.iter().any(|(_, c)| c.eq_id == eq_id),
            st::BUSY,
            at,
        )?;
        if let Some(s) = self.eqs.get_mut(eq_id as usize) {
            *s = None;
        }
        Ok(0)
    }

    fn check_ceq(&self, eq_id: u32, at: usize) -> Result<(), CmdError> {
        match self.eqs.get(eq_id as usize) {
            None => Err(err(st::BAD_ID, at)),
            Some(None) => Err(err(st::NOT_FOUND, at)),
            Some(Some(e)) if e.kind != EQ_KIND_CEQ => Err(err(st::INVALID, at)),
            Some(Some(_)) => Ok(()),
        }
    }

    fn create_cq(&mut self, env: &Env<'_>, c: &CreateCq) -> CmdResult {
        let id = offset_of!(CreateCq, cq_id);
        let slot = self.cqs.slot(c.cq_id).ok_or(err(st::BAD_ID, id))?;
        check(slot.is_none(), st::EXISTS, id)?;
        check(
            (MIN_CQ_ENTRIES..=MAX_CQ_ENTRIES).contains(&c.size),
            st::INVALID,
            offset_of!(CreateCq, size),
        )?;
        self.check_ceq(c.eq_id, offset_of!(CreateCq, eq_id))?;
        check(
            c.db_page < DB_PAGES,
            st::INVALID,
            offset_of!(CreateCq, db_page),
        )?;
        check(
            c.shadow_addr % 8 == 0,
            st::INVALID,
            offset_of!(CreateCq, shadow_addr),
        )?;
        let r = ring(
            env,
            &c.ring,
            offset_of!(CreateCq, ring),
            c.size,
            CQE_SIZE as u32,
        )?;
        {
            let mut cq = Cq::new(r, c.shadow_addr, c.eq_id, c.db_page);
            cq.event_tag = c.event_tag;
            self.cqs.insert(c.cq_id, cq);
        }
        Ok(0)
    }

    fn modify_cq(&mut self, env: &Env<'_>, c: &ModifyCq) -> CmdResult {
        let id = offset_of!(ModifyCq, cq_id);
        let slot = self.cqs.slot(c.cq_id).ok_or(err(st::BAD_ID, id))?;
        check(slot.is_some(), st::NOT_FOUND, id)?;
        check(
            c.flags & !(MODIFY_CQ_RESIZE | MODIFY_CQ_EQ) == 0,
            st::INVALID,
            offset_of!(ModifyCq, flags),
        )?;
        if c.flags & MODIFY_CQ_EQ != 0 {
            self.check_ceq(c.eq_id, offset_of!(ModifyCq, eq_id))?;
        }
        let new_ring = if c.flags & MODIFY_CQ_RESIZE != 0 {
            check(
                (MIN_CQ_ENTRIES..=MAX_CQ_ENTRIES).contains(&c.size),
                st::INVALID,
                offset_of!(ModifyCq, size),
            )?;
            check(
                c.shadow_addr % 8 == 0,
                st::INVALID,
                offset_of!(ModifyCq, shadow_addr),
            )?;
            // As ibv_resize_cq promises: the new ring must be able to hold the CQEs the
            // consumer has not polled (an unreadable consumer index is the CQ's problem,
            // found at its next CQE).
            if let Some(cq) = self.cqs.get(c.cq_id) {
                let unpolled = cq.unpolled(env.mem).ok().flatten().unwrap_or(0);
                check(unpolled < c.size, st::INVALID, offset_of!(ModifyCq, size))?;
            }
            Some(ring(
                env,
                &c.ring,
                offset_of!(ModifyCq, ring),
                c.size,
                CQE_SIZE as u32,
            )?)
        } else {
            None
        };
        if let Some(cq) = self.cqs.get_mut(c.cq_id) {
            if c.flags & MODIFY_CQ_EQ != 0 {
                cq.eq_id = c.eq_id;
            }
            if let Some(r) = new_ring {
                cq.resize(r, (c.shadow_addr != 0).then_some(c.shadow_addr));
            }
        }
        Ok(0)
    }

    fn destroy_cq(&mut self, cq_id: u32) -> CmdResult {
        let at = offset_of!(QueryObject, id);
        let slot = self.cqs.slot(cq_id).ok_or(err(st::BAD_ID, at))?;
        check(slot.is_some(), st::NOT_FOUND, at)?;
        check(
            !self
                .qps
                .iter()
                .any(|(_, q)| q.send_cq == cq_id || q.recv_cq == cq_id),
            st::BUSY,
            at,
        )?;
        self.cqs.remove(cq_id);
        Ok(0)
    }

    /// PD ids are the driver's to allocate; the device only bounds them by its profile.
    fn pd_in_range(&self, pd: u32, at: usize) -> Result<(), CmdError> {
        check(pd < self.resources.max_pd, st::INVALID, at)
    }

    fn cq_exists(&self, cq: u32, at: usize) -> Result<(), CmdError> {
        match self.cqs.slot(cq) {
            None => Err(err(st::BAD_ID, at)),
            Some(None) => Err(err(st::NOT_FOUND, at)),
            Some(Some(_)) => Ok(()),
        }
    }

    fn create_qp(&mut self, env: &Env<'_>, c: &CreateQp) -> CmdResult {
        let id = offset_of!(CreateQp, qp_id);
        check(c.qp_id != 0, st::BAD_ID, id)?;
        let slot = self.qps.slot(c.qp_id).ok_or(err(st::BAD_ID, id))?;
        check(slot.is_none(), st::EXISTS, id)?;
        let ty = offset_of!(CreateQp, qp_type);
        check(
            matches!(c.qp_type, QP_TYPE_RC | QP_TYPE_UD | QP_TYPE_GSI),
            st::INVALID,
            ty,
        )?;
        check(
            (c.qp_type == QP_TYPE_GSI) == (c.qp_id == 1),
            st::INVALID,
            ty,
        )?;
        self.pd_in_range(c.pd, offset_of!(CreateQp, pd))?;
        self.cq_exists(c.send_cq, offset_of!(CreateQp, send_cq))?;
        self.cq_exists(c.recv_cq, offset_of!(CreateQp, recv_cq))?;
        check(c.rq_shift <= 3, st::INVALID, offset_of!(CreateQp, rq_shift))?;
        check(
            c.db_page < DB_PAGES,
            st::INVALID,
            offset_of!(CreateQp, db_page),
        )?;
        check(
            c.sq_quanta.is_power_of_two() && (MIN_WQ_QUANTA..=MAX_SQ_QUANTA).contains(&c.sq_quanta),
            st::INVALID,
            offset_of!(CreateQp, sq_quanta),
        )?;
        let rq_quanta = u64::from(c.rq_wqes) << c.rq_shift;
        check(
            c.rq_wqes.is_power_of_two()
                && (u64::from(MIN_WQ_QUANTA)..=u64::from(MAX_RQ_QUANTA)).contains(&rq_quanta),
            st::INVALID,
            offset_of!(CreateQp, rq_wqes),
        )?;
        check(
            c.shadow_addr % 8 == 0,
            st::INVALID,
            offset_of!(CreateQp, shadow_addr),
        )?;
        check(
            c.flags & !QP_FLAG_ALL == 0,
            st::INVALID,
            offset_of!(CreateQp, flags),
        )?;
        let sq = ring(
            env,
            &c.sq_ring,
            offset_of!(CreateQp, sq_ring),
            c.sq_quanta,
            QUANTUM as u32,
        )?;
        let rq = ring(
            env,
            &c.rq_ring,
            offset_of!(CreateQp, rq_ring),
            c.rq_wqes,
            (QUANTUM as u32) << c.rq_shift,
        )?;
        let qp = Qp {
            qp_type: c.qp_type,
            pd: c.pd,
            send_cq: c.send_cq,
            recv_cq: c.recv_cq,
            db_page: c.db_page,
            rq_shift: c.rq_shift,
            sq,
            rq,
            shadow: c.shadow_addr,
            compl_ctx: c.compl_ctx,
            event_tag: c.event_tag,
            privileged: c.flags & QP_FLAG_PRIVILEGED != 0,
            attrs: QpAttrs {
                path_mtu: 5,
                udp_sport: 0xc000,
                ..QpAttrs::default()
            },
            have: 0,
            sq_tail: 0,
            sq_pol: true,
            rq_tail: 0,
            rq_pol: true,
            sq_unreported: false,
            last_error: 0,
            comm_est_sent: false,
            rnr_attempts: 0,
            rnr_retry_at: None,
            err_scan: None,
            req: Default::default(),
            resp: Default::default(),
            cc: Default::default(),
        };
        self.qps.insert(c.qp_id, qp);
        Ok(0)
    }

    /// Validates the address-vector fields of `a` (at command offset `base`).
    fn check_av(&self, a: &QpAttrs, base: usize) -> Result<(), CmdError> {
        let gid_at = base + offset_of!(QpAttrs, sgid_index);
        check(u32::from(a.sgid_index) < MAX_GID, st::INVALID, gid_at)?;
        check(
            matches!(self.gids.get(a.sgid_index as usize), Some(Some(_))),
            st::NOT_FOUND,
            gid_at,
        )?;
        check(
            a.av_flags & !(AV_FLAG_IPV4 | AV_FLAG_VLAN) == 0,
            st::INVALID,
            base + offset_of!(QpAttrs, av_flags),
        )?;
        check(
            a.vlan_id < 4096,
            st::INVALID,
            base + offset_of!(QpAttrs, vlan_id),
        )?;
        check(
            a.flow_label < (1 << 20),
            st::INVALID,
            base + offset_of!(QpAttrs, flow_label),
        )
    }

    fn modify_qp(&mut self, env: &Env<'_>, c: &ModifyQp) -> CmdResult {
        let id = offset_of!(ModifyQp, qp_id);
        let base = offset_of!(ModifyQp, attrs);
        let at = |f: usize| base + f;
        let qp = self
            .qps
            .slot(c.qp_id)
            .ok_or(err(st::BAD_ID, id))?
            .ok_or(err(st::NOT_FOUND, id))?;
        let (qp_type, cur, have) = (qp.qp_type, qp.state(), qp.have);
        let m = c.attr_mask;
        let a = &c.attrs;
        check(
            m & !qp_attr::ALL == 0,
            st::INVALID,
            offset_of!(ModifyQp, attr_mask),
        )?;
        check(
            c.flags & !(MODIFY_QP_SQ_FLUSH | MODIFY_QP_RQ_FLUSH) == 0,
            st::INVALID,
            offset_of!(ModifyQp, flags),
        )?;
        let has = |bit: u32| m & bit != 0;
        if has(qp_attr::PATH_MTU) {
            check(
                mtu_bytes(a.path_mtu).is_some(),
                st::INVALID,
                at(offset_of!(QpAttrs, path_mtu)),
            )?;
        }
        if has(qp_attr::RETRY_CNT) {
            check(
                a.retry_cnt <= 7,
                st::INVALID,
                at(offset_of!(QpAttrs, retry_cnt)),
            )?;
        }
        if has(qp_attr::RNR_RETRY) {
            check(
                a.rnr_retry <= 7,
                st::INVALID,
                at(offset_of!(QpAttrs, rnr_retry)),
            )?;
        }
        if has(qp_attr::MIN_RNR_TIMER) {
            check(
                a.min_rnr_timer <= 31,
                st::INVALID,
                at(offset_of!(QpAttrs, min_rnr_timer)),
            )?;
        }
        if has(qp_attr::MAX_RD_ATOMIC) {
            check(
                a.max_rd_atomic <= MAX_RD_ATOMIC,
                st::INVALID,
                at(offset_of!(QpAttrs, max_rd_atomic)),
            )?;
        }
        if has(qp_attr::MAX_DEST_RD_ATOMIC) {
            check(
                a.max_dest_rd_atomic <= MAX_RD_ATOMIC,
                st::INVALID,
                at(offset_of!(QpAttrs, max_dest_rd_atomic)),
            )?;
        }
        if has(qp_attr::ACCESS) {
            let f = at(offset_of!(QpAttrs, access));
            check(
                a.access & QP_ACCESS_REMOTE_ATOMIC == 0,
                st::NOT_SUPPORTED,
                f,
            )?;
            check(
                a.access & !(QP_ACCESS_REMOTE_READ | QP_ACCESS_REMOTE_WRITE) == 0,
                st::INVALID,
                f,
            )?;
        }
        if has(qp_attr::AV) {
            self.check_av(a, base)?;
        }
        for (bit, v, f) in [
            (qp_attr::DEST_QPN, a.dest_qpn, offset_of!(QpAttrs, dest_qpn)),
            (qp_attr::SQ_PSN, a.sq_psn, offset_of!(QpAttrs, sq_psn)),
            (qp_attr::RQ_PSN, a.rq_psn, offset_of!(QpAttrs, rq_psn)),
        ] {
            if has(bit) {
                check(v < (1 << 24), st::INVALID, at(f))?;
            }
        }
        let new = if has(qp_attr::STATE) { a.state } else { cur };
        if has(qp_attr::STATE) {
            check(
                transition_ok(qp_type, cur, new, have | m),
                st::BAD_STATE,
                at(offset_of!(QpAttrs, state)),
            )?;
        }
        // Validated: apply.
        if let Some(qp) = self.qps.get_mut(c.qp_id) {
            let t = &mut qp.attrs;
            if has(qp_attr::PATH_MTU) {
                t.path_mtu = a.path_mtu;
            }
            if has(qp_attr::TIMEOUT) {
                t.timeout = a.timeout;
            }
            if has(qp_attr::RETRY_CNT) {
                t.retry_cnt = a.retry_cnt;
            }
            if has(qp_attr::RNR_RETRY) {
                t.rnr_retry = a.rnr_retry;
            }
            if has(qp_attr::MIN_RNR_TIMER) {
                t.min_rnr_timer = a.min_rnr_timer;
            }
            if has(qp_attr::MAX_RD_ATOMIC) {
                t.max_rd_atomic = a.max_rd_atomic;
            }
            if has(qp_attr::MAX_DEST_RD_ATOMIC) {
                t.max_dest_rd_atomic = a.max_dest_rd_atomic;
            }
            if has(qp_attr::ACCESS) {
                t.access = a.access;
            }
            if has(qp_attr::QKEY) {
                t.qkey = a.qkey;
            }
            if has(qp_attr::DEST_QPN) {
                t.dest_qpn = a.dest_qpn;
            }
            if has(qp_attr::SQ_PSN) {
                t.sq_psn = a.sq_psn;
            }
            if has(qp_attr::RQ_PSN) {
                t.rq_psn = a.rq_psn;
            }
            if has(qp_attr::AV) {
                t.sgid_index = a.sgid_index;
                t.hop_limit = a.hop_limit;
                t.traffic_class = a.traffic_class;
                t.av_flags = a.av_flags;
                t.udp_sport = a.udp_sport;
                t.vlan_id = a.vlan_id;
                t.flow_label = a.flow_label;
                t.dmac = a.dmac;
                t.dgid = a.dgid;
            }
            qp.have |= m;
            if new == qp_state::RESET && has(qp_attr::STATE) {
                qp.rewind();
                qp.have = 0;
            }
            qp.attrs.state = if new == qp_state::ERR { cur } else { new };
        }
        if has(qp_attr::STATE) {
            match new {
                qp_state::ERR if cur != qp_state::ERR => self.enter_err(env, c.qp_id, true, true),
                qp_state::SQD => self.async_event(env, eqe_kind::QP, c.qp_id, ae::QP_SQ_DRAINED, 0),
                qp_state::RTS => self.process_sq(env, c.qp_id),
                _ => {}
            }
        }
        if new == qp_state::ERR || cur == qp_state::ERR {
            if c.flags & MODIFY_QP_SQ_FLUSH != 0 {
                self.flush_sq(env, c.qp_id, true);
            }
            if c.flags & MODIFY_QP_RQ_FLUSH != 0 {
                self.flush_rq(env, c.qp_id, true);
            }
        }
        Ok(0)
    }

    fn query_qp(&mut self, env: &Env<'_>, q: &QueryObject) -> CmdResult {
        let at = offset_of!(QueryObject, id);
        let qp = self
            .qps
            .slot(q.id)
            .ok_or(err(st::BAD_ID, at))?
            .ok_or(err(st::NOT_FOUND, at))?;
        let out = QpQueryOut {
            attrs: qp.attrs,
            qp_type: qp.qp_type,
            sq_polarity: u8::from(qp.sq_pol),
            rq_polarity: u8::from(qp.rq_pol),
            last_error: qp.last_error as u8,
            pd: qp.pd,
            send_cq: qp.send_cq,
            recv_cq: qp.recv_cq,
            sq_tail: qp.sq_tail,
            rq_tail: qp.rq_tail,
            flags: if qp.privileged { QP_FLAG_PRIVILEGED } else { 0 },
            rsvd: [0; 4],
        };
        write_out(env, q, &out.encode())?;
        Ok(0)
    }

    fn destroy_qp(&mut self, qp_id: u32) -> CmdResult {
        let at = offset_of!(QueryObject, id);
        self.qps.slot(qp_id).ok_or(err(st::BAD_ID, at))?;
        self.qps.remove(qp_id).ok_or(err(st::NOT_FOUND, at))?;
        self.mcast.forget_qp(qp_id);
        Ok(0)
    }

    fn reg_mr(&mut self, env: &Env<'_>, c: &RegMr) -> CmdResult {
        let s = offset_of!(RegMr, stag);
        check(self.mrs.in_range(c.stag), st::BAD_ID, s)?;
        // Index 0 is the local DMA STag's: never a registered MR.
        check(stag_index(c.stag) != 0, st::INVALID, s)?;
        check(self.mrs.slot(c.stag).is_none(), st::EXISTS, s)?;
        self.pd_in_range(c.pd, offset_of!(RegMr, pd))?;
        check(
            c.access & !MR_ACCESS_ALL == 0,
            st::INVALID,
            offset_of!(RegMr, access),
        )?;
        check(
            matches!(c.page_shift, 12 | 21 | 30),
            st::INVALID,
            offset_of!(RegMr, page_shift),
        )?;
        let len_at = offset_of!(RegMr, length);
        check(
            (1..=MAX_MR_SIZE).contains(&c.length) && c.iova.checked_add(c.length).is_some(),
            st::INVALID,
            len_at,
        )?;
        let ps = 1u64 << c.page_shift;
        let need = ((c.iova & (ps - 1)) + c.length).div_ceil(ps);
        let pages_at = offset_of!(RegMr, pages);
        check(
            u64::from(c.pages.npages) >= need && c.pages.npages <= MAX_PBL_PAGES,
            st::INVALID,
            pages_at,
        )?;
        check(
            self.mrs.total_pages + c.pages.npages as usize <= MAX_TOTAL_PAGES,
            st::NO_RESOURCES,
            pages_at,
        )?;
        let pages =
            pagelist::resolve(env.mem, &c.pages, u32::from(c.page_shift)).map_err(|e| match e {
                PageListError::Dma(_) => err(st::DMA_FAULT, pages_at),
                _ => err(st::INVALID, pages_at),
            })?;
        self.mrs.insert(
            c.stag,
            Mr {
                key: c.stag as u8,
                pd: c.pd,
                access: c.access,
                iova: c.iova,
                length: c.length,
                page_shift: u32::from(c.page_shift),
                pages,
                valid: true,
                max_pages: 0,
            },
        );
        Ok(0)
    }

    /// ALLOC_MR: an invalid fast-registration MR whose maximum page count is reserved now.
    fn alloc_mr(&mut self, c: &AllocMr) -> CmdResult {
        let s = offset_of!(AllocMr, stag);
        check(self.mrs.in_range(c.stag), st::BAD_ID, s)?;
        check(stag_index(c.stag) != 0, st::INVALID, s)?;
        check(self.mrs.slot(c.stag).is_none(), st::EXISTS, s)?;
        self.pd_in_range(c.pd, offset_of!(AllocMr, pd))?;
        let max_at = offset_of!(AllocMr, max_pages);
        check(
            (1..=MAX_FAST_REG_PAGES).contains(&c.max_pages),
            st::INVALID,
            max_at,
        )?;
        check(
            self.mrs.total_pages + c.max_pages as usize <= MAX_TOTAL_PAGES,
            st::NO_RESOURCES,
            max_at,
        )?;
        self.mrs
            .insert(c.stag, Mr::fast_reg(c.stag as u8, c.pd, c.max_pages));
        Ok(0)
    }

    fn add_gid(&mut self, c: &GidCmd) -> CmdResult {
        let slot = self
            .gids
            .get_mut(c.index as usize)
            .ok_or(err(st::BAD_ID, offset_of!(GidCmd, index)))?;
        *slot = Some(Gid {
            gid: c.gid,
            mac: c.mac,
        });
        Ok(0)
    }

    fn set_port(&mut self, env: &Env<'_>, c: &SetPort) -> CmdResult {
        check(c.link <= LINK_UP, st::INVALID, offset_of!(SetPort, link))?;
        check(
            mtu_bytes(c.mtu).is_some(),
            st::INVALID,
            offset_of!(SetPort, mtu),
        )?;
        let up = c.link == LINK_UP;
        let changed = up != self.port.link_up;
        self.port.mac = c.mac;
        self.port.mtu = c.mtu;
        self.port.link_up = up;
        if changed {
            log::info!("port link {}", if up { "up" } else { "down" });
            let code = if up { ae::PORT_ACTIVE } else { ae::PORT_DOWN };
            self.async_event(env, eqe_kind::PORT, 1, code, 0);
        }
        Ok(0)
    }

    fn query_stats(&mut self, env: &Env<'_>, q: &QueryObject) -> CmdResult {
        check(
            q.id & !STATS_CLEAR == 0,
            st::INVALID,
            offset_of!(QueryObject, id),
        )?;
        write_out(env, q, &self.stats.encode())?;
        if q.id & STATS_CLEAR != 0 {
            self.stats = Stats::default();
        }
        Ok(0)
    }

    fn query_counters(&mut self, env: &Env<'_>, q: &QueryObject) -> CmdResult {
        check(q.id == 0, st::INVALID, offset_of!(QueryObject, id))?;
        write_out(env, q, &self.counters.encode())?;
        Ok(0)
    }

    fn create_ah(&mut self, c: &CreateAh) -> CmdResult {
        let id = offset_of!(CreateAh, ah_id);
        let slot = self.ahs.get(c.ah_id as usize).ok_or(err(st::BAD_ID, id))?;
        check(slot.is_none(), st::EXISTS, id)?;
        self.pd_in_range(c.pd, offset_of!(CreateAh, pd))?;
        self.check_av(&c.attrs, offset_of!(CreateAh, attrs))?;
        if let Some(s) = self.ahs.get_mut(c.ah_id as usize) {
            *s = Some(Ah {
                pd: c.pd,
                attrs: c.attrs,
            });
        }
        Ok(0)
    }
}

// The admin-visible limits must be consistent with the data path's encodings.
const _: () = assert!(MAX_QP - 1 <= DB_SQ_QP_MASK);
