//! A small parser and checker for the Prometheus text format, for comparing pages family by
//! family in tests. It keeps every value's exact text so comparisons can be byte for byte.

use std::collections::BTreeSet;

/// One sample line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The sample name (`vllm:x_bucket`).
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value exactly as written.
    pub value: String,
    /// The whole line, without the newline.
    pub line: String,
}

impl Sample {
    /// One label's value.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The label names, in written order.
    pub fn label_names(&self) -> Vec<&str> {
        self.labels.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// One family: its HELP and TYPE lines and the samples under them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The name on the HELP/TYPE lines.
    pub name: String,
    /// The HELP text.
    pub help: String,
    /// The TYPE (`counter`, `gauge`, `histogram`, `summary`, ...).
    pub kind: String,
    /// The samples, in order.
    pub samples: Vec<Sample>,
}

impl Family {
    /// The `le` values of the first child's buckets, in order.
    pub fn bucket_bounds(&self) -> Vec<String> {
        let bucket = format!("{}_bucket", self.name);
        let mut out = Vec::new();
        for s in &self.samples {
            if s.name != bucket {
                continue;
            }
            let le = s.label("le").unwrap_or_default().to_string();
            let done = le == "+Inf";
            out.push(le);
            if done {
                break;
            }
        }
        out
    }
}

fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest.find("=\"").ok_or_else(|| format!("bad labels: {s}"))?;
        let key = rest[..eq].to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("dangling escape: {s}")),
                },
                '"' => {
                    end = Some(eq + 2 + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.ok_or_else(|| format!("unterminated label value: {s}"))?;
        out.push((key, value));
        rest = &rest[end..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok(out)
}

/// Parses one sample line.
pub fn parse_sample(line: &str) -> Result<Sample, String> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line
                .rfind('}')
                .ok_or_else(|| format!("no closing brace: {line}"))?;
            (
                &line[..open],
                parse_labels(&line[open + 1..close])?,
                &line[close + 1..],
            )
        }
        None => {
            let sp = line.find(' ').ok_or_else(|| format!("no value: {line}"))?;
            (&line[..sp], Vec::new(), &line[sp..])
        }
    };
    let value = rest
        .strip_prefix(' ')
        .ok_or_else(|| format!("no space before value: {line}"))?;
    if value.is_empty() || value.contains(' ') {
        return Err(format!("bad value (timestamps are not expected): {line}"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value: value.to_string(),
        line: line.to_string(),
    })
}

/// Parses a page into families. Samples before any `# TYPE`, or HELP and TYPE lines that do not
/// pair up, are errors.
pub fn parse(text: &str) -> Result<Vec<Family>, String> {
    let mut families: Vec<Family> = Vec::new();
    let mut pending_help: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            pending_help = Some((name.to_string(), help.to_string()));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad TYPE: {line}"))?;
            let help = match pending_help.take() {
                Some((n, h)) if n == name => h,
                _ => return Err(format!("TYPE without a matching HELP: {line}")),
            };
            families.push(Family {
                name: name.to_string(),
                help,
                kind: kind.to_string(),
                samples: Vec::new(),
            });
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else {
            let sample = parse_sample(line)?;
            let family = families
                .last_mut()
                .ok_or_else(|| format!("sample before any family: {line}"))?;
            family.samples.push(sample);
        }
    }
    Ok(families)
}

/// Checks a page: it ends with a newline; family names are unique; each sample's name belongs to
/// the family it is under; label names are unique per sample; values parse as floats; every
/// histogram child has strictly ascending `le` ending in `+Inf`, cumulative (non-decreasing)
/// bucket counts, and `_count` equal to the `+Inf` bucket, then a `_sum`.
pub fn validate(text: &str) -> Result<Vec<Family>, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("page does not end with a newline".into());
    }
    let families = parse(text)?;
    let mut seen = BTreeSet::new();
    for f in &families {
        if !seen.insert(f.name.clone()) {
            return Err(format!("family {} declared twice", f.name));
        }
        for s in &f.samples {
            let ok = match f.kind.as_str() {
                "histogram" => [
                    format!("{}_bucket", f.name),
                    format!("{}_count", f.name),
                    format!("{}_sum", f.name),
                ]
                .contains(&s.name),
                "summary" => {
                    s.name == f.name
                        || s.name == format!("{}_count", f.name)
                        || s.name == format!("{}_sum", f.name)
                }
                _ => s.name == f.name,
            };
            if !ok {
                return Err(format!("sample {} is not of {} {}", s.line, f.kind, f.name));
            }
            let mut names: Vec<&str> = s.label_names();
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("duplicate label in {}", s.line));
            }
            parse_value(&s.value).ok_or_else(|| format!("bad value in {}", s.line))?;
        }
        if f.kind == "histogram" {
            check_histogram(f)?;
        }
    }
    Ok(families)
}

