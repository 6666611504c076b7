//! Percentile-bootstrap confidence intervals on a point's p99 (or any quantile), seeded so the
//! same files always give the same interval.
//!
//! **What is resampled.** A point (one workload, rate and policy) has one sample array per
//! repetition, and the figure the report prints for it is the *median over repetitions* of each
//! repetition's p99. The bootstrap estimates the spread of exactly that figure: each resample
//! draws every repetition's requests again from that repetition alone (with replacement, as many
//! as it had), takes each repetition's p99 and then their median. Resampling within repetitions
//! (stratified) instead of pooling them keeps each run's size and does not treat requests of
//! different runs (different schedules, different fresh fleets) as interchangeable; and the
//! interval is about the number in the table and in the verdicts, not about a pooled p99 that
//! appears nowhere. With one repetition it is the plain percentile bootstrap.
//!
//! **Quantile.** Nearest rank: the `⌈q·n⌉`-th smallest value (the first for `q·n ≤ 1`), the
//! rule hdrhistogram's `value_at_quantile` uses before rounding to its bucket.
//!
//! **Interval.** The `(1 − level)/2` and `(1 + level)/2` quantiles of the resampled statistics,
//! nearest rank on each side: with 2,000 resamples at 95 %, 50 statistics lie below the lower
//! end and 50 above the upper one.

use crate::schedule::SplitMix64;

/// Resamples per interval.
pub const RESAMPLES: usize = 2_000;
/// Confidence level.
pub const LEVEL: f64 = 0.95;
/// The generator's seed, the same for every interval (reports are reproducible).
pub const SEED: u64 = 0x1F_2015_B007;
/// The quantile the report puts intervals on.
pub const P99: f64 = 0.99;

/// A closed interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
}

/// Where one interval lies with respect to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Separation {
    /// Wholly below the other (its upper end under the other's lower end).
    Below,
    /// They share at least one value (touching ends count): no difference is called.
    Overlap,
    /// Wholly above the other.
    Above,
}

impl Interval {
    /// Both ends multiplied by `k` (units: µs to s is `1e-6`).
    pub fn scaled(self, k: f64) -> Interval {
        Interval {
            lo: self.lo * k,
            hi: self.hi * k,
        }
    }

    /// Where `self` lies with respect to `other`.
    pub fn separation(self, other: Interval) -> Separation {
        if self.hi < other.lo {
            Separation::Below
        } else if self.lo > other.hi {
            Separation::Above
        } else {
            Separation::Overlap
        }
    }

    /// Whether `x` lies in the interval (ends included).
    pub fn contains(self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// The 1-based nearest rank of quantile `q` among `n` values (`n > 0`).
fn rank(q: f64, n: usize) -> usize {
    // `as` saturates; the clamp keeps the rank in 1..=n.
    ((q * n as f64).ceil() as usize).clamp(1, n)
}

/// The nearest-rank quantile `q` of `sorted` (ascending); `None` when empty.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    sorted.get(rank(q, sorted.len()) - 1).copied()
}

/// The median of `v` (the mean of the middle two for an even count); `v` is reordered.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// How intervals are drawn: resamples, level and seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bootstrap {
    /// Resamples (at least one is drawn).
    pub resamples: usize,
    /// Confidence level in `(0, 1)`.
    pub level: f64,
    /// Generator seed.
    pub seed: u64,
}

impl Default for Bootstrap {
    fn default() -> Bootstrap {
        Bootstrap {
            resamples: RESAMPLES,
            level: LEVEL,
            seed: SEED,
        }
    }
}

/// One repetition's values, sorted, with a buffer for the resampled indices.
struct Stratum {
    sorted: Vec<u64>,
    draws: Vec<usize>,
    rank: usize,
}

impl Stratum {
    fn new(values: &[u64], q: f64) -> Stratum {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        Stratum {
            rank: rank(q, sorted.len()),
            draws: Vec::with_capacity(sorted.len()),
            sorted,
        }
    }

