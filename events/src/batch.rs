//! vLLM 0.32's KV event wire types and their msgspec encoding (with [`crate::msgpack::Writer`]),
//! byte for byte as `vllm/distributed/kv_events.py` writes `KVEventBatch` and its events.
//!
//! How msgspec lays these out (checked against a real vLLM 0.32 capture, see
//! `sim/tests/kv_events_encode.rs` and `events/tests/fixtures.rs`):
//! - `KVEventBatch` is an `array_like` struct with `omit_defaults`: `[ts, events,
//!   data_parallel_rank]`, the trailing `data_parallel_rank` left out when it is `None` (its
//!   default). `ts` is always a float64.
//! - Each event is a *map* whose first key is the tag `"type"` (the class name), then the
//!   fields in declaration order. Fields without a default (`block_hashes`,
//!   `parent_block_hash`, `token_ids`, `block_size`, `lora_id`, `medium`, `lora_name` of
//!   `BlockStored`; `block_hashes`, `medium` of `BlockRemoved`) are always written, `None` as
//!   nil; fields defaulting to `None` (`extra_keys`, `group_idx`, `kv_cache_spec_kind`, ...)
//!   are left out when `None`.
//! - Integers take msgpack's smallest form (non-negative ones the unsigned family), strings
//!   and containers too.
//! - Block hashes are ints (the low 64 bits of the digest, vLLM's default
//!   `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`) or, with that variable set to 0, the 32-byte
//!   digest as msgpack bin.

use crate::msgpack::Writer;

/// A generic Python value, for the contents of `extra_keys` tuples.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    Nil,
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(String),
    /// `bytes`.
    Bytes(Vec<u8>),
    /// `tuple` or `list`.
    Array(Vec<Value>),
}

impl Value {
    /// Writes the value.
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Value::Nil => w.nil(),
            Value::Bool(b) => w.bool(*b),
            Value::Int(i) => w.int(*i),
            Value::Float(f) => w.f64(*f),
            Value::Str(s) => w.str(s),
            Value::Bytes(b) => w.bin(b),
            Value::Array(items) => {
                w.array_len(items.len());
                for v in items {
                    v.encode(w);
                }
            }
        }
    }
}

/// A block hash as a KV event carries it (vLLM's `ExternalBlockHash`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExternalBlockHash {
    /// The low 64 bits of the digest (the default).
    Int(u64),
    /// The raw digest (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`).
    Bytes(Vec<u8>),
}

impl ExternalBlockHash {
    fn encode(&self, w: &mut Writer) {
        match self {
            ExternalBlockHash::Int(i) => w.uint(*i),
            ExternalBlockHash::Bytes(b) => w.bin(b),
        }
    }
}

fn hashes(w: &mut Writer, hs: &[ExternalBlockHash]) {
    w.array_len(hs.len());
    for h in hs {
        h.encode(w);
    }
}

/// How block hashes go on the wire (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HashFormat {
    /// Low 64 bits as an int (vLLM's default).
    #[default]
    Int,
    /// The 32-byte digest as bytes.
    Bytes,
}

/// vLLM's `BlockStored` event.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockStored {
    /// One hash per stored block.
    pub block_hashes: Vec<ExternalBlockHash>,
    /// The hash of the block before the first, `None` for a sequence's first block.
    pub parent_block_hash: Option<ExternalBlockHash>,
    /// The tokens of all the blocks.
    pub token_ids: Vec<u32>,
    /// Tokens per block.
    pub block_size: u64,
    /// Deprecated LoRA id (always written, nil when `None`).
    pub lora_id: Option<i64>,
    /// Storage medium, `"GPU"` for the engine's own cache (always written).
    pub medium: Option<String>,
    /// LoRA adapter name (always written).
    pub lora_name: Option<String>,
    /// Per block, its extra hash keys (`None` for a block without any); omitted when `None`.
    pub extra_keys: Option<Vec<Option<Vec<Value>>>>,
    /// KV cache group index; omitted when `None`.
    pub group_idx: Option<i64>,
    /// The group's spec kind, e.g. `"full_attention"`; omitted when `None`.
    pub kv_cache_spec_kind: Option<String>,
    /// The group's sliding window; omitted when `None`.
    pub kv_cache_spec_sliding_window: Option<i64>,
    /// `LOCAL` or `REMOTE`; omitted when `None`.
    pub locality: Option<String>,
    /// Secondary offloading tier; omitted when `None`.
    pub ownership: Option<String>,
    /// Session id; omitted when `None`.
    pub session_id: Option<String>,
}

