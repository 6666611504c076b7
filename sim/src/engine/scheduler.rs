//! The V1-style scheduler: continuous batching in steps with chunked prefill, prefix caching
//! and preemption over one [`BlockPool`], as vLLM's `vllm/v1/core/sched/scheduler.py` does
//! (FCFS policy, chunked prefill on, no speculative decoding). Pure: no I/O, no clock; time is
//! virtual seconds (`f64`) passed in by the caller.
//!
//! # API
//! - [`Scheduler::new`] validates the config as vLLM does at start (a token budget below
//!   `max_num_seqs`, a pool too small for one `max_model_len` request are refused).
//! - [`Scheduler::add_request`] queues a [`Request`]. It becomes visible (waiting) at the first
//!   step whose `now >= arrival`, so scenarios can be built ahead of time; requests arriving
//!   together are queued in `add_request` order.
//! - [`Scheduler::step`]`(now)` plans and completes one engine step starting at `now`, and
//!   returns a [`StepOutput`]: what was scheduled, the step's duration from the
//!   [`LatencyModel`], the tokens produced (stamped at the step's end, `now + duration`), the
//!   requests that finished and the pool's KV events.
//! - [`Scheduler::abort`] withdraws a request at once: a pending or waiting one leaves the
//!   queue; a running one leaves *between* steps (a step is atomic here, so the next step
//!   boundary is now; the caller drops the outputs of a step still in flight on its side). Its
//!   blocks are released and it counts as aborted.
//! - [`Scheduler::run_until_idle`] drives the virtual timeline: steps back to back (each starts
//!   when the previous ends, so no timer overshoot accumulates), jumping over idle gaps to the
//!   next arrival, until nothing is left.
//!
//! # One step (vLLM's `schedule` then `update_from_output`)
//! 1. Pending requests with `arrival <= now` join the waiting queue's tail.
//! 2. Running requests, in start order, while budget lasts: each needs
//!    `num_tokens - num_computed_tokens` tokens (1 when decoding, the rest of its prompt when
//!    prefilling), capped by `long_prefill_token_threshold` (if set) and the remaining budget.
//!    When the pool has no room, the *newest* running request is preempted (blocks freed,
//!    computed tokens reset, put at the *front* of the waiting queue, `num_preemptions`
//!    counted), repeatedly, until the request fits or preempts itself (then the running pass
//!    ends).
//! 3. Only if nothing was preempted this step: waiting requests from the head, while budget
//!    lasts and fewer than `max_num_seqs` run. Each looks up its prefix-cache hit (a fully
//!    cached prompt recomputes its last block), gets a chunk of `min(rest, budget)` tokens and
//!    its slots; a request that does not fit blocks those behind it (FIFO, no skipping).
//! 4. The step's cost: each prefill chunk at its positions, the first chunk of each prefill
//!    (after admission or re-admission) paying the fixed cost, plus the decode batch (requests
//!    that had already produced a token and were scheduled for exactly their next one).
//! 5. At the step's end, every scheduled request whose known tokens are all computed produces
//!    one token (its first one is the TTFT event). A request stops on `max_tokens`
//!    (`length`), on reaching `max_model_len` (`length`) or on a stop token once `min_tokens`
//!    are out (`stop`), as vLLM's `check_stop`; finished requests free their blocks.
//!
//! Generated token ids come from the request's `script` while it lasts, then from
//! [`BuiltinTokenizer::sample_token`] seeded by the request's `seed` (deterministic per request,
//! whatever the schedule). A preempted request keeps its output tokens and recomputes them.

use std::collections::{HashMap, VecDeque};

use inferrail_shards::block_hash::{extend_block_hashes, hash_block, BlockHash, ExtraKey};
use inferrail_shards::builtin::BuiltinTokenizer;

use super::block_pool::{
    BlockPool, CacheHit, KvCacheEvent, PoolConfigError, PrefixCacheStats, RequestId, SlotRequest,
};
use super::latency::LatencyModel;

