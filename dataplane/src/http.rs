//! One client connection: read requests, answer local routes, hand completions to the proxy.

use crate::core_state::{CoreContext, CoreView};
use crate::metrics::{CoreRecorder, ErrorReason, Outcome};
use crate::observe::sampled;
use crate::proxy::{forward, ProxyRequest};
use crate::snapshot::Snapshot;
use inferrail_routing::split::{conversation_key, named_conversation, session_hash};
use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::headers::is_valid_request_id;
use inferrail_wire::json_field::find_top_level_string;
use inferrail_wire::{
    find_model, full_response, openai_error, splice_model, BodyFraming, ChunkedDecoder, ErrorKind,
    Method, ModelField, ModelFieldError, RequestHead,
};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::timeout_at;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request head accepted (request line and headers).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Smallest free space offered to a socket read.
const READ_CHUNK: usize = 16 * 1024;

/// A client connection and the bytes read from it but not used yet.
pub struct ClientConn {
    /// The client socket.
    pub stream: TcpStream,
    /// Bytes read and not consumed, starting at `pos`.
    buf: Vec<u8>,
    pos: usize,
    /// A response buffer kept between requests so a request does not allocate one.
    spare: Vec<u8>,
}

/// Why the head of the next request could not be had.
enum HeadFailure {
    /// Clean end: the client closed or idled out between requests. Close silently.
    Idle,
    /// A partial head timed out: answer 408 and close.
    Timeout,
    /// Not HTTP, or too big: answer 400/431 and close.
    Bad(ErrorKind, String),
}

/// Why a request body could not be read.
enum BodyFailure {
    TooLarge,
    Timeout,
    Closed,
    Malformed(String),
}

/// Reads more bytes from `stream` into the spare capacity of `buf`, growing it when needed.
pub(crate) async fn read_more(
    stream: &mut TcpStream,
    mut buf: Vec<u8>,
) -> (std::io::Result<usize>, Vec<u8>) {
    if buf.capacity() - buf.len() < READ_CHUNK {
        buf.reserve(READ_CHUNK);
    }
    let len = buf.len();
    let cap = buf.capacity();
    let (res, slice) = stream
        .read(monoio::buf::IoBufMut::slice_mut(buf, len..cap))
        .await;
    (res, slice.into_inner())
}

impl ClientConn {
    /// Wraps an accepted socket.
    pub fn new(stream: TcpStream) -> ClientConn {
        ClientConn {
            stream,
            buf: Vec::with_capacity(READ_CHUNK),
            pos: 0,
            spare: Vec::new(),
        }
    }

    /// Unconsumed bytes already read.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Reads until `deadline`; `Ok(0)` means the peer closed.
    async fn fill(&mut self, deadline: Instant) -> std::io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > self.buf.capacity() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let buf = std::mem::take(&mut self.buf);
        match timeout_at(deadline.into(), read_more(&mut self.stream, buf)).await {
            Ok((res, buf)) => {
                self.buf = buf;
                res
            }
            // The read was cancelled mid-flight: bytes may be lost, so the caller must close.
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }

    async fn read_head(&mut self, idle_timeout: Duration) -> Result<RequestHead, HeadFailure> {
        let deadline = Instant::now() + idle_timeout;
        loop {
            match RequestHead::parse(self.buffered()) {
                Ok(Some((head, used))) => {
                    self.consume(used);
                    return Ok(head);
                }
                Ok(None) if self.buffered().len() > MAX_HEAD_BYTES => {
                    return Err(HeadFailure::Bad(
                        ErrorKind::HeaderFieldsTooLarge,
                        "request head too large".into(),
                    ))
                }
                Ok(None) => {}
                Err(inferrail_wire::HeadError::TooManyHeaders) => {
                    return Err(HeadFailure::Bad(
                        ErrorKind::HeaderFieldsTooLarge,
                        "too many header lines".into(),
                    ))
                }
                Err(e) => return Err(HeadFailure::Bad(ErrorKind::BadRequest, e.to_string())),
            }
            let started = !self.buffered().is_empty();
            match self.fill(deadline).await {
                Ok(0) => return Err(HeadFailure::Idle),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut && started => {
                    return Err(HeadFailure::Timeout)
                }
                Err(_) => return Err(HeadFailure::Idle),
            }
        }
    }

