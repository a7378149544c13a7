// SPDX-License-Identifier: GPL-2.0

//! The irdma user ABI (`include/uapi/rdma/irdma-abi.h`, ABI version 5) that stock libirdma
//! speaks, encoded by hand at the documented byte offsets.

use kernel::prelude::*;

/// irdma user ABI version.
pub(crate) const IRDMA_ABI_VER: u32 = 5;
/// `hw_rev` we report: GEN_2, the generation rdma-core 56 and 65 handle alike.
pub(crate) const HW_REV_GEN_2: u8 = 2;
/// `irdma_alloc_ucontext_resp.comp_mask`: the caps in create_qp are the application's raw ones.
pub(crate) const ALLOC_UCTX_USE_RAW_ATTR: u64 = 1 << 0;
/// `irdma_alloc_ucontext_resp.comp_mask`: `min_hw_wq_size` is valid.
pub(crate) const ALLOC_UCTX_MIN_HW_WQ_SIZE: u64 = 1 << 1;
/// `feature_flags` bit 1, `IRDMA_FEATURE_CQ_RESIZE`: `ibv_resize_cq` works, and a CQ's
/// shadow area is a registration of its own instead of the page after the ring.
pub(crate) const FEATURE_CQ_RESIZE: u64 = 1 << 1;

/// `struct irdma_alloc_ucontext_req` (16 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AllocUcontextReq {
    pub(crate) userspace_ver: u8,
    pub(crate) comp_mask: u64,
}

impl AllocUcontextReq {
    pub(crate) const SIZE: usize = 16;

    pub(crate) fn decode(b: &[u8; Self::SIZE]) -> Self {
        let mut mask = [0u8; 8];
        mask.copy_from_slice(&b[8..16]);
        Self {
            userspace_ver: b[4],
            comp_mask: u64::from_le_bytes(mask),
        }
    }
}

/// `struct irdma_alloc_ucontext_resp` (80 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AllocUcontextResp {
    pub(crate) max_pds: u32,
    pub(crate) max_qps: u32,
    pub(crate) wq_size: u32,
    pub(crate) kernel_ver: u8,
    pub(crate) feature_flags: u64,
    pub(crate) db_mmap_key: u64,
    pub(crate) max_hw_wq_frags: u32,
    pub(crate) max_hw_read_sges: u32,
    pub(crate) max_hw_inline: u32,
    pub(crate) max_hw_rq_quanta: u32,
    pub(crate) max_hw_wq_quanta: u32,
    pub(crate) min_hw_cq_size: u32,
    pub(crate) max_hw_cq_size: u32,
    pub(crate) max_hw_sq_chunk: u16,
    pub(crate) hw_rev: u8,
    pub(crate) comp_mask: u64,
    pub(crate) min_hw_wq_size: u16,
}

impl AllocUcontextResp {
    pub(crate) const SIZE: usize = 80;

    pub(crate) fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.max_pds.to_le_bytes());
        b[4..8].copy_from_slice(&self.max_qps.to_le_bytes());
        b[8..12].copy_from_slice(&self.wq_size.to_le_bytes());
        b[12] = self.kernel_ver;
        b[16..24].copy_from_slice(&self.feature_flags.to_le_bytes());
        b[24..32].copy_from_slice(&self.db_mmap_key.to_le_bytes());
        b[32..36].copy_from_slice(&self.max_hw_wq_frags.to_le_bytes());
        b[36..40].copy_from_slice(&self.max_hw_read_sges.to_le_bytes());
        b[40..44].copy_from_slice(&self.max_hw_inline.to_le_bytes());
        b[44..48].copy_from_slice(&self.max_hw_rq_quanta.to_le_bytes());
        b[48..52].copy_from_slice(&self.max_hw_wq_quanta.to_le_bytes());
        b[52..56].copy_from_slice(&self.min_hw_cq_size.to_le_bytes());
        b[56..60].copy_from_slice(&self.max_hw_cq_size.to_le_bytes());
        b[60..62].copy_from_slice(&self.max_hw_sq_chunk.to_le_bytes());
        b[62] = self.hw_rev;
        b[64..72].copy_from_slice(&self.comp_mask.to_le_bytes());
        b[72..74].copy_from_slice(&self.min_hw_wq_size.to_le_bytes());
        b
    }
}

/// `struct irdma_alloc_pd_resp` (8 bytes).
pub(crate) struct AllocPdResp {
    pub(crate) pd_id: u32,
}

impl AllocPdResp {
    pub(crate) const SIZE: usize = 8;

    pub(crate) fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.pd_id.to_le_bytes());
        b
    }
}

/// Little-endian field readers for request decoding.
fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut q = [0u8; 8];
    q.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(q)
}

/// `irdma_mem_reg_req.reg_type`: an ordinary memory region.
pub(crate) const MEMREG_TYPE_MEM: u16 = 0;
/// `irdma_mem_reg_req.reg_type`: the rings and shadow area of a QP being created.
pub(crate) const MEMREG_TYPE_QP: u16 = 1;
/// `irdma_mem_reg_req.reg_type`: the ring of a CQ being created or resized, or its shadow
/// area (with [`FEATURE_CQ_RESIZE`] they are separate registrations).
pub(crate) const MEMREG_TYPE_CQ: u16 = 2;

