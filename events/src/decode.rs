//! Reading a KV event payload (the third frame of a PUB message) back into a [`KvEventBatch`],
//! for every layout vLLM has published:
//! - the batch is `array_like`: `[ts, events]` or `[ts, events, data_parallel_rank]`; items past
//!   the third (a later field) are skipped;
//! - vLLM >= 0.26 (#42892) writes each event as a map whose `"type"` key names it; keys may come
//!   in any order, unknown keys are skipped, and a missing optional key is `None`;
//! - older releases write each event as a tagged positional array, `["BlockStored",
//!   block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
//!   extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window, ...]`, trailing
//!   fields left out when they hold their defaults;
//! - block hashes are integers (vLLM's default) or binaries (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`).
//!
//! An event of a type this crate does not know (a later vLLM's) is skipped and counted in
//! [`Decoded::unknown_events`]; anything malformed refuses the whole batch with the offset of
//! the first bad byte.

use crate::batch::{BlockRemoved, BlockStored, ExternalBlockHash, KvEventBatch, Value, WireEvent};
use crate::msgpack::read::{Kind, ReadError, Reader};

/// Why a payload is not a KV event batch. It came from an engine's publisher; the same bytes
/// always give the same error, so it is never worth retrying, only counting and skipping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not well-formed msgpack of the expected types.
    #[error("KV event batch: {0}")]
    Msgpack(#[from] ReadError),
    /// Well-formed msgpack, but not shaped like a batch or an event.
    #[error("KV event batch, byte {at}: {what}")]
    Shape {
        /// Offset of the offending value.
        at: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// Bytes left over after the batch.
    #[error("KV event batch: {0} bytes after the batch")]
    Trailing(usize),
}

/// A decoded batch, and how many events in it were of a type this crate does not know.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The batch, without the unknown events.
    pub batch: KvEventBatch,
    /// Events skipped because their type is not BlockStored, BlockRemoved or AllBlocksCleared.
    pub unknown_events: usize,
}

/// Decodes one payload.
pub fn decode_batch(payload: &[u8]) -> Result<Decoded, DecodeError> {
    let mut r = Reader::new(payload);
    let at = r.position();
    let n = r.array_len()?;
    if n < 2 {
        return Err(DecodeError::Shape {
            at,
            what: "a batch is an array of at least [ts, events]",
        });
    }
    let ts = r.f64()?;
    let events_at = r.position();
    let count = r.array_len().map_err(|_| DecodeError::Shape {
        at: events_at,
        what: "a batch's second item is its array of events",
    })?;
    let mut events = Vec::with_capacity(count);
    let mut unknown_events = 0;
    for _ in 0..count {
        match event(&mut r)? {
            Some(e) => events.push(e),
            None => unknown_events += 1,
        }
    }
    let data_parallel_rank = if n >= 3 {
        if r.take_nil()? {
            None
        } else {
            Some(r.i64()?)
        }
    } else {
        None
    };
    for _ in 3..n {
        r.skip()?;
    }
    if r.remaining() > 0 {
        return Err(DecodeError::Trailing(r.remaining()));
    }
    Ok(Decoded {
        batch: KvEventBatch {
            ts,
            events,
            data_parallel_rank,
        },
        unknown_events,
    })
}

/// The event types this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Stored,
    Removed,
    Cleared,
}

fn tag(name: &str) -> Option<Tag> {
    match name {
        "BlockStored" => Some(Tag::Stored),
        "BlockRemoved" => Some(Tag::Removed),
        "AllBlocksCleared" => Some(Tag::Cleared),
        _ => None,
    }
}

/// One event; `None` for a type this crate does not know (skipped whole).
fn event(r: &mut Reader<'_>) -> Result<Option<WireEvent>, DecodeError> {
    let at = r.position();
    match r.peek()? {
        Kind::Map => map_event(r, at),
        Kind::Array => array_event(r, at),
        _ => Err(DecodeError::Shape {
            at,
            what: "an event is a map (vLLM >= 0.26) or a tagged array",
        }),
    }
}

/// The fields an event may carry, filled in as they are read.
#[derive(Default)]
struct Fields {
    block_hashes: Option<Vec<ExternalBlockHash>>,
    parent_block_hash: Option<ExternalBlockHash>,
    token_ids: Option<Vec<u32>>,
    block_size: Option<u64>,
    lora_id: Option<i64>,
    medium: Option<String>,
    lora_name: Option<String>,
    extra_keys: Option<Vec<Option<Vec<Value>>>>,
    group_idx: Option<i64>,
    kv_cache_spec_kind: Option<String>,
    kv_cache_spec_sliding_window: Option<i64>,
    locality: Option<String>,
    ownership: Option<String>,
    session_id: Option<String>,
}

