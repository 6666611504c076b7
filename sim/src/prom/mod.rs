//! vLLM's Prometheus `/metrics` page, rendered byte for byte as vLLM 0.32 (prometheus_client
//! 0.26) writes it, from counters, gauges and histograms the engine updates.
//!
//! Pure: no I/O and no clock. Timestamps come in as arguments (`created_unix` for the `_created`
//! samples, the request timestamps in [`FinishedRequest`]).
//!
//! # Format (as in the reference captures)
//! - Labels sorted by name (`engine`, `finished_reason`, `le`, `model_name`); values as
//!   prometheus_client's `floatToGoString` (`0.0`, `32.0`, `+Inf`, `1.796014363261697e+09`).
//! - A counter's HELP/TYPE lines name it with `_total`; a histogram writes its buckets, then
//!   `_count`, then `_sum`. Every counter and histogram is followed by a separate
//!   `<name>_created` gauge family (same HELP) holding one sample per child. Gauges have none.
//! - Every labelled child vLLM pre-creates (all finish reasons, all sources, ...) is always
//!   present, at 0 before any traffic.
//!
//! # Families
//! Every `vllm:` family of the reference page is emitted, in vLLM's order. Some are constant in
//! the simulator because they are constant in vLLM for a text-only engine without a KV
//! connector or MFU estimation (the reference engine reports them at 0 after real traffic):
//! `estimated_*_per_gpu`, `external_prefix_cache_*`, `mm_cache_*`, the non-device sources of
//! the prompt-token counters. They still have setters so an engine that models them can.
//!
//! Omitted: `python_gc_*` and `python_info` (no Python runtime to report; faking them would be
//! lying). prometheus-fastapi-instrumentator's `http_*` families (HTTP layer, not engine) come
//! from [`http::HttpMetrics`], which the server records and appends after the `vllm:` families,
//! where vLLM's page has them. The `process_*` families are rendered only from real numbers the caller
//! reads (see [`ProcessStats`] and [`VllmMetrics::render_with_process`]).

pub mod http;
pub mod parse;
pub mod text;

use std::collections::BTreeMap;

pub use http::{HttpMetrics, HttpRequest};
pub use text::{go_float, py_float_repr, Histogram};

/// The `Content-Type` vLLM's `/metrics` answers with.
pub const CONTENT_TYPE: &str = "text/plain; version=1.0.0; charset=utf-8";

/// Bounds of the TTFT histogram.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Bounds of the inter-token latency and per-request time-per-output-token histograms.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// Bounds of the e2e, queue, inference, prefill and decode time histograms.
pub const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// Bounds of `vllm:iteration_tokens_total`.
pub const ITERATION_TOKENS_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// Bounds of `vllm:request_params_n`.
pub const PARAMS_N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// Bounds of `vllm:request_num_preemptions`.
pub const NUM_PREEMPTIONS_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];

/// vLLM's `build_1_2_5_buckets(max_value)`: 1, 2, 5, 10, 20, 50, ... up to `max_value`. The
/// token-count histograms use it with `max_model_len`.
pub fn build_1_2_5_buckets(max_value: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut scale: u64 = 1;
    loop {
        for m in [1u64, 2, 5] {
            match m.checked_mul(scale) {
                Some(v) if v <= max_value => out.push(v as f64),
                _ => return out,
            }
        }
        scale = match scale.checked_mul(10) {
            Some(s) => s,
            None => return out,
        };
    }
}

/// Why a request finished (`finished_reason` label), in vLLM's child order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// EOS or a stop string/token.
    Stop,
    /// `max_tokens` or the model length.
    Length,
    /// Cancelled by the client.
    Abort,
    /// Failed in the engine.
    Error,
    /// Stopped by repetition detection.
    Repetition,
}

impl FinishReason {
    /// All reasons, in the order vLLM creates (and prints) them.
    pub const ALL: [FinishReason; 5] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::Abort,
        FinishReason::Error,
        FinishReason::Repetition,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
            FinishReason::Repetition => "repetition",
        }
    }
}

/// Where prompt tokens came from (`vllm:prompt_tokens_by_source_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptTokenSource {
    /// Computed by this engine's prefill.
    LocalCompute,
    /// Taken from this engine's prefix cache.
    LocalCacheHit,
    /// Received from a KV connector.
    ExternalKvTransfer,
}

