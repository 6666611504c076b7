//! Following the engines' KV event streams into the index's exact mirrors.
//!
//! A replica with `kv_events` gets one stream per data-parallel rank: a thread each
//! ([`thread`]) around a pure [`core::StreamCore`], feeding the replica's mirror in the index
//! shards through one [`sink::ReplicaMirror`]. With `kv_events: discover` the control thread
//! first reads the engine's `/kv_event_sources` ([`sources`]), retrying until the engine answers
//! with at least one ZMQ publisher. [`KvStreams`] is the control thread's table of them: it
//! starts, restarts (config changed) and stops streams as the registry changes.
//!
//! The replica's mirror is trusted only while every rank's stream is connected and synced;
//! otherwise its lookups use the routing records, as without events.

pub mod core;
pub mod parity;
pub mod sink;
pub mod sources;
pub mod stats;
pub mod thread;

use crate::fleet::probe::http_get;
use crate::fleet::worker::{until_stopped, StopSignal};
use inferrail_config::KvEvents;
use inferrail_dataplane::predict::Predictor;
use inferrail_events::stream::TrackerLimits;
use inferrail_shards::index::{IndexShards, ReplicaIndexStats};
use parity::{ParityWatch, Transition};
use sink::ReplicaMirror;
use sources::RankSource;
use stats::StreamStats;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one `/kv_event_sources` request may take.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(2);
/// Time between `/kv_event_sources` attempts that found no publisher.
const DISCOVER_RETRY: Duration = Duration::from_secs(2);
/// Largest `/kv_event_sources` body read.
const DISCOVER_CAP: usize = 64 * 1024;
/// Failed connection attempts in a row after which a discovered stream's endpoints are read
/// again: a restarted engine that binds port 0 publishes on new ports.
pub const REDISCOVER_AFTER: u64 = 3;

/// A replica whose events the gateway should follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTarget {
    /// Registry key.
    pub key: u64,
    /// Replica id (for logs).
    pub id: String,
    /// The engine's HTTP address (its IP replaces a `*` host).
    pub addr: SocketAddr,
    /// `host:port` for the Host header of `/kv_event_sources`.
    pub authority: String,
    /// Where its events are.
    pub kv_events: KvEvents,
    /// The model its blocks are named under, with that model's block size.
    pub model: Arc<str>,
    /// Tokens per block of that model.
    pub block_size: u64,
}

/// One stream being followed, for the admin API and metrics.
pub struct RunningStream {
    /// Where it reads.
    pub source: RankSource,
    /// What it has done.
    pub stats: Arc<StreamStats>,
}

/// One replica's streams.
struct ReplicaStreams {
    target: StreamTarget,
    mirror: Arc<ReplicaMirror>,
    /// The running generation's stop flag.
    stop: Arc<AtomicBool>,
    streams: Vec<RunningStream>,
    /// The discovery task's stop signal while it runs.
    discovering: Option<Rc<StopSignal>>,
    /// Why discovery has not found streams yet (for the admin API).
    discovery_problem: Option<String>,
}

impl ReplicaStreams {
    /// A discovered replica one of whose streams failed [`REDISCOVER_AFTER`] times in a row.
    fn stale(&self) -> bool {
        self.target.kv_events == KvEvents::Discover
            && self.discovering.is_none()
            && self
                .streams
                .iter()
                .any(|s| s.stats.failures_in_a_row.load(Relaxed) >= REDISCOVER_AFTER)
    }

    /// Stops every thread and the discovery task; the mirror's later operations are dropped.
    fn stop(&mut self, forget: bool) {
        self.stop.store(true, Relaxed);
        if let Some(d) = self.discovering.take() {
            d.trigger();
        }
        self.mirror.stop(forget);
    }
}

/// What the admin API shows of one replica's streams.
pub struct ReplicaStreamsView<'a> {
    /// `endpoints` or `discover`.
    pub configured: &'static str,
    /// The streams running.
    pub streams: &'a [RunningStream],
    /// Why discovery found nothing yet.
    pub discovery_problem: Option<&'a str>,
}

/// Called on the control thread with a discovery's news: the replica key and its streams, or
/// why none were found yet (once per new reason).
pub type SourcesSink = Rc<dyn Fn(u64, Result<Vec<RankSource>, String>)>;

/// The control thread's table of followed replicas.
#[derive(Default)]
pub struct KvStreams {
    replicas: HashMap<u64, ReplicaStreams>,
    /// Hash parity per model (models of followed replicas only).
    parity: HashMap<Arc<str>, ModelParity>,
}

/// One model's parity check and what it last read of each replica's speculative outcomes.
#[derive(Default)]
struct ModelParity {
    watch: ParityWatch,
    /// Per replica key: confirmed and expired entries as last read.
    last: HashMap<u64, (u64, u64)>,
}

/// A model's parity figures, for `/metrics` and `/admin/index`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParityRow {
    /// The model.
    pub model: String,
    /// Routed prompts the engines' events confirmed.
    pub matches: u64,
    /// Routed prompts they never confirmed.
    pub mismatches: u64,
    /// Whether the model's predictions are in use (false while parity is off).
    pub predictions_on: bool,
}

