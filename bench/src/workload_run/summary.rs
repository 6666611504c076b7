//! What a `run` measured: the [`Recorder`] that samples go into and the final [`RunReport`]
//! (text and JSON). Warmup samples are counted apart and enter no figure.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::args::Slo;
use super::observe::{Failure, Sample};

/// Highest value the histograms hold exactly, µs (one hour); larger values are clamped.
const HIST_MAX_US: u64 = 3_600_000_000;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A distribution in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Dist {
    /// Values recorded.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Dist {
    fn of(h: &Histogram<u64>) -> Dist {
        if h.is_empty() {
            return Dist::default();
        }
        Dist {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// Measured requests that did not complete, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunErrors {
    /// No connection could be opened.
    pub connect: u64,
    /// The time limit passed first.
    pub timeout: u64,
    /// A non-2xx status.
    pub status: u64,
    /// The exchange broke.
    pub protocol: u64,
    /// A 2xx stream without `[DONE]`, with an error event or events after `[DONE]`.
    pub incomplete: u64,
    /// All of the above.
    pub total: u64,
}

/// Completions per second of `wall_s`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Throughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// `usage.completion_tokens` of completed requests per second.
    pub output_tokens_per_s: f64,
}

/// Completed requests within the SLO.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Goodput {
    /// The TTFT bound, ms.
    pub slo_ttft_ms: f64,
    /// The TPOT bound, ms.
    pub slo_tpot_ms: f64,
    /// Completed requests with TTFT and TPOT within the bounds (no TPOT: one token, counts).
    pub requests: u64,
    /// Those per second of `wall_s`.
    pub requests_per_s: f64,
    /// Those over all measured requests.
    pub fraction: f64,
}

