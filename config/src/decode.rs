//! Decodes the YAML tree into a [`Config`], section by section, with the walker in `walk`.
//! Checks that need only one value (types, ranges, formats, unknown keys) happen here; checks
//! across fields live in `validate`.
//!
//! A value that fails is replaced by its default (or a placeholder) so decoding can go on, and
//! [`Incomplete`] records which cross-field checks would be misled by such placeholders.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use serde_yaml::Value;

use crate::error::Problem;
use crate::schema::{
    Config, CostModelParams, DecisionLog, Discovery, DnsGroup, Health, HotPrefix, Index,
    KvAwareWeights, KvEventEndpoints, KvEvents, Load, Logging, Model, Observability, PolicyKind,
    Replica, Retry, Routing, Server, TokenizerPool,
};
use crate::walk::{
    above_zero, above_zero_at_most_one, at_least_zero, describe, placeholder_url, positive,
    unknown_policy, zero_ok, zero_to_one, Decoder, Fields, Incomplete,
};

const TOP_KEYS: &[&str] = &[
    "server",
    "models",
    "replicas",
    "discovery",
    "routing",
    "health",
    "retry",
    "load",
    "tokenizer",
    "index",
    "observability",
    "logging",
];
const SERVER_KEYS: &[&str] = &[
    "listen",
    "admin_listen",
    "cores",
    "request_timeout",
    "first_byte_timeout",
    "stream_idle_timeout",
    "header_read_timeout",
    "shutdown_timeout",
    "max_body_bytes",
    "reload_interval",
    "connect_timeout",
    "pool_idle_timeout",
    "pool_max_idle",
];
const MODEL_KEYS: &[&str] = &[
    "name",
    "aliases",
    "policy",
    "split",
    "shadow",
    "tokenizer",
    "block_size",
    "chat_template",
    "chat_template_kwargs",
    "cost_model",
];
const REPLICA_KEYS: &[&str] = &[
    "id",
    "url",
    "models",
    "max_concurrency",
    "max_pending",
    "kv_capacity_blocks",
    "kv_events",
];
/// Keys of a `kv_events` mapping (vLLM's `--kv-events-config` names).
const KV_EVENTS_KEYS: &[&str] = &["endpoint", "replay_endpoint", "topic"];
const DISCOVERY_KEYS: &[&str] = &["dns"];
const DNS_KEYS: &[&str] = &["name", "url", "models", "refresh", "kv_events"];
const ROUTING_KEYS: &[&str] = &[
    "default_policy",
    "split",
    "shadow",
    "epsilon",
    "bounded_load_floor",
    "kappa",
    "spill_weight",
    "session_affinity",
    "seed",
    "cost_model",
    "prefix_hash",
    "kv_aware",
    "hot_prefix",
    "short_prompt_tokens",
];
/// The keys of a `cost_model` section (`routing.cost_model` or a model's): its coefficients,
/// each a number of seconds per unit; the decoder refuses any other key.
pub const COST_MODEL_KEYS: &[&str] = &[
    "prefill_token_secs",
    "prefill_pair_secs",
    "prefill_fixed_secs",
    "decode_interference_secs",
    "cpu_load_token_secs",
    "storage_load_token_secs",
];
const PREFIX_HASH_KEYS: &[&str] = &["blocks"];
const KV_AWARE_KEYS: &[&str] = &["cache_weight", "load_weight"];
const HOT_PREFIX_KEYS: &[&str] = &["blocks", "window", "utilization"];
const HEALTH_KEYS: &[&str] = &[
    "interval",
    "timeout",
    "unhealthy_threshold",
    "ejection_backoff",
    "max_ejection_backoff",
    "max_ejection_percent",
];
const RETRY_KEYS: &[&str] = &["max_attempts", "backoff", "max_backoff"];
const LOAD_KEYS: &[&str] = &["scrape_interval", "scrape_timeout", "max_age"];
const TOKENIZER_KEYS: &[&str] = &["workers", "max_wait", "cache_tokens", "inline_max_bytes"];
const INDEX_KEYS: &[&str] = &["shards", "default_capacity_blocks"];
const OBSERVABILITY_KEYS: &[&str] = &[
    "otlp_endpoint",
    "trace_sample_ratio",
    "decision_log",
    "shadow_log",
];
/// Keys of `observability` that are known but refused: traces are not exported yet.
const NOT_IMPLEMENTED_OBSERVABILITY: [&str; 2] = ["otlp_endpoint", "trace_sample_ratio"];
/// The refusal of a tracing key, naming what to do.
const NOT_IMPLEMENTED_TRACES: &str = "not implemented yet: traces are not exported; remove it";
const DECISION_LOG_KEYS: &[&str] = &["path", "sample_rate"];
const LOGGING_KEYS: &[&str] = &["log_prompts"];

/// The result of the walk: a config with placeholders where values failed, and the problems.
pub(crate) struct Decoded {
    pub config: Config,
    pub problems: Vec<Problem>,
    pub incomplete: Incomplete,
}

/// Decodes the whole document.
pub(crate) fn decode(root: &Value) -> Decoded {
    let mut d = Decoder::default();
    let config = d.config(root);
    Decoded {
        config,
        problems: d.problems,
        incomplete: d.incomplete,
    }
}

impl Decoder {
    fn config(&mut self, root: &Value) -> Config {
        let top = match root {
            Value::Mapping(_) | Value::Null => self.fields("", Some(root), TOP_KEYS),
            other => {
                self.problem(
                    "",
                    format!(
                        "expected a mapping of sections ({}) at the top level (got {})",
                        TOP_KEYS.join(", "),
                        describe(other)
                    ),
                );
                let mut top = self.fields("", None, TOP_KEYS);
                top.well_formed = false;
                top
            }
        };
        let server = self.server(&top);
        let models = self.models(&top);
        let replicas_value = top.get("replicas");
        let replicas = match replicas_value {
            Some(v) => self.replicas(&top.path("replicas"), v),
            None => Vec::new(),
        };
        let discovery = self.discovery(&top);
        if replicas.is_empty()
            && discovery.dns.is_empty()
            && top.well_formed
            && !self.incomplete.serving
        {
            let message = if replicas_value.is_none() {
                "required; list at least one replica (or add a discovery.dns group)"
            } else {
                "must list at least one replica when discovery.dns is empty"
            };
            self.problem("replicas", message);
        }
        Config {
            server,
            models,
            replicas,
            discovery,
            routing: self.routing(&top),
            health: self.health(&top),
            retry: self.retry(&top),
            load: self.load(&top),
            tokenizer: self.tokenizer(&top),
            index: self.index(&top),
            observability: self.observability(&top),
            logging: self.logging(&top),
        }
    }

    fn server(&mut self, top: &Fields<'_>) -> Server {
        let f = self.fields(&top.path("server"), top.get("server"), SERVER_KEYS);
        let def = Server::default();
        Server {
            listen: self.or(&f, "listen", def.listen, Self::socket_addr),
            admin_listen: self.or(&f, "admin_listen", def.admin_listen, Self::socket_addr),
            cores: self.or(&f, "cores", def.cores, Self::count),
            request_timeout: self.or(&f, "request_timeout", def.request_timeout, positive),
            first_byte_timeout: self.optional(&f, "first_byte_timeout", positive),
            stream_idle_timeout: self.or(
                &f,
                "stream_idle_timeout",
                def.stream_idle_timeout,
                positive,
            ),
            header_read_timeout: self.or(
                &f,
                "header_read_timeout",
                def.header_read_timeout,
                positive,
            ),
            shutdown_timeout: self.or(&f, "shutdown_timeout", def.shutdown_timeout, zero_ok),
            max_body_bytes: self.or(&f, "max_body_bytes", def.max_body_bytes, |d, p, v| {
                d.size(p, v, 1)
            }),
            reload_interval: self.or(&f, "reload_interval", def.reload_interval, zero_ok),
            connect_timeout: self.or(&f, "connect_timeout", def.connect_timeout, positive),
            pool_idle_timeout: self.or(&f, "pool_idle_timeout", def.pool_idle_timeout, positive),
            pool_max_idle: self.or(&f, "pool_max_idle", def.pool_max_idle, |d, p, v| {
                d.uint(p, v, 0, u32::MAX.into())
                    .and_then(|n| usize::try_from(n).ok())
            }),
        }
    }