/// The scheduler's settings, with vLLM's flag names.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// `--max-num-batched-tokens`: tokens per step.
    pub max_num_batched_tokens: usize,
    /// `--max-num-seqs`: running requests at most.
    pub max_num_seqs: usize,
    /// `--block-size`.
    pub block_size: usize,
    /// `--num-gpu-blocks-override`: blocks in the pool, vLLM's null block included.
    pub num_gpu_blocks: usize,
    /// `--enable-prefix-caching` / `--no-enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// Record KV cache events (`--kv-events-config`).
    pub enable_kv_events: bool,
    /// `--long-prefill-token-threshold`: the largest prefill chunk (0: no cap but the budget).
    pub long_prefill_token_threshold: usize,
    /// `--max-model-len`: prompt plus output tokens at most (`None`: only the pool limits).
    pub max_model_len: Option<usize>,
}

impl Default for SchedulerConfig {
    /// vLLM's defaults; the pool approximates Llama-3.1-8B on a 24 GB GPU (~5 GB of KV at
    /// 128 KiB per token: 2,560 blocks of 16 tokens) with a 32k context.
    fn default() -> Self {
        SchedulerConfig {
            max_num_batched_tokens: 2048,
            max_num_seqs: 256,
            block_size: 16,
            num_gpu_blocks: 2560,
            enable_prefix_caching: true,
            enable_kv_events: false,
            long_prefill_token_threshold: 0,
            max_model_len: Some(32768),
        }
    }
}

/// What [`Scheduler::new`] refuses (as vLLM does at start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerConfigError {
    /// The pool itself is invalid.
    #[error(transparent)]
    Pool(#[from] PoolConfigError),
    /// `max_num_seqs` must be positive.
    #[error("max_num_seqs must be positive")]
    ZeroMaxNumSeqs,
    /// vLLM: "max_num_batched_tokens must be greater than or equal to max_num_seqs".
    #[error(
        "max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to \
         max_num_seqs ({max_num_seqs})"
    )]
    BudgetBelowMaxNumSeqs {
        /// The budget.
        max_num_batched_tokens: usize,
        /// The sequence cap.
        max_num_seqs: usize,
    },
    /// The KV pool cannot hold one request of `max_model_len` tokens.
    #[error(
        "the model's max seq len ({max_model_len}) is larger than the maximum number of tokens \
         that can be stored in KV cache ({capacity}); increase num_gpu_blocks or decrease \
         max_model_len"
    )]
    PoolTooSmall {
        /// `max_model_len`.
        max_model_len: usize,
        /// Usable blocks times block size.
        capacity: usize,
    },
}

/// Why [`Scheduler::add_request`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddRequestError {
    /// The id is already in use by an unfinished request.
    #[error("request id {0} already exists")]
    DuplicateId(RequestId),
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// `max_tokens` must be at least 1.
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    /// Prompt plus `max_tokens` exceed `max_model_len`.
    #[error(
        "this model's maximum context length is {max_model_len} tokens; the request asks for \
         {requested} ({prompt} in the prompt)"
    )]
    TooLong {
        /// `max_model_len`.
        max_model_len: usize,
        /// Prompt plus `max_tokens`.
        requested: usize,
        /// Prompt tokens.
        prompt: usize,
    },
    /// The request could never fit in the whole pool.
    #[error("the request needs {needed} KV blocks, the pool has {usable}")]
    PoolTooSmall {
        /// Blocks it needs at its longest.
        needed: usize,
        /// Usable blocks.
        usable: usize,
    },
}

/// A request to schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Its id (unique among unfinished requests).
    pub id: RequestId,
    /// The prompt's token ids (not empty).
    pub prompt_tokens: Vec<u32>,
    /// Output tokens at most (at least 1).
    pub max_tokens: usize,
    /// Output tokens before a stop token may end it.
    pub min_tokens: usize,
    /// Tokens that end it with `stop` (EOS included unless `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
    /// Arrival, virtual seconds: it waits from the first step at or after this time.
    pub arrival: f64,
    /// Output tokens to produce first, in order (then the seeded sampler takes over).
    pub script: Vec<u32>,
    /// The sampler's seed.
    pub seed: u64,
    /// `cache_salt`: added to the first block's extra keys (`("cache_salt", salt)`), as vLLM
    /// does, so requests with different salts (or none) never share cached blocks; KV events
    /// publish it as the first block's `extra_keys` (`[salt]`).
    pub cache_salt: Option<String>,
}

