//! The control thread's state: the config in effect, the replica registry, health, engine
//! reports, discovery, metrics epochs, and snapshot publication to the data cores.
//!
//! Everything here runs on the control thread. Inputs arrive as method calls from its tasks
//! (request reports from the cores, probe and scrape results, ticks, admin calls). The rules for
//! health and replica facts are the pure [`crate::fleet::book::ReplicaBook`]'s, which answers
//! with effects; this shell carries them out (log lines, the KV index, worker tasks) and every
//! change that matters to routing ends in [`Controller::publish`], which builds one immutable
//! snapshot, hands it to every core's mailbox and rings its doorbell.

use crate::fleet::book::{Effect, ReplicaBook};
use crate::fleet::discovery::{DiscoveredMember, Discovery, Resolver};

use crate::fleet::health::{HealthBook, HealthSettings};
use crate::fleet::kv_events::{KvStreams, SourcesSink, StreamTarget};
use crate::fleet::registry::{static_replicas, Changes, Registry, Source, Wanted};

use crate::fleet::worker::{self, WorkerEvent, WorkerHandle, WorkerSettings, WorkerTarget};
use crate::live_config::{Applied, ConfigStore, Refusal};
use crate::observe::decision_log::DecisionLogHandle;
use crate::observe::shadow::ShadowHandle;
use inferrail_config::{Config, Problem, Problems};
use inferrail_dataplane::core_stats::{BrainStats, CoreStats, PredictionStats};
use inferrail_dataplane::doorbell::Doorbell;
use inferrail_dataplane::fleet::{EngineSample, FleetClock};
use inferrail_dataplane::metrics::ReplicaGauges;
use inferrail_dataplane::metrics::{MetricsEpoch, MetricsHistory, MetricsLayout};
use inferrail_dataplane::predict::Predictor;
use inferrail_dataplane::reports::{ReplicaReport, ReportQueue};
use inferrail_dataplane::snapshot::{ConfigPart, ReplicaLive, ReplicaSpec, Snapshot};
use inferrail_routing::FleetFacts;
use inferrail_sync::{LedgerReading, Mailbox};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The last published snapshots kept on the control thread so that a core dropping its
/// reference never frees one (freeing happens here, off the data cores).
const RETAINED_SNAPSHOTS: usize = 8;

/// How long a config that adds DNS discovery waits for the first answers.
pub const DISCOVERY_START_WAIT: Duration = Duration::from_secs(2);

pub use crate::fleet::book::{ReplicaFacts, ScrapeState};

/// Counters of the control plane itself, for `/metrics`.
#[derive(Debug, Default, Clone)]
pub struct ControlCounters {
    /// Config reloads by result: applied, unchanged, invalid, restart_required, error.
    pub reloads: BTreeMap<&'static str, u64>,
    /// Snapshots published.
    pub publishes: u64,
}

/// The cores' side of publication.
pub struct CoreLinks {
    /// One mailbox per data core.
    pub mailboxes: Vec<Arc<Mailbox<Snapshot>>>,
    /// One doorbell per data core.
    pub doorbells: Vec<Arc<Doorbell>>,
}

/// The observer threads and per-core counters the admin API reports.
pub struct Observers {
    /// The shadow worker, when running (the gateway holds another reference and drops the last
    /// one after the data cores stopped, which flushes the log).
    pub shadow: Option<Arc<ShadowHandle>>,
    /// Each core's shadow drop counter.
    pub shadow_dropped: Vec<Arc<AtomicU64>>,
    /// The decision log writer, when running (dropped last by the gateway, like `shadow`).
    pub decision_log: Option<Arc<DecisionLogHandle>>,
    /// Each core's decision log drop counter.
    pub decision_dropped: Vec<Arc<AtomicU64>>,
    /// The cores' request reports.
    pub reports: Arc<ReportQueue>,
    /// Each core's routing statistics.
    pub stats: Vec<Arc<CoreStats>>,
    /// Tokenizers, pool and index, when any model has a tokenizer.
    pub predictor: Option<Arc<Predictor>>,
    /// Each core's prediction counters.
    pub prediction_stats: Vec<Arc<PredictionStats>>,
    /// Fleet-wide sessions and prefix demand (read by explain).
    pub fleet: Arc<FleetFacts>,
    /// Their clock, the one the data cores read.
    pub fleet_clock: FleetClock,
    /// Each core's routing-brain counters.
    pub brain_stats: Vec<Arc<BrainStats>>,
}

