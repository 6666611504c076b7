//! Response bytes in vLLM 0.32's shapes: heads, chat and text completion bodies, SSE chunks, errors.
//!
//! Everything appends to a caller-owned buffer so a connection reuses one allocation; no I/O here.

use std::io::Write;

use inferrail_wire::{
    encode_chunk, openai_error, push_header, push_json_string, ErrorKind, LAST_CHUNK,
};

/// `system_fingerprint` of every completion (vLLM sends `vllm-<version>-<hash>`).
pub(crate) const SYSTEM_FINGERPRINT: &str = "vllm-0.32.0-inferrail-sim";

/// The text of each generated token.
pub(crate) const TOKEN_TEXT: &str = " sim";

/// `max_model_len` reported by `/v1/models`.
const MAX_MODEL_LEN: u32 = 2048;

/// Which OpenAI completion API a request uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// `/v1/chat/completions`: ids `chatcmpl-…`, objects `chat.completion[.chunk]`.
    Chat,
    /// `/v1/completions`: ids `cmpl-…`, object `text_completion`.
    Text,
}

impl Api {
    /// The response id prefix vLLM uses.
    pub(crate) fn id_prefix(self) -> &'static str {
        match self {
            Api::Chat => "chatcmpl-",
            Api::Text => "cmpl-",
        }
    }
}

/// How the body of a response is framed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Framing<'a> {
    /// A content-length body of this type (`None`: no content-type, like `/health`).
    Length(usize, Option<&'a str>),
    /// An SSE stream sent with `transfer-encoding: chunked`.
    EventStream,
}

/// A response head, built in uvicorn's header order:
/// `date, server, [allow], [content-length, content-type], vary, [retry-after], x-request-id,
/// [connection], [content-type … transfer-encoding]`.
pub(crate) struct Head<'a> {
    /// Status code.
    pub status: u16,
    /// The `date` value.
    pub date: &'a [u8],
    /// The `x-request-id` value.
    pub request_id: &'a [u8],
    /// Body framing.
    pub framing: Framing<'a>,
    /// `allow` (405 answers).
    pub allow: Option<&'a str>,
    /// Add `retry-after: 1`.
    pub retry_after: bool,
    /// Add `connection: close`.
    pub close: bool,
}

/// Reason phrase for `status`; a few codes the wire crate does not name are added here.
pub(crate) fn reason(status: u16) -> &'static str {
    match inferrail_wire::headers::reason_phrase(status) {
        "" => match status {
            401 => "Unauthorized",
            403 => "Forbidden",
            409 => "Conflict",
            422 => "Unprocessable Entity",
            429 => "Too Many Requests",
            501 => "Not Implemented",
            _ => "",
        },
        r => r,
    }
}

