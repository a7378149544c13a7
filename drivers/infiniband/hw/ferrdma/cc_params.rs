// SPDX-License-Identifier: GPL-2.0

//! The congestion control parameters in debugfs (`<debugfs>/ferrdma/<pci>/cc_params/`), as
//! mlx5 shows its own: ECN and DCQCN switched on and off, the notification point's CNP
//! interval and DSCP, the reaction point's DCQCN parameters, and the line rate (read only,
//! the host's link). Each file reads and writes the device's value through QUERY_CC and
//! SET_CC (interface 1.9); the device checks what is written (`EINVAL` out of range), and the
//! host running the device may change the same values (the last writer wins). An older
//! device answers `EOPNOTSUPP`.

use crate::interface::{admin_op, cc_param, QueryObject, SetCc};
use kernel::{c_str, infiniband::DebugfsParam, prelude::*};

/// Number of parameters.
pub(crate) const N: usize = 15;

/// File names (mlx5's `cc_params` names where mlx5 has the parameter) and the device's id,
/// in the order of [`PARAMS`].
const TABLE: [(&CStr, u32); N] = [
    (c_str!("ecn_enable"), cc_param::ECN_ENABLE),
    (c_str!("dcqcn_enable"), cc_param::DCQCN_ENABLE),
    (
        c_str!("np_min_time_between_cnps"),
        cc_param::NP_MIN_TIME_BETWEEN_CNPS,
    ),
    (c_str!("np_cnp_dscp"), cc_param::NP_CNP_DSCP),
    (c_str!("rp_time_reset"), cc_param::RP_TIME_RESET),
    (c_str!("rp_byte_reset"), cc_param::RP_BYTE_RESET),
    (c_str!("rp_threshold"), cc_param::RP_THRESHOLD),
    (c_str!("rp_ai_rate"), cc_param::RP_AI_RATE),
    (c_str!("rp_hai_rate"), cc_param::RP_HAI_RATE),
    (c_str!("rp_min_rate"), cc_param::RP_MIN_RATE),
    (
        c_str!("rp_rate_reduce_monitor_period"),
        cc_param::RP_RATE_REDUCE_MONITOR_PERIOD,
    ),
    (c_str!("rp_dce_tcp_g"), cc_param::RP_DCE_TCP_G),
    (c_str!("rp_dce_tcp_rtt"), cc_param::RP_DCE_TCP_RTT),
    (
        c_str!("rp_initial_alpha_value"),
        cc_param::RP_INITIAL_ALPHA_VALUE,
    ),
    (c_str!("line_rate_mbps"), cc_param::LINE_RATE_MBPS),
];

const fn params() -> [DebugfsParam; N] {
    let mut out = [const {
        DebugfsParam {
            group: c_str!("cc_params"),
            name: c_str!(""),
            writable: false,
        }
    }; N];
    let mut i = 0;
    while i < N {
        out[i].name = TABLE[i].0;
        out[i].writable = TABLE[i].1 != cc_param::LINE_RATE_MBPS;
        i += 1;
    }
    out
}

/// The files, for [`kernel::infiniband::Driver::DEBUGFS_PARAMS`].
pub(crate) static PARAMS: [DebugfsParam; N] = params();

/// The device's id of file `index` (`EINVAL` beyond the table).
pub(crate) fn id(index: usize) -> Result<u32> {
    TABLE.get(index).map(|e| e.1).ok_or(EINVAL)
}

/// QUERY_CC for parameter `id`.
pub(crate) fn query_cmd(id: u32) -> [u8; QueryObject::SIZE] {
    QueryObject {
        hdr: crate::admin::header(admin_op::QUERY_CC),
        id,
        ..Default::default()
    }
    .encode()
}

/// SET_CC of parameter `param` to `value`.
pub(crate) fn set_cmd(param: u32, value: u32) -> [u8; SetCc::SIZE] {
    SetCc {
        hdr: crate::admin::header(admin_op::SET_CC),
        param,
        value,
        ..Default::default()
    }
    .encode()
}

#[kunit_tests(ferrdma_cc_params)]
mod tests {
    use super::*;

    #[test]
    fn every_device_parameter_has_one_file() {
        assert_eq!(N as u32, cc_param::COUNT);
        for (i, (_, id)) in TABLE.iter().enumerate() {
            assert_eq!(*id, i as u32);
            assert_eq!(super::id(i), Ok(*id));
        }
        assert_eq!(super::id(N), Err(EINVAL));
    }

    #[test]
    fn only_the_line_rate_is_read_only() {
        let ro: usize = PARAMS.iter().filter(|p| !p.writable).count();
        assert_eq!(ro, 1);
        assert!(!PARAMS[cc_param::LINE_RATE_MBPS as usize].writable);
        assert!(PARAMS.iter().all(|p| p.group == c_str!("cc_params")));
        assert_eq!(PARAMS[7].name, c_str!("rp_ai_rate"));
    }

    #[test]
    fn commands_carry_the_parameter_and_value() {
        let q = QueryObject::decode(&query_cmd(cc_param::RP_MIN_RATE));
        assert_eq!((q.hdr.opcode, q.id), (admin_op::QUERY_CC, 9));
        let s = SetCc::decode(&set_cmd(cc_param::NP_CNP_DSCP, 26));
        assert_eq!((s.hdr.opcode, s.param, s.value), (admin_op::SET_CC, 3, 26));
        assert_eq!((s.rsvd, s.rsvd3), ([0; 24], [0; 24]));
    }
}
