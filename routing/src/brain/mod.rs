//! The routing brain: pricing, guards, sessions and hot prefixes, as pure functions of the
//! candidates a core offers and the fleet-wide facts (ADR 014). The cache-aware policies
//! (`prefix_hash`, `kv_aware`, `cost_model`) are in [`crate::policies::cache_aware`].
//!
//! One decision is [`decide`]: [`price`] every candidate (its predicted cache, the cost model's
//! estimate split into terms, the guards that set it aside), follow a conversation back to its
//! last replica while the guards allow it, else let the policy pick. The same function serves
//! routing and `/admin/explain`, so the two cannot disagree. After routing, [`commit`] records
//! what the decision changes in the fleet facts (the session's replica, the root prefix's demand).

pub mod guards;
#[cfg(test)]
mod tests;

use crate::candidate::Candidate;
use crate::cost::Estimate;
use crate::decision::{Decision, HotRoot, Pick, Row, Steering, Term};
use crate::fleet::secs_to_micros;
use crate::input::RouteInput;
use crate::policy::RoutingPolicy;
use crate::rendezvous::{fold, top_by_rendezvous};
use crate::rng::Rng;

/// The request's root prefix and how hot it is now.
fn hot_root(input: &RouteInput<'_>, replicas: usize) -> Option<HotRoot> {
    let prompt = input.prompt?;
    let blocks = input.params.hot_blocks as usize;
    let last = *prompt.hashes.get(blocks.checked_sub(1)?)?;
    let root = fold(last);
    let window = input.fleet.demand.window_micros().max(1) as f64;
    let demand = input.fleet.demand.estimate(root, input.now_micros) as f64 / window;
    let utilization = input.params.hot_utilization.max(f64::MIN_POSITIVE);
    let owners = if demand > utilization {
        ((demand / utilization).ceil() as usize).clamp(1, replicas.max(1)) as u32
    } else {
        0
    };
    Some(HotRoot {
        root,
        demand,
        owners,
        spreading: false,
    })
}

/// Whether a hot root should reach owners that do not hold it, read from the priced `rows`:
/// when no row holds the whole root (`root_tokens` of the `tokens`-token prompt), or when the
/// shortest queue among the rows that do is longer than computing the root afresh would take.
fn spreads(input: &RouteInput<'_>, rows: &[Row], tokens: u32, root_tokens: u32) -> bool {
    let cost = &input.params.cost;
    let saved = cost.prefill_secs(tokens, 0) - cost.prefill_secs(tokens - root_tokens, root_tokens);
    rows.iter()
        .filter(|r| r.cached_tokens >= root_tokens)
        .map(|r| r.estimate.queue)
        .reduce(f64::min)
        .is_none_or(|shortest| shortest > saved)
}

/// Cached blocks `c`'s pool would evict to take the prompt with `cached` tokens held there: its
/// new blocks (full blocks not held, plus a partial last block) beyond the pool's free ones. 0
/// without a prompt or a pool room.
fn evicted_blocks(input: &RouteInput<'_>, c: &Candidate, cached: u32) -> u32 {
    let (Some(p), Some(room)) = (input.prompt, c.room) else {
        return 0;
    };
    if p.block_size == 0 {
        return 0;
    }
    let full = p.tokens / p.block_size;
    let partial = u32::from(p.tokens % p.block_size != 0);
    let new_blocks = full.saturating_sub(cached / p.block_size) + partial;
    new_blocks.saturating_sub(room.free_blocks)
}

/// Prices every candidate: predicted and priced cache, the cost estimate and the work it would
/// really do, and the guards. Rows are in the candidates' order.
pub fn price(input: &RouteInput<'_>, candidates: &[Candidate]) -> (Vec<Row>, Option<HotRoot>) {
    let mut rows = Vec::with_capacity(candidates.len());
    let hot = price_into(input, candidates, &mut rows);
    (rows, hot)
}

