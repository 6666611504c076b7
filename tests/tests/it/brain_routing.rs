//! The routing brain through the real gateway in front of in-process simulators: cache-aware
//! policies against round robin on shared system prompts under eviction pressure, sessions that
//! stick until their replica is overloaded, and /admin/explain.

use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

const MODEL: &str = "sim-llama";
const BLOCK: usize = 16;

/// Three simulators with `kv_blocks` KV blocks each, behind a
/// gateway routing with `policy` (builtin tokenizer, so predictions are exact).
fn fleet(
    policy: &str,
    kv_blocks: usize,
    latency: bool,
    extra: &str,
) -> (Vec<SimServer>, TestGateway) {
    let sims: Vec<SimServer> = (0..3)
        .map(|seed| {
            SimServer::start(SimOptions {
                enable_prompt_tokens_details: true,
                zero_latency: !latency,
                num_gpu_blocks_override: Some(kv_blocks),
                max_model_len: 736,
                block_size: BLOCK,
                seed,
                ..SimOptions::new(MODEL)
            })
            .expect("simulator starts")
        })
        .collect();
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\n\
         models:\n  - name: {MODEL}\n    policy: {policy}\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         routing:\n  seed: 5\n{extra}tokenizer:\n  max_wait: 2s\nreplicas:\n"
    );
    for (i, s) in sims.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim-{i}\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: {kv_blocks}\n",
            s.url()
        ));
    }
    let gw = TestGateway::start(&yaml);
    (sims, gw)
}

