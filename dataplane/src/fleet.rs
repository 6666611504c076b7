//! Fleet-wide load that every data core reads and writes directly (ADR 014): each replica's
//! requests in flight and queued prefill ([`FleetReplica`], carried by the replica's spec across
//! snapshots), and the [`FleetClock`] every fleet structure's microseconds are read on (the
//! routing crate's `FleetFacts`, sessions and prefix demand, take their time from it). All are
//! lock-free atomics: a core never waits for another, and what one core routes is visible to the
//! next decision on any core, with no snapshot delay.

use inferrail_routing::fleet::secs_to_micros;
use inferrail_sync::PrefillQueue;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// One replica's live load as the whole gateway sees it.
#[derive(Debug, Default)]
pub struct FleetReplica {
    in_flight: AtomicU32,
    prefill: PrefillQueue,
}

impl PartialEq for FleetReplica {
    /// Identity: two specs are equal only when they share the same counters.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl FleetReplica {
    /// Idle counters.
    pub fn new() -> FleetReplica {
        FleetReplica::default()
    }

    /// Requests in flight to the replica from every core.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Prefill still queued at `now_micros`, in seconds.
    pub fn queued_prefill_secs(&self, now_micros: u64) -> f64 {
        self.prefill.queued_micros(now_micros) as f64 / 1e6
    }

    /// Requests routed here still awaiting their first response byte.
    pub fn awaiting_first_byte(&self) -> u64 {
        self.prefill.awaiting()
    }

    /// A request was routed here with `prefill_secs` of estimated prefill.
    pub fn routed(&self, now_micros: u64, prefill_secs: f64) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.prefill.add(now_micros, secs_to_micros(prefill_secs));
    }

    /// A request routed here had its first response byte (or ended without one).
    pub fn first_byte(&self, now_micros: u64) {
        self.prefill.first_byte(now_micros);
    }

    /// A request routed here finished.
    pub fn finished(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
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
