//! Whether one probe met the SLO, from its run report (the `run` result JSON): pure.
//!
//! A probe **meets** when all of these hold:
//! - it completed at least one request;
//! - no measured request errored (`errors.total == 0`);
//! - the achieved rate (`completed / wall_s`) is at least [`ACHIEVED_SHARE`] of the offered
//!   rate (`sent / duration_s`: the measured requests the schedule sent over the measured
//!   window, so Poisson noise in the arrival count does not count against the front, and later
//!   turns of conversations count on both sides), so an overloaded open-loop run cannot pass
//!   because it finished few requests;
//! - p99 TTFT <= the TTFT bound and p99 TPOT <= the TPOT bound (no TPOT sample: no TPOT
//!   bound), each the exact nearest-rank p99 of the run's samples (the histogram's p99 for a
//!   report without samples), divided by the time scale so bounds are in model seconds.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::report_md::bootstrap::quantile;

/// The share of the offered rate a probe must achieve.
pub const ACHIEVED_SHARE: f64 = 0.95;

/// The bounds a probe is held to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeSlo {
    /// Largest p99 TTFT, model time.
    pub ttft: Duration,
    /// Largest p99 TPOT, model time.
    pub tpot: Duration,
    /// The simulators' `--time-scale`: measured latencies are divided by it (1: real time).
    pub time_scale: f64,
}

impl Default for KneeSlo {
    /// p99 TTFT at most 2 s, p99 TPOT at most 100 ms, real time.
    fn default() -> KneeSlo {
        KneeSlo {
            ttft: Duration::from_secs(2),
            tpot: Duration::from_millis(100),
            time_scale: 1.0,
        }
    }
}

/// A report that lacks a field the judgement needs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("run report has no {0}")]
pub struct JudgeError(pub &'static str);

/// One probe's figures and verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// All the rules held.
    pub met: bool,
    /// Measured requests sent.
    pub sent: u64,
    /// Of those, completed.
    pub completed: u64,
    /// Of those, errored.
    pub errors: u64,
    /// `sent / duration_s`.
    pub offered_rps: f64,
    /// `completed / wall_s`.
    pub achieved_rps: f64,
    /// p99 TTFT, model seconds (`None`: nothing completed).
    pub p99_ttft_s: Option<f64>,
    /// p99 TPOT, model seconds (`None`: no request had two tokens).
    pub p99_tpot_s: Option<f64>,
    /// The rules that failed, one phrase each (empty when met).
    pub failed: Vec<String>,
}

