//! Routing policies: pure decision functions over the candidates a core offers them.
//!
//! A policy never sees a replica that does not serve the request's model or has no room on this
//! core; it only orders the ones it is given. Policies do no I/O and read no clock, so tests drive
//! them with made-up candidates. The load-based baselines live here; the cache-aware ones, and the
//! pricing and guards every decision goes through, in [`crate::brain`].

use crate::brain::{self, Pick, RouteInput, Row};
use crate::rng::Rng;
use inferrail_config::PolicyKind;

/// One replica a policy may choose, with the gateway's view of its load.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Candidate {
    /// Index of the replica in the snapshot.
    pub replica: usize,
    /// The replica's registry key (stable across snapshots).
    pub key: u64,
    /// Requests in flight to it (routed, not finished) from every core, read from the fleet-wide
    /// counters at candidate time.
    pub in_flight: u32,
    /// Requests waiting for its response head, counted the same way.
    pub pending: u32,
    /// Prompt tokens of requests in flight to it (tokenized ones), counted the same way.
    pub prompt_tokens: u64,
    /// The engine's own load, when its report is younger than `load.max_age`.
    pub engine: Option<EngineView>,
    /// Prompt tokens predicted to be in the replica's prefix cache, when a prediction was made.
    pub cached_tokens: Option<u32>,
    /// Prefill the gateway has queued on it that has not drained yet, in seconds.
    pub queued_prefill_secs: f64,
    /// Seconds to load its cached tokens from slower tiers (0 until tiers are tracked).
    pub tier_secs: f64,
}

impl Candidate {
    /// The request count load-based policies compare: the gateway's in-flight count, or the
    /// engine's running plus waiting requests when a fresh report shows more (traffic that did
    /// not come through this gateway, or requests the gateway already forgot).
    pub fn load(&self) -> u32 {
        match self.engine {
            Some(e) => {
                let engine = (e.running + e.waiting).max(0.0).min(f64::from(u32::MAX)) as u32;
                self.in_flight.max(engine)
            }
            None => self.in_flight,
        }
    }
}

/// An engine's own load as reported on its metrics page.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineView {
    /// Requests running.
    pub running: f64,
    /// Requests waiting.
    pub waiting: f64,
    /// KV cache usage, 0..=1.
    pub kv_cache_usage: f64,
    /// Age of the report when the candidate was built, in microseconds.
    pub age_micros: u64,
}

/// A routing policy. `pick` gets a non-empty slice (and its priced rows, same order) and returns
/// an index into it.
pub trait RoutingPolicy {
    /// Which policy this is (for metrics and explanations).
    fn kind(&self) -> PolicyKind;
    /// Chooses one of `candidates` (never empty). Policies that honor the guards skip rows a
    /// guard set aside; they may write their score into the rows.
    fn pick(
        &mut self,
        input: &RouteInput<'_>,
        candidates: &[Candidate],
        rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick;
    /// Whether a conversation goes back to its last replica (when affinity is on) before this
    /// policy is asked.
    fn honors_sessions(&self) -> bool {
        true
    }
}

/// Cycles through the candidates in replica order.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: usize,
}

impl RoutingPolicy for RoundRobin {
    fn kind(&self) -> PolicyKind {
        PolicyKind::RoundRobin
    }

    fn pick(
        &mut self,
        _input: &RouteInput<'_>,
        candidates: &[Candidate],
        _rows: &mut [Row],
        _rng: &mut Rng,
    ) -> Pick {
        // Rotate over replica indices, not slice positions, so a replica that is skipped for
        // lack of room does not shift the turn of the others.
        let turn = self.next;
        self.next = self.next.wrapping_add(1);
        let max = candidates.iter().map(|c| c.replica).max().unwrap_or(0) + 1;
        let want = turn % max;
        Pick::plain(
            candidates
                .iter()
                .position(|c| c.replica >= want)
                .unwrap_or(0),
        )
    }
}

/// Uniformly random.
#[derive(Debug, Default)]
pub struct Random;

impl RoutingPolicy for Random {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Random
    }

    fn pick(
        &mut self,
        _input: &RouteInput<'_>,
        candidates: &[Candidate],
        _rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick {
        Pick::plain(rng.below(candidates.len()))
    }
}

/// Fewest requests ([`Candidate::load`]); ties broken uniformly at random.
#[derive(Debug, Default)]
pub struct LeastRequest;

impl RoutingPolicy for LeastRequest {
    fn kind(&self) -> PolicyKind {
        PolicyKind::LeastRequest
    }

    fn pick(
        &mut self,
        _input: &RouteInput<'_>,
        candidates: &[Candidate],
        _rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick {
        let least = candidates.iter().map(Candidate::load).min().unwrap_or(0);
        let ties = candidates.iter().filter(|c| c.load() == least).count();
        let nth = rng.below(ties);
        let index = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.load() == least)
            .nth(nth)
            .map_or(0, |(i, _)| i);
        Pick {
            decided_by: brain::Term::Load,
            ..Pick::plain(index)
        }
    }
}

/// Power of two choices: two distinct random candidates, the less loaded wins (coin flip on ties).
#[derive(Debug, Default)]
pub struct PowerOfTwo;