/// `struct irdma_mem_reg_req` (8 bytes). For MEM registrations libirdma leaves the page
/// counts uninitialised, so they mean nothing there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemRegReq {
    pub(crate) reg_type: u16,
    pub(crate) cq_pages: u16,
    pub(crate) rq_pages: u16,
    pub(crate) sq_pages: u16,
}

impl MemRegReq {
    pub(crate) const SIZE: usize = 8;

    pub(crate) fn decode(b: &[u8; Self::SIZE]) -> Self {
        Self {
            reg_type: le_u16(b, 0),
            cq_pages: le_u16(b, 2),
            rq_pages: le_u16(b, 4),
            sq_pages: le_u16(b, 6),
        }
    }
}

/// `struct irdma_create_cq_req` (16 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CreateCqReq {
    pub(crate) user_cq_buf: u64,
    pub(crate) user_shadow_area: u64,
}

impl CreateCqReq {
    pub(crate) const SIZE: usize = 16;
    /// Shortest request accepted (i40iw-era libraries sent only the ring address).
    pub(crate) const MIN_SIZE: usize = 8;

    pub(crate) fn decode(b: &[u8; Self::SIZE]) -> Self {
        Self {
            user_cq_buf: le_u64(b, 0),
            user_shadow_area: le_u64(b, 8),
        }
    }
}

/// `struct irdma_resize_cq_req` (8 bytes): the new ring, registered as a CQ ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResizeCqReq {
    pub(crate) user_cq_buffer: u64,
}

impl ResizeCqReq {
    pub(crate) const SIZE: usize = 8;

    pub(crate) fn decode(b: &[u8; Self::SIZE]) -> Self {
        Self {
            user_cq_buffer: le_u64(b, 0),
        }
    }
}

/// `struct irdma_create_cq_resp` (8 bytes).
pub(crate) struct CreateCqResp {
    pub(crate) cq_id: u32,
    pub(crate) cq_size: u32,
}

impl CreateCqResp {
    pub(crate) const SIZE: usize = 8;

    pub(crate) fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.cq_id.to_le_bytes());
        b[4..8].copy_from_slice(&self.cq_size.to_le_bytes());
        b
    }
}

/// `struct irdma_create_qp_req`: 16 bytes from rdma-core 56, 32 from 65 (two legacy zero
/// qwords appended); both are accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CreateQpReq {
    pub(crate) user_wqe_bufs: u64,
    pub(crate) user_compl_ctx: u64,
}

impl CreateQpReq {
    pub(crate) const SIZE: usize = 16;

    pub(crate) fn decode(b: &[u8; Self::SIZE]) -> Self {
        Self {
            user_wqe_bufs: le_u64(b, 0),
            user_compl_ctx: le_u64(b, 8),
        }
    }
}

/// `irdma_create_qp_resp.qp_caps`: RDMA WRITE with immediate.
pub(crate) const QP_CAP_WRITE_WITH_IMM: u32 = 1 << 0;
/// `irdma_create_qp_resp.qp_caps`: SEND with immediate (also selects RoCE receive opcodes).
pub(crate) const QP_CAP_SEND_WITH_IMM: u32 = 1 << 1;
/// `irdma_create_qp_resp.qp_caps`: a RoCE QP.
pub(crate) const QP_CAP_ROCE: u32 = 1 << 2;

/// `struct irdma_create_qp_resp` (24 bytes).
pub(crate) struct CreateQpResp {
    pub(crate) qp_id: u32,
    pub(crate) actual_sq_size: u32,
    pub(crate) actual_rq_size: u32,
    pub(crate) qp_caps: u32,
}

impl CreateQpResp {
    pub(crate) const SIZE: usize = 24;
    /// Shortest response buffer accepted (through `qp_caps`' predecessor fields).
    pub(crate) const MIN_SIZE: usize = 20;

    pub(crate) fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.qp_id.to_le_bytes());
        b[4..8].copy_from_slice(&self.actual_sq_size.to_le_bytes());
        b[8..12].copy_from_slice(&self.actual_rq_size.to_le_bytes());
        // 12: irdma_drv_opt, 16: push_idx, 18: lsmm (0: no iWARP connection WQEs), 19: rsvd.
        b[20..24].copy_from_slice(&self.qp_caps.to_le_bytes());
        b
    }
}

/// `struct irdma_modify_qp_req` (8 bytes): the reflush request of a QP in ERR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ModifyQpReq {
    pub(crate) sq_flush: bool,
    pub(crate) rq_flush: bool,
}

impl ModifyQpReq {
    pub(crate) const SIZE: usize = 8;

    pub(crate) fn decode(b: &[u8; Self::SIZE]) -> Self {
        Self {
            sq_flush: b[0] != 0,
            rq_flush: b[1] != 0,
        }
    }
}

/// `struct irdma_create_ah_resp` (8 bytes).
pub(crate) struct CreateAhResp {
    pub(crate) ah_id: u32,
}

