//! Big-endian field access shared by every layout.
//!
//! Callers check buffer lengths once (`check_len`) and then use these helpers with
//! offsets inside the checked length, so they never panic after `new_checked`.

/// A byte range inside a header.
pub type Field = core::ops::Range<usize>;

#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn u24_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

#[inline]
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Reads `width` bits (1..=32) starting `bit` bits into the big-endian byte string at
/// `at` (bit 0 is the most significant bit of byte `at`). This is how IBTA tables and
/// rdma-core's `libibmad/fields.c` number bits inside a MAD.
#[inline]
pub(crate) fn bits_at(b: &[u8], at: usize, bit: usize, width: u32) -> u32 {
    debug_assert!((1..=32).contains(&width));
    let first = at + bit / 8;
    let skip = (bit % 8) as u32;
    let span = (skip + width).div_ceil(8) as usize;
    let mut acc: u64 = 0;
    for &byte in &b[first..first + span] {
        acc = (acc << 8) | u64::from(byte);
    }
    let shift = span as u32 * 8 - skip - width;
    ((acc >> shift) & ((1u64 << width) - 1)) as u32
}

/// Writes the low `width` bits of `v` where [`bits_at`] reads them; other bits are kept.
#[inline]
pub(crate) fn set_bits(b: &mut [u8], at: usize, bit: usize, width: u32, v: u32) {
    debug_assert!((1..=32).contains(&width));
    let first = at + bit / 8;
    let skip = (bit % 8) as u32;
    let span = (skip + width).div_ceil(8) as usize;
    let mut acc: u64 = 0;
    for &byte in &b[first..first + span] {
        acc = (acc << 8) | u64::from(byte);
    }
    let shift = span as u32 * 8 - skip - width;
    let mask = ((1u64 << width) - 1) << shift;
    acc = (acc & !mask) | ((u64::from(v) << shift) & mask);
    for (i, byte) in b[first..first + span].iter_mut().enumerate() {
        *byte = (acc >> ((span - 1 - i) * 8)) as u8;
    }
}

/// Declares a checked view over a fixed-length header: the struct, `new_unchecked`,
/// `new_checked`, `check_len` and `into_inner`. Accessors are written beside it.
macro_rules! fixed_view {
    ($(#[$doc:meta])* $name:ident, $len:expr, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking it.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after checking that the header fits in it.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < $len {
                    Err($crate::Error::Truncated($what))
                } else {
                    Ok(())
                }
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use fixed_view;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_fields_round_trip_across_byte_borders() {
        let mut buf = [0u8; 8];
        set_bits(&mut buf, 1, 4, 12, 0xABC);
        assert_eq!(buf, [0, 0x0A, 0xBC, 0, 0, 0, 0, 0]);
        assert_eq!(bits_at(&buf, 1, 4, 12), 0xABC);
        set_bits(&mut buf, 0, 3, 32, 0xFFFF_FFFF);
        assert_eq!(bits_at(&buf, 0, 3, 32), 0xFFFF_FFFF);
        assert_eq!(bits_at(&buf, 0, 0, 3), 0);
        assert_eq!(bits_at(&buf, 0, 35, 5), 0);
        set_bits(&mut buf, 0, 3, 32, 0);
        assert_eq!(buf, [0; 8]);
    }

    #[test]
    fn integers_are_big_endian() {
        let mut buf = [0u8; 8];
        set_u24(&mut buf, 1, 0x12_3456);
        assert_eq!(&buf[..4], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(u24_at(&buf, 1), 0x12_3456);
        set_u64(&mut buf, 0, 0x0102_0304_0506_0708);
        assert_eq!(u64_at(&buf, 0), 0x0102_0304_0506_0708);
        assert_eq!(u32_at(&buf, 4), 0x0506_0708);
        assert_eq!(u16_at(&buf, 6), 0x0708);
    }
}
