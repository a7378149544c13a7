// SPDX-License-Identifier: GPL-2.0

//! Work requests of kernel consumers (`struct ib_send_wr`, `struct ib_recv_wr`) and the
//! `post_send`/`post_recv` callbacks.
//!
//! ib_core hands a provider a linked list of requests whose concrete type depends on the
//! opcode (`ib_rdma_wr` for RDMA, `ib_ud_wr` for datagram QPs). The iterators here decode each
//! one into a safe [`SendWr`]/[`RecvWr`] and remember which one was handed out last, so the
//! callback can report the failing request (`bad_wr`) for the driver.

use super::{ah::AhObject, device::Device, mr::mr_data, qp::qp_data, Access, Driver};
use crate::{bindings, ffi::c_int, prelude::*};
use core::marker::PhantomData;

/// A scatter/gather element (`struct ib_sge`), copied out of the consumer's list.
///
/// For a request posted without [`SendWr::inline`], `addr` is a DMA address under `lkey`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge(bindings::ib_sge);

impl Sge {
    /// Address of the first byte.
    pub fn addr(&self) -> u64 {
        self.0.addr
    }

    /// Length in bytes.
    pub fn length(&self) -> u32 {
        self.0.length
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.0.lkey
    }
}

/// The scatter/gather list of a work request.
///
/// Consumers need not align it: ib_iser's receive descriptors are `__packed` structs with the
/// `ib_sge` inside, so its `sg_list` pointers are odd. Borrowing the list as a `&[Sge]` was
/// undefined behaviour there (Rust's precondition check panicked in the first iSER login);
/// each element is read with an unaligned load instead.
///
/// # Invariants
///
/// If `len > 0`, `ptr` points to `len` initialised `ib_sge`, at any alignment, that stay valid
/// and unchanged for `'a`.
#[derive(Clone, Copy)]
pub struct SgeList<'a> {
    ptr: *const bindings::ib_sge,
    len: usize,
    _p: PhantomData<&'a bindings::ib_sge>,
}

impl<'a> SgeList<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Sge> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i < len`, so by the type invariant `ptr + i` is a readable `ib_sge` for
        // `'a`; `read_unaligned` allows any alignment.
        Some(Sge(unsafe { self.ptr.add(i).read_unaligned() }))
    }

    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = Sge> + 'a {
        let list = *self;
        (0..list.len).filter_map(move |i| list.get(i))
    }
}

/// Borrows `num` SGEs at `list`.
///
/// # Safety
///
/// If `num > 0`, `list` is null or points to `num` initialised `ib_sge` (at any alignment)
/// that stay valid for `'a` (the post call).
unsafe fn sges<'a>(list: *const bindings::ib_sge, num: c_int) -> Result<SgeList<'a>> {
    let n = usize::try_from(num).map_err(|_| EINVAL)?;
    if n > 0 && list.is_null() {
        return Err(EINVAL);
    }
    // INVARIANT: `n == 0`, or `list` is non-null and then valid for `n` elements (caller).
    Ok(SgeList {
        ptr: list,
        len: n,
        _p: PhantomData,
    })
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND, optionally with immediate data (host order) or invalidating a remote key.
    Send {
        /// Immediate data, as the host-order integer of the big-endian wire value.
        imm: Option<u32>,
        /// Remote key the responder invalidates (`IB_WR_SEND_WITH_INV`).
        invalidate: Option<u32>,
    },
    /// RDMA WRITE, optionally with immediate data.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data (host order).
        imm: Option<u32>,
    },
    /// RDMA READ into the SGEs.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Invalidates a local key.
    LocalInv {
        /// The key.
        rkey: u32,
    },
    /// Fast registration (`IB_WR_REG_MR`, `struct ib_reg_wr`) of [`SendWr::mr`] as `ib_map_mr_sg`
    /// left it: the pages the driver collected, `iova`, `length` and `page_size`.
    RegMr {
        /// The key to register (the consumer updated the MR's key byte before posting, with
        /// `ib_update_fast_reg_key`).
        key: u32,
        /// Access rights.
        access: Access,
        /// Device address of the first byte (`mr->iova`).
        iova: u64,
        /// Length in bytes (`mr->length`).
        length: u64,
        /// Page size of the page list (`mr->page_size`).
        page_size: u32,
    },
}

/// The destination of a datagram (`struct ib_ud_wr`).
pub struct UdDest<'a, T: Driver> {
    /// Address handle.
    pub ah: &'a T::Ah,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key.
    pub remote_qkey: u32,
}

