//! `inferrail calibrate`: measures an idle engine's prefill cost and fits the router's cost model
//! `P(u, c) = a*u + b*u*(c + u/2) + d` (`routing.cost_model`, or a model's own `cost_model`).
//!
//! # Measurement
//!
//! Each probe is a `/v1/completions` request whose prompt is given as token ids (no tokenizer
//! needed; ids from a seeded SplitMix64, all in `10..1000` so they fit any vocabulary) with
//! `max_tokens: 1`. A probe `(c cached, u uncached)` first sends its `c`-token prefix alone, so
//! that the engine caches it, then the `c + u`-token prompt. Around that second request the
//! engine's `/metrics` page is read (one request at a time, the engine idle before each):
//! - its TTFT is the delta of `vllm:time_to_first_token_seconds_sum`, summed over every series
//!   (vLLM labels them by `model_name` and `engine`); the `_count` delta must be exactly 1;
//! - its cached tokens are the delta of `vllm:prefix_cache_hits_total`. When that differs from
//!   the intended `c` (vLLM may have evicted a block), the measured value is used: the row is
//!   still a valid observation of `P(u, c)`.
//!
//! # Probe plan
//!
//! [`plan`] lays a grid of `u` (geometric, 16 up to `min(2048, total/2)`: at most one prefill
//! chunk under vLLM's usual `max_num_batched_tokens`, since every extra chunk pays its own step
//! overhead) by `c` (four levels from 0 to what the total leaves, multiples of the block size),
//! visited in a Latin-square order so that any first few probes already span both axes: the
//! smallest prompts fix `d`, the largest `u` fix `a`, and `c` varying at fixed `u` fixes `b`.
//!
//! # Fit
//!
//! The rows `[u, u*(c + u/2), 1] -> ttft` go through [`crate::nnls::fit`] (ordinary,
//! unweighted least squares with `a, b, d >= 0`); the report gives the RMS residual and the worst
//! relative error, and [`fragment`] prints the YAML to paste into the config.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use inferrail_config::{CostModelParams, UpstreamUrl};

use crate::client::{Connection, Response};
use crate::nnls;
use inferrail_control::fleet::engine_load::{self, EngineKind};

/// Probes by default.
pub const DEFAULT_PROBES: usize = 24;
/// Largest uncached part of a probe (one prefill chunk under vLLM's common token budget).
pub const MAX_UNCACHED: usize = 2048;
/// Smallest uncached part of a probe.
pub const MIN_UNCACHED: usize = 16;
/// The probe sizes' default ceiling (prompt tokens), further capped by the engine's limits.
pub const DEFAULT_MAX_TOKENS_TOTAL: usize = 8192;
/// How long to wait for the engine to become idle and its metrics to show a request.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one HTTP exchange may stay silent.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
const U_LEVELS: usize = 6;
const C_LEVELS: usize = 4;

/// What `inferrail calibrate` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrateOptions {
    /// The engine's base URL (`--url`).
    pub url: String,
    /// `--model`: the model to send requests for and to print a `models:` fragment for;
    /// `None` asks for the engine's first model and prints `routing.cost_model`.
    pub model: Option<String>,
    /// `--out`: write the fragment there instead of stdout.
    pub out: Option<PathBuf>,
    /// `--probes`: how many measured requests (each with its prefix request).
    pub probes: usize,
    /// `--block-size`: the engine's KV block size; read from its metrics (else 16) when `None`.
    pub block_size: Option<usize>,
    /// `--max-tokens-total`: the largest probe prompt; a default under the engine's limits when
    /// `None`.
    pub max_tokens_total: Option<usize>,
    /// Seeds the token ids (distinct runs should use distinct seeds so that an earlier run's
    /// cached prompts cannot match).
    pub seed: u64,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            url: String::new(),
            model: None,
            out: None,
            probes: DEFAULT_PROBES,
            block_size: None,
            max_tokens_total: None,
            seed: 0x1f2e_3d4c_5b6a_7988,
        }
    }
}

