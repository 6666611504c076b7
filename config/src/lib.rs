//! Inferrail's configuration: the YAML schema, its defaults, and validation that reports every
//! problem at once, each with the path of the value to fix (`replicas[2].url: ...`).
//!
//! It also owns which settings may change live (the `live` module lists the three classes):
//! models, replicas, discovery, routing, health, retry, load, timeouts, limits,
//! `tokenizer.max_wait`/`inline_max_bytes`, sampling and logging apply live; listeners,
//! `server.cores`/`shutdown_timeout`, `routing.seed`, `tokenizer.workers`/`cache_tokens`,
//! `index`, the log files and each model's tokenization as it started (`tokenizer`,
//! `block_size`, `chat_template`, `chat_template_kwargs`) need a restart
//! ([`Config::restart_required`] names the ones that changed); `observability.otlp_endpoint`
//! and `trace_sample_ratio` are refused until traces are exported.
//!
//! For a control plane that keeps "the config in effect" as a JSON document (to show it and
//! PATCH it), [`document_of_yaml`] turns the file into that document, [`merge_patch`] applies an
//! RFC 7396 merge patch to it, and [`parse_document`] validates it exactly like YAML text.
//!
//! This crate never does I/O besides reading the one config file in [`load_file`], and holds no
//! runtime state: it turns text into a checked [`Config`] and nothing more. Resolving `auto`
//! counts, DNS names and tokenizers is the job of the crates that use it.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

mod decode;
mod document;
mod error;
mod live;
mod merge_patch;
mod schema;
pub mod units;
mod upstream;
mod validate;
mod walk;

use std::path::Path;

pub use decode::COST_MODEL_KEYS;
pub use document::{document_of_yaml, parse_document};
pub use error::{ConfigError, Problem, Problems};
pub use live::RoutingReach;
pub use merge_patch::merge_patch;
pub use schema::{
    Config, CostModelParams, Count, DecisionLog, Discovery, DnsGroup, Health, HotPrefix, Index,
    KvAwareWeights, KvEventEndpoints, KvEvents, Load, Logging, Model, Observability, PolicyKind,
    Replica, Retry, Routing, Server, TokenizerPool, UpstreamUrl,
};

/// Parses and validates a configuration from YAML text.
pub fn parse_str(text: &str) -> Result<Config, ConfigError> {
    let mut root: serde_yaml::Value = serde_yaml::from_str(text).map_err(syntax_error)?;
    root.apply_merge().map_err(syntax_error)?;
    parse_value(&root)
}

/// Decodes and validates a YAML tree whose merge keys are already applied.
fn parse_value(root: &serde_yaml::Value) -> Result<Config, ConfigError> {
    let decoded = decode::decode(root);
    let mut problems = decoded.problems;
    validate::validate(&decoded.config, decoded.incomplete, &mut problems);
    if problems.is_empty() {
        Ok(decoded.config)
    } else {
        Err(ConfigError::Invalid(Problems(problems)))
    }
}

/// Reads the file at `path`, then [`parse_str`].
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_str(&text)
}

/// A YAML syntax error: one problem, with the line and column in its message.
fn syntax_error(err: serde_yaml::Error) -> ConfigError {
    let text = err.to_string();
    let message = match err.location() {
        Some(at) => {
            let suffix = format!(" at line {} column {}", at.line(), at.column());
            let what = text.replace(&suffix, "");
            format!(
                "invalid YAML at line {}, column {}: {what}",
                at.line(),
                at.column()
            )
        }
        None => format!("invalid YAML: {text}"),
    };
    ConfigError::Invalid(Problems(vec![Problem::new("", message)]))
}

/// Helpers shared by the unit tests of every module.
#[cfg(test)]
pub(crate) mod testing {
    use crate::{parse_str, Config, ConfigError};

    /// The smallest valid config: one model, one replica.
    pub const MINIMAL: &str = "\
models:
  - name: m
replicas:
  - id: r0
    url: http://127.0.0.1:8001
    models: [m]
";

    /// `MINIMAL` with more top-level sections appended.
    pub fn minimal_with(extra: &str) -> String {
        format!("{MINIMAL}{extra}")
    }

    /// Parses text that must be valid.
    pub fn ok(text: &str) -> Config {
        match parse_str(text) {
            Ok(config) => config,
            Err(err) => panic!("expected a valid config, got:\n{err}"),
        }
    }

    /// Parses text that must be invalid; its problems as `path: message` lines.
    pub fn errs(text: &str) -> Vec<String> {
        match parse_str(text) {
            Ok(config) => panic!("expected problems, got {config:?}"),
            Err(ConfigError::Invalid(problems)) => {
                problems.0.iter().map(ToString::to_string).collect()
            }
            Err(err) => panic!("expected problems, got {err}"),
        }
    }

