//! The real vLLM 0.32 KV event captures (events/tests/fixtures) applied to an [`EngineMirror`]:
//! every stored run is found again by the router's own hashes of the whole prompt it ends
//! (the parent chain's tokens and its own), the mirror holds exactly the engine blocks a naive
//! copy count holds, and a salted request matches only under its own `cache_salt`.

#[path = "../../events/tests/kv_capture/mod.rs"]
mod kv_capture;

use inferrail_events::WireEvent;
use inferrail_shards::index::{apply_batch, engine_id, EngineBlockId, EngineMirror};
use inferrail_shards::prefix_hash::{block_hashes, HashSalt};
use std::collections::HashMap;

const MODEL: &str = "tiny";

#[test]
fn the_capture_applies_exactly_and_every_run_is_found_by_its_whole_prompt() {
    let mut mirror = EngineMirror::new(1 << 16);
    // Engine block -> (copies, the tokens from the prompt's start to the block's end).
    let mut naive: HashMap<EngineBlockId, (u32, Vec<u32>)> = HashMap::new();
    let mut checked = 0;
    for (_, _, batch) in kv_capture::typed_batches() {
        let applied = apply_batch(&mut mirror, MODEL, &batch);
        assert_eq!(applied.orphans, 0, "every parent was stored first");
        assert_eq!(applied.refused, 0);
        assert_eq!(
            applied.unknown_removed, 0,
            "every removal names a held block"
        );
        let mut fresh = Vec::new();
        for event in &batch.events {
            match event {
                WireEvent::BlockStored(s) => {
                    let bs = s.block_size as usize;
                    let mut prefix = s
                        .parent_block_hash
                        .as_ref()
                        .map(|p| naive[&engine_id(p)].1.clone())
                        .unwrap_or_default();
                    for (i, h) in s.block_hashes.iter().enumerate() {
                        prefix.extend_from_slice(&s.token_ids[i * bs..(i + 1) * bs]);
                        let e = naive.entry(engine_id(h)).or_insert((0, prefix.clone()));
                        e.0 += 1;
                    }
                    fresh.push((engine_id(s.block_hashes.last().unwrap()), bs));
                }
                WireEvent::BlockRemoved(r) => {
                    for h in &r.block_hashes {
                        let id = engine_id(h);
                        let e = naive.get_mut(&id).unwrap();
                        e.0 -= 1;
                        if e.0 == 0 {
                            naive.remove(&id);
                        }
                    }
                }
                WireEvent::AllBlocksCleared => naive.clear(),
            }
        }
        assert_eq!(mirror.len(), naive.len(), "held blocks = naive copy count");
        for (last, bs) in fresh {
            let Some((_, prefix)) = naive.get(&last) else {
                continue;
            };
            let prompt = block_hashes(&HashSalt::new(MODEL, None, None), prefix, bs);
            assert_eq!(mirror.matched(&prompt).gpu, prompt.len());
            checked += 1;
        }
    }
    assert!(checked >= 10, "the capture's runs were checked ({checked})");
}

#[test]
fn a_salted_capture_matches_only_its_own_salt() {
    let decoded: serde_json::Value = serde_json::from_str(include_str!(
        "../../events/tests/fixtures/kv_events_salted/decoded.json"
    ))
    .unwrap();
    let mut mirror = EngineMirror::new(1 << 16);
    let mut salts_seen = 0;
    for message in decoded.as_array().unwrap() {
        let batch = kv_capture::batch_from_json(&message["typed"]);
        apply_batch(&mut mirror, MODEL, &batch);
        for event in &batch.events {
            let WireEvent::BlockStored(s) = event else {
                continue;
            };
            if s.parent_block_hash.is_some() {
                continue;
            }
            let salt = s
                .extra_keys
                .as_ref()
                .and_then(|k| k.first().cloned().flatten())
                .and_then(|k| match k.first() {
                    Some(inferrail_events::Value::Str(x)) => Some(x.clone()),
                    _ => None,
                });
            let bs = s.block_size as usize;
            let own = block_hashes(
                &HashSalt::new(MODEL, None, salt.as_deref()),
                &s.token_ids,
                bs,
            );
            assert_eq!(mirror.matched(&own).gpu, own.len());
            if let Some(salt) = salt {
                salts_seen += 1;
                let other = block_hashes(
                    &HashSalt::new(MODEL, None, Some(&format!("{salt}!"))),
                    &s.token_ids,
                    bs,
                );
                // A salt nobody used matches nothing.
                assert_eq!(mirror.matched(&other).gpu, 0);
            }
        }
    }
    assert_eq!(salts_seen, 2, "the capture's two salted requests");
}