impl PromptTokenSource {
    const ALL: [PromptTokenSource; 3] = [
        PromptTokenSource::LocalCompute,
        PromptTokenSource::LocalCacheHit,
        PromptTokenSource::ExternalKvTransfer,
    ];
    fn as_str(self) -> &'static str {
        match self {
            PromptTokenSource::LocalCompute => "local_compute",
            PromptTokenSource::LocalCacheHit => "local_cache_hit",
            PromptTokenSource::ExternalKvTransfer => "external_kv_transfer",
        }
    }
}

/// Which cache tier supplied cached prompt tokens (`vllm:prompt_tokens_cached_by_source_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheTier {
    /// The engine's own KV blocks.
    Device,
    /// Offloaded to host memory.
    Host,
    /// From another instance.
    P2p,
    /// From disk.
    Disk,
    /// External, tier unknown.
    ExternalUnspecified,
}

impl CacheTier {
    const ALL: [CacheTier; 5] = [
        CacheTier::Device,
        CacheTier::Host,
        CacheTier::P2p,
        CacheTier::Disk,
        CacheTier::ExternalUnspecified,
    ];
    fn as_str(self) -> &'static str {
        match self {
            CacheTier::Device => "device",
            CacheTier::Host => "host",
            CacheTier::P2p => "p2p",
            CacheTier::Disk => "disk",
            CacheTier::ExternalUnspecified => "external_unspecified",
        }
    }
}

/// A queue limit that rejected an admission (`vllm:admission_rejections_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionRejection {
    /// Too many queued requests.
    MaxNumQueuedReqs,
    /// Too many queued tokens.
    MaxNumQueuedTokens,
}

impl AdmissionRejection {
    const ALL: [AdmissionRejection; 2] = [
        AdmissionRejection::MaxNumQueuedReqs,
        AdmissionRejection::MaxNumQueuedTokens,
    ];
    fn as_str(self) -> &'static str {
        match self {
            AdmissionRejection::MaxNumQueuedReqs => "max_num_queued_reqs",
            AdmissionRejection::MaxNumQueuedTokens => "max_num_queued_tokens",
        }
    }
}

/// The engine's sleep state (`vllm:engine_sleep_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepState {
    /// Serving.
    Awake,
    /// Sleep level 1.
    WeightsOffloaded,
    /// Sleep level 2.
    DiscardAll,
}

/// The labels of `vllm:cache_config_info`: vLLM's `CacheConfig` fields as Python `str()`s.
///
/// [`CacheConfigInfo::new`] fills every field the way the reference engine reports it and
/// derives the ones that follow from the simulator's own configuration (`block_size`,
/// `num_gpu_blocks`, `kv_cache_size_tokens`, `kv_cache_max_concurrency`); [`Self::set`] changes
/// any other. `max_model_len` is not a label: it sizes the token-count histograms.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfigInfo {
    labels: BTreeMap<String, String>,
    block_size: u32,
    num_gpu_blocks: u32,
    max_model_len: u32,
}

