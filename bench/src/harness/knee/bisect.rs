//! The knee's search as a state machine fed probe outcomes: no I/O, no clock.
//!
//! Rules (said again in `knee.md`):
//! - probe `low` first. If it meets the SLO, probe `high`; while the highest rate probed meets,
//!   double it (up to `cap`; a met `cap` ends the search with the knee at the cap, "at least").
//! - If `low` fails, halve it (down to `floor`; a failed `floor` ends the search with no knee).
//! - Once one rate met and a higher one failed, probe their geometric mean, replacing the bound
//!   of the same outcome, until `lowest failed / highest met <= 1 + tolerance`.
//! - Computed rates are rounded to [`SIGNIFICANT_DIGITS`] significant digits (file names stay
//!   short); `low`, `high`, `floor` and `cap` are probed as given.
//!
//! The knee reported is always a rate that was probed and met; the lowest failed is always a
//! rate that was probed and failed, and it lies above the knee.

use std::fmt;

/// Significant digits of the rates the search computes (0.1 % resolution at worst).
pub const SIGNIFICANT_DIGITS: i32 = 4;
/// The smallest tolerance accepted (ten times the rounding's resolution).
pub const MIN_TOLERANCE: f64 = 0.01;

/// Where the search starts and how far it may go, in requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bracket {
    /// The first rate probed; expected to meet the SLO.
    pub low: f64,
    /// The second rate probed; expected to fail it.
    pub high: f64,
    /// The lowest rate halving may reach.
    pub floor: f64,
    /// The highest rate doubling may reach.
    pub cap: f64,
    /// Stop when `lowest failed / highest met <= 1 + tolerance`.
    pub tolerance: f64,
}

/// A bracket that cannot be searched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BisectError {
    /// `low` and `high` are not positive with `low < high`.
    #[error("--low {low} and --high {high}: need 0 < low < high")]
    Bracket {
        /// The low end.
        low: f64,
        /// The high end.
        high: f64,
    },
    /// The floor is not positive or above `low`.
    #[error("--floor {floor}: need 0 < floor <= low ({low})")]
    Floor {
        /// The floor.
        floor: f64,
        /// The low end.
        low: f64,
    },
    /// The cap is below `high` or not finite.
    #[error("--cap {cap}: need a finite cap >= high ({high})")]
    Cap {
        /// The cap.
        cap: f64,
        /// The high end.
        high: f64,
    },
    /// The tolerance is too small or not finite.
    #[error("--tolerance {0}: need a finite tolerance >= 0.01")]
    Tolerance(f64),
    /// An outcome was recorded for a rate the search did not ask for.
    #[error("an outcome for rate {got} while the search asked for {asked:?}")]
    Unasked {
        /// The rate recorded.
        got: f64,
        /// The rate asked for, if any.
        asked: Option<f64>,
    },
}

/// What the search did besides bisecting; said in the output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// `from` met at or above `high`: the next probe is `to` (doubled, at most the cap).
    Grew {
        /// The rate that met.
        from: f64,
        /// The next rate.
        to: f64,
    },
    /// The cap met: the knee is at least the cap.
    CapMet(f64),
    /// `from` failed at or below `low`: the next probe is `to` (halved, at least the floor).
    Shrunk {
        /// The rate that failed.
        from: f64,
        /// The next rate.
        to: f64,
    },
    /// The floor failed: no rate met.
    FloorFailed(f64),
    /// The bracket is wider than the tolerance but rounding leaves no rate inside it.
    Resolution {
        /// Highest met.
        met: f64,
        /// Lowest failed.
        failed: f64,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Grew { from, to } => {
                write!(f, "{from} req/s met at or above --high: doubled to {to}")
            }
            Event::CapMet(cap) => write!(
                f,
                "the cap {cap} req/s met: the knee is at least the cap (raise --cap)"
            ),
            Event::Shrunk { from, to } => {
                write!(f, "{from} req/s failed at or below --low: halved to {to}")
            }
            Event::FloorFailed(floor) => write!(
                f,
                "the floor {floor} req/s failed: no rate met (lower --floor)"
            ),
            Event::Resolution { met, failed } => write!(
                f,
                "no rounded rate between {met} and {failed}: stopped above the tolerance"
            ),
        }
    }
}

/// What the search asks for next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Probe this rate and [`Bisection::record`] the outcome.
    Probe(f64),
    /// The search is over.
    Done(Knee),
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Knee {
    /// The highest rate that met (`None`: none did, down to the floor).
    pub knee: Option<f64>,
    /// The lowest rate that failed (`None`: none did, up to the cap).
    pub lowest_failed: Option<f64>,
    /// Every probe in order: rate and whether it met.
    pub probes: Vec<(f64, bool)>,
    /// Growth, shrinking and stops, in order.
    pub events: Vec<Event>,
}

