//! Property tests: the parser never panics on hostile bytes, build→parse round-trips for
//! arbitrary header values, and the ICRC reacts to exactly the bits it should.

use proptest::prelude::*;

use super::aeth::{Aeth, NakCode, Syndrome};
use super::bth::Bth;
use super::eth::{EthHeader, Vlan};
use super::ext::{Deth, Reth};
use super::icrc;
use super::ipv4::Ipv4Header;
use super::ipv6::Ipv6Header;
use super::opcode::{self, info};
use super::packet::pad_for;
use super::{build, parse, ExtHeaders, Headers, IpHeader, WireError};

fn any_opcode() -> impl Strategy<Value = u8> {
    let ops: Vec<u8> = opcode::all().collect();
    proptest::sample::select(ops)
}

fn any_ip() -> impl Strategy<Value = IpHeader> {
    prop_oneof![any_ipv4(), any_ipv6()]
}

fn any_ipv4() -> impl Strategy<Value = IpHeader> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
    )
        .prop_map(|(src, dst, traffic_class, ttl, identification)| {
            IpHeader::V4(Ipv4Header {
                src,
                dst,
                traffic_class,
                ttl,
                identification,
            })
        })
}

fn any_ipv6() -> impl Strategy<Value = IpHeader> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        0u32..=0xf_ffff,
        any::<u8>(),
    )
        .prop_map(|(src, dst, traffic_class, flow_label, hop_limit)| {
            IpHeader::V6(Ipv6Header {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            })
        })
}

fn any_syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        proptest::sample::select(vec![
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ])
        .prop_map(Syndrome::Nak),
    ]
}

prop_compose! {
    fn any_bth(opcode: u8)(
        solicited: bool, mig_req: bool, pkey: u16, fecn: bool, becn: bool,
        dest_qp in 0u32..=0xff_ffff, ack_req: bool, psn in 0u32..=0xff_ffff,
    ) -> Bth {
        Bth { opcode, solicited, mig_req, pad_count: 0, pkey, fecn, becn, dest_qp, ack_req, psn }
    }
}

prop_compose! {
    fn any_ext(opcode: u8)(
        qkey: u32, src_qp in 0u32..=0xff_ffff,
        va: u64, rkey: u32, dma_len: u32,
        syndrome in any_syndrome(), msn in 0u32..=0xff_ffff,
        imm: u32, inv: u32,
    ) -> ExtHeaders {
        let i = info(opcode).expect("opcode from the table");
        ExtHeaders {
            deth: i.deth.then_some(Deth { qkey, src_qp }),
            reth: i.reth.then_some(Reth { va, rkey, dma_len }),
            aeth: i.aeth.then_some(Aeth { syndrome, msn }),
            immdt: i.immdt.then_some(imm),
            ieth: i.ieth.then_some(inv),
        }
    }
}

fn any_packet() -> impl Strategy<Value = (Headers, Vec<u8>)> {
    any_packet_over(any_ip().boxed())
}

/// Arbitrary packets whose IP header comes from `ip`.
fn any_packet_over(ip: BoxedStrategy<IpHeader>) -> impl Strategy<Value = (Headers, Vec<u8>)> {
    any_opcode().prop_flat_map(move |opcode| {
        let eth = (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            proptest::option::of((0u8..8, any::<bool>(), 0u16..0x1000)),
        )
            .prop_map(|(dst, src, vlan)| EthHeader {
                dst,
                src,
                vlan: vlan.map(|(pcp, dei, vid)| Vlan { pcp, dei, vid }),
            });
        let payload_max = if info(opcode).is_some_and(|i| i.payload) {
            300
        } else {
            0
        };
        (
            any_bth(opcode),
            any_ext(opcode),
            ip.clone(),
            eth,
            any::<u16>(),
            proptest::collection::vec(any::<u8>(), 0..=payload_max),
        )
            .prop_map(|(bth, ext, ip, eth, udp_src_port, payload)| {
                (
                    Headers {
                        eth,
                        ip,
                        udp_src_port,
                        bth,
                        ext,
                    },
                    payload,
                )
            })
    })
}

