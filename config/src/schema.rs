//! The configuration types and their documented defaults. Plain data: no parsing, no I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub use crate::upstream::UpstreamUrl;

/// A whole, validated Inferrail configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Listeners, timeouts and upstream connection pooling.
    pub server: Server,
    /// The models served, in the order written.
    pub models: Vec<Model>,
    /// Statically configured engines.
    pub replicas: Vec<Replica>,
    /// Engines found by DNS.
    pub discovery: Discovery,
    /// Policy choice and guard parameters.
    pub routing: Routing,
    /// Active health checks and outlier ejection.
    pub health: Health,
    /// Retries before the first response byte.
    pub retry: Retry,
    /// Engine load scraping.
    pub load: Load,
    /// The tokenizer thread pool.
    pub tokenizer: TokenizerPool,
    /// The KV index.
    pub index: Index,
    /// Tracing and decision logs.
    pub observability: Observability,
    /// What may be logged.
    pub logging: Logging,
}

impl Config {
    /// The index in `models` of the model with this name or alias.
    pub fn model_index(&self, name_or_alias: &str) -> Option<usize> {
        self.models
            .iter()
            .position(|m| m.name == name_or_alias)
            .or_else(|| {
                self.models
                    .iter()
                    .position(|m| m.aliases.iter().any(|a| a == name_or_alias))
            })
    }
}

/// The `server` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Client-facing listener (OpenAI API). Default `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// Admin listener (metrics, health, explain, live config). Default `127.0.0.1:9090`.
    pub admin_listen: SocketAddr,
    /// Data cores: `auto` (every available core) or a fixed number.
    pub cores: Count,
    /// Whole-request deadline, from the request head to the last response byte, streaming
    /// included. Default 600s, > 0.
    pub request_timeout: Duration,
    /// Longest wait for an engine's response head, per attempt (a timeout moves the request to
    /// another attempt while the deadline allows). `None` (the default): `request_timeout`.
    /// The default is not shorter because a non-streaming response sends its head only when the
    /// whole completion is generated, so any fixed bound would cut (and retry, doubling the
    /// load) long generations; set it to the longest non-streaming generation you serve to have
    /// hung engines retried sooner. > 0 and at most `request_timeout`.
    pub first_byte_timeout: Option<Duration>,
    /// Longest silence mid-response (the engine sending nothing, or the client reading nothing)
    /// before the response is cut. Default 60s, like nginx's `proxy_read_timeout`: after its head
    /// a streaming engine stays silent while the request queues and its prompt is prefilled,
    /// which takes tens of seconds on a loaded engine with a long prompt. > 0.
    pub stream_idle_timeout: Duration,
    /// Deadline for a client's request head. Default 30s, > 0.
    pub header_read_timeout: Duration,
    /// Grace period for in-flight requests on shutdown. Default 30s.
    pub shutdown_timeout: Duration,
    /// Largest accepted request body. Default 32 MiB, > 0.
    pub max_body_bytes: u64,
    /// How often the config file is checked for changes; 0 disables. Default 2s.
    pub reload_interval: Duration,
    /// Upstream TCP connect timeout. Default 2s, > 0.
    pub connect_timeout: Duration,
    /// Idle upstream keep-alive connections are closed after this (vLLM closes its own idle
    /// connections after 5s, so keep it below that). Default 2s, > 0.
    pub pool_idle_timeout: Duration,
    /// Idle upstream connections kept per replica per core. Default 64.
    pub pool_max_idle: usize,
}

impl Server {
    /// The per-attempt response-head timeout in effect: `first_byte_timeout`, else
    /// `request_timeout`.
    pub fn first_byte_timeout(&self) -> Duration {
        self.first_byte_timeout.unwrap_or(self.request_timeout)
    }
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 8080)),
            admin_listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 9090)),
            cores: Count::Auto,
            request_timeout: Duration::from_secs(600),
            first_byte_timeout: None,
            stream_idle_timeout: Duration::from_secs(60),
            header_read_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(30),
            max_body_bytes: 32 * 1024 * 1024,
            reload_interval: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            pool_idle_timeout: Duration::from_secs(2),
            pool_max_idle: 64,
        }
    }
}

