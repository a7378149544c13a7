//! Congestion control of the engine (issue 18): ECN-capable transmission, the notification
//! point (CNPs for Congestion Experienced packets) and the reaction point (DCQCN's rate
//! limiter per QP, [`super::dcqcn`]).
//!
//! * With `ecn` on, every RoCEv2 packet leaves as ECT(0) (the traffic class's DSCP kept), and
//!   an RC packet that arrives marked CE makes its QP send a CNP (BTH opcode 0x81, BECN set,
//!   16 reserved bytes, as the ConnectX capture in tests/data) to the QP at the other end,
//!   at most one per QP per `min_time_between_cnps` (mlx5 `roce_np` names), with DSCP
//!   `cnp_dscp`. A UD QP sends it to the marked datagram's source QP on the datagram's
//!   reverse path, at most one per source per interval (`ud_notify`).
//! * With `dcqcn` on, a CNP for an RC or UD QP cuts its rate; the requester paces the QP's
//!   packets (requests and READ responses; a UD QP's SENDs wait in its SQ) at that rate,
//!   and the limiter's timers bring it back. Without it a CNP is counted as ignored.
//! The settings are the NIC's (command line, control socket) and its driver's (QUERY_CC,
//! SET_CC: the guest's debugfs `cc_params`) alike, the last writer winning; resets of the
//! engine keep them like the other host knobs. The line rate is the host's alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use thiserror::Error;

use crate::interface::{cc_param, QpAttrs, AV_FLAG_IPV4, AV_FLAG_VLAN, QP_TYPE_RC, QP_TYPE_UD};
use crate::wire::ecn::Ecn;
use crate::wire::opcode as op;
use crate::wire::Headers;

use super::dcqcn::{RateLimiter, RpError, RpParams};
use super::path::v4_mapped;
use super::requester::bth;
use super::{Engine, Env};

/// The port speed when none is given: E810's 100 Gb/s.
pub const DEFAULT_LINE_MBPS: u32 = 100_000;
/// CNP payload: 16 reserved bytes.
const CNP_PAYLOAD: [u8; 16] = [0; 16];

/// The notification point's parameters (mlx5 `roce_np` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpParams {
    /// Microseconds between two CNPs of one QP, at least (the DCQCN paper's N, 50 us).
    pub min_time_between_cnps: u32,
    /// DSCP of CNPs (0..63).
    pub cnp_dscp: u8,
}

impl Default for NpParams {
    fn default() -> Self {
        NpParams {
            min_time_between_cnps: 50,
            cnp_dscp: 48,
        }
    }
}

/// A NIC's congestion control settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcConfig {
    /// Send ECT(0) and answer CE with CNPs.
    pub ecn: bool,
    /// Run DCQCN's reaction point on CNPs.
    pub dcqcn: bool,
    /// The port speed, the rate limiter's ceiling (Mb/s).
    pub line_mbps: u32,
    pub np: NpParams,
    pub rp: RpParams,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            ecn: false,
            dcqcn: false,
            line_mbps: DEFAULT_LINE_MBPS,
            np: NpParams::default(),
            rp: RpParams::default(),
        }
    }
}

/// Why congestion control settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CcError {
    #[error("line rate {0} Mb/s is outside 1..=1600000")]
    LineRate(u32),
    #[error("cnp_dscp {0} is not a DSCP (0..=63)")]
    Dscp(u8),
    #[error("min_time_between_cnps {0} us exceeds 1000000")]
    CnpInterval(u32),
    #[error(transparent)]
    Rp(#[from] RpError),
    #[error("congestion setting {0:?}: expected KEY=VALUE[,KEY=VALUE...] (keys: {KEYS})")]
    Syntax(String),
    #[error("unknown congestion setting {0:?} (keys: {KEYS})")]
    Key(String),
    #[error("congestion setting {key}: {value:?} is not {what}")]
    Value {
        key: String,
        value: String,
        what: &'static str,
    },
}

/// Why SET_CC refused a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParamError {
    #[error("no such writable congestion control parameter")]
    Param,
    #[error("the value is out of range")]
    Value,
}

