use super::*;
use crate::index::EngineMirror;
use crate::prefix_hash::block_hashes;
use inferrail_events::BlockRemoved;

const BS: u64 = 4;

fn stored(hashes: std::ops::Range<u64>, parent: Option<u64>, tokens: &[u32]) -> BlockStored {
    BlockStored {
        block_hashes: hashes.map(ExternalBlockHash::Int).collect(),
        parent_block_hash: parent.map(ExternalBlockHash::Int),
        token_ids: tokens.to_vec(),
        block_size: BS,
        lora_id: None,
        medium: Some("GPU".into()),
        lora_name: None,
        extra_keys: None,
        group_idx: Some(0),
        kv_cache_spec_kind: Some("full_attention".into()),
        kv_cache_spec_sliding_window: None,
        locality: None,
        ownership: None,
        session_id: None,
    }
}

fn batch(events: Vec<WireEvent>) -> KvEventBatch {
    KvEventBatch {
        ts: 0.0,
        events,
        data_parallel_rank: None,
    }
}

fn tokens(n: u32) -> Vec<u32> {
    (0..n * BS as u32).map(|t| t * 7 + 3).collect()
}

fn prompt(salt: Option<&str>, lora: Option<&str>, t: &[u32]) -> Vec<crate::prefix_hash::BlockHash> {
    block_hashes(&HashSalt::new("m", lora, salt), t, BS as usize)
}

#[test]
fn stores_removals_and_clears_follow_the_engine() {
    let mut m = EngineMirror::new(100);
    let t = tokens(3);
    let b = batch(vec![
        WireEvent::BlockStored(stored(10..12, None, &t[..8])),
        WireEvent::BlockStored(stored(12..13, Some(11), &t[8..])),
    ]);
    let applied = apply_batch(&mut m, "m", &b);
    assert_eq!(applied.stored, 3);
    assert_eq!(m.matched(&prompt(None, None, &t)).gpu, 3);
    // The last block evicted: the prompt's first two blocks are still held.
    let removed = batch(vec![WireEvent::BlockRemoved(BlockRemoved {
        block_hashes: vec![ExternalBlockHash::Int(12), ExternalBlockHash::Int(99)],
        medium: Some("GPU".into()),
        group_idx: Some(0),
        locality: None,
        ownership: None,
    })]);
    let applied = apply_batch(&mut m, "m", &removed);
    assert_eq!((applied.removed, applied.unknown_removed), (1, 1));
    assert_eq!(m.matched(&prompt(None, None, &t)).gpu, 2);
    let applied = apply_batch(&mut m, "m", &batch(vec![WireEvent::AllBlocksCleared]));
    assert_eq!(applied.cleared, 1);
    assert!(m.is_empty());
    // A continuation whose parent is gone cannot be named.
    let orphan = apply_batch(
        &mut m,
        "m",
        &batch(vec![WireEvent::BlockStored(stored(
            13..14,
            Some(11),
            &t[8..],
        ))]),
    );
    assert_eq!(orphan.orphans, 1);
}

#[test]
fn the_first_blocks_string_key_is_the_cache_salt_and_the_adapter_salts_the_run() {
    let t = tokens(2);
    let mut salted = stored(1..3, None, &t);
    salted.extra_keys = Some(vec![Some(vec![Value::Str("abc".into())]), None]);
    let mut m = EngineMirror::new(100);
    apply_batch(&mut m, "m", &batch(vec![WireEvent::BlockStored(salted)]));
    assert_eq!(m.matched(&prompt(Some("abc"), None, &t)).gpu, 2);
    assert_eq!(m.matched(&prompt(None, None, &t)).gpu, 0);
    assert_eq!(m.matched(&prompt(Some("abd"), None, &t)).gpu, 0);

    // A LoRA run: the adapter's name in every block's keys is the salt's adapter, not a digest.
    let mut lora = stored(5..7, None, &t);
    lora.lora_name = Some("ad".into());
    lora.extra_keys = Some(vec![
        Some(vec![Value::Str("ad".into()), Value::Str("s".into())]),
        Some(vec![Value::Str("ad".into())]),
    ]);
    let mut m = EngineMirror::new(100);
    apply_batch(&mut m, "m", &batch(vec![WireEvent::BlockStored(lora)]));
    assert_eq!(m.matched(&prompt(Some("s"), Some("ad"), &t)).gpu, 2);
    assert_eq!(m.matched(&prompt(Some("s"), None, &t)).gpu, 0);
}

#[test]
fn a_multimodal_block_never_matches_a_text_prediction() {
    let t = tokens(3);
    let mut mm = stored(1..4, None, &t);
    mm.extra_keys = Some(vec![
        None,
        Some(vec![Value::Array(vec![
            Value::Str("img-digest".into()),
            Value::Int(0),
        ])]),
        None,
    ]);
    let mut m = EngineMirror::new(100);
    let applied = apply_batch(&mut m, "m", &batch(vec![WireEvent::BlockStored(mm)]));
    assert_eq!(applied.stored, 3);
    // The text prompt with the same tokens matches the first block only.
    assert_eq!(m.matched(&prompt(None, None, &t)).gpu, 1);
}

#[test]
fn offloaded_copies_count_as_held_but_not_on_the_gpu() {
    let t = tokens(2);
    let mut m = EngineMirror::new(100);
    let mut cpu = stored(1..3, None, &t);
    cpu.medium = Some("CPU".into());
    apply_batch(&mut m, "m", &batch(vec![WireEvent::BlockStored(cpu)]));
    let held = m.matched(&prompt(None, None, &t));
    assert_eq!((held.gpu, held.cpu, held.storage), (0, 2, 0));
}

#[test]
fn a_malformed_run_is_refused_without_changing_the_mirror() {
    let t = tokens(2);
    let mut m = EngineMirror::new(100);
    let short = stored(1..3, None, &t[..5]);
    let applied = apply_batch(&mut m, "m", &batch(vec![WireEvent::BlockStored(short)]));
    assert_eq!((applied.stored, applied.refused), (0, 1));
    let mut zero = stored(1..3, None, &t);
    zero.block_size = 0;
    assert_eq!(
        apply_batch(&mut m, "m", &batch(vec![WireEvent::BlockStored(zero)])).refused,
        1
    );
    assert!(m.is_empty());
}
