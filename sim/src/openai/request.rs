//! Parsing and validating `/v1/chat/completions` and `/v1/completions` bodies as vLLM 0.32 does.
//!
//! Two stages, because some checks need the prompt's token count, which only the engine's
//! tokenizer knows:
//! 1. [`parse_request`]: JSON, the request model's "before" validators
//!    ([`super::validators`]), field types (FastAPI/pydantic errors), model check (404),
//!    empty conversation, `max_tokens > max_model_len`, then the parameters the simulator
//!    refuses.
//! 2. [`check_prompt_len`]: prompt against `max_model_len`, `max_tokens` clamped to the room
//!    left, then `SamplingParams`' checks ([`super::sampling`]) and the `n != 1` refusal;
//!    returns the effective `max_tokens`.

use serde_json::{Map, Value};

use super::error::{ApiError, ValidationItem};
use super::sampling;
use super::validators::before_validators;

/// Which completion API a request uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
}

impl Api {
    /// The response id prefix vLLM uses.
    pub fn id_prefix(self) -> &'static str {
        match self {
            Api::Chat => "chatcmpl-",
            Api::Completions => "cmpl-",
        }
    }
}

/// vLLM's 400 for tools with `tool_choice` "auto" (the default when tools are given) on a
/// server without `--enable-auto-tool-choice` and `--tool-call-parser`.
pub const AUTO_TOOL_CHOICE: &str =
    "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set";

/// What the server serves, for request validation.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    /// `--served-model-name` values (the first is the name echoed in responses).
    pub served_model_names: Vec<String>,
    /// `--max-model-len`.
    pub max_model_len: u32,
}

/// One chat message (text content only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `role`.
    pub role: String,
    /// The text content (a list of text parts is joined with `\n`, as vLLM's default template
    /// content format does); `None` for `content: null`.
    pub content: Option<String>,
}

/// The prompt of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptInput {
    /// Chat messages, for the chat template.
    Messages(Vec<ChatMessage>),
    /// A completion prompt string (or a one-element list of strings).
    Text(String),
    /// A completion prompt given as token ids (or a one-element list of such lists).
    TokenIds(Vec<u32>),
}

/// A validated completion request: what the engine needs to simulate the answer.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    /// Which API.
    pub api: Api,
    /// The served model name to echo in responses.
    pub model: String,
    /// The prompt.
    pub input: PromptInput,
    /// `max_completion_tokens` or `max_tokens` as given (chat prefers the former); checked
    /// against the context in [`check_prompt_len`].
    pub max_tokens: Option<i64>,
    /// Which field `max_tokens` came from (`max_completion_tokens` or `max_tokens`), as vLLM
    /// names it in the `max_model_len` error.
    pub max_tokens_param: &'static str,
    /// `n` (default 1; only 1 is served, see [`parse_request`]).
    pub n: i64,
    /// Chat: `logprobs` (a bool).
    pub logprobs_on: bool,
    /// Chat: `top_logprobs` (null reads as 0).
    pub top_logprobs: i64,
    /// Completions: `logprobs` (a count).
    pub logprobs: Option<i64>,
    /// `prompt_logprobs`.
    pub prompt_logprobs: Option<i64>,
    /// `include_stop_str_in_output`: a matched stop string stays in the text.
    pub include_stop_str_in_output: bool,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (vLLM extension: usage on every chunk).
    pub continuous_usage_stats: bool,
    /// `stop` strings.
    pub stop: Vec<String>,
    /// `stop_token_ids`.
    pub stop_token_ids: Vec<u32>,
    /// `ignore_eos`.
    pub ignore_eos: bool,
    /// `min_tokens` (negative values are refused by [`check_prompt_len`]).
    pub min_tokens: i64,
    /// `return_token_ids` (vLLM extension).
    pub return_token_ids: bool,
    /// `return_token_ids` as sent (`None` when absent or null), for the render routes.
    pub return_token_ids_param: Option<bool>,
    /// `cache_salt` (non-empty when present).
    pub cache_salt: Option<String>,
    /// The body's `request_id` field (used for the response id when no `X-Request-Id`).
    pub request_id: Option<String>,
    /// Chat: `add_generation_prompt` (default true).
    pub add_generation_prompt: bool,
    /// Chat: `continue_final_message`.
    pub continue_final_message: bool,
    /// `add_special_tokens` (chat default false, completions default true).
    pub add_special_tokens: bool,
    /// `temperature` (accepted; the simulator's text does not depend on it).
    pub temperature: Option<f64>,
    /// `seed` (accepted).
    pub seed: Option<i64>,
    /// `top_p` (accepted; reported by the render routes).
    pub top_p: Option<f64>,
    /// `top_k` (accepted; reported by the render routes).
    pub top_k: Option<i64>,
    /// `min_p` (accepted; reported by the render routes).
    pub min_p: Option<f64>,
    /// `presence_penalty` (accepted; reported by the render routes).
    pub presence_penalty: Option<f64>,
    /// `frequency_penalty` (accepted; reported by the render routes).
    pub frequency_penalty: Option<f64>,
    /// `repetition_penalty` (accepted; reported by the render routes).
    pub repetition_penalty: Option<f64>,
    /// `stream_options` as sent (`include_usage`, `continuous_usage_stats`), `None` when absent.
    pub stream_options: Option<(bool, bool)>,
}

