// SPDX-License-Identifier: GPL-2.0

//! Memory registration the irdma way: `ibv_reg_mr` becomes a device MR (REG_MR with the best
//! page size), while the rings of QPs and CQs libirdma is about to create are registered as
//! *ring registrations* that create_qp/create_cq find by address (irdma-abi §2.3).
//!
//! Kernel consumers get fast-registration MRs (manual, "Fast registration"): `ib_alloc_mr`
//! reserves an MR table entry (ALLOC_MR), `ib_map_mr_sg` fills the MR's page list in coherent
//! memory, and an `IB_WR_REG_MR` becomes a FAST_REG WQE that makes the device read that list.

use crate::{
    abi::{self, MemRegReq},
    admin::header,
    ibdev::{IbData, Pd, UContext},
    interface as hw,
    pbl::{self, PageList},
};
use kernel::{
    dma::Coherent,
    infiniband::{self, Access, AccessFlag as A, Destroyed, NewMr, UData, Umem, UserMrRequest},
    io::io_write,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// Ring pages are always 4 KiB, whatever the kernel page size.
const RING_PAGE: u64 = hw::QUEUE_PAGE_SIZE;

/// What a ring registration holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingKind {
    /// `cq_pages` of CQ ring, or (`cq_pages` 1) a CQ's shadow area.
    Cq { cq_pages: u32 },
    /// `[sq_pages of SQ][rq_pages of RQ][shadow area]`.
    Qp { sq_pages: u32, rq_pages: u32 },
}

/// Pinned user memory holding the rings of one QP or CQ.
pub(crate) struct RingReg {
    /// Doorbell page of the owning context (unique per context).
    owner: u32,
    /// User address of the first ring page (the lookup key).
    va: u64,
    pub(crate) kind: RingKind,
    /// Bus addresses of the 4 KiB pages.
    pages: KVec<u64>,
    _umem: Umem,
    /// 1 while a QP or CQ uses the rings.
    users: Atomic<u32>,
}

impl RingReg {
    /// Bus addresses of pages `first..first + n`; `EINVAL` if the registration is shorter.
    pub(crate) fn pages(&self, first: u32, n: u32) -> Result<&[u64]> {
        let (a, b) = (first as usize, first as usize + n as usize);
        self.pages.get(a..b).ok_or(EINVAL)
    }

    /// Bus address of page `i`.
    pub(crate) fn page(&self, i: u32) -> Result<u64> {
        self.pages.get(i as usize).copied().ok_or(EINVAL)
    }

    /// Gives the ring up after its QP or CQ is destroyed.
    pub(crate) fn release(&self) {
        self.users.store(0, Relaxed);
    }
}

/// A memory region.
pub(crate) enum Mr {
    /// A device MR.
    Mem {
        stag: u32,
        _pages: PageList,
        _umem: Umem,
    },
    /// A ring registration.
    Ring(Arc<RingReg>),
    /// The kernel's DMA MR: the device's local DMA STag, nothing registered.
    LocalDma,
    /// A fast-registration MR of a kernel consumer.
    FastReg(FastRegMr),
}

/// A fast-registration MR: its MR table entry and the page list the device reads when a
/// FAST_REG WQE executes.
pub(crate) struct FastRegMr {
    /// MR table index (the key byte changes with every registration).
    index: u32,
    /// Where `map_mr_sg` puts the page addresses.
    list: FastRegList,
    max_pages: u32,
    /// Entries `map_mr_sg` filled.
    npages: Atomic<u32>,
}

/// The page list of a fast-registration MR, laid out once at `alloc_mr` for its largest
/// registration (manual, "Fast registration").
enum FastRegList {
    /// Up to 512 entries (bus addresses, little-endian) the FAST_REG WQE names directly.
    OneLevel(Coherent<[u64]>),
    /// List pages of 512 entries and a 4 KiB root page naming them, written at allocation:
    /// 4 KiB allocations instead of one of up to 2 MiB.
    TwoLevel {
        root: Coherent<[u64]>,
        leaves: KVec<Coherent<[u64]>>,
    },
}

