//! The `knee` command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bisect::{Bisection, Bracket};
use super::judge::KneeSlo;
use crate::args::{invalid, parse_duration, split_flag, ArgsError};
use crate::harness::peers::PeerPaths;
use crate::harness::spec::{build_spec, parse_sweep, Settings};
use crate::harness::{locate, HarnessError};
use crate::workload::Workload;

/// Usage text for `inferrail-bench knee`.
pub const KNEE_USAGE: &str = "\
usage: inferrail-bench knee [SPEC.toml] --workload W --front F [--front F ...] --low R --high R
    [--tolerance T] [--floor R] [--cap R] [--min-samples N] [--slo-ttft D] [--slo-tpot D]
    [--time-scale S] [--out DIR] [--bin-dir DIR] [--peers-venv DIR]

For each front, bisects the highest offered rate it sustains within the SLO, each probe one run
(as `sweep` runs them) on a FRESH fleet. A probe MEETS when it completed requests, none errored,
it achieved (completed / wall time) at least 95 % of the rate it offered (sent / measured
window), and its p99 TTFT and p99 TPOT are within bounds. Search: probe low; if it meets probe
high, doubling while it meets (up to --cap); if low fails halve it (down to --floor); then the
geometric mean of the highest met and the lowest failed until their ratio <= 1 + tolerance.
Each probe runs max(duration, min-samples / rate) so it measures about min-samples requests.
Writes every probe's result JSON, knee.json and knee.md into DIR.

  SPEC.toml          a sweep file: its [settings], with the overrides of its first point of the
                     workload, shape every probe (its rates are ignored; its policies are the
                     fronts when no --front is given); default: the sweep defaults
  --workload W       w1 w2 w3 w4 w5 w6 w8 mix hot (required)
  --front F          a gateway policy or peer:... (repeatable, or comma-separated); the first
                     is the baseline of the capacity ratios
  --low R, --high R  the starting bracket, req/s (required; low < high)
  --tolerance T      stop when lowest failed / highest met <= 1 + T (default 0.1, >= 0.01)
  --floor R          the lowest rate halving may reach (default low / 16)
  --cap R            the highest rate doubling may reach (default high * 16)
  --min-samples N    measured requests a probe aims at (default 1000)
  --slo-ttft D       p99 TTFT bound (default 2s), model time
  --slo-tpot D       p99 TPOT bound (default 100ms), model time
  --time-scale S     every probe's time_scale (simulators' latencies, think times and the
                     goodput SLO times S); measured latencies are divided by S before the
                     bounds apply (default 1)
  --out DIR          output directory (default knee-<workload>-<unix time>)
  --bin-dir DIR      where inferrail and inferrail-sim are (default: this binary's directory)
  --peers-venv DIR   the venv of peer routers (default target/peers-venv)
";

/// Default `--min-samples`.
pub const DEFAULT_MIN_SAMPLES: u64 = 1000;
/// Default `--tolerance`.
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// Default `--floor` is `low` divided by this, `--cap` is `high` times this.
pub const DEFAULT_REACH: f64 = 16.0;

/// The parsed `knee` command line.
#[derive(Debug, Clone)]
pub struct KneeArgs {
    /// The workload's name as the specs spell it.
    pub workload: String,
    /// The fronts, the first the baseline.
    pub fronts: Vec<String>,
    /// What shapes every probe (from SPEC.toml, else defaults).
    pub settings: Settings,
    /// The search's bracket.
    pub bracket: Bracket,
    /// Measured requests a probe aims at.
    pub min_samples: u64,
    /// The bounds and the time scale.
    pub slo: KneeSlo,
    /// Where everything is written.
    pub out_dir: PathBuf,
    /// Where the binaries are.
    pub bin_dir: PathBuf,
    /// Where peers are installed.
    pub peers: PeerPaths,
}

/// Parses the arguments that follow `knee`.
pub fn parse_knee_args<I>(args: I) -> Result<KneeArgs, HarnessError>
where
    I: IntoIterator<Item = String>,
{
    let mut file = None;
    let mut workload = None;
    let mut fronts: Vec<String> = Vec::new();
    let (mut low, mut high, mut floor, mut cap) = (None, None, None, None);
    let mut tolerance = DEFAULT_TOLERANCE;
    let mut min_samples = DEFAULT_MIN_SAMPLES;
    let mut slo = KneeSlo::default();
    let (mut out_dir, mut bin_dir, mut peers_venv) = (None, None, None);
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(ArgsError::Help.into());
        }
        if !flag.starts_with("--") {
            if file.replace(PathBuf::from(&flag)).is_some() {
                return Err(invalid("SPEC.toml", "give one spec file").into());
            }
            continue;
        }
        let (flag, inline) = split_flag(flag);
        let value = inline
            .or_else(|| args.next())
            .ok_or_else(|| ArgsError::MissingValue(flag.clone()))?;
        let rate = || positive(&flag, &value);
        let dur = || {
            parse_duration(&value)
                .map_err(|e| invalid(&flag, e))
                .and_then(|d| nonzero(&flag, d))
        };
        match flag.as_str() {
            "--workload" => workload = Some(value),
            "--front" => fronts.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(String::from),
            ),
            "--low" => low = Some(rate()?),
            "--high" => high = Some(rate()?),
            "--floor" => floor = Some(rate()?),
            "--cap" => cap = Some(rate()?),
            "--tolerance" => tolerance = rate()?,
            "--time-scale" => slo.time_scale = rate()?,
            "--min-samples" => {
                min_samples = match value.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(invalid(&flag, "a count of at least 1").into()),
                }
            }
            "--slo-ttft" => slo.ttft = dur()?,
            "--slo-tpot" => slo.tpot = dur()?,
            "--out" => out_dir = Some(PathBuf::from(value)),
            "--bin-dir" => bin_dir = Some(PathBuf::from(value)),
            "--peers-venv" => peers_venv = Some(PathBuf::from(value)),
            _ => return Err(ArgsError::UnknownFlag(flag).into()),
        }
    }
    let workload = workload.ok_or(ArgsError::Required("--workload"))?;
    let (low, high) = (
        low.ok_or(ArgsError::Required("--low"))?,
        high.ok_or(ArgsError::Required("--high"))?,
    );
    let bracket = Bracket {
        low,
        high,
        floor: floor.unwrap_or(low / DEFAULT_REACH),
        cap: cap.unwrap_or(high * DEFAULT_REACH),
        tolerance,
    };
    Bisection::new(bracket)?;
    let (settings, spec_fronts) = match &file {
        Some(path) => spec_settings(path, &workload)?,
        None => (Settings::default(), Vec::new()),
    };
    if fronts.is_empty() {
        fronts = spec_fronts;
    }
    if fronts.is_empty() {
        return Err(ArgsError::Required("--front").into());
    }
    let scaled_args = settings
        .sim_args
        .iter()
        .flatten()
        .any(|a| a.starts_with("--time-scale"));
    if scaled_args || settings.time_scale.is_some() {
        return Err(HarnessError::Spec(
            "the spec sets a time scale (time_scale or sim_args --time-scale): give it to \
             knee's --time-scale instead (which also rescales the measured latencies)"
                .into(),
        ));
    }
    // Every front and the settings are checked before anything runs.
    for front in &fronts {
        build_spec(None, &workload, low, front, 1, &settings, "knee")?;
    }
    let out_dir = out_dir.unwrap_or_else(|| default_out(&workload));
    let (bin_dir, peers) = locate(bin_dir, peers_venv)?;
    Ok(KneeArgs {
        workload,
        fronts,
        settings,
        bracket,
        min_samples,
        slo,
        out_dir,
        bin_dir,
        peers,
    })
}

