//! What each replica offers a routing decision: the [`Candidate`] built from its snapshot entry
//! and its one load ledger. A thin reader of the snapshot around the routing crate's one
//! builder ([`inferrail_routing::offer::candidate`]); it serves the data cores
//! ([`crate::core_state`]) and the admin's explain ([`offers`]), so explaining a request prices
//! exactly what routing would.

use crate::snapshot::{ReplicaEntry, Snapshot};
use inferrail_routing::offer::{self, EngineReading, LoadReading};
use inferrail_routing::Candidate;
use std::time::Duration;

/// The candidate for replica `index` (its snapshot `entry`) at `fleet_now`: its ledger's
/// fleet-wide load (in flight, waiting for a head, prompt tokens, queued prefill) and the
/// engine's latest reading while it is at most `max_age` old.
pub fn candidate(
    index: usize,
    entry: &ReplicaEntry,
    max_age: Duration,
    fleet_now: u64,
) -> Candidate {
    let reading = entry.spec.ledger.reading();
    let load = LoadReading {
        in_flight: reading.in_flight,
        pending: reading.awaiting_head,
        prompt_tokens: reading.prompt_tokens,
        queued_prefill_secs: reading.unserved_prefill_micros as f64 / 1e6,
    };
    let engine = entry.spec.engine.latest().map(|rep| EngineReading {
        running: rep.running,
        waiting: rep.waiting,
        kv_cache_usage: rep.kv_cache_usage,
        age: Duration::from_micros(fleet_now.saturating_sub(rep.received_micros)),
        own_in_flight: rep.own_in_flight,
    });
    offer::candidate(index, entry.spec.key, load, engine, max_age)
}

/// Why a replica serving the model is not offered to the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOffered {
    /// Failing health checks or ejected.
    OutOfRotation,
    /// Its fleet-wide `max_concurrency` is reached.
    AtCapacity,
}

impl NotOffered {
    /// The explain label.
    pub fn as_str(self) -> &'static str {
        match self {
            NotOffered::OutOfRotation => "out_of_rotation",
            NotOffered::AtCapacity => "at_capacity",
        }
    }
}

/// Every replica serving `model` (snapshot order): its candidate when it would be offered, else
/// why not. The data cores route from exactly these offers
/// ([`crate::core_state::CoreView::candidates_into`]) and the admin's explain shows them, so the two
/// read the same ledgers and cannot disagree. Lazy: the request path collects only the offered
/// ones, into one vector.
pub fn offers(
    snap: &Snapshot,
    model: usize,
    fleet_now: u64,
) -> impl Iterator<Item = (usize, Result<Candidate, NotOffered>)> + '_ {
    let max_age = snap.settings.max_report_age;
    snap.models[model].replicas.iter().filter_map(move |&i| {
        let entry = snap.replicas.get(i)?;
        let offer = if !entry.live.routable {
            Err(NotOffered::OutOfRotation)
        } else if entry.spec.ledger.in_flight() >= entry.spec.max_concurrency {
            Err(NotOffered::AtCapacity)
        } else {
            Ok(candidate(i, entry, max_age, fleet_now))
        };
        Some((i, offer))
    })
}
