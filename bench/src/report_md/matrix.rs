//! Every point against every front: `cost_model` compared with each other policy at each
//! (workload, rate) where both have results. p99 TTFT is called only when the 95% intervals
//! separate; goodput by one of two registered rules ([`GoodputRule`]): perf/results/sweep-fair's
//! (req/s, not below at all) or perf/results/sweep-fair2's (the share that met the SLO, below
//! only when the 95% Wilson intervals separate).

use std::fmt::Write as _;

use super::aggregate::{rate_of, PolicyPoint, Table};
use super::bootstrap::{Interval, Separation};
use super::num::{fixed, rate};
use super::verdicts::CACHE_AWARE;
use super::wilson::wilson95;

/// How the matrix judges goodput; each is a rule registered before the sweep it judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoodputRule {
    /// perf/results/sweep-fair: goodput in req/s, **below** when cost_model's is below the
    /// other's at all.
    #[default]
    PerSecond,
    /// perf/results/sweep-fair2: the share of measured (sent) requests that met the SLO, with
    /// its 95% Wilson score interval over the sent requests (repetitions pooled); **below** when
    /// cost_model's interval lies wholly below the other's.
    Share,
}

impl GoodputRule {
    /// The rule named `word` on the command line (`per-second` or `share`).
    pub fn parse(word: &str) -> Option<GoodputRule> {
        match word {
            "per-second" => Some(GoodputRule::PerSecond),
            "share" => Some(GoodputRule::Share),
            _ => None,
        }
    }

    /// How the goodput half of the rule reads in the report.
    fn words(self) -> &'static str {
        match self {
            GoodputRule::PerSecond => {
                "Goodput (req/s): **below** when cost_model's is below the other's at all."
            }
            GoodputRule::Share => {
                "Goodput: the share of measured (sent) requests that met the SLO, with its 95% \
                 Wilson score interval; **below** when cost_model's interval lies wholly below \
                 the other's (without counts on either side: undecided)."
            }
        }
    }
}

/// The matrix rule in words, as the report states it.
pub fn matrix_rule(goodput: GoodputRule) -> String {
    format!(
        "At every workload and rate, cost_model against every other policy with results \
         there. p99 TTFT: **ahead** when cost_model's 95% interval lies wholly below the \
         other's, **behind** when wholly above, **tie** when they overlap (without an interval \
         on either side: not above, or undecided when above). {} A comparison passes when it \
         is neither behind nor below (undecided: N/A).",
        goodput.words()
    )
}

/// A front's share of requests that met the SLO at one point, with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Met / sent.
    pub fraction: f64,
    /// The 95% Wilson score interval.
    pub interval: Interval,
}

impl Share {
    /// The share of `met` out of `sent` (`None` when nothing was sent).
    pub fn of((met, sent): (u64, u64)) -> Option<Share> {
        let interval = wilson95(met, sent)?;
        Some(Share {
            fraction: met.min(sent) as f64 / sent as f64,
            interval,
        })
    }
}

/// How cost_model's p99 TTFT compares with another policy's at one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P99Standing {
    /// Its interval lies wholly below the other's.
    Ahead,
    /// The intervals overlap: no difference is called.
    Tie,
    /// Its interval lies wholly above the other's.
    Behind,
    /// No interval on one side, and its p99 is at or below the other's.
    NotAbove,
    /// No interval on one side, and its p99 is above the other's: nothing can be called.
    Undecided,
}

impl P99Standing {
    /// The standing in words, for the table.
    pub fn words(self) -> &'static str {
        match self {
            P99Standing::Ahead => "ahead",
            P99Standing::Tie => "tie",
            P99Standing::Behind => "behind",
            P99Standing::NotAbove => "not above (no interval)",
            P99Standing::Undecided => "above (no interval): undecided",
        }
    }
}

/// cost_model's p99 standing: `cm` and `other` are each a p99 with its interval (if any).
pub fn standing(cm: (f64, Option<Interval>), other: (f64, Option<Interval>)) -> P99Standing {
    match (cm.1, other.1) {
        (Some(c), Some(o)) => match c.separation(o) {
            Separation::Below => P99Standing::Ahead,
            Separation::Overlap => P99Standing::Tie,
            Separation::Above => P99Standing::Behind,
        },
        _ if cm.0 <= other.0 => P99Standing::NotAbove,
        _ => P99Standing::Undecided,
    }
}

/// Whether cost_model's goodput is below the other's under `rule` (`None`: cannot be judged).
pub fn goodput_below(
    rule: GoodputRule,
    per_second: (f64, f64),
    shares: (Option<Share>, Option<Share>),
) -> Option<bool> {
    match rule {
        GoodputRule::PerSecond => Some(per_second.0 < per_second.1),
        GoodputRule::Share => {
            let (cm, other) = (shares.0?, shares.1?);
            Some(cm.interval.separation(other.interval) == Separation::Below)
        }
    }
}

