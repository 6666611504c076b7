//! Replica membership and health on the control thread: the pure book of health and facts
//! driven by events ([`book`]), the registry of configured and
//! discovered replicas ([`registry`], [`discovery`]), health probes and ejection ([`probe`],
//! [`health`]), each replica's worker ([`worker`]) and the engines' own load reports
//! ([`scrape`], [`engine_load`]), and the engines' KV event streams feeding the index's exact
//! mirrors ([`kv_events`]).

pub mod book;
pub mod discovery;
pub mod engine_load;
pub mod health;
pub mod kv_events;
pub mod probe;
pub mod registry;
pub mod scrape;
pub mod worker;
