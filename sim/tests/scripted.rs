//! Behavior tests for the scripted engine, driven by blocking std clients on 127.0.0.1.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};

fn engine() -> ScriptedEngine {
    ScriptedEngine::start(EngineOptions::new("tiny")).expect("engine starts")
}

fn engine_with(behavior: Behavior) -> ScriptedEngine {
    let mut opts = EngineOptions::new("tiny");
    opts.behavior = behavior;
    ScriptedEngine::start(opts).expect("engine starts")
}

#[test]
fn instant_chat_answers_json() {
    let e = engine();
    assert!(e.url().starts_with("http://127.0.0.1:"));
    let r = exchange(e.addr(), &chat());
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(r.header("server").as_deref(), Some("uvicorn"));
    assert_eq!(r.header("date").map(|d| d.len()), Some(29));
    let rid = r.header("x-request-id").expect("x-request-id");
    assert_eq!(rid.len(), 32);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "tiny");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 1);
    // The engine updates its counters right after the write: wait for that, bounded.
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 0));
    let s = e.stats();
    assert_eq!(
        (
            s.requests,
            s.in_flight,
            s.max_in_flight,
            s.connections_accepted
        ),
        (1, 0, 1, 1)
    );
}

#[test]
fn instant_stream_is_sse_ending_in_done() {
    let e = engine();
    let r = exchange(e.addr(), &post("/v1/chat/completions", CHAT_STREAM, ""));
    assert_eq!(r.status(), 200);
    assert_eq!(r.header("transfer-encoding").as_deref(), Some("chunked"));
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/event-stream; charset=utf-8")
    );
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let json: Vec<serde_json::Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(json[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(json[0]["object"], "chat.completion.chunk");
    let usage = json.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 1);
    let ids: Vec<&str> = json.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert!(ids
        .iter()
        .all(|id| *id == ids[0] && id.starts_with("chatcmpl-")));
}

#[test]
fn text_completions_stream_and_not() {
    let e = engine();
    let r = exchange(
        e.addr(),
        &post(
            "/v1/completions",
            r#"{"model":"tiny","prompt":"Hello","max_tokens":5}"#,
            "",
        ),
    );
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert!(v["choices"][0]["text"].is_string());

    let r = exchange(
        e.addr(),
        &post(
            "/v1/completions",
            r#"{"model":"tiny","prompt":"Hello","stream":true}"#,
            "",
        ),
    );
    let events = r.events();
    assert_eq!(
        events.len(),
        2,
        "one token, no usage, then [DONE]: {events:?}"
    );
    let v: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(v["system_fingerprint"].is_string());
    assert_eq!(events[1], "[DONE]");
}

#[test]
fn x_request_id_is_echoed_like_vllm() {
    let e = engine();
    let r = exchange(
        e.addr(),
        &post(
            "/v1/chat/completions",
            CHAT,
            "X-Request-Id: ref-req-0002\r\n",
        ),
    );
    assert_eq!(r.header("x-request-id").as_deref(), Some("ref-req-0002"));
    assert_eq!(r.json()["id"], "chatcmpl-ref-req-0002");

    let r = exchange(
        e.addr(),
        &post(
            "/v1/chat/completions",
            CHAT_STREAM,
            "X-Request-Id: ref-req-0003\r\n",
        ),
    );
    let first: serde_json::Value = serde_json::from_str(&r.events()[0]).unwrap();
    assert_eq!(first["id"], "chatcmpl-ref-req-0003");
    // The header comes before transfer-encoding, as in http-extra/29.
    let head = String::from_utf8_lossy(&r.head.bytes).into_owned();
    assert!(head.find("x-request-id").unwrap() < head.find("transfer-encoding").unwrap());
}

