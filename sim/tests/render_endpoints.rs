//! The scale-out render routes, `/server_info` and SGLang's probe routes, against the vLLM 0.32
//! captures in `fixtures/vllm_http_extra/` (copied from `fixtures/vllm/http-extra/`):
//! 00 (render without `--enable-scale-out`: 403), 01/02 (`/server_info` text and json),
//! 21–26 (renders with `--enable-scale-out`).
//!
//! The render tests run the simulator with the capture model's own tokenizer
//! (`shards/fixtures/tiny-llama`, the `/tmp/vllmcpu/tiny-llama` of the capture), so the bodies
//! are compared byte for byte except the random 16-hex-digit request id. That renders agree
//! with what the engine prefills is checked against `usage.prompt_tokens` of the same body on
//! the real handlers, and that a render does no engine work against `/metrics`.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use common::{keys, parse_raw, post, Raw};
use inferrail_sim::server::{SimOptions, SimServer};
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", name]
        .iter()
        .collect();
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn extra(name: &str) -> Vec<u8> {
    fixture(&format!("vllm_http_extra/{name}"))
}

fn tiny_llama() -> String {
    format!(
        "{}/../shards/fixtures/tiny-llama",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The capture's server S (`serve_cmd_S.txt`): tiny, block 32, 128 blocks, 2048 context.
fn options(scale_out: bool, capture_tokenizer: bool) -> SimOptions {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    o.block_size = 32;
    o.num_gpu_blocks_override = Some(128);
    o.max_model_len = 2048;
    o.enable_scale_out = scale_out;
    if capture_tokenizer {
        o.tokenizer = Some(tiny_llama());
    }
    o
}

fn start(o: SimOptions) -> SimServer {
    SimServer::start(o).expect("start")
}

/// Replays the captured request `tag`; returns (simulator, capture).
fn replay(addr: SocketAddr, tag: &str) -> (Raw, Raw) {
    let got = common::exchange(addr, &extra(&format!("{tag}.request.bin")));
    (
        parse_raw(&got.raw),
        parse_raw(&extra(&format!("{tag}.response.bin"))),
    )
}

fn send(addr: SocketAddr, bytes: &[u8]) -> Raw {
    parse_raw(&common::exchange(addr, bytes).raw)
}

/// Same status line, header names in order, and the fixed header values.
fn assert_same_head(tag: &str, got: &Raw, want: &Raw) {
    assert_eq!(got.status_line, want.status_line, "{tag}: status line");
    assert_eq!(got.names(), want.names(), "{tag}: header names and order");
    for name in ["server", "content-type", "vary"] {
        assert_eq!(got.header(name), want.header(name), "{tag}: {name}");
    }
}

fn is_hex16(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

/// The body with its `"request_id":"<prefix><16 hex>"` replaced by a fixed one (checked).
fn without_request_id(tag: &str, body: &[u8], prefix: &str) -> String {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let marker = format!("\"request_id\":\"{prefix}");
    let at = text
        .find(&marker)
        .unwrap_or_else(|| panic!("{tag}: no {marker} in {text}"))
        + marker.len();
    let id = &text[at..at + 16];
    assert!(is_hex16(id), "{tag}: request id {prefix}{id}");
    format!("{}{}{}", &text[..at], "0".repeat(16), &text[at + 16..])
}

fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn metrics(addr: SocketAddr) -> String {
    let r = common::exchange(addr, &common::get("/metrics"));
    String::from_utf8(r.body).unwrap()
}

// ---------------------------------------------------------------- 403 without the flag

#[test]
fn render_without_scale_out_is_the_captured_403() {
    let srv = start(options(false, false));
    let (got, want) = replay(srv.addr(), "00_render_chat_scale_out_disabled");
    assert_same_head("00", &got, &want);
    assert_eq!(got.body, want.body, "00: body");
    assert_eq!(got.header("content-length"), want.header("content-length"));
    // Every render route, whatever the body: the route exists, the flag is off.
    for path in [
        "/v1/chat/completions/render",
        "/v1/completions/render",
        "/v1/messages/render",
    ] {
        let got = send(srv.addr(), &post(path, "not json", ""));
        assert_same_head(path, &got, &want);
        assert_eq!(got.body, want.body, "{path}");
        // A wrong method is Starlette's 405, as for any POST route.
        let got = send(srv.addr(), &common::get(path));
        assert_eq!(got.status_line, "HTTP/1.1 405 Method Not Allowed", "{path}");
        assert_eq!(got.header("allow"), Some("POST"));
    }
    // The instrumentator labels them with their route template.
    let page = metrics(srv.addr());
    for path in [
        "/v1/chat/completions/render",
        "/v1/completions/render",
        "/v1/messages/render",
    ] {
        let line =
            format!("http_requests_total{{handler=\"{path}\",method=\"POST\",status=\"4xx\"}}");
        assert!(page.contains(&line), "{line} in\n{page}");
    }
}

// ---------------------------------------------------------------- renders with the flag

#[test]
fn renders_match_the_capture_with_its_tokenizer() {
    let srv = start(options(true, true));
    for (tag, prefix) in [
        ("21_render_chat", "chatcmpl-"),
        ("23_render_chat_tools_choice_none", "chatcmpl-"),
        ("24_render_chat_cache_salt", "chatcmpl-"),
        ("25_render_completions", "cmpl-"),
        ("26_render_messages", "chatcmpl-"),
    ] {
        let (got, want) = replay(srv.addr(), tag);
        assert_same_head(tag, &got, &want);
        assert_eq!(keys(&got.body), keys(&want.body), "{tag}: keys in order");
        assert_eq!(
            without_request_id(tag, &got.body, prefix),
            without_request_id(tag, &want.body, prefix),
            "{tag}: body"
        );
        assert_eq!(
            got.header("content-length"),
            want.header("content-length"),
            "{tag}"
        );
    }
    // Completions answer an array; the others one object.
    let (got, _) = replay(srv.addr(), "25_render_completions");
    assert!(got.json().is_array());
    let (got, _) = replay(srv.addr(), "21_render_chat");
    assert!(got.json().is_object());
    // Messages render the same ids as the equivalent chat (21 and 26 in the capture).
    let (m, _) = replay(srv.addr(), "26_render_messages");
    assert_eq!(m.json()["token_ids"], got.json()["token_ids"]);
}

#[test]
fn render_structure_with_the_builtin_tokenizer() {
    let srv = start(options(true, false));
    for (tag, prefix) in [
        ("21_render_chat", "chatcmpl-"),
        ("23_render_chat_tools_choice_none", "chatcmpl-"),
        ("24_render_chat_cache_salt", "chatcmpl-"),
        ("25_render_completions", "cmpl-"),
        ("26_render_messages", "chatcmpl-"),
    ] {
        let (got, want) = replay(srv.addr(), tag);
        assert_same_head(tag, &got, &want);
        assert_eq!(keys(&got.body), keys(&want.body), "{tag}: keys in order");
        without_request_id(tag, &got.body, prefix);
        let (g, w) = (got.json(), want.json());
        let (g, w) = if g.is_array() {
            (g[0].clone(), w[0].clone())
        } else {
            (g, w)
        };
        assert_eq!(g["sampling_params"], w["sampling_params"], "{tag}");
        assert_eq!(g["cache_salt"], w["cache_salt"], "{tag}");
        assert!(!g["token_ids"].as_array().unwrap().is_empty(), "{tag}");
    }
}

#[test]
fn render_tools_without_tool_choice_none_is_the_captured_400() {
    for tokenizer in [false, true] {
        let srv = start(options(true, tokenizer));
        let (got, want) = replay(srv.addr(), "22_render_chat_tools");
        assert_same_head("22", &got, &want);
        assert_eq!(got.body, want.body, "22: body");
        // The real chat handler answers the same, and an explicit "auto" too.
        let body = String::from_utf8(extra("22_render_chat_tools.request.bin")).unwrap();
        let json = body.split_once("\r\n\r\n").unwrap().1;
        let got = send(srv.addr(), &post("/v1/chat/completions", json, ""));
        assert_eq!(got.body, want.body, "chat with tools");
        let auto = json.replacen(
            "\"max_tokens\"",
            "\"tool_choice\":\"auto\",\"max_tokens\"",
            1,
        );
        let got = send(srv.addr(), &post("/v1/chat/completions/render", &auto, ""));
        assert_eq!(got.body, want.body, "tool_choice auto");
    }
}

/// Render's `token_ids` are exactly what the engine prefills: their count is the real
/// handler's `usage.prompt_tokens` for the same body, and a render changes no engine metric.
#[test]
fn render_tokens_are_what_the_engine_prefills_and_no_engine_work() {
    for tokenizer in [false, true] {
        let srv = start(options(true, tokenizer));
        let a = srv.addr();
        let chat_bodies = [
            r#"{"model":"tiny","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in three words."}],"max_tokens":8,"temperature":0}"#,
            r#"{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b c"}]}],"max_tokens":3,"cache_salt":"s"}"#,
            r#"{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"continue_final_message":true,"add_generation_prompt":false,"max_tokens":2}"#,
        ];
        let cmpl_bodies = [
            r#"{"model":"tiny","prompt":"Hello there, how are you?","max_tokens":5,"temperature":0}"#,
            r#"{"model":"tiny","prompt":"no bos here","add_special_tokens":false,"max_tokens":2}"#,
            r#"{"model":"tiny","prompt":[5,6,7,8],"max_tokens":2}"#,
        ];
        let cases = chat_bodies
            .iter()
            .map(|b| ("/v1/chat/completions", *b))
            .chain(cmpl_bodies.iter().map(|b| ("/v1/completions", *b)));
        for (path, body) in cases {
            let before = metrics(a);
            let r = send(a, &post(&format!("{path}/render"), body, ""));
            assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{path} {body}");
            let after = metrics(a);
            for name in [
                "vllm:prompt_tokens_total",
                "vllm:request_success_total",
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:prefix_cache_queries_total",
                "vllm:e2e_request_latency_seconds_count",
            ] {
                assert_eq!(
                    metric(&before, name),
                    metric(&after, name),
                    "{name} after a render of {body}"
                );
            }
            let v = r.json();
            let g = if v.is_array() { v[0].clone() } else { v };
            let ids: Vec<u64> = g["token_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            let real = send(a, &post(path, body, "")).json();
            assert!(
                metric(&metrics(a), "vllm:prompt_tokens_total")
                    > metric(&after, "vllm:prompt_tokens_total"),
                "the real request is counted"
            );
            assert_eq!(
                ids.len() as u64,
                real["usage"]["prompt_tokens"].as_u64().unwrap(),
                "{path} {body}"
            );
            if body.contains("[5,6,7,8]") {
                assert_eq!(ids, vec![5, 6, 7, 8]);
            }
            if body.contains("[5,6,7,8]") {
                continue;
            }
            // /tokenize agrees (it adds a generation prompt to chat bodies by default).
            let tok = send(a, &post("/tokenize", body, "")).json();
            let tok_ids: Vec<u64> = tok["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            assert_eq!(tok_ids, ids, "/tokenize of {body}");
        }
        // Without max_tokens a completion asks for CompletionRequest's default, 16.
        let r = send(
            a,
            &post(
                "/v1/completions/render",
                r#"{"model":"tiny","prompt":[1,2,3]}"#,
                "",
            ),
        );
        assert_eq!(r.json()[0]["sampling_params"]["max_tokens"], 16);
    }
}

#[test]
fn render_fields_follow_the_request() {
    let srv = start(options(true, false));
    let a = srv.addr();
    let body = r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0.5,"top_p":0.9,"stop":["x"],"stop_token_ids":[7],"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true,"request_id":"abc"}"#;
    let r = send(a, &post("/v1/chat/completions/render", body, ""));
    let v = r.json();
    assert_eq!(v["request_id"], "chatcmpl-abc");
    let sp = &v["sampling_params"];
    assert_eq!(sp["temperature"], 0.5);
    assert_eq!(sp["top_p"], 0.9);
    assert_eq!(sp["min_p"], 0.0);
    assert_eq!(sp["stop"], serde_json::json!(["x"]));
    assert_eq!(sp["stop_token_ids"], serde_json::json!([7]));
    assert_eq!(sp["max_tokens"], 4);
    assert_eq!(sp["output_kind"], 2);
    assert_eq!(v["stream"], true);
    assert_eq!(v["stream_options"]["include_usage"], true);
    assert_eq!(v["return_token_ids"], true);
    // X-Request-Id wins, as on the real handlers.
    let r = send(
        a,
        &post(
            "/v1/chat/completions/render",
            body,
            "X-Request-Id: from-header\r\n",
        ),
    );
    assert_eq!(r.json()["request_id"], "chatcmpl-from-header");
}

/// Validation errors on the render routes are the real handlers' bytes.
#[test]
fn render_errors_are_the_real_handlers_errors() {
    let srv = start(options(true, false));
    let a = srv.addr();
    let chat_cases = [
        "{\"model\":\"tiny\",\"messages\":[",
        r#"{"model":"nope","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"tiny"}"#,
        r#"{"model":"tiny","messages":[]}"#,
        r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"cache_salt":""}"#,
        r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4096}"#,
        r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}"#,
    ];
    for body in chat_cases {
        let render = send(a, &post("/v1/chat/completions/render", body, ""));
        let real = send(a, &post("/v1/chat/completions", body, ""));
        assert_ne!(render.status_line, "HTTP/1.1 200 OK", "{body}");
        assert_eq!(render.status_line, real.status_line, "{body}");
        assert_eq!(render.body, real.body, "{body}");
    }
    for body in [
        r#"{"model":"nope","prompt":"hi"}"#,
        r#"{"model":"tiny"}"#,
        r#"{"model":"tiny","prompt":"hi","cache_salt":""}"#,
    ] {
        let render = send(a, &post("/v1/completions/render", body, ""));
        let real = send(a, &post("/v1/completions", body, ""));
        assert_ne!(render.status_line, "HTTP/1.1 200 OK", "{body}");
        assert_eq!(render.body, real.body, "{body}");
    }
    // The captured empty-salt 400 (exchange 13) on the render route.
    let want = parse_raw(&extra("13_chat_cache_salt_empty.response.bin"));
    let req = String::from_utf8(extra("13_chat_cache_salt_empty.request.bin")).unwrap();
    let json = req.split_once("\r\n\r\n").unwrap().1;
    let got = send(a, &post("/v1/chat/completions/render", json, ""));
    assert_eq!(got.body, want.body);
    // Messages: Anthropic's required fields, then the chat rules.
    let r = send(
        a,
        &post(
            "/v1/messages/render",
            r#"{"model":"tiny","messages":[]}"#,
            "",
        ),
    );
    assert_eq!(r.status_line, "HTTP/1.1 400 Bad Request");
    assert!(
        String::from_utf8_lossy(&r.body).contains("body.max_tokens"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = send(
        a,
        &post(
            "/v1/messages/render",
            r#"{"model":"nope","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}"#,
            "",
        ),
    );
    assert_eq!(r.status_line, "HTTP/1.1 404 Not Found");
    assert_eq!(r.json()["error"]["type"], "NotFoundError");
}

// ---------------------------------------------------------------- /server_info

#[test]
fn server_info_is_a_404_without_dev_mode() {
    let srv = start(options(true, false));
    let want = parse_raw(&fixture("vllm_http/48_err_404_route.response.bin"));
    for req in [
        common::get("/server_info"),
        common::get("/server_info?config_format=json"),
        post("/server_info", "{}", ""),
    ] {
        let got = send(srv.addr(), &req);
        assert_same_head("/server_info", &got, &want);
        assert_eq!(got.body, want.body);
    }
}

#[test]
fn server_info_in_dev_mode_has_the_captured_shape() {
    let mut o = options(false, false);
    o.server_dev_mode = true;
    let srv = start(o);
    for (tag, json) in [("01_server_info", false), ("02_server_info_json", true)] {
        let (got, want) = replay(srv.addr(), tag);
        assert_same_head(tag, &got, &want);
        let (g, w) = (got.json(), want.json());
        let top = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(top(&g), top(&w), "{tag}: top-level keys");
        assert_eq!(
            keys(&got.body)[0..1],
            keys(&want.body)[0..1],
            "{tag}: vllm_config first"
        );
        assert!(g["vllm_env"].is_object() && g["system_env"].is_object());
        assert!(g["system_env"]["python_version"].is_null());
        assert!(g["system_env"]["pip_packages"].is_null());
        assert!(g["system_env"]["os"].is_string());
        for (k, v) in g["vllm_env"].as_object().unwrap() {
            assert!(k.starts_with("VLLM_") && !k.contains("KEY"), "{k}");
            assert!(v.is_string());
        }
        if json {
            let c = &g["vllm_config"];
            for section in [
                "model_config",
                "cache_config",
                "parallel_config",
                "scheduler_config",
                "device_config",
            ] {
                assert!(c[section].is_object(), "{section}");
                assert!(w["vllm_config"][section].is_object(), "{section}");
            }
            assert_eq!(c["model_config"]["max_model_len"], 2048);
            assert_eq!(c["model_config"]["served_model_name"], "tiny");
            assert_eq!(c["cache_config"]["block_size"], 32);
            assert_eq!(c["cache_config"]["num_gpu_blocks"], 128);
            assert_eq!(c["device_config"], w["vllm_config"]["device_config"]);
            assert!(c["kv_events_config"].is_null());
        } else {
            let t = g["vllm_config"].as_str().unwrap();
            assert!(w["vllm_config"].is_string());
            assert!(t.starts_with("model='tiny', speculative_config=None, tokenizer="));
            for part in [
                "max_seq_len=2048",
                "served_model_name=tiny",
                "enable_prefix_caching=True",
                "device_config=cpu",
            ] {
                assert!(t.contains(part), "{part} in {t}");
                assert!(
                    w["vllm_config"].as_str().unwrap().contains(part),
                    "capture has {part}"
                );
            }
        }
    }
    // An unknown config_format is refused; the route is GET only.
    let r = send(srv.addr(), &common::get("/server_info?config_format=yaml"));
    assert_eq!(r.status_line, "HTTP/1.1 400 Bad Request");
    let r = send(srv.addr(), &post("/server_info", "{}", ""));
    assert_eq!(r.status_line, "HTTP/1.1 405 Method Not Allowed");
}

// ---------------------------------------------------------------- SGLang's probe routes

/// The SGLang router probes these and falls back on a 404: they must be vLLM's unknown-route
/// 404, byte for byte (but the date), whatever the flags.
#[test]
fn sglang_info_routes_are_the_unknown_route_404() {
    let want = parse_raw(&fixture("vllm_http/48_err_404_route.response.bin"));
    let mut o = options(true, false);
    o.server_dev_mode = true;
    for srv in [start(options(false, false)), start(o)] {
        for path in ["/get_server_info", "/model_info", "/get_model_info"] {
            for req in [common::get(path), post(path, "{}", "")] {
                let got = send(srv.addr(), &req);
                assert_same_head(path, &got, &want);
                assert_eq!(got.header("content-length"), want.header("content-length"));
                assert_eq!(got.body, want.body, "{path}");
            }
        }
    }
}

// ---------------------------------------------------------------- the binary

struct Bin(Child);

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary on an ephemeral port; returns it and its address.
fn binary(args: &[&str], env: &[(&str, &str)]) -> (Bin, SocketAddr) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_inferrail-sim"));
    cmd.args([
        "--port",
        "0",
        "--served-model-name",
        "tiny",
        "--zero-latency",
    ])
    .args(args)
    .env_remove("VLLM_SERVER_DEV_MODE")
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn inferrail-sim");
    let stdout = child.stdout.take().unwrap();
    let bin = Bin(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no url in {line:?}"));
    (bin, url.trim_start_matches("http://").parse().unwrap())
}

#[test]
fn binary_reads_dev_mode_from_the_environment_and_the_scale_out_flag() {
    let (_b, a) = binary(&[], &[]);
    assert_eq!(
        send(a, &common::get("/server_info")).status_line,
        "HTTP/1.1 404 Not Found"
    );
    let r = send(a, &post("/v1/chat/completions/render", common::CHAT, ""));
    assert_eq!(r.status_line, "HTTP/1.1 403 Forbidden");

    let (_b, a) = binary(
        &["--enable-scale-out"],
        &[
            ("VLLM_SERVER_DEV_MODE", "1"),
            ("VLLM_RENDER_TEST_MARK", "abc"),
            ("VLLM_API_KEY", "secret"),
        ],
    );
    let v = send(a, &common::get("/server_info?config_format=json")).json();
    let env = v["vllm_env"].as_object().unwrap();
    assert_eq!(env["VLLM_SERVER_DEV_MODE"], "1");
    assert_eq!(env["VLLM_RENDER_TEST_MARK"], "abc");
    assert!(!env.contains_key("VLLM_API_KEY"));
    let names: Vec<&String> = env.keys().collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(
        v["vllm_config"]["additional_config"]["inferrail_sim"]["enable_scale_out"],
        true
    );
    let r = send(a, &post("/v1/chat/completions/render", common::CHAT, ""));
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert!(r.json()["token_ids"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
}
