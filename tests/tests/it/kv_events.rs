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

/// One chat request's outcome.
#[derive(Debug)]
struct Sent {
    /// Cached tokens the gateway predicted.
    predicted: u64,
    /// Cached tokens the engine reported.
    cached: u64,
    /// The replica that served it.
    replica: String,
    /// Prompt tokens the engine reported.
    prompt: u64,
}

/// Sends `body` (it must get a prediction) and returns what the gateway and the engine said.
fn send(conn: &mut Connection, body: &Value) -> Sent {
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
    Sent {
        predicted: r
            .header("x-inferrail-cached-tokens")
            .and_then(|v| v.parse().ok())
            .expect("a cached-tokens prediction"),
        cached: v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        replica: r.header("x-inferrail-replica").unwrap_or("?").to_string(),
        prompt: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
    }
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
        let Sent {
            predicted,
            cached: real,
            replica,
            ..
        } = send(&mut conn, body);
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
    let sibling = |i: usize| {
        let body = json!({"model": MODEL, "max_tokens": 1, "messages": [
            {"role": "system", "content": prefix},
            {"role": "user", "content": format!("sibling {i}")}]});
        let addr = gw.addr;
        std::thread::spawn(move || send(&mut connect(addr), &body))
    };
    // The first is routed (its speculative entry made) before the others leave, so a loaded
    // machine scheduling the client threads late cannot send two of them at once.
    let mut threads = vec![sibling(0)];
    let inserted = || {
        (0..3)
            .map(|i| index_row(&gw, &format!("sim-{i}"))["speculative"]["inserted"].as_u64())
            .map(|n| n.unwrap_or(0))
            .sum::<u64>()
    };
    assert!(
        wait_until(Duration::from_secs(5), || inserted() >= 1),
        "the first sibling was routed"
    );
    // Nine more a few milliseconds apart: all routed while the first still prefills.
    for i in 1..10 {
        std::thread::sleep(Duration::from_millis(3));
        threads.push(sibling(i));
    }
    let results: Vec<Sent> = threads
        .into_iter()
        .map(|t| t.join().expect("request thread"))
        .collect();
    let sent_within = started.elapsed();
    let first = &results[0].replica;
    let together = results.iter().filter(|r| &r.replica == first).count();
    assert_eq!(
        together, 10,
        "all siblings with the first on {first}: {results:?}"
    );
    assert!(
        results[1..].iter().all(|r| r.predicted > 0),
        "every sibling predicted the first one's blocks: {results:?}"
    );
    let row = index_row(&gw, first);
    assert!(
        row["speculative"]["inserted"].as_u64().unwrap_or(0) >= 10,
        "routed prompts held until confirmed: {row}"
    );
    // The engines stored every sibling under the gateway's own block hashes: parity holds.
    let parity = || gw.admin("GET", "/admin/index", None).1["parity"][MODEL].clone();
    assert!(
        wait_until(Duration::from_secs(5), || parity()["match"]
            .as_u64()
            .unwrap_or(0)
            >= 10),
        "{} {}",
        parity(),
        index_row(&gw, first)
    );
    assert_eq!(parity()["predictions"], "on");
    assert_eq!(parity()["mismatch"], 0);
    eprintln!("ten siblings in {sent_within:?}: {results:?}");
}

/// A simulator process, killed (SIGKILL) when dropped.
struct SimProcess(std::process::Child);