impl Knee {
    /// True when the cap met, so the knee is only a lower bound.
    pub fn capped(&self) -> bool {
        self.events.iter().any(|e| matches!(e, Event::CapMet(_)))
    }
}

/// The search: ask [`Bisection::next`], probe, [`Bisection::record`], until
/// [`Step::Done`].
#[derive(Debug, Clone)]
pub struct Bisection {
    bracket: Bracket,
    met: Option<f64>,
    failed: Option<f64>,
    asked: Option<f64>,
    probes: Vec<(f64, bool)>,
    events: Vec<Event>,
}

impl Bisection {
    /// A search over a checked bracket; its first probe is `low`.
    pub fn new(bracket: Bracket) -> Result<Bisection, BisectError> {
        check(&bracket)?;
        Ok(Bisection {
            bracket,
            met: None,
            failed: None,
            asked: Some(bracket.low),
            probes: Vec::new(),
            events: Vec::new(),
        })
    }

    /// The next rate to probe, or the answer.
    pub fn next(&self) -> Step {
        match self.asked {
            Some(rate) => Step::Probe(rate),
            None => Step::Done(Knee {
                knee: self.met,
                lowest_failed: self.failed,
                probes: self.probes.clone(),
                events: self.events.clone(),
            }),
        }
    }

    /// Records whether the asked rate met the SLO, and plans the next probe.
    pub fn record(&mut self, rate: f64, met: bool) -> Result<(), BisectError> {
        if self.asked.map(f64::to_bits) != Some(rate.to_bits()) {
            return Err(BisectError::Unasked {
                got: rate,
                asked: self.asked,
            });
        }
        self.probes.push((rate, met));
        if met {
            self.met = Some(self.met.map_or(rate, |m| m.max(rate)));
        } else {
            self.failed = Some(self.failed.map_or(rate, |f| f.min(rate)));
        }
        self.asked = self.plan();
        Ok(())
    }

    fn plan(&mut self) -> Option<f64> {
        let b = self.bracket;
        match (self.met, self.failed) {
            (None, None) => Some(b.low),
            (Some(m), None) if m < b.high => Some(b.high),
            (Some(m), None) if m >= b.cap => {
                self.events.push(Event::CapMet(m));
                None
            }
            (Some(m), None) => {
                let to = if 2.0 * m >= b.cap {
                    b.cap
                } else {
                    round_rate(2.0 * m)
                };
                self.events.push(Event::Grew { from: m, to });
                Some(to)
            }
            (None, Some(f)) if f <= b.floor => {
                self.events.push(Event::FloorFailed(f));
                None
            }
            (None, Some(f)) => {
                let to = if f / 2.0 <= b.floor {
                    b.floor
                } else {
                    round_rate(f / 2.0)
                };
                self.events.push(Event::Shrunk { from: f, to });
                Some(to)
            }
            (Some(m), Some(f)) if f / m <= 1.0 + b.tolerance => None,
            (Some(m), Some(f)) => {
                let mid = round_rate((m * f).sqrt());
                if mid > m && mid < f {
                    Some(mid)
                } else {
                    self.events.push(Event::Resolution { met: m, failed: f });
                    None
                }
            }
        }
    }
}

fn check(b: &Bracket) -> Result<(), BisectError> {
    if !(b.low.is_finite() && b.high.is_finite() && b.low > 0.0 && b.low < b.high) {
        return Err(BisectError::Bracket {
            low: b.low,
            high: b.high,
        });
    }
    if !(b.floor.is_finite() && b.floor > 0.0 && b.floor <= b.low) {
        return Err(BisectError::Floor {
            floor: b.floor,
            low: b.low,
        });
    }
    if !(b.cap.is_finite() && b.cap >= b.high) {
        return Err(BisectError::Cap {
            cap: b.cap,
            high: b.high,
        });
    }
    if !(b.tolerance.is_finite() && b.tolerance >= MIN_TOLERANCE) {
        return Err(BisectError::Tolerance(b.tolerance));
    }
    Ok(())
}

