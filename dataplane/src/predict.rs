//! Cache predictions on the request path. The prompt is tokenized and cut into block hashes on
//! the tokenizer pool (never on a data core); the index shards answer how many leading blocks each
//! candidate replica holds, by tier (GPU, CPU, storage); the routed attempt is recorded on its replica, and taken back when the
//! engine refuses it or fails before answering.
//!
//! One deadline covers a request's whole prediction: it is `tokenizer.max_wait` after the request
//! starts predicting, and both the wait for its tokens and the index lookup end by it ([`Budget`]).
//! Past it, or when the pool's or the index's queue is full, the request is routed without a
//! prediction. `tokenizer.max_wait` and `tokenizer.inline_max_bytes` are read per request from
//! the snapshot it routes with ([`PredictionLimits`]), so a live config change applies to the
//! next request.

use inferrail_routing::offer::HeldTokens;
use inferrail_routing::PoolRoom;
use inferrail_routing::PromptView;
use inferrail_shards::index::{HeldBlocks, IndexShards, RecordTicket};
use inferrail_shards::pool::{Job, WorkerPool};
use inferrail_shards::prefix_hash::{block_hashes, BlockHash, HashSalt};
use inferrail_shards::tokenize::{Endpoint, ModelTokenizer};
use inferrail_sync::reply_channel;
use inferrail_wire::json_field::find_top_level_string;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A model's tokenizer and how its engine cuts blocks.
pub struct ModelPredictor {
    /// The tokenizer (shared by the pool's threads).
    pub tokenizer: Arc<ModelTokenizer>,
    /// Tokens per KV block on the engines.
    pub block_size: usize,
    /// `chat_template_kwargs` from config (a request's own override them).
    pub kwargs: Arc<serde_json::Map<String, serde_json::Value>>,
    /// Cleared by the control thread while the engines' KV events show blocks whose tokens
    /// differ from the gateway's for this model (ADR 021): requests are still tokenized and
    /// recorded, but routed without predictions.
    pub trusted: Arc<std::sync::atomic::AtomicBool>,
}

/// What [`Predictor::prompt`] found.
#[derive(Debug)]
pub struct Prompted {
    /// The prompt's facts, or why there are none.
    pub facts: Result<PromptFacts, NoPrediction>,
    /// Time spent tokenizing (zero when nothing was waited for).
    pub took: Duration,
    /// Whether the model's predictions may steer routing (false while its hash parity is off).
    pub trusted: bool,
}

/// The prompt of one request, as the engine will see it.
#[derive(Debug, Clone)]
pub struct PromptFacts {
    /// Prompt tokens.
    pub tokens: u32,
    /// Hashes of its full blocks, in order (salted by model and `cache_salt`).
    pub hashes: Arc<[BlockHash]>,
    /// Tokens per block.
    pub block_size: u32,
}

impl PromptFacts {
    /// The prompt as the brain reads it.
    pub fn view(&self) -> PromptView<'_> {
        PromptView {
            tokens: self.tokens,
            hashes: &self.hashes,
            block_size: self.block_size,
        }
    }

    /// Tokens the engine will find cached when `blocks` leading blocks are in its prefix cache:
    /// never the whole prompt (an engine always computes the last token).
    pub fn cached_tokens(&self, blocks: usize) -> u32 {
        self.held_tokens(HeldBlocks::on_gpu(blocks)).cached()
    }

    /// The tokens, by tier, the engine will not recompute when it holds `held` leading blocks:
    /// never the whole prompt (an engine always computes the last token). When the cap takes a
    /// block off, it comes off the slowest tier held (the counts do not say which tier the
    /// last block is in; at most one block's load time is misjudged, on a fully held prompt).
    pub fn held_tokens(&self, held: HeldBlocks) -> HeldTokens {
        if self.tokens == 0 || self.block_size == 0 {
            return HeldTokens::default();
        }
        let mut room = (self.tokens - 1) / self.block_size;
        let mut take = |blocks: u32| {
            let b = blocks.min(room);
            room -= b;
            b * self.block_size
        };
        HeldTokens {
            gpu: take(held.gpu),
            cpu: take(held.cpu),
            storage: take(held.storage),
            room: held.room.map(|r| PoolRoom {
                free_blocks: r.free_blocks,
                reuse: f64::from(r.reuse_permille) / 1000.0,
            }),
        }
    }
}

