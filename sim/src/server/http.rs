//! The HTTP side: one handler task per connection (HTTP/1.1 keep-alive, requests in order),
//! routing through [`crate::openai::route`], completions through the engine core, and headers in
//! uvicorn's order (`date`, `server`, [`allow`], `content-length`, [`content-type`], `vary`,
//! [`x-request-id`], [`connection`]; streams: `content-type`, `vary`, [`x-request-id`],
//! `transfer-encoding: chunked`). SSE events go out one write (one HTTP chunk) each.

use inferrail_shards::tokenize::{Endpoint, ModelTokenizer};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use inferrail_shards::builtin::BuiltinTokenizer;
use inferrail_wire::headers::is_valid_request_id;
use inferrail_wire::{encode_chunk, push_header, Method, RequestHead, LAST_CHUNK};
use monoio::io::OwnedWriteHalf;
use monoio::net::TcpStream;
use serde_json::Value;

use super::conn::{next_head, read_body, BodyError, Conn, NextHead, Writer};
use super::core::{Core, Done, Ev, Slot, Submit};
use crate::clock::Clock;
use crate::openai::{
    self, check_prompt_len, completion_body, detokenize_body, load_body, models_body,
    parse_detokenize, parse_request, response_id, Api, ApiError, ChatMessage, CompletionRequest,
    Generated, ModelCard, PromptInput, ResponseMeta, Route, StreamWriter, Usage, CONTENT_TYPE_JSON,
    CONTENT_TYPE_SSE, RESET_PREFIX_CACHE_BODY, VERSION_BODY,
};
use crate::prom::{HttpMetrics, HttpRequest, ProcessStats};

/// What every handler on the server thread shares.
pub(crate) struct Ctx {
    pub(crate) core: Rc<RefCell<Core>>,
    pub(crate) clock: RefCell<Clock>,
    /// prometheus-fastapi-instrumentator's `http_*` families, appended to `/metrics`.
    pub(crate) http_metrics: RefCell<HttpMetrics>,
    pub(crate) server: openai::ServerInfo,
    pub(crate) fingerprint: String,
    pub(crate) prompt_tokens_details: bool,
    pub(crate) request_id_headers: bool,
    pub(crate) seed: u64,
    /// The `/kv_event_sources` body, built once from the KV events config (`{}` when off).
    pub(crate) kv_event_sources: String,
    /// Prompt tokenization (the builtin tokenizer unless `--tokenizer`), shared with the gateway.
    pub(crate) tokenizer: Arc<ModelTokenizer>,
    /// `--enable-scale-out`: the render routes answer (else vLLM's 403).
    pub(crate) enable_scale_out: bool,
    /// With `VLLM_SERVER_DEV_MODE=1`: the options and system facts `/server_info` describes
    /// (`None`: the route is not registered).
    pub(crate) server_info: Option<Box<(super::SimOptions, super::info::SystemFacts)>>,
}

/// The deterministic chat template (documented on [`super`]).
pub fn apply_chat_template(
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    continue_final_message: bool,
) -> String {
    let mut text = String::new();
    for (i, m) in messages.iter().enumerate() {
        let _ = write!(text, "{}: {}", m.role, m.content.as_deref().unwrap_or(""));
        let last = i + 1 == messages.len();
        if !(last && continue_final_message) {
            text.push('\n');
        }
    }
    if add_generation_prompt && !continue_final_message {
        text.push_str("assistant: ");
    }
    text
}

/// The prompt token ids of a request: chat through the template with BOS; a completion
/// string with BOS unless `add_special_tokens` is false; token ids as given.
pub fn prompt_ids(req: &CompletionRequest) -> Vec<u32> {
    let tok = BuiltinTokenizer::new();
    match &req.input {
        PromptInput::Messages(m) => tok.encode_with_special(
            &apply_chat_template(m, req.add_generation_prompt, req.continue_final_message),
            true,
        ),
        PromptInput::Text(t) => tok.encode_with_special(t, req.add_special_tokens),
        PromptInput::TokenIds(ids) => ids.clone(),
    }
}

struct Resp<'a> {
    status: u16,
    allow: Option<&'a str>,
    content_type: Option<&'a str>,
    body: &'a [u8],
    rid: Option<&'a str>,
    close: bool,
}

