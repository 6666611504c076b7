//! The immutable fleet state every core routes from. The control thread builds one per config
//! generation and broadcasts it; a request reads one snapshot from start to end.

use crate::fleet::{SharedEngineReading, SharedLedger};
use crate::metrics::{MetricsEpoch, MetricsLayout};
use crate::predict::PredictionLimits;
use inferrail_config::{Config, PolicyKind};
use inferrail_routing::split::Arms;
use inferrail_routing::BrainParams;
use inferrail_shards::fx::FxHashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Gateway settings a request needs, copied out of the config.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Whole-request deadline: reading the body, waiting on engines and relaying the response.
    pub request_timeout: Duration,
    /// Longest wait for a response head, per attempt (`server.first_byte_timeout`).
    pub first_byte_timeout: Duration,
    /// Longest silence mid-response before it is cut (`server.stream_idle_timeout`).
    pub stream_idle_timeout: Duration,
    /// How long a connection may sit without a complete request head.
    pub header_read_timeout: Duration,
    /// Largest request body accepted.
    pub max_body_bytes: u64,
    /// Upstream TCP connect timeout.
    pub connect_timeout: Duration,
    /// Idle upstream connections older than this are closed, not reused.
    pub pool_idle_timeout: Duration,
    /// Idle upstream connections kept per replica per core.
    pub pool_max_idle: usize,
    /// Most attempts (first try included) a request gets.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles per attempt.
    pub backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
    /// An engine report older than this is ignored (`load.max_age`).
    pub max_report_age: Duration,
    /// Fraction of requests whose routing decisions are logged (0 when there is no decision log).
    pub decision_sample_rate: f64,
    /// Whether logs may carry prompt text (`logging.log_prompts`).
    pub log_prompts: bool,
    /// How long a request waits for its cache prediction and which bodies it tokenizes inline.
    pub prediction: PredictionLimits,
}

/// One arm of a model's traffic split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm {
    /// The arm's policy.
    pub policy: PolicyKind,
    /// Share of requests in percent (100 when there is no split).
    pub weight: u32,
    /// Identifies the policy's settings: a core keeps a policy object (and its state) across
    /// snapshots while the model name, kind and fingerprint stay the same.
    pub fingerprint: u64,
}

/// A model the gateway serves.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// Canonical name sent to engines.
    pub name: String,
    /// Other names clients may use.
    pub aliases: Vec<String>,
    /// The routing arms: one for a model without a split.
    pub arms: Vec<Arm>,
    /// The arm chooser when there is more than one arm.
    pub split: Option<Arms>,
    /// Policies evaluated alongside the real one, for comparison only.
    pub shadow: Arc<[PolicyKind]>,
    /// Indices into [`Snapshot::replicas`] of replicas serving this model.
    pub replicas: Vec<usize>,
    /// The model's routing settings (guards, cost model, cache-aware policies).
    pub brain: BrainParams,
}

impl ModelEntry {
    /// The policy of the first (or only) arm.
    pub fn policy(&self) -> PolicyKind {
        self.arms
            .first()
            .map_or(PolicyKind::LeastRequest, |a| a.policy)
    }
}

/// A replica's identity and limits, as the control thread's registry knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSpec {
    /// Registry key: unique for the replica's lifetime, kept while id and address stay the same.
    pub key: u64,
    /// Stable id, used in metrics and `x-inferrail-replica`.
    pub id: String,
    /// Resolved socket address.
    pub addr: SocketAddr,
    /// `host:port` sent as the Host header.
    pub authority: String,
    /// Canonical names of the models it serves.
    pub models: Vec<String>,
    /// Fleet-wide cap on requests in flight.
    pub max_concurrency: u32,
    /// Fleet-wide cap on requests queued at the gateway for a free slot while the replica is
    /// full (0: a full replica refuses at once).
    pub max_pending: u32,
    /// KV cache capacity in blocks from config (else the engine's report, else the index default).
    pub kv_capacity_blocks: Option<u64>,
    /// Its one load ledger, shared by every core and kept while the key stays.
    pub ledger: SharedLedger,
    /// Its engine's latest reading for routing, written by the control thread after each
    /// scrape, read by every core; kept while the key stays.
    pub engine: SharedEngineReading,
}

/// What the control thread knows of a replica right now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaLive {
    /// In rotation: passing health checks and not ejected.
    pub routable: bool,
    /// The control thread counts an open streak of failed requests: cores report successes too
    /// until it closes.
    pub failure_streak: bool,
}

