//! Building the cache-prediction machinery at start-up: each model's tokenizer (a model whose
//! tokenizer is missing or fails to load routes as before, and this says why), the tokenizer pool
//! (pinned to spare CPUs when the machine has them) and the index shards.

use inferrail_config::Config;
use inferrail_dataplane::predict::{ModelPredictor, Predictor};
use inferrail_shards::index::{IndexConfig, IndexShards};
use inferrail_shards::pool::WorkerPool;
use inferrail_shards::tokenize::load_with_cache;
use std::collections::HashMap;
use std::sync::Arc;

/// vLLM's default KV block size, used when a model does not name its own.
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// Jobs the tokenizer pool's queue holds per worker before requests go without predictions.
const QUEUE_PER_WORKER: usize = 256;

/// Commands each index shard's queue holds.
const INDEX_QUEUE: usize = 8192;

/// One model's tokenizer problem, as a line for `inferrail check` and the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizerProblem {
    /// Config path, e.g. `models[0].tokenizer`.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for TokenizerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}; the model is routed without cache predictions",
            self.path, self.message
        )
    }
}

/// `chat_template_kwargs` from config as JSON.
fn kwargs_json(config: &inferrail_config::Model) -> serde_json::Map<String, serde_json::Value> {
    config
        .chat_template_kwargs
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), serde_json::to_value(v).ok()?)))
        .collect()
}

/// Loads every configured tokenizer. Models without a `tokenizer` are skipped silently; models
/// whose tokenizer does not load are reported.
pub fn load_tokenizers(
    config: &Config,
) -> (HashMap<String, ModelPredictor>, Vec<TokenizerProblem>) {
    let mut models = HashMap::new();
    let mut problems = Vec::new();
    for (i, m) in config.models.iter().enumerate() {
        let Some(spec) = &m.tokenizer else { continue };
        match load_with_cache(
            spec,
            m.chat_template.as_deref(),
            config.tokenizer.cache_tokens,
        ) {
            Ok(tokenizer) => {
                models.insert(
                    m.name.clone(),
                    ModelPredictor {
                        tokenizer: Arc::new(tokenizer),
                        block_size: m
                            .block_size
                            .map_or(DEFAULT_BLOCK_SIZE, |b| b as usize)
                            .max(1),
                        kwargs: Arc::new(kwargs_json(m)),
                        trusted: Arc::new(std::sync::atomic::AtomicBool::new(true)),
                    },
                );
            }
            Err(e) => problems.push(TokenizerProblem {
                path: format!("models[{i}].tokenizer"),
                message: format!("{spec}: {e}"),
            }),
        }
    }
    (models, problems)
}

/// Why the prediction machinery could not start.
#[derive(Debug, thiserror::Error)]
pub enum PredictionError {
    /// A thread could not be started.
    #[error("cannot start the {what}: {source}")]
    Start {
        /// Which threads.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The tokenizer pool, index shards and tokenizers for `config`, or `None` when no model has a
/// tokenizer that loaded. Problems are returned for the caller to log.
pub fn build(
    config: &Config,
    data_cores: usize,
) -> Result<(Option<Arc<Predictor>>, Vec<TokenizerProblem>), PredictionError> {
    let (models, problems) = load_tokenizers(config);
    if models.is_empty() {
        return Ok((None, problems));
    }
    let cpus = core_affinity::get_core_ids().unwrap_or_default();
    let spare: Vec<core_affinity::CoreId> = cpus.iter().skip(data_cores).copied().collect();
    let workers = config
        .tokenizer
        .workers
        .resolve(spare.len().clamp(1, 4))
        .max(1);
    let pool = WorkerPool::start("inferrail-tok", workers, workers * QUEUE_PER_WORKER, &spare)
        .map_err(|source| PredictionError::Start {
            what: "tokenizer pool",
            source,
        })?;
    let index = IndexShards::start(IndexConfig {
        shards: config.index.shards.resolve(1).max(1),
        queue_capacity: INDEX_QUEUE,
        default_capacity_blocks: config.index.default_capacity_blocks as usize,
    })
    .map_err(|e| PredictionError::Start {
        what: "index shards",
        source: std::io::Error::other(e.to_string()),
    })?;
    let predictor = Predictor::new(models, pool, Arc::new(index));
    Ok((Some(Arc::new(predictor)), problems))
}