/// A thread count: `auto` (decided at start from the machine) or a fixed number >= 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Count {
    /// Decided at start from the cores available.
    #[default]
    Auto,
    /// Exactly this many (>= 1).
    Fixed(usize),
}

impl Count {
    /// The fixed number, or `auto` when the count is automatic.
    pub fn resolve(self, auto: usize) -> usize {
        match self {
            Count::Auto => auto,
            Count::Fixed(n) => n,
        }
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::Auto => f.write_str("auto"),
            Count::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// One entry of `models`.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The canonical name, as the engines serve it.
    pub name: String,
    /// Other names clients may use.
    pub aliases: Vec<String>,
    /// This model's policy; `routing.default_policy` when `None`.
    pub policy: Option<PolicyKind>,
    /// This model's traffic split between policies in percent (summing to 100), validated like
    /// `routing.split`; empty means the model inherits `routing.split`.
    pub split: BTreeMap<PolicyKind, u32>,
    /// This model's shadow policies, validated like `routing.shadow`; empty means the model
    /// inherits `routing.shadow`.
    pub shadow: Vec<PolicyKind>,
    /// Tokenizer: a directory, an `org/name` in the local HF cache, or `builtin:sim`.
    pub tokenizer: Option<String>,
    /// The engines' KV block size in tokens; learned from their metrics when `None`.
    pub block_size: Option<u32>,
    /// Chat template override (a path or the template text); the tokenizer's own when `None`.
    pub chat_template: Option<String>,
    /// Extra variables passed to the chat template.
    pub chat_template_kwargs: BTreeMap<String, serde_yaml::Value>,
    /// This model's own prefill cost coefficients (`inferrail calibrate --model`), validated
    /// like `routing.cost_model` (keys left out take the same defaults); `routing.cost_model`
    /// applies when `None`.
    pub cost_model: Option<CostModelParams>,
}

/// One entry of `replicas`: a statically configured engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Replica {
    /// Unique id: letters, digits, `.`, `_`, `-`.
    pub id: String,
    /// The engine's base URL.
    pub url: UpstreamUrl,
    /// Canonical names of the models it serves (at least one).
    pub models: Vec<String>,
    /// Most requests in flight at once. Default 512, >= 1.
    pub max_concurrency: u32,
    /// Most requests queued at the router for a free slot while the replica is at its
    /// `max_concurrency` (fleet-wide, every core together); 0 refuses at once. Default 256.
    pub max_pending: u32,
    /// KV cache size in blocks; learned from the engine (or `index.default_capacity_blocks`)
    /// when `None`.
    pub kv_capacity_blocks: Option<u64>,
    /// Where the engine publishes its KV events; the index keeps an exact mirror of the
    /// replica's cache from them when set. `None`: predictions come from routing records only.
    pub kv_events: Option<KvEvents>,
}

/// `kv_events` of a replica or a DNS group: the engine's KV event publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvents {
    /// `{endpoint, replay_endpoint, topic}` as the engine was started with (vLLM's
    /// `--kv-events-config`). A `*` host (vLLM's bind address) means the replica's own host.
    Endpoints(KvEventEndpoints),
    /// `discover`: read the engine's `GET /kv_event_sources` (one stream per data-parallel rank).
    Discover,
}

/// The engine's KV event endpoints, each `tcp://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEventEndpoints {
    /// The PUB socket.
    pub endpoint: String,
    /// The replay ROUTER socket; without it a gap or a reconnect makes the mirror unsynced.
    pub replay_endpoint: Option<String>,
    /// Topic prefix subscribed to. Default `""` (every topic).
    pub topic: String,
}

impl Replica {
    /// Default `max_concurrency`, also used for DNS-discovered replicas.
    pub const DEFAULT_MAX_CONCURRENCY: u32 = 512;
    /// Default `max_pending`, also used for DNS-discovered replicas.
    pub const DEFAULT_MAX_PENDING: u32 = 256;
}

