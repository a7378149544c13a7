// SPDX-License-Identifier: GPL-2.0

//! Multicast group membership of UD QPs (`attach_mcast`, `detach_mcast`).
//!
//! ib_core has already checked that the QP is UD and, on RoCE, that the GID is a multicast
//! address; uverbs keeps a user QP's list of groups, so a user cannot attach twice or detach
//! what it never attached. Kernel consumers are not checked that way: the driver's device
//! answers for them.

use super::{device::Device, qp::qp_data, Driver};
use crate::{bindings, ffi::c_int, prelude::*};

/// A multicast GID (IPv6, or IPv4-mapped `::ffff:a.b.c.d`), in network byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McastGid(pub [u8; 16]);

impl McastGid {
    /// Whether this is a multicast address: IPv6 `ff00::/8` or IPv4-mapped `224.0.0.0/4`.
    pub fn is_multicast(&self) -> bool {
        let g = &self.0;
        let v4_mapped = g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
        g[0] == 0xff || (v4_mapped && g[12] & 0xf0 == 0xe0)
    }
}

/// Reads the GID of a multicast callback.
///
/// # Safety
///
/// `gid` is valid for reads for the call.
unsafe fn gid_of(gid: *const bindings::ib_gid) -> Result<McastGid> {
    if gid.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: Valid for reads (function contract); every bit pattern is a valid `raw`.
    Ok(McastGid(unsafe { (*gid).raw }))
}

/// A driver's membership operation: [`Driver::attach_mcast`] or [`Driver::detach_mcast`].
type MembershipOp<T> =
    fn(&<T as Driver>::RegistrationData<'_>, &<T as Driver>::Qp, &McastGid) -> Result;

/// The body of both multicast callbacks: `op` on the QP's driver data and the GID.
///
/// # Safety
///
/// Called by ib_core for a live QP `create_qp` initialised, with a valid `gid`.
unsafe fn membership<T: Driver>(
    qp: *mut bindings::ib_qp,
    gid: *mut bindings::ib_gid,
    op: MembershipOp<T>,
) -> c_int {
    crate::error::from_result(|| {
        // SAFETY: The QP is live and initialised; `gid` is valid (function contract).
        let (dev, data, gid) = unsafe {
            (
                Device::<T>::from_raw((*qp).device),
                qp_data::<T>(qp),
                gid_of(gid)?,
            )
        };
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| op(d, data, &gid)) }?;
        Ok(0)
    })
}

/// `attach_mcast`.
///
/// # Safety
///
/// Called by ib_core for a live QP `create_qp` initialised, with a valid `gid`.
pub(crate) unsafe extern "C" fn attach_mcast<T: Driver>(
    qp: *mut bindings::ib_qp,
    gid: *mut bindings::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: The callback contract is `membership`'s.
    unsafe { membership::<T>(qp, gid, T::attach_mcast) }
}

/// `detach_mcast`.
///
/// # Safety
///
/// Called by ib_core for a live QP `create_qp` initialised, with a valid `gid`.
pub(crate) unsafe extern "C" fn detach_mcast<T: Driver>(
    qp: *mut bindings::ib_qp,
    gid: *mut bindings::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: The callback contract is `membership`'s.
    unsafe { membership::<T>(qp, gid, T::detach_mcast) }
}

#[macros::kunit_tests(rust_infiniband_mcast)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> McastGid {
        McastGid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d])
    }

    #[test]
    fn multicast_gids_are_ipv6_ff00_or_ipv4_class_d() {
        assert!(v4(224, 0, 0, 1).is_multicast());
        assert!(v4(239, 255, 255, 255).is_multicast());
        assert!(!v4(240, 0, 0, 1).is_multicast());
        assert!(!v4(223, 255, 255, 255).is_multicast());
        assert!(!v4(10, 0, 0, 1).is_multicast());
        let mut v6 = [0u8; 16];
        v6[0] = 0xff;
        v6[1] = 0x0e;
        assert!(McastGid(v6).is_multicast());
        v6[0] = 0xfe;
        assert!(!McastGid(v6).is_multicast());
        // 224.x.x.x bytes outside the v4-mapped prefix are not IPv4 multicast.
        let mut odd = v4(224, 0, 0, 1).0;
        odd[11] = 0;
        assert!(!McastGid(odd).is_multicast());
    }
}