fn reason(status: u16) -> &'static str {
    match inferrail_wire::headers::reason_phrase(status) {
        "" => match status {
            403 => "Forbidden",
            422 => "Unprocessable Entity",
            429 => "Too Many Requests",
            501 => "Not Implemented",
            _ => "",
        },
        r => r,
    }
}

fn push_status_date(out: &mut Vec<u8>, ctx: &Ctx, status: u16) {
    let _ = std::io::Write::write_fmt(
        out,
        format_args!("HTTP/1.1 {} {}\r\n", status, reason(status)),
    );
    let (date, _) = ctx.clock.borrow_mut().now();
    push_header(out, b"date", &date);
    push_header(out, b"server", b"uvicorn");
}

fn push_full(io: &mut Writer, ctx: &Ctx, r: &Resp<'_>) {
    io.started = Some((r.status, r.body.len() as u64));
    let out = &mut io.out;
    push_status_date(out, ctx, r.status);
    if let Some(a) = r.allow {
        push_header(out, b"allow", a.as_bytes());
    }
    push_header(out, b"content-length", r.body.len().to_string().as_bytes());
    if let Some(ct) = r.content_type {
        push_header(out, b"content-type", ct.as_bytes());
    }
    push_header(out, b"vary", b"Origin");
    if let Some(rid) = r.rid {
        push_header(out, b"x-request-id", rid.as_bytes());
    }
    if r.close {
        push_header(out, b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(r.body);
}

fn push_stream_head(io: &mut Writer, ctx: &Ctx, rid: Option<&str>, close: bool) {
    io.started = Some((200, 0));
    let out = &mut io.out;
    push_status_date(out, ctx, 200);
    push_header(out, b"content-type", CONTENT_TYPE_SSE.as_bytes());
    push_header(out, b"vary", b"Origin");
    if let Some(rid) = rid {
        push_header(out, b"x-request-id", rid.as_bytes());
    }
    if close {
        push_header(out, b"connection", b"close");
    }
    push_header(out, b"transfer-encoding", b"chunked");
    out.extend_from_slice(b"\r\n");
}

/// The `x-request-id` response header (only with `--enable-request-id-headers`): the client's
/// when valid, else 32 random hex digits.
fn header_rid(ctx: &Ctx, head: &RequestHead) -> Option<String> {
    if !ctx.request_id_headers {
        return None;
    }
    Some(match head.header("x-request-id") {
        Some(v) if is_valid_request_id(v) => String::from_utf8_lossy(v).into_owned(),
        _ => ctx.clock.borrow_mut().hex(32),
    })
}

/// Serves requests on one connection until it closes, idles out or must not be reused.
pub(crate) async fn serve(ctx: &Ctx, conn: &Conn, wr: OwnedWriteHalf<TcpStream>) {
    let mut io = Writer::new(wr);
    loop {
        let head = match next_head(conn).await {
            NextHead::Head(h) => h,
            NextHead::Done => return,
            NextHead::Bad(status) => {
                let body = format!("{{\"detail\":\"{}\"}}", reason(status));
                push_full(
                    &mut io,
                    ctx,
                    &Resp {
                        status,
                        allow: None,
                        content_type: Some(CONTENT_TYPE_JSON),
                        body: body.as_bytes(),
                        rid: None,
                        close: true,
                    },
                );
                let _ = io.flush(conn).await;
                return;
            }
        };
        let keep = handle(ctx, conn, &mut io, &head).await;
        if !keep || head.close {
            return;
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn simple(
    ctx: &Ctx,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    status: u16,
    allow: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
) -> bool {
    let rid = header_rid(ctx, head);
    push_full(
        io,
        ctx,
        &Resp {
            status,
            allow,
            content_type,
            body,
            rid: rid.as_deref(),
            close: head.close,
        },
    );
    io.flush(conn).await.is_ok()
}

async fn error(ctx: &Ctx, conn: &Conn, io: &mut Writer, head: &RequestHead, e: &ApiError) -> bool {
    simple(
        ctx,
        conn,
        io,
        head,
        e.status,
        e.allow,
        Some(CONTENT_TYPE_JSON),
        e.body.as_bytes(),
    )
    .await
}

/// Answers one request; returns whether the connection may serve another.
async fn handle(ctx: &Ctx, conn: &Conn, io: &mut Writer, head: &RequestHead) -> bool {
    let start = Instant::now();
    io.started = None;
    if head.expect_continue
        && !matches!(head.framing, inferrail_wire::BodyFraming::Length(0))
        && conn.inbox.borrow().is_empty()
    {
        io.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        if io.flush(conn).await.is_err() {
            return false;
        }
    }
    let body = match read_body(conn, head.framing).await {
        Ok(b) => b,
        Err(BodyError::Gone) => return false,
        Err(e) => {
            let status = if matches!(e, BodyError::TooLarge) {
                413
            } else {
                400
            };
            let body = format!("{{\"detail\":\"{}\"}}", reason(status));
            push_full(
                io,
                ctx,
                &Resp {
                    status,
                    allow: None,
                    content_type: Some(CONTENT_TYPE_JSON),
                    body: body.as_bytes(),
                    rid: None,
                    close: true,
                },
            );
            let _ = io.flush(conn).await;
            return false;
        }
    };
    let method = match head.method {
        Method::Get => "GET",
        Method::Post => "POST",
        Method::Head => "HEAD",
        _ => "OTHER",
    };
    let path = String::from_utf8_lossy(head.path()).into_owned();
    let routed = openai::route_with(method, &path, ctx.server_info.is_some());
    let template = routed.as_ref().ok().map(|r| route_template(*r));
    let keep = match routed {
        Ok(route) => respond(ctx, conn, io, head, route, &body).await,
        Err(e) => error(ctx, conn, io, head, &e).await,
    };
    record_http(ctx, io, head, template, &path, start);
    keep
}

/// FastAPI's route template (the instrumentator's `handler`) of a route.
fn route_template(route: Route) -> &'static str {
    match route {
        Route::ChatCompletions => "/v1/chat/completions",
        Route::Completions => "/v1/completions",
        Route::Models => "/v1/models",
        Route::Health => "/health",
        Route::Version => "/version",
        Route::Metrics => "/metrics",
        Route::ResetPrefixCache => "/reset_prefix_cache",
        Route::Tokenize => "/tokenize",
        Route::Detokenize => "/detokenize",
        Route::Ping => "/ping",
        Route::Load => "/load",
        Route::KvEventSources => "/kv_event_sources",
        Route::RenderChat => "/v1/chat/completions/render",
        Route::RenderCompletions => "/v1/completions/render",
        Route::RenderMessages => "/v1/messages/render",
        Route::ServerInfo => "/server_info",
    }
}

/// Records one answered request in the `http_*` metrics as prometheus-fastapi-instrumentator
/// does: from the request reaching the app (head parsed) to the end of the response; sizes
/// from the `Content-Length` headers (0 when absent: chunked requests, streamed responses);
/// status 500 when no response was started (the client left first), the instrumentator's
/// default (unverified against vLLM's cancellation path).
fn record_http(
    ctx: &Ctx,
    io: &Writer,
    head: &RequestHead,
    route: Option<&str>,
    path: &str,
    start: Instant,
) {
    let raw_method = head.bytes.split(|b| *b == b' ').next().unwrap_or(b"");
    let method = String::from_utf8_lossy(raw_method);
    let request_size = head
        .header("content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let (status, response_size) = io.started.unwrap_or((500, 0));
    let now_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    ctx.http_metrics.borrow_mut().observe(&HttpRequest {
        route,
        path,
        method: &method,
        status,
        request_size,
        response_size,
        duration: start.elapsed().as_secs_f64(),
        now_unix,
    });
}

/// Answers a routed request; returns whether the connection may serve another.
async fn respond(
    ctx: &Ctx,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    route: Route,
    body: &[u8],
) -> bool {
    if matches!(
        route,
        Route::ChatCompletions | Route::Completions | Route::Tokenize | Route::Detokenize
    ) {
        if let Err(e) = openai::check_json_media_type(head.header("content-type"), body) {
            return error(ctx, conn, io, head, &e).await;
        }
    }
    match route {
        Route::Health | Route::Ping => simple(ctx, conn, io, head, 200, None, None, b"").await,
        Route::Load => {
            // vLLM counts in-flight requests only with --enable-server-load-tracking (off).
            let b = load_body(0);
            let ct = Some(CONTENT_TYPE_JSON);
            simple(ctx, conn, io, head, 200, None, ct, b.as_bytes()).await
        }
        Route::KvEventSources => {
            let ct = Some(CONTENT_TYPE_JSON);
            let b = ctx.kv_event_sources.as_bytes();
            simple(ctx, conn, io, head, 200, None, ct, b).await
        }
        Route::Detokenize => match parse_detokenize(body, &ctx.server) {
            Ok(ids) => {
                let text = BuiltinTokenizer::new().decode_with_special(&ids);
                let b = detokenize_body(&text);
                let ct = Some(CONTENT_TYPE_JSON);
                simple(ctx, conn, io, head, 200, None, ct, b.as_bytes()).await
            }
            Err(e) => error(ctx, conn, io, head, &e).await,
        },
        Route::Version => {
            let b = VERSION_BODY.as_bytes();
            simple(ctx, conn, io, head, 200, None, Some(CONTENT_TYPE_JSON), b).await
        }
        Route::Metrics => {
            let mut text = match read_process_stats() {
                Some(p) => ctx.core.borrow().metrics.render_with_process(&p),
                None => ctx.core.borrow().metrics.render(),
            };
            ctx.http_metrics.borrow().render_into(&mut text);
            let ct = Some(crate::prom::CONTENT_TYPE);
            simple(ctx, conn, io, head, 200, None, ct, text.as_bytes()).await
        }
        Route::Models => {
            let (_, created) = ctx.clock.borrow_mut().now();
            let perm = format!("modelperm-{}", ctx.clock.borrow_mut().hex(16));
            let model = &ctx.server.served_model_names[0];
            let body = models_body(&[ModelCard {
                id: model,
                created,
                root: model,
                max_model_len: ctx.server.max_model_len,
                permission_id: &perm,
            }]);
            let ct = Some(CONTENT_TYPE_JSON);
            simple(ctx, conn, io, head, 200, None, ct, body.as_bytes()).await
        }
        Route::ResetPrefixCache => {
            if ctx.core.borrow_mut().reset_prefix_cache() {
                let b = RESET_PREFIX_CACHE_BODY.as_bytes();
                simple(ctx, conn, io, head, 200, None, Some(CONTENT_TYPE_JSON), b).await
            } else {
                // Unverified wording: vLLM fails the reset while blocks are in use.
                let e = ApiError::vllm(
                    500,
                    "InternalServerError",
                    "Failed to reset prefix cache: blocks are still in use.",
                    None,
                );
                error(ctx, conn, io, head, &e).await
            }
        }
        Route::Tokenize => match tokenize(ctx, body) {
            Ok(b) => {
                let ct = Some(CONTENT_TYPE_JSON);
                simple(ctx, conn, io, head, 200, None, ct, b.as_bytes()).await
            }
            Err(e) => error(ctx, conn, io, head, &e).await,
        },
        Route::ChatCompletions => completion(ctx, conn, io, head, Api::Chat, body).await,
        Route::Completions => completion(ctx, conn, io, head, Api::Completions, body).await,
        Route::RenderChat | Route::RenderCompletions | Route::RenderMessages => {
            match render(ctx, head, route, body) {
                Ok(b) => {
                    let ct = Some(CONTENT_TYPE_JSON);
                    simple(ctx, conn, io, head, 200, None, ct, b.as_bytes()).await
                }
                Err(e) => error(ctx, conn, io, head, &e).await,
            }
        }
        Route::ServerInfo => match server_info(ctx, head) {
            Ok(b) => {
                let ct = Some(CONTENT_TYPE_JSON);
                simple(ctx, conn, io, head, 200, None, ct, b.as_bytes()).await
            }
            Err(e) => error(ctx, conn, io, head, &e).await,
        },
    }
}

/// `/server_info` (dev mode): the body for the request's `config_format`.
fn server_info(ctx: &Ctx, head: &RequestHead) -> Result<String, ApiError> {
    let Some(info) = ctx.server_info.as_deref() else {
        return Err(ApiError::route_not_found());
    };
    let target = String::from_utf8_lossy(head.target()).into_owned();
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let Some(json) = super::info::config_format_json(query) else {
        // Unverified wording (no capture): FastAPI's literal error for the query parameter.
        return Err(ApiError::bad_request(
            "config_format: Input should be 'text' or 'json'",
        ));
    };
    let env = super::info::vllm_env(std::env::vars());
    Ok(super::info::server_info_body(&info.0, json, &env, &info.1))
}

/// A request parsed, validated and tokenized exactly as the completion handlers do it.
struct Prepared {
    req: CompletionRequest,
    prompt: Vec<u32>,
    max_tokens: u32,
}

/// Parsing, tokenization and the context check shared by the completion handlers and the
/// render routes (so a render's `token_ids` are what the engine would prefill).
fn prepare(ctx: &Ctx, api: Api, body: &[u8]) -> Result<Prepared, ApiError> {
    let req = parse_request(api, body, &ctx.server)?;
    let endpoint = match api {
        Api::Chat => Endpoint::Chat,
        Api::Completions => Endpoint::Completion,
    };
    let prompt = ctx
        .tokenizer
        .prompt_ids(endpoint, body, &serde_json::Map::new())
        .map_err(|e| ApiError::bad_request(&e.to_string()))?;
    let max_tokens = check_prompt_len(&req, prompt.len() as u32, ctx.server.max_model_len)?;
    Ok(Prepared {
        req,
        prompt,
        max_tokens,
    })
}

/// A render route's body (`--enable-scale-out`, else vLLM's 403): the `GenerateRequest` of the
/// request, with no engine work.
fn render(ctx: &Ctx, head: &RequestHead, route: Route, body: &[u8]) -> Result<String, ApiError> {
    if !ctx.enable_scale_out {
        return Err(openai::scale_out_disabled());
    }
    let chat_body;
    let (api, body) = match route {
        Route::RenderCompletions => (Api::Completions, body),
        Route::RenderMessages => {
            chat_body = openai::anthropic_to_chat(body)?;
            (Api::Chat, &chat_body[..])
        }
        _ => (Api::Chat, body),
    };
    let p = prepare(ctx, api, body)?;
    let x_rid = head
        .header("x-request-id")
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let random = ctx.clock.borrow_mut().hex(16);
    let id = response_id(api, x_rid.as_deref(), p.req.request_id.as_deref(), &random);
    let r = openai::Rendered {
        request_id: &id,
        token_ids: &p.prompt,
        req: &p.req,
        max_tokens: p.max_tokens,
    };
    Ok(match api {
        Api::Chat => openai::chat_render_body(&r),
        Api::Completions => openai::completions_render_body(&[r]),
    })
}

/// Linux `USER_HZ`: the unit of the CPU times in `/proc/<pid>/stat` (100 on every Linux ABI).
const CLOCK_TICKS: f64 = 100.0;

/// This process's figures from `/proc`, read as prometheus_client's `ProcessCollector` does:
/// `stat` fields 23 (vsize), 22 (starttime, ticks since boot, plus `btime` from `/proc/stat`),
/// 14 + 15 (utime + stime); resident memory from `status` `VmRSS` (the same page count as
/// `stat`'s rss, in kB); the entries of `fd`; the soft `Max open files` of `limits`.
/// `None` when `/proc` is not readable (not Linux): the families are then left out.
pub(crate) fn read_process_stats() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let parts: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |i: usize| parts.get(i).and_then(|v| v.parse::<f64>().ok());
    let virtual_memory_bytes = field(20)?;
    let start_ticks = field(19)?;
    let cpu_seconds_total = (field(11)? + field(12)?) / CLOCK_TICKS;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())?;
    let btime = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<f64>().ok())?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<f64>().ok())?;
    Some(ProcessStats {
        virtual_memory_bytes,
        resident_memory_bytes: rss_kb * 1024.0,
        start_time_seconds: start_ticks / CLOCK_TICKS + btime,
        cpu_seconds_total,
        open_fds,
        max_fds,
    })
}

/// `/tokenize`: `{"count","max_model_len","tokens","token_strs"}` for a `prompt` or `messages`.
fn tokenize(ctx: &Ctx, body: &[u8]) -> Result<String, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| ApiError::bad_json(body))?;
    if let Some(m) = v.get("model").and_then(Value::as_str) {
        if !ctx.server.served_model_names.iter().any(|s| s == m) {
            return Err(ApiError::unknown_model(m, &ctx.server.served_model_names));
        }
    }
    let tok = BuiltinTokenizer::new();
    let flag = |k: &str, d: bool| v.get(k).and_then(Value::as_bool).unwrap_or(d);
    let endpoint = if v.get("messages").is_some_and(Value::is_array) {
        Endpoint::Chat
    } else if v.get("prompt").is_some_and(Value::is_string) {
        Endpoint::Completion
    } else {
        return Err(ApiError::bad_request(
            "/tokenize needs a `prompt` string or `messages`.",
        ));
    };
    // The chat form defaults to a generation prompt, like vLLM's /tokenize.
    let mut body_value = v.clone();
    if let (Endpoint::Chat, Value::Object(o)) = (endpoint, &mut body_value) {
        o.entry("add_generation_prompt")
            .or_insert(Value::Bool(true));
    }
    let body = serde_json::to_vec(&body_value).map_err(|_| ApiError::bad_json(body))?;
    let ids = ctx
        .tokenizer
        .prompt_ids(endpoint, &body, &serde_json::Map::new())
        .map_err(|e| ApiError::bad_request(&e.to_string()))?;
    let mut out = format!(
        "{{\"count\":{},\"max_model_len\":{},\"tokens\":{:?},\"token_strs\":",
        ids.len(),
        ctx.server.max_model_len,
        ids
    )
    .replace(", ", ",");
    if flag("return_token_strs", false) {
        let strs: Vec<String> = ids.iter().map(|&t| tok.decode_with_special(&[t])).collect();
        out.push_str(&serde_json::to_string(&strs).unwrap_or_else(|_| "null".into()));
    } else {
        out.push_str("null");
    }
    out.push('}');
    Ok(out)
}