/// A routing policy, by its config name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// `round_robin`.
    RoundRobin,
    /// `random`.
    Random,
    /// `least_request`: fewest in flight.
    LeastRequest,
    /// `p2c`: power of two choices on in-flight requests.
    P2c,
    /// `prefix_hash`: consistent hashing on the prompt prefix (not in this release).
    PrefixHash,
    /// `kv_aware`: most predicted cached tokens (not in this release).
    KvAware,
    /// `cost_model`: lowest predicted TTFT (not in this release).
    CostModel,
}

impl PolicyKind {
    /// Every policy, in documentation order.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::RoundRobin,
        PolicyKind::Random,
        PolicyKind::LeastRequest,
        PolicyKind::P2c,
        PolicyKind::PrefixHash,
        PolicyKind::KvAware,
        PolicyKind::CostModel,
    ];

    /// The config name (`round_robin`, `least_request`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::Random => "random",
            PolicyKind::LeastRequest => "least_request",
            PolicyKind::P2c => "p2c",
            PolicyKind::PrefixHash => "prefix_hash",
            PolicyKind::KvAware => "kv_aware",
            PolicyKind::CostModel => "cost_model",
        }
    }

    /// The policy with this config name.
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `routing` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    /// Policy for models without their own. Default `least_request`.
    pub default_policy: PolicyKind,
    /// Traffic split between policies in percent (summing to 100); empty means no split.
    pub split: BTreeMap<PolicyKind, u32>,
    /// Policies evaluated alongside the real one, for comparison only.
    pub shadow: Vec<PolicyKind>,
    /// Bounded load: no replica above `max(ceil((1 + epsilon) * (in_flight + 1) / n),
    /// bounded_load_floor)`. Default 1.0, > 0.
    pub epsilon: f64,
    /// Bounded load floor: a replica is never set aside by the bounded-load guard while it would
    /// hold at most this many requests, whatever the bound says (at low absolute load the bound
    /// binds on nothing overloaded). Default 8, >= 1; 1 is the plain bound.
    pub bounded_load_floor: u64,
    /// KV pressure threshold, as a fraction of capacity, in (0, 1]. Default 1.0, which never sets
    /// a replica aside (an engine reports at most 1); ADR 026 says why the guard is off by default.
    pub kappa: f64,
    /// Spill weight `s` of cost_model, >= 0: a candidate's prefill also costs `s * L * P`, where
    /// `L` is the mean number of requests waiting for a first byte per candidate (the requests a
    /// replica's queue holds when this one joins it, by Little's law also those that will wait
    /// behind it), so under congestion work saved by a cached prefix counts for the queue behind
    /// it too. Default 0.25 (chosen in perf/results/spill-tune by a rule fixed before its runs,
    /// ADR 027); 0 prices only this request's own time to first token.
    pub spill_weight: f64,
    /// Keep a session on the replica that served it. Default false.
    pub session_affinity: bool,
    /// Seed for random choices; from entropy at start when `None`.
    pub seed: Option<u64>,
    /// Cost-model coefficients.
    pub cost_model: CostModelParams,
    /// `prefix_hash.blocks`: leading blocks the prefix_hash policy hashes. Default 8, >= 1.
    pub prefix_hash_blocks: u32,
    /// `kv_aware` weights.
    pub kv_aware: KvAwareWeights,
    /// Hot prefix replication.
    pub hot_prefix: HotPrefix,
    /// Prompts with at most this many tokens to compute on a replica pass the KV-pressure
    /// guard. Default 256.
    pub short_prompt_tokens: u32,
}

/// `routing.kv_aware`: score `cache_weight * cached/prompt - load_weight * in_flight/busiest`.
#[derive(Debug, Clone, PartialEq)]
pub struct KvAwareWeights {
    /// Weight of the predicted cached fraction. Default 1.0, >= 0.
    pub cache_weight: f64,
    /// Weight of the load relative to the busiest candidate. Default 0.75, >= 0: with the busiest
    /// candidate's load term at `load_weight`, a replica holding most of a prompt still beats an
    /// idle cold one while it is the busiest (a weight of 1 flips that as soon as the holder has
    /// one request in flight).
    pub load_weight: f64,
}

