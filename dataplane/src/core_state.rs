//! The state one data core owns: its view of the current snapshot (per-replica load and breaker
//! counts, routing policy objects, the metrics recorder), idle upstream connections, random
//! numbers and request ids.
//!
//! Everything here is `Rc`/`Cell`/`RefCell`: it is only ever touched by its own core's thread,
//! and no `RefCell` borrow is held across an `.await`.

use crate::core_stats::{BrainStats, CoreStats, PredictionStats};
use crate::doorbell::Doorbell;
use crate::fleet::{FleetClock, SharedLedger};
use crate::metrics::CoreRecorder;
use crate::observe::{DecisionRecord, ShadowJob, Sink};
use crate::offers;
use crate::pool::IdlePool;
use crate::predict::Predictor;
use crate::reports::{ReplicaReport, ReportQueue};
use crate::shutdown::ShutdownSignal;
use crate::snapshot::{ReplicaEntry, Snapshot};
use inferrail_config::PolicyKind;
use inferrail_routing::fleet::secs_to_micros;
use inferrail_routing::{brain, policies, Candidate, Decision, FleetFacts, Rng, Row};
use inferrail_routing::{RouteInput, RoutingPolicy};
use inferrail_shards::fx::FxHashMap;
use inferrail_sync::{Admission, Mailbox, QueueTicket, ReplicaLedger};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// One replica as seen by one core. Kept across snapshots while the replica's registry key stays.
#[derive(Debug)]
pub struct ReplicaState {
    /// Registry key (matches the snapshot entry's `spec.key`).
    pub key: u64,
    /// Idle keep-alive connections to the replica.
    pub pool: IdlePool,
    /// Failed requests in a row this core saw on the replica.
    local_streak: Cell<u32>,
    /// In rotation in the newest snapshot this core adopted.
    routable: Cell<bool>,
    /// Bumped each time the replica leaves rotation; waiting requests watch it.
    down_epoch: Cell<u64>,
    /// Requests waiting for a response head that want to hear when the replica leaves rotation,
    /// by waiter id. A waiter removes itself when it is dropped, so this holds only live ones.
    down_waiters: RefCell<FxHashMap<u64, Waker>>,
    next_waiter: Cell<u64>,
}

impl ReplicaState {
    fn new(key: u64) -> ReplicaState {
        ReplicaState {
            key,
            pool: IdlePool::default(),
            local_streak: Cell::new(0),
            routable: Cell::new(true),
            down_epoch: Cell::new(0),
            down_waiters: RefCell::new(FxHashMap::default()),
            next_waiter: Cell::new(0),
        }
    }

    /// Whether the newest snapshot this core adopted has the replica in rotation.
    pub fn routable(&self) -> bool {
        self.routable.get()
    }

    fn set_routable(&self, routable: bool) {
        let was = self.routable.replace(routable);
        if was && !routable {
            self.down_epoch.set(self.down_epoch.get() + 1);
            let waiters: Vec<Waker> = self
                .down_waiters
                .borrow_mut()
                .drain()
                .map(|(_, w)| w)
                .collect();
            for w in waiters {
                w.wake();
            }
        }
    }

    /// A future that completes when the replica leaves rotation (health checks or ejection).
    pub fn left_rotation(self: &Rc<Self>) -> LeftRotation {
        let id = self.next_waiter.get();
        self.next_waiter.set(id.wrapping_add(1));
        LeftRotation {
            replica: self.clone(),
            seen: self.down_epoch.get(),
            id,
            registered: None,
        }
    }

    /// Waiters registered now (for tests: finished requests leave none behind).
    pub fn waiting(&self) -> usize {
        self.down_waiters.borrow().len()
    }
}

/// Future of [`ReplicaState::left_rotation`]. Dropping it unregisters it.
pub struct LeftRotation {
    replica: Rc<ReplicaState>,
    seen: u64,
    id: u64,
    /// The waker last registered: a poll from the same task skips the waiter map.
    registered: Option<Waker>,
}

