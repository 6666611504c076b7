//! What a run measured: the recorder that requests report into, and the final [`Report`]
//! (human summary and JSON).

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest value the histograms hold exactly, in µs (one hour); larger values are clamped.
const HIST_MAX_US: u64 = 3_600_000_000;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A complete 2xx response.
    Ok,
    /// A complete response with another status.
    Status(u16),
    /// No connection could be opened.
    Connect,
    /// The per-request timeout expired first.
    Timeout,
    /// The exchange broke: malformed response, or the connection reset or closed mid-exchange.
    Protocol,
}

/// Requests that ended without a 2xx response, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Errors {
    /// No connection could be opened.
    pub connect: u64,
    /// The per-request timeout expired.
    pub timeout: u64,
    /// A complete response with a non-2xx status.
    pub status: u64,
    /// Malformed response, or the connection failed mid-exchange.
    pub protocol: u64,
}

impl Errors {
    /// All errors together.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.status + self.protocol
    }
}

/// Latency percentiles in µs, counted from each request's scheduled time to its last byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
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

/// Send lag in µs: scheduled time to the moment the request was written to a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SendLag {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// The warmup phase: sent, not part of the figures above (kept to attribute CPU time per request).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Warmup {
    /// Requests scheduled during warmup.
    pub sent: u64,
    /// Of those, complete 2xx responses.
    pub completed: u64,
    /// Of those, errors of any kind.
    pub errors: u64,
}

/// The `usage` of one OpenAI-style JSON response, as far as the report sums it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens`, when the server reports it.
    pub cached_tokens: Option<u64>,
}

/// Reads `usage` from a response body; `None` when the body is not a JSON object with a `usage`
/// object holding `prompt_tokens` (streamed bodies, error bodies, other APIs).
pub fn parse_usage(body: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Body {
        usage: Option<UsageJson>,
    }
    #[derive(Deserialize)]
    struct UsageJson {
        prompt_tokens: u64,
        prompt_tokens_details: Option<Details>,
    }
    #[derive(Deserialize)]
    struct Details {
        cached_tokens: Option<u64>,
    }
    if body.first() != Some(&b'{') {
        return None;
    }
    let usage = serde_json::from_slice::<Body>(body).ok()?.usage?;
    Some(Usage {
        prompt_tokens: usage.prompt_tokens,
        cached_tokens: usage.prompt_tokens_details.and_then(|d| d.cached_tokens),
    })
}

/// `usage` summed over the measured 2xx responses that carried one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageSums {
    /// Responses with a `usage.prompt_tokens`.
    pub responses: u64,
    /// Sum of their `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// Of those responses, the ones that also had `usage.prompt_tokens_details.cached_tokens`.
    pub cached_reported: u64,
    /// Sum of `usage.prompt_tokens_details.cached_tokens` (absent counts as 0).
    pub cached_tokens: u64,
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Target URL.
    pub url: String,
    /// Scheduled requests per second.
    pub rate: f64,
    /// Measured time in seconds (warmup excluded).
    pub duration_s: f64,
    /// Warmup time in seconds.
    pub warmup_s: f64,
    /// Arrival process (`poisson` or `uniform`).
    pub arrivals: &'static str,
    /// Schedule seed.
    pub seed: u64,
    /// Requests scheduled in the measured window (each one is attempted).
    pub sent: u64,
    /// Complete 2xx responses among them.
    pub completed: u64,
    /// The others, by kind.
    pub errors: Errors,
    /// Completed requests per second of measured time.
    pub achieved_rate: f64,
    /// Latency of completed requests.
    pub latency_us: Latency,
    /// How late requests were written, for every measured request that got written.
    pub send_lag_us: SendLag,
    /// Connections opened, the initial pool included.
    pub connections_opened: u64,
    /// Times a request waited because `--max-connections` were all busy.
    pub connection_waits: u64,
    /// Idle connections closed instead of reused for having idled past `--max-idle`.
    pub connections_expired: u64,
    /// Most requests in flight at once.
    pub peak_in_flight: u64,
    /// The warmup phase.
    pub warmup: Warmup,
    /// The monoio driver that ran the generator (`io_uring` or `epoll`).
    pub driver: &'static str,
    /// `usage` of the measured responses, when any response carried one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageSums>,
    /// The first few broken exchanges' causes (protocol errors), for diagnosis.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_samples: Vec<String>,
}

