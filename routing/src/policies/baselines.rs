//! The load-based baselines: round robin, random, least request and power of two choices.
//! They ignore the guards and the predicted cache.

use crate::candidate::Candidate;
use crate::decision::{Pick, Row, Term};
use crate::input::RouteInput;
use crate::policy::RoutingPolicy;
use crate::rng::Rng;
use inferrail_config::PolicyKind;

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
            decided_by: Term::Load,
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
            decided_by: Term::Load,
            ..Pick::plain(index)
        }
    }
}
