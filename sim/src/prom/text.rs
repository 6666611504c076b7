//! The byte-level pieces of prometheus_client's text exposition: float formatting, label sets and
//! the histogram type, all as prometheus_client 0.26 (vLLM 0.32's pin) writes them.

use std::fmt::Write as _;

/// Python's `repr(float)`: the shortest digits that round-trip, fixed notation for decimal
/// exponents -4..=15 (always with a fractional part, `1.0`), scientific otherwise (`1e-05`,
/// `1.5e+16`).
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    inferrail_shards::pyfmt::finite_float_repr(x)
}

/// prometheus_client's `floatToGoString`: `+Inf`/`-Inf`/`NaN`, and Python's repr except that
/// positive numbers with seven or more integer digits switch to Go's exponent form
/// (`4848320512.0` → `4.848320512e+09`).
pub fn go_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x == f64::INFINITY {
        return "+Inf".to_string();
    }
    if x == f64::NEG_INFINITY {
        return "-Inf".to_string();
    }
    let s = py_float_repr(x);
    match s.find('.') {
        Some(dot) if x > 0.0 && dot > 6 => {
            let mut mantissa = format!("{}.{}{}", &s[..1], &s[1..dot], &s[dot + 1..]);
            let trimmed = mantissa.trim_end_matches(['0', '.']).len();
            mantissa.truncate(trimmed);
            // `e+0{n}` is prometheus_client's own format string, kept as is.
            format!("{mantissa}e+0{}", dot - 1)
        }
        _ => s,
    }
}

/// Appends `value` to `out` with prometheus_client's label-value escaping.
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// Writes one sample line: `name{a="x",b="y"} value\n`, labels sorted by name as
/// prometheus_client 0.26 writes them, and no braces when there are no labels.
pub fn write_sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        let mut sorted: Vec<&(&str, &str)> = labels.iter().collect();
        sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        out.push('{');
        for (i, (k, v)) in sorted.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            escape_label_value(out, v);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&go_float(value));
    out.push('\n');
}

/// Writes `# HELP name help` and `# TYPE name kind`.
pub fn write_header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A prometheus_client histogram child: per-bucket (non-cumulative) counts and a float sum that
/// accumulates observations in order, exactly as Python adds them.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// One count per bound plus the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// An empty histogram with these finite upper bounds (ascending; `+Inf` is implied).
    pub fn new(bounds: Vec<f64>) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds must ascend");
        let n = bounds.len() + 1;
        Self {
            bounds,
            counts: vec![0; n],
            sum: 0.0,
        }
    }

    /// Records one observation: the first bucket whose bound is `>= v` and the sum.
    pub fn observe(&mut self, v: f64) {
        self.sum += v;
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
    }

    /// The finite upper bounds.
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Cumulative counts per bucket, `+Inf` last.
    pub fn cumulative(&self) -> Vec<u64> {
        let mut acc = 0;
        self.counts
            .iter()
            .map(|c| {
                acc += c;
                acc
            })
            .collect()
    }

    /// Writes the `_bucket` lines, then `_count` and `_sum`, with `labels` plus `le`.
    pub fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        let bucket = format!("{name}_bucket");
        let cumulative = self.cumulative();
        for (i, c) in cumulative.iter().enumerate() {
            let le = match self.bounds.get(i) {
                Some(b) => go_float(*b),
                None => "+Inf".to_string(),
            };
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            write_sample(out, &bucket, &with_le, *c as f64);
        }
        write_sample(out, &format!("{name}_count"), labels, self.count() as f64);
        write_sample(out, &format!("{name}_sum"), labels, self.sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prom_py_repr_matches_python() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (32.0, "32.0"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (12.170000000000002, "12.170000000000002"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1.23e100, "1.23e+100"),
            (-2.5, "-2.5"),
            (0.0008852110017869563, "0.0008852110017869563"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(*x), *want, "repr({x:e})");
        }
    }

    #[test]
    fn prom_go_float_matches_prometheus_client() {
        let cases: &[(f64, &str)] = &[
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (4848320512.0, "4.848320512e+09"),
            (1022492672.0, "1.022492672e+09"),
            (1.79601429183e9, "1.79601429183e+09"),
            (1.796014363261697e9, "1.796014363261697e+09"),
            (1000000.0, "1e+06"),
            (999999.0, "999999.0"),
            (20000.0, "20000.0"),
            (-4848320512.0, "-4848320512.0"),
            (0.001, "0.001"),
            (2560.0, "2560.0"),
        ];
        for (x, want) in cases {
            assert_eq!(go_float(*x), *want, "floatToGoString({x:e})");
        }
    }

    #[test]
    fn prom_histogram_buckets_are_inclusive_upper_bounds() {
        let mut h = Histogram::new(vec![1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 2.0, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.cumulative(), vec![2, 4, 5]);
        assert_eq!(h.count(), 5);
        assert_eq!(h.sum(), 8.0);
        let mut out = String::new();
        h.write(&mut out, "x", &[("model_name", "m"), ("engine", "0")]);
        assert_eq!(
            out,
            "x_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 2.0\n\
             x_bucket{engine=\"0\",le=\"2.0\",model_name=\"m\"} 4.0\n\
             x_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 5.0\n\
             x_count{engine=\"0\",model_name=\"m\"} 5.0\n\
             x_sum{engine=\"0\",model_name=\"m\"} 8.0\n"
        );
    }

    #[test]
    fn prom_label_values_are_escaped() {
        let mut out = String::new();
        write_sample(&mut out, "m", &[("a", "q\"b\\n\nx")], 1.0);
        assert_eq!(out, "m{a=\"q\\\"b\\\\n\\nx\"} 1.0\n");
    }
}