#[test]
fn side_routes_and_errors() {
    let e = engine();
    let r = exchange(e.addr(), &get("/health"));
    assert_eq!((r.status(), r.body.len()), (200, 0));
    assert_eq!(r.header("content-length").as_deref(), Some("0"));

    let r = exchange(e.addr(), &get("/v1/models"));
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "tiny");
    assert_eq!(v["data"][0]["object"], "model");

    let r = exchange(
        e.addr(),
        &post(
            "/v1/chat/completions",
            r#"{"model":"no-such-model","messages":[]}"#,
            "",
        ),
    );
    assert_eq!(r.status(), 404);
    assert_eq!(
        String::from_utf8(r.body.clone()).unwrap(),
        r#"{"error":{"message":"The model `no-such-model` does not exist. Valid aliases: tiny.","type":"NotFoundError","param":"model","code":404}}"#
    );

    let r = exchange(
        e.addr(),
        &post(
            "/v1/chat/completions",
            "{\"model\": \"tiny\", \"messages\": [",
            "",
        ),
    );
    assert_eq!(r.status(), 400);
    assert_eq!(r.json()["error"]["code"], 400);

    let r = exchange(e.addr(), &get("/v1/nope"));
    assert_eq!(r.status(), 404);
    assert_eq!(r.json()["detail"], "Not Found");

    let r = exchange(e.addr(), &get("/v1/chat/completions"));
    assert_eq!(r.status(), 405);
    assert_eq!(r.header("allow").as_deref(), Some("POST"));

    // Only the two POSTs to a completion route count (a GET there is a 405, not a request).
    assert_eq!(e.stats().requests, 2);
    assert_eq!(e.received().len(), 2);
}

#[test]
fn status_503_sends_retry_after() {
    let e = engine_with(Behavior::Status { code: 503 });
    let mut c = Client::new(e.addr());
    c.send(&chat());
    let r = c.response();
    assert_eq!(r.status(), 503);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    let v = r.json();
    assert_eq!(v["error"]["code"], 503);
    assert_eq!(v["error"]["type"], "ServiceUnavailableError");
    // The connection stays usable, and health is not affected.
    c.send(&get("/health"));
    assert_eq!(c.response().status(), 200);

    e.set_behavior(Behavior::Status { code: 500 });
    c.send(&chat());
    let r = c.response();
    assert_eq!(r.status(), 500);
    assert_eq!(r.header("retry-after"), None);
    // The engine finishes its bookkeeping right after the write: wait for it, bounded.
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 0));
}

#[test]
fn close_before_response_sends_nothing() {
    let e = engine_with(Behavior::CloseBeforeResponse);
    let mut c = Client::new(e.addr());
    c.send(&chat());
    assert_eq!(c.read_to_eof(), b"");
    assert_eq!(e.received().len(), 1, "the request was read first");
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 0));
    assert_eq!(e.stats().client_disconnects, 0);
}

#[test]
fn hang_notices_the_client_closing() {
    let e = engine_with(Behavior::Hang);
    let mut c = Client::new(e.addr());
    c.send(&chat());
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 1));
    // Nothing comes back.
    c.stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut byte = [0u8; 1];
    let err = c.stream.read(&mut byte).unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut
    ));

    let closed_at = Instant::now();
    drop(c);
    assert!(eventually(Duration::from_secs(2), || e
        .stats()
        .client_disconnects
        == 1));
    let s = e.stats();
    assert_eq!(s.in_flight, 0);
    let noticed = s.last_disconnect.expect("last_disconnect");
    let lag = noticed.saturating_duration_since(closed_at);
    assert!(
        lag < Duration::from_millis(500),
        "noticed the close after {lag:?}"
    );
}

#[test]
fn stream_spaces_chunks_and_notices_a_close_mid_stream() {
    let e = engine_with(Behavior::Stream {
        chunks: 4,
        interval: Duration::from_millis(40),
    });
    let mut c = Client::new(e.addr());
    c.send(&post("/v1/chat/completions", CHAT_STREAM, ""));
    let r = c.response();
    let spread = r.last_byte - r.first_byte;
    assert!(
        spread >= Duration::from_millis(100),
        "4 chunks 40 ms apart took {spread:?}"
    );
    let events = r.events();
    // role, 4 content chunks, usage, [DONE]
    assert_eq!(events.len(), 7, "{events:?}");
    let usage: serde_json::Value = serde_json::from_str(&events[5]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 4);

    // Non-streaming requests wait chunks * interval.
    let started = Instant::now();
    c.send(&chat());
    let r = c.response();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(r.json()["usage"]["completion_tokens"], 4);

    // A client leaving mid-stream is counted.
    e.set_behavior(Behavior::Stream {
        chunks: 100,
        interval: Duration::from_millis(50),
    });
    let mut c = Client::new(e.addr());
    c.send(&post("/v1/chat/completions", CHAT_STREAM, ""));
    let mut first = [0u8; 64];
    assert!(c.stream.read(&mut first).unwrap() > 0);
    drop(c);
    assert!(eventually(Duration::from_secs(2), || e
        .stats()
        .client_disconnects
        == 1));
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 0));
}

