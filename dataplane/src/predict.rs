//! Cache predictions on the request path. The prompt is tokenized and cut into block hashes on
//! the tokenizer pool (never on a data core); the index shards answer how many leading blocks each
//! candidate replica holds; the routed attempt is recorded on its replica, and taken back when the
//! engine refuses it or fails before answering. A request never waits longer than
//! `tokenizer.max_wait` for its tokens: past that, or when the pool's queue is full, it is routed
//! without a prediction.

use inferrail_routing::PromptView;
use inferrail_shards::index::{IndexShards, RecordTicket};
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
        if self.tokens == 0 || self.block_size == 0 {
            return 0;
        }
        let most = (self.tokens - 1) / self.block_size;
        (blocks.min(most as usize) as u32) * self.block_size
    }
}

/// Why a request got no prediction, as a metrics label.
pub type NoPrediction = &'static str;

/// Everything predictions need, shared by the data cores and the control thread.
pub struct Predictor {
    models: HashMap<String, ModelPredictor>,
    pool: WorkerPool,
    index: Arc<IndexShards>,
    max_wait: Duration,
    inline_max_bytes: usize,
}

impl Predictor {
    /// A predictor over `models` (by canonical name), a tokenizer pool and the index shards.
    /// Bodies of at most `inline_max_bytes` bytes are tokenized on the calling core.
    pub fn new(
        models: HashMap<String, ModelPredictor>,
        pool: WorkerPool,
        index: Arc<IndexShards>,
        max_wait: Duration,
        inline_max_bytes: usize,
    ) -> Predictor {
        Predictor {
            models,
            pool,
            index,
            max_wait,
            inline_max_bytes,
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
    /// body is at most `tokenizer.inline_max_bytes` long). Returns within `tokenizer.max_wait`
    /// (plus a timer tick) whatever happens on the pool; also the time it took.
    pub async fn prompt(
        &self,
        model: &str,
        endpoint: Endpoint,
        body: &[u8],
    ) -> (Result<PromptFacts, NoPrediction>, Duration) {
        let started = Instant::now();
        let Some(m) = self.models.get(model) else {
            return (Err("no_tokenizer"), Duration::ZERO);
        };
        if body.len() <= self.inline_max_bytes {
            let facts = compute(&m.tokenizer, &m.kwargs, model, m.block_size, endpoint, body);
            return (facts, started.elapsed());
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
        let result = match monoio::time::timeout(self.max_wait, rx).await {
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
    pub fn held_blocks_now(&self, facts: &PromptFacts, replicas: &[u64]) -> Option<Vec<usize>> {
        if facts.hashes.is_empty() {
            return Some(vec![0; replicas.len()]);
        }
        self.index
            .lookup(facts.hashes.clone(), replicas)
            .ok()?
            .wait()
            .ok()
    }

    /// How many leading blocks of the prompt each of `replicas` (registry keys) holds, or `None`
    /// when the index is busy or too slow (then no prediction is made).
    pub async fn held_blocks(&self, facts: &PromptFacts, replicas: &[u64]) -> Option<Vec<usize>> {
        if facts.hashes.is_empty() {
            return Some(vec![0; replicas.len()]);
        }
        let reply = self.index.lookup(facts.hashes.clone(), replicas).ok()?;
        match monoio::time::timeout(self.max_wait, reply).await {
            Ok(Ok(blocks)) => Some(blocks),
            _ => None,
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

/// Tokenizes and hashes one body (runs on a pool thread).
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
        .map_err(|e| e.label())?;
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
}