impl BlockStored {
    /// A run stored in the engine's own cache (medium `"GPU"`), int hashes, no adapter, extra
    /// keys or optional fields: what an engine without LoRA, multimodal input or offloading
    /// publishes.
    pub fn gpu(
        block_hashes: impl IntoIterator<Item = u64>,
        parent: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u64,
    ) -> BlockStored {
        BlockStored {
            block_hashes: block_hashes
                .into_iter()
                .map(ExternalBlockHash::Int)
                .collect(),
            parent_block_hash: parent.map(ExternalBlockHash::Int),
            token_ids,
            block_size,
            lora_id: None,
            medium: Some("GPU".into()),
            lora_name: None,
            extra_keys: None,
            group_idx: None,
            kv_cache_spec_kind: None,
            kv_cache_spec_sliding_window: None,
            locality: None,
            ownership: None,
            session_id: None,
        }
    }
}

/// vLLM's `BlockRemoved` event.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockRemoved {
    /// The removed blocks' hashes.
    pub block_hashes: Vec<ExternalBlockHash>,
    /// Storage medium (always written).
    pub medium: Option<String>,
    /// KV cache group index; omitted when `None`.
    pub group_idx: Option<i64>,
    /// `LOCAL` or `REMOTE`; omitted when `None`.
    pub locality: Option<String>,
    /// Secondary offloading tier; omitted when `None`.
    pub ownership: Option<String>,
}

impl BlockRemoved {
    /// Removals from the engine's own cache (medium `"GPU"`), int hashes, no optional fields.
    pub fn gpu(block_hashes: impl IntoIterator<Item = u64>) -> BlockRemoved {
        BlockRemoved {
            block_hashes: block_hashes
                .into_iter()
                .map(ExternalBlockHash::Int)
                .collect(),
            medium: Some("GPU".into()),
            group_idx: None,
            locality: None,
            ownership: None,
        }
    }
}

/// One event of a [`KvEventBatch`], as vLLM's tagged union.
#[derive(Debug, Clone, PartialEq)]
pub enum WireEvent {
    /// `BlockStored`.
    BlockStored(BlockStored),
    /// `BlockRemoved`.
    BlockRemoved(BlockRemoved),
    /// `AllBlocksCleared`.
    AllBlocksCleared,
}

impl WireEvent {
    /// Writes the event as msgspec does (a map tagged by `"type"`).
    pub fn encode(&self, w: &mut Writer) {
        match self {
            WireEvent::BlockStored(e) => {
                let optional = [
                    e.extra_keys.is_some(),
                    e.group_idx.is_some(),
                    e.kv_cache_spec_kind.is_some(),
                    e.kv_cache_spec_sliding_window.is_some(),
                    e.locality.is_some(),
                    e.ownership.is_some(),
                    e.session_id.is_some(),
                ];
                w.map_len(8 + optional.iter().filter(|&&b| b).count());
                w.str("type");
                w.str("BlockStored");
                w.str("block_hashes");
                hashes(w, &e.block_hashes);
                w.str("parent_block_hash");
                match &e.parent_block_hash {
                    Some(h) => h.encode(w),
                    None => w.nil(),
                }
                w.str("token_ids");
                w.array_len(e.token_ids.len());
                for &t in &e.token_ids {
                    w.uint(u64::from(t));
                }
                w.str("block_size");
                w.uint(e.block_size);
                w.str("lora_id");
                w.opt_int(e.lora_id);
                w.str("medium");
                w.opt_str(e.medium.as_deref());
                w.str("lora_name");
                w.opt_str(e.lora_name.as_deref());
                if let Some(keys) = &e.extra_keys {
                    w.str("extra_keys");
                    w.array_len(keys.len());
                    for k in keys {
                        match k {
                            Some(tuple) => Value::Array(tuple.clone()).encode(w),
                            None => w.nil(),
                        }
                    }
                }
                opt_field_int(w, "group_idx", e.group_idx);
                opt_field_str(w, "kv_cache_spec_kind", e.kv_cache_spec_kind.as_deref());
                opt_field_int(
                    w,
                    "kv_cache_spec_sliding_window",
                    e.kv_cache_spec_sliding_window,
                );
                opt_field_str(w, "locality", e.locality.as_deref());
                opt_field_str(w, "ownership", e.ownership.as_deref());
                opt_field_str(w, "session_id", e.session_id.as_deref());
            }
            WireEvent::BlockRemoved(e) => {
                let optional = [
                    e.group_idx.is_some(),
                    e.locality.is_some(),
                    e.ownership.is_some(),
                ];
                w.map_len(3 + optional.iter().filter(|&&b| b).count());
                w.str("type");
                w.str("BlockRemoved");
                w.str("block_hashes");
                hashes(w, &e.block_hashes);
                w.str("medium");
                w.opt_str(e.medium.as_deref());
                opt_field_int(w, "group_idx", e.group_idx);
                opt_field_str(w, "locality", e.locality.as_deref());
                opt_field_str(w, "ownership", e.ownership.as_deref());
            }
            WireEvent::AllBlocksCleared => {
                w.map_len(1);
                w.str("type");
                w.str("AllBlocksCleared");
            }
        }
    }
}

