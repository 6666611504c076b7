//! Retries happen only before the first response byte, on the failures that allow them, on
//! untried replicas first, within `retry.max_attempts` and the request deadline.

use inferrail_tests::*;
use std::time::{Duration, Instant};

const RETRY: &str = "retry:\n  max_attempts: 3\n  backoff: 5ms\n";

#[test]
fn connect_failure_moves_to_another_replica() {
    let e = engines(2, EngineBehavior::Instant);
    e[0].set_behavior(EngineBehavior::Refuse);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", RETRY));
    for _ in 0..6 {
        let r = post_chat(gw.addr, &chat(MODEL, false));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-inferrail-replica"), Some("engine-1"));
    }
    let text = gw.metrics();
    assert!(metric(&text, "inferrail_errors_total{reason=\"connect_failed\"}").unwrap() >= 1.0);
    assert!(metric(&text, "inferrail_retries_total{model=\"sim-llama\"}").unwrap() >= 1.0);
}

#[test]
fn engine_closing_or_503_is_retried_elsewhere() {
    for bad in [
        EngineBehavior::CloseBeforeResponse,
        EngineBehavior::Status { code: 503 },
        EngineBehavior::Status { code: 502 },
    ] {
        let e = engines(2, EngineBehavior::Instant);
        e[0].set_behavior(bad.clone());
        let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", RETRY));
        for _ in 0..4 {
            let r = post_chat(gw.addr, &chat(MODEL, false));
            assert_eq!(r.status, 200, "{bad:?}: {}", r.text());
            assert_eq!(r.header("x-inferrail-replica"), Some("engine-1"));
        }
        assert!(
            e[0].stats().requests >= 1,
            "{bad:?}: the bad replica was tried"
        );
    }
}

#[test]
fn client_errors_and_500_are_not_retried() {
    for code in [400u16, 500, 429] {
        let e = engines(2, EngineBehavior::Status { code });
        let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", RETRY));
        let r = post_chat(gw.addr, &chat(MODEL, false));
        assert_eq!(r.status, code);
        let total: u64 = e.iter().map(|x| x.stats().requests).sum();
        assert_eq!(total, 1, "status {code} was not retried");
    }
}

#[test]
fn attempts_are_bounded_and_the_last_answer_is_passed_through() {
    let e = engines(3, EngineBehavior::Status { code: 503 });
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "",
        "retry:\n  max_attempts: 2\n  backoff: 1ms\n",
    ));
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 503, "the engine's own 503 on the last attempt");
    assert!(r.header("retry-after").is_some());
    let total: u64 = e.iter().map(|x| x.stats().requests).sum();
    assert_eq!(total, 2, "max_attempts = 2");
    let tried: Vec<u64> = e.iter().map(|x| x.stats().requests).collect();
    assert!(
        tried.iter().all(|t| *t <= 1),
        "untried replicas first: {tried:?}"
    );
}

#[test]
fn every_replica_down_gives_502_after_max_attempts() {
    let e = engines(2, EngineBehavior::Refuse);
    let gw = TestGateway::start(&config_yaml(&e, "random", "", RETRY));
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 502);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["code"], 502);
    assert!(r.header("x-request-id").is_some());
    let text = gw.metrics();
    assert_eq!(
        metric(&text, "inferrail_retries_total{model=\"sim-llama\"}"),
        Some(2.0)
    );
}

#[test]
fn backoff_stays_inside_the_request_deadline() {
    let e = engines(2, EngineBehavior::Refuse);
    let gw = TestGateway::start(&config_yaml(
        &e,
        "random",
        "  request_timeout: 300ms\n",
        "retry:\n  max_attempts: 10\n  backoff: 100ms\n  max_backoff: 10s\n",
    ));
    let t = Instant::now();
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 502);
    // 100 + 200 ms of backoff would cross the 300 ms deadline: the gateway gives up before.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let retries = metric(
        &gw.metrics(),
        "inferrail_retries_total{model=\"sim-llama\"}",
    )
    .unwrap();
    assert!(retries < 9.0, "{retries}");
}

#[test]
fn a_started_stream_is_never_replayed() {
    let e = engines(2, EngineBehavior::Instant);
    // A response head and part of a chunked body, then the engine closes.
    let cut = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n7\r\ndata: 1\r\n".to_vec();
    for x in &e {
        x.set_behavior(EngineBehavior::Raw {
            parts: vec![cut.clone()],
            gap: Duration::ZERO,
        });
    }
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", RETRY));
    let mut c = connect(gw.addr);
    c.send(
        "POST",
        "/v1/chat/completions",
        &[],
        Some(&chat(MODEL, true)),
    )
    .unwrap();
    let r = c.read_response("POST");
    assert!(r.is_err(), "the client sees a cut response, not a replay");
    let total: u64 = e.iter().map(|x| x.stats().requests).sum();
    assert_eq!(total, 1);
}

#[test]
fn upstream_connections_are_reused() {
    let e = engines(1, EngineBehavior::Instant);
    let gw =
        TestGateway::start(&config_yaml(&e, "round_robin", "", "").replace("cores: 2", "cores: 1"));
    for _ in 0..5 {
        assert_eq!(post_chat(gw.addr, &chat(MODEL, false)).status, 200);
    }
    assert_eq!(
        e[0].stats().completion_connections,
        1,
        "one pooled keep-alive connection"
    );
}

#[test]
fn stale_pooled_connection_is_retried_on_a_fresh_one() {
    let mut first = engines(1, EngineBehavior::Instant);
    let port = first[0].addr().port();
    let gw = TestGateway::start(
        &config_yaml(&first, "round_robin", "", "retry:\n  max_attempts: 1\n")
            .replace("cores: 2", "cores: 1"),
    );
    assert_eq!(post_chat(gw.addr, &chat(MODEL, false)).status, 200);
    // The engine restarts on the same port: the pooled connection is now closed.
    first[0].stop();
    let second = inferrail_sim::ScriptedEngine::start(inferrail_sim::EngineOptions {
        port,
        ..inferrail_sim::EngineOptions::new(MODEL)
    })
    .expect("restart on the same port");
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 200, "even with max_attempts 1: {}", r.text());
    assert_eq!(second.stats().requests, 1);
}

#[test]
fn an_engine_speaking_garbage_gets_502_without_retry() {
    let e = engines(2, EngineBehavior::Instant);
    for x in &e {
        x.set_behavior(EngineBehavior::Raw {
            parts: vec![b"SSH-2.0-OpenSSH\r\n\r\n".to_vec()],
            gap: Duration::ZERO,
        });
    }
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", RETRY));
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 502, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["type"], "BadGatewayError");
    let total: u64 = e.iter().map(|x| x.stats().requests).sum();
    assert_eq!(total, 1, "a protocol error is not retried");
    assert_eq!(
        metric(
            &gw.metrics(),
            "inferrail_errors_total{reason=\"upstream_protocol\"}"
        ),
        Some(1.0)
    );
}
