//! The seeded generator behind `ptemu gen`: ChaCha8, so a seed gives the same file on every
//! platform and release.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A reproducible random source for synthetic traces.
#[derive(Clone, Debug)]
pub struct GenRng(ChaCha8Rng);

impl GenRng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Self {
        GenRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A uniform value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.0.random_range(0..100u32) < percent
    }

    /// A uniform 64-bit value.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        self.0.fill_bytes(buf)
    }
}
