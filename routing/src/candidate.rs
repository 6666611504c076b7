//! What a routing decision chooses among: one [`Candidate`] per replica that may take the
//! request, with the gateway's and the engine's view of its load. Built by [`crate::offer`].

/// One replica a policy may choose, with the gateway's view of its load.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Candidate {
    /// Index of the replica in the snapshot.
    pub replica: usize,
    /// The replica's registry key (stable across snapshots).
    pub key: u64,
    /// Requests in flight to it (routed, not finished) from every core, read from the fleet-wide
    /// counters at candidate time.
    pub in_flight: u32,
    /// Requests waiting for its response head, counted the same way.
    pub pending: u32,
    /// Prompt tokens of requests in flight to it (tokenized ones), counted the same way.
    pub prompt_tokens: u64,
    /// The engine's own load, when its report is younger than `load.max_age`.
    pub engine: Option<EngineView>,
    /// Prompt tokens the replica is predicted not to recompute, when a prediction was made: those
    /// in its prefix cache and those its engine holds in an offload tier (CPU, storage).
    pub cached_tokens: Option<u32>,
    /// Prefill the gateway has queued on it, in seconds: the estimated prefill of the requests
    /// routed there whose first byte has not come yet, summed (ADR 025; it does not drain with
    /// time, so an engine slower than the cost model shows its backlog).
    pub queued_prefill_secs: f64,
    /// Seconds to load the offloaded part of `cached_tokens` back from its tiers (the cost
    /// model's `X`; 0 when nothing is offloaded or the replica has no KV events).
    pub tier_secs: f64,
    /// Its KV pool's room, when a prediction was made: what a new prompt can take there before
    /// cached blocks are evicted, and how much those are reused.
    pub room: Option<PoolRoom>,
}

/// A replica's KV pool as the index sees it at the decision: the cost model prices the
/// eviction a placement causes from it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PoolRoom {
    /// Blocks a new prompt can fill without evicting a cached one.
    pub free_blocks: u32,
    /// How likely a block this pool evicts next is to be asked for again (0..=1): the share of
    /// the blocks recently routed there that it already held, each hit weighted by how near
    /// eviction the block was, so hits on an always-recent shared prefix count for little.
    pub reuse: f64,
}

impl Candidate {
    /// The request count load-based policies compare: the gateway's own in-flight count now,
    /// plus, from a fresh engine report, the requests the engine ran or queued beyond the
    /// gateway's own in flight when the report came (other gateways' and clients' traffic, as
    /// of that report; never negative).
    pub fn load(&self) -> u32 {
        match self.engine {
            Some(e) => self.in_flight.saturating_add(e.others()),
            None => self.in_flight,
        }
    }
}

/// An engine's own load as reported on its metrics page.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineView {
    /// Requests running.
    pub running: f64,
    /// Requests waiting.
    pub waiting: f64,
    /// KV cache usage, 0..=1.
    pub kv_cache_usage: f64,
    /// Age of the report when the candidate was built, in microseconds.
    pub age_micros: u64,
    /// The gateway's own requests in flight to the replica when the report was received.
    pub own_in_flight: u32,
}

impl EngineView {
    /// Running plus waiting requests beyond the gateway's own at the report: what other
    /// gateways and clients sent, as of the report (0 when the gateway's own were more).
    pub fn others(&self) -> u32 {
        let engine = (self.running + self.waiting)
            .max(0.0)
            .min(f64::from(u32::MAX));
        (engine as u32).saturating_sub(self.own_in_flight)
    }
}
