//! A client that goes away makes the gateway close the upstream request within 100 ms.

use inferrail_tests::*;
use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};

fn assert_engine_sees_close(engine: &inferrail_sim::ScriptedEngine, closed_at: Instant) {
    assert!(
        wait_until(Duration::from_secs(5), || engine.stats().client_disconnects
            >= 1),
        "the engine never saw the upstream request close"
    );
    let seen = engine.stats().last_disconnect.expect("disconnect time");
    let lag = seen.saturating_duration_since(closed_at);
    assert!(
        lag < Duration::from_millis(100),
        "upstream closed {lag:?} after the client left"
    );
}

#[test]
fn disconnect_while_waiting_for_the_head() {
    let e = engines(1, EngineBehavior::Hang);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    c.send(
        "POST",
        "/v1/chat/completions",
        &[],
        Some(&chat(MODEL, false)),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .in_flight
        == 1));
    c.stream().shutdown(Shutdown::Both).unwrap();
    let closed_at = Instant::now();
    drop(c);
    assert_engine_sees_close(&e[0], closed_at);
    assert!(wait_until(Duration::from_secs(2), || {
        metric(
            &gw.metrics(),
            "inferrail_errors_total{reason=\"client_disconnected\"}",
        ) == Some(1.0)
    }));
    // The slot was released: in flight goes back to zero.
    assert!(wait_until(Duration::from_secs(2), || {
        metric(&gw.metrics(), "inferrail_in_flight{replica=\"engine-0\"}") == Some(0.0)
    }));
}

#[test]
fn disconnect_while_streaming() {
    let e = engines(
        1,
        EngineBehavior::Stream {
            chunks: 200,
            interval: Duration::from_millis(50),
        },
    );
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    c.send(
        "POST",
        "/v1/chat/completions",
        &[],
        Some(&chat(MODEL, true)),
    )
    .unwrap();
    // Read a little of the stream, then leave.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(5).any(|w| w == b"data:") {
        let n = std::io::Read::read(c.stream(), &mut buf).unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&buf[..n]);
    }
    c.stream().shutdown(Shutdown::Both).unwrap();
    let closed_at = Instant::now();
    drop(c);
    assert_engine_sees_close(&e[0], closed_at);
}

#[test]
fn disconnect_mid_body_never_reaches_the_engine() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    c.stream()
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n{\"model\":")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drop(c);
    assert!(wait_until(Duration::from_secs(2), || {
        metric(&gw.metrics(), "inferrail_requests_total{model=\"(none)\",replica=\"(none)\",outcome=\"client_closed\"}") == Some(1.0)
    }));
    assert_eq!(e[0].stats().requests, 0);
}

#[test]
fn a_client_that_stops_reading_releases_the_engine() {
    let e = engines(1, EngineBehavior::Instant);
    let body = vec![b'x'; 32 * 1024 * 1024];
    let mut response =
        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    response.extend_from_slice(&body);
    e[0].set_behavior(EngineBehavior::Raw {
        parts: vec![response],
        gap: Duration::ZERO,
    });
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  stream_idle_timeout: 300ms\n",
        "",
    ));
    let mut c = connect(gw.addr);
    c.send(
        "POST",
        "/v1/chat/completions",
        &[],
        Some(&chat(MODEL, false)),
    )
    .unwrap();
    // Never read: the gateway's writes stall, and after the idle limit it gives up.
    assert!(
        wait_until(Duration::from_secs(5), || {
            let m = gw.metrics();
            metric(&m, "inferrail_errors_total{reason=\"client_disconnected\"}") == Some(1.0)
                && metric(&m, "inferrail_in_flight{replica=\"engine-0\"}") == Some(0.0)
        }),
        "{}",
        gw.metrics()
    );
    drop(c);
}
