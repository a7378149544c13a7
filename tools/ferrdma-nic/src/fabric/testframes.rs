//! Test frames shared by the fabric tests: a minimal non-IP frame and RoCEv2 UD SENDs built
//! with `crate::wire` (valid ICRC), over IPv4 or IPv6, with or without 802.1Q.

use super::switch::Mac;
use crate::wire::bth::Bth;
use crate::wire::eth::{EthHeader, Vlan};
use crate::wire::ext::Deth;
use crate::wire::ipv4::Ipv4Header;
use crate::wire::ipv6::Ipv6Header;
use crate::wire::{build, ExtHeaders, Headers, IpHeader};

/// An ARP-typed frame of minimum size.
pub fn plain(dst: Mac, src: Mac) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x0806u16.to_be_bytes());
    f.extend_from_slice(&[0u8; 46]);
    f
}

pub fn roce(dst: Mac, src: Mac, v6: bool, vlan: bool) -> Vec<u8> {
    let ip = if v6 {
        IpHeader::V6(Ipv6Header {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            src: [0xfe; 16],
            dst: [0xfd; 16],
        })
    } else {
        IpHeader::V4(Ipv4Header {
            traffic_class: 0,
            identification: 1,
            ttl: 64,
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
        })
    };
    let h = Headers {
        eth: EthHeader {
            dst,
            src,
            vlan: vlan.then_some(Vlan {
                pcp: 3,
                dei: false,
                vid: 7,
            }),
        },
        ip,
        udp_src_port: 0xc000,
        bth: Bth {
            opcode: 0x64, // UD SEND only
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: false,
            psn: 5,
        },
        ext: ExtHeaders {
            deth: Some(Deth {
                qkey: 0x1111,
                src_qp: 2,
            }),
            ..Default::default()
        },
    };
    build(&h, b"ping").expect("valid headers")
}
