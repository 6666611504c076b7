//! The `inferrail-bench run` command line.

use std::path::PathBuf;
use std::time::Duration;

use crate::args::{header_arg, invalid, parse_duration, parse_url, split_flag, ArgsError, Target};
use crate::arrivals::ArrivalKind;
use crate::progress::ProgressMode;
use crate::workload::Workload;

/// Usage text for `inferrail-bench run`.
pub const RUN_USAGE: &str = "\
usage: inferrail-bench run --url http://HOST:PORT --workload W --rate R --duration D [options]

Sends a named workload open loop (streaming, with usage) and measures TTFT, TPOT, inter-token
latency, end-to-end latency and send lag, every latency counted from the request's scheduled
time. Multi-turn workloads (w2, w3): each conversation's first turn follows the schedule; a
later turn goes out its think time after the previous turn's answer completed.

  --url URL                 target (http only); a path other than / replaces /v1/chat/completions
  --workload W              w1 w2 w3 w4 w5 w6 w8 mix hot (required)
  --rate R                  first turns per second (required)
  --duration D              measured time (default 10s)
  --warmup D                sent first, measured nowhere (default 1s)
  --arrivals K              poisson | gamma:CV | diurnal:AMP | gamma-diurnal:CV:AMP
                            (default: the workload's own, poisson except w8)
  --seed S                  seeds the schedule and the workload (default 1)
  --model M                 the body's model (default sim-llama)
  --max-tokens N            the body's max_tokens (default 64)
  --slo-ttft D              goodput's TTFT bound (default 2s)
  --slo-tpot D              goodput's TPOT bound (default 100ms)
  --header 'k: v'           extra request header (repeatable)
  --connections N           connections opened before the run (default 32)
  --max-connections N       most connections open at once (default 512)
  --timeout D               per request, from its scheduled time (default 60s)
  --json OUT.json           also write the result as JSON
  --no-progress             no progress line (default: redrawn every second on a terminal,
                            a plain line every 10 s otherwise)
";

/// Goodput's service-level objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slo {
    /// Largest TTFT that counts as good.
    pub ttft: Duration,
    /// Largest TPOT that counts as good.
    pub tpot: Duration,
}

impl Slo {
    /// Both bounds multiplied by `scale` (a run against engines at that time scale).
    pub fn scaled(self, scale: f64) -> Slo {
        Slo {
            ttft: self.ttft.mul_f64(scale),
            tpot: self.tpot.mul_f64(scale),
        }
    }
}

impl Default for Slo {
    /// TTFT at most 2 s, TPOT at most 100 ms.
    fn default() -> Slo {
        Slo {
            ttft: Duration::from_secs(2),
            tpot: Duration::from_millis(100),
        }
    }
}

/// Everything one `run` needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where requests go.
    pub target: Target,
    /// What is sent.
    pub workload: Workload,
    /// First turns per second.
    pub rate: f64,
    /// Measured time.
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// How first turns are spaced.
    pub arrivals: ArrivalKind,
    /// Seeds the schedule and the workload.
    pub seed: u64,
    /// The body's `model`.
    pub model: String,
    /// The body's `max_tokens`.
    pub max_tokens: u32,
    /// Goodput's bounds.
    pub slo: Slo,
    /// The engines' time scale: every think time is multiplied by it (1: real time).
    pub time_scale: f64,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Connections opened before the run.
    pub connections: usize,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Per-request time limit, from the scheduled time.
    pub timeout: Duration,
    /// How the run shows its progress on stderr.
    pub progress: ProgressMode,
}

/// The parsed `run` command line.
#[derive(Debug, Clone)]
pub struct RunArgs {
    /// The run itself.
    pub config: RunConfig,
    /// Where to write the JSON result, if anywhere.
    pub json: Option<PathBuf>,
}

