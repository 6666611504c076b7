//! The router's own block hashes: XXH3-128 in a chain, salted by model, LoRA adapter and
//! `cache_salt`.
//!
//! A prompt of token ids is cut into full blocks of `block_size` tokens; a trailing partial block
//! is never hashed (engines only cache full blocks). Block `i` is named by
//!
//! ```text
//! h_i = xxh3_128(le_bytes(h_{i-1}) || le_bytes(ids of block i as u32))
//! ```
//!
//! with `h_{-1}` the [`HashSalt`]'s seed, so a block's hash names its whole prefix and the salt:
//! equal hashes mean (up to 128-bit collisions) the same tokens from the start of the prompt
//! under the same model, adapter and salt. These are keys of the router's approximate KV index
//! only; they are deliberately unrelated to the engine's own hashes ([`crate::block_hash`]),
//! which are never used as the router's keys.

use xxhash_rust::xxh3::xxh3_128;

/// The name of one full block of a prompt together with everything before it: equal values mean
/// equal token prefixes under an equal [`HashSalt`] (up to XXH3-128 collisions). Defined in
/// `inferrail-sync` so the routing brain can read it without depending on this crate.
pub use inferrail_sync::BlockHash;

/// Domain separation for the salt seed, so the seed can never equal a block hash computed from
/// token ids by accident of encoding.
const SALT_DOMAIN: &[u8] = b"inferrail/prefix-hash/v1\0";

/// What separates one KV cache namespace from another: the model, the LoRA adapter (if any) and
/// the request's `cache_salt` (if any). Two salts are equal exactly when all three parts are
/// equal; `None` and `Some("")` are different salts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashSalt {
    /// `h_{-1}`: the parent of every prompt's first block.
    seed: u128,
}

impl HashSalt {
    /// The salt for `model`, an optional LoRA adapter name and an optional `cache_salt`. The
    /// parts are length-prefixed, so no two different triples share an encoding.
    pub fn new(model: &str, lora: Option<&str>, cache_salt: Option<&str>) -> HashSalt {
        let mut bytes = Vec::with_capacity(
            SALT_DOMAIN.len()
                + 27
                + model.len()
                + lora.map_or(0, str::len)
                + cache_salt.map_or(0, str::len),
        );
        bytes.extend_from_slice(SALT_DOMAIN);
        push_part(&mut bytes, Some(model));
        push_part(&mut bytes, lora);
        push_part(&mut bytes, cache_salt);
        HashSalt {
            seed: xxh3_128(&bytes),
        }
    }

    /// The chain's starting value `h_{-1}` (never itself a block's name).
    pub fn seed(&self) -> BlockHash {
        BlockHash(self.seed)
    }
}

