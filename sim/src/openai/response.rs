//! Response bodies in vLLM 0.32's exact bytes: field order, omitted fields and explicit nulls.
//!
//! The caller (the engine) supplies the generated text pieces, token counts and ids; these
//! functions only format. SSE events are returned unframed (`data: …\n\n`); the HTTP layer adds
//! the chunked transfer framing (vLLM sends one HTTP chunk per event).

use std::fmt::Write as _;

use super::error::push_json_str;
use super::request::Api;

/// vLLM's version string, as `/version` reports it.
pub const VLLM_VERSION: &str = "0.32.0";

/// `/version` body.
pub const VERSION_BODY: &str = "{\"version\":\"0.32.0\"}";

/// `/reset_prefix_cache` body (dev mode route).
pub const RESET_PREFIX_CACHE_BODY: &str = "{\"success\":true}";

/// The end-of-stream event.
pub const DONE_EVENT: &str = "data: [DONE]\n\n";

/// `content-type` of JSON bodies.
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// `content-type` of streams.
pub const CONTENT_TYPE_SSE: &str = "text/event-stream; charset=utf-8";

/// Why a choice finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// `max_tokens` reached: `"finish_reason":"length","stop_reason":null`.
    Length,
    /// End of sequence token: `"finish_reason":"stop","stop_reason":null`.
    Eos,
    /// A `stop` string matched: `"finish_reason":"stop","stop_reason":"<string>"`.
    StopString(String),
    /// A `stop_token_ids` token: `"finish_reason":"stop","stop_reason":<id>`.
    StopToken(u32),
    /// Aborted: `"finish_reason":"abort","stop_reason":null`.
    Abort,
}

impl Finish {
    fn push(&self, out: &mut String) {
        out.push_str(",\"finish_reason\":");
        out.push_str(match self {
            Finish::Length => "\"length\"",
            Finish::Eos | Finish::StopString(_) | Finish::StopToken(_) => "\"stop\"",
            Finish::Abort => "\"abort\"",
        });
        out.push_str(",\"stop_reason\":");
        match self {
            Finish::StopString(s) => push_json_str(out, s),
            Finish::StopToken(t) => {
                let _ = write!(out, "{t}");
            }
            _ => out.push_str("null"),
        }
    }
}

/// Token accounting for `usage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub completion_tokens: u32,
    /// Prefix-cache hit tokens; `None` unless `--enable-prompt-tokens-details`.
    pub cached_tokens: Option<u32>,
    /// Tokens of full blocks this request newly stored in the prefix cache (chat reports it in
    /// `prompt_tokens_details.created_cache_tokens`; completions report null / omit it).
    pub created_cache_tokens: u32,
}

/// The fields every body and chunk of one response shares.
#[derive(Clone, Copy, Debug)]
pub struct ResponseMeta<'a> {
    /// The full response id (`chatcmpl-…` / `cmpl-…`, see [`super::response_id`]).
    pub id: &'a str,
    /// Unix seconds when the request was received.
    pub created: u64,
    /// Served model name.
    pub model: &'a str,
    /// `system_fingerprint` (vLLM: `vllm-<version>-<8 hex of the model path>`).
    pub system_fingerprint: &'a str,
}

/// The generated answer of a non-streaming request.
#[derive(Clone, Debug)]
pub struct Generated<'a> {
    /// The whole generated text.
    pub text: &'a str,
    /// Why it finished.
    pub finish: Finish,
    /// Generated token ids, reported only with `return_token_ids`.
    pub token_ids: Option<&'a [u32]>,
    /// Prompt token ids, reported only with `return_token_ids`.
    pub prompt_token_ids: Option<&'a [u32]>,
}

fn push_opt_ids(out: &mut String, ids: Option<&[u32]>) {
    match ids {
        None => out.push_str("null"),
        Some(ids) => {
            out.push('[');
            for (i, t) in ids.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{t}");
            }
            out.push(']');
        }
    }
}

fn push_head(out: &mut String, meta: &ResponseMeta<'_>, object: &str) {
    out.push_str("{\"id\":");
    push_json_str(out, meta.id);
    let _ = write!(
        out,
        ",\"object\":\"{object}\",\"created\":{},\"model\":",
        meta.created
    );
    push_json_str(out, meta.model);
}

fn push_fingerprint(out: &mut String, meta: &ResponseMeta<'_>) {
    out.push_str(",\"system_fingerprint\":");
    push_json_str(out, meta.system_fingerprint);
}

/// `"usage":{…}` of a non-streaming body.
fn push_usage_full(out: &mut String, api: Api, u: &Usage) {
    let _ = write!(
        out,
        ",\"usage\":{{\"prompt_tokens\":{},\"total_tokens\":{},\"completion_tokens\":{},\"prompt_tokens_details\":",
        u.prompt_tokens,
        u.prompt_tokens + u.completion_tokens,
        u.completion_tokens
    );
    match u.cached_tokens {
        None => out.push_str("null"),
        Some(c) => {
            let _ = write!(out, "{{\"cached_tokens\":{c},\"created_cache_tokens\":");
            match api {
                Api::Chat => {
                    let _ = write!(out, "{}", u.created_cache_tokens);
                }
                Api::Completions => out.push_str("null"),
            }
            out.push_str(",\"multimodal_tokens\":null}");
        }
    }
    out.push_str(",\"completion_tokens_details\":null}");
}

