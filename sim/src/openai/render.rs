//! vLLM 0.32's scale-out render routes (`POST /v1/chat/completions/render`,
//! `/v1/completions/render`, `/v1/messages/render`) as pure functions: the 403 they answer
//! without `--enable-scale-out`, the `GenerateRequest` body they answer with it, and the
//! Anthropic Messages body's translation to a chat body.
//!
//! A render runs the same parsing, validation, chat template and tokenizer as the completion
//! handlers, then returns what the engine would be given instead of running it. Byte layout
//! from the captures (`http-extra/21`–`26`):
//! - keys `request_id, token_ids, token_offsets, features, content_parts, sampling_params,
//!   model, reasoning_ended, reasoning_parser_kwargs, return_token_ids, output_mode, stream,
//!   stream_options, cache_salt, priority, kv_transfer_params, ec_transfer_params`;
//! - `sampling_params`: `presence_penalty, frequency_penalty, repetition_penalty, temperature,
//!   [top_p, min_p], stop, stop_token_ids, max_tokens, output_kind: 2, skip_clone: true,
//!   bad_words, skip_reading_prefix_cache`. `top_p` and `min_p` are left out when the
//!   temperature is 0 (greedy) and present otherwise (the default temperature is 1.0).
//! - Unverified against a capture (no fixture sets them): `top_k` (after `top_p`, only when
//!   not 0 or -1), `seed` (after `min_p`), `ignore_eos` (after `stop_token_ids`, only when
//!   true), `min_tokens` (after `max_tokens`, only when > 0), and `stream_options` rendered as
//!   `{"include_usage":…,"continuous_usage_stats":…}`; their places follow `SamplingParams`'
//!   field order.
//! - `max_tokens` is the effective value: the request's, else the room the context leaves.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::error::{push_json_str, ApiError, ValidationItem};
use super::request::{json_object, CompletionRequest};

/// vLLM's 403 for a render route on a server started without `--enable-scale-out`
/// (exchange 00).
pub fn scale_out_disabled() -> ApiError {
    ApiError::vllm(
        403,
        "PermissionDeniedError",
        "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.",
        None,
    )
}

/// One rendered prompt: what the engine would be given for a request.
#[derive(Clone, Copy, Debug)]
pub struct Rendered<'a> {
    /// The response id (`chatcmpl-…` / `cmpl-…`).
    pub request_id: &'a str,
    /// The prompt token ids, exactly what the engine would prefill.
    pub token_ids: &'a [u32],
    /// The validated request.
    pub req: &'a CompletionRequest,
    /// The effective `max_tokens` (the request's, else the room the context leaves).
    pub max_tokens: u32,
}

fn push_float(out: &mut String, v: f64) {
    out.push_str(&inferrail_shards::pyfmt::finite_float_repr(v));
}

fn push_ids(out: &mut String, ids: &[u32]) {
    out.push('[');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{id}");
    }
    out.push(']');
}

/// Below this temperature vLLM samples greedily (`_SAMPLING_EPS`).
const SAMPLING_EPS: f64 = 1e-5;

