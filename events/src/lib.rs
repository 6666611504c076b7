//! vLLM's KV cache events, both ends of the wire, without libzmq: the msgpack codec of
//! `vllm/distributed/kv_events.py`'s `KVEventBatch` ([`batch`] encodes, [`decode`] reads both the
//! map-tagged events of vLLM >= 0.26 and the positional arrays of older releases), ZMTP 3.0 with
//! the NULL mechanism ([`zmtp`]), the PUB socket and ROUTER replay server an engine runs
//! ([`publisher`], [`replay`]), and the SUB client and DEALER replay client a router runs
//! ([`subscriber`], [`replay_client`]), and the sans-IO rules for one stream's sequence
//! numbers, gaps, replays, restarts and sync state ([`stream`]).
//!
//! Shared by the simulator (which publishes) and the gateway (which subscribes), so both speak
//! one implementation. It owns bytes and blocking sockets on its own threads; it never touches
//! routing state, and nothing in it may block a caller on the network: publishing queues,
//! subscribing runs on the subscriber's thread and hands over decoded batches.

pub mod batch;
pub mod decode;
pub mod msgpack;
pub mod publisher;
pub mod replay;
pub mod replay_client;
pub mod stream;
pub mod subscriber;
pub mod zmtp;

pub use batch::{
    BlockRemoved, BlockStored, ExternalBlockHash, HashFormat, KvEventBatch, Value, WireEvent,
};
pub use decode::{decode_batch, DecodeError, Decoded};
pub use msgpack::Writer;
pub use publisher::{KvEventPublisher, PublisherConfig, PublisherError};
pub use replay::END_SEQ;
pub use replay_client::{replay_from, ReplayError, ReplayLimits};
pub use subscriber::{EventMessage, Received, SubscribeError, Subscriber, SubscriberConfig};

/// Locks `m`, taking over a mutex a panicking thread poisoned (its data is plain state that
/// stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