/// `"usage":{…}` of the final usage chunk of a stream.
fn push_usage_final(out: &mut String, api: Api, u: &Usage) {
    let _ = write!(
        out,
        ",\"usage\":{{\"prompt_tokens\":{},\"total_tokens\":{},\"completion_tokens\":{}",
        u.prompt_tokens,
        u.prompt_tokens + u.completion_tokens,
        u.completion_tokens
    );
    if let Some(c) = u.cached_tokens {
        let _ = write!(out, ",\"prompt_tokens_details\":{{\"cached_tokens\":{c}");
        if api == Api::Chat {
            let _ = write!(out, ",\"created_cache_tokens\":{}", u.created_cache_tokens);
        }
        out.push('}');
    }
    out.push('}');
}

/// `"usage":{…}` of a chunk with `continuous_usage_stats`.
fn push_usage_running(out: &mut String, prompt_tokens: u32, completion_tokens: u32) {
    let _ = write!(
        out,
        ",\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"total_tokens\":{},\"completion_tokens\":{completion_tokens},\"completion_tokens_details\":null}}",
        prompt_tokens + completion_tokens
    );
}

/// Non-streaming `/v1/chat/completions` body (`chat.completion`).
pub fn chat_completion_body(meta: &ResponseMeta<'_>, gen: &Generated<'_>, usage: &Usage) -> String {
    let mut out = String::with_capacity(768 + gen.text.len());
    push_head(&mut out, meta, "chat.completion");
    out.push_str(",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    push_json_str(&mut out, gen.text);
    out.push_str(
        ",\"refusal\":null,\"annotations\":null,\"audio\":null,\"function_call\":null,\"reasoning\":null},\"logprobs\":null",
    );
    gen.finish.push(&mut out);
    out.push_str(",\"token_ids\":");
    push_opt_ids(&mut out, gen.token_ids);
    out.push_str(",\"routed_experts\":null}],\"service_tier\":null");
    push_fingerprint(&mut out, meta);
    push_usage_full(&mut out, Api::Chat, usage);
    out.push_str(",\"prompt_logprobs\":null,\"prompt_token_ids\":");
    push_opt_ids(&mut out, gen.prompt_token_ids);
    out.push_str(
        ",\"prompt_text\":null,\"kv_transfer_params\":null,\"ec_transfer_params\":null,\"metrics\":null}",
    );
    out
}

/// Non-streaming `/v1/completions` body (`text_completion`).
pub fn text_completion_body(meta: &ResponseMeta<'_>, gen: &Generated<'_>, usage: &Usage) -> String {
    let mut out = String::with_capacity(640 + gen.text.len());
    push_head(&mut out, meta, "text_completion");
    out.push_str(",\"choices\":[{\"index\":0,\"text\":");
    push_json_str(&mut out, gen.text);
    out.push_str(",\"logprobs\":null");
    gen.finish.push(&mut out);
    out.push_str(",\"token_ids\":");
    push_opt_ids(&mut out, gen.token_ids);
    out.push_str(",\"prompt_logprobs\":null,\"prompt_token_ids\":");
    push_opt_ids(&mut out, gen.prompt_token_ids);
    out.push_str(",\"routed_experts\":null}],\"service_tier\":null");
    push_fingerprint(&mut out, meta);
    push_usage_full(&mut out, Api::Completions, usage);
    out.push_str(",\"kv_transfer_params\":null,\"ec_transfer_params\":null,\"metrics\":null}");
    out
}

/// The non-streaming body of either API.
pub fn completion_body(
    api: Api,
    meta: &ResponseMeta<'_>,
    gen: &Generated<'_>,
    usage: &Usage,
) -> String {
    match api {
        Api::Chat => chat_completion_body(meta, gen, usage),
        Api::Completions => text_completion_body(meta, gen, usage),
    }
}

/// Formats the SSE events of one streamed answer.
///
/// Call [`StreamWriter::start`] once (chat: the role chunk; completions: nothing), then
/// [`StreamWriter::token`] per output piece (the last one with its finish), then
/// [`StreamWriter::end`] (the usage chunk when `include_usage`, then `data: [DONE]`).
#[derive(Clone, Debug)]
pub struct StreamWriter<'a> {
    /// Which API.
    pub api: Api,
    /// Shared fields.
    pub meta: ResponseMeta<'a>,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (with include_usage).
    pub continuous_usage_stats: bool,
    /// Prompt token count (for continuous usage).
    pub prompt_tokens: u32,
    /// Completions only: whether the first chunk has been written (it carries
    /// `prompt_token_ids` under `return_token_ids`).
    first_sent: bool,
    /// Prompt token ids to report (with `return_token_ids`).
    pub prompt_token_ids: Option<&'a [u32]>,
}

