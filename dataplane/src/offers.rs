//! What each replica offers a routing decision: the [`Candidate`] built from its snapshot entry
//! and the fleet-wide counters. A thin reader of the snapshot around the routing crate's one
//! builder ([`inferrail_routing::offer::candidate`]); it serves the data cores
//! ([`crate::core_state`]) and the admin's explain ([`offers`]), so explaining a request prices
//! exactly what routing would.

use crate::snapshot::{ReplicaEntry, Snapshot};
use inferrail_routing::offer::{self, EngineReading, LoadReading};
use inferrail_routing::Candidate;
use std::time::{Duration, Instant};

/// The candidate for replica `index` (its snapshot `entry`) at `now`: fleet-wide in flight and
/// queued prefill, the given pending and prompt-token counts, and the engine's report while it
/// is younger than `max_age`.
pub fn candidate(
    index: usize,
    entry: &ReplicaEntry,
    pending: u32,
    prompt_tokens: u64,
    now: Instant,
    max_age: Duration,
    fleet_now: u64,
) -> Candidate {
    let load = LoadReading {
        in_flight: entry.spec.fleet.in_flight(),
        pending,
        prompt_tokens,
        queued_prefill_secs: entry.spec.fleet.queued_prefill_secs(fleet_now),
    };
    let engine = entry.live.report.map(|rep| EngineReading {
        running: rep.running,
        waiting: rep.waiting,
        kv_cache_usage: rep.kv_cache_usage,
        age: now.saturating_duration_since(rep.received),
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
/// why not. Pending and prompt tokens are the snapshot's fleet totals (what any core adds to its
/// own counts), so on an idle core this equals [`crate::core_state::CoreView::candidates`].
pub fn offers(
    snap: &Snapshot,
    model: usize,
    now: Instant,
    fleet_now: u64,
) -> Vec<(usize, Result<Candidate, NotOffered>)> {
    let max_age = snap.settings.max_report_age;
    snap.models[model]
        .replicas
        .iter()
        .filter_map(|&i| {
            let entry = snap.replicas.get(i)?;
            let offer = if !entry.live.routable {
                Err(NotOffered::OutOfRotation)
            } else if entry.spec.fleet.in_flight() >= entry.spec.max_concurrency {
                Err(NotOffered::AtCapacity)
            } else {
                Ok(candidate(
                    i,
                    entry,
                    entry.total.pending,
                    entry.total.prompt_tokens,
                    now,
                    max_age,
                    fleet_now,
                ))
            };
            Some((i, offer))
        })
        .collect()
}