impl Future for LeftRotation {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.replica.down_epoch.get() != self.seen {
            return Poll::Ready(());
        }
        // Leaving rotation bumps the epoch (checked above) before it wakes the waiters, so a
        // registered waker stays in the map until then or until the drop.
        if self
            .registered
            .as_ref()
            .is_some_and(|w| same_task(w, cx.waker()))
        {
            return Poll::Pending;
        }
        let this = self.get_mut();
        this.replica
            .down_waiters
            .borrow_mut()
            .insert(this.id, cx.waker().clone());
        this.registered = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for LeftRotation {
    fn drop(&mut self) {
        // Never registered (its step finished on the first poll): nothing to remove.
        if self.registered.is_some() {
            self.replica.down_waiters.borrow_mut().remove(&self.id);
        }
    }
}

/// Whether two wakers wake the same task. `Waker::will_wake` is false between monoio's borrowed
/// and owned wakers of one task (their vtables differ, in release builds), so the task's address
/// (the waker's data) decides too.
fn same_task(a: &Waker, b: &Waker) -> bool {
    a.will_wake(b) || a.data() == b.data()
}

/// Holds one request's slot on a replica: its admission in the replica's one ledger (in flight,
/// waiting for the head until it arrives, in the prefill queue until the first response byte,
/// its prompt tokens), and this core's state of the replica. Dropping it releases whatever it
/// still holds, exactly once.
pub struct ReplicaSlot {
    replica: Rc<ReplicaState>,
    admission: Admission<SharedLedger>,
}

impl ReplicaSlot {
    /// The first byte of the response body arrived: the request's prefill leaves the replica's
    /// unserved prefill (which empties when it was the last one waiting). Only the first call
    /// counts.
    pub fn first_byte(&mut self) {
        self.admission.first_byte();
    }

    /// The response head arrived: the request no longer waits for it.
    pub fn head_received(&mut self) {
        self.admission.head_received();
    }

    /// The replica this slot is on.
    pub fn replica(&self) -> &Rc<ReplicaState> {
        &self.replica
    }
}

/// A routing policy object shared by the views that keep it.
pub type PolicyCell = Rc<RefCell<Box<dyn RoutingPolicy>>>;

/// One core's view of one snapshot: the snapshot, this core's state of each of its replicas (by
/// snapshot index), the policy objects of each model's arms, and the recorder to write into. A
/// request holds one view from start to end, retries included.
pub struct CoreView {
    /// The snapshot.
    pub snap: Arc<Snapshot>,
    /// Per-replica state, indexed like `snap.replicas`.
    pub replicas: Vec<Rc<ReplicaState>>,
    /// Policy objects, `arms[model][arm]`.
    pub arms: Vec<Vec<PolicyCell>>,
    /// This core's recorder in the snapshot's metrics epoch.
    pub recorder: Arc<CoreRecorder>,
}

impl CoreView {
    /// [`CoreView::candidates_into`] into a fresh vector.
    #[cfg(test)]
    pub fn candidates(&self, model: usize, tried: &[usize], fleet_now: u64) -> Vec<Candidate> {
        let mut candidates = Vec::new();
        self.candidates_into(&mut candidates, model, tried, fleet_now);
        candidates
    }

    /// Replicas serving `model` that are in rotation and under their `max_concurrency` (as the
    /// ledger reads now: only [`CoreView::acquire`] decides whether one more fits), skipping
    /// `tried` unless every such replica was tried already. Each carries the replica's one
    /// ledger's load, fleet-wide and exact at the reading, and the engine's own report while it is
    /// younger than `load.max_age`: the same offers `/admin/explain` prices
    /// ([`offers::offers`]).
    /// They go into `out`, emptied first, its capacity reused (a core that keeps the vector
    /// reads candidates without allocating).
    pub fn candidates_into(
        &self,
        out: &mut Vec<Candidate>,
        model: usize,
        tried: &[usize],
        fleet_now: u64,
    ) {
        out.clear();
        out.extend(
            offers::offers(&self.snap, model, fleet_now).filter_map(|(_, offer)| offer.ok()),
        );
        if out.iter().any(|c| !tried.contains(&c.replica)) {
            out.retain(|c| !tried.contains(&c.replica));
        }
    }

    /// Asks arm `arm` of `model`'s policies to decide among `candidates` (non-empty) through the
    /// brain (pricing, guards, sessions); the winner is `candidates[decision.winner]`. The
    /// decision's rows are written into `rows` (its capacity reused; take it back from
    /// [`Decision::rows`]).
    pub fn choose(
        &self,
        model: usize,
        arm: usize,
        input: &RouteInput<'_>,
        candidates: &[Candidate],
        rng: &mut Rng,
        rows: Vec<Row>,
    ) -> Decision {
        match self.arms.get(model).and_then(|arms| arms.get(arm)) {
            Some(p) => {
                let mut p = p.borrow_mut();
                let d = brain::decide_reusing(&mut **p, input, candidates, rng, rows);
                self.recorder.decision(model, p.kind());
                d
            }
            None => {
                brain::decide_reusing(&mut policies::LeastRequest, input, candidates, rng, rows)
            }
        }
    }

