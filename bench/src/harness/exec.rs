//! Running specs: one run on its own fresh fleet, and a list of runs (`--jobs` at once, with
//! resume), each writing its result file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use inferrail_config::CostModelParams;

use super::calibration::{scaled, with_factors, Calibrations};
use super::fleet::{binary, Counters, Fleet, FleetConfig, MODEL};
use super::peers::{self, Peer, PeerPaths};
use super::spec::{spec_hash, RunSpec};
use super::HarnessError;
use crate::args::parse_url;
use crate::progress::{self, ProgressMode};
use crate::workload_run::{run_workload, RunConfig, Slo};

/// The engines' prefix cache over the measured window (counter deltas summed over the engines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Engines {
    /// `vllm:prefix_cache_hits_total` delta (tokens).
    pub prefix_cache_hits: u64,
    /// `vllm:prefix_cache_queries_total` delta (tokens).
    pub prefix_cache_queries: u64,
    /// hits / queries; `null` when there were no queries.
    pub hit_rate: Option<f64>,
    /// `vllm:request_success_total` delta of each engine (`sim-0` ...): requests each replica
    /// finished in the window, whatever was in front (gateway or peer).
    #[serde(default)]
    pub requests_by_replica: BTreeMap<String, u64>,
    /// The busiest engine's share of `requests_by_replica`; `null` when none finished.
    #[serde(default)]
    pub busiest_share: Option<f64>,
}

/// The gateway's view of the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gateway {
    /// `inferrail_requests_total` delta by replica id (`sim-0` ...); empty when a peer was in
    /// front.
    pub requests_by_replica: BTreeMap<String, u64>,
}

/// One result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The run as specified.
    pub spec: RunSpec,
    /// [`spec_hash`] of `spec`.
    pub spec_hash: String,
    /// The `inferrail-bench run` report (its JSON).
    pub report: serde_json::Value,
    /// The engines' own prefix cache counters.
    pub engines: Engines,
    /// The gateway's request counts.
    pub gateway: Gateway,
    /// What was in front of the engines: `inferrail serve`, or a peer's program, version and
    /// policy (absent in files written before peers existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front: Option<String>,
    /// The `routing.cost_model` the gateway was given (calibrated and/or scaled); absent when
    /// it ran on the config defaults or a peer was in front.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_cost_model: Option<CostModelParams>,
}

/// A finished run and facts about the fleet it ran on.
#[derive(Debug, Clone)]
pub struct RunDone {
    /// Where its result was written.
    pub path: PathBuf,
    /// The result.
    pub result: RunResult,
    /// Process ids of the fleet (simulators, gateway).
    pub pids: Vec<u32>,
    /// Ports of the fleet.
    pub ports: Vec<u16>,
    /// `vllm:prefix_cache_queries_total` summed right after the fleet came up (0: fresh).
    pub initial_queries: f64,
}

/// How to execute a list of runs.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Directory holding the binaries.
    pub bin_dir: PathBuf,
    /// Where result files go.
    pub out_dir: PathBuf,
    /// Runs at once, each on its own fleet.
    pub jobs: usize,
    /// Skip a run whose result file holds the same spec hash.
    pub resume: bool,
    /// Print a line per run on stderr.
    pub verbose: bool,
    /// Where peers are installed.
    pub peers: PeerPaths,
    /// Cost-model fits already measured (shared by every run of this process).
    pub calibrations: Calibrations,
}

/// What executing a list of runs did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Runs that ran, in spec order.
    pub ran: Vec<RunDone>,
    /// Result files left alone because their spec hash matched (resume).
    pub skipped: Vec<PathBuf>,
    /// Runs that failed: file stem and error.
    pub failed: Vec<(String, HarnessError)>,
}

/// The result file of a spec in `out_dir`.
pub fn result_path(out_dir: &Path, spec: &RunSpec) -> PathBuf {
    out_dir.join(format!("{}.json", spec.stem()))
}

/// True when `path` holds a result whose `spec_hash` is `hash`.
pub fn is_done(path: &Path, hash: &str) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["spec_hash"] == hash)
}

