//! The knee's summary: `knee.json` (serialized) and `knee.md` (rendered), pure.

use std::fmt::Write as _;

use serde::Serialize;

use super::bisect::Bracket;
use super::judge::{Judgement, ACHIEVED_SHARE};

/// The summary's file name in the output directory (`report` skips it).
pub const SUMMARY_FILE: &str = "knee.json";
/// The Markdown summary's file name.
pub const SUMMARY_MD: &str = "knee.md";

/// The rules, as `knee.md` and `knee.json` state them.
pub const RULES: &str = "A probe is one run (as `sweep` runs them) on a fresh fleet at one \
offered rate, measured over max(duration, min_samples / rate). It MEETS the SLO when it \
completed requests, none errored, it achieved (completed / wall time) at least 95 % of the rate \
it offered (sent / measured window), and its p99 TTFT and p99 TPOT (exact nearest rank, in model \
seconds: measured / time scale) are within the bounds. Search: probe low; if it meets, probe \
high and double while it meets, up to the cap; if low fails, halve it down to the floor; then \
probe the geometric mean of the highest met and the lowest failed (rounded to 4 significant \
digits) until lowest failed / highest met <= 1 + tolerance. The knee is the highest rate that \
met.";

/// One probe as the summary lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRow {
    /// Offered first turns per second.
    pub rate: f64,
    /// Measured window, seconds.
    pub duration_s: f64,
    /// The result file, relative to the output directory.
    pub file: String,
    /// Fewer measured requests were sent than `min_samples` (Poisson arrivals fell short of
    /// `rate * duration`); the probe is judged all the same, the table marks it `*`.
    pub below_min_samples: bool,
    /// The figures and the verdict.
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// One front's search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrontKnee {
    /// The front (policy or peer).
    pub front: String,
    /// The highest rate that met (`null`: none, down to the floor).
    pub knee: Option<f64>,
    /// True when the cap met: the knee is at least the cap.
    pub capped: bool,
    /// The lowest rate that failed (`null`: none, up to the cap).
    pub lowest_failed: Option<f64>,
    /// `knee / the first front's knee` (`null` when either has none).
    pub ratio_to_first: Option<f64>,
    /// What the search did besides bisecting (growth, shrinking, stops).
    pub notes: Vec<String>,
    /// Every probe, in order.
    pub probes: Vec<ProbeRow>,
}

/// The bounds as the summary states them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloRow {
    /// p99 TTFT bound, model seconds.
    pub p99_ttft_s: f64,
    /// p99 TPOT bound, model seconds.
    pub p99_tpot_s: f64,
    /// Share of the offered rate a probe must achieve.
    pub achieved_share: f64,
}

/// `knee.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KneeSummary {
    /// The workload.
    pub workload: String,
    /// [`RULES`].
    pub rules: String,
    /// The bounds.
    pub slo: SloRow,
    /// The simulators' time scale (1: real time). Rates are wall-clock rates; at scale S
    /// a rate R plays out as R * S would in model time (the gateway itself is not scaled).
    pub time_scale: f64,
    /// Measured requests a probe aims at.
    pub min_samples: u64,
    /// The starting bracket, floor, cap and tolerance.
    pub low: f64,
    /// See `low`.
    pub high: f64,
    /// See `low`.
    pub floor: f64,
    /// See `low`.
    pub cap: f64,
    /// See `low`.
    pub tolerance: f64,
    /// Every front, in the order given.
    pub fronts: Vec<FrontKnee>,
}

impl KneeSummary {
    /// A summary with no fronts yet.
    pub fn new(workload: &str, slo: SloRow, time_scale: f64, min_samples: u64, b: Bracket) -> Self {
        KneeSummary {
            workload: workload.to_string(),
            rules: RULES.to_string(),
            slo,
            time_scale,
            min_samples,
            low: b.low,
            high: b.high,
            floor: b.floor,
            cap: b.cap,
            tolerance: b.tolerance,
            fronts: Vec::new(),
        }
    }

    /// Adds a front, setting its ratio to the first front's knee.
    pub fn push(&mut self, mut front: FrontKnee) {
        let first = self.fronts.first().map_or(front.knee, |f| f.knee);
        front.ratio_to_first = match (front.knee, first) {
            (Some(k), Some(b)) if b > 0.0 => Some(k / b),
            _ => None,
        };
        self.fronts.push(front);
    }

    /// One line per front after the first: its capacity ratio to the first.
    pub fn ratio_lines(&self) -> Vec<String> {
        let Some(first) = self.fronts.first() else {
            return Vec::new();
        };
        self.fronts
            .iter()
            .skip(1)
            .map(|f| match f.ratio_to_first {
                Some(r) => format!(
                    "{} / {}: capacity ratio {r:.2} ({} / {} req/s){}",
                    f.front,
                    first.front,
                    rate(f.knee),
                    rate(first.knee),
                    if f.capped || first.capped {
                        " (a capped knee is a lower bound)"
                    } else {
                        ""
                    }
                ),
                None => format!(
                    "{} / {}: no capacity ratio (a front without a knee)",
                    f.front, first.front
                ),
            })
            .collect()
    }

