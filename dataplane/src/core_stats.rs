//! Per-core routing statistics the control thread reads: single-writer atomics, one set per core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One core's routing statistics. Written only by its core (load and store, no locked
/// instruction); read by the control thread with relaxed loads.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CoreStats {
    report_age_max_micros: AtomicU64,
    decisions_with_report: AtomicU64,
    decisions_without_report: AtomicU64,
}

impl CoreStats {
    /// Fresh statistics.
    pub fn new() -> CoreStats {
        CoreStats::default()
    }

    /// Records one routing decision: the age of the oldest engine report among its candidates,
    /// or `None` when no candidate had a fresh report.
    pub fn decision(&self, oldest_report: Option<Duration>) {
        match oldest_report {
            Some(age) => {
                let micros = age.as_micros().min(u128::from(u64::MAX)) as u64;
                if micros > self.report_age_max_micros.load(Ordering::Relaxed) {
                    self.report_age_max_micros.store(micros, Ordering::Relaxed);
                }
                bump(&self.decisions_with_report);
            }
            None => bump(&self.decisions_without_report),
        }
    }

    /// The oldest engine report any decision on this core used.
    pub fn report_age_max(&self) -> Duration {
        Duration::from_micros(self.report_age_max_micros.load(Ordering::Relaxed))
    }

    /// Decisions (with a fresh report on some candidate, without any).
    pub fn decisions(&self) -> (u64, u64) {
        (
            self.decisions_with_report.load(Ordering::Relaxed),
            self.decisions_without_report.load(Ordering::Relaxed),
        )
    }
}

fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_oldest_age_and_counts() {
        let s = CoreStats::new();
        s.decision(Some(Duration::from_millis(30)));
        s.decision(Some(Duration::from_millis(90)));
        s.decision(Some(Duration::from_millis(10)));
        s.decision(None);
        assert_eq!(s.report_age_max(), Duration::from_millis(90));
        assert_eq!(s.decisions(), (3, 1));
    }
}
