//! Queue pair contexts: ring geometry, tails and polarities, attributes and the state
//! machine.

use crate::interface::{qp_attr, qp_state, QpAttrs, QP_TYPE_RC};

use super::ring::Ring;
use super::transport::{ReqState, RespState};

/// One QP.
#[derive(Debug)]
pub struct Qp {
    pub qp_type: u8,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub db_page: u32,
    pub rq_shift: u8,
    /// SQ ring, one entry per quantum.
    pub sq: Ring,
    /// RQ ring, one entry per WQE.
    pub rq: Ring,
    pub shadow: u64,
    pub compl_ctx: u64,
    /// Echoed in the `tag` of this QP's asynchronous events (CREATE_QP `event_tag`).
    pub event_tag: u32,
    /// Created with `QP_FLAG_PRIVILEGED`: local accesses may use `LOCAL_DMA_STAG`.
    pub privileged: bool,
    pub attrs: QpAttrs,
    /// Attribute groups set at least once (`qp_attr` bits).
    pub have: u32,
    pub sq_tail: u32,
    pub sq_pol: bool,
    pub rq_tail: u32,
    pub rq_pol: bool,
    /// WQEs were consumed since the last SQ CQE (unsignaled ones): a flush must report.
    pub sq_unreported: bool,
    /// Flush code of the last error.
    pub last_error: u16,
    pub comm_est_sent: bool,
    /// RNR NAKs received for the WQE at the SQ tail.
    pub rnr_attempts: u32,
    /// After an RNR NAK of a local responder: when (device clock) the WQE at the SQ tail is
    /// tried again, the responder's RNR timer after the NAK as on the wire. Nothing else
    /// moves the SQ meanwhile, not even its doorbell.
    pub rnr_retry_at: Option<u64>,
    /// In ERR: when (device clock) the rings are next looked at for WQEs posted since the
    /// last flush, and the interval after that (`exec.rs`: `late_flushes`).
    pub err_scan: Option<(u64, u64)>,
    /// Wire transport, requester side (peers that are not local).
    pub req: ReqState,
    /// Wire transport, responder side.
    pub resp: RespState,
    /// Congestion control: CNPs sent, DCQCN's rate limiter.
    pub cc: super::congestion::QpCc,
}

impl Qp {
    /// Current state.
    pub fn state(&self) -> u8 {
        self.attrs.state
    }

    /// Rewinds the rings to their creation state (RESET).
    pub fn rewind(&mut self) {
        self.sq_tail = 0;
        self.sq_pol = true;
        self.rq_tail = 0;
        self.rq_pol = true;
        self.sq_unreported = false;
        self.last_error = 0;
        self.comm_est_sent = false;
        self.rnr_attempts = 0;
        self.rnr_retry_at = None;
        self.err_scan = None;
        self.req = ReqState::default();
        self.resp = RespState::default();
        self.cc = Default::default();
    }

    /// Advances the SQ tail by `n` quanta, flipping the polarity on wrap.
    pub fn advance_sq(&mut self, n: u32) {
        let size = self.sq.entries();
        self.sq_tail += n;
        while self.sq_tail >= size {
            self.sq_tail -= size;
            self.sq_pol = !self.sq_pol;
        }
    }

    /// Advances the RQ tail by one WQE.
    pub fn advance_rq(&mut self) {
        self.rq_tail += 1;
        if self.rq_tail >= self.rq.entries() {
            self.rq_tail = 0;
            self.rq_pol = !self.rq_pol;
        }
    }

    /// Whether the QP accepts inbound messages.
    pub fn can_receive(&self) -> bool {
        matches!(self.state(), qp_state::RTR | qp_state::RTS | qp_state::SQD)
    }

    /// The Q_Key a UD/GSI send WQE of this QP puts in the DETH: see [`wire_qkey`].
    pub fn send_qkey(&self, wqe_qkey: u32) -> u32 {
        wire_qkey(self.privileged, self.attrs.qkey, wqe_qkey)
    }
}

/// Q_Keys with the most significant bit set are *controlled*: only privileged software may
/// send them (the GSI's `0x8001_0000` among them).
pub const QKEY_CONTROLLED: u32 = 1 << 31;

/// The Q_Key that goes on the wire for a send WQE carrying `wqe_qkey`, from a QP whose
/// context holds `own` (the InfiniBand rule for UD Q_Keys): a controlled Q_Key in
/// the WQE of an unprivileged (user) QP is replaced by the QP's own Q_Key, which only
/// privileged software (the kernel, CAP_NET_RAW) can set to a controlled value. A user
/// process writes its WQEs itself, so this is the only place the rule can be enforced;
/// privileged (kernel) QPs send the WQE's key as is, the driver having applied the rule.
pub fn wire_qkey(privileged: bool, own: u32, wqe_qkey: u32) -> u32 {
    if !privileged && wqe_qkey & QKEY_CONTROLLED != 0 {
        own
    } else {
        wqe_qkey
    }
}

/// Whether `from -> to` is a legal transition, and (for RC to RTR) whether the needed
/// attributes are present in `have` (groups set before or by this command).
pub fn transition_ok(qp_type: u8, from: u8, to: u8, have: u32) -> bool {
    use qp_state::*;
    let legal = matches!(
        (from, to),
        (_, ERR | RESET)
            | (RESET | INIT, INIT)
            | (INIT, RTR)
            | (RTR | RTS | SQD, RTS)
            | (RTS | SQD, SQD)
    );
    if !legal {
        return false;
    }
    if to == RTR && from == INIT {
        let need = if qp_type == QP_TYPE_RC {
            qp_attr::AV | qp_attr::DEST_QPN
        } else {
            qp_attr::QKEY
        };
        return have & need == need;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::QP_TYPE_UD;
    use qp_state::*;

    #[test]
    fn controlled_qkeys_of_unprivileged_qps_become_the_qps_own() {
        assert_eq!(wire_qkey(false, 0x1234, 0x8001_0000), 0x1234);
        assert_eq!(wire_qkey(false, 0x1234, 0x8000_0000), 0x1234);
        assert_eq!(wire_qkey(false, 0x1234, 0x7fff_ffff), 0x7fff_ffff);
        assert_eq!(wire_qkey(true, 0x1234, 0x8001_0000), 0x8001_0000);
        assert_eq!(wire_qkey(true, 0x1234, 0x42), 0x42);
    }

    #[test]
    fn state_machine() {
        let av = qp_attr::AV | qp_attr::DEST_QPN;
        assert!(transition_ok(QP_TYPE_RC, RESET, INIT, 0));
        assert!(!transition_ok(QP_TYPE_RC, RESET, RTR, av));
        assert!(!transition_ok(QP_TYPE_RC, INIT, RTR, qp_attr::AV));
        assert!(transition_ok(QP_TYPE_RC, INIT, RTR, av));
        assert!(!transition_ok(QP_TYPE_UD, INIT, RTR, av));
        assert!(transition_ok(QP_TYPE_UD, INIT, RTR, qp_attr::QKEY));
        assert!(transition_ok(QP_TYPE_RC, RTR, RTS, 0));
        assert!(transition_ok(QP_TYPE_RC, RTS, SQD, 0));
        assert!(transition_ok(QP_TYPE_RC, SQD, RTS, 0));
        assert!(!transition_ok(QP_TYPE_RC, ERR, RTS, av));
        assert!(transition_ok(QP_TYPE_RC, ERR, RESET, 0));
        assert!(!transition_ok(QP_TYPE_RC, RTS, 5, 0));
        assert!(!transition_ok(QP_TYPE_RC, 9, RTS, 0));
    }
}