    fn models(&mut self, top: &Fields<'_>) -> Vec<Model> {
        let path = top.path("models");
        let Some(v) = top.get("models") else {
            if top.well_formed {
                self.problem(&path, "required; list at least one model");
            }
            self.incomplete.model_names = true;
            return Vec::new();
        };
        let Some(items) = self.list(&path, v) else {
            self.incomplete.model_names = true;
            return Vec::new();
        };
        if items.is_empty() {
            self.problem(&path, "must list at least one model");
        }
        items
            .into_iter()
            .map(|(item_path, item)| self.model(&item_path, item))
            .collect()
    }

    fn model(&mut self, path: &str, v: &Value) -> Model {
        let f = self.fields(path, Some(v), MODEL_KEYS);
        let name = self.required(&f, "name", Self::string);
        if name.is_none() {
            self.incomplete.model_names = true;
        }
        Model {
            name: name.unwrap_or_default(),
            aliases: self.or(&f, "aliases", Vec::new(), |d, p, v| d.names(p, v, true)),
            policy: self.optional(&f, "policy", Self::policy),
            split: self.or(&f, "split", BTreeMap::new(), Self::split),
            shadow: self.or(&f, "shadow", Vec::new(), Self::shadow),
            tokenizer: self.optional(&f, "tokenizer", Self::string),
            block_size: self.optional(&f, "block_size", |d, p, v| d.u32_in(p, v, 1, u32::MAX)),
            chat_template: self.optional(&f, "chat_template", Self::string),
            chat_template_kwargs: self.or(
                &f,
                "chat_template_kwargs",
                BTreeMap::new(),
                |d, p, v| {
                    let entries = d.entries(p, v)?;
                    Some(
                        entries
                            .into_iter()
                            .map(|(k, _, v)| (k, v.clone()))
                            .collect(),
                    )
                },
            ),
            cost_model: f.get("cost_model").map(|_| self.cost_model(&f)),
        }
    }

    fn replicas(&mut self, path: &str, v: &Value) -> Vec<Replica> {
        let Some(items) = self.list(path, v) else {
            self.incomplete.serving = true;
            return Vec::new();
        };
        items
            .into_iter()
            .map(|(item_path, item)| self.replica(&item_path, item))
            .collect()
    }

    fn replica(&mut self, path: &str, v: &Value) -> Replica {
        let f = self.fields(path, Some(v), REPLICA_KEYS);
        let id = self.required(&f, "id", Self::id).unwrap_or_default();
        let url = self
            .required(&f, "url", Self::url)
            .unwrap_or_else(placeholder_url);
        let models = self.required(&f, "models", |d, p, v| d.names(p, v, false));
        if models.is_none() {
            self.incomplete.serving = true;
        }
        Replica {
            id,
            url,
            models: models.unwrap_or_default(),
            max_concurrency: self.or(
                &f,
                "max_concurrency",
                Replica::DEFAULT_MAX_CONCURRENCY,
                |d, p, v| d.u32_in(p, v, 1, u32::MAX),
            ),
            max_pending: self.or(
                &f,
                "max_pending",
                Replica::DEFAULT_MAX_PENDING,
                |d, p, v| d.u32_in(p, v, 0, u32::MAX),
            ),
            kv_capacity_blocks: self.optional(&f, "kv_capacity_blocks", |d, p, v| {
                d.uint(p, v, 1, u64::MAX)
            }),
            kv_events: self.optional(&f, "kv_events", Self::kv_events),
        }
    }

    /// `kv_events` of a replica or a DNS group: `discover`, or a mapping of endpoints. `None`
    /// (after reporting it) when any part fails, so `validate` does not check it further.
    fn kv_events(&mut self, path: &str, v: &Value) -> Option<KvEvents> {
        match v {
            Value::String(s) if s == "discover" => Some(KvEvents::Discover),
            Value::Mapping(_) => {
                let f = self.fields(path, Some(v), KV_EVENTS_KEYS);
                let endpoint = self.required(&f, "endpoint", Self::kv_endpoint);
                let replay_endpoint = f
                    .get("replay_endpoint")
                    .map(|v| self.kv_endpoint(&f.path("replay_endpoint"), v));
                let topic = f.get("topic").map(|v| self.topic(&f.path("topic"), v));
                Some(KvEvents::Endpoints(KvEventEndpoints {
                    endpoint: endpoint?,
                    replay_endpoint: replay_endpoint.map_or(Some(None), |r| r.map(Some))?,
                    topic: topic.unwrap_or(Some(String::new()))?,
                }))
            }
            other => {
                self.problem(
                    path,
                    format!(
                        "expected \"discover\" or a mapping with keys {} (got {})",
                        KV_EVENTS_KEYS.join(", "),
                        describe(other)
                    ),
                );
                None
            }
        }
    }

    /// A KV event endpoint, `tcp://HOST:PORT` (see [`kv_endpoint`]), kept as written.
    fn kv_endpoint(&mut self, path: &str, v: &Value) -> Option<String> {
        let text = self.string(path, v)?;
        match kv_endpoint(&text) {
            Ok(_) => Some(text),
            Err(why) => {
                self.problem(path, format!("{why} (got {text:?})"));
                None
            }
        }
    }

