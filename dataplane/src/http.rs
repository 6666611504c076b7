//! One client connection: read requests, answer local routes, hand completions to the proxy.

use crate::client_conn::{BodyFailure, ClientConn, HeadFailure};
use crate::core_state::{CoreContext, CoreView};
use crate::metrics::{ErrorReason, Outcome};
use crate::observe::sampled;
use crate::proxy::forward;
use crate::refusal::Refusal;
use crate::request::ProxyRequest;
use crate::snapshot::Snapshot;
use bytes::Bytes;
use inferrail_routing::split::{conversation_key, named_conversation, session_hash};
use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::headers::is_valid_request_id;
use inferrail_wire::json_field::find_top_level_string;
use inferrail_wire::{
    find_model, full_response, splice_model, BodyFraming, ErrorKind, Method, ModelField,
    ModelFieldError, RequestHead,
};

use monoio::net::TcpStream;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

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
    // The id is written into the connection's kept buffer (given back after a proxied request).
    let mut request_id = conn.take_request_id_buf();
    match head.header("x-request-id") {
        // A valid id is ASCII: the lossy conversion never replaces anything.
        Some(v) if is_valid_request_id(v) => request_id.push_str(&String::from_utf8_lossy(v)),
        _ => ctx.write_request_id(&mut request_id),
    }
    let head_only = head.method == Method::Head;
    let close = head.close;
    let recorder = &view.recorder;
    match prepare(&view.snap, conn, head, &mut request_id, started).await {
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
/// the client went away. A proxied request takes `request_id` with it (left empty here); any
/// other outcome leaves it for the answer.
async fn prepare(
    snap: &Arc<Snapshot>,
    conn: &mut ClientConn,
    head: RequestHead,
    request_id: &mut String,
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
    let (model, spliced) = match find_model(&body) {
        Ok(ModelField::Present { name, value }) => match snap.model_index(&name) {
            Some(m) if snap.models[m].name == name => (m, None),
            Some(m) => {
                let field = ModelField::Present { name, value };
                (m, Some(splice_model(&body, &field, &snap.models[m].name)))
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
            (0, Some(splice_model(&body, &field, &snap.models[0].name)))
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
    let body = spliced.map_or(body, Bytes::from);
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
        body,
        model,
        arm,
        sampled,
        endpoint,
        request_id: std::mem::take(request_id),
        started,
        deadline,
        session,
    }))
}