/// Reads the value of field `name` into `f`; returns false (value not read) for a field this
/// crate does not know.
fn field(r: &mut Reader<'_>, name: &str, f: &mut Fields) -> Result<bool, DecodeError> {
    match name {
        "block_hashes" => f.block_hashes = Some(hashes(r)?),
        "parent_block_hash" => f.parent_block_hash = opt(r, hash)?,
        "token_ids" => f.token_ids = Some(token_ids(r)?),
        "block_size" => f.block_size = Some(r.u64()?),
        "lora_id" => f.lora_id = opt(r, |r| Ok(r.i64()?))?,
        "medium" => f.medium = opt_string(r)?,
        "lora_name" => f.lora_name = opt_string(r)?,
        "extra_keys" => f.extra_keys = opt(r, extra_keys)?,
        "group_idx" => f.group_idx = opt(r, |r| Ok(r.i64()?))?,
        "kv_cache_spec_kind" => f.kv_cache_spec_kind = opt_string(r)?,
        "kv_cache_spec_sliding_window" => {
            f.kv_cache_spec_sliding_window = opt(r, |r| Ok(r.i64()?))?
        }
        "locality" => f.locality = opt_string(r)?,
        "ownership" => f.ownership = opt_string(r)?,
        "session_id" => f.session_id = opt_string(r)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn map_event(r: &mut Reader<'_>, at: usize) -> Result<Option<WireEvent>, DecodeError> {
    let n = r.map_len()?;
    let mut kind: Option<Option<Tag>> = None;
    let mut f = Fields::default();
    for _ in 0..n {
        let key_at = r.position();
        let key = r.str().map_err(|_| DecodeError::Shape {
            at: key_at,
            what: "an event's keys are strings",
        })?;
        if key == "type" {
            kind = Some(tag(r.str()?));
        } else if !field(r, key, &mut f)? {
            r.skip()?;
        }
    }
    match kind {
        None => Err(DecodeError::Shape {
            at,
            what: "an event map has no \"type\"",
        }),
        Some(None) => Ok(None),
        Some(Some(t)) => finish(t, f, at).map(Some),
    }
}

/// Field order of the positional (pre-0.26) forms after the tag.
const STORED_ORDER: &[&str] = &[
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "session_id",
];
const REMOVED_ORDER: &[&str] = &[
    "block_hashes",
    "medium",
    "group_idx",
    "locality",
    "ownership",
];

fn array_event(r: &mut Reader<'_>, at: usize) -> Result<Option<WireEvent>, DecodeError> {
    let n = r.array_len()?;
    let tag_at = r.position();
    if n == 0 {
        return Err(DecodeError::Shape {
            at,
            what: "an event array starts with its type",
        });
    }
    let name = r.str().map_err(|_| DecodeError::Shape {
        at: tag_at,
        what: "an event array starts with its type",
    })?;
    let Some(t) = tag(name) else {
        for _ in 1..n {
            r.skip()?;
        }
        return Ok(None);
    };
    let order = match t {
        Tag::Stored => STORED_ORDER,
        Tag::Removed => REMOVED_ORDER,
        Tag::Cleared => &[],
    };
    let mut f = Fields::default();
    for i in 1..n {
        match order.get(i - 1) {
            Some(name) => {
                field(r, name, &mut f)?;
            }
            None => r.skip()?,
        }
    }
    finish(t, f, at).map(Some)
}

fn finish(t: Tag, f: Fields, at: usize) -> Result<WireEvent, DecodeError> {
    let missing = |what| DecodeError::Shape { at, what };
    Ok(match t {
        Tag::Cleared => WireEvent::AllBlocksCleared,
        Tag::Removed => WireEvent::BlockRemoved(BlockRemoved {
            block_hashes: f
                .block_hashes
                .ok_or(missing("BlockRemoved without block_hashes"))?,
            medium: f.medium,
            group_idx: f.group_idx,
            locality: f.locality,
            ownership: f.ownership,
        }),
        Tag::Stored => {
            let block_hashes = f
                .block_hashes
                .ok_or(missing("BlockStored without block_hashes"))?;
            let token_ids = f
                .token_ids
                .ok_or(missing("BlockStored without token_ids"))?;
            let block_size = f
                .block_size
                .ok_or(missing("BlockStored without block_size"))?;
            if block_size == 0 {
                return Err(missing("BlockStored with block_size 0"));
            }
            WireEvent::BlockStored(BlockStored {
                block_hashes,
                parent_block_hash: f.parent_block_hash,
                token_ids,
                block_size,
                lora_id: f.lora_id,
                medium: f.medium,
                lora_name: f.lora_name,
                extra_keys: f.extra_keys,
                group_idx: f.group_idx,
                kv_cache_spec_kind: f.kv_cache_spec_kind,
                kv_cache_spec_sliding_window: f.kv_cache_spec_sliding_window,
                locality: f.locality,
                ownership: f.ownership,
                session_id: f.session_id,
            })
        }
    })
}

/// `nil` as `None`, anything else through `read`.
fn opt<T>(
    r: &mut Reader<'_>,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    if r.take_nil()? {
        Ok(None)
    } else {
        read(r).map(Some)
    }
}

fn opt_string(r: &mut Reader<'_>) -> Result<Option<String>, DecodeError> {
    opt(r, |r| Ok(r.str()?.to_owned()))
}

fn hash(r: &mut Reader<'_>) -> Result<ExternalBlockHash, DecodeError> {
    let at = r.position();
    match r.peek()? {
        // vLLM's hashes are unsigned 64-bit; an encoder writing one in a signed form (a
        // negative int64) is taken by its bits.
        Kind::Int => {
            let v = r.int()?;
            u64::try_from(v)
                .or_else(|_| i64::try_from(v).map(|s| s as u64))
                .map(ExternalBlockHash::Int)
                .map_err(|_| DecodeError::Shape {
                    at,
                    what: "a block hash integer does not fit 64 bits",
                })
        }
        Kind::Bin => Ok(ExternalBlockHash::Bytes(r.bin()?.to_vec())),
        _ => Err(DecodeError::Shape {
            at,
            what: "a block hash is an integer or binary",
        }),
    }
}

fn hashes(r: &mut Reader<'_>) -> Result<Vec<ExternalBlockHash>, DecodeError> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(hash(r)?);
    }
    Ok(out)
}