fn opt_field_int(w: &mut Writer, name: &str, v: Option<i64>) {
    if let Some(i) = v {
        w.str(name);
        w.int(i);
    }
}

fn opt_field_str(w: &mut Writer, name: &str, v: Option<&str>) {
    if let Some(s) = v {
        w.str(name);
        w.str(s);
    }
}

/// vLLM's `KVEventBatch`: the events of one engine step.
#[derive(Debug, Clone, PartialEq)]
pub struct KvEventBatch {
    /// `time.time()` when the batch was taken, in seconds.
    pub ts: f64,
    /// The events, in order.
    pub events: Vec<WireEvent>,
    /// The data-parallel rank (`0` without data parallelism); omitted when `None`.
    pub data_parallel_rank: Option<i64>,
}

impl KvEventBatch {
    /// Writes the batch as msgspec does (the publisher's payload frame).
    pub fn encode_into(&self, w: &mut Writer) {
        w.array_len(if self.data_parallel_rank.is_some() {
            3
        } else {
            2
        });
        w.f64(self.ts);
        w.array_len(self.events.len());
        for e in &self.events {
            e.encode(w);
        }
        if let Some(r) = self.data_parallel_rank {
            w.int(r);
        }
    }

    /// The batch's msgpack bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64 + self.events.len() * 64);
        self.encode_into(&mut w);
        w.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::new();
        f(&mut w);
        w.into_bytes()
    }

    #[test]
    fn ints_take_their_smallest_form() {
        assert_eq!(bytes(|w| w.uint(0)), [0x00]);
        assert_eq!(bytes(|w| w.uint(127)), [0x7f]);
        assert_eq!(bytes(|w| w.uint(128)), [0xcc, 0x80]);
        assert_eq!(bytes(|w| w.uint(256)), [0xcd, 0x01, 0x00]);
        assert_eq!(bytes(|w| w.uint(65536)), [0xce, 0, 1, 0, 0]);
        assert_eq!(bytes(|w| w.uint(1 << 32)), [0xcf, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(bytes(|w| w.int(-1)), [0xff]);
        assert_eq!(bytes(|w| w.int(-32)), [0xe0]);
        assert_eq!(bytes(|w| w.int(-33)), [0xd0, 0xdf]);
        assert_eq!(bytes(|w| w.int(-129)), [0xd1, 0xff, 0x7f]);
        assert_eq!(bytes(|w| w.int(-32769)), [0xd2, 0xff, 0xff, 0x7f, 0xff]);
        assert_eq!(bytes(|w| w.int(i64::MIN))[0], 0xd3);
        assert_eq!(bytes(|w| w.int(5)), [0x05]);
    }

    #[test]
    fn strings_and_containers() {
        assert_eq!(bytes(|w| w.str("")), [0xa0]);
        assert_eq!(bytes(|w| w.str(&"x".repeat(31)))[0], 0xbf);
        assert_eq!(bytes(|w| w.str(&"x".repeat(32)))[..2], [0xd9, 32]);
        assert_eq!(bytes(|w| w.str(&"x".repeat(256)))[..3], [0xda, 1, 0]);
        assert_eq!(bytes(|w| w.bin(&[1, 2])), [0xc4, 2, 1, 2]);
        assert_eq!(bytes(|w| w.array_len(15)), [0x9f]);
        assert_eq!(bytes(|w| w.array_len(16)), [0xdc, 0, 16]);
        assert_eq!(bytes(|w| w.array_len(70000)), [0xdd, 0, 1, 0x11, 0x70]);
        assert_eq!(bytes(|w| w.map_len(15)), [0x8f]);
        assert_eq!(bytes(|w| w.map_len(16)), [0xde, 0, 16]);
        assert_eq!(bytes(|w| w.f64(1.5)), [0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn batch_without_rank_omits_it() {
        let b = KvEventBatch {
            ts: 0.0,
            events: vec![WireEvent::AllBlocksCleared],
            data_parallel_rank: None,
        };
        let mut want = vec![0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x81, 0xa4];
        want.extend_from_slice(b"type");
        want.push(0xb0);
        want.extend_from_slice(b"AllBlocksCleared");
        assert_eq!(b.encode(), want);
    }
}
