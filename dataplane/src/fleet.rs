//! Fleet-wide routing facts that every data core reads and writes directly (ADR 014): each
//! replica's requests in flight and queued prefill ([`FleetReplica`], carried by the replica's
//! spec across snapshots), the conversations' last replicas and the recent prefill demand of
//! root prefixes ([`FleetFacts`]). All are lock-free atomics: a core never waits for another, and
//! what one core routes is visible to the next decision on any core, with no snapshot delay.

use inferrail_sync::{DemandSketch, PrefillQueue, SessionTable};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Session slots: 64 Ki conversations (512 KiB).
pub const SESSION_SLOTS: usize = 1 << 16;
/// Counters per row of the demand sketch.
pub const DEMAND_COLUMNS: usize = 2048;

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

/// Seconds as whole microseconds (negative and non-finite as 0).
pub fn secs_to_micros(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        (secs * 1e6).min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// The clock of every fleet structure: microseconds since one start instant. `Copy`, so a
/// request's slot carries it without touching a shared reference count.
#[derive(Debug, Clone, Copy)]
pub struct FleetClock {
    epoch: Instant,
}

impl FleetClock {
    /// `at` in microseconds since the clock's start (0 before it).
    pub fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch)
            .as_micros()
            .min(u128::from(u64::MAX)) as u64
    }
}

/// Facts about conversations and prefixes shared by every core, and the clock they use.
#[derive(Debug)]
pub struct FleetFacts {
    /// The replica key (low 32 bits) each conversation last went to.
    pub sessions: SessionTable,
    /// Recent prefill demand (µs) per root prefix.
    pub demand: DemandSketch,
    /// The clock `now_micros` values are read from.
    pub clock: FleetClock,
}

impl FleetFacts {
    /// Empty facts; hot-prefix demand is counted over `window`.
    pub fn new(window: Duration) -> FleetFacts {
        FleetFacts {
            sessions: SessionTable::new(SESSION_SLOTS),
            demand: DemandSketch::new(
                window.as_micros().min(u128::from(u64::MAX)) as u64,
                DEMAND_COLUMNS,
            ),
            clock: FleetClock {
                epoch: Instant::now(),
            },
        }
    }

    /// `at` on [`FleetFacts::clock`].
    pub fn micros(&self, at: Instant) -> u64 {
        self.clock.micros(at)
    }
}
