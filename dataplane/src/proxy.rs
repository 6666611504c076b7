//! Proxying one completion request: choose a replica, send the request, relay the response frame
//! by frame, retry on the failures that allow it, and stop the engine when the client leaves.

use crate::core_state::{CoreContext, CoreView, ReplicaSlot};
use crate::errors::AttemptError;
use crate::http::{read_more, ClientConn, Refusal};
use crate::metrics::{ErrorReason, Outcome};
use crate::observe::{DecisionRecord, ShadowJob};
use crate::predict::{Budget, PromptFacts};
use crate::sockets::ClientWatch;
use inferrail_routing::Candidate;
use inferrail_routing::FleetFacts;
use inferrail_routing::{brain, BrainParams, RouteInput};
use inferrail_shards::index::RecordTicket;
use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::headers::{is_hop_by_hop, listed_in_connection};
use inferrail_wire::{
    encode_chunk, push_decimal, push_header, BodyFraming, ChunkedDecoder, ErrorKind, Method,
    RequestHead, ResponseHead, LAST_CHUNK,
};
use monoio::io::AsyncWriteRentExt;
use monoio::net::TcpStream;
use monoio::time::{sleep, timeout_at};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Bodies up to this size are sent in the same write as the request head.
const COALESCE_BODY: usize = 64 * 1024;
/// Largest response head accepted from an engine.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// A completion request that was read and validated, ready to go upstream.
pub struct ProxyRequest {
    /// The client's request head.
    pub head: RequestHead,
    /// The body to forward (the client's bytes, with only the model name spliced if needed).
    pub body: Vec<u8>,
    /// Model index in the snapshot.
    pub model: usize,
    /// The model's split arm this request belongs to (0 without a split).
    pub arm: usize,
    /// The request's routing decisions go to the decision log.
    pub sampled: bool,
    /// Which completions endpoint it was sent to.
    pub endpoint: Endpoint,
    /// The request id (client's or generated), sent upstream and back.
    pub request_id: String,
    /// When the request head was read.
    pub started: Instant,
    /// When the request must be finished waiting on engines.
    pub deadline: Instant,
    /// The conversation's hash (`x-session-id`, else `user`), when session affinity is on and
    /// the request names one.
    pub session: Option<u64>,
}

/// Headers copied from the client to the engine: everything except hop-by-hop headers, those
/// the gateway sets itself, and `expect` (the gateway sends the whole body at once).
fn upstream_headers(head: &RequestHead, request_id: &str) -> Vec<u8> {
    let connection = head.header("connection").unwrap_or(b"");
    let mut out = Vec::with_capacity(head.bytes.len() + 64);
    for (name, value) in head.header_lines() {
        if is_hop_by_hop(name)
            || listed_in_connection(connection, name)
            || name.eq_ignore_ascii_case(b"host")
            || name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"x-request-id")
        {
            continue;
        }
        push_header(&mut out, name, value);
    }
    push_header(&mut out, b"x-request-id", request_id.as_bytes());
    out
}

/// The bytes of one upstream request for `authority`. The body is included when small.
fn upstream_request(head: &RequestHead, common: &[u8], authority: &str, body: &[u8]) -> Vec<u8> {
    let coalesce = body.len() <= COALESCE_BODY;
    let mut out = Vec::with_capacity(common.len() + 128 + if coalesce { body.len() } else { 0 });
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(head.target());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    push_header(&mut out, b"host", authority.as_bytes());
    out.extend_from_slice(common);
    out.extend_from_slice(b"content-length: ");
    push_decimal(&mut out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b"\r\n");
    if coalesce {
        out.extend_from_slice(body);
    }
    out
}

/// How the response body is carried from engine to client.
enum Relay {
    /// Content-length body passed through; bytes still expected.
    Length(u64),
    /// Chunked body passed through untouched; the decoder only finds its end.
    Chunked(ChunkedDecoder),
    /// Chunked body decoded for an HTTP/1.0 client, which gets it close-delimited.
    Dechunk(ChunkedDecoder),
    /// Close-delimited engine body re-framed as chunks for the client.
    Rechunk,
    /// Close-delimited engine body passed to an HTTP/1.0 client as is.
    RawUntilClose,
}