/// The keys [`CcConfig::with_spec`] takes.
pub const KEYS: &str = "ecn, dcqcn (on|off), line-mbps, min_time_between_cnps, cnp_dscp, \
    rpg_time_reset, rpg_byte_reset, rpg_threshold, rpg_ai_rate, rpg_hai_rate, rpg_min_rate, \
    rate_reduce_monitor_period, dce_tcp_g, dce_tcp_rtt, initial_alpha_value";

impl CcConfig {
    pub fn validate(&self) -> Result<(), CcError> {
        if !(1..=1_600_000).contains(&self.line_mbps) {
            return Err(CcError::LineRate(self.line_mbps));
        }
        if self.np.cnp_dscp > 63 {
            return Err(CcError::Dscp(self.np.cnp_dscp));
        }
        if self.np.min_time_between_cnps > 1_000_000 {
            return Err(CcError::CnpInterval(self.np.min_time_between_cnps));
        }
        self.rp.validate()?;
        Ok(())
    }

    /// This configuration changed by `spec` (`KEY=VALUE,...`, [`KEYS`]; the mlx5 `roce_np`
    /// and `roce_rp` names for the parameters), then validated as a whole.
    pub fn with_spec(&self, spec: &str) -> Result<CcConfig, CcError> {
        let mut c = *self;
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| CcError::Syntax(spec.to_string()))?;
            let bad = |what| CcError::Value {
                key: k.to_string(),
                value: v.to_string(),
                what,
            };
            let switch = || match v {
                "on" | "1" => Ok(true),
                "off" | "0" => Ok(false),
                _ => Err(bad("on or off")),
            };
            // Digits only: u32 parsing would take a leading '+'.
            let num = || -> Result<u32, CcError> {
                if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("a number"));
                }
                v.parse().map_err(|_| bad("a 32-bit number"))
            };
            match k {
                "ecn" => c.ecn = switch()?,
                "dcqcn" => c.dcqcn = switch()?,
                "line-mbps" => c.line_mbps = num()?,
                "min_time_between_cnps" => c.np.min_time_between_cnps = num()?,
                "cnp_dscp" => {
                    c.np.cnp_dscp = u8::try_from(num()?).map_err(|_| bad("a DSCP (0..=63)"))?
                }
                "rpg_time_reset" => c.rp.rpg_time_reset = num()?,
                "rpg_byte_reset" => c.rp.rpg_byte_reset = num()?,
                "rpg_threshold" => c.rp.rpg_threshold = num()?,
                "rpg_ai_rate" => c.rp.rpg_ai_rate = num()?,
                "rpg_hai_rate" => c.rp.rpg_hai_rate = num()?,
                "rpg_min_rate" => c.rp.rpg_min_rate = num()?,
                "rate_reduce_monitor_period" => c.rp.rate_reduce_monitor_period = num()?,
                "dce_tcp_g" => c.rp.dce_tcp_g = num()?,
                "dce_tcp_rtt" => c.rp.dce_tcp_rtt = num()?,
                "initial_alpha_value" => c.rp.initial_alpha_value = num()?,
                _ => return Err(CcError::Key(k.to_string())),
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// The settings as `with_spec` takes them (every key).
    pub fn spec(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        let (np, rp) = (&self.np, &self.rp);
        format!(
            "ecn={},dcqcn={},line-mbps={},min_time_between_cnps={},cnp_dscp={},\
             rpg_time_reset={},rpg_byte_reset={},rpg_threshold={},rpg_ai_rate={},\
             rpg_hai_rate={},rpg_min_rate={},rate_reduce_monitor_period={},dce_tcp_g={},\
             dce_tcp_rtt={},initial_alpha_value={}",
            on(self.ecn),
            on(self.dcqcn),
            self.line_mbps,
            np.min_time_between_cnps,
            np.cnp_dscp,
            rp.rpg_time_reset,
            rp.rpg_byte_reset,
            rp.rpg_threshold,
            rp.rpg_ai_rate,
            rp.rpg_hai_rate,
            rp.rpg_min_rate,
            rp.rate_reduce_monitor_period,
            rp.dce_tcp_g,
            rp.dce_tcp_rtt,
            rp.initial_alpha_value
        )
    }

    /// Parameter `id` ([`cc_param`]) as QUERY_CC reports it; `None` for an unknown id.
    pub fn param(&self, id: u32) -> Option<u32> {
        let (np, rp) = (&self.np, &self.rp);
        Some(match id {
            cc_param::ECN_ENABLE => u32::from(self.ecn),
            cc_param::DCQCN_ENABLE => u32::from(self.dcqcn),
            cc_param::NP_MIN_TIME_BETWEEN_CNPS => np.min_time_between_cnps,
            cc_param::NP_CNP_DSCP => u32::from(np.cnp_dscp),
            cc_param::RP_TIME_RESET => rp.rpg_time_reset,
            cc_param::RP_BYTE_RESET => rp.rpg_byte_reset,
            cc_param::RP_THRESHOLD => rp.rpg_threshold,
            cc_param::RP_AI_RATE => rp.rpg_ai_rate,
            cc_param::RP_HAI_RATE => rp.rpg_hai_rate,
            cc_param::RP_MIN_RATE => rp.rpg_min_rate,
            cc_param::RP_RATE_REDUCE_MONITOR_PERIOD => rp.rate_reduce_monitor_period,
            cc_param::RP_DCE_TCP_G => rp.dce_tcp_g,
            cc_param::RP_DCE_TCP_RTT => rp.dce_tcp_rtt,
            cc_param::RP_INITIAL_ALPHA_VALUE => rp.initial_alpha_value,
            cc_param::LINE_RATE_MBPS => self.line_mbps,
            _ => return None,
        })
    }

    /// This configuration with parameter `id` set to `value` (SET_CC), validated as a whole.
    /// The line rate is the host's (its link), not the guest's: it is refused as read-only.
    pub fn with_param(&self, id: u32, value: u32) -> Result<CcConfig, ParamError> {
        let mut c = *self;
        let switch = |v: u32| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ParamError::Value),
        };
        let (np, rp) = (&mut c.np, &mut c.rp);
        match id {
            cc_param::ECN_ENABLE => c.ecn = switch(value)?,
            cc_param::DCQCN_ENABLE => c.dcqcn = switch(value)?,
            cc_param::NP_MIN_TIME_BETWEEN_CNPS => np.min_time_between_cnps = value,
            cc_param::NP_CNP_DSCP => np.cnp_dscp = u8::try_from(value).unwrap_or(u8::MAX),
            cc_param::RP_TIME_RESET => rp.rpg_time_reset = value,
            cc_param::RP_BYTE_RESET => rp.rpg_byte_reset = value,
            cc_param::RP_THRESHOLD => rp.rpg_threshold = value,
            cc_param::RP_AI_RATE => rp.rpg_ai_rate = value,
            cc_param::RP_HAI_RATE => rp.rpg_hai_rate = value,
            cc_param::RP_MIN_RATE => rp.rpg_min_rate = value,
            cc_param::RP_RATE_REDUCE_MONITOR_PERIOD => rp.rate_reduce_monitor_period = value,
            cc_param::RP_DCE_TCP_G => rp.dce_tcp_g = value,
            cc_param::RP_DCE_TCP_RTT => rp.dce_tcp_rtt = value,
            cc_param::RP_INITIAL_ALPHA_VALUE => rp.initial_alpha_value = value,
            _ => return Err(ParamError::Param),
        }
        c.validate().map_err(|_| ParamError::Value)?;
        Ok(c)
    }

    fn line_bps(&self) -> u64 {
        u64::from(self.line_mbps) * 1_000_000
    }
}

