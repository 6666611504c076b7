//! Which settings a running router may change, and which models a routing change reaches.
//!
//! Every setting is in one of three classes, and `inferrail check`, start-up, PATCH
//! /admin/config and reloads (SIGHUP, the timer, POST /admin/reload) all treat it the same way:
//!
//! - **Refused** (validation refuses them everywhere, naming the path): `observability.otlp_endpoint`
//!   and `observability.trace_sample_ratio`: traces are not exported yet.
//! - **Restart-only** (read once at start-up; a change is refused naming its path, see
//!   [`Config::restart_required`]): `server.listen`, `server.admin_listen`, `server.cores`,
//!   `server.shutdown_timeout`, `routing.seed`, `routing.hot_prefix.window`,
//!   `tokenizer.workers`, `tokenizer.cache_tokens`, `index.shards`,
//!   `index.default_capacity_blocks`, `observability.decision_log.path`,
//!   `observability.shadow_log`, and each model's tokenization (`tokenizer`, `block_size`,
//!   `chat_template`, `chat_template_kwargs`) as the process started with it: tokenizers are
//!   loaded at start-up, so a model added live may not name a `tokenizer` (it would never get
//!   predictions), and a model removed and added back keeps the tokenization it started with.
//! - **Live** (everything else): models added or removed (without a tokenizer), a model's
//!   names, policy, split, shadow and cost model, replicas, discovery, the rest of `routing`,
//!   health, retry, load scraping, the other `server` timeouts (`first_byte_timeout` and `stream_idle_timeout`
//!   included), body limits and pooling,
//!   `tokenizer.max_wait` and `tokenizer.inline_max_bytes` (each request reads them from the
//!   snapshot it routes with), the decision log's sample rate and `logging`.

use crate::schema::{Config, Model, Routing};

impl Config {
    /// The settings that differ between `self` (the config the process **started** with) and
    /// `new` but only take effect after a restart, as config paths. Empty when `new` can be
    /// applied live in full.
    ///
    /// Compare with the start-up config, not the one last applied: a restart-only setting never
    /// changes while the process runs, and a model's tokenization is the one its tokenizer was
    /// loaded with at start. A model of `new` that was present at start (matched by name) and
    /// changed its `tokenizer`, `block_size`, `chat_template` or `chat_template_kwargs` is named
    /// as `models[<name>].<field>`; a model of `new` that was not present at start and names a
    /// `tokenizer` is named as `models[<name>].tokenizer` (no tokenizer is loaded for it). A model
    /// added or removed without a tokenizer is live. Paths come in a fixed order: the sections,
    /// then the models in `new`'s order.
    pub fn restart_required(&self, new: &Config) -> Vec<String> {
        let mut changed = Vec::new();
        let mut check = |path: &str, differs: bool| {
            if differs {
                changed.push(path.to_string());
            }
        };
        let (old_server, new_server) = (&self.server, &new.server);
        check("server.listen", old_server.listen != new_server.listen);
        check(
            "server.admin_listen",
            old_server.admin_listen != new_server.admin_listen,
        );
        check("server.cores", old_server.cores != new_server.cores);
        // The data cores and the signal thread take the grace period at start-up.
        check(
            "server.shutdown_timeout",
            old_server.shutdown_timeout != new_server.shutdown_timeout,
        );
        // The cores' and the shadow worker's random sources are seeded once.
        check("routing.seed", self.routing.seed != new.routing.seed);
        check(
            "tokenizer.workers",
            self.tokenizer.workers != new.tokenizer.workers,
        );
        check(
            "tokenizer.cache_tokens",
            self.tokenizer.cache_tokens != new.tokenizer.cache_tokens,
        );
        check(
            "routing.hot_prefix.window",
            self.routing.hot_prefix.window != new.routing.hot_prefix.window,
        );
        check("index.shards", self.index.shards != new.index.shards);
        check(
            "index.default_capacity_blocks",
            self.index.default_capacity_blocks != new.index.default_capacity_blocks,
        );
        // The log writers are threads with their files opened at start-up; the sample rate is live.
        check(
            "observability.decision_log.path",
            self.observability.decision_log.as_ref().map(|d| &d.path)
                != new.observability.decision_log.as_ref().map(|d| &d.path),
        );
        check(
            "observability.shadow_log",
            self.observability.shadow_log != new.observability.shadow_log,
        );
        for model in &new.models {
            match self.models.iter().find(|m| m.name == model.name) {
                Some(old) => tokenization_changes(old, model, &mut changed),
                None if model.tokenizer.is_some() => {
                    changed.push(format!("models[{}].tokenizer", model.name));
                }
                None => {}
            }
        }
        changed
    }