    /// The policy of arm `arm` of `model`.
    pub fn arm_policy(&self, model: usize, arm: usize) -> PolicyKind {
        self.snap.models[model]
            .arms
            .get(arm)
            .map_or(PolicyKind::LeastRequest, |a| a.policy)
    }

    /// Admits the request on replica `index` in its ledger (in flight, waiting for a head,
    /// `prompt_tokens` when the prompt was tokenized, `prefill_secs` of estimated prefill
    /// unserved), if it is under its fleet-wide `max_concurrency` at this instant; `None` when it
    /// is full (another core took the last slot since the candidates were read) or unknown.
    pub fn acquire(
        &self,
        index: usize,
        prompt_tokens: u32,
        prefill_secs: f64,
    ) -> Option<ReplicaSlot> {
        let replica = self.replicas.get(index)?.clone();
        let spec = &self.snap.replicas.get(index)?.spec;
        let admission = ReplicaLedger::try_admit_owned(
            spec.ledger.clone(),
            spec.max_concurrency,
            prompt_tokens,
            secs_to_micros(prefill_secs),
        )?;
        Some(ReplicaSlot { replica, admission })
    }

    /// Takes a place in the gateway's queue of a full replica of `model` that is in rotation (the
    /// one with the fewest queued), under its `max_pending`; `None` when every such queue is full.
    pub fn enqueue(&self, model: usize) -> Option<QueueTicket<SharedLedger>> {
        let snap = &self.snap;
        let mut full: Vec<&ReplicaEntry> = snap.models[model]
            .replicas
            .iter()
            .filter_map(|&i| snap.replicas.get(i))
            .filter(|e| e.live.routable)
            .collect();
        full.sort_by_key(|e| e.spec.ledger.queued());
        full.into_iter().find_map(|e| {
            ReplicaLedger::try_enqueue_owned(e.spec.ledger.clone(), e.spec.max_pending)
        })
    }
}

/// Everything one core owns. Shared by the core's connection tasks through `Rc`.
pub struct CoreContext {
    /// This core's index, `0..cores`.
    pub index: usize,
    /// Number of data cores.
    pub cores: usize,
    view: RefCell<Rc<CoreView>>,
    mailbox: Arc<Mailbox<Snapshot>>,
    /// Rung by the control thread after it publishes a snapshot.
    pub doorbell: Arc<Doorbell>,
    reports: Arc<ReportQueue>,
    /// Shadow jobs for the shadow worker (none when not running).
    pub shadow: Option<Sink<ShadowJob>>,
    /// Decision records for the decision log writer (none when not running).
    pub decisions: Option<Sink<DecisionRecord>>,
    /// This core's routing statistics.
    pub stats: Arc<CoreStats>,
    /// Tokenizers, pool and index, when any model has a tokenizer.
    pub predictor: Option<Arc<Predictor>>,
    /// This core's prediction counters.
    pub prediction_stats: Arc<PredictionStats>,
    /// Fleet-wide sessions and prefix demand.
    pub fleet: Arc<FleetFacts>,
    /// The clock of the fleet facts and the replicas' fleet counters (one for the gateway).
    pub fleet_clock: FleetClock,
    /// This core's routing-brain counters.
    pub brain_stats: Arc<BrainStats>,
    rng: RefCell<Rng>,
    /// The vectors of this core's last routing decision, kept for the next one.
    route_bufs: Cell<RouteBufs>,
    /// Fired when the gateway shuts down.
    pub shutdown: Arc<ShutdownSignal>,
    /// Requests being handled on this core now.
    pub active_requests: Cell<usize>,
    ids: RefCell<Rng>,
    /// Open client connections: socket and whether a request is in progress on it.
    connections: RefCell<HashMap<u64, OpenConnection>>,
    next_connection: Cell<u64>,
}

/// The vectors one routing decision fills (its candidates and their priced rows), kept by a
/// core between decisions so routing allocates nothing once they have grown to the fleet's size.
#[derive(Default)]
pub struct RouteBufs {
    /// The candidates, read into with [`CoreView::candidates_into`].
    pub candidates: Vec<Candidate>,
    /// The decision's rows, given to [`CoreView::choose`].
    pub rows: Vec<Row>,
}

/// An open client connection as the core's registry holds it: its socket and whether a request
/// is in progress on it.
type OpenConnection = (RawFd, Rc<Cell<bool>>);

/// Keeps a client connection registered with its core while it lives.
pub struct ConnectionEntry {
    ctx: Rc<CoreContext>,
    id: u64,
    /// Shared with the connection's registry entry: set without a map lookup.
    busy: Rc<Cell<bool>>,
}

impl ConnectionEntry {
    /// Marks whether a request is in progress (busy connections are left to finish at shutdown).
    pub fn set_busy(&self, busy: bool) {
        self.busy.set(busy);
        let active = &self.ctx.active_requests;
        active.set(if busy {
            active.get() + 1
        } else {
            active.get() - 1
        });
    }
}

impl Drop for ConnectionEntry {
    fn drop(&mut self) {
        self.ctx.connections.borrow_mut().remove(&self.id);
    }
}

/// What a core needs from the rest of the process.
pub struct CoreLinks {
    /// Snapshots from the control thread.
    pub mailbox: Arc<Mailbox<Snapshot>>,
    /// Rung after each publication.
    pub doorbell: Arc<Doorbell>,
    /// Request results for the control thread's ejection logic.
    pub reports: Arc<ReportQueue>,
    /// This core's shadow sink.
    pub shadow: Option<Sink<ShadowJob>>,
    /// This core's decision log sink.
    pub decisions: Option<Sink<DecisionRecord>>,
    /// This core's routing statistics.
    pub stats: Arc<CoreStats>,
    /// Tokenizers, pool and index, when any model has a tokenizer.
    pub predictor: Option<Arc<Predictor>>,
    /// This core's prediction counters.
    pub prediction_stats: Arc<PredictionStats>,
    /// Fleet-wide sessions and prefix demand (one for the whole gateway).
    pub fleet: Arc<FleetFacts>,
    /// Their clock (one for the whole gateway).
    pub fleet_clock: FleetClock,
    /// This core's routing-brain counters.
    pub brain_stats: Arc<BrainStats>,
    /// Shutdown.
    pub shutdown: Arc<ShutdownSignal>,
}

impl CoreContext {
    /// A core context starting from `snapshot`, taking later ones from the mailbox.
    pub fn new(
        index: usize,
        cores: usize,
        snapshot: Arc<Snapshot>,
        links: CoreLinks,
        seed: u64,
        id_seed: u64,
    ) -> CoreContext {
        let view = build_view(index, snapshot, None);
        CoreContext {
            index,
            cores,
            view: RefCell::new(Rc::new(view)),
            mailbox: links.mailbox,
            doorbell: links.doorbell,
            reports: links.reports,
            shadow: links.shadow,
            decisions: links.decisions,
            stats: links.stats,
            predictor: links.predictor,
            prediction_stats: links.prediction_stats,
            fleet: links.fleet,
            fleet_clock: links.fleet_clock,
            brain_stats: links.brain_stats,
            rng: RefCell::new(Rng::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9))),
            route_bufs: Cell::default(),
            shutdown: links.shutdown,
            active_requests: Cell::new(0),
            ids: RefCell::new(Rng::new(id_seed)),
            connections: RefCell::new(HashMap::new()),
            next_connection: Cell::new(0),
        }
    }

    /// The view to use for a new request: of the latest snapshot the control thread published.
    /// Costs one atomic load when nothing new arrived.
    pub fn current(&self) -> Rc<CoreView> {
        self.refresh();
        self.view.borrow().clone()
    }

    /// Adopts a newly published snapshot, if any: replicas that left rotation wake the requests
    /// waiting on them. Returns whether one was adopted.
    pub fn refresh(&self) -> bool {
        let Some(newer) = self.mailbox.take() else {
            return false;
        };
        let old = self.view.borrow().clone();
        let view = build_view(self.index, newer, Some(&old));
        *self.view.borrow_mut() = Rc::new(view);
        true
    }

    /// The vectors for a routing decision (empty, with the capacity of the last ones given back).
    pub fn take_route_bufs(&self) -> RouteBufs {
        self.route_bufs.take()
    }

    /// Keeps a finished decision's vectors for the next one.
    pub fn put_route_bufs(&self, bufs: RouteBufs) {
        self.route_bufs.set(bufs);
    }

    /// Runs `f` with this core's random number generator.
    pub fn with_rng<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.rng.borrow_mut())
    }

    /// Reports a finished attempt on a replica to the control thread (never blocks). Failures are
    /// always reported; a success only when it closes a failure streak this core or the control
    /// thread has open, so healthy traffic sends nothing.
    pub fn report(&self, view: &CoreView, replica: usize, ok: bool) {
        let (Some(state), Some(entry)) =
            (view.replicas.get(replica), view.snap.replicas.get(replica))
        else {
            return;
        };
        if ok {
            let open = state.local_streak.replace(0) > 0 || entry.live.failure_streak;
            if !open {
                return;
            }
        } else {
            state
                .local_streak
                .set(state.local_streak.get().saturating_add(1));
        }
        self.reports.push(ReplicaReport {
            key: state.key,
            ok,
            at: Instant::now(),
        });
    }

    /// Registers a client connection's socket until the returned entry is dropped.
    pub fn register_connection(self: &Rc<Self>, fd: RawFd) -> ConnectionEntry {
        let id = self.next_connection.get();
        self.next_connection.set(id + 1);
        let busy = Rc::new(Cell::new(false));
        self.connections.borrow_mut().insert(id, (fd, busy.clone()));
        ConnectionEntry {
            ctx: self.clone(),
            id,
            busy,
        }
    }

    /// Open client connections on this core.
    pub fn connection_count(&self) -> usize {
        self.connections.borrow().len()
    }

    /// Shuts down the sockets of open client connections (only idle ones unless `busy_too`), so
    /// their tasks wake up, finish and close them.
    pub fn close_connections(&self, busy_too: bool) {
        for (fd, busy) in self.connections.borrow().values() {
            if busy_too || !busy.get() {
                crate::sockets::shutdown_socket(*fd);
            }
        }
    }

    /// A fresh request id: 32 lowercase hex digits, like vLLM's.
    pub fn new_request_id(&self) -> String {
        let mut id = String::with_capacity(32);
        self.write_request_id(&mut id);
        id
    }

    /// Appends a fresh request id ([`CoreContext::new_request_id`]) to `out`.
    pub fn write_request_id(&self, out: &mut String) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut ids = self.ids.borrow_mut();
        let mut digits = [0u8; 32];
        for (half, word) in [ids.next_u64(), ids.next_u64()].into_iter().enumerate() {
            for (i, digit) in digits[half * 16..half * 16 + 16].iter_mut().enumerate() {
                *digit = HEX[((word >> ((15 - i) * 4)) & 0xf) as usize];
            }
        }
        // Hex digits are ASCII: the conversion cannot fail.
        out.push_str(std::str::from_utf8(&digits).unwrap_or_default());
    }
}

