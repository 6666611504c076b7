//! The targets of issue 7, judged on the aggregated table: each PASS, FAIL or N/A with the
//! numbers. A "point" is one workload at one rate; the *median rate point* of a comparison is
//! the middle of the rates at which every policy compared has results (the lower middle for an
//! even count).

use std::fmt;

use super::aggregate::{rate_of, RateKey, Table};
use super::num::{pct, rate, secs};

/// The workload with shared prefixes the cache-aware targets are judged on.
pub const W1: &str = "w1";
/// The control workload (nothing shared).
pub const W6: &str = "w6";
/// The cache-aware policy under test.
pub const CACHE_AWARE: &str = "cost_model";
/// The p99 TTFT baseline.
pub const ROUND_ROBIN: &str = "round_robin";
/// The goodput baseline.
pub const LEAST_REQUEST: &str = "least_request";
/// Policies that ignore the caches: the W6 comparison is against the best of them.
pub const CACHE_BLIND: [&str; 4] = ["round_robin", "random", "least_request", "p2c"];
/// Policies named with this prefix are peers (other routers), compared side by side.
pub const PEER_PREFIX: &str = "peer:";
/// How far `cost_model` may trail a peer (p99 TTFT above, goodput below, relative) and still
/// count as no worse: repetitions of one point differ by about this much.
pub const PEER_TOLERANCE: f64 = 0.05;

/// W1 p99 TTFT must be at least this fraction below round_robin's.
pub const TTFT_REDUCTION: f64 = 0.40;
/// W1 engine hit rate of the cache-aware policy, at least.
pub const HIT_RATE: f64 = 0.80;
/// Goodput at least this fraction above least_request's.
pub const GOODPUT_GAIN: f64 = 0.30;
/// W6 p99 TTFT at most this fraction above the best cache-blind policy's.
pub const W6_TOLERANCE: f64 = 0.10;

/// How a target came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Met.
    Pass,
    /// Missed.
    Fail,
    /// The results needed are not there.
    NotApplicable,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::NotApplicable => "N/A",
        })
    }
}

/// One target judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The target, in words.
    pub target: String,
    /// PASS, FAIL or N/A.
    pub outcome: Outcome,
    /// The numbers behind it.
    pub detail: String,
}

fn verdict(target: impl Into<String>, outcome: Outcome, detail: impl Into<String>) -> Verdict {
    Verdict {
        target: target.into(),
        outcome,
        detail: detail.into(),
    }
}

fn pass_if(ok: bool) -> Outcome {
    if ok {
        Outcome::Pass
    } else {
        Outcome::Fail
    }
}

/// The median rate of `workload` among rates where every one of `policies` has results.
pub fn median_rate(t: &Table, workload: &str, policies: &[&str]) -> Option<RateKey> {
    let rates: Vec<RateKey> = t
        .rates(workload)
        .into_iter()
        .filter(|&r| policies.iter().all(|p| t.get(workload, r, p).is_some()))
        .collect();
    rates.get(rates.len().checked_sub(1)? / 2).copied()
}

fn missing(workload: &str, policies: &[&str]) -> String {
    format!(
        "no {workload} rate with results for all of: {}",
        policies.join(", ")
    )
}

/// Every target, in a fixed order: W1 p99 TTFT, W1 engine hit rate, W1 goodput, W6 regression,
/// then one per peer.
pub fn verdicts(t: &Table) -> Vec<Verdict> {
    let mut out = vec![w1_ttft(t), w1_hit_rate(t), w1_goodput(t), w6_regression(t)];
    out.extend(peers(t));
    out
}

fn w1_ttft(t: &Table) -> Verdict {
    let target = format!(
        "W1 p99 TTFT at least {} below {ROUND_ROBIN} ({CACHE_AWARE}, median rate)",
        pct(TTFT_REDUCTION)
    );
    let pols = [CACHE_AWARE, ROUND_ROBIN];
    let Some((r, cm, rr)) = median_rate(t, W1, &pols).and_then(|r| {
        Some((
            r,
            t.get(W1, r, CACHE_AWARE)?.ttft_p99_s.median,
            t.get(W1, r, ROUND_ROBIN)?.ttft_p99_s.median,
        ))
    }) else {
        return verdict(target, Outcome::NotApplicable, missing(W1, &pols));
    };
    if rr <= 0.0 {
        return verdict(
            target,
            Outcome::NotApplicable,
            format!("{ROUND_ROBIN} p99 TTFT is 0 at {} req/s", rate(rate_of(r))),
        );
    }
    let below = 1.0 - cm / rr;
    verdict(
        target,
        pass_if(below >= TTFT_REDUCTION),
        format!(
            "at {} req/s: {CACHE_AWARE} {} vs {ROUND_ROBIN} {}: {} below",
            rate(rate_of(r)),
            secs(cm),
            secs(rr),
            pct(below)
        ),
    )
}