/// Eight system prompts of about 300 tokens (the builtin tokenizer has one token per word
/// below), each with its own word order from the first word on.
fn systems() -> Vec<String> {
    const WORDS: [&str; 24] = [
        "the", "of", "and", "to", "in", "is", "it", "you", "that", "was", "for", "on", "are",
        "with", "as", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    ];
    (0..8)
        .map(|s| {
            (0..300)
                .map(|w| WORDS[(w * 7 + s * 13 + w * w * s) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Sends `n` chats (system prompt `i % 8`, a fresh question) and returns the share of the
/// system prompts' tokens the engines served from cache, after the first round.
fn shared_hit_rate(gw: &TestGateway, n: usize) -> f64 {
    let systems = systems();
    let mut conn = connect(gw.addr);
    let (mut cached, mut shared) = (0u64, 0u64);
    for i in 0..n {
        let body = json!({"model": MODEL, "max_tokens": 1, "messages": [
            {"role": "system", "content": systems[(i * 5) % systems.len()]},
            {"role": "user", "content": format!("question number {i} about caching")}]});
        let r = conn
            .call(
                "POST",
                "/v1/chat/completions",
                &[],
                Some(body.to_string().as_bytes()),
            )
            .expect("response");
        assert_eq!(r.status, 200, "{}", r.text());
        if i < systems.len() {
            continue; // every system prompt's first request is cold anywhere
        }
        let v: Value = serde_json::from_str(&r.text()).expect("JSON");
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        let hit = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        // The system prompt is all but the question's last block or so.
        let system_tokens = prompt.saturating_sub(2 * BLOCK as u64);
        cached += hit.min(system_tokens);
        shared += system_tokens;
    }
    cached as f64 / shared.max(1) as f64
}

#[test]
fn cache_aware_policies_serve_shared_prompts_from_cache_where_round_robin_cannot() {
    // 96 blocks per engine: about five of the eight 300-token system prompts each, so a policy
    // that keeps each prompt on one replica holds them all, and round robin (every replica sees
    // all eight in turn) holds none by the time they come back.
    let mut rates = Vec::new();
    for policy in ["round_robin", "kv_aware", "cost_model", "prefix_hash"] {
        let (_sims, gw) = fleet(policy, 96, false, "");
        let rate = shared_hit_rate(&gw, 120);
        eprintln!(
            "{policy}: {:.1}% of shared-prompt tokens from cache",
            rate * 100.0
        );
        rates.push((policy, rate));
    }
    assert!(rates[0].1 < 0.40, "round robin: {rates:?}");
    for (policy, rate) in &rates[1..] {
        assert!(*rate >= 0.90, "{policy}: {rates:?}");
    }
}

#[test]
fn a_session_sticks_to_its_replica_until_it_is_overloaded() {
    // The strict guard (floor 1): the test is about the bounded-load guard moving turns.
    let (_sims, gw) = fleet(
        "cost_model",
        2560,
        true,
        "  session_affinity: true\n  bounded_load_floor: 1\n",
    );
    let body = |turn: usize| {
        json!({"model": MODEL, "max_tokens": 2, "messages": [
            {"role": "user", "content": format!("turn {turn} of a conversation about routers")}]})
        .to_string()
    };
    let mut conn = connect(gw.addr);
    let mut replicas = Vec::new();
    for turn in 0..6 {
        let r = conn
            .call(
                "POST",
                "/v1/chat/completions",
                &[("x-session-id", "conv-7")],
                Some(body(turn).as_bytes()),
            )
            .expect("response");
        assert_eq!(r.status, 200);
        replicas.push(r.header("x-inferrail-replica").unwrap_or("").to_string());
    }
    assert!(replicas.iter().all(|r| *r == replicas[0]), "{replicas:?}");
    // Twelve turns of the same conversation at once: the bounded-load guard moves the ones its
    // replica cannot take (at most ceil(2 * (in_flight + 1) / 3) there).
    let threads: Vec<_> = (0..12)
        .map(|t| {
            let addr = gw.addr;
            let b = json!({"model": MODEL, "max_tokens": 40, "messages": [
                {"role": "user", "content": format!("parallel turn {t}")}]})
            .to_string();
            std::thread::spawn(move || {
                let mut c = connect(addr);
                let r = c
                    .call(
                        "POST",
                        "/v1/chat/completions",
                        &[("x-session-id", "conv-7")],
                        Some(b.as_bytes()),
                    )
                    .expect("response");
                r.header("x-inferrail-replica").unwrap_or("").to_string()
            })
        })
        .collect();
    let spread: Vec<String> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let home = spread.iter().filter(|r| **r == replicas[0]).count();
    assert!(
        (1..12).contains(&home),
        "{home} of 12 on the session's replica: {spread:?}"
    );
}

#[test]
fn explain_shows_every_replica_and_agrees_with_routing_without_changing_state() {
    let (_sims, gw) = fleet("cost_model", 64, false, "");
    let systems = systems();
    let body = json!({"model": MODEL, "max_tokens": 1, "messages": [
        {"role": "system", "content": systems[0]},
        {"role": "user", "content": "what is cached?"}]});
    let mut conn = connect(gw.addr);
    let r = conn
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(body.to_string().as_bytes()),
        )
        .expect("response");
    let home = r.header("x-inferrail-replica").unwrap_or("").to_string();
    // Let the request's slot close (it is released after the response is written).
    std::thread::sleep(Duration::from_millis(50));
    let before = metric(
        &gw.metrics(),
        "inferrail_routing_steering_total{reason=\"policy\"}",
    );
    let (status, v) = gw.admin(
        "POST",
        "/admin/explain/v1/chat/completions",
        Some(&body.to_string()),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["policy"], "cost_model");
    assert_eq!(v["prediction"], "predicted");
    // The effective limit: max(ceil(2 * (in_flight + 1) / 3), bounded_load_floor 8) with at most
    // a request or two in flight.
    assert_eq!(v["bounded_load_limit"], 8, "{v}");
    let reps = v["replicas"].as_array().expect("replicas");
    assert_eq!(reps.len(), 3);
    for rep in reps {
        assert_eq!(rep["offered"], true, "{rep}");
        let e = &rep["estimate"];
        let sum = e["queue_secs"].as_f64().unwrap_or(-1.0)
            + e["prefill_secs"].as_f64().unwrap_or(-1.0)
            + e["tier_secs"].as_f64().unwrap_or(-1.0);
        assert!(
            (sum - e["total_secs"].as_f64().unwrap_or(0.0)).abs() < 1e-9,
            "{rep}"
        );
    }
    // The replica that cached the system prompt is the cheapest now, and routing agrees.
    assert_eq!(v["winner"], home.as_str(), "{v}");
    assert_eq!(v["decided_by"], "prefill", "{v}");
    let cached: Vec<u64> = reps
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(cached.iter().filter(|c| **c > 0).count(), 1, "{cached:?}");
    let r = conn
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(body.to_string().as_bytes()),
        )
        .expect("response");
    assert_eq!(r.header("x-inferrail-replica"), Some(home.as_str()));
    // Explaining routed nothing: one more policy decision, from the request just sent.
    let after = metric(
        &gw.metrics(),
        "inferrail_routing_steering_total{reason=\"policy\"}",
    );
    assert_eq!(after, before.map(|b| b + 1.0));
    // Any policy on demand; unknown ones are refused with the list.
    let (status, v) = gw.admin(
        "POST",
        "/admin/explain/v1/chat/completions?policy=prefix_hash",
        Some(&body.to_string()),
    );
    assert_eq!((status, v["policy"].as_str()), (200, Some("prefix_hash")));
    assert_eq!(v["decided_by"], "hash");
    let (status, v) = gw.admin(
        "POST",
        "/admin/explain/v1/chat/completions?policy=bogus",
        Some(&body.to_string()),
    );
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("cost_model"), "{v}");
}

/// Three simulators running at `scale` times their modelled latency behind a cost_model
/// gateway whose cost model is scaled by the same factor, with scrapes too rare to matter
/// (each request is decided on the index and the gateway's own ledger).
fn scaled_fleet(scale: f64) -> (Vec<SimServer>, TestGateway) {
    let sims: Vec<SimServer> = (0..3)
        .map(|seed| {
            SimServer::start(SimOptions {
                enable_prompt_tokens_details: true,
                num_gpu_blocks_override: Some(96),
                max_model_len: 736,
                block_size: BLOCK,
                time_scale: scale,
                seed,
                ..SimOptions::new(MODEL)
            })
            .expect("simulator starts")
        })
        .collect();
    let m = |secs: f64| secs * scale;
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n    policy: cost_model\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         load:\n  scrape_interval: 1h\n  max_age: 1us\n\
         routing:\n  seed: 5\n  cost_model:\n    prefill_token_secs: {}\n    prefill_pair_secs: {}\n    \
         prefill_fixed_secs: {}\n    decode_interference_secs: {}\n    cpu_load_token_secs: {}\n    \
         storage_load_token_secs: {}\n\
         tokenizer:\n  max_wait: 2s\nreplicas:\n",
        m(1e-4),
        m(3.3e-9),
        m(5e-3),
        m(3e-4),
        m(5e-6),
        m(2.5e-5)
    );
    for (i, s) in sims.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim-{i}\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: 96\n",
            s.url()
        ));
    }
    (sims, TestGateway::start(&yaml))
}

