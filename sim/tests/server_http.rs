//! The simulated engine over HTTP (`inferrail_sim::server`): round trips, usage, prefix-cache
//! reporting, metrics, cancellation, concurrency and latency ordering. std::net clients on
//! 127.0.0.1; every read has a timeout and every loop is bounded.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{connect, eventually, exchange, get, post};
use inferrail_shards::builtin::BuiltinTokenizer;
use inferrail_sim::engine::{LatencyModel, LinearLatency};
use inferrail_sim::openai::ChatMessage;
use inferrail_sim::server::{apply_chat_template, SimOptions, SimServer};
use serde_json::Value;

fn zero(model: &str) -> SimServer {
    let mut o = SimOptions::new(model);
    o.zero_latency = true;
    o.enable_prompt_tokens_details = true;
    SimServer::start(o).expect("start")
}

fn chat_ids(user: &str) -> Vec<u32> {
    let text = apply_chat_template(
        &[ChatMessage {
            role: "user".into(),
            content: Some(user.into()),
        }],
        true,
        false,
    );
    BuiltinTokenizer::new().encode_with_special(&text, true)
}

fn chat_body(user: &str, max_tokens: u32, stream: bool) -> String {
    let mut v = serde_json::json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": user}],
        "max_tokens": max_tokens,
    });
    if stream {
        v["stream"] = Value::Bool(true);
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    v.to_string()
}

/// Sum of the samples of `name` whose labels contain `labels`.
fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

fn metrics(addr: SocketAddr) -> String {
    let r = exchange(addr, &get("/metrics"));
    assert_eq!(r.status(), 200);
    String::from_utf8(r.body).unwrap()
}

#[test]
fn chat_round_trip_non_stream() {
    let s = zero("tiny");
    let user = "Say hello in three words.";
    let r = exchange(
        s.addr(),
        &post("/v1/chat/completions", &chat_body(user, 5, false), ""),
    );
    assert_eq!(r.status(), 200);
    let names: Vec<String> = r
        .head
        .header_lines()
        .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
        .collect();
    assert_eq!(
        names,
        ["date", "server", "content-length", "content-type", "vary"]
    );
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], "tiny");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens"], chat_ids(user).len());
    assert_eq!(u["completion_tokens"], 5);
    // Generated text retokenizes to as many tokens as were generated.
    assert_eq!(BuiltinTokenizer::new().encode(text).len(), 5);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);

    // /tokenize agrees with the usage.
    let t = exchange(
        s.addr(),
        &post(
            "/tokenize",
            &serde_json::json!({"model":"tiny","messages":[{"role":"user","content":user}]})
                .to_string(),
            "",
        ),
    );
    assert_eq!(t.json()["count"], u["prompt_tokens"]);

    // x-request-id becomes the response id.
    let r = exchange(
        s.addr(),
        &post(
            "/v1/chat/completions",
            &chat_body(user, 1, false),
            "X-Request-Id: ref-req-0001\r\n",
        ),
    );
    assert_eq!(r.json()["id"], "chatcmpl-ref-req-0001");
    assert!(r.header("x-request-id").is_none());
}

