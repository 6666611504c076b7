//! Proxying one completion request: the driver of its [`Exchange`]. It routes, connects, writes,
//! reads the response head and relays the body as the exchange's actions say, racing each step
//! against the exchange's next timer (whole-request deadline, connect, first byte, backoff,
//! stall), the client leaving and the replica leaving rotation, and feeds back what happened.
//! Every retry rule is the exchange's; none is here.

use crate::client_conn::{read_more, ClientConn};
use crate::core_state::{CoreContext, CoreView, LeftRotation, ReplicaSlot, RouteBufs};
use crate::errors::NoCandidate;
use crate::exchange::{Action, Event, Exchange, Limits, Timer};
use crate::fleet::SharedLedger;
use crate::metrics::Outcome;
use crate::offers::{self, NotOffered};
use crate::prediction::{observe_decision, Prediction};
use crate::refusal::Refusal;
use crate::relay::{client_head, HeadExtras, Relay};
use crate::request::ProxyRequest;
use crate::sockets::{send_now, ClientWatch, SentNow};
use crate::upstream::{self, HeadError, UpstreamHead};
use inferrail_routing::brain;
use inferrail_shards::index::RecordTicket;
use inferrail_sync::QueueTicket;
use monoio::io::AsyncWriteRentExt;
use monoio::net::TcpStream;
use monoio::time::Sleep;
use std::future::{pending, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::time::Instant;

/// The attempt in progress: its replica slot, a watch on the replica leaving rotation, its
/// connection once open and its response once the head was read.
struct Live {
    replica: usize,
    slot: ReplicaSlot,
    left: LeftRotation,
    upstream: Option<TcpStream>,
    response: Option<Response>,
    /// When the attempt was routed (its connection is taken from the pool right after).
    routed_at: Instant,
}

/// A response head read and the first client bytes built from it, before the commit.
struct Response {
    relay: Relay,
    /// Client bytes: the head and the body bytes that came with it.
    out: Vec<u8>,
    /// The engine read buffer.
    buf: Vec<u8>,
    /// The body is already complete.
    done: bool,
    /// Some body byte already came (or the body is empty).
    body_started: bool,
    /// The engine connection may be pooled after a complete body.
    reusable: bool,
    /// The client connection closes after this response.
    close_after: bool,
    /// The engine head's buffers, for the connection's next response head.
    head_bufs: inferrail_wire::HeadBufs,
}

/// Proxies `req`, all on `view` (one snapshot, its policies and recorder). Returns whether the
/// client connection may be reused.
pub async fn forward(
    ctx: &Rc<CoreContext>,
    view: &Rc<CoreView>,
    conn: &mut ClientConn,
    req: ProxyRequest,
) -> bool {
    let settings = &view.snap.settings;
    let bufs = conn.take_exchange_bufs();
    let limits = Limits {
        deadline: req.deadline,
        max_attempts: settings.max_attempts,
        backoff: settings.backoff,
        max_backoff: settings.max_backoff,
        connect_timeout: settings.connect_timeout,
        first_byte_timeout: settings.first_byte_timeout,
        stream_idle_timeout: settings.stream_idle_timeout,
    };
    let ex = Exchange::with_bufs(limits, bufs);
    let driver = Driver {
        ctx,
        view,
        watch: ClientWatch::new(conn.buffered().is_empty(), req.started),
        timer: StepTimer {
            sleep: conn.take_timer(req.deadline),
            at: None,
        },
        close_client: req.head.close || ctx.shutdown.is_triggered(),
        prediction: Prediction::make(ctx, view, &req).await,
        conn,
        req: &req,
        ex,
        live: None,
        answer: None,
        committed: false,
        keep_client: false,
        queued: None,
        waiting_for_slot: false,
    };
    let keep = driver.run().await;
    conn.put_body(req.body);
    conn.put_request_head(req.head);
    conn.put_request_id_buf(req.request_id);
    keep
}

/// One request's exchange and the I/O around it.
struct Driver<'a> {
    ctx: &'a CoreContext,
    view: &'a CoreView,
    conn: &'a mut ClientConn,
    req: &'a ProxyRequest,
    prediction: Prediction,
    watch: ClientWatch,
    /// The one timer every step sleeps on (the client connection's, given back at the end).
    timer: StepTimer,
    /// The client connection closes after this request.
    close_client: bool,
    ex: Exchange<RecordTicket>,
    live: Option<Live>,
    /// The error answer to send once the exchange finished.
    answer: Option<Vec<u8>>,
    /// A response was committed to the client.
    committed: bool,
    /// The relayed response left the client connection reusable.
    keep_client: bool,
    /// The request's place in a full replica's queue while it waits for a slot.
    queued: Option<QueueTicket<SharedLedger>>,
    /// The exchange waits for a slot ([`Action::WaitForSlot`]) until one frees or a timer fires.
    waiting_for_slot: bool,
}

