//! End-to-end wire parity through the real [`SimServer`]: every captured vLLM 0.32 exchange
//! (`fixtures/vllm_http/NN_*.request.bin`, copied from the reference capture) is replayed byte
//! for byte over TCP, in capture order, against one simulator configured as the capture's
//! `vllm serve` (`--served-model-name tiny --block-size 32 --num-gpu-blocks-override 128
//! --max-model-len 2048 --enable-prompt-tokens-details`), and the answer is compared with
//! `response.bin`.
//!
//! Masked, because they legitimately differ: the `date` value (checked for format), ids
//! (prefix kept), `created`, the `system_fingerprint` hash (prefix kept), the model card's
//! `root` (vLLM shows the model path) and `modelperm` id, and what depends on the tokenizer or
//! the weights (generated text, token ids, token counts of text prompts). Everything else is
//! compared: status line, header names and order, header values, JSON keys in order, nulls,
//! booleans, exact strings such as `object`/`model`/`finish_reason`, SSE event count, one HTTP
//! chunk per event, and `data: [DONE]`. Token-id prompts have deterministic usage, compared in
//! full. Routes with deterministic bodies (health, ping, version, load, reset, errors, 404/405)
//! are compared byte for byte with only `date` masked.

mod common;

use std::path::PathBuf;

use common::{parse_raw, Client, Raw};
use inferrail_sim::openai::{kv_event_sources_body, KvEventSource};
use inferrail_sim::server::{SimOptions, SimServer};

fn fixture(name: &str) -> Vec<u8> {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "vllm_http",
        name,
    ]
    .iter()
    .collect();
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn capture_server() -> SimServer {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    o.block_size = 32;
    o.num_gpu_blocks_override = Some(128);
    o.max_model_len = 2048;
    o.enable_prompt_tokens_details = true;
    o.enable_prefix_caching = true;
    SimServer::start(o).expect("start")
}

// ---------------------------------------------------------------- ordered JSON and its shape

#[derive(Debug)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && b" \t\r\n".contains(&self.s[self.i]) {
            self.i += 1;
        }
    }
    fn value(&mut self) -> J {
        self.ws();
        match self.s[self.i] {
            b'n' => {
                self.i += 4;
                J::Null
            }
            b't' => {
                self.i += 4;
                J::Bool(true)
            }
            b'f' => {
                self.i += 5;
                J::Bool(false)
            }
            b'"' => J::Str(self.string()),
            b'[' => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return J::Arr(v);
                }
                loop {
                    v.push(self.value());
                    self.ws();
                    let c = self.s[self.i];
                    self.i += 1;
                    if c == b']' {
                        return J::Arr(v);
                    }
                    assert_eq!(c, b',');
                }
            }
            b'{' => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return J::Obj(v);
                }
                loop {
                    self.ws();
                    let k = self.string();
                    self.ws();
                    assert_eq!(self.s[self.i], b':');
                    self.i += 1;
                    let val = self.value();
                    v.push((k, val));
                    self.ws();
                    let c = self.s[self.i];
                    self.i += 1;
                    if c == b'}' {
                        return J::Obj(v);
                    }
                    assert_eq!(c, b',');
                }
            }
            _ => {
                let st = self.i;
                while self.i < self.s.len() && b"+-.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                assert!(self.i > st, "JSON value at {st}");
                J::Num(String::from_utf8(self.s[st..self.i].to_vec()).unwrap())
            }
        }
    }
    fn string(&mut self) -> String {
        let st = self.i;
        self.i += 1;
        while self.s[self.i] != b'"' {
            if self.s[self.i] == b'\\' {
                self.i += 1;
            }
            self.i += 1;
        }
        self.i += 1;
        serde_json::from_slice::<String>(&self.s[st..self.i]).unwrap()
    }
}

fn parse_json(s: &[u8]) -> J {
    let mut p = P { s, i: 0 };
    let v = p.value();
    p.ws();
    assert_eq!(p.i, s.len(), "trailing bytes after JSON");
    v
}

/// Strings compared exactly.
const EXACT_STR: &[&str] = &[
    "object",
    "model",
    "role",
    "finish_reason",
    "stop_reason",
    "type",
    "param",
    "owned_by",
    "organization",
    "version",
];
/// Numbers compared exactly (others depend on the tokenizer or the clock).
const EXACT_NUM: &[&str] = &["index", "code", "max_model_len", "server_load"];
/// Arrays whose length depends on the tokenizer: only their element shape is compared.
const VAR_ARR: &[&str] = &["tokens", "token_ids", "prompt_token_ids", "token_strs"];