impl CacheConfigInfo {
    /// The reference engine's cache config with this block size, block count and model length.
    pub fn new(block_size: u32, num_gpu_blocks: u32, max_model_len: u32) -> Self {
        let size_tokens = u64::from(block_size) * u64::from(num_gpu_blocks);
        let concurrency = size_tokens as f64 / f64::from(max_model_len.max(1));
        let mut labels = BTreeMap::new();
        let defaults: [(&str, String); 36] = [
            ("_block_size_resolved", "True".into()),
            ("block_size", block_size.to_string()),
            ("cache_dtype", "auto".into()),
            ("cache_hit_alignment_tokens", "None".into()),
            ("effective_attention_block_size", block_size.to_string()),
            ("enable_mamba_shared_prefix_checkpoint", "False".into()),
            ("enable_prefix_caching", "True".into()),
            ("gpu_memory_utilization", "0.92".into()),
            ("hash_block_size", "None".into()),
            ("is_attention_free", "False".into()),
            ("kv_cache_dtype_skip_layers", "[]".into()),
            ("kv_cache_layout", "None".into()),
            ("kv_cache_max_concurrency", py_float_repr(concurrency)),
            ("kv_cache_memory_bytes", "1073741824".into()),
            ("kv_cache_size_tokens", size_tokens.to_string()),
            ("kv_offloading_backend", "native".into()),
            ("kv_offloading_size", "None".into()),
            ("kv_sharing_fast_prefill", "False".into()),
            ("mamba_block_size", "None".into()),
            ("mamba_cache_dtype", "auto".into()),
            ("mamba_cache_mode", "none".into()),
            ("mamba_page_size_padded", "None".into()),
            ("mamba_ssm_cache_dtype", "float32".into()),
            ("num_cpu_blocks", "None".into()),
            ("num_gpu_blocks", num_gpu_blocks.to_string()),
            ("num_gpu_blocks_override", num_gpu_blocks.to_string()),
            ("prefix_cache_retention_interval", "0".into()),
            ("prefix_caching_hash_algo", "sha256".into()),
            ("prefix_match_unit", "None".into()),
            ("replayssm_buffer_len", "16".into()),
            ("skip_page_size_padded", "None".into()),
            ("sliding_window", "None".into()),
            ("swa_bounded_replay", "True".into()),
            ("use_kda_recoverssm", "False".into()),
            ("use_replayssm", "False".into()),
            ("user_specified_block_size", "True".into()),
        ];
        for (k, v) in defaults {
            labels.insert(k.to_string(), v);
        }
        Self {
            labels,
            block_size,
            num_gpu_blocks,
            max_model_len,
        }
    }

    /// Sets one label (Python `str()` form: `True`, `None`, `0.92`). `engine` is added at render
    /// time and cannot be set here.
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        assert_ne!(key, "engine", "the engine label comes from VllmMetrics");
        self.labels.insert(key.to_string(), value.into());
        self
    }

    /// One label's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Number of KV blocks.
    pub fn num_gpu_blocks(&self) -> u32 {
        self.num_gpu_blocks
    }

    /// The model length the token-count histograms are sized for.
    pub fn max_model_len(&self) -> u32 {
        self.max_model_len
    }
}

/// Process figures the caller reads from the OS (`/proc`), rendered as prometheus_client's
/// process collector does. Never invented here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// Virtual memory size in bytes.
    pub virtual_memory_bytes: f64,
    /// Resident memory size in bytes.
    pub resident_memory_bytes: f64,
    /// Start time of the process since the unix epoch, in seconds.
    pub start_time_seconds: f64,
    /// User plus system CPU seconds.
    pub cpu_seconds_total: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The open-files limit.
    pub max_fds: f64,
}

impl ProcessStats {
    /// Writes the six `process_*` families in prometheus_client's order.
    pub fn render_into(&self, out: &mut String) {
        let families: [(&str, &str, &str, f64); 6] = [
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                "gauge",
                self.virtual_memory_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                "gauge",
                self.resident_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                "gauge",
                self.start_time_seconds,
            ),
            (
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                "counter",
                self.cpu_seconds_total,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                "gauge",
                self.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                "gauge",
                self.max_fds,
            ),
        ];
        for (name, help, kind, v) in families {
            text::write_header(out, name, help, kind);
            text::write_sample(out, name, &[], v);
        }
    }
}

/// What the engine knows about a request when it finishes; [`VllmMetrics::observe_finished`]
/// turns it into vLLM's per-request observations.
///
/// Timestamps are seconds. As in vLLM, `arrival_ts` and `finished_ts` are the frontend's wall
/// clock (e2e = finished − arrival), and the other four are engine-core times: queued →
/// scheduled is the queue time, scheduled → first token the prefill time, first → last token the
/// decode time, scheduled → last token the inference time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinishedRequest {
    /// Why it finished.
    pub finish_reason: FinishReason,
    /// When the frontend received it.
    pub arrival_ts: f64,
    /// When it finished (the iteration timestamp of its last output).
    pub finished_ts: f64,
    /// First entry into the waiting queue.
    pub queued_ts: f64,
    /// First scheduling.
    pub scheduled_ts: f64,
    /// When the model produced its first token.
    pub first_token_ts: f64,
    /// When the model produced its last token.
    pub last_token_ts: f64,
    /// Prompt length.
    pub num_prompt_tokens: u64,
    /// Tokens generated.
    pub num_generation_tokens: u64,
    /// Prompt tokens served from the prefix cache (local + external).
    pub num_cached_tokens: u64,
    /// Times it was preempted.
    pub num_preemptions: u64,
    /// The request's `max_tokens`, when set.
    pub max_tokens_param: Option<u64>,
}

