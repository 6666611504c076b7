//! Durations (`"500ms"`, `"1.5s"`, `"2m"`, bare integers meaning seconds) and byte sizes
//! (`33554432`, `"32MiB"`, `"100KB"`), parsed exactly with integer arithmetic.

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Duration units, longest suffix first so `ms` is not read as `m`.
const DURATION_UNITS: [(&str, u128); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
];

/// Size units (matched case-insensitively): decimal KB/MB/GB/TB and binary KiB/MiB/GiB/TiB.
const SIZE_UNITS: [(&str, u128); 9] = [
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

/// Parses a duration: a decimal number and a unit (`ns`, `us`, `ms`, `s`, `m`, `h`), or a bare
/// whole number of seconds (`"30"`). Fractions are allowed (`"1.5s"`) down to whole nanoseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = split_number(text);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(format!(
            "expected a duration like \"500ms\", \"2s\" or \"1m\" (got {text:?})"
        ));
    }
    let per_unit = if unit.is_empty() {
        if number.contains('.') {
            return Err(format!(
                "a bare number means whole seconds; add a unit, like \"{number}s\""
            ));
        }
        NANOS_PER_SEC
    } else {
        match DURATION_UNITS.iter().find(|(name, _)| *name == unit) {
            Some((_, nanos)) => *nanos,
            None => {
                return Err(format!(
                "unknown duration unit {unit:?} in {text:?}; expected one of: ns, us, ms, s, m, h"
            ))
            }
        }
    };
    let nanos = scale(number, per_unit).map_err(|why| match why {
        ScaleError::Invalid => {
            format!("expected a duration like \"500ms\", \"2s\" or \"1m\" (got {text:?})")
        }
        ScaleError::Fractional => format!("{text:?} is finer than one nanosecond"),
        ScaleError::Overflow => format!("{text:?} is too large"),
    })?;
    nanos_to_duration(nanos).ok_or_else(|| format!("{text:?} is too large"))
}

/// Parses a byte size: a whole number of bytes (`"1024"`) or a number and a unit, decimal
/// (`B`, `KB`, `MB`, `GB`, `TB`) or binary (`KiB`, `MiB`, `GiB`, `TiB`), case-insensitive.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = split_number(text);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(format!(
            "expected a size in bytes like 33554432, \"32MiB\" or \"100KB\" (got {text:?})"
        ));
    }
    let per_unit = if unit.is_empty() {
        1
    } else {
        let lower = unit.to_ascii_lowercase();
        match SIZE_UNITS.iter().find(|(name, _)| *name == lower) {
            Some((_, bytes)) => *bytes,
            None => {
                return Err(format!(
                    "unknown size unit {unit:?} in {text:?}; expected one of: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
                ))
            }
        }
    };
    let bytes = scale(number, per_unit).map_err(|why| match why {
        ScaleError::Invalid => {
            format!("expected a size in bytes like 33554432, \"32MiB\" or \"100KB\" (got {text:?})")
        }
        ScaleError::Fractional => format!("{text:?} is not a whole number of bytes"),
        ScaleError::Overflow => format!("{text:?} is too large"),
    })?;
    u64::try_from(bytes).map_err(|_| format!("{text:?} is too large"))
}

/// Formats a duration in the largest unit that keeps it whole: `2s`, `500ms`, `1.5s` stays
/// `1500ms`, `90s`, `250us`, `7ns`. Parses back to the same value.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    for (unit, per) in [("s", NANOS_PER_SEC), ("ms", 1_000_000), ("us", 1_000)] {
        if nanos.is_multiple_of(per) {
            return format!("{}{unit}", nanos / per);
        }
    }
    format!("{nanos}ns")
}

/// Splits `"1.5ms"` into `("1.5", "ms")`: the leading digits and dots, then the rest.
fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

enum ScaleError {
    Invalid,
    Fractional,
    Overflow,
}

