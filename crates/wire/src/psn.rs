//! 24-bit packet sequence numbers (IBTA 9.7.1) with wrapping comparison.
//!
//! PSNs live on a circle of 2^24 values. Two PSNs compare by the shorter way round: `a`
//! is before `b` when `b - a (mod 2^24)` is in `1..2^23`. This is the same rule rxe
//! uses (`psn_compare`: the sign of the 24-bit difference shifted into 32 bits).

use core::fmt;

/// Number of distinct PSNs.
pub const PSN_MODULUS: u32 = 1 << 24;
const MASK: u32 = PSN_MODULUS - 1;
const HALF: u32 = PSN_MODULUS / 2;

/// A 24-bit PSN.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// PSN 0.
    pub const ZERO: Psn = Psn(0);
    /// The largest PSN, 2^24 − 1.
    pub const MAX: Psn = Psn(MASK);

    /// A PSN from the low 24 bits of `v` (higher bits are dropped).
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK)
    }

    /// `self − n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK)
    }

    /// The next PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// How far `self` is ahead of `base`, going forward round the circle (0..2^24).
    pub const fn forward_from(self, base: Psn) -> u32 {
        self.0.wrapping_sub(base.0) & MASK
    }

    /// Signed distance from `other` to `self` by the shorter way: positive when `self`
    /// is after `other`, in `-2^23..2^23`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back: sign-extends it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// True when `self` comes before `other`.
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` comes after `other`.
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True when `self` is one of the `len` PSNs starting at `start` (wrapping).
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.forward_from(start) < len
    }

    /// Compares by the wrapping rule. Not a total order on all 2^24 values (it is not
    /// transitive across half the circle), so `Psn` does not implement `Ord`.
    pub fn cmp_wrapping(self, other: Psn) -> core::cmp::Ordering {
        self.diff(other).cmp(&0)
    }

    /// Half the PSN space: the largest forward distance still counted as "after".
    pub const HALF_RANGE: u32 = HALF;
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_24() {
        assert_eq!(Psn::MAX.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.sub(1), Psn::MAX);
        assert!(Psn::MAX.is_before(Psn::ZERO));
        assert!(Psn::ZERO.is_after(Psn::MAX));
        assert_eq!(Psn::ZERO.diff(Psn::MAX), 1);
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
        assert!(Psn::new(2).in_window(Psn::MAX, 4));
        assert!(!Psn::new(3).in_window(Psn::MAX, 4));
        assert_eq!(Psn::new(5).forward_from(Psn::new(0xff_fffe)), 7);
        // Exactly half way round counts as "before" (the i32 sign bit is set).
        assert!(Psn::new(HALF).is_before(Psn::ZERO));
        assert_eq!(Psn::new(HALF).diff(Psn::ZERO), -(HALF as i32));
    }

    fn near_wrap() -> impl Strategy<Value = u32> {
        prop_oneof![
            0u32..256,
            (MASK - 255)..=MASK,
            0u32..=MASK,
            (HALF - 128)..(HALF + 128)
        ]
    }

    proptest! {
        #[test]
        fn add_then_diff(a in near_wrap(), n in 0u32..HALF) {
            let p = Psn::new(a);
            let q = p.add(n);
            prop_assert_eq!(q.diff(p), n as i32);
            prop_assert_eq!(p.diff(q), -(n as i32));
            prop_assert_eq!(q.sub(n), p);
            prop_assert_eq!(q.forward_from(p), n);
            prop_assert!(n == 0 || q.is_after(p));
            prop_assert!(n == 0 || p.is_before(q));
            prop_assert!(q.in_window(p, n + 1));
            prop_assert!(!q.in_window(p, n));
        }

        #[test]
        fn antisymmetric(a in near_wrap(), b in near_wrap()) {
            let (p, q) = (Psn::new(a), Psn::new(b));
            if p.diff(q) != i32::MIN >> 8 {
                prop_assert_eq!(p.diff(q), -q.diff(p));
            }
            prop_assert_eq!(p.cmp_wrapping(q) == core::cmp::Ordering::Equal, p == q);
            prop_assert!(p.value() < PSN_MODULUS);
        }
    }
}