/// One comparison's outcome: `Some(true)` passes, `Some(false)` fails, `None` cannot be judged.
pub fn passes(p99: P99Standing, goodput_below: Option<bool>) -> Option<bool> {
    if p99 == P99Standing::Behind || goodput_below == Some(true) {
        Some(false)
    } else if p99 == P99Standing::Undecided || goodput_below.is_none() {
        None
    } else {
        Some(true)
    }
}

/// One row of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The workload.
    pub workload: String,
    /// The rate (model req/s).
    pub rate: f64,
    /// The other policy.
    pub other: String,
    /// cost_model's p99 TTFT (s) and interval.
    pub cm_p99: (f64, Option<Interval>),
    /// The other's p99 TTFT (s) and interval.
    pub other_p99: (f64, Option<Interval>),
    /// The p99 standing.
    pub standing: P99Standing,
    /// cost_model's goodput and the other's (req/s).
    pub goodput: (f64, f64),
    /// cost_model's share of requests that met the SLO and the other's (`None`: a file does
    /// not say how many met it).
    pub shares: (Option<Share>, Option<Share>),
    /// Whether cost_model's goodput is below the other's by the rule (`None`: undecided).
    pub below: Option<bool>,
    /// The outcome (`None`: undecided).
    pub pass: Option<bool>,
}

/// Every comparison, in workload, rate, policy order, goodput judged by `rule`; empty when
/// cost_model has no results.
pub fn comparisons(t: &Table, rule: GoodputRule) -> Vec<Comparison> {
    let p99 = |p: &PolicyPoint| (p.ttft_p99_s.median, p.ttft_p99_ci_s);
    let mut out = Vec::new();
    for (w, rates) in &t.workloads {
        for (r, pols) in rates {
            let Some(cm) = pols.get(CACHE_AWARE) else {
                continue;
            };
            for (name, other) in pols.iter().filter(|(n, _)| n.as_str() != CACHE_AWARE) {
                let standing = standing(p99(cm), p99(other));
                let goodput = (cm.goodput.median, other.goodput.median);
                let shares = (
                    cm.slo_met.and_then(Share::of),
                    other.slo_met.and_then(Share::of),
                );
                let below = goodput_below(rule, goodput, shares);
                out.push(Comparison {
                    workload: w.clone(),
                    rate: rate_of(*r),
                    other: name.clone(),
                    cm_p99: p99(cm),
                    other_p99: p99(other),
                    standing,
                    goodput,
                    shares,
                    below,
                    pass: passes(standing, below),
                });
            }
        }
    }
    out
}

fn p99_cell((p99, ci): (f64, Option<Interval>)) -> String {
    let ci = ci.map_or_else(
        || "n/a".to_string(),
        |i| format!("{}–{}", fixed(i.lo, 3), fixed(i.hi, 3)),
    );
    format!("{} [{ci}]", fixed(p99, 3))
}

fn share_cell(share: Option<Share>) -> String {
    share.map_or_else(
        || "n/a".to_string(),
        |s| {
            format!(
                "{} [{}–{}]",
                fixed(s.fraction, 3),
                fixed(s.interval.lo, 3),
                fixed(s.interval.hi, 3)
            )
        },
    )
}

