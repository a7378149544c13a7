// SPDX-License-Identifier: GPL-2.0

//! The RDMA device: an `ib_device` named `ferrdma%d` with one RoCEv2 port, speaking the irdma
//! user ABI so that stock libirdma drives it.

use kernel::{
    infiniband::{self, DeviceAttr, DriverId, Mtu, RocePort},
    prelude::*,
};

/// The RDMA side of the ferrdma driver.
pub(crate) struct FerrdmaIb;

/// What the ib_device callbacks need to know about the function.
pub(crate) struct IbData {
    /// The port MAC, as the device reports it.
    pub(crate) mac: [u8; 6],
}

/// GID table entries of the port.
const GID_TABLE_LEN: u32 = 32;

/// The node GUID of a function: the modified EUI-64 of its MAC, as RoCE devices do.
pub(crate) const fn node_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}

/// Formats a MAC the usual way, for log lines.
pub(crate) struct MacFmt(pub(crate) [u8; 6]);

impl kernel::fmt::Display for MacFmt {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

#[vtable]
impl infiniband::Driver for FerrdmaIb {
    type RegistrationData<'a> = IbData;

    const DRIVER_ID: DriverId = DriverId::Irdma;
    // The irdma user ABI version libirdma accepts (0..=5).
    const UVERBS_ABI_VER: u32 = 5;

    fn query_device(data: &IbData) -> DeviceAttr {
        DeviceAttr {
            sys_image_guid: node_guid(data.mac),
            max_mr_size: 1 << 40,
            page_size_cap: (1 << 12) | (1 << 21) | (1 << 30),
            vendor_id: u32::from(crate::interface::PCI_VENDOR_ID),
            vendor_part_id: u32::from(crate::interface::PCI_DEVICE_ID),
            hw_ver: 2,
            max_qp: 4096,
            max_qp_wr: 4096,
            max_send_sge: 13,
            max_recv_sge: 13,
            max_sge_rd: 13,
            max_cq: 4096,
            max_cqe: 1 << 20,
            max_mr: 1 << 16,
            max_pd: 1 << 16,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            max_res_rd_atom: 16 * 4096,
            max_ah: 1 << 16,
            max_pkeys: 1,
            local_ca_ack_delay: 16,
            ..DeviceAttr::default()
        }
    }

    fn query_port(_data: &IbData, _port: u32) -> RocePort {
        RocePort {
            gid_tbl_len: GID_TABLE_LEN,
            max_mtu: Mtu::Mtu4096,
            max_msg_sz: 1 << 31,
        }
    }
}

#[kunit_tests(ferrdma_ibdev)]
mod tests {
    use super::*;

    #[test]
    fn node_guid_is_the_modified_eui64_of_the_mac() {
        assert_eq!(node_guid([0x52, 0x54, 0x00, 0xfe, 0x10, 0x01]), 0x5054_00ff_fefe_1001);
        assert_eq!(node_guid([0, 0, 0, 0, 0, 0]), 0x0200_00ff_fe00_0000);
    }
}