    async fn read_body(
        &mut self,
        framing: BodyFraming,
        max: u64,
        deadline: Instant,
    ) -> Result<Vec<u8>, BodyFailure> {
        match framing {
            BodyFraming::Length(n) => {
                if n > max {
                    return Err(BodyFailure::TooLarge);
                }
                let n = n as usize;
                while self.buffered().len() < n {
                    match self.fill(deadline).await {
                        Ok(0) => return Err(BodyFailure::Closed),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                            return Err(BodyFailure::Timeout)
                        }
                        Err(_) => return Err(BodyFailure::Closed),
                    }
                }
                let body = self.buffered()[..n].to_vec();
                self.consume(n);
                Ok(body)
            }
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                let mut body = Vec::new();
                loop {
                    let progress = decoder
                        .feed(&self.buf[self.pos..], Some(&mut body))
                        .map_err(|e| BodyFailure::Malformed(e.to_string()))?;
                    self.consume(progress.consumed);
                    if body.len() as u64 > max {
                        return Err(BodyFailure::TooLarge);
                    }
                    if progress.done {
                        return Ok(body);
                    }
                    match self.fill(deadline).await {
                        Ok(0) => return Err(BodyFailure::Closed),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                            return Err(BodyFailure::Timeout)
                        }
                        Err(_) => return Err(BodyFailure::Closed),
                    }
                }
            }
            BodyFraming::UntilClose => Err(BodyFailure::Malformed("no body framing".into())),
        }
    }

    /// The connection's spare buffer (empty, possibly with capacity).
    pub(crate) fn take_spare(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.spare)
    }

    /// Keeps `buf` for the next request unless it grew large.
    pub(crate) fn put_spare(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= 4 * READ_CHUNK {
            buf.clear();
            self.spare = buf;
        }
    }

    /// Writes `bytes` to the client; false when the client is gone.
    pub async fn send(&mut self, bytes: Vec<u8>) -> bool {
        let (res, _) = self.stream.write_all(bytes).await;
        res.is_ok()
    }
}

/// Serves requests on one client connection until it closes, errs, idles out or the gateway
/// shuts down.
pub async fn serve_connection(ctx: Rc<CoreContext>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let entry = ctx.register_connection(std::os::fd::AsRawFd::as_raw_fd(&stream));
    let mut conn = ClientConn::new(stream);
    loop {
        if ctx.shutdown.is_triggered() && conn.buffered().is_empty() {
            return;
        }
        let header_timeout = ctx.current().snap.settings.header_read_timeout;
        let head = match conn.read_head(header_timeout).await {
            Ok(head) => head,
            Err(HeadFailure::Idle) => return,
            Err(failure) => {
                let refusal = match failure {
                    HeadFailure::Timeout => Refusal::new(
                        ErrorKind::RequestTimeout,
                        ErrorReason::BodyTimeout,
                        "request head did not arrive in time".into(),
                    ),
                    HeadFailure::Bad(kind, msg) => Refusal::new(kind, ErrorReason::BadRequest, msg),
                    HeadFailure::Idle => return,
                };
                let id = ctx.new_request_id();
                let _ = conn
                    .send(
                        refusal
                            .record(&ctx.current().recorder)
                            .response(&id, false, true),
                    )
                    .await;
                return;
            }
        };
        entry.set_busy(true);
        // The newest snapshot when the head arrived serves the whole request.
        let view = ctx.current();
        let keep = handle_request(&ctx, &view, &mut conn, head).await;
        entry.set_busy(false);
        if !keep {
            return;
        }
    }
}

/// The local routes and the proxied ones.
enum Route {
    Health,
    Models,
    Completion,
}

fn route(path: &[u8]) -> Option<Route> {
    match path {
        b"/health" => Some(Route::Health),
        b"/v1/models" => Some(Route::Models),
        b"/v1/chat/completions" | b"/v1/completions" => Some(Route::Completion),
        _ => None,
    }
}

/// An error the gateway answers itself, in the OpenAI shape.
pub(crate) struct Refusal {
    kind: ErrorKind,
    reason: ErrorReason,
    message: String,
    /// `param` of the error body.
    param: Option<&'static str>,
    /// `allow` header value for 405.
    allow: &'static [u8],
    /// The connection must close after the answer (its body was not read).
    close: bool,
}

impl Refusal {
    /// A refusal that keeps the connection open.
    pub(crate) fn new(kind: ErrorKind, reason: ErrorReason, message: String) -> Refusal {
        Refusal {
            kind,
            reason,
            message,
            param: None,
            allow: b"",
            close: false,
        }
    }