    /// The single problem of text that must have exactly one.
    pub fn one_err(text: &str) -> String {
        let errs = errs(text);
        assert_eq!(errs.len(), 1, "expected exactly one problem, got {errs:#?}");
        errs[0].clone()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::testing::{errs, ok, one_err, MINIMAL};
    use super::*;

    fn example(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name)
    }

    #[test]
    fn minimal_config_gets_every_documented_default() {
        let config = ok(MINIMAL);
        let server = &config.server;
        assert_eq!(server.listen, "0.0.0.0:8080".parse::<SocketAddr>().unwrap());
        assert_eq!(
            server.admin_listen,
            "127.0.0.1:9090".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(server.cores, Count::Auto);
        assert_eq!(server.request_timeout, Duration::from_secs(600));
        assert_eq!(server.first_byte_timeout, None);
        assert_eq!(server.first_byte_timeout(), Duration::from_secs(600));
        assert_eq!(server.stream_idle_timeout, Duration::from_secs(60));
        assert_eq!(server.header_read_timeout, Duration::from_secs(30));
        assert_eq!(server.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(server.max_body_bytes, 33_554_432);
        assert_eq!(server.reload_interval, Duration::from_secs(2));
        assert_eq!(server.connect_timeout, Duration::from_secs(2));
        assert_eq!(server.pool_idle_timeout, Duration::from_secs(2));
        assert_eq!(server.pool_max_idle, 64);

        let model = &config.models[0];
        assert_eq!(model.name, "m");
        assert!(model.aliases.is_empty());
        assert_eq!(model.policy, None);
        assert_eq!(model.tokenizer, None);
        assert_eq!(model.block_size, None);
        assert_eq!(model.chat_template, None);
        assert!(model.chat_template_kwargs.is_empty());

        let replica = &config.replicas[0];
        assert_eq!(replica.id, "r0");
        assert_eq!(replica.url.host, "127.0.0.1");
        assert_eq!(replica.url.port, 8001);
        assert_eq!(replica.url.authority(), "127.0.0.1:8001");
        assert_eq!(replica.models, ["m"]);
        assert_eq!(replica.max_concurrency, 512);
        assert_eq!(replica.max_pending, 256);
        assert_eq!(replica.kv_capacity_blocks, None);

        assert!(config.discovery.dns.is_empty());
        let routing = &config.routing;
        assert_eq!(routing.default_policy, PolicyKind::LeastRequest);
        assert!(routing.split.is_empty());
        assert!(routing.shadow.is_empty());
        assert_eq!(routing.epsilon, 1.0);
        assert_eq!(routing.bounded_load_floor, 8);
        assert_eq!(routing.kappa, 1.0);
        assert!(!routing.session_affinity);
        assert_eq!(routing.seed, None);
        assert_eq!(routing.cost_model.prefill_token_secs, 0.0001);
        assert_eq!(routing.cost_model.prefill_pair_secs, 3.3e-9);
        assert_eq!(routing.cost_model.prefill_fixed_secs, 0.005);
        assert_eq!(routing.cost_model.cpu_load_token_secs, 5e-6);
        assert_eq!(routing.cost_model.storage_load_token_secs, 2.5e-5);

        let health = &config.health;
        assert_eq!(health.interval, Duration::from_secs(1));
        assert_eq!(health.timeout, Duration::from_millis(500));
        assert_eq!(health.unhealthy_threshold, 3);
        assert_eq!(health.ejection_backoff, Duration::from_secs(5));
        assert_eq!(health.max_ejection_backoff, Duration::from_secs(300));
        assert_eq!(health.max_ejection_percent, 50);

        assert_eq!(config.retry.max_attempts, 3);
        assert_eq!(config.retry.backoff, Duration::from_millis(25));
        assert_eq!(config.retry.max_backoff, Duration::from_secs(1));
        assert_eq!(config.load.scrape_interval, Duration::from_millis(100));
        assert_eq!(config.load.scrape_timeout, Duration::from_millis(100));
        assert_eq!(config.load.max_age, Duration::from_millis(250));
        assert_eq!(config.tokenizer.workers, Count::Auto);
        assert_eq!(config.tokenizer.max_wait, Duration::from_millis(50));
        assert_eq!(config.tokenizer.cache_tokens, 1_000_000);
        assert_eq!(config.index.shards, Count::Auto);
        assert_eq!(config.index.default_capacity_blocks, 16384);
        let obs = &config.observability;
        assert_eq!(obs.decision_log, None);
        assert_eq!(obs.shadow_log, None);
        assert!(!config.logging.log_prompts);

        // The Default impls are the same documented defaults.
        assert_eq!(config.server, Server::default());
        assert_eq!(config.routing, Routing::default());
        assert_eq!(config.health, Health::default());
        assert_eq!(config.retry, Retry::default());
        assert_eq!(config.load, Load::default());
        assert_eq!(config.tokenizer, TokenizerPool::default());
        assert_eq!(config.index, Index::default());
        assert_eq!(config.discovery, Discovery::default());
        assert_eq!(config.observability, Observability::default());
        assert_eq!(config.logging, Logging::default());
    }

    #[test]
    fn full_example_parses_and_documents_the_defaults() {
        let config = load_file(&example("inferrail.yaml")).unwrap();
        assert_eq!(config.server, Server::default());
        assert_eq!(config.routing, Routing::default());
        assert_eq!(config.health, Health::default());
        assert_eq!(config.retry, Retry::default());
        assert_eq!(config.load, Load::default());
        assert_eq!(config.tokenizer, TokenizerPool::default());
        assert_eq!(config.index, Index::default());
        assert_eq!(config.discovery, Discovery::default());
        assert_eq!(config.observability, Observability::default());
        assert_eq!(config.logging, Logging::default());
        let replica = &config.replicas[0];
        assert_eq!(replica.max_concurrency, Replica::DEFAULT_MAX_CONCURRENCY);
        assert_eq!(replica.max_pending, Replica::DEFAULT_MAX_PENDING);
        assert_eq!(config.model_index("llama-8b"), Some(0));
    }

    /// The commented `kv_events` lines of the example are valid once uncommented (with the
    /// model's tokenizer they need).
    #[test]
    fn full_example_kv_events_lines_parse_uncommented() {
        let text = std::fs::read_to_string(example("inferrail.yaml")).unwrap();
        let text = text.replace("    # tokenizer: /models/", "    tokenizer: /models/");
        let explicit = text
            .replace(
                "    # kv_events:                  #",
                "    kv_events:                  #",
            )
            .replace("    #   endpoint: ", "      endpoint: ")
            .replace("    #   replay_endpoint: ", "      replay_endpoint: ")
            .replace("    #   topic: ", "      topic: ");
        let config = parse_str(&explicit).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config.replicas[0].kv_events,
            Some(KvEvents::Endpoints(KvEventEndpoints {
                endpoint: "tcp://*:5557".to_string(),
                replay_endpoint: Some("tcp://*:5558".to_string()),
                topic: String::new(),
            }))
        );
        let discover = text.replace("    # kv_events: discover", "    kv_events: discover");
        let config = parse_str(&discover).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.replicas[0].kv_events, Some(KvEvents::Discover));
        let group = text
            .replace("  dns: []\n  # dns:\n", "  dns:\n")
            .replace("  #   - name: ", "    - name: ")
            .replace("  #     ", "      ");
        let config = parse_str(&group).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.discovery.dns[0].kv_events, Some(KvEvents::Discover));
    }

    #[test]
    fn full_example_mentions_every_key() {
        let text = std::fs::read_to_string(example("inferrail.yaml")).unwrap();
        for key in [
            "listen:",
            "admin_listen:",
            "cores:",
            "request_timeout:",
            "first_byte_timeout:",
            "stream_idle_timeout:",
            "header_read_timeout:",
            "shutdown_timeout:",
            "max_body_bytes:",
            "reload_interval:",
            "connect_timeout:",
            "pool_idle_timeout:",
            "pool_max_idle:",
            "aliases:",
            "policy:",
            "tokenizer:",
            "block_size:",
            "chat_template:",
            "chat_template_kwargs:",
            "max_concurrency:",
            "max_pending:",
            "kv_capacity_blocks:",
            "kv_events:",
            "replay_endpoint:",
            "topic:",
            "dns:",
            "refresh:",
            "default_policy:",
            "split:",
            "shadow:",
            "epsilon:",
            "bounded_load_floor:",
            "kappa:",
            "spill_weight:",
            "session_affinity:",
            "seed:",
            "prefill_token_secs:",
            "prefill_pair_secs:",
            "prefill_fixed_secs:",
            "cpu_load_token_secs:",
            "storage_load_token_secs:",
            "interval:",
            "timeout:",
            "unhealthy_threshold:",
            "ejection_backoff:",
            "max_ejection_backoff:",
            "max_ejection_percent:",
            "max_attempts:",
            "backoff:",
            "max_backoff:",
            "scrape_interval:",
            "scrape_timeout:",
            "max_age:",
            "workers:",
            "max_wait:",
            "cache_tokens:",
            "shards:",
            "default_capacity_blocks:",
            "otlp_endpoint:",
            "trace_sample_ratio:",
            "decision_log:",
            "sample_rate:",
            "shadow_log:",
            "log_prompts:",
        ] {
            assert!(
                text.contains(key),
                "examples/inferrail.yaml does not mention {key}"
            );
        }
    }

    #[test]
    fn local_example_parses() {
        let config = load_file(&example("local-3-replicas.yaml")).unwrap();
        assert_eq!(
            config.server.listen,
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            config.server.admin_listen,
            "127.0.0.1:9090".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(config.models.len(), 1);
        assert_eq!(config.models[0].name, "sim-llama");
        // The local example shows the product: cache-aware pricing over the builtin tokenizer.
        assert_eq!(config.models[0].policy, Some(PolicyKind::CostModel));
        assert_eq!(config.models[0].tokenizer.as_deref(), Some("builtin:sim"));
        assert_eq!(config.model_index("llama"), Some(0));
        assert_eq!(config.model_index("sim-llama"), Some(0));
        assert_eq!(config.model_index("other"), None);
        let ids: Vec<&str> = config.replicas.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["r0", "r1", "r2"]);
        let authorities: Vec<String> = config.replicas.iter().map(|r| r.url.authority()).collect();
        assert_eq!(
            authorities,
            ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"]
        );
    }

    /// The product spec's example decodes in full; only policies of later releases are refused.
    #[test]
    fn the_spec_shape_decodes_with_every_policy() {
        let spec = "\
server:
  listen: 0.0.0.0:8080
  admin_listen: 127.0.0.1:9090
  cores: auto
  request_timeout: 600s
  header_read_timeout: 30s
  shutdown_timeout: 30s
  max_body_bytes: 33554432
  reload_interval: 2s
models:
  - name: meta-llama/Llama-3.1-8B-Instruct
    aliases: [llama-8b]
    policy: cost_model
    tokenizer: /models/Llama-3.1-8B-Instruct
    block_size: 16
    chat_template_kwargs:
      enable_thinking: false
replicas:
  - id: gpu-0
    url: http://10.0.0.10:8000
    models: [meta-llama/Llama-3.1-8B-Instruct]
    max_concurrency: 256
    max_pending: 32
    kv_capacity_blocks: 18000
discovery:
  dns:
    - name: llama-pool
      url: http://vllm.inference.svc.cluster.local:8000
      models: [meta-llama/Llama-3.1-8B-Instruct]
      refresh: 2s
routing:
  default_policy: cost_model
  split: {cost_model: 90, kv_aware: 10}
  shadow: [least_request]
  epsilon: 1.0
  kappa: 0.92
  session_affinity: true
  seed: 42
  cost_model:
    prefill_token_secs: 0.0001
    prefill_pair_secs: 0.0000000033
    prefill_fixed_secs: 0.005
health: {interval: 1s, timeout: 500ms, unhealthy_threshold: 3, ejection_backoff: 5s,
         max_ejection_backoff: 300s, max_ejection_percent: 50}
retry: {max_attempts: 3, backoff: 25ms}
load: {scrape_interval: 100ms, scrape_timeout: 100ms, max_age: 250ms}
tokenizer: {workers: 4, max_wait: 50ms, cache_tokens: 1000000}
index: {shards: auto, default_capacity_blocks: 16384}
observability:
  decision_log: {path: /var/log/inferrail/decisions.jsonl, sample_rate: 0.01}
  shadow_log: /var/log/inferrail/shadow.jsonl
logging: {log_prompts: false}
";
        let config = ok(spec);
        assert_eq!(config.routing.default_policy, PolicyKind::CostModel);
        assert_eq!(config.routing.split[&PolicyKind::KvAware], 10);
        // Other policies land where they belong too.
        let spec = spec
            .replace("policy: cost_model", "policy: p2c")
            .replace("{cost_model: 90, kv_aware: 10}", "{p2c: 90, random: 10}");
        let config = ok(&spec);
        assert_eq!(config.tokenizer.workers, Count::Fixed(4));
        assert_eq!(config.routing.seed, Some(42));
        assert!(config.routing.session_affinity);
        assert_eq!(config.routing.split[&PolicyKind::P2c], 90);
        assert_eq!(config.routing.shadow, [PolicyKind::LeastRequest]);
        assert_eq!(config.replicas[0].kv_capacity_blocks, Some(18000));
        assert_eq!(config.models[0].block_size, Some(16));
        assert_eq!(
            config.models[0].chat_template_kwargs["enable_thinking"],
            serde_yaml::Value::Bool(false)
        );
        assert_eq!(
            config.discovery.dns[0].url.host,
            "vllm.inference.svc.cluster.local"
        );
        assert_eq!(
            config.observability.decision_log,
            Some(DecisionLog {
                path: PathBuf::from("/var/log/inferrail/decisions.jsonl"),
                sample_rate: 0.01
            })
        );
        // The spec's tracing keys are refused until traces are exported.
        let traced = spec.replace(
            "observability:\n",
            "observability:\n  otlp_endpoint: http://localhost:4318/v1/traces\n  trace_sample_ratio: 0.1\n",
        );
        assert_eq!(
            errs(&traced),
            [
                "observability.otlp_endpoint: not implemented yet: traces are not exported; remove it",
                "observability.trace_sample_ratio: not implemented yet: traces are not exported; remove it",
            ]
        );
    }

    #[test]
    fn yaml_syntax_error_is_one_problem_with_line_and_column() {
        let problem = one_err("models:\n  - name: m\n  bad: [\n");
        assert!(problem.starts_with("invalid YAML at line "), "{problem}");
        assert!(problem.contains(", column "), "{problem}");
        let problem = one_err("models: [\n  a: b");
        assert!(
            problem.starts_with("invalid YAML at line 3, column 1: "),
            "{problem}"
        );
        assert!(
            !problem.contains(" at line 3 column 1"),
            "location repeated: {problem}"
        );
        let Err(ConfigError::Invalid(problems)) = parse_str("a: 1\na: 2\n") else {
            panic!("duplicate keys must be refused");
        };
        assert_eq!(problems.0[0].path, "");
        assert!(problems.0[0]
            .message
            .contains("duplicate entry with key \"a\""));
    }

    #[test]
    fn many_problems_are_reported_together_in_order() {
        let text = "\
server:
  listn: 0.0.0.0:8080
  request_timeout: soon
models:
  - name: m
    policy: foo
replicas:
  - id: r0
    url: ftp://x
    models: [m]
  - id: r0
    url: http://10.0.0.1:8000
    models: [n]
health: {interval: 1s, timeout: 2s}
";
        assert_eq!(
            errs(text),
            [
                "server.listn: unknown key; expected one of: listen, admin_listen, cores, request_timeout, first_byte_timeout, stream_idle_timeout, header_read_timeout, shutdown_timeout, max_body_bytes, reload_interval, connect_timeout, pool_idle_timeout, pool_max_idle",
                "server.request_timeout: expected a duration like \"500ms\", \"2s\" or \"1m\" (got \"soon\")",
                "models[0].policy: unknown policy \"foo\"; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
                "replicas[0].url: must start with http:// (got \"ftp://x\")",
                "replicas[1].id: duplicate replica id \"r0\" (also replicas[0].id)",
                "replicas[1].models[0]: unknown model \"n\"; expected one of: m",
                "health.timeout: must be less than health.interval (1s) (got 2s)",
            ]
        );
    }

    #[test]
    fn display_is_one_problem_per_line() {
        let err = parse_str("models: []\nreplicas: []\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "models: must list at least one model\n\
             replicas: must list at least one replica when discovery.dns is empty"
        );
        assert_eq!(err.problems().map(|p| p.0.len()), Some(2));
    }

    #[test]
    fn empty_document_needs_models_and_replicas() {
        assert_eq!(
            errs(""),
            [
                "models: required; list at least one model",
                "replicas: required; list at least one replica (or add a discovery.dns group)",
            ]
        );
    }

    #[test]
    fn unreadable_file_is_an_io_error_naming_the_path() {
        let err = load_file(Path::new("/nonexistent/inferrail.yaml")).unwrap_err();
        assert!(matches!(err, ConfigError::Io { .. }));
        assert!(err
            .to_string()
            .starts_with("cannot read /nonexistent/inferrail.yaml: "));
        assert!(err.problems().is_none());
    }

    #[test]
    fn yaml_anchors_and_merge_keys_work() {
        let config = ok("\
models: [{name: m}]
replicas:
  - &base {id: r0, url: 'http://a:1', models: [m], max_pending: 7}
  - <<: *base
    id: r1
    url: http://a:2
");
        assert_eq!(config.replicas[1].max_pending, 7);
        assert_eq!(config.replicas[1].models, ["m"]);
    }

    #[test]
    fn policy_kind_names_round_trip() {
        for kind in PolicyKind::ALL {
            assert_eq!(PolicyKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(Count::Fixed(3).resolve(8), 3);
        assert_eq!(Count::Auto.resolve(8), 8);
    }
}
