//! vLLM 0.32's `SamplingParams` checks (`vllm/sampling_params.py`: `_verify_num_sequences`,
//! `_verify_args`, `_verify_greedy_sampling`). vLLM builds the sampling parameters after the
//! prompt is tokenized, with `max_tokens` already clamped to the room the context leaves
//! (`get_max_tokens`), so [`verify`] runs last, on that effective value. Each failure is a
//! `VLLMValidationError`: `param` is set only where vLLM names a parameter.

use super::error::ApiError;
use super::request::{Api, CompletionRequest};

/// `VLLM_MAX_N_SEQUENCES`'s default.
const MAX_N_SEQUENCES: i64 = 16384;
/// `_MAX_TEMP`: a temperature in (0, this) is raised to it before the checks.
const MAX_TEMP: f64 = 1e-2;
/// `_SAMPLING_EPS`: below it the request samples greedily.
const SAMPLING_EPS: f64 = 1e-5;

/// Python's `str(float)`.
pub(crate) fn py_float(v: f64) -> String {
    if v.is_nan() {
        "nan".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        inferrail_shards::pyfmt::finite_float_repr(v)
    }
}

fn unnamed(message: String) -> ApiError {
    ApiError::bad_request(&message)
}

fn named(message: String, param: &str, value: &str) -> ApiError {
    ApiError::invalid_param(&message, param, Some(value))
}

/// The `logprobs` count vLLM hands `SamplingParams`: chat's `top_logprobs` when `logprobs`
/// is true, completions' `logprobs`.
fn sampling_logprobs(req: &CompletionRequest) -> Option<i64> {
    match req.api {
        Api::Chat => req.logprobs_on.then_some(req.top_logprobs),
        Api::Completions => req.logprobs,
    }
}

/// `SamplingParams.__post_init__`'s checks for a request whose effective `max_tokens` is
/// `max_tokens`.
pub fn verify(req: &CompletionRequest, max_tokens: i64) -> Result<(), ApiError> {
    let n = req.n;
    if n < 1 {
        return Err(unnamed(format!("n must be at least 1, got {n}.")));
    }
    if n > MAX_N_SEQUENCES {
        return Err(unnamed(format!(
            "n must be at most {MAX_N_SEQUENCES}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable."
        )));
    }
    let presence = req.presence_penalty.unwrap_or(0.0);
    if !(-2.0..=2.0).contains(&presence) {
        return Err(unnamed(format!(
            "presence_penalty must be in [-2, 2], got {}.",
            py_float(presence)
        )));
    }
    let frequency = req.frequency_penalty.unwrap_or(0.0);
    if !(-2.0..=2.0).contains(&frequency) {
        return Err(unnamed(format!(
            "frequency_penalty must be in [-2, 2], got {}.",
            py_float(frequency)
        )));
    }
    let repetition = req.repetition_penalty.unwrap_or(1.0);
    if !repetition.is_finite() {
        return Err(unnamed(format!(
            "repetition_penalty must be a finite number, got {}.",
            py_float(repetition)
        )));
    }
    if repetition <= 0.0 {
        return Err(unnamed(format!(
            "repetition_penalty must be greater than zero, got {}.",
            py_float(repetition)
        )));
    }
    let mut temperature = req.temperature.unwrap_or(1.0);
    if temperature > 0.0 && temperature < MAX_TEMP {
        temperature = MAX_TEMP;
    }
    let t = py_float(temperature);
    if !temperature.is_finite() {
        let msg = format!("temperature must be a finite number, got {t}.");
        return Err(named(msg, "temperature", &t));
    }
    if temperature < 0.0 {
        let msg = format!("temperature must be non-negative, got {t}.");
        return Err(named(msg, "temperature", &t));
    }
    if temperature > 2.0 {
        let msg = format!("temperature must be in [0, 2], got {t}.");
        return Err(named(msg, "temperature", &t));
    }
    let top_p = req.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        let p = py_float(top_p);
        return Err(named(
            format!("top_p must be in (0, 1], got {p}."),
            "top_p",
            &p,
        ));
    }
    let top_k = req.top_k.unwrap_or(0);
    if top_k < -1 {
        return Err(unnamed(format!(
            "top_k must be 0 (disable), or at least 1, got {top_k}."
        )));
    }
    let min_p = req.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(unnamed(format!(
            "min_p must be in [0, 1], got {}.",
            py_float(min_p)
        )));
    }
    if max_tokens < 1 {
        let v = max_tokens.to_string();
        let msg = format!("max_tokens must be at least 1, got {max_tokens}.");
        return Err(named(msg, "max_tokens", &v));
    }
    let min_tokens = req.min_tokens;
    if min_tokens < 0 {
        return Err(unnamed(format!(
            "min_tokens must be greater than or equal to 0, got {min_tokens}."
        )));
    }
    if min_tokens > max_tokens {
        return Err(unnamed(format!(
            "min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )));
    }
    if let Some(l) = sampling_logprobs(req).filter(|l| *l < 0 && *l != -1) {
        let v = l.to_string();
        let msg = format!("logprobs must be non-negative or -1, got {l}.");
        return Err(named(msg, "logprobs", &v));
    }
    if let Some(l) = req.prompt_logprobs.filter(|l| *l < 0 && *l != -1) {
        let v = l.to_string();
        let msg = format!("prompt_logprobs must be non-negative or -1, got {l}.");
        return Err(named(msg, "prompt_logprobs", &v));
    }
    if req.stop.iter().any(String::is_empty) {
        return Err(unnamed("stop cannot contain an empty string.".to_owned()));
    }
    if temperature < SAMPLING_EPS && n > 1 {
        return Err(unnamed(format!(
            "n must be 1 when using greedy sampling, got {n}."
        )));
    }
    Ok(())
}

#[cfg(test)]
#[path = "sampling_tests.rs"]
mod tests;
