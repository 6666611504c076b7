//! What Python's `json.loads` accepts beyond strict JSON (`NaN`, `Infinity`, `-Infinity`, and
//! numbers too large for an `f64`, which Python reads as infinities), carried through serde as
//! sentinel strings so a field check can see the float Python would have.

/// The marker that starts a sentinel string (a NUL, which no JSON string holds unescaped).
const MARK: char = '\u{0}';

/// The float a sentinel string stands for, `None` for an ordinary string.
pub(crate) fn sentinel(s: &str) -> Option<f64> {
    match s.strip_prefix(MARK)? {
        "nan" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

fn push_sentinel(out: &mut String, name: &str) {
    out.push_str("\"\\u0000");
    out.push_str(name);
    out.push('"');
}

/// `text` (which Python's decoder accepts) with every non-finite literal outside strings
/// replaced by a sentinel string.
pub(crate) fn with_sentinels(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let end = string_end(rest);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if let Some(r) = rest.strip_prefix("NaN") {
            push_sentinel(&mut out, "nan");
            rest = r;
        } else if let Some(r) = rest.strip_prefix("-Infinity") {
            push_sentinel(&mut out, "-inf");
            rest = r;
        } else if let Some(r) = rest.strip_prefix("Infinity") {
            push_sentinel(&mut out, "inf");
            rest = r;
        } else if c == '-' || c.is_ascii_digit() {
            let end = rest
                .find(|ch: char| {
                    !(ch.is_ascii_digit() || matches!(ch, '-' | '+' | '.' | 'e' | 'E'))
                })
                .unwrap_or(rest.len());
            let num = &rest[..end];
            match num.parse::<f64>() {
                Ok(f) if f.is_infinite() && (num.contains(['.', 'e', 'E'])) => {
                    push_sentinel(&mut out, if f > 0.0 { "inf" } else { "-inf" })
                }
                _ => out.push_str(num),
            }
            rest = &rest[end..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The byte length of the JSON string at the start of `s` (which starts with `"`).
fn string_end(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_literals_become_sentinels() {
        let t = with_sentinels(r#"{"a":NaN,"b":-Infinity,"c":1e999,"d":"NaN","e":12}"#);
        let v: serde_json::Value = serde_json::from_str(&t).expect("json");
        assert!(sentinel(v["a"].as_str().expect("a")).is_some_and(f64::is_nan));
        assert_eq!(
            sentinel(v["b"].as_str().expect("b")),
            Some(f64::NEG_INFINITY)
        );
        assert_eq!(sentinel(v["c"].as_str().expect("c")), Some(f64::INFINITY));
        assert_eq!(v["d"], "NaN");
        assert_eq!(v["e"], 12);
    }
}