fn shape(j: &J, key: &str, out: &mut String) {
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) if EXACT_NUM.contains(&key) => out.push_str(n),
        J::Num(_) => out.push_str("<n>"),
        J::Str(s) if EXACT_STR.contains(&key) => out.push_str(&format!("{s:?}")),
        J::Str(s) if key == "id" => {
            // `chatcmpl-`/`cmpl-`/`modelperm-` + random hex (or the client's request id).
            let prefix = s.split_once('-').map(|(p, _)| p).unwrap_or("");
            out.push_str(&format!("\"{prefix}-<id>\""));
        }
        J::Str(s) if key == "system_fingerprint" => {
            let (prefix, hash) = s.rsplit_once('-').expect("fingerprint hash");
            assert_eq!(hash.len(), 8, "8 hex digits in {s}");
            out.push_str(&format!("\"{prefix}-<hash>\""));
        }
        J::Str(_) => out.push_str("<s>"),
        J::Arr(a) if VAR_ARR.contains(&key) => match a.first() {
            None => out.push_str("[]"),
            Some(first) => {
                out.push('[');
                shape(first, "", out);
                out.push_str("...]");
            }
        },
        J::Arr(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                shape(v, key, out);
            }
            out.push(']');
        }
        J::Obj(o) => {
            out.push('{');
            for (i, (k, v)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&format!("{k:?}:"));
                shape(v, k, out);
            }
            out.push('}');
        }
    }
}

fn json_shape(body: &[u8]) -> String {
    let mut out = String::new();
    shape(&parse_json(body), "", &mut out);
    out
}

fn get<'a>(j: &'a J, path: &[&str]) -> &'a J {
    let mut cur = j;
    for k in path {
        cur = match cur {
            J::Obj(o) => &o.iter().find(|(n, _)| n == k).expect(k).1,
            J::Arr(a) => &a[k.parse::<usize>().unwrap()],
            _ => panic!("no {k}"),
        };
    }
    cur
}