/// Why calibration failed. Every message names the engine URL (when there is one) and fits on
/// one line.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// The command line is wrong.
    #[error("{0}")]
    Usage(String),
    /// `--url` is not a plain `http://host:port` URL.
    #[error("{url}: bad engine URL: {why}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// Connecting, writing or reading failed.
    #[error("{url}: engine unreachable ({what}): {source}")]
    Unreachable {
        /// The engine URL.
        url: String,
        /// The request that failed, like `GET /metrics`.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The engine answered with an unexpected status or body.
    #[error("{url}: {what} answered {detail}")]
    BadResponse {
        /// The engine URL.
        url: String,
        /// The request, like `POST /v1/completions`.
        what: String,
        /// Status and (short) body, or what was wrong with the body.
        detail: String,
    },
    /// The metrics page lacks what calibration needs.
    #[error("{url}: metrics unusable: {why}")]
    Metrics {
        /// The engine URL.
        url: String,
        /// What is missing.
        why: String,
    },
    /// The engine had other requests running or waiting.
    #[error("{url}: engine not idle ({running} running, {waiting} waiting after {waited:.1?}); calibrate needs an engine nobody else is using")]
    NotIdle {
        /// The engine URL.
        url: String,
        /// `vllm:num_requests_running`.
        running: f64,
        /// `vllm:num_requests_waiting`.
        waiting: f64,
        /// How long calibrate waited for it to drain.
        waited: Duration,
    },
    /// The TTFT histogram did not count exactly the one probe request.
    #[error("{url}: vllm:time_to_first_token_seconds_count went up by {delta} around one request (expected 1); is another client using the engine?")]
    CountDelta {
        /// The engine URL.
        url: String,
        /// The observed change.
        delta: f64,
    },
    /// The engine does not serve the requested model.
    #[error("{url}: engine does not serve model {model:?} (it serves: {served})")]
    UnknownModel {
        /// The engine URL.
        url: String,
        /// `--model`.
        model: String,
        /// The ids `/v1/models` listed.
        served: String,
    },
    /// The probe sizes do not fit the limits.
    #[error("{url}: {why}")]
    Plan {
        /// The engine URL.
        url: String,
        /// What does not fit.
        why: String,
    },
    /// A measured row makes no sense (more cached tokens than the prompt had).
    #[error("{url}: {why}")]
    BadRow {
        /// The engine URL.
        url: String,
        /// What was measured.
        why: String,
    },
    /// `--out` could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// One planned probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Prefix tokens sent first (a multiple of the block size).
    pub cached: usize,
    /// Fresh tokens after the prefix.
    pub uncached: usize,
}

/// One measured probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// The probe as planned.
    pub probe: Probe,
    /// Cached tokens the engine reported (prefix-cache hits delta).
    pub cached: usize,
    /// Uncached tokens: the prompt length minus `cached`.
    pub uncached: usize,
    /// The request's TTFT in seconds (TTFT histogram sum delta).
    pub ttft: f64,
}

impl Row {
    /// The row of the least-squares problem: `[u, u*(c + u/2), 1]`.
    pub fn features(&self) -> [f64; 3] {
        let u = self.uncached as f64;
        let c = self.cached as f64;
        [u, u * (c + u / 2.0), 1.0]
    }
}

/// The fitted cost model and how well it fits.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The engine URL.
    pub url: String,
    /// The model the probes were sent for.
    pub model: String,
    /// The block size used for prefixes.
    pub block_size: usize,
    /// The seed of the token ids.
    pub seed: u64,
    /// `a`, seconds per computed prompt token.
    pub prefill_token_secs: f64,
    /// `b`, seconds per (computed token, context token) pair.
    pub prefill_pair_secs: f64,
    /// `d`, fixed seconds per prefill.
    pub prefill_fixed_secs: f64,
    /// Every measured probe.
    pub rows: Vec<Row>,
    /// Root mean square of the residuals, seconds.
    pub rms_secs: f64,
    /// Largest `|predicted - measured| / measured` over the rows.
    pub worst_relative_error: f64,
}