/// Sends `n` chats one at a time (system prompt `(i * 5) % 8`) and returns, per request, the
/// replica that served it and the tokens its engine served from cache.
fn placements(gw: &TestGateway, n: usize) -> Vec<(String, u64)> {
    let systems = systems();
    let mut conn = connect(gw.addr);
    (0..n)
        .map(|i| {
            let body = json!({"model": MODEL, "max_tokens": 2, "messages": [
                {"role": "system", "content": systems[(i * 5) % systems.len()]},
                {"role": "user", "content": format!("question number {i} about caching")}]});
            let r = conn
                .call(
                    "POST",
                    "/v1/chat/completions",
                    &[],
                    Some(body.to_string().as_bytes()),
                )
                .expect("response");
            assert_eq!(r.status, 200, "{}", r.text());
            let v: Value = serde_json::from_str(&r.text()).expect("JSON");
            let hit = v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            (
                r.header("x-inferrail-replica").unwrap_or("").to_string(),
                hit,
            )
        })
        .collect()
}

/// The fleet's summed `vllm:request_prefill_time_seconds` (the engines' modelled prefill time of
/// every finished request).
fn fleet_prefill_secs(sims: &[SimServer]) -> f64 {
    sims.iter()
        .map(|s| {
            let r = connect(s.addr())
                .call("GET", "/metrics", &[], None)
                .expect("metrics");
            r.text()
                .lines()
                .find_map(|l| l.strip_prefix("vllm:request_prefill_time_seconds_sum{"))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .expect("prefill time sum")
        })
        .sum()
}

#[test]
fn time_scaled_engines_get_the_same_routing_decisions_and_cache_hits() {
    // `inferrail-sim --time-scale`: the same traffic against engines 8x faster, routed with a
    // cost model 8x cheaper, must be placed the same and hit the caches the same; only the
    // engines' clock runs faster. 40 requests one at a time over eight prompts that do not all
    // fit on one replica; one data core, so the seeded tie-breaks run in one sequence.
    let (a, real) = scaled_fleet(1.0);
    let at_scale_1 = placements(&real, 40);
    let (b, fast) = scaled_fleet(0.125);
    let at_scale_8th = placements(&fast, 40);
    // The engines modelled the same prefills, each an eighth as long (one step per prefill,
    // timed by the latency model, not by the test's wall clock).
    let (slow_secs, fast_secs) = (fleet_prefill_secs(&a), fleet_prefill_secs(&b));
    assert!(slow_secs > 0.0, "no prefill time recorded");
    assert!(
        (fast_secs * 8.0 - slow_secs).abs() <= 0.02 * slow_secs,
        "prefill seconds {slow_secs} at scale 1, {fast_secs} at 1/8"
    );
    let replicas: std::collections::HashSet<&str> =
        at_scale_1.iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        replicas.len() > 1,
        "one replica took everything: {at_scale_1:?}"
    );
    assert!(at_scale_1.iter().any(|&(_, hit)| hit > 0), "{at_scale_1:?}");
    assert_eq!(at_scale_1, at_scale_8th);
}

