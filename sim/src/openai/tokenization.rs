//! The small utility routes: `/detokenize` parsing and body, `/load`, and `/kv_event_sources`.

use serde_json::Value;

use super::error::{push_json_str, ApiError, ValidationItem};
use super::request::{json_object, py_input, ServerInfo};

/// The `/detokenize` request: `{"model"?, "tokens": [int, ...]}`.
///
/// Errors as vLLM: invalid JSON and a missing or mistyped `tokens` are FastAPI validation errors
/// (400 `Bad Request`), a `model` this server does not serve a 404 `NotFoundError`.
pub fn parse_detokenize(body: &[u8], server: &ServerInfo) -> Result<Vec<u32>, ApiError> {
    let obj = json_object(body)?;
    let tokens = match obj.get("tokens") {
        None => {
            return Err(ApiError::validation(&[ValidationItem {
                kind: "missing",
                loc: "body.tokens".to_owned(),
                msg: "Field required",
                input: format!("'<dict of {} items>'", obj.len()),
                ctx: None,
            }]))
        }
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::validation(&[ValidationItem {
                kind: "list_type",
                loc: "body.tokens".to_owned(),
                msg: "Input should be a valid list",
                input: py_input(v),
                ctx: None,
            }]))
        }
    };
    let mut ids = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        match t.as_u64().and_then(|v| u32::try_from(v).ok()) {
            Some(id) => ids.push(id),
            None => {
                return Err(ApiError::validation(&[ValidationItem {
                    kind: "int_type",
                    loc: format!("body.tokens.{i}"),
                    msg: "Input should be a valid integer",
                    input: py_input(t),
                    ctx: None,
                }]))
            }
        }
    }
    if let Some(Value::String(m)) = obj.get("model") {
        if !server.served_model_names.iter().any(|s| s == m) {
            return Err(ApiError::unknown_model(m, &server.served_model_names));
        }
    }
    Ok(ids)
}

/// `/detokenize` body: `{"prompt":"<text>"}`.
pub fn detokenize_body(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str("{\"prompt\":");
    push_json_str(&mut out, text);
    out.push('}');
    out
}

/// `/load` body: `{"server_load":N}` (vLLM counts in-flight requests only with
/// `--enable-server-load-tracking`; otherwise it is always 0).
pub fn load_body(server_load: u64) -> String {
    format!("{{\"server_load\":{server_load}}}")
}

/// One DP rank's KV-event publisher as `/kv_event_sources` reports it (vLLM's
/// `KVEventsConfig` fields, in declaration order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEventSource<'a> {
    /// The data-parallel rank (the JSON key, as a string).
    pub rank: u32,
    /// `publisher`, e.g. `zmq`.
    pub publisher: &'a str,
    /// The PUB endpoint.
    pub endpoint: &'a str,
    /// The replay ROUTER endpoint, if any.
    pub replay_endpoint: Option<&'a str>,
    /// `buffer_steps` (vLLM default 10000).
    pub buffer_steps: u64,
    /// `hwm` (vLLM default 100000).
    pub hwm: u64,
    /// `max_queue_size` (vLLM default 100000).
    pub max_queue_size: u64,
    /// `topic`.
    pub topic: &'a str,
}

/// `/kv_event_sources` body: `{"<rank>":{KVEventsConfig}}` per rank with KV events enabled;
/// `{}` when KV events are off (vLLM reports enabled publishers only).
pub fn kv_event_sources_body(sources: &[KvEventSource<'_>]) -> String {
    let mut out = String::from("{");
    for (i, s) in sources.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(&s.rank.to_string());
        out.push_str("\":{\"enable_kv_cache_events\":true,\"publisher\":");
        push_json_str(&mut out, s.publisher);
        out.push_str(",\"endpoint\":");
        push_json_str(&mut out, s.endpoint);
        out.push_str(",\"replay_endpoint\":");
        match s.replay_endpoint {
            Some(r) => push_json_str(&mut out, r),
            None => out.push_str("null"),
        }
        out.push_str(&format!(
            ",\"buffer_steps\":{},\"hwm\":{},\"max_queue_size\":{},\"topic\":",
            s.buffer_steps, s.hwm, s.max_queue_size
        ));
        push_json_str(&mut out, s.topic);
        out.push('}');
    }
    out.push('}');
    out
}
