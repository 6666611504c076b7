//! The decoded vLLM 0.32 KV event capture (`fixtures/kv_events/typed.jsonl`: `decoded.json`'s
//! `typed` field, one batch per line, `ts` kept as Python's `repr`) as wire batches, shared by
//! the encoding and replay tests, and the fixtures' container format of captured messages
//! ([`container`]).
#![allow(dead_code)]

use inferrail_events::{
    BlockRemoved, BlockStored, ExternalBlockHash, KvEventBatch, Value, WireEvent,
};
use serde_json::Value as Json;

const TYPED: &str = include_str!("../fixtures/kv_events/typed.jsonl");

fn hash(v: &Json) -> ExternalBlockHash {
    ExternalBlockHash::Int(v.as_u64().expect("int block hash"))
}

fn hashes(v: &Json) -> Vec<ExternalBlockHash> {
    v.as_array().unwrap().iter().map(hash).collect()
}

fn opt_str(v: &Json) -> Option<String> {
    v.as_str().map(str::to_string)
}

pub fn opt_int(v: &Json) -> Option<i64> {
    v.as_i64()
}

fn value(v: &Json) -> Value {
    match v {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap()),
        },
        Json::String(s) => Value::Str(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(value).collect()),
        Json::Object(_) => panic!("no maps in extra keys"),
    }
}

fn event(e: &Json) -> WireEvent {
    let f = |k: &str| e.get(k).unwrap_or(&Json::Null);
    match f("type").as_str().unwrap() {
        "BlockStored" => WireEvent::BlockStored(BlockStored {
            block_hashes: hashes(f("block_hashes")),
            parent_block_hash: (!f("parent_block_hash").is_null())
                .then(|| hash(f("parent_block_hash"))),
            token_ids: f("token_ids")
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect(),
            block_size: f("block_size").as_u64().unwrap(),
            lora_id: opt_int(f("lora_id")),
            medium: opt_str(f("medium")),
            lora_name: opt_str(f("lora_name")),
            extra_keys: f("extra_keys").as_array().map(|ks| {
                ks.iter()
                    .map(|k| k.as_array().map(|t| t.iter().map(value).collect()))
                    .collect()
            }),
            group_idx: opt_int(f("group_idx")),
            kv_cache_spec_kind: opt_str(f("kv_cache_spec_kind")),
            kv_cache_spec_sliding_window: opt_int(f("kv_cache_spec_sliding_window")),
            locality: opt_str(f("locality")),
            ownership: opt_str(f("ownership")),
            session_id: opt_str(f("session_id")),
        }),
        "BlockRemoved" => WireEvent::BlockRemoved(BlockRemoved {
            block_hashes: hashes(f("block_hashes")),
            medium: opt_str(f("medium")),
            group_idx: opt_int(f("group_idx")),
            locality: opt_str(f("locality")),
            ownership: opt_str(f("ownership")),
        }),
        "AllBlocksCleared" => WireEvent::AllBlocksCleared,
        t => panic!("unknown event type {t}"),
    }
}

/// A batch from a JSON object `{ts, events, data_parallel_rank}` whose `ts` is a number.
pub fn batch_from_json(j: &Json) -> KvEventBatch {
    KvEventBatch {
        ts: j["ts"].as_f64().unwrap(),
        events: j["events"].as_array().unwrap().iter().map(event).collect(),
        data_parallel_rank: opt_int(&j["data_parallel_rank"]),
    }
}

/// Every captured batch as (seq, topic, batch), in capture order.
pub fn typed_batches() -> Vec<(u64, String, KvEventBatch)> {
    TYPED
        .lines()
        .map(|l| {
            let j: Json = serde_json::from_str(l).unwrap();
            let batch = KvEventBatch {
                ts: j["ts"].as_str().unwrap().parse().unwrap(),
                events: j["events"].as_array().unwrap().iter().map(event).collect(),
                data_parallel_rank: opt_int(&j["data_parallel_rank"]),
            };
            (
                j["seq"].as_u64().unwrap(),
                j["topic"].as_str().unwrap().to_string(),
                batch,
            )
        })
        .collect()
}

/// Messages in the fixtures' container format: per message a u32be frame count, then per
/// frame a u32be length and the bytes.
pub fn container(bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    let u32be = |at: &mut usize| {
        let v = u32::from_be_bytes(bytes[*at..*at + 4].try_into().unwrap()) as usize;
        *at += 4;
        v
    };
    while at < bytes.len() {
        let n = u32be(&mut at);
        let mut frames = Vec::new();
        for _ in 0..n {
            let len = u32be(&mut at);
            frames.push(bytes[at..at + len].to_vec());
            at += len;
        }
        out.push(frames);
    }
    out
}