/// A replica (one engine endpoint) in a snapshot.
#[derive(Debug, Clone)]
pub struct ReplicaEntry {
    /// Identity and limits.
    pub spec: ReplicaSpec,
    /// Health and the engine's report.
    pub live: ReplicaLive,
}

impl ReplicaEntry {
    /// Stable id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }
}

/// Everything a core needs to route, immutable once built.
pub struct Snapshot {
    /// Increases by one per published snapshot.
    pub generation: u64,
    /// Generation of the config this snapshot was built from.
    pub config_generation: u64,
    /// Request handling settings.
    pub settings: Settings,
    /// Models, in config order.
    pub models: Vec<ModelEntry>,
    /// Replicas: static ones in config order, then discovered ones.
    pub replicas: Vec<ReplicaEntry>,
    /// Model index by canonical name or alias.
    names: FxHashMap<String, usize>,
    /// The prebuilt `/v1/models` body.
    pub models_body: Vec<u8>,
    /// The recorders requests routed with this snapshot write into.
    pub metrics: Arc<MetricsEpoch>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("generation", &self.generation)
            .field("config_generation", &self.config_generation)
            .field("models", &self.models)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

/// The parts of a snapshot that only change with the config.
#[derive(Debug, Clone)]
pub struct ConfigPart {
    /// Config generation.
    pub generation: u64,
    /// Settings.
    pub settings: Settings,
    /// Models (with `replicas` filled in by [`Snapshot::assemble`]).
    pub models: Vec<ModelEntry>,
    /// `created` time of the `/v1/models` cards.
    pub created_unix: u64,
}

impl ConfigPart {
    /// Extracts the routing-relevant parts of a validated config.
    pub fn from_config(config: &Config, generation: u64, created_unix: u64) -> ConfigPart {
        let routing_fp = routing_fingerprint(config);
        let mut models = Vec::with_capacity(config.models.len());
        for m in &config.models {
            let split = if m.split.is_empty() {
                &config.routing.split
            } else {
                &m.split
            };
            let arms: Vec<Arm> = if split.is_empty() {
                vec![Arm {
                    policy: m.policy.unwrap_or(config.routing.default_policy),
                    weight: 100,
                    fingerprint: routing_fp,
                }]
            } else {
                split
                    .iter()
                    .map(|(policy, weight)| Arm {
                        policy: *policy,
                        weight: *weight,
                        fingerprint: routing_fp,
                    })
                    .collect()
            };
            let shadow = if m.shadow.is_empty() {
                &config.routing.shadow
            } else {
                &m.shadow
            };
            let weights: Vec<(PolicyKind, u32)> =
                arms.iter().map(|a| (a.policy, a.weight)).collect();
            let split = Arms::new(&weights).ok().filter(Arms::is_split);
            models.push(ModelEntry {
                name: m.name.clone(),
                aliases: m.aliases.clone(),
                arms,
                split,
                shadow: shadow.iter().copied().collect(),
                replicas: Vec::new(),
                brain: BrainParams::from_config(&config.routing, Some(m)),
            });
        }
        let s = &config.server;
        ConfigPart {
            generation,
            settings: Settings {
                request_timeout: s.request_timeout,
                first_byte_timeout: s.first_byte_timeout(),
                stream_idle_timeout: s.stream_idle_timeout,
                header_read_timeout: s.header_read_timeout,
                max_body_bytes: s.max_body_bytes,
                connect_timeout: s.connect_timeout,
                pool_idle_timeout: s.pool_idle_timeout,
                pool_max_idle: s.pool_max_idle,
                max_attempts: config.retry.max_attempts.max(1),
                backoff: config.retry.backoff,
                max_backoff: config.retry.max_backoff,
                max_report_age: config.load.max_age,
                decision_sample_rate: config
                    .observability
                    .decision_log
                    .as_ref()
                    .map_or(0.0, |d| d.sample_rate),
                log_prompts: config.logging.log_prompts,
                prediction: PredictionLimits::from_config(&config.tokenizer),
            },
            models,
            created_unix,
        }
    }
}

/// A hash of the routing settings policies may read (everything in `routing` except the split,
/// the shadow list and the seed), so policy objects survive reloads that leave them alone.
fn routing_fingerprint(config: &Config) -> u64 {
    let r = &config.routing;
    let text = format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}",
        r.epsilon, r.bounded_load_floor, r.kappa, r.session_affinity, r.cost_model
    );
    // FNV-1a: stable across runs and builds.
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Snapshot {
    /// Assembles a snapshot from the config part, the registry's replicas with their live state,
    /// and the metrics epoch. The epoch's layout must list the models and replicas in this same
    /// order: snapshot indices are the recorders' slots.
    pub fn assemble(
        part: &ConfigPart,
        replicas: Vec<(ReplicaSpec, ReplicaLive)>,
        generation: u64,
        metrics: Arc<MetricsEpoch>,
    ) -> Snapshot {
        debug_assert!(
            metrics
                .layout
                .replicas
                .iter()
                .eq(replicas.iter().map(|(s, _)| &s.id))
                && metrics
                    .layout
                    .models
                    .iter()
                    .eq(part.models.iter().map(|m| &m.name)),
            "metrics layout out of step with the snapshot"
        );
        let replicas: Vec<ReplicaEntry> = replicas
            .into_iter()
            .map(|(spec, live)| ReplicaEntry { spec, live })
            .collect();
        let mut models = part.models.clone();
        let mut names = FxHashMap::default();
        for (mi, m) in models.iter_mut().enumerate() {
            m.replicas = replicas
                .iter()
                .enumerate()
                .filter(|(_, r)| r.spec.models.contains(&m.name))
                .map(|(i, _)| i)
                .collect();
            names.insert(m.name.clone(), mi);
            for a in &m.aliases {
                names.insert(a.clone(), mi);
            }
        }
        let models_body = models_body(&models, part.created_unix);
        Snapshot {
            generation,
            config_generation: part.generation,
            settings: part.settings.clone(),
            models,
            replicas,
            names,
            models_body,
            metrics,
        }
    }

    /// A snapshot of a config's static replicas, all in rotation, with a fresh metrics epoch for
    /// `cores` cores (for tests and tools that run without a control thread).
    pub fn from_config(config: &Config, addrs: &[SocketAddr], cores: usize) -> Snapshot {
        let part = ConfigPart::from_config(config, 1, 0);
        let replicas: Vec<(ReplicaSpec, ReplicaLive)> = config
            .replicas
            .iter()
            .zip(addrs)
            .enumerate()
            .map(|(i, (r, addr))| {
                (
                    ReplicaSpec {
                        key: i as u64 + 1,
                        id: r.id.clone(),
                        addr: *addr,
                        authority: r.url.authority(),
                        models: r.models.clone(),
                        max_concurrency: r.max_concurrency,
                        max_pending: r.max_pending,
                        kv_capacity_blocks: r.kv_capacity_blocks,
                        ledger: SharedLedger::new(),
                        engine: SharedEngineReading::new(),
                    },
                    ReplicaLive {
                        routable: true,
                        ..ReplicaLive::default()
                    },
                )
            })
            .collect();
        let layout = MetricsLayout {
            models: config.models.iter().map(|m| m.name.clone()).collect(),
            replicas: replicas.iter().map(|(s, _)| s.id.clone()).collect(),
        };
        Snapshot::assemble(&part, replicas, 1, MetricsEpoch::new(layout, cores))
    }

    /// The model a client names (canonical name or alias).
    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// Every name a client may use, canonical names first, for error messages.
    pub fn valid_names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
        out.extend(
            self.models
                .iter()
                .flat_map(|m| m.aliases.iter().map(String::as_str)),
        );
        out
    }

    /// Replica index by registry key.
    pub fn replica_by_key(&self, key: u64) -> Option<usize> {
        self.replicas.iter().position(|r| r.spec.key == key)
    }
}

/// The `/v1/models` list in vLLM's shape: one card per model and one per alias (alias cards name
/// the canonical model as `root`).
fn models_body(models: &[ModelEntry], created: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"object\":\"list\",\"data\":[");
    let mut first = true;
    for m in models {
        for id in std::iter::once(&m.name).chain(m.aliases.iter()) {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(b"{\"id\":");
            inferrail_wire::push_json_string(&mut out, id);
            out.extend_from_slice(b",\"object\":\"model\",\"created\":");
            out.extend_from_slice(created.to_string().as_bytes());
            out.extend_from_slice(b",\"owned_by\":\"inferrail\",\"root\":");
            inferrail_wire::push_json_string(&mut out, &m.name);
            out.extend_from_slice(b",\"parent\":null}");
        }
    }
    out.extend_from_slice(b"]}");
    out
}
