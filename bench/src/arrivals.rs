//! More arrival processes: Gamma-distributed gaps (bursty or smooth) and a diurnal ramp, as
//! complete, seeded lists of offsets.
//!
//! Every kind is an open-loop schedule computed up front (like [`crate::schedule`]): the same
//! `(rate, duration, kind, seed)` always gives the same offsets, and nothing looks at a clock.
//!
//! **How the kinds are built.** Each kind first draws a *renewal process in operational time*,
//! where one unit is one expected arrival: independent gaps of mean 1, exponential for Poisson
//! and Gamma-distributed (Marsaglia–Tsang) with the chosen coefficient of variation otherwise.
//! Operational time `u` then maps to wall time `t` by inverting the cumulative rate `Λ(t) = u`:
//! for a flat rate `Λ(t) = rate·t`; for the diurnal ramp `λ(t) = rate·(1 − a·cos(2πt/D))` over a
//! run of length `D`, so `Λ(t) = rate·(t − a·D/(2π)·sin(2πt/D))`, inverted numerically (Newton
//! steps kept inside a bisection bracket). One whole cycle spans the run: the rate is lowest at
//! the start and the end (`rate·(1 − a)`), highest half way (`rate·(1 + a)`), and
//! `Λ(D) = rate·D`, so the mean rate over the run is exactly `rate`. Time rescaling keeps the
//! gaps' shape: a Gamma process over the ramp is bursty *and* follows the day.

use std::f64::consts::TAU;
use std::time::Duration;

use crate::schedule::{Arrivals, Schedule, SplitMix64};

/// How arrivals are spaced (see the module docs for the construction).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArrivalKind {
    /// Poisson arrivals at a flat rate: exactly the offsets of
    /// [`Schedule`]`::new(`[`Arrivals::Poisson`]`, ..)` for the same seed.
    Poisson,
    /// A renewal process at a flat rate whose gaps are Gamma-distributed with mean `1/rate` and
    /// coefficient of variation `cv` (standard deviation over mean): `cv` 1 is exponential,
    /// below 1 smoother than Poisson, above 1 bursty.
    Gamma {
        /// Coefficient of variation of the gaps; clamped to `[0.01, 10]`, 1 when not a number.
        cv: f64,
    },
    /// Poisson arrivals whose rate follows one sinusoidal cycle over the run, from
    /// `rate·(1 − amplitude)` at the start and the end to `rate·(1 + amplitude)` half way; the
    /// mean over the run stays `rate`.
    Diurnal {
        /// Relative swing of the rate; clamped to `[0, 0.95]`, 0 when not a number.
        amplitude: f64,
    },
    /// Gamma gaps (bursts) over the diurnal ramp: both of the above at once.
    GammaDiurnal {
        /// Coefficient of variation of the gaps in operational time (as in `Gamma`).
        cv: f64,
        /// Relative swing of the rate (as in `Diurnal`).
        amplitude: f64,
    },
}

impl ArrivalKind {
    /// A short description for reports, such as `gamma(cv=2)` or `diurnal(a=0.5)`.
    pub fn name(self) -> String {
        match self {
            ArrivalKind::Poisson => "poisson".to_string(),
            ArrivalKind::Gamma { cv } => format!("gamma(cv={})", clamp_cv(cv)),
            ArrivalKind::Diurnal { amplitude } => {
                format!("diurnal(a={})", clamp_amplitude(amplitude))
            }
            ArrivalKind::GammaDiurnal { cv, amplitude } => format!(
                "gamma-diurnal(cv={},a={})",
                clamp_cv(cv),
                clamp_amplitude(amplitude)
            ),
        }
    }
}

