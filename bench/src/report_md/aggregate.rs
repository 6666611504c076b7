//! Grouping result files by workload, rate and policy, and folding repetitions into their
//! median with the range, and the p99s' bootstrap intervals ([`super::bootstrap`]). Every map
//! is a `BTreeMap`, so iteration order is fixed.

use std::collections::{BTreeMap, BTreeSet};

use super::bootstrap::{Bootstrap, Interval, P99};
use super::load::{Loaded, ResultFile};

/// A rate as a map key: millirequests per second, rounded.
pub type RateKey = u64;

/// `rate` as a [`RateKey`].
pub fn rate_key(rate: f64) -> RateKey {
    // `as` saturates; rates were checked finite and non-negative on load.
    (rate * 1000.0).round() as u64
}

/// Req/s of a [`RateKey`].
pub fn rate_of(key: RateKey) -> f64 {
    key as f64 / 1000.0
}

/// Repetitions of one figure: median, smallest, largest and how many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agg {
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Values.
    pub n: usize,
}

impl Agg {
    /// The median and range of `values` (`None` when empty).
    pub fn of(values: &[f64]) -> Option<Agg> {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let (first, last) = (*v.first()?, *v.last()?);
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Agg {
            median,
            min: first,
            max: last,
            n,
        })
    }
}

/// One policy at one workload and rate, repetitions folded.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyPoint {
    /// Repetition numbers seen, sorted.
    pub reps: Vec<u64>,
    /// TTFT p50, s.
    pub ttft_p50_s: Agg,
    /// TTFT p99, s: per repetition the exact p99 of its samples when the file keeps them, else
    /// the histogram's.
    pub ttft_p99_s: Agg,
    /// The 95 % bootstrap interval on `ttft_p99_s.median`, s (`None` unless every repetition
    /// keeps its samples).
    pub ttft_p99_ci_s: Option<Interval>,
    /// TPOT p50, ms.
    pub tpot_p50_ms: Agg,
    /// TPOT p99, ms, taken as `ttft_p99_s` is.
    pub tpot_p99_ms: Agg,
    /// The 95 % bootstrap interval on `tpot_p99_ms.median`, ms, as `ttft_p99_ci_s`.
    pub tpot_p99_ci_ms: Option<Interval>,
    /// Goodput, req/s.
    pub goodput: Agg,
    /// Measured requests that met the SLO and measured requests sent, summed over the
    /// repetitions (`None` when a file does not say how many met it).
    pub slo_met: Option<(u64, u64)>,
    /// Engine prefix-cache hit rate (`None` when no repetition had engine counters).
    pub engine_hit_rate: Option<Agg>,
    /// Usage prefix hit rate (`cached_tokens / prompt_tokens`).
    pub usage_hit_rate: Agg,
    /// Busiest replica's share.
    pub busiest_share: Agg,
    /// Requests that did not complete.
    pub errors: Agg,
}

/// Policy name → point.
pub type Policies = BTreeMap<String, PolicyPoint>;
/// Rate → policies.
pub type Rates = BTreeMap<RateKey, Policies>;

/// Everything, by workload, rate and policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// Workload → rate → policy → point.
    pub workloads: BTreeMap<String, Rates>,
    /// Policy → every `front` its files named (program, version, policy of a peer).
    pub fronts: BTreeMap<String, BTreeSet<String>>,
}