#[test]
fn completions_and_plain_routes() {
    let s = zero("tiny");
    let r = exchange(
        s.addr(),
        &post(
            "/v1/completions",
            r#"{"model":"tiny","prompt":"Hello there, how are you?","max_tokens":3}"#,
            "",
        ),
    );
    assert_eq!(r.status(), 200);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    let ids = BuiltinTokenizer::new().encode_with_special("Hello there, how are you?", true);
    assert_eq!(v["usage"]["prompt_tokens"], ids.len());
    assert_eq!(v["usage"]["completion_tokens"], 3);

    let r = exchange(s.addr(), &get("/health"));
    assert_eq!((r.status(), r.body.len()), (200, 0));
    let r = exchange(s.addr(), &get("/version"));
    assert_eq!(r.body, br#"{"version":"0.32.0"}"#);
    let r = exchange(s.addr(), &get("/v1/models"));
    assert_eq!(r.json()["data"][0]["id"], "tiny");
    let r = exchange(s.addr(), &get("/nope"));
    assert_eq!(
        (r.status(), r.body.as_slice()),
        (404, &br#"{"detail":"Not Found"}"#[..])
    );
    let r = exchange(s.addr(), &get("/v1/chat/completions"));
    assert_eq!(r.status(), 405);
    assert_eq!(r.header("allow").as_deref(), Some("POST"));
    let r = exchange(s.addr(), &post("/v1/chat/completions", "{", ""));
    assert_eq!(r.status(), 400);
    let r = exchange(
        s.addr(),
        &post(
            "/v1/chat/completions",
            r#"{"model":"other","messages":[{"role":"user","content":"x"}]}"#,
            "",
        ),
    );
    assert_eq!(r.status(), 404);
    let r = exchange(s.addr(), &post("/reset_prefix_cache", "", ""));
    assert_eq!(r.body, br#"{"success":true}"#);
}

#[test]
fn chat_stream_with_usage() {
    let s = zero("tiny");
    let user = "Stream me something.";
    let r = exchange(
        s.addr(),
        &post("/v1/chat/completions", &chat_body(user, 6, true), ""),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(r.header("transfer-encoding").as_deref(), Some("chunked"));
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    // role chunk + 6 tokens + usage chunk + [DONE]
    assert_eq!(events.len(), 9, "{events:?}");
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let last_tok: Value = serde_json::from_str(&events[6]).unwrap();
    assert_eq!(last_tok["choices"][0]["finish_reason"], "length");
    let usage: Value = serde_json::from_str(&events[7]).unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["prompt_tokens"], chat_ids(user).len());
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    let text: String = events[1..7]
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(BuiltinTokenizer::new().encode(&text).len(), 6);
    // One HTTP chunk per event: the raw bytes hold exactly 9 data chunks and the last chunk.
    let raw = String::from_utf8_lossy(&r.raw);
    assert_eq!(raw.matches("\r\ndata: ").count(), 9);
}

#[test]
fn repeated_prompt_reports_cached_tokens() {
    let s = zero("tiny");
    let user = "Please summarise the following long document about routers, caches, \
                schedulers and engines, and keep it short. "
        .repeat(4);
    let prompt_len = chat_ids(&user).len();
    assert!(prompt_len > 48);
    let body = chat_body(&user, 2, false);
    let first = exchange(s.addr(), &post("/v1/chat/completions", &body, "")).json();
    let second = exchange(s.addr(), &post("/v1/chat/completions", &body, "")).json();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let full = prompt_len / 16 * 16;
    assert_eq!(
        first["usage"]["prompt_tokens_details"]["created_cache_tokens"],
        full
    );
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap() as usize;
    assert!(
        cached > 0 && cached.is_multiple_of(16) && cached <= full,
        "{cached}"
    );
    let m = metrics(s.addr());
    assert_eq!(
        metric(&m, "vllm:prefix_cache_hits_total", "") as usize,
        cached
    );
}

#[test]
fn prompt_tokens_details_off_by_default() {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    let s = SimServer::start(o).unwrap();
    let v = exchange(
        s.addr(),
        &post("/v1/chat/completions", &chat_body("hi", 1, false), ""),
    )
    .json();
    assert!(v["usage"]["prompt_tokens_details"].is_null());
}

#[test]
fn metrics_count_the_requests_sent() {
    let s = zero("tiny");
    let m0 = metrics(s.addr());
    assert_eq!(
        metric(&m0, "vllm:num_requests_running", "model_name=\"tiny\""),
        0.0
    );
    assert!(m0.contains("vllm:num_requests_waiting{"));
    assert!(m0.contains("vllm:kv_cache_usage_perc{"));
    let mut prompt = 0;
    let mut gen = 0;
    for (i, user) in ["one", "two words", "three little words"]
        .iter()
        .enumerate()
    {
        let n = i as u32 + 2;
        let r = exchange(
            s.addr(),
            &post("/v1/chat/completions", &chat_body(user, n, false), ""),
        );
        assert_eq!(r.status(), 200);
        prompt += chat_ids(user).len();
        gen += n as usize;
    }
    let m = metrics(s.addr());
    assert_eq!(metric(&m, "vllm:prompt_tokens_total", "") as usize, prompt);
    assert_eq!(metric(&m, "vllm:generation_tokens_total", "") as usize, gen);
    assert_eq!(
        metric(
            &m,
            "vllm:request_success_total",
            "finished_reason=\"length\""
        ),
        3.0
    );
    assert_eq!(
        metric(&m, "vllm:time_to_first_token_seconds_count", ""),
        3.0
    );
    assert_eq!(metric(&m, "vllm:num_requests_running", ""), 0.0);
}

/// Reads until `needle` shows up in what was received (bounded by the socket timeout).
fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !buf.windows(needle.len()).any(|w| w == needle) {
        assert!(Instant::now() < deadline, "timed out waiting for data");
        let mut chunk = [0u8; 8192];
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "EOF");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn a_disconnecting_stream_is_aborted() {
    let mut o = SimOptions::new("tiny");
    o.latency = LatencyModel::Linear(LinearLatency {
        decode_token_secs: 0.02,
        ..LinearLatency::default()
    });
    let s = SimServer::start(o).unwrap();
    let mut c = connect(s.addr());
    c.write_all(&post(
        "/v1/chat/completions",
        &chat_body("a long story please", 2000, true),
        "",
    ))
    .unwrap();
    let mut buf = Vec::new();
    read_until(&mut c, &mut buf, b"\"content\":\"");
    assert!(
        eventually(Duration::from_secs(5), || metric(
            &metrics(s.addr()),
            "vllm:num_requests_running",
            ""
        ) == 1.0),
        "the request runs"
    );
    c.shutdown(Shutdown::Both).unwrap();
    drop(c);
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = metrics(s.addr());
            metric(
                &m,
                "vllm:request_success_total",
                "finished_reason=\"abort\"",
            ) == 1.0
                && metric(&m, "vllm:num_requests_running", "") == 0.0
                && metric(&m, "vllm:kv_cache_usage_perc", "") == 0.0
        }),
        "the request is aborted and its blocks freed"
    );
}