    /// How each `routing` setting that differs between `self` (running) and `new` reaches the
    /// models of `new`: the models whose routing now follows it, and the models that keep their
    /// own setting (which shadows it). A change whose `affects` is empty changes no routing
    /// decision. Restart-only routing settings (`seed`, `hot_prefix.window`) are not listed.
    ///
    /// The precedence is the data plane's: a model's `split`, else `routing.split`, else the
    /// model's `policy`, else `routing.default_policy` picks its policies; a model's `shadow`
    /// and `cost_model` replace `routing.shadow` and `routing.cost_model`. Every other routing
    /// setting reaches every model.
    pub fn routing_reach(&self, new: &Config) -> Vec<RoutingReach> {
        // Destructured in full: a new routing setting must be classed here to compile.
        let Routing {
            default_policy,
            split,
            shadow,
            epsilon,
            bounded_load_floor,
            kappa,
            spill_weight,
            session_affinity,
            seed: _,
            cost_model,
            prefix_hash_blocks,
            kv_aware,
            hot_prefix,
            short_prompt_tokens,
        } = &self.routing;
        let r = &new.routing;
        use Overridden::{CostModel, Everywhere, Policy, Shadow, Split};
        let changes = [
            (
                "routing.default_policy",
                *default_policy != r.default_policy,
                Policy,
            ),
            ("routing.split", *split != r.split, Split),
            ("routing.shadow", *shadow != r.shadow, Shadow),
            ("routing.epsilon", *epsilon != r.epsilon, Everywhere),
            (
                "routing.bounded_load_floor",
                *bounded_load_floor != r.bounded_load_floor,
                Everywhere,
            ),
            ("routing.kappa", *kappa != r.kappa, Everywhere),
            (
                "routing.spill_weight",
                *spill_weight != r.spill_weight,
                Everywhere,
            ),
            (
                "routing.session_affinity",
                *session_affinity != r.session_affinity,
                Everywhere,
            ),
            ("routing.cost_model", *cost_model != r.cost_model, CostModel),
            (
                "routing.prefix_hash.blocks",
                *prefix_hash_blocks != r.prefix_hash_blocks,
                Everywhere,
            ),
            ("routing.kv_aware", *kv_aware != r.kv_aware, Everywhere),
            (
                "routing.hot_prefix",
                hot_prefix.blocks != r.hot_prefix.blocks
                    || hot_prefix.utilization != r.hot_prefix.utilization,
                Everywhere,
            ),
            (
                "routing.short_prompt_tokens",
                *short_prompt_tokens != r.short_prompt_tokens,
                Everywhere,
            ),
        ];
        changes
            .into_iter()
            .filter(|(_, differs, _)| *differs)
            .map(|(path, _, overridden)| {
                let mut reach = RoutingReach {
                    path: path.to_string(),
                    affects: Vec::new(),
                    shadowed_by: Vec::new(),
                };
                for m in &new.models {
                    match overridden.by(m, r) {
                        Some(by) if !reach.shadowed_by.contains(&by) => reach.shadowed_by.push(by),
                        Some(_) => {}
                        None => reach.affects.push(m.name.clone()),
                    }
                }
                reach
            })
            .collect()
    }
}

/// Which model-level setting replaces a routing setting.
#[derive(Debug, Clone, Copy)]
enum Overridden {
    /// `default_policy`: a model's `split`, else `routing.split`, else the model's `policy`.
    Policy,
    /// `split`: a model's `split`.
    Split,
    /// `shadow`: a model's `shadow`.
    Shadow,
    /// `cost_model`: a model's `cost_model`.
    CostModel,
    /// Nothing: every model reads it.
    Everywhere,
}

impl Overridden {
    /// The path of the setting that shadows this one for `m`, if any.
    fn by(self, m: &Model, routing: &Routing) -> Option<String> {
        let own = |set: bool, field: &str| set.then(|| format!("models[{}].{field}", m.name));
        match self {
            Overridden::Policy => own(!m.split.is_empty(), "split")
                .or_else(|| (!routing.split.is_empty()).then(|| "routing.split".to_string()))
                .or_else(|| own(m.policy.is_some(), "policy")),
            Overridden::Split => own(!m.split.is_empty(), "split"),
            Overridden::Shadow => own(!m.shadow.is_empty(), "shadow"),
            Overridden::CostModel => own(m.cost_model.is_some(), "cost_model"),
            Overridden::Everywhere => None,
        }
    }
}

/// How a change of one `routing` setting reaches the models (see [`Config::routing_reach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingReach {
    /// The setting that changed, e.g. `routing.default_policy`.
    pub path: String,
    /// Models whose routing follows the new value, in config order.
    pub affects: Vec<String>,
    /// The config paths that shadow this one for the models it does not reach (e.g.
    /// `models[m].policy`), each once, in config order.
    pub shadowed_by: Vec<String>,
}