/// `x` rounded to [`SIGNIFICANT_DIGITS`] significant digits (integer arithmetic on the
/// mantissa, so `6.324` comes out as the double nearest 6.324).
pub fn round_rate(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return x;
    }
    let p = SIGNIFICANT_DIGITS - 1 - x.log10().floor() as i32;
    if p >= 0 {
        let k = 10f64.powi(p);
        (x * k).round() / k
    } else {
        let k = 10f64.powi(-p);
        (x / k).round() * k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::SplitMix64;

    fn bracket(low: f64, high: f64, floor: f64, cap: f64, tolerance: f64) -> Bracket {
        Bracket {
            low,
            high,
            floor,
            cap,
            tolerance,
        }
    }

    /// Runs the search against `meets` to the end.
    fn search(b: Bracket, mut meets: impl FnMut(f64) -> bool) -> Knee {
        let mut s = Bisection::new(b).unwrap();
        for _ in 0..10_000 {
            match s.next() {
                Step::Probe(rate) => s.record(rate, meets(rate)).unwrap(),
                Step::Done(knee) => return knee,
            }
        }
        panic!("the search did not end");
    }

    /// The naive reference: the highest point of a fine geometric grid from the floor to the
    /// cap (the cap included) that meets, scanning every point.
    fn naive(b: Bracket, meets: impl Fn(f64) -> bool, step: f64) -> Option<f64> {
        let mut best = None;
        let mut r = b.floor;
        while r < b.cap {
            if meets(r) {
                best = Some(r);
            }
            r *= step;
        }
        if meets(b.cap) {
            best = Some(b.cap);
        }
        best
    }

    #[test]
    fn bisects_inside_the_first_bracket() {
        let knee = search(bracket(2.0, 16.0, 1.0, 64.0, 0.1), |r| r <= 6.0);
        let (k, f) = (knee.knee.unwrap(), knee.lowest_failed.unwrap());
        assert!(k <= 6.0 && 6.0 < f && f / k <= 1.1, "{knee:?}");
        assert_eq!(knee.probes[..2], [(2.0, true), (16.0, false)]);
        assert!(knee.events.is_empty(), "{:?}", knee.events);
        // Every probe after the first two lies strictly inside the bracket so far.
        assert_eq!(knee.probes[2].0, round_rate((2.0f64 * 16.0).sqrt()));
    }

    #[test]
    fn grows_by_doubling_while_high_meets_and_says_so() {
        let knee = search(bracket(1.0, 2.0, 0.5, 64.0, 0.1), |r| r <= 9.0);
        let rates: Vec<f64> = knee.probes.iter().map(|p| p.0).collect();
        assert_eq!(rates[..5], [1.0, 2.0, 4.0, 8.0, 16.0]);
        assert_eq!(
            knee.events[..3],
            [
                Event::Grew { from: 2.0, to: 4.0 },
                Event::Grew { from: 4.0, to: 8.0 },
                Event::Grew {
                    from: 8.0,
                    to: 16.0
                },
            ]
        );
        let (k, f) = (knee.knee.unwrap(), knee.lowest_failed.unwrap());
        assert!(k <= 9.0 && 9.0 < f && f / k <= 1.1, "{knee:?}");
        assert!(!knee.capped());
    }

    #[test]
    fn a_met_cap_ends_the_search_at_the_cap() {
        let knee = search(bracket(1.0, 2.0, 0.5, 5.0, 0.1), |_| true);
        let rates: Vec<f64> = knee.probes.iter().map(|p| p.0).collect();
        assert_eq!(rates, [1.0, 2.0, 4.0, 5.0], "doubling stops at the cap");
        assert_eq!((knee.knee, knee.lowest_failed), (Some(5.0), None));
        assert!(knee.capped());
        assert_eq!(knee.events.last(), Some(&Event::CapMet(5.0)));
    }

    #[test]
    fn shrinks_by_halving_while_low_fails_and_says_so() {
        let knee = search(bracket(8.0, 16.0, 0.1, 32.0, 0.1), |r| r <= 1.5);
        let rates: Vec<f64> = knee.probes.iter().map(|p| p.0).collect();
        assert_eq!(rates[..4], [8.0, 4.0, 2.0, 1.0]);
        assert_eq!(knee.events[0], Event::Shrunk { from: 8.0, to: 4.0 });
        assert_eq!(knee.events[2], Event::Shrunk { from: 2.0, to: 1.0 });
        let (k, f) = (knee.knee.unwrap(), knee.lowest_failed.unwrap());
        assert!(k <= 1.5 && 1.5 < f && f / k <= 1.1, "{knee:?}");
    }

    #[test]
    fn a_failed_floor_ends_the_search_without_a_knee() {
        let knee = search(bracket(8.0, 16.0, 3.0, 32.0, 0.1), |_| false);
        let rates: Vec<f64> = knee.probes.iter().map(|p| p.0).collect();
        assert_eq!(rates, [8.0, 4.0, 3.0], "halving stops at the floor");
        assert_eq!((knee.knee, knee.lowest_failed), (None, Some(3.0)));
        assert_eq!(knee.events.last(), Some(&Event::FloorFailed(3.0)));
    }

    #[test]
    fn bad_brackets_and_unasked_outcomes_are_refused() {
        for b in [
            bracket(2.0, 2.0, 1.0, 4.0, 0.1),
            bracket(0.0, 2.0, 0.0, 4.0, 0.1),
            bracket(1.0, 2.0, 1.5, 4.0, 0.1),
            bracket(1.0, 2.0, 0.5, 1.5, 0.1),
            bracket(1.0, 2.0, 0.5, f64::INFINITY, 0.1),
            bracket(1.0, 2.0, 0.5, 4.0, 0.001),
        ] {
            assert!(Bisection::new(b).is_err(), "{b:?}");
        }
        let mut s = Bisection::new(bracket(1.0, 2.0, 0.5, 4.0, 0.1)).unwrap();
        assert!(matches!(
            s.record(2.0, true),
            Err(BisectError::Unasked { .. })
        ));
        assert_eq!(s.next(), Step::Probe(1.0));
    }

    #[test]
    fn rounding_keeps_four_significant_digits() {
        assert_eq!(round_rate(6.324_555_320_336_759), 6.325);
        assert_eq!(round_rate(123_456.0), 123_500.0);
        assert_eq!(round_rate(0.012_345_6), 0.012_35);
        assert_eq!(round_rate(8.0), 8.0);
    }

    /// Property: for a monotone threshold (meets exactly when `rate <= t`), the answer brackets
    /// `t` within the tolerance, agrees with the naive grid scan, and the knee met; a `t` below
    /// the floor gives no knee, one at or above the cap gives the cap.
    #[test]
    fn monotone_thresholds_are_bracketed_within_the_tolerance() {
        let mut rng = SplitMix64::new(15);
        let mut between = 0;
        for case in 0..3_000 {
            let mut u = || rng.next_unit();
            let low = 0.05 * 4_000f64.powf(u());
            let high = low * (1.05 + 20.0 * u());
            let floor = low / (1.0 + 31.0 * u());
            let cap = high * (1.0 + 31.0 * u());
            let tolerance = MIN_TOLERANCE + 0.5 * u();
            let t = (floor / 4.0) * (16.0 * cap / floor).powf(u());
            let b = bracket(low, high, floor, cap, tolerance);
            let meets = |r: f64| r <= t;
            let knee = search(b, meets);
            let at = format!("case {case}: t {t}, {b:?}, {knee:?}");
            for (rate, met) in &knee.probes {
                assert_eq!(*met, meets(*rate), "{at}");
            }
            let step = 1.0 + tolerance / 8.0;
            let reference = naive(b, meets, step);
            match (knee.knee, knee.lowest_failed) {
                (None, Some(f)) => {
                    assert!(t < floor && f == floor && reference.is_none(), "{at}");
                }
                (Some(k), None) => {
                    assert!(t >= cap && k == cap && reference == Some(cap), "{at}");
                    assert!(knee.capped(), "{at}");
                }
                (Some(k), Some(f)) => {
                    between += 1;
                    assert!(k <= t && t < f, "{at}");
                    assert!(f / k <= 1.0 + tolerance, "{at}");
                    assert!(knee.probes.contains(&(k, true)), "{at}");
                    assert!(knee.probes.contains(&(f, false)), "{at}");
                    let r = reference.unwrap_or(floor);
                    assert!(k > r / (1.0 + tolerance) && k < r * step, "{at}");
                }
                (None, None) => panic!("no probe at all: {at}"),
            }
        }
        assert!(between > 1_000, "most cases end inside the bracket");
    }

    /// Property: whatever the outcomes (here random, not monotone), the knee is a rate that
    /// met, the lowest failed a rate that failed, and the knee lies below it.
    #[test]
    fn never_reports_a_knee_that_failed() {
        let mut rng = SplitMix64::new(7);
        for case in 0..2_000 {
            let b = bracket(1.0, 10.0, 0.1, 100.0, 0.05);
            let knee = search(b, |_| rng.next_u64().is_multiple_of(2));
            let at = format!("case {case}: {knee:?}");
            if let Some(k) = knee.knee {
                assert!(knee.probes.contains(&(k, true)), "{at}");
                assert!(!knee.probes.contains(&(k, false)), "{at}");
            }
            if let Some(f) = knee.lowest_failed {
                assert!(knee.probes.contains(&(f, false)), "{at}");
            }
            if let (Some(k), Some(f)) = (knee.knee, knee.lowest_failed) {
                assert!(k < f, "{at}");
            }
        }
    }
}
