//! The Internet checksum (RFC 1071): ones' complement sum of 16-bit big-endian words, used by
//! the IPv4 header and by UDP.

/// Add `data` to a running 32-bit accumulator (odd trailing byte padded with zero).
pub fn add(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = fold(acc + u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [last] = chunks.remainder() {
        acc = fold(acc + (u32::from(*last) << 8));
    }
    acc
}

/// Fold carries so the accumulator never overflows (it stays below 0x1_ffff after folding).
fn fold(mut acc: u32) -> u32 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// The checksum to store: complement of the folded sum.
pub fn finish(acc: u32) -> u16 {
    !(fold(acc) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example words 0001 f203 f4f5 f6f7 sum to 0xddf2.
        let acc = add(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(acc, 0xddf2);
        assert_eq!(finish(acc), !0xddf2);
    }
}