/// The response id vLLM gives a request: `X-Request-Id` header if sent, else the body's
/// `request_id`, else `random` (vLLM: 16 hex digits), after the API's prefix.
pub fn response_id(
    api: Api,
    x_request_id: Option<&str>,
    body_request_id: Option<&str>,
    random: &str,
) -> String {
    let base = x_request_id
        .or(body_request_id.filter(|s| !s.is_empty()))
        .unwrap_or(random);
    format!("{}{base}", api.id_prefix())
}

/// Parses and validates a request body (stage 1). Errors are vLLM's status and bytes.
pub fn parse_request(
    api: Api,
    body: &[u8],
    server: &ServerInfo,
) -> Result<CompletionRequest, ApiError> {
    let obj = json_object(body)?;
    before_validators(api, &obj)?;
    let f = Fields { obj: &obj };

    // pydantic: fields and types.
    let input = match api {
        Api::Chat => PromptInput::Messages(f.messages()?),
        Api::Completions => f.prompt()?,
    };
    let model = f.opt_str("model")?;
    let stream = f.opt_bool("stream")?.unwrap_or(false);
    let (max_tokens, max_tokens_param) = match api {
        Api::Chat => match f.opt_i64("max_completion_tokens")? {
            Some(v) => (Some(v), "max_completion_tokens"),
            None => (f.opt_i64("max_tokens")?, "max_tokens"),
        },
        // `normalize_null_max_tokens`: null reads as the default, 16.
        Api::Completions => (Some(f.opt_i64("max_tokens")?.unwrap_or(16)), "max_tokens"),
    };
    let n = f.opt_i64("n")?.unwrap_or(1);
    let (logprobs_on, top_logprobs, logprobs) = match api {
        Api::Chat => (
            f.opt_bool("logprobs")?.unwrap_or(false),
            f.opt_i64("top_logprobs")?.unwrap_or(0),
            None,
        ),
        Api::Completions => (false, 0, f.opt_i64("logprobs")?),
    };
    let prompt_logprobs = f.opt_i64("prompt_logprobs")?;
    let include_stop_str_in_output = f.opt_bool("include_stop_str_in_output")?.unwrap_or(false);
    let (include_usage, continuous_usage_stats, has_stream_options) = f.stream_options()?;
    let stop = f.stop()?;
    let stop_token_ids = f.int_list("stop_token_ids")?;
    let ignore_eos = f.opt_bool("ignore_eos")?.unwrap_or(false);
    let min_tokens = f.opt_i64("min_tokens")?.unwrap_or(0);
    let return_token_ids_param = f.opt_bool("return_token_ids")?;
    let return_token_ids = return_token_ids_param.unwrap_or(false);
    let cache_salt = f.opt_str("cache_salt")?;
    let request_id = f.opt_str("request_id")?;
    let add_generation_prompt = f.opt_bool("add_generation_prompt")?.unwrap_or(true);
    let continue_final_message = f.opt_bool("continue_final_message")?.unwrap_or(false);
    let add_special_tokens = f
        .opt_bool("add_special_tokens")?
        .unwrap_or(api == Api::Completions);
    let temperature = f.opt_float("temperature")?;
    let seed = f.opt_i64("seed")?;
    let top_p = f.opt_float("top_p")?;
    let top_k = f.opt_i64("top_k")?;
    let min_p = f.opt_float("min_p")?;
    let presence_penalty = f.opt_float("presence_penalty")?;
    let frequency_penalty = f.opt_float("frequency_penalty")?;
    let repetition_penalty = f.opt_float("repetition_penalty")?;

    // Serving layer: model check first.
    let model = match model.as_deref() {
        None | Some("") => server.served_model_names[0].clone(),
        Some(m) if server.served_model_names.iter().any(|n| n == m) => {
            server.served_model_names[0].clone()
        }
        Some(m) => return Err(ApiError::unknown_model(m, &server.served_model_names)),
    };
    if let PromptInput::Messages(m) = &input {
        if m.is_empty() {
            return Err(ApiError::bad_request(
                "Cannot apply chat template to an empty conversation. Provide at least one message.",
            ));
        }
    }
    // The renderer's `TokenizeParams`: the requested output against the context.
    if let Some(mt) = max_tokens {
        if mt > i64::from(server.max_model_len) {
            return Err(ApiError::invalid_param(
                &format!(
                    "{max_tokens_param}={mt} cannot be greater than max_model_len={}. Please request fewer output tokens.",
                    server.max_model_len
                ),
                max_tokens_param,
                Some(&mt.to_string()),
            ));
        }
    }

    f.refuse_unsupported(api)?;

    Ok(CompletionRequest {
        api,
        model,
        input,
        max_tokens,
        max_tokens_param,
        n,
        logprobs_on,
        top_logprobs,
        logprobs,
        prompt_logprobs,
        include_stop_str_in_output,
        stream,
        include_usage: stream && include_usage,
        continuous_usage_stats: stream && continuous_usage_stats,
        stop,
        stop_token_ids,
        ignore_eos,
        min_tokens,
        return_token_ids,
        return_token_ids_param,
        cache_salt,
        request_id,
        add_generation_prompt,
        continue_final_message,
        add_special_tokens,
        temperature,
        seed,
        top_p,
        top_k,
        min_p,
        presence_penalty,
        frequency_penalty,
        repetition_penalty,
        stream_options: has_stream_options.then_some((include_usage, continuous_usage_stats)),
    })
}