/// [`price`] into `rows`: emptied first, then one row per candidate in the candidates' order;
/// its capacity is reused, so a caller that keeps the vector prices without allocating.
pub fn price_into(
    input: &RouteInput<'_>,
    candidates: &[Candidate],
    rows: &mut Vec<Row>,
) -> Option<HotRoot> {
    let params = input.params;
    let tokens = input.prompt_tokens();
    let mut hot = hot_root(input, candidates.len());
    rows.clear();
    rows.extend(candidates.iter().map(|c| {
        let cached = c.cached_tokens.unwrap_or(0).min(tokens);
        let running = c.engine.map_or(c.in_flight, |e| {
            (e.running.max(0.0).min(f64::from(u32::MAX)) as u32).max(c.in_flight)
        });
        let work_secs = params.cost.prefill_secs(tokens - cached, cached);
        let estimate = Estimate {
            queue: c.queued_prefill_secs
                + params.cost.decode_interference_secs * f64::from(running),
            prefill: work_secs,
            tier: c.tier_secs,
        };
        let evict_blocks = evicted_blocks(input, c, cached);
        let evict_secs = c.room.map_or(0.0, |room| {
            f64::from(evict_blocks)
                * f64::from(input.prompt.map_or(0, |p| p.block_size))
                * params.cost.prefill_token_secs
                * room.reuse.clamp(0.0, 1.0)
        });
        Row {
            set_aside: None,
            cached_tokens: cached,
            priced_cached: cached,
            hot_owner: false,
            estimate,
            work_secs,
            evict_secs,
            evict_blocks,
            spill_secs: 0.0,
            score: 0.0,
        }
    }));
    if let (Some(p), Some(h)) = (input.prompt, hot.as_mut()) {
        let root_tokens = (params.hot_blocks * p.block_size).min(p.cacheable());
        h.spreading = h.owners > 0 && spreads(input, rows, tokens, root_tokens);
        if h.spreading {
            for i in top_by_rendezvous(h.root, candidates, h.owners as usize) {
                let r = &mut rows[i];
                r.hot_owner = true;
                if root_tokens > r.cached_tokens {
                    r.priced_cached = root_tokens;
                    r.estimate.prefill =
                        params.cost.prefill_secs(tokens - root_tokens, root_tokens);
                }
            }
        }
    }
    let spill = params.spill_weight * mean_waiting(candidates);
    if spill > 0.0 {
        for r in rows.iter_mut() {
            r.spill_secs = spill * r.estimate.prefill;
        }
    }
    guards::apply(input, candidates, rows);
    hot
}

/// The candidates' mean count of requests waiting for a first byte (the gateway's `pending`):
/// by Little's law, about how many requests will arrive at a replica while one waits there,
/// so a prefill delays about that many others. 0 without candidates.
fn mean_waiting(candidates: &[Candidate]) -> f64 {
    if candidates.is_empty() {
        return 0.0;
    }
    let total: f64 = candidates.iter().map(|c| f64::from(c.pending)).sum();
    total / candidates.len() as f64
}

/// The conversation's last replica, when the request names a conversation, affinity is on, and
/// that replica is a candidate no guard set aside.
fn session_pick(input: &RouteInput<'_>, candidates: &[Candidate], rows: &[Row]) -> Option<Pick> {
    if !input.params.session_affinity {
        return None;
    }
    let key = input.fleet.sessions.get(input.session?)?;
    let index = candidates
        .iter()
        .zip(rows)
        .position(|(c, r)| c.key as u32 == key && r.set_aside.is_none())?;
    Some(Pick {
        index,
        steering: Steering::Session,
        decided_by: Term::Session,
    })
}

/// Decides among `candidates` (non-empty) with `policy`: prices them, follows the conversation
/// while the guards allow (policies that honor sessions), else the policy's pick. Changes no
/// shared state (see [`commit`]); the same inputs and random state give the same decision.
pub fn decide(
    policy: &mut dyn RoutingPolicy,
    input: &RouteInput<'_>,
    candidates: &[Candidate],
    rng: &mut Rng,
) -> Decision {
    decide_reusing(
        policy,
        input,
        candidates,
        rng,
        Vec::with_capacity(candidates.len()),
    )
}

/// [`decide`] with the decision's rows written into `rows` (emptied first, its capacity
/// reused): a caller that takes [`Decision::rows`] back after each decision decides without
/// allocating. The same inputs give the same decision as [`decide`].
pub fn decide_reusing(
    policy: &mut dyn RoutingPolicy,
    input: &RouteInput<'_>,
    candidates: &[Candidate],
    rng: &mut Rng,
    mut rows: Vec<Row>,
) -> Decision {
    let hot = price_into(input, candidates, &mut rows);
    let session = if policy.honors_sessions() {
        session_pick(input, candidates, &rows)
    } else {
        None
    };
    let pick = match session {
        Some(p) => p,
        None => policy.pick(input, candidates, &mut rows, rng),
    };
    Decision {
        winner: pick.index.min(candidates.len().saturating_sub(1)),
        steering: pick.steering,
        decided_by: pick.decided_by,
        rows,
        hot,
    }
}

/// Records what a routed decision changes in the fleet facts: the conversation's replica and
/// the root prefix's demand. Returns the prefill (seconds) to queue on the winner.
pub fn commit(input: &RouteInput<'_>, candidates: &[Candidate], decision: &Decision) -> f64 {
    let row = decision.winner_row();
    if let (Some(session), Some(c)) = (input.session, candidates.get(decision.winner)) {
        input.fleet.sessions.set(session, c.key as u32);
    }
    if let Some(h) = decision.hot {
        input
            .fleet
            .demand
            .add(h.root, secs_to_micros(row.work_secs), input.now_micros);
    }
    row.work_secs
}