impl Driver<'_> {
    /// Performs the exchange's actions until it finishes; returns whether the client connection
    /// may be reused.
    async fn run(mut self) -> bool {
        loop {
            let Some(action) = self.ex.poll_action() else {
                if self.ex.is_done() {
                    break;
                }
                if self.waiting_for_slot {
                    self.wait_for_slot().await;
                    continue;
                }
                // Backing off: until the next timer or the client leaving.
                let client = Some((&mut self.watch, &self.conn.stream));
                let raced = race(
                    pin!(pending::<()>()),
                    self.ex.timer(),
                    &mut self.timer,
                    client,
                    None,
                )
                .await;
                feed(&mut self.ex, raced);
                continue;
            };
            match action {
                Action::Route { attempt } => {
                    let (ctx, view, req) = (self.ctx, self.view, self.req);
                    let (ex, queued) = (&mut self.ex, &mut self.queued);
                    self.live = route(ctx, view, req, &self.prediction, ex, queued, attempt);
                }
                Action::WaitForSlot { .. } => self.waiting_for_slot = true,
                Action::BackOff { .. } => {}
                Action::Connect { replica, pooled } => self.connect(replica, pooled).await,
                Action::Send => self.send().await,
                Action::ReadHead => self.read_head().await,
                Action::Relay { status } => self.relay(status).await,
                other => self.account(other),
            }
        }
        let keep = match self.answer.take() {
            Some(bytes) => self.conn.send(bytes).await && !self.close_client,
            None => self.keep_client,
        };
        self.conn.put_exchange_bufs(self.ex.into_bufs());
        self.conn.put_timer(self.timer.sleep);
        keep
    }

    /// Waits one poll interval (or until a timer fires or the client leaves), then tells the
    /// exchange a slot freed if a replica of the model has room now. Slots are freed by any core,
    /// so the queue polls the ledgers rather than waiting for a wake-up from another thread.
    async fn wait_for_slot(&mut self) {
        let client = Some((&mut self.watch, &self.conn.stream));
        // Boxed: a timer inline would make every request's future 128-byte aligned and large
        // (see `ClientConn::take_timer`); this path runs only while a request waits for a slot.
        let mut tick = Box::pin(monoio::time::sleep(SLOT_POLL));
        match race(
            tick.as_mut(),
            self.ex.timer(),
            &mut self.timer,
            client,
            None,
        )
        .await
        {
            Raced::Done(()) => {
                let now = Instant::now();
                let fleet_now = self.ctx.fleet_clock.micros(now);
                if has_room(self.view, self.req.model, fleet_now) {
                    self.waiting_for_slot = false;
                    self.ex.handle(Event::SlotFreed, now);
                }
            }
            other => {
                self.waiting_for_slot = false;
                feed(&mut self.ex, other)
            }
        }
    }

    /// Opens the attempt's connection.
    async fn connect(&mut self, replica: usize, pooled: bool) {
        let Some(l) = self.live.as_mut() else {
            return self
                .ex
                .handle(Event::ConnectFailed("no slot".into()), Instant::now());
        };
        // A fresh retry after a stale pooled connection: that one goes first.
        l.upstream = None;
        l.response = None;
        let client = Some((&mut self.watch, &self.conn.stream));
        let io = upstream::connect(self.view, replica, pooled, l.routed_at);
        match race(
            pin!(io),
            self.ex.timer(),
            &mut self.timer,
            client,
            Some(&mut l.left),
        )
        .await
        {
            Raced::Done(Ok((stream, reused))) => {
                l.upstream = Some(stream);
                self.ex.handle(Event::Connected { reused }, Instant::now());
            }
            Raced::Done(Err(e)) => {
                let event = Event::ConnectFailed(e.to_string());
                self.ex.handle(event, Instant::now())
            }
            other => feed(&mut self.ex, other),
        }
    }

    /// Writes the request on the attempt's connection.
    async fn send(&mut self) {
        let closed = Event::EngineClosed {
            received_any: false,
        };
        let Some(Live {
            replica,
            left,
            upstream: Some(up),
            ..
        }) = self.live.as_mut()
        else {
            return self.ex.handle(closed, Instant::now());
        };
        let req = self.req;
        let authority = &self.view.snap.replicas[*replica].spec.authority;
        let wire = self.conn.take_write_buf();
        let io = upstream::send(up, wire, &req.head, &req.request_id, authority, &req.body);
        let client = Some((&mut self.watch, &self.conn.stream));
        let raced = race(
            pin!(io),
            self.ex.timer(),
            &mut self.timer,
            client,
            Some(left),
        )
        .await;
        match raced {
            Raced::Done((written, wire)) => {
                self.conn.put_write_buf(wire);
                let event = if written {
                    Event::RequestWritten
                } else {
                    closed
                };
                self.ex.handle(event, Instant::now())
            }
            other => feed(&mut self.ex, other),
        }
    }

    /// Reads the response head and prepares the client bytes for a commit.
    async fn read_head(&mut self) {
        let spare = self.conn.take_spare();
        let head_bufs = self.conn.take_response_head_bufs();
        let Some(Live {
            replica,
            slot,
            left,
            upstream: Some(up),
            response,
            ..
        }) = self.live.as_mut()
        else {
            let closed = Event::EngineClosed {
                received_any: false,
            };
            return self.ex.handle(closed, Instant::now());
        };
        let client = Some((&mut self.watch, &self.conn.stream));
        let raced = race(
            pin!(upstream::read_head(up, spare, head_bufs)),
            self.ex.timer(),
            &mut self.timer,
            client,
            Some(left),
        )
        .await;
        let event = match raced {
            Raced::Done(Ok(head)) => {
                slot.head_received();
                let status = head.head.status;
                let (req, view) = (self.req, self.view);
                let predicted = self.prediction.header(*replica);
                let extras = HeadExtras {
                    request_id: &req.request_id,
                    replica: &view.snap.replicas[*replica].spec.id,
                    policy: view.arm_policy(req.model, req.arm).as_str(),
                    prompt_tokens: predicted.map(|p| p.0),
                    cached_tokens: predicted.and_then(|p| p.1),
                };
                let close = self.close_client || self.ctx.shutdown.is_triggered();
                let out = self.conn.take_write_buf();
                match prepare(req, head, &extras, close, out) {
                    Ok(r) => {
                        *response = Some(r);
                        Event::Head { status }
                    }
                    Err(e) => Event::Protocol(e),
                }
            }
            Raced::Done(Err(HeadError::Closed { received_any })) => {
                Event::EngineClosed { received_any }
            }
            Raced::Done(Err(HeadError::Protocol(e))) => Event::Protocol(e),
            other => return feed(&mut self.ex, other),
        };
        self.ex.handle(event, Instant::now());
    }

    /// Relays the committed response.
    async fn relay(&mut self, status: u16) {
        self.committed = true;
        if let Some(l) = self.live.take() {
            if status < 400 {
                self.prediction.routed(self.ctx, l.replica);
            }
            let (view, req) = (self.view, self.req);
            let (ex, watch, timer) = (&mut self.ex, &mut self.watch, &mut self.timer);
            self.keep_client = relay(view, self.conn, req, ex, l, watch, timer).await;
        }
    }

    /// The bookkeeping actions: metrics, ejection reports, index records, the error answer.
    fn account(&mut self, action: Action<RecordTicket>) {
        let (ctx, view, req) = (self.ctx, self.view, self.req);
        let snap = &view.snap;
        match action {
            Action::Failed { failure, .. } => view.recorder.error(failure.reason()),
            Action::Report { replica, ok } => ctx.report(view, replica, ok),
            Action::TakeBack(ticket) => self.prediction.take_back(ctx, Some(ticket)),
            Action::Release => self.live = None,
            Action::Answer { failure, replica } => {
                let id = replica
                    .and_then(|r| snap.replicas.get(r))
                    .map_or("?", |r| r.id());
                let (kind, msg) = failure.client_error(&snap.models[req.model].name, id);
                let refusal = Refusal::new(kind, failure.reason(), msg);
                let bytes = refusal.response(&req.request_id, false, self.close_client);
                self.answer = Some(bytes);
            }
            Action::Finish { outcome, replica } => {
                view.recorder.request(Some(req.model), replica, outcome);
                // A client that left before the commit was never answered: no duration.
                if self.committed || outcome != Outcome::ClientClosed {
                    view.recorder
                        .duration(Some(req.model), req.started.elapsed());
                }
            }
            // The I/O actions are `run`'s.
            Action::Route { .. }
            | Action::WaitForSlot { .. }
            | Action::Connect { .. }
            | Action::Send
            | Action::ReadHead
            | Action::Relay { .. }
            | Action::BackOff { .. } => {}
        }
    }
}

