//! Checks across fields, run after decoding: uniqueness, references between sections, policies
//! available in this release, and pairs of values that must agree. Every failure is a
//! [`Problem`] with the path of the value to change.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::decode::kv_endpoint;
use crate::error::Problem;
use crate::schema::{Config, KvEvents, PolicyKind};
use crate::units::format_duration;
use crate::walk::{index, is_placeholder, join, Incomplete};

/// Appends every cross-field problem of `config` to `problems`. Checks that read a value which
/// already failed to decode are skipped, so one mistake is reported once.
pub(crate) fn validate(config: &Config, incomplete: Incomplete, problems: &mut Vec<Problem>) {
    let mut v = Validator {
        config,
        incomplete,
        decode_failed: problems.iter().map(|p| p.path.clone()).collect(),
        problems,
    };
    v.listeners();
    v.model_names();
    v.replicas();
    v.dns_groups();
    v.served();
    v.policies();
    v.splits();
    v.ordered_pairs();
}

/// Whose `kv_events` is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Replica,
    DnsGroup,
}

impl Owner {
    /// How a message names it: "the replica's models", "the group's models".
    fn noun(self) -> &'static str {
        match self {
            Owner::Replica => "replica",
            Owner::DnsGroup => "group",
        }
    }
}

struct Validator<'a> {
    config: &'a Config,
    incomplete: Incomplete,
    /// Paths that already have a decode problem (their value is a default or placeholder).
    decode_failed: Vec<String>,
    problems: &'a mut Vec<Problem>,
}

