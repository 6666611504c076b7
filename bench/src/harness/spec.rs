//! Run specs: what one run is, how a sweep file expands into runs, and the spec hash that
//! decides whether a stored result still answers its spec.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use inferrail_config::PolicyKind;
use serde::{Deserialize, Serialize};

use super::peers::Peer;
use super::HarnessError;
use crate::args::{parse_duration, positive};
use crate::workload::Workload;

/// One run: a workload at a rate under one policy, one repetition, on a fresh fleet.
///
/// Serialized as the result file's `spec`; [`spec_hash`] hashes exactly this serialization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The sweep point's name, when it has one (prefixes the file name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Workload name (`w1` ... `hot`, lower case).
    pub workload: String,
    /// First turns per second.
    pub rate: f64,
    /// The gateway's routing policy (`round_robin` ... `cost_model`), or a peer router in its
    /// place (`peer:sglang.cache_aware`, `peer:vllm.cache_aware`, `peer:nginx`).
    pub policy: String,
    /// Repetition, from 1.
    pub rep: u32,
    /// Seeds the schedule and the workload; derived from (workload, rate, rep) only.
    pub seed: u64,
    /// Measured time, seconds.
    pub duration_s: f64,
    /// Unmeasured time before it, seconds.
    pub warmup_s: f64,
    /// Per-request time limit, seconds.
    pub timeout_s: f64,
    /// The body's `max_tokens`.
    pub max_tokens: u32,
    /// Simulators behind the gateway.
    pub replicas: usize,
    /// `kv_capacity_blocks` told to the gateway for every replica, if any.
    pub kv_capacity_blocks: Option<u64>,
    /// Extra `inferrail-sim` flags (for example `--zero-latency`).
    pub sim_args: Vec<String>,
    /// The gateway's cost model is measured: `inferrail calibrate` against a simulator started
    /// with `sim_args` (once per harness process and simulator setup), not the config defaults.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub calibrate: bool,
    /// Every cost-model coefficient the gateway gets (calibrated or default) multiplied by this
    /// (the sensitivity runs: 0.5, 2); absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_model_scale: Option<f64>,
    /// Factors on single cost-model coefficients, by their config name
    /// (`prefill_token_secs = 0.5`), applied after `cost_model_scale`: the per-coefficient
    /// sensitivity runs. Absent when none (or every factor is 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_model_factors: Option<BTreeMap<String, f64>>,
    /// The tokenizer of the simulators and the gateway (`inferrail-sim --tokenizer`, the
    /// model's `tokenizer:`); absent means `builtin:sim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// The gateway's `routing.bounded_load_floor`; absent means the config default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounded_load_floor: Option<u64>,
    /// The engines' time scale (`inferrail-sim --time-scale`): every modelled latency, the
    /// workload's think times and the goodput SLO are multiplied by it, so `rate` (wall-clock
    /// first turns per second) loads the engines as `rate x time_scale` would in model time.
    /// Absent means 1 (real time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// Further `routing:` settings of the gateway, key by key (`kappa`, `epsilon`, ...), written
    /// into its config as given; the gateway's own checks judge them. Empty means none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routing: BTreeMap<String, serde_json::Value>,
}

/// `routing` keys a spec sets through their own fields (or the harness always sets), so the
/// `routing` table may not set them.
const ROUTING_KEYS_OWNED: [&str; 4] =
    ["seed", "cost_model", "bounded_load_floor", "default_policy"];

impl RunSpec {
    /// The simulators' flags: `sim_args`, then `--time-scale S` when the spec is scaled.
    pub fn engine_args(&self) -> Vec<String> {
        let mut args = self.sim_args.clone();
        if let Some(s) = self.time_scale {
            args.extend(["--time-scale".to_string(), s.to_string()]);
        }
        args
    }

    /// The time scale, 1 when absent.
    pub fn scale(&self) -> f64 {
        self.time_scale.unwrap_or(1.0)
    }

    /// The result file's name without `.json`: `[name-]w1-r6-cost_model-rep1` (a peer's `:`
    /// becomes `_`: `w1-r6-peer_nginx-rep1`).
    pub fn stem(&self) -> String {
        let prefix = self
            .name
            .as_ref()
            .map(|n| format!("{n}-"))
            .unwrap_or_default();
        format!(
            "{prefix}{}-r{}-{}-rep{}",
            self.workload,
            self.rate,
            self.policy.replace(':', "_"),
            self.rep
        )
    }

    /// The parsed workload.
    pub fn workload_kind(&self) -> Result<Workload, HarnessError> {
        Workload::parse(&self.workload)
            .ok_or_else(|| HarnessError::Spec(format!("unknown workload {:?}", self.workload)))
    }
}