fn positive(flag: &str, value: &str) -> Result<f64, ArgsError> {
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(invalid(flag, "a positive number")),
    }
}

fn nonzero(flag: &str, d: Duration) -> Result<Duration, ArgsError> {
    if d.is_zero() {
        Err(invalid(flag, "must be above zero"))
    } else {
        Ok(d)
    }
}

/// The spec file's settings for `workload` (merged with its first point of that workload) and
/// its policies.
fn spec_settings(path: &Path, workload: &str) -> Result<(Settings, Vec<String>), HarnessError> {
    let text = std::fs::read_to_string(path).map_err(|source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let sweep = parse_sweep(&text, path)?;
    let wanted = Workload::parse(workload);
    let settings = match sweep
        .points
        .iter()
        .find(|p| wanted.is_some() && Workload::parse(&p.workload) == wanted)
    {
        Some(point) => sweep.settings.merged(&point.overrides),
        None => sweep.settings.clone(),
    };
    Ok((settings, sweep.policies))
}

fn default_out(workload: &str) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from(format!("knee-{}-{now}", workload.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<KneeArgs, HarnessError> {
        parse_knee_args(line.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_fronts() {
        let a = parse("--workload w1 --front cost_model,round_robin --front p2c --low 2 --high 8")
            .unwrap();
        assert_eq!(a.fronts, ["cost_model", "round_robin", "p2c"]);
        assert_eq!(a.bracket.floor, 2.0 / 16.0);
        assert_eq!(a.bracket.cap, 8.0 * 16.0);
        assert_eq!(a.bracket.tolerance, 0.1);
        assert_eq!(a.min_samples, 1000);
        assert_eq!(a.slo, KneeSlo::default());
    }

    #[test]
    fn bad_lines_are_refused() {
        for line in [
            "--front cost_model --low 2 --high 8",
            "--workload w1 --low 2 --high 8",
            "--workload w1 --front cost_model --high 8",
            "--workload w1 --front cost_model --low 8 --high 2",
            "--workload w1 --front cost_model --low 2 --high 8 --tolerance 0.001",
            "--workload w1 --front nope --low 2 --high 8",
            "--workload w9 --front cost_model --low 2 --high 8",
            "--workload w1 --front cost_model --low 2 --high 8 --min-samples 0",
            "--workload w1 --front cost_model --low 2 --high 8 --slo-ttft 0s",
            "--workload w1 --front cost_model --low 2 --high 8 --time-scale -1",
        ] {
            assert!(parse(line).is_err(), "{line}");
        }
    }

    #[test]
    fn a_spec_file_gives_settings_and_fronts() {
        let dir = std::env::temp_dir().join(format!("inferrail-knee-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("k.toml");
        std::fs::write(
            &file,
            "policies = [\"round_robin\", \"cost_model\"]\n[settings]\nduration = \"3s\"\n\
             [[points]]\nworkload = \"w6\"\nrates = [1]\noverrides = { max_tokens = 4 }\n",
        )
        .unwrap();
        let a = parse(&format!(
            "{} --workload w6 --low 1 --high 2",
            file.display()
        ))
        .unwrap();
        assert_eq!(a.fronts, ["round_robin", "cost_model"]);
        assert_eq!(a.settings.duration.as_deref(), Some("3s"));
        assert_eq!(a.settings.max_tokens, Some(4));
        std::fs::write(
            &file,
            "policies = [\"round_robin\"]\n[settings]\nsim_args = [\"--time-scale\", \"0.1\"]\n\
             [[points]]\nworkload = \"w6\"\nrates = [1]\n",
        )
        .unwrap();
        let e = parse(&format!(
            "{} --workload w6 --low 1 --high 2",
            file.display()
        ))
        .unwrap_err();
        assert!(e.to_string().contains("--time-scale"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