/// Why a request got no prediction, as a metrics label.
pub type NoPrediction = &'static str;

/// The prediction settings of one snapshot: `tokenizer.max_wait` and
/// `tokenizer.inline_max_bytes`. Live: each request reads the ones of the snapshot it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictionLimits {
    /// The longest a request waits for its prediction, tokens and index lookup together.
    pub max_wait: Duration,
    /// Bodies of at most this many bytes are tokenized on the calling core.
    pub inline_max_bytes: usize,
}

impl PredictionLimits {
    /// The limits of a config's `tokenizer` section.
    pub fn from_config(tokenizer: &inferrail_config::TokenizerPool) -> PredictionLimits {
        PredictionLimits {
            max_wait: tokenizer.max_wait,
            inline_max_bytes: usize::try_from(tokenizer.inline_max_bytes).unwrap_or(usize::MAX),
        }
    }
}

impl Default for PredictionLimits {
    /// The config defaults.
    fn default() -> PredictionLimits {
        PredictionLimits::from_config(&inferrail_config::TokenizerPool::default())
    }
}

/// One request's prediction budget: a single deadline, `max_wait` after it was made, that ends
/// the wait for the tokens and the index lookup alike. Pure: the caller passes the time.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    deadline: Instant,
    inline_max_bytes: usize,
}

impl Budget {
    /// The budget of a request that starts predicting at `now` under `limits`.
    pub fn new(limits: PredictionLimits, now: Instant) -> Budget {
        Budget {
            // A max_wait too large to add is no deadline worth keeping: wait about forever.
            deadline: now
                .checked_add(limits.max_wait)
                .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365)))
                .unwrap_or(now),
            inline_max_bytes: limits.inline_max_bytes,
        }
    }

    /// The time left at `now`; `None` once the deadline is reached (nothing left to wait for).
    pub fn left(&self, now: Instant) -> Option<Duration> {
        let left = self.deadline.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// Whether a body of `len` bytes is tokenized on the calling core.
    pub fn inline(&self, len: usize) -> bool {
        len <= self.inline_max_bytes
    }

    /// The deadline as the runtime's timers take it.
    fn timer_deadline(&self) -> monoio::time::Instant {
        monoio::time::Instant::from_std(self.deadline)
    }
}

/// Everything predictions need, shared by the data cores and the control thread.
pub struct Predictor {
    models: HashMap<String, ModelPredictor>,
    pool: WorkerPool,
    index: Arc<IndexShards>,
}

impl Predictor {
    /// A predictor over `models` (by canonical name), a tokenizer pool and the index shards. How
    /// long a request waits and which bodies are tokenized inline come with each request's
    /// [`Budget`].
    pub fn new(
        models: HashMap<String, ModelPredictor>,
        pool: WorkerPool,
        index: Arc<IndexShards>,
    ) -> Predictor {
        Predictor {
            models,
            pool,
            index,
        }
    }

    /// The model's predictor, if its tokenizer loaded.
    pub fn model(&self, name: &str) -> Option<&ModelPredictor> {
        self.models.get(name)
    }

    /// Every model with a tokenizer.
    pub fn models(&self) -> impl Iterator<Item = (&String, &ModelPredictor)> {
        self.models.iter()
    }

    /// The index shards.
    pub fn index(&self) -> &Arc<IndexShards> {
        &self.index
    }