/// The arrival offsets of one run: at mean `rate` per second, from offset zero up to
/// (excluding) `duration`, in order, drawn from `seed`. A rate that is not a positive finite
/// number, or an empty duration, yields no arrivals.
pub fn arrivals(rate: f64, duration: Duration, kind: ArrivalKind, seed: u64) -> Vec<Duration> {
    if !(rate.is_finite() && rate > 0.0) || duration.is_zero() {
        return Vec::new();
    }
    let (cv, amplitude) = match kind {
        ArrivalKind::Poisson => {
            return Schedule::new(Arrivals::Poisson, rate, duration, seed).collect()
        }
        ArrivalKind::Gamma { cv } => (cv, 0.0),
        ArrivalKind::Diurnal { amplitude } => (1.0, amplitude),
        ArrivalKind::GammaDiurnal { cv, amplitude } => (cv, amplitude),
    };
    let cv = clamp_cv(cv);
    let shape = 1.0 / (cv * cv);
    let ramp = Ramp {
        rate,
        span: duration.as_secs_f64(),
        amplitude: clamp_amplitude(amplitude),
    };
    let end_ns = duration.as_nanos();
    let total = rate * ramp.span;
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(total.ceil().min(1e8) as usize);
    let mut u = unit_gap(&mut rng, shape);
    let mut t = 0.0;
    while u < total {
        t = ramp.invert(u, t);
        let at_ns = (t * 1e9).round();
        if at_ns as u128 >= end_ns {
            break;
        }
        out.push(Duration::from_nanos(at_ns as u64));
        u += unit_gap(&mut rng, shape);
    }
    out
}

/// The diurnal rate at offset `at` of a run of length `duration` (per second): what
/// [`ArrivalKind::Diurnal`] with `amplitude` follows around its mean `rate`.
pub fn diurnal_rate(rate: f64, duration: Duration, amplitude: f64, at: Duration) -> f64 {
    let span = duration.as_secs_f64();
    if span <= 0.0 {
        return rate;
    }
    rate * (1.0 - clamp_amplitude(amplitude) * (TAU * at.as_secs_f64() / span).cos())
}

fn clamp_cv(cv: f64) -> f64 {
    if cv.is_nan() {
        1.0
    } else {
        cv.clamp(0.01, 10.0)
    }
}

fn clamp_amplitude(a: f64) -> f64 {
    if a.is_nan() {
        0.0
    } else {
        a.clamp(0.0, 0.95)
    }
}

/// One gap in operational time: mean 1, coefficient of variation `1/sqrt(shape)`.
fn unit_gap(rng: &mut SplitMix64, shape: f64) -> f64 {
    if shape == 1.0 {
        // Exponential by the inverse CDF; 1 - u lies in (0, 1], so ln is finite.
        -(1.0 - rng.next_unit()).ln()
    } else {
        gamma(rng, shape) / shape
    }
}

