//! Complete responses the gateway or an engine answers itself (not proxied).

use crate::headers::reason_phrase;

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

#[cfg(test)]
mod tests {
    use super::*;

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