impl SimProcess {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A simulator process (the binary) on `port`, publishing events on ports of its choosing.
fn sim_process(port: u16) -> SimProcess {
    let bin = inferrail_bin().with_file_name("inferrail-sim");
    assert!(
        bin.exists(),
        "{} missing: build the workspace first",
        bin.display()
    );
    let child = std::process::Command::new(bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--served-model-name", MODEL, "--zero-latency"])
        .args(["--enable-prompt-tokens-details", "--block-size", "16"])
        .args(["--num-gpu-blocks-override", "256", "--max-model-len", "2048"])
        .args([
            "--kv-events-config",
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0"}"#,
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .map(SimProcess)
        .expect("simulator process starts");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let up = wait_until(Duration::from_secs(10), || {
        inferrail_tools::client::call(addr, "GET", "/health", &[], None)
            .is_ok_and(|r| r.status == 200)
    });
    assert!(up, "simulator on {port} answers /health");
    child
}

/// A port free now (the kernel's pick, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn after_a_kill_and_a_restart_on_new_event_ports_the_mirror_starts_empty_and_exact() {
    let port = free_port();
    let mut sim = sim_process(port);
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n    policy: round_robin\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         tokenizer:\n  max_wait: 2s\nreplicas:\n\
         \x20 - id: sim-0\n    url: http://127.0.0.1:{port}\n    models: [{MODEL}]\n    kv_capacity_blocks: 256\n    kv_events: discover\n"
    );
    let gw = TestGateway::start(&yaml);
    let mode = |gw: &TestGateway| {
        index_row(gw, "sim-0")["mode"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(wait_until(Duration::from_secs(10), || mode(&gw) == "exact"));
    let body = json!({"model": MODEL, "max_tokens": 1, "messages": [
        {"role": "system", "content": "A system prompt long enough to fill several blocks of sixteen tokens each, twice over."},
        {"role": "user", "content": "the question"}]});
    let mut conn = connect(gw.addr);
    let cold = send(&mut conn, &body).cached;
    assert_eq!(cold, 0);
    // Wait for the events, then the repeat is predicted from the mirror and hits.
    assert!(wait_until(Duration::from_secs(5), || {
        index_row(&gw, "sim-0")["mirror_blocks"]
            .as_u64()
            .unwrap_or(0)
            > 0
    }));
    let Sent {
        predicted,
        cached: real,
        ..
    } = send(&mut conn, &body);
    assert!(
        real > 0 && predicted == real,
        "predicted {predicted}, cached {real}"
    );

    // kill -9: the stream drops, the mirror is distrusted at once.
    sim.kill();
    assert!(
        wait_until(Duration::from_secs(5), || mode(&gw) == "unsynced"),
        "{}",
        index_row(&gw, "sim-0")
    );
    // The new process binds other event ports: the gateway reads /kv_event_sources again.
    let _sim = sim_process(port);
    assert!(
        wait_until(Duration::from_secs(15), || mode(&gw) == "exact"),
        "{}",
        index_row(&gw, "sim-0")
    );
    let row = index_row(&gw, "sim-0");
    assert_eq!(
        row["mirror_blocks"], 0,
        "a new engine's cache is empty: {row}"
    );
    let mut conn = connect(gw.addr);
    let Sent {
        predicted,
        cached: real,
        ..
    } = send(&mut conn, &body);
    assert_eq!(
        (predicted, real),
        (0, 0),
        "nothing cached after the restart"
    );
    assert!(wait_until(Duration::from_secs(5), || {
        index_row(&gw, "sim-0")["mirror_blocks"]
            .as_u64()
            .unwrap_or(0)
            > 0
    }));
    let Sent {
        predicted,
        cached: real,
        ..
    } = send(&mut conn, &body);
    assert!(
        real > 0 && predicted == real,
        "predicted {predicted}, cached {real}"
    );
}

/// `n` gateways (kv_aware) in front of the same three simulators, every replica followed by
/// its events (or, without `events`, predicted from each gateway's own routing records); returns (predictions exact, requests, engine cached tokens, prompt tokens) for
/// `workload(requests)` sent one at a time, request `i` to gateway `(5i + i/3) % n` (so every
/// conversation visits every gateway); with `wait_for_events`, each request waits until every
/// gateway applied every batch published so far (the shared view without the event lag).
fn shared_fleet_run(
    gateways: usize,
    requests: usize,
    events: bool,
    wait_for_events: bool,
) -> (usize, usize, u64, u64) {
    let sims: Vec<SimServer> = (0..3).map(sim_with_events).collect();
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n    policy: kv_aware\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         routing:\n  seed: 5\ntokenizer:\n  max_wait: 2s\nreplicas:\n"
    );
    for (i, s) in sims.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim-{i}\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: {KV_BLOCKS}\n{}",
            s.url(),
            if events { "    kv_events: discover\n" } else { "" }
        ));
    }
    let gws: Vec<TestGateway> = (0..gateways).map(|_| TestGateway::start(&yaml)).collect();
    for gw in gws.iter().filter(|_| events) {
        let exact = wait_until(Duration::from_secs(10), || {
            (0..3).all(|i| index_row(gw, &format!("sim-{i}"))["mode"] == "exact")
        });
        assert!(exact, "{}", gw.admin("GET", "/admin/index", None).1);
    }
    let mut conns: Vec<Connection> = gws.iter().map(|g| connect(g.addr)).collect();
    let (mut exact, mut cached, mut prompt) = (0, 0u64, 0u64);
    for (i, body) in workload(requests).iter().enumerate() {
        let sent = send(&mut conns[(5 * i + i / 3) % gateways], body);
        let (predicted, real) = (sent.predicted, sent.cached);
        exact += usize::from(predicted == real);
        cached += real;
        prompt += sent.prompt;
        if wait_for_events {
            for g in &gws {
                caught_up(g, &sims);
            }
        }
    }
    (exact, requests, cached, prompt)
}