    /// A topic prefix: any string, empty included (every topic).
    fn topic(&mut self, path: &str, v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.problem(path, format!("expected a string (got {})", describe(other)));
                None
            }
        }
    }

    fn discovery(&mut self, top: &Fields<'_>) -> Discovery {
        let f = self.fields(&top.path("discovery"), top.get("discovery"), DISCOVERY_KEYS);
        if !f.well_formed {
            self.incomplete.serving = true;
        }
        let Some(v) = f.get("dns") else {
            return Discovery::default();
        };
        let path = f.path("dns");
        let Some(items) = self.list(&path, v) else {
            self.incomplete.serving = true;
            return Discovery::default();
        };
        Discovery {
            dns: items
                .into_iter()
                .map(|(item_path, item)| self.dns_group(&item_path, item))
                .collect(),
        }
    }

    fn dns_group(&mut self, path: &str, v: &Value) -> DnsGroup {
        let f = self.fields(path, Some(v), DNS_KEYS);
        let name = self.required(&f, "name", Self::id).unwrap_or_default();
        let url = self
            .required(&f, "url", Self::url)
            .unwrap_or_else(placeholder_url);
        let models = self.required(&f, "models", |d, p, v| d.names(p, v, false));
        if models.is_none() {
            self.incomplete.serving = true;
        }
        DnsGroup {
            name,
            url,
            models: models.unwrap_or_default(),
            refresh: self.or(&f, "refresh", DnsGroup::DEFAULT_REFRESH, positive),
            kv_events: self.optional(&f, "kv_events", Self::kv_events),
        }
    }

    fn routing(&mut self, top: &Fields<'_>) -> Routing {
        let f = self.fields(&top.path("routing"), top.get("routing"), ROUTING_KEYS);
        let def = Routing::default();
        Routing {
            default_policy: self.or(&f, "default_policy", def.default_policy, Self::policy),
            split: self.or(&f, "split", def.split, Self::split),
            shadow: self.or(&f, "shadow", def.shadow, Self::shadow),
            epsilon: self.or(&f, "epsilon", def.epsilon, |d, p, v| {
                d.float(p, v, above_zero)
            }),
            bounded_load_floor: self.or(
                &f,
                "bounded_load_floor",
                def.bounded_load_floor,
                |d, p, v| d.uint(p, v, 1, u64::from(u32::MAX)),
            ),
            kappa: self.or(&f, "kappa", def.kappa, |d, p, v| {
                d.float(p, v, above_zero_at_most_one)
            }),
            spill_weight: self.or(&f, "spill_weight", def.spill_weight, |d, p, v| {
                d.float(p, v, at_least_zero)
            }),
            session_affinity: self.or(&f, "session_affinity", def.session_affinity, Self::boolean),
            seed: self.optional(&f, "seed", |d, p, v| d.uint(p, v, 0, u64::MAX)),
            cost_model: self.cost_model(&f),
            prefix_hash_blocks: self.prefix_hash(&f),
            kv_aware: self.kv_aware(&f),
            hot_prefix: self.hot_prefix(&f),
            short_prompt_tokens: self.or(
                &f,
                "short_prompt_tokens",
                def.short_prompt_tokens,
                |d, p, v| d.uint(p, v, 0, u64::from(u32::MAX)).map(|n| n as u32),
            ),
        }
    }

    /// `routing.prefix_hash`: `blocks` >= 1.
    fn prefix_hash(&mut self, parent: &Fields<'_>) -> u32 {
        let f = self.fields(
            &parent.path("prefix_hash"),
            parent.get("prefix_hash"),
            PREFIX_HASH_KEYS,
        );
        self.or(
            &f,
            "blocks",
            Routing::default().prefix_hash_blocks,
            |d, p, v| d.uint(p, v, 1, 1 << 20).map(|n| n as u32),
        )
    }

    /// `routing.kv_aware`: both weights >= 0.
    fn kv_aware(&mut self, parent: &Fields<'_>) -> KvAwareWeights {
        let f = self.fields(
            &parent.path("kv_aware"),
            parent.get("kv_aware"),
            KV_AWARE_KEYS,
        );
        let def = KvAwareWeights::default();
        KvAwareWeights {
            cache_weight: self.or(&f, "cache_weight", def.cache_weight, |d, p, v| {
                d.float(p, v, at_least_zero)
            }),
            load_weight: self.or(&f, "load_weight", def.load_weight, |d, p, v| {
                d.float(p, v, at_least_zero)
            }),
        }
    }

    /// `routing.hot_prefix`: `blocks` >= 1, `window` > 0, `utilization` in (0, 1].
    fn hot_prefix(&mut self, parent: &Fields<'_>) -> HotPrefix {
        let f = self.fields(
            &parent.path("hot_prefix"),
            parent.get("hot_prefix"),
            HOT_PREFIX_KEYS,
        );
        let def = HotPrefix::default();
        HotPrefix {
            blocks: self.or(&f, "blocks", def.blocks, |d, p, v| {
                d.uint(p, v, 1, 1 << 20).map(|n| n as u32)
            }),
            window: self.or(&f, "window", def.window, positive),
            utilization: self.or(&f, "utilization", def.utilization, |d, p, v| {
                d.float(p, v, above_zero_at_most_one)
            }),
        }
    }

    /// A split (`routing.split` or `models[i].split`): policy name -> percent in 0..=100. A
    /// broken entry is reported at its own path and left out; `validate` then skips the sum
    /// check for this split (it looks for problems under `path`).
    fn split(&mut self, path: &str, v: &Value) -> Option<BTreeMap<PolicyKind, u32>> {
        let entries = self.entries(path, v)?;
        let mut split = BTreeMap::new();
        for (key, key_path, value) in entries {
            let policy = PolicyKind::from_name(&key);
            if policy.is_none() {
                self.problem(&key_path, unknown_policy(&format!("{key:?}")));
            }
            let percent = self.u32_in(&key_path, value, 0, 100);
            if let (Some(policy), Some(percent)) = (policy, percent) {
                split.insert(policy, percent);
            }
        }
        Some(split)
    }

    /// A shadow list (`routing.shadow` or `models[i].shadow`): policy names; unknown ones are
    /// reported and left out.
    fn shadow(&mut self, path: &str, v: &Value) -> Option<Vec<PolicyKind>> {
        let items = self.list(path, v)?;
        Some(
            items
                .into_iter()
                .filter_map(|(item_path, item)| self.policy(&item_path, item))
                .collect(),
        )
    }

    /// `cost_model` under `routing` or a model (`parent`): each coefficient >= 0, defaults for
    /// the keys left out.
    fn cost_model(&mut self, parent: &Fields<'_>) -> CostModelParams {
        let f = self.fields(
            &parent.path("cost_model"),
            parent.get("cost_model"),
            COST_MODEL_KEYS,
        );
        let def = CostModelParams::default();
        let coefficient = |d: &mut Self, key: &str, default: f64| {
            d.or(&f, key, default, |d, p, v| d.float(p, v, at_least_zero))
        };
        CostModelParams {
            prefill_token_secs: coefficient(self, "prefill_token_secs", def.prefill_token_secs),
            prefill_pair_secs: coefficient(self, "prefill_pair_secs", def.prefill_pair_secs),
            prefill_fixed_secs: coefficient(self, "prefill_fixed_secs", def.prefill_fixed_secs),
            decode_interference_secs: coefficient(
                self,
                "decode_interference_secs",
                def.decode_interference_secs,
            ),
            cpu_load_token_secs: coefficient(self, "cpu_load_token_secs", def.cpu_load_token_secs),
            storage_load_token_secs: coefficient(
                self,
                "storage_load_token_secs",
                def.storage_load_token_secs,
            ),
        }
    }

    fn health(&mut self, top: &Fields<'_>) -> Health {
        let f = self.fields(&top.path("health"), top.get("health"), HEALTH_KEYS);
        let def = Health::default();
        Health {
            interval: self.or(&f, "interval", def.interval, positive),
            timeout: self.or(&f, "timeout", def.timeout, positive),
            unhealthy_threshold: self.or(
                &f,
                "unhealthy_threshold",
                def.unhealthy_threshold,
                |d, p, v| d.u32_in(p, v, 1, u32::MAX),
            ),
            ejection_backoff: self.or(&f, "ejection_backoff", def.ejection_backoff, positive),
            max_ejection_backoff: self.or(
                &f,
                "max_ejection_backoff",
                def.max_ejection_backoff,
                positive,
            ),
            max_ejection_percent: self.or(
                &f,
                "max_ejection_percent",
                def.max_ejection_percent,
                |d, p, v| d.u32_in(p, v, 0, 100),
            ),
        }
    }

    fn retry(&mut self, top: &Fields<'_>) -> Retry {
        let f = self.fields(&top.path("retry"), top.get("retry"), RETRY_KEYS);
        let def = Retry::default();
        Retry {
            max_attempts: self.or(&f, "max_attempts", def.max_attempts, |d, p, v| {
                d.u32_in(p, v, 1, u32::MAX)
            }),
            backoff: self.or(&f, "backoff", def.backoff, zero_ok),
            max_backoff: self.or(&f, "max_backoff", def.max_backoff, zero_ok),
        }
    }

    fn load(&mut self, top: &Fields<'_>) -> Load {
        let f = self.fields(&top.path("load"), top.get("load"), LOAD_KEYS);
        let def = Load::default();
        Load {
            scrape_interval: self.or(&f, "scrape_interval", def.scrape_interval, positive),
            scrape_timeout: self.or(&f, "scrape_timeout", def.scrape_timeout, positive),
            max_age: self.or(&f, "max_age", def.max_age, positive),
        }
    }

    fn tokenizer(&mut self, top: &Fields<'_>) -> TokenizerPool {
        let f = self.fields(&top.path("tokenizer"), top.get("tokenizer"), TOKENIZER_KEYS);
        let def = TokenizerPool::default();
        TokenizerPool {
            workers: self.or(&f, "workers", def.workers, Self::count),
            max_wait: self.or(&f, "max_wait", def.max_wait, zero_ok),
            cache_tokens: self.or(&f, "cache_tokens", def.cache_tokens, |d, p, v| {
                d.uint(p, v, 0, u64::MAX)
            }),
            inline_max_bytes: self.or(&f, "inline_max_bytes", def.inline_max_bytes, |d, p, v| {
                d.uint(p, v, 0, u64::MAX)
            }),
        }
    }

    fn index(&mut self, top: &Fields<'_>) -> Index {
        let f = self.fields(&top.path("index"), top.get("index"), INDEX_KEYS);
        let def = Index::default();
        Index {
            shards: self.or(&f, "shards", def.shards, Self::count),
            default_capacity_blocks: self.or(
                &f,
                "default_capacity_blocks",
                def.default_capacity_blocks,
                |d, p, v| d.uint(p, v, 1, u64::MAX),
            ),
        }
    }

    fn observability(&mut self, top: &Fields<'_>) -> Observability {
        let f = self.fields(
            &top.path("observability"),
            top.get("observability"),
            OBSERVABILITY_KEYS,
        );
        for key in NOT_IMPLEMENTED_OBSERVABILITY {
            if f.get(key).is_some() {
                self.problem(&f.path(key), NOT_IMPLEMENTED_TRACES);
            }
        }
        Observability {
            decision_log: self.optional(&f, "decision_log", Self::decision_log),
            shadow_log: self.optional(&f, "shadow_log", |d, p, v| {
                d.string(p, v).map(PathBuf::from)
            }),
        }
    }

    fn decision_log(&mut self, path: &str, v: &Value) -> Option<DecisionLog> {
        let f = self.fields(path, Some(v), DECISION_LOG_KEYS);
        let log_path = self.required(&f, "path", Self::string);
        let sample_rate = self.or(
            &f,
            "sample_rate",
            DecisionLog::DEFAULT_SAMPLE_RATE,
            |d, p, v| d.float(p, v, zero_to_one),
        );
        Some(DecisionLog {
            path: PathBuf::from(log_path?),
            sample_rate,
        })
    }

    fn logging(&mut self, top: &Fields<'_>) -> Logging {
        let f = self.fields(&top.path("logging"), top.get("logging"), LOGGING_KEYS);
        Logging {
            log_prompts: self.or(&f, "log_prompts", false, Self::boolean),
        }
    }
}

