//! `inferrail-bench sweep FILE.toml`: every (point, rate, rep, policy) of a sweep file, policies
//! innermost, `--jobs` runs at once (each on its own fleet), resuming: a run whose result file
//! already holds its spec hash is skipped.

use std::path::{Path, PathBuf};

use super::exec::{execute, ExecOptions, Outcome};
use super::peers::PeerPaths;
use super::spec::{expand, parse_sweep, RunSpec};
use super::{locate, HarnessError};
use crate::args::{invalid, split_flag, ArgsError};

/// Usage text for `inferrail-bench sweep`.
pub const SWEEP_USAGE: &str = "\
usage: inferrail-bench sweep FILE.toml [--out DIR] [--jobs N] [--bin-dir DIR]

Expands the sweep file (format: bench/README.md) into runs (for each point, rate, rep: every
policy), runs each on a fresh fleet and writes one result JSON per run into DIR. A run whose
result file exists with the same spec hash is skipped (a changed spec runs again).

  --out DIR       result directory (default: the file's name without .toml, next to it)
  --jobs N        runs at once, each on its own fleet and ports (default 1)
  --bin-dir DIR   where inferrail and inferrail-sim are (default: this binary's directory)
  --peers-venv DIR
                  the venv of peer routers (policies peer:sglang.P, peer:vllm.P; default:
                  target/peers-venv next to the binaries; bench/peers/install.sh creates it)
";

/// The parsed `sweep` command line.
#[derive(Debug, Clone)]
pub struct SweepArgs {
    /// The sweep file.
    pub file: PathBuf,
    /// Where result files go.
    pub out_dir: PathBuf,
    /// Runs at once.
    pub jobs: usize,
    /// Where the binaries are.
    pub bin_dir: PathBuf,
    /// Where peers are installed.
    pub peers: PeerPaths,
}

/// Parses the arguments that follow `sweep`.
pub fn parse_sweep_args<I>(args: I) -> Result<SweepArgs, HarnessError>
where
    I: IntoIterator<Item = String>,
{
    let mut file = None;
    let mut out_dir = None;
    let mut jobs = 1;
    let mut bin_dir = None;
    let mut peers_venv = None;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(ArgsError::Help.into());
        }
        if !flag.starts_with("--") {
            if file.replace(PathBuf::from(&flag)).is_some() {
                return Err(invalid("FILE", "give one sweep file").into());
            }
            continue;
        }
        let (flag, inline) = split_flag(flag);
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| ArgsError::MissingValue(flag.clone()))
        };
        match flag.as_str() {
            "--out" => out_dir = Some(PathBuf::from(value()?)),
            "--bin-dir" => bin_dir = Some(PathBuf::from(value()?)),
            "--peers-venv" => peers_venv = Some(PathBuf::from(value()?)),
            "--jobs" => {
                jobs = match value()?.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(invalid(&flag, "a count of at least 1").into()),
                }
            }
            _ => return Err(ArgsError::UnknownFlag(flag).into()),
        }
    }
    let file = file.ok_or(ArgsError::Required("FILE.toml"))?;
    let out_dir = out_dir.unwrap_or_else(|| file.with_extension(""));
    let (bin_dir, peers) = locate(bin_dir, peers_venv)?;
    Ok(SweepArgs {
        file,
        out_dir,
        jobs,
        bin_dir,
        peers,
    })
}

/// Reads and expands a sweep file.
pub fn load_sweep(file: &Path) -> Result<Vec<RunSpec>, HarnessError> {
    let text = std::fs::read_to_string(file).map_err(|source| HarnessError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    expand(&parse_sweep(&text, file)?)
}

/// Runs a sweep: expands the file, then executes with resume.
pub fn sweep(args: &SweepArgs, verbose: bool) -> Result<Outcome, HarnessError> {
    let specs = load_sweep(&args.file)?;
    execute(
        &specs,
        &ExecOptions {
            bin_dir: args.bin_dir.clone(),
            out_dir: args.out_dir.clone(),
            jobs: args.jobs,
            resume: true,
            verbose,
            peers: args.peers.clone(),
            calibrations: Default::default(),
        },
    )
}