    /// The quantile of one resample. The values are sorted, so the rank-th smallest of the
    /// resampled values is the value at the rank-th smallest resampled index: selecting among
    /// indices finds it without sorting the resample.
    fn resampled(&mut self, rng: &mut SplitMix64) -> f64 {
        let n = self.sorted.len();
        self.draws.clear();
        self.draws.extend((0..n).map(|_| rng.below(n)));
        let (_, at, _) = self.draws.select_nth_unstable(self.rank - 1);
        self.sorted[*at] as f64
    }
}

impl Bootstrap {
    /// The interval on the median over repetitions of each repetition's quantile `q`. `reps`
    /// holds one array of values per repetition, in any order. `None` when there is no
    /// repetition or one of them has no value (no interval can be drawn for the figure).
    pub fn interval(&self, reps: &[&[u64]], q: f64) -> Option<Interval> {
        if reps.is_empty() || reps.iter().any(|r| r.is_empty()) {
            return None;
        }
        let mut strata: Vec<Stratum> = reps.iter().map(|r| Stratum::new(r, q)).collect();
        let mut rng = SplitMix64::new(self.seed);
        let b = self.resamples.max(1);
        let mut per_rep = Vec::with_capacity(strata.len());
        let mut stats = Vec::with_capacity(b);
        for _ in 0..b {
            per_rep.clear();
            per_rep.extend(strata.iter_mut().map(|s| s.resampled(&mut rng)));
            stats.push(median(&mut per_rep)?);
        }
        stats.sort_by(f64::total_cmp);
        let level = self.level.clamp(0.0, 1.0);
        // `as` saturates; the tail is at most half the resamples.
        let tail = (((1.0 - level) / 2.0 * b as f64).round() as usize).min((b - 1) / 2);
        Some(Interval {
            lo: stats[tail],
            hi: stats[b - 1 - tail],
        })
    }

    /// The figure the interval is about: the median over `reps` of each one's quantile `q`
    /// (`None` as for [`Bootstrap::interval`]).
    pub fn statistic(reps: &[&[u64]], q: f64) -> Option<f64> {
        let mut per_rep = Vec::with_capacity(reps.len());
        for r in reps {
            let mut sorted = r.to_vec();
            sorted.sort_unstable();
            per_rep.push(quantile(&sorted, q)? as f64);
        }
        median(&mut per_rep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skewed, latency-like values (µs): an exponential body with a heavy tail.
    fn latencies(n: usize, seed: u64) -> Vec<u64> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|_| {
                let body = -(1.0 - rng.next_unit()).ln() * 50_000.0;
                let tail = if rng.below(20) == 0 { 400_000.0 } else { 0.0 };
                20_000 + (body + tail * rng.next_unit()) as u64
            })
            .collect()
    }

    /// The bootstrap written the slow, obvious way: build every resample, sort it, take its
    /// quantile; the same draws in the same order as [`Bootstrap::interval`].
    fn naive(b: &Bootstrap, reps: &[&[u64]], q: f64) -> Interval {
        let sorted: Vec<Vec<u64>> = reps
            .iter()
            .map(|r| {
                let mut s = r.to_vec();
                s.sort_unstable();
                s
            })
            .collect();
        let mut rng = SplitMix64::new(b.seed);
        let mut stats = Vec::new();
        for _ in 0..b.resamples {
            let mut per_rep = Vec::new();
            for s in &sorted {
                let mut resample: Vec<u64> = (0..s.len()).map(|_| s[rng.below(s.len())]).collect();
                resample.sort_unstable();
                per_rep.push(quantile(&resample, q).expect("values") as f64);
            }
            stats.push(median(&mut per_rep).expect("reps"));
        }
        stats.sort_by(f64::total_cmp);
        let tail = ((1.0 - b.level) / 2.0 * b.resamples as f64).round() as usize;
        Interval {
            lo: stats[tail],
            hi: stats[b.resamples - 1 - tail],
        }
    }