#[test]
fn slow_waits_before_the_head() {
    let e = engine_with(Behavior::Slow {
        delay: Duration::from_millis(200),
    });
    let started = Instant::now();
    let r = exchange(e.addr(), &chat());
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert_eq!(r.status(), 200);
    r.json();
}

#[test]
fn refuse_closes_the_port_and_resumes_on_the_same_one() {
    let e = engine();
    let addr = e.addr();
    let mut open = Client::new(addr);
    open.send(&get("/health"));
    assert_eq!(open.response().status(), 200);

    e.set_behavior(Behavior::Refuse);
    let err = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(open.read_to_eof(), b"", "open connections are closed too");

    e.set_behavior(Behavior::Instant);
    assert_eq!(e.addr(), addr);
    let r = exchange(addr, &chat());
    assert_eq!(r.status(), 200);
    assert_eq!(e.stats().connections_accepted, 2);
}

#[test]
fn starting_in_refuse_reserves_a_port() {
    let e = engine_with(Behavior::Refuse);
    assert!(TcpStream::connect_timeout(&e.addr(), IO_TIMEOUT).is_err());
    e.set_behavior(Behavior::Instant);
    assert_eq!(exchange(e.addr(), &get("/health")).status(), 200);
}

#[test]
fn raw_writes_exact_bytes() {
    let framed = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-raw: 1\r\n\r\nhello".to_vec();
    let e = engine_with(Behavior::Raw {
        parts: vec![framed[..20].to_vec(), framed[20..].to_vec()],
        gap: Duration::from_millis(30),
    });
    let mut c = Client::new(e.addr());
    c.send(&chat());
    let r = c.response();
    assert_eq!(r.raw, framed);
    // Well framed: the connection is kept.
    c.send(&chat());
    assert_eq!(c.response().raw, framed);

    // Not framed (no length): the bytes, then a close.
    let unframed = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npartial".to_vec();
    e.set_behavior(Behavior::Raw {
        parts: vec![unframed.clone()],
        gap: Duration::ZERO,
    });
    let mut c = Client::new(e.addr());
    c.send(&chat());
    assert_eq!(c.read_to_eof(), unframed);
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 0));
}

#[test]
fn keep_alive_and_pipelining() {
    let e = engine();
    let mut c = Client::new(e.addr());
    for i in 0..3 {
        c.send(&post(
            "/v1/chat/completions",
            CHAT,
            &format!("X-Request-Id: seq-{i}\r\n"),
        ));
        let r = c.response();
        assert_eq!(r.header("x-request-id"), Some(format!("seq-{i}")));
    }
    // Three requests in one write are answered in order.
    let mut batch = Vec::new();
    for i in 0..3 {
        batch.extend(post(
            "/v1/completions",
            r#"{"prompt":"x"}"#,
            &format!("X-Request-Id: pipe-{i}\r\n"),
        ));
    }
    c.send(&batch);
    for i in 0..3 {
        let r = c.response();
        assert_eq!(r.json()["id"], format!("cmpl-pipe-{i}"));
    }
    let s = e.stats();
    assert_eq!((s.requests, s.connections_accepted), (6, 1));

    // connection: close is honoured.
    c.send(&post("/v1/chat/completions", CHAT, "Connection: close\r\n"));
    let r = c.response();
    assert_eq!(r.header("connection").as_deref(), Some("close"));
    assert_eq!(c.read_to_eof(), b"");
}

#[test]
fn chunked_request_bodies_are_decoded_and_recorded() {
    let e = engine();
    let body = CHAT.as_bytes();
    let mut req = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: engine\r\nTransfer-Encoding: chunked\r\nX-Trace: abc\r\n\r\n".to_vec();
    for part in body.chunks(7) {
        req.extend(format!("{:x}\r\n", part.len()).bytes());
        req.extend_from_slice(part);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let mut c = Client::new(e.addr());
    // Sent in pieces, to exercise reassembly.
    for piece in req.chunks(13) {
        c.send(piece);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.response().status(), 200);
    let got = e.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, body);
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].path, "/v1/chat/completions?x=1");
    assert_eq!(got[0].header("x-trace"), Some("abc"));
    assert_eq!(got[0].header("transfer-encoding"), Some("chunked"));
}

