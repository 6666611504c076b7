//! Building the [`Candidate`]s a decision chooses among, from plain readings. One builder for
//! every caller: the data cores and the admin's explain (through the data plane's `offers`, which
//! reads a snapshot), the shadow and replay tools, and the fleet simulation, so none of them
//! assembles a candidate its own way.

use crate::candidate::{Candidate, EngineView};
use std::time::Duration;

/// The gateway's own count of a replica's load when the candidate is built.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadReading {
    /// Requests in flight to it (routed, not finished), from every core.
    pub in_flight: u32,
    /// Requests waiting for its response head.
    pub pending: u32,
    /// Prompt tokens of requests in flight to it (tokenized ones).
    pub prompt_tokens: u64,
    /// Prefill the gateway has queued on it that has not drained yet, in seconds.
    pub queued_prefill_secs: f64,
}

/// The last load report of a replica's engine, whatever its age.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineReading {
    /// Requests running.
    pub running: f64,
    /// Requests waiting.
    pub waiting: f64,
    /// KV cache usage, 0..=1.
    pub kv_cache_usage: f64,
    /// How old the report is now (the caller subtracts; nothing here reads a clock).
    pub age: Duration,
}

/// The candidate for the replica at `index` (registry `key`): the gateway's `load`, and the
/// engine's report while it is at most `max_age` old (an older one is ignored). No cache
/// prediction yet (see [`annotate`]) and no tier cost (0 until tiers are tracked).
pub fn candidate(
    index: usize,
    key: u64,
    load: LoadReading,
    engine: Option<EngineReading>,
    max_age: Duration,
) -> Candidate {
    let engine = engine.and_then(|e| {
        (e.age <= max_age).then_some(EngineView {
            running: e.running,
            waiting: e.waiting,
            kv_cache_usage: e.kv_cache_usage,
            age_micros: e.age.as_micros().min(u128::from(u64::MAX)) as u64,
        })
    });
    Candidate {
        replica: index,
        key,
        in_flight: load.in_flight,
        pending: load.pending,
        prompt_tokens: load.prompt_tokens,
        engine,
        cached_tokens: None,
        queued_prefill_secs: load.queued_prefill_secs,
        tier_secs: 0.0,
    }
}

/// Puts the predicted cached tokens on each candidate: `cached(replica index)`, `None` when no
/// prediction was made for that replica.
pub fn annotate(candidates: &mut [Candidate], cached: impl Fn(usize) -> Option<u32>) {
    for c in candidates {
        c.cached_tokens = cached(c.replica);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load() -> LoadReading {
        LoadReading {
            in_flight: 3,
            pending: 2,
            prompt_tokens: 900,
            queued_prefill_secs: 0.25,
        }
    }

    fn report(age: Duration) -> EngineReading {
        EngineReading {
            running: 4.0,
            waiting: 1.0,
            kv_cache_usage: 0.5,
            age,
        }
    }

    #[test]
    fn a_candidate_carries_the_readings_and_a_fresh_report_only() {
        let max_age = Duration::from_millis(500);
        let c = candidate(
            4,
            77,
            load(),
            Some(report(Duration::from_millis(500))),
            max_age,
        );
        assert_eq!((c.replica, c.key), (4, 77));
        assert_eq!((c.in_flight, c.pending, c.prompt_tokens), (3, 2, 900));
        assert_eq!(c.queued_prefill_secs, 0.25);
        assert_eq!((c.cached_tokens, c.tier_secs), (None, 0.0));
        let e = c
            .engine
            .expect("a report exactly max_age old is still fresh");
        assert_eq!((e.running, e.waiting, e.kv_cache_usage), (4.0, 1.0, 0.5));
        assert_eq!(e.age_micros, 500_000);
        assert_eq!(
            c.load(),
            5,
            "the engine's running + waiting exceeds the gateway's count"
        );
        let stale = candidate(
            4,
            77,
            load(),
            Some(report(Duration::from_millis(501))),
            max_age,
        );
        assert_eq!(stale.engine, None);
        assert_eq!(stale.load(), 3);
        assert_eq!(candidate(4, 77, load(), None, max_age).engine, None);
        let ancient = candidate(0, 1, load(), Some(report(Duration::MAX)), Duration::MAX);
        assert_eq!(ancient.engine.map(|e| e.age_micros), Some(u64::MAX));
    }

    #[test]
    fn annotate_sets_each_replicas_prediction() {
        let mut c: Vec<Candidate> = [2usize, 0, 5]
            .iter()
            .map(|&i| candidate(i, i as u64, load(), None, Duration::ZERO))
            .collect();
        annotate(&mut c, |r| (r != 0).then_some(r as u32 * 16));
        let got: Vec<Option<u32>> = c.iter().map(|c| c.cached_tokens).collect();
        assert_eq!(got, vec![Some(32), None, Some(80)]);
    }
}