/// Every vLLM metric the simulator models, and the renderer of the `/metrics` page.
#[derive(Debug, Clone)]
pub struct VllmMetrics {
    model_name: String,
    engine: String,
    cache_config: CacheConfigInfo,
    created_unix: f64,

    estimated_flops_per_gpu: f64,
    estimated_read_bytes_per_gpu: f64,
    estimated_write_bytes_per_gpu: f64,
    num_requests_running: u64,
    waiting_capacity: u64,
    waiting_deferred: u64,
    sleep_state: SleepState,
    kv_cache_usage: f64,
    prefix_cache_queries: u64,
    prefix_cache_hits: u64,
    external_prefix_cache_queries: u64,
    external_prefix_cache_hits: u64,
    mm_cache_queries: u64,
    mm_cache_hits: u64,
    num_preemptions: u64,
    prompt_tokens: u64,
    prompt_tokens_by_source: [u64; 3],
    prompt_tokens_cached: u64,
    prompt_tokens_cached_by_source: [u64; 5],
    generation_tokens: u64,
    request_success: [u64; 5],
    admission_rejections: [u64; 2],

    request_prompt_tokens: Histogram,
    request_generation_tokens: Histogram,
    iteration_tokens: Histogram,
    request_max_num_generation_tokens: Histogram,
    request_params_n: Histogram,
    request_params_max_tokens: Histogram,
    ttft: Histogram,
    inter_token_latency: Histogram,
    time_per_output_token: Histogram,
    e2e_latency: Histogram,
    queue_time: Histogram,
    inference_time: Histogram,
    prefill_time: Histogram,
    decode_time: Histogram,
    request_num_preemptions: Histogram,
    prefill_kv_computed_tokens: Histogram,
}

impl VllmMetrics {
    /// Fresh metrics for one engine: everything at 0, awake, every `_created` at `created_unix`.
    pub fn new(
        model_name: impl Into<String>,
        engine_index: u32,
        cache_config: CacheConfigInfo,
        created_unix: f64,
    ) -> Self {
        let tokens = build_1_2_5_buckets(u64::from(cache_config.max_model_len));
        let h = |b: &[f64]| Histogram::new(b.to_vec());
        Self {
            model_name: model_name.into(),
            engine: engine_index.to_string(),
            cache_config,
            created_unix,
            estimated_flops_per_gpu: 0.0,
            estimated_read_bytes_per_gpu: 0.0,
            estimated_write_bytes_per_gpu: 0.0,
            num_requests_running: 0,
            waiting_capacity: 0,
            waiting_deferred: 0,
            sleep_state: SleepState::Awake,
            kv_cache_usage: 0.0,
            prefix_cache_queries: 0,
            prefix_cache_hits: 0,
            external_prefix_cache_queries: 0,
            external_prefix_cache_hits: 0,
            mm_cache_queries: 0,
            mm_cache_hits: 0,
            num_preemptions: 0,
            prompt_tokens: 0,
            prompt_tokens_by_source: [0; 3],
            prompt_tokens_cached: 0,
            prompt_tokens_cached_by_source: [0; 5],
            generation_tokens: 0,
            request_success: [0; 5],
            admission_rejections: [0; 2],
            request_prompt_tokens: h(&tokens),
            request_generation_tokens: h(&tokens),
            iteration_tokens: h(ITERATION_TOKENS_BUCKETS),
            request_max_num_generation_tokens: h(&tokens),
            request_params_n: h(PARAMS_N_BUCKETS),
            request_params_max_tokens: h(&tokens),
            ttft: h(TTFT_BUCKETS),
            inter_token_latency: h(ITL_BUCKETS),
            time_per_output_token: h(ITL_BUCKETS),
            e2e_latency: h(REQUEST_LATENCY_BUCKETS),
            queue_time: h(REQUEST_LATENCY_BUCKETS),
            inference_time: h(REQUEST_LATENCY_BUCKETS),
            prefill_time: h(REQUEST_LATENCY_BUCKETS),
            decode_time: h(REQUEST_LATENCY_BUCKETS),
            request_num_preemptions: h(NUM_PREEMPTIONS_BUCKETS),
            prefill_kv_computed_tokens: h(&tokens),
        }
    }

