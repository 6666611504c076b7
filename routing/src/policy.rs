//! The policy contract: a [`RoutingPolicy`] orders the candidates it is given and picks one.
//!
//! A policy never sees a replica that does not serve the request's model or has no room; it only
//! orders the ones it is given. Policies do no I/O and read no clock, so tests drive them with
//! made-up candidates. The implementations are in [`crate::policies`].

use crate::candidate::Candidate;
use crate::decision::{Pick, Row};
use crate::input::RouteInput;
use crate::rng::Rng;
use inferrail_config::PolicyKind;

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