/// Appends the head.
pub(crate) fn push_head(out: &mut Vec<u8>, h: &Head<'_>) {
    let _ = write!(out, "HTTP/1.1 {} {}\r\n", h.status, reason(h.status));
    push_header(out, b"date", h.date);
    push_header(out, b"server", b"uvicorn");
    if let Some(allow) = h.allow {
        push_header(out, b"allow", allow.as_bytes());
    }
    match h.framing {
        Framing::Length(len, content_type) => {
            let _ = write!(out, "content-length: {len}\r\n");
            if let Some(ct) = content_type {
                push_header(out, b"content-type", ct.as_bytes());
            }
        }
        Framing::EventStream => {
            push_header(out, b"content-type", b"text/event-stream; charset=utf-8");
        }
    }
    push_header(out, b"vary", b"Origin");
    if h.retry_after {
        push_header(out, b"retry-after", b"1");
    }
    push_header(out, b"x-request-id", h.request_id);
    if h.close {
        push_header(out, b"connection", b"close");
    }
    if matches!(h.framing, Framing::EventStream) {
        push_header(out, b"transfer-encoding", b"chunked");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends a whole content-length response (`body` sent unless `head_only`).
pub(crate) fn push_full<'a>(
    out: &mut Vec<u8>,
    mut head: Head<'a>,
    content_type: Option<&'a str>,
    body: &[u8],
    head_only: bool,
) {
    head.framing = Framing::Length(body.len(), content_type);
    push_head(out, &head);
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// `{"detail":"Not Found"}`-style body FastAPI sends for routing errors.
pub(crate) fn detail_body(status: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(40);
    b.extend_from_slice(b"{\"detail\":");
    push_json_string(&mut b, reason(status));
    b.push(b'}');
    b
}

/// vLLM's 404 for a model it does not serve.
pub(crate) fn unknown_model_body(asked: &str, served: &str) -> Vec<u8> {
    let msg = format!("The model `{asked}` does not exist. Valid aliases: {served}.");
    openai_error(ErrorKind::NotFound, &msg, Some("model"))
}

/// A 400 for a body that is not the JSON object a completion needs.
pub(crate) fn bad_request_body(message: &str) -> Vec<u8> {
    openai_error(ErrorKind::BadRequest, message, None)
}

/// The OpenAI error body for a scripted status `code`.
pub(crate) fn status_body(code: u16) -> Vec<u8> {
    let type_name = match code {
        400 => "BadRequestError",
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        408 => "RequestTimeoutError",
        413 => "PayloadTooLargeError",
        422 => "UnprocessableEntityError",
        429 => "RateLimitError",
        502 => "BadGatewayError",
        503 => "ServiceUnavailableError",
        504 => "GatewayTimeoutError",
        c if c < 500 => "BadRequestError",
        _ => "InternalServerError",
    };
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(b"{\"error\":{\"message\":");
    push_json_string(&mut b, &format!("scripted engine failure (status {code})"));
    b.extend_from_slice(b",\"type\":");
    push_json_string(&mut b, type_name);
    let _ = write!(b, ",\"param\":null,\"code\":{code}}}}}");
    b
}

/// The `/v1/models` body: one model card.
pub(crate) fn models_body(model: &str, created: u64, perm_id: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(480);
    b.extend_from_slice(b"{\"object\":\"list\",\"data\":[{\"id\":");
    push_json_string(&mut b, model);
    let _ = write!(
        b,
        ",\"object\":\"model\",\"created\":{created},\"owned_by\":\"vllm\",\"root\":"
    );
    push_json_string(&mut b, model);
    let _ = write!(
        b,
        ",\"parent\":null,\"max_model_len\":{MAX_MODEL_LEN},\"permission\":[{{\"id\":\"modelperm-{perm_id}\",\
         \"object\":\"model_permission\",\"created\":{created},\"allow_create_engine\":false,\
         \"allow_sampling\":true,\"allow_logprobs\":true,\"allow_search_indices\":false,\
         \"allow_view\":true,\"allow_fine_tuning\":false,\"organization\":\"*\",\"group\":null,\
         \"is_blocking\":false}}]}}]}}"
    );
    b
}

/// What a generated completion looks like; shared by the full body and the SSE chunks.
pub(crate) struct Completion<'a> {
    /// Which API.
    pub api: Api,
    /// The response id, prefix included (`chatcmpl-…`).
    pub id: &'a str,
    /// `created` (Unix seconds).
    pub created: u64,
    /// The served model.
    pub model: &'a str,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// Generated tokens (content chunks).
    pub tokens: usize,
    /// The request asked for `stream_options.include_usage`.
    pub include_usage: bool,
}

impl Completion<'_> {
    fn push_envelope(&self, b: &mut Vec<u8>, object: &str) {
        b.extend_from_slice(b"{\"id\":");
        push_json_string(b, self.id);
        let _ = write!(
            b,
            ",\"object\":\"{object}\",\"created\":{},\"model\":",
            self.created
        );
        push_json_string(b, self.model);
    }

    fn push_text(&self, b: &mut Vec<u8>, tokens: usize) {
        b.push(b'"');
        for _ in 0..tokens {
            b.extend_from_slice(TOKEN_TEXT.as_bytes());
        }
        b.push(b'"');
    }

    fn completion_tokens(&self) -> u64 {
        self.tokens as u64
    }

    /// Appends the non-streaming JSON body.
    pub(crate) fn push_body(&self, b: &mut Vec<u8>) {
        let (p, c) = (self.prompt_tokens, self.completion_tokens());
        match self.api {
            Api::Chat => {
                self.push_envelope(b, "chat.completion");
                b.extend_from_slice(
                    b",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":",
                );
                self.push_text(b, self.tokens);
                b.extend_from_slice(
                    b",\"refusal\":null,\"annotations\":null,\"audio\":null,\"function_call\":null,\
                      \"reasoning\":null},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,\
                      \"token_ids\":null,\"routed_experts\":null}],\"service_tier\":null,\"system_fingerprint\":",
                );
                push_json_string(b, SYSTEM_FINGERPRINT);
                let _ = write!(
                    b,
                    ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{c},\
                     \"prompt_tokens_details\":{{\"cached_tokens\":0,\"created_cache_tokens\":0,\
                     \"multimodal_tokens\":null}},\"completion_tokens_details\":null}},\
                     \"prompt_logprobs\":null,\"prompt_token_ids\":null,\"prompt_text\":null,\
                     \"kv_transfer_params\":null,\"ec_transfer_params\":null,\"metrics\":null}}",
                    p + c
                );
            }
            Api::Text => {
                self.push_envelope(b, "text_completion");
                b.extend_from_slice(b",\"choices\":[{\"index\":0,\"text\":");
                self.push_text(b, self.tokens);
                b.extend_from_slice(
                    b",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,\"token_ids\":null,\
                      \"prompt_logprobs\":null,\"prompt_token_ids\":null,\"routed_experts\":null}],\
                      \"service_tier\":null,\"system_fingerprint\":",
                );
                push_json_string(b, SYSTEM_FINGERPRINT);
                let _ = write!(
                    b,
                    ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{c},\
                     \"prompt_tokens_details\":{{\"cached_tokens\":0,\"created_cache_tokens\":null,\
                     \"multimodal_tokens\":null}},\"completion_tokens_details\":null}},\
                     \"kv_transfer_params\":null,\"ec_transfer_params\":null,\"metrics\":null}}",
                    p + c
                );
            }
        }
    }

    /// Appends the first SSE event (chat only: the assistant role with empty content).
    pub(crate) fn push_first_event(&self, out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
        if self.api != Api::Chat {
            return;
        }
        scratch.clear();
        scratch.extend_from_slice(b"data: ");
        self.push_envelope(scratch, "chat.completion.chunk");
        scratch.extend_from_slice(
            b",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\
              \"finish_reason\":null}],\"prompt_token_ids\":null,\"prompt_text\":null}\n\n",
        );
        encode_chunk(out, scratch);
    }

    /// Appends content event `index` (0-based); the last one carries `finish_reason`.
    pub(crate) fn push_content_event(
        &self,
        index: usize,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) {
        let last = index + 1 >= self.tokens;
        let finish: &[u8] = if last { b"\"length\"" } else { b"null" };
        scratch.clear();
        scratch.extend_from_slice(b"data: ");
        match self.api {
            Api::Chat => {
                self.push_envelope(scratch, "chat.completion.chunk");
                scratch.extend_from_slice(b",\"choices\":[{\"index\":0,\"delta\":{\"content\":");
                self.push_text(scratch, 1);
                scratch.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":");
                scratch.extend_from_slice(finish);
                if last {
                    scratch.extend_from_slice(b",\"stop_reason\":null");
                }
                scratch.extend_from_slice(b",\"token_ids\":null}]");
            }
            Api::Text => {
                self.push_envelope(scratch, "text_completion");
                scratch.extend_from_slice(b",\"choices\":[{\"index\":0,\"text\":");
                self.push_text(scratch, 1);
                scratch.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
                scratch.extend_from_slice(finish);
                scratch.extend_from_slice(
                    b",\"stop_reason\":null,\"prompt_token_ids\":null,\"token_ids\":null}]",
                );
            }
        }
        // vLLM puts system_fingerprint on the finishing chunk unless a usage chunk follows.
        if last && !self.include_usage {
            scratch.extend_from_slice(b",\"system_fingerprint\":");
            push_json_string(scratch, SYSTEM_FINGERPRINT);
        }
        scratch.extend_from_slice(b"}\n\n");
        encode_chunk(out, scratch);
    }

    /// Appends the usage event (when asked for), `data: [DONE]` and the last chunk.
    pub(crate) fn push_tail(&self, out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
        if self.include_usage {
            let (p, c) = (self.prompt_tokens, self.completion_tokens());
            scratch.clear();
            scratch.extend_from_slice(b"data: ");
            let object = match self.api {
                Api::Chat => "chat.completion.chunk",
                Api::Text => "text_completion",
            };
            self.push_envelope(scratch, object);
            let _ = write!(
                scratch,
                ",\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\
                 \"completion_tokens\":{c},\"prompt_tokens_details\":{{\"cached_tokens\":0",
                p + c
            );
            if self.api == Api::Chat {
                scratch.extend_from_slice(b",\"created_cache_tokens\":0");
            }
            scratch.extend_from_slice(b"}},\"system_fingerprint\":");
            push_json_string(scratch, SYSTEM_FINGERPRINT);
            scratch.extend_from_slice(b"}\n\n");
            encode_chunk(out, scratch);
        }
        encode_chunk(out, b"data: [DONE]\n\n");
        out.extend_from_slice(LAST_CHUNK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(api: Api, tokens: usize, include_usage: bool) -> Completion<'static> {
        Completion {
            api,
            id: if api == Api::Chat {
                "chatcmpl-ref-req-0003"
            } else {
                "cmpl-abc"
            },
            created: 1_796_015_951,
            model: "tiny",
            prompt_tokens: 23,
            tokens,
            include_usage,
        }
    }

    #[test]
    fn bodies_are_json_with_vllm_fields() {
        for api in [Api::Chat, Api::Text] {
            let mut b = Vec::new();
            completion(api, 3, false).push_body(&mut b);
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(v["usage"]["completion_tokens"], 3);
            assert_eq!(v["usage"]["total_tokens"], 26);
            assert_eq!(v["choices"][0]["finish_reason"], "length");
            let text = match api {
                Api::Chat => v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                Api::Text => v["choices"][0]["text"].as_str().unwrap().to_owned(),
            };
            assert_eq!(text, TOKEN_TEXT.repeat(3));
        }
    }

    #[test]
    fn chat_stream_matches_the_capture_shape() {
        // Same event sequence as shared/fixtures/vllm/http-extra/29_chat_stream_x_request_id.
        let c = completion(Api::Chat, 2, true);
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        c.push_first_event(&mut out, &mut scratch);
        c.push_content_event(0, &mut out, &mut scratch);
        c.push_content_event(1, &mut out, &mut scratch);
        c.push_tail(&mut out, &mut scratch);
        let mut dec = inferrail_wire::ChunkedDecoder::new();
        let mut body = Vec::new();
        let p = dec.feed(&out, Some(&mut body)).unwrap();
        assert!(p.done && p.consumed == out.len());
        let text = String::from_utf8(body).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 5);
        let json: Vec<serde_json::Value> = events[..4]
            .iter()
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(json[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            json[1]["choices"][0]["finish_reason"],
            serde_json::Value::Null
        );
        assert_eq!(json[2]["choices"][0]["finish_reason"], "length");
        assert!(json[2].get("system_fingerprint").is_none());
        assert_eq!(json[3]["usage"]["completion_tokens"], 2);
        assert_eq!(json[3]["id"], "chatcmpl-ref-req-0003");
        assert_eq!(events[4], "data: [DONE]");
    }

    #[test]
    fn head_order_follows_uvicorn() {
        let mut out = Vec::new();
        push_head(
            &mut out,
            &Head {
                status: 200,
                date: b"Mon, 30 Nov 2026 05:19:10 GMT",
                request_id: b"ref-req-0003",
                framing: Framing::EventStream,
                allow: None,
                retry_after: false,
                close: false,
            },
        );
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 05:19:10 GMT\r\nserver: uvicorn\r\n\
             content-type: text/event-stream; charset=utf-8\r\nvary: Origin\r\n\
             x-request-id: ref-req-0003\r\ntransfer-encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn error_bodies_parse() {
        for b in [
            status_body(503),
            status_body(418),
            unknown_model_body("x", "tiny"),
            detail_body(404),
        ] {
            serde_json::from_slice::<serde_json::Value>(&b).unwrap();
        }
        let v: serde_json::Value = serde_json::from_slice(&status_body(503)).unwrap();
        assert_eq!(v["error"]["type"], "ServiceUnavailableError");
        assert_eq!(v["error"]["code"], 503);
        let v: serde_json::Value = serde_json::from_slice(&models_body("m\"x", 5, "00")).unwrap();
        assert_eq!(v["data"][0]["id"], "m\"x");
    }
}
