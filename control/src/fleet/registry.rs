//! The replica registry: the static replicas of the config in effect plus the members of every
//! DNS group, each under a key that stays the same while its id and address do. A replica that
//! stays across a reload or a DNS refresh keeps its key, so the data cores keep its counters,
//! breaker counts and idle connections, and the health book keeps its health.

use inferrail_config::{Config, KvEvents};
use inferrail_dataplane::fleet::{SharedEngineReading, SharedLedger};
use inferrail_dataplane::snapshot::ReplicaSpec;
use std::net::{SocketAddr, ToSocketAddrs};

/// Where a registry member came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `replicas[]` of the config.
    Static,
    /// A `discovery.dns` group, by name.
    Dns(String),
}

impl Source {
    /// `static` or `dns:<group>`, for the admin API.
    pub fn label(&self) -> String {
        match self {
            Source::Static => "static".to_string(),
            Source::Dns(group) => format!("dns:{group}"),
        }
    }
}

/// One replica in the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Identity, address, models and caps.
    pub spec: ReplicaSpec,
    /// Static or discovered.
    pub source: Source,
    /// Where its engine publishes KV events, when followed.
    pub kv_events: Option<KvEvents>,
}

/// A replica the registry should hold, before it has a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    /// Stable id.
    pub id: String,
    /// Resolved address.
    pub addr: SocketAddr,
    /// `host:port` for the Host header.
    pub authority: String,
    /// Canonical model names.
    pub models: Vec<String>,
    /// Fleet-wide caps.
    pub max_concurrency: u32,
    /// Fleet-wide pending cap.
    pub max_pending: u32,
    /// KV capacity in blocks from config.
    pub kv_capacity_blocks: Option<u64>,
    /// Origin.
    pub source: Source,
    /// Its `kv_events` (a DNS group's for its members).
    pub kv_events: Option<KvEvents>,
}

/// What one [`Registry::update`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Keys of members that joined.
    pub added: Vec<u64>,
    /// Keys of members that left.
    pub removed: Vec<u64>,
    /// Keys of members whose models, caps or `kv_events` changed (same key).
    pub updated: Vec<u64>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.updated.is_empty()
    }
}

/// The members, in order: static replicas in config order, then DNS members sorted by group and id.
#[derive(Debug, Default)]
pub struct Registry {
    members: Vec<Member>,
    next_key: u64,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry {
            members: Vec::new(),
            next_key: 1,
        }
    }

    /// The members in snapshot order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member with `key`.
    pub fn get(&self, key: u64) -> Option<&Member> {
        self.members.iter().find(|m| m.spec.key == key)
    }

    /// Replaces the member set with `wanted`. A wanted replica with the id, address and authority
    /// of a current member keeps its key (its models and caps are updated in place); others get
    /// fresh keys. Ids must be unique in `wanted` (later duplicates are skipped).
    pub fn update(&mut self, wanted: Vec<Wanted>) -> Changes {
        let mut changes = Changes::default();
        let mut next: Vec<Member> = Vec::with_capacity(wanted.len());
        for w in wanted {
            if next.iter().any(|m| m.spec.id == w.id) {
                continue;
            }
            let existing = self.members.iter().find(|m| {
                m.spec.id == w.id && m.spec.addr == w.addr && m.spec.authority == w.authority
            });
            let (key, ledger, engine) = match existing {
                Some(m) => {
                    if m.spec.models != w.models
                        || m.spec.max_concurrency != w.max_concurrency
                        || m.spec.max_pending != w.max_pending
                        || m.spec.kv_capacity_blocks != w.kv_capacity_blocks
                        || m.source != w.source
                        || m.kv_events != w.kv_events
                    {
                        changes.updated.push(m.spec.key);
                    }
                    (m.spec.key, m.spec.ledger.clone(), m.spec.engine.clone())
                }
                None => {
                    let key = self.next_key;
                    self.next_key += 1;
                    changes.added.push(key);
                    (key, SharedLedger::new(), SharedEngineReading::new())
                }
            };
            next.push(Member {
                spec: ReplicaSpec {
                    key,
                    id: w.id,
                    addr: w.addr,
                    authority: w.authority,
                    models: w.models,
                    max_concurrency: w.max_concurrency,
                    max_pending: w.max_pending,
                    kv_capacity_blocks: w.kv_capacity_blocks,
                    ledger,
                    engine,
                },
                source: w.source,
                kv_events: w.kv_events,
            });
        }
        for old in &self.members {
            if !next.iter().any(|m| m.spec.key == old.spec.key) {
                changes.removed.push(old.spec.key);
            }
        }
        self.members = next;
        changes
    }
}