/// Chooses a replica for attempt `attempt` and takes a slot on it, or tells the exchange why
/// none could take the request.
fn route(
    ctx: &CoreContext,
    view: &CoreView,
    req: &ProxyRequest,
    prediction: &Prediction,
    ex: &mut Exchange<RecordTicket>,
    queued: &mut Option<QueueTicket<SharedLedger>>,
    attempt: u32,
) -> Option<Live> {
    let now = Instant::now();
    let fleet_now = ctx.fleet_clock.micros(now);
    // The core's kept vectors: a decision allocates nothing once they fit the fleet.
    let RouteBufs {
        mut candidates,
        rows,
    } = ctx.take_route_bufs();
    view.candidates_into(&mut candidates, req.model, ex.tried(), fleet_now);
    let params = &view.snap.models[req.model].brain;
    prediction.annotate(&mut candidates, &params.cost);
    if candidates.is_empty() {
        ctx.put_route_bufs(RouteBufs { candidates, rows });
        no_candidate(view, req.model, ex, queued, now, fleet_now);
        return None;
    }
    let input = prediction.input(req, params, &ctx.fleet, fleet_now);
    let decision =
        ctx.with_rng(|rng| view.choose(req.model, req.arm, &input, &candidates, rng, rows));
    ctx.brain_stats.decision(
        view.arm_policy(req.model, req.arm),
        now.elapsed(),
        &decision,
    );
    let replica = candidates[decision.winner].replica;
    let prefill_secs = brain::commit(&input, &candidates, &decision);
    observe_decision(ctx, view, req, attempt, replica, &candidates, &input);
    ctx.put_route_bufs(RouteBufs {
        candidates,
        rows: decision.rows,
    });
    let ticket = prediction.record(ctx, view, replica);
    let prompt_tokens = prediction.facts.as_ref().map_or(0, |f| f.tokens);
    let acquired = view.acquire(replica, prompt_tokens, prefill_secs);
    let Some(slot) = acquired else {
        // Another core took the winner's last slot since the candidates were read.
        prediction.take_back(ctx, ticket);
        no_candidate(view, req.model, ex, queued, now, fleet_now);
        return None;
    };
    // Admitted: the queue place (if any) goes back after the slot was taken.
    *queued = None;
    if attempt > 1 {
        view.recorder.retry(req.model);
    }
    let left = slot.replica().left_rotation();
    // The attempt starts when routing began (one clock read for the whole decision).
    ex.handle(Event::Routed { replica, ticket }, now);
    Some(Live {
        replica,
        slot,
        left,
        upstream: None,
        response: None,
        routed_at: now,
    })
}