/// Token counts from the usage chunks of completed requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    /// Responses that carried usage.
    pub responses: u64,
    /// Sum of `prompt_tokens`.
    pub prompt_tokens: u64,
    /// Sum of `completion_tokens`.
    pub completion_tokens: u64,
    /// Sum of `prompt_tokens_details.cached_tokens` (absent counts 0).
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens` (0 without prompt tokens).
    pub prefix_hit_rate: f64,
}

/// Which replica served the completed requests (the gateway's `x-inferrail-replica`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Replicas {
    /// Completed requests per replica id.
    pub requests: BTreeMap<String, u64>,
    /// Completed requests without the header.
    pub unknown: u64,
    /// The replica that served the most (`None` without any header).
    pub busiest: Option<String>,
    /// Its share of the requests that named a replica (0 without any).
    pub busiest_share: f64,
}

/// How a prediction compares with the truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accuracy {
    /// Predicted exactly.
    Exact,
    /// Predicted more than there was.
    Over,
    /// Predicted less.
    Under,
}

/// `predicted` against `actual`.
pub fn classify(predicted: u64, actual: u64) -> Accuracy {
    match predicted.cmp(&actual) {
        std::cmp::Ordering::Equal => Accuracy::Exact,
        std::cmp::Ordering::Greater => Accuracy::Over,
        std::cmp::Ordering::Less => Accuracy::Under,
    }
}

/// The gateway's `x-inferrail-cached-tokens` against `usage.prompt_tokens_details.cached_tokens`
/// (absent counts 0), over completed requests that had both the header and usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Prediction {
    /// Requests compared.
    pub requests: u64,
    /// Predicted exactly.
    pub exact: u64,
    /// Predicted more cached tokens than usage reported.
    pub over: u64,
    /// Predicted fewer.
    pub under: u64,
    /// Mean of predicted − actual, tokens.
    pub mean_error_tokens: f64,
    /// Mean of |predicted − actual|, tokens.
    pub mean_abs_error_tokens: f64,
    /// Mean |x-inferrail-prompt-tokens − usage.prompt_tokens| where both were present.
    pub prompt_mean_abs_error_tokens: f64,
}

/// Per-request values kept whole, so that a report can put a bootstrap confidence interval on
/// their percentiles (the [`Dist`]s above are summaries and cannot be resampled). Each array is
/// sorted ascending, exact to the microsecond (not rounded to the histograms' three digits), one
/// value per completed request; files written before these existed have no `samples` key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Samples {
    /// TTFT of every completed request, µs, ascending (as `ttft_us` summarises).
    pub ttft_us: Vec<u64>,
    /// TPOT of every completed request with two tokens or more, µs, ascending (as `tpot_us`).
    pub tpot_us: Vec<u64>,
}

/// Warmup requests: sent, counted here only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WarmupCounts {
    /// Requests scheduled before the end of the warmup.
    pub sent: u64,
    /// Of those, completed.
    pub completed: u64,
}

/// The result of one `run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Target URL.
    pub url: String,
    /// Workload name.
    pub workload: &'static str,
    /// Arrival kind.
    pub arrivals: String,
    /// First turns per second.
    pub rate: f64,
    /// Measured seconds (the schedule's window after the warmup).
    pub duration_s: f64,
    /// End of the warmup to the end of the last measured request, seconds: the denominator of
    /// the rates (`duration_s` when nothing was measured).
    pub wall_s: f64,
    /// Warmup seconds.
    pub warmup_s: f64,
    /// Schedule and workload seed.
    pub seed: u64,
    /// The bodies' `max_tokens`.
    pub max_tokens: u32,
    /// Measured requests attempted.
    pub sent: u64,
    /// Of those, completed (2xx, well-formed stream, `[DONE]`).
    pub completed: u64,
    /// The others.
    pub errors: RunErrors,
    /// Later turns not sent: their conversation failed, or they fell after the end of the run.
    pub turns_skipped: u64,
    /// Completions per second.
    pub throughput: Throughput,
    /// Within the SLO.
    pub goodput: Goodput,
    /// Scheduled send to the first content event, completed requests.
    pub ttft_us: Dist,
    /// `(e2e − ttft) / (completion_tokens − 1)`, completed requests with two tokens or more.
    pub tpot_us: Dist,
    /// Gaps between consecutive content events, completed requests.
    pub itl_us: Dist,
    /// Scheduled send to the end of the response, completed requests.
    pub e2e_us: Dist,
    /// Actual minus scheduled send, every measured request that was written.
    pub send_lag_us: Dist,
    /// The TTFT and TPOT values themselves, for confidence intervals.
    pub samples: Samples,
    /// Usage totals.
    pub usage: UsageTotals,
    /// Requests per replica.
    pub replicas: Replicas,
    /// Prediction accuracy (`None` when no response carried the headers).
    pub prediction: Option<Prediction>,
    /// Warmup counts.
    pub warmup: WarmupCounts,
    /// Connections opened.
    pub connections_opened: u64,
    /// Times a request waited because `--max-connections` were busy.
    pub connection_waits: u64,
    /// Most requests in flight at once.
    pub peak_in_flight: u64,
    /// monoio driver.
    pub driver: &'static str,
    /// The first few broken exchanges' causes.
    pub error_samples: Vec<String>,
}

/// Facts about a run from outside the recorder.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// Target URL.
    pub url: String,
    /// Workload name.
    pub workload: &'static str,
    /// Arrival kind name.
    pub arrivals: String,
    /// First turns per second.
    pub rate: f64,
    /// Measured time.
    pub duration: Duration,
    /// Warmup.
    pub warmup: Duration,
    /// End of the warmup to the end of the last measured request (zero: use `duration`).
    pub wall: Duration,
    /// Seed.
    pub seed: u64,
    /// `max_tokens`.
    pub max_tokens: u32,
    /// Later turns not sent.
    pub turns_skipped: u64,
    /// Connections opened.
    pub connections_opened: u64,
    /// Connection waits.
    pub connection_waits: u64,
    /// Peak in flight.
    pub peak_in_flight: u64,
    /// Driver name.
    pub driver: &'static str,
    /// Error causes.
    pub error_samples: Vec<String>,
}

/// Collects samples during a run.
#[derive(Debug)]
pub struct Recorder {
    slo: Slo,
    ttft: Histogram<u64>,
    tpot: Histogram<u64>,
    itl: Histogram<u64>,
    e2e: Histogram<u64>,
    lag: Histogram<u64>,
    samples: Samples,
    sent: u64,
    completed: u64,
    good: u64,
    errors: RunErrors,
    usage: UsageTotals,
    replicas: BTreeMap<String, u64>,
    unknown_replica: u64,
    prediction: Prediction,
    error_sum: i128,
    abs_error_sum: u128,
    prompt_compared: u64,
    prompt_abs_error_sum: u128,
    warmup: WarmupCounts,
}

