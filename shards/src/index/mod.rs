//! The KV index: which leading blocks of a prompt each replica holds. The approximate index
//! predicts it from routing; [`EngineMirror`] follows an engine's own KV events exactly.
//!
//! Every routed prompt is recorded on the replica it went to, in a shadow LRU as large as that
//! replica's KV cache ([`ReplicaBlocks`]); what an attempt recorded is taken back when the engine
//! refuses it or fails before answering. [`IndexShards`] runs the shadows on threads of their own
//! behind bounded queues, so a data core asks and records without ever blocking. Predictions are
//! capped by the caller, not here, at one block short of a fully cached prompt.

mod error;
mod feed;
mod forest;
mod hasher;
mod held;
mod mirror;
#[cfg(test)]
mod reference;
mod replica_blocks;
mod reply;
mod shards;
mod speculative;

pub use error::IndexError;
pub use feed::{apply_batch, engine_id, run_salt, BatchApplied};
pub use forest::{Forest, Walk, FOREST_MEMBERS};
pub use held::{HeldBlocks, PoolRoom};
pub use mirror::{
    EngineBlockId, EngineMirror, KvEventTarget, Medium, Member, MemberMirror, MirrorCounters,
    MirrorMatch, StoreRefused, StoredBlocks,
};
pub use replica_blocks::{RecordUndo, ReplicaBlocks, MAX_CAPACITY_BLOCKS};
pub use reply::{LookupReply, StatsReply};
pub use shards::{shard_of, IndexConfig, IndexMode, IndexShards, RecordTicket, ReplicaIndexStats};
pub use speculative::{Speculative, SpeculativeCounters, SPECULATIVE_TTL};