/// `number * per_unit` exactly, where `number` is `digits[.digits]`.
fn scale(number: &str, per_unit: u128) -> Result<u128, ScaleError> {
    let (whole, frac) = match number.split_once('.') {
        Some((whole, frac)) => (whole, frac),
        None => (number, ""),
    };
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits_only(whole)
        || !digits_only(frac)
        || (number.contains('.') && frac.is_empty())
    {
        return Err(ScaleError::Invalid);
    }
    let whole: u128 = whole.parse().map_err(|_| ScaleError::Overflow)?;
    let mut total = whole.checked_mul(per_unit).ok_or(ScaleError::Overflow)?;
    let frac = frac.trim_end_matches('0');
    if !frac.is_empty() {
        if frac.len() > 30 {
            return Err(ScaleError::Fractional);
        }
        let numerator: u128 = frac.parse().map_err(|_| ScaleError::Overflow)?;
        let denominator = 10u128.pow(frac.len() as u32);
        let scaled = numerator
            .checked_mul(per_unit)
            .ok_or(ScaleError::Overflow)?;
        if !scaled.is_multiple_of(denominator) {
            return Err(ScaleError::Fractional);
        }
        total = total
            .checked_add(scaled / denominator)
            .ok_or(ScaleError::Overflow)?;
    }
    Ok(total)
}

fn nanos_to_duration(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
    let sub = (nanos % NANOS_PER_SEC) as u32;
    Some(Duration::new(secs, sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("600s"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(" 5s "), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("5 s"), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn durations_with_fractions_are_exact() {
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("0.25ms"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.50s"), Ok(ms(1500)));
        assert_eq!(parse_duration("0.1h"), Ok(Duration::from_secs(360)));
        assert_eq!(parse_duration("1.000000001s"), Ok(Duration::new(1, 1)));
        assert!(parse_duration("1.0000000001s")
            .unwrap_err()
            .contains("finer than one nanosecond"));
        assert!(parse_duration("1.5ns").is_err());
    }

    #[test]
    fn bare_numbers_are_seconds_and_zero_is_zero() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        let err = parse_duration("1.5").unwrap_err();
        assert!(err.contains("\"1.5s\""), "{err}");
    }

    #[test]
    fn bad_durations_are_explained() {
        for bad in [
            "", "s", "ms", "-1s", "1.s", ".5s", "1..2s", "1m30s", "1e3s", "abc",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        let err = parse_duration("5x").unwrap_err();
        assert!(err.contains("unknown duration unit \"x\""), "{err}");
        let err = parse_duration("5sec").unwrap_err();
        assert!(
            err.contains("expected one of: ns, us, ms, s, m, h"),
            "{err}"
        );
        let err = parse_duration("99999999999999999999999h").unwrap_err();
        assert!(err.contains("too large"), "{err}");
        let err = parse_duration("18446744073709551616s").unwrap_err();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("32MiB"), Ok(32 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("100KB"), Ok(100_000));
        assert_eq!(parse_size("5MB"), Ok(5_000_000));
        assert_eq!(parse_size("3GB"), Ok(3_000_000_000));
        assert_eq!(parse_size("10B"), Ok(10));
        assert_eq!(parse_size("32mib"), Ok(32 << 20));
        assert_eq!(parse_size("32 MiB"), Ok(32 << 20));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn bad_sizes_are_explained() {
        assert!(parse_size("1.3B")
            .unwrap_err()
            .contains("whole number of bytes"));
        assert!(parse_size("32M")
            .unwrap_err()
            .contains("unknown size unit \"M\""));
        assert!(parse_size("-5").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("20000000TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn formatting_round_trips() {
        for d in [
            Duration::ZERO,
            ms(1500),
            ms(500),
            Duration::from_secs(90),
            Duration::from_micros(250),
            Duration::from_nanos(7),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(ms(2000)), "2s");
        assert_eq!(format_duration(ms(500)), "500ms");
    }
}
