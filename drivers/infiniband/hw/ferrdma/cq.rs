// SPDX-License-Identifier: GPL-2.0

//! Completion queues: libirdma's ring registration becomes a device CQ on a CEQ; kernel CQs
//! (`kcq`) have rings the driver owns.

use crate::{
    abi::{CreateCqReq, CreateCqResp},
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
    prelude::*,
    sync::Arc,
};

/// Where a CQ's ring lives.
enum CqMem {
    /// In a user registration, polled by libirdma.
    User {
        ring: Arc<RingReg>,
        _pages: PageList,
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
        let made = self.create_cq_on(ctx, attr, &ring, &req, size);
        match made {
            Ok((id, tag, pages)) => {
                let resp = CreateCqResp {
                    cq_id: id,
                    cq_size: size,
                };
                if let Err(e) = crate::fault::step().and_then(|()| udata.respond(&resp.encode())) {
                    self.destroy_cq_id(id);
                    ring.release();
                    return Err(e);
                }
                self.tables
                    .lock()
                    .set_cq(id, Some(Published::new(tag, events)));
                Ok(NewCq {
                    value: Cq {
                        id,
                        mem: CqMem::User {
                            ring,
                            _pages: pages,
                        },
                    },
                    cqe: size,
                })
            }
            Err(e) => {
                ring.release();
                Err(e)
            }
        }
    }

    fn create_cq_on(
        &self,
        ctx: &UContext,
        attr: &CqInitAttr,
        ring: &RingReg,
        req: &CreateCqReq,
        size: u32,
    ) -> Result<(u32, EventTag, PageList)> {
        let RingKind::Cq { cq_pages } = ring.kind else {
            return Err(EINVAL);
        };
        let used = sizing::pages(size);
        if used > cq_pages {
            return Err(EINVAL);
        }
        // Without CQ_RESIZE the shadow area follows the ring in the same buffer.
        let shadow_va = ring.va() + u64::from(cq_pages) * hw::QUEUE_PAGE_SIZE;
        if req.user_shadow_area != 0 && req.user_shadow_area != shadow_va {
            return Err(EINVAL);
        }
        crate::fault::step()?;
        let pages = PageList::new(self.dev, ring.pages(0, used)?, hw::QUEUE_PAGE_SIZE)?;
        crate::fault::step()?;
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
        cmd.shadow_addr = ring.page(cq_pages)?;
        cmd.ring = pages.descriptor();
        let tag = self.event_tags.next();
        cmd.event_tag = tag.raw();
        if let Err(e) = crate::fault::step().and_then(|()| self.admin(&cmd.encode()).map(|_| ())) {
            self.ids.lock().cqs.free(id);
            return Err(e);
        }
        Ok((id, tag, pages))
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
        // An abandoned CQ keeps a reference to its ring registration (and its pinned pages).
        if let CqMem::User { ring, .. } = &cq.mem {
            ring.release();
        }
        Ok(how)
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