/// Runs every spec (skipping finished ones when resuming), `jobs` at a time.
pub fn execute(specs: &[RunSpec], opts: &ExecOptions) -> Result<Outcome, HarnessError> {
    // Missing binaries fail the whole list at once, before anything is written.
    binary(&opts.bin_dir, "inferrail-sim")?;
    binary(&opts.bin_dir, "inferrail")?;
    // So do peers that are not installed.
    for spec in specs {
        if let Some(peer) = Peer::parse(&spec.policy) {
            peers::check_installed(&peer.map_err(HarnessError::Spec)?, &opts.peers)?;
        }
    }
    std::fs::create_dir_all(&opts.out_dir).map_err(|source| HarnessError::Io {
        path: opts.out_dir.clone(),
        source,
    })?;
    let mut outcome = Outcome::default();
    let mut todo = Vec::new();
    for spec in specs {
        let path = result_path(&opts.out_dir, spec);
        if opts.resume && is_done(&path, &spec_hash(spec)) {
            if opts.verbose {
                eprintln!("[harness] {}: done already, skipped", spec.stem());
            }
            outcome.skipped.push(path);
        } else {
            todo.push(spec);
        }
    }
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let began = std::time::Instant::now();
    let results: Mutex<Vec<(usize, Result<RunDone, HarnessError>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.clamp(1, todo.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(spec) = todo.get(i) else { break };
                if opts.verbose {
                    let done = finished.load(Ordering::SeqCst);
                    let eta = progress::eta(began.elapsed(), done, todo.len())
                        .map(|e| format!(", {e}"))
                        .unwrap_or_default();
                    eprintln!(
                        "[harness] {} ({}/{}{eta}): starting",
                        spec.stem(),
                        i + 1,
                        todo.len()
                    );
                }
                let r = run_one(spec, opts);
                finished.fetch_add(1, Ordering::SeqCst);
                if opts.verbose {
                    match &r {
                        Ok(done) => eprintln!("[harness] {}: {}", spec.stem(), line(&done.result)),
                        Err(e) => eprintln!("[harness] {}: failed: {e}", spec.stem()),
                    }
                }
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((i, r));
            });
        }
    });
    // Logs of failed runs stay in .work; remove it when nothing is left there.
    let _ = std::fs::remove_dir(opts.out_dir.join(".work"));
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(i, _)| *i);
    for (i, r) in results {
        match r {
            Ok(done) => outcome.ran.push(done),
            Err(e) => outcome.failed.push((todo[i].stem(), e)),
        }
    }
    Ok(outcome)
}

fn line(r: &RunResult) -> String {
    let hit = r
        .engines
        .hit_rate
        .map_or("n/a".into(), |h| format!("{:.1}%", 100.0 * h));
    format!(
        "sent {} completed {} errors {}, TTFT p50 {:.0} ms, engine hit rate {hit}",
        r.report["sent"],
        r.report["completed"],
        r.report["errors"]["total"],
        r.report["ttft_us"]["p50"].as_f64().unwrap_or(0.0) / 1e3
    )
}

/// The cost model a run's gateway gets: calibrated against its simulators' setup (time scale
/// included) when the spec says so, else the config defaults times the time scale (so a scaled
/// fleet is priced as its engines run), then times `cost_model_scale`, then each coefficient
/// times its `cost_model_factors` entry; `None` for the plain defaults of an unscaled run and
/// for a peer (no gateway).
fn gateway_cost_model(
    spec: &RunSpec,
    opts: &ExecOptions,
) -> Result<Option<CostModelParams>, HarnessError> {
    let untouched = !(spec.calibrate
        || spec.cost_model_scale.is_some()
        || spec.cost_model_factors.is_some()
        || spec.time_scale.is_some());
    if Peer::parse(&spec.policy).is_some() || untouched {
        return Ok(None);
    }
    let base = if spec.calibrate {
        opts.calibrations.cost_model(
            &opts.bin_dir,
            &spec.engine_args(),
            spec.tokenizer.as_deref(),
            &opts.out_dir.join(".work").join("calibrate"),
        )?
    } else {
        scaled(CostModelParams::default(), spec.scale())
    };
    let uniform = scaled(base, spec.cost_model_scale.unwrap_or(1.0));
    match &spec.cost_model_factors {
        None => Ok(Some(uniform)),
        Some(factors) => with_factors(uniform, factors)
            .map(Some)
            .map_err(HarnessError::Spec),
    }
}