/// Parses `calibrate`'s arguments (after the command name): `--url ENGINE [--model NAME]
/// [--out FILE] [--probes N] [--block-size N] [--max-tokens-total N]`, each also as
/// `--flag=value`.
pub fn parse_args(args: &[String]) -> Result<CalibrateOptions, CalibrateError> {
    let mut o = CalibrateOptions {
        seed: clock_seed(),
        ..CalibrateOptions::default()
    };
    let mut url = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        const FLAGS: [&str; 6] = [
            "--url",
            "--model",
            "--out",
            "--probes",
            "--block-size",
            "--max-tokens-total",
        ];
        if !FLAGS.contains(&flag) {
            return Err(CalibrateError::Usage(format!(
                "unexpected argument `{arg}`"
            )));
        }
        let value = inline
            .or_else(|| it.next().cloned())
            .ok_or_else(|| CalibrateError::Usage(format!("{flag} needs a value")))?;
        match flag {
            "--url" => url = Some(value),
            "--model" => o.model = Some(value),
            "--out" => o.out = Some(PathBuf::from(value)),
            "--probes" => o.probes = count(flag, &value, 4)?,
            "--block-size" => o.block_size = Some(count(flag, &value, 1)?),
            "--max-tokens-total" => o.max_tokens_total = Some(count(flag, &value, 64)?),
            _ => {
                return Err(CalibrateError::Usage(format!(
                    "unexpected argument `{arg}`"
                )))
            }
        }
    }
    o.url = url.ok_or_else(|| CalibrateError::Usage("--url ENGINE is required".into()))?;
    Ok(o)
}

/// A whole number at least `min`.
fn count(flag: &str, v: &str, min: usize) -> Result<usize, CalibrateError> {
    match v.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(CalibrateError::Usage(format!(
            "{flag}: expected a whole number >= {min} (got {v:?})"
        ))),
    }
}

/// A seed from the wall clock, so that runs do not repeat each other's prompts.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The probe grid (see the module docs): `probes` probes whose prompts are at most `max_total`
/// tokens, prefixes in multiples of `block_size`. `Err` names what does not fit.
pub fn plan(probes: usize, block_size: usize, max_total: usize) -> Result<Vec<Probe>, String> {
    let block_size = block_size.max(1);
    let u_max = MAX_UNCACHED.min(max_total / 2);
    if u_max < 4 * MIN_UNCACHED || max_total - u_max < block_size {
        return Err(format!(
            "probes of up to {max_total} tokens are too small to calibrate with (block size \
             {block_size}); allow at least {} with --max-tokens-total",
            (8 * MIN_UNCACHED).max(2 * block_size)
        ));
    }
    let c_max = (max_total - u_max) / block_size * block_size;
    let u_at = |i: usize| {
        let r = (u_max as f64 / MIN_UNCACHED as f64).powf(i as f64 / (U_LEVELS - 1) as f64);
        ((MIN_UNCACHED as f64 * r).round() as usize).clamp(MIN_UNCACHED, u_max)
    };
    let c_at = |j: usize| c_max * j / (C_LEVELS - 1) / block_size * block_size;
    Ok((0..probes)
        .map(|i| {
            let k = i % (U_LEVELS * C_LEVELS);
            Probe {
                uncached: u_at(k % U_LEVELS),
                cached: c_at((k / U_LEVELS + k) % C_LEVELS),
            }
        })
        .collect())
}

/// SplitMix64: the token ids' generator.
#[derive(Debug, Clone)]
pub struct TokenIds(u64);

impl TokenIds {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        TokenIds(seed)
    }

    /// `n` ids, each in `10..1000`.
    pub fn take(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| 10 + (self.next() % 990) as u32).collect()
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// An engine reached over plain HTTP/1.1.
struct Engine {
    url: String,
    addr: SocketAddr,
}

impl Engine {
    fn connect(url: &str) -> Result<Engine, CalibrateError> {
        let bad = |why: String| CalibrateError::BadUrl {
            url: url.to_string(),
            why,
        };
        let parsed = UpstreamUrl::parse(url).map_err(bad)?;
        let addr = parsed
            .authority()
            .to_socket_addrs()
            .map_err(|e| bad(format!("cannot resolve {}: {e}", parsed.authority())))?
            .next()
            .ok_or_else(|| bad(format!("{} resolves to no address", parsed.authority())))?;
        Ok(Engine {
            url: url.trim_end_matches('/').to_string(),
            addr,
        })
    }

