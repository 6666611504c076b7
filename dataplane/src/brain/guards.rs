//! The load guards, applied to every decision's rows (policies that honor them skip the rows
//! set aside; load-blind baselines ignore them).
//!
//! - Bounded load: no candidate that would hold more than `ceil((1 + epsilon) * (in_flight + 1)
//!   / n)` requests, `in_flight` summed over the `n` candidates. The least loaded candidate
//!   always qualifies: `min + 1 <= floor(total / n) + 1 = ceil((total + 1) / n)`.
//! - KV pressure: no candidate whose engine reports more than `kappa` of its KV cache used, for a
//!   prompt with more than `short_prompt_tokens` to compute there, unless every candidate the
//!   bounded-load guard left would be set aside (then this guard stands down).

use super::{Guard, RouteInput, Row};
use crate::policy::Candidate;

/// The most requests a candidate may hold after this one is routed.
pub fn bound(epsilon: f64, candidates: &[Candidate]) -> u64 {
    let total: u64 = candidates.iter().map(|c| u64::from(c.in_flight)).sum();
    let n = candidates.len().max(1) as f64;
    ((1.0 + epsilon) * (total as f64 + 1.0) / n).ceil() as u64
}

/// Sets aside the candidates a guard refuses (see the module docs).
pub fn apply(input: &RouteInput<'_>, candidates: &[Candidate], rows: &mut [Row]) {
    let params = input.params;
    let limit = bound(params.epsilon, candidates);
    for (c, r) in candidates.iter().zip(rows.iter_mut()) {
        if u64::from(c.in_flight) + 1 > limit {
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