impl CreateAhResp {
    pub(crate) const SIZE: usize = 8;
    /// Shortest response buffer accepted: `ah_id` must fit.
    pub(crate) const MIN_SIZE: usize = 4;

    pub(crate) fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.ah_id.to_le_bytes());
        b
    }
}

#[kunit_tests(ferrdma_abi)]
mod tests {
    use super::*;

    #[test]
    fn ucontext_request_fields_at_their_offsets() {
        let mut b = [0u8; AllocUcontextReq::SIZE];
        b[4] = 5;
        b[8] = 9;
        b[15] = 0x80;
        let r = AllocUcontextReq::decode(&b);
        assert_eq!(r.userspace_ver, 5);
        assert_eq!(r.comp_mask, 0x8000_0000_0000_0009);
    }

    #[test]
    fn ucontext_response_fields_at_their_offsets() {
        let r = AllocUcontextResp {
            max_pds: 0x11,
            max_qps: 0x22,
            wq_size: 0x33,
            kernel_ver: 5,
            feature_flags: 0x0102,
            db_mmap_key: 0x1234_5000,
            max_hw_wq_frags: 13,
            max_hw_read_sges: 13,
            max_hw_inline: 101,
            max_hw_rq_quanta: 32768,
            max_hw_wq_quanta: 32768,
            min_hw_cq_size: 1,
            max_hw_cq_size: 1_048_575,
            max_hw_sq_chunk: 8,
            hw_rev: HW_REV_GEN_2,
            comp_mask: ALLOC_UCTX_USE_RAW_ATTR | ALLOC_UCTX_MIN_HW_WQ_SIZE,
            min_hw_wq_size: 8,
        };
        let b = r.encode();
        assert_eq!(b[0], 0x11);
        assert_eq!(b[4], 0x22);
        assert_eq!(b[8], 0x33);
        assert_eq!(b[12], 5);
        assert_eq!((b[16], b[17]), (0x02, 0x01));
        assert_eq!(&b[24..28], &[0x00, 0x50, 0x34, 0x12]);
        assert_eq!(b[32], 13);
        assert_eq!(b[36], 13);
        assert_eq!(b[40], 101);
        assert_eq!((b[44], b[45]), (0x00, 0x80));
        assert_eq!((b[48], b[49]), (0x00, 0x80));
        assert_eq!(b[52], 1);
        assert_eq!(&b[56..60], &[0xff, 0xff, 0x0f, 0x00]);
        assert_eq!(b[60], 8);
        assert_eq!(b[62], 2);
        assert_eq!(b[64], 3);
        assert_eq!(b[72], 8);
        assert!(b[74..].iter().all(|&x| x == 0));
    }

    #[test]
    fn pd_response_carries_the_id_first() {
        assert_eq!(
            AllocPdResp { pd_id: 0x0102_0304 }.encode(),
            [4, 3, 2, 1, 0, 0, 0, 0]
        );
    }

    #[test]
    fn verbs_requests_decode_at_their_offsets() {
        let r = MemRegReq::decode(&[1, 0, 2, 0, 3, 0, 4, 0]);
        assert_eq!(
            (r.reg_type, r.cq_pages, r.rq_pages, r.sq_pages),
            (1, 2, 3, 4)
        );
        let mut b = [0u8; 16];
        b[0] = 0x10;
        b[7] = 0x7f;
        b[8] = 0x40;
        let cq = CreateCqReq::decode(&b);
        assert_eq!(cq.user_cq_buf, 0x7f00_0000_0000_0010);
        assert_eq!(cq.user_shadow_area, 0x40);
        let qp = CreateQpReq::decode(&b);
        assert_eq!(qp.user_wqe_bufs, 0x7f00_0000_0000_0010);
        assert_eq!(qp.user_compl_ctx, 0x40);
        let m = ModifyQpReq::decode(&[0, 1, 0, 0, 0, 0, 0, 0]);
        assert!(!m.sq_flush && m.rq_flush);
        let r = ResizeCqReq::decode(&[0x00, 0x10, 0, 0, 0, 0, 0x7f, 0]);
        assert_eq!(r.user_cq_buffer, 0x7f_0000_0000_1000);
    }

    #[test]
    fn verbs_responses_encode_at_their_offsets() {
        assert_eq!(
            CreateCqResp {
                cq_id: 7,
                cq_size: 0x200
            }
            .encode(),
            [7, 0, 0, 0, 0, 2, 0, 0]
        );
        let b = CreateQpResp {
            qp_id: 2,
            actual_sq_size: 512,
            actual_rq_size: 1024,
            qp_caps: QP_CAP_WRITE_WITH_IMM | QP_CAP_SEND_WITH_IMM | QP_CAP_ROCE,
        }
        .encode();
        assert_eq!(b[0], 2);
        assert_eq!((b[4], b[5]), (0, 2));
        assert_eq!((b[8], b[9]), (0, 4));
        assert!(b[12..20].iter().all(|&x| x == 0));
        assert_eq!(b[20], 7);
        assert_eq!(
            CreateAhResp { ah_id: 0x1_0001 }.encode(),
            [1, 0, 1, 0, 0, 0, 0, 0]
        );
    }
}
