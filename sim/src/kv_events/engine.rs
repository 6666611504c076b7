//! The simulated engine's block pool events in vLLM 0.32's wire form: what the engine knows (full
//! digests, token ids, extra keys) turned into [`inferrail_events`]' batch types, with the fields
//! the engine does not track ([`EventMeta`]) filled in as vLLM fills them.

use inferrail_events::{
    BlockRemoved, BlockStored, ExternalBlockHash, HashFormat, KvEventBatch, Value, WireEvent,
};
use inferrail_shards::block_hash::{as_event_int, ExtraKey};

use crate::engine::block_pool::{BlockHash, KvCacheEvent};

/// What the engine's own events do not carry, filled in as vLLM 0.32 does for one
/// full-attention KV cache group on the GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMeta {
    /// `medium` (`"GPU"`).
    pub medium: Option<String>,
    /// `group_idx` (`0`).
    pub group_idx: Option<i64>,
    /// `kv_cache_spec_kind` of stored blocks (`"full_attention"`).
    pub kv_cache_spec_kind: Option<String>,
    /// `lora_id` (`None`).
    pub lora_id: Option<i64>,
    /// `lora_name` (`None`).
    pub lora_name: Option<String>,
    /// How hashes are written.
    pub hash_format: HashFormat,
}

impl Default for EventMeta {
    fn default() -> Self {
        EventMeta {
            medium: Some("GPU".into()),
            group_idx: Some(0),
            kv_cache_spec_kind: Some("full_attention".into()),
            lora_id: None,
            lora_name: None,
            hash_format: HashFormat::Int,
        }
    }
}

/// The msgpack form of a hash extra key (`str`, `int`, `bytes`, nested `tuple`s, `None`).
pub fn extra_key_value(k: &ExtraKey) -> Value {
    match k {
        ExtraKey::None => Value::Nil,
        ExtraKey::Int(i) => Value::Int(*i),
        ExtraKey::Str(s) => Value::Str(s.clone()),
        ExtraKey::Bytes(b) => Value::Bytes(b.clone()),
        ExtraKey::Tuple(items) => Value::Array(items.iter().map(extra_key_value).collect()),
    }
}

/// The wire form of a full digest in the given format.
pub fn external_hash(h: &BlockHash, format: HashFormat) -> ExternalBlockHash {
    match format {
        HashFormat::Int => ExternalBlockHash::Int(as_event_int(h)),
        HashFormat::Bytes => ExternalBlockHash::Bytes(h.to_vec()),
    }
}

/// The wire form of a block pool event. `extra_keys` is the engine's, one entry per block
/// (`None` for a block without extra keys, `[salt]` for a salted request's first block).
pub fn wire_event(ev: &KvCacheEvent, meta: &EventMeta) -> WireEvent {
    let conv = |hs: &[BlockHash]| {
        hs.iter()
            .map(|h| external_hash(h, meta.hash_format))
            .collect::<Vec<_>>()
    };
    match ev {
        KvCacheEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            extra_keys,
        } => WireEvent::BlockStored(BlockStored {
            block_hashes: conv(block_hashes),
            parent_block_hash: parent_block_hash
                .as_ref()
                .map(|h| external_hash(h, meta.hash_format)),
            token_ids: token_ids.clone(),
            block_size: *block_size as u64,
            lora_id: meta.lora_id,
            medium: meta.medium.clone(),
            lora_name: meta.lora_name.clone(),
            extra_keys: Some(
                extra_keys
                    .iter()
                    .map(|k| {
                        k.as_ref()
                            .map(|ks| ks.iter().map(extra_key_value).collect())
                    })
                    .collect(),
            ),
            group_idx: meta.group_idx,
            kv_cache_spec_kind: meta.kv_cache_spec_kind.clone(),
            kv_cache_spec_sliding_window: None,
            locality: None,
            ownership: None,
            session_id: None,
        }),
        KvCacheEvent::BlockRemoved { block_hashes } => WireEvent::BlockRemoved(BlockRemoved {
            block_hashes: conv(block_hashes),
            medium: meta.medium.clone(),
            group_idx: meta.group_idx,
            locality: None,
            ownership: None,
        }),
        KvCacheEvent::AllBlocksCleared => WireEvent::AllBlocksCleared,
    }
}

/// A batch of block pool events, stamped `ts`, for data-parallel rank `dp_rank`.
pub fn batch_from_engine(
    ts: f64,
    events: &[KvCacheEvent],
    dp_rank: Option<i64>,
    meta: &EventMeta,
) -> KvEventBatch {
    KvEventBatch {
        ts,
        events: events.iter().map(|e| wire_event(e, meta)).collect(),
        data_parallel_rank: dp_rank,
    }
}
