//! The load guards, applied to every decision's rows (policies that honor them skip the rows
//! set aside; load-blind baselines ignore them).
//!
//! - Bounded load: no candidate that would hold more than [`limit`] requests, the larger of the
//!   bound `ceil((1 + epsilon) * (in_flight + 1) / n)` (`in_flight` summed over the `n`
//!   candidates) and `bounded_load_floor`. The least loaded candidate always qualifies:
//!   `min + 1 <= floor(total / n) + 1 = ceil((total + 1) / n)`. The floor keeps the guard out of
//!   the way at low absolute load, where the bound binds on replicas nothing overloads (3
//!   replicas, 2 requests in flight: the bound is 2) and would push a warm prefix to a cold
//!   replica; the cost model already prices queueing there (ADR 014, amended).
//! - KV pressure (off at the default `kappa` of 1, ADR 026): no candidate whose engine reports
//!   more than `kappa` of its KV cache used, for a prompt with more than `short_prompt_tokens`
//!   to compute there, unless every candidate the bounded-load guard left would be set aside
//!   (then this guard stands down).

use crate::candidate::Candidate;
use crate::decision::{Guard, Row};
use crate::input::RouteInput;

/// The bound of consistent hashing with bounded loads: `ceil((1 + epsilon) * (total + 1) / n)`,
/// `total` the requests in flight over the `n` candidates. Without the floor; see [`limit`].
pub fn bound(epsilon: f64, candidates: &[Candidate]) -> u64 {
    let total: u64 = candidates.iter().map(|c| u64::from(c.in_flight)).sum();
    let n = candidates.len().max(1) as f64;
    ((1.0 + epsilon) * (total as f64 + 1.0) / n).ceil() as u64
}

/// The most requests a candidate may hold after this one is routed: `max(bound, floor)` (see
/// [`bound`]); a floor of 0 or 1 leaves the bound alone.
pub fn limit(epsilon: f64, floor: u64, candidates: &[Candidate]) -> u64 {
    bound(epsilon, candidates).max(floor)
}

/// Sets aside the candidates a guard refuses (see the module docs).
pub fn apply(input: &RouteInput<'_>, candidates: &[Candidate], rows: &mut [Row]) {
    let params = input.params;
    let most = limit(params.epsilon, params.bounded_load_floor, candidates);
    for (c, r) in candidates.iter().zip(rows.iter_mut()) {
        if u64::from(c.in_flight) + 1 > most {
            r.set_aside = Some(Guard::BoundedLoad);
        }
    }
    let tokens = input.prompt_tokens();
    let pressed = |c: &Candidate, r: &Row| {
        let to_compute = tokens.saturating_sub(r.cached_tokens);
        to_compute > params.short_prompt_tokens
            && c.engine.is_some_and(|e| e.kv_cache_usage > params.kappa)
    };
    let open = candidates
        .iter()
        .zip(rows.iter())
        .filter(|(_, r)| r.set_aside.is_none());
    let all_pressed = open.clone().all(|(c, r)| pressed(c, r));
    if all_pressed {
        return;
    }
    for (c, r) in candidates.iter().zip(rows.iter_mut()) {
        if r.set_aside.is_none() && pressed(c, r) {
            r.set_aside = Some(Guard::KvPressure);
        }
    }
}
