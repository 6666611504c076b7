//! Header rules a proxy applies: hop-by-hop headers, request ids, reason phrases.

/// Headers that describe one connection and are never forwarded (RFC 9110 §7.6.1).
/// `transfer-encoding` is listed: callers that pass a chunked body through untouched re-add it.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 9] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    ];
    HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// True when `name` is listed in a `Connection` header value (and so is hop-by-hop too).
pub fn listed_in_connection(connection_value: &[u8], name: &[u8]) -> bool {
    connection_value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(name))
}

/// A client-supplied request id is kept when it is 1 to 128 bytes of `[A-Za-z0-9._~:/+=-]`.
pub fn is_valid_request_id(value: &[u8]) -> bool {
    (1..=128).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._~:/+=-".contains(b))
}

/// The standard reason phrase for `status` (empty for unknown codes).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop() {
        assert!(is_hop_by_hop(b"Connection"));
        assert!(is_hop_by_hop(b"TRANSFER-ENCODING"));
        assert!(!is_hop_by_hop(b"content-type"));
        assert!(listed_in_connection(b"keep-alive, X-Foo", b"x-foo"));
        assert!(!listed_in_connection(b"close", b"x-foo"));
    }

    #[test]
    fn request_ids() {
        assert!(is_valid_request_id(b"ref-req-0003"));
        assert!(is_valid_request_id(b"a27f9a8dd2d94daa8053cb8d402d744c"));
        assert!(!is_valid_request_id(b""));
        assert!(!is_valid_request_id(b"has space"));
        assert!(!is_valid_request_id(&[b'a'; 129]));
        assert!(!is_valid_request_id(b"quote\"d"));
    }
}