fn token_ids(r: &mut Reader<'_>) -> Result<Vec<u32>, DecodeError> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.u32()?);
    }
    Ok(out)
}

/// `extra_keys`: per block, `nil` or a tuple of values.
fn extra_keys(r: &mut Reader<'_>) -> Result<Vec<Option<Vec<Value>>>, DecodeError> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let at = r.position();
        if r.take_nil()? {
            out.push(None);
            continue;
        }
        match r.value()? {
            Value::Array(items) => out.push(Some(items)),
            _ => {
                return Err(DecodeError::Shape {
                    at,
                    what: "a block's extra keys are nil or an array",
                })
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::Writer;
    use proptest::prelude::*;

    fn stored() -> BlockStored {
        BlockStored {
            block_hashes: vec![ExternalBlockHash::Int(u64::MAX), ExternalBlockHash::Int(7)],
            parent_block_hash: Some(ExternalBlockHash::Int(1 << 63)),
            token_ids: vec![0, 1, 65_535, 151_643],
            block_size: 2,
            lora_id: None,
            medium: Some("GPU".into()),
            lora_name: Some("adapter".into()),
            extra_keys: Some(vec![None, Some(vec![Value::Str("salt".into())])]),
            group_idx: Some(0),
            kv_cache_spec_kind: Some("full_attention".into()),
            kv_cache_spec_sliding_window: None,
            locality: None,
            ownership: None,
            session_id: Some("req-1".into()),
        }
    }

    fn batch(events: Vec<WireEvent>, rank: Option<i64>) -> KvEventBatch {
        KvEventBatch {
            ts: 1796014365.3599443,
            events,
            data_parallel_rank: rank,
        }
    }

    #[test]
    fn the_map_form_round_trips() {
        let b = batch(
            vec![
                WireEvent::BlockStored(stored()),
                WireEvent::BlockRemoved(BlockRemoved {
                    block_hashes: vec![ExternalBlockHash::Bytes(vec![0xab; 32])],
                    medium: Some("CPU".into()),
                    group_idx: None,
                    locality: Some("LOCAL".into()),
                    ownership: None,
                }),
                WireEvent::AllBlocksCleared,
            ],
            Some(3),
        );
        let d = decode_batch(&b.encode()).unwrap();
        assert_eq!(d.batch, b);
        assert_eq!(d.unknown_events, 0);
        let no_rank = batch(vec![WireEvent::AllBlocksCleared], None);
        assert_eq!(decode_batch(&no_rank.encode()).unwrap().batch, no_rank);
    }

    /// The pre-0.26 layout: tagged positional arrays with trailing defaults left out.
    #[test]
    fn the_positional_form_reads_like_the_map_form() {
        let mut w = Writer::new();
        w.array_len(3);
        w.f64(2.5);
        w.array_len(3);
        // ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium]
        w.array_len(7);
        w.str("BlockStored");
        w.array_len(1);
        w.uint(11);
        w.nil();
        w.array_len(2);
        w.uint(5);
        w.uint(6);
        w.uint(2);
        w.nil();
        w.str("GPU");
        // ["BlockRemoved", hashes, medium]
        w.array_len(3);
        w.str("BlockRemoved");
        w.array_len(1);
        w.uint(11);
        w.nil();
        w.array_len(1);
        w.str("AllBlocksCleared");
        w.int(0);
        let d = decode_batch(w.as_bytes()).unwrap();
        let want = batch(
            vec![
                WireEvent::BlockStored(BlockStored::gpu([11], None, vec![5, 6], 2)),
                WireEvent::BlockRemoved(BlockRemoved {
                    block_hashes: vec![ExternalBlockHash::Int(11)],
                    medium: None,
                    group_idx: None,
                    locality: None,
                    ownership: None,
                }),
                WireEvent::AllBlocksCleared,
            ],
            Some(0),
        );
        assert_eq!(d.batch, KvEventBatch { ts: 2.5, ..want });
    }

    #[test]
    fn unknown_keys_fields_and_events_are_skipped() {
        let mut w = Writer::new();
        w.array_len(4);
        w.f64(1.0);
        w.array_len(3);
        w.map_len(3);
        w.str("future_field");
        w.map_len(1);
        w.str("x");
        w.array_len(0);
        w.str("type");
        w.str("BlockRemoved");
        w.str("block_hashes");
        w.array_len(0);
        w.map_len(2);
        w.str("type");
        w.str("BlockInactive");
        w.str("block_hashes");
        w.array_len(1);
        w.uint(1);
        w.array_len(2);
        w.str("SomethingNew");
        w.uint(9);
        w.nil();
        w.str("a later batch field");
        let d = decode_batch(w.as_bytes()).unwrap();
        assert_eq!(d.unknown_events, 2);
        assert_eq!(d.batch.events.len(), 1);
        assert_eq!(d.batch.data_parallel_rank, None);
    }

    #[test]
    fn malformed_batches_are_refused_with_a_reason() {
        let refuse = |bytes: &[u8]| decode_batch(bytes).unwrap_err();
        assert!(matches!(
            refuse(&[]),
            DecodeError::Msgpack(ReadError::Truncated { at: 0 })
        ));
        assert!(matches!(refuse(&[0x91, 0xc0]), DecodeError::Shape { .. }));
        assert!(matches!(
            refuse(&[0x92, 0x00, 0x91, 0x81, 0xa3, b'k', b'e', b'y', 0xc0]),
            DecodeError::Shape {
                what: "an event map has no \"type\"",
                ..
            }
        ));
        // BlockStored without token_ids.
        let mut w = Writer::new();
        w.array_len(2);
        w.f64(0.0);
        w.array_len(1);
        w.map_len(3);
        w.str("type");
        w.str("BlockStored");
        w.str("block_hashes");
        w.array_len(0);
        w.str("block_size");
        w.uint(16);
        assert!(matches!(
            refuse(w.as_bytes()),
            DecodeError::Shape {
                what: "BlockStored without token_ids",
                ..
            }
        ));
        // A token id that is negative.
        let mut b = stored();
        b.token_ids.clear();
        let mut bytes = batch(vec![WireEvent::BlockStored(b)], None).encode();
        let i = bytes
            .windows(10)
            .position(|w| w == b"\xa9token_ids")
            .unwrap();
        bytes[i + 10] = 0x91;
        bytes.insert(i + 11, 0xff);
        assert!(matches!(
            refuse(&bytes),
            DecodeError::Msgpack(ReadError::Range { into: "u32", .. })
        ));
        let mut trailing = batch(vec![], None).encode();
        trailing.push(0xc0);
        assert_eq!(refuse(&trailing), DecodeError::Trailing(1));
    }

    proptest::proptest! {
        /// Any payload the encoder writes decodes back to the same batch.
        #[test]
        fn encoded_batches_decode_back(
            hashes in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..8),
            tokens in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..64),
            rank in proptest::option::of(-3i64..100),
            ts in any::<f64>().prop_filter("not NaN", |f| !f.is_nan()),
        ) {
            let mut s = stored();
            s.block_hashes = hashes.into_iter().map(ExternalBlockHash::Int).collect();
            s.token_ids = tokens;
            let b = KvEventBatch { ts, events: vec![WireEvent::BlockStored(s)], data_parallel_rank: rank };
            proptest::prop_assert_eq!(decode_batch(&b.encode()).unwrap().batch, b);
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = decode_batch(&bytes);
        }
    }
}