/// Why a static replica cannot join.
#[derive(Debug, thiserror::Error)]
#[error("replicas[{index}].url: cannot resolve {authority}: {reason}")]
pub struct ResolveError {
    /// Replica index in config.
    pub index: usize,
    /// host:port.
    pub authority: String,
    /// Why.
    pub reason: String,
}

/// The static replicas of `config`, resolved (IP literals at once, names through the system
/// resolver, first address).
pub fn static_replicas(config: &Config) -> Result<Vec<Wanted>, ResolveError> {
    config
        .replicas
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let authority = r.url.authority();
            let addr = (r.url.host.as_str(), r.url.port)
                .to_socket_addrs()
                .map_err(|e| ResolveError {
                    index,
                    authority: authority.clone(),
                    reason: e.to_string(),
                })?
                .next()
                .ok_or(ResolveError {
                    index,
                    authority: authority.clone(),
                    reason: "no address".into(),
                })?;
            Ok(Wanted {
                id: r.id.clone(),
                addr,
                authority,
                models: r.models.clone(),
                max_concurrency: r.max_concurrency,
                max_pending: r.max_pending,
                kv_capacity_blocks: r.kv_capacity_blocks,
                source: Source::Static,
                kv_events: r.kv_events.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(id: &str, port: u16) -> Wanted {
        Wanted {
            id: id.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            authority: format!("127.0.0.1:{port}"),
            models: vec!["m".into()],
            max_concurrency: 10,
            max_pending: 5,
            kv_capacity_blocks: None,
            source: Source::Static,
            kv_events: None,
        }
    }

    #[test]
    fn stayers_keep_their_keys_and_changes_are_reported() {
        let mut r = Registry::new();
        let c = r.update(vec![wanted("a", 1), wanted("b", 2)]);
        assert_eq!(c.added, vec![1, 2]);
        let mut b2 = wanted("b", 2);
        b2.max_concurrency = 20;
        let c = r.update(vec![b2, wanted("c", 3)]);
        assert_eq!(c.added, vec![3]);
        assert_eq!(c.removed, vec![1]);
        assert_eq!(c.updated, vec![2]);
        let ids: Vec<(&str, u64)> = r
            .members()
            .iter()
            .map(|m| (m.spec.id.as_str(), m.spec.key))
            .collect();
        assert_eq!(ids, vec![("b", 2), ("c", 3)]);
        assert_eq!(r.get(2).map(|m| m.spec.max_concurrency), Some(20));
    }

    #[test]
    fn a_new_address_is_a_new_replica() {
        let mut r = Registry::new();
        r.update(vec![wanted("a", 1)]);
        let c = r.update(vec![wanted("a", 9)]);
        assert_eq!(c.added, vec![2]);
        assert_eq!(c.removed, vec![1]);
        assert!(r.update(vec![wanted("a", 9)]).is_empty());
    }

    #[test]
    fn duplicate_ids_are_skipped() {
        let mut r = Registry::new();
        r.update(vec![wanted("a", 1), wanted("a", 2)]);
        assert_eq!(r.members().len(), 1);
        assert_eq!(r.members()[0].spec.addr.port(), 1);
    }
}
