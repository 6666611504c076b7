//! When each request is due: a pure, seeded arrival process.
//!
//! The schedule is computed before anything is sent and never looks at a clock or at responses,
//! which is what makes the generator open loop: a slow target cannot slow the arrivals down.

use std::time::Duration;

/// How arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    /// A Poisson process: independent, exponentially distributed gaps with mean `1/rate`.
    Poisson,
    /// Evenly spaced: arrival `i` is due at exactly `i/rate`.
    Uniform,
}

impl Arrivals {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arrivals::Poisson => "poisson",
            Arrivals::Uniform => "uniform",
        }
    }
}

/// SplitMix64: a tiny, well-mixed 64-bit generator. Good enough for arrival gaps, and it makes
/// the schedule reproducible from one `u64` seed without another dependency. Also the generator
/// of the other arrival kinds (`arrivals`) and of the workloads (`workload`).
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole output is determined by `seed`.
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 uniformly distributed bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub(crate) fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (0 when `n` is 0). Multiply-shift: the bias is below `n / 2^64`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub(crate) fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }
}

/// The arrival times of one run, as offsets from its start, in order. An iterator: arrivals are
/// produced one at a time, so a long run at a high rate needs no memory for its schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// How gaps are drawn.
    kind: Arrivals,
    /// Mean arrivals per second.
    rate: f64,
    /// Gap generator (Poisson only).
    rng: SplitMix64,
    /// Index of the next arrival.
    index: u64,
    /// Offset of the next Poisson arrival in nanoseconds (accumulated as f64 to avoid rounding drift).
    next_ns: f64,
    /// No arrival at or after this offset (nanoseconds).
    end_ns: f64,
}

impl Schedule {
    /// Arrivals at `rate` per second from offset zero up to (excluding) `span`, drawn from `seed`.
    /// A rate that is not a positive finite number yields no arrivals.
    pub fn new(kind: Arrivals, rate: f64, span: Duration, seed: u64) -> Schedule {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            0.0
        };
        let mut schedule = Schedule {
            kind,
            rate,
            rng: SplitMix64::new(seed),
            index: 0,
            next_ns: 0.0,
            end_ns: if rate > 0.0 {
                span.as_nanos() as f64
            } else {
                0.0
            },
        };
        if kind == Arrivals::Poisson && rate > 0.0 {
            schedule.next_ns = schedule.poisson_gap_ns();
        }
        schedule
    }

    fn poisson_gap_ns(&mut self) -> f64 {
        // Inverse CDF of the exponential distribution; 1 - u lies in (0, 1], so ln is finite.
        -(1.0 - self.rng.next_unit()).ln() * 1e9 / self.rate
    }
}

impl Iterator for Schedule {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.rate <= 0.0 {
            return None;
        }
        let at_ns = match self.kind {
            // Computed from the index, not accumulated: spacing is exact and cannot drift.
            Arrivals::Uniform => self.index as f64 * 1e9 / self.rate,
            Arrivals::Poisson => self.next_ns,
        };
        if at_ns >= self.end_ns {
            return None;
        }
        self.index += 1;
        if self.kind == Arrivals::Poisson {
            self.next_ns += self.poisson_gap_ns();
        }
        Some(Duration::from_nanos(at_ns.round() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(kind: Arrivals, rate: f64, secs: u64, seed: u64) -> Vec<Duration> {
        Schedule::new(kind, rate, Duration::from_secs(secs), seed).collect()
    }

    #[test]
    fn poisson_is_deterministic_for_a_seed() {
        let a = offsets(Arrivals::Poisson, 1000.0, 2, 7);
        let b = offsets(Arrivals::Poisson, 1000.0, 2, 7);
        let c = offsets(Arrivals::Poisson, 1000.0, 2, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] <= w[1]), "offsets are ordered");
    }

    #[test]
    fn poisson_mean_rate_is_close_to_the_target() {
        // 200k arrivals: the relative standard error of the count is about 0.2%.
        for seed in [1, 2, 3] {
            let n = offsets(Arrivals::Poisson, 5000.0, 40, seed).len() as f64;
            let rate = n / 40.0;
            assert!(
                (rate / 5000.0 - 1.0).abs() < 0.02,
                "seed {seed}: rate {rate}"
            );
        }
    }

    #[test]
    fn poisson_gaps_look_exponential() {
        // For an exponential distribution the standard deviation equals the mean.
        let o = offsets(Arrivals::Poisson, 1000.0, 100, 42);
        let gaps: Vec<f64> = o.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!((mean * 1000.0 - 1.0).abs() < 0.03, "mean gap {mean}");
        assert!(
            (var.sqrt() / mean - 1.0).abs() < 0.05,
            "cv {}",
            var.sqrt() / mean
        );
    }

    #[test]
    fn uniform_spacing_is_exact() {
        let o = offsets(Arrivals::Uniform, 1000.0, 3, 0);
        assert_eq!(o.len(), 3000);
        for (i, at) in o.iter().enumerate() {
            assert_eq!(*at, Duration::from_millis(i as u64));
        }
        // A rate whose period is not a whole number of nanoseconds does not drift either.
        let o = offsets(Arrivals::Uniform, 3.0, 10, 0);
        assert_eq!(o.len(), 30);
        assert_eq!(o[29], Duration::from_nanos(9_666_666_667));
    }

    #[test]
    fn no_rate_no_arrivals() {
        assert_eq!(offsets(Arrivals::Poisson, 0.0, 1, 1).len(), 0);
        assert_eq!(offsets(Arrivals::Uniform, f64::NAN, 1, 1).len(), 0);
    }
}
