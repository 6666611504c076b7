//! `inferrail-bench compare`: one workload at one rate under several policies, each run on a
//! fresh fleet, policies innermost (for each rep, every policy).

use std::fmt::Write as _;
use std::path::PathBuf;

use super::exec::{execute, ExecOptions, Outcome, RunResult};
use super::peers::PeerPaths;
use super::spec::{build_spec, check_unique, RunSpec, Settings};
use super::{locate, HarnessError};
use crate::args::{invalid, split_flag, ArgsError};

/// Usage text for `inferrail-bench compare`.
pub const COMPARE_USAGE: &str = "\
usage: inferrail-bench compare --workload W --rate R --policies a,b,c [options]

Runs the workload at the rate once per policy and repetition, each run on a FRESH fleet
(simulators and gateway started from --bin-dir, killed after the run), policies innermost.
Every policy gets the same requests at the same times (seeds derive from workload, rate, rep).
Writes one result JSON per run into --out and prints a summary table.

  --workload W              w1 w2 w3 w4 w5 w6 w8 mix hot (required)
  --rate R                  first turns per second (required)
  --policies LIST           comma-separated gateway policies (required)
  --reps N                  repetitions (default 1)
  --duration D              measured time (default 10s)
  --warmup D                unmeasured time first (default 1s)
  --timeout D               per request (default 60s)
  --max-tokens N            the body's max_tokens (default 64)
  --replicas N              simulators per fleet (default 3)
  --kv-capacity-blocks N    kv_capacity_blocks given to the gateway for each replica
  --sim-arg ARG             extra inferrail-sim flag(s), split on spaces (repeatable),
                            e.g. --sim-arg '--num-gpu-blocks-override 800' --sim-arg --zero-latency
  --out DIR                 result directory (default compare-<workload>-r<rate>-<unix time>)
  --bin-dir DIR             where inferrail and inferrail-sim are (default: this binary's directory)
  --peers-venv DIR          the venv of peer routers (policies peer:sglang.P, peer:vllm.P;
                            default: peers-venv next to --bin-dir's parent, i.e. target/peers-venv;
                            bench/peers/install.sh creates it)
";

/// The parsed `compare` command line.
#[derive(Debug, Clone)]
pub struct CompareArgs {
    /// The runs, in execution order.
    pub specs: Vec<RunSpec>,
    /// Where result files go.
    pub out_dir: PathBuf,
    /// Where the binaries are.
    pub bin_dir: PathBuf,
    /// Where peers are installed.
    pub peers: PeerPaths,
}

/// Parses the arguments that follow `compare`.
pub fn parse_compare_args<I>(args: I) -> Result<CompareArgs, HarnessError>
where
    I: IntoIterator<Item = String>,
{
    let mut workload = None;
    let mut rate = None;
    let mut policies: Vec<String> = Vec::new();
    let mut reps = 1u32;
    let mut settings = Settings::default();
    let mut sim_args = Vec::new();
    let mut out_dir = None;
    let mut bin_dir = None;
    let mut peers_venv = None;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(ArgsError::Help.into());
        }
        let (flag, inline) = split_flag(flag);
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| ArgsError::MissingValue(flag.clone()))
        };
        let num = |v: String, what: &str| {
            v.parse::<u64>()
                .map_err(|_| invalid(&flag, format!("not {what}")))
        };
        match flag.as_str() {
            "--workload" => workload = Some(value()?),
            "--rate" => {
                rate = Some(
                    value()?
                        .parse::<f64>()
                        .map_err(|_| invalid(&flag, "not a number"))?,
                )
            }
            "--policies" => policies.extend(
                value()?
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(String::from),
            ),
            "--reps" => {
                reps = u32::try_from(num(value()?, "a count")?)
                    .map_err(|_| invalid(&flag, "too large"))?
            }
            "--duration" => settings.duration = Some(value()?),
            "--warmup" => settings.warmup = Some(value()?),
            "--timeout" => settings.timeout = Some(value()?),
            "--max-tokens" => {
                settings.max_tokens = Some(
                    u32::try_from(num(value()?, "a count")?)
                        .map_err(|_| invalid(&flag, "too large"))?,
                )
            }
            "--replicas" => settings.replicas = Some(num(value()?, "a count")? as usize),
            "--kv-capacity-blocks" => settings.kv_capacity_blocks = Some(num(value()?, "a count")?),
            "--sim-arg" => sim_args.extend(value()?.split_whitespace().map(String::from)),
            "--out" => out_dir = Some(PathBuf::from(value()?)),
            "--bin-dir" => bin_dir = Some(PathBuf::from(value()?)),
            "--peers-venv" => peers_venv = Some(PathBuf::from(value()?)),
            _ => return Err(ArgsError::UnknownFlag(flag).into()),
        }
    }
    let workload = workload.ok_or(ArgsError::Required("--workload"))?;
    let rate = rate.ok_or(ArgsError::Required("--rate"))?;
    if policies.is_empty() {
        return Err(ArgsError::Required("--policies").into());
    }
    if reps == 0 {
        return Err(invalid("--reps", "must be at least 1").into());
    }
    if !sim_args.is_empty() {
        settings.sim_args = Some(sim_args);
    }
    let mut specs = Vec::new();
    for rep in 1..=reps {
        for policy in &policies {
            specs.push(build_spec(
                None, &workload, rate, policy, rep, &settings, "compare",
            )?);
        }
    }
    check_unique(&specs)?;
    let out_dir = out_dir.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("compare-{}-r{rate}-{now}", specs[0].workload))
    });
    let (bin_dir, peers) = locate(bin_dir, peers_venv)?;
    Ok(CompareArgs {
        specs,
        out_dir,
        bin_dir,
        peers,
    })
}

/// Runs a parsed `compare` (one run at a time, no resume: every run is fresh).
pub fn compare(args: &CompareArgs, verbose: bool) -> Result<Outcome, HarnessError> {
    execute(
        &args.specs,
        &ExecOptions {
            bin_dir: args.bin_dir.clone(),
            out_dir: args.out_dir.clone(),
            jobs: 1,
            resume: false,
            verbose,
            peers: args.peers.clone(),
            calibrations: Default::default(),
        },
    )
}

/// A table of results: workload, rate, policy, rep, sent, TTFT p50/p99, the engines' hit rate,
/// goodput and errors.
pub fn summary_table(results: &[&RunResult]) -> String {
    let mut t = String::from(
        "| run | policy | rep | sent | TTFT p50 ms | TTFT p99 ms | engine hit rate | goodput req/s (fraction) | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let s = &r.spec;
        let ms = |key: &str| r.report["ttft_us"][key].as_f64().unwrap_or(0.0) / 1e3;
        let hit = r
            .engines
            .hit_rate
            .map_or("n/a".into(), |h| format!("{:.1} %", 100.0 * h));
        let name = s.name.as_ref().map(|n| format!("{n} ")).unwrap_or_default();
        let _ = writeln!(
            t,
            "| {name}{} r{} | {} | {} | {} | {:.0} | {:.0} | {hit} | {:.2} ({:.2}) | {} |",
            s.workload,
            s.rate,
            s.policy,
            s.rep,
            r.report["sent"],
            ms("p50"),
            ms("p99"),
            r.report["goodput"]["requests_per_s"]
                .as_f64()
                .unwrap_or(0.0),
            r.report["goodput"]["fraction"].as_f64().unwrap_or(0.0),
            r.report["errors"]["total"],
        );
    }
    t
}