/// Where the IP packet starts in a built frame.
fn l2_len(h: &Headers) -> usize {
    if h.eth.vlan.is_some() {
        18
    } else {
        14
    }
}

proptest! {
    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse(&bytes);
    }

    /// Random damage to valid frames reaches the deeper layers that random bytes rarely do.
    #[test]
    fn parse_never_panics_on_damaged_frames(
        (h, payload) in any_packet(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut f = build(&h, &payload).unwrap();
        for (i, b) in edits {
            let at = i.index(f.len());
            f[at] = b;
        }
        let _ = parse(&f);
        let n = cut.index(f.len() + 1);
        let _ = parse(&f[..n]);
    }

    #[test]
    fn build_parse_round_trips((h, payload) in any_packet()) {
        let f = build(&h, &payload).unwrap();
        let p = parse(&f).unwrap();
        let want = Headers { bth: Bth { pad_count: pad_for(payload.len()), ..h.bth }, ..h };
        prop_assert_eq!(p.headers, want);
        prop_assert_eq!(p.payload, &payload[..]);
    }

    /// Single-bit flips in the ICRC-covered region: masked bits leave the ICRC valid, all
    /// others (the ICRC itself included) break it. CRC-32 catches every single-bit error, so
    /// this is exact, not probabilistic.
    #[test]
    fn icrc_flags_exactly_the_unmasked_bits((h, payload) in any_packet(), pick: prop::sample::Index) {
        let f = build(&h, &payload).unwrap();
        let mut ip = f[l2_len(&h)..].to_vec();
        let ipv6 = matches!(h.ip, IpHeader::V6(_));
        let bit = pick.index(ip.len() * 8);
        let (off, b) = (bit / 8, (bit % 8) as u8);
        ip[off] ^= 1 << b;
        let r = icrc::verify(&ip);
        if icrc::is_masked(ipv6, off, b) {
            prop_assert!(r.is_ok(), "masked bit {} of byte {} changed the ICRC: {:?}", b, off, r);
        } else if off == 0 && b >= 4 {
            prop_assert!(r.is_err(), "IP version bit accepted");
        } else {
            prop_assert!(matches!(r, Err(WireError::Icrc { .. })), "bit {} of byte {}: {:?}", b, off, r);
        }
    }

    /// What a router may do to an IPv4 RoCE packet — lower the TTL, remark DSCP/ECN, fix the
    /// header checksum — leaves it valid end to end.
    #[test]
    fn ipv4_router_rewrites_keep_the_packet_valid(
        (h, payload) in any_packet_over(any_ipv4().boxed()), ttl: u8, tos: u8,
    ) {
        let mut f = build(&h, &payload).unwrap();
        let l2 = l2_len(&h);
        f[l2 + 1] = tos;
        f[l2 + 8] = ttl;
        f[l2 + 10] = 0;
        f[l2 + 11] = 0;
        let c = super::checksum::finish(super::checksum::add(0, &f[l2..l2 + 20]));
        f[l2 + 10..l2 + 12].copy_from_slice(&c.to_be_bytes());
        let p = parse(&f).unwrap();
        let IpHeader::V4(v4) = p.headers.ip else { unreachable!() };
        prop_assert_eq!((v4.ttl, v4.traffic_class), (ttl, tos));
        prop_assert_eq!(p.payload, &payload[..]);
    }

    /// The same for IPv6: traffic class, flow label and hop limit are outside both the UDP
    /// checksum's pseudo-header and the ICRC.
    #[test]
    fn ipv6_router_rewrites_keep_the_packet_valid(
        (h, payload) in any_packet_over(any_ipv6().boxed()), hop: u8, tc: u8, flow in 0u32..=0xf_ffff,
    ) {
        let mut f = build(&h, &payload).unwrap();
        let l2 = l2_len(&h);
        let first = (6u32 << 28) | (u32::from(tc) << 20) | flow;
        f[l2..l2 + 4].copy_from_slice(&first.to_be_bytes());
        f[l2 + 7] = hop;
        let p = parse(&f).unwrap();
        let IpHeader::V6(v6) = p.headers.ip else { unreachable!() };
        prop_assert_eq!((v6.hop_limit, v6.traffic_class, v6.flow_label), (hop, tc, flow));
    }
}
