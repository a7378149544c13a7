// SPDX-License-Identifier: GPL-2.0

//! Device and port attributes.

use crate::bindings;

/// An InfiniBand path MTU (`enum ib_mtu`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = bindings::ib_mtu_IB_MTU_256,
    /// 512 bytes.
    Mtu512 = bindings::ib_mtu_IB_MTU_512,
    /// 1024 bytes.
    Mtu1024 = bindings::ib_mtu_IB_MTU_1024,
    /// 2048 bytes.
    Mtu2048 = bindings::ib_mtu_IB_MTU_2048,
    /// 4096 bytes.
    Mtu4096 = bindings::ib_mtu_IB_MTU_4096,
}

impl Mtu {
    /// The MTU in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::infiniband::Mtu;
    /// assert_eq!(Mtu::Mtu1024.bytes(), 1024);
    /// assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    /// ```
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// Converts an `enum ib_mtu` value; `None` for values outside the enum.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::infiniband::Mtu;
    /// assert_eq!(Mtu::from_raw(3), Some(Mtu::Mtu1024));
    /// assert_eq!(Mtu::from_raw(0), None);
    /// assert_eq!(Mtu::from_raw(6), None);
    /// ```
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            bindings::ib_mtu_IB_MTU_256 => Some(Self::Mtu256),
            bindings::ib_mtu_IB_MTU_512 => Some(Self::Mtu512),
            bindings::ib_mtu_IB_MTU_1024 => Some(Self::Mtu1024),
            bindings::ib_mtu_IB_MTU_2048 => Some(Self::Mtu2048),
            bindings::ib_mtu_IB_MTU_4096 => Some(Self::Mtu4096),
            _ => None,
        }
    }
}

/// A firmware version, shown as `major.minor` in sysfs `fw_ver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// `IB_FW_VERSION_NAME_MAX` (`ETHTOOL_FWVERS_LEN`): the room ib_core gives `get_dev_fw_str`.
pub(crate) const IB_FW_VERSION_NAME_MAX: usize = 32;

impl FwVersion {
    /// Writes `major.minor`, NUL-terminated, into `out` (truncation cannot happen: two `u32`s
    /// and a dot take at most 22 bytes of the 32).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::infiniband::FwVersion;
    /// let mut b = [0xffu8; 32];
    /// FwVersion { major: 2, minor: 15 }.write_str(&mut b);
    /// assert_eq!(&b[..5], b"2.15\0");
    /// ```
    pub fn write_str(&self, out: &mut [u8]) {
        use core::fmt::Write;
        if let Some(mut f) = crate::str::NullTerminatedFormatter::new(out) {
            let _ = write!(f, "{}.{}", self.major, self.minor);
        }
    }
}

/// Device capabilities reported by `query_device`. Fields left at zero report "none".
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: u64,
    /// System image GUID, in host order.
    pub sys_image_guid: u64,
    /// Largest memory region in bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit N set: 2^N bytes).
    pub page_size_cap: u64,
    /// Vendor id reported to users (need not be the PCI vendor id).
    pub vendor_id: u32,
    /// Vendor part id reported to users.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Scatter/gather entries per RDMA READ.
    pub max_sge_rd: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Outstanding RDMA READs a QP responds to.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READs a QP initiates.
    pub max_qp_init_rd_atom: u32,
    /// Outstanding RDMA READs the device responds to in total.
    pub max_res_rd_atom: u32,
    /// Address handles.
    pub max_ah: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs one multicast group holds.
    pub max_mcast_qp_attach: u32,
    /// Multicast attachments (QP to group) in total.
    pub max_total_mcast_qp_attach: u32,
    /// Partition keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay (4.096 us * 2^n).
    pub local_ca_ack_delay: u8,
    /// `IB_DEVICE_*` capability flags.
    pub device_cap_flags: u64,
    /// Pages one fast registration can map (`max_fast_reg_page_list_len`).
    pub max_fast_reg_page_list_len: u32,
    /// The lkey under which kernel consumers' SGE addresses are DMA addresses
    /// (`IBK_LOCAL_DMA_LKEY`), if the device has one.
    pub local_dma_lkey: Option<u32>,
}

impl DeviceAttr {
    /// [`DeviceAttr::device_cap_flags`] bit: fast registration (`IB_WR_REG_MR`), local
    /// invalidate and SEND with invalidate (`IB_DEVICE_MEM_MGT_EXTENSIONS`).
    pub const CAP_MEM_MGT_EXTENSIONS: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;