impl Relay {
    /// Turns body bytes from the engine into client bytes appended to `out`. Returns whether the
    /// body is complete and how many input bytes belonged to it.
    fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(bool, usize), String> {
        match self {
            Relay::Length(left) => {
                let take = (*left).min(input.len() as u64) as usize;
                out.extend_from_slice(&input[..take]);
                *left -= take as u64;
                Ok((*left == 0, take))
            }
            Relay::Chunked(d) => {
                let p = d.feed(input, None).map_err(|e| e.to_string())?;
                out.extend_from_slice(&input[..p.consumed]);
                Ok((p.done, p.consumed))
            }
            Relay::Dechunk(d) => {
                let p = d.feed(input, Some(out)).map_err(|e| e.to_string())?;
                Ok((p.done, p.consumed))
            }
            Relay::Rechunk => {
                encode_chunk(out, input);
                Ok((false, input.len()))
            }
            Relay::RawUntilClose => {
                out.extend_from_slice(input);
                Ok((false, input.len()))
            }
        }
    }

    /// Called at engine EOF: the bytes that end the client's body, or `None` if the body was cut.
    fn finish_at_eof(&self) -> Option<&'static [u8]> {
        match self {
            Relay::Rechunk => Some(LAST_CHUNK),
            Relay::RawUntilClose => Some(b""),
            _ => None,
        }
    }
}

/// The client-facing response head built from the engine's.
/// Gateway headers added to a proxied response besides `x-request-id`.
#[derive(Debug, Clone, Copy)]
struct HeadExtras<'a> {
    /// The policy that routed the request.
    policy: &'a str,
    /// Prompt tokens, when the prompt was tokenized.
    prompt_tokens: Option<u32>,
    /// Cached tokens predicted on the replica, when a prediction was made.
    cached_tokens: Option<u32>,
}