impl FastRegList {
    /// A list for up to `max_pages` entries: one level up to 512, two levels above.
    fn new(dev: &kernel::device::Device<kernel::device::Bound>, max_pages: u32) -> Result<Self> {
        let per = hw::PBL_ENTRIES_PER_PAGE;
        if max_pages <= per {
            return Ok(Self::OneLevel(Coherent::<u64>::zeroed_slice(
                dev,
                max_pages as usize,
                GFP_KERNEL,
            )?));
        }
        // Empty list pages: map_mr_sg fills them.
        let n = max_pages.div_ceil(per) as usize;
        let empty: &[u64] = &[];
        let (root, leaves) = pbl::two_levels(dev, n, core::iter::repeat(empty).take(n))?;
        Ok(Self::TwoLevel { root, leaves })
    }

    /// Stores entry `i`; `ENOMEM` past the list's end.
    fn set(&self, i: u32, addr: u64) -> Result {
        let per = hw::PBL_ENTRIES_PER_PAGE;
        let (page, slot) = match self {
            Self::OneLevel(p) => (p, i as usize),
            Self::TwoLevel { leaves, .. } => (
                leaves.get((i / per) as usize).ok_or(ENOMEM)?,
                (i % per) as usize,
            ),
        };
        io_write!(page, [try: slot], addr.to_le());
        Ok(())
    }

    /// The FAST_REG WQE's list address and whether it has two levels.
    fn wqe_list(&self) -> (u64, bool) {
        match self {
            Self::OneLevel(p) => (p.dma_address(), false),
            Self::TwoLevel { root, .. } => (root.dma_address(), true),
        }
    }
}

impl FastRegMr {
    /// `map_mr_sg` begins.
    pub(crate) fn reset(&self) {
        self.npages.store(0, Relaxed);
    }

    /// Appends a page address; `ENOMEM` when the list is full (`ib_sg_to_pages` then stops).
    pub(crate) fn push(&self, addr: u64) -> Result {
        let n = self.npages.load(Relaxed);
        if n >= self.max_pages {
            return Err(ENOMEM);
        }
        self.list.set(n, addr)?;
        self.npages.store(n + 1, Relaxed);
        Ok(())
    }

    /// The FAST_REG WQE's fields for registering `key` over the pages mapped so far (see
    /// [`fast_reg_fields`]).
    pub(crate) fn wqe_fields(
        &self,
        key: u32,
        access: Access,
        length: u64,
        page_size: u32,
    ) -> Result<hw::FastRegFields> {
        let npages = self.npages.load(Relaxed);
        let (list, two_level) = self.list.wqe_list();
        let f = fast_reg_fields(self.index, npages, key, access, length, page_size)?;
        with_list(f, list, two_level)
    }
}

/// The FAST_REG fields of MR table entry `index` holding `npages` mapped pages, registered
/// under `key` (the list is placed by [`with_list`]). `EINVAL` if `key` names another entry,
/// nothing is mapped, the page size is one the device lacks, the length is out of range or
/// the rights are unsupported.
fn fast_reg_fields(
    index: u32,
    npages: u32,
    key: u32,
    access: Access,
    length: u64,
    page_size: u32,
) -> Result<hw::FastRegFields> {
    if hw::stag_index(key) != index || npages == 0 {
        return Err(EINVAL);
    }
    if !page_size.is_power_of_two() || hw::PAGE_SIZE_CAP & u64::from(page_size) == 0 {
        return Err(EINVAL);
    }
    if length == 0 || length > hw::MAX_MR_SIZE {
        return Err(EINVAL);
    }
    Ok(hw::FastRegFields {
        length,
        page_shift: page_size.trailing_zeros() as u8,
        access: mr_access(access).map_err(|_| EINVAL)?,
        npages,
        two_level: false,
        list: 0,
    })
}

/// `f` with its page list at `list`; `EINVAL` if the count does not fit the list's format
/// (one level: 512 entries; two levels: the device's maximum under a 4 KiB-aligned root).
fn with_list(f: hw::FastRegFields, list: u64, two_level: bool) -> Result<hw::FastRegFields> {
    let fits = if two_level {
        list & hw::fast_reg::QW1_NPAGES_MASK == 0 && f.npages <= hw::MAX_FAST_REG_PAGES
    } else {
        f.npages <= hw::PBL_ENTRIES_PER_PAGE
    };
    if !fits {
        return Err(EINVAL);
    }
    Ok(hw::FastRegFields {
        two_level,
        list,
        ..f
    })
}

