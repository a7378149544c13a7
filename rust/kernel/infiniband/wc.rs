// SPDX-License-Identifier: GPL-2.0

//! Work completions of kernel CQs (`struct ib_wc`) and the `poll_cq`/`req_notify_cq`
//! callbacks.

use super::{cq::cq_data, device::Device, Driver};
use crate::{bindings, ffi::c_int, prelude::*};
use core::ptr::NonNull;

/// Completion status (`enum ib_wc_status`), the ones a RoCE device reports.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// Success.
    Success = bindings::ib_wc_status_IB_WC_SUCCESS,
    /// Local length error.
    LocLen = bindings::ib_wc_status_IB_WC_LOC_LEN_ERR,
    /// Local QP operation error.
    LocQpOp = bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
    /// Local protection error.
    LocProt = bindings::ib_wc_status_IB_WC_LOC_PROT_ERR,
    /// Flushed: the QP is in the error state.
    WrFlush = bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
    /// Memory window bind error.
    MwBind = bindings::ib_wc_status_IB_WC_MW_BIND_ERR,
    /// Remote invalid request.
    RemInvReq = bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
    /// Remote access error.
    RemAccess = bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR,
    /// Remote operation error.
    RemOp = bindings::ib_wc_status_IB_WC_REM_OP_ERR,
    /// Transport retries exhausted.
    RetryExc = bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR,
    /// RNR retries exhausted.
    RnrRetryExc = bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR,
    /// Fatal error.
    Fatal = bindings::ib_wc_status_IB_WC_FATAL_ERR,
    /// Any other error.
    General = bindings::ib_wc_status_IB_WC_GENERAL_ERR,
}

/// Completion opcode (`enum ib_wc_opcode`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND (any flavour) completed.
    Send = bindings::ib_wc_opcode_IB_WC_SEND,
    /// An RDMA WRITE completed.
    RdmaWrite = bindings::ib_wc_opcode_IB_WC_RDMA_WRITE,
    /// An RDMA READ completed.
    RdmaRead = bindings::ib_wc_opcode_IB_WC_RDMA_READ,
    /// A local invalidate completed.
    LocalInv = bindings::ib_wc_opcode_IB_WC_LOCAL_INV,
    /// A fast registration (`IB_WR_REG_MR`) completed.
    RegMr = bindings::ib_wc_opcode_IB_WC_REG_MR,
    /// A message was received.
    Recv = bindings::ib_wc_opcode_IB_WC_RECV,
    /// An RDMA WRITE with immediate data consumed a receive.
    RecvRdmaWithImm = bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM,
}

/// The network header a datagram receive carries in front of its data (in the 40-byte GRH
/// area), `enum rdma_network_type`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkHdr {
    /// An IPv4 header in bytes 20..40 (RoCEv2 over IPv4).
    Ipv4 = bindings::rdma_network_type_RDMA_NETWORK_IPV4,
    /// An IPv6 header (RoCEv2 over IPv6).
    Ipv6 = bindings::rdma_network_type_RDMA_NETWORK_IPV6,
}

/// A kernel QP as completions name it (`wc->qp`).
///
/// The provider gets it when the QP is created and keeps it with its own QP state; it is only
/// a name here: the abstractions never dereference it on the provider's behalf.
///
/// # Invariants
///
/// The pointer is the `ib_qp` of a kernel QP of the device, valid until `destroy_qp` succeeds.
#[derive(Clone, Copy)]
pub struct QpRef(NonNull<bindings::ib_qp>);

// SAFETY: The pointer is an opaque name copied into completions; it is never dereferenced.
unsafe impl Send for QpRef {}
// SAFETY: See `Send`.
unsafe impl Sync for QpRef {}

impl QpRef {
    pub(crate) fn new(qp: NonNull<bindings::ib_qp>) -> Self {
        Self(qp)
    }
}

/// A work completion.
#[derive(Clone, Copy)]
pub struct Wc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode (meaningful on success).
    pub opcode: WcOpcode,
    /// Vendor error code (on error).
    pub vendor_err: u32,
    /// Bytes transferred (receives: placed, including a datagram's GRH area).
    pub byte_len: u32,
    /// The QP.
    pub qp: QpRef,
    /// Immediate data (host order), if the message had some.
    pub imm: Option<u32>,
    /// The key a received SEND_WITH_INV invalidated.
    pub invalidated: Option<u32>,
    /// Source QP number (datagrams).
    pub src_qp: u32,
    /// Datagram receive: the network header in the GRH area.
    pub network: Option<NetworkHdr>,
    /// Datagram receive over a VLAN: the packet's 802.1Q TCI (ib_core's CM answers from
    /// the GID of that VLAN).
    pub vlan_tci: Option<u16>,
    /// Datagram receive: the source MAC, if the device reports it.
    pub smac: Option<[u8; 6]>,
}

