//! The vocabulary of one routing decision: how each candidate was priced ([`Row`]), the guard
//! that set one aside ([`Guard`]), what a policy picked ([`Pick`]) and why ([`Steering`],
//! [`Term`]), and the whole [`Decision`] explain shows. Plain data, shared by the policies and
//! the brain so neither imports the other.

use crate::cost::Estimate;

/// A guard that set a candidate aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// It would hold more than `max(ceil((1 + epsilon) * (in_flight + 1) / n), bounded_load_floor)`
    /// requests.
    BoundedLoad,
    /// Its KV cache is fuller than `kappa` and this prompt is long there.
    KvPressure,
}

impl Guard {
    /// Every guard, in metrics order.
    pub const ALL: [Guard; 2] = [Guard::BoundedLoad, Guard::KvPressure];

    /// The metrics / explain label.
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::BoundedLoad => "bounded_load",
            Guard::KvPressure => "kv_pressure",
        }
    }
}

/// Why the winner was chosen, beyond the policy's own ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// The policy's ordering alone.
    Policy,
    /// The conversation went back to its last replica.
    Session,
    /// A hot root prefix's extra owner, priced as if it held the prefix.
    HotPrefix,
    /// prefix_hash with no full block to hash: power of two choices.
    NoPrefix,
    /// No tokenized prompt: priced without a cache prediction.
    NoPrediction,
}

impl Steering {
    /// Every reason, in metrics order.
    pub const ALL: [Steering; 5] = [
        Steering::Policy,
        Steering::Session,
        Steering::HotPrefix,
        Steering::NoPrefix,
        Steering::NoPrediction,
    ];

    /// The metrics / explain label.
    pub fn as_str(self) -> &'static str {
        match self {
            Steering::Policy => "policy",
            Steering::Session => "session",
            Steering::HotPrefix => "hot_prefix",
            Steering::NoPrefix => "no_prefix",
            Steering::NoPrediction => "no_prediction",
        }
    }
}

/// What separated the winner from the runner-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    /// cost_model: the queue term (`W`).
    Queue,
    /// cost_model: the prefill term (`P`).
    Prefill,
    /// cost_model: the tier term (`X`).
    Tier,
    /// cost_model: the eviction the placement causes elsewhere in the pool.
    Evict,
    /// kv_aware: the cached fraction.
    Cache,
    /// kv_aware or a load-based policy: the load.
    Load,
    /// prefix_hash: the rendezvous hash.
    Hash,
    /// The conversation's last replica.
    Session,
    /// Only one candidate was left.
    OnlyChoice,
    /// cost_model: the prefill's cost to the requests queued behind it ([`Row::spill_secs`]).
    Spill,
    /// Equal on every term: fewer in flight, then chance.
    TieBreak,
    /// A policy without terms (round robin, random).
    Policy,
}

impl Term {
    /// The explain label.
    pub fn as_str(self) -> &'static str {
        match self {
            Term::Queue => "queue",
            Term::Prefill => "prefill",
            Term::Tier => "tier",
            Term::Evict => "evict",
            Term::Spill => "spill",
            Term::Cache => "cache",
            Term::Load => "load",
            Term::Hash => "hash",
            Term::Session => "session",
            Term::OnlyChoice => "only_choice",
            Term::TieBreak => "tie_break",
            Term::Policy => "policy",
        }
    }
}

/// One candidate as a decision priced it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Row {
    /// The guard that set it aside, if any.
    pub set_aside: Option<Guard>,
    /// Tokens predicted in its prefix cache.
    pub cached_tokens: u32,
    /// Tokens priced as cached: the prediction, or the whole root prefix for a hot root's owner.
    pub priced_cached: u32,
    /// An owner of the request's hot root prefix.
    pub hot_owner: bool,
    /// The cost model's estimate (with `priced_cached`).
    pub estimate: Estimate,
    /// The prefill it would really compute (with `cached_tokens`), in seconds.
    pub work_secs: f64,
    /// What placing the prompt there costs other requests: the blocks its pool would evict for
    /// the prompt's new blocks, priced at their recompute time (`prefill_token_secs` a token)
    /// times the replica's reuse share; 0 with room to spare or without a pool room. cost_model
    /// adds it to the estimate when it compares candidates (it is not part of the request's
    /// own time to first token).
    pub evict_secs: f64,
    /// Blocks its pool would evict for the prompt (0 without a pool room).
    pub evict_blocks: u32,
    /// What its prefill costs the requests that will queue behind it: `spill_weight * L *
    /// estimate.prefill`, with `L` the candidates' mean count of requests waiting for a first
    /// byte; 0 at the default weight of 0. cost_model adds it to the estimate when it compares
    /// candidates (like `evict_secs`, it is not the request's own time to first token).
    pub spill_secs: f64,
    /// The policy's own score (kv_aware's score, prefix_hash's rendezvous weight; 0 otherwise).
    pub score: f64,
}

/// The request's root prefix and its recent demand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HotRoot {
    /// The root prefix's key (from the hash of its last block).
    pub root: u64,
    /// Recent prefill demand, as a share of one replica's time.
    pub demand: f64,
    /// Owners it gets (0 when it is not hot).
    pub owners: u32,
    /// Whether owners that do not hold the root are priced as holding it: true when no
    /// candidate holds the whole root yet, or when the shortest queue among those that do is
    /// longer than computing the root would take. A hot prefix spreads when the queue says so,
    /// not on demand alone.
    pub spreading: bool,
}

/// A policy's choice among the candidates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick {
    /// Index into the candidates.
    pub index: usize,
    /// Why, beyond the ordering.
    pub steering: Steering,
    /// What separated the winner from the runner-up.
    pub decided_by: Term,
}

impl Pick {
    /// A choice by a policy without terms.
    pub fn plain(index: usize) -> Pick {
        Pick {
            index,
            steering: Steering::Policy,
            decided_by: Term::Policy,
        }
    }
}

/// One routing decision, with everything explain shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index of the winner in the candidates.
    pub winner: usize,
    /// Why it won, beyond the ordering.
    pub steering: Steering,
    /// What separated it from the runner-up.
    pub decided_by: Term,
    /// Every candidate as priced, in the candidates' order.
    pub rows: Vec<Row>,
    /// The request's root prefix, when it has one.
    pub hot: Option<HotRoot>,
}

impl Decision {
    /// The winner's row.
    pub fn winner_row(&self) -> Row {
        self.rows.get(self.winner).copied().unwrap_or_default()
    }
}