    /// Writes these attributes into a C `ib_device_attr`.
    pub(crate) fn write_to(&self, out: &mut bindings::ib_device_attr) {
        out.fw_ver = self.fw_ver;
        out.sys_image_guid = self.sys_image_guid.to_be();
        out.max_mr_size = self.max_mr_size;
        out.page_size_cap = self.page_size_cap;
        out.vendor_id = self.vendor_id;
        out.vendor_part_id = self.vendor_part_id;
        out.hw_ver = self.hw_ver;
        out.max_qp = self.max_qp;
        out.max_qp_wr = self.max_qp_wr;
        out.max_send_sge = self.max_send_sge;
        out.max_recv_sge = self.max_recv_sge;
        out.max_sge_rd = self.max_sge_rd;
        out.max_cq = self.max_cq;
        out.max_cqe = self.max_cqe;
        out.max_mr = self.max_mr;
        out.max_pd = self.max_pd;
        out.max_qp_rd_atom = self.max_qp_rd_atom;
        out.max_qp_init_rd_atom = self.max_qp_init_rd_atom;
        out.max_res_rd_atom = self.max_res_rd_atom;
        out.max_ah = self.max_ah;
        out.max_mcast_grp = self.max_mcast_grp;
        out.max_mcast_qp_attach = self.max_mcast_qp_attach;
        out.max_total_mcast_qp_attach = self.max_total_mcast_qp_attach;
        out.max_pkeys = self.max_pkeys;
        out.local_ca_ack_delay = self.local_ca_ack_delay;
        out.device_cap_flags = self.device_cap_flags;
        out.max_fast_reg_page_list_len = self.max_fast_reg_page_list_len;
        if self.local_dma_lkey.is_some() {
            out.kernel_cap_flags |= u64::from(bindings::ib_kernel_cap_flags_IBK_LOCAL_DMA_LKEY);
        }
    }
}

/// The static properties of a RoCE port.
#[derive(Clone, Copy, Debug)]
pub struct RocePort {
    /// Entries in the port's GID table.
    pub gid_tbl_len: u32,
    /// Largest path MTU the port supports.
    pub max_mtu: Mtu,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
}

/// The active path MTU of a RoCE port: the largest IB MTU whose RoCEv2 packet fits the
/// Ethernet MTU, capped by the port's maximum.
///
/// `ib_mtu` is the value `iboe_get_mtu()` computed for the Ethernet MTU (0 if none fits).
pub(crate) fn active_mtu(max: Mtu, ib_mtu: u32) -> Mtu {
    match Mtu::from_raw(ib_mtu) {
        Some(m) if m < max => m,
        Some(_) => max,
        None => Mtu::Mtu256,
    }
}

#[macros::kunit_tests(rust_infiniband_attr)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_is_capped_by_the_port_and_the_link() {
        // iboe_get_mtu() of a 1500-byte Ethernet MTU is IB_MTU_1024.
        assert_eq!(
            active_mtu(Mtu::Mtu4096, bindings::ib_mtu_IB_MTU_1024),
            Mtu::Mtu1024
        );
        assert_eq!(
            active_mtu(Mtu::Mtu2048, bindings::ib_mtu_IB_MTU_4096),
            Mtu::Mtu2048
        );
        assert_eq!(
            active_mtu(Mtu::Mtu4096, bindings::ib_mtu_IB_MTU_4096),
            Mtu::Mtu4096
        );
        // No IB MTU fits (tiny link MTU): the smallest.
        assert_eq!(active_mtu(Mtu::Mtu4096, 0), Mtu::Mtu256);
    }

    #[test]
    fn device_attr_goes_to_the_c_struct_with_a_big_endian_guid() {
        let a = DeviceAttr {
            sys_image_guid: 0x0102_0304_0506_0708,
            max_qp: 7,
            max_pkeys: 1,
            ..DeviceAttr::default()
        };
        let mut c: bindings::ib_device_attr = pin_init::zeroed();
        a.write_to(&mut c);
        assert_eq!(c.sys_image_guid, 0x0102_0304_0506_0708u64.to_be());
        assert_eq!(c.max_qp, 7);
        assert_eq!(c.max_pkeys, 1);
        assert_eq!(c.max_cq, 0);
    }
}
