//! The name of a prompt block as the router's KV index and the routing brain both read it.

/// The name of one full block of a prompt together with everything before it: equal values mean
/// equal token prefixes under an equal salt (up to XXH3-128 collisions). Computed by
/// `inferrail_shards::prefix_hash`; defined here, in the dependency-free crate both the index
/// and the routing brain already depend on, so routing needs no dependency on the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);
