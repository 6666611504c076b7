//! Responses are relayed frame by frame and byte for byte, whatever the engine's write pattern.

use inferrail_tests::*;
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| bytes[w[0]..w[1]].to_vec())
        .collect()
}

fn body_after_head(raw: &[u8]) -> &[u8] {
    let i = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end");
    &raw[i + 4..]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn any_chunking_is_relayed_byte_for_byte(
        events in proptest::collection::vec("[ -~]{0,40}", 1..8),
        chunk_sizes in proptest::collection::vec(1usize..30, 1..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        chunked in any::<bool>(),
    ) {
        // One gateway for the whole property (started on first use).
        thread_local! {
            static FLEET: &'static (Vec<inferrail_sim::ScriptedEngine>, TestGateway) = shared_fleet();
        }
        let mut payload = Vec::new();
        for ev in &events {
            payload.extend_from_slice(format!("data: {ev}\n\n").as_bytes());
        }
        payload.extend_from_slice(b"data: [DONE]\n\n");
        let mut body = Vec::new();
        let mut head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nx-engine: kept\r\n".to_vec();
        if chunked {
            head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            let mut rest = &payload[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = chunk_sizes[i % chunk_sizes.len()].min(rest.len());
                body.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                body.extend_from_slice(&rest[..n]);
                body.extend_from_slice(b"\r\n");
                rest = &rest[n..];
                i += 1;
            }
            body.extend_from_slice(b"0\r\n\r\n");
        } else {
            head.extend_from_slice(format!("content-length: {}\r\n\r\n", payload.len()).as_bytes());
            body.extend_from_slice(&payload);
        }
        let mut response = head.clone();
        response.extend_from_slice(&body);
        let parts = split(&response, &cuts);
        FLEET.with(|(e, gw)| {
            e[0].set_behavior(EngineBehavior::Raw { parts, gap: Duration::from_millis(1) });
            let r = post_chat(gw.addr, &chat(MODEL, true));
            prop_assert_eq!(r.status, 200);
            prop_assert_eq!(body_after_head(&r.raw), &body[..], "framing bytes passed through");
            prop_assert_eq!(&r.body, &payload);
            prop_assert_eq!(r.header("x-engine"), Some("kept"));
            prop_assert!(r.header("x-inferrail-replica").is_some());
            Ok(())
        })?;
    }
}

#[test]
fn chunks_arrive_as_the_engine_sends_them() {
    let e = engines(
        1,
        EngineBehavior::Stream {
            chunks: 5,
            interval: Duration::from_millis(150),
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
    let start = Instant::now();
    let mut arrivals = Vec::new();
    let r = c
        .read_response_with("POST", |piece| {
            if piece.windows(5).any(|w| w == b"data:") {
                arrivals.push(start.elapsed());
            }
        })
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{}", r.text());
    assert!(
        arrivals.len() >= 4,
        "pieces arrived separately: {arrivals:?}"
    );
    let spread = *arrivals.last().unwrap() - arrivals[0];
    // Five chunks 150 ms apart: the first must not wait for the last (no buffering).
    assert!(spread >= Duration::from_millis(400), "{arrivals:?}");
}

#[test]
fn hop_by_hop_headers_are_removed() {
    let e = engines(1, EngineBehavior::Instant);
    let response = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: secret\r\nX-Request-Id: engine-chose-this\r\nContent-Length: 2\r\n\r\n{}".to_vec();
    e[0].set_behavior(EngineBehavior::Raw {
        parts: vec![response],
        gap: Duration::ZERO,
    });
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let r = c
        .call(
            "POST",
            "/v1/chat/completions",
            &[
                ("x-request-id", "client-id-1"),
                ("connection", "keep-alive, x-client-hop"),
                ("x-client-hop", "1"),
                ("te", "trailers"),
            ],
            Some(&chat(MODEL, false)),
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-hop"), None);
    assert_eq!(r.header("keep-alive"), None);
    assert_eq!(r.header("x-request-id"), Some("client-id-1"));
    assert_eq!(
        r.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("x-request-id"))
            .count(),
        1
    );
    assert_eq!(r.header("x-inferrail-replica"), Some("engine-0"));
    let got = &e[0].received()[0];
    assert_eq!(got.header("x-request-id"), Some("client-id-1"));
    assert_eq!(got.header("x-client-hop"), None);
    assert_eq!(got.header("te"), None);
    // The connection still works after the hop-by-hop dance.
    e[0].set_behavior(EngineBehavior::Instant);
    assert_eq!(
        c.call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, false))
        )
        .unwrap()
        .status,
        200
    );
}

#[test]
fn request_ids_are_generated_when_missing_or_malformed() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let r1 = c
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, false)),
        )
        .unwrap();
    let r2 = c
        .call(
            "POST",
            "/v1/chat/completions",
            &[("x-request-id", "bad id with spaces")],
            Some(&chat(MODEL, false)),
        )
        .unwrap();
    let id1 = r1.header("x-request-id").unwrap().to_string();
    let id2 = r2.header("x-request-id").unwrap().to_string();
    assert_eq!(id1.len(), 32);
    assert!(id1.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(id1, id2);
    assert_ne!(id2, "bad id with spaces");
    let got = e[0].received();
    assert_eq!(
        got[0].header("x-request-id"),
        Some(id1.as_str()),
        "the same id went upstream"
    );
    assert_eq!(got[1].header("x-request-id"), Some(id2.as_str()));
    let health = c
        .call("GET", "/health", &[("x-request-id", "h-1")], None)
        .unwrap();
    assert_eq!(health.header("x-request-id"), Some("h-1"));
}

#[test]
fn http10_clients_get_a_close_delimited_body() {
    let e = engines(
        1,
        EngineBehavior::Stream {
            chunks: 3,
            interval: std::time::Duration::from_millis(10),
        },
    );
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let body = chat(MODEL, true);
    let mut wire = format!(
        "POST /v1/chat/completions HTTP/1.0\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    wire.extend_from_slice(&body);
    std::io::Write::write_all(c.stream(), &wire).unwrap();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.raw.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&r.raw)
    );
    assert_eq!(
        r.header("transfer-encoding"),
        None,
        "no chunked framing for HTTP/1.0"
    );
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{}", r.text());
}

#[test]
fn a_close_delimited_engine_body_is_rechunked() {
    let e = engines(1, EngineBehavior::Instant);
    let payload = b"data: one\n\ndata: [DONE]\n\n";
    let mut response =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_vec();
    response.extend_from_slice(payload);
    e[0].set_behavior(EngineBehavior::Raw {
        parts: vec![response],
        gap: Duration::ZERO,
    });
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let r = c
        .call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, true)),
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body, payload);
    // The client connection stays usable.
    e[0].set_behavior(EngineBehavior::Instant);
    assert_eq!(
        c.call(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, false))
        )
        .unwrap()
        .status,
        200
    );
}
