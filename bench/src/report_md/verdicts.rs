//! The targets of issue 7, judged on the aggregated table: each PASS, FAIL or N/A with the
//! numbers. A "point" is one workload at one rate; the *median rate point* of a comparison is
//! the middle of the rates at which every policy compared has results (the lower middle for an
//! even count).

use std::fmt;

use super::aggregate::{rate_of, PolicyPoint, RateKey, Table};
use super::bootstrap::{Interval, Separation};
use super::num::{fixed, pct, rate, secs};

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
/// The peer rule in words, as the report states it (no allowance: only separated intervals call
/// a p99 difference, and goodput has no interval, so any shortfall counts).
pub const PEER_RULE: &str = "cost_model is no worse than a peer when its W1 p99 TTFT is at or \
below the peer's, or above it with the two 95% bootstrap intervals overlapping (no difference \
called); it is worse when its interval lies wholly above the peer's. Where its p99 is above and \
either side has no interval (result files without per-request samples) the verdict is N/A. \
Goodput has no interval, so it must not be below the peer's at all. Both at the median rate.";

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
    names.iter().map(|peer| peer_verdict(t, peer)).collect()
}

/// How `cost_model`'s p99 TTFT compares with a peer's under [`PEER_RULE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P99Call {
    /// At or below the peer's: no worse.
    NotAbove,
    /// Above, but the two intervals overlap: no difference is called, no worse.
    Overlapping,
    /// Its interval lies wholly above the peer's: worse.
    Worse,
    /// Above, and one side has no interval: the rule cannot decide.
    Undecided,
}

impl P99Call {
    /// The call in words, for the verdict's numbers.
    pub fn words(self) -> &'static str {
        match self {
            P99Call::NotAbove => "not above",
            P99Call::Overlapping => "above, intervals overlap (no difference)",
            P99Call::Worse => "above, intervals separate (worse)",
            P99Call::Undecided => "above, no interval to judge by",
        }
    }
}

/// [`PEER_RULE`]'s p99 part: `cm` against `peer`, each a p99 with its interval (if any).
pub fn p99_call(cm: (f64, Option<Interval>), peer: (f64, Option<Interval>)) -> P99Call {
    if cm.0 <= peer.0 {
        return P99Call::NotAbove;
    }
    match (cm.1, peer.1) {
        (Some(c), Some(p)) if c.separation(p) == Separation::Above => P99Call::Worse,
        (Some(_), Some(_)) => P99Call::Overlapping,
        _ => P99Call::Undecided,
    }
}

/// [`PEER_RULE`] in full: the p99 call and goodput (`cm` not below `peer`) give the outcome.
pub fn peer_outcome(call: P99Call, cm_goodput: f64, peer_goodput: f64) -> Outcome {
    if cm_goodput < peer_goodput || call == P99Call::Worse {
        Outcome::Fail
    } else if call == P99Call::Undecided {
        Outcome::NotApplicable
    } else {
        Outcome::Pass
    }
}

/// `0.590 s [0.550–0.630]`, or `0.590 s [n/a]` without an interval.
fn with_ci(p99: f64, ci: Option<Interval>) -> String {
    let ci = ci.map_or_else(
        || "n/a".to_string(),
        |i| format!("{}–{}", fixed(i.lo, 3), fixed(i.hi, 3)),
    );
    format!("{} s [{ci}]", fixed(p99, 3))
}

fn peer_verdict(t: &Table, peer: &str) -> Verdict {
    let target = format!(
        "W1 against {peer}: {CACHE_AWARE} no worse (p99 TTFT not above the peer's unless 95% \
         intervals overlap; goodput not below; median rate)"
    );
    let pols = [CACHE_AWARE, peer];
    let Some((r, cm, pe)) = median_rate(t, W1, &pols)
        .and_then(|r| Some((r, t.get(W1, r, CACHE_AWARE)?, t.get(W1, r, peer)?)))
    else {
        return verdict(target, Outcome::NotApplicable, missing(W1, &pols));
    };
    let p99 = |p: &PolicyPoint| (p.ttft_p99_s.median, p.ttft_p99_ci_s);
    let call = p99_call(p99(cm), p99(pe));
    let (cg, pg) = (cm.goodput.median, pe.goodput.median);
    verdict(
        target,
        peer_outcome(call, cg, pg),
        format!(
            "at {} req/s: p99 TTFT {} vs {}: {}; goodput {cg:.2} vs {pg:.2} req/s: {}",
            rate(rate_of(r)),
            with_ci(cm.ttft_p99_s.median, cm.ttft_p99_ci_s),
            with_ci(pe.ttft_p99_s.median, pe.ttft_p99_ci_s),
            call.words(),
            if cg < pg { "below" } else { "not below" },
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ci(lo: f64, hi: f64) -> Option<Interval> {
        Some(Interval { lo, hi })
    }

    #[test]
    fn p99_rule_three_cases() {
        // Separated below: cost_model's interval wholly under the peer's.
        let below = p99_call((0.5, ci(0.45, 0.55)), (0.8, ci(0.75, 0.85)));
        assert_eq!(below, P99Call::NotAbove);
        assert_eq!(peer_outcome(below, 5.0, 5.0), Outcome::Pass);
        // Overlapping, cost_model's p99 above: no difference is called.
        let overlap = p99_call((0.82, ci(0.70, 0.90)), (0.80, ci(0.76, 0.84)));
        assert_eq!(overlap, P99Call::Overlapping);
        assert_eq!(peer_outcome(overlap, 5.0, 5.0), Outcome::Pass);
        // Separated above: worse, however small the gap between the intervals.
        let above = p99_call((0.9, ci(0.86, 0.95)), (0.8, ci(0.75, 0.85)));
        assert_eq!(above, P99Call::Worse);
        assert_eq!(peer_outcome(above, 9.0, 5.0), Outcome::Fail);
    }

    #[test]
    fn p99_rule_edges() {
        let touching = p99_call((0.9, ci(0.85, 0.95)), (0.8, ci(0.75, 0.85)));
        assert_eq!(touching, P99Call::Overlapping, "shared end: not separated");
        assert_eq!(
            p99_call((0.8, None), (0.8, None)),
            P99Call::NotAbove,
            "equal"
        );
        assert_eq!(
            p99_call((0.7, None), (0.8, ci(0.7, 0.9))),
            P99Call::NotAbove
        );
        let blind = p99_call((0.81, None), (0.8, ci(0.7, 0.9)));
        assert_eq!(blind, P99Call::Undecided, "above without an interval");
        assert_eq!(peer_outcome(blind, 5.0, 5.0), Outcome::NotApplicable);
        assert_eq!(
            peer_outcome(blind, 4.99, 5.0),
            Outcome::Fail,
            "goodput decides"
        );
    }

    #[test]
    fn goodput_rule_has_no_allowance() {
        assert_eq!(peer_outcome(P99Call::NotAbove, 4.999, 5.0), Outcome::Fail);
        assert_eq!(peer_outcome(P99Call::NotAbove, 5.0, 5.0), Outcome::Pass);
        assert_eq!(peer_outcome(P99Call::Overlapping, 5.1, 5.0), Outcome::Pass);
    }
}
