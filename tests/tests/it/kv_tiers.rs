//! Offloaded blocks priced by the tier term: an engine whose KV events say it holds a prompt's
//! blocks partly on the GPU, partly in host memory (`medium: "CPU"`) and partly in storage gets
//! all of them counted as cached (vLLM's offloading connector loads them instead of recomputing),
//! and the load time of the offloaded ones, at the configured per-token rates, as `tier_secs`:
//! in `/admin/explain`, in the prediction header, and in the decision log.
//!
//! The engine's publisher is driven by hand (the simulator publishes GPU events only): it stores
//! the prompt's first six blocks, two per medium, under the gateway's own token ids.

use inferrail_shards::tokenize::Endpoint;
use inferrail_sim::kv_events::{
    BlockStored, ExternalBlockHash, KvEventBatch, KvEventPublisher, PublisherConfig, WireEvent,
};
use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Tokens per KV block on the engines and in the gateway's config.
const BLOCK: usize = 16;
/// Seconds to load one token from the CPU tier, and from storage (distinct, so each shows).
const CPU_SECS: f64 = 1e-5;
const STORAGE_SECS: f64 = 4e-5;

/// One BlockStored of `ids` (engine ids), following `parent`, in `medium`.
fn stored(ids: [u64; 2], parent: Option<u64>, tokens: &[u32], medium: &str) -> WireEvent {
    WireEvent::BlockStored(BlockStored {
        block_hashes: ids.iter().map(|&i| ExternalBlockHash::Int(i)).collect(),
        parent_block_hash: parent.map(ExternalBlockHash::Int),
        token_ids: tokens.to_vec(),
        block_size: BLOCK as u64,
        lora_id: None,
        medium: Some(medium.into()),
        lora_name: None,
        extra_keys: None,
        group_idx: Some(0),
        kv_cache_spec_kind: None,
        kv_cache_spec_sliding_window: None,
        locality: None,
        ownership: None,
        session_id: None,
    })
}

/// The replica `id`'s row in an explain answer.
fn row<'a>(explain: &'a Value, id: &str) -> &'a Value {
    explain["replicas"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == id))
        .unwrap_or_else(|| panic!("no row for {id}: {explain}"))
}

