//! Fair comparisons (issue 7): `compare` and `sweep` start a FRESH fleet (simulators and a
//! gateway, from the built binaries) for every run, send the same requests at the same times to
//! every policy (seeds derive from workload, rate and repetition only), and write one result file
//! per run: the `run` report plus the engines' prefix cache counters and the gateway's requests
//! per replica over the measured window.
//!
//! Modules: [`spec`] (run specs, sweep TOML, spec hash), [`fleet`] (processes and ports),
//! [`exec`] (one run, many runs, resume), [`peers`] (other routers as extra policies),
//! [`compare`], [`sweep`], [`knee`] (the highest rate a front sustains within the SLO).

pub mod calibration;
pub mod cli;
pub mod compare;
pub mod exec;
pub mod fleet;
pub mod knee;
pub mod peers;
pub mod signals;
pub mod spec;
pub mod sweep;

use std::path::PathBuf;

use crate::args::ArgsError;
use crate::run::LoadError;
use peers::PeerPaths;

pub use compare::{compare, parse_compare_args, summary_table, CompareArgs, COMPARE_USAGE};
pub use exec::{execute, run_one, Engines, ExecOptions, Gateway, Outcome, RunDone, RunResult};
pub use spec::{expand, parse_sweep, spec_hash, RunSpec, Settings, SweepFile};
pub use sweep::{load_sweep, parse_sweep_args, sweep, SweepArgs, SWEEP_USAGE};

/// What can go wrong in a harness command; every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A bad command line.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// A spec value out of range (the message names where it came from).
    #[error("{0}")]
    Spec(String),
    /// A sweep file that does not parse or has a bad key.
    #[error("{file}: {}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Toml {
        /// The file.
        file: String,
        /// The key's path (`points[1].overrides.durtion`), empty when unknown.
        path: String,
        /// What is wrong, with its line.
        message: String,
    },
    /// A binary the fleet needs is not there.
    #[error("binary {} not found (build it with `cargo build --workspace --bins`, or pass --bin-dir)", .0.display())]
    MissingBinary(PathBuf),
    /// The binary directory could not be found.
    #[error("cannot locate the binaries' directory: {0}")]
    BinDir(std::io::Error),
    /// A process could not be started.
    #[error("starting {what}: {source}")]
    Spawn {
        /// Which process.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// `inferrail calibrate` against a sweep's simulator failed or printed no cost model.
    #[error("calibrating the gateway's cost model: {why} (simulator log: {})", .log.display())]
    Calibrate {
        /// The calibrated simulator's log.
        log: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// A process did not answer its health check in time.
    #[error("{what} on 127.0.0.1:{port} did not come up within {secs} s (log: {})", .log.display())]
    NotUp {
        /// Which process.
        what: String,
        /// The port polled.
        port: u16,
        /// The time allowed.
        secs: u64,
        /// Its log.
        log: PathBuf,
    },
    /// A process exited before it came up.
    #[error("{what} exited before coming up ({status}; log: {})", .log.display())]
    Exited {
        /// Which process.
        what: String,
        /// Its exit status.
        status: String,
        /// Its log.
        log: PathBuf,
    },
    /// No free port could be found.
    #[error("no free port on 127.0.0.1: {0}")]
    Port(std::io::Error),
    /// Reading a fleet's metrics failed.
    #[error("GET {url}: {reason}")]
    Http {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The load itself failed.
    #[error("run {stem}: {source}")]
    Load {
        /// The run's file stem.
        stem: String,
        /// Why.
        source: LoadError,
    },
    /// A knee search's bracket is unusable, or it was fed an outcome it did not ask for.
    #[error(transparent)]
    Bisect(#[from] knee::bisect::BisectError),
    /// A probe's report could not be judged.
    #[error(transparent)]
    Judge(#[from] knee::judge::JudgeError),
    /// A file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The directory of the running executable (`target/<profile>` for a cargo-built binary).
pub fn default_bin_dir() -> Result<PathBuf, HarnessError> {
    let exe = std::env::current_exe().map_err(HarnessError::BinDir)?;
    exe.parent()
        .map(PathBuf::from)
        .ok_or_else(|| HarnessError::BinDir(std::io::Error::other("executable has no parent")))
}

/// Where a harness command finds its programs: `--bin-dir` (default: this binary's directory)
/// and `--peers-venv` (default: `peers-venv` beside the binaries' profile directory).
pub fn locate(
    bin_dir: Option<PathBuf>,
    peers_venv: Option<PathBuf>,
) -> Result<(PathBuf, PeerPaths), HarnessError> {
    let bin_dir = match bin_dir {
        Some(dir) => dir,
        None => default_bin_dir()?,
    };
    let peers = match peers_venv {
        Some(venv) => PeerPaths { venv },
        None => PeerPaths::default_for(&bin_dir),
    };
    Ok((bin_dir, peers))
}