impl RoutingReach {
    /// A warning when the change reaches no model: `<path> changes no routing decision: every
    /// model keeps its own setting (<paths>)`; `None` when it affects a model.
    pub fn warning(&self) -> Option<String> {
        self.affects.is_empty().then(|| {
            format!(
                "{} changes no routing decision: every model keeps its own setting ({})",
                self.path,
                self.shadowed_by.join(", ")
            )
        })
    }
}

/// Appends `models[<name>].<field>` for each tokenization setting that differs.
fn tokenization_changes(old: &Model, new: &Model, changed: &mut Vec<String>) {
    let fields = [
        ("tokenizer", old.tokenizer != new.tokenizer),
        ("block_size", old.block_size != new.block_size),
        ("chat_template", old.chat_template != new.chat_template),
        (
            "chat_template_kwargs",
            old.chat_template_kwargs != new.chat_template_kwargs,
        ),
    ];
    for (field, differs) in fields {
        if differs {
            changed.push(format!("models[{}].{field}", new.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RoutingReach;
    use crate::schema::{Count, PolicyKind};
    use std::time::Duration;

    const BASE: &str = "models: [{name: m}]\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\n";

    #[test]
    fn live_changes_need_no_restart_and_fixed_ones_are_named() {
        let old = crate::parse_str(BASE).unwrap();
        let mut new = old.clone();
        new.routing.epsilon = 2.0;
        new.routing.bounded_load_floor = 1;
        new.replicas.clear();
        new.health.interval *= 2;
        new.server.first_byte_timeout = Some(std::time::Duration::from_secs(5));
        new.server.stream_idle_timeout *= 2;
        assert!(old.restart_required(&new).is_empty());
        // `kv_events` rides with its replica (or DNS group): live.
        let mut kv = old.clone();
        kv.replicas[0].kv_events = Some(crate::KvEvents::Discover);
        assert!(old.restart_required(&kv).is_empty());
        assert!(kv.restart_required(&old).is_empty());
        new.server.cores = Count::Fixed(2);
        new.index.shards = Count::Fixed(4);
        assert_eq!(old.restart_required(&new), ["server.cores", "index.shards"]);
    }

    /// The live class: prediction settings each request reads from its snapshot.
    #[test]
    fn the_prediction_wait_and_inline_size_are_live() {
        let old = crate::parse_str(BASE).unwrap();
        let mut new = old.clone();
        new.tokenizer.max_wait = Duration::ZERO;
        new.tokenizer.inline_max_bytes = 0;
        new.server.request_timeout *= 2;
        new.observability.decision_log = old.observability.decision_log.clone();
        assert!(old.restart_required(&new).is_empty());
    }

    /// The restart-only class: settings read once at start-up.
    #[test]
    fn settings_read_at_start_up_need_a_restart() {
        let old = crate::parse_str(BASE).unwrap();
        let mut new = old.clone();
        new.routing.seed = Some(7);
        new.server.shutdown_timeout = Duration::from_secs(1);
        new.tokenizer.workers = Count::Fixed(3);
        new.tokenizer.cache_tokens = 5;
        assert_eq!(
            old.restart_required(&new),
            [
                "server.shutdown_timeout",
                "routing.seed",
                "tokenizer.workers",
                "tokenizer.cache_tokens"
            ]
        );
    }

    /// The refused class: settings that are not implemented, whatever their value.
    #[test]
    fn tracing_settings_are_refused_naming_their_path() {
        for (yaml, path) in [
            (
                "observability: {otlp_endpoint: 'http://c:4318'}\n",
                "observability.otlp_endpoint",
            ),
            (
                "observability: {trace_sample_ratio: 0}\n",
                "observability.trace_sample_ratio",
            ),
        ] {
            let problems = crate::parse_str(&format!("{BASE}{yaml}"))
                .unwrap_err()
                .to_string();
            assert!(
                problems.contains(&format!(
                    "{path}: not implemented yet: traces are not exported; remove it"
                )),
                "{problems}"
            );
        }
        // Null is "not set": accepted.
        assert!(
            crate::parse_str(&format!("{BASE}observability: {{otlp_endpoint: null}}\n")).is_ok()
        );
    }

    #[test]
    fn tokenization_changes_of_a_kept_model_need_a_restart() {
        let old = crate::parse_str(
            "models: [{name: m, tokenizer: builtin:sim}, {name: n, block_size: 16}]\n\
             replicas: [{id: r, url: 'http://a:1', models: [m, n]}]\n",
        )
        .unwrap();
        // Live: policy, aliases, split and shadow of a kept model.
        let mut new = old.clone();
        new.models[0].aliases.push("alias".to_string());
        new.models[0].policy = Some(crate::PolicyKind::P2c);
        new.models[1].shadow.push(crate::PolicyKind::Random);
        assert!(old.restart_required(&new).is_empty());

        new.models[0].tokenizer = Some("/models/other".to_string());
        new.models[0].chat_template = Some("/t.jinja".to_string());
        new.models[1].block_size = Some(32);
        new.models[1]
            .chat_template_kwargs
            .insert("enable_thinking".to_string(), serde_yaml::Value::Bool(true));
        new.server.cores = Count::Fixed(2);
        assert_eq!(
            old.restart_required(&new),
            [
                "server.cores",
                "models[m].tokenizer",
                "models[m].chat_template",
                "models[n].block_size",
                "models[n].chat_template_kwargs",
            ]
        );
    }

    #[test]
    fn models_without_a_tokenizer_come_and_go_live_and_one_with_a_tokenizer_needs_a_restart() {
        let start = crate::parse_str(BASE).unwrap();
        let mut new = start.clone();
        let mut added = new.models[0].clone();
        added.name = "other".to_string();
        new.models.push(added);
        assert!(start.restart_required(&new).is_empty());
        // Removing it is live too, and so is renaming: the renamed model is a new one.
        assert!(new.restart_required(&start).is_empty());
        let mut renamed = new.clone();
        renamed.models[1].name = "third".to_string();
        assert!(start.restart_required(&renamed).is_empty());
        // A model added with a tokenizer would never get predictions: it is named.
        renamed.models[1].tokenizer = Some("builtin:sim".to_string());
        assert_eq!(
            start.restart_required(&renamed),
            ["models[third].tokenizer"]
        );
    }

    #[test]
    fn a_model_removed_and_added_back_keeps_the_tokenization_it_started_with() {
        let start = crate::parse_str(
            "models: [{name: m, tokenizer: builtin:sim}, {name: n}]\n\
             replicas: [{id: r, url: 'http://a:1', models: [m, n]}]\n",
        )
        .unwrap();
        let mut removed = start.clone();
        removed.models.remove(0);
        assert!(start.restart_required(&removed).is_empty());
        // Back as it started: live (its tokenizer is still loaded).
        assert!(start.restart_required(&start).is_empty());
        // Back with another tokenizer: checked against the start-up config, so it is named.
        let mut other = start.clone();
        other.models[0].tokenizer = Some("/models/other".to_string());
        assert_eq!(start.restart_required(&other), ["models[m].tokenizer"]);
    }

    #[test]
    fn a_routing_change_names_the_models_it_reaches_and_those_that_shadow_it() {
        let old = crate::parse_str(
            "models: [{name: a, policy: p2c}, {name: b}, {name: c, split: {random: 50, p2c: 50}, shadow: [random]}]\n\
             replicas: [{id: r, url: 'http://x:1', models: [a, b, c]}]\n",
        )
        .unwrap();
        assert!(old.routing_reach(&old).is_empty());
        let mut new = old.clone();
        new.routing.default_policy = PolicyKind::Random;
        new.routing.shadow = vec![PolicyKind::LeastRequest];
        new.routing.epsilon = 3.0;
        new.routing.seed = Some(1);
        let reach = old.routing_reach(&new);
        let reach_of = |path: &str| reach.iter().find(|r| r.path == path).unwrap().clone();
        assert_eq!(reach.len(), 3, "{reach:?}");
        assert_eq!(
            reach_of("routing.default_policy"),
            RoutingReach {
                path: "routing.default_policy".to_string(),
                affects: vec!["b".to_string()],
                shadowed_by: vec![
                    "models[a].policy".to_string(),
                    "models[c].split".to_string()
                ],
            }
        );
        assert_eq!(reach_of("routing.shadow").affects, ["a", "b"]);
        assert_eq!(reach_of("routing.shadow").shadowed_by, ["models[c].shadow"]);
        assert_eq!(reach_of("routing.epsilon").affects, ["a", "b", "c"]);
        assert_eq!(reach_of("routing.default_policy").warning(), None);

        // Every model sets its own: the change reaches none, and says so.
        new.models.remove(1);
        let reach = old.routing_reach(&new);
        assert_eq!(reach[0].path, "routing.default_policy");
        assert!(reach[0].affects.is_empty());
        assert_eq!(
            reach[0].warning().unwrap(),
            "routing.default_policy changes no routing decision: every model keeps its own \
             setting (models[a].policy, models[c].split)"
        );
        // A global split shadows the default policy of a model without a policy of its own.
        let mut split = old.clone();
        split.routing.split = [(PolicyKind::P2c, 100)].into_iter().collect();
        let mut split_new = split.clone();
        split_new.routing.default_policy = PolicyKind::Random;
        assert_eq!(
            split.routing_reach(&split_new)[0].shadowed_by,
            ["routing.split", "models[c].split"]
        );
    }
}
