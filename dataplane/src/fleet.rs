//! Fleet-wide load that every data core reads and writes directly (ADR 014, ADR 016): each
//! replica's one load ledger ([`SharedLedger`] over inferrail-sync's `ReplicaLedger`: in flight,
//! waiting for a head, prompt tokens in flight, queued prefill, queued at the gateway; carried by
//! the replica's spec across snapshots), and the [`FleetClock`] every fleet structure's microseconds are read on (the
//! routing crate's `FleetFacts`, sessions and prefix demand, take their time from it). All are
//! lock-free atomics: a core never waits for another, and what one core routes is visible to the
//! next decision on any core, with no snapshot delay.

use inferrail_sync::ReplicaLedger;
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