    /// The cache config the page reports.
    pub fn cache_config(&self) -> &CacheConfigInfo {
        &self.cache_config
    }

    // ---- gauges ----

    /// `vllm:num_requests_running`.
    pub fn set_running(&mut self, n: u64) {
        self.num_requests_running = n;
    }

    /// `vllm:num_requests_waiting` and its `capacity` reason (`deferred` is left as is).
    pub fn set_waiting(&mut self, n: u64) {
        self.waiting_capacity = n;
    }

    /// Waiting requests split by reason; `vllm:num_requests_waiting` is their sum.
    pub fn set_waiting_by_reason(&mut self, capacity: u64, deferred: u64) {
        self.waiting_capacity = capacity;
        self.waiting_deferred = deferred;
    }

    /// `vllm:kv_cache_usage_perc`, a fraction in `0..=1`.
    pub fn set_kv_cache_usage(&mut self, fraction: f64) {
        self.kv_cache_usage = fraction;
    }

    /// `vllm:engine_sleep_state`.
    pub fn set_sleep_state(&mut self, state: SleepState) {
        self.sleep_state = state;
    }

    // ---- counters ----

    /// `vllm:prefix_cache_queries_total` / `hits_total`, in tokens.
    pub fn inc_prefix_cache(&mut self, queries: u64, hits: u64) {
        self.prefix_cache_queries += queries;
        self.prefix_cache_hits += hits;
    }

    /// `vllm:external_prefix_cache_queries_total` / `hits_total`, in tokens.
    pub fn inc_external_prefix_cache(&mut self, queries: u64, hits: u64) {
        self.external_prefix_cache_queries += queries;
        self.external_prefix_cache_hits += hits;
    }

    /// `vllm:mm_cache_queries_total` / `hits_total`, in items.
    pub fn inc_mm_cache(&mut self, queries: u64, hits: u64) {
        self.mm_cache_queries += queries;
        self.mm_cache_hits += hits;
    }

    /// The `vllm:estimated_*_per_gpu_total` counters.
    pub fn inc_estimated_per_gpu(&mut self, flops: f64, read_bytes: f64, write_bytes: f64) {
        self.estimated_flops_per_gpu += flops;
        self.estimated_read_bytes_per_gpu += read_bytes;
        self.estimated_write_bytes_per_gpu += write_bytes;
    }

    /// `vllm:num_preemptions_total`.
    pub fn inc_preemptions(&mut self, n: u64) {
        self.num_preemptions += n;
    }

    /// `vllm:prompt_tokens_total`.
    pub fn inc_prompt_tokens(&mut self, n: u64) {
        self.prompt_tokens += n;
    }

    /// `vllm:prompt_tokens_by_source_total{source}`.
    pub fn inc_prompt_tokens_by_source(&mut self, source: PromptTokenSource, n: u64) {
        self.prompt_tokens_by_source[source as usize] += n;
    }

    /// `vllm:prompt_tokens_cached_total`.
    pub fn inc_prompt_tokens_cached(&mut self, n: u64) {
        self.prompt_tokens_cached += n;
    }

    /// `vllm:prompt_tokens_cached_by_source_total{source}`.
    pub fn inc_prompt_tokens_cached_by_source(&mut self, tier: CacheTier, n: u64) {
        self.prompt_tokens_cached_by_source[tier as usize] += n;
    }

    /// A prefill admission served locally: `computed` tokens to compute and `cached` from this
    /// engine's prefix cache. Bumps `prompt_tokens`, both by-source counters and
    /// `prompt_tokens_cached`, as vLLM does for an engine without a KV connector.
    pub fn inc_prompt_tokens_local(&mut self, computed: u64, cached: u64) {
        self.inc_prompt_tokens(computed + cached);
        self.inc_prompt_tokens_by_source(PromptTokenSource::LocalCompute, computed);
        self.inc_prompt_tokens_by_source(PromptTokenSource::LocalCacheHit, cached);
        self.inc_prompt_tokens_cached(cached);
        self.inc_prompt_tokens_cached_by_source(CacheTier::Device, cached);
    }