/// How often a request queued for a full replica looks for a free slot.
const SLOT_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// Tells the exchange why no replica took the request. Every replica in rotation being full, the
/// request takes (or keeps) a place in one's queue and may wait; with every queue full (or
/// `max_pending: 0`) it is refused at once, naming the limit.
fn no_candidate(
    view: &CoreView,
    model: usize,
    ex: &mut Exchange<RecordTicket>,
    queued: &mut Option<QueueTicket<SharedLedger>>,
    now: Instant,
    fleet_now: u64,
) {
    let mut why = why_no_candidate(view, model, fleet_now);
    if why == NoCandidate::AtCapacity {
        if queued.is_none() {
            *queued = view.enqueue(model);
        }
        if queued.is_none() {
            why = NoCandidate::QueueFull;
        }
    }
    let can_wait = why == NoCandidate::AtCapacity;
    ex.handle(Event::NoCandidate { why, can_wait }, now);
}

/// Whether a replica of `model` would be offered now (in rotation, under its
/// `max_concurrency`).
fn has_room(view: &CoreView, model: usize, fleet_now: u64) -> bool {
    offers::offers(&view.snap, model, fleet_now).any(|(_, o)| o.is_ok())
}

/// What refused a request that found no candidate: no replica, none in rotation, or every one
/// in rotation at its `max_concurrency` (the caller then tries their queues).
fn why_no_candidate(view: &CoreView, model: usize, fleet_now: u64) -> NoCandidate {
    let mut why = NoCandidate::NoReplicas;
    for (_, offer) in offers::offers(&view.snap, model, fleet_now) {
        match offer {
            Err(NotOffered::OutOfRotation) if why == NoCandidate::NoReplicas => {
                why = NoCandidate::OutOfRotation
            }
            Err(NotOffered::OutOfRotation) => {}
            // A replica with room right now is full again by the next look: wait for it too.
            Err(NotOffered::AtCapacity) | Ok(_) => return NoCandidate::AtCapacity,
        }
    }
    why
}