/// Collects outcomes during a run.
#[derive(Debug)]
pub struct Recorder {
    /// Latency of measured 2xx responses, µs.
    latency: Histogram<u64>,
    /// Send lag of measured requests, µs.
    lag: Histogram<u64>,
    /// Measured requests scheduled.
    sent: u64,
    /// Measured 2xx responses.
    completed: u64,
    /// Measured errors.
    errors: Errors,
    /// Warmup counters.
    warmup: Warmup,
    /// `usage` of measured responses.
    usage: UsageSums,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Recorder {
    /// An empty recorder. Histograms keep three significant digits: exact to 1 µs below 2 ms.
    pub fn new() -> Result<Recorder, hdrhistogram::CreationError> {
        Ok(Recorder {
            latency: Histogram::new_with_bounds(1, HIST_MAX_US, 3)?,
            lag: Histogram::new_with_bounds(1, HIST_MAX_US, 3)?,
            sent: 0,
            completed: 0,
            errors: Errors::default(),
            warmup: Warmup::default(),
            usage: UsageSums::default(),
        })
    }

    /// A request was scheduled and is being attempted.
    pub fn sent(&mut self, measured: bool) {
        if measured {
            self.sent += 1;
        } else {
            self.warmup.sent += 1;
        }
    }

    /// A request was written to a connection `lag` after its scheduled time.
    pub fn send_lag(&mut self, measured: bool, lag: Duration) {
        if measured {
            self.lag.saturating_record(micros(lag));
        }
    }

    /// A 2xx response's `usage`, if it had one (warmup responses are not counted).
    pub fn usage(&mut self, measured: bool, usage: Option<Usage>) {
        let (true, Some(u)) = (measured, usage) else {
            return;
        };
        let s = &mut self.usage;
        s.responses += 1;
        s.prompt_tokens += u.prompt_tokens;
        if let Some(c) = u.cached_tokens {
            s.cached_reported += 1;
            s.cached_tokens += c;
        }
    }

    /// A request ended `latency` after its scheduled time.
    pub fn finished(&mut self, measured: bool, outcome: Outcome, latency: Duration) {
        if !measured {
            match outcome {
                Outcome::Ok => self.warmup.completed += 1,
                _ => self.warmup.errors += 1,
            }
            return;
        }
        match outcome {
            Outcome::Ok => {
                self.completed += 1;
                self.latency.saturating_record(micros(latency));
            }
            Outcome::Status(_) => self.errors.status += 1,
            Outcome::Connect => self.errors.connect += 1,
            Outcome::Timeout => self.errors.timeout += 1,
            Outcome::Protocol => self.errors.protocol += 1,
        }
    }

    /// Builds the report. `facts` carries what the recorder does not see itself.
    pub fn report(&self, facts: RunFacts) -> Report {
        let l = &self.latency;
        let empty = l.is_empty();
        let q = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        let duration_s = facts.duration.as_secs_f64();
        Report {
            url: facts.url,
            rate: facts.rate,
            duration_s,
            warmup_s: facts.warmup.as_secs_f64(),
            arrivals: facts.arrivals,
            seed: facts.seed,
            sent: self.sent,
            completed: self.completed,
            errors: self.errors,
            achieved_rate: if duration_s > 0.0 {
                self.completed as f64 / duration_s
            } else {
                0.0
            },
            latency_us: Latency {
                p50: q(l, 0.5),
                p90: q(l, 0.9),
                p99: q(l, 0.99),
                p999: q(l, 0.999),
                max: if empty { 0 } else { l.max() },
                mean: if empty { 0.0 } else { l.mean() },
            },
            send_lag_us: SendLag {
                p50: q(&self.lag, 0.5),
                p99: q(&self.lag, 0.99),
                max: if self.lag.is_empty() {
                    0
                } else {
                    self.lag.max()
                },
            },
            connections_opened: facts.connections_opened,
            connection_waits: facts.connection_waits,
            connections_expired: facts.connections_expired,
            peak_in_flight: facts.peak_in_flight,
            warmup: self.warmup,
            driver: facts.driver,
            usage: (self.usage.responses > 0).then_some(self.usage),
            error_samples: facts.error_samples,
        }
    }
}

/// Facts about a run that come from outside the recorder.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// Target URL.
    pub url: String,
    /// Scheduled rate.
    pub rate: f64,
    /// Measured duration.
    pub duration: Duration,
    /// Warmup duration.
    pub warmup: Duration,
    /// Arrival process name.
    pub arrivals: &'static str,
    /// Schedule seed.
    pub seed: u64,
    /// Connections opened.
    pub connections_opened: u64,
    /// Waits for a connection.
    pub connection_waits: u64,
    /// Idle connections closed for idling too long.
    pub connections_expired: u64,
    /// Most requests in flight at once.
    pub peak_in_flight: u64,
    /// monoio driver name.
    pub driver: &'static str,
    /// The first few protocol errors' causes.
    pub error_samples: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.latency_us;
        let g = &self.send_lag_us;
        let e = &self.errors;
        writeln!(f, "target      {}", self.url)?;
        writeln!(
            f,
            "schedule    {} req/s {} for {:.1}s (+{:.1}s warmup), seed {}, driver {}",
            self.rate, self.arrivals, self.duration_s, self.warmup_s, self.seed, self.driver
        )?;
        writeln!(
            f,
            "requests    sent {}  completed {}  achieved {:.1} req/s",
            self.sent, self.completed, self.achieved_rate
        )?;
        writeln!(
            f,
            "errors      {} (connect {}, timeout {}, status {}, protocol {})",
            e.total(),
            e.connect,
            e.timeout,
            e.status,
            e.protocol
        )?;
        writeln!(
            f,
            "latency µs  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {:.1}",
            l.p50, l.p90, l.p99, l.p999, l.max, l.mean
        )?;
        writeln!(f, "send lag µs p50 {}  p99 {}  max {}", g.p50, g.p99, g.max)?;
        write!(
            f,
            "connections opened {}  expired {}  waits {}  peak in flight {}",
            self.connections_opened,
            self.connections_expired,
            self.connection_waits,
            self.peak_in_flight
        )?;
        if let Some(u) = &self.usage {
            let rate = if u.prompt_tokens > 0 {
                100.0 * u.cached_tokens as f64 / u.prompt_tokens as f64
            } else {
                0.0
            };
            write!(
                f,
                "\nusage       prompt tokens {}  cached {} ({rate:.1} %)  over {} responses \
                 ({} with cached_tokens)",
                u.prompt_tokens, u.cached_tokens, u.responses, u.cached_reported
            )?;
        }
        for sample in &self.error_samples {
            write!(f, "\nerror       {sample}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> RunFacts {
        RunFacts {
            url: "http://x/".into(),
            rate: 10.0,
            duration: Duration::from_secs(2),
            warmup: Duration::from_secs(1),
            arrivals: "uniform",
            seed: 1,
            connections_opened: 3,
            connection_waits: 0,
            connections_expired: 0,
            peak_in_flight: 2,
            driver: "epoll",
            error_samples: Vec::new(),
        }
    }

    #[test]
    fn counts_by_phase_and_kind() {
        let mut r = Recorder::new().unwrap();
        r.sent(false);
        r.finished(false, Outcome::Ok, Duration::from_micros(5));
        for us in [100, 200, 300] {
            r.sent(true);
            r.send_lag(true, Duration::from_micros(us / 10));
            r.finished(true, Outcome::Ok, Duration::from_micros(us));
        }
        r.sent(true);
        r.finished(true, Outcome::Status(503), Duration::from_micros(50));
        r.sent(true);
        r.finished(true, Outcome::Timeout, Duration::from_secs(5));
        let rep = r.report(facts());
        assert_eq!((rep.sent, rep.completed), (5, 3));
        assert_eq!(rep.errors.status, 1);
        assert_eq!(rep.errors.timeout, 1);
        assert_eq!(rep.errors.total(), 2);
        assert_eq!(rep.latency_us.p50, 200);
        assert_eq!(rep.latency_us.max, 300);
        assert_eq!(rep.send_lag_us.max, 30);
        assert_eq!(rep.achieved_rate, 1.5);
        assert_eq!(
            rep.warmup,
            Warmup {
                sent: 1,
                completed: 1,
                errors: 0
            }
        );
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json["latency_us"]["p999"], 300);
        assert_eq!(json["errors"]["status"], 1);
        assert!(rep.to_string().contains("p99.9 300"));
    }

