//! Applying one engine's decoded KV event batches to its [`EngineMirror`] (pure: no I/O, no
//! clock).
//!
//! vLLM publishes a block's extra keys untagged, one list per block: the LoRA adapter's name, a
//! multimodal item as an `[identifier, offset]` pair, the request's `cache_salt` (a string, in
//! the first block only) and prompt-embedding digests. The router's chain is salted the way a
//! request's prediction is ([`crate::prefix_hash::HashSalt`]: model, adapter, `cache_salt`), so
//! here a parentless run's salt is the replica's model, the event's `lora_name`, and the first
//! block's string extra key that is not the adapter's name; every other extra key (multimodal
//! pairs, digests, a string past the first block) is folded into that block's digest, so such a
//! block never matches a text-only prediction.

use super::mirror::{EngineBlockId, KvEventTarget, Medium, StoreRefused, StoredBlocks};
use crate::prefix_hash::HashSalt;
use inferrail_events::{BlockStored, ExternalBlockHash, KvEventBatch, Value, WireEvent};
use xxhash_rust::xxh3::Xxh3;

/// What one batch did to a mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchApplied {
    /// Blocks stored (copies, duplicates included).
    pub stored: u64,
    /// BlockRemoved entries applied (copies).
    pub removed: u64,
    /// Removals of blocks the mirror did not hold.
    pub unknown_removed: u64,
    /// AllBlocksCleared events applied.
    pub cleared: u64,
    /// Runs refused because their parent was not held (a lost event, or the mirror started
    /// after the parent was stored).
    pub orphans: u64,
    /// Runs refused for their shape or because the mirror was full.
    pub refused: u64,
}

impl BatchApplied {
    /// Adds another batch's figures to these.
    pub fn add(&mut self, other: BatchApplied) {
        self.stored += other.stored;
        self.removed += other.removed;
        self.unknown_removed += other.unknown_removed;
        self.cleared += other.cleared;
        self.orphans += other.orphans;
        self.refused += other.refused;
    }
}

/// An engine's id for a block hash, in either wire form.
pub fn engine_id(h: &ExternalBlockHash) -> EngineBlockId {
    match h {
        ExternalBlockHash::Int(v) => EngineBlockId::from_int(*v),
        ExternalBlockHash::Bytes(b) => EngineBlockId::from_bytes(b),
    }
}

/// The salt a parentless run of `stored` starts from, for a replica serving `model`.
pub fn run_salt(model: &str, stored: &BlockStored) -> HashSalt {
    let lora = stored.lora_name.as_deref();
    HashSalt::new(model, lora, cache_salt(stored, lora))
}

/// The `cache_salt` of a run: the first block's string extra key other than the adapter name.
/// Only a parentless run's first block is a request's first block.
fn cache_salt<'a>(stored: &'a BlockStored, lora: Option<&str>) -> Option<&'a str> {
    if stored.parent_block_hash.is_some() {
        return None;
    }
    let first = stored.extra_keys.as_ref()?.first()?.as_ref()?;
    first.iter().find_map(|v| match v {
        Value::Str(s) if Some(s.as_str()) != lora => Some(s.as_str()),
        _ => None,
    })
}

/// Per block, the digest of its extra keys beyond the adapter and the salt (`None` when it has
/// none); empty when no block has any.
fn extra_digests(stored: &BlockStored) -> Vec<Option<u128>> {
    let Some(keys) = &stored.extra_keys else {
        return Vec::new();
    };
    let lora = stored.lora_name.as_deref();
    let salt = cache_salt(stored, lora);
    let digests: Vec<Option<u128>> = keys
        .iter()
        .enumerate()
        .map(|(i, block)| {
            let block = block.as_ref()?;
            let mut h = Xxh3::new();
            let mut any = false;
            let mut salt_seen = false;
            for v in block {
                match v {
                    Value::Str(s) if Some(s.as_str()) == lora => continue,
                    Value::Str(s) if i == 0 && !salt_seen && Some(s.as_str()) == salt => {
                        salt_seen = true;
                        continue;
                    }
                    _ => {}
                }
                any = true;
                hash_value(&mut h, v);
            }
            any.then(|| h.digest128())
        })
        .collect();
    if digests.iter().all(Option::is_none) {
        Vec::new()
    } else {
        digests
    }
}

/// Feeds one value, type-tagged and length-prefixed, so different values never collide by
/// encoding.
fn hash_value(h: &mut Xxh3, v: &Value) {
    match v {
        Value::Nil => h.update(&[0]),
        Value::Bool(b) => h.update(&[1, u8::from(*b)]),
        Value::Int(i) => {
            h.update(&[2]);
            h.update(&i.to_le_bytes());
        }
        Value::Float(f) => {
            h.update(&[3]);
            h.update(&f.to_bits().to_le_bytes());
        }
        Value::Str(s) => {
            h.update(&[4]);
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::Bytes(b) => {
            h.update(&[5]);
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        }
        Value::Array(items) => {
            h.update(&[6]);
            h.update(&(items.len() as u64).to_le_bytes());
            for item in items {
                hash_value(h, item);
            }
        }
    }
}

/// Applies every event of `batch`, in order, to `mirror` for a replica serving `model`.
pub fn apply_batch(
    mirror: &mut impl KvEventTarget,
    model: &str,
    batch: &KvEventBatch,
) -> BatchApplied {
    let mut out = BatchApplied::default();
    let mut ids = Vec::new();
    for event in &batch.events {
        match event {
            WireEvent::BlockStored(s) => {
                ids.clear();
                ids.extend(s.block_hashes.iter().map(engine_id));
                let extra = extra_digests(s);
                let run = StoredBlocks {
                    engine_ids: &ids,
                    parent: s.parent_block_hash.as_ref().map(engine_id),
                    token_ids: &s.token_ids,
                    block_size: usize::try_from(s.block_size).unwrap_or(0),
                    salt: run_salt(model, s),
                    extra: &extra,
                    medium: Medium::parse(s.medium.as_deref()),
                };
                match mirror.stored(run) {
                    Ok(_) => out.stored += ids.len() as u64,
                    Err(StoreRefused::Orphan) => out.orphans += 1,
                    Err(StoreRefused::Shape | StoreRefused::Full) => out.refused += 1,
                }
            }
            WireEvent::BlockRemoved(r) => {
                ids.clear();
                ids.extend(r.block_hashes.iter().map(engine_id));
                let unknown = mirror.removed(&ids, Medium::parse(r.medium.as_deref()));
                out.unknown_removed += unknown as u64;
                out.removed += (ids.len() - unknown) as u64;
            }
            WireEvent::AllBlocksCleared => {
                mirror.cleared();
                out.cleared += 1;
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "feed_tests.rs"]
mod tests;