/// Stage 2: checks the tokenized prompt length against `max_model_len`, clamps `max_tokens`
/// to the room left (vLLM's `get_max_tokens`: the smaller of the two, the room when unset),
/// then runs the `SamplingParams` checks on that value. Returns the effective `max_tokens`.
pub fn check_prompt_len(
    req: &CompletionRequest,
    prompt_tokens: u32,
    max_model_len: u32,
) -> Result<u32, ApiError> {
    if prompt_tokens > max_model_len {
        // Text is tokenized with truncation at max_model_len + 1; token ids are counted as sent.
        let count = match req.input {
            PromptInput::TokenIds(_) => prompt_tokens,
            _ => max_model_len + 1,
        };
        let qualifier = if count == max_model_len + 1 {
            "at least "
        } else {
            ""
        };
        return Err(ApiError::invalid_param(
            &format!(
                "This model's maximum context length is {max_model_len} tokens. However, your prompt contains {qualifier}{count} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
            ),
            "input_tokens",
            Some(&count.to_string()),
        ));
    }
    let room = i64::from(max_model_len - prompt_tokens);
    let effective = req.max_tokens.map_or(room, |mt| mt.min(room));
    sampling::verify(req, effective)?;
    if req.n != 1 {
        return Err(ApiError::unsupported(
            "n",
            &req.n.to_string(),
            "n != 1 (several choices)",
        ));
    }
    u32::try_from(effective).map_err(|_| ApiError::bad_request("max_tokens out of range"))
}

