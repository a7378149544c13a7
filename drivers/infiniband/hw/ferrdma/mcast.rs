// SPDX-License-Identifier: GPL-2.0

//! Multicast group membership of UD QPs: MCAST_ATTACH and MCAST_DETACH.
//!
//! The device keeps the groups (at most `max_mcast_grp` of `max_mcast_qp_attach` QPs each)
//! and ends a destroyed QP's memberships itself, so the driver keeps no list: uverbs already
//! refuses a user's double attach and a detach of what it never attached, and a kernel
//! consumer's are answered by the device.

use crate::{admin::header, ibdev::IbData, interface as hw, qp::Qp};
use kernel::{
    infiniband::{mcast::McastGid, QpType},
    prelude::*,
};

/// The MCAST_ATTACH or MCAST_DETACH command of QP `qp_id` and group `gid`.
pub(crate) fn mcast_cmd(opcode: u8, qp_id: u32, gid: [u8; 16]) -> hw::McastCmd {
    hw::McastCmd {
        hdr: header(opcode),
        qp_id,
        rsvd0: 0,
        gid,
        rsvd1: [0; 32],
        rsvd2: [0; 32],
        rsvd3: [0; 32],
    }
}

impl IbData<'_> {
    /// Attaches (`attach` true) or detaches UD QP `qp` to or from the group of `gid`.
    ///
    /// `EOPNOTSUPP` from a device without multicast; `EINVAL` for a QP that is not UD, a GID
    /// that is not multicast, or a detach of a membership that does not exist; `EEXIST` for a
    /// second attach; `ENOMEM` when the group or the group table is full.
    pub(crate) fn mcast(&self, attach: bool, qp: &Qp, gid: &McastGid) -> Result {
        if self.caps.max_mcast_grp == 0 || self.caps.max_mcast_qp_attach == 0 {
            return Err(EOPNOTSUPP);
        }
        if qp.qp_type() != QpType::Ud || !gid.is_multicast() {
            return Err(EINVAL);
        }
        let opcode = if attach {
            hw::admin_op::MCAST_ATTACH
        } else {
            hw::admin_op::MCAST_DETACH
        };
        match self.admin(&mcast_cmd(opcode, qp.id(), gid.0).encode()) {
            Ok(_) => Ok(()),
            Err(e) if e == ENOENT => Err(EINVAL),
            Err(e) => Err(e),
        }
    }
}

#[kunit_tests(ferrdma_mcast)]
mod tests {
    use super::*;

    #[test]
    fn command_layout() {
        let gid = [0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
        let b = mcast_cmd(hw::admin_op::MCAST_DETACH, 0x12345, gid).encode();
        assert_eq!(b[0], hw::admin_op::MCAST_DETACH);
        assert_eq!(b[8..12], 0x12345u32.to_le_bytes());
        assert_eq!(b[16..32], gid);
        assert!(b[32..].iter().all(|&x| x == 0));
    }
}
