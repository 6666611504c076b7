//! Byte parity of the KV event encoding with a real vLLM 0.32 capture
//! (`events/tests/fixtures/kv_events/`, from `/work/shared/fixtures/vllm/kv_events/`): `frames.bin` is
//! the captured ZMQ traffic (per message a u32be frame count, then per frame a u32be length and
//! the bytes), `typed.jsonl` the capture's decoded batches (`decoded.json`'s `typed` field, one
//! line per message, `ts` kept as Python's `repr` so it parses back to the same float).

#[path = "../../events/tests/kv_capture/mod.rs"]
mod kv_capture;

use kv_capture::container;

use inferrail_shards::block_hash::{prompt_block_hashes, NONE_HASH};
use inferrail_sim::engine::block_pool::KvCacheEvent;
use inferrail_sim::kv_events::{
    batch_from_engine, wire_event, BlockStored, EventMeta, ExternalBlockHash, HashFormat, Value,
    WireEvent,
};
use kv_capture::typed_batches;

const FRAMES: &[u8] = include_bytes!("../../events/tests/fixtures/kv_events/frames.bin");

/// The engine's own events, turned into wire events with the default [`EventMeta`], encode
/// exactly as vLLM's for the same blocks: the first captured batch (a 6-block prompt) comes
/// from the block pool's hashing of its tokens.
#[test]
fn kv_events_engine_events_match_the_capture() {
    let typed = typed_batches();
    let (_, _, first) = &typed[0];
    let WireEvent::BlockStored(stored) = &first.events[0] else {
        panic!("first captured event is a BlockStored")
    };
    let tokens = stored.token_ids.clone();
    let digests = prompt_block_hashes(&tokens, 32);
    assert_eq!(digests.len(), 6);
    let engine_events = [KvCacheEvent::BlockStored {
        block_hashes: digests,
        parent_block_hash: None,
        token_ids: tokens,
        block_size: 32,
        extra_keys: vec![None; 6],
    }];
    let ours = batch_from_engine(first.ts, &engine_events, Some(0), &EventMeta::default());
    assert_eq!(&ours, first);
    assert_eq!(ours.encode(), container(FRAMES)[0][2]);

    // BlockRemoved and AllBlocksCleared, with the capture's metadata.
    let removed = typed
        .iter()
        .flat_map(|(_, _, b)| b.events.iter())
        .find(|e| matches!(e, WireEvent::BlockRemoved(_)))
        .unwrap();
    let mut digest = [0u8; 32];
    let WireEvent::BlockRemoved(r) = removed else {
        unreachable!()
    };
    let ExternalBlockHash::Int(h) = r.block_hashes[0] else {
        unreachable!()
    };
    digest[24..].copy_from_slice(&h.to_be_bytes());
    let ev = KvCacheEvent::BlockRemoved {
        block_hashes: vec![digest],
    };
    assert_eq!(&wire_event(&ev, &EventMeta::default()), removed);
    assert_eq!(
        wire_event(&KvCacheEvent::AllBlocksCleared, &EventMeta::default()),
        WireEvent::AllBlocksCleared
    );
}

#[test]
fn kv_events_bytes_hashes_and_optional_fields() {
    let meta = EventMeta {
        hash_format: HashFormat::Bytes,
        ..EventMeta::default()
    };
    let ev = KvCacheEvent::BlockRemoved {
        block_hashes: vec![NONE_HASH],
    };
    let batch = batch_from_engine(1.0, &[ev], None, &meta);
    let bytes = batch.encode();
    // [ts, events] without the rank; the hash as bin8 of 32 bytes.
    assert_eq!(bytes[0], 0x92);
    let needle: Vec<u8> = [&[0xc4, 32][..], &NONE_HASH[..]].concat();
    assert!(bytes.windows(needle.len()).any(|w| w == needle));

    // Optional fields appear, in declaration order, only when set.
    let stored = WireEvent::BlockStored(BlockStored {
        block_hashes: vec![ExternalBlockHash::Int(1)],
        parent_block_hash: Some(ExternalBlockHash::Int(2)),
        token_ids: vec![1, 2],
        block_size: 2,
        lora_id: Some(3),
        medium: None,
        lora_name: Some("a".into()),
        extra_keys: Some(vec![Some(vec![
            Value::Str("cache_salt".into()),
            Value::Str("s".into()),
        ])]),
        group_idx: None,
        kv_cache_spec_kind: None,
        kv_cache_spec_sliding_window: Some(-1),
        locality: Some("LOCAL".into()),
        ownership: None,
        session_id: Some("x".into()),
    });
    let mut w = inferrail_sim::kv_events::Writer::new();
    stored.encode(&mut w);
    let b = w.into_bytes();
    assert_eq!(b[0], 0x80 | 12);
    let s = String::from_utf8_lossy(&b);
    let order = [
        "extra_keys",
        "kv_cache_spec_sliding_window",
        "locality",
        "session_id",
    ];
    let pos: Vec<usize> = order.iter().map(|k| s.find(k).unwrap()).collect();
    assert!(pos.windows(2).all(|p| p[0] < p[1]));
    assert!(!s.contains("group_idx") && !s.contains("ownership"));
}
