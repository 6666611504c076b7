//! Every baseline policy routes only to replicas serving the model and spreads load as it says.

use inferrail_tests::*;
use std::collections::HashMap;
use std::time::Duration;

fn replica_counts(addr: std::net::SocketAddr, n: usize, body: &[u8]) -> HashMap<String, usize> {
    let mut conn = connect(addr);
    let mut counts = HashMap::new();
    for _ in 0..n {
        let r = conn
            .call("POST", "/v1/chat/completions", &[], Some(body))
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        *counts
            .entry(r.header("x-inferrail-replica").unwrap().to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn round_robin_cycles_through_replicas() {
    let e = engines(3, EngineBehavior::Instant);
    // One core, so one policy instance sees every request in order.
    let gw =
        TestGateway::start(&config_yaml(&e, "round_robin", "", "").replace("cores: 2", "cores: 1"));
    let mut conn = connect(gw.addr);
    let order: Vec<String> = (0..6)
        .map(|_| {
            conn.call(
                "POST",
                "/v1/chat/completions",
                &[],
                Some(&chat(MODEL, false)),
            )
            .unwrap()
            .header("x-inferrail-replica")
            .unwrap()
            .to_string()
        })
        .collect();
    assert_eq!(order[..3], order[3..], "the cycle repeats: {order:?}");
    let mut first3 = order[..3].to_vec();
    first3.sort();
    assert_eq!(first3, vec!["engine-0", "engine-1", "engine-2"]);
}

#[test]
fn random_and_p2c_use_every_replica() {
    for policy in ["random", "p2c"] {
        let e = engines(3, EngineBehavior::Instant);
        let gw = TestGateway::start(&config_yaml(&e, policy, "", ""));
        let counts = replica_counts(gw.addr, 90, &chat(MODEL, false));
        assert_eq!(counts.len(), 3, "{policy}: {counts:?}");
        assert!(counts.values().all(|c| *c >= 10), "{policy}: {counts:?}");
        let engine_total: u64 = e.iter().map(|x| x.stats().requests).sum();
        assert_eq!(engine_total, 90);
    }
}

#[test]
fn least_request_avoids_a_busy_replica() {
    let e = engines(3, EngineBehavior::Instant);
    e[0].set_behavior(EngineBehavior::Hang);
    let gw = TestGateway::start(
        &config_yaml(&e, "least_request", "", "").replace("cores: 2", "cores: 1"),
    );
    // Occupy engine-0 (or whichever the first pick is) with hanging requests.
    let mut hung = Vec::new();
    for _ in 0..2 {
        let mut c = connect(gw.addr);
        c.send(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, false)),
        )
        .unwrap();
        hung.push(c);
    }
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .in_flight
        >= 1));
    let before = e[0].stats().requests;
    let counts = replica_counts(gw.addr, 30, &chat(MODEL, false));
    assert_eq!(
        e[0].stats().requests,
        before,
        "no new request went to the busy replica: {counts:?}"
    );
    assert!(
        counts.get("engine-1").copied().unwrap_or(0) >= 5,
        "{counts:?}"
    );
    assert!(
        counts.get("engine-2").copied().unwrap_or(0) >= 5,
        "{counts:?}"
    );
}

#[test]
fn policies_only_see_replicas_serving_the_model() {
    let start = |model: &str| {
        inferrail_sim::ScriptedEngine::start(inferrail_sim::EngineOptions::new(model)).unwrap()
    };
    let e = [start("a"), start("b"), start("b")];
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\nmodels:\n  - name: a\n    policy: random\n  - name: b\n    policy: round_robin\nreplicas:\n  - id: ra\n    url: {}\n    models: [a]\n  - id: rb1\n    url: {}\n    models: [b]\n  - id: rb2\n    url: {}\n    models: [b]\n",
        e[0].url(),
        e[1].url(),
        e[2].url()
    );
    let gw = TestGateway::start(&yaml);
    let a = replica_counts(gw.addr, 20, &chat("a", false));
    assert_eq!(a.keys().collect::<Vec<_>>(), vec!["ra"]);
    let b = replica_counts(gw.addr, 20, &chat("b", false));
    assert!(!b.contains_key("ra"), "{b:?}");
    assert_eq!(b.values().sum::<usize>(), 20);
}

#[test]
fn metrics_count_requests_decisions_and_in_flight() {
    let e = engines(2, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "p2c", "", ""));
    replica_counts(gw.addr, 10, &chat(MODEL, false));
    // A request is counted once its exchange finished, which can be just after the client read
    // the last byte: wait (bounded) until the tenth is in.
    let settled = |text: &str| {
        metric(
            text,
            "inferrail_request_duration_seconds_count{model=\"sim-llama\"}",
        ) == Some(10.0)
    };
    let mut text = gw.metrics();
    for _ in 0..100 {
        if settled(&text) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        text = gw.metrics();
    }
    let ok0 = metric(
        &text,
        "inferrail_requests_total{model=\"sim-llama\",replica=\"engine-0\",outcome=\"success\"}",
    )
    .unwrap_or(0.0);
    let ok1 = metric(
        &text,
        "inferrail_requests_total{model=\"sim-llama\",replica=\"engine-1\",outcome=\"success\"}",
    )
    .unwrap_or(0.0);
    assert_eq!(ok0 + ok1, 10.0, "{text}");
    assert_eq!(
        metric(
            &text,
            "inferrail_routing_decisions_total{model=\"sim-llama\",policy=\"p2c\"}"
        ),
        Some(10.0)
    );
    assert_eq!(
        metric(&text, "inferrail_ttft_seconds_count{model=\"sim-llama\"}"),
        Some(10.0)
    );
    assert_eq!(
        metric(
            &text,
            "inferrail_request_duration_seconds_count{model=\"sim-llama\"}"
        ),
        Some(10.0)
    );
    assert_eq!(
        metric(&text, "inferrail_in_flight{replica=\"engine-0\"}"),
        Some(0.0)
    );
    assert_eq!(
        metric(&text, "inferrail_retries_total{model=\"sim-llama\"}"),
        Some(0.0)
    );
}