impl Table {
    /// The rates of `workload`, ascending.
    pub fn rates(&self, workload: &str) -> Vec<RateKey> {
        self.workloads
            .get(workload)
            .map(|r| r.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The policy point at `workload`, `rate`, `policy`.
    pub fn get(&self, workload: &str, rate: RateKey, policy: &str) -> Option<&PolicyPoint> {
        self.workloads.get(workload)?.get(&rate)?.get(policy)
    }

    /// Every policy seen in `workload`, sorted.
    pub fn policies(&self, workload: &str) -> Vec<String> {
        let mut all: Vec<String> = self
            .workloads
            .get(workload)
            .into_iter()
            .flat_map(|r| r.values())
            .flat_map(|p| p.keys().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

/// Groups `files` and folds their repetitions.
pub fn aggregate(files: &[Loaded]) -> Table {
    let mut groups: BTreeMap<(String, RateKey, String), Vec<&Loaded>> = BTreeMap::new();
    let mut table = Table::default();
    for f in files {
        let s = &f.file.spec;
        if let Some(front) = &f.file.front {
            table
                .fronts
                .entry(s.policy.clone())
                .or_default()
                .insert(front.clone());
        }
        groups
            .entry((s.workload.clone(), rate_key(s.rate), s.policy.clone()))
            .or_default()
            .push(f);
    }
    for ((workload, rate, policy), reps) in groups {
        let Some(point) = fold(&reps) else { continue };
        table
            .workloads
            .entry(workload)
            .or_default()
            .entry(rate)
            .or_default()
            .insert(policy, point);
    }
    table
}

/// A run's p99 in µs: exact from `samples` when there are some, else the histogram's `summary`.
fn p99_us(samples: Option<&[u64]>, summary: u64) -> f64 {
    samples
        .and_then(|s| Bootstrap::statistic(&[s], P99))
        .unwrap_or(summary as f64)
}

/// The bootstrap interval on the repetitions' median p99, µs scaled by `unit`; `None` unless
/// every repetition has samples.
fn p99_ci(
    reps: &[&Loaded],
    samples: impl Fn(&ResultFile) -> Option<&[u64]>,
    unit: f64,
) -> Option<Interval> {
    let all: Option<Vec<&[u64]>> = reps.iter().map(|l| samples(&l.file)).collect();
    Bootstrap::default()
        .interval(&all?, P99)
        .map(|i| i.scaled(unit))
}

fn fold(reps: &[&Loaded]) -> Option<PolicyPoint> {
    let of = |f: &dyn Fn(&Loaded) -> f64| -> Option<Agg> {
        Agg::of(&reps.iter().map(|l| f(l)).collect::<Vec<f64>>())
    };
    let engine: Vec<f64> = reps
        .iter()
        .filter_map(|l| l.file.engines.map(|e| e.hit_rate))
        .collect();
    let mut rep_ids: Vec<u64> = reps.iter().map(|l| l.file.spec.rep).collect();
    rep_ids.sort_unstable();
    Some(PolicyPoint {
        reps: rep_ids,
        ttft_p50_s: of(&|l| l.file.report.ttft_us.p50 as f64 / 1e6)?,
        ttft_p99_s: of(&|l| p99_us(l.file.ttft_samples(), l.file.report.ttft_us.p99) / 1e6)?,
        ttft_p99_ci_s: p99_ci(reps, ResultFile::ttft_samples, 1e-6),
        tpot_p50_ms: of(&|l| l.file.report.tpot_us.p50 as f64 / 1e3)?,
        tpot_p99_ms: of(&|l| p99_us(l.file.tpot_samples(), l.file.report.tpot_us.p99) / 1e3)?,
        tpot_p99_ci_ms: p99_ci(reps, ResultFile::tpot_samples, 1e-3),
        goodput: of(&|l| l.file.report.goodput.requests_per_s)?,
        slo_met: reps.iter().try_fold((0u64, 0u64), |(met, sent), l| {
            let r = &l.file.report;
            Some((met + r.goodput.requests?, sent + r.sent))
        }),
        engine_hit_rate: Agg::of(&engine),
        usage_hit_rate: of(&|l| l.file.report.usage.prefix_hit_rate)?,
        busiest_share: of(&|l| l.file.busiest_share())?,
        errors: of(&|l| l.file.report.errors.total as f64)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        let a = Agg::of(&[3.0, 1.0, 2.0]).expect("values");
        assert_eq!((a.median, a.min, a.max, a.n), (2.0, 1.0, 3.0, 3));
        let b = Agg::of(&[4.0, 1.0, 2.0, 10.0]).expect("values");
        assert_eq!((b.median, b.min, b.max), (3.0, 1.0, 10.0));
        assert!(Agg::of(&[]).is_none());
        assert_eq!(rate_key(6.0), 6000);
        assert_eq!(rate_key(0.25), 250);
        assert_eq!(rate_of(2500), 2.5);
    }
}