/// A Gamma(`shape`, 1) variate by Marsaglia and Tsang (2000), "A simple method for generating
/// gamma variables"; shapes below 1 use `Gamma(shape + 1) · U^(1/shape)`.
fn gamma(rng: &mut SplitMix64, shape: f64) -> f64 {
    if shape < 1.0 {
        let u = 1.0 - rng.next_unit();
        return gamma(rng, shape + 1.0) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - rng.next_unit();
        let x2 = x * x;
        if u < 1.0 - 0.0331 * x2 * x2 || u.ln() < 0.5 * x2 + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// A standard normal variate (Box–Muller, one of the pair).
fn normal(rng: &mut SplitMix64) -> f64 {
    let r = (-2.0 * (1.0 - rng.next_unit()).ln()).sqrt();
    r * (TAU * rng.next_unit()).cos()
}

/// The cumulative rate of a run and its inverse.
struct Ramp {
    /// Mean arrivals per second.
    rate: f64,
    /// Run length in seconds.
    span: f64,
    /// Relative swing of the rate (0: flat).
    amplitude: f64,
}

impl Ramp {
    /// Expected arrivals in `[0, t)`.
    fn cumulative(&self, t: f64) -> f64 {
        self.rate * (t - self.amplitude * self.span / TAU * (TAU * t / self.span).sin())
    }

    /// The rate at `t`.
    fn at(&self, t: f64) -> f64 {
        self.rate * (1.0 - self.amplitude * (TAU * t / self.span).cos())
    }

    /// The `t` with `cumulative(t) = u`, knowing it is at least `after` (the previous arrival).
    fn invert(&self, u: f64, after: f64) -> f64 {
        if self.amplitude == 0.0 {
            return u / self.rate;
        }
        // The rate lies in [rate·(1 − a), rate·(1 + a)], which brackets the answer.
        let mut lo = after.max(u / (self.rate * (1.0 + self.amplitude)));
        let mut hi = (u / (self.rate * (1.0 - self.amplitude))).min(self.span);
        let mut t = 0.5 * (lo + hi);
        for _ in 0..100 {
            let f = self.cumulative(t) - u;
            if f > 0.0 {
                hi = t;
            } else {
                lo = t;
            }
            let next = t - f / self.at(t);
            let next = if next > lo && next < hi {
                next
            } else {
                0.5 * (lo + hi)
            };
            if (next - t).abs() <= 1e-12 * self.span.max(1.0) {
                return next;
            }
            t = next;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(o: &[Duration]) -> Vec<f64> {
        o.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect()
    }

    fn mean_cv(x: &[f64]) -> (f64, f64) {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt() / mean)
    }

    /// Arrivals per window of `width` over `[0, span)`.
    fn counts(o: &[Duration], span: Duration, width: Duration) -> Vec<f64> {
        let n = (span.as_nanos() / width.as_nanos()) as usize;
        let mut c = vec![0.0; n];
        for at in o {
            let i = (at.as_nanos() / width.as_nanos()) as usize;
            if i < n {
                c[i] += 1.0;
            }
        }
        c
    }

    fn in_range(o: &[Duration], from: f64, to: f64) -> usize {
        o.iter()
            .filter(|d| (from..to).contains(&d.as_secs_f64()))
            .count()
    }

    const KINDS: [ArrivalKind; 4] = [
        ArrivalKind::Poisson,
        ArrivalKind::Gamma { cv: 2.0 },
        ArrivalKind::Diurnal { amplitude: 0.5 },
        ArrivalKind::GammaDiurnal {
            cv: 3.0,
            amplitude: 0.5,
        },
    ];

    #[test]
    fn every_kind_is_deterministic_ordered_and_inside_the_run() {
        let span = Duration::from_secs(20);
        for kind in KINDS {
            let a = arrivals(200.0, span, kind, 11);
            let b = arrivals(200.0, span, kind, 11);
            let c = arrivals(200.0, span, kind, 12);
            assert_eq!(a, b, "{}", kind.name());
            assert_ne!(a, c, "{}", kind.name());
            assert!(a.windows(2).all(|w| w[0] <= w[1]), "{}", kind.name());
            assert!(a.iter().all(|d| *d < span), "{}", kind.name());
            assert!(a.len() > 3000, "{}: {}", kind.name(), a.len());
        }
    }

    #[test]
    fn poisson_is_the_schedule_poisson() {
        let span = Duration::from_secs(5);
        let a = arrivals(300.0, span, ArrivalKind::Poisson, 3);
        let b: Vec<Duration> = Schedule::new(Arrivals::Poisson, 300.0, span, 3).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn poisson_statistics() {
        // 200k arrivals at 1000/s.
        let span = Duration::from_secs(200);
        let o = arrivals(1000.0, span, ArrivalKind::Poisson, 5);
        let (mean, cv) = mean_cv(&gaps(&o));
        assert!((mean * 1000.0 - 1.0).abs() < 0.02, "mean gap {mean}");
        assert!((cv - 1.0).abs() < 0.03, "cv {cv}");
        // Counts per 10 ms window are Poisson(10): variance equals the mean (index of
        // dispersion 1; its standard error over 20k windows is about 1%).
        let c = counts(&o, span, Duration::from_millis(10));
        let (m, cv_counts) = mean_cv(&c);
        let dispersion = (cv_counts * m).powi(2) / m;
        assert!((m / 10.0 - 1.0).abs() < 0.02, "mean count {m}");
        assert!(
            (dispersion - 1.0).abs() < 0.06,
            "variance/mean {dispersion}"
        );
    }

    #[test]
    fn gamma_gaps_have_the_mean_and_cv_asked_for() {
        // 400k arrivals each: the mean gap's standard error is below 0.7% even at cv 4.
        let span = Duration::from_secs(400);
        for (cv, seed) in [(0.5, 1), (1.0, 2), (2.0, 3), (4.0, 4)] {
            let o = arrivals(1000.0, span, ArrivalKind::Gamma { cv }, seed);
            let (mean, got) = mean_cv(&gaps(&o));
            assert!(
                (mean * 1000.0 - 1.0).abs() < 0.03,
                "cv {cv}: mean gap {mean}"
            );
            assert!((got / cv - 1.0).abs() < 0.05, "cv {cv}: got {got}");
        }
    }

    #[test]
    fn bursty_gaps_make_counts_overdispersed() {
        // For a renewal process the long-window index of dispersion tends to cv².
        let span = Duration::from_secs(400);
        let o = arrivals(1000.0, span, ArrivalKind::Gamma { cv: 2.0 }, 9);
        let (m, cv_counts) = mean_cv(&counts(&o, span, Duration::from_secs(1)));
        let dispersion = (cv_counts * m).powi(2) / m;
        assert!(
            (2.5..6.0).contains(&dispersion),
            "variance/mean {dispersion}"
        );
        let o = arrivals(1000.0, span, ArrivalKind::Gamma { cv: 0.5 }, 9);
        let (m, cv_counts) = mean_cv(&counts(&o, span, Duration::from_secs(1)));
        let dispersion = (cv_counts * m).powi(2) / m;
        assert!(dispersion < 0.5, "variance/mean {dispersion}");
    }

    #[test]
    fn gamma_sampler_matches_its_moments() {
        let mut rng = SplitMix64::new(77);
        for shape in [0.0625, 0.25, 1.0, 4.0, 30.0] {
            let x: Vec<f64> = (0..200_000).map(|_| gamma(&mut rng, shape)).collect();
            let (mean, cv) = mean_cv(&x);
            assert!(
                (mean / shape - 1.0).abs() < 0.04,
                "shape {shape}: mean {mean}"
            );
            let want = 1.0 / shape.sqrt();
            assert!((cv / want - 1.0).abs() < 0.05, "shape {shape}: cv {cv}");
            assert!(x.iter().all(|v| v.is_finite() && *v >= 0.0));
        }
    }

    #[test]
    fn diurnal_keeps_the_mean_rate_and_peaks_half_way() {
        let span = Duration::from_secs(200);
        for kind in [
            ArrivalKind::Diurnal { amplitude: 0.5 },
            ArrivalKind::GammaDiurnal {
                cv: 3.0,
                amplitude: 0.5,
            },
        ] {
            let o = arrivals(1000.0, span, kind, 21);
            let n = o.len() as f64;
            assert!((n / 200_000.0 - 1.0).abs() < 0.03, "{}: {n}", kind.name());
            // The quarter centred on the peak (t = 100 s) against the quarter centred on the
            // trough (the first and last eighths). Expected 1 + 0.9a and 1 - 0.9a of the mean.
            let peak = in_range(&o, 75.0, 125.0) as f64;
            let trough = (in_range(&o, 0.0, 25.0) + in_range(&o, 175.0, 200.0)) as f64;
            let quarter = n / 4.0;
            assert!(
                (peak / quarter / 1.45 - 1.0).abs() < 0.05,
                "{}: peak {peak}",
                kind.name()
            );
            assert!(
                (trough / quarter / 0.55 - 1.0).abs() < 0.08,
                "{}: trough {trough}",
                kind.name()
            );
            assert!(peak > 2.0 * trough, "{}", kind.name());
        }
    }

    #[test]
    fn diurnal_rate_is_the_documented_curve() {
        let d = Duration::from_secs(100);
        let r = |s: u64| diurnal_rate(10.0, d, 0.5, Duration::from_secs(s));
        assert!((r(0) - 5.0).abs() < 1e-9);
        assert!((r(50) - 15.0).abs() < 1e-9);
        assert!((r(25) - 10.0).abs() < 1e-9);
        let ramp = Ramp {
            rate: 10.0,
            span: 100.0,
            amplitude: 0.5,
        };
        assert!((ramp.cumulative(100.0) - 1000.0).abs() < 1e-9);
        for u in [0.5, 10.0, 333.3, 999.9] {
            let t = ramp.invert(u, 0.0);
            assert!((ramp.cumulative(t) - u).abs() < 1e-6, "u {u} t {t}");
        }
    }

    #[test]
    fn degenerate_parameters() {
        let span = Duration::from_secs(1);
        for kind in KINDS {
            assert!(arrivals(0.0, span, kind, 1).is_empty());
            assert!(arrivals(f64::NAN, span, kind, 1).is_empty());
            assert!(arrivals(100.0, Duration::ZERO, kind, 1).is_empty());
        }
        // Out-of-range shapes are clamped, not rejected.
        let o = arrivals(1000.0, span, ArrivalKind::Gamma { cv: f64::NAN }, 1);
        assert!((800..1200).contains(&o.len()), "{}", o.len());
        let o = arrivals(1000.0, span, ArrivalKind::Diurnal { amplitude: 7.0 }, 1);
        assert!((800..1200).contains(&o.len()), "{}", o.len());
        assert_eq!(
            ArrivalKind::Diurnal { amplitude: 7.0 }.name(),
            "diurnal(a=0.95)"
        );
    }
}
