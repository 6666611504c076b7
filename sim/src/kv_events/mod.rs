//! KV cache events in vLLM 0.32's format: the msgspec/msgpack payload ([`encode`]) and the ZMQ
//! PUB socket that publishes it ([`zmq`]), as `vllm/distributed/kv_events.py` does.
//!
//! The engine turns each step's [`crate::engine::block_pool::KvCacheEvent`]s into a
//! [`KvEventBatch`] ([`KvEventBatch::from_engine`]) and hands it to a [`KvEventPublisher`],
//! which never blocks the caller: encoding and sockets live on the publisher's own thread.

pub mod encode;
pub mod zmq;

pub use encode::{
    BlockRemoved, BlockStored, EventMeta, ExternalBlockHash, HashFormat, KvEventBatch, Value,
    WireEvent, Writer,
};
pub use zmq::{KvEventPublisher, PublisherConfig, PublisherError};