impl RoutingPolicy for PowerOfTwo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::P2c
    }

    fn pick(
        &mut self,
        _input: &RouteInput<'_>,
        candidates: &[Candidate],
        _rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick {
        let n = candidates.len();
        if n == 1 {
            return Pick::plain(0);
        }
        let a = rng.below(n);
        let b = (a + 1 + rng.below(n - 1)) % n;
        let (la, lb) = (candidates[a].load(), candidates[b].load());
        let index = if la < lb || (la == lb && rng.next_u64() & 1 == 0) {
            a
        } else {
            b
        };
        Pick {
            decided_by: brain::Term::Load,
            ..Pick::plain(index)
        }
    }
}

/// The policy object for `kind`.
pub fn build(kind: PolicyKind) -> Box<dyn RoutingPolicy> {
    match kind {
        PolicyKind::RoundRobin => Box::new(RoundRobin::default()),
        PolicyKind::Random => Box::new(Random),
        PolicyKind::LeastRequest => Box::new(LeastRequest),
        PolicyKind::P2c => Box::new(PowerOfTwo),
        PolicyKind::PrefixHash => Box::new(brain::PrefixHash),
        PolicyKind::KvAware => Box::new(brain::KvAware),
        PolicyKind::CostModel => Box::new(brain::CostModel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brain::BrainParams;
    use crate::fleet::FleetFacts;
    use crate::rng::Rng;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};
    use std::sync::OnceLock;
    use std::time::Duration;

    /// Asks `p` without a prompt (load-based policies read only the candidates).
    fn choose(p: &mut dyn RoutingPolicy, c: &[Candidate], rng: &mut Rng) -> usize {
        static FLEET: OnceLock<FleetFacts> = OnceLock::new();
        let fleet = FLEET.get_or_init(|| FleetFacts::new(Duration::from_secs(10)));
        let params = BrainParams::default();
        let input = RouteInput {
            prompt: None,
            approx_tokens: 0,
            session: None,
            params: &params,
            fleet,
            now_micros: 0,
        };
        let mut rows = vec![Row::default(); c.len()];
        p.pick(&input, c, &mut rows, rng).index
    }

    fn cands(loads: &[u32]) -> Vec<Candidate> {
        loads
            .iter()
            .enumerate()
            .map(|(i, l)| Candidate {
                replica: i,
                in_flight: *l,
                ..Candidate::default()
            })
            .collect()
    }

    #[test]
    fn round_robin_cycles_and_skips_missing() {
        let mut rr = RoundRobin::default();
        let mut rng = Rng::new(1);
        let c = cands(&[0, 0, 0]);
        let picks: Vec<usize> = (0..6)
            .map(|_| c[choose(&mut rr, &c, &mut rng)].replica)
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        // Replica 1 has no room: its turns go to the next replica, the others keep theirs.
        let c2 = vec![c[0], c[2]];
        let picks: Vec<usize> = (0..3)
            .map(|_| c2[choose(&mut rr, &c2, &mut rng)].replica)
            .collect();
        assert_eq!(picks, vec![0, 2, 2]);
    }

    #[test]
    fn least_request_prefers_idle_and_spreads_ties() {
        let mut lr = LeastRequest;
        let mut rng = Rng::new(7);
        assert_eq!(choose(&mut lr, &cands(&[3, 1, 2]), &mut rng), 1);
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[choose(&mut lr, &cands(&[1, 1, 5]), &mut rng)] += 1;
        }
        assert!(seen[0] > 100 && seen[1] > 100 && seen[2] == 0, "{seen:?}");
    }

    #[test]
    fn p2c_never_picks_the_most_loaded_of_two() {
        let mut p = PowerOfTwo;
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            assert_eq!(choose(&mut p, &cands(&[9, 0]), &mut rng), 1);
        }
    }

    #[test]
    fn every_policy_has_its_object() {
        for kind in PolicyKind::ALL {
            assert_eq!(build(kind).kind(), kind);
        }
    }

    #[test]
    fn a_fresh_engine_report_showing_more_load_counts() {
        let mut c = cands(&[2, 3]);
        c[0].engine = Some(EngineView {
            running: 8.0,
            waiting: 1.0,
            ..EngineView::default()
        });
        assert_eq!(c[0].load(), 9);
        assert_eq!(c[1].load(), 3);
        let mut rng = Rng::new(1);
        assert_eq!(choose(&mut LeastRequest, &c, &mut rng), 1);
    }

    proptest! {
        #[test]
        fn every_policy_returns_an_index_in_range(
            loads in proptest::collection::vec(0u32..50, 1..12),
            seed in any::<u64>(),
            which in 0usize..4,
        ) {
            let kinds = [PolicyKind::RoundRobin, PolicyKind::Random, PolicyKind::LeastRequest, PolicyKind::P2c];
            let mut p = build(kinds[which]);
            let mut rng = Rng::new(seed);
            let c = cands(&loads);
            for _ in 0..20 {
                let i = choose(p.as_mut(), &c, &mut rng);
                prop_assert!(i < c.len());
            }
            // least_request agrees with a naive minimum.
            let mut lr = LeastRequest;
            let i = choose(&mut lr, &c, &mut rng);
            prop_assert_eq!(c[i].in_flight, *loads.iter().min().unwrap());
        }
    }
}