fn client_head(
    up: &ResponseHead,
    request_id: &str,
    replica: &str,
    extras: &HeadExtras<'_>,
    relay: &Relay,
    close: bool,
    minor: u8,
) -> Vec<u8> {
    let connection = up.header("connection").unwrap_or(b"");
    let mut out = Vec::with_capacity(up.bytes.len() + 96);
    out.extend_from_slice(if minor == 0 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    push_decimal(&mut out, u64::from(up.status));
    out.push(b' ');
    out.extend_from_slice(up.reason());
    out.extend_from_slice(b"\r\n");
    for (name, value) in up.header_lines() {
        if is_hop_by_hop(name)
            || listed_in_connection(connection, name)
            || name.eq_ignore_ascii_case(b"x-request-id")
            || name.eq_ignore_ascii_case(b"x-inferrail-replica")
            || name.eq_ignore_ascii_case(b"x-inferrail-policy")
            || name.eq_ignore_ascii_case(b"x-inferrail-prompt-tokens")
            || name.eq_ignore_ascii_case(b"x-inferrail-cached-tokens")
        {
            continue;
        }
        push_header(&mut out, name, value);
    }
    if matches!(relay, Relay::Chunked(_) | Relay::Rechunk) {
        push_header(&mut out, b"transfer-encoding", b"chunked");
    }
    push_header(&mut out, b"x-request-id", request_id.as_bytes());
    push_header(&mut out, b"x-inferrail-replica", replica.as_bytes());
    push_header(&mut out, b"x-inferrail-policy", extras.policy.as_bytes());
    let mut number = Vec::with_capacity(10);
    for (name, value) in [
        (&b"x-inferrail-prompt-tokens"[..], extras.prompt_tokens),
        (&b"x-inferrail-cached-tokens"[..], extras.cached_tokens),
    ] {
        if let Some(v) = value {
            number.clear();
            push_decimal(&mut number, u64::from(v));
            push_header(&mut out, name, &number);
        }
    }
    if close {
        push_header(&mut out, b"connection", b"close");
    } else if minor == 0 {
        push_header(&mut out, b"connection", b"keep-alive");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// How an attempt that reached the client ended.
struct Delivered {
    /// The client connection can serve another request.
    keep_client: bool,
    /// The engine's status.
    status: u16,
}

/// Proxies `req` with retries, all on `view` (one snapshot, its policies and recorder). Returns
/// whether the client connection may be reused.
pub async fn forward(
    ctx: &Rc<CoreContext>,
    view: &Rc<CoreView>,
    conn: &mut ClientConn,
    req: ProxyRequest,
) -> bool {
    let snap = &view.snap;
    let recorder = &view.recorder;
    let settings = &snap.settings;
    let common = upstream_headers(&req.head, &req.request_id);
    let mut watch = ClientWatch::new(conn.buffered().is_empty());
    let mut tried: Vec<usize> = Vec::with_capacity(settings.max_attempts as usize);
    let mut last_failure: Option<(AttemptError, usize)> = None;
    let close_client = req.head.close || ctx.shutdown.is_triggered();
    let prediction = Prediction::make(ctx, view, &req).await;
    let brain_params = &snap.models[req.model].brain;

    for attempt in 1..=settings.max_attempts {
        let now = Instant::now();
        let fleet_now = ctx.fleet_clock.micros(now);
        let mut candidates = view.candidates(req.model, &tried, now, fleet_now);
        prediction.annotate(&mut candidates);
        if candidates.is_empty() {
            break;
        }
        let input = prediction.input(&req, brain_params, &ctx.fleet, fleet_now);
        let decision =
            ctx.with_rng(|rng| view.choose(req.model, req.arm, &input, &candidates, rng));
        ctx.brain_stats.decision(
            view.arm_policy(req.model, req.arm),
            now.elapsed(),
            &decision,
        );
        let replica = candidates[decision.winner].replica;
        let prefill_secs = brain::commit(&input, &candidates, &decision);
        observe_decision(ctx, view, &req, attempt, replica, &candidates, &input);
        let ticket = prediction.record(ctx, view, replica);
        tried.push(replica);
        let prompt_tokens = prediction.facts.as_ref().map_or(0, |f| f.tokens);
        let acquired = view.acquire(
            replica,
            prompt_tokens,
            prefill_secs,
            ctx.fleet_clock,
            fleet_now,
        );
        let Some(mut slot) = acquired else {
            break;
        };
        if attempt > 1 {
            recorder.retry(req.model);
        }
        let may_retry_status = attempt < settings.max_attempts;
        let mut fresh_only = false;
        let result = loop {
            let r = try_replica(
                ctx,
                view,
                conn,
                &req,
                &common,
                replica,
                &mut slot,
                &mut watch,
                may_retry_status,
                fresh_only,
                close_client,
                prediction.header(replica),
            )
            .await;
            match r {
                Err(e) if e.stale_reuse() && !fresh_only => fresh_only = true,
                r => break r,
            }
        };
        drop(slot);
        match result {
            Ok(done) => {
                ctx.report(view, replica, !matches!(done.status, 502..=504));
                if done.status >= 400 {
                    prediction.take_back(ctx, ticket);
                } else {
                    prediction.routed(ctx, replica);
                }
                return done.keep_client;
            }
            Err(AttemptError::ClientGone) => {
                recorder.error(ErrorReason::ClientDisconnected);
                recorder.request(Some(req.model), Some(replica), Outcome::ClientClosed);
                return false;
            }
            Err(e) => {
                if e.counts_against_replica() {
                    ctx.report(view, replica, false);
                }
                prediction.take_back(ctx, ticket);
                recorder.error(e.reason());
                let retry = e.retryable();
                last_failure = Some((e, replica));
                if !retry || attempt == settings.max_attempts {
                    break;
                }
                let backoff = backoff(settings.backoff, settings.max_backoff, attempt);
                if Instant::now() + backoff >= req.deadline {
                    break;
                }
                monoio::select! {
                    _ = sleep(backoff) => {}
                    _ = watch.closed(&conn.stream) => {
                        recorder.error(ErrorReason::ClientDisconnected);
                        recorder.request(Some(req.model), None, Outcome::ClientClosed);
                        return false;
                    }
                }
            }
        }
    }

    // Nothing reached the client: answer the failure ourselves.
    let (refusal, replica_label, outcome) = match &last_failure {
        Some((e, replica)) => {
            let id = snap.replicas.get(*replica).map_or("?", |r| r.id());
            let (kind, msg) = e.client_error(id);
            // The attempt's own error was counted when it failed.
            let refusal = Refusal::new(kind, e.reason(), msg);
            (refusal, Some(*replica), Outcome::Failed)
        }
        None => {
            let msg = format!(
                "every replica of model `{}` is at its concurrency limit",
                snap.models[req.model].name
            );
            let refusal = Refusal::new(ErrorKind::ServiceUnavailable, ErrorReason::FleetFull, msg);
            (refusal.record(recorder), None, Outcome::Rejected)
        }
    };
    recorder.request(Some(req.model), replica_label, outcome);
    recorder.duration(Some(req.model), req.started.elapsed());
    conn.send(refusal.response(&req.request_id, false, close_client))
        .await
        && !close_client
}

/// A request's cache prediction: its prompt facts and, indexed by the view's snapshot replica
/// index (empty without a prediction), the tokens each replica is predicted to hold cached.
struct Prediction {
    facts: Option<PromptFacts>,
    cached: Vec<Option<u32>>,
}

impl Prediction {
    /// Tokenizes (on the pool) and looks up (on the index shards) within one deadline,
    /// `tokenizer.max_wait` of the request's snapshot; counts the result.
    async fn make(ctx: &CoreContext, view: &CoreView, req: &ProxyRequest) -> Prediction {
        let none = Prediction {
            facts: None,
            cached: Vec::new(),
        };
        let stats = &ctx.prediction_stats;
        let Some(predictor) = &ctx.predictor else {
            stats.result("no_tokenizer");
            return none;
        };
        let model = &view.snap.models[req.model];
        let budget = Budget::new(view.snap.settings.prediction, Instant::now());
        let (facts, took) = predictor
            .prompt(&model.name, req.endpoint, &req.body, &budget)
            .await;
        if took > Duration::ZERO {
            stats.tokenize_time(took);
        }
        let facts = match facts {
            Ok(f) => f,
            Err(label) => {
                stats.result(label);
                return none;
            }
        };
        let keys: Vec<u64> = model
            .replicas
            .iter()
            .map(|&i| view.snap.replicas[i].spec.key)
            .collect();
        let held = match predictor.held_blocks(&facts, &keys, &budget).await {
            Ok(held) => held,
            Err(label) => {
                stats.result(label);
                return Prediction {
                    facts: Some(facts),
                    cached: Vec::new(),
                };
            }
        };
        stats.result("predicted");
        let mut cached = vec![None; view.snap.replicas.len()];
        for (&i, blocks) in model.replicas.iter().zip(held) {
            cached[i] = Some(facts.cached_tokens(blocks));
        }
        Prediction {
            facts: Some(facts),
            cached,
        }
    }

    fn cached_on(&self, replica: usize) -> Option<u32> {
        self.cached.get(replica).copied().flatten()
    }

    /// What the brain reads about this request.
    fn input<'a>(
        &'a self,
        req: &ProxyRequest,
        params: &'a BrainParams,
        fleet: &'a FleetFacts,
        now_micros: u64,
    ) -> RouteInput<'a> {
        RouteInput {
            prompt: self.facts.as_ref().map(PromptFacts::view),
            approx_tokens: u32::try_from(req.body.len() / 4).unwrap_or(u32::MAX),
            session: req.session,
            params,
            fleet,
            now_micros,
        }
    }

    /// Puts the predicted cached tokens on each candidate.
    fn annotate(&self, candidates: &mut [Candidate]) {
        for c in candidates {
            c.cached_tokens = self.cached_on(c.replica);
        }
    }

    /// The response headers' prompt and predicted cached tokens for `replica`.
    fn header(&self, replica: usize) -> Option<(u32, Option<u32>)> {
        self.facts
            .as_ref()
            .map(|f| (f.tokens, self.cached_on(replica)))
    }

    /// Records the prompt on the replica an attempt goes to.
    fn record(&self, ctx: &CoreContext, view: &CoreView, replica: usize) -> Option<RecordTicket> {
        let facts = self.facts.as_ref()?;
        let key = view.snap.replicas.get(replica)?.spec.key;
        ctx.predictor.as_ref()?.record(key, facts)
    }

    /// The attempt failed before the engine answered, or the engine refused it: it cached nothing.
    fn take_back(&self, ctx: &CoreContext, ticket: Option<RecordTicket>) {
        if let (Some(p), Some(t)) = (&ctx.predictor, ticket) {
            p.take_back(t);
        }
    }

    /// The request ran on `replica`: counts its prompt and predicted cached tokens.
    fn routed(&self, ctx: &CoreContext, replica: usize) {
        if let Some(f) = &self.facts {
            let cached = self.cached_on(replica).unwrap_or(0);
            ctx.prediction_stats
                .tokens(u64::from(f.tokens), u64::from(cached));
        }
    }
}

/// Hands a routing decision to the observers without waiting: statistics, the shadow worker
/// (first attempts only) and the decision log (sampled requests only).
fn observe_decision(
    ctx: &CoreContext,
    view: &CoreView,
    req: &ProxyRequest,
    attempt: u32,
    winner: usize,
    candidates: &[Candidate],
    input: &RouteInput<'_>,
) {
    let oldest = candidates
        .iter()
        .filter_map(|c| c.engine.map(|e| e.age_micros))
        .max()
        .map(Duration::from_micros);
    ctx.stats.decision(oldest);
    let snap = &view.snap;
    let policy = view.arm_policy(req.model, req.arm);
    if attempt == 1 {
        if let Some(sink) = &ctx.shadow {
            let shadow = &snap.models[req.model].shadow;
            if !shadow.is_empty() {
                sink.try_send(ShadowJob {
                    snapshot: snap.clone(),
                    model: req.model,
                    shadow: shadow.clone(),
                    policy,
                    request_id: req.request_id.clone(),
                    chosen: winner,
                    candidates: candidates.to_vec(),
                    prompt: input.prompt.map(|p| PromptFacts {
                        tokens: p.tokens,
                        hashes: p.hashes.into(),
                        block_size: p.block_size,
                    }),
                    approx_tokens: input.approx_tokens,
                });
            }
        }
    }
    if req.sampled {
        if let Some(sink) = &ctx.decisions {
            sink.try_send(DecisionRecord {
                snapshot: snap.clone(),
                model: req.model,
                policy,
                request_id: req.request_id.clone(),
                attempt,
                winner,
                candidates: candidates.to_vec(),
                prompt: snap.settings.log_prompts.then(|| req.body.clone()),
            });
        }
    }
}

/// Exponential backoff before attempt `attempt + 1`: `base * 2^(attempt-1)`, capped.
pub fn backoff(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let factor = 1u32 << (attempt.saturating_sub(1)).min(16);
    base.saturating_mul(factor).min(cap)
}

/// Gets a connection to the replica: a pooled one unless `fresh_only`, else a new one.
async fn upstream_connection(
    view: &CoreView,
    replica: usize,
    fresh_only: bool,
    deadline: Instant,
) -> Result<(TcpStream, bool), AttemptError> {
    let settings = &view.snap.settings;
    if !fresh_only {
        if let Some(state) = view.replicas.get(replica) {
            if let Some(stream) = state.pool.checkout(settings.pool_idle_timeout) {
                return Ok((stream, true));
            }
        }
    }
    let addr = view.snap.replicas[replica].spec.addr;
    let connect_deadline = deadline.min(Instant::now() + settings.connect_timeout);
    match timeout_at(connect_deadline.into(), TcpStream::connect_addr(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok((stream, false))
        }
        Ok(Err(e)) => Err(AttemptError::Connect(e)),
        Err(_) => Err(AttemptError::ConnectTimeout),
    }
}

/// Outcome of reading the upstream head, before anything is sent to the client.
struct UpstreamHead {
    head: ResponseHead,
    /// Read buffer holding the head and any body bytes after it.
    buf: Vec<u8>,
    head_len: usize,
}

/// Reads the engine's response head (skipping 1xx interim heads).
async fn read_upstream_head(
    upstream: &mut TcpStream,
    reused: bool,
    mut buf: Vec<u8>,
) -> Result<UpstreamHead, AttemptError> {
    buf.clear();
    loop {
        let (res, b) = read_more(upstream, buf).await;
        buf = b;
        match res {
            Ok(0) | Err(_) => {
                return Err(AttemptError::EngineClosed {
                    reused,
                    nothing_received: buf.is_empty(),
                })
            }
            Ok(_) => {}
        }
        loop {
            match ResponseHead::parse(&buf, Method::Post) {
                Ok(Some((head, len))) if head.status < 200 => {
                    buf.drain(..len);
                }
                Ok(Some((head, len))) => {
                    return Ok(UpstreamHead {
                        head,
                        buf,
                        head_len: len,
                    })
                }
                Ok(None) if buf.len() > MAX_RESPONSE_HEAD => {
                    return Err(AttemptError::Protocol("response head too large".into()))
                }
                Ok(None) => break,
                Err(e) => return Err(AttemptError::Protocol(e.to_string())),
            }
        }
    }
}

/// One attempt on one replica. On success the response was relayed to the client (fully or
/// until the client or engine went away); on error nothing was sent to the client.
#[allow(clippy::too_many_arguments)]
async fn try_replica(
    ctx: &Rc<CoreContext>,
    view: &Rc<CoreView>,
    conn: &mut ClientConn,
    req: &ProxyRequest,
    common: &[u8],
    replica: usize,
    slot: &mut ReplicaSlot,
    watch: &mut ClientWatch,
    may_retry_status: bool,
    fresh_only: bool,
    close_client: bool,
    prediction: Option<(u32, Option<u32>)>,
) -> Result<Delivered, AttemptError> {
    let snap = &view.snap;
    let recorder = &view.recorder;
    let entry = &snap.replicas[replica].spec;
    let deadline = req.deadline;
    let left_rotation = slot.replica().left_rotation();

    // Connect, send, and wait for the head, all raced against the client leaving.
    let spare = conn.take_spare();
    let exchange = async {
        let (mut upstream, reused) =
            upstream_connection(view, replica, fresh_only, deadline).await?;
        let wire = upstream_request(&req.head, common, &entry.authority, &req.body);
        let (res, _) = upstream.write_all(wire).await;
        if res.is_err() {
            return Err(AttemptError::EngineClosed {
                reused,
                nothing_received: true,
            });
        }
        if req.body.len() > COALESCE_BODY {
            let (res, _) = upstream.write_all(req.body.clone()).await;
            if res.is_err() {
                return Err(AttemptError::EngineClosed {
                    reused,
                    nothing_received: true,
                });
            }
        }
        match timeout_at(
            deadline.into(),
            read_upstream_head(&mut upstream, reused, spare),
        )
        .await
        {
            Ok(Ok(head)) => Ok((upstream, head)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(AttemptError::Timeout),
        }
    };
    let (mut upstream, up) = monoio::select! {
        r = exchange => r?,
        _ = watch.closed(&conn.stream) => return Err(AttemptError::ClientGone),
        _ = left_rotation => return Err(AttemptError::LeftRotation),
    };
    slot.head_received();
    let status = up.head.status;
    if may_retry_status && matches!(status, 502..=504) {
        return Err(AttemptError::Unavailable(status));
    }

    // Commit: from here on the response belongs to this replica. A shutdown that began while
    // the engine worked closes the client connection after this response.
    let close_client = close_client || ctx.shutdown.is_triggered();
    let client_minor = req.head.minor_version;
    let mut relay = match (up.head.framing, client_minor) {
        (BodyFraming::Length(n), _) => Relay::Length(n),
        (BodyFraming::Chunked, 0) => Relay::Dechunk(ChunkedDecoder::new()),
        (BodyFraming::Chunked, _) => Relay::Chunked(ChunkedDecoder::new()),
        (BodyFraming::UntilClose, 0) => Relay::RawUntilClose,
        (BodyFraming::UntilClose, _) => Relay::Rechunk,
    };
    let close_after = close_client
        || client_minor == 0 && !matches!(relay, Relay::Length(_))
        || matches!(relay, Relay::RawUntilClose);
    let model = Some(req.model);
    let extras = HeadExtras {
        policy: view.arm_policy(req.model, req.arm).as_str(),
        prompt_tokens: prediction.map(|p| p.0),
        cached_tokens: prediction.and_then(|p| p.1),
    };
    let mut out = client_head(
        &up.head,
        &req.request_id,
        &entry.id,
        &extras,
        &relay,
        close_after,
        client_minor,
    );
    let mut upstream_reusable = !up.head.close;
    let (mut done, used) = match relay.step(&up.buf[up.head_len..], &mut out) {
        Ok(step) => step,
        Err(e) => return Err(AttemptError::Protocol(e)),
    };
    if up.head_len + used < up.buf.len() {
        upstream_reusable = false; // bytes beyond the response: never reuse
    }
    if used > 0 || done {
        slot.first_byte();
    }
    let mut buf = up.buf;
    let mut first_byte_recorded = false;
    let mut outcome = Outcome::for_status(status);
    let idle_limit = snap.settings.request_timeout;

    loop {
        if !out.is_empty() {
            if !first_byte_recorded {
                recorder.ttft(model, req.started.elapsed());
                first_byte_recorded = true;
            }
            // A client that stops reading may not hold the engine forever: the same idle limit
            // as for engine reads applies to each write.
            let write = timeout_at(
                (Instant::now() + idle_limit).into(),
                conn.stream.write_all(out),
            )
            .await;
            let written = match write {
                Ok((res, returned)) => {
                    out = returned;
                    out.clear();
                    res.is_ok()
                }
                Err(_) => {
                    out = Vec::new();
                    false
                }
            };
            if !written {
                outcome = Outcome::ClientClosed;
                recorder.error(ErrorReason::ClientDisconnected);
                upstream_reusable = false;
                break;
            }
        }
        if done {
            break;
        }
        buf.clear();
        let read = monoio::select! {
            r = timeout_at((Instant::now() + idle_limit).into(), read_more(&mut upstream, buf)) => Some(r),
            _ = watch.closed(&conn.stream) => None,
        };
        let Some(read) = read else {
            outcome = Outcome::ClientClosed;
            recorder.error(ErrorReason::ClientDisconnected);
            upstream_reusable = false;
            buf = Vec::new();
            break;
        };
        let (res, returned) = match read {
            Ok(r) => r,
            Err(_) => {
                // The engine went silent mid-response: cut the client's response short.
                recorder.error(ErrorReason::UpstreamTimeout);
                outcome = Outcome::Failed;
                upstream_reusable = false;
                buf = Vec::new();
                break;
            }
        };
        buf = returned;
        match res {
            Ok(0) | Err(_) => {
                upstream_reusable = false;
                match relay.finish_at_eof() {
                    Some(tail) => {
                        out.extend_from_slice(tail);
                        done = true;
                        continue;
                    }
                    None => {
                        recorder.error(ErrorReason::EngineClosed);
                        outcome = Outcome::Failed;
                        break;
                    }
                }
            }
            Ok(n) => match relay.step(&buf[..n], &mut out) {
                Ok((finished, used)) => {
                    slot.first_byte();
                    done = finished;
                    if used < n {
                        upstream_reusable = false;
                    }
                }
                Err(_) => {
                    recorder.error(ErrorReason::UpstreamProtocol);
                    outcome = Outcome::Failed;
                    upstream_reusable = false;
                    break;
                }
            },
        }
    }
    conn.put_spare(buf);

    let complete = done && outcome != Outcome::ClientClosed && outcome != Outcome::Failed;
    if complete && upstream_reusable {
        slot.replica()
            .pool
            .checkin(upstream, snap.settings.pool_max_idle);
    }
    recorder.request(model, Some(replica), outcome);
    recorder.duration(model, req.started.elapsed());
    Ok(Delivered {
        keep_client: complete && !close_after,
        status,
    })
}
