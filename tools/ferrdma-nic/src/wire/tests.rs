//! Golden vectors, round trips for every opcode, and the error paths.

use super::aeth::{Aeth, NakCode, Syndrome};
use super::bth::Bth;
use super::eth::{EthHeader, Vlan};
use super::ext::{Deth, Reth};
use super::icrc;
use super::ipv4::Ipv4Header;
use super::ipv6::Ipv6Header;
use super::opcode::{self, info};
use super::*;

/// Hex dump with `#` comments and whitespace, as stored in tests/data.
pub(crate) fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.bytes())
        .filter(|b| b.is_ascii_hexdigit())
        .collect();
    assert!(digits.len() % 2 == 0, "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

const CNP_CX4: &str = include_str!("../../tests/data/roce-cnp-connectx4lx.hex");
const UC_SCAPY: &str = include_str!("../../tests/data/roce-uc-send-only-scapy.hex");

#[test]
fn golden_connectx4_cnp_parses_with_its_icrc() {
    let f = unhex(CNP_CX4);
    assert_eq!(f.len(), 74);
    let p = parse(&f).expect("hardware CNP parses");
    let h = p.headers;
    assert_eq!(h.bth.opcode, opcode::CNP);
    assert!(h.bth.becn && !h.bth.fecn);
    assert_eq!(h.bth.dest_qp, 0x118);
    assert_eq!(h.bth.pkey, 0xffff);
    assert_eq!(h.udp_src_port, 0);
    assert_eq!(p.payload, &[0u8; 16]);
    match h.ip {
        IpHeader::V4(v4) => {
            assert_eq!(v4.src, [10, 0, 17, 1]);
            assert_eq!(v4.traffic_class, 0xc2);
            assert_eq!(v4.ttl, 0x40);
        }
        IpHeader::V6(_) => panic!("IPv4 expected"),
    }
    // And our own ICRC computation reproduces the hardware's bytes.
    let ip = &f[14..];
    let crc = icrc::compute(&ip[..ip.len() - 4]).unwrap();
    assert_eq!(crc.to_le_bytes(), [0x82, 0xfd, 0x00, 0x2a]);
}

#[test]
fn golden_connectx4_cnp_rebuilds_byte_for_byte() {
    let f = unhex(CNP_CX4);
    let p = parse(&f).unwrap();
    let IpHeader::V4(v4) = p.headers.ip else {
        panic!()
    };
    assert_eq!(v4.identification, 0x718c);
    assert_eq!(build(&p.headers, p.payload).unwrap(), f);
}

#[test]
fn golden_scapy_uc_send_only_icrc() {
    let f = unhex(UC_SCAPY);
    assert_eq!(f.len(), 14 + 64);
    // The IP checksum scapy asserted confirms the hand assembly of the header.
    let (v4, total) = Ipv4Header::parse(&f[14..]).unwrap();
    assert_eq!(total, 64);
    assert_eq!(v4.identification, 1144);
    let ip = &f[14..];
    icrc::verify(ip).expect("scapy's ICRC matches");
    let crc = icrc::compute(&ip[..ip.len() - 4]).unwrap();
    assert_eq!(crc.to_le_bytes(), [0x78, 0xf3, 0x53, 0xf3]);
}

#[test]
fn golden_icrc_ignores_masked_fields_of_the_hardware_packet() {
    let mut f = unhex(CNP_CX4);
    // TOS, TTL, IP checksum, UDP checksum, resv8a: all masked.
    for off in [14 + 1, 14 + 8, 14 + 10, 14 + 11, 14 + 26, 14 + 27, 14 + 32] {
        f[off] ^= 0x5a;
    }
    icrc::verify(&f[14..]).unwrap();
}

/// A frame an engine built and nothing changed (`Icrc::BuiltHere`) skips only the CRC:
/// a wrong ICRC then passes (the sender's promise covers it), but a frame too short to
/// carry its headers and an ICRC, or of another IP version, is refused as by `parse`.
#[test]
fn built_here_skips_the_crc_but_not_the_bounds() {
    let f = unhex(CNP_CX4);
    let mut bad = f.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(
        matches!(parse(&bad), Err(WireError::Icrc { .. })),
        "{:?}",
        parse(&bad).err()
    );
    let p = parse_with(&bad, Icrc::BuiltHere).unwrap();
    assert_eq!(p.payload, parse(&f).unwrap().payload);
    // IPv4 total length cut to IP + UDP + BTH + 3: no room for the ICRC.
    let mut short = f[..14 + 20 + 8 + 12 + 3].to_vec();
    short[14 + 2..14 + 4].copy_from_slice(&(20u16 + 8 + 12 + 3).to_be_bytes());
    short[14 + 10..14 + 12].fill(0);
    let sum = super::checksum::finish(super::checksum::add(0, &short[14..34]));
    short[14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
    short[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&(8u16 + 12 + 3).to_be_bytes());
    for icrc in [Icrc::Verify, Icrc::BuiltHere] {
        assert!(parse_with(&short, icrc).is_err(), "{icrc:?}");
    }
    assert!(icrc::check_present(&short[14..]).is_err());
    assert!(icrc::check_present(&f[14..]).is_ok());
}

/// A frame built with its ICRC deferred, then sealed, is the frame built sealed, for both
/// IP versions, with and without a VLAN tag; unsealed, an IPv4 frame fails the ICRC check
/// and an IPv6 one (sealed when built) passes; sealing again changes nothing.
#[test]
fn a_deferred_icrc_is_written_by_seal() {
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    for (v6, vlan) in [(false, false), (false, true), (true, false), (true, true)] {
        let h = headers(opcode::RC_SEND_ONLY, v6, vlan);
        let sealed = build(&h, &payload).unwrap();
        let fill = |b: &mut [u8]| {
            b.copy_from_slice(&payload);
            Ok::<(), ()>(())
        };
        let mut deferred = build_frame(&h, payload.len(), fill, Seal::Deferred)
            .unwrap()
            .unwrap();
        assert_eq!(
            parse(&deferred).is_ok(),
            v6,
            "v6 {v6} vlan {vlan}: unsealed"
        );
        seal(&mut deferred).unwrap();
        assert_eq!(deferred, sealed, "v6 {v6} vlan {vlan}");
        seal(&mut deferred).unwrap();
        assert_eq!(deferred, sealed, "sealed twice");
    }
    assert!(
        seal(&mut [0u8; 10]).is_err(),
        "too short for an Ethernet header"
    );
    let mut arp = build(&headers(opcode::RC_SEND_ONLY, false, false), &[]).unwrap();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert!(seal(&mut arp).is_err(), "not IP");
}

pub(crate) fn eth(vlan: bool) -> EthHeader {
    EthHeader {
        dst: [0x02, 0, 0, 0, 0, 1],
        src: [0x02, 0, 0, 0, 0, 2],
        vlan: vlan.then_some(Vlan {
            pcp: 3,
            dei: false,
            vid: 100,
        }),
    }
}

pub(crate) fn ip(v6: bool) -> IpHeader {
    if v6 {
        let mut src = [0u8; 16];
        src[0] = 0xfe;
        src[1] = 0x80;
        src[15] = 1;
        let mut dst = src;
        dst[15] = 2;
        IpHeader::V6(Ipv6Header {
            src,
            dst,
            traffic_class: 0x68,
            flow_label: 0x12345,
            hop_limit: 64,
        })
    } else {
        IpHeader::V4(Ipv4Header {
            src: [192, 168, 1, 1],
            dst: [192, 168, 1, 2],
            traffic_class: 0x6a,
            ttl: 64,
            identification: 0x4242,
        })
    }
}

/// The extension headers `opcode` needs, with recognisable values.
pub(crate) fn ext_for(opcode: u8) -> ExtHeaders {
    let i = info(opcode).unwrap();
    ExtHeaders {
        deth: i.deth.then_some(Deth {
            qkey: 0x8001_0000,
            src_qp: 1,
        }),
        reth: i.reth.then_some(Reth {
            va: 0x1122_3344_5566_7788,
            rkey: 0xabcd,
            dma_len: 4096,
        }),
        aeth: i.aeth.then_some(Aeth {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 77,
        }),
        immdt: i.immdt.then_some(0xdead_beef),
        ieth: i.ieth.then_some(0x1234_5678),
    }
}

pub(crate) fn headers(opcode: u8, v6: bool, vlan: bool) -> Headers {
    Headers {
        eth: eth(vlan),
        ip: ip(v6),
        udp_src_port: 0xc123,
        bth: Bth {
            opcode,
            solicited: true,
            mig_req: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x00ab_cdef,
            ack_req: true,
            psn: 0x00ff_fffe,
        },
        ext: ext_for(opcode),
    }
}

#[test]
fn opcode_table_covers_the_brief() {
    use opcode::*;
    for op in [
        RC_SEND_FIRST,
        RC_SEND_MIDDLE,
        RC_SEND_LAST,
        RC_SEND_LAST_IMM,
        RC_SEND_ONLY,
        RC_SEND_ONLY_IMM,
        RC_SEND_LAST_INV,
        RC_SEND_ONLY_INV,
        RC_WRITE_FIRST,
        RC_WRITE_MIDDLE,
        RC_WRITE_LAST,
        RC_WRITE_LAST_IMM,
        RC_WRITE_ONLY,
        RC_WRITE_ONLY_IMM,
        RC_READ_REQUEST,
        RC_READ_RESPONSE_FIRST,
        RC_READ_RESPONSE_MIDDLE,
        RC_READ_RESPONSE_LAST,
        RC_READ_RESPONSE_ONLY,
        RC_ACK,
        UD_SEND_ONLY,
        UD_SEND_ONLY_IMM,
    ] {
        assert!(info(op).is_some(), "{op:#x}");
    }
    assert!(info(RC_WRITE_ONLY_IMM).unwrap().reth && info(RC_WRITE_ONLY_IMM).unwrap().immdt);
    assert!(info(UD_SEND_ONLY_IMM).unwrap().deth && info(UD_SEND_ONLY_IMM).unwrap().immdt);
    assert!(!info(RC_ACK).unwrap().payload && !info(RC_READ_REQUEST).unwrap().payload);
    assert!(
        info(RC_READ_RESPONSE_MIDDLE).unwrap()
            == info(RC_SEND_MIDDLE)
                .map(|i| OpInfo {
                    name: "RDMA_READ_RESPONSE_MIDDLE",
                    ..i
                })
                .unwrap()
    );
    // Atomics, RD and the reserved range are refused.
    for op in [0x12, 0x13, 0x14, 0x15, 0x18, 0x2c, 0x40, 0x66, 0xff] {
        assert!(info(op).is_none(), "{op:#x}");
    }
    assert_eq!(all().count(), 22 + 12 + 1);
}

#[test]
fn every_opcode_round_trips_v4_v6_vlan() {
    for op in opcode::all() {
        let i = info(op).unwrap();
        for v6 in [false, true] {
            for vlan in [false, true] {
                let lens: &[usize] = if i.payload {
                    &[0, 1, 2, 3, 4, 5, 256, 1023]
                } else {
                    &[0]
                };
                for &len in lens {
                    let payload: Vec<u8> = (0..len).map(|x| (x * 7 + 3) as u8).collect();
                    let h = headers(op, v6, vlan);
                    let f = build(&h, &payload).unwrap_or_else(|e| panic!("{} {e}", i.name));
                    assert_eq!(f.len() % 2, 0);
                    let p = parse(&f).unwrap_or_else(|e| {
                        panic!("{} v6={v6} vlan={vlan} len={len}: {e}", i.name)
                    });
                    let pad = packet::pad_for(len);
                    assert_eq!(
                        p.headers,
                        Headers {
                            bth: Bth {
                                pad_count: pad,
                                ..h.bth
                            },
                            ..h
                        }
                    );
                    assert_eq!(p.payload, &payload[..]);
                    // Headers + payload + pad is a multiple of 4 after the UDP header.
                    let l2 = if vlan { 18 } else { 14 };
                    let l3 = if v6 { 40 } else { 20 };
                    assert_eq!((f.len() - l2 - l3 - 8) % 4, 0);
                }
            }
        }
    }
}

#[test]
fn header_fields_land_at_the_documented_offsets() {
    let h = headers(opcode::RC_SEND_ONLY_IMM, false, false);
    let f = build(&h, b"abc").unwrap();
    let ip = &f[14..];
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[1], 0x6a);
    assert_eq!(&ip[6..8], &[0x40, 0x00], "DF set");
    assert_eq!(ip[8], 64);
    assert_eq!(ip[9], 17);
    let udp = &ip[20..];
    assert_eq!(&udp[0..4], &[0xc1, 0x23, 0x12, 0xb7]);
    assert_eq!(&udp[6..8], &[0, 0], "IPv4 UDP checksum 0");
    let bth = &udp[8..20];
    assert_eq!(
        bth,
        &[0x05, 0xd0, 0xff, 0xff, 0x00, 0xab, 0xcd, 0xef, 0x80, 0xff, 0xff, 0xfe]
    );
    assert_eq!(&udp[20..24], &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(&udp[24..28], &[b'a', b'b', b'c', 0]);

    let h6 = headers(opcode::UD_SEND_ONLY, true, true);
    let f6 = build(&h6, b"").unwrap();
    assert_eq!(&f6[12..18], &[0x81, 0x00, 0x60, 0x64, 0x86, 0xdd]);
    let ip6 = &f6[18..];
    assert_eq!(&ip6[0..4], &[0x66, 0x81, 0x23, 0x45]);
    assert_eq!(ip6[6], 17);
    assert_eq!(ip6[7], 64);
    let udp6 = &ip6[40..];
    assert_ne!(&udp6[6..8], &[0, 0], "IPv6 UDP checksum present");
    assert_eq!(
        &udp6[20..28],
        &[0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]
    );
}

#[test]
fn aeth_syndromes() {
    let cases = [
        (Syndrome::Ack { credits: 0 }, 0x00),
        (Syndrome::Ack { credits: 31 }, 0x1f),
        (Syndrome::RnrNak { timer: 14 }, 0x2e),
        (Syndrome::Nak(NakCode::PsnSequenceError), 0x60),
        (Syndrome::Nak(NakCode::InvalidRequest), 0x61),
        (Syndrome::Nak(NakCode::RemoteAccessError), 0x62),
        (Syndrome::Nak(NakCode::RemoteOperationalError), 0x63),
        (Syndrome::Nak(NakCode::InvalidRdRequest), 0x64),
    ];
    for (s, b) in cases {
        assert_eq!(s.to_byte().unwrap(), b);
        assert_eq!(Syndrome::from_byte(b).unwrap(), s);
    }
    for bad in [0x40, 0x5f, 0x65, 0x7f] {
        assert_eq!(Syndrome::from_byte(bad), Err(WireError::AethSyndrome(bad)));
    }
    // Bit 7 is reserved: ignored on receive.
    assert_eq!(
        Syndrome::from_byte(0x80).unwrap(),
        Syndrome::Ack { credits: 0 }
    );
    assert!(Syndrome::RnrNak { timer: 32 }.to_byte().is_err());
}

#[test]
fn builder_refuses_what_the_wire_cannot_carry() {
    let mut h = headers(opcode::RC_SEND_ONLY, false, false);
    h.ext.reth = Some(Reth {
        va: 0,
        rkey: 0,
        dma_len: 0,
    });
    assert!(matches!(
        build(&h, b""),
        Err(WireError::ExtHeader { header: "RETH", .. })
    ));
    let h = Headers {
        ext: ExtHeaders::default(),
        ..headers(opcode::RC_ACK, false, false)
    };
    assert!(matches!(
        build(&h, b""),
        Err(WireError::ExtHeader { header: "AETH", .. })
    ));
    assert_eq!(
        build(&headers(opcode::RC_ACK, false, false), b"x"),
        Err(WireError::UnexpectedPayload(0x11))
    );
    let mut h = headers(opcode::RC_SEND_ONLY, false, false);
    h.bth.opcode = 0x13; // compare & swap: atomics are not supported
    assert_eq!(build(&h, b""), Err(WireError::Opcode(0x13)));
    let mut h = headers(opcode::RC_SEND_ONLY, false, false);
    h.bth.psn = 1 << 24;
    assert!(matches!(
        build(&h, b""),
        Err(WireError::Field {
            field: "bth.psn",
            ..
        })
    ));
    let mut h = headers(opcode::RC_SEND_ONLY, false, false);
    h.bth.dest_qp = 1 << 24;
    assert!(matches!(
        build(&h, b""),
        Err(WireError::Field {
            field: "bth.dest_qp",
            ..
        })
    ));
    let big = vec![0u8; 65536];
    assert!(matches!(
        build(&headers(opcode::RC_SEND_ONLY, false, false), &big),
        Err(WireError::TooLong(_))
    ));
    assert!(matches!(
        build(&headers(opcode::RC_SEND_ONLY, true, false), &big),
        Err(WireError::TooLong(_))
    ));
}

#[test]
fn parser_refuses_damaged_frames() {
    let good = build(&headers(opcode::RC_WRITE_ONLY, false, false), b"payload!").unwrap();
    assert!(parse(&good).is_ok());
    // Every truncation is an error, never a panic.
    for n in 0..good.len() {
        assert!(parse(&good[..n]).is_err(), "truncated to {n}");
    }
    // Ethernet padding after the IP packet is ignored.
    let mut padded = good.clone();
    padded.extend_from_slice(&[0; 10]);
    assert_eq!(parse(&padded).unwrap().payload, b"payload!");

    let mut f = good.clone();
    let last = f.len() - 1;
    f[last] ^= 1;
    assert!(matches!(parse(&f), Err(WireError::Icrc { .. })));
    let mut f = good.clone();
    f[14 + 20 + 3] = 0xb8; // destination port 4792
    assert_eq!(parse(&f), Err(WireError::NotRoce(4792)));
    let mut f = good.clone();
    f[14 + 12] ^= 1; // source address: breaks the IP checksum
    assert_eq!(parse(&f), Err(WireError::Ipv4Checksum));
    let mut f = good.clone();
    f[12] = 0x88;
    assert!(matches!(parse(&f), Err(WireError::EtherType(_))));

    let good6 = build(&headers(opcode::RC_SEND_ONLY, true, false), b"abcd").unwrap();
    // A zero checksum is "none" over IPv6 too (rxe sends that); the ICRC still holds.
    let mut f = good6.clone();
    f[14 + 40 + 6] = 0;
    f[14 + 40 + 7] = 0;
    assert!(parse(&f).is_ok());
    let mut f = good6.clone();
    f[14 + 40 + 6] ^= 0x10;
    assert_eq!(parse(&f), Err(WireError::UdpChecksum));
}

const V6_SCAPY: &str = include_str!("../../tests/data/roce-rc-send-only-ipv6-scapy.hex");
const V4_VLAN_SCAPY: &str = include_str!("../../tests/data/roce-rc-send-only-ipv4-vlan-scapy.hex");

#[test]
fn golden_scapy_ipv6_rc_send_only_parses_and_rebuilds() {
    let f = unhex(V6_SCAPY);
    let p = parse(&f).expect("scapy IPv6 packet parses (UDP checksum and ICRC)");
    assert_eq!(p.payload, b"hello ferrdma");
    let h = p.headers;
    assert_eq!(h.bth.opcode, opcode::RC_SEND_ONLY);
    assert_eq!(
        (h.bth.dest_qp, h.bth.psn, h.bth.pad_count),
        (0xabcdef, 0x123456, 3)
    );
    assert!(h.bth.solicited && h.bth.ack_req);
    let IpHeader::V6(v6) = h.ip else {
        panic!("IPv6 expected")
    };
    assert_eq!(
        (v6.traffic_class, v6.flow_label, v6.hop_limit),
        (0x68, 0x12345, 64)
    );
    // Our builder produces the identical frame, UDP checksum and ICRC included.
    assert_eq!(build(&h, p.payload).unwrap(), f);
}

#[test]
fn golden_scapy_ipv4_vlan_rc_send_only_parses_and_rebuilds() {
    let f = unhex(V4_VLAN_SCAPY);
    let p = parse(&f).expect("scapy IPv4/VLAN packet parses");
    assert_eq!(p.payload, b"0123456789abcdef");
    let h = p.headers;
    assert_eq!(
        h.eth.vlan,
        Some(Vlan {
            pcp: 3,
            dei: false,
            vid: 100
        })
    );
    assert!(h.bth.fecn && !h.bth.becn);
    assert_eq!((h.bth.dest_qp, h.bth.psn), (0x11, 7));
    assert_eq!(build(&h, p.payload).unwrap(), f);
}

const RXE_V6_SEND_FIRST: &str = include_str!("../../tests/data/roce-rc-send-first-ipv6-rxe.hex");
const RXE_V4_ACK: &str = include_str!("../../tests/data/roce-rc-ack-ipv4-rxe.hex");

/// Linux rxe leaves the IPv6 UDP checksum 0; the NIC used to refuse such frames, so RC over
/// IPv6 with an rxe peer never completed (tests/interop-rxe-ferrdma.sh).
#[test]
fn golden_rxe_ipv6_frame_with_zero_udp_checksum_parses() {
    let f = unhex(RXE_V6_SEND_FIRST);
    assert_eq!(f.len(), 1102);
    assert_eq!(
        &f[14 + 40 + 6..14 + 40 + 8],
        &[0, 0],
        "rxe's zero UDP checksum"
    );
    let p = parse(&f).expect("rxe's IPv6 frame parses");
    let h = p.headers;
    assert_eq!(h.bth.opcode, opcode::RC_SEND_FIRST);
    assert_eq!(h.bth.dest_qp, 2);
    assert_eq!(p.payload.len(), 1024);
    assert!(p.payload[1..].iter().all(|&b| b == 0x7b));
    let IpHeader::V6(ip) = h.ip else {
        panic!("not IPv6")
    };
    assert_eq!(ip.src[..4], [0xfd, 0x00, 0x00, 0x0f]);
    // Rebuilt by the NIC (which computes the UDP checksum), it is the same frame apart from
    // that checksum.
    let mut rebuilt = build(&h, p.payload).unwrap();
    rebuilt[14 + 40 + 6] = 0;
    rebuilt[14 + 40 + 7] = 0;
    assert_eq!(rebuilt, f);
    // A wrong non-zero checksum is still refused.
    let mut bad = f.clone();
    bad[14 + 40 + 7] = 1;
    assert_eq!(parse(&bad), Err(WireError::UdpChecksum));
}

#[test]
fn golden_rxe_ipv4_ack_parses_and_rebuilds_byte_for_byte() {
    let f = unhex(RXE_V4_ACK);
    let p = parse(&f).expect("rxe's ACK parses");
    let h = p.headers;
    assert_eq!(h.bth.opcode, opcode::RC_ACK);
    assert!(h.ext.aeth.is_some());
    assert_eq!(build(&h, p.payload).unwrap(), f);
}
