//! Python's `repr()` of strings and finite floats, byte for byte: the one place the gateway's
//! template engine and the simulator's vLLM-faithful output both take them from.

use std::fmt::Write as _;

/// Appends Python's `repr(str)`: single quotes unless the text has a `'` and no `"`; `\\`,
/// `\n`, `\r`, `\t`, the quote and other control characters escaped.
pub fn push_repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Appends `s` as Python's `json.dumps` writes a string: quotes, backslash, `\n`, `\r`, `\t`,
/// `\b`, `\f` and other control characters escaped; with `ensure_ascii`, every non-ASCII
/// character as `\uXXXX` (UTF-16 surrogate pairs beyond the BMP).
pub fn push_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)` of a finite `f`: the shortest digits that round-trip, positional for
/// decimal exponents -4..=15 with at least one decimal (`100.0`, `0.0001`, `-0.0`), scientific
/// otherwise (`1e-05`, `1.5e+16`). Callers spell NaN and infinities their own way.
pub fn finite_float_repr(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "1.2345e-5", "1e16".
    let sci = format!("{f:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = (exp + 1) as usize;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_prints_them() {
        for (f, want) in [
            (1.0, "1.0"),
            (100.0, "100.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(finite_float_repr(f), want);
        }
    }

    #[test]
    fn json_strings_escape_as_python_does() {
        let j = |s: &str, ascii| {
            let mut out = String::new();
            push_json_str(&mut out, s, ascii);
            out
        };
        assert_eq!(j("a\"b\\\n\u{1}", false), "\"a\\\"b\\\\\\n\\u0001\"");
        assert_eq!(j("é😀", false), "\"é😀\"");
        assert_eq!(j("é😀", true), "\"\\u00e9\\ud83d\\ude00\"");
    }

    #[test]
    fn strings_print_as_python_prints_them() {
        let r = |s: &str| {
            let mut out = String::new();
            push_repr_str(&mut out, s);
            out
        };
        assert_eq!(r("a"), "'a'");
        assert_eq!(r("it's"), "\"it's\"");
        assert_eq!(r("'\""), "'\\'\"'");
        assert_eq!(r("a\nb\u{1}"), "'a\\nb\\x01'");
    }
}
