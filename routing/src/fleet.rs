//! Fleet-wide routing facts every data core reads and writes directly (ADR 014): the
//! conversations' last replicas and the recent prefill demand of root prefixes
//! ([`FleetFacts`]). Both are lock-free atomics (from `inferrail-sync`): a core never waits for
//! another, and what one core routes is visible to the next decision on any core. Their time is
//! microseconds on a clock the caller keeps; nothing here reads a clock.

use inferrail_sync::{DemandSketch, SessionTable};
use std::time::Duration;

/// Session slots: 64 Ki conversations (512 KiB).
pub const SESSION_SLOTS: usize = 1 << 16;
/// Counters per row of the demand sketch.
pub const DEMAND_COLUMNS: usize = 2048;

/// Seconds as whole microseconds (negative and non-finite as 0).
pub fn secs_to_micros(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        (secs * 1e6).min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// Facts about conversations and prefixes shared by every core. Every `now_micros` given to
/// them must come from one clock (the data plane's `FleetClock`, a simulation's virtual time).
#[derive(Debug)]
pub struct FleetFacts {
    /// The replica key (low 32 bits) each conversation last went to.
    pub sessions: SessionTable,
    /// Recent prefill demand (µs) per root prefix.
    pub demand: DemandSketch,
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_become_whole_microseconds_and_nonsense_becomes_zero() {
        assert_eq!(secs_to_micros(1.5), 1_500_000);
        assert_eq!(secs_to_micros(2.5e-7), 0);
        assert_eq!(secs_to_micros(-1.0), 0);
        assert_eq!(secs_to_micros(f64::NAN), 0);
        assert_eq!(secs_to_micros(f64::INFINITY), 0);
        assert_eq!(secs_to_micros(1e300), u64::MAX);
    }
}