/// Appends one optional string: a presence byte, then (when present) its length as a
/// little-endian u64 and its bytes.
fn push_part(out: &mut Vec<u8>, part: Option<&str>) {
    match part {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// The hash of every full block of `ids` in order: `ids.len() / block_size` values, the trailing
/// partial block never hashed. A `block_size` of 0 has no full blocks and yields nothing.
/// Guarantees: changing a token changes the hash of its block and of every later block (up to
/// collisions) and never of an earlier one; a prompt's hashes are a prefix of the hashes of any
/// longer prompt that starts with it; different salts give unrelated chains.
pub fn block_hashes(salt: &HashSalt, ids: &[u32], block_size: usize) -> Vec<BlockHash> {
    let mut out = Vec::new();
    extend_block_hashes(salt.seed(), ids, block_size, &mut out);
    out
}

/// Continues a chain from `parent` (a salt's [`HashSalt::seed`] or the last hash of an earlier
/// part of the same prompt) over the full blocks of `ids`, appending one hash per full block to
/// `out`. `block_hashes(salt, a ++ b)` equals the hashes of `a` followed by
/// `extend_block_hashes(last hash of a, b)` whenever `a.len()` is a multiple of `block_size`.
pub fn extend_block_hashes(
    parent: BlockHash,
    ids: &[u32],
    block_size: usize,
    out: &mut Vec<BlockHash>,
) {
    if block_size == 0 {
        return;
    }
    out.reserve(ids.len() / block_size);
    let mut buf = Vec::with_capacity(16 + 4 * block_size);
    let mut parent = parent;
    for block in ids.chunks_exact(block_size) {
        buf.clear();
        buf.extend_from_slice(&parent.0.to_le_bytes());
        for id in block {
            buf.extend_from_slice(&id.to_le_bytes());
        }
        parent = BlockHash(xxh3_128(&buf));
        out.push(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn salt() -> HashSalt {
        HashSalt::new("m", None, None)
    }

    #[test]
    fn partial_block_is_never_hashed() {
        let ids: Vec<u32> = (0..35).collect();
        assert_eq!(block_hashes(&salt(), &ids, 16).len(), 2);
        assert_eq!(block_hashes(&salt(), &ids[..15], 16).len(), 0);
        assert!(block_hashes(&salt(), &ids, 0).is_empty());
    }

    #[test]
    fn chain_is_the_documented_formula() {
        let s = salt();
        let ids = [1u32, 2, 3, 4];
        let mut first = s.seed().0.to_le_bytes().to_vec();
        first.extend_from_slice(&1u32.to_le_bytes());
        first.extend_from_slice(&2u32.to_le_bytes());
        let h0 = xxh3_128(&first);
        let mut second = h0.to_le_bytes().to_vec();
        second.extend_from_slice(&3u32.to_le_bytes());
        second.extend_from_slice(&4u32.to_le_bytes());
        let h1 = xxh3_128(&second);
        assert_eq!(
            block_hashes(&s, &ids, 2),
            vec![BlockHash(h0), BlockHash(h1)]
        );
    }

    #[test]
    fn salt_parts_are_unambiguous() {
        let salts = [
            HashSalt::new("m", None, None),
            HashSalt::new("m", Some(""), None),
            HashSalt::new("m", None, Some("")),
            HashSalt::new("m", Some("a"), None),
            HashSalt::new("m", None, Some("a")),
            HashSalt::new("ma", None, None),
            HashSalt::new("m", Some("a"), Some("b")),
            HashSalt::new("m", Some("b"), Some("a")),
        ];
        let seeds: HashSet<_> = salts.iter().map(|s| s.seed()).collect();
        assert_eq!(seeds.len(), salts.len());
    }

    fn prompt() -> impl Strategy<Value = Vec<u32>> {
        prop::collection::vec(0u32..50, 0..120)
    }

    proptest! {
        #[test]
        fn changed_token_changes_its_block_and_every_later_one(
            ids in prompt(), bs in 1usize..9, at in any::<prop::sample::Index>(), delta in 1u32..1000
        ) {
            prop_assume!(!ids.is_empty());
            let s = salt();
            let i = at.index(ids.len());
            let mut changed = ids.clone();
            changed[i] = changed[i].wrapping_add(delta);
            let a = block_hashes(&s, &ids, bs);
            let b = block_hashes(&s, &changed, bs);
            prop_assert_eq!(a.len(), b.len());
            for k in 0..a.len() {
                if k < i / bs {
                    prop_assert_eq!(a[k], b[k]);
                } else {
                    prop_assert_ne!(a[k], b[k]);
                }
            }
        }

        #[test]
        fn a_prefix_hashes_the_same_alone_or_inside(ids in prompt(), bs in 1usize..9, cut in any::<prop::sample::Index>()) {
            let s = salt();
            let n = cut.index(ids.len() + 1);
            let whole = block_hashes(&s, &ids, bs);
            let prefix = block_hashes(&s, &ids[..n], bs);
            prop_assert_eq!(prefix.len(), n / bs);
            prop_assert_eq!(&whole[..prefix.len()], &prefix[..]);
            prop_assert_eq!(whole.len(), ids.len() / bs);
        }

        #[test]
        fn extending_a_chain_equals_hashing_the_whole(ids in prompt(), bs in 1usize..9, cut in any::<prop::sample::Index>()) {
            let s = salt();
            let n = cut.index(ids.len() / bs + 1) * bs;
            let mut out = block_hashes(&s, &ids[..n], bs);
            let parent = out.last().copied().unwrap_or(s.seed());
            extend_block_hashes(parent, &ids[n..], bs, &mut out);
            prop_assert_eq!(out, block_hashes(&s, &ids, bs));
        }

        #[test]
        fn different_salts_give_disjoint_chains(
            ids in prompt(), other in prompt(), bs in 1usize..9,
            m1 in "[a-c]{0,2}", m2 in "[a-c]{0,2}",
            l1 in proptest::option::of("[a-c]{0,2}"), l2 in proptest::option::of("[a-c]{0,2}"),
            c1 in proptest::option::of("[a-c]{0,2}"), c2 in proptest::option::of("[a-c]{0,2}"),
        ) {
            let s1 = HashSalt::new(&m1, l1.as_deref(), c1.as_deref());
            let s2 = HashSalt::new(&m2, l2.as_deref(), c2.as_deref());
            prop_assume!((&m1, &l1, &c1) != (&m2, &l2, &c2));
            prop_assert_ne!(s1, s2);
            let a: HashSet<_> = block_hashes(&s1, &ids, bs).into_iter().collect();
            let b: HashSet<_> = block_hashes(&s2, &other, bs).into_iter().collect();
            prop_assert!(a.is_disjoint(&b));
        }
    }
}
