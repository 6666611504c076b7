//! Byte parity of `inferrail_sim::openai` against real vLLM 0.32 captures
//! (copied from the shared fixtures into tests/fixtures/openai/; `x`-prefixed names come from
//! http-extra/). Each exchange is rebuilt from the fixture's request plus the generated text,
//! token counts, ids and `created` the capture shows, and compared byte for byte.

use inferrail_sim::openai::*;
use serde_json::Value;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/openai/");

fn server() -> ServerInfo {
    ServerInfo {
        served_model_names: vec!["tiny".to_owned()],
        max_model_len: 2048,
    }
}

struct Req {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn api(&self) -> Api {
        match self.path.as_str() {
            "/v1/chat/completions" => Api::Chat,
            "/v1/completions" => Api::Completions,
            p => panic!("not a completion path {p}"),
        }
    }
}

fn load_req(tag: &str) -> Req {
    let raw = std::fs::read(format!("{DIR}{tag}.request.bin")).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let path = lines.next().unwrap().split(' ').nth(1).unwrap().to_owned();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    Req {
        path,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

fn load_body(tag: &str) -> String {
    std::fs::read_to_string(format!("{DIR}{tag}.body")).unwrap()
}

fn ids(v: &Value) -> Option<Vec<u32>> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_u64().unwrap() as u32).collect())
}

fn finish_of(choice: &Value) -> Option<Finish> {
    match choice["finish_reason"].as_str()? {
        "length" => Some(Finish::Length),
        "abort" => Some(Finish::Abort),
        "stop" => Some(match &choice["stop_reason"] {
            Value::Null => Finish::Eos,
            Value::String(s) => Finish::StopString(s.clone()),
            Value::Number(n) => Finish::StopToken(n.as_u64().unwrap() as u32),
            v => panic!("stop_reason {v}"),
        }),
        f => panic!("finish_reason {f}"),
    }
}

fn usage_of(u: &Value) -> Usage {
    let d = &u["prompt_tokens_details"];
    Usage {
        prompt_tokens: u["prompt_tokens"].as_u64().unwrap() as u32,
        completion_tokens: u["completion_tokens"].as_u64().unwrap() as u32,
        cached_tokens: d["cached_tokens"].as_u64().map(|c| c as u32),
        created_cache_tokens: d["created_cache_tokens"].as_u64().unwrap_or(0) as u32,
    }
}

/// Checks the response id rule and returns the random part vLLM used when no id was given.
fn check_id(api: Api, req: &Req, parsed: &CompletionRequest, id: &str) {
    let prefix = api.id_prefix();
    assert!(id.starts_with(prefix), "{id}");
    let random = &id[prefix.len()..];
    let x = req.header("X-Request-Id");
    let built = response_id(api, x, parsed.request_id.as_deref(), "0123456789abcdef");
    match x {
        Some(x) => assert_eq!(built, format!("{prefix}{x}")),
        None => {
            assert_eq!(built, format!("{prefix}0123456789abcdef"));
            assert_eq!(random.len(), 16, "vLLM's random ids are 16 hex digits");
        }
    }
}

fn check_nonstream(tag: &str) {
    let r = load_req(tag);
    let api = r.api();
    let expected = load_body(tag);
    let parsed = parse_request(api, &r.body, &server()).unwrap();
    assert!(!parsed.stream);
    let v: Value = serde_json::from_str(&expected).unwrap();
    let id = v["id"].as_str().unwrap();
    check_id(api, &r, &parsed, id);
    let ch = &v["choices"][0];
    let text = match api {
        Api::Chat => ch["message"]["content"].as_str().unwrap(),
        Api::Completions => ch["text"].as_str().unwrap(),
    };
    let finish = finish_of(ch).unwrap();
    let usage = usage_of(&v["usage"]);
    let token_ids = ids(&ch["token_ids"]);
    let prompt_ids = match api {
        Api::Chat => ids(&v["prompt_token_ids"]),
        Api::Completions => ids(&ch["prompt_token_ids"]),
    };
    assert_eq!(parsed.return_token_ids, token_ids.is_some());
    if let PromptInput::TokenIds(p) = &parsed.input {
        assert_eq!(p.len() as u32, usage.prompt_tokens);
    }
    let max = check_prompt_len(&parsed, usage.prompt_tokens, 2048).unwrap();
    if finish == Finish::Length {
        assert_eq!(max, usage.completion_tokens, "{tag}");
    }
    let meta = ResponseMeta {
        id,
        created: v["created"].as_u64().unwrap(),
        model: &parsed.model,
        system_fingerprint: v["system_fingerprint"].as_str().unwrap(),
    };
    let gen = Generated {
        text,
        finish,
        token_ids: token_ids.as_deref(),
        prompt_token_ids: prompt_ids.as_deref(),
    };
    let body = completion_body(api, &meta, &gen, &usage);
    assert_eq!(body, expected, "{tag}");
}

