//! The `compare`, `sweep` and `knee` commands as `main` calls them: parse, run, print, exit code.

use std::process::ExitCode;

use super::compare::{compare, parse_compare_args, summary_table, COMPARE_USAGE};
use super::exec::{Outcome, RunResult};
use super::knee::{knee, parse_knee_args, KNEE_USAGE};
use super::signals::{stop_fleets_on_signal, unless_stopping};
use super::sweep::{parse_sweep_args, sweep, SWEEP_USAGE};
use super::HarnessError;
use crate::args::ArgsError;

/// `inferrail-bench compare ...`.
pub fn compare_main(args: impl Iterator<Item = String>) -> ExitCode {
    let parsed = match parse_compare_args(args) {
        Ok(parsed) => parsed,
        Err(e) => return usage_error("compare", e, COMPARE_USAGE),
    };
    watch_signals();
    eprintln!(
        "[harness] compare: {} runs into {}",
        parsed.specs.len(),
        parsed.out_dir.display()
    );
    finish("compare", unless_stopping(compare(&parsed, true)))
}

/// `inferrail-bench sweep FILE.toml ...`.
pub fn sweep_main(args: impl Iterator<Item = String>) -> ExitCode {
    let parsed = match parse_sweep_args(args) {
        Ok(parsed) => parsed,
        Err(e) => return usage_error("sweep", e, SWEEP_USAGE),
    };
    watch_signals();
    eprintln!(
        "[harness] sweep {}: results in {} ({} at once)",
        parsed.file.display(),
        parsed.out_dir.display(),
        parsed.jobs
    );
    finish("sweep", unless_stopping(sweep(&parsed, true)))
}

/// `inferrail-bench knee [SPEC.toml] --workload W --front F ...`: prints the summary table and
/// the capacity ratios; exit 1 when a probe could not run.
pub fn knee_main(args: impl Iterator<Item = String>) -> ExitCode {
    let parsed = match parse_knee_args(args) {
        Ok(parsed) => parsed,
        Err(e) => return usage_error("knee", e, KNEE_USAGE),
    };
    watch_signals();
    eprintln!(
        "[knee] {} with {}: results in {}",
        parsed.workload,
        parsed.fronts.join(", "),
        parsed.out_dir.display()
    );
    match unless_stopping(knee(&parsed, true)) {
        Ok(summary) => {
            print!("{}", summary.markdown());
            println!(
                "wrote {} and knee.md",
                parsed.out_dir.join("knee.json").display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("inferrail-bench knee: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fleets stop with the harness: without the watcher a `kill` would leave them running.
fn watch_signals() {
    if let Err(e) = stop_fleets_on_signal() {
        eprintln!("[harness] cannot watch for SIGTERM/SIGINT/SIGHUP ({e}): stopping this command with a signal will leave its fleet running");
    }
}

fn usage_error(cmd: &str, e: HarnessError, usage: &str) -> ExitCode {
    match e {
        HarnessError::Args(ArgsError::Help) => {
            print!("{usage}");
            ExitCode::SUCCESS
        }
        HarnessError::Args(e) => {
            eprintln!("inferrail-bench {cmd}: {e}\n\n{usage}");
            ExitCode::from(2)
        }
        e => {
            eprintln!("inferrail-bench {cmd}: {e}");
            ExitCode::from(2)
        }
    }
}

fn finish(cmd: &str, outcome: Result<Outcome, HarnessError>) -> ExitCode {
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("inferrail-bench {cmd}: {e}");
            return match e {
                HarnessError::Toml { .. } | HarnessError::Spec(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            };
        }
    };
    let skipped: Vec<RunResult> = outcome
        .skipped
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    let mut all: Vec<&RunResult> = outcome.ran.iter().map(|d| &d.result).collect();
    all.extend(skipped.iter());
    print!("{}", summary_table(&all));
    println!(
        "{} ran, {} skipped (result already there), {} failed",
        outcome.ran.len(),
        outcome.skipped.len(),
        outcome.failed.len()
    );
    for (stem, e) in &outcome.failed {
        eprintln!("inferrail-bench {cmd}: {stem}: {e}");
    }
    if outcome.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