/// Appends one `GenerateRequest` object (compact JSON, the capture's key order).
pub fn push_generate_request(out: &mut String, r: &Rendered<'_>) {
    let req = r.req;
    out.push_str("{\"request_id\":");
    push_json_str(out, r.request_id);
    out.push_str(",\"token_ids\":");
    push_ids(out, r.token_ids);
    out.push_str(",\"token_offsets\":null,\"features\":null,\"content_parts\":null");
    out.push_str(",\"sampling_params\":{\"presence_penalty\":");
    push_float(out, req.presence_penalty.unwrap_or(0.0));
    out.push_str(",\"frequency_penalty\":");
    push_float(out, req.frequency_penalty.unwrap_or(0.0));
    out.push_str(",\"repetition_penalty\":");
    push_float(out, req.repetition_penalty.unwrap_or(1.0));
    let temperature = req.temperature.unwrap_or(1.0);
    out.push_str(",\"temperature\":");
    push_float(out, temperature);
    if temperature >= SAMPLING_EPS {
        out.push_str(",\"top_p\":");
        push_float(out, req.top_p.unwrap_or(1.0));
        if let Some(k) = req.top_k.filter(|k| *k != 0 && *k != -1) {
            let _ = write!(out, ",\"top_k\":{k}");
        }
        out.push_str(",\"min_p\":");
        push_float(out, req.min_p.unwrap_or(0.0));
    }
    if let Some(seed) = req.seed {
        let _ = write!(out, ",\"seed\":{seed}");
    }
    out.push_str(",\"stop\":[");
    for (i, s) in req.stop.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(out, s);
    }
    out.push_str("],\"stop_token_ids\":");
    push_ids(out, &req.stop_token_ids);
    if req.ignore_eos {
        out.push_str(",\"ignore_eos\":true");
    }
    let _ = write!(out, ",\"max_tokens\":{}", r.max_tokens);
    if req.min_tokens > 0 {
        let _ = write!(out, ",\"min_tokens\":{}", req.min_tokens);
    }
    out.push_str(
        ",\"output_kind\":2,\"skip_clone\":true,\"bad_words\":[],\"skip_reading_prefix_cache\":false}",
    );
    out.push_str(",\"model\":");
    push_json_str(out, &req.model);
    out.push_str(",\"reasoning_ended\":null,\"reasoning_parser_kwargs\":null");
    out.push_str(",\"return_token_ids\":");
    out.push_str(match req.return_token_ids_param {
        None => "null",
        Some(true) => "true",
        Some(false) => "false",
    });
    out.push_str(",\"output_mode\":\"tokens\",\"stream\":");
    out.push_str(if req.stream { "true" } else { "false" });
    out.push_str(",\"stream_options\":");
    match req.stream_options {
        None => out.push_str("null"),
        Some((inc, cont)) => {
            let _ = write!(
                out,
                "{{\"include_usage\":{inc},\"continuous_usage_stats\":{cont}}}"
            );
        }
    }
    out.push_str(",\"cache_salt\":");
    match &req.cache_salt {
        Some(s) => push_json_str(out, s),
        None => out.push_str("null"),
    }
    out.push_str(",\"priority\":0,\"kv_transfer_params\":null,\"ec_transfer_params\":null}");
}

/// The chat render body: one `GenerateRequest` object.
pub fn chat_render_body(r: &Rendered<'_>) -> String {
    let mut out = String::with_capacity(512 + 6 * r.token_ids.len());
    push_generate_request(&mut out, r);
    out
}

/// The completions render body: a JSON array with one `GenerateRequest` per prompt.
pub fn completions_render_body(rs: &[Rendered<'_>]) -> String {
    let mut out = String::from("[");
    for (i, r) in rs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_generate_request(&mut out, r);
    }
    out.push(']');
    out
}

fn missing(key: &str, obj: &Map<String, Value>) -> ValidationItem {
    ValidationItem {
        kind: "missing",
        loc: format!("body.{key}"),
        msg: "Field required",
        input: format!("'<dict of {} items>'", obj.len()),
        ctx: None,
    }
}