/// A NIC's settings as the host changes them (command line, control socket), shared with its
/// engine, which takes a new value at its next step: a generation counter keeps the data
/// path off the lock. The host also asks the engine for a [`CcReport`] through it (the
/// engine thread answers within its longest sleep).
#[derive(Debug, Default)]
pub struct CcKnob {
    generation: AtomicU64,
    cfg: Mutex<CcConfig>,
    /// Reports asked for, and the last one answered.
    report_wanted: AtomicU64,
    report_given: AtomicU64,
    report: Mutex<CcReport>,
}

/// Rate-limited QPs a report lists at most.
pub const MAX_REPORT_QPS: usize = 64;

/// One rate-limited QP in a [`CcReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpRate {
    pub qpn: u32,
    /// DCQCN's current and target rates (b/s).
    pub rate_bps: u64,
    pub target_bps: u64,
    /// alpha, in 1/1024.
    pub alpha: u32,
}

/// What a NIC's congestion and flow control did (`cc nic:N` on the control socket): its port
/// counters and the DCQCN state of the QPs it holds below line rate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CcReport {
    pub ecn_marked: u64,
    pub cnps_sent: u64,
    pub cnps_handled: u64,
    pub cnps_ignored: u64,
    pub pfc_frames_rx: u64,
    /// By QP number, at most [`MAX_REPORT_QPS`].
    pub qps: Vec<QpRate>,
    /// Rate-limited QPs beyond those listed.
    pub more_qps: usize,
}