/// The report's section: the rule, a count and the table; nothing when there is no comparison.
pub fn section(out: &mut String, rows: &[Comparison], rule: GoodputRule) {
    if rows.is_empty() {
        return;
    }
    let count = |want: Option<bool>| rows.iter().filter(|c| c.pass == want).count();
    let _ = writeln!(
        out,
        "## cost_model against every policy at every point\n\n{}\n\n\
         {} comparisons: {} pass, {} fail, {} undecided.\n",
        matrix_rule(rule),
        rows.len(),
        count(Some(true)),
        count(Some(false)),
        count(None)
    );
    let goodput_head = match rule {
        GoodputRule::PerSecond => "goodput cost_model / it (req/s)",
        GoodputRule::Share => "SLO met, cost_model / it (share [95% Wilson])",
    };
    let _ = writeln!(
        out,
        "| workload | req/s | against | cost_model p99 TTFT (s) [95% CI] | its p99 TTFT (s) \
         [95% CI] | p99 | {goodput_head} | outcome |\n\
         |---|---|---|---|---|---|---|---|",
    );
    for c in rows {
        let outcome = match c.pass {
            Some(true) => "pass",
            Some(false) => "**fail**",
            None => "undecided",
        };
        let below = match c.below {
            Some(true) => " (below)",
            Some(false) => "",
            None => " (undecided)",
        };
        let goodput = match rule {
            GoodputRule::PerSecond => format!("{:.2} / {:.2}", c.goodput.0, c.goodput.1),
            GoodputRule::Share => {
                format!("{} / {}", share_cell(c.shares.0), share_cell(c.shares.1))
            }
        };
        let _ = writeln!(
            out,
            "| {} | {} | vs {} | {} | {} | {} | {goodput}{below} | {outcome} |",
            c.workload.to_uppercase(),
            rate(c.rate),
            c.other.replace('|', "\\|"),
            p99_cell(c.cm_p99),
            p99_cell(c.other_p99),
            c.standing.words(),
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ci(lo: f64, hi: f64) -> Option<Interval> {
        Some(Interval { lo, hi })
    }

    #[test]
    fn standing_follows_the_intervals_not_the_medians() {
        assert_eq!(
            standing((0.5, ci(0.45, 0.55)), (0.8, ci(0.7, 0.9))),
            P99Standing::Ahead
        );
        // A lower median with overlapping intervals is a tie, not a win.
        assert_eq!(
            standing((0.5, ci(0.45, 0.75)), (0.8, ci(0.7, 0.9))),
            P99Standing::Tie
        );
        assert_eq!(
            standing((0.95, ci(0.91, 1.0)), (0.8, ci(0.7, 0.9))),
            P99Standing::Behind
        );
        assert_eq!(
            standing((0.9, ci(0.9, 1.0)), (0.8, ci(0.7, 0.9))),
            P99Standing::Tie,
            "touching ends overlap"
        );
        assert_eq!(
            standing((0.8, None), (0.8, ci(0.7, 0.9))),
            P99Standing::NotAbove
        );
        assert_eq!(standing((0.81, None), (0.8, None)), P99Standing::Undecided);
    }

    fn below(rule: GoodputRule, per_s: (f64, f64), cm: (u64, u64), it: (u64, u64)) -> Option<bool> {
        goodput_below(rule, per_s, (Share::of(cm), Share::of(it)))
    }

    #[test]
    fn goodput_below_fails_whatever_the_p99() {
        let per_s = |a, b| goodput_below(GoodputRule::PerSecond, (a, b), (None, None));
        assert_eq!(passes(P99Standing::Ahead, per_s(4.99, 5.0)), Some(false));
        assert_eq!(passes(P99Standing::Tie, per_s(5.0, 5.0)), Some(true));
        assert_eq!(passes(P99Standing::Behind, per_s(6.0, 5.0)), Some(false));
        assert_eq!(passes(P99Standing::Undecided, per_s(5.0, 5.0)), None);
        assert_eq!(passes(P99Standing::Undecided, per_s(4.0, 5.0)), Some(false));
        assert_eq!(passes(P99Standing::NotAbove, per_s(5.0, 5.0)), Some(true));
        assert_eq!(passes(P99Standing::Tie, None), None, "goodput not judged");
    }

    #[test]
    fn the_share_rule_calls_below_only_when_the_wilson_intervals_separate() {
        let share = GoodputRule::Share;
        // sweep-fair's 15 goodput-only failures: every request met the SLO on both sides, a
        // few requests apart. The per-second rule fails them; the share rule does not.
        assert_eq!(
            below(
                GoodputRule::PerSecond,
                (24.4, 24.6),
                (1029, 1029),
                (1034, 1034)
            ),
            Some(true)
        );
        assert_eq!(
            below(share, (24.4, 24.6), (1029, 1029), (1034, 1034)),
            Some(false)
        );
        // 0.87 of 1,000 against 0.99 of 1,000: the intervals separate.
        assert_eq!(
            below(share, (0.0, 0.0), (870, 1000), (990, 1000)),
            Some(true)
        );
        // 0.95 of 100 against 0.99 of 100: they overlap, no difference is called.
        assert_eq!(below(share, (0.0, 0.0), (95, 100), (99, 100)), Some(false));
        // Ahead is never below, whatever the req/s.
        assert_eq!(
            below(share, (1.0, 9.0), (990, 1000), (870, 1000)),
            Some(false)
        );
        // No counts on one side (an older file) or nothing sent: undecided.
        assert_eq!(
            goodput_below(share, (1.0, 1.0), (None, Share::of((5, 5)))),
            None
        );
        assert_eq!(below(share, (1.0, 1.0), (0, 0), (5, 5)), None);
        assert_eq!(GoodputRule::parse("share"), Some(share));
        assert_eq!(
            GoodputRule::parse("per-second"),
            Some(GoodputRule::PerSecond)
        );
        assert_eq!(GoodputRule::parse("fraction"), None);
    }
}