/// A decoded send work request.
pub struct SendWr<'a, T: Driver> {
    /// Consumer's identifier (or `wr_cqe` pointer), returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Data (local side).
    pub sges: SgeList<'a>,
    /// A completion is wanted (`IB_SEND_SIGNALED`).
    pub signaled: bool,
    /// The responder should raise a solicited event (`IB_SEND_SOLICITED`).
    pub solicited: bool,
    /// Wait for earlier RDMA READs first (`IB_SEND_FENCE`).
    pub fence: bool,
    /// For datagram QPs: the destination.
    pub ud: Option<UdDest<'a, T>>,
    /// For [`SendOp::RegMr`]: the driver data of the MR to register.
    pub mr: Option<&'a T::Mr>,
    inline: bool,
}

impl<T: Driver> SendWr<'_, T> {
    /// Whether the data is inline (`IB_SEND_INLINE`): the SGEs then hold kernel virtual
    /// addresses whose bytes the provider copies, see [`SendWr::inline_segment`].
    pub fn inline(&self) -> bool {
        self.inline
    }

    /// Bytes of SGE `i` of an inline request; `None` if the request is not inline or has no
    /// such SGE.
    pub fn inline_segment(&self, i: usize) -> Option<&[u8]> {
        if !self.inline {
            return None;
        }
        let s = self.sges.get(i)?;
        if s.length() == 0 {
            return Some(&[]);
        }
        let ptr = s.addr() as usize as *const u8;
        if ptr.is_null() {
            return None;
        }
        // SAFETY: With `IB_SEND_INLINE`, ib_post_send's contract is that each SGE's address is
        // a kernel virtual address of `length` readable bytes for the duration of the call,
        // which outlives `self`.
        Some(unsafe { core::slice::from_raw_parts(ptr, s.length() as usize) })
    }

    /// Total bytes of the SGEs (saturating).
    pub fn total_length(&self) -> u32 {
        self.sges
            .iter()
            .fold(0u32, |acc, s| acc.saturating_add(s.length()))
    }
}

/// The send requests of one `post_send` call, decoded one at a time.
pub struct SendWrs<'a, T: Driver> {
    next: *const bindings::ib_send_wr,
    last: *const bindings::ib_send_wr,
    ud: bool,
    _p: PhantomData<(&'a bindings::ib_send_wr, T)>,
}