impl KvStreams {
    /// Follows exactly `targets`: new ones start (discovery first for `discover`), changed ones
    /// restart, missing ones stop. `gone` holds the keys that left the registry (the caller
    /// removes them from the index); others that stop go back to approximate predictions.
    pub fn sync(
        &mut self,
        targets: Vec<StreamTarget>,
        gone: &[u64],
        index: &Arc<IndexShards>,
        sources_sink: &SourcesSink,
    ) {
        let wanted: HashMap<u64, StreamTarget> = targets.into_iter().map(|t| (t.key, t)).collect();
        self.replicas.retain(|key, r| {
            let keep = wanted.get(key) == Some(&r.target);
            if !keep {
                r.stop(gone.contains(key));
            }
            keep
        });
        for (key, target) in wanted {
            if self.replicas.contains_key(&key) {
                continue;
            }
            let mirror = ReplicaMirror::new(index.clone(), key, target.model.clone());
            let mut r = ReplicaStreams {
                target,
                mirror,
                stop: Arc::new(AtomicBool::new(false)),
                streams: Vec::new(),
                discovering: None,
                discovery_problem: None,
            };
            match &r.target.kv_events {
                KvEvents::Endpoints(e) => {
                    let sources = sources::from_config(e, r.target.addr.ip());
                    start_streams(&mut r, sources);
                }
                KvEvents::Discover => begin_discovery(&mut r, sources_sink),
            }
            self.replicas.insert(key, r);
        }
    }

    /// News from the discovery of `key`: the streams found start; a problem is kept for the
    /// admin API. Ignored when the replica stopped being followed meanwhile.
    pub fn on_discovery(&mut self, key: u64, news: Result<Vec<RankSource>, String>) {
        let Some(r) = self.replicas.get_mut(&key) else {
            return;
        };
        if r.discovering.is_none() {
            return;
        }
        match news {
            Ok(sources) => {
                r.discovering = None;
                r.discovery_problem = None;
                start_streams(r, sources);
            }
            Err(why) => r.discovery_problem = Some(why),
        }
    }

    /// Whether [`KvStreams::rediscover_stale`] has anything to do (no allocation, atomics only).
    pub fn any_stale(&self) -> bool {
        self.replicas.values().any(ReplicaStreams::stale)
    }

    /// Discovers again every `discover` replica one of whose streams failed to connect
    /// [`REDISCOVER_AFTER`] times in a row (its engine restarted, maybe on other ports): its
    /// streams stop and its mirror is untrusted until the new ones sync.
    pub fn rediscover_stale(&mut self, sources_sink: &SourcesSink) {
        for r in self.replicas.values_mut() {
            if !r.stale() {
                continue;
            }
            eprintln!(
                "inferrail: replica {}: its KV event publisher stopped answering; reading                  /kv_event_sources again",
                r.target.id
            );
            r.stop.store(true, Relaxed);
            r.stop = Arc::new(AtomicBool::new(false));
            r.streams.clear();
            begin_discovery(r, sources_sink);
        }
    }

    /// The engine's KV capacity became known: the streams' resync rule uses it.
    pub fn set_capacity(&self, key: u64, blocks: u64) {
        if let Some(r) = self.replicas.get(&key) {
            r.mirror.capacity_blocks.store(blocks, Relaxed);
        }
    }

    /// The streams of replica `key`, when it is followed.
    pub fn view(&self, key: u64) -> Option<ReplicaStreamsView<'_>> {
        self.replicas.get(&key).map(|r| ReplicaStreamsView {
            configured: match r.target.kv_events {
                KvEvents::Endpoints(_) => "endpoints",
                KvEvents::Discover => "discover",
            },
            streams: &r.streams,
            discovery_problem: r.discovery_problem.as_deref(),
        })
    }

    /// Feeds the hash-parity check with the index's figures at `now`: each followed replica's
    /// speculative entries confirmed (match) and expired (mismatch) since the last call, summed
    /// per model. A model whose parity fails has its predictions switched off in `predictor`
    /// (said once in the log), and on again when it recovers.
    pub fn on_index_stats(
        &mut self,
        stats: &[ReplicaIndexStats],
        now: Instant,
        predictor: &Predictor,
    ) {
        let mut fresh: HashMap<Arc<str>, (u64, u64)> = HashMap::new();
        for r in self.replicas.values() {
            let Some(s) = stats.iter().find(|s| s.key == r.target.key) else {
                continue;
            };
            let now_counts = (s.speculative.confirmed, s.speculative.expired);
            let model = self.parity.entry(r.target.model.clone()).or_default();
            let before = model
                .last
                .insert(r.target.key, now_counts)
                .unwrap_or((0, 0));
            // Counters restart when the replica's mirror was made anew: count from zero.
            let before = if now_counts.0 < before.0 || now_counts.1 < before.1 {
                (0, 0)
            } else {
                before
            };
            let d = fresh.entry(r.target.model.clone()).or_default();
            d.0 += now_counts.0 - before.0;
            d.1 += now_counts.1 - before.1;
        }
        for (model, (matches, mismatches)) in fresh {
            let Some(p) = self.parity.get_mut(&model) else {
                continue;
            };
            let Some(t) = p.watch.observe(now, matches, mismatches) else {
                continue;
            };
            let trusted = matches!(t, Transition::On(_));
            if let Some(m) = predictor.model(&model) {
                m.trusted.store(trusted, Relaxed);
            }
            match t {
                Transition::Off(f) => eprintln!(
                    "inferrail: model {model}: {:.0}% of the prompts routed in the last {}s were                      never stored by the engines under the gateway's block hashes (its tokens                      differ from the engines': check the chat template and tokenizer); routing                      without its cache predictions until parity recovers",
                    f * 100.0,
                    parity::WINDOW.as_secs()
                ),
                Transition::On(f) => eprintln!(
                    "inferrail: model {model}: hash parity recovered ({:.0}% mismatches); its                      cache predictions are used again",
                    f * 100.0
                ),
            }
        }
    }

    /// Every model's parity figures, by name.
    pub fn parity_rows(&self) -> Vec<ParityRow> {
        let mut rows: Vec<ParityRow> = self
            .parity
            .iter()
            .map(|(model, p)| ParityRow {
                model: model.to_string(),
                matches: p.watch.matches,
                mismatches: p.watch.mismatches,
                predictions_on: !p.watch.off(),
            })
            .collect();
        rows.sort_by(|a, b| a.model.cmp(&b.model));
        rows
    }

    /// Whether any replica is followed (the parity check has something to read).
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }
}