/// Parses an `--arrivals` value: `poisson`, `gamma:CV`, `diurnal:AMP` or
/// `gamma-diurnal:CV:AMP` (CV > 0, 0 <= AMP < 1).
pub fn parse_arrival_kind(s: &str) -> Result<ArrivalKind, String> {
    let num = |v: &str, what: &str| -> Result<f64, String> {
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(format!("bad {what} {v:?}")),
        }
    };
    let cv = |v: &str| match num(v, "CV")? {
        x if x > 0.0 => Ok(x),
        _ => Err(format!("CV must be above zero, got {v}")),
    };
    let amp = |v: &str| match num(v, "amplitude")? {
        x if (0.0..1.0).contains(&x) => Ok(x),
        _ => Err(format!("amplitude must be in [0, 1), got {v}")),
    };
    let parts: Vec<&str> = s.trim().split(':').collect();
    match parts.as_slice() {
        ["poisson"] => Ok(ArrivalKind::Poisson),
        ["gamma", c] => Ok(ArrivalKind::Gamma { cv: cv(c)? }),
        ["diurnal", a] => Ok(ArrivalKind::Diurnal { amplitude: amp(a)? }),
        ["gamma-diurnal", c, a] => Ok(ArrivalKind::GammaDiurnal {
            cv: cv(c)?,
            amplitude: amp(a)?,
        }),
        _ => Err(format!(
            "{s:?}: expected poisson, gamma:CV, diurnal:AMP or gamma-diurnal:CV:AMP"
        )),
    }
}

