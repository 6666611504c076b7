//! vLLM 0.32's OpenAI-compatible HTTP surface as pure functions (no I/O): request parsing and
//! validation, response bodies, SSE events and error bodies, byte for byte as vLLM writes them.
//!
//! The engine supplies generated text, token counts and ids; this module only formats.
//! Flow for a completion request:
//! 1. [`route`] the method and path (404/405 bodies as Starlette writes them), then
//!    [`check_json_media_type`] on the JSON routes;
//! 2. [`parse_request`] the body (FastAPI/pydantic errors, model check, vLLM's validators,
//!    and a 400 naming any parameter the simulator cannot model faithfully);
//! 3. tokenize, then [`check_prompt_len`] for the effective `max_tokens`;
//! 4. [`response_id`] from `X-Request-Id` / the body's `request_id` / a random id;
//! 5. [`completion_body`] or a [`StreamWriter`] for the answer.

mod error;
mod media;
mod pyjson;
mod render;
mod request;
mod response;
mod sampling;
mod tokenization;
mod validators;

pub use error::{python_json_error, ApiError};
pub use media::check_json_media_type;
pub use render::{
    anthropic_to_chat, chat_render_body, completions_render_body, push_generate_request,
    scale_out_disabled, Rendered,
};
pub use request::{
    check_prompt_len, parse_request, response_id, Api, ChatMessage, CompletionRequest, PromptInput,
    ServerInfo, AUTO_TOOL_CHOICE,
};
pub use response::{
    chat_completion_body, completion_body, models_body, text_completion_body, Finish, Generated,
    ModelCard, ResponseMeta, StreamWriter, Usage, CONTENT_TYPE_JSON, CONTENT_TYPE_SSE, DONE_EVENT,
    RESET_PREFIX_CACHE_BODY, VERSION_BODY, VLLM_VERSION,
};
pub use tokenization::{
    detokenize_body, kv_event_sources_body, load_body, parse_detokenize, KvEventSource,
};

/// A route the simulator serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/completions`.
    Completions,
    /// `GET /v1/models`.
    Models,
    /// `GET /health` (200, empty body, no content-type).
    Health,
    /// `GET /version`.
    Version,
    /// `GET /metrics`.
    Metrics,
    /// `POST /reset_prefix_cache`.
    ResetPrefixCache,
    /// `POST /tokenize`.
    Tokenize,
    /// `POST /detokenize`.
    Detokenize,
    /// `GET /ping` and `POST /ping` (SageMaker's health check: as `/health`).
    Ping,
    /// `GET /load`.
    Load,
    /// `GET /kv_event_sources`.
    KvEventSources,
    /// `POST /v1/chat/completions/render` (403 unless `--enable-scale-out`).
    RenderChat,
    /// `POST /v1/completions/render` (403 unless `--enable-scale-out`).
    RenderCompletions,
    /// `POST /v1/messages/render` (403 unless `--enable-scale-out`).
    RenderMessages,
    /// `GET /server_info` (only with `VLLM_SERVER_DEV_MODE=1`, see [`route_with`]).
    ServerInfo,
}

/// Resolves a method and path (query string already removed) to a route, or Starlette's
/// 404 (`{"detail":"Not Found"}`) / 405 (`{"detail":"Method Not Allowed"}` with `allow`).
/// `/server_info` is not registered (as vLLM without `VLLM_SERVER_DEV_MODE=1`).
pub fn route(method: &str, path: &str) -> Result<Route, ApiError> {
    route_with(method, path, false)
}

/// As [`route`], with vLLM's dev-mode routes (`/server_info`) registered when
/// `server_dev_mode` (`VLLM_SERVER_DEV_MODE=1`). SGLang's `/get_server_info`, `/model_info`
/// and `/get_model_info` are never routes: vLLM answers them with its unknown-route 404.
pub fn route_with(method: &str, path: &str, server_dev_mode: bool) -> Result<Route, ApiError> {
    let (route, allowed) = match path {
        "/v1/chat/completions/render" => (Route::RenderChat, "POST"),
        "/v1/completions/render" => (Route::RenderCompletions, "POST"),
        "/v1/messages/render" => (Route::RenderMessages, "POST"),
        "/server_info" if server_dev_mode => (Route::ServerInfo, "GET"),
        "/v1/chat/completions" => (Route::ChatCompletions, "POST"),
        "/v1/completions" => (Route::Completions, "POST"),
        "/v1/models" => (Route::Models, "GET"),
        "/health" => (Route::Health, "GET"),
        "/version" => (Route::Version, "GET"),
        "/metrics" => (Route::Metrics, "GET"),
        "/reset_prefix_cache" => (Route::ResetPrefixCache, "POST"),
        "/tokenize" => (Route::Tokenize, "POST"),
        "/detokenize" => (Route::Detokenize, "POST"),
        "/load" => (Route::Load, "GET"),
        "/kv_event_sources" => (Route::KvEventSources, "GET"),
        // Two FastAPI routes (GET, then POST); a wrong method hits the GET route's 405 first.
        "/ping" if method == "POST" => return Ok(Route::Ping),
        "/ping" => (Route::Ping, "GET"),
        _ => return Err(ApiError::route_not_found()),
    };
    if method == allowed {
        Ok(route)
    } else {
        Err(ApiError::method_not_allowed(allowed))
    }
}

/// Which API a completion route serves.
pub fn api_of(route: Route) -> Option<Api> {
    match route {
        Route::ChatCompletions => Some(Api::Chat),
        Route::Completions => Some(Api::Completions),
        _ => None,
    }
}
