//! The handler task of a connection: routes each request and answers completions as the current
//! behavior says, keeping the engine's counters and the record of received requests.

use std::rc::Rc;
use std::time::{Duration, Instant};

use inferrail_wire::headers::is_valid_request_id;
use inferrail_wire::{BodyFraming, Method, RequestHead};
use monoio::io::OwnedWriteHalf;
use monoio::net::TcpStream;

use super::conn::{
    after, gone, next_head, pause, read_body, BodyError, Conn, Gone, Local, NextHead, Writer,
};
use super::framing;
use super::respond::{self, Api, Completion, Framing, Head};
use super::types::{Behavior, ReceivedRequest};
use crate::clock::Clock;

/// The `x-request-id` to send back: the client's when valid, else 32 random hex digits.
fn request_id(head: &RequestHead, clock: &mut Clock) -> (Vec<u8>, bool) {
    match head.header("x-request-id") {
        Some(v) if is_valid_request_id(v) => (v.to_vec(), true),
        _ => {
            let mut v = Vec::with_capacity(32);
            clock.push_hex(&mut v, 32);
            (v, false)
        }
    }
}

/// The response id: `<prefix><client request id>`, or `<prefix><16 random hex digits>`.
fn response_id(api: Api, rid: &[u8], from_client: bool, clock: &mut Clock) -> String {
    let mut id = Vec::with_capacity(48);
    id.extend_from_slice(api.id_prefix().as_bytes());
    if from_client {
        id.extend_from_slice(rid);
    } else {
        clock.push_hex(&mut id, 16);
    }
    // Both sources are ASCII.
    String::from_utf8(id).unwrap_or_default()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn received(head: &RequestHead, body: &[u8], at: Instant) -> ReceivedRequest {
    let method = head.bytes.split(|b| *b == b' ').next().unwrap_or_default();
    ReceivedRequest {
        method: lossy(method),
        path: lossy(head.target()),
        headers: head
            .header_lines()
            .map(|(n, v)| (lossy(n), lossy(v)))
            .collect(),
        body: body.to_vec(),
        received_at: at,
    }
}

/// The request fields the scripted engine reads.
#[derive(serde::Deserialize)]
struct Fields {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(serde::Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// How one completion exchange ended, for the counters.
enum Outcome {
    /// A response was written in full; keep the connection when `keep`.
    Answered { keep: bool },
    /// The engine closed the connection on purpose, without a response.
    Dropped,
    /// The exchange was cut short.
    Gone(Gone),
}

/// Serves requests on one connection until it closes, idles out or must not be reused.
pub(super) async fn serve(local: &Rc<Local>, conn: &Conn, wr: OwnedWriteHalf<TcpStream>) {
    let mut io = Writer::new(wr);
    loop {
        let head = match next_head(conn).await {
            NextHead::Head(h) => h,
            NextHead::Done => return,
            NextHead::Bad(status) => {
                let rid = request_id_fresh(local);
                push_error(local, &mut io, status, &rid, None, true, false);
                let _ = io.flush(conn).await;
                return;
            }
        };
        let keep = route(local, conn, &mut io, &head).await;
        if !keep || head.close {
            return;
        }
    }
}

fn request_id_fresh(local: &Local) -> Vec<u8> {
    let mut v = Vec::with_capacity(32);
    local.clock.borrow_mut().push_hex(&mut v, 32);
    v
}

/// Appends a `{"detail": …}` response for a routing or framing error.
fn push_error(
    local: &Local,
    io: &mut Writer,
    status: u16,
    rid: &[u8],
    allow: Option<&str>,
    close: bool,
    head_only: bool,
) {
    let (date, _) = local.clock.borrow_mut().now();
    let body = respond::detail_body(status);
    respond::push_full(
        &mut io.out,
        Head {
            status,
            date: &date,
            request_id: rid,
            framing: Framing::Length(0, None),
            allow,
            retry_after: false,
            close,
        },
        Some("application/json"),
        &body,
        head_only,
    );
}

/// Answers one request; returns whether the connection may serve another.
async fn route(local: &Rc<Local>, conn: &Conn, io: &mut Writer, head: &RequestHead) -> bool {
    let path = head.path();
    let (allowed, allow) = match path {
        b"/health" | b"/v1/models" => (head.method == Method::Get, "GET"),
        b"/v1/chat/completions" | b"/v1/completions" => (head.method == Method::Post, "POST"),
        _ => {
            return plain(
                local,
                conn,
                io,
                head,
                404,
                None,
                Some("application/json"),
                None,
            )
            .await;
        }
    };
    if !allowed {
        return plain(
            local,
            conn,
            io,
            head,
            405,
            Some(allow),
            Some("application/json"),
            None,
        )
        .await;
    }
    match path {
        b"/health" => plain(local, conn, io, head, 200, None, None, Some(Vec::new())).await,
        b"/v1/models" => {
            let (_, created) = local.clock.borrow_mut().now();
            let mut perm = Vec::with_capacity(16);
            local.clock.borrow_mut().push_hex(&mut perm, 16);
            let body = respond::models_body(&local.shared.model, created, &lossy(&perm));
            plain(
                local,
                conn,
                io,
                head,
                200,
                None,
                Some("application/json"),
                Some(body),
            )
            .await
        }
        b"/v1/chat/completions" => completion(local, conn, io, head, Api::Chat).await,
        _ => completion(local, conn, io, head, Api::Text).await,
    }
}

/// Reads and discards the body, then answers `status` with `body` (`None`: a `{"detail"}` body).
#[allow(clippy::too_many_arguments)]
async fn plain(
    local: &Local,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    status: u16,
    allow: Option<&str>,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
) -> bool {
    let (rid, _) = request_id(head, &mut local.clock.borrow_mut());
    match read_body(conn, head.framing).await {
        Ok(_) => {}
        Err(BodyError::Gone) => return false,
        Err(BodyError::Malformed) => {
            push_error(local, io, 400, &rid, None, true, false);
            let _ = io.flush(conn).await;
            return false;
        }
        Err(BodyError::TooLarge) => {
            push_error(local, io, 413, &rid, None, true, false);
            let _ = io.flush(conn).await;
            return false;
        }
    }
    let head_only = head.method == Method::Head;
    match body {
        None => push_error(local, io, status, &rid, allow, head.close, head_only),
        Some(body) => {
            let (date, _) = local.clock.borrow_mut().now();
            respond::push_full(
                &mut io.out,
                Head {
                    status,
                    date: &date,
                    request_id: &rid,
                    framing: Framing::Length(0, None),
                    allow,
                    retry_after: false,
                    close: head.close,
                },
                content_type,
                &body,
                head_only,
            );
        }
    }
    io.flush(conn).await.is_ok() && !head.close
}

/// A completion request: counted, recorded, then answered as the behavior says.
async fn completion(
    local: &Rc<Local>,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    api: Api,
) -> bool {
    let at = Instant::now();
    let behavior = local.behavior();
    let first_on_conn = !conn.carried_completion.replace(true);
    local.shared.with_stats(|s| {
        s.requests += 1;
        if first_on_conn {
            s.completion_connections += 1;
        }
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
    });
    let outcome = exchange(local, conn, io, head, api, &behavior, at).await;
    let client_gone = matches!(outcome, Outcome::Gone(Gone::Client));
    local.shared.with_stats(|s| {
        s.in_flight = s.in_flight.saturating_sub(1);
        if client_gone {
            s.client_disconnects += 1;
            s.last_disconnect = Some(Instant::now());
        }
    });
    matches!(outcome, Outcome::Answered { keep: true })
}

async fn exchange(
    local: &Local,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    api: Api,
    behavior: &Behavior,
    at: Instant,
) -> Outcome {
    if head.expect_continue
        && head.framing != BodyFraming::Length(0)
        && conn.inbox.borrow().is_empty()
    {
        io.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        if let Err(g) = io.flush(conn).await {
            return Outcome::Gone(g);
        }
    }
    let body = match read_body(conn, head.framing).await {
        Ok(b) => b,
        Err(BodyError::Gone) => return Outcome::Gone(gone(conn).unwrap_or(Gone::Client)),
        Err(e) => {
            let status = if matches!(e, BodyError::TooLarge) {
                413
            } else {
                400
            };
            let rid = request_id_fresh(local);
            push_error(local, io, status, &rid, None, true, false);
            return match io.flush(conn).await {
                Ok(()) => Outcome::Answered { keep: false },
                Err(g) => Outcome::Gone(g),
            };
        }
    };
    if local.shared.record {
        local.shared.record(received(head, &body, at));
    }
    match behavior {
        Behavior::Refuse | Behavior::CloseBeforeResponse => Outcome::Dropped,
        Behavior::Hang => match pause(conn, None).await {
            Err(g) => Outcome::Gone(g),
            Ok(()) => Outcome::Dropped,
        },
        Behavior::Status { code } => {
            let code = *code;
            let (rid, _) = request_id(head, &mut local.clock.borrow_mut());
            let (date, _) = local.clock.borrow_mut().now();
            let bodyless = code < 200 || code == 204 || code == 304;
            let body = if bodyless {
                Vec::new()
            } else {
                respond::status_body(code)
            };
            respond::push_full(
                &mut io.out,
                Head {
                    status: code,
                    date: &date,
                    request_id: &rid,
                    framing: Framing::Length(0, None),
                    allow: None,
                    retry_after: code == 503,
                    close: head.close,
                },
                (!bodyless).then_some("application/json"),
                &body,
                false,
            );
            match io.flush(conn).await {
                Ok(()) => Outcome::Answered { keep: !head.close },
                Err(g) => Outcome::Gone(g),
            }
        }
        Behavior::Raw { parts, gap } => {
            let keep = framing::keeps_connection(&parts.concat());
            let mut next = Instant::now();
            for (i, part) in parts.iter().enumerate() {
                if i > 0 && !gap.is_zero() {
                    let until = after(next, *gap);
                    if let Err(g) = pause(conn, until).await {
                        return Outcome::Gone(g);
                    }
                    next = until.unwrap_or(next);
                }
                io.out.extend_from_slice(part);
                if let Err(g) = io.flush(conn).await {
                    return Outcome::Gone(g);
                }
            }
            Outcome::Answered {
                keep: keep && !head.close,
            }
        }
        Behavior::Instant => generate(local, conn, io, head, api, &body, 1, Duration::ZERO).await,
        Behavior::Slow { delay } => {
            if let Err(g) = pause(conn, after(Instant::now(), *delay)).await {
                return Outcome::Gone(g);
            }
            generate(local, conn, io, head, api, &body, 1, Duration::ZERO).await
        }
        Behavior::Stream { chunks, interval } => {
            generate(
                local,
                conn,
                io,
                head,
                api,
                &body,
                (*chunks).max(1),
                *interval,
            )
            .await
        }
    }
}

/// Answers a completion: `tokens` content chunks `interval` apart when streaming, or one body
/// after `tokens * interval` otherwise. Bad JSON gets a 400, another model vLLM's 404.
#[allow(clippy::too_many_arguments)]
async fn generate(
    local: &Local,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    api: Api,
    body: &[u8],
    tokens: usize,
    interval: Duration,
) -> Outcome {
    let (rid, from_client) = request_id(head, &mut local.clock.borrow_mut());
    let fields: Fields = match serde_json::from_slice(body) {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("request body is not a valid completion request: {e}");
            return answer_json(
                local,
                conn,
                io,
                head,
                &rid,
                400,
                &respond::bad_request_body(&msg),
            )
            .await;
        }
    };
    if let Some(model) = fields.model.as_deref().filter(|m| *m != local.shared.model) {
        let msg = respond::unknown_model_body(model, &local.shared.model);
        return answer_json(local, conn, io, head, &rid, 404, &msg).await;
    }
    let stream = fields.stream.unwrap_or(false);
    let include_usage = fields
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let id = response_id(api, &rid, from_client, &mut local.clock.borrow_mut());
    let start = Instant::now();

    if !stream {
        if !interval.is_zero() {
            let total = u32::try_from(tokens)
                .ok()
                .and_then(|t| interval.checked_mul(t));
            let until = total.and_then(|t| after(start, t));
            if let Err(g) = pause(conn, until).await {
                return Outcome::Gone(g);
            }
        }
        let (date, created) = local.clock.borrow_mut().now();
        let c = Completion {
            api,
            id: &id,
            created,
            model: &local.shared.model,
            prompt_tokens: (body.len() / 4).max(1) as u64,
            tokens,
            include_usage,
        };
        io.scratch.clear();
        c.push_body(&mut io.scratch);
        respond::push_head(
            &mut io.out,
            &Head {
                status: 200,
                date: &date,
                request_id: &rid,
                framing: Framing::Length(io.scratch.len(), Some("application/json")),
                allow: None,
                retry_after: false,
                close: head.close,
            },
        );
        io.out.extend_from_slice(&io.scratch);
        return match io.flush(conn).await {
            Ok(()) => Outcome::Answered { keep: !head.close },
            Err(g) => Outcome::Gone(g),
        };
    }

    let (date, created) = local.clock.borrow_mut().now();
    let c = Completion {
        api,
        id: &id,
        created,
        model: &local.shared.model,
        prompt_tokens: (body.len() / 4).max(1) as u64,
        tokens,
        include_usage,
    };
    respond::push_head(
        &mut io.out,
        &Head {
            status: 200,
            date: &date,
            request_id: &rid,
            framing: Framing::EventStream,
            allow: None,
            retry_after: false,
            close: head.close,
        },
    );
    c.push_first_event(&mut io.out, &mut io.scratch);
    let mut next = start;
    for i in 0..tokens {
        if !interval.is_zero() {
            if let Err(g) = io.flush(conn).await {
                return Outcome::Gone(g);
            }
            let until = after(next, interval);
            if let Err(g) = pause(conn, until).await {
                return Outcome::Gone(g);
            }
            next = until.unwrap_or(next);
        }
        c.push_content_event(i, &mut io.out, &mut io.scratch);
    }
    c.push_tail(&mut io.out, &mut io.scratch);
    match io.flush(conn).await {
        Ok(()) => Outcome::Answered { keep: !head.close },
        Err(g) => Outcome::Gone(g),
    }
}

async fn answer_json(
    local: &Local,
    conn: &Conn,
    io: &mut Writer,
    head: &RequestHead,
    rid: &[u8],
    status: u16,
    body: &[u8],
) -> Outcome {
    let (date, _) = local.clock.borrow_mut().now();
    respond::push_full(
        &mut io.out,
        Head {
            status,
            date: &date,
            request_id: rid,
            framing: Framing::Length(0, None),
            allow: None,
            retry_after: false,
            close: head.close,
        },
        Some("application/json"),
        body,
        false,
    );
    match io.flush(conn).await {
        Ok(()) => Outcome::Answered { keep: !head.close },
        Err(g) => Outcome::Gone(g),
    }
}