#[test]
fn a_disconnecting_waiting_request_is_withdrawn() {
    let mut o = SimOptions::new("tiny");
    o.max_num_seqs = 1;
    o.latency = LatencyModel::Linear(LinearLatency {
        decode_token_secs: 0.02,
        ..LinearLatency::default()
    });
    let s = SimServer::start(o).unwrap();
    let mut first = connect(s.addr());
    first
        .write_all(&post(
            "/v1/chat/completions",
            &chat_body("one", 2000, true),
            "",
        ))
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut first, &mut buf, b"\"content\":\"");
    let mut second = connect(s.addr());
    second
        .write_all(&post(
            "/v1/chat/completions",
            &chat_body("two", 5, false),
            "",
        ))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || metric(
        &metrics(s.addr()),
        "vllm:num_requests_waiting",
        ""
    ) == 1.0));
    second.shutdown(Shutdown::Both).unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        let m = metrics(s.addr());
        metric(
            &m,
            "vllm:request_success_total",
            "finished_reason=\"abort\"",
        ) == 1.0
            && metric(&m, "vllm:num_requests_waiting", "") == 0.0
            && metric(&m, "vllm:num_requests_running", "") == 1.0
    }));
}

#[test]
fn zero_latency_serves_200_concurrent_streams() {
    let s = zero("tiny");
    let addr = s.addr();
    let threads: Vec<_> = (0..200)
        .map(|i| {
            std::thread::spawn(move || {
                let body = chat_body(&format!("request number {i}"), 16, true);
                let r = exchange(addr, &post("/v1/chat/completions", &body, ""));
                assert_eq!(r.status(), 200);
                let ev = r.events();
                assert_eq!(ev.last().unwrap(), "[DONE]");
                let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
                assert_eq!(usage["usage"]["completion_tokens"], 16);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("stream completes");
    }
    let m = metrics(addr);
    assert_eq!(
        metric(
            &m,
            "vllm:request_success_total",
            "finished_reason=\"length\""
        ),
        200.0
    );
    assert_eq!(metric(&m, "vllm:generation_tokens_total", ""), 3200.0);
}

/// Time from sending a streaming completion to its first token event.
fn ttft(addr: SocketAddr, prompt: &[u32]) -> (Duration, TcpStream) {
    let body = serde_json::json!({
        "model": "tiny", "prompt": prompt, "max_tokens": 2, "stream": true,
    })
    .to_string();
    let mut c = connect(addr);
    let t0 = Instant::now();
    c.write_all(&post("/v1/completions", &body, "")).unwrap();
    let mut buf = Vec::new();
    read_until(&mut c, &mut buf, b"data: ");
    (t0.elapsed(), c)
}

#[test]
fn ttft_behind_a_long_prefill_is_later() {
    let s = SimServer::start(SimOptions::new("tiny")).unwrap();
    let short: Vec<u32> = (0..32).map(|i| 300 + i).collect();
    let (alone, _c) = ttft(s.addr(), &short);
    // ~6,000 tokens: three full-budget chunks, about 0.7 s of prefill in the default model.
    let long: Vec<u32> = (0..6000).map(|i| 1000 + (i % 5000)).collect();
    let body = serde_json::json!({"model":"tiny","prompt":long,"max_tokens":2}).to_string();
    let mut lc = connect(s.addr());
    lc.write_all(&post("/v1/completions", &body, "")).unwrap();
    // Make sure the long one arrived first.
    assert!(eventually(Duration::from_secs(5), || metric(
        &metrics(s.addr()),
        "vllm:num_requests_running",
        ""
    ) == 1.0));
    let other: Vec<u32> = (0..32).map(|i| 700 + i).collect();
    let (behind, _c2) = ttft(s.addr(), &other);
    eprintln!("ttft alone {alone:?}, behind a long prefill {behind:?}");
    assert!(
        behind > alone,
        "TTFT behind a long prefill ({behind:?}) should exceed TTFT alone ({alone:?})"
    );
    let m = metrics(s.addr());
    assert!(metric(&m, "vllm:time_to_first_token_seconds_sum", "") > 0.0);
}

#[test]
fn stop_strings_cut_the_text_and_count_as_stop() {
    let s = zero("tiny");
    let ask = |stop: Option<&str>| {
        let mut v = serde_json::json!({
            "model": "tiny", "prompt": "Once upon a time", "max_tokens": 8, "seed": 42,
        });
        if let Some(st) = stop {
            v["stop"] = serde_json::json!([st]);
        }
        exchange(s.addr(), &post("/v1/completions", &v.to_string(), "")).json()
    };
    let full = ask(None);
    let text = full["choices"][0]["text"].as_str().unwrap().to_owned();
    // The same seed gives the same text.
    assert_eq!(ask(None)["choices"][0]["text"], text.as_str());
    let pieces: Vec<String> = BuiltinTokenizer::new()
        .encode(&text)
        .iter()
        .map(|&t| BuiltinTokenizer::new().decode(&[t]))
        .collect();
    let stop = pieces[3].clone();
    let cut = &text[..text.find(&stop).unwrap()];
    let v = ask(Some(&stop));
    assert_eq!(v["choices"][0]["text"], cut);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["stop_reason"], stop.as_str());
    let m = metrics(s.addr());
    assert_eq!(
        metric(&m, "vllm:request_success_total", "finished_reason=\"stop\""),
        1.0
    );
}

#[test]
fn a_second_turn_reuses_the_first_turns_blocks() {
    let s = zero("tiny");
    let user =
        "Tell me about prefix caching in inference engines, in some detail please. ".repeat(3);
    let first = serde_json::json!({
        "model": "tiny", "messages": [{"role": "user", "content": user}], "max_tokens": 20,
    });
    let r1 = exchange(
        s.addr(),
        &post("/v1/chat/completions", &first.to_string(), ""),
    )
    .json();
    let reply = r1["choices"][0]["message"]["content"].as_str().unwrap();
    let turn1 = r1["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    let second = serde_json::json!({
        "model": "tiny",
        "messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "And what about eviction?"},
        ],
        "max_tokens": 2,
    });
    let r2 = exchange(
        s.addr(),
        &post("/v1/chat/completions", &second.to_string(), ""),
    )
    .json();
    let cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap() as usize;
    // At least every full block of the first prompt plus its generated tokens is reused.
    assert!(
        cached >= (turn1 + 20) / 16 * 16 - 16,
        "cached {cached}, first turn {turn1} + 20"
    );
}