/// The seed of a (workload, rate, rep): FNV-1a over the three, kept to 53 bits (exact in any
/// JSON reader), so every policy of a point and repetition gets the same requests at the same
/// times.
pub fn derive_seed(workload: &str, rate: f64, rep: u32) -> u64 {
    let key = format!("{}|{}|{rep}", workload.to_ascii_lowercase(), rate.to_bits());
    fnv1a(key.as_bytes()) & ((1 << 53) - 1)
}

/// The spec's hash: FNV-1a 64 over its compact JSON, as 16 hex digits. Any change to any field
/// changes it; the same spec always gives the same hash (field order is the struct's).
pub fn spec_hash(spec: &RunSpec) -> String {
    let json = serde_json::to_string(spec).unwrap_or_default();
    format!("{:016x}", fnv1a(json.as_bytes()))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Settings shared by a sweep's points (`[settings]`) or overridden by one point
/// (`overrides = { ... }`); every key optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Measured time (`"10s"`, `"500ms"`).
    pub duration: Option<String>,
    /// Warmup before it.
    pub warmup: Option<String>,
    /// Per-request time limit.
    pub timeout: Option<String>,
    /// The body's `max_tokens`.
    pub max_tokens: Option<u32>,
    /// Simulators per fleet.
    pub replicas: Option<usize>,
    /// `kv_capacity_blocks` for the gateway's replicas.
    pub kv_capacity_blocks: Option<u64>,
    /// Extra simulator flags.
    pub sim_args: Option<Vec<String>>,
    /// Calibrate the gateway's cost model against a simulator ([`RunSpec::calibrate`]).
    pub calibrate: Option<bool>,
    /// Scale of the gateway's cost model ([`RunSpec::cost_model_scale`]).
    pub cost_model_scale: Option<f64>,
    /// Factors on single coefficients ([`RunSpec::cost_model_factors`]); a point's table
    /// replaces the sweep's.
    pub cost_model_factors: Option<BTreeMap<String, f64>>,
    /// Tokenizer of simulators and gateway ([`RunSpec::tokenizer`]).
    pub tokenizer: Option<String>,
    /// The gateway's bounded-load floor ([`RunSpec::bounded_load_floor`]).
    pub bounded_load_floor: Option<u64>,
    /// The engines' time scale ([`RunSpec::time_scale`]).
    pub time_scale: Option<f64>,
    /// Further gateway `routing:` settings ([`RunSpec::routing`]); a point's table is merged
    /// key by key over the sweep's.
    pub routing: Option<BTreeMap<String, serde_json::Value>>,
}

impl Settings {
    /// `self` with every key `over` sets replaced.
    pub fn merged(&self, over: &Settings) -> Settings {
        Settings {
            duration: over.duration.clone().or_else(|| self.duration.clone()),
            warmup: over.warmup.clone().or_else(|| self.warmup.clone()),
            timeout: over.timeout.clone().or_else(|| self.timeout.clone()),
            max_tokens: over.max_tokens.or(self.max_tokens),
            replicas: over.replicas.or(self.replicas),
            kv_capacity_blocks: over.kv_capacity_blocks.or(self.kv_capacity_blocks),
            sim_args: over.sim_args.clone().or_else(|| self.sim_args.clone()),
            calibrate: over.calibrate.or(self.calibrate),
            cost_model_scale: over.cost_model_scale.or(self.cost_model_scale),
            cost_model_factors: over
                .cost_model_factors
                .clone()
                .or_else(|| self.cost_model_factors.clone()),
            tokenizer: over.tokenizer.clone().or_else(|| self.tokenizer.clone()),
            bounded_load_floor: over.bounded_load_floor.or(self.bounded_load_floor),
            time_scale: over.time_scale.or(self.time_scale),
            routing: match (&self.routing, &over.routing) {
                (None, None) => None,
                (base, over) => {
                    let mut all = base.clone().unwrap_or_default();
                    all.extend(over.clone().unwrap_or_default());
                    Some(all)
                }
            },
        }
    }
}

/// One sweep point: a workload at several rates, with optional overrides.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// Optional label, prefixed to the point's file names.
    pub name: Option<String>,
    /// Workload name.
    pub workload: String,
    /// Rates, first turns per second.
    pub rates: Vec<f64>,
    /// Settings for this point only.
    #[serde(default)]
    pub overrides: Settings,
    /// Policies for this point only, in place of the sweep's.
    #[serde(default)]
    pub policies: Option<Vec<String>>,
}

/// A sweep file (TOML; see bench/README.md).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Policies, each run for every (point, rate, rep).
    pub policies: Vec<String>,
    /// Repetitions (default 1).
    #[serde(default)]
    pub reps: Option<u32>,
    /// Settings every point starts from.
    #[serde(default)]
    pub settings: Settings,
    /// The points.
    pub points: Vec<Point>,
}