impl Observers {
    /// The shadow worker's agreement report (empty when no worker runs).
    pub fn shadow_report(&self) -> serde_json::Value {
        self.shadow.as_ref().map_or_else(
            || serde_json::json!({"decisions": 0, "models": {}}),
            |h| h.report(),
        )
    }

    /// Shadow jobs the cores dropped.
    pub fn shadow_dropped(&self) -> u64 {
        self.shadow_dropped
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Decision records the cores dropped.
    pub fn decision_log_dropped(&self) -> u64 {
        self.decision_dropped
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Request reports dropped on a full queue.
    pub fn reports_dropped(&self) -> u64 {
        self.reports.dropped()
    }

    /// The oldest engine report any core's decision used.
    pub fn report_age_max(&self) -> Duration {
        self.stats
            .iter()
            .map(|s| s.report_age_max())
            .max()
            .unwrap_or_default()
    }
}

/// Apply times of config changes (from request to published snapshot), most recent last.
#[derive(Debug, Default)]
pub struct ApplyTimes {
    samples: VecDeque<Duration>,
}

impl ApplyTimes {
    const KEEP: usize = 4096;

    fn push(&mut self, d: Duration) {
        if self.samples.len() == Self::KEEP {
            self.samples.pop_front();
        }
        self.samples.push_back(d);
    }

    /// (count, p50, p99) over the kept samples.
    pub fn summary(&self) -> (usize, Duration, Duration) {
        let mut v: Vec<Duration> = self.samples.iter().copied().collect();
        v.sort();
        let q = |p: f64| {
            if v.is_empty() {
                Duration::ZERO
            } else {
                v[((v.len() as f64 - 1.0) * p).round() as usize]
            }
        };
        (v.len(), q(0.5), q(0.99))
    }
}

/// The control thread's state. Owned by one `Rc<RefCell<_>>` on the control thread.
pub struct Controller {
    /// The config in effect.
    pub store: ConfigStore,
    part: ConfigPart,
    created_unix: u64,
    registry: Registry,
    /// Health and facts of every member (pure: the events' rules live there).
    pub book: ReplicaBook,
    workers: HashMap<u64, WorkerHandle>,
    /// The KV event streams of replicas with `kv_events`.
    pub kv_streams: KvStreams,
    worker_settings: Rc<RefCell<WorkerSettings>>,
    discovery: Option<Discovery>,
    resolver: Arc<dyn Resolver>,
    discovered: Vec<DiscoveredMember>,
    /// The config's static replicas, as last resolved.
    statics: Vec<Wanted>,
    /// Metrics epochs (merged for `/metrics`).
    pub history: MetricsHistory,
    epochs: Vec<std::sync::Weak<MetricsEpoch>>,
    cores: CoreLinks,
    core_count: usize,
    generation: u64,
    retained: VecDeque<Arc<Snapshot>>,
    current: Arc<Snapshot>,
    /// Control-plane counters.
    pub counters: ControlCounters,
    /// Config apply times.
    pub apply_times: ApplyTimes,
    /// Shared with the decision log writer.
    pub log_prompts: Arc<AtomicBool>,
    /// Observer threads and counters.
    pub observers: Observers,
    /// Weak self-reference handed to worker sinks.
    me: Weak<RefCell<Controller>>,
    /// Rung when an event moved the next tick deadline earlier (see [`Controller::next_tick`]).
    pub tick_bell: Rc<Doorbell>,
}

/// What the control thread starts from (built on the caller's thread, moved to the control thread).
pub struct Seed {
    /// The config store (generation 1).
    pub store: ConfigStore,
    /// The config part of the first snapshot.
    pub part: ConfigPart,
    /// `created` of the `/v1/models` cards.
    pub created_unix: u64,
    /// The registry after the initial resolution.
    pub registry: Registry,
    /// DNS discovery, when groups are configured.
    pub discovery: Option<Discovery>,
    /// The resolver DNS groups use.
    pub resolver: Arc<dyn Resolver>,
    /// Members discovered before the first request.
    pub discovered: Vec<DiscoveredMember>,
    /// The config's static replicas, resolved.
    pub statics: Vec<Wanted>,
    /// The snapshot the cores started with.
    pub first: Arc<Snapshot>,
    /// The cores' mailboxes and doorbells.
    pub cores: CoreLinks,
    /// Shared `logging.log_prompts`.
    pub log_prompts: Arc<AtomicBool>,
    /// Observer threads and counters.
    pub observers: Observers,
}

/// The metrics layout for a registry and a config part: models in config order, replicas in
/// registry (= snapshot) order, so snapshot indices are recorder slots.
pub fn layout_of(part: &ConfigPart, registry: &Registry) -> MetricsLayout {
    MetricsLayout {
        models: part.models.iter().map(|m| m.name.clone()).collect(),
        replicas: registry
            .members()
            .iter()
            .map(|m| m.spec.id.clone())
            .collect(),
    }
}

/// Every replica the registry should hold: static ones, then discovered ones.
pub fn wanted_members(statics: Vec<Wanted>, discovered: &[DiscoveredMember]) -> Vec<Wanted> {
    let mut all = statics;
    all.extend(discovered.iter().map(|d| Wanted {
        id: d.id.clone(),
        addr: d.addr,
        authority: d.authority.clone(),
        models: d.models.clone(),
        max_concurrency: inferrail_config::Replica::DEFAULT_MAX_CONCURRENCY,
        max_pending: inferrail_config::Replica::DEFAULT_MAX_PENDING,
        kv_capacity_blocks: None,
        source: Source::Dns(d.group.clone()),
        kv_events: d.kv_events.clone(),
    }));
    all
}

impl Controller {
    /// Builds the controller from its seed and starts a worker per member. Must run on the
    /// control thread's runtime.
    pub fn start(seed: Seed) -> Rc<RefCell<Controller>> {
        let config = seed.store.config().clone();
        let core_count = seed.cores.mailboxes.len();
        let epoch = seed.first.metrics.clone();
        let mut book =
            ReplicaBook::new(HealthBook::new(HealthSettings::from_config(&config.health)));
        book.sync_members(&members_for_health(&seed.registry));
        let ctl = Rc::new(RefCell::new(Controller {
            store: seed.store,
            part: seed.part,
            created_unix: seed.created_unix,
            registry: seed.registry,
            book,
            workers: HashMap::new(),
            kv_streams: KvStreams::default(),
            worker_settings: Rc::new(RefCell::new(WorkerSettings::from_config(
                &config.health,
                &config.load,
            ))),
            discovery: seed.discovery,
            resolver: seed.resolver,
            discovered: seed.discovered,
            statics: seed.statics,
            history: MetricsHistory::new(epoch.clone()),
            epochs: vec![Arc::downgrade(&epoch)],
            cores: seed.cores,
            core_count,
            generation: seed.first.generation,
            retained: VecDeque::from([seed.first.clone()]),
            current: seed.first,
            counters: ControlCounters::default(),
            apply_times: ApplyTimes::default(),
            log_prompts: seed.log_prompts,
            observers: seed.observers,
            me: Weak::new(),
            tick_bell: Rc::new(Doorbell::new()),
        }));
        {
            let mut c = ctl.borrow_mut();
            c.me = Rc::downgrade(&ctl);
            c.sync_workers();
            c.sync_streams(&[]);
            if c.observers.predictor.is_some() {
                monoio::spawn(parity_loop(Rc::downgrade(&ctl)));
            }
            let configured: Vec<(u64, u64)> = c
                .registry
                .members()
                .iter()
                .filter_map(|m| Some((m.spec.key, m.spec.kv_capacity_blocks?)))
                .collect();
            for (key, blocks) in configured {
                let effects = c.book.capacity(key, blocks);
                c.carry_out(effects);
            }
        }
        ctl
    }

    /// The snapshot in effect.
    pub fn current(&self) -> &Arc<Snapshot> {
        &self.current
    }

    /// Facts about a member.
    pub fn facts(&self, key: u64) -> Option<&ReplicaFacts> {
        self.book.facts(key)
    }

    /// The source (static / DNS group) of a member.
    pub fn source(&self, key: u64) -> Option<&Source> {
        self.registry.get(key).map(|m| &m.source)
    }

    /// Starts workers for new members and stops those of departed ones.
    fn sync_workers(&mut self) {
        let keys: Vec<u64> = self.registry.members().iter().map(|m| m.spec.key).collect();
        self.workers.retain(|k, _| keys.contains(k));
        for m in self.registry.members() {
            if self.workers.contains_key(&m.spec.key) {
                continue;
            }
            let me = self.me.clone();
            let sink: Rc<dyn Fn(WorkerEvent)> = Rc::new(move |event| {
                if let Some(ctl) = me.upgrade() {
                    ctl.borrow_mut().on_worker_event(event);
                }
            });
            let handle = worker::spawn(
                WorkerTarget {
                    key: m.spec.key,
                    id: m.spec.id.clone(),
                    addr: m.spec.addr,
                    authority: m.spec.authority.clone(),
                },
                self.worker_settings.clone(),
                sink,
            );
            self.workers.insert(m.spec.key, handle);
        }
    }

    /// Follows the KV events of exactly the members with `kv_events` whose model has a
    /// tokenizer (the mirror names blocks by the gateway's own chain). `gone` holds the keys
    /// that just left the registry.
    fn sync_streams(&mut self, gone: &[u64]) {
        let Some(p) = self.observers.predictor.clone() else {
            return;
        };
        let targets = self
            .registry
            .members()
            .iter()
            .filter_map(|m| {
                let kv_events = m.kv_events.clone()?;
                let (model, mp) = m
                    .spec
                    .models
                    .iter()
                    .find_map(|name| p.model(name).map(|mp| (name, mp)))?;
                Some(StreamTarget {
                    key: m.spec.key,
                    id: m.spec.id.clone(),
                    addr: m.spec.addr,
                    authority: m.spec.authority.clone(),
                    kv_events,
                    model: Arc::from(model.as_str()),
                    block_size: mp.block_size as u64,
                })
            })
            .collect();
        let sink = self.sources_sink();
        self.kv_streams.sync(targets, gone, p.index(), &sink);
    }

    /// Where a KV events discovery reports (the controller, while it lives).
    fn sources_sink(&self) -> SourcesSink {
        let me = self.me.clone();
        Rc::new(move |key, news| {
            if let Some(ctl) = me.upgrade() {
                ctl.borrow_mut().kv_streams.on_discovery(key, news);
            }
        })
    }

    /// A probe or scrape result from a replica worker.
    pub fn on_worker_event(&mut self, event: WorkerEvent) {
        let before = self.book.health.next_deadline();
        let effects = match event {
            WorkerEvent::Probe { key, ok, at } => self.book.on_probe(key, ok, at),
            WorkerEvent::Scrape {
                key,
                outcome,
                finished,
                ..
            } => {
                let member = self.registry.get(key);
                let configured = member.and_then(|m| m.spec.kv_capacity_blocks);
                let own = member.map_or(0, |m| m.spec.ledger.in_flight());
                self.book.on_scrape(key, outcome, finished, configured, own)
            }
        };
        self.carry_out(effects);
        self.ring_if_sooner(before);
    }

    /// Request results reported by the data cores.
    pub fn on_reports(&mut self, batch: &[ReplicaReport]) {
        let before = self.book.health.next_deadline();
        let effects = self.book.on_reports(batch, Instant::now());
        self.carry_out(effects);
        self.ring_if_sooner(before);
    }

    /// Rings the tick bell when the health book's next deadline is now earlier than `before`
    /// (an ejection started), so the tick loop does not sleep past its end.
    fn ring_if_sooner(&self, before: Option<Instant>) {
        let after = self.book.health.next_deadline();
        if after.is_some_and(|a| before.is_none_or(|b| a < b)) {
            self.tick_bell.ring();
        }
    }

    /// When the tick loop must run [`Controller::tick`] next, given it is `now`: the next
    /// ejection end or `now + max_gap`, whichever comes first. Nothing is published on a timer:
    /// what changes routing without an event (the load, the engines' readings) is read by the
    /// cores from shared cells (ADR 016, ADR 022).
    pub fn next_tick(&self, now: Instant, max_gap: Duration) -> Instant {
        let mut next = now + max_gap;
        if let Some(ejection_end) = self.book.health.next_deadline() {
            next = next.min(ejection_end);
        }
        next
    }

    /// Does what the book asked, in order (one publish at the end at most); true when it asked
    /// for anything.
    fn carry_out(&mut self, effects: Vec<Effect>) -> bool {
        let mut publish = false;
        let any = !effects.is_empty();
        for effect in effects {
            match effect {
                Effect::Log { key, text } => {
                    let id = self.registry.get(key).map_or("?", |m| m.spec.id.as_str());
                    eprintln!("inferrail: replica {id} {text}");
                }
                Effect::IndexClear(key) => {
                    if let Some(p) = &self.observers.predictor {
                        let _ = p.index().clear(key);
                    }
                }
                Effect::IndexCapacity { key, usable } => {
                    self.kv_streams.set_capacity(key, usable);
                    if let Some(p) = &self.observers.predictor {
                        let _ = p.index().set_capacity(key, usable as usize);
                    }
                }
                Effect::Reading { key, report } => {
                    if let Some(member) = self.registry.get(key) {
                        member.spec.engine.store(&EngineSample {
                            running: report.load.running,
                            waiting: report.load.waiting,
                            kv_cache_usage: report.load.kv_cache_usage,
                            received_micros: self.observers.fleet_clock.micros(report.received),
                            own_in_flight: report.own_in_flight,
                        });
                    }
                }
                Effect::Publish => publish = true,
            }
        }
        if publish {
            self.publish();
        }
        any
    }

    /// Periodic work: ejection expiry, discovery results, stale KV event streams; a publish only
    /// when one of them changed what the cores route by.
    pub fn tick(&mut self, now: Instant) {
        if self.kv_streams.any_stale() {
            let sink = self.sources_sink();
            self.kv_streams.rediscover_stale(&sink);
        }
        let effects = self.book.tick(now);
        let mut dirty = self.carry_out(effects);
        if let Some(members) = self.discovery.as_ref().and_then(Discovery::poll) {
            self.discovered = members;
            let changes = self
                .registry
                .update(wanted_members(self.statics.clone(), &self.discovered));
            dirty |= self.membership_changed(&changes);
        }
        if dirty {
            self.publish();
        }
    }

    /// Follows a registry change: health members, workers, metrics epoch. True when anything changed.
    fn membership_changed(&mut self, changes: &Changes) -> bool {
        if changes.is_empty() {
            return false;
        }
        for m in self.registry.members() {
            if changes.added.contains(&m.spec.key) {
                eprintln!(
                    "inferrail: replica {} ({}) joined from {}",
                    m.spec.id,
                    m.spec.addr,
                    m.source.label()
                );
            }
        }
        if !changes.removed.is_empty() {
            eprintln!(
                "inferrail: {} replica(s) left; their running requests finish there",
                changes.removed.len()
            );
        }
        self.book.sync_members(&members_for_health(&self.registry));
        self.sync_workers();
        self.sync_streams(&changes.removed);
        if let Some(p) = &self.observers.predictor {
            for key in &changes.removed {
                let _ = p.index().forget(*key);
            }
        }
        for key in changes.added.iter().chain(&changes.updated) {
            if let Some(blocks) = self
                .registry
                .get(*key)
                .and_then(|m| m.spec.kv_capacity_blocks)
            {
                let effects = self.book.capacity(*key, blocks);
                self.carry_out(effects);
            }
        }
        true
    }

    /// Applies a JSON merge patch to the config in effect. Returns the generation in effect.
    pub fn apply_patch(
        &mut self,
        patch: &serde_json::Value,
        started: Instant,
    ) -> Result<u64, Refusal> {
        let before = self.store.generation();
        let created = self.created_unix;
        let applied = self
            .store
            .patch_checked(patch, |c| check_live(c, created))?;
        self.finish_apply(applied, before, started);
        Ok(self.store.generation())
    }

    /// Re-reads the config file. Returns the generation in effect and whether it changed.
    pub fn reload_file(&mut self, started: Instant) -> Result<(u64, bool), Refusal> {
        let before = self.store.generation();
        let created = self.created_unix;
        match self.store.reload_file_checked(|c| check_live(c, created))? {
            Some(applied) => {
                self.finish_apply(applied, before, started);
                Ok((self.store.generation(), self.store.generation() != before))
            }
            None => {
                self.count_reload("unchanged");
                Ok((before, false))
            }
        }
    }

    fn finish_apply(&mut self, applied: Applied, before: u64, started: Instant) {
        if applied.generation == before {
            self.count_reload("unchanged");
            return;
        }
        for warning in applied.warnings() {
            eprintln!("inferrail: {warning}");
        }
        self.apply(applied.config, applied.generation);
        self.count_reload("applied");
        self.apply_times.push(started.elapsed());
        eprintln!(
            "inferrail: config generation {} applied",
            applied.generation
        );
    }

    /// Applies a config that passed [`check_live`]: settings, registry, policies, then publishes.
    fn apply(&mut self, config: Config, generation: u64) {
        let (part, statics) = match prepare_live(&config, generation, self.created_unix) {
            Ok(ok) => ok,
            Err(e) => {
                // check_live passed moments ago; a name that stopped resolving since keeps the
                // running replica set.
                eprintln!("inferrail: {e}");
                return;
            }
        };
        self.part = part;
        self.book
            .health
            .set_settings(HealthSettings::from_config(&config.health));
        *self.worker_settings.borrow_mut() =
            WorkerSettings::from_config(&config.health, &config.load);
        self.log_prompts
            .store(config.logging.log_prompts, Ordering::Relaxed);
        self.sync_discovery(&config);
        let changes = self
            .registry
            .update(wanted_members(statics.clone(), &self.discovered));
        self.statics = statics;
        self.membership_changed(&changes);
        let now = Instant::now();
        let effects = self.book.tick(now);
        self.carry_out(effects);
        self.publish();
    }

    /// Replica `id`'s ledger as it reads now (every core's requests, whatever snapshot they
    /// were routed with), or an idle reading when the replica is not in the current snapshot.
    pub fn load_now(&self, id: &str) -> LedgerReading {
        self.current
            .replicas
            .iter()
            .find(|r| r.spec.id == id)
            .map(|r| r.spec.ledger.reading())
            .unwrap_or_default()
    }

    /// Every current replica's `(in_flight, pending)` from its ledger, by id, for `/metrics`.
    pub fn gauges(&self) -> ReplicaGauges {
        self.current
            .replicas
            .iter()
            .map(|r| {
                let reading = r.spec.ledger.reading();
                let load = (
                    i64::from(reading.in_flight),
                    i64::from(reading.awaiting_head),
                );
                (r.spec.id.clone(), load)
            })
            .collect()
    }

    fn sync_discovery(&mut self, config: &Config) {
        let groups = config.discovery.dns.clone();
        match (&self.discovery, groups.is_empty()) {
            (Some(d), false) => {
                d.set_groups(groups);
                // Members of groups that were removed or changed go at once.
                self.discovered.retain(|m| {
                    config
                        .discovery
                        .dns
                        .iter()
                        .any(|g| g.name == m.group && g.models == m.models)
                });
            }
            (Some(_), true) => {
                self.discovery = None;
                self.discovered.clear();
            }
            (None, false) => match Discovery::start(groups, self.resolver.clone()) {
                Ok(d) => {
                    self.discovered = d.resolve_now_blocking(DISCOVERY_START_WAIT);
                    self.discovery = Some(d);
                }
                Err(e) => eprintln!("inferrail: cannot start DNS discovery: {e}"),
            },
            (None, true) => {}
        }
    }

    /// Builds a snapshot of everything known now and hands it to every core.
    pub fn publish(&mut self) {
        let now = Instant::now();
        let layout = layout_of(&self.part, &self.registry);
        let current_epoch = self.history.current().clone();
        let epoch = if current_epoch.layout.models == layout.models
            && current_epoch.layout.replicas == layout.replicas
        {
            current_epoch
        } else {
            let e = MetricsEpoch::new(layout, self.core_count);
            self.history.push(e.clone());
            self.epochs.push(Arc::downgrade(&e));
            e
        };
        self.epochs.retain(|w| w.strong_count() > 0);
        let replicas: Vec<(ReplicaSpec, ReplicaLive)> = self
            .registry
            .members()
            .iter()
            .map(|m| {
                let key = m.spec.key;
                let live = ReplicaLive {
                    routable: self.book.health.routable(key, now),
                    failure_streak: self.book.health.failure_streak(key) > 0,
                };
                (m.spec.clone(), live)
            })
            .collect();
        self.generation += 1;
        let snap = Arc::new(Snapshot::assemble(
            &self.part,
            replicas,
            self.generation,
            epoch,
        ));
        for (mailbox, bell) in self.cores.mailboxes.iter().zip(&self.cores.doorbells) {
            mailbox.publish(snap.clone());
            bell.ring();
        }
        self.current = snap.clone();
        self.retained.push_back(snap);
        // Keep the newest few; older ones only while a core or a request still holds them, so
        // the last reference (and the free) is dropped here rather than on a data core.
        let n = self.retained.len();
        let mut index = 0;
        self.retained.retain(|s| {
            index += 1;
            index + RETAINED_SNAPSHOTS > n || Arc::strong_count(s) > 1
        });
        self.counters.publishes += 1;
    }

    /// Counts a reload result.
    pub fn count_reload(&mut self, result: &'static str) {
        *self.counters.reloads.entry(result).or_insert(0) += 1;
    }
}

/// Checks that a candidate config can be applied live: its policies exist and its static
/// replicas resolve.
pub fn check_live(config: &Config, created_unix: u64) -> Result<(), Refusal> {
    prepare_live(config, 0, created_unix).map(|_| ())
}

fn prepare_live(
    config: &Config,
    generation: u64,
    created_unix: u64,
) -> Result<(ConfigPart, Vec<Wanted>), Refusal> {
    let invalid =
        |path: &str, message: String| Refusal::Invalid(Problems(vec![Problem::new(path, message)]));
    let part = ConfigPart::from_config(config, generation, created_unix);
    let statics = static_replicas(config).map_err(|e| {
        invalid(
            &format!("replicas[{}].url", e.index),
            format!("cannot resolve {}: {}", e.authority, e.reason),
        )
    })?;
    Ok((part, statics))
}

fn members_for_health(registry: &Registry) -> Vec<(u64, Vec<String>)> {
    registry
        .members()
        .iter()
        .map(|m| (m.spec.key, m.spec.models.clone()))
        .collect()
}

/// How often the hash-parity check reads the index's speculative outcomes.
const PARITY_EVERY: Duration = Duration::from_secs(1);

/// Feeds the hash-parity check ([`crate::fleet::kv_events::parity`]) every [`PARITY_EVERY`]
/// while the controller lives: the index's figures are awaited without blocking the control
/// thread, and only while some replica's events are followed.
async fn parity_loop(me: Weak<RefCell<Controller>>) {
    loop {
        monoio::time::sleep(PARITY_EVERY).await;
        let Some(ctl) = me.upgrade() else {
            return;
        };
        let predictor = {
            let c = ctl.borrow();
            if c.kv_streams.is_empty() {
                continue;
            }
            c.observers.predictor.clone()
        };
        drop(ctl);
        let Some(predictor) = predictor else {
            return;
        };
        let Ok(reply) = predictor.index().request_stats() else {
            continue;
        };
        let Ok(stats) = reply.await else {
            continue;
        };
        let Some(ctl) = me.upgrade() else {
            return;
        };
        ctl.borrow_mut()
            .kv_streams
            .on_index_stats(&stats, Instant::now(), &predictor);
    }
}
