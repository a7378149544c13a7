// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 address vectors: where a QP or address handle sends (`struct rdma_ah_attr`).

use crate::{bindings, prelude::*};

/// A RoCEv2 destination, with the source the GID table entry implies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Av {
    /// Destination MAC (resolved by ib_core).
    pub dmac: [u8; 6],
    /// Destination GID (IPv6, or IPv4-mapped `::ffff:a.b.c.d`).
    pub dgid: [u8; 16],
    /// Source GID.
    pub sgid: [u8; 16],
    /// Source GID table index.
    pub sgid_index: u8,
    /// Source MAC (of the GID's network device).
    pub smac: [u8; 6],
    /// VLAN id of the GID's network device, if it is a VLAN device.
    pub vlan: Option<u16>,
    /// IPv6 hop limit or IPv4 TTL.
    pub hop_limit: u8,
    /// IPv6 traffic class or IPv4 TOS.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits; 0 = none).
    pub flow_label: u32,
    /// Whether the packets are IPv4 (both GIDs IPv4-mapped).
    pub ipv4: bool,
}

/// Whether `gid` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
pub const fn gid_is_ipv4(gid: &[u8; 16]) -> bool {
    let mut i = 0;
    while i < 10 {
        if gid[i] != 0 {
            return false;
        }
        i += 1;
    }
    gid[10] == 0xff && gid[11] == 0xff
}

/// The flow label RoCE derives from a QP pair when the consumer gives none
/// (`rdma_calc_flow_label`): the 20-bit fold of the product of the QP numbers.
pub const fn flow_label_from_qpns(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// The RoCEv2 UDP source port for a flow label (`rdma_flow_label_to_udp_sport`): the
/// label's upper 6 bits folded into its lower 14, in the range 0xC000..=0xFFFF.
pub const fn udp_sport_from_flow_label(fl: u32) -> u16 {
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low | 0xc000) as u16
}

/// The UDP source port of a RoCEv2 flow between two QPs (`rdma_get_udp_sport`).
pub const fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label == 0 {
        flow_label_from_qpns(lqpn, rqpn)
    } else {
        flow_label
    };
    udp_sport_from_flow_label(fl)
}

impl Av {
    /// Reads a RoCE address vector that ib_core resolved; `EINVAL` without a GRH or source
    /// GID, `EOPNOTSUPP` for anything but a RoCEv2 GID.
    ///
    /// # Safety
    ///
    /// `attr` is a valid `rdma_ah_attr` whose `sgid_attr`, if set, is a held GID attribute.
    pub(crate) unsafe fn from_raw(attr: *const bindings::rdma_ah_attr) -> Result<Self> {
        // SAFETY: Guaranteed by the caller.
        let a = unsafe { &*attr };
        if a.type_ != bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE {
            return Err(EINVAL);
        }
        if u32::from(a.ah_flags) & bindings::ib_ah_flags_IB_AH_GRH == 0 {
            return Err(EINVAL);
        }
        let grh = &a.grh;
        if grh.sgid_attr.is_null() {
            return Err(EINVAL);
        }
        // The GID attribute is shared and live (ib_core updates its netdev under RCU while we
        // hold it), so it is read field by field through the pointer, never referenced.
        let sattr = grh.sgid_attr;
        // SAFETY: `sgid_attr` is held (function contract); its type is set before it is
        // published and never changes.
        if unsafe { (*sattr).gid_type } != bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP {
            return Err(EOPNOTSUPP);
        }
        let mut vlan: u16 = 0xffff;
        let mut smac = [0u8; 6];
        // SAFETY: `sattr` is valid; the outputs are local.
        crate::error::to_result(unsafe {
            bindings::rdma_read_gid_l2_fields(sattr, &mut vlan, smac.as_mut_ptr())
        })?;
        // SAFETY: Every bit pattern of the GID unions is a byte array; the RoCE member of
        // the address union is the one in use for a RoCE AV (checked above); the held
        // attribute's GID never changes.
        let (dgid, sgid, dmac) =
            unsafe { (grh.dgid.raw, (*sattr).gid.raw, a.__bindgen_anon_1.roce.dmac) };
        Ok(Self {
            dmac,
            dgid,
            sgid,
            sgid_index: grh.sgid_index,
            smac,
            vlan: (vlan < 0x1000).then_some(vlan),
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
            flow_label: grh.flow_label & 0xf_ffff,
            ipv4: gid_is_ipv4(&sgid) && gid_is_ipv4(&dgid),
        })
    }
}

impl Av {
    /// Writes this AV into `attr` as `rdma_query_ah` returns it: a RoCE AV on port 1 with a
    /// GRH (destination GID, source GID index, hop limit, traffic class, flow label) and
    /// the destination MAC. The source GID attribute stays unset (ib_core cleared it).
    pub(crate) fn write_to(&self, attr: &mut bindings::rdma_ah_attr) {
        attr.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        attr.port_num = 1;
        attr.sl = 0;
        attr.static_rate = 0;
        attr.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        attr.grh.dgid.raw = self.dgid;
        attr.grh.sgid_index = self.sgid_index;
        attr.grh.hop_limit = self.hop_limit;
        attr.grh.traffic_class = self.traffic_class;
        attr.grh.flow_label = self.flow_label;
        attr.grh.sgid_attr = core::ptr::null();
        attr.__bindgen_anon_1.roce.dmac = self.dmac;
    }
}

#[macros::kunit_tests(rust_infiniband_av)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_gids() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 77, 0, 1]);
        assert!(gid_is_ipv4(&g));
        g[0] = 0xfe;
        assert!(!gid_is_ipv4(&g));
        assert!(!gid_is_ipv4(&[0; 16]));
    }

    #[test]
    fn udp_source_ports() {
        // Always in the RoCE dynamic range.
        for (l, r) in [(2u32, 3u32), (0xffffff, 0xffffff), (1, 1), (17, 4242)] {
            let p = udp_sport(0, l, r);
            assert!(p >= 0xc000);
        }
        // 2 * 3 = 6: no folding happens, the port is 0xC000 | 6.
        assert_eq!(flow_label_from_qpns(2, 3), 6);
        assert_eq!(udp_sport(0, 2, 3), 0xc006);
        // A given flow label wins over the QP numbers; bits 19:14 fold into 5:0.
        assert_eq!(udp_sport_from_flow_label(0x4001), 0xc000);
        assert_eq!(udp_sport(0x4001, 2, 3), 0xc000);
        // 0x1000 * 0x1000 = 2^24: bit 24 folds down to bit 4 of the label.
        assert_eq!(flow_label_from_qpns(0x1000, 0x1000), 0x10);
    }
}
