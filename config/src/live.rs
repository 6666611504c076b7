//! Which settings a running router may take from a reloaded file, and which need a restart.
//!
//! Listeners, thread counts and sizes fixed at start-up (data cores, tokenizer workers, index
//! shards, the tokenization cache, the default KV capacity, the OTLP exporter) need a restart.
//! Everything else (models, replicas, discovery, routing, health, retry, load scraping, timeouts,
//! body limits, pooling, sampling, logs, logging) may change live.

use crate::schema::Config;

impl Config {
    /// The settings that differ between `self` (running) and `new` (reloaded) but only take
    /// effect after a restart, as config paths. Empty when `new` can be applied live in full.
    pub fn restart_required(&self, new: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut check = |path: &'static str, differs: bool| {
            if differs {
                changed.push(path);
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
        check("index.shards", self.index.shards != new.index.shards);
        check(
            "index.default_capacity_blocks",
            self.index.default_capacity_blocks != new.index.default_capacity_blocks,
        );
        check(
            "observability.otlp_endpoint",
            self.observability.otlp_endpoint != new.observability.otlp_endpoint,
        );
        changed
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
        new.replicas.clear();
        new.health.interval *= 2;
        assert!(old.restart_required(&new).is_empty());
        new.server.cores = Count::Fixed(2);
        new.index.shards = Count::Fixed(4);
        assert_eq!(old.restart_required(&new), ["server.cores", "index.shards"]);
    }
}