impl CcReport {
    /// The report as lines for the control socket, each starting with `prefix`.
    pub fn lines(&self, prefix: &str) -> Vec<String> {
        let mut v = vec![format!(
            "{prefix} counters ecn_marked={} cnps_sent={} cnps_handled={} cnps_ignored={} pfc_frames_rx={} rate_limited_qps={}",
            self.ecn_marked,
            self.cnps_sent,
            self.cnps_handled,
            self.cnps_ignored,
            self.pfc_frames_rx,
            self.qps.len() + self.more_qps
        )];
        for q in &self.qps {
            v.push(format!(
                "{prefix} qp {} rate-mbps={:.1} target-mbps={:.1} alpha={:.4}",
                q.qpn,
                q.rate_bps as f64 / 1e6,
                q.target_bps as f64 / 1e6,
                f64::from(q.alpha) / 1024.0
            ));
        }
        if self.more_qps > 0 {
            v.push(format!(
                "{prefix} and {} more rate-limited QPs",
                self.more_qps
            ));
        }
        v
    }
}

impl CcKnob {
    /// Validates and publishes `cfg`.
    pub fn set(&self, cfg: CcConfig) -> Result<(), CcError> {
        cfg.validate()?;
        *self.cfg.lock().unwrap_or_else(PoisonError::into_inner) = cfg;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Changes the settings by `f` under the knob's lock (no other writer between the read
    /// and the write), publishing what it returns; `f`'s error leaves them as they were.
    pub fn update<E>(
        &self,
        f: impl FnOnce(&CcConfig) -> Result<CcConfig, E>,
    ) -> Result<CcConfig, E> {
        let mut cfg = self.cfg.lock().unwrap_or_else(PoisonError::into_inner);
        let new = f(&cfg)?;
        *cfg = new;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(new)
    }

    /// The settings now.
    pub fn get(&self) -> CcConfig {
        *self.cfg.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Asks the engine for a report; returns the ticket [`CcKnob::wait_report`] waits for.
    pub fn request_report(&self) -> u64 {
        self.report_wanted.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The report of `ticket` or a later one, if the engine gave it within `timeout`.
    pub fn wait_report(&self, ticket: u64, timeout: std::time::Duration) -> Option<CcReport> {
        let start = std::time::Instant::now();
        loop {
            if self.report_given.load(Ordering::Acquire) >= ticket {
                return Some(
                    self.report
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone(),
                );
            }
            if start.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Sources a UD QP remembers its last CNP to (the oldest is forgotten first).
pub const UD_CNP_FLOWS: usize = 64;

/// A UD packet's source: its address (a GID, IPv4-mapped for IPv4) and QP.
pub type UdFlow = ([u8; 16], u32);

/// Congestion state of one QP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QpCc {
    /// When this QP last sent a CNP (us); an RC QP's only peer.
    pub last_cnp: Option<u64>,
    /// A UD QP's: per source, when it last sent it a CNP (at most [`UD_CNP_FLOWS`]).
    pub ud_last_cnp: Vec<(UdFlow, u64)>,
    /// DCQCN's limiter, from the first CNP on.
    pub limiter: Option<RateLimiter>,
}

impl QpCc {
    /// Whether a UD QP may send source `flow` a CNP at `now` (us).
    pub fn ud_flow_may_notify(&self, flow: UdFlow, now: u64, interval: u64) -> bool {
        self.ud_last_cnp
            .iter()
            .find(|(f, _)| *f == flow)
            .is_none_or(|(_, t)| now >= t.saturating_add(interval))
    }

    /// Notes a CNP to `flow` at `now`.
    pub fn ud_flow_notified(&mut self, flow: UdFlow, now: u64) {
        if let Some(e) = self.ud_last_cnp.iter_mut().find(|(f, _)| *f == flow) {
            e.1 = now;
            return;
        }
        if self.ud_last_cnp.len() >= UD_CNP_FLOWS {
            if let Some(oldest) = (0..self.ud_last_cnp.len()).min_by_key(|&i| self.ud_last_cnp[i].1)
            {
                self.ud_last_cnp.swap_remove(oldest);
            }
        }
        self.ud_last_cnp.push((flow, now));
    }

    /// Whether the QP may send a packet at `now` (us): its DCQCN pacing.
    pub fn may_send(&self, now: u64) -> bool {
        self.limiter
            .as_ref()
            .is_none_or(|l| l.may_send(now.saturating_mul(1000)))
    }

    /// The earliest limiter timer, or when a paced packet may leave (us).
    pub fn deadline(&self, now: u64) -> Option<u64> {
        let l = self.limiter.as_ref()?;
        let pace = l
            .send_at(now.saturating_mul(1000))
            .map(|ns| ns.div_ceil(1000));
        match (l.next_timer(), pace) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Engine {
    /// The congestion control settings.
    pub fn cc(&self) -> &CcConfig {
        &self.cc
    }

    /// DCQCN's current rate of QP `qp_id` (b/s): the line rate when it has no limiter, `None`
    /// for no such QP.
    pub fn qp_rate(&self, qp_id: u32) -> Option<u64> {
        let q = self.qp(qp_id)?;
        Some(
            q.cc.limiter
                .as_ref()
                .map_or(self.cc.line_bps(), |l| l.rate()),
        )
    }

    /// New settings; QPs keep their limiters (a rate cut stays until recovered).
    pub fn set_cc(&mut self, cc: CcConfig) -> Result<(), CcError> {
        self.cc_knob.set(cc)?;
        self.take_host_cc();
        Ok(())
    }

    /// The settings as the knob holds them now (a host's change the engine has yet to take
    /// included): what QUERY_CC reports.
    pub fn cc_param(&self, id: u32) -> Option<u32> {
        self.cc_knob.get().param(id)
    }

    /// SET_CC: parameter `id` = `value`, validated with the rest, in effect at once.
    pub fn set_cc_param(&mut self, id: u32, value: u32) -> Result<CcConfig, ParamError> {
        let cfg = self.cc_knob.update(|c| c.with_param(id, value))?;
        self.take_host_cc();
        Ok(cfg)
    }

    /// Shares the host's settings knob with this engine (the fabric's control socket sets
    /// it), taking its value now.
    pub fn set_cc_knob(&mut self, knob: Arc<CcKnob>) {
        self.cc_knob = knob;
        self.cc_generation = u64::MAX;
        self.take_host_cc();
    }

    /// Answers the host's request for a [`CcReport`], if there is one (the engine thread
    /// asks at every wake-up: an atomic load when there is none).
    pub fn serve_cc_report(&mut self) {
        let wanted = self.cc_knob.report_wanted.load(Ordering::Acquire);
        if self.cc_knob.report_given.load(Ordering::Acquire) >= wanted {
            return;
        }
        let c = &self.counters;
        let mut r = CcReport {
            ecn_marked: c.ecn_marked,
            cnps_sent: c.cnps_sent,
            cnps_handled: c.cnps_handled,
            cnps_ignored: c.cnps_ignored,
            pfc_frames_rx: c.pfc_frames_rx,
            ..CcReport::default()
        };
        for (qpn, qp) in self.qps.iter() {
            let Some(l) = qp.cc.limiter.as_ref().filter(|l| l.active()) else {
                continue;
            };
            if r.qps.len() < MAX_REPORT_QPS {
                r.qps.push(QpRate {
                    qpn,
                    rate_bps: l.rate(),
                    target_bps: l.target(),
                    alpha: l.alpha(),
                });
            } else {
                r.more_qps += 1;
            }
        }
        *self
            .cc_knob
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = r;
        self.cc_knob.report_given.store(wanted, Ordering::Release);
    }

    /// The knob's value, if the host changed it since the engine last looked.
    pub(super) fn take_host_cc(&mut self) {
        let g = self.cc_knob.generation();
        if g != self.cc_generation {
            self.cc_generation = g;
            self.cc = self.cc_knob.get();
        }
    }

    /// The traffic class a packet leaves with: ECT(0) when ECN is on.
    pub(super) fn tx_traffic_class(&self, tclass: u8) -> u8 {
        if self.cc.ecn {
            (tclass & !3) | Ecn::Ect0.bits()
        } else {
            tclass
        }
    }

    /// The notification point: a packet of `h` that came marked CE makes its RC QP send a
    /// CNP to its peer, rate-limited per QP; a UD QP sends it to the packet's source QP on
    /// the packet's reverse path, rate-limited per source (`ud_notify`).
    pub(super) fn notify_congestion(&mut self, env: &Env<'_>, h: &Headers) {
        let tclass = match &h.ip {
            crate::wire::IpHeader::V4(v4) => v4.traffic_class,
            crate::wire::IpHeader::V6(v6) => v6.traffic_class,
        };
        if !self.cc.ecn || Ecn::from_bits(tclass) != Ecn::Ce || h.bth.opcode == op::CNP {
            return;
        }
        let qpn = h.bth.dest_qp;
        let interval = u64::from(self.cc.np.min_time_between_cnps);
        let dscp = self.cc.np.cnp_dscp;
        let Some(qp) = self.qp(qpn) else { return };
        if qp.qp_type == QP_TYPE_UD && qp.can_receive() {
            self.ud_notify(env, h);
            return;
        }
        if qp.qp_type != QP_TYPE_RC || !qp.can_receive() {
            return;
        }
        if qp
            .cc
            .last_cnp
            .is_some_and(|t| env.now_us < t.saturating_add(interval))
        {
            return;
        }
        let attrs = QpAttrs {
            traffic_class: dscp << 2,
            ..qp.attrs
        };
        let b = crate::wire::bth::Bth {
            becn: true,
            ..bth(op::CNP, attrs.dest_qpn, 0)
        };
        match self.transmit(&attrs, b, Default::default(), &CNP_PAYLOAD) {
            Ok(_) => {
                self.counters.cnps_sent += 1;
                if let Some(qp) = self.qp_mut(qpn) {
                    qp.cc.last_cnp = Some(env.now_us);
                }
            }
            // The next CE packet tries again.
            Err(e) => log::debug!("QP {qpn}: CNP not sent: {e}"),
        }
    }

    /// The notification point of UD QP `h.bth.dest_qp` for a CE-marked packet of `h`: a CNP
    /// to the source QP (DETH) at the packet's source address and MAC (its VLAN kept), from
    /// this NIC's GID the packet was for, at most one per source (address and QP) per
    /// `min_time_between_cnps`. Only a packet the QP would take (its Q_Key) counts.
    fn ud_notify(&mut self, env: &Env<'_>, h: &Headers) {
        let Some(deth) = h.ext.deth else { return };
        let (src, dst, v4) = match &h.ip {
            crate::wire::IpHeader::V4(ip) => (v4_mapped(ip.src), v4_mapped(ip.dst), true),
            crate::wire::IpHeader::V6(ip) => (ip.src, ip.dst, false),
        };
        let Some(sgid_index) = self
            .gids
            .iter()
            .position(|g| g.as_ref().is_some_and(|g| g.gid == dst))
        else {
            return;
        };
        let qpn = h.bth.dest_qp;
        let now = env.now_us;
        let interval = u64::from(self.cc.np.min_time_between_cnps);
        let Some(qp) = self.qp_mut(qpn) else { return };
        if qp.attrs.qkey != deth.qkey {
            return;
        }
        let flow = (src, deth.src_qp & 0xff_ffff);
        if !qp.cc.ud_flow_may_notify(flow, now, interval) {
            return;
        }
        let mut av_flags = if v4 { AV_FLAG_IPV4 } else { 0 };
        let mut vlan_id = 0;
        if let Some(v) = h.eth.vlan {
            av_flags |= AV_FLAG_VLAN;
            vlan_id = v.vid;
        }
        let attrs = QpAttrs {
            sgid_index: sgid_index as u8,
            dgid: src,
            dmac: h.eth.src,
            traffic_class: self.cc.np.cnp_dscp << 2,
            hop_limit: 64,
            av_flags,
            vlan_id,
            dest_qpn: flow.1,
            ..QpAttrs::default()
        };
        let b = crate::wire::bth::Bth {
            becn: true,
            ..bth(op::CNP, flow.1, 0)
        };
        match self.transmit(&attrs, b, Default::default(), &CNP_PAYLOAD) {
            Ok(_) => {
                self.counters.cnps_sent += 1;
                if let Some(qp) = self.qp_mut(qpn) {
                    qp.cc.ud_flow_notified(flow, now);
                }
            }
            Err(e) => log::debug!("QP {qpn}: UD CNP not sent: {e}"),
        }
    }

    /// The reaction point: a CNP for QP `bth.dest_qp` (RC or UD).
    pub(super) fn rx_cnp(&mut self, env: &Env<'_>, h: &Headers) {
        let cc = self.cc;
        let handled = cc.dcqcn
            && self.qp_mut(h.bth.dest_qp).is_some_and(|qp| {
                if qp.qp_type != QP_TYPE_RC && qp.qp_type != QP_TYPE_UD {
                    return false;
                }
                qp.cc
                    .limiter
                    .get_or_insert_with(|| RateLimiter::new(cc.line_bps(), &cc.rp))
                    .on_cnp(env.now_us, &cc.rp);
                true
            });
        if handled {
            self.counters.cnps_handled += 1;
        } else {
            self.counters.cnps_ignored += 1;
        }
    }

    /// QP `qp_id` sent a frame of `len` bytes: paced as the line carries it (with preamble,
    /// FCS and gap), so a limiter at line rate lets exactly the line's share through.
    pub(super) fn cc_sent(&mut self, env: &Env<'_>, qp_id: u32, len: usize) {
        let rp = self.cc.rp;
        if let Some(l) = self.qp_mut(qp_id).and_then(|q| q.cc.limiter.as_mut()) {
            let wire = len as u64 + crate::fabric::egress::WIRE_OVERHEAD;
            l.on_sent(wire, env.now_us.saturating_mul(1000), &rp);
        }
    }

    /// Runs the limiters' timers; a limiter back at line rate with alpha decayed is dropped.
    pub(super) fn cc_tick(&mut self, env: &Env<'_>) {
        let rp = self.cc.rp;
        let mut next = self.qps.next_id(0);
        while let Some(id) = next {
            next = self.qps.next_id(id + 1);
            let mut paced_ud = false;
            if let Some(q) = self.qp_mut(id) {
                if let Some(l) = q.cc.limiter.as_mut() {
                    l.tick(env.now_us, &rp);
                    paced_ud = q.qp_type == QP_TYPE_UD;
                    if !l.active() {
                        q.cc.limiter = None;
                    }
                }
            }
            // A paced UD QP's SENDs wait in its SQ (`ud_to_wire`): the ones now due go.
            if paced_ud && self.qp(id).is_some_and(|q| q.cc.may_send(env.now_us)) {
                self.process_sq(env, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_changes_what_it_names_and_round_trips() {
        let base = CcConfig::default();
        let c = base
            .with_spec("ecn=on, dcqcn=1,line-mbps=25000,rpg_ai_rate=5,cnp_dscp=26")
            .unwrap();
        assert!(c.ecn && c.dcqcn);
        assert_eq!(
            (c.line_mbps, c.rp.rpg_ai_rate, c.np.cnp_dscp),
            (25_000, 5, 26)
        );
        assert_eq!(c.rp.rpg_hai_rate, base.rp.rpg_hai_rate);
        assert_eq!(base.with_spec(&c.spec()), Ok(c));
        assert_eq!(base.with_spec(""), Ok(base));
    }

    #[test]
    fn hostile_specs_are_refused_whole() {
        let base = CcConfig::default();
        let err = |s: &str| base.with_spec(s).unwrap_err();
        assert!(matches!(err("ecn"), CcError::Syntax(_)));
        assert!(matches!(err("ecn=maybe"), CcError::Value { .. }));
        assert!(matches!(err("bogus=1"), CcError::Key(_)));
        assert!(matches!(err("line-mbps=+5"), CcError::Value { .. }));
        assert!(matches!(
            err("line-mbps=99999999999"),
            CcError::Value { .. }
        ));
        assert!(matches!(err("line-mbps=0"), CcError::LineRate(0)));
        assert!(matches!(err("cnp_dscp=300"), CcError::Value { .. }));
        assert!(matches!(err("cnp_dscp=64"), CcError::Dscp(64)));
        assert!(matches!(err("ecn=on,dce_tcp_g=1024"), CcError::Rp(_)));
        assert!(matches!(err("rpg_time_reset=0"), CcError::Rp(_)));
    }
}
