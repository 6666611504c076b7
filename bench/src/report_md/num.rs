//! Fixed number formatting for the report (the same value always prints the same way).

/// Seconds with two decimals: `0.57 s`.
pub fn secs(s: f64) -> String {
    format!("{} s", fixed(s, 2))
}

/// A fraction as a whole percentage: `0.794` → `79%`.
pub fn pct(f: f64) -> String {
    format!("{}%", fixed(100.0 * f, 0))
}

/// A rate without trailing zeros: `6`, `2.5`, `0.125` (three decimals at most).
pub fn rate(r: f64) -> String {
    let s = fixed(r, 3);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `x` with `decimals` decimals, never `-0`.
pub fn fixed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(secs(0.5678), "0.57 s");
        assert_eq!(pct(0.794), "79%");
        assert_eq!(pct(-0.001), "0%");
        assert_eq!(rate(6.0), "6");
        assert_eq!(rate(2.5), "2.5");
        assert_eq!(fixed(-0.0001, 2), "0.00");
        assert_eq!(fixed(-1.5, 1), "-1.5");
    }
}
