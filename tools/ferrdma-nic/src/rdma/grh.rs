//! The 40-byte GRH area at the start of a UD receive buffer (RoCEv2 convention): for IPv4,
//! 20 zero bytes then the IPv4 header; for IPv6, the IPv6 header.

/// Bytes on the wire after the IP header for a UD message of `len` bytes: UDP (8), BTH (12),
/// DETH (8), payload, ICRC (4).
fn ip_payload_len(len: u32) -> u32 {
    8 + 12 + 8 + len + 4
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The GRH area for a message of `len` bytes from `sgid` to `dgid`.
pub fn grh(
    ipv4: bool,
    sgid: &[u8; 16],
    dgid: &[u8; 16],
    tc: u8,
    hop: u8,
    flow: u32,
    len: u32,
) -> [u8; 40] {
    let mut g = [0u8; 40];
    if ipv4 {
        let h = &mut g[20..40];
        h[0] = 0x45;
        h[1] = tc;
        let total = (20 + ip_payload_len(len)).min(0xffff) as u16;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[6] = 0x40; // don't fragment
        h[8] = hop;
        h[9] = 17; // UDP
        h[12..16].copy_from_slice(&sgid[12..16]);
        h[16..20].copy_from_slice(&dgid[12..16]);
        let c = ipv4_checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        let first = (6u32 << 28) | (u32::from(tc) << 20) | (flow & 0xf_ffff);
        g[0..4].copy_from_slice(&first.to_be_bytes());
        let plen = ip_payload_len(len).min(0xffff) as u16;
        g[4..6].copy_from_slice(&plen.to_be_bytes());
        g[6] = 17;
        g[7] = hop;
        g[8..24].copy_from_slice(sgid);
        g[24..40].copy_from_slice(dgid);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_checksums_to_zero() {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        d[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        let g = grh(true, &s, &d, 0, 64, 0, 100);
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(ipv4_checksum(&g[20..40]), 0);
        assert_eq!(&g[32..36], &[10, 0, 0, 1]);
        let g6 = grh(false, &s, &d, 3, 64, 5, 100);
        assert_eq!(g6[0] >> 4, 6);
        assert_eq!(&g6[24..40], &d);
    }
}
