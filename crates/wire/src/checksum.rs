//! The Internet checksum (RFC 1071) used by IPv4 headers and UDP.

/// Ones'-complement sum of 16-bit big-endian words, folded to 16 bits (not inverted).
pub fn sum(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// The checksum field value for `data` (the inverted folded sum).
pub fn checksum(data: &[u8]) -> u16 {
    !(sum(data, 0) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 0001 f203 f4f5 f6f7 sums to ddf2.
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
            0xddf2
        );
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        // Odd length pads with a zero byte.
        assert_eq!(sum(&[0x01], 0), 0x0100);
    }
}