/// IB access flags to the device's MR access bits; `EOPNOTSUPP` for rights the device lacks.
pub(crate) fn mr_access(a: Access) -> Result<u32> {
    let supported = A::LocalWrite | A::RemoteWrite | A::RemoteRead | A::ZeroBased;
    if a.unsupported(supported) != 0 {
        return Err(EOPNOTSUPP);
    }
    let mut bits = 0;
    if a.contains(A::LocalWrite) {
        bits |= hw::MR_ACCESS_LOCAL_WRITE;
    }
    if a.contains(A::RemoteWrite) {
        bits |= hw::MR_ACCESS_REMOTE_WRITE;
    }
    if a.contains(A::RemoteRead) {
        bits |= hw::MR_ACCESS_REMOTE_READ;
    }
    if a.contains(A::ZeroBased) {
        bits |= hw::MR_ACCESS_ZERO_BASED;
    }
    Ok(bits)
}

/// The bus addresses of `umem`'s `n` blocks of `pgsz` bytes.
fn dma_addresses(umem: &mut Umem, pgsz: u64, n: usize) -> Result<KVec<u64>> {
    let mut addrs = KVec::with_capacity(n, GFP_KERNEL)?;
    for a in umem.dma_blocks(pgsz)? {
        addrs.push(a, GFP_KERNEL)?;
    }
    Ok(addrs)
}

/// The consumer key after `prev` for random byte `r`: uniform over the 255 keys other than
/// `prev`.
pub(crate) const fn next_key(prev: u8, r: u8) -> u8 {
    prev ^ (1 + r % 255)
}

/// The STag of MR table entry `index` with consumer key `key`.
pub(crate) const fn stag(index: u32, key: u8) -> u32 {
    (index << 8) | key as u32
}