/// A checked KV event endpoint: `tcp://HOST:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KvEndpoint<'a> {
    /// `*` (the replica's own host), a host name, or an IP address (IPv6 without brackets).
    pub host: &'a str,
    /// 1 to 65535.
    pub port: u16,
}

impl KvEndpoint<'_> {
    /// The same socket: host (case-insensitive) and port equal, however written.
    pub(crate) fn same_socket(&self, other: &KvEndpoint<'_>) -> bool {
        self.port == other.port && self.host.eq_ignore_ascii_case(other.host)
    }
}

/// Checks a KV event endpoint, `tcp://HOST:PORT`, where HOST is `*` (the replica's own host, as
/// vLLM binds it), a host name, an IPv4 address or a bracketed IPv6 address. The error says what
/// is wrong and what to write instead; the caller appends the text it was given.
pub(crate) fn kv_endpoint(text: &str) -> Result<KvEndpoint<'_>, String> {
    let Some(rest) = text.strip_prefix("tcp://") else {
        return Err(match text.split_once("://") {
            Some((scheme @ ("ipc" | "inproc"), _)) => format!(
                "only tcp:// endpoints can be subscribed to; an {scheme}:// endpoint cannot be reached from another host"
            ),
            Some(_) => "only tcp:// endpoints can be subscribed to".to_string(),
            None => "expected tcp://HOST:PORT, like tcp://10.0.0.10:5557".to_string(),
        });
    };
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err("IPv6 address is missing its closing ']'".to_string());
        };
        let Ok(ip) = host.parse::<Ipv6Addr>() else {
            return Err(format!("{host:?} is not an IPv6 address"));
        };
        if ip.is_unspecified() {
            return Err(bind_all(&format!("[{host}]")));
        }
        let port = match after.strip_prefix(':') {
            Some(port) => port,
            None if after.is_empty() => return Err(missing_port()),
            None => return Err("unexpected text after the IPv6 address".to_string()),
        };
        (host, port)
    } else {
        if rest.matches(':').count() > 1 {
            return Err("IPv6 addresses go in brackets, like tcp://[::1]:5557".to_string());
        }
        let Some((host, port)) = rest.split_once(':') else {
            return Err(missing_port());
        };
        if host.is_empty() {
            return Err("missing host; write * for the replica's own host".to_string());
        }
        if host != "*" {
            if let Some(bad) = host
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
            {
                return Err(format!(
                    "host {host:?} contains {bad:?}; expected *, a host name or an IP address"
                ));
            }
            if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                match host.parse::<Ipv4Addr>() {
                    Ok(ip) if ip.is_unspecified() => return Err(bind_all(host)),
                    Ok(_) => {}
                    Err(_) => return Err(format!("{host:?} is not an IPv4 address")),
                }
            }
        }
        (host, port)
    };
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    let port = match port.parse::<u16>() {
        Ok(0) if digits => {
            return Err(
                "port 0 has the engine pick a free port, which only the engine knows; \
                 use kv_events: discover to read the ports it bound"
                    .to_string(),
            )
        }
        Ok(n) if digits => n,
        _ => return Err(format!("invalid port {port:?}; expected 1 to 65535")),
    };
    Ok(KvEndpoint { host, port })
}

fn missing_port() -> String {
    "missing the port, like tcp://10.0.0.10:5557".to_string()
}

