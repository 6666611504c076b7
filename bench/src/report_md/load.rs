//! Reading the result files of a directory: every `*.json` directly in it, in name order.
//! Only the fields the report uses are read; unknown fields are ignored.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ReportError;
use crate::args::positive;

/// What was run: the point of the sweep one file measures.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Spec {
    /// Workload name (`w1`, `w6`, ...).
    pub workload: String,
    /// Offered load, first turns per second.
    pub rate: f64,
    /// Routing policy (`round_robin`, `cost_model`, `peer:NAME`, ...).
    pub policy: String,
    /// Repetition number (absent: 0).
    #[serde(default)]
    pub rep: u64,
    /// Seed (absent: 0).
    #[serde(default)]
    pub seed: u64,
    /// The engines' time scale (absent: 1, or the `--time-scale` of `sim_args` in files
    /// written before the setting existed).
    #[serde(default)]
    pub time_scale: Option<f64>,
    /// The simulators' extra flags (read only for a time scale given there).
    #[serde(default)]
    pub sim_args: Vec<String>,
    /// The factor on every cost_model coefficient of a sensitivity run (absent: 1).
    #[serde(default)]
    pub cost_model_scale: Option<f64>,
    /// Factors on single coefficients of a per-coefficient sensitivity run, by config key.
    #[serde(default)]
    pub cost_model_factors: Option<std::collections::BTreeMap<String, f64>>,
}

impl Spec {
    /// The run's time scale: `time_scale`, else a `--time-scale S` in `sim_args`, else 1.
    pub fn scale(&self) -> f64 {
        self.time_scale
            .or_else(|| {
                let at = self.sim_args.iter().position(|a| a == "--time-scale")?;
                self.sim_args.get(at + 1)?.parse().ok()
            })
            .unwrap_or(1.0)
    }
}

/// A distribution in µs (the fields of `RunReport`'s `Dist` the report uses).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct DistUs {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
}

/// `RunReport.goodput`, in part.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct GoodputPart {
    /// Requests within the SLO per second.
    pub requests_per_s: f64,
    /// Measured requests within the SLO (absent in older files).
    #[serde(default)]
    pub requests: Option<u64>,
}

/// `RunReport.usage`, in part.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct UsagePart {
    /// `cached_tokens / prompt_tokens` from the usage chunks.
    pub prefix_hit_rate: f64,
}

/// `RunReport.replicas`, in part.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct ReplicasPart {
    /// The busiest replica's share of the requests that named one (from the gateway's
    /// `x-inferrail-replica` header; 0 when no response named one, as behind a peer).
    pub busiest_share: f64,
}

/// `RunReport.errors`, in part.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct ErrorsPart {
    /// Measured requests that did not complete.
    pub total: u64,
}

/// `RunReport.samples`: the per-request values behind the percentiles, ascending, µs. Files
/// written before the harness kept them have none; their intervals show as n/a.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SamplesPart {
    /// TTFT of every completed request.
    #[serde(default)]
    pub ttft_us: Vec<u64>,
    /// TPOT of every completed request with two tokens or more.
    #[serde(default)]
    pub tpot_us: Vec<u64>,
}

/// The parts of `RunReport` (as `inferrail-bench run --json` writes it) the report uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RunPart {
    /// Measured requests attempted.
    pub sent: u64,
    /// Not completed.
    pub errors: ErrorsPart,
    /// Within the SLO.
    pub goodput: GoodputPart,
    /// Time to first token.
    pub ttft_us: DistUs,
    /// Time per output token.
    pub tpot_us: DistUs,
    /// Usage totals.
    pub usage: UsagePart,
    /// Requests per replica.
    pub replicas: ReplicasPart,
    /// Per-request values (absent in older files).
    #[serde(default)]
    pub samples: Option<SamplesPart>,
}

/// The engines' own prefix-cache counters over the run.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Engines {
    /// Prefix-cache hits.
    #[serde(default)]
    pub prefix_cache_hits: f64,
    /// Prefix-cache queries.
    #[serde(default)]
    pub prefix_cache_queries: f64,
    /// Hits over queries.
    pub hit_rate: f64,
    /// The busiest engine's share of the requests the engines finished (absent in older files).
    #[serde(default)]
    pub busiest_share: Option<f64>,
}