    fn closing(mut self, close: bool) -> Refusal {
        self.close |= close;
        self
    }

    fn allow(mut self, allow: &'static [u8]) -> Refusal {
        self.allow = allow;
        self
    }

    fn param(mut self, param: &'static str) -> Refusal {
        self.param = Some(param);
        self
    }

    /// Counts the error on this core.
    pub(crate) fn record(self, recorder: &CoreRecorder) -> Refusal {
        recorder.error(self.reason);
        self
    }

    /// The response bytes: OpenAI error body, `x-request-id`, `retry-after` on 503, `allow` on 405.
    pub(crate) fn response(&self, request_id: &str, head_only: bool, close: bool) -> Vec<u8> {
        let body = openai_error(self.kind, &self.message, self.param);
        let mut headers: Vec<(&str, &[u8])> = vec![("x-request-id", request_id.as_bytes())];
        if self.kind == ErrorKind::ServiceUnavailable {
            headers.push(("retry-after", b"1"));
        }
        if !self.allow.is_empty() {
            headers.push(("allow", self.allow));
        }
        full_response(
            self.kind.status(),
            &headers,
            Some("application/json"),
            &body,
            head_only,
            close || self.close,
        )
    }
}

/// What a request turned into once its head (and, for completions, its body) was read.
enum Prepared {
    /// Answer locally with these bytes; then close the connection if the flag says so.
    Local(Vec<u8>, bool),
    /// Proxy it.
    Proxy(ProxyRequest),
}

/// Handles one request whose head was read. Returns whether the connection may serve another.
async fn handle_request(
    ctx: &Rc<CoreContext>,
    view: &Rc<CoreView>,
    conn: &mut ClientConn,
    head: RequestHead,
) -> bool {
    let started = Instant::now();
    let request_id = match head.header("x-request-id") {
        Some(v) if is_valid_request_id(v) => String::from_utf8_lossy(v).into_owned(),
        _ => ctx.new_request_id(),
    };
    let head_only = head.method == Method::Head;
    let close = head.close;
    let recorder = &view.recorder;
    match prepare(&view.snap, conn, head, &request_id, started).await {
        Ok(Prepared::Proxy(request)) => forward(ctx, view, conn, request).await,
        Ok(Prepared::Local(bytes, close_after)) => conn.send(bytes).await && !close_after,
        Err(None) => {
            // The client left while sending its body.
            recorder.error(ErrorReason::ClientDisconnected);
            recorder.request(None, None, Outcome::ClientClosed);
            false
        }
        Err(Some(refusal)) => {
            let refusal = refusal.record(recorder);
            recorder.request(None, None, Outcome::Rejected);
            let keep = !close && !refusal.close;
            conn.send(refusal.response(&request_id, head_only, close))
                .await
                && keep
        }
    }
}

