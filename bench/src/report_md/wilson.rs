//! The Wilson score interval of a share: how sure a run's "k of n requests met the SLO" is,
//! without the normal approximation's failure at shares of 0 and 1 (a run that met the SLO with
//! every request still gets an interval below 1, narrower the more requests it sent).

use super::bootstrap::Interval;

/// The standard normal quantile of the 95 % two-sided interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The 95 % Wilson score interval of `successes` out of `trials` (`None` when `trials` is 0).
/// Guarantee: `0 <= lo <= successes / trials <= hi <= 1` (a count above `trials` is taken as
/// `trials`).
pub fn wilson95(successes: u64, trials: u64) -> Option<Interval> {
    if trials == 0 {
        return None;
    }
    let n = trials as f64;
    let p = successes.min(trials) as f64 / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(Interval {
        lo: (center - half).clamp(0.0, p),
        hi: (center + half).clamp(p, 1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-5
    }

    #[test]
    fn matches_published_values() {
        // 81 of 263 (Wilson 1927 via Newcombe 1998, table I: 0.2553-0.3662 for 0.308).
        let i = wilson95(81, 263).expect("trials");
        assert!(close(i.lo, 0.2553) && close(i.hi, 0.3662), "{i:?}");
        // 15 of 148: 0.0624-0.1605 (Newcombe 1998, table I).
        let i = wilson95(15, 148).expect("trials");
        assert!(close(i.lo, 0.0624) && close(i.hi, 0.1605), "{i:?}");
    }

    #[test]
    fn all_met_still_has_room_below_one_and_narrows_with_n() {
        let small = wilson95(10, 10).expect("trials");
        let big = wilson95(1000, 1000).expect("trials");
        assert_eq!((small.hi, big.hi), (1.0, 1.0));
        assert!(small.lo < big.lo && big.lo < 1.0, "{small:?} {big:?}");
        assert!(close(big.lo, 0.99617), "{big:?}");
        let none = wilson95(0, 50).expect("trials");
        assert_eq!(none.lo, 0.0);
        assert!(none.hi > 0.0);
        assert!(wilson95(3, 0).is_none());
        assert_eq!(
            wilson95(7, 5),
            wilson95(5, 5),
            "a count above the trials is capped"
        );
    }
}