impl Default for KvAwareWeights {
    fn default() -> Self {
        KvAwareWeights {
            cache_weight: 1.0,
            load_weight: 0.75,
        }
    }
}

/// `routing.hot_prefix`: a root prefix whose recent prefill demand needs more than
/// `utilization` of a replica gets `ceil(demand / utilization)` owners.
#[derive(Debug, Clone, PartialEq)]
pub struct HotPrefix {
    /// Leading blocks that name a root prefix. Default 8, >= 1.
    pub blocks: u32,
    /// Window of the demand count. Default 10s, > 0.
    pub window: Duration,
    /// Share of one replica's time a prefix may need before it gets more owners. Default 0.7,
    /// in (0, 1].
    pub utilization: f64,
}

impl Default for HotPrefix {
    fn default() -> Self {
        HotPrefix {
            blocks: 8,
            window: Duration::from_secs(10),
            utilization: 0.7,
        }
    }
}

impl Default for Routing {
    fn default() -> Self {
        Routing {
            default_policy: PolicyKind::LeastRequest,
            split: BTreeMap::new(),
            shadow: Vec::new(),
            epsilon: 1.0,
            bounded_load_floor: 8,
            kappa: 1.0,
            spill_weight: 0.25,
            session_affinity: false,
            seed: None,
            cost_model: CostModelParams::default(),
            prefix_hash_blocks: 8,
            kv_aware: KvAwareWeights::default(),
            hot_prefix: HotPrefix::default(),
            short_prompt_tokens: 256,
        }
    }
}

/// Prefill time `P(u, c) = a*u + b*u*(c + u/2) + d` for `u` tokens to compute and `c` cached,
/// and the tier term `X`, the time to load cached tokens an engine holds in an offload tier:
/// the cost model's coefficients, read from `routing.cost_model` or a model's own `cost_model`,
/// priced by the routing brain and written by `inferrail calibrate`. Serializes to (and
/// deserializes from) exactly the keys of the config's `cost_model` section; keys left out take
/// their defaults.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostModelParams {
    /// `a`, seconds per computed token. Default 0.0001, >= 0.
    pub prefill_token_secs: f64,
    /// `b`, seconds per attention pair. Default 3.3e-9, >= 0.
    pub prefill_pair_secs: f64,
    /// `d`, fixed seconds per prefill. Default 0.005, >= 0.
    pub prefill_fixed_secs: f64,
    /// Seconds a replica's prefill is delayed per request it is running (decode steps share
    /// the batch). Default 0.0003, >= 0.
    pub decode_interference_secs: f64,
    /// Seconds to load one cached token's KV from the engine's CPU (host memory) offload tier
    /// instead of recomputing it. Default 5e-6, >= 0: 128 KiB of KV per token (Llama-3.1-8B,
    /// bf16: 2 * 32 layers * 8 KV heads * 128 * 2 bytes) over PCIe 4.0 x16 at ~25 GB/s. Scale
    /// it by your model's KV bytes per token and your link's bandwidth; 0 prices the tier free.
    pub cpu_load_token_secs: f64,
    /// Seconds to load one cached token's KV from a slower offload tier (local disk, a shared
    /// file system or object store). Default 2.5e-5, >= 0: the same 128 KiB per token from
    /// NVMe at ~5 GB/s; a networked store is slower still.
    pub storage_load_token_secs: f64,
}

impl Default for CostModelParams {
    fn default() -> Self {
        CostModelParams {
            prefill_token_secs: 0.0001,
            prefill_pair_secs: 3.3e-9,
            prefill_fixed_secs: 0.005,
            decode_interference_secs: 0.0003,
            cpu_load_token_secs: 5e-6,
            storage_load_token_secs: 2.5e-5,
        }
    }
}