/// Builds the client bytes of a response head (and the body bytes read with it); an error when
/// those body bytes are not valid framing, before anything reached the client.
fn prepare(
    req: &ProxyRequest,
    up: UpstreamHead,
    extras: &HeadExtras<'_>,
    close_client: bool,
    out: Vec<u8>,
) -> Result<Response, String> {
    let minor = req.head.minor_version;
    let mut relay = Relay::new(up.head.framing, minor);
    let close_after = close_client || relay.closes_client(minor);
    let mut out = client_head(
        out,
        &up.head,
        extras,
        &relay,
        close_after,
        minor,
        up.buf.len() - up.head_len,
    );
    let (done, used) = relay.step(&up.buf[up.head_len..], &mut out)?;
    Ok(Response {
        relay,
        out,
        done,
        body_started: used > 0 || done,
        // Bytes beyond the response: never reuse.
        reusable: !up.head.close && up.head_len + used == up.buf.len(),
        close_after,
        buf: up.buf,
        head_bufs: up.head.into_bufs(),
    })
}

/// Relays a committed response to the client, feeding the exchange as bytes move, until it
/// ends (complete, or cut by the exchange's timers, the engine or the client). Once the engine's
/// body is complete the replica's slot is released and a reusable engine connection pooled
/// before the last bytes go to the client, so a client that sends its next request the moment
/// it has this answer finds the replica free. Returns whether the client connection may be
/// reused.
async fn relay(
    view: &CoreView,
    conn: &mut ClientConn,
    req: &ProxyRequest,
    ex: &mut Exchange<RecordTicket>,
    mut live: Live,
    watch: &mut ClientWatch,
    timer: &mut StepTimer,
) -> bool {
    let (Some(up), Some(response)) = (live.upstream.take(), live.response.take()) else {
        return false;
    };
    let Response {
        mut relay,
        mut out,
        mut buf,
        mut done,
        body_started,
        mut reusable,
        close_after,
        head_bufs,
    } = response;
    conn.put_response_head_bufs(head_bufs);
    // One clock reading per turn of the loop, taken after each wait: the bookkeeping between
    // two waits (ttft, pooling, the exchange's events) shares it.
    let mut now = Instant::now();
    if body_started {
        live.slot.first_byte();
    }
    // The engine side, held until its body is complete.
    let mut engine = Some((live, up));
    let model = Some(req.model);
    let mut first_byte_recorded = false;
    let mut complete = false;
    while ex.relaying() {
        if done {
            if let Some((live, up)) = engine.take() {
                if reusable {
                    let max_idle = view.snap.settings.pool_max_idle;
                    live.slot.replica().pool.checkin(up, max_idle, now);
                }
            }
        }
        if !out.is_empty() {
            if !first_byte_recorded {
                view.recorder
                    .ttft(model, now.saturating_duration_since(req.started));
                first_byte_recorded = true;
            }
            // What the socket takes at once goes out without a trip through the ring; only a
            // remainder (a full send buffer) waits for the socket through monoio.
            let event = match send_now(&conn.stream, &out) {
                SentNow::All => Event::Delivered,
                SentNow::Failed => Event::ClientLeft,
                SentNow::Part(n) => {
                    out.drain(..n);
                    match race(
                        pin!(conn.stream.write_all(out)),
                        ex.timer(),
                        timer,
                        None,
                        None,
                    )
                    .await
                    {
                        Raced::Done((res, returned)) => {
                            out = returned;
                            now = Instant::now();
                            if res.is_ok() {
                                Event::Delivered
                            } else {
                                Event::ClientLeft
                            }
                        }
                        other => {
                            // The write was cancelled: its bytes (and buffer) are lost, the
                            // response ends here.
                            out = Vec::new();
                            feed(ex, other);
                            break;
                        }
                    }
                }
            };
            out.clear();
            ex.handle(event, now);
            if !ex.relaying() {
                break;
            }
        }
        if done {
            ex.handle(Event::StreamEnded, now);
            complete = true;
            break;
        }
        let Some((live, up)) = engine.as_mut() else {
            break;
        };
        buf.clear();
        let client = Some((&mut *watch, &conn.stream));
        match race(pin!(read_more(up, buf)), ex.timer(), timer, client, None).await {
            Raced::Done((res, returned)) => {
                buf = returned;
                now = Instant::now();
                match res {
                    Ok(0) | Err(_) => {
                        reusable = false;
                        match relay.finish_at_eof() {
                            Some(tail) => {
                                out.extend_from_slice(tail);
                                done = true;
                            }
                            None => {
                                let event = Event::EngineClosed { received_any: true };
                                ex.handle(event, now);
                            }
                        }
                    }
                    Ok(n) => match relay.step(&buf[..n], &mut out) {
                        Ok((finished, used)) => {
                            live.slot.first_byte();
                            done = finished;
                            reusable &= used == n;
                            ex.handle(Event::Received, now);
                        }
                        Err(e) => ex.handle(Event::Protocol(e), now),
                    },
                }
            }
            other => {
                buf = Vec::new();
                feed(ex, other);
                break;
            }
        }
    }
    conn.put_spare(buf);
    conn.put_write_buf(out);
    complete && !close_after
}

