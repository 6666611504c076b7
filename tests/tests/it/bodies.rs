//! Request bodies reach the engine byte for byte; only an alias or a missing model is spliced.

use inferrail_tests::*;
use proptest::prelude::*;
use std::io::Write;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn bodies_arrive_byte_for_byte(
        content in "\\PC{0,300}",
        spaces in "[ \n\t]{0,3}",
        extra_len in 0usize..100_000,
    ) {
        thread_local! {
            static FLEET: &'static (Vec<inferrail_sim::ScriptedEngine>, TestGateway) = shared_fleet();
        }
        let content_json = serde_json::to_string(&content).unwrap();
        let padding = "x".repeat(extra_len);
        let body = format!(
            "{{{spaces}\"messages\":[{{\"role\":\"user\",\"content\":{content_json}}}],{spaces}\"model\"{spaces}:{spaces}\"{MODEL}\",\"pad\":\"{padding}\"}}"
        );
        FLEET.with(|(e, gw)| {
            let before = e[0].received().len();
            let r = post_chat(gw.addr, body.as_bytes());
            prop_assert_eq!(r.status, 200);
            let got = e[0].received();
            prop_assert_eq!(got.len(), before + 1);
            prop_assert_eq!(&got[before].body, &body.as_bytes().to_vec());
            Ok(())
        })?;
    }
}

#[test]
fn alias_is_spliced_and_nothing_else_changes() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let body = br#"{ "messages": [{"role":"user","content":"model \"llama\""}], "model" : "llama", "max_tokens": 3 }"#;
    let r = post_chat(gw.addr, body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got = String::from_utf8(e[0].received()[0].body.clone()).unwrap();
    assert_eq!(
        got,
        r#"{ "messages": [{"role":"user","content":"model \"llama\""}], "model" : "sim-llama", "max_tokens": 3 }"#
    );
}

#[test]
fn missing_model_is_inserted_when_one_model_is_served() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let r = post_chat(gw.addr, br#"{"prompt":"hi","max_tokens":2}"#);
    assert_eq!(r.status, 200);
    let got = String::from_utf8(e[0].received()[0].body.clone()).unwrap();
    assert_eq!(got, r#"{"model":"sim-llama","prompt":"hi","max_tokens":2}"#);
}

#[test]
fn chunked_request_body_is_forwarded_with_its_bytes() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let body = chat(MODEL, false);
    let (a, b) = body.split_at(10);
    let mut wire =
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    wire.extend_from_slice(format!("{:x}\r\n", a.len()).as_bytes());
    wire.extend_from_slice(a);
    wire.extend_from_slice(format!("\r\n{:x}\r\n", b.len()).as_bytes());
    wire.extend_from_slice(b);
    wire.extend_from_slice(b"\r\n0\r\n\r\n");
    c.stream().write_all(&wire).unwrap();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 200);
    let got = &e[0].received()[0];
    assert_eq!(got.body, body);
    assert_eq!(got.path, "/v1/completions");
    assert_eq!(
        got.header("content-length"),
        Some(body.len().to_string().as_str())
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let mut wire = Vec::new();
    for i in 0..3 {
        let body = chat(MODEL, false);
        wire.extend_from_slice(
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: pipe-{i}\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes(),
        );
        wire.extend_from_slice(&body);
    }
    c.stream().write_all(&wire).unwrap();
    for i in 0..3 {
        let r = c.read_response("POST").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-request-id"), Some(format!("pipe-{i}").as_str()));
    }
}

#[test]
fn one_connection_reuses_its_buffers_without_mixing_requests() {
    // A connection keeps its body and write buffers between requests: bodies of every size
    // (one larger than what a connection keeps, one chunked) still arrive each exactly, and each
    // answer carries its own request id.
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let sizes = [90_000usize, 10, 4_000, 0, 70_000, 300];
    let mut sent = Vec::new();
    for (i, pad) in sizes.iter().enumerate() {
        let body = format!(
            "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"{i}\"}}],\"pad\":\"{}\"}}",
            "y".repeat(*pad)
        )
        .into_bytes();
        let mut wire = Vec::new();
        if i == 2 {
            wire.extend_from_slice(
                format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: reuse-{i}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n", body.len()).as_bytes(),
            );
            wire.extend_from_slice(&body);
            wire.extend_from_slice(b"\r\n0\r\n\r\n");
        } else {
            wire.extend_from_slice(
                format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: reuse-{i}\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes(),
            );
            wire.extend_from_slice(&body);
        }
        c.stream().write_all(&wire).unwrap();
        let r = c.read_response("POST").unwrap();
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(
            r.header("x-request-id"),
            Some(format!("reuse-{i}").as_str())
        );
        sent.push(body);
    }
    let got = e[0].received();
    assert_eq!(got.len(), sizes.len());
    for (i, body) in sent.iter().enumerate() {
        assert_eq!(&got[i].body, body, "request {i}'s body");
        assert_eq!(
            got[i].header("x-request-id"),
            Some(format!("reuse-{i}").as_str())
        );
    }
}