#[test]
fn received_keeps_bodies_byte_for_byte() {
    let e = engine();
    let before = Instant::now();
    let odd =
        "{\"model\":\"tiny\",\"prompt\":\"caf\u{e9} \\u00e9 \\\"q\\\"\",  \"stream\" : false }";
    let r = exchange(
        e.addr(),
        &post("/v1/completions", odd, "X-Request-Id: rec-1\r\n"),
    );
    assert_eq!(r.status(), 200);
    let got = e.received();
    assert_eq!(got[0].body, odd.as_bytes());
    assert_eq!(got[0].header("X-Request-Id"), Some("rec-1"));
    assert_eq!(got[0].header("content-type"), Some("application/json"));
    assert!(got[0].received_at >= before);

    let mut opts = EngineOptions::new("tiny");
    opts.record = false;
    let quiet = ScriptedEngine::start(opts).unwrap();
    exchange(quiet.addr(), &chat());
    assert!(quiet.received().is_empty());
    assert_eq!(quiet.stats().requests, 1);
}

#[test]
fn concurrent_hangs_reach_max_in_flight() {
    let e = engine_with(Behavior::Hang);
    let clients: Vec<Client> = (0..4)
        .map(|_| {
            let mut c = Client::new(e.addr());
            c.send(&chat());
            c
        })
        .collect();
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 4));
    assert_eq!(e.stats().max_in_flight, 4);
    drop(clients);
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 0));
    let s = e.stats();
    assert_eq!(
        (s.max_in_flight, s.client_disconnects, s.requests),
        (4, 4, 4)
    );
}

#[test]
fn behavior_changes_apply_to_the_next_request_on_a_connection() {
    let e = engine();
    let mut c = Client::new(e.addr());
    c.send(&chat());
    assert_eq!(c.response().status(), 200);
    e.set_behavior(Behavior::Status { code: 429 });
    c.send(&chat());
    assert_eq!(c.response().status(), 429);
    e.set_behavior(Behavior::Instant);
    c.send(&chat());
    assert_eq!(c.response().status(), 200);
}

#[test]
fn expect_continue_is_answered() {
    let e = engine();
    let mut c = Client::new(e.addr());
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: e\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        CHAT.len()
    );
    c.send(head.as_bytes());
    let mut interim = [0u8; 25];
    c.stream.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.send(CHAT.as_bytes());
    assert_eq!(c.response().status(), 200);
}

#[test]
fn stop_closes_everything_like_a_crash() {
    let mut e = engine_with(Behavior::Hang);
    let addr = e.addr();
    let mut c = Client::new(addr);
    c.send(&chat());
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 1));
    e.stop();
    assert_eq!(c.read_to_eof(), b"");
    assert!(TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_err());
    e.stop(); // idempotent
    assert_eq!(e.stats().client_disconnects, 0);
}

#[test]
fn bad_heads_get_400_and_a_close() {
    let e = engine();
    let mut c = Client::new(e.addr());
    c.send(b"NOT HTTP AT ALL\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status(), 400);
    assert_eq!(c.read_to_eof(), b"");
}

#[test]
fn taken_port_is_an_error() {
    let e = engine();
    let mut opts = EngineOptions::new("tiny");
    opts.port = e.addr().port();
    assert!(ScriptedEngine::start(opts).is_err());
}

#[test]
fn many_engines_and_many_requests() {
    let engines: Vec<ScriptedEngine> = (0..4).map(|_| engine()).collect();
    for e in &engines {
        let mut c = Client::new(e.addr());
        for _ in 0..200 {
            c.send(&chat());
            assert_eq!(c.response().status(), 200);
        }
        assert_eq!(e.stats().requests, 200);
    }
}

#[test]
fn client_writes_survive_while_engine_is_idle() {
    // A client that sends its request in two parts far apart is still served.
    let e = engine();
    let mut c = Client::new(e.addr());
    let req = chat();
    c.send(&req[..10]);
    std::thread::sleep(Duration::from_millis(50));
    c.stream.write_all(&req[10..]).unwrap();
    assert_eq!(c.response().status(), 200);
}

#[test]
fn idle_keep_alive_connections_close_after_five_seconds_like_vllm() {
    let e = engine();
    let mut c = Client::new(e.addr());
    c.send(&get("/health"));
    assert_eq!(c.response().status(), 200);
    let idle_from = Instant::now();
    c.stream
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    assert_eq!(c.read_to_eof(), b"");
    let idle = idle_from.elapsed();
    assert!(
        idle >= Duration::from_millis(4900) && idle < Duration::from_secs(7),
        "closed after {idle:?}"
    );
}

#[test]
fn the_handle_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ScriptedEngine>();
}
