//! The simulated engine's pure building blocks (no I/O, no clock reads: time is virtual and
//! passed in): the KV block pool with vLLM's prefix caching ([`block_pool`]), the latency model
//! ([`latency`]) and the V1-style stepped scheduler on top of both ([`scheduler`]). The HTTP
//! server that drives them on a virtual timeline, and the KV-event publisher, come next.

pub mod block_pool;
pub mod latency;
pub mod scheduler;

#[cfg(test)]
mod block_pool_tests;
#[cfg(test)]
mod scheduler_tests;

pub use block_pool::{
    AllocError, BlockId, BlockPool, CacheHit, KvCacheEvent, PoolConfigError, PrefixCacheStats,
    RequestId, SlotRequest,
};
pub use latency::{LatencyKind, LatencyModel, LinearLatency, SteppedLatency};
pub use scheduler::{
    AddRequestError, FinishReason, FinishedRequest, Request, ScheduledWork, Scheduler,
    SchedulerConfig, SchedulerConfigError, SchedulerStats, StepOutput, TokenEvent,
};
