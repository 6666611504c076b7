//! A fast keyed hasher for maps keyed by [`BlockHash`](crate::prefix_hash::BlockHash).
//!
//! Block hashes are already uniform XXH3 output, so a full SipHash round is wasted work; but they
//! are derived from client tokens with a public algorithm, so an unkeyed identity hash would let
//! a client craft prompts whose blocks all land in one bucket. This hasher folds each word into a
//! per-process random key with a 64x64->128 multiply (the folded multiply of foldhash and ahash):
//! one multiply per 128-bit key, and bucket positions an outsider cannot predict.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// An odd constant with well-spread bits (the fractional part of pi).
const MULTIPLIER: u64 = 0x243f_6a88_85a3_08d3;

/// `a * b` as a 128-bit product, its halves xor-folded into 64 bits.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The process-wide random key, drawn once from the standard library's random source.
fn process_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| RandomState::new().hash_one(0x5eed_u64) | 1)
}

/// Builds [`FoldHasher`]s seeded with the process key: equal keys hash equally within one
/// process; positions differ between processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FoldBuildHasher {
    key: u64,
}

impl Default for FoldBuildHasher {
    fn default() -> Self {
        FoldBuildHasher { key: process_key() }
    }
}

impl FoldBuildHasher {
    /// A builder with a chosen key, so tests see the same bucket positions on every run.
    #[cfg(test)]
    pub(crate) fn with_key(key: u64) -> FoldBuildHasher {
        FoldBuildHasher { key }
    }
}

impl BuildHasher for FoldBuildHasher {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher { state: self.key }
    }
}

/// The hasher of [`FoldBuildHasher`]: one folded multiply per 64-bit word written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FoldHasher {
    state: u64,
}

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, MULTIPLIER);
    }

    /// One folded multiply for a whole 128-bit key (both halves keyed), as foldhash does for
    /// 16-byte inputs: a block-hash lookup costs a single multiply.
    fn write_u128(&mut self, word: u128) {
        let lo = word as u64;
        let hi = (word >> 64) as u64;
        self.state = folded_multiply(
            lo ^ self.state,
            hi ^ self.state.rotate_left(32) ^ MULTIPLIER,
        );
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

/// A block hash as two words: 8-byte alignment keeps a map entry or a slot holding one at 24
/// bytes where a `u128` (16-byte aligned) would make it 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Key {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
}

impl std::hash::Hash for Key {
    /// Hashed as one `u128`, which [`FoldHasher`] folds with a single multiply.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u128((u128::from(self.hi) << 64) | u128::from(self.lo));
    }
}

impl From<crate::prefix_hash::BlockHash> for Key {
    fn from(h: crate::prefix_hash::BlockHash) -> Key {
        Key {
            lo: h.0 as u64,
            hi: (h.0 >> 64) as u64,
        }
    }
}

impl From<Key> for crate::prefix_hash::BlockHash {
    fn from(k: Key) -> crate::prefix_hash::BlockHash {
        crate::prefix_hash::BlockHash((u128::from(k.hi) << 64) | u128::from(k.lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash_of<T: Hash>(b: &FoldBuildHasher, v: T) -> u64 {
        b.hash_one(v)
    }

    #[test]
    fn equal_keys_hash_equally_and_neighbours_spread() {
        let b = FoldBuildHasher::with_key(0x1234_5678_9abc_def1);
        assert_eq!(hash_of(&b, (1u64, 2u64)), hash_of(&b, (1u64, 2u64)));
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000u64 {
            // The low 10 bits (what a 1024-bucket table indexes by) of consecutive keys.
            seen.insert(hash_of(&b, (i, 0u64)) & 1023);
        }
        assert!(seen.len() > 500, "only {} distinct buckets", seen.len());
    }

    #[test]
    fn byte_writes_are_consistent() {
        let b = FoldBuildHasher::with_key(7);
        let mut h1 = b.build_hasher();
        h1.write(&[1, 2, 3]);
        let mut h2 = b.build_hasher();
        h2.write(&[1, 2, 3]);
        assert_eq!(h1.finish(), h2.finish());
    }
}
