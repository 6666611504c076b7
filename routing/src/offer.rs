//! Building the [`Candidate`]s a decision chooses among, from plain readings. One builder for
//! every caller: the data cores and the admin's explain (through the data plane's `offers`, which
//! reads a snapshot), the shadow and replay tools, and the fleet simulation, so none of them
//! assembles a candidate its own way.

use crate::candidate::{Candidate, EngineView, PoolRoom};
use inferrail_config::CostModelParams;
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
    /// Prefill the gateway has queued on it: the estimated prefill of its requests still awaiting
    /// their first byte, summed, in seconds ([`Candidate::queued_prefill_secs`]).
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
    /// The gateway's own requests in flight to the replica when the report was received.
    pub own_in_flight: u32,
}

/// The candidate for the replica at `index` (registry `key`): the gateway's `load`, and the
/// engine's report while it is at most `max_age` old (an older one is ignored). No cache
/// prediction yet and no tier cost (both come with [`annotate`]).
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
            own_in_flight: e.own_in_flight,
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
        room: None,
    }
}

/// The leading tokens of a prompt a replica holds, by the tier its engine gets each from. The
/// engine recomputes none of them: GPU tokens are in its prefix cache, and vLLM's offloading
/// connector loads CPU and storage tokens back instead of computing them again.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HeldTokens {
    /// Tokens in the engine's own (GPU) cache.
    pub gpu: u32,
    /// Tokens loaded from host memory.
    pub cpu: u32,
    /// Tokens loaded from a slower tier.
    pub storage: u32,
    /// The replica's pool room at the lookup (`None` when the index did not say).
    pub room: Option<PoolRoom>,
}

impl HeldTokens {
    /// `tokens` held on the GPU, none offloaded (the approximate index's only answer).
    pub fn on_gpu(tokens: u32) -> HeldTokens {
        HeldTokens {
            gpu: tokens,
            ..HeldTokens::default()
        }
    }

    /// Every held token, whatever its tier: what the engine will not recompute (saturating).
    pub fn cached(&self) -> u32 {
        self.gpu
            .saturating_add(self.cpu)
            .saturating_add(self.storage)
    }
}

/// Puts each replica's prediction on its candidate: `held(replica index)`, `None` when no
/// prediction was made for that replica. A candidate gets `cached_tokens` = every held token
/// ([`HeldTokens::cached`]) and `tier_secs` = the time to load its offloaded ones at `cost`'s
/// per-token rates ([`CostModelParams::tier_secs`]) and `room` = its pool room; without a
/// prediction, `None`, 0 and `None`.
pub fn annotate(
    candidates: &mut [Candidate],
    cost: &CostModelParams,
    held: impl Fn(usize) -> Option<HeldTokens>,
) {
    for c in candidates {
        let h = held(c.replica);
        c.cached_tokens = h.map(|h| h.cached());
        c.tier_secs = h.map_or(0.0, |h| cost.tier_secs(h.cpu, h.storage));
        c.room = h.and_then(|h| h.room);
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
            own_in_flight: 2,
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
        assert_eq!((e.age_micros, e.own_in_flight), (500_000, 2));
        assert_eq!(
            c.load(),
            6,
            "3 of its own now, plus the 5 - 2 the engine ran beyond its own 2 at the report"
        );
        let mut mine = report(Duration::ZERO);
        mine.own_in_flight = 9;
        let c = candidate(4, 77, load(), Some(mine), max_age);
        assert_eq!(
            c.load(),
            3,
            "the report's requests were all its own: none from others"
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
    fn annotate_sets_each_replicas_prediction_and_prices_its_offloaded_tokens() {
        let mut c: Vec<Candidate> = [2usize, 0, 5, 7]
            .iter()
            .map(|&i| candidate(i, i as u64, load(), None, Duration::ZERO))
            .collect();
        let cost = CostModelParams {
            cpu_load_token_secs: 1e-6,
            storage_load_token_secs: 1e-5,
            ..CostModelParams::default()
        };
        annotate(&mut c, &cost, |r| match r {
            2 => Some(HeldTokens::on_gpu(32)),
            5 => Some(HeldTokens {
                gpu: 16,
                cpu: 48,
                storage: 16,
                room: None,
            }),
            7 => Some(HeldTokens {
                gpu: u32::MAX,
                cpu: 1,
                storage: 0,
                room: None,
            }),
            _ => None,
        });
        let got: Vec<Option<u32>> = c.iter().map(|c| c.cached_tokens).collect();
        assert_eq!(got, vec![Some(32), None, Some(80), Some(u32::MAX)]);
        assert_eq!((c[0].tier_secs, c[1].tier_secs), (0.0, 0.0));
        assert!((c[2].tier_secs - (48.0 * 1e-6 + 16.0 * 1e-5)).abs() < 1e-15);
        // A second annotation replaces the first, tier cost included.
        annotate(&mut c, &cost, |_| None);
        assert!(c
            .iter()
            .all(|c| c.cached_tokens.is_none() && c.tier_secs == 0.0));
    }
}
