//! Complete responses the gateway or an engine answers itself (not proxied).

use crate::headers::reason_phrase;
use std::ops::Range;

/// Builds a response with a content-length body. With `head_only` the body is left out (a HEAD
/// request) while content-length still names its size. `close` adds `connection: close`.
pub fn full_response(
    status: u16,
    headers: &[(&str, &[u8])],
    content_type: Option<&str>,
    body: &[u8],
    head_only: bool,
    close: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(&mut out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        push_header(&mut out, name.as_bytes(), value);
    }
    if let Some(ct) = content_type {
        push_header(&mut out, b"content-type", ct.as_bytes());
    }
    out.extend_from_slice(b"content-length: ");
    push_decimal(&mut out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    if close {
        push_header(&mut out, b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Appends `n` in decimal without going through `fmt`.
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends one `name: value` header line.
pub fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends the header lines of a parsed head (`bytes`, with each line's name and value as
/// ranges into it) for which `keep(name)` holds, as `name: value` lines. Consecutive kept lines
/// that already read `name: value\r\n` in `bytes` are copied as one run, so forwarding most of
/// a head costs a few copies rather than two per line; any other kept line is rewritten in that
/// form. The result is the same bytes as [`push_header`] for each kept line.
pub fn push_kept_headers(
    out: &mut Vec<u8>,
    bytes: &[u8],
    headers: &[(Range<usize>, Range<usize>)],
    mut keep: impl FnMut(&[u8]) -> bool,
) {
    // The run of canonical kept lines not copied yet.
    let mut run: Option<Range<usize>> = None;
    for (name, value) in headers {
        let line_end = value.end + 2;
        let canonical = bytes.get(name.end..value.start) == Some(b": ")
            && bytes.get(value.end..line_end) == Some(b"\r\n");
        let kept = keep(&bytes[name.clone()]);
        match &mut run {
            Some(r) if kept && canonical && r.end == name.start => {
                r.end = line_end;
                continue;
            }
            _ => {}
        }
        if let Some(r) = run.take() {
            out.extend_from_slice(&bytes[r]);
        }
        if kept && canonical {
            run = Some(name.start..line_end);
        } else if kept {
            push_header(out, &bytes[name.clone()], &bytes[value.clone()]);
        }
    }
    if let Some(r) = run {
        out.extend_from_slice(&bytes[r]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Copying runs of kept lines gives the bytes of one `push_header` per kept line,
        /// whatever the lines' spacing and which of them are kept.
        #[test]
        fn kept_header_runs_equal_a_line_by_line_copy(
            lines in proptest::collection::vec(
                ("[a-z][a-z0-9-]{0,12}", "[ -~]{0,20}", 0u8..4, proptest::prelude::any::<bool>()),
                0..12,
            )
        ) {
            let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
            let mut keep_names = std::collections::HashSet::new();
            for (name, value, spacing, keep) in &lines {
                let value = value.trim();
                let sep: &[u8] = match spacing { 0 => b": ", 1 => b":", 2 => b":  ", _ => b": " };
                let end: &[u8] = if *spacing == 3 { b" \r\n" } else { b"\r\n" };
                raw.extend_from_slice(name.as_bytes());
                raw.extend_from_slice(sep);
                raw.extend_from_slice(value.as_bytes());
                raw.extend_from_slice(end);
                if *keep {
                    keep_names.insert(name.clone());
                }
            }
            raw.extend_from_slice(b"\r\n");
            let (head, _) = crate::RequestHead::parse(&raw).unwrap().unwrap();
            let keep = |name: &[u8]| keep_names.contains(std::str::from_utf8(name).unwrap());
            let mut runs = Vec::new();
            push_kept_headers(&mut runs, &head.bytes, &head.headers, keep);
            let mut naive = Vec::new();
            for (name, value) in head.header_lines() {
                if keep(name) {
                    push_header(&mut naive, name, value);
                }
            }
            proptest::prop_assert_eq!(runs, naive);
        }
    }

    #[test]
    fn decimals() {
        for n in [0u64, 7, 10, 99, 100, 65535, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn head_only_keeps_length() {
        let r = full_response(
            200,
            &[("x-request-id", b"abc")],
            Some("application/json"),
            b"{}",
            true,
            false,
        );
        assert_eq!(
            r,
            b"HTTP/1.1 200 OK\r\nx-request-id: abc\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"
        );
        let r = full_response(503, &[], None, b"x", false, true);
        assert!(r.ends_with(b"connection: close\r\n\r\nx"));
    }
}