/// The body as a JSON object: vLLM's 400 for bytes that are not JSON, and pydantic's
/// `model_attributes_type` error for JSON that is not an object.
pub(crate) fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.is_empty() {
        // FastAPI leaves an empty body as None: the body field is missing.
        return Err(ApiError::validation(&[ValidationItem {
            kind: "missing",
            loc: "body".to_owned(),
            msg: "Field required",
            input: "None".to_owned(),
            ctx: None,
        }]));
    }
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_json(body))?;
            if super::error::python_json_error(text).is_some() {
                return Err(ApiError::bad_json(body));
            }
            // Python accepts what serde does not: NaN, ±Infinity, numbers beyond f64.
            serde_json::from_str(&super::pyjson::with_sentinels(text))
                .map_err(|_| ApiError::bad_json(body))?
        }
    };
    match value {
        Value::Object(obj) => Ok(obj),
        other => Err(ApiError::validation(&[ValidationItem {
            kind: "model_attributes_type",
            loc: "body".to_owned(),
            msg: "Input should be a valid dictionary or object to extract fields from",
            input: py_input(&other),
            ctx: None,
        }])),
    }
}

/// Python rendering of a pydantic error's `input` as vLLM shows it.
pub(crate) fn py_input(v: &Value) -> String {
    match v {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if super::pyjson::sentinel(s).is_some() => {
            super::sampling::py_float(super::pyjson::sentinel(s).unwrap_or(f64::NAN))
        }
        Value::String(s) => {
            let mut out = String::new();
            super::error::push_py_repr(&mut out, s);
            out
        }
        Value::Array(a) => format!("'<list of {} items>'", a.len()),
        Value::Object(o) => format!("'<dict of {} items>'", o.len()),
    }
}

struct Fields<'a> {
    obj: &'a Map<String, Value>,
}

fn type_error(loc: &str, kind: &'static str, msg: &'static str, input: &Value) -> ApiError {
    ApiError::validation(&[ValidationItem {
        kind,
        loc: format!("body.{loc}"),
        msg,
        input: py_input(input),
        ctx: None,
    }])
}

fn non_null<'v>(obj: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    obj.get(key).filter(|v| !v.is_null())
}