fn render(j: &J) -> String {
    match j {
        J::Null => "null".into(),
        J::Bool(b) => b.to_string(),
        J::Num(n) => n.clone(),
        J::Str(s) => serde_json::to_string(s).unwrap(),
        J::Arr(a) => format!("[{}]", a.iter().map(render).collect::<Vec<_>>().join(",")),
        J::Obj(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), render(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

// ---------------------------------------------------------------- comparisons

/// How an exchange's body is compared.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Cmp {
    /// Byte for byte (only `date` masked).
    Exact,
    /// Byte for byte after masking digit runs (token counts of a text prompt).
    ExactDigitsMasked,
    /// JSON shape (see [`shape`]).
    Shape,
    /// JSON shape, where the generated text may hit the request's stop string `"e"` (the
    /// capture's weights never produced it): a stop there reads as the capture's length.
    ShapeStopE,
    /// JSON shape and `usage` byte for byte (token-id prompts).
    ShapeExactUsage,
    /// SSE: same chunk count, one event per chunk, same shape per event.
    Stream,
    /// A parameter the simulator refuses (400 naming it) where vLLM answered.
    Refused(&'static str),
    /// KV events are off in the simulator: `{}` (the capture ran with them on).
    KvSourcesOff,
}

fn mask_digits(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_digit() {
            if out.last() != Some(&b'#') {
                out.push(b'#');
            }
        } else {
            out.push(b);
        }
    }
    out
}

fn check_date(v: &str) {
    // IMF-fixdate: `Mon, 30 Nov 2026 04:52:44 GMT`.
    assert_eq!(v.len(), 29, "date {v:?}");
    assert!(v.ends_with(" GMT") && v.as_bytes()[3] == b',', "date {v:?}");
}

fn compare(tag: &str, cmp: Cmp, want: &Raw, got: &Raw) {
    if let Cmp::Refused(param) = cmp {
        assert_eq!(got.status_line, "HTTP/1.1 400 Bad Request", "{tag}");
        let body = String::from_utf8_lossy(&got.body);
        assert!(
            body.contains(&format!("\"param\":\"{param}\"")),
            "{tag}: {body}"
        );
        return;
    }
    assert_eq!(got.status_line, want.status_line, "{tag}: status line");
    let names = |r: &Raw| r.headers.iter().map(|h| h.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(want), "{tag}: header names and order");
    let exact_len = matches!(cmp, Cmp::Exact);
    for ((n, gv), (_, wv)) in got.headers.iter().zip(&want.headers) {
        match n.as_str() {
            "date" => check_date(gv),
            "content-length" if !exact_len => {
                assert_eq!(gv.parse::<usize>().unwrap(), got.body.len(), "{tag}")
            }
            _ => assert_eq!(gv, wv, "{tag}: header {n}"),
        }
    }
    match cmp {
        Cmp::Exact => assert_eq!(
            String::from_utf8_lossy(&got.body),
            String::from_utf8_lossy(&want.body),
            "{tag}: body"
        ),
        Cmp::ExactDigitsMasked => assert_eq!(
            String::from_utf8_lossy(&mask_digits(&got.body)),
            String::from_utf8_lossy(&mask_digits(&want.body)),
            "{tag}: body (digits masked)"
        ),
        Cmp::Shape => assert_eq!(
            json_shape(&got.body),
            json_shape(&want.body),
            "{tag}: JSON shape"
        ),
        Cmp::ShapeStopE => assert_eq!(
            json_shape(&got.body).replace(
                "\"finish_reason\":\"stop\",\"stop_reason\":\"e\"",
                "\"finish_reason\":\"length\",\"stop_reason\":null"
            ),
            json_shape(&want.body),
            "{tag}: JSON shape"
        ),
        Cmp::ShapeExactUsage => {
            assert_eq!(json_shape(&got.body), json_shape(&want.body), "{tag}");
            let (g, w) = (parse_json(&got.body), parse_json(&want.body));
            assert_eq!(
                render(get(&g, &["usage"])),
                render(get(&w, &["usage"])),
                "{tag}: usage"
            );
        }
        Cmp::Stream => {
            let (gc, wc) = (got.chunks.as_ref().unwrap(), want.chunks.as_ref().unwrap());
            assert_eq!(
                gc.len(),
                wc.len(),
                "{tag}: number of HTTP chunks / SSE events"
            );
            for (i, (g, w)) in gc.iter().zip(wc).enumerate() {
                for c in [g, w] {
                    assert!(
                        c.starts_with(b"data: ")
                            && c.ends_with(b"\n\n")
                            && c[..c.len() - 2].windows(2).all(|x| x != b"\n\n"),
                        "{tag}: chunk {i} is one SSE event"
                    );
                }
                let (g, w) = (&g[6..g.len() - 2], &w[6..w.len() - 2]);
                if w == b"[DONE]" {
                    assert_eq!(g, w, "{tag}: event {i}");
                } else {
                    assert_eq!(json_shape(g), json_shape(w), "{tag}: event {i}");
                }
            }
        }
        Cmp::KvSourcesOff => assert_eq!(&got.body[..], b"{}", "{tag}"),
        Cmp::Refused(_) => unreachable!(),
    }
}

/// Every captured exchange, in capture order, with how it is compared.
const EXCHANGES: &[(&str, Cmp)] = &[
    ("01_health", Cmp::Exact),
    ("02_models", Cmp::Shape),
    ("03_version", Cmp::Exact),
    ("04_ping_get", Cmp::Exact),
    ("05_load", Cmp::Exact),
    ("06_kv_event_sources", Cmp::KvSourcesOff),
    ("07_tokenize_chat", Cmp::Shape),
    ("08_tokenize_prompt", Cmp::Shape),
    ("09_detokenize", Cmp::Shape),
    ("10_chat_long_first", Cmp::Shape),
    ("11_chat_long_repeat", Cmp::Shape),
    ("12_chat_stream_short", Cmp::Stream),
    ("13_chat_stream_long_usage", Cmp::Stream),
    ("14_chat_stream_continuous_usage", Cmp::Stream),
    ("15_chat_shared_system_other_user", Cmp::Shape),
    ("16_chat_logprobs", Cmp::Refused("logprobs")),
    ("17_chat_n2", Cmp::Refused("n")),
    ("18_chat_n2_stream", Cmp::Refused("n")),
    ("19_chat_return_token_ids", Cmp::Shape),
    ("20_chat_x_request_id", Cmp::Shape),
    ("21_chat_stop_string", Cmp::ShapeStopE),
    ("22_chat_max_tokens_1_stream", Cmp::Stream),
    ("23_cmpl_long_first", Cmp::Shape),
    ("24_cmpl_long_repeat", Cmp::Shape),
    ("25_cmpl_stream", Cmp::Stream),
    ("26_cmpl_stream_usage", Cmp::Stream),
    ("27_cmpl_logprobs_echo", Cmp::Refused("logprobs")),
    ("28_cmpl_token_ids_prompt", Cmp::ShapeExactUsage),
    ("29_cmpl_64_token_ids_first", Cmp::ShapeExactUsage),
    ("30_cmpl_64_token_ids_repeat", Cmp::ShapeExactUsage),
    ("31_cmpl_n2", Cmp::Refused("n")),
    ("32_err_bad_json", Cmp::Exact),
    ("33_err_missing_messages", Cmp::Exact),
    ("34_err_empty_messages", Cmp::Exact),
    ("35_err_unknown_model", Cmp::Exact),
    ("36_err_unknown_model_cmpl", Cmp::Exact),
    ("37_err_max_tokens_too_large", Cmp::Exact),
    ("38_err_max_tokens_too_large_cmpl", Cmp::Exact),
    ("39_err_prompt_too_long", Cmp::ExactDigitsMasked),
    ("40_err_stream_options_without_stream", Cmp::Exact),
    ("41_err_stream_options_stream_false_cmpl", Cmp::Exact),
    ("46_err_unknown_model_stream", Cmp::Exact),
    ("48_err_404_route", Cmp::Exact),
    ("49_err_405_method", Cmp::Exact),
    ("51_evict_fill_1", Cmp::Shape),
    ("52_evict_fill_2", Cmp::Shape),
    ("53_evict_fill_3", Cmp::Shape),
    ("54_evict_fill_4", Cmp::Shape),
    ("55_evict_fill_5", Cmp::Shape),
    ("56_evict_fill_6", Cmp::Shape),
    ("58_reset_prefix_cache", Cmp::Exact),
    ("59_chat_after_reset", Cmp::Shape),
];

#[test]
fn every_captured_exchange_through_the_server() {
    let server = capture_server();
    let mut failures = Vec::new();
    for &(tag, cmp) in EXCHANGES {
        let request = fixture(&format!("{tag}.request.bin"));
        let want = parse_raw(&fixture(&format!("{tag}.response.bin")));
        let mut c = Client::new(server.addr());
        c.send(&request);
        let got = parse_raw(&c.response().raw);
        if let Err(e) = std::panic::catch_unwind(|| compare(tag, cmp, &want, &got)) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{tag}: {msg}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Exchange 20: `X-Request-Id: ref-req-0001` becomes the response id.
#[test]
fn x_request_id_becomes_the_response_id() {
    let server = capture_server();
    let mut c = Client::new(server.addr());
    c.send(&fixture("20_chat_x_request_id.request.bin"));
    let got = c.response();
    let j = parse_json(&got.body);
    assert_eq!(render(get(&j, &["id"])), "\"chatcmpl-ref-req-0001\"");
}

/// Exchanges 29/30: a 64-id prompt repeated hits 32 tokens (the last block is recomputed).
#[test]
fn token_id_prompt_usage_matches_the_capture() {
    let server = capture_server();
    for tag in ["29_cmpl_64_token_ids_first", "30_cmpl_64_token_ids_repeat"] {
        let mut c = Client::new(server.addr());
        c.send(&fixture(&format!("{tag}.request.bin")));
        let got = c.response();
        let want = parse_raw(&fixture(&format!("{tag}.response.bin")));
        let (g, w) = (parse_json(&got.body), parse_json(&want.body));
        assert_eq!(
            render(get(&g, &["usage"])),
            render(get(&w, &["usage"])),
            "{tag}"
        );
    }
}

/// `/ping` answers POST as GET (two FastAPI routes); other methods get the GET route's 405.
#[test]
fn ping_post_and_wrong_method() {
    let server = capture_server();
    let want = parse_raw(&fixture("04_ping_get.response.bin"));
    let mut c = Client::new(server.addr());
    c.send(b"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    let got = parse_raw(&c.response().raw);
    compare("POST /ping", Cmp::Exact, &want, &got);

    let want405 = parse_raw(&fixture("49_err_405_method.response.bin"));
    let mut c = Client::new(server.addr());
    c.send(b"PUT /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    let got = parse_raw(&c.response().raw);
    assert_eq!(got.status_line, want405.status_line);
    assert_eq!(got.headers[2], ("allow".to_owned(), "GET".to_owned()));
    assert_eq!(got.body, want405.body);

    let mut c = Client::new(server.addr());
    c.send(b"POST /load HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    let got = parse_raw(&c.response().raw);
    assert_eq!(got.status_line, want405.status_line);
    assert_eq!(got.headers[2], ("allow".to_owned(), "GET".to_owned()));
}

/// `/detokenize` round-trips `/tokenize` and refuses as FastAPI does.
#[test]
fn detokenize_round_trip_and_errors() {
    let server = capture_server();
    let tok = r#"{"model":"tiny","prompt":"Hello there, how are you?"}"#;
    let r = common::exchange(server.addr(), &common::post("/tokenize", tok, ""));
    let ids = r.json()["tokens"].clone();
    let body = serde_json::json!({"model": "tiny", "tokens": ids}).to_string();
    let r = common::exchange(server.addr(), &common::post("/detokenize", &body, ""));
    assert_eq!(r.status(), 200);
    let text = r.json()["prompt"].as_str().unwrap().to_owned();
    assert!(text.ends_with("Hello there, how are you?"), "{text:?}");

    let r = common::exchange(
        server.addr(),
        &common::post("/detokenize", r#"{"model":"tiny"}"#, ""),
    );
    assert_eq!(r.status(), 400);
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        "{\"error\":{\"message\":\"1 validation error:\\n  {'type': 'missing', 'loc': 'body.tokens', 'msg': 'Field required', 'input': '<dict of 1 items>'}\",\"type\":\"Bad Request\",\"param\":\"body.tokens\",\"code\":400}}"
    );
    let r = common::exchange(
        server.addr(),
        &common::post("/detokenize", r#"{"model":"nope","tokens":[1]}"#, ""),
    );
    assert_eq!(r.status(), 404);
}

/// The `/kv_event_sources` body of exchange 06 when a publisher is configured as captured.
#[test]
fn kv_event_sources_body_matches_the_capture() {
    let want = parse_raw(&fixture("06_kv_event_sources.response.bin"));
    let got = kv_event_sources_body(&[KvEventSource {
        rank: 0,
        publisher: "zmq",
        endpoint: "tcp://127.0.0.1:18957",
        replay_endpoint: Some("tcp://127.0.0.1:18958"),
        buffer_steps: 10000,
        hwm: 100000,
        max_queue_size: 100000,
        topic: "kv",
    }]);
    assert_eq!(got.as_bytes(), &want.body[..]);
    assert_eq!(kv_event_sources_body(&[]), "{}");
}

/// `/metrics` starts with prometheus_client's six `process_*` families, read from `/proc`.
#[test]
fn metrics_serve_process_families() {
    let server = capture_server();
    let r = common::exchange(server.addr(), &common::get("/metrics"));
    assert_eq!(r.status(), 200);
    let text = String::from_utf8(r.body).unwrap();
    let names = [
        ("process_virtual_memory_bytes", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
    ];
    let mut lines = text.lines();
    for (name, kind) in names {
        assert!(lines
            .next()
            .unwrap()
            .starts_with(&format!("# HELP {name} ")));
        assert_eq!(lines.next().unwrap(), format!("# TYPE {name} {kind}"));
        let sample = lines.next().unwrap();
        let v: f64 = sample
            .strip_prefix(&format!("{name} "))
            .expect(sample)
            .parse()
            .unwrap();
        assert!(v >= 0.0, "{sample}");
        if name != "process_cpu_seconds_total" {
            assert!(v > 0.0, "{sample}");
        }
    }
    assert!(lines.next().unwrap().starts_with("# HELP vllm:"));
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let start = value("process_start_time_seconds");
    assert!(
        start <= now + 1.0 && start > now - 86_400.0,
        "start {start}"
    );
    assert!(value("process_resident_memory_bytes") < value("process_virtual_memory_bytes"));
    assert!(value("process_open_fds") <= value("process_max_fds"));
}