/// prometheus-fastapi-instrumentator's `http_*` families count every request but the excluded
/// handlers (`/metrics`, `/health`, ...), by route template, method and status group, with the
/// `Content-Length` sizes (0 for a streamed response).
#[test]
fn metrics_http_families_count_requests() {
    let s = zero("tiny");
    let m0 = metrics(s.addr());
    assert!(m0.contains("# TYPE http_requests_total counter\n# HELP http_request_size_bytes "));
    assert!(m0.contains("\nhttp_request_duration_highr_seconds_count 0.0\n"));

    let chat = chat_body("hi", 2, false);
    let r = exchange(s.addr(), &post("/v1/chat/completions", &chat, ""));
    assert_eq!(r.status(), 200);
    let chat_resp = r.body.len();
    let stream = chat_body("hi", 2, true);
    let r = exchange(s.addr(), &post("/v1/chat/completions", &stream, ""));
    assert_eq!(r.status(), 200);
    let bad = "{\"model\":\"tiny\"}";
    let r = exchange(s.addr(), &post("/v1/chat/completions", bad, ""));
    assert_eq!(r.status() / 100, 4);
    let bad_resp = r.body.len();
    let r = exchange(s.addr(), &get("/v1/models"));
    assert_eq!(r.status(), 200);
    let models_resp = r.body.len();
    assert_eq!(exchange(s.addr(), &get("/v1/nope")).status(), 404);
    assert_eq!(exchange(s.addr(), &get("/v1/completions")).status(), 405);
    for path in ["/health", "/version", "/load", "/ping"] {
        assert_eq!(exchange(s.addr(), &get(path)).status(), 200, "{path}");
    }
    metrics(s.addr());

    let m = metrics(s.addr());
    let total = |labels: &str| metric(&m, "http_requests_total", labels);
    let chat_labels = "handler=\"/v1/chat/completions\",method=\"POST\"";
    assert_eq!(total(&format!("{chat_labels},status=\"2xx\"")), 2.0);
    assert_eq!(total(&format!("{chat_labels},status=\"4xx\"")), 1.0);
    assert_eq!(
        total("handler=\"/v1/models\",method=\"GET\",status=\"2xx\""),
        1.0
    );
    assert_eq!(total("handler=\"none\",method=\"GET\",status=\"4xx\""), 2.0);
    assert_eq!(total(""), 6.0, "excluded handlers are not counted:\n{m}");
    for h in ["/metrics", "/health", "/version", "/load", "/ping"] {
        assert!(!m.contains(&format!("handler=\"{h}\"")), "{h}");
    }
    let chat_h = "handler=\"/v1/chat/completions\"";
    assert_eq!(metric(&m, "http_request_size_bytes_count", chat_h), 3.0);
    assert_eq!(
        metric(&m, "http_request_size_bytes_sum", chat_h) as usize,
        chat.len() + stream.len() + bad.len()
    );
    assert_eq!(
        metric(&m, "http_response_size_bytes_sum", chat_h) as usize,
        chat_resp + bad_resp,
        "a streamed response has no content-length: counted 0"
    );
    assert_eq!(
        metric(&m, "http_response_size_bytes_sum", "handler=\"/v1/models\"") as usize,
        models_resp
    );
    assert_eq!(
        metric(&m, "http_response_size_bytes_sum", "handler=\"none\"") as usize,
        "{\"detail\":\"Not Found\"}".len() + "{\"detail\":\"Method Not Allowed\"}".len()
    );
    let highr = |suffix: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("http_request_duration_highr_seconds_{suffix} ")))
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(highr("count"), 6.0);
    assert!(highr("sum") > 0.0);
    assert_eq!(
        metric(&m, "http_request_duration_seconds_count", chat_labels),
        3.0
    );
    assert_eq!(
        metric(
            &m,
            "http_request_duration_seconds_bucket",
            "handler=\"/v1/chat/completions\",le=\"+Inf\",method=\"POST\""
        ),
        3.0
    );
    // Children appear in first-use order, the page ending with the latency `_created` gauges.
    let first = |needle: &str| m.find(needle).unwrap();
    assert!(
        first("http_requests_total{handler=\"/v1/chat")
            < first("http_requests_total{handler=\"/v1/models")
    );
    let last = m.lines().last().unwrap();
    assert!(
        last.starts_with("http_request_duration_seconds_created{handler=\"none\",method=\"GET\"} "),
        "{last}"
    );
    parse_ok(&m);
}

fn parse_ok(page: &str) {
    inferrail_sim::prom::parse::validate(page).expect("valid page");
}