    #[test]
    fn usage_is_read_and_summed() {
        let full = br#"{"id":"x","choices":[{"message":{"content":"{\"usage\":1}"}}],
            "usage":{"prompt_tokens":100,"completion_tokens":8,"total_tokens":108,
            "prompt_tokens_details":{"cached_tokens":64}}}"#;
        assert_eq!(
            parse_usage(full),
            Some(Usage {
                prompt_tokens: 100,
                cached_tokens: Some(64)
            })
        );
        let no_details = br#"{"usage":{"prompt_tokens":7,"prompt_tokens_details":null}}"#;
        assert_eq!(
            parse_usage(no_details),
            Some(Usage {
                prompt_tokens: 7,
                cached_tokens: None
            })
        );
        assert_eq!(parse_usage(br#"{"object":"chat.completion"}"#), None);
        assert_eq!(parse_usage(br#"{"usage":null}"#), None);
        assert_eq!(parse_usage(b"data: {\"usage\":{}}\n\n"), None);
        assert_eq!(parse_usage(b"{not json"), None);
        assert_eq!(parse_usage(b""), None);

        let mut r = Recorder::new().unwrap();
        r.usage(false, parse_usage(full)); // warmup: not counted
        r.usage(true, parse_usage(full));
        r.usage(true, parse_usage(full));
        r.usage(true, parse_usage(no_details));
        r.usage(true, None);
        let rep = r.report(facts());
        let u = rep.usage.unwrap();
        assert_eq!(
            u,
            UsageSums {
                responses: 3,
                prompt_tokens: 207,
                cached_reported: 2,
                cached_tokens: 128
            }
        );
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json["usage"]["prompt_tokens"], 207);
        assert_eq!(json["usage"]["cached_tokens"], 128);
        let text = rep.to_string();
        assert!(
            text.contains("usage       prompt tokens 207  cached 128 (61.8 %)  over 3 responses"),
            "{text}"
        );
    }

    #[test]
    fn empty_run_reports_zeros() {
        let rep = Recorder::new().unwrap().report(facts());
        assert_eq!(rep.latency_us, Latency::default());
        assert_eq!(rep.send_lag_us, SendLag::default());
        assert_eq!(rep.usage, None);
        let json = serde_json::to_value(&rep).unwrap();
        assert!(json.get("usage").is_none(), "no usage seen: no usage key");
        assert!(!rep.to_string().contains("usage"));
    }
}
