// SPDX-License-Identifier: GPL-2.0

//! Completion queues: libirdma's ring registration becomes a device CQ on a CEQ; kernel CQs
//! (`kcq`) have rings the driver owns.

use crate::{
    abi::{CreateCqReq, CreateCqResp, ResizeCqReq},
    admin::header,
    event_tag::{EventTag, Published},
    graveyard::Remains,
    ibdev::{IbData, UContext},
    interface as hw,
    kcq::KCq,
    mr::{RingKind, RingReg},
    pbl::PageList,
    sizing,
};
use kernel::{
    infiniband::{CqEvents, CqInitAttr, Destroyed, NewCq, UData},
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// The ring a user CQ's device writes.
struct UserRing {
    ring: Arc<RingReg>,
    /// The page list the device reads the ring's pages from.
    pages: PageList,
}

/// Where a CQ's ring lives.
enum CqMem {
    /// In user registrations, polled by libirdma.
    User {
        /// A resize replaces it. uverbs runs resizes of one CQ concurrently (under a shared
        /// lock of the CQ object), hence the mutex; destroy excludes them.
        current: Pin<KBox<Mutex<UserRing>>>,
        /// The shadow area, a registration of its own (irdma's CQ_RESIZE layout).
        shadow: Arc<RingReg>,
    },
    /// In coherent memory the driver polls.
    Kernel(Arc<KCq>),
}

/// A completion queue.
pub(crate) struct Cq {
    id: u32,
    mem: CqMem,
}

impl Cq {
    /// A kernel CQ.
    pub(crate) fn new_kernel(id: u32, k: Arc<KCq>) -> Self {
        Self {
            id,
            mem: CqMem::Kernel(k),
        }
    }

    /// The device CQ id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The ring of a kernel CQ; `None` for a user CQ.
    pub(crate) fn kernel(&self) -> Option<&Arc<KCq>> {
        match &self.mem {
            CqMem::Kernel(k) => Some(k),
            CqMem::User { .. } => None,
        }
    }
}

/// The CEQ (EQ id) serving completion vector `comp_vector` with `ceqs` CEQs on EQs 1..=ceqs.
pub(crate) const fn ceq_for_vector(comp_vector: u32, ceqs: u32) -> u32 {
    1 + comp_vector % if ceqs == 0 { 1 } else { ceqs }
}

impl IbData<'_> {
    pub(crate) fn create_cq(
        &self,
        ctx: &UContext,
        attr: &CqInitAttr,
        events: CqEvents,
        udata: &mut UData<'_>,
    ) -> Result<NewCq<Cq>> {
        if attr.flags != 0 {
            return Err(EOPNOTSUPP);
        }
        if udata.inlen() < CreateCqReq::MIN_SIZE || udata.outlen() < CreateCqResp::SIZE {
            return Err(EINVAL);
        }
        let mut b = [0u8; CreateCqReq::SIZE];
        udata.read_in(&mut b)?;
        let req = CreateCqReq::decode(&b);
        // libirdma passes its ring size (two slots per CQE for immediate data).
        let size = attr.cqe;
        if size < hw::MIN_CQ_ENTRIES || size > self.caps.max_cq_entries.min(hw::MAX_CQ_ENTRIES) {
            return Err(EINVAL);
        }
        let ring = self.claim_ring(ctx, req.user_cq_buf, false)?;
        let shadow = match self.claim_ring(ctx, req.user_shadow_area, false) {
            Ok(s) => s,
            Err(e) => {
                ring.release();
                return Err(e);
            }
        };
        let made = self.ring_pages(&ring, size).and_then(|pages| {
            crate::fault::step()?;
            let current = KBox::pin_init(
                new_mutex!(UserRing {
                    ring: ring.clone(),
                    pages,
                }),
                GFP_KERNEL,
            )?;
            let (id, tag) = self.create_cq_on(ctx, attr, &current.lock().pages, &shadow, size)?;
            Ok((id, tag, current))
        });
        match made {
            Ok((id, tag, current)) => {
                let resp = CreateCqResp {
                    cq_id: id,
                    cq_size: size,
                };
                if let Err(e) = crate::fault::step().and_then(|()| udata.respond(&resp.encode())) {
                    self.destroy_cq_id(id);
                    ring.release();
                    shadow.release();
                    return Err(e);
                }
                self.tables
                    .lock()
                    .set_cq(id, Some(Published::new(tag, events)));
                Ok(NewCq {
                    value: Cq {
                        id,
                        mem: CqMem::User { current, shadow },
                    },
                    cqe: size,
                })
            }
            Err(e) => {
                ring.release();
                shadow.release();
                Err(e)
            }
        }
    }

    /// The page list of the first pages of CQ ring registration `ring` that hold `size`
    /// CQEs; `EINVAL` if it is too short.
    fn ring_pages(&self, ring: &RingReg, size: u32) -> Result<PageList> {
        let RingKind::Cq { cq_pages } = ring.kind else {
            return Err(EINVAL);
        };
        let used = sizing::pages(size);
        if used > cq_pages {
            return Err(EINVAL);
        }
        crate::fault::step()?;
        PageList::new(self.dev, ring.pages(0, used)?, hw::QUEUE_PAGE_SIZE)
    }

    fn create_cq_on(
        &self,
        ctx: &UContext,
        attr: &CqInitAttr,
        pages: &PageList,
        shadow: &RingReg,
        size: u32,
    ) -> Result<(u32, EventTag)> {
        let shadow_addr = shadow.page(0)?;
        let id = self
            .ids
            .lock()
            .cqs
            .alloc_in(1, self.caps.max_cq.min(hw::MAX_CQ))
            .ok_or(ENOMEM)?;
        let mut cmd = hw::CreateCq::decode(&[0; hw::CreateCq::SIZE]);
        cmd.hdr = header(hw::admin_op::CREATE_CQ);
        cmd.cq_id = id;
        cmd.size = size;
        cmd.eq_id = ceq_for_vector(attr.comp_vector, self.ceqs());
        cmd.db_page = ctx.db_page();
        cmd.shadow_addr = shadow_addr;
        cmd.ring = pages.descriptor();
        let tag = self.event_tags.next();
        cmd.event_tag = tag.raw();
        if let Err(e) = crate::fault::step().and_then(|()| self.admin(&cmd.encode()).map(|_| ())) {
            self.ids.lock().cqs.free(id);
            return Err(e);
        }
        Ok((id, tag))
    }

    fn destroy_cq_id(&self, id: u32) {
        let _ = self.destroy_object(hw::admin_op::DESTROY_CQ, id);
        self.ids.lock().cqs.free(id);
    }

    /// Destroys the device CQ, then forgets it. If DESTROY_CQ fails on a live device nothing
    /// changes: a user CQ lives on in ib_core (and keeps its events), a kernel CQ's ring is
    /// leaked, as the device may still write it (ib_core frees a kernel CQ whatever we
    /// answer). On a dead device the CQ is forgotten and its memory abandoned.
    pub(crate) fn destroy_cq(&self, cq: &Cq) -> Result<Destroyed> {
        let how = match self.retire(hw::admin_op::DESTROY_CQ, cq.id) {
            Ok(how) => how,
            Err(e) => {
                if let CqMem::Kernel(k) = &cq.mem {
                    self.graveyard.bury(Remains::KernelCq(k.clone()));
                }
                return Err(e);
            }
        };
        // Events until here went to a live CQ (the abstraction revokes the handle only when
        // we return); after DESTROY_CQ the device writes nothing more for this id.
        self.tables.lock().set_cq(cq.id, None);
        self.ids.lock().cqs.free(cq.id);
        // An abandoned CQ keeps a reference to its ring registrations (and their pinned
        // pages).
        if let CqMem::User { current, shadow } = &cq.mem {
            current.lock().ring.release();
            shadow.release();
        }
        Ok(how)
    }

    /// `resize_cq` of a user CQ to a ring of `size` CQEs (libirdma's ring size). libirdma
    /// registered the new ring (CQ type) and passes its address; the device switches to it
    /// (MODIFY_CQ RESIZE) and writes every later CQE there, while libirdma polls the old
    /// ring empty and then deregisters it, which giving it up here allows. The device
    /// refuses (`EINVAL`) a ring too small for the CQEs not polled yet.
    pub(crate) fn resize_user_cq(
        &self,
        ctx: &UContext,
        cq: &Cq,
        size: u32,
        udata: &mut UData<'_>,
    ) -> Result<u32> {
        let CqMem::User { current, .. } = &cq.mem else {
            return Err(EINVAL);
        };
        if udata.inlen() < ResizeCqReq::SIZE {
            return Err(EINVAL);
        }
        let mut b = [0u8; ResizeCqReq::SIZE];
        udata.read_in(&mut b)?;
        let req = ResizeCqReq::decode(&b);
        if size < hw::MIN_CQ_ENTRIES || size > self.caps.max_cq_entries.min(hw::MAX_CQ_ENTRIES) {
            return Err(EINVAL);
        }
        let mut cur = current.lock();
        let ring = self.claim_ring(ctx, req.user_cq_buffer, false)?;
        let switched = self.ring_pages(&ring, size).and_then(|pages| {
            let mut cmd = hw::ModifyCq::decode(&[0; hw::ModifyCq::SIZE]);
            cmd.hdr = header(hw::admin_op::MODIFY_CQ);
            cmd.cq_id = cq.id;
            cmd.size = size;
            cmd.flags = hw::MODIFY_CQ_RESIZE;
            cmd.ring = pages.descriptor();
            crate::fault::step()?;
            self.admin(&cmd.encode())?;
            Ok(pages)
        });
        match switched {
            Ok(pages) => {
                let old = core::mem::replace(&mut *cur, UserRing { ring, pages });
                old.ring.release();
                Ok(size)
            }
            Err(e) => {
                ring.release();
                Err(e)
            }
        }
    }
}

#[kunit_tests(ferrdma_cq)]
mod tests {
    use super::*;

    #[test]
    fn completion_vectors_spread_over_the_ceqs() {
        assert_eq!(ceq_for_vector(0, 7), 1);
        assert_eq!(ceq_for_vector(6, 7), 7);
        assert_eq!(ceq_for_vector(7, 7), 1);
        assert_eq!(ceq_for_vector(3, 0), 1);
    }
}
