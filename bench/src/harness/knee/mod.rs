//! `inferrail-bench knee` (issue 15, capacity at the SLO): for a workload and each front, the
//! highest offered rate whose probe meets the SLO, found by bisection on rate.
//!
//! A probe is one run of the harness (`exec::execute` of one spec, as `sweep` runs it) on a
//! fresh fleet, its result file written into the output directory like a sweep's. The search
//! ([`bisect`]) is pure and fed each probe's verdict ([`judge`]); the summary ([`summary`]) is
//! written as `knee.json` and `knee.md`. Modules: [`args`] (command line), [`bisect`],
//! [`judge`], [`summary`].

pub mod args;
pub mod bisect;
pub mod judge;
pub mod summary;

use std::path::Path;

use super::exec::{execute, ExecOptions};
use super::spec::{build_spec, RunSpec};
use super::HarnessError;
pub use args::{parse_knee_args, KneeArgs, KNEE_USAGE};
use bisect::{Bisection, Step};
use judge::{judge, ACHIEVED_SHARE};
use summary::{FrontKnee, KneeSummary, ProbeRow, SloRow};

/// The spec of a probe at `rate`: the settings' run, measured over `max(duration,
/// min_samples / rate)`, at the time scale of `--time-scale` (see [`RunSpec::time_scale`]).
pub fn probe_spec(args: &KneeArgs, front: &str, rate: f64) -> Result<RunSpec, HarnessError> {
    let mut spec = build_spec(None, &args.workload, rate, front, 1, &args.settings, "knee")?;
    spec.duration_s = spec.duration_s.max(args.min_samples as f64 / rate);
    spec.time_scale = Some(args.slo.time_scale).filter(|s| *s != 1.0);
    Ok(spec)
}

/// Runs the search for every front, writes `knee.json` and `knee.md`, and returns the summary.
/// A probe that cannot run (a fleet that does not start, a load error) stops the command.
pub fn knee(args: &KneeArgs, verbose: bool) -> Result<KneeSummary, HarnessError> {
    let opts = ExecOptions {
        bin_dir: args.bin_dir.clone(),
        out_dir: args.out_dir.clone(),
        jobs: 1,
        resume: false,
        verbose: false,
        peers: args.peers.clone(),
        calibrations: Default::default(),
    };
    let slo = SloRow {
        p99_ttft_s: args.slo.ttft.as_secs_f64(),
        p99_tpot_s: args.slo.tpot.as_secs_f64(),
        achieved_share: ACHIEVED_SHARE,
    };
    let mut summary = KneeSummary::new(
        &args.workload,
        slo,
        args.slo.time_scale,
        args.min_samples,
        args.bracket,
    );
    for front in &args.fronts {
        summary.push(search(args, front, &opts, verbose)?);
        write_summary(&args.out_dir, &summary)?;
    }
    Ok(summary)
}

/// One front's search, probe by probe.
fn search(
    args: &KneeArgs,
    front: &str,
    opts: &ExecOptions,
    verbose: bool,
) -> Result<FrontKnee, HarnessError> {
    let mut search = Bisection::new(args.bracket)?;
    let mut probes = Vec::new();
    loop {
        let rate = match search.next() {
            Step::Probe(rate) => rate,
            Step::Done(k) => {
                return Ok(FrontKnee {
                    front: front.to_string(),
                    capped: k.capped(),
                    knee: k.knee,
                    lowest_failed: k.lowest_failed,
                    ratio_to_first: None,
                    notes: k.events.iter().map(ToString::to_string).collect(),
                    probes,
                })
            }
        };
        let spec = probe_spec(args, front, rate)?;
        if verbose {
            eprintln!(
                "[knee] {front}: probe {} at {rate} req/s over {:.1} s",
                probes.len() + 1,
                spec.duration_s
            );
        }
        let mut outcome = execute(std::slice::from_ref(&spec), opts)?;
        if let Some((_, e)) = outcome.failed.pop() {
            return Err(e);
        }
        let done = outcome
            .ran
            .pop()
            .ok_or_else(|| HarnessError::Spec(format!("{}: the probe did not run", spec.stem())))?;
        let judgement = judge(&done.result.report, &args.slo)?;
        if verbose {
            eprintln!(
                "[knee] {front}: {rate} req/s {} (sent {}, p99 TTFT {}, p99 TPOT {}){}",
                if judgement.met { "met" } else { "failed" },
                judgement.sent,
                judgement
                    .p99_ttft_s
                    .map_or("n/a".into(), |t| format!("{t:.3} s")),
                judgement
                    .p99_tpot_s
                    .map_or("n/a".into(), |t| format!("{:.1} ms", t * 1e3)),
                if judgement.failed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", judgement.failed.join("; "))
                }
            );
        }
        search.record(rate, judgement.met)?;
        probes.push(ProbeRow {
            rate,
            duration_s: spec.duration_s,
            file: format!("{}.json", spec.stem()),
            below_min_samples: judgement.sent < args.min_samples,
            judgement,
        });
    }
}

/// Writes `knee.json` and `knee.md` into `dir`.
pub fn write_summary(dir: &Path, s: &KneeSummary) -> Result<(), HarnessError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HarnessError::Io { path, source }
    };
    let json_path = dir.join(summary::SUMMARY_FILE);
    let mut json = serde_json::to_vec_pretty(s)
        .map_err(std::io::Error::other)
        .map_err(io(&json_path))?;
    json.push(b'\n');
    std::fs::write(&json_path, json).map_err(io(&json_path))?;
    let md_path = dir.join(summary::SUMMARY_MD);
    std::fs::write(&md_path, s.markdown()).map_err(io(&md_path))
}
