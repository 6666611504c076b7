//! What one decision reads besides the candidates: the model's routing settings
//! ([`BrainParams`]), the prompt ([`PromptView`]) and the request with the fleet facts and the
//! time ([`RouteInput`]).

use crate::fleet::FleetFacts;
use inferrail_config::CostModelParams;
use inferrail_sync::BlockHash;

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
    /// cost_model: spill weight (>= 0, default 0.25; 0 prices only the request's own time to
    /// first token).
    pub spill_weight: f64,
    /// Prompts with at most this many tokens to compute pass the KV-pressure guard.
    pub short_prompt_tokens: u32,
    /// Cost model coefficients.
    pub cost: CostModelParams,
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
            spill_weight: routing.spill_weight,
            short_prompt_tokens: routing.short_prompt_tokens,
            cost: *cost,
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