impl<'a, T: Driver> SendWrs<'a, T> {
    /// Decodes `wr`.
    ///
    /// # Safety
    ///
    /// `wr` is a valid request of a QP of driver `T` (datagram type iff `ud`) for `'a`, at any
    /// alignment: ib_isert chains its RDMA requests to an `ib_send_wr` inside a `__packed`
    /// descriptor, so the request and its container are copied out with unaligned loads.
    unsafe fn decode(wr: *const bindings::ib_send_wr, ud: bool) -> Result<SendWr<'a, T>> {
        // SAFETY: Guaranteed by the caller.
        let w = unsafe { wr.read_unaligned() };
        let flags = w.send_flags;
        // SAFETY: The list and count come from the consumer's request.
        let sges = unsafe { sges(w.sg_list, w.num_sge) }?;
        // SAFETY: `ex` is a plain union of `__be32` values.
        let ex = unsafe { w.ex.imm_data };
        let imm = u32::from_be(ex);
        let mut reg_mr = None;
        let op = match w.opcode {
            bindings::ib_wr_opcode_IB_WR_SEND => SendOp::Send {
                imm: None,
                invalidate: None,
            },
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM => SendOp::Send {
                imm: Some(imm),
                invalidate: None,
            },
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV if !ud => SendOp::Send {
                imm: None,
                // SAFETY: As above; for SEND_WITH_INV the union holds the key.
                invalidate: Some(unsafe { w.ex.invalidate_rkey }),
            },
            bindings::ib_wr_opcode_IB_WR_LOCAL_INV if !ud => SendOp::LocalInv {
                // SAFETY: As above.
                rkey: unsafe { w.ex.invalidate_rkey },
            },
            bindings::ib_wr_opcode_IB_WR_REG_MR if !ud => {
                // SAFETY: REG_MR is posted as `ib_reg_wr`, whose first member is `wr`.
                let r = unsafe { wr.cast::<bindings::ib_reg_wr>().read_unaligned() };
                if r.mr.is_null() {
                    return Err(EINVAL);
                }
                // SAFETY: The consumer holds the MR, an MR of this device, during the call;
                // its iova/length/page_size were set by `ib_map_mr_sg` before posting. The MR
                // is ib_core's live object: read field by field, not referenced.
                let (iova, length, page_size) =
                    unsafe { ((*r.mr).iova, (*r.mr).length, (*r.mr).page_size) };
                reg_mr = Some(r.mr);
                SendOp::RegMr {
                    key: r.key,
                    access: Access::from_raw(r.access as u32),
                    iova,
                    length,
                    page_size,
                }
            }
            op @ (bindings::ib_wr_opcode_IB_WR_RDMA_WRITE
            | bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
            | bindings::ib_wr_opcode_IB_WR_RDMA_READ)
                if !ud =>
            {
                // SAFETY: RDMA opcodes are posted as `ib_rdma_wr`, whose first member is `wr`.
                let r = unsafe { wr.cast::<bindings::ib_rdma_wr>().read_unaligned() };
                match op {
                    bindings::ib_wr_opcode_IB_WR_RDMA_READ => SendOp::RdmaRead {
                        remote_addr: r.remote_addr,
                        rkey: r.rkey,
                    },
                    bindings::ib_wr_opcode_IB_WR_RDMA_WRITE => SendOp::RdmaWrite {
                        remote_addr: r.remote_addr,
                        rkey: r.rkey,
                        imm: None,
                    },
                    _ => SendOp::RdmaWrite {
                        remote_addr: r.remote_addr,
                        rkey: r.rkey,
                        imm: Some(imm),
                    },
                }
            }
            _ => return Err(EINVAL),
        };
        let dest = if ud {
            // SAFETY: Requests to datagram QPs are `ib_ud_wr`, whose first member is `wr`.
            let u = unsafe { wr.cast::<bindings::ib_ud_wr>().read_unaligned() };
            if u.ah.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: A live AH of this device, held by the consumer during the call.
            let ah = unsafe { (*u.ah.cast::<AhObject<T>>()).data.assume_init_ref() };
            Some(UdDest {
                ah,
                remote_qpn: u.remote_qpn,
                remote_qkey: u.remote_qkey,
            })
        } else {
            None
        };
        Ok(SendWr {
            // SAFETY: `wr_id` and `wr_cqe` share the union's 64 bits.
            wr_id: unsafe { w.__bindgen_anon_1.wr_id },
            op,
            sges,
            signaled: flags & bindings::ib_send_flags_IB_SEND_SIGNALED != 0,
            solicited: flags & bindings::ib_send_flags_IB_SEND_SOLICITED != 0,
            fence: flags & bindings::ib_send_flags_IB_SEND_FENCE != 0,
            ud: dest,
            // SAFETY: A live MR of this device (driver `T`), held by the consumer for 'a.
            mr: reg_mr.map(|m| unsafe { mr_data::<T>(m) }),
            inline: flags & bindings::ib_send_flags_IB_SEND_INLINE != 0,
        })
    }
}

impl<'a, T: Driver> Iterator for SendWrs<'a, T> {
    type Item = Result<SendWr<'a, T>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next.is_null() {
            return None;
        }
        let wr = self.next;
        self.last = wr;
        // SAFETY: Every request of the list is valid for the call (`post_send` contract), at
        // any alignment (see `decode`).
        self.next = unsafe { wr.read_unaligned() }.next;
        // SAFETY: As above; `ud` was derived from the QP's type.
        Some(unsafe { Self::decode(wr, self.ud) })
    }
}

/// A decoded receive work request.
pub struct RecvWr<'a> {
    /// Consumer's identifier (or `wr_cqe` pointer).
    pub wr_id: u64,
    /// Buffers.
    pub sges: SgeList<'a>,
}

/// The receive requests of one `post_recv` call.
pub struct RecvWrs<'a> {
    next: *const bindings::ib_recv_wr,
    last: *const bindings::ib_recv_wr,
    _p: PhantomData<&'a bindings::ib_recv_wr>,
}

impl<'a> Iterator for RecvWrs<'a> {
    type Item = Result<RecvWr<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next.is_null() {
            return None;
        }
        let wr = self.next;
        self.last = wr;
        // SAFETY: Every request of the list is valid for the call (`post_recv` contract), at
        // any alignment (consumers embed requests in `__packed` descriptors).
        let w = unsafe { wr.read_unaligned() };
        self.next = w.next;
        // SAFETY: As above.
        let decoded = unsafe { sges(w.sg_list, w.num_sge) }.map(|sges| RecvWr {
            // SAFETY: `wr_id` and `wr_cqe` share the union's 64 bits.
            wr_id: unsafe { w.__bindgen_anon_1.wr_id },
            sges,
        });
        Some(decoded)
    }
}