/// Parses a sample value (`+Inf`, `-Inf`, `NaN` or a float).
pub fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        v => v.parse().ok(),
    }
}

fn child_key(s: &Sample) -> Vec<(String, String)> {
    let mut k: Vec<(String, String)> = s
        .labels
        .iter()
        .filter(|(n, _)| n != "le")
        .cloned()
        .collect();
    k.sort();
    k
}

fn check_histogram(f: &Family) -> Result<(), String> {
    let bucket = format!("{}_bucket", f.name);
    let count = format!("{}_count", f.name);
    let sum = format!("{}_sum", f.name);
    let mut i = 0;
    while i < f.samples.len() {
        let key = child_key(&f.samples[i]);
        let mut last_le = f64::NEG_INFINITY;
        let mut last_count = 0.0;
        let mut inf_count = None;
        while i < f.samples.len() && f.samples[i].name == bucket && child_key(&f.samples[i]) == key
        {
            let s = &f.samples[i];
            let le = s
                .label("le")
                .and_then(parse_value)
                .ok_or_else(|| format!("bucket without a valid le: {}", s.line))?;
            if le <= last_le {
                return Err(format!("le not ascending at {}", s.line));
            }
            let c = parse_value(&s.value).unwrap_or(f64::NAN);
            if c < last_count || c.is_nan() {
                return Err(format!("buckets not cumulative at {}", s.line));
            }
            if le == f64::INFINITY {
                inf_count = Some(c);
            }
            last_le = le;
            last_count = c;
            i += 1;
        }
        let inf = inf_count.ok_or_else(|| format!("{}: a child has no +Inf bucket", f.name))?;
        let c = f
            .samples
            .get(i)
            .filter(|s| s.name == count && child_key(s) == key);
        let c = c.ok_or_else(|| format!("{}: a child has no _count after its buckets", f.name))?;
        if parse_value(&c.value) != Some(inf) {
            return Err(format!(
                "{}: _count {} != +Inf bucket {inf}",
                f.name, c.value
            ));
        }
        i += 1;
        let s = f
            .samples
            .get(i)
            .filter(|s| s.name == sum && child_key(s) == key);
        s.ok_or_else(|| format!("{}: a child has no _sum after its _count", f.name))?;
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prom_parse_rejects_broken_histograms() {
        let head = "# HELP h x\n# TYPE h histogram\n";
        let good = "h_bucket{le=\"1.0\"} 1.0\nh_bucket{le=\"+Inf\"} 2.0\nh_count 2.0\nh_sum 3.0\n";
        assert!(validate(&format!("{head}{good}")).is_ok());
        let not_cumulative =
            "h_bucket{le=\"1.0\"} 3.0\nh_bucket{le=\"+Inf\"} 2.0\nh_count 2.0\nh_sum 3.0\n";
        assert!(validate(&format!("{head}{not_cumulative}")).is_err());
        let bad_count =
            "h_bucket{le=\"1.0\"} 1.0\nh_bucket{le=\"+Inf\"} 2.0\nh_count 3.0\nh_sum 3.0\n";
        assert!(validate(&format!("{head}{bad_count}")).is_err());
        let no_inf = "h_bucket{le=\"1.0\"} 1.0\nh_count 1.0\nh_sum 3.0\n";
        assert!(validate(&format!("{head}{no_inf}")).is_err());
        assert!(validate("x 1.0\n").is_err(), "undeclared sample");
        assert!(
            validate("# HELP a b\n# TYPE a gauge\nb 1.0\n").is_err(),
            "foreign sample"
        );
    }

    #[test]
    fn prom_parse_unescapes_labels() {
        let s = parse_sample("m{a=\"x\\\"y\",b=\"1,2\"} 1.0").unwrap();
        assert_eq!(
            s.labels,
            vec![("a".into(), "x\"y".into()), ("b".into(), "1,2".into())]
        );
        assert_eq!(s.value, "1.0");
    }
}