fn w1_hit_rate(t: &Table) -> Verdict {
    let target = format!(
        "W1 engine prefix-cache hit rate at least {} ({CACHE_AWARE}, median rate)",
        pct(HIT_RATE)
    );
    let Some(r) = median_rate(t, W1, &[CACHE_AWARE]) else {
        return verdict(target, Outcome::NotApplicable, missing(W1, &[CACHE_AWARE]));
    };
    match t.get(W1, r, CACHE_AWARE).and_then(|p| p.engine_hit_rate) {
        None => verdict(
            target,
            Outcome::NotApplicable,
            format!("no engine counters at {} req/s", rate(rate_of(r))),
        ),
        Some(h) => verdict(
            target,
            pass_if(h.median >= HIT_RATE),
            format!("at {} req/s: {}", rate(rate_of(r)), pct(h.median)),
        ),
    }
}

fn w1_goodput(t: &Table) -> Verdict {
    let target = format!(
        "W1 goodput at least {} above {LEAST_REQUEST} ({CACHE_AWARE}, median rate)",
        pct(GOODPUT_GAIN)
    );
    let pols = [CACHE_AWARE, LEAST_REQUEST];
    let Some((r, cm, lr)) = median_rate(t, W1, &pols).and_then(|r| {
        Some((
            r,
            t.get(W1, r, CACHE_AWARE)?.goodput.median,
            t.get(W1, r, LEAST_REQUEST)?.goodput.median,
        ))
    }) else {
        return verdict(target, Outcome::NotApplicable, missing(W1, &pols));
    };
    let head = format!(
        "at {} req/s: {CACHE_AWARE} {:.2} req/s vs {LEAST_REQUEST} {:.2} req/s",
        rate(rate_of(r)),
        cm,
        lr
    );
    if lr <= 0.0 {
        return verdict(target, pass_if(cm > 0.0), format!("{head} (baseline 0)"));
    }
    let gain = cm / lr - 1.0;
    verdict(
        target,
        pass_if(gain >= GOODPUT_GAIN),
        format!(
            "{head}: {}{}",
            if gain >= 0.0 { "+" } else { "" },
            pct(gain)
        ),
    )
}

fn w6_regression(t: &Table) -> Verdict {
    let target = format!(
        "W6 no regression: {CACHE_AWARE} p99 TTFT within +{} of the best cache-blind policy \
         (every rate)",
        pct(W6_TOLERANCE)
    );
    let mut parts = Vec::new();
    let mut ok = true;
    for r in t.rates(W6) {
        let Some(cm) = t.get(W6, r, CACHE_AWARE).map(|p| p.ttft_p99_s.median) else {
            continue;
        };
        let best = CACHE_BLIND
            .iter()
            .filter_map(|p| t.get(W6, r, p).map(|pt| (pt.ttft_p99_s.median, *p)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((best, name)) = best else { continue };
        let within = if best > 0.0 {
            cm <= best * (1.0 + W6_TOLERANCE)
        } else {
            cm <= 0.0
        };
        ok &= within;
        let excess = if best > 0.0 {
            let e = cm / best - 1.0;
            format!("{}{}", if e >= 0.0 { "+" } else { "" }, pct(e))
        } else {
            "baseline 0".to_string()
        };
        parts.push(format!(
            "{} req/s: {} vs {name} {} ({excess})",
            rate(rate_of(r)),
            secs(cm),
            secs(best)
        ));
    }
    if parts.is_empty() {
        let pols = [CACHE_AWARE, "a cache-blind policy"];
        return verdict(target, Outcome::NotApplicable, missing(W6, &pols));
    }
    verdict(target, pass_if(ok), parts.join("; "))
}

fn peers(t: &Table) -> Vec<Verdict> {
    let mut names: Vec<String> = t
        .workloads
        .keys()
        .flat_map(|w| t.policies(w))
        .filter(|p| p.starts_with(PEER_PREFIX))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        return vec![verdict(
            "Peers",
            Outcome::NotApplicable,
            format!("no `{PEER_PREFIX}` policy in the results"),
        )];
    }
    names
        .iter()
        .map(|peer| {
            let target = format!(
                "W1 against {peer}: {CACHE_AWARE} no worse (p99 TTFT at most {pct}% above, \
                 goodput at most {pct}% below; median rate)",
                pct = (PEER_TOLERANCE * 100.0).round()
            );
            let pols = [CACHE_AWARE, peer.as_str()];
            let Some((r, cm, pe)) = median_rate(t, W1, &pols)
                .and_then(|r| Some((r, t.get(W1, r, CACHE_AWARE)?, t.get(W1, r, peer)?)))
            else {
                return verdict(target, Outcome::NotApplicable, missing(W1, &pols));
            };
            // Repetitions of the same point differ by a few percent: a tie is not a loss.
            let ok = cm.ttft_p99_s.median <= pe.ttft_p99_s.median * (1.0 + PEER_TOLERANCE)
                && cm.goodput.median >= pe.goodput.median * (1.0 - PEER_TOLERANCE);
            verdict(
                target,
                pass_if(ok),
                format!(
                    "at {} req/s: p99 TTFT {:.3} s vs {:.3} s; goodput {:.2} vs {:.2} req/s",
                    rate(rate_of(r)),
                    cm.ttft_p99_s.median,
                    pe.ttft_p99_s.median,
                    cm.goodput.median,
                    pe.goodput.median
                ),
            )
        })
        .collect()
}
