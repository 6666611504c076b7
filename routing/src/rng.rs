//! A small, seedable, per-core random number generator (SplitMix64). Not for cryptography.

/// SplitMix64: fast, 64-bit state, good enough statistical quality for load balancing.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed` (every seed, including 0, gives a full-period sequence).
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n`; `n` must be non-zero.
    pub fn below(&mut self, n: usize) -> usize {
        // Lemire's multiply-shift; bias is below 2^-32 for the sizes used here.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let mut counts = [0usize; 3];
        for _ in 0..3000 {
            let x = a.below(3);
            assert_eq!(x, b.below(3));
            counts[x] += 1;
        }
        assert!(counts.iter().all(|c| *c > 800), "{counts:?}");
    }
}