/// Parses a sweep file's text; `origin` names it in errors. An unknown or mistyped key is
/// reported with its path (`points[1].overrides.durtion`) and line.
pub fn parse_sweep(text: &str, origin: &Path) -> Result<SweepFile, HarnessError> {
    let toml_err = |path: String, e: &toml::de::Error| {
        let line = e
            .span()
            .map(|s| {
                let before = text.get(..s.start).unwrap_or(text);
                format!(" (line {})", before.matches('\n').count() + 1)
            })
            .unwrap_or_default();
        HarnessError::Toml {
            file: origin.display().to_string(),
            path,
            message: format!("{}{line}", e.message().trim()),
        }
    };
    let de = toml::de::Deserializer::parse(text).map_err(|e| toml_err(String::new(), &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        toml_err(path, e.inner())
    })
}

/// Defaults a spec starts from (those of `inferrail-bench run`, three replicas).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Default warmup.
pub const DEFAULT_WARMUP: Duration = Duration::from_secs(1);
/// Default per-request time limit.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 64;
/// Default simulators per fleet.
pub const DEFAULT_REPLICAS: usize = 3;

/// Builds one spec, checking every value; `at` names where the values came from in errors.
#[allow(clippy::too_many_arguments)]
pub fn build_spec(
    name: Option<&str>,
    workload: &str,
    rate: f64,
    policy: &str,
    rep: u32,
    settings: &Settings,
    at: &str,
) -> Result<RunSpec, HarnessError> {
    let bad = |what: String| HarnessError::Spec(format!("{at}: {what}"));
    let kind = Workload::parse(workload).ok_or_else(|| {
        bad(format!(
            "unknown workload {workload:?} (one of w1 w2 w3 w4 w5 w6 w8 mix hot)"
        ))
    })?;
    positive("rate", rate).map_err(bad)?;
    match Peer::parse(policy) {
        Some(Err(why)) => return Err(bad(why)),
        Some(Ok(_)) => {}
        None if PolicyKind::from_name(policy).is_none() => {
            let all: Vec<&str> = PolicyKind::ALL.iter().map(|p| p.as_str()).collect();
            return Err(bad(format!(
                "unknown policy {policy:?} (one of {}, or a peer: peer:sglang.POLICY, \
                 peer:vllm.POLICY, peer:nginx)",
                all.join(", ")
            )));
        }
        None => {}
    }
    let dur = |key: &str, v: &Option<String>, default: Duration| match v {
        None => Ok(default),
        Some(s) => parse_duration(s).map_err(|e| bad(format!("{key}: {e}"))),
    };
    let duration = dur("duration", &settings.duration, DEFAULT_DURATION)?;
    let warmup = dur("warmup", &settings.warmup, DEFAULT_WARMUP)?;
    let timeout = dur("timeout", &settings.timeout, DEFAULT_TIMEOUT)?;
    if duration.is_zero() || timeout.is_zero() {
        return Err(bad("duration and timeout must be above zero".into()));
    }
    let replicas = settings.replicas.unwrap_or(DEFAULT_REPLICAS);
    if replicas == 0 {
        return Err(bad("replicas must be at least 1".into()));
    }
    // Scale and factors change cost_model's prices: on another policy they would do nothing.
    let cost_model_only = |setting: &str| {
        bad(format!(
            "{setting} cost_model's prices; {policy} does not use them \
             (give the point its own `policies = [\"cost_model\"]`)"
        ))
    };
    if let Some(scale) = settings.cost_model_scale {
        positive("cost_model_scale", scale).map_err(bad)?;
        if scale != 1.0 && policy != "cost_model" {
            return Err(cost_model_only("cost_model_scale scales"));
        }
    }
    if let Some(factors) = &settings.cost_model_factors {
        for (name, factor) in factors {
            if !inferrail_config::COST_MODEL_KEYS.contains(&name.as_str()) {
                return Err(bad(format!(
                    "cost_model_factors.{name}: not a cost_model coefficient (one of {})",
                    inferrail_config::COST_MODEL_KEYS.join(", ")
                )));
            }
            positive(&format!("cost_model_factors.{name}"), *factor).map_err(bad)?;
        }
        if factors.values().any(|f| *f != 1.0) && policy != "cost_model" {
            return Err(cost_model_only("cost_model_factors change"));
        }
    }
    if let Some(floor) = settings.bounded_load_floor {
        if floor == 0 || floor > u64::from(u32::MAX) {
            return Err(bad(format!(
                "bounded_load_floor {floor} must be from 1 to {}",
                u32::MAX
            )));
        }
        if Peer::parse(policy).is_some() {
            return Err(bad(format!(
                "bounded_load_floor is the gateway's routing setting; {policy} does not read it \
                 (give the point its own `policies`)"
            )));
        }
    }
    if let Some(scale) = settings.time_scale {
        positive("time_scale", scale).map_err(bad)?;
    }
    let routing = settings.routing.clone().unwrap_or_default();
    if !routing.is_empty() {
        if Peer::parse(policy).is_some() {
            return Err(bad(format!(
                "routing settings are the gateway's; {policy} does not read them \
                 (give the point its own `policies`)"
            )));
        }
        for (key, value) in &routing {
            if ROUTING_KEYS_OWNED.contains(&key.as_str()) {
                return Err(bad(format!(
                    "routing.{key}: set by the harness or its own setting, not here"
                )));
            }
            if !(value.is_number() || value.is_boolean() || value.is_string()) {
                return Err(bad(format!(
                    "routing.{key}: give a number, a boolean or a string (got {value})"
                )));
            }
        }
    }
    let sim_args = settings.sim_args.clone().unwrap_or_default();
    if sim_args.iter().any(|a| a == "--time-scale") {
        return Err(bad(
            "sim_args: give the engines' time scale as the `time_scale` setting, which also \
             scales think times, the goodput SLO and the report, not as --time-scale"
                .into(),
        ));
    }
    if settings.tokenizer.as_deref().is_some_and(str::is_empty) {
        return Err(bad("tokenizer: name a directory or builtin:sim".into()));
    }
    if let Some(n) = name {
        if n.is_empty()
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.".contains(c))
        {
            return Err(bad(format!(
                "name {n:?}: use letters, digits, _ and . only"
            )));
        }
    }
    Ok(RunSpec {
        name: name.map(String::from),
        workload: kind.name().to_string(),
        rate,
        policy: policy.to_string(),
        rep,
        seed: derive_seed(kind.name(), rate, rep),
        duration_s: duration.as_secs_f64(),
        warmup_s: warmup.as_secs_f64(),
        timeout_s: timeout.as_secs_f64(),
        max_tokens: settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        replicas,
        kv_capacity_blocks: settings.kv_capacity_blocks,
        sim_args,
        calibrate: settings.calibrate.unwrap_or(false),
        cost_model_scale: settings.cost_model_scale.filter(|s| *s != 1.0),
        cost_model_factors: settings
            .cost_model_factors
            .as_ref()
            .map(|f| {
                f.iter()
                    .filter(|(_, v)| **v != 1.0)
                    .map(|(k, v)| (k.clone(), *v))
                    .collect::<BTreeMap<String, f64>>()
            })
            .filter(|f| !f.is_empty()),
        tokenizer: settings.tokenizer.clone().filter(|t| t != "builtin:sim"),
        bounded_load_floor: settings.bounded_load_floor,
        time_scale: settings.time_scale.filter(|s| *s != 1.0),
        routing,
    })
}