impl Request {
    /// A request with no stop tokens, no script and seed = id.
    pub fn new(id: RequestId, prompt_tokens: Vec<u32>, max_tokens: usize, arrival: f64) -> Self {
        Request {
            id,
            prompt_tokens,
            max_tokens,
            min_tokens: 0,
            stop_token_ids: Vec::new(),
            arrival,
            script: Vec::new(),
            seed: id,
            cache_salt: None,
        }
    }
}

/// Why a request finished (vLLM's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// A stop token.
    Stop,
    /// `max_tokens` or `max_model_len`.
    Length,
    /// Cancelled.
    Abort,
}

impl FinishReason {
    /// vLLM's label (`stop`, `length`, `abort`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// A finished request's record: what vLLM's per-request metrics need.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRequest {
    /// The request.
    pub id: RequestId,
    /// Why it finished.
    pub reason: FinishReason,
    /// Its last token when it was a stop token (vLLM's `stop_reason`).
    pub stop_token: Option<u32>,
    /// Arrival (virtual seconds).
    pub arrival: f64,
    /// Start of the step that first scheduled it (end of queue time).
    pub first_scheduled: Option<f64>,
    /// End of the step that produced its first token (TTFT stamp).
    pub first_token: Option<f64>,
    /// When it finished (end of its last step; the abort time for an abort).
    pub finished_at: f64,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prefix-cache hit tokens at its first scheduling (`cached_tokens` in usage).
    pub cached_tokens: usize,
    /// The tokens it produced.
    pub output_tokens: Vec<u32>,
    /// Times it was preempted.
    pub num_preemptions: u32,
}

/// One request's work in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledWork {
    /// The request.
    pub id: RequestId,
    /// Tokens computed this step.
    pub num_tokens: usize,
    /// Tokens computed before (cache hit included): the chunk's first position.
    pub start: usize,
    /// A decode (its next token after an output token) rather than a prefill chunk.
    pub decode: bool,
    /// The first chunk of a prefill (it pays the fixed prefill cost).
    pub first_chunk: bool,
    /// Admitted from the waiting queue this step (new or resumed after preemption).
    pub admitted: bool,
    /// The prefix-cache hit it was admitted with (0 unless `admitted`).
    pub cached_tokens: usize,
}

/// A token produced at a step's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEvent {
    /// The request.
    pub id: RequestId,
    /// The token.
    pub token: u32,
    /// Its index among the request's outputs (0: the first token, the TTFT event).
    pub index: usize,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    /// When it started (virtual seconds).
    pub start: f64,
    /// Its cost from the latency model (seconds).
    pub duration: f64,
    /// `start + duration`: when its tokens come out.
    pub end: f64,
    /// The work scheduled, running requests first then admitted ones.
    pub scheduled: Vec<ScheduledWork>,
    /// Requests preempted this step, in preemption order.
    pub preempted: Vec<RequestId>,
    /// Tokens produced, in scheduling order.
    pub tokens: Vec<TokenEvent>,
    /// Requests that finished at its end.
    pub finished: Vec<FinishedRequest>,
    /// KV cache events recorded since the previous step.
    pub kv_events: Vec<KvCacheEvent>,
}

impl StepOutput {
    /// Tokens computed in the step.
    pub fn num_scheduled_tokens(&self) -> usize {
        self.scheduled.iter().map(|w| w.num_tokens).sum()
    }

    /// Whether nothing was scheduled.
    pub fn is_idle(&self) -> bool {
        self.scheduled.is_empty()
    }
}

