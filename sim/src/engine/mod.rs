//! The simulated engine's pure building blocks (no I/O, no clock): for now the KV block pool
//! with vLLM's prefix caching ([`block_pool`]). The scheduler, latency model and KV-event
//! publisher will be built on top of it.

pub mod block_pool;

#[cfg(test)]
mod block_pool_tests;

pub use block_pool::{
    AllocError, BlockId, BlockPool, CacheHit, KvCacheEvent, PoolConfigError, PrefixCacheStats,
    RequestId, SlotRequest,
};