/// Builds core `core`'s view of `snap`, keeping from `old` the state of replicas whose key stays
/// and the policy objects of arms whose model, policy and settings fingerprint stay.
fn build_view(core: usize, snap: Arc<Snapshot>, old: Option<&CoreView>) -> CoreView {
    let replicas: Vec<Rc<ReplicaState>> = snap
        .replicas
        .iter()
        .map(|entry| {
            let state = old
                .and_then(|o| o.replicas.iter().find(|s| s.key == entry.spec.key))
                .cloned()
                .unwrap_or_else(|| Rc::new(ReplicaState::new(entry.spec.key)));
            state.set_routable(entry.live.routable);
            state
        })
        .collect();
    let arms = snap
        .models
        .iter()
        .map(|m| {
            m.arms
                .iter()
                .map(|arm| {
                    let kept = old.and_then(|o| {
                        let (mi, om) = o
                            .snap
                            .models
                            .iter()
                            .enumerate()
                            .find(|(_, om)| om.name == m.name)?;
                        let ai = om.arms.iter().position(|a| {
                            a.policy == arm.policy && a.fingerprint == arm.fingerprint
                        })?;
                        o.arms.get(mi)?.get(ai).cloned()
                    });
                    kept.unwrap_or_else(|| Rc::new(RefCell::new(policies::build(arm.policy))))
                })
                .collect()
        })
        .collect();
    let recorder = snap
        .metrics
        .recorders
        .get(core)
        .cloned()
        .unwrap_or_else(|| Arc::new(CoreRecorder::new(&snap.metrics.layout)));
    CoreView {
        snap,
        replicas,
        arms,
        recorder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{EngineSample, SharedEngineReading};
    use crate::metrics::{MetricsEpoch, MetricsLayout};
    use crate::snapshot::{ConfigPart, ReplicaLive, ReplicaSpec};
    use std::time::Duration;

    const CONFIG: &str = "\
models:
  - name: m
    policy: round_robin
replicas:
  - {id: a, url: 'http://127.0.0.1:9001', models: [m]}
  - {id: b, url: 'http://127.0.0.1:9002', models: [m]}
";

    pub(super) fn spec(key: u64, id: &str) -> ReplicaSpec {
        ReplicaSpec {
            key,
            id: id.into(),
            addr: ([127, 0, 0, 1], 9000 + key as u16).into(),
            authority: format!("127.0.0.1:{}", 9000 + key),
            models: vec!["m".into()],
            max_concurrency: 100,
            max_pending: 100,
            kv_capacity_blocks: None,
            ledger: SharedLedger::new(),
            engine: SharedEngineReading::new(),
        }
    }

    fn facts() -> Arc<FleetFacts> {
        Arc::new(FleetFacts::new(Duration::from_secs(10)))
    }

    pub(super) fn snapshot(
        replicas: Vec<(ReplicaSpec, ReplicaLive)>,
        generation: u64,
    ) -> Arc<Snapshot> {
        let config = inferrail_config::parse_str(CONFIG).unwrap();
        let part = ConfigPart::from_config(&config, 1, 0);
        let layout = MetricsLayout {
            models: vec!["m".into()],
            replicas: replicas.iter().map(|(s, _)| s.id.clone()).collect(),
        };
        Arc::new(Snapshot::assemble(
            &part,
            replicas,
            generation,
            MetricsEpoch::new(layout, 2),
        ))
    }

    pub(super) fn live(routable: bool) -> ReplicaLive {
        ReplicaLive {
            routable,
            failure_streak: false,
        }
    }

    /// `spec` with its engine's reading written as the control thread writes it after a scrape.
    pub(super) fn reported(spec: ReplicaSpec, received_micros: u64, running: f64) -> ReplicaSpec {
        spec.engine.store(&EngineSample {
            running,
            waiting: 0.0,
            kv_cache_usage: 0.5,
            received_micros,
            own_in_flight: 0,
        });
        spec
    }

    #[test]
    fn candidates_read_the_fleet_load_and_drop_stale_reports() {
        let now_micros = 2_000_000;
        let snap = snapshot(
            vec![
                (reported(spec(1, "a"), now_micros, 3.0), live(true)),
                (
                    reported(spec(2, "b"), now_micros - 1_000_000, 9.0),
                    live(true),
                ),
            ],
            1,
        );
        // Every count comes from the replica's one ledger: the one request admitted here is in
        // flight, waiting for its head, and holds its prompt tokens and prefill.
        let view = build_view(0, snap, None);
        let _slot = view.acquire(0, 100, 0.25).unwrap();
        let c = view.candidates(0, &[], now_micros);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].in_flight, c[0].pending), (1, 1));
        assert_eq!(
            c[0].queued_prefill_secs, 0.25,
            "the acquired prefill is queued"
        );
        let later = view.candidates(0, &[], now_micros + 10_000_000);
        assert_eq!(
            later[0].queued_prefill_secs, 0.25,
            "queued until its first byte, however long that takes (ADR 025)"
        );
        assert_eq!(c[0].key, 1);
        assert_eq!(
            c[0].prompt_tokens, 100,
            "this core's tokenized prompt in flight"
        );
        assert_eq!(c[0].engine.map(|e| e.running), Some(3.0));
        assert_eq!((c[1].in_flight, c[1].pending), (0, 0));
        assert!(
            c[1].engine.is_none(),
            "a report older than max_age is ignored"
        );
    }

    #[test]
    fn replicas_out_of_rotation_are_skipped_and_their_waiters_woken() {
        let first = snapshot(
            vec![(spec(1, "a"), live(true)), (spec(2, "b"), live(true))],
            1,
        );
        let view = build_view(0, first, None);
        let a = view.replicas[0].clone();
        let mut left = std::pin::pin!(a.left_rotation());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(left.as_mut().poll(&mut cx).is_pending());
        // A waiter that goes away (its request finished) leaves nothing behind.
        {
            let mut other = std::pin::pin!(a.left_rotation());
            assert!(other.as_mut().poll(&mut cx).is_pending());
            assert_eq!(a.waiting(), 2);
        }
        assert_eq!(a.waiting(), 1);
        let second = snapshot(
            vec![(spec(1, "a"), live(false)), (spec(2, "b"), live(true))],
            2,
        );
        let next = build_view(0, second, Some(&view));
        assert!(
            Rc::ptr_eq(&next.replicas[0], &a),
            "the replica keeps its state by key"
        );
        assert!(left.as_mut().poll(&mut cx).is_ready());
        let c = next.candidates(0, &[], 0);
        assert_eq!(c.iter().map(|c| c.replica).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn policy_objects_survive_snapshots_that_keep_their_settings() {
        let snap = |generation| {
            snapshot(
                vec![(spec(1, "a"), live(true)), (spec(2, "b"), live(true))],
                generation,
            )
        };
        let v1 = build_view(0, snap(1), None);
        let v2 = build_view(0, snap(2), Some(&v1));
        assert!(Rc::ptr_eq(&v1.arms[0][0], &v2.arms[0][0]));
        let mut rng = Rng::new(1);
        let c = v2.candidates(0, &[], 0);
        let fleet = facts();
        let params = inferrail_routing::BrainParams::default();
        let input = RouteInput {
            prompt: None,
            approx_tokens: 0,
            session: None,
            params: &params,
            fleet: &fleet,
            now_micros: 0,
        };
        let first = v2.choose(0, 0, &input, &c, &mut rng, Vec::new()).winner;
        let v3 = build_view(0, snap(3), Some(&v2));
        let second = v3.choose(0, 0, &input, &c, &mut rng, Vec::new()).winner;
        assert_ne!(
            first, second,
            "round robin continued its turn across snapshots"
        );
    }
}

#[cfg(test)]
mod explain_agreement {
    //! The admin's explain offers exactly the candidates an idle data core offers, so explaining
    //! a request decides what routing it would.
    use super::tests::{live, reported, snapshot, spec};
    use super::*;
    use crate::offers::offers;
    use crate::snapshot::{ReplicaLive, ReplicaSpec};
    use inferrail_config::PolicyKind;
    use inferrail_routing::BrainParams;
    use proptest::prelude::{any, prop_assert_eq, proptest};

    proptest! {
        #[test]
        fn explain_and_routing_see_and_decide_the_same(
            loads in proptest::collection::vec((0u32..6, 0u32..6, any::<bool>(), 0u32..4), 2..5),
            seed in any::<u64>(),
            which in 0usize..7,
        ) {
            let now_micros = 1_000_000;
            let replicas: Vec<(ReplicaSpec, ReplicaLive)> = loads
                .iter()
                .enumerate()
                .map(|(i, &(a, b, routable, fleet_load))| {
                    let s = spec(i as u64 + 1, &format!("r{i}"));
                    for _ in 0..fleet_load {
                        let admitted = s.ledger.try_admit(100, a, 10_000);
                        std::mem::forget(admitted);
                    }
                    (reported(s, now_micros, f64::from(a + b)), live(routable))
                })
                .collect();
            let snap = snapshot(replicas, 1);
            // Any core's view reads the same ledgers explain reads.
            let view = build_view(2, snap.clone(), None);
            let routed = view.candidates(0, &[], now_micros);
            let explained: Vec<Candidate> = offers(&snap, 0, now_micros)
                .filter_map(|(_, o)| o.ok())
                .collect();
            prop_assert_eq!(&routed, &explained);
            if !routed.is_empty() {
                let params = BrainParams::default();
                let fleet = FleetFacts::new(std::time::Duration::from_secs(1));
                let input = RouteInput {
                    prompt: None, approx_tokens: 500, session: None,
                    params: &params, fleet: &fleet, now_micros: 0,
                };
                let kind = PolicyKind::ALL[which];
                let a = brain::decide(policies::build(kind).as_mut(), &input, &routed, &mut Rng::new(seed));
                let b = brain::decide(policies::build(kind).as_mut(), &input, &explained, &mut Rng::new(seed));
                prop_assert_eq!(a, b);
            }
        }
    }
}