impl ResultFile {
    /// The TTFT values of the run, µs, when the file keeps them (`None`: an older file, or no
    /// completed request).
    pub fn ttft_samples(&self) -> Option<&[u64]> {
        let s = self.report.samples.as_ref()?;
        (!s.ttft_us.is_empty()).then_some(s.ttft_us.as_slice())
    }

    /// The TPOT values of the run, µs, as [`ResultFile::ttft_samples`].
    pub fn tpot_samples(&self) -> Option<&[u64]> {
        let s = self.report.samples.as_ref()?;
        (!s.tpot_us.is_empty()).then_some(s.tpot_us.as_slice())
    }

    /// The busiest replica's share: the engines' own count when the file has it (the same
    /// source for the gateway and for peers), else the one the client saw in response headers.
    pub fn busiest_share(&self) -> f64 {
        self.engines
            .as_ref()
            .and_then(|e| e.busiest_share)
            .unwrap_or(self.report.replicas.busiest_share)
    }
}

/// One result file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResultFile {
    /// The point measured.
    pub spec: Spec,
    /// What the run measured.
    pub report: RunPart,
    /// Engine counters (absent or `null`: the hit rate is N/A).
    #[serde(default)]
    pub engines: Option<Engines>,
    /// What was in front of the engines (`inferrail serve`, `nginx 1.22.1`, ...), if recorded.
    #[serde(default)]
    pub front: Option<String>,
}

/// One file read: its path and content.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// Where it came from.
    pub path: PathBuf,
    /// What it holds.
    pub file: ResultFile,
}

/// Parses one result file's text; `path` only names it in the error. A time-scaled run is
/// returned in model time: its rate and goodput times the scale, its latencies divided by it,
/// so scaled and unscaled runs read alike. A sensitivity run (a `cost_model_scale` other than
/// one, or `cost_model_factors`) is returned under its own policy name, `cost_model x0.5` or
/// `cost_model prefill_token_secs x2`, so it is never folded with the unscaled runs as a
/// repetition.
pub fn parse(path: &Path, text: &str) -> Result<ResultFile, ReportError> {
    let bad = |reason: String| ReportError::Parse {
        path: path.to_path_buf(),
        reason,
    };
    let mut file: ResultFile = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if !(file.spec.rate.is_finite() && file.spec.rate >= 0.0) {
        return Err(bad(format!("spec.rate {} is not a load", file.spec.rate)));
    }
    let scale = file.spec.scale();
    positive("time scale", scale).map_err(bad)?;
    if scale != 1.0 {
        to_model_time(&mut file, scale);
    }
    if let Some(k) = file.spec.cost_model_scale {
        positive("cost_model_scale", k).map_err(bad)?;
        if k != 1.0 {
            file.spec.policy = format!("{} x{k}", file.spec.policy);
        }
    }
    for (name, k) in file.spec.cost_model_factors.iter().flatten() {
        positive(&format!("cost_model_factors.{name}"), *k).map_err(bad)?;
        if *k != 1.0 {
            file.spec.policy = format!("{} {name} x{k}", file.spec.policy);
        }
    }
    Ok(file)
}

/// Rewrites a run measured at time scale `scale` in model time.
fn to_model_time(file: &mut ResultFile, scale: f64) {
    let slower = |us: u64| (us as f64 / scale).round() as u64;
    let r = &mut file.report;
    file.spec.rate *= scale;
    r.goodput.requests_per_s *= scale;
    for d in [&mut r.ttft_us, &mut r.tpot_us] {
        d.p50 = slower(d.p50);
        d.p99 = slower(d.p99);
    }
    if let Some(s) = r.samples.as_mut() {
        for v in s.ttft_us.iter_mut().chain(s.tpot_us.iter_mut()) {
            *v = slower(*v);
        }
    }
}

/// Reads every `*.json` directly in `dir`, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<Vec<Loaded>, ReportError> {
    let io = |e| ReportError::ReadDir {
        dir: dir.to_path_buf(),
        source: e,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        // `knee.json` is a knee search's summary beside its probes' result files, not a run.
        let summary = path
            .file_name()
            .is_some_and(|n| n == crate::harness::knee::summary::SUMMARY_FILE);
        if path.is_file() && path.extension().is_some_and(|x| x == "json") && !summary {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(ReportError::Empty {
            dir: dir.to_path_buf(),
        });
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|e| ReportError::Read {
                path: path.clone(),
                source: e,
            })?;
            let file = parse(&path, &text)?;
            Ok(Loaded { path, file })
        })
        .collect()
}
