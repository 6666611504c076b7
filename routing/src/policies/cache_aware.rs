//! The cache-aware policies. Each orders the candidates its own way and reports what decided.

use crate::candidate::Candidate;
use crate::decision::{Pick, Row, Steering, Term};
use crate::input::RouteInput;
use crate::policies::baselines::PowerOfTwo;
use crate::policy::RoutingPolicy;
use crate::rendezvous::{fold, rendezvous, top_by_rendezvous};
use crate::rng::Rng;
use inferrail_config::PolicyKind;

/// Among the rows no guard set aside, the best by `better` (a strict "is better than"); equal
/// ones go to fewer in flight, then to chance (reservoir sampling, one draw per tie). Falls back
/// to every row when all were set aside (cannot happen with the guards' guarantees, but a
/// policy must always answer). Returns the winner and the best of the others (the runner-up).
/// One pass for the winner and one for the runner-up; no allocation.
fn best_of(
    candidates: &[Candidate],
    rows: &[Row],
    rng: &mut Rng,
    better: impl Fn(&Row, &Row) -> bool,
) -> (usize, Option<usize>) {
    let any_open = rows.iter().any(|r| r.set_aside.is_none());
    let eligible = |i: usize| !any_open || rows[i].set_aside.is_none();
    let mut winner: Option<usize> = None;
    let mut ties = 0usize;
    for i in (0..rows.len()).filter(|&i| eligible(i)) {
        let Some(w) = winner else {
            winner = Some(i);
            ties = 1;
            continue;
        };
        let (row, best) = (&rows[i], &rows[w]);
        let replace = if better(row, best) {
            ties = 1;
            true
        } else if better(best, row) {
            false
        } else if candidates[i].in_flight < candidates[w].in_flight {
            ties = 1;
            true
        } else if candidates[i].in_flight > candidates[w].in_flight {
            false
        } else {
            ties += 1;
            rng.below(ties) == 0
        };
        if replace {
            winner = Some(i);
        }
    }
    let winner = winner.unwrap_or(0);
    let runner_up = (0..rows.len())
        .filter(|&i| eligible(i) && i != winner)
        .fold(None::<usize>, |acc, i| match acc {
            Some(a) if !better(&rows[i], &rows[a]) => Some(a),
            _ => Some(i),
        });
    (winner, runner_up)
}

/// `cost_model`: the lowest estimated time to first token, `W + P(u, c) + X`, plus the
/// eviction the placement causes (`E`, [`Row::evict_secs`]) and the prefill's cost to the
/// requests behind it (`S`, [`Row::spill_secs`]), among the candidates the guards allow. `E` is
/// 0 wherever the pool has room, so a new prefix goes where it evicts nothing unless the time
/// saved elsewhere is worth more than the cached blocks it would push out; `S` is 0 with nothing
/// waiting (or at spill weight 0) and grows with the queues, so under congestion a cached
/// prefix weighs more against a shorter queue.
#[derive(Debug, Default)]
pub struct CostModel;

impl RoutingPolicy for CostModel {
    fn kind(&self) -> PolicyKind {
        PolicyKind::CostModel
    }

    fn pick(
        &mut self,
        input: &RouteInput<'_>,
        candidates: &[Candidate],
        rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick {
        for r in rows.iter_mut() {
            r.score = r.estimate.total() + r.evict_secs + r.spill_secs;
        }
        let (winner, runner_up) = best_of(candidates, rows, rng, |a, b| a.score < b.score);
        let w = rows[winner];
        let decided_by = match runner_up {
            None => Term::OnlyChoice,
            Some(r) if rows[r].score == w.score => Term::TieBreak,
            Some(r) => {
                let o = rows[r].estimate;
                let gains = [
                    (o.queue - w.estimate.queue, Term::Queue),
                    (o.prefill - w.estimate.prefill, Term::Prefill),
                    (o.tier - w.estimate.tier, Term::Tier),
                    (rows[r].evict_secs - w.evict_secs, Term::Evict),
                    (rows[r].spill_secs - w.spill_secs, Term::Spill),
                ];
                gains
                    .iter()
                    .fold(gains[0], |a, g| if g.0 > a.0 { *g } else { a })
                    .1
            }
        };
        let steering = if w.hot_owner && w.priced_cached > w.cached_tokens {
            Steering::HotPrefix
        } else if input.prompt.is_none() {
            Steering::NoPrediction
        } else {
            Steering::Policy
        };
        Pick {
            index: winner,
            steering,
            decided_by,
        }
    }
}

/// `kv_aware`: the best `cache_weight * cached/prompt - load_weight * in_flight/busiest` among
/// the candidates the guards allow.
#[derive(Debug, Default)]
pub struct KvAware;

impl RoutingPolicy for KvAware {
    fn kind(&self) -> PolicyKind {
        PolicyKind::KvAware
    }

    fn pick(
        &mut self,
        input: &RouteInput<'_>,
        candidates: &[Candidate],
        rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick {
        let p = input.params;
        let tokens = f64::from(input.prompt_tokens().max(1));
        let busiest = f64::from(
            candidates
                .iter()
                .map(|c| c.in_flight)
                .max()
                .unwrap_or(0)
                .max(1),
        );
        let cache = |r: &Row| p.cache_weight * f64::from(r.cached_tokens) / tokens;
        let load = |c: &Candidate| p.load_weight * f64::from(c.in_flight) / busiest;
        for (r, c) in rows.iter_mut().zip(candidates) {
            r.score = cache(r) - load(c);
        }
        let (winner, runner_up) = best_of(candidates, rows, rng, |a, b| a.score > b.score);
        let decided_by = match runner_up {
            None => Term::OnlyChoice,
            Some(r) if rows[r].score == rows[winner].score => Term::TieBreak,
            Some(r) => {
                let by_cache = cache(&rows[winner]) - cache(&rows[r]);
                let by_load = load(&candidates[r]) - load(&candidates[winner]);
                if by_cache >= by_load {
                    Term::Cache
                } else {
                    Term::Load
                }
            }
        };
        Pick {
            index: winner,
            steering: if input.prompt.is_none() {
                Steering::NoPrediction
            } else {
                Steering::Policy
            },
            decided_by,
        }
    }
}

/// `prefix_hash`: rendezvous hashing on the prompt's first `prefix_hash.blocks` blocks, whatever
/// the load; power of two choices for prompts without a full block.
#[derive(Debug, Default)]
pub struct PrefixHash;

impl RoutingPolicy for PrefixHash {
    fn kind(&self) -> PolicyKind {
        PolicyKind::PrefixHash
    }

    fn honors_sessions(&self) -> bool {
        false
    }

    fn pick(
        &mut self,
        input: &RouteInput<'_>,
        candidates: &[Candidate],
        rows: &mut [Row],
        rng: &mut Rng,
    ) -> Pick {
        let key = input.prompt.and_then(|p| {
            let n = (input.params.prefix_blocks as usize).min(p.hashes.len());
            n.checked_sub(1).map(|last| fold(p.hashes[last]))
        });
        let Some(key) = key else {
            let mut p2c = PowerOfTwo;
            let index = p2c.pick(input, candidates, rows, rng).index;
            return Pick {
                index,
                steering: Steering::NoPrefix,
                decided_by: Term::Load,
            };
        };
        for (r, c) in rows.iter_mut().zip(candidates) {
            r.score = rendezvous(key, c.key) as f64;
        }
        let index = top_by_rendezvous(key, candidates, 1)
            .first()
            .copied()
            .unwrap_or(0);
        Pick {
            index,
            steering: Steering::Policy,
            decided_by: Term::Hash,
        }
    }
}