/// Counters and gauges vLLM reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchedulerStats {
    /// `vllm:num_requests_running`.
    pub num_running: usize,
    /// `vllm:num_requests_waiting` (arrived, not running; preempted ones included).
    pub num_waiting: usize,
    /// Added requests whose arrival time has not come yet.
    pub num_pending: usize,
    /// `vllm:kv_cache_usage_perc` (0..1).
    pub kv_cache_usage: f64,
    /// `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` (tokens).
    pub prefix_cache: PrefixCacheStats,
    /// `vllm:num_preemptions`.
    pub num_preemptions: u64,
    /// `vllm:prompt_tokens` (counted once per request, at its first token).
    pub prompt_tokens: u64,
    /// `vllm:generation_tokens`.
    pub generation_tokens: u64,
    /// Finished with `stop`.
    pub finished_stop: u64,
    /// Finished with `length`.
    pub finished_length: u64,
    /// Finished with `abort`.
    pub finished_abort: u64,
    /// Steps taken that scheduled something.
    pub num_steps: u64,
}

#[derive(Debug, Clone)]
struct ReqState {
    req: Request,
    /// Prompt then output tokens (`all_token_ids`).
    tokens: Vec<u32>,
    /// Chained hashes of the full blocks of `tokens` (empty without prefix caching).
    hashes: Vec<BlockHash>,
    num_computed: usize,
    /// Pending fixed prefill cost: set at (re)admission, cleared by the first chunk.
    fresh_prefill: bool,
    /// Its last token came out of a step (so its next work is a decode), until preempted.
    decoding: bool,
    rng: u64,
    first_scheduled: Option<f64>,
    first_token: Option<f64>,
    cached_tokens: Option<usize>,
    num_preemptions: u32,
}

impl ReqState {
    fn num_output(&self) -> usize {
        self.tokens.len() - self.req.prompt_tokens.len()
    }
}

/// The scheduler (see the module docs).
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedulerConfig,
    latency: LatencyModel,
    pool: BlockPool,
    reqs: HashMap<RequestId, ReqState>,
    /// Added, not arrived yet: sorted by arrival, ties in insertion order.
    pending: VecDeque<RequestId>,
    waiting: VecDeque<RequestId>,
    /// In start order.
    running: Vec<RequestId>,
    stats: SchedulerStats,
    tokenizer: BuiltinTokenizer,
}

impl Scheduler {
    /// A scheduler with an empty pool; refuses what vLLM refuses at start.
    pub fn new(
        config: SchedulerConfig,
        latency: LatencyModel,
    ) -> Result<Self, SchedulerConfigError> {
        let pool = BlockPool::new(
            config.num_gpu_blocks,
            config.block_size,
            config.enable_prefix_caching,
            config.enable_kv_events,
        )?;
        if config.max_num_seqs == 0 {
            return Err(SchedulerConfigError::ZeroMaxNumSeqs);
        }
        if config.max_num_batched_tokens < config.max_num_seqs {
            return Err(SchedulerConfigError::BudgetBelowMaxNumSeqs {
                max_num_batched_tokens: config.max_num_batched_tokens,
                max_num_seqs: config.max_num_seqs,
            });
        }
        if let Some(max_model_len) = config.max_model_len {
            let capacity = pool.num_usable_blocks() * config.block_size;
            if max_model_len > capacity {
                return Err(SchedulerConfigError::PoolTooSmall {
                    max_model_len,
                    capacity,
                });
            }
        }
        Ok(Scheduler {
            config,
            latency,
            pool,
            reqs: HashMap::new(),
            pending: VecDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            stats: SchedulerStats::default(),
            tokenizer: BuiltinTokenizer::new(),
        })
    }

    /// The config.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The latency model.
    pub fn latency(&self) -> &LatencyModel {
        &self.latency
    }

