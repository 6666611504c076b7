//! vLLM 0.32's `@model_validator(mode="before")` checks of the chat and completion request
//! models, on the raw JSON object. vLLM raises `VLLMValidationError` there, which is not a
//! `ValueError`, so pydantic lets it through and vLLM's error handler answers a plain
//! `BadRequestError` (not a `1 validation error` body). Pydantic runs "before" validators in
//! reverse order of definition and before any field check; [`before_validators`] keeps that
//! order (`vllm/entrypoints/openai/{chat_completion,completion}/protocol.py`).

use serde_json::{Map, Value};

use super::error::ApiError;
use super::request::Api;

/// Python's truthiness of a decoded JSON value (`data.get(k)` in a validator).
pub(crate) fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Python's `str()` of a decoded JSON value, as an f-string shows it.
pub(crate) fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => super::request::py_input(other),
    }
}

/// Runs the request model's "before" validators in pydantic's order.
pub fn before_validators(api: Api, o: &Map<String, Value>) -> Result<(), ApiError> {
    match api {
        Api::Chat => {
            check_generation_prompt(o)?;
            check_tool_usage(o)?;
            check_logprobs(api, o)?;
            validate_stream_options(o)?;
            validate_response_format(o)?;
            validate_cache_salt(o)
        }
        Api::Completions => {
            validate_prompt_list_length(o)?;
            validate_prompt_and_prompt_embeds(o)?;
            validate_stream_options(o)?;
            check_logprobs(api, o)?;
            validate_response_format(o)?;
            validate_cache_salt(o)
        }
    }
}

fn param_error(message: &str, param: &str) -> ApiError {
    ApiError::invalid_param(message, param, None)
}

/// `check_generation_prompt` (chat).
fn check_generation_prompt(o: &Map<String, Value>) -> Result<(), ApiError> {
    if truthy(o.get("continue_final_message")) && truthy(o.get("add_generation_prompt")) {
        return Err(ApiError::bad_request(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ));
    }
    Ok(())
}

/// `check_tool_usage` (chat): an empty `tools`, `tool_choice` without tools, and a
/// `tool_choice` string other than `none` / `auto` / `required`.
fn check_tool_usage(o: &Map<String, Value>) -> Result<(), ApiError> {
    if matches!(o.get("tools"), Some(Value::Array(a)) if a.is_empty()) {
        return Err(param_error(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
            "tools",
        ));
    }
    let choice = match o.get("tool_choice") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) if s == "none" => return Ok(()),
        Some(c) => c,
    };
    if o.get("tools").is_none_or(Value::is_null) {
        return Err(param_error(
            "When using `tool_choice`, `tools` must be set.",
            "tool_choice",
        ));
    }
    let named_or_known = match choice {
        Value::String(s) => s == "auto" || s == "required",
        Value::Object(_) => true,
        _ => false,
    };
    if !named_or_known {
        return Err(param_error(
            &format!(
                "Invalid value for `tool_choice`: {}! Only named tools, \"none\", \"auto\" or \"required\" are supported.",
                py_str(choice)
            ),
            "tool_choice",
        ));
    }
    Ok(())
}

/// `check_logprobs`: the type and range checks on `prompt_logprobs` and (chat) `top_logprobs`
/// / (completions) `logprobs`, which run before pydantic's field types.
fn check_logprobs(api: Api, o: &Map<String, Value>) -> Result<(), ApiError> {
    let has_ids = truthy(o.get("logprob_token_ids"));
    if has_ids && truthy(o.get("use_beam_search")) {
        return Err(param_error(
            "`logprob_token_ids` is not supported with beam search.",
            "logprob_token_ids",
        ));
    }
    let counted = match api {
        Api::Chat => "top_logprobs",
        Api::Completions => "logprobs",
    };
    if api == Api::Chat && has_ids && !truthy(o.get("logprobs")) {
        return Err(param_error(
            "when using `logprob_token_ids`, `logprobs` must be set to true.",
            "logprob_token_ids",
        ));
    }
    if api == Api::Completions {
        if truthy(o.get("use_beam_search"))
            && truthy(o.get("echo"))
            && o.get("logprobs").is_some_and(|v| !v.is_null())
        {
            return Err(param_error(
                "`echo` with `logprobs` is not supported with beam search because beam search does not compute prompt logprobs.",
                "echo",
            ));
        }
        if has_ids
            && truthy(o.get("echo"))
            && o.get("max_tokens").and_then(Value::as_f64) == Some(0.0)
        {
            return Err(param_error(
                "`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` because no output tokens are generated.",
                "logprob_token_ids",
            ));
        }
        if has_ids && o.get("logprobs").is_none_or(Value::is_null) {
            return Err(param_error(
                "when using `logprob_token_ids`, `logprobs` must be set.",
                "logprob_token_ids",
            ));
        }
    }
    let mut numbers = [None, None];
    for (slot, name) in numbers.iter_mut().zip(["prompt_logprobs", counted]) {
        match o.get(name) {
            None | Some(Value::Null) => {}
            // Python: isinstance(v, (int, float)); a bool is an int.
            Some(Value::Bool(b)) => *slot = Some(f64::from(u8::from(*b))),
            Some(Value::Number(n)) => *slot = n.as_f64(),
            Some(v) => {
                return Err(ApiError::invalid_param(
                    &format!("`{name}` must be an integer."),
                    name,
                    Some(&py_str(v)),
                ))
            }
        }
    }
    let shown = |name: &str| o.get(name).map(py_str).unwrap_or_default();
    if let Some(p) = numbers[0] {
        if truthy(o.get("stream")) && (p > 0.0 || p == -1.0) {
            return Err(param_error(
                "`prompt_logprobs` are not available when `stream=True`.",
                "prompt_logprobs",
            ));
        }
        if p < 0.0 && p != -1.0 {
            return Err(ApiError::invalid_param(
                "`prompt_logprobs` must be a positive value or -1.",
                "prompt_logprobs",
                Some(&shown("prompt_logprobs")),
            ));
        }
    }
    if let Some(t) = numbers[1] {
        if t < 0.0 && t != -1.0 {
            return Err(ApiError::invalid_param(
                &format!("`{counted}` must be a positive value or -1."),
                counted,
                Some(&shown(counted)),
            ));
        }
        if api == Api::Chat && (t == -1.0 || t > 0.0) && !truthy(o.get("logprobs")) {
            return Err(param_error(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                "top_logprobs",
            ));
        }
    }
    Ok(())
}

