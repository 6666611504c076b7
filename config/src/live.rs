//! Which settings a running router may take from a reloaded file, and which need a restart.
//!
//! Listeners, thread counts and sizes fixed at start-up (data cores, tokenizer workers, index
//! shards, the tokenization cache, the default KV capacity, the OTLP exporter, the decision and
//! shadow log files) need a restart, and
//! so does the tokenization of a model that stays (`tokenizer`, `block_size`, `chat_template`,
//! `chat_template_kwargs`): tokenizers are built at start-up. Everything else (models added or
//! removed, a model's names and policies, replicas, discovery, routing, health, retry, load
//! scraping, timeouts (`first_byte_timeout` and `stream_idle_timeout` included: each request
//! reads them from its snapshot), body limits, pooling, sampling, logs, logging) may change live.

use crate::schema::{Config, Model};

impl Config {
    /// The settings that differ between `self` (running) and `new` (reloaded) but only take
    /// effect after a restart, as config paths. Empty when `new` can be applied live in full.
    ///
    /// Besides the fixed sections, a model present in both configs (matched by name) that
    /// changed its `tokenizer`, `block_size`, `chat_template` or `chat_template_kwargs` is named
    /// as `models[<name>].<field>`: tokenizers are built at start-up. A model added or removed
    /// is live. Paths come in a fixed order: the sections, then the models in `new`'s order.
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
        check(
            "tokenizer.inline_max_bytes",
            self.tokenizer.inline_max_bytes != new.tokenizer.inline_max_bytes,
        );
        check("index.shards", self.index.shards != new.index.shards);
        check(
            "index.default_capacity_blocks",
            self.index.default_capacity_blocks != new.index.default_capacity_blocks,
        );
        check(
            "observability.otlp_endpoint",
            self.observability.otlp_endpoint != new.observability.otlp_endpoint,
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
            if let Some(old) = self.models.iter().find(|m| m.name == model.name) {
                tokenization_changes(old, model, &mut changed);
            }
        }
        changed
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
    use crate::schema::Count;

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
        new.server.cores = Count::Fixed(2);
        new.index.shards = Count::Fixed(4);
        assert_eq!(old.restart_required(&new), ["server.cores", "index.shards"]);
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
    fn models_added_or_removed_are_live() {
        let old = crate::parse_str(BASE).unwrap();
        let mut new = old.clone();
        let mut added = new.models[0].clone();
        added.name = "other".to_string();
        added.tokenizer = Some("builtin:sim".to_string());
        new.models.push(added);
        assert!(old.restart_required(&new).is_empty());
        // Removing it is live too, and so is renaming: the renamed model is a new one.
        assert!(new.restart_required(&old).is_empty());
        let mut renamed = new.clone();
        renamed.models[1].name = "third".to_string();
        renamed.models[1].tokenizer = None;
        assert!(new.restart_required(&renamed).is_empty());
    }
}