/// Runs one spec on a fresh fleet and writes its result file.
pub fn run_one(spec: &RunSpec, opts: &ExecOptions) -> Result<RunDone, HarnessError> {
    let stem = spec.stem();
    let work_dir = opts.out_dir.join(".work").join(&stem);
    let cost_model = gateway_cost_model(spec, opts)?;
    let fleet = Fleet::start(&FleetConfig {
        bin_dir: opts.bin_dir.clone(),
        replicas: spec.replicas,
        policy: spec.policy.clone(),
        kv_capacity_blocks: spec.kv_capacity_blocks,
        sim_args: spec.engine_args(),
        tokenizer: spec.tokenizer.clone(),
        cost_model,
        bounded_load_floor: spec.bounded_load_floor,
        routing: spec.routing.clone(),
        work_dir: work_dir.clone(),
        peers: opts.peers.clone(),
    })?;
    let initial = fleet.scrape()?;
    let config = RunConfig {
        target: parse_url(&format!("http://127.0.0.1:{}", fleet.front_port))
            .map_err(|e| HarnessError::Spec(e.to_string()))?,
        workload: spec.workload_kind()?,
        rate: spec.rate,
        duration: secs(spec.duration_s),
        warmup: secs(spec.warmup_s),
        arrivals: spec.workload_kind()?.arrivals(),
        seed: spec.seed,
        model: MODEL.to_string(),
        max_tokens: spec.max_tokens,
        slo: Slo::default().scaled(spec.scale()),
        time_scale: spec.scale(),
        headers: Vec::new(),
        connections: 32,
        max_connections: 512,
        timeout: secs(spec.timeout_s),
        progress: ProgressMode::Off,
    };
    // The window's first reading is taken `warmup` after the run starts, on another thread.
    let (start, report) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            std::thread::sleep(config.warmup);
            fleet.scrape()
        });
        let report = run_workload(&config);
        let start = reader
            .join()
            .unwrap_or_else(|_| Err(HarnessError::Spec("metrics reader panicked".into())));
        (start, report)
    });
    let report = report.map_err(|source| HarnessError::Load {
        stem: stem.clone(),
        source,
    })?;
    let start = start?;
    let end = fleet.scrape()?;
    let pids = fleet.pids();
    let ports = fleet.ports();
    let fleet_had_gateway = fleet.admin_port.is_some();
    drop(fleet);
    let result = RunResult {
        spec: spec.clone(),
        spec_hash: spec_hash(spec),
        report: serde_json::to_value(&report).map_err(|e| HarnessError::Spec(e.to_string()))?,
        engines: engines(&start, &end),
        gateway: Gateway {
            requests_by_replica: if fleet_had_gateway {
                requests_by_replica(spec.replicas, &start, &end)
            } else {
                BTreeMap::new()
            },
        },
        front: Some(match Peer::parse(&spec.policy) {
            Some(Ok(peer)) => peers::describe(&peer, &opts.peers),
            _ => "inferrail serve".to_string(),
        }),
        gateway_cost_model: cost_model,
    };
    let path = result_path(&opts.out_dir, spec);
    write_atomic(&path, &result)?;
    let _ = std::fs::remove_dir_all(&work_dir);
    Ok(RunDone {
        path,
        result,
        pids,
        ports,
        initial_queries: initial.prefix_cache_queries,
    })
}

/// Requests per replica over the window; every replica `sim-i` is listed, 0 when it got none.
fn requests_by_replica(replicas: usize, start: &Counters, end: &Counters) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = (0..replicas).map(|i| (format!("sim-{i}"), 0)).collect();
    for (k, v) in &end.requests_by_replica {
        let before = start.requests_by_replica.get(k).copied().unwrap_or(0.0);
        out.insert(k.clone(), (v - before).max(0.0).round() as u64);
    }
    out
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

fn engines(start: &Counters, end: &Counters) -> Engines {
    let hits = (end.prefix_cache_hits - start.prefix_cache_hits).max(0.0);
    let queries = (end.prefix_cache_queries - start.prefix_cache_queries).max(0.0);
    let requests_by_replica: BTreeMap<String, u64> = end
        .engine_requests
        .iter()
        .map(|(k, v)| {
            let before = start.engine_requests.get(k).copied().unwrap_or(0.0);
            (k.clone(), (v - before).max(0.0).round() as u64)
        })
        .collect();
    let total: u64 = requests_by_replica.values().sum();
    let busiest = requests_by_replica.values().copied().max().unwrap_or(0);
    Engines {
        prefix_cache_hits: hits.round() as u64,
        prefix_cache_queries: queries.round() as u64,
        hit_rate: (queries > 0.0).then(|| hits / queries),
        requests_by_replica,
        busiest_share: (total > 0).then(|| busiest as f64 / total as f64),
    }
}

fn write_atomic(path: &Path, result: &RunResult) -> Result<(), HarnessError> {
    let io = |source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut json = serde_json::to_vec_pretty(result)
        .map_err(std::io::Error::other)
        .map_err(io)?;
    json.push(b'\n');
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, json).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
