//! KV cache events in vLLM 0.32's format, as the simulated engine publishes them: the codec and
//! the PUB and ROUTER sockets come from [`inferrail_events`] (shared with the gateway, which
//! subscribes); this module adds `--kv-events-config` ([`config`]) and turns the engine's block
//! pool events into wire batches ([`engine`]).
//!
//! The engine turns each step's [`crate::engine::block_pool::KvCacheEvent`]s into a
//! [`KvEventBatch`] ([`batch_from_engine`]) and hands it to a [`KvEventPublisher`], which never
//! blocks the caller: encoding and sockets live on the publisher's own thread.

pub mod config;
pub mod engine;

pub use config::KvEventsConfig;
pub use engine::{batch_from_engine, external_hash, extra_key_value, wire_event, EventMeta};
pub use inferrail_events::{
    BlockRemoved, BlockStored, ExternalBlockHash, HashFormat, KvEventBatch, KvEventPublisher,
    PublisherConfig, PublisherError, Value, WireEvent, Writer, END_SEQ,
};
