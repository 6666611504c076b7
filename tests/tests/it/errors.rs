//! Local answers and refusals in the OpenAI error shape vLLM uses.

use inferrail_tests::*;
use serde_json::Value;
use std::io::Write;
use std::time::{Duration, Instant};

fn error_json(r: &inferrail_tools::client::Response) -> Value {
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()));
    assert_eq!(v["error"]["code"], r.status, "{v}");
    assert!(
        r.header("x-request-id").is_some(),
        "every response carries x-request-id"
    );
    assert!(v["error"]["message"].is_string());
    assert!(v["error"]["type"].is_string());
    v
}

#[test]
fn unknown_route_and_wrong_method() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let r = c.call("GET", "/v1/nope", &[], None).unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(error_json(&r)["error"]["type"], "NotFoundError");
    let r = c.call("GET", "/v1/chat/completions", &[], None).unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    error_json(&r);
    let r = c.call("POST", "/health", &[], Some(b"{}")).unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    assert_eq!(e[0].stats().requests, 0);
}

#[test]
fn health_and_models_are_local() {
    let e = engines(1, EngineBehavior::Refuse);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let r = c.call("GET", "/health", &[], None).unwrap();
    assert_eq!(r.status, 200);
    let r = c.call("GET", "/v1/models", &[], None).unwrap();
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![MODEL, "llama"]);
    assert_eq!(v["data"][1]["root"], MODEL);
    let r = c.call("HEAD", "/v1/models", &[], None).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert!(
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 10
    );
}

#[test]
fn unknown_model_is_404_naming_the_valid_ones() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let r = post_chat(gw.addr, &chat("no-such-model", false));
    assert_eq!(r.status, 404);
    let v = error_json(&r);
    assert_eq!(v["error"]["param"], "model");
    assert_eq!(
        v["error"]["message"],
        "The model `no-such-model` does not exist. Valid aliases: sim-llama, llama."
    );
    let r = post_chat(gw.addr, b"{not json");
    assert_eq!(r.status, 400);
    error_json(&r);
    let r = post_chat(gw.addr, br#"{"model": 5}"#);
    assert_eq!(r.status, 400);
    assert_eq!(e[0].stats().requests, 0);
}

#[test]
fn oversized_body_is_refused_before_upload() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  max_body_bytes: 1000\n",
        "",
    ));
    // Expect: 100-continue with a body over the limit: 413 at once, no 100, nothing uploaded.
    let mut c = connect(gw.addr);
    c.stream()
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\nexpect: 100-continue\r\n\r\n")
        .unwrap();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 413);
    error_json(&r);
    // Chunked body that grows past the limit.
    let mut c = connect(gw.addr);
    let mut wire =
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..3 {
        wire.extend_from_slice(b"190\r\n");
        wire.extend_from_slice(&[b' '; 400]);
        wire.extend_from_slice(b"\r\n");
    }
    c.stream().write_all(&wire).unwrap();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 413);
    assert_eq!(e[0].stats().requests, 0);
}

#[test]
fn expect_continue_is_answered_then_the_body_flows() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    let body = chat(MODEL, false);
    c.stream()
        .write_all(format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n", body.len()).as_bytes())
        .unwrap();
    let mut interim = [0u8; 25];
    std::io::Read::read_exact(c.stream(), &mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.stream().write_all(&body).unwrap();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 200);
    let got = &e[0].received()[0];
    assert_eq!(got.body, body);
    assert_eq!(got.header("expect"), None);
}

#[test]
fn slow_body_gets_408_and_slow_head_is_closed() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  request_timeout: 300ms\n  header_read_timeout: 300ms\n",
        "",
    ));
    let mut c = connect(gw.addr);
    c.stream()
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"")
        .unwrap();
    let t = Instant::now();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 408);
    error_json(&r);
    assert!(t.elapsed() < Duration::from_secs(3));
    // A head that stops half way: 408 too.
    let mut c = connect(gw.addr);
    c.stream()
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost:")
        .unwrap();
    let r = c.read_response("POST").unwrap();
    assert_eq!(r.status, 408);
    // An idle keep-alive connection is closed silently after header_read_timeout.
    let mut c = connect(gw.addr);
    assert_eq!(c.call("GET", "/health", &[], None).unwrap().status, 200);
    let t = Instant::now();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(c.stream(), &mut buf).unwrap();
    assert_eq!(n, 0, "closed without a response");
    assert!(t.elapsed() >= Duration::from_millis(250));
    assert_eq!(e[0].stats().requests, 0);
}

#[test]
fn malformed_head_is_400() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    c.stream().write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let r = c.read_response("GET").unwrap();
    assert_eq!(r.status, 400);
    error_json(&r);
}

#[test]
fn a_local_answer_to_a_request_with_an_unread_body_closes_the_connection() {
    let e = engines(1, EngineBehavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    let mut c = connect(gw.addr);
    c.stream()
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
        .unwrap();
    let r = c.read_response("GET").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let mut rest = [0u8; 64];
    assert_eq!(
        std::io::Read::read(c.stream(), &mut rest).unwrap(),
        0,
        "closed, body not parsed as a request"
    );
}