fn check_stream(tag: &str) {
    let r = load_req(tag);
    let api = r.api();
    let expected = load_body(tag);
    let parsed = parse_request(api, &r.body, &server()).unwrap();
    assert!(parsed.stream);
    let events: Vec<&str> = expected
        .split_terminator("\n\n")
        .map(|e| e.strip_prefix("data: ").unwrap())
        .collect();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let id = chunks[0]["id"].as_str().unwrap();
    check_id(api, &r, &parsed, id);
    let fp = chunks
        .iter()
        .find_map(|c| c["system_fingerprint"].as_str())
        .unwrap();
    let usage_chunk = chunks.iter().find(|c| c["choices"] == Value::Array(vec![]));
    assert_eq!(usage_chunk.is_some(), parsed.include_usage, "{tag}");
    let usage = usage_chunk.map(|c| usage_of(&c["usage"]));
    let meta = ResponseMeta {
        id,
        created: chunks[0]["created"].as_u64().unwrap(),
        model: &parsed.model,
        system_fingerprint: fp,
    };
    let prompt_tokens = usage.map_or(0, |u| u.prompt_tokens);
    let mut w = StreamWriter::new(
        api,
        meta,
        parsed.include_usage,
        parsed.continuous_usage_stats,
        prompt_tokens,
        None,
    );
    let mut out = String::new();
    w.start(&mut out);
    let mut n = 0;
    for c in &chunks {
        let Some(ch) = c["choices"].get(0) else {
            continue;
        };
        let text = match api {
            Api::Chat if ch["delta"].get("role").is_some() => continue,
            Api::Chat => ch["delta"]["content"].as_str().unwrap(),
            Api::Completions => ch["text"].as_str().unwrap(),
        };
        n += 1;
        w.token(&mut out, text, None, n, finish_of(ch).as_ref());
    }
    if let Some(u) = usage {
        assert_eq!(u.completion_tokens, n);
    }
    w.end(
        &mut out,
        &usage.unwrap_or(Usage {
            prompt_tokens: 0,
            completion_tokens: n,
            cached_tokens: None,
            created_cache_tokens: 0,
        }),
    );
    assert_eq!(out, expected, "{tag}");
}

fn check_error(tag: &str, status: u16) -> ApiError {
    let r = load_req(tag);
    let err = parse_request(r.api(), &r.body, &server()).unwrap_err();
    assert_eq!(err.status, status, "{tag}");
    assert_eq!(err.body, load_body(tag), "{tag}");
    err
}

#[test]
fn openai_chat_nonstream_parity() {
    for tag in [
        "10_chat_long_first",
        "11_chat_long_repeat",
        "15_chat_shared_system_other_user",
        "19_chat_return_token_ids",
        "20_chat_x_request_id",
        "21_chat_stop_string",
        "59_chat_after_reset",
        "x08_chat_cache_salt_abc_first",
        "x27_chat_x_request_id",
    ] {
        check_nonstream(tag);
    }
}

#[test]
fn openai_completions_nonstream_parity() {
    for tag in [
        "23_cmpl_long_first",
        "24_cmpl_long_repeat",
        "28_cmpl_token_ids_prompt",
        "29_cmpl_64_token_ids_first",
        "30_cmpl_64_token_ids_repeat",
        "x14_completion_cache_salt_abc",
    ] {
        check_nonstream(tag);
    }
}

#[test]
fn openai_stream_parity() {
    for tag in [
        "12_chat_stream_short",
        "13_chat_stream_long_usage",
        "14_chat_stream_continuous_usage",
        "22_chat_max_tokens_1_stream",
        "25_cmpl_stream",
        "26_cmpl_stream_usage",
        "x29_chat_stream_x_request_id",
    ] {
        check_stream(tag);
    }
}

#[test]
fn openai_parsed_fields() {
    let p = |tag: &str| {
        let r = load_req(tag);
        parse_request(r.api(), &r.body, &server()).unwrap()
    };
    assert_eq!(p("21_chat_stop_string").stop, vec!["e".to_owned()]);
    let c = p("14_chat_stream_continuous_usage");
    assert!(c.include_usage && c.continuous_usage_stats && c.stream);
    assert_eq!(c.max_tokens, Some(4));
    let t = p("28_cmpl_token_ids_prompt");
    assert_eq!(
        t.input,
        PromptInput::TokenIds(vec![0, 44, 545, 337, 1454, 16, 408, 695, 565, 1498, 35])
    );
    assert!(t.add_special_tokens);
    assert_eq!(
        p("x08_chat_cache_salt_abc_first").cache_salt.as_deref(),
        Some("abc")
    );
    let m = p("12_chat_stream_short");
    assert_eq!(
        m.input,
        PromptInput::Messages(vec![ChatMessage {
            role: "user".to_owned(),
            content: Some("Say hello in three words.".to_owned())
        }])
    );
    assert!(m.add_generation_prompt && !m.add_special_tokens && !m.include_usage);
    assert_eq!(m.model, "tiny");
}