    /// `knee.md`.
    pub fn markdown(&self) -> String {
        let mut md = format!("# Knee: {}\n\n{RULES}\n\n", self.workload);
        let _ = writeln!(
            md,
            "Bounds: p99 TTFT <= {} s, p99 TPOT <= {} ms, achieved >= {:.0} % of offered; \
             time scale {}; about {} measured requests a probe; bracket [{}, {}] req/s, floor \
             {}, cap {}, tolerance {}.\n",
            self.slo.p99_ttft_s,
            self.slo.p99_tpot_s * 1e3,
            100.0 * ACHIEVED_SHARE,
            self.time_scale,
            self.min_samples,
            self.low,
            self.high,
            self.floor,
            self.cap,
            self.tolerance
        );
        md.push_str(
            "| front | knee (req/s) | lowest failed (req/s) | ratio to first | probes |\n\
             |---|---:|---:|---:|---:|\n",
        );
        for f in &self.fronts {
            let knee = if f.capped {
                format!(">= {}", rate(f.knee))
            } else {
                rate(f.knee)
            };
            let ratio = f.ratio_to_first.map_or("n/a".into(), |r| format!("{r:.2}"));
            let _ = writeln!(
                md,
                "| {} | {knee} | {} | {ratio} | {} |",
                f.front,
                rate(f.lowest_failed),
                f.probes.len()
            );
        }
        for line in self.ratio_lines() {
            let _ = writeln!(md, "\n{line}");
        }
        for f in &self.fronts {
            front_section(&mut md, f);
        }
        if self
            .fronts
            .iter()
            .flat_map(|f| &f.probes)
            .any(|p| p.below_min_samples)
        {
            let _ = writeln!(
                md,
                "\n\\* fewer than {} measured requests (Poisson arrivals fell short of rate x \
                 window); judged all the same.",
                self.min_samples
            );
        }
        md
    }
}

fn front_section(md: &mut String, f: &FrontKnee) {
    let _ = writeln!(md, "\n## {}\n", f.front);
    for note in &f.notes {
        let _ = writeln!(md, "- {note}");
    }
    if !f.notes.is_empty() {
        md.push('\n');
    }
    md.push_str(
        "| # | rate | window s | sent | completed | errors | offered | achieved | p99 TTFT s | \
         p99 TPOT ms | met | why not | file |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n",
    );
    for (i, p) in f.probes.iter().enumerate() {
        let j = &p.judgement;
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {}{} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} |",
            i + 1,
            p.rate,
            p.duration_s,
            j.sent,
            if p.below_min_samples { "*" } else { "" },
            j.completed,
            j.errors,
            j.offered_rps,
            j.achieved_rps,
            j.p99_ttft_s.map_or("n/a".into(), |t| format!("{t:.3}")),
            j.p99_tpot_s
                .map_or("n/a".into(), |t| format!("{:.1}", t * 1e3)),
            if j.met { "yes" } else { "no" },
            j.failed.join("; "),
            p.file
        );
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or("none".into(), |r| r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front(name: &str, knee: Option<f64>) -> FrontKnee {
        FrontKnee {
            front: name.into(),
            knee,
            capped: false,
            lowest_failed: knee.map(|k| k * 1.05),
            ratio_to_first: None,
            notes: vec![],
            probes: vec![],
        }
    }

    #[test]
    fn ratios_are_to_the_first_front() {
        let b = Bracket {
            low: 1.0,
            high: 2.0,
            floor: 0.5,
            cap: 4.0,
            tolerance: 0.1,
        };
        let slo = SloRow {
            p99_ttft_s: 2.0,
            p99_tpot_s: 0.1,
            achieved_share: ACHIEVED_SHARE,
        };
        let mut s = KneeSummary::new("w1", slo, 1.0, 1000, b);
        s.push(front("cost_model", Some(8.0)));
        s.push(front("round_robin", Some(4.0)));
        s.push(front("p2c", None));
        let ratios: Vec<Option<f64>> = s.fronts.iter().map(|f| f.ratio_to_first).collect();
        assert_eq!(ratios, [Some(1.0), Some(0.5), None]);
        let lines = s.ratio_lines();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("capacity ratio 0.50"), "{lines:?}");
        let md = s.markdown();
        assert!(md.contains("| round_robin | 4 | 4.2 | 0.50 | 0 |"), "{md}");
        assert!(md.contains("## p2c"), "{md}");
    }
}
