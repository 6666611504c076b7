//! The exact index: a gateway following its engines' KV events predicts what they really cached,
//! also after something it did not route changed their caches (here a `POST
//! /reset_prefix_cache` sent to the engines directly, which a gateway predicting from its own
//! routing records cannot see).

use inferrail_sim::kv_events::KvEventsConfig;
use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use inferrail_tools::client::Connection;
use serde_json::{json, Value};
use std::time::Duration;

/// Tokens per KV block on the simulators and in the gateway's config.
const BLOCK: usize = 16;
/// Each simulator's KV cache (one block is vLLM's null block): small enough to evict.
const KV_BLOCKS: usize = 64;

fn sim_with_events(seed: u64) -> SimServer {
    let events = KvEventsConfig::parse(
        r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:0",
            "replay_endpoint": "tcp://*:0", "topic": "kv"}"#,
    )
    .expect("events config");
    SimServer::start(SimOptions {
        enable_prompt_tokens_details: true,
        zero_latency: true,
        num_gpu_blocks_override: Some(KV_BLOCKS),
        max_model_len: 960,
        block_size: BLOCK,
        seed,
        kv_events_config: Some(events),
        ..SimOptions::new(MODEL)
    })
    .expect("simulator starts")
}

/// `sim-0` follows its events by discovery, `sim-1` by configured endpoints with a `*` host.
fn fleet() -> (Vec<SimServer>, TestGateway) {
    let sims: Vec<SimServer> = (0..2).map(sim_with_events).collect();
    let kv = sims[1].kv_events().expect("publisher");
    let port = |a: Option<std::net::SocketAddr>| a.expect("bound").port();
    let explicit = format!(
        "{{endpoint: 'tcp://*:{}', replay_endpoint: 'tcp://*:{}', topic: kv}}",
        port(kv.local_addr()),
        port(kv.replay_addr())
    );
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\n\
         models:\n  - name: {MODEL}\n    policy: round_robin\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         tokenizer:\n  max_wait: 2s\nreplicas:\n\
         \x20 - id: sim-0\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: {KV_BLOCKS}\n    kv_events: discover\n\
         \x20 - id: sim-1\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: {KV_BLOCKS}\n    kv_events: {explicit}\n",
        sims[0].url(),
        sims[1].url(),
    );
    (sims, TestGateway::start(&yaml))
}

/// `/admin/index`'s row for replica `id`.
fn index_row(gw: &TestGateway, id: &str) -> Value {
    let (status, v) = gw.admin("GET", "/admin/index", None);
    assert_eq!(status, 200, "{v}");
    v["replicas"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == id).cloned())
        .unwrap_or(Value::Null)
}

/// Batches the gateway applied from replica `id`'s streams.
fn applied(gw: &TestGateway, id: &str) -> u64 {
    index_row(gw, id)["kv_events"]["streams"]
        .as_array()
        .map_or(0, |s| s.iter().filter_map(|s| s["batches"].as_u64()).sum())
}

/// Waits until the gateway has applied every batch each simulator published.
fn caught_up(gw: &TestGateway, sims: &[SimServer]) {
    let ok = wait_until(Duration::from_secs(10), || {
        sims.iter().enumerate().all(|(i, s)| {
            let published = s.kv_events().map_or(0, |k| k.published());
            applied(gw, &format!("sim-{i}")) == published
        })
    });
    assert!(ok, "the gateway did not apply every published batch: {}", {
        let (_, v) = gw.admin("GET", "/admin/index", None);
        v
    });
}

/// Sends `body` and returns (predicted cached tokens, engine cached tokens, replica).
fn send(conn: &mut Connection, body: &Value) -> (u64, u64, String) {
    let r = conn
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(body.to_string().as_bytes()),
        )
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_str(&r.text()).expect("JSON body");
    let real = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let predicted = r
        .header("x-inferrail-cached-tokens")
        .and_then(|v| v.parse().ok())
        .expect("a cached-tokens prediction");
    let replica = r.header("x-inferrail-replica").unwrap_or("?").to_string();
    (predicted, real, replica)
}

/// Conversations that share system prompts and grow, so later turns hit earlier blocks.
fn workload(n: usize) -> Vec<Value> {
    let systems = [
        "You are a careful assistant who answers questions about routing and caches in detail.",
        "You translate technical prose into plain words and keep every number exactly as given.",
        "You review code for correctness first and style second, and you cite the line you mean.",
    ];
    let mut out = Vec::new();
    let mut history: Vec<Vec<Value>> = systems
        .iter()
        .map(|s| vec![json!({"role": "system", "content": s})])
        .collect();
    for i in 0..n {
        let c = i % systems.len();
        history[c].push(
            json!({"role": "user", "content": format!("question {i} about block {}", i * 7)}),
        );
        out.push(json!({"model": MODEL, "messages": history[c], "max_tokens": 1}));
        history[c].push(json!({"role": "assistant", "content": format!("answer {i}")}));
        if history[c].len() > 13 {
            history[c].truncate(1);
        }
    }
    out
}

