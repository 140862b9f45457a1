//! A small, fast pseudo-random generator (xorshift64*) for repeatable test inputs: the fuzzers
//! and the hostile guest's randomized probes. Not for anything that needs real randomness.

/// xorshift64* (Vigna, 2016): 64 bits of state, never zero.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub const fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value below `bound` (taken as at least 1).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeatable_and_bounded() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below(10) < 10);
            b.below(10);
        }
        assert_eq!(Rng::new(0).below(0), 0, "a zero bound is taken as 1");
    }
}