    /// The prompt facts of `body` for `model`, computed on the pool (or on this core when the
    /// budget tokenizes a body this long inline). Returns by the budget's deadline (plus a
    /// timer tick) whatever happens on the pool, at once when it has passed (`timeout`); also
    /// the time it took, and whether the model's predictions are trusted
    /// ([`ModelPredictor::trusted`], read with the same model lookup).
    pub async fn prompt(
        &self,
        model: &str,
        endpoint: Endpoint,
        body: &[u8],
        budget: &Budget,
    ) -> Prompted {
        let Some(m) = self.models.get(model) else {
            return Prompted {
                facts: Err("no_tokenizer"),
                took: Duration::ZERO,
                trusted: false,
            };
        };
        let (facts, took) = self.prompt_of(m, model, endpoint, body, budget).await;
        Prompted {
            facts,
            took,
            trusted: m.trusted.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// [`Predictor::prompt`] for the model's predictor `m`.
    async fn prompt_of(
        &self,
        m: &ModelPredictor,
        model: &str,
        endpoint: Endpoint,
        body: &[u8],
        budget: &Budget,
    ) -> (Result<PromptFacts, NoPrediction>, Duration) {
        let started = Instant::now();
        if budget.inline(body.len()) {
            // On the data core: the per-thread segment cache, never the shared one's locks.
            let ids = m.tokenizer.prompt_ids_inline(endpoint, body, &m.kwargs);
            let facts = facts_of(ids.map_err(|e| e.label()), model, m.block_size, body);
            return (facts, started.elapsed());
        }
        if budget.left(started).is_none() {
            return (Err("timeout"), Duration::ZERO);
        }
        let (tx, rx) = reply_channel::<Result<PromptFacts, NoPrediction>>();
        let tokenizer = m.tokenizer.clone();
        let kwargs = m.kwargs.clone();
        let block_size = m.block_size;
        let model = model.to_string();
        let body = body.to_vec();
        let job: Job = Box::new(move || {
            // A request that stopped waiting (max_wait passed) has already been routed: skip it,
            // so a backlog drains at once instead of costing the CPU twice.
            if tx.is_abandoned() {
                return;
            }
            tx.send(compute(
                &tokenizer, &kwargs, &model, block_size, endpoint, &body,
            ));
        });
        if self.pool.try_submit(job).is_err() {
            return (Err("queue_full"), started.elapsed());
        }
        let result = match monoio::time::timeout_at(budget.timer_deadline(), rx).await {
            Ok(Some(r)) => (*r).clone(),
            Ok(None) => Err("queue_full"),
            Err(_) => Err("timeout"),
        };
        (result, started.elapsed())
    }

    /// The prompt facts of `body` for `model`, computed on the calling thread (for the admin's
    /// explain; the data path uses [`prompt`](Self::prompt)).
    pub fn prompt_now(
        &self,
        model: &str,
        endpoint: Endpoint,
        body: &[u8],
    ) -> Result<PromptFacts, NoPrediction> {
        let m = self.models.get(model).ok_or("no_tokenizer")?;
        compute(&m.tokenizer, &m.kwargs, model, m.block_size, endpoint, body)
    }

    /// [`held_blocks`](Self::held_blocks), waiting on the calling thread (for the admin).
    pub fn held_blocks_now(
        &self,
        facts: &PromptFacts,
        replicas: &[u64],
    ) -> Option<Vec<HeldBlocks>> {
        if facts.hashes.is_empty() {
            return Some(vec![HeldBlocks::default(); replicas.len()]);
        }
        self.index
            .lookup(facts.hashes.clone(), replicas)
            .ok()?
            .wait()
            .ok()
    }

    /// How many leading blocks of the prompt each of `replicas` (registry keys) holds, by tier
    /// ([`HeldBlocks`]), by the same budget's deadline as the tokens: `Err("timeout")` when it passes (at once when it
    /// already has), `Err("index_busy")` when the index's queue is full or its shard stopped
    /// (then no prediction is made).
    pub async fn held_blocks(
        &self,
        facts: &PromptFacts,
        replicas: &[u64],
        budget: &Budget,
    ) -> Result<Vec<HeldBlocks>, NoPrediction> {
        if facts.hashes.is_empty() {
            return Ok(vec![HeldBlocks::default(); replicas.len()]);
        }
        if budget.left(Instant::now()).is_none() {
            return Err("timeout");
        }
        let reply = self
            .index
            .lookup(facts.hashes.clone(), replicas)
            .map_err(|_| "index_busy")?;
        match monoio::time::timeout_at(budget.timer_deadline(), reply).await {
            Ok(Ok(blocks)) => Ok(blocks),
            Ok(Err(_)) => Err("index_busy"),
            Err(_) => Err("timeout"),
        }
    }

    /// Records the prompt on the replica it was sent to. Never waits; `None` when the index
    /// queue is full (the record is lost, which only makes later predictions lower).
    ///
    /// A prompt that ends in a partial block also takes a block of the engine's KV cache for it
    /// (unhashed, so no later prompt can hit it): the index spends capacity the way vLLM does.
    pub fn record(&self, replica: u64, facts: &PromptFacts) -> Option<RecordTicket> {
        let partial = facts.block_size > 0 && !facts.tokens.is_multiple_of(facts.block_size);
        if facts.hashes.is_empty() && !partial {
            return None;
        }
        self.index
            .record_prompt(replica, facts.hashes.clone(), partial)
            .ok()
    }

    /// Takes back what an attempt recorded (the engine refused it or failed before answering).
    pub fn take_back(&self, ticket: RecordTicket) {
        let _ = self.index.take_back(ticket);
    }
}

/// Tokenizes and hashes one body (runs on a pool thread, through the shared segment cache).
fn compute(
    tokenizer: &ModelTokenizer,
    kwargs: &serde_json::Map<String, serde_json::Value>,
    model: &str,
    block_size: usize,
    endpoint: Endpoint,
    body: &[u8],
) -> Result<PromptFacts, NoPrediction> {
    let ids = tokenizer
        .prompt_ids(endpoint, body, kwargs)
        .map_err(|e| e.label());
    facts_of(ids, model, block_size, body)
}

/// The prompt facts of a body's token ids: its length and block hashes (salted by the model and
/// the body's `cache_salt`).
fn facts_of(
    ids: Result<Vec<u32>, NoPrediction>,
    model: &str,
    block_size: usize,
    body: &[u8],
) -> Result<PromptFacts, NoPrediction> {
    let ids = ids?;
    let cache_salt = find_top_level_string(body, "cache_salt");
    let salt = HashSalt::new(model, None, cache_salt.as_deref());
    let hashes = block_hashes(&salt, &ids, block_size);
    Ok(PromptFacts {
        tokens: ids.len().min(u32::MAX as usize) as u32,
        hashes: hashes.into(),
        block_size: block_size as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use inferrail_shards::index::IndexConfig;

    fn limits(max_wait_ms: u64, inline_max_bytes: usize) -> PredictionLimits {
        PredictionLimits {
            max_wait: Duration::from_millis(max_wait_ms),
            inline_max_bytes,
        }
    }

    #[test]
    fn one_deadline_covers_the_tokens_and_the_lookup() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let budget = Budget::new(limits(100, 0), t0);
        assert_eq!(budget.left(t0), Some(ms(100)));
        // Tokenizing took 70ms: the lookup gets the 30ms left, not another max_wait.
        assert_eq!(budget.left(t0 + ms(70)), Some(ms(30)));
        assert_eq!(budget.left(t0 + ms(100)), None);
        assert_eq!(budget.left(t0 + ms(500)), None);
        // max_wait 0: nothing to wait for from the start.
        assert_eq!(Budget::new(limits(0, 0), t0).left(t0), None);
        // A max_wait too large to add still makes a budget.
        let huge = PredictionLimits {
            max_wait: Duration::MAX,
            inline_max_bytes: 0,
        };
        assert!(Budget::new(huge, t0).left(t0).is_some());
    }

    #[test]
    fn the_inline_size_comes_with_the_budget() {
        let t0 = Instant::now();
        assert!(Budget::new(limits(50, 4096), t0).inline(4096));
        assert!(!Budget::new(limits(50, 4096), t0).inline(4097));
        assert!(!Budget::new(limits(50, 0), t0).inline(1));
        let from_config = PredictionLimits::from_config(&inferrail_config::TokenizerPool {
            max_wait: Duration::from_millis(7),
            inline_max_bytes: 9,
            ..Default::default()
        });
        assert_eq!(from_config, limits(7, 9));
    }

    fn predictor() -> Predictor {
        let tokenizer = inferrail_shards::tokenize::load("builtin:sim", None).unwrap();
        let models = HashMap::from([(
            "m".to_string(),
            ModelPredictor {
                tokenizer: Arc::new(tokenizer),
                block_size: 4,
                kwargs: Arc::new(serde_json::Map::new()),
                trusted: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            },
        )]);
        let pool = WorkerPool::start("predict-test", 1, 8, &[]).unwrap();
        let index = IndexShards::start(IndexConfig {
            shards: 1,
            queue_capacity: 64,
            default_capacity_blocks: 1024,
        })
        .unwrap();
        Predictor::new(models, pool, Arc::new(index))
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(f)
    }

    const BODY: &[u8] =
        br#"{"model":"m","prompt":"one two three four five six seven eight nine ten"}"#;

    #[test]
    fn a_spent_budget_asks_neither_the_pool_nor_the_index() {
        let p = predictor();
        let spent = Budget::new(limits(0, 0), Instant::now());
        let Prompted { facts, took, .. } =
            block_on(p.prompt("m", Endpoint::Completion, BODY, &spent));
        assert_eq!(facts.unwrap_err(), "timeout");
        assert_eq!(took, Duration::ZERO, "nothing was waited for");

        // Tokens made inline (the body fits), but the same spent deadline ends the lookup.
        let inline = Budget::new(limits(0, 4096), Instant::now());
        let facts = block_on(p.prompt("m", Endpoint::Completion, BODY, &inline)).facts;
        let facts = facts.unwrap();
        assert!(!facts.hashes.is_empty());
        assert_eq!(
            block_on(p.held_blocks(&facts, &[1, 2], &inline)),
            Err("timeout")
        );
        // A budget with time left gets its answer from the index.
        let generous = Budget::new(limits(60_000, 0), Instant::now());
        assert!(p.record(1, &facts).is_some());
        let pooled = block_on(p.prompt("m", Endpoint::Completion, BODY, &generous)).facts;
        let pooled = pooled.unwrap();
        assert_eq!(pooled.hashes, facts.hashes, "the pool and the core agree");
        let held = block_on(p.held_blocks(&pooled, &[1, 2], &generous)).unwrap();
        let tiers: Vec<HeldBlocks> = held
            .iter()
            .map(|h| HeldBlocks { room: None, ..*h })
            .collect();
        assert_eq!(
            tiers,
            [
                HeldBlocks::on_gpu(facts.hashes.len()),
                HeldBlocks::default()
            ]
        );
        // The replica the prompt was recorded on reports its pool's room; the other was never
        // routed to, so the index has nothing to say about it.
        assert!(held[0].room.is_some_and(|r| r.free_blocks > 0));
        assert_eq!(held[1].room, None);
        // Unknown models have no tokenizer, whatever the budget.
        let none = block_on(p.prompt("other", Endpoint::Completion, BODY, &generous)).facts;
        assert_eq!(none.unwrap_err(), "no_tokenizer");
    }

    #[test]
    fn a_fully_cached_prompt_still_computes_its_last_block() {
        let f = |tokens| PromptFacts {
            tokens,
            hashes: Arc::from(Vec::new()),
            block_size: 16,
        };
        assert_eq!(
            f(64).cached_tokens(4),
            48,
            "64 tokens: the 4th block holds the last token"
        );
        assert_eq!(f(65).cached_tokens(4), 64);
        assert_eq!(f(65).cached_tokens(9), 64);
        assert_eq!(f(10).cached_tokens(0), 0);
        assert_eq!(f(0).cached_tokens(3), 0);
    }

    #[test]
    fn held_tokens_keep_each_tier_and_the_cap_comes_off_the_slowest() {
        let f = |tokens| PromptFacts {
            tokens,
            hashes: Arc::from(Vec::new()),
            block_size: 16,
        };
        let blocks = |gpu, cpu, storage| HeldBlocks {
            gpu,
            cpu,
            storage,
            room: None,
        };
        let tokens = |gpu, cpu, storage| HeldTokens {
            gpu,
            cpu,
            storage,
            room: None,
        };
        // 100 tokens: six full blocks, all of them may be cached.
        assert_eq!(f(100).held_tokens(blocks(2, 3, 1)), tokens(32, 48, 16));
        // 96 tokens: the sixth block holds the last token, so five are cached at most.
        assert_eq!(f(96).held_tokens(blocks(2, 3, 1)), tokens(32, 48, 0));
        assert_eq!(f(96).held_tokens(blocks(5, 1, 0)), tokens(80, 0, 0));
        assert_eq!(f(96).held_tokens(blocks(0, 6, 0)), tokens(0, 80, 0));
        assert_eq!(f(0).held_tokens(blocks(1, 1, 1)), HeldTokens::default());
        // The GPU-only form is cached_tokens.
        assert_eq!(
            f(96).cached_tokens(6),
            f(96).held_tokens(blocks(6, 0, 0)).gpu
        );
    }
}
