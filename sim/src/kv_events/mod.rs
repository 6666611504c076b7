//! KV cache events in vLLM 0.32's format: the msgspec/msgpack payload ([`encode`]), the ZMQ
//! PUB socket that publishes it ([`zmq`]) and the ROUTER socket that replays it ([`replay`]),
//! as `vllm/distributed/kv_events.py` does, set up by `--kv-events-config` ([`config`]).
//!
//! The engine turns each step's [`crate::engine::block_pool::KvCacheEvent`]s into a
//! [`KvEventBatch`] ([`KvEventBatch::from_engine`]) and hands it to a [`KvEventPublisher`],
//! which never blocks the caller: encoding and sockets live on the publisher's own thread.

pub mod config;
pub mod encode;
pub mod replay;
pub mod zmq;

pub use config::KvEventsConfig;
pub use encode::{
    BlockRemoved, BlockStored, EventMeta, ExternalBlockHash, HashFormat, KvEventBatch, Value,
    WireEvent, Writer,
};
pub use replay::END_SEQ;
pub use zmq::{KvEventPublisher, PublisherConfig, PublisherError};