impl Fields<'_> {
    fn missing(&self, key: &str) -> ApiError {
        ApiError::validation(&[ValidationItem {
            kind: "missing",
            loc: format!("body.{key}"),
            msg: "Field required",
            input: format!("'<dict of {} items>'", self.obj.len()),
            ctx: None,
        }])
    }

    fn messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let Some(v) = self.obj.get("messages") else {
            return Err(self.missing("messages"));
        };
        let Value::Array(items) = v else {
            return Err(type_error(
                "messages",
                "list_type",
                "Input should be a valid list",
                v,
            ));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let loc = format!("messages.{i}");
            let Value::Object(m) = item else {
                return Err(type_error(
                    &loc,
                    "model_attributes_type",
                    "Input should be a valid dictionary or object to extract fields from",
                    item,
                ));
            };
            let role = match m.get("role") {
                Some(Value::String(r)) => r.clone(),
                Some(other) => {
                    return Err(type_error(
                        &format!("{loc}.role"),
                        "string_type",
                        "Input should be a valid string",
                        other,
                    ))
                }
                None => {
                    return Err(ApiError::validation(&[ValidationItem {
                        kind: "missing",
                        loc: format!("body.{loc}.role"),
                        msg: "Field required",
                        input: format!("'<dict of {} items>'", m.len()),
                        ctx: None,
                    }]))
                }
            };
            let content = match m.get("content") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(parts)) => {
                    let mut texts = Vec::with_capacity(parts.len());
                    for part in parts {
                        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                        match (kind, part.get("text").and_then(Value::as_str)) {
                            ("text", Some(t)) => texts.push(t),
                            _ => {
                                return Err(ApiError::unsupported(
                                    "messages",
                                    &format!("content part type {kind:?}"),
                                    "non-text message content (images, audio, files)",
                                ))
                            }
                        }
                    }
                    Some(texts.join("\n"))
                }
                Some(other) => {
                    return Err(type_error(
                        &format!("{loc}.content"),
                        "string_type",
                        "Input should be a valid string",
                        other,
                    ))
                }
            };
            if non_null(m, "tool_calls").is_some() {
                return Err(ApiError::unsupported(
                    "messages",
                    "tool_calls",
                    "tool calls in messages",
                ));
            }
            out.push(ChatMessage { role, content });
        }
        Ok(out)
    }

    fn prompt(&self) -> Result<PromptInput, ApiError> {
        if non_null(self.obj, "prompt_embeds").is_some() {
            return Err(ApiError::unsupported(
                "prompt_embeds",
                "…",
                "prompt embeddings",
            ));
        }
        let Some(v) = non_null(self.obj, "prompt") else {
            // Unverified against a capture: vLLM 0.32 makes `prompt` optional and then
            // requires prompt or prompt_embeds.
            return Err(ApiError::bad_request(
                "Either prompt or prompt_embeds must be provided and non-empty.",
            ));
        };
        let bad = || type_error("prompt", "string_type", "Input should be a valid string", v);
        match v {
            Value::String(s) => Ok(PromptInput::Text(s.clone())),
            Value::Array(items) if items.is_empty() => Err(ApiError::bad_request(
                "Either prompt or prompt_embeds must be provided and non-empty.",
            )),
            Value::Array(items) if items.iter().all(Value::is_u64) => Ok(PromptInput::TokenIds(
                items
                    .iter()
                    .map(|x| x.as_u64().unwrap_or(0) as u32)
                    .collect(),
            )),
            Value::Array(items) if items.len() > 1 => Err(ApiError::unsupported(
                "prompt",
                &format!("a list of {} prompts", items.len()),
                "batched prompts (one choice per prompt)",
            )),
            Value::Array(items) => match &items[0] {
                Value::String(s) => Ok(PromptInput::Text(s.clone())),
                Value::Array(ids) if ids.iter().all(Value::is_u64) => Ok(PromptInput::TokenIds(
                    ids.iter().map(|x| x.as_u64().unwrap_or(0) as u32).collect(),
                )),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    fn opt_str(&self, key: &str) -> Result<Option<String>, ApiError> {
        match non_null(self.obj, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(type_error(
                key,
                "string_type",
                "Input should be a valid string",
                v,
            )),
        }
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match non_null(self.obj, key) {
            None => Ok(None),
            Some(v) => lax_bool(v).map(Some).ok_or_else(|| {
                type_error(
                    key,
                    "bool_parsing",
                    "Input should be a valid boolean, unable to interpret input",
                    v,
                )
            }),
        }
    }

    fn opt_i64(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match non_null(self.obj, key) {
            None => Ok(None),
            Some(v) => lax_int(v).map(Some).ok_or_else(|| int_error(key, v)),
        }
    }

    fn opt_float(&self, key: &str) -> Result<Option<f64>, ApiError> {
        match non_null(self.obj, key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(Value::Bool(b)) => Ok(Some(f64::from(u8::from(*b)))),
            Some(v @ Value::String(s)) => super::pyjson::sentinel(s)
                .or_else(|| s.trim().parse::<f64>().ok())
                .map(Some)
                .ok_or_else(|| {
                    type_error(
                        key,
                        "float_parsing",
                        "Input should be a valid number, unable to parse string as a number",
                        v,
                    )
                }),
            Some(v) => Err(type_error(
                key,
                "float_type",
                "Input should be a valid number",
                v,
            )),
        }
    }

    fn int_list(&self, key: &str) -> Result<Vec<u32>, ApiError> {
        match non_null(self.obj, key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    lax_int(x)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| int_error(&format!("{key}.{i}"), x))
                })
                .collect(),
            Some(v) => Err(type_error(
                key,
                "list_type",
                "Input should be a valid list",
                v,
            )),
        }
    }

    fn stop(&self) -> Result<Vec<String>, ApiError> {
        match non_null(self.obj, "stop") {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()),
            Some(v) => Err(type_error(
                "stop",
                "string_type",
                "Input should be a valid string",
                v,
            )),
        }
    }

    /// `(include_usage, continuous_usage_stats, present)`.
    fn stream_options(&self) -> Result<(bool, bool, bool), ApiError> {
        match non_null(self.obj, "stream_options") {
            None => Ok((false, false, false)),
            Some(Value::Object(o)) => {
                let sub = Fields { obj: o };
                let inc = sub.opt_bool("include_usage")?.unwrap_or(true);
                let cont = sub.opt_bool("continuous_usage_stats")?.unwrap_or(false);
                Ok((inc, cont, true))
            }
            Some(v) => Err(type_error(
                "stream_options",
                "model_attributes_type",
                "Input should be a valid dictionary or object to extract fields from",
                v,
            )),
        }
    }

    /// Parameters whose answer the simulator cannot reproduce: refused with a 400 naming them.
    fn refuse_unsupported(&self, api: Api) -> Result<(), ApiError> {
        let o = self.obj;
        let shown = |v: &Value| v.to_string();
        if let Some(v) = non_null(o, "best_of") {
            if lax_int(v) != Some(1) {
                return Err(ApiError::unsupported("best_of", &shown(v), "best_of"));
            }
        }
        if let Some(v) = non_null(o, "use_beam_search") {
            if lax_bool(v) != Some(false) {
                return Err(ApiError::unsupported(
                    "use_beam_search",
                    &shown(v),
                    "beam search",
                ));
            }
        }
        match api {
            Api::Chat => {
                if let Some(v) = non_null(o, "logprobs") {
                    if lax_bool(v) != Some(false) {
                        return Err(ApiError::unsupported("logprobs", &shown(v), "logprobs"));
                    }
                }
                if let Some(v) = non_null(o, "top_logprobs") {
                    if lax_int(v) != Some(0) {
                        return Err(ApiError::unsupported(
                            "top_logprobs",
                            &shown(v),
                            "top_logprobs",
                        ));
                    }
                }
                if let Some(v) = non_null(o, "tools") {
                    if v.as_array().is_none_or(|a| !a.is_empty()) {
                        // vLLM: tools default `tool_choice` to "auto", which needs a tool
                        // parser (exchange 22); "none" renders the tools and generates text.
                        match non_null(o, "tool_choice") {
                            None => return Err(ApiError::bad_request(AUTO_TOOL_CHOICE)),
                            Some(Value::String(c)) if c == "auto" => {
                                return Err(ApiError::bad_request(AUTO_TOOL_CHOICE))
                            }
                            Some(Value::String(c)) if c == "none" => {}
                            Some(c) => {
                                return Err(ApiError::unsupported(
                                    "tool_choice",
                                    &shown(c),
                                    "tool calling",
                                ))
                            }
                        }
                    }
                }
            }
            Api::Completions => {
                if let Some(v) = non_null(o, "logprobs") {
                    return Err(ApiError::unsupported("logprobs", &shown(v), "logprobs"));
                }
                if let Some(v) = non_null(o, "echo") {
                    if lax_bool(v) != Some(false) {
                        return Err(ApiError::unsupported("echo", &shown(v), "echo"));
                    }
                }
                if let Some(v) = non_null(o, "suffix") {
                    return Err(ApiError::unsupported("suffix", &shown(v), "suffix"));
                }
            }
        }
        if let Some(v) = non_null(o, "prompt_logprobs") {
            return Err(ApiError::unsupported(
                "prompt_logprobs",
                &shown(v),
                "prompt_logprobs",
            ));
        }
        if let Some(v) = non_null(o, "response_format") {
            if v.get("type").and_then(Value::as_str) != Some("text") {
                return Err(ApiError::unsupported(
                    "response_format",
                    "…",
                    "structured output",
                ));
            }
        }
        for key in [
            "structured_outputs",
            "guided_json",
            "guided_regex",
            "guided_choice",
            "guided_grammar",
        ] {
            if non_null(o, key).is_some() {
                return Err(ApiError::unsupported(key, "…", "structured output"));
            }
        }
        Ok(())
    }
}

fn int_error(key: &str, v: &Value) -> ApiError {
    match v {
        Value::String(s) if super::pyjson::sentinel(s).is_some() => {
            type_error(key, "finite_number", "Input should be a finite number", v)
        }
        Value::String(_) => type_error(
            key,
            "int_parsing",
            "Input should be a valid integer, unable to parse string as an integer",
            v,
        ),
        Value::Number(_) => type_error(
            key,
            "int_from_float",
            "Input should be a valid integer, got a number with a fractional part",
            v,
        ),
        _ => type_error(key, "int_type", "Input should be a valid integer", v),
    }
}

/// pydantic's lax int: integers, floats with no fraction, numeric strings.
fn lax_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                .map(|f| f as i64)
        }),
        Value::String(s) if super::pyjson::sentinel(s).is_some() => None,
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(*b as i64),
        _ => None,
    }
}

/// pydantic's lax bool.
fn lax_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => {
            let x = n.as_f64()?;
            if x == 0.0 {
                Some(false)
            } else if x == 1.0 {
                Some(true)
            } else {
                None
            }
        }
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            _ => None,
        },
        _ => None,
    }
}