/// What the response task waits for: engine events, or the client going away.
enum Wait {
    Events(Vec<Ev>),
    Gone,
}

async fn wait(conn: &Conn, slot: &Slot) -> Wait {
    poll_fn(|cx| {
        if !slot.is_empty() {
            return Poll::Ready(Wait::Events(slot.drain()));
        }
        if conn.gone() {
            return Poll::Ready(Wait::Gone);
        }
        slot.register(cx.waker());
        conn.register(cx.waker());
        Poll::Pending
    })
    .await
}

/// Withdraws the request when dropped before it finished (client gone, write failed).
struct AbortGuard<'a> {
    core: &'a RefCell<Core>,
    id: u64,
    done: bool,
}

impl Drop for AbortGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.core.borrow_mut().abort(self.id);
        }
    }
}

fn seed_of(ctx: &Ctx, req: &CompletionRequest, id_hint: u64) -> u64 {
    let base = match req.seed {
        Some(s) => s as u64,
        None => id_hint,
    };
    base ^ ctx.seed.rotate_left(17) ^ 0x5157_u64
}

async fn completion(
    ctx: &Ctx,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    api: Api,
    body: &[u8],
) -> bool {
    let Prepared {
        req,
        prompt,
        max_tokens,
    } = match prepare(ctx, api, body) {
        Ok(p) => p,
        Err(e) => return error(ctx, conn, io, head, &e).await,
    };
    let prompt_len = prompt.len();
    let x_rid = head
        .header("x-request-id")
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let random = ctx.clock.borrow_mut().hex(16);
    let id = response_id(api, x_rid.as_deref(), req.request_id.as_deref(), &random);
    let rid = header_rid(ctx, head);
    let (_, created) = ctx.clock.borrow_mut().now();

    let mut stop_token_ids = req.stop_token_ids.clone();
    if !req.ignore_eos {
        stop_token_ids.push(BuiltinTokenizer::new().eos_id());
    }
    let seed_hint = u64::from_str_radix(&random, 16).unwrap_or(0);
    let submit = Submit {
        prompt: if req.return_token_ids {
            prompt.clone()
        } else {
            prompt
        },
        max_tokens: max_tokens as usize,
        min_tokens: usize::try_from(req.min_tokens).unwrap_or(0),
        stop_token_ids,
        stop: req.stop.clone(),
        seed: seed_of(ctx, &req, seed_hint),
        max_tokens_param: req.max_tokens.and_then(|m| u64::try_from(m).ok()),
        include_stop_str_in_output: req.include_stop_str_in_output,
        cache_salt: req.cache_salt.clone(),
    };
    let submitted = ctx.core.borrow_mut().submit(submit);
    let (sid, slot) = match submitted {
        Ok(s) => s,
        Err(e) => {
            let e = ApiError::bad_request(&e.to_string());
            return error(ctx, conn, io, head, &e).await;
        }
    };
    let mut guard = AbortGuard {
        core: &ctx.core,
        id: sid,
        done: false,
    };
    let meta = ResponseMeta {
        id: &id,
        created,
        model: &req.model,
        system_fingerprint: &ctx.fingerprint,
    };
    let prompt_token_ids: Option<Vec<u32>> = if req.return_token_ids {
        Some(prompt_ids(&req))
    } else {
        None
    };
    let usage_of = |d: &Done| Usage {
        prompt_tokens: prompt_len as u32,
        completion_tokens: d.completion_tokens,
        cached_tokens: ctx.prompt_tokens_details.then_some(d.cached_tokens),
        created_cache_tokens: ctx
            .core
            .borrow()
            .created_cache_tokens(prompt_len, d.cached_tokens as usize),
    };

    if !req.stream {
        let mut text = String::new();
        let mut ids = Vec::new();
        let done = loop {
            match wait(conn, &slot).await {
                Wait::Gone => return false,
                Wait::Events(evs) => {
                    let mut done = None;
                    for ev in evs {
                        match ev {
                            Ev::Token { id, text: t } => {
                                text.push_str(&t);
                                ids.push(id);
                            }
                            Ev::Done(d) => done = Some(d),
                        }
                    }
                    if let Some(d) = done {
                        break d;
                    }
                }
            }
        };
        guard.done = true;
        let gen = Generated {
            text: &text,
            finish: done.finish.clone(),
            token_ids: req.return_token_ids.then_some(&ids[..]),
            prompt_token_ids: prompt_token_ids.as_deref(),
        };
        let body = completion_body(api, &meta, &gen, &usage_of(&done));
        return simple(
            ctx,
            conn,
            io,
            head,
            200,
            None,
            Some(CONTENT_TYPE_JSON),
            body.as_bytes(),
        )
        .await;
    }

    // Streaming: the head at once, the first events with the first token, one write per event.
    push_stream_head(io, ctx, rid.as_deref(), head.close);
    if io.flush(conn).await.is_err() {
        return false;
    }
    let mut w = StreamWriter::new(
        api,
        meta,
        req.include_usage,
        req.continuous_usage_stats,
        prompt_len as u32,
        prompt_token_ids.as_deref(),
    );
    let mut started = false;
    let mut generated = 0u32;
    let mut event = String::new();
    // Within one step's batch of events a token is held back until the next event shows whether
    // it is the last (then it carries the finish reason, as vLLM's last content chunk does).
    let mut held: Option<(String, u32)> = None;
    loop {
        let evs = match wait(conn, &slot).await {
            Wait::Gone => return false,
            Wait::Events(evs) => evs,
        };
        for ev in evs {
            if !started {
                started = true;
                event.clear();
                w.start(&mut event);
                if !event.is_empty() && send_event(conn, io, &event).await.is_err() {
                    return false;
                }
            }
            match ev {
                Ev::Token { id: tid, text } => {
                    if let Some((t, i)) = held.take() {
                        generated += 1;
                        event.clear();
                        let ids = [i];
                        let tids = req.return_token_ids.then_some(&ids[..]);
                        w.token(&mut event, &t, tids, generated, None);
                        if send_event(conn, io, &event).await.is_err() {
                            return false;
                        }
                    }
                    held = Some((text, tid));
                }
                Ev::Done(d) => {
                    guard.done = true;
                    event.clear();
                    let (t, ids) = match held.take() {
                        Some((t, i)) => {
                            generated += 1;
                            (t, vec![i])
                        }
                        None => (String::new(), Vec::new()),
                    };
                    let tids = req.return_token_ids.then_some(&ids[..]);
                    w.token(&mut event, &t, tids, generated, Some(&d.finish));
                    if send_event(conn, io, &event).await.is_err() {
                        return false;
                    }
                    event.clear();
                    w.end(&mut event, &usage_of(&d));
                    if send_event(conn, io, &event).await.is_err() {
                        return false;
                    }
                    io.out.extend_from_slice(LAST_CHUNK);
                    return io.flush(conn).await.is_ok();
                }
            }
        }
        // Events of one step arrive together: a token not followed by the end is not the last.
        if let Some((t, i)) = held.take() {
            generated += 1;
            event.clear();
            let ids = [i];
            let tids = req.return_token_ids.then_some(&ids[..]);
            w.token(&mut event, &t, tids, generated, None);
            if send_event(conn, io, &event).await.is_err() {
                return false;
            }
        }
    }
}

/// Writes each SSE event of `events` as one HTTP chunk, one write per event.
async fn send_event(conn: &Conn, io: &mut Writer, events: &str) -> Result<(), ()> {
    for ev in events.split_inclusive("\n\n") {
        encode_chunk(&mut io.out, ev.as_bytes());
        io.flush(conn).await?;
    }
    Ok(())
}