    /// `vllm:generation_tokens_total`.
    pub fn inc_generation_tokens(&mut self, n: u64) {
        self.generation_tokens += n;
    }

    /// `vllm:request_success_total{finished_reason}`.
    pub fn inc_request_success(&mut self, reason: FinishReason) {
        self.request_success[reason as usize] += 1;
    }

    /// `vllm:admission_rejections_total{reason}`.
    pub fn inc_admission_rejection(&mut self, reason: AdmissionRejection) {
        self.admission_rejections[reason as usize] += 1;
    }

    // ---- histograms ----

    /// `vllm:time_to_first_token_seconds`: observed when the model produces the first token.
    pub fn observe_ttft(&mut self, secs: f64) {
        self.ttft.observe(secs);
    }

    /// `vllm:inter_token_latency_seconds`: observed for each token after the first.
    pub fn observe_inter_token_latency(&mut self, secs: f64) {
        self.inter_token_latency.observe(secs);
    }

    /// `vllm:iteration_tokens_total`: tokens scheduled in one engine step.
    pub fn observe_iteration_tokens(&mut self, n: u64) {
        self.iteration_tokens.observe(n as f64);
    }

    /// Once per finished parent request: `vllm:request_params_n` and
    /// `vllm:request_max_num_generation_tokens` (the most tokens any of its `n` outputs made).
    pub fn observe_parent_finished(&mut self, n: u64, max_num_generation_tokens: u64) {
        self.request_params_n.observe(n as f64);
        self.request_max_num_generation_tokens
            .observe(max_num_generation_tokens as f64);
    }

    /// One finished request, as vLLM's Prometheus logger records it: the success counter and the
    /// e2e, queue, prefill, decode, inference, prompt/generation token, time-per-output-token,
    /// preemption and computed-prefill histograms, and `max_tokens` when it was set.
    pub fn observe_finished(&mut self, r: &FinishedRequest) {
        let e2e = r.finished_ts - r.arrival_ts;
        let queued = r.scheduled_ts - r.queued_ts;
        let prefill = r.first_token_ts - r.scheduled_ts;
        let decode = r.last_token_ts - r.first_token_ts;
        let inference = r.last_token_ts - r.scheduled_ts;
        let tpot = if r.num_generation_tokens > 1 {
            decode / (r.num_generation_tokens - 1) as f64
        } else {
            0.0
        };
        self.inc_request_success(r.finish_reason);
        self.e2e_latency.observe(e2e);
        self.queue_time.observe(queued);
        self.prefill_time.observe(prefill);
        self.decode_time.observe(decode);
        self.inference_time.observe(inference);
        self.request_prompt_tokens
            .observe(r.num_prompt_tokens as f64);
        self.request_generation_tokens
            .observe(r.num_generation_tokens as f64);
        self.time_per_output_token.observe(tpot);
        self.request_num_preemptions
            .observe(r.num_preemptions as f64);
        self.prefill_kv_computed_tokens
            .observe(r.num_prompt_tokens.saturating_sub(r.num_cached_tokens) as f64);
        if let Some(max_tokens) = r.max_tokens_param {
            self.request_params_max_tokens.observe(max_tokens as f64);
        }
    }

    /// Mutable access to one histogram by its family name (`"vllm:e2e_request_latency_seconds"`),
    /// for engines that observe a phase on its own and for tests.
    pub fn histogram_mut(&mut self, family: &str) -> Option<&mut Histogram> {
        Some(match family {
            "vllm:request_prompt_tokens" => &mut self.request_prompt_tokens,
            "vllm:request_generation_tokens" => &mut self.request_generation_tokens,
            "vllm:iteration_tokens_total" => &mut self.iteration_tokens,
            "vllm:request_max_num_generation_tokens" => &mut self.request_max_num_generation_tokens,
            "vllm:request_params_n" => &mut self.request_params_n,
            "vllm:request_params_max_tokens" => &mut self.request_params_max_tokens,
            "vllm:time_to_first_token_seconds" => &mut self.ttft,
            "vllm:inter_token_latency_seconds" => &mut self.inter_token_latency,
            "vllm:request_time_per_output_token_seconds" => &mut self.time_per_output_token,
            "vllm:e2e_request_latency_seconds" => &mut self.e2e_latency,
            "vllm:request_queue_time_seconds" => &mut self.queue_time,
            "vllm:request_inference_time_seconds" => &mut self.inference_time,
            "vllm:request_prefill_time_seconds" => &mut self.prefill_time,
            "vllm:request_decode_time_seconds" => &mut self.decode_time,
            "vllm:request_num_preemptions" => &mut self.request_num_preemptions,
            "vllm:request_prefill_kv_computed_tokens" => &mut self.prefill_kv_computed_tokens,
            _ => return None,
        })
    }

