//! The routing brain: the cache-aware policies (`prefix_hash`, `kv_aware`, `cost_model`), the
//! load guards, hot prefix replication and session affinity, as pure functions of the candidates
//! a core offers and the fleet-wide facts (ADR 014).
//!
//! One decision is [`decide`]: [`price`] every candidate (its predicted cache, the cost model's
//! estimate split into terms, the guards that set it aside), follow a conversation back to its
//! last replica while the guards allow it, else let the policy pick. The same function serves
//! routing and `/admin/explain`, so the two cannot disagree. After routing, [`commit`] records
//! what the decision changes in the fleet facts (the session's replica, the root prefix's demand).

pub mod cost;
pub mod guards;
mod policies;
#[cfg(test)]
mod tests;

pub use cost::{CostParams, Estimate};
pub use policies::{CostModel, KvAware, PrefixHash};

use crate::fleet::{secs_to_micros, FleetFacts};
use crate::policy::{Candidate, RoutingPolicy};
use crate::rng::Rng;
use inferrail_shards::prefix_hash::BlockHash;

/// One model's routing settings (from `routing` and the model's own `cost_model`).
#[derive(Debug, Clone, PartialEq)]
pub struct BrainParams {
    /// Bounded load slack `epsilon` (> 0).
    pub epsilon: f64,
    /// Bounded load floor (>= 1): the guard never sets aside a candidate that would hold at most
    /// this many requests. 1 is the plain bound.
    pub bounded_load_floor: u64,
    /// KV pressure threshold `kappa` (fraction of the KV cache used).
    pub kappa: f64,
    /// Prompts with at most this many tokens to compute pass the KV-pressure guard.
    pub short_prompt_tokens: u32,
    /// Cost model coefficients.
    pub cost: CostParams,
    /// kv_aware: weight of the cached fraction.
    pub cache_weight: f64,
    /// kv_aware: weight of the load relative to the busiest candidate.
    pub load_weight: f64,
    /// prefix_hash: leading blocks hashed.
    pub prefix_blocks: u32,
    /// Hot prefix: leading blocks that name a root prefix.
    pub hot_blocks: u32,
    /// Hot prefix: share of one replica a root may need before it gets more owners.
    pub hot_utilization: f64,
    /// Conversations go back to their last replica while the guards allow it.
    pub session_affinity: bool,
}

impl BrainParams {
    /// The settings for `model` (its own `cost_model` over `routing.cost_model`).
    pub fn from_config(
        routing: &inferrail_config::Routing,
        model: Option<&inferrail_config::Model>,
    ) -> BrainParams {
        let cost = model
            .and_then(|m| m.cost_model.as_ref())
            .unwrap_or(&routing.cost_model);
        BrainParams {
            epsilon: routing.epsilon,
            bounded_load_floor: routing.bounded_load_floor.max(1),
            kappa: routing.kappa,
            short_prompt_tokens: routing.short_prompt_tokens,
            cost: CostParams::from(cost),
            cache_weight: routing.kv_aware.cache_weight,
            load_weight: routing.kv_aware.load_weight,
            prefix_blocks: routing.prefix_hash_blocks.max(1),
            hot_blocks: routing.hot_prefix.blocks.max(1),
            hot_utilization: routing.hot_prefix.utilization,
            session_affinity: routing.session_affinity,
        }
    }
}

impl Default for BrainParams {
    /// The config defaults.
    fn default() -> BrainParams {
        BrainParams::from_config(&inferrail_config::Routing::default(), None)
    }
}

/// The prompt as routing sees it: its length and full-block hashes.
#[derive(Debug, Clone, Copy)]
pub struct PromptView<'a> {
    /// Prompt tokens.
    pub tokens: u32,
    /// Hashes of its full blocks, in order.
    pub hashes: &'a [BlockHash],
    /// Tokens per block.
    pub block_size: u32,
}

impl PromptView<'_> {
    /// Most tokens an engine can find cached for this prompt (it always computes the last one).
    pub fn cacheable(&self) -> u32 {
        if self.tokens == 0 || self.block_size == 0 {
            return 0;
        }
        ((self.tokens - 1) / self.block_size) * self.block_size
    }
}

/// Everything one decision reads besides the candidates.
#[derive(Debug, Clone, Copy)]
pub struct RouteInput<'a> {
    /// The tokenized prompt, when a prediction was made.
    pub prompt: Option<PromptView<'a>>,
    /// A rough prompt length (body bytes / 4) used when there is no tokenized prompt.
    pub approx_tokens: u32,
    /// The conversation's hash, when the request names one (`x-session-id` or `user`).
    pub session: Option<u64>,
    /// The model's settings.
    pub params: &'a BrainParams,
    /// Sessions and prefix demand, shared by every core.
    pub fleet: &'a FleetFacts,
    /// Now, on the fleet facts' clock.
    pub now_micros: u64,
}

impl RouteInput<'_> {
    /// Prompt tokens (tokenized, else the rough estimate).
    pub fn prompt_tokens(&self) -> u32 {
        self.prompt.map_or(self.approx_tokens, |p| p.tokens)
    }
}

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

/// Folds a block hash into the 64-bit key rendezvous hashing and the demand sketch use.
pub fn fold(hash: BlockHash) -> u64 {
    (hash.0 as u64) ^ ((hash.0 >> 64) as u64)
}

/// A well-mixed 64-bit weight of (`key`, `replica`) for rendezvous hashing.
pub fn rendezvous(key: u64, replica: u64) -> u64 {
    let mut h = key ^ replica.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

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
    })
}

/// Prices every candidate: predicted and priced cache, the cost estimate and the work it would
/// really do, and the guards. Rows are in the candidates' order.
pub fn price(input: &RouteInput<'_>, candidates: &[Candidate]) -> (Vec<Row>, Option<HotRoot>) {
    let params = input.params;
    let tokens = input.prompt_tokens();
    let hot = hot_root(input, candidates.len());
    let owners = match hot {
        Some(h) if h.owners > 0 => {
            policies::top_by_rendezvous(h.root, candidates, h.owners as usize)
        }
        _ => Vec::new(),
    };
    let root_tokens = match (input.prompt, hot) {
        (Some(p), Some(_)) => (params.hot_blocks * p.block_size).min(p.cacheable()),
        _ => 0,
    };
    let mut rows: Vec<Row> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cached = c.cached_tokens.unwrap_or(0).min(tokens);
            let hot_owner = owners.contains(&i);
            let priced = if hot_owner {
                cached.max(root_tokens)
            } else {
                cached
            };
            let running = c.engine.map_or(c.in_flight, |e| {
                (e.running.max(0.0).min(f64::from(u32::MAX)) as u32).max(c.in_flight)
            });
            let work_secs = params.cost.prefill_secs(tokens - cached, cached);
            let estimate = Estimate {
                queue: c.queued_prefill_secs
                    + params.cost.decode_interference_secs * f64::from(running),
                prefill: if priced == cached {
                    work_secs
                } else {
                    params.cost.prefill_secs(tokens - priced, priced)
                },
                tier: c.tier_secs,
            };
            Row {
                set_aside: None,
                cached_tokens: cached,
                priced_cached: priced,
                hot_owner,
                estimate,
                work_secs,
                score: 0.0,
            }
        })
        .collect();
    guards::apply(input, candidates, &mut rows);
    (rows, hot)
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
    let (mut rows, hot) = price(input, candidates);
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