    /// One request on a fresh connection; `Err` unless the status is 200.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, CalibrateError> {
        let what = format!("{method} {path}");
        let unreachable = |source| CalibrateError::Unreachable {
            url: self.url.clone(),
            what: what.clone(),
            source,
        };
        let mut conn = Connection::open(self.addr, READ_TIMEOUT).map_err(unreachable)?;
        let resp = conn.call(method, path, &[], body).map_err(unreachable)?;
        if resp.status != 200 {
            let text: String = resp.text().chars().take(200).collect();
            return Err(self.bad_response(&what, format!("{} {}", resp.status, text.trim())));
        }
        Ok(resp)
    }

    fn bad_response(&self, what: &str, detail: String) -> CalibrateError {
        CalibrateError::BadResponse {
            url: self.url.clone(),
            what: what.to_string(),
            detail,
        }
    }

    fn metrics_error(&self, why: impl Into<String>) -> CalibrateError {
        CalibrateError::Metrics {
            url: self.url.clone(),
            why: why.into(),
        }
    }
}

/// The engine's served models and their `max_model_len` from `/v1/models`.
fn served_models(engine: &Engine) -> Result<Vec<(String, Option<usize>)>, CalibrateError> {
    let resp = engine.call("GET", "/v1/models", None)?;
    let doc: serde_json::Value = serde_json::from_slice(&resp.body)
        .map_err(|e| engine.bad_response("GET /v1/models", format!("invalid JSON: {e}")))?;
    let list = doc["data"].as_array().cloned().unwrap_or_default();
    let models: Vec<(String, Option<usize>)> = list
        .iter()
        .filter_map(|m| {
            let id = m["id"].as_str()?.to_string();
            let len = m["max_model_len"].as_u64().map(|n| n as usize);
            Some((id, len))
        })
        .collect();
    if models.is_empty() {
        return Err(engine.bad_response("GET /v1/models", "no models listed".into()));
    }
    Ok(models)
}