#[test]
fn predictions_follow_the_engines_events_through_a_reset_the_gateway_never_saw() {
    let (sims, gw) = fleet();
    let exact = wait_until(Duration::from_secs(10), || {
        ["sim-0", "sim-1"]
            .iter()
            .all(|id| index_row(&gw, id)["mode"] == "exact")
    });
    assert!(
        exact,
        "both replicas exact: {}",
        gw.admin("GET", "/admin/index", None).1
    );
    let row = index_row(&gw, "sim-0");
    assert_eq!(row["kv_events"]["configured"], "discover", "{row}");
    assert_eq!(
        row["kv_events"]["streams"][0]["endpoint"],
        format!(
            "tcp://127.0.0.1:{}",
            sims[0]
                .kv_events()
                .and_then(|k| k.local_addr())
                .map_or(0, |a| a.port())
        ),
        "{row}"
    );

    let mut conn = connect(gw.addr);
    let bodies = workload(60);
    let mut mismatches = Vec::new();
    let mut hits = 0;
    for (i, body) in bodies.iter().enumerate() {
        if i == 30 {
            // Behind the gateway's back: every engine drops its cache.
            for s in &sims {
                let r = inferrail_tools::client::call(
                    s.addr(),
                    "POST",
                    "/reset_prefix_cache",
                    &[],
                    None,
                )
                .expect("reset");
                assert_eq!(r.status, 200);
            }
        }
        let (predicted, real, replica) = send(&mut conn, body);
        hits += usize::from(real > 0);
        // vLLM publishes AllBlocksCleared with its next step, the one that serves the first
        // request after the reset: that request is still predicted from before the reset.
        let first_after_reset = i == 30 || i == 31;
        if predicted != real && !first_after_reset {
            mismatches.push(format!(
                "request {i} on {replica}: predicted {predicted}, engine cached {real}"
            ));
        }
        caught_up(&gw, &sims);
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(hits > 20, "the workload shares prefixes: {hits} hits");
    for id in ["sim-0", "sim-1"] {
        let row = index_row(&gw, id);
        assert_eq!(row["mode"], "exact", "{row}");
        let s = &row["kv_events"]["streams"][0];
        assert_eq!(s["decode_errors"], 0, "{row}");
        assert_eq!(s["gaps"], 0, "{row}");
        assert_eq!(s["connected"], true, "{row}");
    }
    let text = gw.metrics();
    assert_eq!(
        metric(
            &text,
            "inferrail_index_mode{replica=\"sim-0\",mode=\"exact\"}"
        ),
        Some(1.0)
    );
    assert!(
        metric(
            &text,
            "inferrail_kv_events_batches_total{replica=\"sim-1\"}"
        )
        .unwrap_or(0.0)
            > 0.0
    );
}

/// Simulators with events and vLLM's latency (a long prompt prefills for about 100 ms).
fn slow_fleet(n: usize, policy: &str) -> (Vec<SimServer>, TestGateway) {
    let sims: Vec<SimServer> = (0..n)
        .map(|seed| {
            let events = KvEventsConfig::parse(
                r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:0",
                    "replay_endpoint": "tcp://*:0"}"#,
            )
            .expect("events config");
            SimServer::start(SimOptions {
                enable_prompt_tokens_details: true,
                num_gpu_blocks_override: Some(512),
                max_model_len: 4096,
                block_size: BLOCK,
                seed: seed as u64,
                kv_events_config: Some(events),
                ..SimOptions::new(MODEL)
            })
            .expect("simulator starts")
        })
        .collect();
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\n\
         models:\n  - name: {MODEL}\n    policy: {policy}\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         routing:\n  bounded_load_floor: 16\ntokenizer:\n  max_wait: 2s\nreplicas:\n"
    );
    for (i, s) in sims.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim-{i}\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: 512\n    kv_events: discover\n",
            s.url()
        ));
    }
    let gw = TestGateway::start(&yaml);
    let ids: Vec<String> = (0..n).map(|i| format!("sim-{i}")).collect();
    let exact = wait_until(Duration::from_secs(10), || {
        ids.iter().all(|id| index_row(&gw, id)["mode"] == "exact")
    });
    assert!(
        exact,
        "every replica exact: {}",
        gw.admin("GET", "/admin/index", None).1
    );
    (sims, gw)
}

#[test]
fn siblings_of_a_new_long_prompt_sent_before_its_events_find_each_other() {
    let (_sims, gw) = slow_fleet(3, "kv_aware");
    let prefix = "The router keeps every replica's cache in view and sends a request where its \
                  prompt already is. "
        .repeat(40);
    let started = std::time::Instant::now();
    let threads: Vec<_> = (0..10)
        .map(|i| {
            let body = json!({"model": MODEL, "max_tokens": 1, "messages": [
                {"role": "system", "content": prefix},
                {"role": "user", "content": format!("sibling {i}")}]});
            let addr = gw.addr;
            // Ten siblings a few milliseconds apart: all routed while the first still prefills.
            std::thread::sleep(Duration::from_millis(3));
            std::thread::spawn(move || send(&mut connect(addr), &body))
        })
        .collect();
    let results: Vec<(u64, u64, String)> = threads
        .into_iter()
        .map(|t| t.join().expect("request thread"))
        .collect();
    let sent_within = started.elapsed();
    let first = &results[0].2;
    let together = results.iter().filter(|r| &r.2 == first).count();
    assert_eq!(
        together, 10,
        "all siblings with the first on {first}: {results:?}"
    );
    assert!(
        results[1..].iter().all(|r| r.0 > 0),
        "every sibling predicted the first one's blocks: {results:?}"
    );
    let row = index_row(&gw, first);
    assert!(
        row["speculative"]["inserted"].as_u64().unwrap_or(0) >= 10,
        "routed prompts held until confirmed: {row}"
    );
    eprintln!("ten siblings in {sent_within:?}: {results:?}");
}