/// The issue's bar, fixed before the first run: with three gateways sharing the engines through
/// their events, at least 99% of sequential predictions are exact and the engines' hit rate is
/// at least 0.95 of one gateway serving all the traffic. Each request here waits until every
/// gateway applied the batches published before it, so the check is the shared view itself;
/// `three_gateways_without_waiting_for_events` (opt-in, `make kv-figures`) measures it with the
/// event lag racing the next request.
#[test]
fn three_gateways_share_one_view_of_the_engines_caches() {
    const REQUESTS: usize = 300;
    let (exact1, n1, cached1, prompt1) = shared_fleet_run(1, REQUESTS, true, true);
    let (exact3, n3, cached3, prompt3) = shared_fleet_run(3, REQUESTS, true, true);
    let hit1 = cached1 as f64 / prompt1 as f64;
    let hit3 = cached3 as f64 / prompt3 as f64;
    eprintln!(
        "one gateway: {exact1}/{n1} exact, hit rate {hit1:.3}; three: {exact3}/{n3} exact, hit rate {hit3:.3} ({:.3}x)",
        hit3 / hit1
    );
    assert!(
        hit1 > 0.3,
        "the workload shares prefixes: hit rate {hit1:.3}"
    );
    assert!(
        exact1 * 100 >= n1 * 99,
        "one gateway: {exact1} of {n1} exact"
    );
    assert!(
        exact3 * 100 >= n3 * 99,
        "three gateways: {exact3} of {n3} exact"
    );
    assert!(
        hit3 >= 0.95 * hit1,
        "hit rate {hit3:.3} against one gateway's {hit1:.3}"
    );
}

/// Figures, not a bar: the same workload sent without waiting for events (the next request may
/// reach another gateway before the batches of the last one), with and without events, over
/// `KV_FIGURE_RUNS` runs (default 5).
#[test]
#[ignore = "figures: make kv-figures"]
fn three_gateways_without_waiting_for_events() {
    const REQUESTS: usize = 300;
    let runs: usize = std::env::var("KV_FIGURE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for events in [true, false] {
        let (mut exact, mut n, mut cached, mut prompt) = (0, 0, 0, 0);
        let mut per_run = Vec::new();
        for _ in 0..runs {
            let (e, k, c, p) = shared_fleet_run(3, REQUESTS, events, false);
            per_run.push(e);
            exact += e;
            n += k;
            cached += c;
            prompt += p;
        }
        let (_, _, c1, p1) = shared_fleet_run(1, REQUESTS, events, false);
        let hit = cached as f64 / prompt as f64;
        let hit1 = c1 as f64 / p1 as f64;
        println!(
            "three gateways, events {events}: {exact}/{n} exact ({:.2}%), per run {per_run:?} of {REQUESTS}; \
             hit rate {hit:.3}, one gateway {hit1:.3} ({:.3}x)",
            100.0 * exact as f64 / n as f64,
            hit / hit1
        );
    }
}

#[test]
fn an_engine_whose_chat_template_differs_switches_the_models_predictions_off() {
    let events = KvEventsConfig::parse(
        r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:0",
            "replay_endpoint": "tcp://*:0"}"#,
    )
    .expect("events config");
    // One tokenizer on both sides, but the engine renders chats with a template of its own:
    // the mistake users make most, which leaves its tokens different from the gateway's.
    let tiny = format!(
        "{}/../shards/fixtures/tiny-llama",
        env!("CARGO_MANIFEST_DIR")
    );
    let sim = SimServer::start(SimOptions {
        tokenizer: Some(tiny.clone()),
        enable_prompt_tokens_details: true,
        zero_latency: true,
        num_gpu_blocks_override: Some(512),
        max_model_len: 4096,
        block_size: BLOCK,
        kv_events_config: Some(events),
        chat_template: Some(
            "{% for m in messages %}<<{{ m['role'] }}>> {{ m['content'] }}\n{% endfor %}".into(),
        ),
        ..SimOptions::new(MODEL)
    })
    .expect("simulator starts");
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n    policy: kv_aware\n    tokenizer: {tiny}\n    block_size: {BLOCK}\n\
         tokenizer:\n  max_wait: 2s\nreplicas:\n\
         \x20 - id: sim-0\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: 512\n    kv_events: discover\n",
        sim.url()
    );
    let gw = TestGateway::start(&yaml);
    assert!(wait_until(Duration::from_secs(10), || index_row(
        &gw, "sim-0"
    )["mode"]
        == "exact"));
    let mut conn = connect(gw.addr);
    for body in workload(25) {
        send(&mut conn, &body);
    }
    // The routed prompts expire unconfirmed (2 s), the check reads them (every second).
    let parity =
        |gw: &TestGateway| gw.admin("GET", "/admin/index", None).1["parity"][MODEL].clone();
    assert!(
        wait_until(Duration::from_secs(10), || parity(&gw)["predictions"]
            == "off"),
        "{} {}",
        parity(&gw),
        index_row(&gw, "sim-0")
    );
    let p = parity(&gw);
    assert!(p["mismatch"].as_u64().unwrap_or(0) >= 20, "{p}");
    assert_eq!(p["match"], 0, "{p}");
    // Routing goes on without the model's predictions, and says so.
    let r = conn
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(workload(1)[0].to_string().as_bytes()),
        )
        .expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-inferrail-cached-tokens"), None);
    let text = gw.metrics();
    assert!(metric(&text, "inferrail_prompts_total{result=\"parity_off\"}").unwrap_or(0.0) >= 1.0);
    assert_eq!(
        metric(
            &text,
            &format!("inferrail_index_parity_predictions{{model=\"{MODEL}\"}}")
        ),
        Some(0.0)
    );
}