/// Routes the request, reads the body of a completion and fixes its model name. `Err(None)` means
/// the client went away.
async fn prepare(
    snap: &Arc<Snapshot>,
    conn: &mut ClientConn,
    head: RequestHead,
    request_id: &str,
    started: Instant,
) -> Result<Prepared, Option<Refusal>> {
    // A refused request whose body was not read leaves the connection unusable.
    let unread_body = head.framing != BodyFraming::Length(0);
    let head_only = head.method == Method::Head;
    let local_method = matches!(head.method, Method::Get | Method::Head);
    let local = |content_type: Option<&str>, body: &[u8]| {
        let id = [("x-request-id", request_id.as_bytes())];
        let close = head.close || unread_body;
        Prepared::Local(
            full_response(200, &id, content_type, body, head_only, close),
            close,
        )
    };
    match route(head.path()) {
        None => {
            let r = Refusal::new(
                ErrorKind::NotFound,
                ErrorReason::NotFound,
                "Not Found".into(),
            );
            return Err(Some(r.closing(unread_body)));
        }
        Some(Route::Health | Route::Models) if !local_method => {
            let r = Refusal::new(
                ErrorKind::MethodNotAllowed,
                ErrorReason::MethodNotAllowed,
                "Method Not Allowed".into(),
            );
            return Err(Some(r.allow(b"GET, HEAD").closing(unread_body)));
        }
        Some(Route::Health) => return Ok(local(None, b"")),
        Some(Route::Models) => return Ok(local(Some("application/json"), &snap.models_body)),
        Some(Route::Completion) if head.method != Method::Post => {
            let r = Refusal::new(
                ErrorKind::MethodNotAllowed,
                ErrorReason::MethodNotAllowed,
                "Method Not Allowed".into(),
            );
            return Err(Some(r.allow(b"POST").closing(unread_body)));
        }
        Some(Route::Completion) => {}
    }

    // A completion. Refuse an oversized upload before it starts.
    let settings = &snap.settings;
    let too_large = || {
        Refusal::new(
            ErrorKind::PayloadTooLarge,
            ErrorReason::BodyTooLarge,
            format!(
                "request body exceeds the limit of {} bytes",
                settings.max_body_bytes
            ),
        )
        .closing(true)
    };
    if matches!(head.framing, BodyFraming::Length(n) if n > settings.max_body_bytes) {
        return Err(Some(too_large()));
    }
    if head.expect_continue && !conn.send(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()).await {
        return Err(None);
    }
    let deadline = started + settings.request_timeout;
    let body = match conn
        .read_body(head.framing, settings.max_body_bytes, deadline)
        .await
    {
        Ok(body) => body,
        Err(BodyFailure::Closed) => return Err(None),
        Err(BodyFailure::Timeout) => {
            return Err(Some(
                Refusal::new(
                    ErrorKind::RequestTimeout,
                    ErrorReason::BodyTimeout,
                    "request body did not arrive within the request timeout".into(),
                )
                .closing(true),
            ))
        }
        Err(BodyFailure::TooLarge) => return Err(Some(too_large())),
        Err(BodyFailure::Malformed(msg)) => {
            return Err(Some(
                Refusal::new(ErrorKind::BadRequest, ErrorReason::BadRequest, msg).closing(true),
            ))
        }
    };

    // Only `model` is read; an alias or a missing model is fixed by splicing those bytes.
    let bad_request =
        |msg: String| Refusal::new(ErrorKind::BadRequest, ErrorReason::BadRequest, msg);
    let (model, body) = match find_model(&body) {
        Ok(ModelField::Present { name, value }) => match snap.model_index(&name) {
            Some(m) if snap.models[m].name == name => (m, body),
            Some(m) => {
                let field = ModelField::Present { name, value };
                let spliced = splice_model(&body, &field, &snap.models[m].name);
                (m, spliced)
            }
            None => {
                let msg = format!(
                    "The model `{name}` does not exist. Valid aliases: {}.",
                    snap.valid_names().join(", ")
                );
                let r = Refusal::new(ErrorKind::NotFound, ErrorReason::UnknownModel, msg);
                return Err(Some(r.param("model")));
            }
        },
        Ok(field @ ModelField::Absent { .. }) if snap.models.len() == 1 => {
            let spliced = splice_model(&body, &field, &snap.models[0].name);
            (0, spliced)
        }
        Ok(ModelField::Absent { .. }) => {
            return Err(Some(bad_request(
                "`model` is required when the gateway serves more than one model".into(),
            )))
        }
        Err(e @ (ModelFieldError::NotAString | ModelFieldError::NotJsonObject(_))) => {
            return Err(Some(bad_request(e.to_string())))
        }
    };
    // A split model's arm follows the conversation (x-session-id, else `user`, else the request
    // id), so a conversation stays on one arm; session affinity follows a named conversation.
    let entry = &snap.models[model];
    let affinity = entry.brain.session_affinity;
    let user = (entry.split.is_some() || affinity)
        .then(|| find_top_level_string(&body, "user"))
        .flatten();
    let session_header = head.header("x-session-id");
    let arm = entry.split.as_ref().map_or(0, |arms| {
        arms.choose(conversation_key(
            session_header,
            user.as_deref(),
            request_id,
        ))
    });
    let session = named_conversation(session_header, user.as_deref())
        .filter(|_| affinity)
        .map(session_hash);
    let rate = snap.settings.decision_sample_rate;
    let sampled = rate > 0.0 && sampled(request_id, rate);
    let endpoint = if head.path() == b"/v1/completions" {
        Endpoint::Completion
    } else {
        Endpoint::Chat
    };
    Ok(Prepared::Proxy(ProxyRequest {
        head,
        body: body.into(),
        model,
        arm,
        sampled,
        endpoint,
        request_id: request_id.to_string(),
        started,
        deadline,
        session,
    }))
}