    // ---- rendering ----

    /// The `/metrics` body: the `vllm:` families in vLLM's order.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(48 * 1024);
        self.render_vllm_into(&mut out);
        out
    }

    /// The `/metrics` body with the `process_*` families first, as prometheus_client orders them.
    pub fn render_with_process(&self, process: &ProcessStats) -> String {
        let mut out = String::with_capacity(49 * 1024);
        process.render_into(&mut out);
        self.render_vllm_into(&mut out);
        out
    }

    fn render_vllm_into(&self, out: &mut String) {
        let model = self.model_name.as_str();
        let engine = self.engine.as_str();
        let base: [(&str, &str); 2] = [("engine", engine), ("model_name", model)];
        let mut w = Writer {
            out,
            base,
            created: self.created_unix,
        };

        w.counter(
            "vllm:estimated_flops_per_gpu",
            "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
            None,
            &[("", self.estimated_flops_per_gpu)],
        );
        w.counter(
            "vllm:estimated_read_bytes_per_gpu",
            "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
            None,
            &[("", self.estimated_read_bytes_per_gpu)],
        );
        w.counter(
            "vllm:estimated_write_bytes_per_gpu",
            "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
            None,
            &[("", self.estimated_write_bytes_per_gpu)],
        );
        w.gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            None,
            &[("", self.num_requests_running as f64)],
        );
        w.gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            None,
            &[("", (self.waiting_capacity + self.waiting_deferred) as f64)],
        );
        w.gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            Some("reason"),
            &[
                ("capacity", self.waiting_capacity as f64),
                ("deferred", self.waiting_deferred as f64),
            ],
        );
        let (awake, offloaded, discard) = match self.sleep_state {
            SleepState::Awake => (1.0, 0.0, 0.0),
            SleepState::WeightsOffloaded => (0.0, 1.0, 0.0),
            SleepState::DiscardAll => (0.0, 0.0, 1.0),
        };
        w.gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            Some("sleep_state"),
            &[("awake", awake), ("weights_offloaded", offloaded), ("discard_all", discard)],
        );
        w.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            None,
            &[("", self.kv_cache_usage)],
        );
        let simple: [(&str, &str, u64); 8] = [
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                self.prefix_cache_queries,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                self.prefix_cache_hits,
            ),
            (
                "vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
                self.external_prefix_cache_queries,
            ),
            (
                "vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
                self.external_prefix_cache_hits,
            ),
            (
                "vllm:mm_cache_queries",
                "Multi-modal cache queries, in terms of number of queried items.",
                self.mm_cache_queries,
            ),
            (
                "vllm:mm_cache_hits",
                "Multi-modal cache hits, in terms of number of cached items.",
                self.mm_cache_hits,
            ),
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                self.num_preemptions,
            ),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
        ];
        for (name, help, v) in simple {
            w.counter(name, help, None, &[("", v as f64)]);
        }
        let by_source: Vec<(&str, f64)> = PromptTokenSource::ALL
            .iter()
            .map(|s| (s.as_str(), self.prompt_tokens_by_source[*s as usize] as f64))
            .collect();
        w.counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            Some("source"),
            &by_source,
        );
        w.counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            None,
            &[("", self.prompt_tokens_cached as f64)],
        );
        let by_tier: Vec<(&str, f64)> = CacheTier::ALL
            .iter()
            .map(|t| {
                (
                    t.as_str(),
                    self.prompt_tokens_cached_by_source[*t as usize] as f64,
                )
            })
            .collect();
        w.counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            Some("source"),
            &by_tier,
        );
        w.counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            None,
            &[("", self.generation_tokens as f64)],
        );
        let success: Vec<(&str, f64)> = FinishReason::ALL
            .iter()
            .map(|r| (r.as_str(), self.request_success[*r as usize] as f64))
            .collect();
        w.counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            Some("finished_reason"),
            &success,
        );
        // vLLM registers this one without the engine label.
        let rejections: Vec<(&str, f64)> = AdmissionRejection::ALL
            .iter()
            .map(|r| (r.as_str(), self.admission_rejections[*r as usize] as f64))
            .collect();
        let saved = w.base;
        w.base = [("model_name", model), ("", "")];
        w.counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            Some("reason"),
            &rejections,
        );
        w.base = saved;

        let histograms: [(&str, &str, &Histogram); 16] = [
            (
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                &self.request_prompt_tokens,
            ),
            (
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                &self.request_generation_tokens,
            ),
            (
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                &self.iteration_tokens,
            ),
            (
                "vllm:request_max_num_generation_tokens",
                "Histogram of maximum number of requested generation tokens.",
                &self.request_max_num_generation_tokens,
            ),
            (
                "vllm:request_params_n",
                "Histogram of the n request parameter.",
                &self.request_params_n,
            ),
            (
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                &self.request_params_max_tokens,
            ),
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &self.ttft,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &self.inter_token_latency,
            ),
            (
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                &self.time_per_output_token,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &self.e2e_latency,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                &self.queue_time,
            ),
            (
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                &self.inference_time,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                &self.prefill_time,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                &self.decode_time,
            ),
            (
                "vllm:request_num_preemptions",
                "Histogram of the number of times a request was preempted.",
                &self.request_num_preemptions,
            ),
            (
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                &self.prefill_kv_computed_tokens,
            ),
        ];
        for (name, help, h) in histograms {
            w.histogram(name, help, h);
        }

        let name = "vllm:cache_config_info";
        text::write_header(
            w.out,
            name,
            "Information of the LLMEngine CacheConfig",
            "gauge",
        );
        let mut labels: Vec<(&str, &str)> = self
            .cache_config
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        labels.push(("engine", engine));
        text::write_sample(w.out, name, &labels, 1.0);
    }
}