/// The refusal of a bind-all host (`0.0.0.0`, `[::]`).
fn bind_all(host: &str) -> String {
    format!(
        "{host} is a bind-all address, not one to connect to; write * (the replica's own host) or the engine's host"
    )
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use crate::testing::{errs, minimal_with, ok, one_err, MINIMAL};
    use crate::{CostModelParams, Count, KvEventEndpoints, KvEvents, PolicyKind};

    /// One model with a tokenizer (so `kv_events` is usable) and one replica with `kv_events`
    /// written as `kv` (flow YAML).
    fn with_kv_events(kv: &str) -> String {
        format!(
            "models: [{{name: m, tokenizer: builtin:sim}}]\nreplicas: [{{id: r, url: 'http://10.0.0.10:8000', models: [m], kv_events: {kv}}}]\n"
        )
    }

    fn endpoints(endpoint: &str, replay: Option<&str>, topic: &str) -> Option<KvEvents> {
        Some(KvEvents::Endpoints(KvEventEndpoints {
            endpoint: endpoint.to_string(),
            replay_endpoint: replay.map(str::to_string),
            topic: topic.to_string(),
        }))
    }

    #[test]
    fn unknown_keys_are_reported_at_every_depth() {
        let text = "\
sever: {}
server: {listn: 1}
models:
  - name: m
    polcy: p2c
replicas:
  - id: r0
    url: http://a:1
    models: [m]
    weight: 3
discovery:
  dns:
    - {name: g, url: 'http://b:1', models: [m], ttl: 5s}
  consul: {}
routing:
  cost_model: {alpha: 1}
observability:
  decision_log: {path: /tmp/d, rate: 1}
";
        let paths: Vec<String> = errs(text)
            .iter()
            .map(|e| e.split(": ").next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "sever",
                "server.listn",
                "models[0].polcy",
                "replicas[0].weight",
                "discovery.consul",
                "discovery.dns[0].ttl",
                "routing.cost_model.alpha",
                "observability.decision_log.rate",
            ]
        );
        assert_eq!(
            one_err(&minimal_with("server: {listn: 1}\n")),
            "server.listn: unknown key; expected one of: listen, admin_listen, cores, request_timeout, first_byte_timeout, stream_idle_timeout, header_read_timeout, shutdown_timeout, max_body_bytes, reload_interval, connect_timeout, pool_idle_timeout, pool_max_idle"
        );
        assert_eq!(
            one_err(&minimal_with("logging: {log_prompt: true}\n")),
            "logging.log_prompt: unknown key; expected one of: log_prompts"
        );
    }

    #[test]
    fn odd_keys_are_quoted_in_paths() {
        assert!(one_err(&minimal_with("retry: {\"max attempts\": 1}\n"))
            .starts_with("retry[\"max attempts\"]: unknown key"));
        assert!(one_err(&minimal_with("retry: {1: 1}\n")).starts_with("retry.1: unknown key"));
        assert!(
            one_err(&minimal_with("routing: {split: {\"p 2c\": 100}}\n"))
                .starts_with("routing.split[\"p 2c\"]: unknown policy \"p 2c\"")
        );
    }

    #[test]
    fn absent_empty_and_null_sections_and_fields_take_defaults() {
        let defaults = ok(MINIMAL);
        for extra in [
            "server:\n",
            "server: {}\n",
            "server: {listen: null, cores: ~}\n",
            "routing: {cost_model: {}}\nhealth:\nretry: {}\nobservability: {decision_log: null}\n",
        ] {
            assert_eq!(ok(&minimal_with(extra)), defaults, "{extra:?}");
        }
    }

    #[test]
    fn a_section_of_the_wrong_type_is_one_problem() {
        assert_eq!(
            one_err(&minimal_with("health: 5\n")),
            "health: expected a mapping with keys interval, timeout, unhealthy_threshold, ejection_backoff, max_ejection_backoff, max_ejection_percent (got 5)"
        );
        assert_eq!(
            one_err("models: [{name: m}]\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\ndiscovery: {dns: {}}\n"),
            "discovery.dns: expected a list (got a mapping)"
        );
        assert_eq!(
            one_err("- a\n- b\n"),
            "expected a mapping of sections (server, models, replicas, discovery, routing, health, retry, load, tokenizer, index, observability, logging) at the top level (got a list)"
        );
        // A replica that is not a mapping is reported once, without "required" for its keys.
        assert_eq!(
            one_err("models: [{name: m}]\nreplicas: [r0]\n"),
            "replicas[0]: expected a mapping with keys id, url, models, max_concurrency, max_pending, kv_capacity_blocks, kv_events (got \"r0\")"
        );
    }

    #[test]
    fn durations_in_every_form_and_zero_only_where_allowed() {
        let config = ok(&minimal_with(
            "server: {request_timeout: 90, header_read_timeout: \"15\", shutdown_timeout: 0, reload_interval: \"0\", connect_timeout: 1.5s, pool_idle_timeout: 250us}\nretry: {backoff: 0, max_backoff: 2m}\ntokenizer: {max_wait: 0ms}\nhealth: {interval: 1h, timeout: 500ms}\n",
        ));
        assert_eq!(config.server.request_timeout, Duration::from_secs(90));
        assert_eq!(config.server.header_read_timeout, Duration::from_secs(15));
        assert_eq!(config.server.shutdown_timeout, Duration::ZERO);
        assert_eq!(config.server.reload_interval, Duration::ZERO);
        assert_eq!(config.server.connect_timeout, Duration::from_millis(1500));
        assert_eq!(config.server.pool_idle_timeout, Duration::from_micros(250));
        assert_eq!(config.retry.backoff, Duration::ZERO);
        assert_eq!(config.retry.max_backoff, Duration::from_secs(120));
        assert_eq!(config.tokenizer.max_wait, Duration::ZERO);
        assert_eq!(config.health.interval, Duration::from_secs(3600));

        assert_eq!(
            errs(&minimal_with(
                "server: {request_timeout: 0, header_read_timeout: 0s, connect_timeout: \"0\", pool_idle_timeout: 0ms}\nload: {scrape_interval: 0, scrape_timeout: 0, max_age: 0}\nhealth: {interval: 0}\n"
            )),
            [
                "server.request_timeout: must be greater than 0 (got 0)",
                "server.header_read_timeout: must be greater than 0 (got \"0s\")",
                "server.connect_timeout: must be greater than 0 (got \"0\")",
                "server.pool_idle_timeout: must be greater than 0 (got \"0ms\")",
                "health.interval: must be greater than 0 (got 0)",
                "load.scrape_interval: must be greater than 0 (got 0)",
                "load.scrape_timeout: must be greater than 0 (got 0)",
                "load.max_age: must be greater than 0 (got 0)",
            ]
        );
        assert_eq!(
            errs(&minimal_with(
                "server: {request_timeout: -5, shutdown_timeout: 1.5, reload_interval: [1], header_read_timeout: five}\n"
            )),
            [
                "server.request_timeout: must not be negative (got -5)",
                "server.header_read_timeout: expected a duration like \"500ms\", \"2s\" or \"1m\" (got \"five\")",
                "server.shutdown_timeout: a bare number means whole seconds; add a unit, like \"1.5s\"",
                "server.reload_interval: expected a duration like \"500ms\", \"2s\" or \"1m\" (got a list)",
            ]
        );
        assert_eq!(
            one_err(&minimal_with("retry: {backoff: 5sec}\n")),
            "retry.backoff: unknown duration unit \"sec\" in \"5sec\"; expected one of: ns, us, ms, s, m, h"
        );
    }

    #[test]
    fn sizes_accept_bytes_and_units() {
        for (text, bytes) in [
            ("1048576", 1 << 20),
            ("\"32MiB\"", 32 << 20),
            ("64KiB", 64 << 10),
            ("1GiB", 1 << 30),
            ("100KB", 100_000),
            ("5MB", 5_000_000),
        ] {
            let config = ok(&minimal_with(&format!(
                "server: {{max_body_bytes: {text}}}\n"
            )));
            assert_eq!(config.server.max_body_bytes, bytes, "{text}");
        }
        assert_eq!(
            one_err(&minimal_with("server: {max_body_bytes: 0}\n")),
            "server.max_body_bytes: must be at least 1 bytes (got 0)"
        );
        assert_eq!(
            one_err(&minimal_with("server: {max_body_bytes: 32M}\n")),
            "server.max_body_bytes: unknown size unit \"M\" in \"32M\"; expected one of: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
        );
        assert!(one_err(&minimal_with("server: {max_body_bytes: -1}\n"))
            .starts_with("server.max_body_bytes: expected a whole number of bytes"));
    }

    #[test]
    fn counts_addresses_and_scalars() {
        let config = ok(&minimal_with(
            "server: {cores: 6, listen: \"[::]:8000\", admin_listen: 127.0.0.1:9999, pool_max_idle: 0}\ntokenizer: {workers: auto, cache_tokens: 0}\nindex: {shards: 2}\nrouting: {seed: 7, session_affinity: true, kappa: 1, spill_weight: 0.5, epsilon: 0.5, bounded_load_floor: 1}\n",
        ));
        assert_eq!(config.server.cores, Count::Fixed(6));
        assert_eq!(
            config.server.listen,
            "[::]:8000".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(config.server.pool_max_idle, 0);
        assert_eq!(config.tokenizer.workers, Count::Auto);
        assert_eq!(config.tokenizer.cache_tokens, 0);
        assert_eq!(config.index.shards, Count::Fixed(2));
        assert_eq!(config.routing.seed, Some(7));
        assert_eq!(config.routing.kappa, 1.0);
        assert_eq!(config.routing.spill_weight, 0.5);
        assert_eq!(ok(&minimal_with("")).routing.spill_weight, 0.25);
        assert_eq!(config.routing.epsilon, 0.5);
        assert_eq!(config.routing.bounded_load_floor, 1);
        assert_eq!(
            ok(&minimal_with("routing: {bounded_load_floor: 64}\n"))
                .routing
                .bounded_load_floor,
            64
        );
        assert_eq!(ok(&minimal_with("")).routing.bounded_load_floor, 8);

        assert_eq!(
            errs(&minimal_with(
                "server: {cores: 0, listen: localhost:8080, admin_listen: 9090}\ntokenizer: {workers: four}\nrouting: {session_affinity: yes, epsilon: 0, kappa: 1.5, spill_weight: -0.5, seed: -1}\nobservability: {trace_sample_ratio: 1.1, otlp_endpoint: localhost:4318}\nhealth: {max_ejection_percent: 101, unhealthy_threshold: 0}\nretry: {max_attempts: 0}\n"
            )),
            [
                "server.listen: expected an IP address and port like 0.0.0.0:8080 or [::]:8080; host names are not resolved (got \"localhost:8080\")",
                "server.admin_listen: expected an IP address and port like 0.0.0.0:8080 or [::]:8080; host names are not resolved (got 9090)",
                "server.cores: expected auto or a whole number >= 1 (got 0)",
                "routing.epsilon: must be greater than 0 (got 0)",
                "routing.kappa: must be greater than 0 and at most 1 (got 1.5)",
                "routing.spill_weight: must not be negative (got -0.5)",
                "routing.session_affinity: expected true or false (got \"yes\")",
                "routing.seed: must be at least 0 (got -1)",
                "health.unhealthy_threshold: must be at least 1 (got 0)",
                "health.max_ejection_percent: must be at most 100 (got 101)",
                "retry.max_attempts: must be at least 1 (got 0)",
                "tokenizer.workers: expected auto or a whole number >= 1 (got \"four\")",
                "observability.otlp_endpoint: not implemented yet: traces are not exported; remove it",
                "observability.trace_sample_ratio: not implemented yet: traces are not exported; remove it",
            ]
        );
        assert_eq!(
            one_err(&minimal_with(
                "routing: {cost_model: {prefill_pair_secs: -1e-9}}\n"
            )),
            "routing.cost_model.prefill_pair_secs: must not be negative (got -1e-9)"
        );
        assert_eq!(
            one_err(&minimal_with("routing: {epsilon: .nan}\n")),
            "routing.epsilon: expected a number (got .nan)"
        );
        assert_eq!(
            one_err(&minimal_with("routing: {bounded_load_floor: 0}\n")),
            "routing.bounded_load_floor: must be at least 1 (got 0)"
        );
        assert_eq!(
            one_err(&minimal_with("routing: {bounded_load_floor: -3}\n")),
            "routing.bounded_load_floor: must be at least 1 (got -3)"
        );
        assert_eq!(
            one_err(&minimal_with("routing: {bounded_load_floor: 2.5}\n")),
            "routing.bounded_load_floor: expected a whole number (got 2.5)"
        );
        assert_eq!(
            one_err(&minimal_with("routing: {bounded_load_floor: eight}\n")),
            "routing.bounded_load_floor: expected a whole number (got \"eight\")"
        );
    }

    #[test]
    fn models_are_required_and_checked() {
        assert_eq!(
            one_err("replicas: [{id: r, url: 'http://a:1', models: [m]}]\n"),
            "models: required; list at least one model"
        );
        assert_eq!(
            one_err("models: m\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\n"),
            "models: expected a list (got \"m\")"
        );
        assert_eq!(
            errs("models: [{aliases: [x, \"\"], block_size: 0, tokenizer: 5, chat_template_kwargs: [1]}]\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\n"),
            [
                "models[0].name: required",
                "models[0].aliases[1]: must not be empty",
                "models[0].tokenizer: expected a string (got 5)",
                "models[0].block_size: must be at least 1 (got 0)",
                "models[0].chat_template_kwargs: expected a mapping (got a list)",
            ]
        );
        let config = ok("models:\n  - name: m\n    policy: round_robin\n    chat_template: /t.jinja\n    chat_template_kwargs: {enable_thinking: false, n: [1, 2]}\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\n");
        let model = &config.models[0];
        assert_eq!(model.policy, Some(PolicyKind::RoundRobin));
        assert_eq!(model.chat_template.as_deref(), Some("/t.jinja"));
        assert_eq!(model.chat_template_kwargs.len(), 2);
    }

    #[test]
    fn replica_fields_are_required_and_checked() {
        assert_eq!(
            errs("models: [{name: m}]\nreplicas:\n  - {}\n  - {id: 'gpu 0', url: 'https://a:1', models: []}\n  - {id: r2, url: 'http://a:2/v1', models: [m], max_concurrency: 0, max_pending: -1, kv_capacity_blocks: 0}\n"),
            [
                "replicas[0].id: required",
                "replicas[0].url: required",
                "replicas[0].models: required",
                "replicas[1].id: must use only letters, digits, '.', '_' and '-' (got \"gpu 0\")",
                "replicas[1].url: https is not supported yet; put a TLS-terminating proxy in front",
                "replicas[1].models: must list at least one model",
                "replicas[2].url: must not have a path (got \"/v1\" in \"http://a:2/v1\"); give the engine's base URL, like http://10.0.0.10:8000",
                "replicas[2].max_concurrency: must be at least 1 (got 0)",
                "replicas[2].max_pending: must be at least 0 (got -1)",
                "replicas[2].kv_capacity_blocks: must be at least 1 (got 0)",
            ]
        );
        assert_eq!(
            one_err("models: [{name: m}]\nreplicas: [{id: r0, url: 'ftp://x', models: [m]}]\n"),
            "replicas[0].url: must start with http:// (got \"ftp://x\")"
        );
        let config = ok("models: [{name: m}]\nreplicas: [{id: v6, url: 'http://[::1]:8000/', models: [m], kv_capacity_blocks: 100}]\n");
        assert_eq!(config.replicas[0].url.host, "::1");
        assert_eq!(config.replicas[0].url.authority(), "[::1]:8000");
        assert_eq!(config.replicas[0].kv_capacity_blocks, Some(100));
    }

    #[test]
    fn kv_events_decodes_discover_and_endpoints() {
        let kv = |text: &str| ok(&with_kv_events(text)).replicas[0].kv_events.clone();
        assert_eq!(ok(MINIMAL).replicas[0].kv_events, None);
        assert_eq!(kv("null"), None);
        assert_eq!(kv("discover"), Some(KvEvents::Discover));
        assert_eq!(
            kv("{endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://*:5558', topic: kv}"),
            endpoints("tcp://*:5557", Some("tcp://*:5558"), "kv")
        );
        // `replay_endpoint` and `topic` are optional; null is left out.
        assert_eq!(
            kv("{endpoint: 'tcp://10.0.0.10:5557'}"),
            endpoints("tcp://10.0.0.10:5557", None, "")
        );
        assert_eq!(
            kv("{endpoint: 'tcp://engine-0.local:5557', replay_endpoint: null, topic: null}"),
            endpoints("tcp://engine-0.local:5557", None, "")
        );
        assert_eq!(
            kv("{endpoint: 'tcp://[::1]:5557', replay_endpoint: 'tcp://[fe80::1]:65535', topic: ''}"),
            endpoints("tcp://[::1]:5557", Some("tcp://[fe80::1]:65535"), "")
        );
        // Block YAML, as in the example file.
        let config = ok("\
models: [{name: m, tokenizer: builtin:sim}]
replicas:
  - id: r
    url: http://10.0.0.10:8000
    models: [m]
    kv_events:
      endpoint: tcp://*:5557
      replay_endpoint: tcp://*:5558
      topic: \"\"
discovery:
  dns:
    - {name: pool, url: 'http://pool.svc:8000', models: [m], kv_events: discover}
    - {name: fixed, url: 'http://fixed.svc:8000', models: [m], kv_events: {endpoint: 'tcp://*:5557'}}
    - {name: none, url: 'http://none.svc:8000', models: [m]}
");
        assert_eq!(
            config.replicas[0].kv_events,
            endpoints("tcp://*:5557", Some("tcp://*:5558"), "")
        );
        // The JSON document form reads the same.
        let text = with_kv_events("{endpoint: 'tcp://*:5557', topic: ''}");
        let doc = crate::document_of_yaml(&text).unwrap();
        assert_eq!(crate::parse_document(&doc).unwrap(), ok(&text));
        let groups: Vec<_> = config
            .discovery
            .dns
            .iter()
            .map(|g| g.kv_events.clone())
            .collect();
        assert_eq!(
            groups,
            [
                Some(KvEvents::Discover),
                endpoints("tcp://*:5557", None, ""),
                None
            ]
        );
    }

    #[test]
    fn kv_events_of_another_shape_is_refused() {
        for (text, got) in [
            ("5", "5"),
            ("Discover", "\"Discover\""),
            ("'tcp://*:5557'", "\"tcp://*:5557\""),
            ("[discover]", "a list"),
            ("true", "true"),
        ] {
            assert_eq!(
                one_err(&with_kv_events(text)),
                format!("replicas[0].kv_events: expected \"discover\" or a mapping with keys endpoint, replay_endpoint, topic (got {got})"),
                "{text}"
            );
        }
        assert_eq!(
            one_err("models: [{name: m, tokenizer: builtin:sim}]\ndiscovery: {dns: [{name: g, url: 'http://g:1', models: [m], kv_events: 5}]}\n"),
            "discovery.dns[0].kv_events: expected \"discover\" or a mapping with keys endpoint, replay_endpoint, topic (got 5)"
        );
        assert_eq!(
            errs(&with_kv_events("{replay: 'tcp://*:5558', topic: 5}")),
            [
                "replicas[0].kv_events.replay: unknown key; expected one of: endpoint, replay_endpoint, topic",
                "replicas[0].kv_events.endpoint: required",
                "replicas[0].kv_events.topic: expected a string (got 5)",
            ]
        );
        assert_eq!(
            one_err(&with_kv_events("{}")),
            "replicas[0].kv_events.endpoint: required"
        );
        assert_eq!(
            errs(&with_kv_events("{endpoint: 5557, replay_endpoint: ''}")),
            [
                "replicas[0].kv_events.endpoint: expected a string (got 5557)",
                "replicas[0].kv_events.replay_endpoint: must not be empty",
            ]
        );
    }

    #[test]
    fn kv_event_endpoints_must_be_tcp_host_port() {
        let err = |endpoint: &str| {
            one_err(&with_kv_events(&format!(
                "{{endpoint: 'tcp://*:5557', replay_endpoint: '{endpoint}'}}"
            )))
        };
        for (endpoint, why) in [
            ("ipc:///tmp/kv", "only tcp:// endpoints can be subscribed to; an ipc:// endpoint cannot be reached from another host"),
            ("inproc://kv", "only tcp:// endpoints can be subscribed to; an inproc:// endpoint cannot be reached from another host"),
            ("udp://a:5557", "only tcp:// endpoints can be subscribed to"),
            ("TCP://a:5557", "only tcp:// endpoints can be subscribed to"),
            ("10.0.0.10:5557", "expected tcp://HOST:PORT, like tcp://10.0.0.10:5557"),
            ("tcp://:5557", "missing host; write * for the replica's own host"),
            ("tcp://engine", "missing the port, like tcp://10.0.0.10:5557"),
            ("tcp://[::1]", "missing the port, like tcp://10.0.0.10:5557"),
            ("tcp://engine:", "invalid port \"\"; expected 1 to 65535"),
            ("tcp://engine:70000", "invalid port \"70000\"; expected 1 to 65535"),
            ("tcp://engine:+80", "invalid port \"+80\"; expected 1 to 65535"),
            ("tcp://engine:5557/x", "invalid port \"5557/x\"; expected 1 to 65535"),
            ("tcp://*:0", "port 0 has the engine pick a free port, which only the engine knows; use kv_events: discover to read the ports it bound"),
            ("tcp://0.0.0.0:5557", "0.0.0.0 is a bind-all address, not one to connect to; write * (the replica's own host) or the engine's host"),
            ("tcp://[::]:5557", "[::] is a bind-all address, not one to connect to; write * (the replica's own host) or the engine's host"),
            ("tcp://::1:5557", "IPv6 addresses go in brackets, like tcp://[::1]:5557"),
            ("tcp://[::1:5557", "IPv6 address is missing its closing ']'"),
            ("tcp://[zz]:5557", "\"zz\" is not an IPv6 address"),
            ("tcp://[::1]x5557", "unexpected text after the IPv6 address"),
            ("tcp://10.0.0.300:5557", "\"10.0.0.300\" is not an IPv4 address"),
            ("tcp://en gine:5557", "host \"en gine\" contains ' '; expected *, a host name or an IP address"),
            ("tcp://**:5557", "host \"**\" contains '*'; expected *, a host name or an IP address"),
        ] {
            assert_eq!(
                err(endpoint),
                format!("replicas[0].kv_events.replay_endpoint: {why} (got {endpoint:?})"),
            );
        }
        // The same checks apply to `endpoint`, at its own path.
        assert_eq!(
            one_err(&with_kv_events("{endpoint: 'ipc:///tmp/kv'}")),
            "replicas[0].kv_events.endpoint: only tcp:// endpoints can be subscribed to; an ipc:// endpoint cannot be reached from another host (got \"ipc:///tmp/kv\")"
        );
        assert_eq!(
            one_err(&with_kv_events("{endpoint: 'tcp://*:0'}")),
            "replicas[0].kv_events.endpoint: port 0 has the engine pick a free port, which only the engine knows; use kv_events: discover to read the ports it bound (got \"tcp://*:0\")"
        );
        // Both endpoints and the topic are reported together.
        assert_eq!(
            errs(&with_kv_events(
                "{endpoint: 'tcp://0.0.0.0:1', replay_endpoint: 'ipc://x', topic: [a]}"
            ))
            .len(),
            3
        );
    }

    #[test]
    fn replicas_may_be_absent_only_with_a_dns_group() {
        let config = ok("models: [{name: m}]\ndiscovery:\n  dns:\n    - {name: pool, url: 'http://pool.svc:8000', models: [m]}\n");
        assert!(config.replicas.is_empty());
        assert_eq!(config.discovery.dns[0].refresh, Duration::from_secs(2));
        assert_eq!(config.discovery.dns[0].url.port, 8000);
        ok("models: [{name: m}]\nreplicas: []\ndiscovery: {dns: [{name: pool, url: 'http://p', models: [m], refresh: 10s}]}\n");
        assert_eq!(
            one_err("models: [{name: m}]\ndiscovery: {dns: []}\n"),
            "replicas: required; list at least one replica (or add a discovery.dns group)"
        );
        assert_eq!(
            errs("models: [{name: m}]\ndiscovery: {dns: [{name: 'a b', refresh: 0}]}\n"),
            [
                "discovery.dns[0].name: must use only letters, digits, '.', '_' and '-' (got \"a b\")",
                "discovery.dns[0].url: required",
                "discovery.dns[0].models: required",
                "discovery.dns[0].refresh: must be greater than 0 (got 0)",
            ]
        );
    }

    #[test]
    fn policies_split_and_shadow() {
        let config = ok(&minimal_with(
            "routing: {default_policy: p2c, split: {round_robin: 70, random: 30}, shadow: [least_request, p2c]}\n",
        ));
        assert_eq!(config.routing.default_policy, PolicyKind::P2c);
        assert_eq!(config.routing.split.len(), 2);
        assert_eq!(config.routing.split[&PolicyKind::RoundRobin], 70);
        assert_eq!(
            config.routing.shadow,
            [PolicyKind::LeastRequest, PolicyKind::P2c]
        );
        assert_eq!(
            errs(&minimal_with(
                "routing: {default_policy: 3, split: {foo: 50, p2c: 101}, shadow: [bar]}\n"
            )),
            [
                "routing.default_policy: unknown policy 3; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
                "routing.split.foo: unknown policy \"foo\"; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
                "routing.split.p2c: must be at most 100 (got 101)",
                "routing.shadow[0]: unknown policy \"bar\"; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
            ]
        );
    }

    #[test]
    fn per_model_split_and_shadow() {
        let config = ok("\
models:
  - {name: m, split: {round_robin: 70, random: 30}, shadow: [least_request, p2c]}
  - {name: n}
replicas: [{id: r, url: 'http://a:1', models: [m, n]}]
routing: {split: {p2c: 100}, shadow: [random]}
");
        let (m, n) = (&config.models[0], &config.models[1]);
        assert_eq!(m.split.len(), 2);
        assert_eq!(m.split[&PolicyKind::RoundRobin], 70);
        assert_eq!(m.split[&PolicyKind::Random], 30);
        assert_eq!(m.shadow, [PolicyKind::LeastRequest, PolicyKind::P2c]);
        // Empty: the model inherits the routing-level ones.
        assert!(n.split.is_empty());
        assert!(n.shadow.is_empty());
        assert_eq!(config.routing.split[&PolicyKind::P2c], 100);
        assert_eq!(config.routing.shadow, [PolicyKind::Random]);

        assert_eq!(
            errs("models: [{name: m, split: {foo: 50, p2c: 101}, shadow: [bar]}, {name: n, split: [p2c], shadow: p2c}]\nreplicas: [{id: r, url: 'http://a:1', models: [m, n]}]\n"),
            [
                "models[0].split.foo: unknown policy \"foo\"; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
                "models[0].split.p2c: must be at most 100 (got 101)",
                "models[0].shadow[0]: unknown policy \"bar\"; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
                "models[1].split: expected a mapping (got a list)",
                "models[1].shadow: expected a list (got \"p2c\")",
            ]
        );
    }

    #[test]
    fn per_model_cost_model() {
        let config = ok("\
models:
  - {name: m, cost_model: {prefill_token_secs: 2e-4, prefill_pair_secs: 1.0e-8, prefill_fixed_secs: 0.01}}
  - {name: k, cost_model: {prefill_fixed_secs: 0}}
  - {name: n, cost_model: null}
replicas: [{id: r, url: 'http://a:1', models: [m, k, n]}]
");
        let want = CostModelParams {
            prefill_token_secs: 2e-4,
            prefill_pair_secs: 1e-8,
            prefill_fixed_secs: 0.01,
            ..CostModelParams::default()
        };
        assert_eq!(config.models[0].cost_model, Some(want));
        // Keys left out take the defaults, as under `routing`; absent or null is no override.
        let partial = CostModelParams {
            prefill_fixed_secs: 0.0,
            ..CostModelParams::default()
        };
        assert_eq!(config.models[1].cost_model, Some(partial));
        assert_eq!(config.models[2].cost_model, None);
        assert_eq!(config.routing.cost_model, CostModelParams::default());
        assert_eq!(
            errs("models: [{name: m, cost_model: {prefill_pair_secs: -1e-9, alpha: 1}}, {name: n, cost_model: 3}]\nreplicas: [{id: r, url: 'http://a:1', models: [m, n]}]\n"),
            [
                "models[0].cost_model.alpha: unknown key; expected one of: prefill_token_secs, prefill_pair_secs, prefill_fixed_secs, decode_interference_secs, cpu_load_token_secs, storage_load_token_secs",
                "models[0].cost_model.prefill_pair_secs: must not be negative (got -1e-9)",
                "models[1].cost_model: expected a mapping with keys prefill_token_secs, prefill_pair_secs, prefill_fixed_secs, decode_interference_secs, cpu_load_token_secs, storage_load_token_secs (got 3)",
            ]
        );
    }

    #[test]
    fn tier_load_coefficients_decode_and_refuse_negatives_with_their_paths() {
        let config = ok("\
models:
  - {name: m, cost_model: {cpu_load_token_secs: 2.0e-6, storage_load_token_secs: 0}}
replicas: [{id: r, url: 'http://a:1', models: [m]}]
routing: {cost_model: {storage_load_token_secs: 1.0e-4}}
");
        let model = config.models[0].cost_model.unwrap_or_default();
        assert_eq!(
            (model.cpu_load_token_secs, model.storage_load_token_secs),
            (2e-6, 0.0)
        );
        let routing = config.routing.cost_model;
        assert_eq!(
            (routing.cpu_load_token_secs, routing.storage_load_token_secs),
            (CostModelParams::default().cpu_load_token_secs, 1e-4),
            "a key left out takes its default"
        );
        assert_eq!(
            errs(&minimal_with(
                "routing: {cost_model: {cpu_load_token_secs: -1e-6, storage_load_token_secs: fast}}\n"
            )),
            [
                "routing.cost_model.cpu_load_token_secs: must not be negative (got -1e-6)",
                "routing.cost_model.storage_load_token_secs: expected a number (got \"fast\")",
            ]
        );
        assert_eq!(
            errs("models: [{name: m, cost_model: {storage_load_token_secs: -2}}]\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\n"),
            ["models[0].cost_model.storage_load_token_secs: must not be negative (got -2)"]
        );
    }

    #[test]
    fn decision_log_needs_a_path() {
        let config = ok(&minimal_with(
            "observability: {decision_log: {path: /tmp/d.jsonl}, shadow_log: /tmp/s.jsonl}\n",
        ));
        let log = config.observability.decision_log.unwrap();
        assert_eq!(log.path.to_str(), Some("/tmp/d.jsonl"));
        assert_eq!(log.sample_rate, 0.01);
        assert_eq!(
            config.observability.shadow_log.unwrap().to_str(),
            Some("/tmp/s.jsonl")
        );
        assert_eq!(
            errs(&minimal_with(
                "observability: {decision_log: {sample_rate: 2}}\n"
            )),
            [
                "observability.decision_log.path: required",
                "observability.decision_log.sample_rate: must be between 0 and 1 (got 2)",
            ]
        );
    }
}
