//! The immutable fleet state every core routes from. The control thread builds one per config
//! generation and broadcasts it; a request reads one snapshot from start to end.

use inferrail_config::{Config, PolicyKind};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Why a config cannot become a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A policy named in config has no implementation in this build.
    #[error("model {model}: policy {policy} is not implemented in this release")]
    PolicyNotImplemented {
        /// The model.
        model: String,
        /// The policy name.
        policy: &'static str,
    },
    /// The resolved-address list does not match the replicas.
    #[error("expected {expected} resolved replica addresses, got {got}")]
    AddressCount {
        /// Replicas in config.
        expected: usize,
        /// Addresses given.
        got: usize,
    },
}

/// Gateway settings a request needs, copied out of the config.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Whole-request deadline for reading the body, and the longest wait on the engine.
    pub request_timeout: Duration,
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
}

/// A model the gateway serves.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// Canonical name sent to engines.
    pub name: String,
    /// Other names clients may use.
    pub aliases: Vec<String>,
    /// The routing policy for this model.
    pub policy: PolicyKind,
    /// Indices into [`Snapshot::replicas`] of replicas serving this model.
    pub replicas: Vec<usize>,
}

/// A replica (one engine endpoint).
#[derive(Debug, Clone)]
pub struct ReplicaEntry {
    /// Stable id from config, used in metrics and `x-inferrail-replica`.
    pub id: String,
    /// Resolved socket address.
    pub addr: SocketAddr,
    /// `host:port` sent as the Host header.
    pub authority: String,
    /// Fleet-wide cap on requests in flight.
    pub max_concurrency: u32,
    /// Fleet-wide cap on requests waiting for a response head.
    pub max_pending: u32,
}

/// Everything a core needs to route, immutable once built.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases by one per published snapshot.
    pub generation: u64,
    /// Request handling settings.
    pub settings: Settings,
    /// Models, in config order.
    pub models: Vec<ModelEntry>,
    /// Replicas, in config order.
    pub replicas: Vec<ReplicaEntry>,
    /// Model index by canonical name or alias.
    names: HashMap<String, usize>,
    /// The prebuilt `/v1/models` body.
    pub models_body: Vec<u8>,
}

impl Snapshot {
    /// Builds a snapshot from a validated config and each replica's resolved address
    /// (`addrs[i]` for `config.replicas[i]`).
    pub fn build(
        config: &Config,
        addrs: &[SocketAddr],
        generation: u64,
        created_unix: u64,
    ) -> Result<Snapshot, SnapshotError> {
        if addrs.len() != config.replicas.len() {
            return Err(SnapshotError::AddressCount {
                expected: config.replicas.len(),
                got: addrs.len(),
            });
        }
        let replicas: Vec<ReplicaEntry> = config
            .replicas
            .iter()
            .zip(addrs)
            .map(|(r, addr)| ReplicaEntry {
                id: r.id.clone(),
                addr: *addr,
                authority: r.url.authority(),
                max_concurrency: r.max_concurrency,
                max_pending: r.max_pending,
            })
            .collect();
        let mut models = Vec::with_capacity(config.models.len());
        let mut names = HashMap::new();
        for (mi, m) in config.models.iter().enumerate() {
            let policy = m.policy.unwrap_or(config.routing.default_policy);
            if crate::policy::build(policy).is_none() {
                return Err(SnapshotError::PolicyNotImplemented {
                    model: m.name.clone(),
                    policy: policy.as_str(),
                });
            }
            let serving = config
                .replicas
                .iter()
                .enumerate()
                .filter(|(_, r)| r.models.contains(&m.name))
                .map(|(i, _)| i)
                .collect();
            names.insert(m.name.clone(), mi);
            for a in &m.aliases {
                names.insert(a.clone(), mi);
            }
            models.push(ModelEntry {
                name: m.name.clone(),
                aliases: m.aliases.clone(),
                policy,
                replicas: serving,
            });
        }
        let models_body = models_body(&models, created_unix);
        let s = &config.server;
        Ok(Snapshot {
            generation,
            settings: Settings {
                request_timeout: s.request_timeout,
                header_read_timeout: s.header_read_timeout,
                max_body_bytes: s.max_body_bytes,
                connect_timeout: s.connect_timeout,
                pool_idle_timeout: s.pool_idle_timeout,
                pool_max_idle: s.pool_max_idle,
                max_attempts: config.retry.max_attempts.max(1),
                backoff: config.retry.backoff,
                max_backoff: config.retry.max_backoff,
            },
            models,
            replicas,
            names,
            models_body,
        })
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

/// This core's share of a fleet-wide cap: the cap split as evenly as integers allow, lower core
/// indices taking the remainder. The shares of all cores sum exactly to `total`.
pub fn core_share(total: u32, cores: usize, core: usize) -> u32 {
    let n = cores.max(1) as u32;
    let core = core as u32;
    total / n + u32::from(core < total % n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn shares_sum_to_the_cap(total in 0u32..10_000, cores in 1usize..64) {
            let sum: u32 = (0..cores).map(|c| core_share(total, cores, c)).sum();
            prop_assert_eq!(sum, total);
            let max = (0..cores).map(|c| core_share(total, cores, c)).max().unwrap();
            let min = (0..cores).map(|c| core_share(total, cores, c)).min().unwrap();
            prop_assert!(max - min <= 1);
        }
    }
}