/// Writes families with the shared base labels and `_created` value.
struct Writer<'a> {
    out: &'a mut String,
    /// `engine` and `model_name`; an entry with an empty name is skipped.
    base: [(&'a str, &'a str); 2],
    created: f64,
}

impl Writer<'_> {
    fn labels<'b>(&self, extra: Option<(&'b str, &'b str)>) -> Vec<(&'b str, &'b str)>
    where
        Self: 'b,
    {
        let mut v: Vec<(&str, &str)> = self
            .base
            .iter()
            .copied()
            .filter(|(k, _)| !k.is_empty())
            .collect();
        v.extend(extra);
        v
    }

    fn samples(&mut self, name: &str, label: Option<&str>, children: &[(&str, f64)]) {
        for (value_label, v) in children {
            let labels = self.labels(label.map(|l| (l, *value_label)));
            text::write_sample(self.out, name, &labels, *v);
        }
    }

    fn created(&mut self, base: &str, help: &str, label: Option<&str>, children: &[(&str, f64)]) {
        let name = format!("{base}_created");
        text::write_header(self.out, &name, help, "gauge");
        let created: Vec<(&str, f64)> = children.iter().map(|(l, _)| (*l, self.created)).collect();
        self.samples(&name, label, &created);
    }

    /// A counter named `base` + `_total`, one child per `(label value, value)`.
    fn counter(&mut self, base: &str, help: &str, label: Option<&str>, children: &[(&str, f64)]) {
        let total = format!("{base}_total");
        text::write_header(self.out, &total, help, "counter");
        self.samples(&total, label, children);
        self.created(base, help, label, children);
    }

    fn gauge(&mut self, name: &str, help: &str, label: Option<&str>, children: &[(&str, f64)]) {
        text::write_header(self.out, name, help, "gauge");
        self.samples(name, label, children);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        text::write_header(self.out, name, help, "histogram");
        let labels = self.labels(None);
        h.write(self.out, name, &labels);
        self.created(name, help, None, &[("", 0.0)]);
    }
}