/// `validate_stream_options`: `stream_options` (truthy) needs a truthy `stream`.
fn validate_stream_options(o: &Map<String, Value>) -> Result<(), ApiError> {
    if truthy(o.get("stream_options")) && !truthy(o.get("stream")) {
        return Err(param_error(
            "Stream options can only be defined when `stream=True`.",
            "stream_options",
        ));
    }
    Ok(())
}

/// `validate_response_format`: a `json_schema` format needs its `json_schema`.
fn validate_response_format(o: &Map<String, Value>) -> Result<(), ApiError> {
    let Some(Value::Object(rf)) = o.get("response_format") else {
        return Ok(());
    };
    if rf.get("type").and_then(Value::as_str) == Some("json_schema")
        && rf.get("json_schema").is_none_or(Value::is_null)
    {
        return Err(param_error(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        ));
    }
    Ok(())
}

/// `validate_cache_salt` (`vllm/entrypoints/generate/base/protocol.py`).
fn validate_cache_salt(o: &Map<String, Value>) -> Result<(), ApiError> {
    let salt = match o.get("cache_salt") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(_) => {
            return Err(param_error(
                "Parameter 'cache_salt' must be a non-empty string if provided.",
                "cache_salt",
            ))
        }
    };
    if salt.chars().count() > 128 || salt.chars().any(|c| matches!(c, '@' | '/' | '\\' | '\0')) {
        return Err(param_error(
            "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL.",
            "cache_salt",
        ));
    }
    Ok(())
}

/// `validate_prompt_and_prompt_embeds` (completions): `prompt` null/absent or `""` without
/// embeddings.
fn validate_prompt_and_prompt_embeds(o: &Map<String, Value>) -> Result<(), ApiError> {
    let prompt_empty = match o.get("prompt") {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    };
    let embeds_empty = match o.get("prompt_embeds") {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    if prompt_empty && embeds_empty {
        return Err(param_error(
            "Either prompt or prompt_embeds must be provided and non-empty.",
            "prompt",
        ));
    }
    Ok(())
}

/// `validate_prompt_list_length` (completions): at most `VLLM_MAX_COMPLETION_PROMPTS` (1024)
/// prompts in a list that is not one token-id prompt.
fn validate_prompt_list_length(o: &Map<String, Value>) -> Result<(), ApiError> {
    const MAX_PROMPTS: usize = 1024;
    if let Some(Value::Array(a)) = o.get("prompt") {
        let all_ints = a.iter().all(|v| v.is_i64() || v.is_u64());
        if !a.is_empty() && !all_ints && a.len() > MAX_PROMPTS {
            return Err(param_error(
                &format!(
                    "prompt list length {} exceeds the maximum allowed count of {MAX_PROMPTS}. To increase this limit, set the VLLM_MAX_COMPLETION_PROMPTS environment variable.",
                    a.len()
                ),
                "prompt",
            ));
        }
    }
    if let Some(Value::Array(a)) = o.get("prompt_embeds") {
        if a.len() > MAX_PROMPTS {
            return Err(param_error(
                &format!(
                    "prompt_embeds list length {} exceeds the maximum allowed count of {MAX_PROMPTS}. To increase this limit, set the VLLM_MAX_COMPLETION_PROMPTS environment variable.",
                    a.len()
                ),
                "prompt_embeds",
            ));
        }
    }
    Ok(())
}
