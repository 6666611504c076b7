//! Each rule's status, message and `param`, through [`parse_request`] and
//! [`check_prompt_len`] as the HTTP layer runs them.

use crate::openai::{check_prompt_len, parse_request, Api, ApiError, ServerInfo};

fn server() -> ServerInfo {
    ServerInfo {
        served_model_names: vec!["tiny".to_owned()],
        max_model_len: 2048,
    }
}

/// The error a chat (or completion) request with `extra` fields gets, prompt of 10 tokens.
fn err(api: Api, extra: &str) -> ApiError {
    let head = match api {
        Api::Chat => r#"{"messages":[{"role":"user","content":"hi"}]"#,
        Api::Completions => r#"{"prompt":"hi""#,
    };
    let body = format!("{head}{extra}}}");
    parse_request(api, body.as_bytes(), &server())
        .and_then(|q| check_prompt_len(&q, 10, 2048))
        .expect_err(&body)
}

fn vllm(message: &str, param: Option<&str>) -> String {
    ApiError::vllm(400, "BadRequestError", message, param).body
}

fn named(message: &str, param: &str, value: &str) -> String {
    vllm(
        &format!("{message} (parameter={param}, value={value})"),
        Some(param),
    )
}

#[test]
fn temperature() {
    for api in [Api::Chat, Api::Completions] {
        let e = err(api, r#","temperature":-0.5"#);
        assert_eq!(e.status, 400);
        let want = named(
            "temperature must be non-negative, got -0.5.",
            "temperature",
            "-0.5",
        );
        assert_eq!(e.body, want);
        // An int is a float to pydantic: Python shows -1.0.
        let want = named(
            "temperature must be non-negative, got -1.0.",
            "temperature",
            "-1.0",
        );
        assert_eq!(err(api, r#","temperature":-1"#).body, want);
        let want = named(
            "temperature must be in [0, 2], got 2.5.",
            "temperature",
            "2.5",
        );
        assert_eq!(err(api, r#","temperature":2.5"#).body, want);
    }
    let want = named(
        "temperature must be a finite number, got nan.",
        "temperature",
        "nan",
    );
    assert_eq!(err(Api::Chat, r#","temperature":NaN"#).body, want);
    let want = named(
        "temperature must be a finite number, got inf.",
        "temperature",
        "inf",
    );
    assert_eq!(err(Api::Chat, r#","temperature":1e999"#).body, want);
    // A numeric string is a float in pydantic's lax mode; other strings are a type error.
    let want = named(
        "temperature must be non-negative, got -2.0.",
        "temperature",
        "-2.0",
    );
    assert_eq!(err(Api::Chat, r#","temperature":"-2""#).body, want);
    let e = err(Api::Chat, r#","temperature":"hot""#);
    assert!(
        e.body
            .contains("'type': 'float_parsing', 'loc': 'body.temperature'"),
        "{}",
        e.body
    );
    assert!(
        e.body.contains(r#""param":"body.temperature""#),
        "{}",
        e.body
    );
}

#[test]
fn n() {
    assert_eq!(
        err(Api::Chat, r#","n":0"#).body,
        vllm("n must be at least 1, got 0.", None)
    );
    assert_eq!(
        err(Api::Completions, r#","n":-3"#).body,
        vllm("n must be at least 1, got -3.", None)
    );
    assert_eq!(
        err(Api::Chat, r#","n":20000"#).body,
        vllm("n must be at most 16384, got 20000. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.", None)
    );
    assert_eq!(
        err(Api::Chat, r#","n":2,"temperature":0"#).body,
        vllm("n must be 1 when using greedy sampling, got 2.", None)
    );
    // n > 1 that vLLM would serve: the simulator's own refusal, naming n.
    let e = err(Api::Chat, r#","n":2,"temperature":0.7"#);
    assert!(e.body.contains(r#""param":"n""#), "{}", e.body);
}

#[test]
fn top_p_top_k_min_p() {
    let want = named("top_p must be in (0, 1], got 0.0.", "top_p", "0.0");
    assert_eq!(err(Api::Chat, r#","top_p":0"#).body, want);
    let want = named("top_p must be in (0, 1], got 1.5.", "top_p", "1.5");
    assert_eq!(err(Api::Completions, r#","top_p":1.5"#).body, want);
    let want = vllm("top_k must be 0 (disable), or at least 1, got -2.", None);
    assert_eq!(err(Api::Chat, r#","top_k":-2"#).body, want);
    let want = vllm("min_p must be in [0, 1], got 1.5.", None);
    assert_eq!(err(Api::Chat, r#","min_p":1.5"#).body, want);
    // Greedy sampling resets top_p/top_k/min_p only after the checks.
    let want = named("top_p must be in (0, 1], got 0.0.", "top_p", "0.0");
    assert_eq!(err(Api::Chat, r#","top_p":0,"temperature":0"#).body, want);
}

#[test]
fn penalties() {
    let want = vllm("presence_penalty must be in [-2, 2], got 2.5.", None);
    assert_eq!(err(Api::Chat, r#","presence_penalty":2.5"#).body, want);
    let want = vllm("frequency_penalty must be in [-2, 2], got -3.0.", None);
    assert_eq!(
        err(Api::Completions, r#","frequency_penalty":-3"#).body,
        want
    );
    let want = vllm(
        "repetition_penalty must be greater than zero, got 0.0.",
        None,
    );
    assert_eq!(err(Api::Chat, r#","repetition_penalty":0"#).body, want);
    let want = vllm("repetition_penalty must be a finite number, got inf.", None);
    assert_eq!(
        err(Api::Chat, r#","repetition_penalty":Infinity"#).body,
        want
    );
}

#[test]
fn max_tokens_and_min_tokens() {
    let want = named("max_tokens must be at least 1, got 0.", "max_tokens", "0");
    assert_eq!(err(Api::Chat, r#","max_tokens":0"#).body, want);
    assert_eq!(err(Api::Completions, r#","max_tokens":0"#).body, want);
    let want = named("max_tokens must be at least 1, got -5.", "max_tokens", "-5");
    assert_eq!(err(Api::Chat, r#","max_completion_tokens":-5"#).body, want);
    // The context check names the field the value came from.
    let want = named(
        "max_completion_tokens=5000 cannot be greater than max_model_len=2048. Please request fewer output tokens.",
        "max_completion_tokens",
        "5000",
    );
    assert_eq!(
        err(Api::Chat, r#","max_completion_tokens":5000"#).body,
        want
    );
    let want = vllm(
        "min_tokens must be greater than or equal to 0, got -1.",
        None,
    );
    assert_eq!(err(Api::Chat, r#","min_tokens":-1"#).body, want);
    let want = vllm(
        "min_tokens must be less than or equal to max_tokens=4, got 5.",
        None,
    );
    assert_eq!(
        err(Api::Chat, r#","max_tokens":4,"min_tokens":5"#).body,
        want
    );
    // Completions default to 16 tokens.
    let want = vllm(
        "min_tokens must be less than or equal to max_tokens=16, got 17.",
        None,
    );
    assert_eq!(err(Api::Completions, r#","min_tokens":17"#).body, want);
}

#[test]
fn logprobs_ranges() {
    let want = named(
        "`top_logprobs` must be a positive value or -1.",
        "top_logprobs",
        "-2",
    );
    assert_eq!(
        err(Api::Chat, r#","logprobs":true,"top_logprobs":-2"#).body,
        want
    );
    let want = vllm(
        "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
        Some("top_logprobs"),
    );
    assert_eq!(err(Api::Chat, r#","top_logprobs":2"#).body, want);
    let want = named("`top_logprobs` must be an integer.", "top_logprobs", "two");
    assert_eq!(err(Api::Chat, r#","top_logprobs":"two""#).body, want);
    let want = named(
        "`logprobs` must be a positive value or -1.",
        "logprobs",
        "-3",
    );
    assert_eq!(err(Api::Completions, r#","logprobs":-3"#).body, want);
    let want = vllm(
        "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
        Some("prompt_logprobs"),
    );
    assert_eq!(
        err(Api::Completions, r#","prompt_logprobs":1,"stream":true"#).body,
        want
    );
}

#[test]
fn stop_and_seed_and_tools() {
    assert_eq!(
        err(Api::Chat, r#","stop":["a",""]"#).body,
        vllm("stop cannot contain an empty string.", None)
    );
    let e = err(Api::Chat, r#","stop_token_ids":["x"]"#);
    assert!(
        e.body.contains("'loc': 'body.stop_token_ids.0'"),
        "{}",
        e.body
    );
    let e = err(Api::Chat, r#","seed":"abc""#);
    assert!(e.body.contains(r#""param":"body.seed""#), "{}", e.body);
    let want = vllm(
        "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely. (parameter=tools)",
        Some("tools"),
    );
    assert_eq!(err(Api::Chat, r#","tools":[]"#).body, want);
    let want = vllm(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        None,
    );
    assert_eq!(
        err(
            Api::Chat,
            r#","continue_final_message":true,"add_generation_prompt":true"#
        )
        .body,
        want
    );
    let want = vllm(
        "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
        Some("prompt"),
    );
    let e = parse_request(Api::Completions, br#"{"prompt":""}"#, &server()).expect_err("empty");
    assert_eq!(e.body, want);
}

#[test]
fn stream_options_follow_python_truthiness() {
    // `{}` is falsy: no error; `"stream":"yes"` is truthy (and parses as true).
    let ok = |b: &str| parse_request(Api::Chat, b.as_bytes(), &server()).is_ok();
    assert!(ok(
        r#"{"messages":[{"role":"user","content":"hi"}],"stream_options":{}}"#
    ));
    assert!(ok(
        r#"{"messages":[{"role":"user","content":"hi"}],"stream":"yes","stream_options":{"include_usage":true}}"#
    ));
}

#[test]
fn hostile_values_are_a_400() {
    for extra in [
        r#","temperature":"1e400""#,
        r#","temperature":[1]"#,
        r#","n":1e300"#,
        r#","max_tokens":99999999999999999999999999"#,
        r#","top_k":-Infinity"#,
        r#","min_tokens":NaN"#,
        r#","stop":{"a":1}"#,
        r#","logprobs":{},"top_logprobs":1e308"#,
    ] {
        let body = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
        let got = parse_request(Api::Chat, body.as_bytes(), &server())
            .and_then(|q| check_prompt_len(&q, 10, 2048));
        assert_eq!(got.map_err(|e| e.status), Err(400), "{body}");
    }
}