/// Expands a sweep into runs: for each point, each rate, each repetition, each policy (policies
/// innermost, so drift falls on every policy alike). File names must be unique.
pub fn expand(sweep: &SweepFile) -> Result<Vec<RunSpec>, HarnessError> {
    if sweep.policies.is_empty() {
        return Err(HarnessError::Spec("policies: list at least one".into()));
    }
    let reps = sweep.reps.unwrap_or(1);
    if reps == 0 {
        return Err(HarnessError::Spec("reps: must be at least 1".into()));
    }
    let mut specs = Vec::new();
    for (i, point) in sweep.points.iter().enumerate() {
        if point.rates.is_empty() {
            return Err(HarnessError::Spec(format!(
                "points[{i}].rates: list at least one"
            )));
        }
        let settings = sweep.settings.merged(&point.overrides);
        let policies = point.policies.as_ref().unwrap_or(&sweep.policies);
        if policies.is_empty() {
            return Err(HarnessError::Spec(format!(
                "points[{i}].policies: list at least one"
            )));
        }
        for rate in &point.rates {
            for rep in 1..=reps {
                for policy in policies {
                    specs.push(build_spec(
                        point.name.as_deref(),
                        &point.workload,
                        *rate,
                        policy,
                        rep,
                        &settings,
                        &format!("points[{i}]"),
                    )?);
                }
            }
        }
    }
    check_unique(&specs)?;
    Ok(specs)
}

/// Fails when two specs would write the same file.
pub fn check_unique(specs: &[RunSpec]) -> Result<(), HarnessError> {
    let mut seen = HashSet::new();
    for s in specs {
        if !seen.insert(s.stem()) {
            return Err(HarnessError::Spec(format!(
                "two runs would write {}.json (give the points distinct `name`s)",
                s.stem()
            )));
        }
    }
    Ok(())
}