/// Judges a run report against the SLO.
pub fn judge(report: &Value, slo: &KneeSlo) -> Result<Judgement, JudgeError> {
    let count = |key: &'static str, v: &Value| v.as_u64().ok_or(JudgeError(key));
    let float = |key: &'static str, v: &Value| v.as_f64().ok_or(JudgeError(key));
    let sent = count("sent", &report["sent"])?;
    let completed = count("completed", &report["completed"])?;
    let errors = count("errors.total", &report["errors"]["total"])?;
    let duration = float("duration_s", &report["duration_s"])?;
    let wall = float("wall_s", &report["wall_s"])?;
    let scale = slo.time_scale;
    let p99 = |key: &'static str| -> Option<f64> {
        let exact = report["samples"][key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<u64>>())
            .and_then(|s| quantile(&s, 0.99));
        let from_hist = || {
            (report[key]["count"].as_u64().unwrap_or(0) > 0)
                .then(|| report[key]["p99"].as_u64())
                .flatten()
        };
        exact.or_else(from_hist).map(|us| us as f64 / 1e6 / scale)
    };
    let p99_ttft_s = p99("ttft_us");
    let p99_tpot_s = p99("tpot_us");
    let offered_rps = if duration > 0.0 {
        sent as f64 / duration
    } else {
        0.0
    };
    let achieved_rps = if wall > 0.0 {
        completed as f64 / wall
    } else {
        0.0
    };
    let mut failed = Vec::new();
    if completed == 0 {
        failed.push("nothing completed".to_string());
    }
    if errors > 0 {
        failed.push(format!("{errors} errored"));
    }
    if achieved_rps < ACHIEVED_SHARE * offered_rps {
        failed.push(format!(
            "achieved {achieved_rps:.3} req/s < 95 % of offered {offered_rps:.3}"
        ));
    }
    if let Some(t) = p99_ttft_s.filter(|t| *t > slo.ttft.as_secs_f64()) {
        failed.push(format!("p99 TTFT {t:.3} s > {} s", slo.ttft.as_secs_f64()));
    }
    if let Some(t) = p99_tpot_s.filter(|t| *t > slo.tpot.as_secs_f64()) {
        failed.push(format!(
            "p99 TPOT {:.1} ms > {} ms",
            t * 1e3,
            slo.tpot.as_secs_f64() * 1e3
        ));
    }
    Ok(Judgement {
        met: failed.is_empty(),
        sent,
        completed,
        errors,
        offered_rps,
        achieved_rps,
        p99_ttft_s,
        p99_tpot_s,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A report of `n` requests over 10 s, all completed, TTFT `ttft_ms` and TPOT `tpot_ms`
    /// apart from one slow outlier per hundred.
    fn report(n: u64, ttft_ms: u64, tpot_ms: u64) -> Value {
        let ttft: Vec<u64> = (0..n).map(|i| (ttft_ms + i % 100 / 99) * 1000).collect();
        let mut sorted = ttft.clone();
        sorted.sort_unstable();
        json!({
            "sent": n, "completed": n, "errors": {"total": 0},
            "duration_s": 10.0, "wall_s": 10.0,
            "ttft_us": {"count": n, "p99": ttft_ms * 1000},
            "tpot_us": {"count": n, "p99": tpot_ms * 1000},
            "samples": {"ttft_us": sorted, "tpot_us": vec![tpot_ms * 1000; n as usize]},
        })
    }

    #[test]
    fn within_bounds_meets() {
        let j = judge(&report(200, 500, 20), &KneeSlo::default()).unwrap();
        assert!(j.met, "{j:?}");
        assert_eq!((j.sent, j.completed, j.errors), (200, 200, 0));
        assert_eq!(j.offered_rps, 20.0);
        assert_eq!(j.p99_ttft_s, Some(0.5));
        assert_eq!(j.p99_tpot_s, Some(0.02));
    }

    #[test]
    fn each_rule_can_fail_alone() {
        let slo = KneeSlo::default();
        let j = judge(&report(200, 2500, 20), &slo).unwrap();
        assert!(!j.met && j.failed[0].contains("TTFT"), "{j:?}");
        let j = judge(&report(200, 100, 150), &slo).unwrap();
        assert!(!j.met && j.failed[0].contains("TPOT"), "{j:?}");
        let mut r = report(200, 100, 20);
        r["errors"]["total"] = json!(1);
        assert!(!judge(&r, &slo).unwrap().met);
        // Overloaded: all 200 completed, but over 30 s for a 10 s window.
        let mut r = report(200, 100, 20);
        r["wall_s"] = json!(30.0);
        let j = judge(&r, &slo).unwrap();
        assert!(!j.met && j.failed[0].contains("achieved"), "{j:?}");
        let mut r = report(0, 100, 20);
        r["sent"] = json!(10);
        assert!(!judge(&r, &slo).unwrap().met);
    }

    #[test]
    fn the_time_scale_divides_the_latencies() {
        // 150 ms measured at a time scale of 0.05 is 3 model seconds: above 2 s.
        let slo = KneeSlo {
            time_scale: 0.05,
            ..KneeSlo::default()
        };
        let j = judge(&report(100, 150, 1), &slo).unwrap();
        let t = j.p99_ttft_s.unwrap();
        assert!((t - 3.0).abs() < 1e-9, "{t}");
        assert!(!j.met);
        assert!(
            judge(&report(100, 150, 1), &KneeSlo::default())
                .unwrap()
                .met
        );
    }

    #[test]
    fn the_p99_is_exact_from_samples_and_falls_back_to_the_histogram() {
        // 100 samples: nearest rank 99 is the 99th smallest, the outlier is the 100th.
        let j = judge(&report(100, 300, 1), &KneeSlo::default()).unwrap();
        assert_eq!(j.p99_ttft_s, Some(0.3));
        let mut r = report(100, 300, 1);
        r["samples"] = Value::Null;
        r["ttft_us"]["p99"] = json!(400_000);
        assert_eq!(
            judge(&r, &KneeSlo::default()).unwrap().p99_ttft_s,
            Some(0.4)
        );
        let mut r = report(100, 300, 1);
        r["wall_s"] = Value::Null;
        assert_eq!(judge(&r, &KneeSlo::default()), Err(JudgeError("wall_s")));
    }
}