#[test]
fn blocks_an_engine_offloaded_are_cached_and_priced_by_their_load_time() {
    let body = json!({
        "model": MODEL,
        "max_tokens": 1,
        "prompt": "Offloaded prefixes are loaded back, not recomputed: the router prices the \
                   load. ".repeat(6),
    });
    let text = body.to_string();
    // The prompt's token ids as the gateway (and the engine) compute them.
    let tokenizer = inferrail_shards::tokenize::load("builtin:sim", None).expect("tokenizer");
    let ids = tokenizer
        .prompt_ids(
            Endpoint::Completion,
            text.as_bytes(),
            &serde_json::Map::new(),
        )
        .expect("token ids");
    assert!(ids.len() > 7 * BLOCK, "{} tokens", ids.len());
    let t = |b: usize| &ids[b * BLOCK..(b + 2) * BLOCK];

    // The engine's publisher, with a replay endpoint: the gateway replays from batch 0 on
    // connecting, so the mirror is exact from the start.
    let publisher = KvEventPublisher::start(PublisherConfig {
        endpoint: "tcp://*:0".into(),
        replay_endpoint: Some("tcp://*:0".into()),
        topic: "kv".into(),
        ..PublisherConfig::default()
    })
    .expect("publisher starts");
    let batch = KvEventBatch {
        ts: 0.0,
        events: vec![
            stored([1, 2], None, t(0), "GPU"),
            stored([3, 4], Some(2), t(2), "CPU"),
            stored([5, 6], Some(4), t(4), "STORAGE"),
        ],
        data_parallel_rank: None,
    };
    assert!(publisher.publish(batch));
    let port = |a: Option<std::net::SocketAddr>| a.expect("bound").port();
    let kv_events = format!(
        "{{endpoint: 'tcp://*:{}', replay_endpoint: 'tcp://*:{}', topic: kv}}",
        port(publisher.local_addr()),
        port(publisher.replay_addr())
    );

    let sims: Vec<SimServer> = (0..2)
        .map(|seed| {
            SimServer::start(SimOptions {
                zero_latency: true,
                block_size: BLOCK,
                seed,
                ..SimOptions::new(MODEL)
            })
            .expect("simulator starts")
        })
        .collect();
    let log = std::env::temp_dir().join(format!(
        "inferrail-kv-tiers-{}-decisions.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&log);
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n    policy: cost_model\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         tokenizer:\n  max_wait: 2s\n\
         routing:\n  cost_model: {{cpu_load_token_secs: {CPU_SECS:e}, storage_load_token_secs: {STORAGE_SECS:e}}}\n\
         observability:\n  decision_log: {{path: {}, sample_rate: 1.0}}\n\
         replicas:\n\
         \x20 - id: offloaded\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: 64\n    kv_events: {kv_events}\n\
         \x20 - id: cold\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: 64\n",
        log.display(),
        sims[0].url(),
        sims[1].url(),
    );
    let gw = TestGateway::start(&yaml);
    let exact = wait_until(Duration::from_secs(10), || {
        let (_, v) = gw.admin("GET", "/admin/index", None);
        v["replicas"].as_array().is_some_and(|rows| {
            rows.iter()
                .any(|r| r["id"] == "offloaded" && r["mode"] == "exact" && r["mirror_blocks"] == 6)
        })
    });
    assert!(exact, "{}", gw.admin("GET", "/admin/index", None).1);

    // Two blocks on the GPU, two on the CPU, two in storage: 96 tokens not recomputed, 32 of
    // them loaded from each offload tier.
    let tier = 32.0 * CPU_SECS + 32.0 * STORAGE_SECS;
    let (status, explain) = gw.admin("POST", "/admin/explain/v1/completions", Some(&text));
    assert_eq!(status, 200, "{explain}");
    assert_eq!(explain["prediction"], "predicted", "{explain}");
    let offloaded = row(&explain, "offloaded");
    assert_eq!(offloaded["cached_tokens"], 96, "{offloaded}");
    let got = offloaded["estimate"]["tier_secs"].as_f64().unwrap_or(-1.0);
    assert!((got - tier).abs() < 1e-12, "tier_secs {got}, want {tier}");
    let cold = row(&explain, "cold");
    assert_eq!(
        (&cold["cached_tokens"], &cold["estimate"]["tier_secs"]),
        (&json!(0), &json!(0.0)),
        "{cold}"
    );
    // Loading 64 tokens is cheaper than computing them: the offloaded replica wins on prefill.
    assert_eq!(
        (&explain["winner"], &explain["decided_by"]),
        (&json!("offloaded"), &json!("prefill")),
        "{explain}"
    );

    // Routed for real: the prediction header counts the offloaded tokens as cached.
    let r = inferrail_tools::client::call(
        gw.addr,
        "POST",
        "/v1/completions",
        &[("content-type", "application/json")],
        Some(text.as_bytes()),
    )
    .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-inferrail-replica"), Some("offloaded"));
    assert_eq!(r.header("x-inferrail-cached-tokens"), Some("96"));
    gw.stop();

    // The decision log keeps the tier cost on the candidate, for replay and shadow runs.
    let mut lines = Vec::new();
    wait_until(Duration::from_secs(5), || {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect();
        !lines.is_empty()
    });
    let _ = std::fs::remove_file(&log);
    let line = lines
        .first()
        .unwrap_or_else(|| panic!("no decision logged"));
    let logged = line["candidates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "offloaded"))
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(logged["cached_tokens"], 96, "{logged}");
    let got = logged["tier_secs"].as_f64().unwrap_or(-1.0);
    assert!((got - tier).abs() < 1e-12, "logged tier_secs {got}");
}