impl Wc {
    fn write_to(&self, w: &mut bindings::ib_wc) {
        w.__bindgen_anon_1.wr_id = self.wr_id;
        w.status = self.status as u32;
        w.opcode = self.opcode as u32;
        w.vendor_err = self.vendor_err;
        w.byte_len = self.byte_len;
        w.qp = self.qp.0.as_ptr();
        w.src_qp = self.src_qp;
        w.slid = 0;
        w.pkey_index = 0;
        w.sl = 0;
        w.dlid_path_bits = 0;
        w.port_num = 1;
        w.smac = [0; 6];
        w.vlan_id = 0;
        w.network_hdr_type = 0;
        let mut flags = 0;
        // VLAN 0 is a priority tag, not a VLAN (as irdma reports it).
        if let Some(tci) = self.vlan_tci.filter(|t| t & 0xfff != 0) {
            flags |= bindings::ib_wc_flags_IB_WC_WITH_VLAN;
            w.vlan_id = tci & 0xfff;
            w.sl = (tci >> 13) as u8;
        }
        if let Some(mac) = self.smac {
            flags |= bindings::ib_wc_flags_IB_WC_WITH_SMAC;
            w.smac = mac;
        }
        w.ex.imm_data = 0;
        if let Some(imm) = self.imm {
            flags |= bindings::ib_wc_flags_IB_WC_WITH_IMM;
            w.ex.imm_data = imm.to_be();
        } else if let Some(key) = self.invalidated {
            flags |= bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE;
            w.ex.invalidate_rkey = key;
        }
        if let Some(n) = self.network {
            flags |=
                bindings::ib_wc_flags_IB_WC_GRH | bindings::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE;
            w.network_hdr_type = n as u8;
        }
        w.wc_flags = flags as c_int;
    }
}

/// The consumer's completion array of one `poll_cq` call.
pub struct WcSink<'a> {
    out: &'a mut [bindings::ib_wc],
    len: usize,
}

impl WcSink<'_> {
    /// Stores a completion; returns `false` (storing nothing) when the array is full.
    pub fn push(&mut self, wc: Wc) -> bool {
        match self.out.get_mut(self.len) {
            Some(slot) => {
                wc.write_to(slot);
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Whether no more completions fit.
    pub fn is_full(&self) -> bool {
        self.len >= self.out.len()
    }

    /// Completions stored so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was stored yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `poll_cq`.
///
/// # Safety
///
/// Called by ib_core with a live CQ of driver `T` and an array of `num` completions.
pub(crate) unsafe extern "C" fn poll_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    num: c_int,
    wc: *mut bindings::ib_wc,
) -> c_int {
    let n = match usize::try_from(num) {
        Ok(n) if n > 0 && !wc.is_null() => n,
        Ok(_) => return 0,
        Err(_) => return EINVAL.to_errno(),
    };
    // SAFETY: `wc` has room for `num` completions (callback contract); the consumer does not
    // look at it during the call.
    let out = unsafe { core::slice::from_raw_parts_mut(wc, n) };
    let mut sink = WcSink { out, len: 0 };
    // SAFETY: The CQ is live (function contract).
    let (dev, data) = unsafe { (Device::<T>::from_raw((*cq).device), cq_data::<T>(cq)) };
    // SAFETY: Called from an ib_core callback.
    match unsafe { dev.with_data(|d| T::poll_cq(d, data, &mut sink)) } {
        Ok(()) => sink.len as c_int,
        Err(e) => e.to_errno(),
    }
}

/// How a CQ is armed (`enum ib_cq_notify_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqNotify {
    /// Only solicited (and error) completions raise the event.
    pub solicited_only: bool,
    /// The caller wants to know whether completions are already waiting.
    pub report_missed: bool,
}

/// `req_notify_cq`.
///
/// # Safety
///
/// Called by ib_core (any context) with a live CQ of driver `T`.
pub(crate) unsafe extern "C" fn req_notify_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    flags: bindings::ib_cq_notify_flags,
) -> c_int {
    let how = CqNotify {
        solicited_only: flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED,
        report_missed: flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0,
    };
    // SAFETY: The CQ is live (function contract).
    let (dev, data) = unsafe { (Device::<T>::from_raw((*cq).device), cq_data::<T>(cq)) };
    // SAFETY: Called from an ib_core callback.
    match unsafe { dev.with_data(|d| T::req_notify_cq(d, data, how)) } {
        Ok(missed) => c_int::from(missed),
        Err(e) => e.to_errno(),
    }
}