impl CostModelParams {
    /// `P(u, c) = a*u + b*u*(c + u/2) + d`: prefill of `u` computed tokens after `c` cached, in
    /// seconds. Never negative for valid (non-negative) coefficients; grows with `u` and `c`.
    pub fn prefill_secs(&self, u: u32, c: u32) -> f64 {
        let (u, c) = (f64::from(u), f64::from(c));
        self.prefill_token_secs * u
            + self.prefill_pair_secs * u * (c + u / 2.0)
            + self.prefill_fixed_secs
    }

    /// `X`: seconds to load `cpu` cached tokens from the CPU tier and `storage` from a slower
    /// one (`cpu_load_token_secs * cpu + storage_load_token_secs * storage`). Never negative
    /// for valid coefficients; 0 when nothing is offloaded.
    pub fn tier_secs(&self, cpu: u32, storage: u32) -> f64 {
        self.cpu_load_token_secs * f64::from(cpu)
            + self.storage_load_token_secs * f64::from(storage)
    }
}

/// The `health` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// Time between probes. Default 1s, > 0.
    pub interval: Duration,
    /// Probe timeout. Default 500ms, > 0 and < `interval`.
    pub timeout: Duration,
    /// Consecutive failures before a replica is ejected. Default 3, >= 1.
    pub unhealthy_threshold: u32,
    /// First ejection period, doubled on each repeat. Default 5s, > 0.
    pub ejection_backoff: Duration,
    /// Longest ejection period. Default 300s, >= `ejection_backoff`.
    pub max_ejection_backoff: Duration,
    /// Most replicas of a model ejected at once, in percent. Default 50, 0..=100.
    pub max_ejection_percent: u32,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            unhealthy_threshold: 3,
            ejection_backoff: Duration::from_secs(5),
            max_ejection_backoff: Duration::from_secs(300),
            max_ejection_percent: 50,
        }
    }
}

/// The `retry` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// Attempts per request, the first included. Default 3, >= 1.
    pub max_attempts: u32,
    /// First backoff between attempts. Default 25ms.
    pub backoff: Duration,
    /// Longest backoff. Default 1s, >= `backoff`.
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 3,
            backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
        }
    }
}

/// The `load` section: scraping the engines' own load metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    /// Time between scrapes. Default 100ms, > 0.
    pub scrape_interval: Duration,
    /// Scrape timeout. Default 100ms, > 0.
    pub scrape_timeout: Duration,
    /// A report older than this is ignored. Default 250ms, > 0.
    pub max_age: Duration,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            scrape_interval: Duration::from_millis(100),
            scrape_timeout: Duration::from_millis(100),
            max_age: Duration::from_millis(250),
        }
    }
}

/// The `tokenizer` section: the tokenizer thread pool.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenizerPool {
    /// Tokenizer threads. Default `auto`.
    pub workers: Count,
    /// Longest a request waits for tokens before it is routed without them. Default 50ms.
    pub max_wait: Duration,
    /// Tokens kept in the shared tokenization cache (the tokenizer pool's); 0 disables it.
    /// Besides it, each data core keeps a private cache of up to `cache_tokens / 16` tokens per
    /// model for the bodies it tokenizes inline, so the request path takes no lock. Default
    /// 1,000,000.
    pub cache_tokens: u64,
    /// Bodies of at most this many bytes are tokenized on the data core itself instead of the
    /// pool (cheaper than the two thread hops for short prompts); 0 sends every body to the pool.
    /// Default 4096 (ADR 013: the pool hop costs ~80 µs at p50, about what 350 uncached tokens
    /// cost to tokenize; 4 KiB is at most ~1,000 tokens, and usually mostly cached).
    pub inline_max_bytes: u64,
}

impl Default for TokenizerPool {
    fn default() -> Self {
        TokenizerPool {
            workers: Count::Auto,
            max_wait: Duration::from_millis(50),
            cache_tokens: 1_000_000,
            inline_max_bytes: 4096,
        }
    }
}