    #[test]
    fn quantile_is_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(
            quantile(&v[..72], 0.99),
            Some(72),
            "72 values: p99 is the max"
        );
        assert_eq!(quantile(&[], 0.99), None);
    }

    #[test]
    fn matches_the_naive_bootstrap() {
        let b = Bootstrap {
            resamples: 400,
            ..Bootstrap::default()
        };
        for seed in 1..=4 {
            let one = latencies(300, seed);
            let two = latencies(250, seed + 100);
            let three = latencies(90, seed + 200);
            let reps: [&[u64]; 3] = [&one, &two, &three];
            for q in [0.5, 0.9, P99] {
                assert_eq!(
                    b.interval(&reps, q),
                    Some(naive(&b, &reps, q)),
                    "{seed} {q}"
                );
                assert_eq!(b.interval(&reps[..1], q), Some(naive(&b, &reps[..1], q)));
            }
        }
    }

    #[test]
    fn interval_contains_the_sample_p99() {
        let b = Bootstrap::default();
        for seed in 1..=8 {
            let one = latencies(1_000, seed);
            let two = latencies(800, seed + 50);
            for reps in [vec![&one[..]], vec![&one[..], &two[..]]] {
                let ci = b.interval(&reps, P99).expect("values");
                let p99 = Bootstrap::statistic(&reps, P99).expect("values");
                assert!(ci.lo <= ci.hi, "{ci:?}");
                assert!(ci.contains(p99), "seed {seed}: {p99} outside {ci:?}");
                assert!(ci.lo < ci.hi, "a spread sample gives a spread interval");
            }
        }
    }

    #[test]
    fn constant_sample_has_zero_width() {
        let v = vec![123_456; 500];
        let ci = Bootstrap::default().interval(&[&v, &v[..10]], P99);
        assert_eq!(
            ci,
            Some(Interval {
                lo: 123_456.0,
                hi: 123_456.0
            })
        );
    }

    #[test]
    fn deterministic_for_a_seed() {
        let v = latencies(600, 7);
        let b = Bootstrap::default();
        let first = b.interval(&[&v], P99);
        assert_eq!(first, b.interval(&[&v], P99));
        let mut shuffled = v.clone();
        shuffled.reverse();
        assert_eq!(
            first,
            b.interval(&[&shuffled], P99),
            "input order is irrelevant"
        );
        let other = Bootstrap { seed: 99, ..b }.interval(&[&v], P99);
        assert_ne!(first, other, "the seed drives the resamples");
    }

    #[test]
    fn fewer_samples_give_a_wider_interval() {
        let b = Bootstrap::default();
        let width = |n: usize, seed: u64| {
            let v = latencies(n, seed);
            let ci = b.interval(&[&v], P99).expect("values");
            ci.hi - ci.lo
        };
        for seed in 1..=4 {
            let (small, large) = (width(300, seed), width(6_000, seed));
            assert!(
                small > large,
                "seed {seed}: n=300 {small} vs n=6000 {large}"
            );
        }
    }

    #[test]
    fn no_interval_without_values() {
        let b = Bootstrap::default();
        let v = latencies(10, 1);
        assert_eq!(b.interval(&[], P99), None);
        assert_eq!(b.interval(&[&v, &[]], P99), None, "one rep without samples");
        assert_eq!(Bootstrap::statistic(&[&v, &[]], P99), None);
    }

    #[test]
    fn separation_of_intervals() {
        let i = |lo, hi| Interval { lo, hi };
        assert_eq!(i(1.0, 2.0).separation(i(3.0, 4.0)), Separation::Below);
        assert_eq!(i(3.0, 4.0).separation(i(1.0, 2.0)), Separation::Above);
        assert_eq!(i(1.0, 3.0).separation(i(2.0, 4.0)), Separation::Overlap);
        assert_eq!(
            i(1.0, 2.0).separation(i(2.0, 4.0)),
            Separation::Overlap,
            "touching"
        );
        assert_eq!(
            i(0.0, 9.0).separation(i(2.0, 4.0)),
            Separation::Overlap,
            "nested"
        );
        assert_eq!(i(1.0, 2.0).scaled(1e-3), i(1e-3, 2e-3));
    }
}
