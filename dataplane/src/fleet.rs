//! Fleet-wide load that every data core reads and writes directly (ADR 014, ADR 016): each
//! replica's one load ledger ([`SharedLedger`] over inferrail-sync's `ReplicaLedger`: in flight,
//! waiting for a head, prompt tokens in flight, queued prefill, queued at the gateway; carried by
//! the replica's spec across snapshots), its engine's latest reading ([`SharedEngineReading`],
//! written by the control thread after each scrape, ADR 022), and the [`FleetClock`] every fleet structure's microseconds are read on (the
//! routing crate's `FleetFacts`, sessions and prefix demand, take their time from it). All are
//! lock-free atomics: a core never waits for another, and what one core routes is visible to the
//! next decision on any core, with no snapshot delay.

use inferrail_sync::{CachePadded, ReplicaLedger, SeqCell};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

/// A replica's [`ReplicaLedger`], shared by every core and carried by the replica's spec across
/// snapshots while its registry key stays. Two handles are equal only when they share the same
/// ledger (identity, not value).
#[derive(Debug, Clone, Default)]
pub struct SharedLedger(Arc<ReplicaLedger>);

impl SharedLedger {
    /// A fresh, idle ledger.
    pub fn new() -> SharedLedger {
        SharedLedger::default()
    }
}

impl PartialEq for SharedLedger {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for SharedLedger {
    type Target = ReplicaLedger;

    fn deref(&self) -> &ReplicaLedger {
        &self.0
    }
}

/// The part of an engine's `/metrics` report that routing reads, as the control thread last
/// wrote it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineSample {
    /// Requests the engine is running (all data-parallel ranks).
    pub running: f64,
    /// Requests waiting in the engine's queue.
    pub waiting: f64,
    /// KV cache usage, 0..=1.
    pub kv_cache_usage: f64,
    /// When the page was received, on the [`FleetClock`].
    pub received_micros: u64,
    /// The gateway's own requests in flight to the replica when the page was received: what of
    /// `running + waiting` is this gateway's.
    pub own_in_flight: u32,
}

/// A replica's latest [`EngineSample`], shared by the control thread (its one writer) and every
/// core (readers, at decision time), carried by the replica's spec across snapshots like its
/// ledger. A read is always one whole sample, never a mix of two scrapes; a scrape publishes no
/// snapshot and wakes no core. Two handles are equal only when they share the same cell.
#[derive(Debug, Clone, Default)]
pub struct SharedEngineReading(Arc<CachePadded<SeqCell<5>>>);

impl SharedEngineReading {
    /// A cell with no sample yet.
    pub fn new() -> SharedEngineReading {
        SharedEngineReading::default()
    }

    /// Replaces the sample. Only the control thread writes, so the write always lands (a
    /// racing second writer would have its sample dropped, never torn).
    pub fn store(&self, sample: &EngineSample) {
        let _ = self.0.write([
            sample.running.to_bits(),
            sample.waiting.to_bits(),
            sample.kv_cache_usage.to_bits(),
            sample.received_micros,
            u64::from(sample.own_in_flight),
        ]);
    }

    /// The latest sample, or `None` before the first (or, rarely, when a write overlapped every
    /// try of the read: then the decision goes without the engine's report, as when it is stale).
    pub fn latest(&self) -> Option<EngineSample> {
        let [running, waiting, usage, received_micros, own] = self.0.read()?;
        Some(EngineSample {
            running: f64::from_bits(running),
            waiting: f64::from_bits(waiting),
            kv_cache_usage: f64::from_bits(usage),
            received_micros,
            own_in_flight: u32::try_from(own).unwrap_or(u32::MAX),
        })
    }
}

impl PartialEq for SharedEngineReading {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The clock of every fleet structure: microseconds since one start instant. `Copy`, so a
/// request's slot carries it without touching a shared reference count.
#[derive(Debug, Clone, Copy)]
pub struct FleetClock {
    epoch: Instant,
}

impl FleetClock {
    /// A clock starting now (the one clock read: the routing crate reads none).
    pub fn start() -> FleetClock {
        FleetClock {
            epoch: Instant::now(),
        }
    }

    /// `at` in microseconds since the clock's start (0 before it).
    pub fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch)
            .as_micros()
            .min(u128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_reads_back_exactly_and_handles_share_one_cell() {
        let cell = SharedEngineReading::new();
        assert_eq!(cell.latest(), None);
        let sample = EngineSample {
            running: 3.0,
            waiting: 0.5,
            kv_cache_usage: 0.125,
            received_micros: 1_234_567,
            own_in_flight: 2,
        };
        let other = cell.clone();
        cell.store(&sample);
        assert_eq!(other.latest(), Some(sample));
        assert_eq!(cell, other);
        assert_ne!(cell, SharedEngineReading::new());
    }
}