impl Recorder {
    /// An empty recorder judging goodput by `slo`.
    pub fn new(slo: Slo) -> Result<Recorder, hdrhistogram::CreationError> {
        let h = || Histogram::new_with_bounds(1, HIST_MAX_US, 3);
        Ok(Recorder {
            slo,
            ttft: h()?,
            tpot: h()?,
            itl: h()?,
            e2e: h()?,
            lag: h()?,
            samples: Samples::default(),
            sent: 0,
            completed: 0,
            good: 0,
            errors: RunErrors::default(),
            usage: UsageTotals::default(),
            replicas: BTreeMap::new(),
            unknown_replica: 0,
            prediction: Prediction::default(),
            error_sum: 0,
            abs_error_sum: 0,
            prompt_compared: 0,
            prompt_abs_error_sum: 0,
            warmup: WarmupCounts::default(),
        })
    }

    /// True when a completed sample meets `slo` (a sample without TPOT passes on TTFT alone;
    /// one without TTFT fails).
    pub fn meets(slo: &Slo, s: &Sample) -> bool {
        s.failure.is_none()
            && s.ttft.is_some_and(|t| t <= slo.ttft)
            && s.tpot().is_none_or(|t| t <= slo.tpot)
    }

    /// Adds one finished request.
    pub fn record(&mut self, s: &Sample) {
        if !s.measured {
            self.warmup.sent += 1;
            self.warmup.completed += u64::from(s.failure.is_none());
            return;
        }
        self.sent += 1;
        if let Some(lag) = s.send_lag {
            self.lag.saturating_record(micros(lag));
        }
        if let Some(f) = s.failure {
            let e = &mut self.errors;
            match f {
                Failure::Connect => e.connect += 1,
                Failure::Timeout => e.timeout += 1,
                Failure::Status(_) => e.status += 1,
                Failure::Protocol => e.protocol += 1,
                Failure::Incomplete => e.incomplete += 1,
            }
            e.total += 1;
            return;
        }
        self.completed += 1;
        self.good += u64::from(Self::meets(&self.slo, s));
        self.e2e.saturating_record(micros(s.e2e));
        if let Some(t) = s.ttft {
            self.ttft.saturating_record(micros(t));
            self.samples.ttft_us.push(micros(t));
        }
        if let Some(t) = s.tpot() {
            self.tpot.saturating_record(micros(t));
            self.samples.tpot_us.push(micros(t));
        }
        for gap in &s.itl {
            self.itl.saturating_record(micros(*gap));
        }
        match &s.replica {
            Some(r) => *self.replicas.entry(r.clone()).or_default() += 1,
            None => self.unknown_replica += 1,
        }
        let Some(u) = s.usage else { return };
        self.usage.responses += 1;
        self.usage.prompt_tokens += u.prompt_tokens;
        self.usage.completion_tokens += u.completion_tokens;
        let cached = u.cached_tokens.unwrap_or(0);
        self.usage.cached_tokens += cached;
        if let Some(p) = s.predicted_cached {
            let pr = &mut self.prediction;
            pr.requests += 1;
            match classify(p, cached) {
                Accuracy::Exact => pr.exact += 1,
                Accuracy::Over => pr.over += 1,
                Accuracy::Under => pr.under += 1,
            }
            let err = i128::from(p) - i128::from(cached);
            self.error_sum += err;
            self.abs_error_sum += err.unsigned_abs();
        }
        if let Some(p) = s.predicted_prompt {
            self.prompt_compared += 1;
            self.prompt_abs_error_sum += p.abs_diff(u.prompt_tokens) as u128;
        }
    }

    /// The samples so far, each array sorted ascending.
    fn sorted_samples(&self) -> Samples {
        let mut out = self.samples.clone();
        out.ttft_us.sort_unstable();
        out.tpot_us.sort_unstable();
        out
    }

