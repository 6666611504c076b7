//! Rendezvous (highest random weight) hashing: which replicas a key prefers, used by
//! `prefix_hash` and by hot prefixes to name a root prefix's owners.

use crate::candidate::Candidate;
use inferrail_sync::BlockHash;

/// Folds a block hash into the 64-bit key rendezvous hashing and the demand sketch use.
pub fn fold(hash: BlockHash) -> u64 {
    (hash.0 as u64) ^ ((hash.0 >> 64) as u64)
}

/// A well-mixed 64-bit weight of (`key`, `replica`) for rendezvous hashing.
pub fn rendezvous(key: u64, replica: u64) -> u64 {
    let mut h = key ^ replica.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The `count` candidates (indices) with the highest rendezvous weight for `key`.
pub fn top_by_rendezvous(key: u64, candidates: &[Candidate], count: usize) -> Vec<usize> {
    let mut order: Vec<(u64, usize)> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| (rendezvous(key, c.key), i))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.into_iter().take(count).map(|(_, i)| i).collect()
}