/// `post_send`.
///
/// # Safety
///
/// Called by ib_core (possibly in atomic context) with a live kernel QP of driver `T`.
pub(crate) unsafe extern "C" fn post_send<T: Driver>(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_send_wr,
    bad_wr: *mut *const bindings::ib_send_wr,
) -> c_int {
    // SAFETY: The QP is live (function contract).
    let (dev, qt) = unsafe { (Device::<T>::from_raw((*qp).device), (*qp).qp_type) };
    let ud = qt == bindings::ib_qp_type_IB_QPT_UD || qt == bindings::ib_qp_type_IB_QPT_GSI;
    let mut wrs = SendWrs::<T> {
        next: wr,
        last: wr,
        ud,
        _p: PhantomData,
    };
    // SAFETY: As above; the data lives as long as the QP.
    let data = unsafe { qp_data::<T>(qp) };
    // SAFETY: Called from an ib_core callback.
    let r = unsafe { dev.with_data(|d| T::post_send(d, data, &mut wrs)) };
    match r {
        Ok(()) => 0,
        Err(e) => {
            if !bad_wr.is_null() {
                // SAFETY: `bad_wr` is valid for writes (callback contract).
                unsafe { *bad_wr = wrs.last };
            }
            e.to_errno()
        }
    }
}

/// `post_recv`.
///
/// # Safety
///
/// Called by ib_core (possibly in atomic context) with a live kernel QP of driver `T`.
pub(crate) unsafe extern "C" fn post_recv<T: Driver>(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_recv_wr,
    bad_wr: *mut *const bindings::ib_recv_wr,
) -> c_int {
    // SAFETY: The QP is live (function contract).
    let dev = unsafe { Device::<T>::from_raw((*qp).device) };
    let mut wrs = RecvWrs {
        next: wr,
        last: wr,
        _p: PhantomData,
    };
    // SAFETY: As above.
    let data = unsafe { qp_data::<T>(qp) };
    // SAFETY: Called from an ib_core callback.
    let r = unsafe { dev.with_data(|d| T::post_recv(d, data, &mut wrs)) };
    match r {
        Ok(()) => 0,
        Err(e) => {
            if !bad_wr.is_null() {
                // SAFETY: `bad_wr` is valid for writes (callback contract).
                unsafe { *bad_wr = wrs.last };
            }
            e.to_errno()
        }
    }
}

#[macros::kunit_tests(rust_infiniband_wr)]
mod tests {
    use super::*;

    #[test]
    fn an_unaligned_sge_list_is_read_whole() {
        // Two elements one byte into a buffer, as in ib_iser's packed descriptors.
        let want = [
            (0x1122_3344_5566_7788u64, 4096u32, 0xabcd_u32),
            (0x99, 1, 2),
        ];
        let mut buf = [0u8; 2 * core::mem::size_of::<bindings::ib_sge>() + 8];
        let p = buf.as_mut_ptr().wrapping_add(1).cast::<bindings::ib_sge>();
        for (i, &(addr, length, lkey)) in want.iter().enumerate() {
            // SAFETY: `buf` has room for both elements after its first byte.
            unsafe {
                p.add(i)
                    .write_unaligned(bindings::ib_sge { addr, length, lkey })
            };
        }
        // SAFETY: `p` points to two initialised elements in `buf`, which outlives the list.
        let list = match unsafe { sges(p, 2) } {
            Ok(l) => l,
            Err(_) => panic!("a list of two elements was refused"),
        };
        assert_eq!(list.len(), 2);
        let mut n = 0;
        for (s, &(addr, length, lkey)) in list.iter().zip(want.iter()) {
            assert_eq!((s.addr(), s.length(), s.lkey()), (addr, length, lkey));
            n += 1;
        }
        assert_eq!(n, 2);
        assert!(list.get(2).is_none());
    }

    #[test]
    fn empty_null_and_negative_lists() {
        // SAFETY: nothing is read from a list of no elements.
        assert!(matches!(unsafe { sges(core::ptr::null(), 0) }, Ok(l) if l.is_empty()));
        // SAFETY: a null list of elements is refused before anything is read.
        assert!(unsafe { sges(core::ptr::null(), 1) }.is_err());
        // SAFETY: as above, for a negative count.
        assert!(unsafe { sges(core::ptr::null(), -1) }.is_err());
    }
}