/// Eight system prompts of about 1,300 tokens that share their first 20 words (a whole first
/// block, with the chat template's opening) and differ after.
fn long_systems() -> Vec<String> {
    const WORDS: [&str; 24] = [
        "the", "of", "and", "to", "in", "is", "it", "you", "that", "was", "for", "on", "are",
        "with", "as", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    ];
    (0..8)
        .map(|s| {
            (0..1_300)
                .map(|w| match w {
                    // A shared opening of 20 words: the first block is the same everywhere.
                    0..20 => WORDS[w],
                    _ => WORDS[(w * 7 + s * 13 + w * w * (s + 1)) % WORDS.len()],
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn cost_model_places_new_prefixes_where_there_is_room() {
    // Issue 15's finding: eight ~1,300-token system prompts, one request at a time, three
    // engines of 600 blocks (each holds about seven of the prompts, the fleet all eight with
    // room to spare). Every prompt begins with the same chat-template block, so before the
    // eviction term the replica holding it priced a few microseconds cheaper for every cold
    // prompt, took all of them and kept evicting them (engine hit rate 0.70, two replicas
    // idle). Placing a prompt where it evicts nothing keeps every prompt cached.
    let sims: Vec<SimServer> = (0..3)
        .map(|seed| {
            SimServer::start(SimOptions {
                enable_prompt_tokens_details: true,
                zero_latency: true,
                num_gpu_blocks_override: Some(600),
                max_model_len: 4096,
                block_size: BLOCK,
                seed,
                ..SimOptions::new(MODEL)
            })
            .expect("simulator starts")
        })
        .collect();
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n    policy: cost_model\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         routing:\n  seed: 5\ntokenizer:\n  max_wait: 2s\nreplicas:\n"
    );
    for (i, s) in sims.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim-{i}\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: 600\n",
            s.url()
        ));
    }
    let gw = TestGateway::start(&yaml);
    let systems = long_systems();
    let mut conn = connect(gw.addr);
    let (mut cached, mut prompt, mut repeats_missed) = (0u64, 0u64, 0usize);
    let mut served = std::collections::HashMap::<String, usize>::new();
    for i in 0..120 {
        let body = json!({"model": MODEL, "max_tokens": 1, "messages": [
            {"role": "system", "content": systems[(i * 5) % systems.len()]},
            {"role": "user", "content": format!("question number {i}")}]});
        let r = conn
            .call(
                "POST",
                "/v1/chat/completions",
                &[],
                Some(body.to_string().as_bytes()),
            )
            .expect("response");
        assert_eq!(r.status, 200, "{}", r.text());
        *served
            .entry(r.header("x-inferrail-replica").unwrap_or("").to_string())
            .or_default() += 1;
        let v: Value = serde_json::from_str(&r.text()).expect("JSON");
        let tokens = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        let hit = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        // After the first round, a request misses when its system prompt was evicted: the
        // engine then computes more than the question's last two blocks.
        if i >= systems.len() && hit + 2 * (BLOCK as u64) < tokens {
            repeats_missed += 1;
        }
        prompt += tokens;
        cached += hit;
    }
    let hit_rate = cached as f64 / prompt.max(1) as f64;
    let busiest = served.values().copied().max().unwrap_or(0);
    eprintln!("engine hit rate {hit_rate:.3}, {repeats_missed} repeats missed, served {served:?}");
    // Every prompt's first request is cold (8 of 120); the rest hit all but the question.
    assert_eq!(
        repeats_missed, 0,
        "hit rate {hit_rate:.3}, served {served:?}"
    );
    assert!(
        hit_rate >= 0.85,
        "hit rate {hit_rate:.3}, served {served:?}"
    );
    // No replica holds all eight: the prompts that did not fit went where there was room.
    assert!(busiest < 120, "one replica took all 120: {served:?}");
}