/// What ended a raced I/O step.
enum Raced<T> {
    /// The step finished with this.
    Done(T),
    /// This timer came due at this instant first.
    Timer(Timer, Instant),
    /// The client closed its connection first.
    ClientLeft,
    /// The replica left rotation first.
    LeftRotation,
}

/// The one timer a request's steps sleep on: created once per request and moved (reset) only
/// when the instant it must fire at changes, so a request whose deadlines stay put costs one
/// entry in the timer wheel, not one (or two, with the client watch) per step.
struct StepTimer {
    sleep: Pin<Box<Sleep>>,
    /// The instant the sleep is set to, once set.
    at: Option<Instant>,
}

impl StepTimer {
    /// Sets the sleep to fire at `at` (at once if that has passed), unless it already is.
    fn aim(&mut self, at: Instant) {
        if self.at != Some(at) {
            self.sleep.as_mut().reset(at.into());
            self.at = Some(at);
        }
    }
}

/// Runs `io` until it finishes, `due` (the exchange's next timer) comes, the watched client
/// leaves or the replica leaves rotation, whichever is first; the others are dropped
/// (cancelled). The client watch's arming instant shares the step timer: when it comes first the
/// watch is armed and the race goes on.
async fn race<T>(
    mut io: Pin<&mut impl Future<Output = T>>,
    due: Option<(Timer, Instant)>,
    timer: &mut StepTimer,
    mut client: Option<(&mut ClientWatch, &TcpStream)>,
    mut left: Option<&mut LeftRotation>,
) -> Raced<T> {
    loop {
        let arm = client.as_ref().and_then(|(watch, _)| watch.arm_at());
        // The exchange's timer wins a tie: it ends the step, arming does not.
        let wake = match (due, arm) {
            (Some((_, at)), Some(arm)) if arm < at => Some(arm),
            (Some((_, at)), _) => Some(at),
            (None, arm) => arm,
        };
        if let Some(at) = wake {
            timer.aim(at);
        }
        let sleep = async {
            match wake {
                Some(_) => timer.sleep.as_mut().await,
                None => pending().await,
            }
        };
        let watched = async {
            match client.as_mut() {
                Some((watch, stream)) => watch.closed(stream).await,
                None => pending().await,
            }
        };
        let gone = async {
            match left.as_deref_mut() {
                Some(left) => left.await,
                None => pending().await,
            }
        };
        // Biased: the step's own I/O first (the likeliest to be ready), then the timer; no
        // random draw per poll. `None`: the timer woke for the client watch's arming only.
        let raced = monoio::select! {
            biased;
            r = io.as_mut() => Some(Raced::Done(r)),
            _ = sleep => due
                .filter(|(_, at)| Some(*at) == wake)
                .map(|(t, at)| Raced::Timer(t, at)),
            _ = watched => Some(Raced::ClientLeft),
            _ = gone => Some(Raced::LeftRotation),
        };
        match raced {
            Some(raced) => return raced,
            None => {
                if let Some((watch, _)) = client.as_mut() {
                    watch.arm();
                }
            }
        }
    }
}

/// Feeds the exchange what interrupted a step (a finished step is the caller's to feed).
fn feed<T, U>(ex: &mut Exchange<U>, raced: Raced<T>) {
    let now = Instant::now();
    let event = match raced {
        Raced::Done(_) => return,
        // The timer slept until `at`: it is due, whatever the clock's rounding says.
        Raced::Timer(t, at) => {
            ex.handle(Event::TimerFired(t), now.max(at));
            return;
        }
        Raced::ClientLeft => Event::ClientLeft,
        Raced::LeftRotation => Event::LeftRotation,
    };
    ex.handle(event, now);
}