impl<'a> StreamWriter<'a> {
    /// A writer for one stream.
    pub fn new(
        api: Api,
        meta: ResponseMeta<'a>,
        include_usage: bool,
        continuous_usage_stats: bool,
        prompt_tokens: u32,
        prompt_token_ids: Option<&'a [u32]>,
    ) -> Self {
        StreamWriter {
            api,
            meta,
            include_usage,
            continuous_usage_stats: include_usage && continuous_usage_stats,
            prompt_tokens,
            first_sent: false,
            prompt_token_ids,
        }
    }

    fn event_start(&self, out: &mut String, object: &str) {
        out.push_str("data: ");
        push_head(out, &self.meta, object);
    }

    /// The first event(s): chat's `{"role":"assistant","content":""}` chunk; nothing for
    /// completions.
    pub fn start(&mut self, out: &mut String) {
        if self.api != Api::Chat {
            return;
        }
        self.event_start(out, "chat.completion.chunk");
        out.push_str(
            ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]",
        );
        if self.continuous_usage_stats {
            push_usage_running(out, self.prompt_tokens, 0);
        }
        out.push_str(",\"prompt_token_ids\":");
        push_opt_ids(out, self.prompt_token_ids);
        out.push_str(",\"prompt_text\":null}\n\n");
    }

    /// One output piece: `text` (may be empty), its token ids (reported only with
    /// `return_token_ids`), the number of tokens generated so far including this piece, and
    /// the finish on the last piece.
    pub fn token(
        &mut self,
        out: &mut String,
        text: &str,
        token_ids: Option<&[u32]>,
        completion_tokens: u32,
        finish: Option<&Finish>,
    ) {
        match self.api {
            Api::Chat => {
                self.event_start(out, "chat.completion.chunk");
                out.push_str(",\"choices\":[{\"index\":0,\"delta\":{\"content\":");
                push_json_str(out, text);
                out.push_str("},\"logprobs\":null");
                match finish {
                    Some(f) => f.push(out),
                    None => out.push_str(",\"finish_reason\":null"),
                }
                out.push_str(",\"token_ids\":");
                push_opt_ids(out, token_ids);
                out.push_str("}]");
            }
            Api::Completions => {
                self.event_start(out, "text_completion");
                out.push_str(",\"choices\":[{\"index\":0,\"text\":");
                push_json_str(out, text);
                out.push_str(",\"logprobs\":null");
                match finish {
                    Some(f) => f.push(out),
                    None => out.push_str(",\"finish_reason\":null,\"stop_reason\":null"),
                }
                out.push_str(",\"prompt_token_ids\":");
                push_opt_ids(
                    out,
                    if self.first_sent {
                        None
                    } else {
                        self.prompt_token_ids
                    },
                );
                self.first_sent = true;
                out.push_str(",\"token_ids\":");
                push_opt_ids(out, token_ids);
                out.push_str("}]");
            }
        }
        if self.continuous_usage_stats {
            push_usage_running(out, self.prompt_tokens, completion_tokens);
        }
        if finish.is_some() && !self.include_usage {
            push_fingerprint(out, &self.meta);
        }
        out.push_str("}\n\n");
    }

    /// The closing events: the usage chunk (when `include_usage`) and `data: [DONE]`.
    pub fn end(&mut self, out: &mut String, usage: &Usage) {
        if self.include_usage {
            let object = match self.api {
                Api::Chat => "chat.completion.chunk",
                Api::Completions => "text_completion",
            };
            self.event_start(out, object);
            out.push_str(",\"choices\":[]");
            push_usage_final(out, self.api, usage);
            push_fingerprint(out, &self.meta);
            out.push_str("}\n\n");
        }
        out.push_str(DONE_EVENT);
    }
}

/// One `/v1/models` card.
#[derive(Clone, Debug)]
pub struct ModelCard<'a> {
    /// Served model name.
    pub id: &'a str,
    /// Unix seconds (vLLM stamps the time of the request).
    pub created: u64,
    /// `root`: the model path.
    pub root: &'a str,
    /// `--max-model-len`.
    pub max_model_len: u32,
    /// `modelperm-<16 hex>`.
    pub permission_id: &'a str,
}

/// `/v1/models` body.
pub fn models_body(cards: &[ModelCard<'_>]) -> String {
    let mut out = String::from("{\"object\":\"list\",\"data\":[");
    for (i, c) in cards.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"id\":");
        push_json_str(&mut out, c.id);
        let _ = write!(
            out,
            ",\"object\":\"model\",\"created\":{},\"owned_by\":\"vllm\",\"root\":",
            c.created
        );
        push_json_str(&mut out, c.root);
        let _ = write!(
            out,
            ",\"parent\":null,\"max_model_len\":{},\"permission\":[{{\"id\":",
            c.max_model_len
        );
        push_json_str(&mut out, c.permission_id);
        let _ = write!(
            out,
            ",\"object\":\"model_permission\",\"created\":{},\"allow_create_engine\":false,\"allow_sampling\":true,\"allow_logprobs\":true,\"allow_search_indices\":false,\"allow_view\":true,\"allow_fine_tuning\":false,\"organization\":\"*\",\"group\":null,\"is_blocking\":false}}]}}",
            c.created
        );
    }
    out.push_str("]}");
    out
}
