//! The exchange's pure rules: how long to back off, and whether and when another attempt may
//! start.

use super::Limits;
use std::time::{Duration, Instant};

/// Exponential backoff before attempt `attempt + 1`: `base * 2^(attempt-1)`, capped at `cap`.
pub fn backoff(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let factor = 1u32 << (attempt.saturating_sub(1)).min(16);
    base.saturating_mul(factor).min(cap)
}

/// When the attempt after `attempts` counted ones may start, if one is allowed at all: within
/// `max_attempts`, and its backoff ending before the deadline (no attempt starts at or after it).
pub(super) fn next_attempt_at(limits: &Limits, attempts: u32, now: Instant) -> Option<Instant> {
    if attempts >= limits.max_attempts {
        return None;
    }
    let at = now + backoff(limits.backoff, limits.max_backoff, attempts);
    (at < limits.deadline).then_some(at)
}

/// Closes after the whole request was written that refuse the request as poison.
pub(super) const POISON_STRIKES: u32 = 2;