impl IbData<'_> {
    pub(crate) fn reg_user_mr(
        &self,
        ctx: &UContext,
        pd: &Pd,
        req: &UserMrRequest,
        mut umem: Umem,
        udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        if udata.inlen() < MemRegReq::SIZE {
            return Err(EINVAL);
        }
        let mut b = [0u8; MemRegReq::SIZE];
        udata.read_in(&mut b)?;
        let r = MemRegReq::decode(&b);
        let kind = match r.reg_type {
            abi::MEMREG_TYPE_MEM => return self.reg_mem(pd, req, umem),
            abi::MEMREG_TYPE_QP if r.sq_pages > 0 && r.rq_pages > 0 => RingKind::Qp {
                sq_pages: r.sq_pages.into(),
                rq_pages: r.rq_pages.into(),
            },
            abi::MEMREG_TYPE_CQ if r.cq_pages > 0 => RingKind::Cq {
                cq_pages: r.cq_pages.into(),
            },
            abi::MEMREG_TYPE_QP | abi::MEMREG_TYPE_CQ => return Err(EINVAL),
            _ => return Err(EOPNOTSUPP),
        };
        // The device writes CQEs into CQ rings and may write the shadow areas, whatever
        // access the user asked for: a ring must be pinned writable, or a read-only mapping
        // of a file (its page cache) would become device-writable. libirdma always
        // registers rings with LOCAL_WRITE.
        if !umem.is_writable() {
            return Err(EINVAL);
        }
        // Rings and the shadow area are found by 4 KiB page; libirdma aligns them.
        if req.start % RING_PAGE != 0 || req.iova != req.start {
            return Err(EINVAL);
        }
        // With FEATURE_CQ_RESIZE a CQ ring has no shadow page after it: the shadow area is
        // a registration of its own (one page).
        let need = match kind {
            RingKind::Cq { cq_pages } => cq_pages,
            RingKind::Qp { sq_pages, rq_pages } => sq_pages + rq_pages + 1,
        };
        let n = umem.num_blocks(RING_PAGE);
        if n < need as usize || n > hw::MAX_PBL_PAGES as usize {
            return Err(EINVAL);
        }
        crate::fault::step()?;
        let pages = dma_addresses(&mut umem, RING_PAGE, n)?;
        crate::fault::step()?;
        let ring = Arc::new(
            RingReg {
                owner: ctx.db_page(),
                va: req.start,
                kind,
                pages,
                _umem: umem,
                users: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        crate::fault::step()?;
        self.rings.lock().push(ring.clone(), GFP_KERNEL)?;
        Ok(NewMr {
            value: Mr::Ring(ring),
            lkey: 0,
            rkey: 0,
        })
    }

    /// Registers `umem` as an ordinary memory region (user memory or a dma-buf) in PD `pd`
    /// under a new STag: the largest page size the memory allows, a page list for the rest.
    pub(crate) fn reg_mem(
        &self,
        pd: &Pd,
        req: &UserMrRequest,
        mut umem: Umem,
    ) -> Result<NewMr<Mr>> {
        let access = mr_access(req.access)?;
        // The device writes an MR only with one of these rights (RECV scatter and RDMA READ
        // responses need LOCAL_WRITE, inbound RDMA WRITE needs REMOTE_WRITE), and ib_core
        // pins writable whenever one is asked for; checked again because a device write
        // into memory pinned read-only would be a write into a file the user cannot write.
        let writes = hw::MR_ACCESS_LOCAL_WRITE | hw::MR_ACCESS_REMOTE_WRITE;
        if access & writes != 0 && !umem.is_writable() {
            return Err(EINVAL);
        }
        if req.length == 0 || req.length > self.caps.max_mr_size {
            return Err(EINVAL);
        }
        let pgsz = umem
            .best_page_size(self.caps.page_size_cap, req.iova)
            .ok_or(EINVAL)?;
        let n = umem.num_blocks(pgsz);
        if n == 0 || n > hw::MAX_PBL_PAGES as usize {
            return Err(EINVAL);
        }
        crate::fault::step()?;
        let addrs = dma_addresses(&mut umem, pgsz, n)?;
        crate::fault::step()?;
        let pages = PageList::new(self.dev, &addrs, pgsz)?;
        drop(addrs);

        let (_, stag) = self.alloc_stag(|stag| {
            let mut cmd = hw::RegMr::decode(&[0; hw::RegMr::SIZE]);
            cmd.hdr = header(hw::admin_op::REG_MR);
            cmd.stag = stag;
            cmd.pd = pd.id();
            cmd.access = access;
            cmd.page_shift = pgsz.trailing_zeros() as u8;
            cmd.iova = req.iova;
            cmd.length = req.length;
            cmd.pages = pages.descriptor();
            self.admin(&cmd.encode()).map(|_| ())
        })?;
        Ok(NewMr {
            value: Mr::Mem {
                stag,
                _pages: pages,
                _umem: umem,
            },
            lkey: stag,
            rkey: stag,
        })
    }

    /// Allocates a free MR table entry and the next consumer key, then lets `create` issue the
    /// admin command that makes the MR under the new STag. The entry is given back if `create`
    /// fails. Returns the entry's index and the STag.
    fn alloc_stag(&self, create: impl FnOnce(u32) -> Result) -> Result<(u32, u32)> {
        crate::fault::step()?;
        let (index, key) = {
            let mut ids = self.ids.lock();
            let index = ids
                .mrs
                .alloc_in(1, self.caps.max_mr.min(hw::MAX_MR))
                .ok_or(ENOMEM)?;
            // Unpredictable, so a process cannot guess another's rkey from its own, and
            // never the entry's previous key.
            let slot = ids.mr_keys.get_mut(index as usize).ok_or(EINVAL)?;
            *slot = next_key(*slot, infiniband::mr::new_key());
            (index, *slot)
        };
        let stag = stag(index, key);
        if let Err(e) = crate::fault::step().and_then(|()| create(stag)) {
            self.ids.lock().mrs.free(index);
            return Err(e);
        }
        Ok((index, stag))
    }

    /// `rereg_user_mr`: the new registration of a memory region (the abstraction keeps the
    /// old one until this has succeeded). Ring registrations are not memory regions: the one
    /// a QP or CQ uses is busy (`EBUSY`), any other is refused with `EINVAL`, as are the
    /// kernel's MRs.
    pub(crate) fn rereg_user_mr(
        &self,
        old: &Mr,
        pd: &Pd,
        req: &UserMrRequest,
        umem: Umem,
        udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        match old {
            Mr::Mem { .. } => {}
            Mr::Ring(ring) if ring.users.load(Relaxed) != 0 => return Err(EBUSY),
            _ => return Err(EINVAL),
        }
        // libirdma sends the registration request again, always for an ordinary region.
        if udata.inlen() < MemRegReq::SIZE {
            return Err(EINVAL);
        }
        let mut b = [0u8; MemRegReq::SIZE];
        udata.read_in(&mut b)?;
        if MemRegReq::decode(&b).reg_type != abi::MEMREG_TYPE_MEM {
            return Err(EINVAL);
        }
        self.reg_mem(pd, req, umem)
    }

    /// Deregisters an MR; on a dead device the MR is forgotten and what it maps abandoned
    /// (see [`IbData::retire`]).
    pub(crate) fn dereg_mr(&self, mr: &Mr) -> Result<Destroyed> {
        match mr {
            Mr::Mem { stag, .. } => {
                let how = self.retire(hw::admin_op::DEREG_MR, *stag)?;
                self.ids.lock().mrs.free(hw::stag_index(*stag));
                Ok(how)
            }
            Mr::Ring(ring) => {
                // Under the lock `claim_ring` claims under, so a racing create cannot take
                // the ring between the check and the removal.
                let mut rings = self.rings.lock();
                if ring.users.load(Relaxed) != 0 {
                    return Err(EBUSY);
                }
                let target: &RingReg = ring;
                // Order does not matter to `claim_ring`: a swap keeps this O(1) past the
                // search with tens of thousands of registrations.
                if let Some(i) = rings
                    .iter()
                    .position(|r| core::ptr::eq::<RingReg>(&**r, target))
                {
                    let last = rings.len() - 1;
                    rings.swap(i, last);
                    drop(rings.pop());
                }
                Ok(Destroyed::Released)
            }
            Mr::LocalDma => Ok(Destroyed::Released),
            Mr::FastReg(f) => {
                // The device ignores the key of a fast-registration MR here (FAST_REG owns it).
                let how = self.retire(hw::admin_op::DEREG_MR, stag(f.index, 0))?;
                self.ids.lock().mrs.free(f.index);
                Ok(how)
            }
        }
    }

    /// `alloc_mr`: a fast-registration MR of at most `max_num_sg` pages in kernel PD `pd`,
    /// invalid until an `IB_WR_REG_MR` registers it.
    pub(crate) fn alloc_fast_reg_mr(&self, pd: &Pd, max_num_sg: u32) -> Result<NewMr<Mr>> {
        self.kernel_doorbells()?;
        let limit = self.caps.max_fast_reg_pages.min(hw::MAX_FAST_REG_PAGES);
        if limit == 0 {
            return Err(EOPNOTSUPP);
        }
        if max_num_sg == 0 || max_num_sg > limit {
            return Err(EINVAL);
        }
        crate::fault::step()?;
        let list = FastRegList::new(self.dev, max_num_sg)?;
        let (index, stag) = self.alloc_stag(|stag| {
            let mut cmd = hw::AllocMr::decode(&[0; hw::AllocMr::SIZE]);
            cmd.hdr = header(hw::admin_op::ALLOC_MR);
            cmd.stag = stag;
            cmd.pd = pd.id();
            cmd.max_pages = max_num_sg;
            self.admin(&cmd.encode()).map(|_| ())
        })?;
        Ok(NewMr {
            value: Mr::FastReg(FastRegMr {
                index,
                list,
                max_pages: max_num_sg,
                npages: Atomic::new(0),
            }),
            lkey: stag,
            rkey: stag,
        })
    }

    /// `get_dma_mr`: kernel consumers' SGEs carry DMA addresses under the device's local DMA
    /// STag, valid on kernel (privileged) QPs only. There is no remote access to all of
    /// memory.
    pub(crate) fn get_dma_mr(&self, access: Access) -> Result<NewMr<Mr>> {
        if access.unsupported(A::LocalWrite.into()) != 0 {
            return Err(EOPNOTSUPP);
        }
        Ok(NewMr {
            value: Mr::LocalDma,
            lkey: hw::LOCAL_DMA_STAG,
            rkey: 0,
        })
    }

    /// Claims the unused ring registration of context `ctx` at `va` of the right kind.
    /// libirdma registers a ring right before creating its object, so a missing one is a
    /// protocol error (`EPROTO`, as irdma answers).
    pub(crate) fn claim_ring(&self, ctx: &UContext, va: u64, is_qp: bool) -> Result<Arc<RingReg>> {
        crate::fault::step()?;
        let rings = self.rings.lock();
        // Newest first: the ring was registered just before its create.
        for r in rings.iter().rev() {
            if r.owner != ctx.db_page() || r.va != va {
                continue;
            }
            if matches!(r.kind, RingKind::Qp { .. }) != is_qp {
                continue;
            }
            if r.users.cmpxchg(0, 1, Relaxed).is_ok() {
                return Ok(r.clone());
            }
        }
        Err(EPROTO)
    }
}

#[kunit_tests(ferrdma_mr)]
mod tests {
    use super::*;

    #[test]
    fn access_mapping() {
        let a = |b: Access| mr_access(b);
        let raw = |b| mr_access(Access::from_raw(b));
        assert_eq!(a(Access::empty()).ok(), Some(0));
        assert_eq!(
            a(A::LocalWrite | A::RemoteWrite | A::RemoteRead).ok(),
            Some(
                hw::MR_ACCESS_LOCAL_WRITE | hw::MR_ACCESS_REMOTE_WRITE | hw::MR_ACCESS_REMOTE_READ
            )
        );
        assert_eq!(a(A::ZeroBased.into()).ok(), Some(hw::MR_ACCESS_ZERO_BASED));
        // Relaxed ordering is a hint the device may ignore.
        assert_eq!(
            raw(A::LocalWrite as u32 | (1 << 20)).ok(),
            Some(hw::MR_ACCESS_LOCAL_WRITE)
        );
        assert!(a(A::RemoteAtomic.into()).is_err());
        assert!(a(A::MwBind.into()).is_err());
        assert!(a(A::OnDemand.into()).is_err());
        // A bit no flag names.
        assert!(raw(1 << 30).is_err());
    }

    #[test]
    fn fast_reg_fields_check_key_pages_page_size_and_rights() {
        let rw = A::LocalWrite | A::RemoteWrite;
        let f = fast_reg_fields(5, 3, stag(5, 0x36), rw, 0x2d00, 4096);
        assert_eq!(
            f.ok(),
            Some(hw::FastRegFields {
                length: 0x2d00,
                page_shift: 12,
                access: hw::MR_ACCESS_LOCAL_WRITE | hw::MR_ACCESS_REMOTE_WRITE,
                npages: 3,
                two_level: false,
                list: 0,
            })
        );
        assert_eq!(
            fast_reg_fields(5, 1, stag(5, 1), rw, 1 << 21, 1 << 21)
                .ok()
                .map(|f| f.page_shift),
            Some(21)
        );
        // Another entry's key, nothing mapped, a page size the device lacks, no length.
        assert!(fast_reg_fields(5, 3, stag(6, 0x36), rw, 0x2d00, 4096).is_err());
        assert!(fast_reg_fields(5, 0, stag(5, 0x36), rw, 0x2d00, 4096).is_err());
        assert!(fast_reg_fields(5, 3, stag(5, 0x36), rw, 0x2d00, 8192).is_err());
        assert!(fast_reg_fields(5, 3, stag(5, 0x36), rw, 0x2d00, 4095).is_err());
        assert!(fast_reg_fields(5, 3, stag(5, 0x36), rw, 0, 4096).is_err());
        assert!(
            fast_reg_fields(5, 3, stag(5, 0x36), A::RemoteAtomic.into(), 0x2d00, 4096).is_err()
        );
    }

    #[test]
    fn fast_reg_lists_fit_their_level() -> Result {
        let f = fast_reg_fields(5, 512, stag(5, 1), A::LocalWrite.into(), 512 * 4096, 4096)?;
        let one = with_list(f, 0x8000_0008, false)?;
        assert_eq!(
            (one.list, one.two_level, one.npages),
            (0x8000_0008, false, 512)
        );
        // 513 pages need two levels; a root must be 4 KiB aligned; the maximum fits.
        let f = hw::FastRegFields { npages: 513, ..f };
        assert!(with_list(f, 0x8000_0000, false).is_err());
        assert!(with_list(f, 0x8000_0800, true).is_err());
        assert!(with_list(f, 0x8000_0000, true)?.two_level);
        let max = hw::FastRegFields {
            npages: hw::MAX_FAST_REG_PAGES,
            ..f
        };
        assert!(with_list(max, 0x8000_0000, true).is_ok());
        let over = hw::FastRegFields {
            npages: hw::MAX_FAST_REG_PAGES + 1,
            ..f
        };
        assert!(with_list(over, 0x8000_0000, true).is_err());
        Ok(())
    }

    #[test]
    fn next_key_never_repeats_and_reaches_every_other_key() {
        let mut seen = [false; 256];
        for r in 0..=255u8 {
            let k = next_key(0x35, r);
            assert_ne!(k, 0x35);
            seen[k as usize] = true;
        }
        assert_eq!(seen.iter().filter(|&&s| s).count(), 255);
    }

    #[test]
    fn stags_put_the_index_above_the_key() {
        assert_eq!(stag(1, 0x35), 0x135);
        assert_eq!(hw::stag_index(stag(4095, 0xff)), 4095);
    }
}
