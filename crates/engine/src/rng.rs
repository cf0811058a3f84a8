//! splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
//! 2014): the one generator of the workspace's seeded choices (the simulator's link
//! faults, the soft device's fault injector, key seeds). Not for secrets.

/// The golden-ratio increment of splitmix64.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// One splitmix64 step from state `z`: a bijection on u64 with full avalanche (a
/// one-bit change of `z` changes about half of the output's bits).
pub fn mix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A splitmix64 stream from its state.
#[derive(Debug, Clone, Copy)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next number of the stream.
    pub fn next_u64(&mut self) -> u64 {
        let z = self.0;
        self.0 = z.wrapping_add(GOLDEN);
        mix64(z)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of splitmix64 seeded with 0 (as published with it).
    #[test]
    fn matches_the_reference_stream() {
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }
}