/// The model to probe and its `max_model_len`.
fn pick_model(
    engine: &Engine,
    wanted: Option<&str>,
) -> Result<(String, Option<usize>), CalibrateError> {
    let mut models = served_models(engine)?;
    let Some(name) = wanted else {
        return Ok(models.swap_remove(0));
    };
    models
        .iter()
        .find(|(id, _)| id == name)
        .cloned()
        .ok_or_else(|| CalibrateError::UnknownModel {
            url: engine.url.clone(),
            model: name.to_string(),
            served: models
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// What one `/metrics` read says.
#[derive(Debug, Clone, Copy)]
struct Reading {
    ttft_sum: f64,
    ttft_count: f64,
    hits: f64,
    running: f64,
    waiting: f64,
    block_size: Option<usize>,
    kv_blocks: Option<u64>,
}

fn read_metrics(engine: &Engine) -> Result<Reading, CalibrateError> {
    let page = engine.call("GET", "/metrics", None)?.body;
    let load = engine_load::parse(&page).map_err(|e| engine.metrics_error(e.to_string()))?;
    if load.engine != EngineKind::Vllm {
        return Err(engine.metrics_error(format!(
            "a {} page; calibrate reads vLLM's metrics",
            load.engine.as_str()
        )));
    }
    let family = |name: &str| {
        engine_load::sample_sum(&page, name)
            .ok_or_else(|| engine.metrics_error(format!("no {name} sample")))
    };
    Ok(Reading {
        ttft_sum: family("vllm:time_to_first_token_seconds_sum")?,
        ttft_count: family("vllm:time_to_first_token_seconds_count")?,
        hits: load.prefix_cache_hits,
        running: load.running,
        waiting: load.waiting,
        block_size: engine_load::label_value(&page, "vllm:cache_config_info", "block_size")
            .and_then(|v| v.parse().ok()),
        kv_blocks: load.kv_capacity_blocks,
    })
}

/// Waits until the engine is idle and its TTFT count has reached `count` (when given), then
/// returns that reading. A count beyond `count` means another request ran.
fn settle(engine: &Engine, count: Option<f64>) -> Result<Reading, CalibrateError> {
    let start = Instant::now();
    loop {
        let r = read_metrics(engine)?;
        if let Some(want) = count {
            if r.ttft_count > want {
                return Err(CalibrateError::CountDelta {
                    url: engine.url.clone(),
                    delta: r.ttft_count - want + 1.0,
                });
            }
        }
        let counted = count.is_none_or(|want| r.ttft_count >= want);
        let idle = r.running == 0.0 && r.waiting == 0.0;
        if counted && idle {
            return Ok(r);
        }
        if start.elapsed() >= SETTLE_TIMEOUT {
            return Err(settle_failure(engine, &r, counted, start.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn settle_failure(engine: &Engine, r: &Reading, counted: bool, waited: Duration) -> CalibrateError {
    if counted {
        CalibrateError::NotIdle {
            url: engine.url.clone(),
            running: r.running,
            waiting: r.waiting,
            waited,
        }
    } else {
        CalibrateError::CountDelta {
            url: engine.url.clone(),
            delta: 0.0,
        }
    }
}

/// Sends one completion of `prompt` with `max_tokens: 1` and checks it succeeded.
fn complete(engine: &Engine, model: &str, prompt: &[u32]) -> Result<(), CalibrateError> {
    let body = serde_json::json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
    });
    let resp = engine.call("POST", "/v1/completions", Some(body.to_string().as_bytes()))?;
    let doc: serde_json::Value = serde_json::from_slice(&resp.body)
        .map_err(|e| engine.bad_response("POST /v1/completions", format!("invalid JSON: {e}")))?;
    if doc["choices"].as_array().is_none_or(|c| c.is_empty()) {
        return Err(engine.bad_response("POST /v1/completions", "no choices".into()));
    }
    Ok(())
}

/// Runs one probe: the prefix alone, then the whole prompt between two metrics reads.
fn measure(
    engine: &Engine,
    model: &str,
    probe: Probe,
    ids: &mut TokenIds,
) -> Result<Row, CalibrateError> {
    let prompt = ids.take(probe.cached + probe.uncached);
    let mut before = settle(engine, None)?;
    if probe.cached > 0 {
        complete(engine, model, &prompt[..probe.cached])?;
        before = settle(engine, Some(before.ttft_count + 1.0))?;
    }
    complete(engine, model, &prompt)?;
    let after = settle(engine, Some(before.ttft_count + 1.0))?;
    let hits = (after.hits - before.hits).round().max(0.0) as usize;
    if hits >= prompt.len() {
        return Err(CalibrateError::BadRow {
            url: engine.url.clone(),
            why: format!(
                "the engine reported {hits} cached tokens for a prompt of {} fresh tokens",
                prompt.len()
            ),
        });
    }
    Ok(Row {
        probe,
        cached: hits,
        uncached: prompt.len() - hits,
        ttft: after.ttft_sum - before.ttft_sum,
    })
}

/// The largest probe prompt: `--max-tokens-total`, else the default, capped by the model's
/// length (one token is left for the output) and half the KV cache.
fn max_total(
    engine: &Engine,
    asked: Option<usize>,
    max_model_len: Option<usize>,
    kv_tokens: Option<usize>,
) -> Result<usize, CalibrateError> {
    let limit = max_model_len.map(|n| n.saturating_sub(1));
    match (asked, limit) {
        (Some(n), Some(limit)) if n > limit => Err(CalibrateError::Plan {
            url: engine.url.clone(),
            why: format!("--max-tokens-total {n} exceeds the model's max_model_len - 1 ({limit})"),
        }),
        (Some(n), _) => Ok(n),
        (None, _) => {
            let by_len = max_model_len.map_or(usize::MAX, |n| n / 2);
            let by_kv = kv_tokens.map_or(usize::MAX, |n| n / 2);
            Ok(DEFAULT_MAX_TOKENS_TOTAL.min(by_len).min(by_kv))
        }
    }
}

/// Calibrates the engine at `o.url`: plans, measures every probe, fits. Does not print.
pub fn run(o: &CalibrateOptions) -> Result<Report, CalibrateError> {
    let engine = Engine::connect(&o.url)?;
    let (model, max_model_len) = pick_model(&engine, o.model.as_deref())?;
    let first = settle(&engine, None)?;
    let block_size = o.block_size.or(first.block_size).unwrap_or(16);
    let kv_tokens = first.kv_blocks.map(|b| b as usize * block_size);
    let total = max_total(&engine, o.max_tokens_total, max_model_len, kv_tokens)?;
    let probes = plan(o.probes, block_size, total).map_err(|why| CalibrateError::Plan {
        url: engine.url.clone(),
        why,
    })?;
    let mut ids = TokenIds::new(o.seed);
    // One unmeasured request first: an engine's first request pays one-time costs (lazy
    // initialization and cold caches; graph capture on a GPU) that belong to no probe.
    complete(&engine, &model, &ids.take(block_size.max(1)))?;
    settle(&engine, Some(first.ttft_count + 1.0))?;
    let rows = probes
        .iter()
        .map(|&p| measure(&engine, &model, p, &mut ids))
        .collect::<Result<Vec<Row>, _>>()?;
    Ok(report(&engine.url, model, block_size, o.seed, rows))
}

/// Fits the rows and sums up the residuals.
pub fn report(url: &str, model: String, block_size: usize, seed: u64, rows: Vec<Row>) -> Report {
    let features: Vec<[f64; 3]> = rows.iter().map(Row::features).collect();
    let ttft: Vec<f64> = rows.iter().map(|r| r.ttft).collect();
    let fit = nnls::fit(&features, &ttft);
    let worst = features
        .iter()
        .zip(&ttft)
        .filter(|(_, t)| **t > 0.0)
        .map(|(f, t)| (nnls::predict(f, &fit.x) - t).abs() / t)
        .fold(0.0, f64::max);
    Report {
        url: url.to_string(),
        model,
        block_size,
        seed,
        prefill_token_secs: fit.x[0],
        prefill_pair_secs: fit.x[1],
        prefill_fixed_secs: fit.x[2],
        rms_secs: (fit.rss / fit.rows.max(1) as f64).sqrt(),
        worst_relative_error: worst,
        rows,
    }
}

impl Report {
    /// `P(u, c)` with the fitted coefficients.
    pub fn predict(&self, uncached: usize, cached: usize) -> f64 {
        let row = Row {
            probe: Probe { cached, uncached },
            cached,
            uncached,
            ttft: 0.0,
        };
        nnls::predict(
            &row.features(),
            &[
                self.prefill_token_secs,
                self.prefill_pair_secs,
                self.prefill_fixed_secs,
            ],
        )
    }

    /// A table of the rows (measured and predicted TTFT) and the fit's summary, for stderr.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} probes of {} at {} (block size {}, seed {:#x}):\n    cached  uncached  ttft ms  fit ms  error\n",
            self.rows.len(), self.model, self.url, self.block_size, self.seed
        );
        for r in &self.rows {
            let fit = self.predict(r.uncached, r.cached);
            let moved = if r.cached != r.probe.cached {
                format!("  (planned {} cached)", r.probe.cached)
            } else {
                String::new()
            };
            s.push_str(&format!(
                "  {:>8}  {:>8}  {:>7.3}  {:>6.3}  {:>+5.2}%{moved}\n",
                r.cached,
                r.uncached,
                r.ttft * 1e3,
                fit * 1e3,
                (fit - r.ttft) / r.ttft * 100.0
            ));
        }
        s.push_str(&format!(
            "fit: a = {:.5e} s/token, b = {:.5e} s/pair, d = {:.5e} s; RMS residual {:.3} ms, worst relative error {:.2}%\n",
            self.prefill_token_secs,
            self.prefill_pair_secs,
            self.prefill_fixed_secs,
            self.rms_secs * 1e3,
            self.worst_relative_error * 100.0
        ));
        s
    }
}

impl Report {
    /// The fitted cost model: `a`, `b` and `d` from the fit, to five significant digits (the
    /// fit is not finer, and the fragment stays readable); `decode_interference_secs` and the
    /// tier load rates (`cpu_load_token_secs`, `storage_load_token_secs`), which calibration
    /// does not measure, at their defaults (what the config uses when they are left out).
    pub fn cost_model(&self) -> CostModelParams {
        CostModelParams {
            prefill_token_secs: five_digits(self.prefill_token_secs),
            prefill_pair_secs: five_digits(self.prefill_pair_secs),
            prefill_fixed_secs: five_digits(self.prefill_fixed_secs),
            ..CostModelParams::default()
        }
    }
}

/// `v` rounded to five significant digits (0 and non-finite values unchanged).
fn five_digits(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    format!("{v:.4e}").parse().unwrap_or(v)
}

/// The YAML fragment with the fitted coefficients ([`Report::cost_model`], written by serde in
/// the config's own keys): `routing.cost_model`, or with `model` that model's own `cost_model`
/// under `models:`. Comment lines say where it came from; the config loader reads it back as
/// exactly those coefficients.
pub fn fragment(r: &Report, model: Option<&str>) -> String {
    use serde_yaml::{Mapping, Value};
    let cost = serde_yaml::to_value(r.cost_model()).expect("a struct of floats always serializes");
    let mut section = Mapping::new();
    match model {
        Some(name) => {
            let mut entry = Mapping::new();
            entry.insert("name".into(), name.into());
            entry.insert("cost_model".into(), cost);
            let models = Value::Sequence(vec![Value::Mapping(entry)]);
            section.insert("models".into(), models);
        }
        None => {
            let mut routing = Mapping::new();
            routing.insert("cost_model".into(), cost);
            section.insert("routing".into(), Value::Mapping(routing));
        }
    }
    let yaml = serde_yaml::to_string(&section).expect("a mapping of strings and floats serializes");
    format!(
        "# inferrail calibrate --url {}: {} probes of {}; RMS residual {:.3} ms, worst relative error {:.2}%\n\
         # decode_interference_secs and the tier load rates are not measured by calibrate: the defaults.\n{yaml}",
        r.url,
        r.rows.len(),
        r.model,
        r.rms_secs * 1e3,
        r.worst_relative_error * 100.0
    )
}

/// Writes the fragment to `out`, or stdout when `None`.
pub fn emit(text: &str, out: Option<&std::path::Path>) -> Result<(), CalibrateError> {
    match out {
        Some(path) => std::fs::write(path, text).map_err(|source| CalibrateError::Write {
            path: path.to_path_buf(),
            source,
        }),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<CalibrateOptions, CalibrateError> {
        parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn calibrate_args() {
        let o = args(&["--url", "http://127.0.0.1:8000"]).unwrap();
        assert_eq!(o.url, "http://127.0.0.1:8000");
        assert_eq!(
            (o.probes, o.block_size, o.max_tokens_total),
            (24, None, None)
        );
        let o = args(&[
            "--url=http://e:1",
            "--model",
            "m",
            "--out=f.yaml",
            "--probes",
            "8",
            "--block-size",
            "32",
            "--max-tokens-total",
            "4096",
        ])
        .unwrap();
        assert_eq!(o.model.as_deref(), Some("m"));
        assert_eq!(o.out, Some(PathBuf::from("f.yaml")));
        assert_eq!(
            (o.probes, o.block_size, o.max_tokens_total),
            (8, Some(32), Some(4096))
        );
        for bad in [
            &[][..],
            &["--url"],
            &["--url", "x", "--probes", "2"],
            &["--url", "x", "--block-size", "0"],
            &["--url", "x", "--nope", "1"],
            &["--url", "x", "stray"],
        ] {
            assert!(
                matches!(args(bad), Err(CalibrateError::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn calibrate_plan_spans_both_axes_within_the_total() {
        let p = plan(24, 16, 8192).unwrap();
        assert_eq!(p.len(), 24);
        assert!(p
            .iter()
            .all(|p| p.cached % 16 == 0 && p.cached + p.uncached <= 8192));
        let us: std::collections::BTreeSet<usize> = p.iter().map(|p| p.uncached).collect();
        let cs: std::collections::BTreeSet<usize> = p.iter().map(|p| p.cached).collect();
        assert_eq!(us.len(), U_LEVELS);
        assert_eq!(cs.len(), C_LEVELS);
        assert_eq!((us.first(), us.last()), (Some(&16), Some(&2048)));
        assert_eq!((cs.first(), cs.last()), (Some(&0), Some(&6144)));
        // Every (u, c) cell once.
        let cells: std::collections::BTreeSet<Probe> = p.iter().copied().collect();
        assert_eq!(cells.len(), 24);
        // The first six already have the smallest and largest u, and c = 0 and c > 0.
        let head = &p[..6];
        assert!(head.iter().any(|p| p.uncached == 16 && p.cached == 0));
        assert!(head.iter().any(|p| p.uncached == 2048));
        assert!(head.iter().any(|p| p.cached == 6144));
        // Small totals shrink the grid; too small is refused.
        let p = plan(10, 16, 1024).unwrap();
        assert!(p
            .iter()
            .all(|p| p.cached + p.uncached <= 1024 && p.uncached <= 512));
        assert!(plan(10, 16, 100).is_err());
    }

    impl PartialOrd for Probe {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Probe {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            (self.cached, self.uncached).cmp(&(other.cached, other.uncached))
        }
    }

    #[test]
    fn calibrate_token_ids_are_deterministic_and_in_range() {
        let a = TokenIds::new(7).take(1000);
        assert_eq!(a, TokenIds::new(7).take(1000));
        assert_ne!(a, TokenIds::new(8).take(1000));
        assert!(a.iter().all(|&t| (10..1000).contains(&t)));
    }

    fn rows_from(truth: [f64; 3]) -> Vec<Row> {
        plan(24, 16, 8192)
            .unwrap()
            .into_iter()
            .map(|p| {
                let mut r = Row {
                    probe: p,
                    cached: p.cached,
                    uncached: p.uncached,
                    ttft: 0.0,
                };
                r.ttft = nnls::predict(&r.features(), &truth);
                r
            })
            .collect()
    }

    #[test]
    fn calibrate_report_and_fragments_parse_as_config() {
        let truth = [2e-4, 1e-8, 0.01];
        let r = report("http://e:1", "m".into(), 16, 1, rows_from(truth));
        let got = [
            r.prefill_token_secs,
            r.prefill_pair_secs,
            r.prefill_fixed_secs,
        ];
        for (g, t) in got.iter().zip(truth) {
            assert!((g - t).abs() < 1e-9 * t, "{got:?}");
        }
        assert!(r.worst_relative_error < 1e-9 && r.rms_secs < 1e-9);
        assert!(r.summary().contains("worst relative error"));
        let replicas = "replicas: [{id: r, url: 'http://a:1', models: [m]}]\n";
        let text = format!("models: [{{name: m}}]\n{replicas}{}", fragment(&r, None));
        let c = inferrail_config::parse_str(&text).unwrap();
        let cm = c.routing.cost_model;
        assert_eq!(
            [
                cm.prefill_token_secs,
                cm.prefill_pair_secs,
                cm.prefill_fixed_secs
            ],
            [2e-4, 1e-8, 0.01]
        );
        let text = format!("{}{replicas}", fragment(&r, Some("m")));
        let c = inferrail_config::parse_str(&text).unwrap();
        let cm = c.models[0].cost_model.unwrap();
        assert_eq!(cm.prefill_fixed_secs, 0.01);
        // A zero coefficient is written as a float the config reads back as 0.
        let zero = Report {
            prefill_pair_secs: 0.0,
            ..r
        };
        let text = format!("{}{replicas}", fragment(&zero, Some("m")));
        let c = inferrail_config::parse_str(&text).unwrap();
        let cm = c.models[0].cost_model.unwrap();
        assert_eq!(cm, zero.cost_model());
        assert_eq!(cm.prefill_pair_secs, 0.0);
    }

    #[test]
    fn calibrate_unreachable_engine_is_a_one_line_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let e = run(&CalibrateOptions {
            url: url.clone(),
            ..CalibrateOptions::default()
        })
        .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, CalibrateError::Unreachable { .. }), "{msg}");
        assert!(msg.starts_with(&url) && !msg.contains('\n'), "{msg}");
        let e = run(&CalibrateOptions {
            url: "https://x".into(),
            ..CalibrateOptions::default()
        })
        .unwrap_err();
        assert!(matches!(e, CalibrateError::BadUrl { .. }), "{e}");
    }
}