    /// The block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// vLLM's `reset_prefix_cache`: refused (false) while any request holds blocks.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.pool.reset_prefix_cache()
    }

    /// Counters and gauges.
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            num_running: self.running.len(),
            num_waiting: self.waiting.len(),
            num_pending: self.pending.len(),
            kv_cache_usage: self.pool.usage(),
            prefix_cache: self.pool.prefix_cache_stats(),
            ..self.stats
        }
    }

    /// Running requests, in start order.
    pub fn running(&self) -> &[RequestId] {
        &self.running
    }

    /// Waiting requests, head first.
    pub fn waiting(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.waiting.iter().copied()
    }

    /// Whether `id` is unfinished (pending, waiting or running).
    pub fn contains(&self, id: RequestId) -> bool {
        self.reqs.contains_key(&id)
    }

    /// Unfinished requests.
    pub fn num_unfinished(&self) -> usize {
        self.reqs.len()
    }

    /// Whether some arrived request is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// The earliest arrival among requests not arrived yet.
    pub fn next_arrival(&self) -> Option<f64> {
        self.pending.front().map(|id| self.reqs[id].req.arrival)
    }

    /// Queues a request (see the module docs). Refuses what could never be served.
    pub fn add_request(&mut self, req: Request) -> Result<(), AddRequestError> {
        if self.reqs.contains_key(&req.id) {
            return Err(AddRequestError::DuplicateId(req.id));
        }
        if req.prompt_tokens.is_empty() {
            return Err(AddRequestError::EmptyPrompt);
        }
        if req.max_tokens == 0 {
            return Err(AddRequestError::ZeroMaxTokens);
        }
        let prompt = req.prompt_tokens.len();
        let mut longest = prompt.saturating_add(req.max_tokens);
        if let Some(max_model_len) = self.config.max_model_len {
            if prompt >= max_model_len {
                // vLLM refuses prompts that leave no room for one output token.
                return Err(AddRequestError::TooLong {
                    max_model_len,
                    requested: longest,
                    prompt,
                });
            }
            longest = longest.min(max_model_len);
        }
        // The last output token is never fed back, so it needs no slot.
        let needed = (longest - 1).div_ceil(self.config.block_size);
        let usable = self.pool.num_usable_blocks();
        if needed > usable {
            return Err(AddRequestError::PoolTooSmall { needed, usable });
        }
        let mut hashes = Vec::new();
        if self.config.enable_prefix_caching {
            extend_hashes(
                &mut hashes,
                &req.prompt_tokens,
                self.config.block_size,
                req.cache_salt.as_deref(),
            );
        }
        let id = req.id;
        let arrival = req.arrival;
        let state = ReqState {
            tokens: req.prompt_tokens.clone(),
            hashes,
            num_computed: 0,
            fresh_prefill: true,
            decoding: false,
            rng: req.seed,
            first_scheduled: None,
            first_token: None,
            cached_tokens: None,
            num_preemptions: 0,
            req,
        };
        self.reqs.insert(id, state);
        let pos = self
            .pending
            .partition_point(|p| self.reqs[p].req.arrival.total_cmp(&arrival).is_le());
        self.pending.insert(pos, id);
        Ok(())
    }

    /// Cancels a request at `now` (see the module docs); `None` for an unknown id.
    pub fn abort(&mut self, id: RequestId, now: f64) -> Option<FinishedRequest> {
        if !self.reqs.contains_key(&id) {
            return None;
        }
        if let Some(i) = self.running.iter().position(|&r| r == id) {
            self.running.remove(i);
        } else if let Some(i) = self.waiting.iter().position(|&r| r == id) {
            self.waiting.remove(i);
        } else if let Some(i) = self.pending.iter().position(|&r| r == id) {
            self.pending.remove(i);
        }
        self.pool.free(id);
        Some(self.finish(id, FinishReason::Abort, None, now))
    }

    fn finish(
        &mut self,
        id: RequestId,
        reason: FinishReason,
        stop_token: Option<u32>,
        now: f64,
    ) -> FinishedRequest {
        let st = self.reqs.remove(&id).expect("finishing a known request");
        match reason {
            FinishReason::Stop => self.stats.finished_stop += 1,
            FinishReason::Length => self.stats.finished_length += 1,
            FinishReason::Abort => self.stats.finished_abort += 1,
        }
        let prompt_tokens = st.req.prompt_tokens.len();
        FinishedRequest {
            id,
            reason,
            stop_token,
            arrival: st.req.arrival,
            first_scheduled: st.first_scheduled,
            first_token: st.first_token,
            finished_at: now,
            prompt_tokens,
            cached_tokens: st.cached_tokens.unwrap_or(0),
            output_tokens: st.tokens[prompt_tokens..].to_vec(),
            num_preemptions: st.num_preemptions,
        }
    }

    fn preempt(&mut self, victim: RequestId, out: &mut StepOutput) {
        self.pool.free(victim);
        let st = self.reqs.get_mut(&victim).expect("running request");
        st.num_computed = 0;
        st.fresh_prefill = true;
        st.decoding = false;
        st.num_preemptions += 1;
        self.stats.num_preemptions += 1;
        self.waiting.push_front(victim);
        out.preempted.push(victim);
    }

    /// Plans and completes one step starting at `now` (see the module docs). A step with
    /// nothing to schedule is idle: zero duration, no outputs (besides KV events).
    pub fn step(&mut self, now: f64) -> StepOutput {
        while let Some(&id) = self.pending.front() {
            if self.reqs[&id].req.arrival > now {
                break;
            }
            self.pending.pop_front();
            self.waiting.push_back(id);
        }
        let mut out = StepOutput {
            start: now,
            ..StepOutput::default()
        };
        let mut budget = self.config.max_num_batched_tokens;
        let threshold = self.config.long_prefill_token_threshold;

        // Running requests, in start order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let st = &self.reqs[&id];
            let mut n = st.tokens.len() - st.num_computed;
            if threshold > 0 {
                n = n.min(threshold);
            }
            n = n.min(budget);
            let scheduled = loop {
                let st = &self.reqs[&id];
                let slot = SlotRequest {
                    request_id: id,
                    token_ids: &st.tokens,
                    block_hashes: &st.hashes,
                    num_computed_tokens: st.num_computed,
                    num_new_tokens: n,
                    watermark_blocks: 0,
                    cache_salt: st.req.cache_salt.as_deref(),
                };
                if self.pool.allocate_slots(&slot, &CacheHit::none()).is_ok() {
                    break true;
                }
                let victim = self.running.pop().expect("the request itself runs");
                self.preempt(victim, &mut out);
                if victim == id {
                    break false;
                }
            };
            if !scheduled {
                break;
            }
            let st = self.reqs.get_mut(&id).expect("running request");
            let decode = st.decoding;
            out.scheduled.push(ScheduledWork {
                id,
                num_tokens: n,
                start: st.num_computed,
                decode,
                first_chunk: !decode && st.fresh_prefill,
                admitted: false,
                cached_tokens: 0,
            });
            if !decode {
                st.fresh_prefill = false;
            }
            st.num_computed += n;
            budget -= n;
            i += 1;
        }

        // Waiting requests, head first, unless this step preempted.
        if out.preempted.is_empty() {
            while budget > 0 && self.running.len() < self.config.max_num_seqs {
                let Some(&id) = self.waiting.front() else {
                    break;
                };
                let st = &self.reqs[&id];
                let resumed = st.num_preemptions > 0;
                let hit = self.pool.get_computed_blocks(&st.hashes, st.tokens.len());
                let mut n = st.tokens.len() - hit.num_tokens;
                if threshold > 0 {
                    n = n.min(threshold);
                }
                n = n.min(budget);
                let slot = SlotRequest {
                    request_id: id,
                    token_ids: &st.tokens,
                    block_hashes: &st.hashes,
                    num_computed_tokens: 0,
                    num_new_tokens: n,
                    watermark_blocks: 0,
                    cache_salt: st.req.cache_salt.as_deref(),
                };
                if self.pool.allocate_slots(&slot, &hit).is_err() {
                    break;
                }
                self.pool
                    .record_prefix_cache_stats(st.tokens.len(), hit.num_tokens, resumed);
                self.waiting.pop_front();
                self.running.push(id);
                let st = self.reqs.get_mut(&id).expect("waiting request");
                st.first_scheduled.get_or_insert(now);
                st.cached_tokens.get_or_insert(hit.num_tokens);
                out.scheduled.push(ScheduledWork {
                    id,
                    num_tokens: n,
                    start: hit.num_tokens,
                    decode: false,
                    first_chunk: true,
                    admitted: true,
                    cached_tokens: hit.num_tokens,
                });
                st.fresh_prefill = false;
                st.num_computed = hit.num_tokens + n;
                budget -= n;
            }
        }

        if out.scheduled.is_empty() {
            out.end = now;
            out.kv_events = self.pool.take_events();
            return out;
        }
        self.stats.num_steps += 1;
        let num_decode = out.scheduled.iter().filter(|w| w.decode).count();
        out.duration = self.latency.step_secs(
            out.scheduled
                .iter()
                .filter(|w| !w.decode)
                .map(|w| (w.start, w.num_tokens, w.first_chunk)),
            num_decode,
        );
        out.end = now + out.duration;

        // The model's outputs, stamped at the step's end.
        let end = out.end;
        let mut done = Vec::new();
        for w in &out.scheduled {
            let st = self.reqs.get_mut(&w.id).expect("scheduled request");
            if st.num_computed < st.tokens.len() {
                continue; // a partial prefill chunk: no token
            }
            let index = st.num_output();
            let token = match st.req.script.get(index) {
                Some(&t) => t,
                None => self.tokenizer.sample_token(&mut st.rng),
            };
            if index == 0 {
                st.first_token = Some(end);
                self.stats.prompt_tokens += st.req.prompt_tokens.len() as u64;
            }
            self.stats.generation_tokens += 1;
            st.tokens.push(token);
            st.decoding = true;
            if self.config.enable_prefix_caching {
                extend_hashes(
                    &mut st.hashes,
                    &st.tokens,
                    self.config.block_size,
                    st.req.cache_salt.as_deref(),
                );
            }
            out.tokens.push(TokenEvent {
                id: w.id,
                token,
                index,
            });
            // vLLM's check_stop.
            let num_output = index + 1;
            let at_max_len = self
                .config
                .max_model_len
                .is_some_and(|m| st.tokens.len() >= m);
            if at_max_len || num_output >= st.req.max_tokens {
                done.push((w.id, FinishReason::Length, None));
            } else if num_output >= st.req.min_tokens && st.req.stop_token_ids.contains(&token) {
                done.push((w.id, FinishReason::Stop, Some(token)));
            }
        }
        for (id, reason, stop) in done {
            self.running.retain(|&r| r != id);
            self.pool.free(id);
            let f = self.finish(id, reason, stop, end);
            out.finished.push(f);
        }
        out.kv_events = self.pool.take_events();
        out
    }

    /// Steps back to back from `now` on the virtual timeline (each step starts at the previous
    /// one's end; idle gaps jump to the next arrival) until every added request has finished.
    /// Returns every non-idle step's output. Stops early only if a step can schedule nothing
    /// while requests wait and none is due to arrive (which the admission checks rule out).
    pub fn run_until_idle(&mut self, now: f64) -> Vec<StepOutput> {
        let mut t = now;
        let mut steps = Vec::new();
        loop {
            if !self.has_work() {
                match self.next_arrival() {
                    Some(a) => t = t.max(a),
                    None => break,
                }
            }
            let out = self.step(t);
            if out.is_idle() {
                match self.next_arrival() {
                    // Pending arrivals are all later than `t` after a step at `t`.
                    Some(a) if a > t => {
                        t = a;
                        continue;
                    }
                    _ => break,
                }
            }
            t = out.end;
            steps.push(out);
        }
        steps
    }
}

/// [`extend_block_hashes`] with vLLM's `cache_salt`: the first block is hashed with the extra
/// keys `(("cache_salt", salt),)` (the later blocks differ through the parent chain only).
fn extend_hashes(
    hashes: &mut Vec<BlockHash>,
    tokens: &[u32],
    block_size: usize,
    salt: Option<&str>,
) {
    if let Some(salt) = salt {
        if hashes.is_empty() && block_size > 0 && tokens.len() >= block_size {
            let extra = [ExtraKey::cache_salt(salt)];
            hashes.push(hash_block(None, &tokens[..block_size], Some(&extra)));
        }
    }
    extend_block_hashes(hashes, tokens, block_size);
}
