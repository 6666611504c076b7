//! Every point against every front: `cost_model` compared with each other policy at each
//! (workload, rate) where both have results, by the rule of perf/results/sweep-fair/README.md
//! (p99 TTFT called only when the 95% intervals separate; goodput not below at all).

use std::fmt::Write as _;

use super::aggregate::{rate_of, PolicyPoint, Table};
use super::bootstrap::{Interval, Separation};
use super::num::{fixed, rate};
use super::verdicts::CACHE_AWARE;

/// The matrix rule in words, as the report states it.
pub const MATRIX_RULE: &str = "At every workload and rate, cost_model against every other \
policy with results there. p99 TTFT: **ahead** when cost_model's 95% interval lies wholly below \
the other's, **behind** when wholly above, **tie** when they overlap (without an interval on \
either side: not above, or undecided when above). Goodput: **below** when cost_model's is below \
the other's at all. A comparison passes when it is neither behind nor below (undecided: N/A).";

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

/// One comparison's outcome: `Some(true)` passes, `Some(false)` fails, `None` cannot be judged.
pub fn passes(p99: P99Standing, cm_goodput: f64, other_goodput: f64) -> Option<bool> {
    if p99 == P99Standing::Behind || cm_goodput < other_goodput {
        Some(false)
    } else if p99 == P99Standing::Undecided {
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
    /// The outcome (`None`: undecided).
    pub pass: Option<bool>,
}

/// Every comparison, in workload, rate, policy order; empty when cost_model has no results.
pub fn comparisons(t: &Table) -> Vec<Comparison> {
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
                out.push(Comparison {
                    workload: w.clone(),
                    rate: rate_of(*r),
                    other: name.clone(),
                    cm_p99: p99(cm),
                    other_p99: p99(other),
                    standing,
                    goodput,
                    pass: passes(standing, goodput.0, goodput.1),
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

/// The report's section: the rule, a count and the table; nothing when there is no comparison.
pub fn section(out: &mut String, rows: &[Comparison]) {
    if rows.is_empty() {
        return;
    }
    let count = |want: Option<bool>| rows.iter().filter(|c| c.pass == want).count();
    let _ = writeln!(
        out,
        "## cost_model against every policy at every point\n\n{MATRIX_RULE}\n\n\
         {} comparisons: {} pass, {} fail, {} undecided.\n",
        rows.len(),
        count(Some(true)),
        count(Some(false)),
        count(None)
    );
    out.push_str(
        "| workload | req/s | against | cost_model p99 TTFT (s) [95% CI] | its p99 TTFT (s) \
         [95% CI] | p99 | goodput cost_model / it (req/s) | outcome |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let outcome = match c.pass {
            Some(true) => "pass",
            Some(false) => "**fail**",
            None => "undecided",
        };
        let below = if c.goodput.0 < c.goodput.1 {
            " (below)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| {} | {} | vs {} | {} | {} | {} | {:.2} / {:.2}{below} | {outcome} |",
            c.workload.to_uppercase(),
            rate(c.rate),
            c.other.replace('|', "\\|"),
            p99_cell(c.cm_p99),
            p99_cell(c.other_p99),
            c.standing.words(),
            c.goodput.0,
            c.goodput.1,
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

    #[test]
    fn goodput_below_fails_whatever_the_p99() {
        assert_eq!(passes(P99Standing::Ahead, 4.99, 5.0), Some(false));
        assert_eq!(passes(P99Standing::Tie, 5.0, 5.0), Some(true));
        assert_eq!(passes(P99Standing::Behind, 6.0, 5.0), Some(false));
        assert_eq!(passes(P99Standing::Undecided, 5.0, 5.0), None);
        assert_eq!(passes(P99Standing::Undecided, 4.0, 5.0), Some(false));
        assert_eq!(passes(P99Standing::NotAbove, 5.0, 5.0), Some(true));
    }
}