#[test]
fn openai_error_parity() {
    check_error("32_err_bad_json", 400);
    check_error("33_err_missing_messages", 400);
    check_error("34_err_empty_messages", 400);
    check_error("35_err_unknown_model", 404);
    check_error("36_err_unknown_model_cmpl", 404);
    check_error("37_err_max_tokens_too_large", 400);
    check_error("38_err_max_tokens_too_large_cmpl", 400);
    check_error("40_err_stream_options_without_stream", 400);
    check_error("41_err_stream_options_stream_false_cmpl", 400);
    check_error("46_err_unknown_model_stream", 404);
    check_error("x13_chat_cache_salt_empty", 400);
    check_error("x31_err_unknown_model_request_id", 404);
}

#[test]
fn openai_prompt_too_long_parity() {
    // 39's request is 3,000 words; the prompt length is what matters.
    let body = br#"{"model":"tiny","prompt":"hello hello","max_tokens":4}"#;
    let req = parse_request(Api::Completions, body, &server()).unwrap();
    let err = check_prompt_len(&req, 3001, 2048).unwrap_err();
    assert_eq!(err.status, 400);
    assert_eq!(err.body, load_body("39_err_prompt_too_long"));
    assert_eq!(check_prompt_len(&req, 2044, 2048), Ok(4));
    // vLLM's get_max_tokens: max_tokens is clamped to the room left, not refused ...
    assert_eq!(check_prompt_len(&req, 2045, 2048), Ok(3));
    // ... until no room is left: SamplingParams refuses max_tokens=0.
    let full = check_prompt_len(&req, 2048, 2048).unwrap_err();
    assert_eq!(
        full.body,
        r#"{"error":{"message":"max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)","type":"BadRequestError","param":"max_tokens","code":400}}"#
    );
    // Completions default max_tokens to 16 (CompletionRequest.max_tokens).
    let open = parse_request(Api::Completions, br#"{"prompt":"x"}"#, &server()).unwrap();
    assert_eq!(check_prompt_len(&open, 2000, 2048), Ok(16));
    assert_eq!(check_prompt_len(&open, 2040, 2048), Ok(8));
}

#[test]
fn openai_routes_parity() {
    let e = route("GET", "/v1/nope").unwrap_err();
    assert_eq!(
        (e.status, e.body.as_str()),
        (404, load_body("48_err_404_route").as_str())
    );
    let e = route("GET", "/v1/chat/completions").unwrap_err();
    assert_eq!(e.status, 405);
    assert_eq!(e.allow, Some("POST"));
    assert_eq!(e.body, load_body("49_err_405_method"));
    assert_eq!(route("POST", "/v1/completions"), Ok(Route::Completions));
    assert_eq!(route("GET", "/health"), Ok(Route::Health));
    assert_eq!(VERSION_BODY, load_body("03_version"));
    assert_eq!(RESET_PREFIX_CACHE_BODY, load_body("58_reset_prefix_cache"));
}

#[test]
fn openai_models_parity() {
    let expected = load_body("02_models");
    let body = models_body(&[ModelCard {
        id: "tiny",
        created: 1796014365,
        root: "/tmp/vllmcpu/tiny-llama",
        max_model_len: 2048,
        permission_id: "modelperm-a843da29fcfe3012",
    }]);
    assert_eq!(body, expected);
}

#[test]
fn openai_unsupported_parameters_are_named() {
    for (tag, param) in [
        ("16_chat_logprobs", "logprobs"),
        ("17_chat_n2", "n"),
        ("18_chat_n2_stream", "n"),
        ("27_cmpl_logprobs_echo", "logprobs"),
        ("31_cmpl_n2", "n"),
    ] {
        let r = load_req(tag);
        // `n` is refused after vLLM's own sampling checks (stage 2).
        let e = parse_request(r.api(), &r.body, &server())
            .and_then(|q| check_prompt_len(&q, 10, 2048))
            .unwrap_err();
        assert_eq!(e.status, 400, "{tag}");
        let v: Value = serde_json::from_str(&e.body).unwrap();
        assert_eq!(v["error"]["param"], param, "{tag}");
        assert_eq!(v["error"]["type"], "BadRequestError");
        assert_eq!(v["error"]["code"], 400);
    }
    for (body, param) in [
        (r#"{"prompt":"x","echo":true}"#, "echo"),
        (r#"{"prompt":"x","best_of":2}"#, "best_of"),
        (r#"{"prompt":"x","suffix":"y"}"#, "suffix"),
        (r#"{"prompt":["a","b"]}"#, "prompt"),
        (r#"{"prompt":"x","prompt_logprobs":1}"#, "prompt_logprobs"),
        (
            r#"{"prompt":"x","response_format":{"type":"json_object"}}"#,
            "response_format",
        ),
    ] {
        let e = parse_request(Api::Completions, body.as_bytes(), &server()).unwrap_err();
        let v: Value = serde_json::from_str(&e.body).unwrap();
        assert_eq!(
            (e.status, v["error"]["param"].as_str()),
            (400, Some(param)),
            "{body}"
        );
    }
    let chat = |b: &str| parse_request(Api::Chat, b.as_bytes(), &server());
    let e = chat(r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#).unwrap_err();
    assert!(e.body.contains("\"param\":\"top_logprobs\""));
    let e = chat(r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#)
        .unwrap_err();
    assert!(e.body.contains("\"param\":\"messages\""));
    // What the simulator can answer faithfully is accepted.
    chat(r#"{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"n":1,"logprobs":false,"temperature":0.7,"seed":1,"top_p":0.9,"stop":"z"}"#)
        .unwrap();
    parse_request(
        Api::Completions,
        br#"{"prompt":[[1,2,3]],"n":1,"echo":false,"logprobs":null,"best_of":1}"#,
        &server(),
    )
    .unwrap();
}

#[test]
fn openai_python_json_errors() {
    // Positions and messages as CPython 3.12's json.loads reports them.
    for (text, pos, msg) in [
        ("", 0, "Expecting value"),
        (
            "{\"model\": \"tiny\", \"messages\": [",
            31,
            "Expecting value",
        ),
        (
            "{\"a\": 1,}",
            8,
            "Expecting property name enclosed in double quotes",
        ),
        ("{\"a\" 1}", 5, "Expecting ':' delimiter"),
        ("[1 2]", 3, "Expecting ',' delimiter"),
        ("[1,]", 3, "Expecting value"),
        ("\"abc", 0, "Unterminated string starting at"),
        ("{} x", 3, "Extra data"),
        ("{\"é\": tru}", 6, "Expecting value"),
        ("\"a\\qb\"", 2, "Invalid \\escape"),
        ("\"a\nb\"", 2, "Invalid control character at"),
        (
            "{'a': 1}",
            1,
            "Expecting property name enclosed in double quotes",
        ),
    ] {
        assert_eq!(
            python_json_error(text),
            Some((pos, msg.to_owned())),
            "{text:?}"
        );
    }
    assert_eq!(
        python_json_error("[NaN, -Infinity, 1e5, {\"a\": null}]"),
        None
    );
}

#[test]
fn openai_finish_variants_and_token_ids() {
    let meta = ResponseMeta {
        id: "cmpl-x",
        created: 7,
        model: "tiny",
        system_fingerprint: "fp",
    };
    let usage = Usage {
        prompt_tokens: 3,
        completion_tokens: 2,
        cached_tokens: None,
        created_cache_tokens: 0,
    };
    let gen = Generated {
        text: "a\"b",
        finish: Finish::StopString("e".to_owned()),
        token_ids: Some(&[5, 6]),
        prompt_token_ids: Some(&[1, 2, 3]),
    };
    let body = text_completion_body(&meta, &gen, &usage);
    assert!(body.contains(r#""text":"a\"b","logprobs":null,"finish_reason":"stop","stop_reason":"e","token_ids":[5,6],"prompt_logprobs":null,"prompt_token_ids":[1,2,3]"#), "{body}");
    assert!(body.contains(
        r#""completion_tokens":2,"prompt_tokens_details":null,"completion_tokens_details":null}"#
    ));
    let mut w = StreamWriter::new(Api::Chat, meta, true, false, 3, Some(&[1, 2, 3]));
    let mut out = String::new();
    w.start(&mut out);
    w.token(&mut out, "x", Some(&[9]), 1, Some(&Finish::StopToken(9)));
    w.end(&mut out, &usage);
    assert!(out.contains(r#""prompt_token_ids":[1,2,3],"prompt_text":null}"#));
    assert!(out.contains(r#""finish_reason":"stop","stop_reason":9,"token_ids":[9]}]}"#));
    assert!(out.contains(r#""usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2},"system_fingerprint":"fp"}"#));
    assert!(out.ends_with("data: [DONE]\n\n"));
}