impl Drop for KvStreams {
    fn drop(&mut self) {
        for r in self.replicas.values() {
            r.stop.store(true, Relaxed);
        }
    }
}

/// Starts reading the replica's `/kv_event_sources`; its mirror is untrusted (and emptied)
/// until the streams found sync.
fn begin_discovery(r: &mut ReplicaStreams, sources_sink: &SourcesSink) {
    r.mirror.start_generation(0);
    let stop = Rc::new(StopSignal::default());
    monoio::spawn(discover(
        r.target.clone(),
        stop.clone(),
        sources_sink.clone(),
    ));
    r.discovering = Some(stop);
    r.discovery_problem = Some("not answered yet".to_string());
}

/// Starts one thread per source, as a new generation of the replica's mirror.
fn start_streams(r: &mut ReplicaStreams, sources: Vec<RankSource>) {
    let generation = r.mirror.start_generation(sources.len());
    for (slot, source) in sources.into_iter().enumerate() {
        let stats = Arc::new(StreamStats::default());
        let core = core::StreamCore::new(
            source.replay_endpoint.is_some(),
            TrackerLimits::default(),
            r.target.block_size,
            stats.clone(),
        );
        let plan = thread::StreamPlan {
            replica: r.target.id.clone(),
            rank: source.rank,
            endpoint: source.endpoint.clone(),
            replay_endpoint: source.replay_endpoint.clone(),
            topic: source.topic.clone(),
        };
        let sink = r.mirror.sink(generation, slot);
        match thread::spawn(plan, core, sink, r.mirror.clone(), r.stop.clone()) {
            Ok(_) => r.streams.push(RunningStream { source, stats }),
            Err(e) => eprintln!(
                "inferrail: replica {}: cannot start the KV events thread for {}: {e}; its \
                 predictions stay approximate",
                r.target.id, source.endpoint
            ),
        }
    }
}

/// Reads the engine's `/kv_event_sources` until it lists a publisher, then hands the streams to
/// `sink` (unless stopped first).
async fn discover(target: StreamTarget, stop: Rc<StopSignal>, sink: SourcesSink) {
    let mut last_problem = String::new();
    loop {
        let fetch = http_get(
            target.addr,
            &target.authority,
            "/kv_event_sources",
            DISCOVER_TIMEOUT,
            DISCOVER_CAP,
        );
        let Some(result) = until_stopped(&stop, fetch).await else {
            return;
        };
        let problem = match result {
            Ok(f) if f.status == 200 => match sources::parse_sources(&f.body, target.addr.ip()) {
                Ok(found) => {
                    if !stop.is_stopped() {
                        eprintln!(
                            "inferrail: replica {}: KV events discovered: {}",
                            target.id,
                            found
                                .iter()
                                .map(|s| format!("rank {} at {}", s.rank, s.endpoint))
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                        sink(target.key, Ok(found));
                    }
                    return;
                }
                Err(e) => e.to_string(),
            },
            Ok(f) => format!("/kv_event_sources answered status {}", f.status),
            Err(e) => format!("/kv_event_sources: {e}"),
        };
        if problem != last_problem {
            eprintln!(
                "inferrail: replica {}: KV events discovery: {problem}; retrying every {}s, \
                 predictions stay approximate meanwhile",
                target.id,
                DISCOVER_RETRY.as_secs()
            );
            if stop.is_stopped() {
                return;
            }
            sink(target.key, Err(problem.clone()));
            last_problem = problem;
        }
        if until_stopped(&stop, monoio::time::sleep(DISCOVER_RETRY))
            .await
            .is_none()
        {
            return;
        }
    }
}
