//! The exchange's time limits and its poison rule, end to end: `server.request_timeout` bounds the
//! whole request, streaming included; `server.stream_idle_timeout` cuts a response that went
//! silent; a request that engines close on after reading it reaches at most two of them.

use inferrail_tests::*;
use std::time::{Duration, Instant};

/// Sends a streaming chat request and reads until the gateway ends the response; returns the
/// time it took, whether the response completed, and how many `data:` pieces arrived.
fn stream_until_cut(gw: &TestGateway) -> (Duration, bool, usize) {
    let mut c = connect(gw.addr);
    c.send(
        "POST",
        "/v1/chat/completions",
        &[],
        Some(&chat(MODEL, true)),
    )
    .unwrap();
    let start = Instant::now();
    let mut pieces = 0;
    let r = c.read_response_with("POST", |piece| {
        pieces += piece.windows(5).filter(|w| w == b"data:").count();
    });
    let complete = r.is_ok_and(|r| r.text().contains("data: [DONE]"));
    (start.elapsed(), complete, pieces)
}

fn upstream_timeouts(gw: &TestGateway) -> Option<f64> {
    metric(
        &gw.metrics(),
        "inferrail_errors_total{reason=\"upstream_timeout\"}",
    )
}

#[test]
fn a_stream_that_keeps_moving_is_cut_at_the_request_timeout() {
    // One event a second for 20 s, under a 3 s whole-request limit; each gap is well under the
    // stall limit, so only the whole-request deadline can end it.
    let e = engines(
        1,
        EngineBehavior::Stream {
            chunks: 20,
            interval: Duration::from_secs(1),
        },
    );
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  request_timeout: 3s\n  stream_idle_timeout: 2s\n",
        "",
    ));
    let (took, complete, pieces) = stream_until_cut(&gw);
    assert!(!complete, "the stream was cut");
    assert!(pieces >= 2, "the stream ran until the cut: {pieces} pieces");
    assert!(took >= Duration::from_millis(2500), "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .client_disconnects
        >= 1));
    assert_eq!(upstream_timeouts(&gw), Some(1.0));
}

#[test]
fn an_engine_that_hangs_after_the_head_is_cut_at_the_stall_timeout() {
    // The head and the role chunk at once, then 30 s of silence.
    let e = engines(
        1,
        EngineBehavior::Stream {
            chunks: 2,
            interval: Duration::from_secs(30),
        },
    );
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  stream_idle_timeout: 500ms\n",
        "",
    ));
    let (took, complete, _) = stream_until_cut(&gw);
    assert!(!complete);
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(
        took < Duration::from_secs(5),
        "cut long before 30 s: {took:?}"
    );
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .client_disconnects
        >= 1));
    assert_eq!(upstream_timeouts(&gw), Some(1.0));
    assert_eq!(
        e[0].stats().requests,
        1,
        "a started response is never retried"
    );
}

fn assert_poison(r: &inferrail_tools::client::Response, gw: &TestGateway) {
    assert_eq!(r.status, 502, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("two engines closed the connection after reading this request"),
        "{msg}"
    );
    assert_eq!(
        metric(
            &gw.metrics(),
            "inferrail_errors_total{reason=\"poison_request\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn a_request_that_kills_engines_reaches_two_and_is_refused_as_poison() {
    let e = engines(3, EngineBehavior::CloseBeforeResponse);
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "",
        "retry:\n  max_attempts: 5\n  backoff: 1ms\n",
    ));
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_poison(&r, &gw);
    let seen: Vec<u64> = e.iter().map(|x| x.stats().requests).collect();
    assert_eq!(seen.iter().filter(|&&n| n == 1).count(), 2, "{seen:?}");
    assert_eq!(seen.iter().filter(|&&n| n == 0).count(), 1, "{seen:?}");
}

#[test]
fn pooled_connections_do_not_hide_a_poison_request() {
    // Every engine holds a pooled connection when the request arrives: each close looks like a
    // stale connection first, and the fresh retry on the same engine is what counts.
    let e = engines(3, EngineBehavior::Instant);
    let gw = TestGateway::start(
        &config_yaml(
            &e,
            "round_robin",
            "",
            "retry:\n  max_attempts: 5\n  backoff: 1ms\n",
        )
        .replace("cores: 2", "cores: 1"),
    );
    let mut c = connect(gw.addr);
    for _ in 0..3 {
        let r = c
            .call(
                "POST",
                "/v1/chat/completions",
                &[],
                Some(&chat(MODEL, false)),
            )
            .unwrap();
        assert_eq!(r.status, 200);
    }
    let before: Vec<u64> = e.iter().map(|x| x.stats().requests).collect();
    assert_eq!(before, [1, 1, 1], "one pooled connection each");
    for x in &e {
        x.set_behavior(EngineBehavior::CloseBeforeResponse);
    }
    let r = c
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, false)),
        )
        .unwrap();
    assert_poison(&r, &gw);
    let seen: Vec<u64> = e
        .iter()
        .zip(&before)
        .map(|(x, b)| x.stats().requests - b)
        .collect();
    assert_eq!(
        seen.iter().filter(|&&n| n == 0).count(),
        1,
        "the third engine never sees it: {seen:?}"
    );
}

#[test]
fn a_fleet_out_of_rotation_is_refused_as_such_not_as_full() {
    let e = engines(2, EngineBehavior::Refuse);
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "",
        "health:\n  interval: 50ms\n  timeout: 40ms\n  unhealthy_threshold: 1\nretry:\n  max_attempts: 2\n  backoff: 1ms\n",
    ));
    // Until the health checks take both out, requests fail on connect (502); one in flight
    // when its engine is ejected is answered "left rotation while the request waited" (503).
    let mut refusal = None;
    assert!(wait_until(Duration::from_secs(5), || {
        let r = post_chat(gw.addr, &chat(MODEL, false));
        let out = r.status == 503 && !String::from_utf8_lossy(&r.body).contains("left rotation");
        refusal = out.then_some(r);
        out
    }));
    let r = refusal.unwrap();
    assert_eq!(r.header("retry-after"), Some("1"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("out of rotation"), "{msg}");
    assert!(!msg.contains("concurrency limit"), "{msg}");
    let text = gw.metrics();
    assert!(
        metric(
            &text,
            "inferrail_errors_total{reason=\"no_replica_in_rotation\"}"
        )
        .unwrap()
            >= 1.0
    );
    assert_eq!(
        metric(&text, "inferrail_errors_total{reason=\"fleet_full\"}"),
        Some(0.0)
    );
}
