// SPDX-License-Identifier: GPL-2.0

//! Address handles for UD sends. The admin queue never sleeps, so kernel consumers may
//! create and destroy them in atomic context (ib_cm does).

use crate::{
    abi::CreateAhResp,
    admin::header,
    ibdev::{IbData, Pd},
    interface as hw,
    qp::set_av,
};
use kernel::{
    infiniband::{Av, Destroyed, UData},
    prelude::*,
};

/// An address handle.
pub(crate) struct Ah {
    id: u32,
    /// The address vector it was created with, for `rdma_query_ah`.
    av: Av,
}

impl Ah {
    /// The device AH id UD WQEs name.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The address vector it was created with.
    pub(crate) fn av(&self) -> Av {
        self.av
    }
}

impl IbData<'_> {
    pub(crate) fn create_ah(&self, pd: &Pd, av: &Av, udata: Option<&mut UData<'_>>) -> Result<Ah> {
        // User space must learn the id it puts in its UD WQEs.
        if udata
            .as_ref()
            .is_some_and(|u| u.outlen() < CreateAhResp::MIN_SIZE)
        {
            return Err(EINVAL);
        }
        crate::fault::step()?;
        let id = self
            .ids
            .lock()
            .ahs
            .alloc_in(1, self.caps.max_ah.min(hw::MAX_AH))
            .ok_or(ENOMEM)?;
        let mut cmd = hw::CreateAh::decode(&[0; hw::CreateAh::SIZE]);
        cmd.hdr = header(hw::admin_op::CREATE_AH);
        cmd.ah_id = id;
        cmd.pd = pd.id();
        // UD: the destination QP is per WQE; the flow label alone picks the UDP port.
        set_av(&mut cmd.attrs, av, 0);
        let made = crate::fault::step()
            .and_then(|()| self.admin(&cmd.encode()))
            .and_then(|_| match udata {
                Some(u) => crate::fault::step()
                    .and_then(|()| u.respond(&CreateAhResp { ah_id: id }.encode()))
                    .inspect_err(|_| {
                        let _ = self.destroy_object(hw::admin_op::DESTROY_AH, id);
                    }),
                None => Ok(()),
            });
        if let Err(e) = made {
            self.ids.lock().ahs.free(id);
            return Err(e);
        }
        Ok(Ah { id, av: *av })
    }

    /// Destroys an AH; on a dead device it is only forgotten (an AH holds no memory the
    /// device could access).
    pub(crate) fn destroy_ah(&self, ah: &Ah) -> Result {
        let _: Destroyed = self.retire(hw::admin_op::DESTROY_AH, ah.id)?;
        self.ids.lock().ahs.free(ah.id);
        Ok(())
    }
}