    /// Builds the report.
    pub fn report(&self, facts: RunFacts) -> RunReport {
        let secs = facts.duration.as_secs_f64();
        let wall = if facts.wall.is_zero() {
            secs
        } else {
            facts.wall.as_secs_f64()
        };
        let per_s = |n: u64| if wall > 0.0 { n as f64 / wall } else { 0.0 };
        let mut usage = self.usage;
        if usage.prompt_tokens > 0 {
            usage.prefix_hit_rate = usage.cached_tokens as f64 / usage.prompt_tokens as f64;
        }
        let named: u64 = self.replicas.values().sum();
        let busiest = self
            .replicas
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)));
        let replicas = Replicas {
            requests: self.replicas.clone(),
            unknown: self.unknown_replica,
            busiest: busiest.map(|(r, _)| r.clone()),
            busiest_share: match busiest {
                Some((_, n)) if named > 0 => *n as f64 / named as f64,
                _ => 0.0,
            },
        };
        let prediction = (self.prediction.requests > 0 || self.prompt_compared > 0).then(|| {
            let mut p = self.prediction;
            if p.requests > 0 {
                p.mean_error_tokens = self.error_sum as f64 / p.requests as f64;
                p.mean_abs_error_tokens = self.abs_error_sum as f64 / p.requests as f64;
            }
            if self.prompt_compared > 0 {
                p.prompt_mean_abs_error_tokens =
                    self.prompt_abs_error_sum as f64 / self.prompt_compared as f64;
            }
            p
        });
        RunReport {
            url: facts.url,
            workload: facts.workload,
            arrivals: facts.arrivals,
            rate: facts.rate,
            duration_s: secs,
            wall_s: wall,
            warmup_s: facts.warmup.as_secs_f64(),
            seed: facts.seed,
            max_tokens: facts.max_tokens,
            sent: self.sent,
            completed: self.completed,
            errors: self.errors,
            turns_skipped: facts.turns_skipped,
            throughput: Throughput {
                requests_per_s: per_s(self.completed),
                output_tokens_per_s: per_s(self.usage.completion_tokens),
            },
            goodput: Goodput {
                slo_ttft_ms: self.slo.ttft.as_secs_f64() * 1e3,
                slo_tpot_ms: self.slo.tpot.as_secs_f64() * 1e3,
                requests: self.good,
                requests_per_s: per_s(self.good),
                fraction: if self.sent > 0 {
                    self.good as f64 / self.sent as f64
                } else {
                    0.0
                },
            },
            ttft_us: Dist::of(&self.ttft),
            tpot_us: Dist::of(&self.tpot),
            itl_us: Dist::of(&self.itl),
            e2e_us: Dist::of(&self.e2e),
            send_lag_us: Dist::of(&self.lag),
            samples: self.sorted_samples(),
            usage,
            replicas,
            prediction,
            warmup: self.warmup,
            connections_opened: facts.connections_opened,
            connection_waits: facts.connection_waits,
            peak_in_flight: facts.peak_in_flight,
            driver: facts.driver,
            error_samples: facts.error_samples,
        }
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: &Dist| {
            format!(
                "p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}  (n {})",
                d.p50 as f64 / 1e3,
                d.p90 as f64 / 1e3,
                d.p99 as f64 / 1e3,
                d.p999 as f64 / 1e3,
                d.max as f64 / 1e3,
                d.mean / 1e3,
                d.count
            )
        };
        let e = &self.errors;
        writeln!(f, "target       {}  (driver {})", self.url, self.driver)?;
        writeln!(
            f,
            "workload     {}  {} req/s {} for {:.1}s (+{:.1}s warmup; measured wall {:.2}s), \
             seed {}, max_tokens {}",
            self.workload,
            self.rate,
            self.arrivals,
            self.duration_s,
            self.warmup_s,
            self.wall_s,
            self.seed,
            self.max_tokens
        )?;
        writeln!(
            f,
            "requests     sent {}  completed {}  turns skipped {}  warmup {} ({} completed)",
            self.sent, self.completed, self.turns_skipped, self.warmup.sent, self.warmup.completed
        )?;
        writeln!(
            f,
            "errors       {} (connect {}, timeout {}, status {}, protocol {}, incomplete {})",
            e.total, e.connect, e.timeout, e.status, e.protocol, e.incomplete
        )?;
        writeln!(
            f,
            "throughput   {:.2} req/s  {:.1} output tokens/s",
            self.throughput.requests_per_s, self.throughput.output_tokens_per_s
        )?;
        let g = &self.goodput;
        writeln!(
            f,
            "goodput      {:.2} req/s ({} requests, {:.1} %) within TTFT <= {} ms, TPOT <= {} ms",
            g.requests_per_s,
            g.requests,
            100.0 * g.fraction,
            g.slo_ttft_ms,
            g.slo_tpot_ms
        )?;
        writeln!(f, "ttft ms      {}", ms(&self.ttft_us))?;
        writeln!(f, "tpot ms      {}", ms(&self.tpot_us))?;
        writeln!(f, "itl ms       {}", ms(&self.itl_us))?;
        writeln!(f, "e2e ms       {}", ms(&self.e2e_us))?;
        writeln!(f, "send lag ms  {}", ms(&self.send_lag_us))?;
        let u = &self.usage;
        writeln!(
            f,
            "usage        prompt {}  completion {}  cached {}  prefix hit rate {:.1} %",
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            100.0 * u.prefix_hit_rate
        )?;
        let r = &self.replicas;
        let per: Vec<String> = r.requests.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(
            f,
            "replicas     {}  unknown {}  busiest share {:.1} %",
            if per.is_empty() {
                "-".to_string()
            } else {
                per.join(", ")
            },
            r.unknown,
            100.0 * r.busiest_share
        )?;
        if let Some(p) = &self.prediction {
            write!(
                f,
                "\nprediction   {} compared: exact {}  over {}  under {}  mean error {:.1} tokens \
                 (|.| {:.1}; prompt |.| {:.1})",
                p.requests,
                p.exact,
                p.over,
                p.under,
                p.mean_error_tokens,
                p.mean_abs_error_tokens,
                p.prompt_mean_abs_error_tokens
            )?;
        }
        write!(
            f,
            "\nconnections  opened {}  waits {}  peak in flight {}",
            self.connections_opened, self.connection_waits, self.peak_in_flight
        )?;
        for s in &self.error_samples {
            write!(f, "\nerror        {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::observe::TokenUsage;
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn sample(ttft: u64, e2e: u64, tokens: u64) -> Sample {
        Sample {
            measured: true,
            failure: None,
            send_lag: Some(ms(1)),
            ttft: Some(ms(ttft)),
            e2e: ms(e2e),
            itl: vec![ms(20); tokens.saturating_sub(1) as usize],
            usage: Some(TokenUsage {
                prompt_tokens: 100,
                completion_tokens: tokens,
                cached_tokens: Some(40),
            }),
            replica: Some("engine-0".into()),
            predicted_prompt: None,
            predicted_cached: None,
        }
    }

    #[test]
    fn goodput_against_slo() {
        let slo = Slo {
            ttft: ms(200),
            tpot: ms(30),
        };
        assert!(Recorder::meets(&slo, &sample(100, 400, 11)), "tpot 30 ms");
        assert!(!Recorder::meets(&slo, &sample(100, 410, 11)), "tpot 31 ms");
        assert!(
            !Recorder::meets(&slo, &sample(201, 300, 2)),
            "ttft too long"
        );
        assert!(
            Recorder::meets(&slo, &sample(200, 9000, 1)),
            "one token: ttft only"
        );
        let mut failed = sample(10, 20, 2);
        failed.failure = Some(Failure::Timeout);
        assert!(!Recorder::meets(&slo, &failed));
        let mut no_ttft = sample(10, 20, 2);
        no_ttft.ttft = None;
        assert!(!Recorder::meets(&slo, &no_ttft));

        let mut r = Recorder::new(slo).unwrap();
        for s in [
            sample(100, 400, 11),
            sample(100, 410, 11),
            failed,
            sample(300, 400, 2),
        ] {
            r.record(&s);
        }
        let mut warm = sample(1, 2, 2);
        warm.measured = false;
        r.record(&warm);
        let rep = r.report(RunFacts {
            duration: Duration::from_secs(2),
            ..RunFacts::default()
        });
        assert_eq!((rep.sent, rep.completed, rep.errors.timeout), (4, 3, 1));
        assert_eq!(rep.goodput.requests, 1);
        assert_eq!(rep.goodput.requests_per_s, 0.5);
        assert_eq!(rep.goodput.fraction, 0.25);
        assert_eq!(rep.throughput.requests_per_s, 1.5);
        assert_eq!(rep.throughput.output_tokens_per_s, 12.0);
        assert_eq!(
            rep.warmup,
            WarmupCounts {
                sent: 1,
                completed: 1
            }
        );
        assert_eq!(rep.ttft_us.count, 3, "warmup and failures excluded");
        assert_eq!(
            rep.samples.ttft_us,
            [100_000, 100_000, 300_000],
            "one sample per completed request, sorted, µs"
        );
        // TPOT (e2e − ttft) / (tokens − 1): 30 ms, 31 ms, 100 ms.
        assert_eq!(rep.samples.tpot_us, [30_000, 31_000, 100_000]);
        assert_eq!(rep.itl_us.count, 21);
    }

    #[test]
    fn prediction_accuracy() {
        assert_eq!(classify(5, 5), Accuracy::Exact);
        assert_eq!(classify(6, 5), Accuracy::Over);
        assert_eq!(classify(0, 5), Accuracy::Under);
        let mut r = Recorder::new(Slo::default()).unwrap();
        for (p, prompt) in [(40, 100), (50, 103), (16, 100), (40, 100)] {
            let mut s = sample(10, 100, 4);
            s.predicted_cached = Some(p);
            s.predicted_prompt = Some(prompt);
            r.record(&s);
        }
        r.record(&sample(10, 100, 4)); // no header: not compared
        let rep = r.report(RunFacts::default());
        let p = rep.prediction.unwrap();
        assert_eq!((p.requests, p.exact, p.over, p.under), (4, 2, 1, 1));
        // Errors: 0, +10, -24, 0.
        assert_eq!(p.mean_error_tokens, -3.5);
        assert_eq!(p.mean_abs_error_tokens, 8.5);
        assert_eq!(p.prompt_mean_abs_error_tokens, 0.75);
        assert_eq!(rep.usage.prefix_hit_rate, 0.4);
        let none = Recorder::new(Slo::default()).unwrap();
        assert!(none.report(RunFacts::default()).prediction.is_none());
    }

    #[test]
    fn replicas_and_json_shape() {
        let mut r = Recorder::new(Slo::default()).unwrap();
        for name in ["a", "b", "b", "b"] {
            let mut s = sample(10, 100, 2);
            s.replica = Some(name.into());
            r.record(&s);
        }
        let mut s = sample(10, 100, 2);
        s.replica = None;
        r.record(&s);
        let rep = r.report(RunFacts {
            workload: "w1",
            arrivals: "poisson".into(),
            duration: Duration::from_secs(1),
            driver: "epoll",
            ..RunFacts::default()
        });
        assert_eq!(rep.replicas.busiest.as_deref(), Some("b"));
        assert_eq!(rep.replicas.busiest_share, 0.75);
        assert_eq!(rep.replicas.unknown, 1);
        let v = serde_json::to_value(&rep).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = vec![
            "url",
            "workload",
            "arrivals",
            "rate",
            "duration_s",
            "wall_s",
            "warmup_s",
            "seed",
            "max_tokens",
            "sent",
            "completed",
            "errors",
            "turns_skipped",
            "throughput",
            "goodput",
            "ttft_us",
            "tpot_us",
            "itl_us",
            "e2e_us",
            "send_lag_us",
            "samples",
            "usage",
            "replicas",
            "prediction",
            "warmup",
            "connections_opened",
            "connection_waits",
            "peak_in_flight",
            "driver",
            "error_samples",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        for d in ["ttft_us", "tpot_us", "itl_us", "e2e_us", "send_lag_us"] {
            let mut dk: Vec<&str> = v[d]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            dk.sort_unstable();
            assert_eq!(
                dk,
                ["count", "max", "mean", "p50", "p90", "p99", "p999"],
                "{d}"
            );
        }
        assert_eq!(v["replicas"]["requests"]["b"], 3);
        assert_eq!(v["errors"]["total"], 0);
        assert!(v["prediction"].is_null());
        assert_eq!(v["goodput"]["slo_ttft_ms"], 2000.0);
        assert_eq!(v["goodput"]["slo_tpot_ms"], 100.0);
        assert!(v["usage"]["prefix_hit_rate"].is_number());
        let text = rep.to_string();
        assert!(text.contains("replicas     a 1, b 3"), "{text}");
    }
}