/// The `index` section: the KV index.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    /// Index shards. Default `auto`.
    pub shards: Count,
    /// KV capacity assumed for a replica until it is known. Default 16384, >= 1.
    pub default_capacity_blocks: u64,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            shards: Count::Auto,
            default_capacity_blocks: 16384,
        }
    }
}

/// The `discovery` section.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Discovery {
    /// DNS groups: every address a name resolves to is a replica.
    pub dns: Vec<DnsGroup>,
}

/// One entry of `discovery.dns`.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsGroup {
    /// Unique group name; discovered replicas are named after it.
    pub name: String,
    /// URL whose host is resolved; every address becomes a replica on that port.
    pub url: UpstreamUrl,
    /// Canonical names of the models every replica of the group serves.
    pub models: Vec<String>,
    /// Time between resolutions. Default 2s, > 0.
    pub refresh: Duration,
    /// Every member's KV event publisher: `discover`, or endpoints whose host is `*` (each
    /// member's own address).
    pub kv_events: Option<KvEvents>,
}

impl DnsGroup {
    /// Default `refresh`.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(2);
}

/// The `observability` section. `otlp_endpoint` and `trace_sample_ratio` are refused until
/// traces are exported.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observability {
    /// Routing decision log; none when `None`.
    pub decision_log: Option<DecisionLog>,
    /// Shadow policy comparison log (JSON lines); none when `None`.
    pub shadow_log: Option<PathBuf>,
}

/// `observability.decision_log`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionLog {
    /// JSON-lines file.
    pub path: PathBuf,
    /// Fraction of decisions logged. Default 0.01, in [0, 1].
    pub sample_rate: f64,
}

impl DecisionLog {
    /// Default `sample_rate`.
    pub const DEFAULT_SAMPLE_RATE: f64 = 0.01;
}

/// The `logging` section.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Logging {
    /// Log prompt text (off by default: prompts may hold private data).
    pub log_prompts: bool,
}

#[cfg(test)]
mod cost_model_serde {
    use super::CostModelParams;

    /// What serde writes is what the config loader reads back, key for key, and serde reads the
    /// config's keys with the loader's defaults for the ones left out.
    #[test]
    fn serde_and_the_config_loader_agree_on_the_cost_model() {
        let p = CostModelParams {
            prefill_token_secs: 2.5e-4,
            prefill_pair_secs: 1.25e-8,
            prefill_fixed_secs: 0.0,
            decode_interference_secs: 0.002,
            cpu_load_token_secs: 1e-6,
            storage_load_token_secs: 0.0,
        };
        let yaml = serde_yaml::to_string(&p).unwrap();
        let indented: String = yaml.lines().map(|l| format!("    {l}\n")).collect();
        let text = format!(
            "models: [{{name: m}}]\nreplicas: [{{id: r, url: 'http://a:1', models: [m]}}]\n\
             routing:\n  cost_model:\n{indented}"
        );
        let config = crate::parse_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(config.routing.cost_model, p, "{text}");
        assert_eq!(serde_yaml::from_str::<CostModelParams>(&yaml).unwrap(), p);
        let partial: CostModelParams = serde_yaml::from_str("prefill_fixed_secs: 0.01").unwrap();
        assert_eq!(
            partial,
            CostModelParams {
                prefill_fixed_secs: 0.01,
                ..CostModelParams::default()
            }
        );
        assert!(serde_yaml::from_str::<CostModelParams>("prefill_secs: 1").is_err());
        let tiers = CostModelParams {
            cpu_load_token_secs: 2e-6,
            storage_load_token_secs: 3e-5,
            ..CostModelParams::default()
        };
        assert!((tiers.tier_secs(100, 10) - (2e-4 + 3e-4)).abs() < 1e-15);
        assert_eq!(
            tiers.tier_secs(0, 0),
            0.0,
            "nothing offloaded, nothing to load"
        );
        assert_eq!(p.prefill_secs(0, 0), 0.0);
        let d = CostModelParams::default();
        assert!(
            (d.prefill_secs(1000, 500) - (0.1 + 3.3e-9 * 1000.0 * 1000.0 + 0.005)).abs() < 1e-12
        );
    }
}