/// Parses the arguments that follow `run`.
pub fn parse_run_args<I>(args: I) -> Result<RunArgs, ArgsError>
where
    I: IntoIterator<Item = String>,
{
    let mut url = None;
    let mut workload = None;
    let mut rate = None;
    let mut duration = Duration::from_secs(10);
    let mut warmup = Duration::from_secs(1);
    let mut arrivals = None;
    let mut seed = 1;
    let mut model = "sim-llama".to_string();
    let mut max_tokens = 64;
    let mut slo = Slo::default();
    let mut headers = Vec::new();
    let mut connections = 32;
    let mut max_connections = 512;
    let mut timeout = Duration::from_secs(60);
    let mut json = None;
    let mut progress = ProgressMode::detect();

    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(ArgsError::Help);
        }
        if flag == "--no-progress" {
            progress = ProgressMode::Off;
            continue;
        }
        let (flag, inline) = split_flag(flag);
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| ArgsError::MissingValue(flag.clone()))
        };
        let dur = |v: String| parse_duration(&v).map_err(|e| invalid(&flag, e));
        let count = |v: String| {
            v.parse::<usize>()
                .map_err(|_| invalid(&flag, "not a count"))
        };
        match flag.as_str() {
            "--url" => url = Some(parse_url(&value()?)?),
            "--workload" => {
                let v = value()?;
                workload = Some(
                    Workload::parse(&v)
                        .ok_or_else(|| invalid(&flag, "one of w1 w2 w3 w4 w5 w6 w8 mix hot"))?,
                );
            }
            "--rate" => {
                let r: f64 = value()?
                    .parse()
                    .map_err(|_| invalid(&flag, "not a number"))?;
                if !(r.is_finite() && r > 0.0) {
                    return Err(invalid(&flag, "must be a positive number"));
                }
                rate = Some(r);
            }
            "--duration" => duration = dur(value()?)?,
            "--warmup" => warmup = dur(value()?)?,
            "--timeout" => timeout = dur(value()?)?,
            "--slo-ttft" => slo.ttft = dur(value()?)?,
            "--slo-tpot" => slo.tpot = dur(value()?)?,
            "--arrivals" => {
                arrivals = Some(parse_arrival_kind(&value()?).map_err(|e| invalid(&flag, e))?)
            }
            "--seed" => seed = value()?.parse().map_err(|_| invalid(&flag, "not a u64"))?,
            "--model" => model = value()?,
            "--max-tokens" => {
                max_tokens = value()?.parse().map_err(|_| invalid(&flag, "not a u32"))?
            }
            "--header" => headers.push(header_arg(&flag, &value()?)?),
            "--connections" => connections = count(value()?)?,
            "--max-connections" => max_connections = count(value()?)?.max(1),
            "--json" => json = Some(PathBuf::from(value()?)),
            _ => return Err(ArgsError::UnknownFlag(flag)),
        }
    }
    let target = url.ok_or(ArgsError::Required("--url"))?;
    let workload = workload.ok_or(ArgsError::Required("--workload"))?;
    let rate = rate.ok_or(ArgsError::Required("--rate"))?;
    if duration.is_zero() {
        return Err(invalid("--duration", "must be above zero"));
    }
    if timeout.is_zero() {
        return Err(invalid("--timeout", "must be above zero"));
    }
    Ok(RunArgs {
        config: RunConfig {
            target,
            workload,
            rate,
            duration,
            warmup,
            arrivals: arrivals.unwrap_or_else(|| workload.arrivals()),
            seed,
            model,
            max_tokens,
            slo,
            time_scale: 1.0,
            headers,
            connections: connections.min(max_connections),
            max_connections,
            timeout,
            progress,
        },
        json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<RunArgs, ArgsError> {
        parse_run_args(line.split_whitespace().map(String::from))
    }

    #[test]
    fn arrival_kinds() {
        assert_eq!(parse_arrival_kind("poisson"), Ok(ArrivalKind::Poisson));
        assert_eq!(
            parse_arrival_kind("gamma:2"),
            Ok(ArrivalKind::Gamma { cv: 2.0 })
        );
        assert_eq!(
            parse_arrival_kind("diurnal:0.5"),
            Ok(ArrivalKind::Diurnal { amplitude: 0.5 })
        );
        assert_eq!(
            parse_arrival_kind("gamma-diurnal:3:0.25"),
            Ok(ArrivalKind::GammaDiurnal {
                cv: 3.0,
                amplitude: 0.25
            })
        );
        for bad in [
            "uniform",
            "gamma",
            "gamma:0",
            "gamma:-1",
            "gamma:x",
            "diurnal:1",
            "diurnal:-0.1",
            "gamma-diurnal:2",
            "gamma-diurnal:2:0.5:1",
            "poisson:1",
            "gamma:inf",
        ] {
            assert!(parse_arrival_kind(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_and_defaults() {
        let a = parse("--url http://127.0.0.1:9 --workload W2 --rate 5").unwrap();
        let c = &a.config;
        assert_eq!(c.workload, Workload::W2);
        assert_eq!(c.arrivals, ArrivalKind::Poisson);
        assert_eq!(c.slo, Slo::default());
        assert_eq!((c.connections, c.max_connections), (32, 512));
        assert_eq!(c.max_tokens, 64);
        let a = parse(
            "--url=http://h:1 --workload w8 --rate 2 --duration 3s --warmup 0 --seed 4 \
             --max-tokens 16 --slo-ttft 500ms --slo-tpot 30ms --max-connections 1 \
             --timeout 9s --json o.json --header a:b",
        )
        .unwrap();
        let c = &a.config;
        assert_eq!(
            c.arrivals,
            ArrivalKind::GammaDiurnal {
                cv: 3.0,
                amplitude: 0.5
            },
            "w8 brings its own arrivals"
        );
        assert_eq!(c.slo.ttft, Duration::from_millis(500));
        assert_eq!(c.slo.tpot, Duration::from_millis(30));
        assert_eq!((c.connections, c.max_connections), (1, 1));
        assert_eq!(a.json, Some(PathBuf::from("o.json")));
        let a = parse("--url http://h:1 --workload hot --rate 2 --arrivals gamma:4").unwrap();
        assert_eq!(a.config.arrivals, ArrivalKind::Gamma { cv: 4.0 });
    }

    #[test]
    fn bad_lines() {
        assert_eq!(
            parse("--url http://h:1 --rate 1").unwrap_err(),
            ArgsError::Required("--workload")
        );
        assert!(matches!(
            parse("--url http://h:1 --rate 1 --workload w7"),
            Err(ArgsError::Invalid { .. })
        ));
        assert!(matches!(
            parse("--url http://h:1 --rate 1 --workload w1 --arrivals uniform"),
            Err(ArgsError::Invalid { .. })
        ));
        assert!(matches!(
            parse("--url http://h:1 --rate 1 --workload w1 --duration 0"),
            Err(ArgsError::Invalid { .. })
        ));
        assert_eq!(parse("--help").unwrap_err(), ArgsError::Help);
    }
}