impl Validator<'_> {
    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn decoded(&self, path: &str) -> bool {
        !self.decode_failed.iter().any(|p| p == path)
    }

    /// No decode problem at `path` or anywhere under it (`path.key`, `path[..]`).
    fn decoded_tree(&self, path: &str) -> bool {
        !self.decode_failed.iter().any(|p| {
            p.strip_prefix(path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
    }

    fn listeners(&mut self) {
        let server = &self.config.server;
        let (listen, admin) = (server.listen, server.admin_listen);
        // Port 0 asks the OS for a free port each time: two such listeners never clash.
        let overlap = listen.port() == admin.port()
            && listen.port() != 0
            && (listen.ip() == admin.ip()
                || listen.ip().is_unspecified()
                || admin.ip().is_unspecified());
        if overlap && self.decoded("server.listen") && self.decoded("server.admin_listen") {
            self.problem(
                "server.admin_listen",
                format!("conflicts with server.listen ({listen}); use another port"),
            );
        }
    }

    /// Model names unique; aliases unique and never another model's name.
    fn model_names(&mut self) {
        let models = &self.config.models;
        let mut names: HashMap<&str, String> = HashMap::new();
        for (i, model) in models.iter().enumerate() {
            if model.name.is_empty() {
                continue;
            }
            let path = join(&index("models", i), "name");
            if let Some(first) = names.get(model.name.as_str()) {
                let message = format!("duplicate model name {:?} (also {first})", model.name);
                self.problem(path, message);
            } else {
                names.insert(&model.name, path);
            }
        }
        let mut aliases: HashMap<&str, String> = HashMap::new();
        for (i, model) in models.iter().enumerate() {
            for (k, alias) in model.aliases.iter().enumerate() {
                let path = index(&join(&index("models", i), "aliases"), k);
                if *alias == model.name {
                    self.problem(path, "repeats the model's own name");
                } else if let Some(owner) = names.get(alias.as_str()) {
                    let message = format!("alias {alias:?} is already the name of {owner}");
                    self.problem(path, message);
                } else if let Some(first) = aliases.get(alias.as_str()) {
                    let message = format!("duplicate alias {alias:?} (also {first})");
                    self.problem(path, message);
                } else {
                    aliases.insert(alias, path);
                }
            }
        }
    }

    /// Replica ids unique, urls unique, models known, `kv_events` usable.
    fn replicas(&mut self) {
        let replicas = &self.config.replicas;
        let mut ids: HashMap<&str, String> = HashMap::new();
        for (i, replica) in replicas.iter().enumerate() {
            let base = index("replicas", i);
            if !replica.id.is_empty() {
                let path = join(&base, "id");
                if let Some(first) = ids.get(replica.id.as_str()) {
                    let message = format!("duplicate replica id {:?} (also {first})", replica.id);
                    self.problem(path, message);
                } else {
                    ids.insert(&replica.id, path);
                }
            }
            if !is_placeholder(&replica.url) {
                let earlier = replicas[..i]
                    .iter()
                    .position(|r| !is_placeholder(&r.url) && r.url.same_endpoint(&replica.url));
                if let Some(j) = earlier {
                    let message = format!(
                        "same engine as replicas[{j}].url ({:?}); list each engine once",
                        replicas[j].url.original
                    );
                    self.problem(join(&base, "url"), message);
                }
            }
            self.model_refs(&join(&base, "models"), &replica.models);
            if let Some(kv) = &replica.kv_events {
                self.kv_events(&base, Owner::Replica, kv, &replica.models);
            }
        }
    }

    /// DNS group names unique (and not a replica id), models known, `kv_events` usable.
    fn dns_groups(&mut self) {
        let config = self.config;
        let mut names: HashMap<&str, String> = config
            .replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.id.is_empty())
            .map(|(i, r)| (r.id.as_str(), join(&index("replicas", i), "id")))
            .collect();
        for (i, group) in config.discovery.dns.iter().enumerate() {
            let base = index("discovery.dns", i);
            if !group.name.is_empty() {
                let path = join(&base, "name");
                if let Some(first) = names.get(group.name.as_str()) {
                    let message = format!("duplicate name {:?} (also {first})", group.name);
                    self.problem(path, message);
                } else {
                    names.insert(&group.name, path);
                }
            }
            self.model_refs(&join(&base, "models"), &group.models);
            if let Some(kv) = &group.kv_events {
                self.kv_events(&base, Owner::DnsGroup, kv, &group.models);
            }
        }
    }

    /// The `kv_events` of the replica or DNS group at `base`, serving `models`: a group's
    /// endpoints are on each member's own host (`*`), the replay socket is not the PUB socket,
    /// and one of the models has a tokenizer (the mirror keys blocks by the gateway's tokens, so
    /// without one nothing would read it).
    fn kv_events(&mut self, base: &str, owner: Owner, kv: &KvEvents, models: &[String]) {
        let path = join(base, "kv_events");
        if let KvEvents::Endpoints(e) = kv {
            let endpoint_path = join(&path, "endpoint");
            let sockets = [
                ("endpoint", Some(&e.endpoint)),
                ("replay_endpoint", e.replay_endpoint.as_ref()),
            ];
            if owner == Owner::DnsGroup {
                for (key, text) in sockets {
                    let Some(text) = text else { continue };
                    if kv_endpoint(text).is_ok_and(|ep| ep.host != "*") {
                        let message = format!(
                            "a DNS group's {key} host must be * (each member's own address) (got {text:?})"
                        );
                        self.problem(join(&path, key), message);
                    }
                }
            }
            if let Some(replay) = &e.replay_endpoint {
                if let (Ok(a), Ok(b)) = (kv_endpoint(&e.endpoint), kv_endpoint(replay)) {
                    if a.same_socket(&b) {
                        let message = format!(
                            "same socket as {endpoint_path} ({:?}); the engine binds its replay socket on a port of its own",
                            e.endpoint
                        );
                        self.problem(join(&path, "replay_endpoint"), message);
                    }
                }
            }
        }
        self.kv_events_tokenizer(base, &path, owner, models);
    }

    /// One of `models` (of the replica or group at `base`) has a tokenizer. Skipped when the
    /// models or a tokenizer failed to decode, or a model is unknown (already reported).
    fn kv_events_tokenizer(&mut self, base: &str, path: &str, owner: Owner, models: &[String]) {
        if self.incomplete.model_names
            || models.is_empty()
            || !self.decoded_tree(&join(base, "models"))
        {
            return;
        }
        let mut tokenized = false;
        for name in models {
            let Some(j) = self.config.models.iter().position(|m| m.name == *name) else {
                return;
            };
            if !self.decoded(&join(&index("models", j), "tokenizer")) {
                return;
            }
            tokenized |= self.config.models[j].tokenizer.is_some();
        }
        if !tokenized {
            let message = format!(
                "needs one of the {}'s models to have a tokenizer (the index keys blocks by the gateway's own tokens); models: {}",
                owner.noun(),
                models.join(", ")
            );
            self.problem(path, message);
        }
    }

    /// Each name in a replica's or group's `models` is a canonical model name, listed once.
    fn model_refs(&mut self, path: &str, refs: &[String]) {
        if self.incomplete.model_names {
            return;
        }
        let models = &self.config.models;
        for (k, name) in refs.iter().enumerate() {
            let item = index(path, k);
            if refs[..k].contains(name) {
                self.problem(item, format!("model {name:?} is listed twice"));
            } else if models.iter().any(|m| m.name == *name) {
                continue;
            } else if let Some(model) = models.iter().find(|m| m.aliases.contains(name)) {
                let message = format!(
                    "{name:?} is an alias; name the model by its canonical name {:?}",
                    model.name
                );
                self.problem(item, message);
            } else {
                let known: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
                let message = format!(
                    "unknown model {name:?}; expected one of: {}",
                    known.join(", ")
                );
                self.problem(item, message);
            }
        }
    }

    /// Every model is served by at least one replica or DNS group.
    fn served(&mut self) {
        let config = self.config;
        // With no replica and no group at all, `replicas` is already reported as required.
        let fleet_empty = config.replicas.is_empty() && config.discovery.dns.is_empty();
        if self.incomplete.serving || fleet_empty {
            return;
        }
        for (i, model) in config.models.iter().enumerate() {
            if model.name.is_empty() {
                continue;
            }
            let served = config
                .replicas
                .iter()
                .any(|r| r.models.contains(&model.name))
                || config
                    .discovery
                    .dns
                    .iter()
                    .any(|g| g.models.contains(&model.name));
            if !served {
                self.problem(
                    join(&index("models", i), "name"),
                    "no replica or discovery.dns group serves this model",
                );
            }
        }
    }

    /// No shadow list names a policy twice (the model's own first, then `routing.shadow`).
    fn policies(&mut self) {
        let config = self.config;
        let routing = &config.routing;
        for (i, model) in config.models.iter().enumerate() {
            let base = index("models", i);
            self.shadow_policies(&join(&base, "shadow"), &model.shadow);
        }
        self.shadow_policies("routing.shadow", &routing.shadow);
    }

    /// Every policy of the shadow list at `path` is listed once.
    fn shadow_policies(&mut self, path: &str, shadow: &[PolicyKind]) {
        for (j, policy) in shadow.iter().enumerate() {
            let item = index(path, j);
            if shadow[..j].contains(policy) {
                self.problem(
                    item,
                    format!("policy {:?} is listed twice", policy.as_str()),
                );
            }
        }
    }

    /// `routing.split` and every `models[i].split` add up to 100 (when not empty).
    fn splits(&mut self) {
        let config = self.config;
        self.split_sum("routing.split", &config.routing.split);
        for (i, model) in config.models.iter().enumerate() {
            self.split_sum(&join(&index("models", i), "split"), &model.split);
        }
    }

    /// The split at `path` adds up to 100, unless it is empty or one of its entries failed to
    /// decode (that entry is already reported; its sum would mislead).
    fn split_sum(&mut self, path: &str, split: &BTreeMap<PolicyKind, u32>) {
        if split.is_empty() || !self.decoded_tree(path) {
            return;
        }
        let sum: u64 = split.values().map(|&p| u64::from(p)).sum();
        if sum != 100 {
            self.problem(path, format!("percentages must add up to 100 (got {sum})"));
        }
    }

    /// Pairs where one duration must stay below (or above) another.
    fn ordered_pairs(&mut self) {
        let health = &self.config.health;
        let retry = &self.config.retry;
        let server = &self.config.server;
        if let Some(first_byte) = server.first_byte_timeout {
            self.at_most(
                "server.first_byte_timeout",
                first_byte,
                "server.request_timeout",
                server.request_timeout,
            );
        }
        self.less_than(
            "health.timeout",
            health.timeout,
            "health.interval",
            health.interval,
        );
        self.at_least(
            "health.max_ejection_backoff",
            health.max_ejection_backoff,
            "health.ejection_backoff",
            health.ejection_backoff,
        );
        self.at_least(
            "retry.max_backoff",
            retry.max_backoff,
            "retry.backoff",
            retry.backoff,
        );
    }

    fn less_than(&mut self, path: &str, value: Duration, other_path: &str, other: Duration) {
        if value >= other && self.decoded(path) && self.decoded(other_path) {
            let message = format!(
                "must be less than {other_path} ({}) (got {})",
                format_duration(other),
                format_duration(value)
            );
            self.problem(path, message);
        }
    }

    fn at_most(&mut self, path: &str, value: Duration, other_path: &str, other: Duration) {
        if value > other && self.decoded(path) && self.decoded(other_path) {
            let message = format!(
                "must be at most {other_path} ({}) (got {})",
                format_duration(other),
                format_duration(value)
            );
            self.problem(path, message);
        }
    }

    fn at_least(&mut self, path: &str, value: Duration, other_path: &str, other: Duration) {
        if value < other && self.decoded(path) && self.decoded(other_path) {
            let message = format!(
                "must be at least {other_path} ({}) (got {})",
                format_duration(other),
                format_duration(value)
            );
            self.problem(path, message);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{errs, minimal_with, ok, one_err};
    use std::time::Duration;

    #[test]
    fn model_names_are_unique() {
        assert_eq!(
            one_err("models: [{name: m}, {name: m}]\nreplicas: [{id: r, url: 'http://a:1', models: [m]}]\n"),
            "models[1].name: duplicate model name \"m\" (also models[0].name)"
        );
    }

    #[test]
    fn aliases_are_unique_and_never_a_model_name() {
        assert_eq!(
            errs(
                "\
models:
  - {name: a, aliases: [x, b, a]}
  - {name: b, aliases: [x, y, y]}
replicas: [{id: r, url: 'http://h:1', models: [a, b]}]
"
            ),
            [
                "models[0].aliases[1]: alias \"b\" is already the name of models[1].name",
                "models[0].aliases[2]: repeats the model's own name",
                "models[1].aliases[0]: duplicate alias \"x\" (also models[0].aliases[0])",
                "models[1].aliases[2]: duplicate alias \"y\" (also models[1].aliases[1])",
            ]
        );
    }

    #[test]
    fn replica_ids_are_unique() {
        assert_eq!(
            one_err("models: [{name: m}]\nreplicas:\n  - {id: r, url: 'http://a:1', models: [m]}\n  - {id: s, url: 'http://a:2', models: [m]}\n  - {id: r, url: 'http://a:3', models: [m]}\n"),
            "replicas[2].id: duplicate replica id \"r\" (also replicas[0].id)"
        );
    }

    #[test]
    fn replica_urls_are_unique_however_spelled() {
        assert_eq!(
            one_err("models: [{name: m}]\nreplicas:\n  - {id: r, url: 'http://Host:80', models: [m]}\n  - {id: s, url: 'http://host/', models: [m]}\n"),
            "replicas[1].url: same engine as replicas[0].url (\"http://Host:80\"); list each engine once"
        );
    }

    #[test]
    fn dns_group_names_are_unique_and_distinct_from_replica_ids() {
        assert_eq!(
            errs("models: [{name: m}]\nreplicas: [{id: g, url: 'http://a:1', models: [m]}]\ndiscovery:\n  dns:\n    - {name: g, url: 'http://b:1', models: [m]}\n    - {name: h, url: 'http://c:1', models: [m]}\n    - {name: h, url: 'http://d:1', models: [m]}\n"),
            [
                "discovery.dns[0].name: duplicate name \"g\" (also replicas[0].id)",
                "discovery.dns[2].name: duplicate name \"h\" (also discovery.dns[1].name)",
            ]
        );
    }

    #[test]
    fn replica_models_must_exist_by_canonical_name() {
        assert_eq!(
            errs("\
models:
  - {name: sim-llama, aliases: [llama]}
  - {name: other}
replicas:
  - {id: r0, url: 'http://a:1', models: [sim-llama, other]}
  - {id: r1, url: 'http://a:2', models: [other, llama, mistral, other]}
discovery:
  dns: [{name: g, url: 'http://b:1', models: [gpt]}]
"),
            [
                "replicas[1].models[1]: \"llama\" is an alias; name the model by its canonical name \"sim-llama\"",
                "replicas[1].models[2]: unknown model \"mistral\"; expected one of: sim-llama, other",
                "replicas[1].models[3]: model \"other\" is listed twice",
                "discovery.dns[0].models[0]: unknown model \"gpt\"; expected one of: sim-llama, other",
            ]
        );
    }

    #[test]
    fn a_dns_groups_kv_event_hosts_are_each_members_own() {
        let group = |kv: &str| {
            format!(
                "models: [{{name: m, tokenizer: builtin:sim}}]\ndiscovery:\n  dns:\n    - {{name: g, url: 'http://pool.svc:8000', models: [m], kv_events: {kv}}}\n"
            )
        };
        ok(&group("discover"));
        ok(&group(
            "{endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://*:5558', topic: kv}",
        ));
        assert_eq!(
            errs(&group(
                "{endpoint: 'tcp://10.0.0.1:5557', replay_endpoint: 'tcp://pool.svc:5558'}"
            )),
            [
                "discovery.dns[0].kv_events.endpoint: a DNS group's endpoint host must be * (each member's own address) (got \"tcp://10.0.0.1:5557\")",
                "discovery.dns[0].kv_events.replay_endpoint: a DNS group's replay_endpoint host must be * (each member's own address) (got \"tcp://pool.svc:5558\")",
            ]
        );
        assert_eq!(
            one_err(&group("{endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://[::1]:5558'}")),
            "discovery.dns[0].kv_events.replay_endpoint: a DNS group's replay_endpoint host must be * (each member's own address) (got \"tcp://[::1]:5558\")"
        );
        // A broken endpoint is reported once, not again for its host.
        assert_eq!(
            one_err(&group("{endpoint: 'tcp://0.0.0.0:5557'}")),
            "discovery.dns[0].kv_events.endpoint: 0.0.0.0 is a bind-all address, not one to connect to; write * (the replica's own host) or the engine's host (got \"tcp://0.0.0.0:5557\")"
        );
        // A replica may name its engine's host.
        ok("models: [{name: m, tokenizer: builtin:sim}]\nreplicas: [{id: r, url: 'http://10.0.0.1:8000', models: [m], kv_events: {endpoint: 'tcp://10.0.0.1:5557'}}]\n");
    }

    #[test]
    fn the_replay_socket_is_not_the_pub_socket() {
        let replica = |kv: &str| {
            format!(
                "models: [{{name: m, tokenizer: builtin:sim}}]\nreplicas: [{{id: r, url: 'http://10.0.0.1:8000', models: [m], kv_events: {kv}}}]\n"
            )
        };
        assert_eq!(
            one_err(&replica("{endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://*:5557'}")),
            "replicas[0].kv_events.replay_endpoint: same socket as replicas[0].kv_events.endpoint (\"tcp://*:5557\"); the engine binds its replay socket on a port of its own"
        );
        // However the host is spelled.
        assert_eq!(
            one_err(&replica("{endpoint: 'tcp://Engine:5557', replay_endpoint: 'tcp://engine:5557'}")),
            "replicas[0].kv_events.replay_endpoint: same socket as replicas[0].kv_events.endpoint (\"tcp://Engine:5557\"); the engine binds its replay socket on a port of its own"
        );
        ok(&replica(
            "{endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://*:5558'}",
        ));
        ok(&replica(
            "{endpoint: 'tcp://a:5557', replay_endpoint: 'tcp://b:5557'}",
        ));
        let group = "models: [{name: m, tokenizer: builtin:sim}]\ndiscovery: {dns: [{name: g, url: 'http://g:1', models: [m], kv_events: {endpoint: 'tcp://*:1', replay_endpoint: 'tcp://*:1'}}]}\n";
        assert_eq!(
            one_err(group),
            "discovery.dns[0].kv_events.replay_endpoint: same socket as discovery.dns[0].kv_events.endpoint (\"tcp://*:1\"); the engine binds its replay socket on a port of its own"
        );
    }

    #[test]
    fn kv_events_needs_a_model_with_a_tokenizer() {
        let text = "\
models:
  - {name: m1}
  - {name: m2, aliases: [two]}
  - {name: t, tokenizer: builtin:sim}
replicas:
  - {id: r0, url: 'http://a:1', models: [m1, m2], kv_events: discover}
  - {id: r1, url: 'http://a:2', models: [m1, t], kv_events: {endpoint: 'tcp://*:5557'}}
  - {id: r2, url: 'http://a:3', models: [m1]}
discovery:
  dns:
    - {name: g, url: 'http://g:1', models: [m2], kv_events: {endpoint: 'tcp://*:5557'}}
    - {name: h, url: 'http://h:1', models: [t, m2], kv_events: discover}
";
        assert_eq!(
            errs(text),
            [
                "replicas[0].kv_events: needs one of the replica's models to have a tokenizer (the index keys blocks by the gateway's own tokens); models: m1, m2",
                "discovery.dns[0].kv_events: needs one of the group's models to have a tokenizer (the index keys blocks by the gateway's own tokens); models: m2",
            ]
        );
        // Not repeated over a mistake already reported: an unknown model, an alias, a broken
        // tokenizer, a broken models list.
        for (models, replica_models, problem) in [
            ("[{name: m}]", "[m, x]", "replicas[0].models[1]: unknown model \"x\"; expected one of: m"),
            ("[{name: m, aliases: [a]}]", "[m, a]", "replicas[0].models[1]: \"a\" is an alias; name the model by its canonical name \"m\""),
            ("[{name: m, tokenizer: 5}]", "[m]", "models[0].tokenizer: expected a string (got 5)"),
            ("[{name: m}]", "[]", "replicas[0].models: must list at least one model"),
            ("[{aliases: [x]}]", "[m]", "models[0].name: required"),
        ] {
            assert_eq!(
                one_err(&format!(
                    "models: {models}\nreplicas: [{{id: r, url: 'http://a:1', models: {replica_models}, kv_events: discover}}]\n"
                )),
                problem
            );
        }
    }

    #[test]
    fn every_model_is_served() {
        assert_eq!(
            one_err("models: [{name: a}, {name: b}, {name: c}]\nreplicas: [{id: r, url: 'http://h:1', models: [a]}]\ndiscovery: {dns: [{name: g, url: 'http://d', models: [b]}]}\n"),
            "models[2].name: no replica or discovery.dns group serves this model"
        );
    }

    #[test]
    fn every_policy_may_be_named_anywhere() {
        ok("\
models:
  - {name: m, policy: kv_aware}
  - {name: n, policy: p2c}
replicas: [{id: r, url: 'http://h:1', models: [m, n]}]
routing:
  default_policy: prefix_hash
  split: {cost_model: 50, random: 50}
  shadow: [round_robin, cost_model]
");
    }

    #[test]
    fn shadow_policies_are_listed_once() {
        assert_eq!(
            one_err(&minimal_with("routing: {shadow: [p2c, random, p2c]}\n")),
            "routing.shadow[2]: policy \"p2c\" is listed twice"
        );
    }

    #[test]
    fn split_sums_to_100() {
        assert_eq!(
            one_err(&minimal_with("routing: {split: {p2c: 60, random: 30}}\n")),
            "routing.split: percentages must add up to 100 (got 90)"
        );
        ok(&minimal_with("routing: {split: {p2c: 100, random: 0}}\n"));
        ok(&minimal_with("routing: {split: {}}\n"));
        // A broken entry is reported once, not again as a wrong sum.
        assert_eq!(
            one_err(&minimal_with("routing: {split: {p2c: 60, random: x}}\n")),
            "routing.split.random: expected a whole number (got \"x\")"
        );
    }

    #[test]
    fn per_model_split_and_shadow_are_checked_like_routing() {
        let fleet = "replicas: [{id: r, url: 'http://h:1', models: [m, n]}]\n";
        assert_eq!(
            errs(&format!(
                "models:\n  - {{name: m, policy: p2c, split: {{kv_aware: 50, random: 50}}, shadow: [p2c, cost_model, p2c]}}\n  - {{name: n, split: {{p2c: 60, random: 30}}}}\n{fleet}routing: {{split: {{p2c: 50, random: 40}}}}\n"
            )),
            [
                "models[0].shadow[2]: policy \"p2c\" is listed twice".to_string(),
                "routing.split: percentages must add up to 100 (got 90)".to_string(),
                "models[1].split: percentages must add up to 100 (got 90)".to_string(),
            ]
        );
        ok(&format!(
            "models: [{{name: m, split: {{p2c: 100, random: 0}}}}, {{name: n, split: {{}}, shadow: []}}]\n{fleet}"
        ));
        // A broken entry is reported once, not again as a wrong sum; other splits still are.
        assert_eq!(
            errs(&format!(
                "models: [{{name: m, split: {{p2c: 60, random: x}}}}, {{name: n, split: {{p2c: 60, foo: 40}}}}]\n{fleet}routing: {{split: {{p2c: 10}}}}\n"
            )),
            [
                "models[0].split.random: expected a whole number (got \"x\")",
                "models[1].split.foo: unknown policy \"foo\"; expected one of: round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
                "routing.split: percentages must add up to 100 (got 10)",
            ]
        );
    }

    #[test]
    fn first_byte_timeout_is_at_most_the_request_timeout() {
        assert_eq!(
            one_err(&minimal_with(
                "server: {request_timeout: 5s, first_byte_timeout: 6s}\n"
            )),
            "server.first_byte_timeout: must be at most server.request_timeout (5s) (got 6s)"
        );
        let c = ok(&minimal_with(
            "server: {request_timeout: 5s, first_byte_timeout: 5s, stream_idle_timeout: 1s}\n",
        ));
        assert_eq!(c.server.first_byte_timeout(), Duration::from_secs(5));
        assert_eq!(c.server.stream_idle_timeout, Duration::from_secs(1));
        // Unset, it follows request_timeout, however short.
        let c = ok(&minimal_with("server: {request_timeout: 300ms}\n"));
        assert_eq!(c.server.first_byte_timeout(), Duration::from_millis(300));
        assert_eq!(
            errs(&minimal_with(
                "server: {first_byte_timeout: 0, stream_idle_timeout: 0}\n",
            ))
            .len(),
            2
        );
    }

    #[test]
    fn health_timeout_is_below_interval() {
        assert_eq!(
            one_err(&minimal_with("health: {interval: 1s, timeout: 1000ms}\n")),
            "health.timeout: must be less than health.interval (1s) (got 1s)"
        );
        assert_eq!(
            one_err(&minimal_with("health: {interval: 200ms}\n")),
            "health.timeout: must be less than health.interval (200ms) (got 500ms)"
        );
        // A broken interval is reported once, not compared through its default.
        assert_eq!(
            one_err(&minimal_with("health: {interval: x, timeout: 2s}\n")),
            "health.interval: expected a duration like \"500ms\", \"2s\" or \"1m\" (got \"x\")"
        );
    }

    #[test]
    fn max_backoffs_are_at_least_their_backoff() {
        assert_eq!(
            one_err(&minimal_with("retry: {backoff: 2s}\n")),
            "retry.max_backoff: must be at least retry.backoff (2s) (got 1s)"
        );
        ok(&minimal_with("retry: {backoff: 1s, max_backoff: 1s}\n"));
        ok(&minimal_with(
            "server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}\n",
        ));
        assert_eq!(
            one_err(&minimal_with("health: {ejection_backoff: 10m}\n")),
            "health.max_ejection_backoff: must be at least health.ejection_backoff (600s) (got 300s)"
        );
    }

    #[test]
    fn listeners_do_not_overlap() {
        assert_eq!(
            one_err(&minimal_with(
                "server: {listen: 0.0.0.0:9000, admin_listen: 127.0.0.1:9000}\n"
            )),
            "server.admin_listen: conflicts with server.listen (0.0.0.0:9000); use another port"
        );
        ok(&minimal_with(
            "server: {listen: 127.0.0.1:9000, admin_listen: 127.0.0.2:9000}\n",
        ));
    }

    #[test]
    fn a_broken_model_list_does_not_cascade_into_reference_errors() {
        assert_eq!(
            one_err(
                "models: [{aliases: [x]}]\nreplicas: [{id: r, url: 'http://h:1', models: [m]}]\n"
            ),
            "models[0].name: required"
        );
        assert_eq!(
            one_err("models: [{name: m}]\nreplicas: [{id: r, url: 'http://h:1', models: 5}]\n"),
            "replicas[0].models: expected a list (got 5)"
        );
    }
}