/// Translates an Anthropic Messages body (`/v1/messages/render`) into the chat completions body
/// vLLM renders for it: `system` (a string or text blocks) becomes a leading system message, the
/// messages follow with their content, `stop_sequences` becomes `stop`, tools become function
/// tools (`input_schema` as `parameters`) and `tool_choice` `{"type":"auto"|"none"}` its string.
///
/// Errors as FastAPI: invalid JSON, a non-object body, and missing `model`, `messages` or
/// `max_tokens` (all missing ones, in the model's field order) are validation errors. Content
/// blocks other than text reach the chat parser, which refuses them as for chat.
pub fn anthropic_to_chat(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let obj = json_object(body)?;
    let missing_items: Vec<ValidationItem> = ["model", "messages", "max_tokens"]
        .into_iter()
        .filter(|k| !obj.contains_key(*k))
        .map(|k| missing(k, &obj))
        .collect();
    if !missing_items.is_empty() {
        return Err(ApiError::validation(&missing_items));
    }
    let mut chat = Map::new();
    chat.insert("model".into(), obj["model"].clone());
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(system_message(Value::String(s.clone()))),
        Some(Value::Array(blocks)) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            messages.push(system_message(Value::String(texts.join("\n"))));
        }
        Some(other) => messages.push(system_message(other.clone())),
    }
    match &obj["messages"] {
        Value::Array(items) => {
            for m in items {
                messages.push(anthropic_message(m));
            }
            chat.insert("messages".into(), Value::Array(messages));
        }
        // Not a list: the chat parser reports the type error.
        other => {
            chat.insert("messages".into(), other.clone());
        }
    }
    chat.insert("max_tokens".into(), obj["max_tokens"].clone());
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("stop_sequences", "stop"),
        ("stream", "stream"),
    ] {
        if let Some(v) = obj.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    if let Some(Value::Array(tools)) = obj.get("tools") {
        let converted: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                for (from, to) in [
                    ("name", "name"),
                    ("description", "description"),
                    ("input_schema", "parameters"),
                ] {
                    if let Some(v) = t.get(from) {
                        f.insert(to.into(), v.clone());
                    }
                }
                let mut tool = Map::new();
                tool.insert("type".into(), Value::String("function".into()));
                tool.insert("function".into(), Value::Object(f));
                Value::Object(tool)
            })
            .collect();
        chat.insert("tools".into(), Value::Array(converted));
    }
    if let Some(tc) = obj.get("tool_choice").filter(|v| !v.is_null()) {
        let choice = match tc.get("type").and_then(Value::as_str) {
            Some(t @ ("auto" | "none")) => Value::String(t.to_owned()),
            Some("any") => Value::String("required".into()),
            _ => tc.clone(),
        };
        chat.insert("tool_choice".into(), choice);
    }
    serde_json::to_vec(&Value::Object(chat)).map_err(|_| ApiError::bad_json(body))
}

fn system_message(content: Value) -> Value {
    let mut m = Map::new();
    m.insert("role".into(), Value::String("system".into()));
    m.insert("content".into(), content);
    Value::Object(m)
}

/// An Anthropic message as a chat message: text blocks become text parts; other blocks are kept
/// as they are (the chat parser refuses them).
fn anthropic_message(m: &Value) -> Value {
    let Value::Object(o) = m else {
        return m.clone();
    };
    let mut out = Map::new();
    if let Some(r) = o.get("role") {
        out.insert("role".into(), r.clone());
    }
    if let Some(c) = o.get("content") {
        out.insert("content".into(), c.clone());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_is_the_captured_403() {
        let e = scale_out_disabled();
        assert_eq!(e.status, 403);
        assert_eq!(
            e.body,
            "{\"error\":{\"message\":\"Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.\",\"type\":\"PermissionDeniedError\",\"param\":null,\"code\":403}}"
        );
    }

    #[test]
    fn anthropic_system_and_stop_sequences_translate() {
        let body = br#"{"model":"tiny","max_tokens":6,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"messages":[{"role":"user","content":"hi"}],"stop_sequences":["x"]}"#;
        let chat: Value = serde_json::from_slice(&anthropic_to_chat(body).unwrap()).unwrap();
        assert_eq!(chat["messages"][0]["content"], "a\nb");
        assert_eq!(chat["messages"][1]["role"], "user");
        assert_eq!(chat["stop"][0], "x");
        assert_eq!(chat["max_tokens"], 6);
    }

    #[test]
    fn anthropic_missing_fields_are_validation_errors() {
        let e = anthropic_to_chat(br#"{"model":"tiny"}"#).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("2 validation errors"), "{}", e.body);
        assert!(e.body.contains("body.messages") && e.body.contains("body.max_tokens"));
        assert_eq!(anthropic_to_chat(b"{").unwrap_err().status, 400);
    }
}
