//! Request and response heads: parsed once with `httparse`, kept as byte ranges into the head bytes.

use std::mem::MaybeUninit;
use std::ops::Range;

/// Most headers a head may carry; a head with more is refused (431-style, reported as `TooManyHeaders`).
pub const MAX_HEADERS: usize = 96;

/// Why a head could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The bytes are not an HTTP/1.x head.
    #[error("malformed HTTP head: {0}")]
    Malformed(String),
    /// More than [`MAX_HEADERS`] header lines.
    #[error("too many header lines")]
    TooManyHeaders,
    /// Content-Length is not a number, appears twice with different values, or sits beside chunked.
    #[error("invalid body framing: {0}")]
    Framing(&'static str),
    /// A Transfer-Encoding other than `chunked`.
    #[error("unsupported transfer-encoding")]
    UnsupportedTransferEncoding,
}

/// The request methods the gateway distinguishes; anything else is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// Any other token (PUT, DELETE, OPTIONS, ...).
    Other,
}

/// How a message body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// The body runs until the peer closes (responses only).
    UntilClose,
}

/// A parsed request head. Header names and values are ranges into [`RequestHead::bytes`].
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// The head bytes, request line through the blank line.
    pub bytes: Vec<u8>,
    /// The method.
    pub method: Method,
    /// The request target (path and query) as a range into `bytes`.
    pub target: Range<usize>,
    /// Minor HTTP version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Header lines as (name, value) ranges into `bytes`, in wire order.
    pub headers: Vec<(Range<usize>, Range<usize>)>,
    /// Body framing; `Length(0)` when the request has no body.
    pub framing: BodyFraming,
    /// The client sent `Expect: 100-continue`.
    pub expect_continue: bool,
    /// The connection must close after this exchange (`Connection: close`, or HTTP/1.0 without keep-alive).
    pub close: bool,
}

/// A parsed response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// The head bytes, status line through the blank line.
    pub bytes: Vec<u8>,
    /// Status code.
    pub status: u16,
    /// Minor HTTP version.
    pub minor_version: u8,
    /// Header lines as (name, value) ranges into `bytes`, in wire order.
    pub headers: Vec<(Range<usize>, Range<usize>)>,
    /// Body framing.
    pub framing: BodyFraming,
    /// The connection cannot be reused after this response.
    pub close: bool,
}

fn offset(base: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - base.as_ptr() as usize;
    start..start + part.len()
}

/// Facts about framing and connection reuse gathered from header lines.
#[derive(Default)]
struct HeaderFacts {
    content_length: Option<u64>,
    chunked: bool,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
}

/// A `content-length` value: decimal digits, optionally surrounded by whitespace (read from the
/// bytes directly: no UTF-8 check or `str::parse` for the commonest header of a proxied request).
fn content_length(value: &[u8]) -> Result<u64, HeadError> {
    let digits = value.trim_ascii();
    if !value.is_ascii() {
        return Err(HeadError::Framing("content-length is not ASCII"));
    }
    if digits.is_empty() {
        return Err(HeadError::Framing("content-length is not a number"));
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => u64::from(b - b'0'),
            _ => return Err(HeadError::Framing("content-length is not a number")),
        };
        n.checked_mul(10)
            .and_then(|n| n.checked_add(digit))
            .ok_or(HeadError::Framing("content-length is not a number"))
    })
}

fn collect_facts(raw: &[httparse::Header<'_>]) -> Result<HeaderFacts, HeadError> {
    let mut facts = HeaderFacts::default();
    for h in raw {
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = content_length(h.value)?;
            if facts.content_length.is_some_and(|v| v != value) {
                return Err(HeadError::Framing("conflicting content-length headers"));
            }
            facts.content_length = Some(value);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let mut codings = h
                .value
                .split(|b| *b == b',')
                .map(|c| c.trim_ascii())
                .filter(|c| !c.is_empty());
            match (codings.next(), codings.next()) {
                (Some(c), None) if c.eq_ignore_ascii_case(b"chunked") => facts.chunked = true,
                (Some(c), None) if c.eq_ignore_ascii_case(b"identity") => {}
                _ => return Err(HeadError::UnsupportedTransferEncoding),
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',').map(|t| t.trim_ascii()) {
                if token.eq_ignore_ascii_case(b"close") {
                    facts.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    facts.keep_alive = true;
                }
            }
        } else if h.name.eq_ignore_ascii_case("expect") {
            facts.expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
    }
    if facts.chunked && facts.content_length.is_some() {
        return Err(HeadError::Framing("both content-length and chunked"));
    }
    Ok(facts)
}

/// The two buffers a parsed head keeps (its bytes and its header ranges), taken back from a head
/// that is done with ([`RequestHead::into_bufs`], [`ResponseHead::into_bufs`]) so the next
/// head parsed on the same connection allocates neither.
#[derive(Debug, Default)]
pub struct HeadBufs {
    bytes: Vec<u8>,
    headers: Vec<HeaderRanges>,
}

/// A header line's name and value as ranges into its head's bytes.
type HeaderRanges = (Range<usize>, Range<usize>);

impl HeadBufs {
    /// Fills the buffers with `bytes` and the ranges of `raw`'s headers within them.
    fn fill(mut self, bytes: &[u8], raw: &[httparse::Header<'_>]) -> (Vec<u8>, Vec<HeaderRanges>) {
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        self.headers.clear();
        self.headers.extend(
            raw.iter()
                .map(|h| (offset(bytes, h.name.as_bytes()), offset(bytes, h.value))),
        );
        (self.bytes, self.headers)
    }

    /// Keeps buffers that did not grow past a head's limit, drops bigger ones.
    fn kept(self) -> HeadBufs {
        if self.bytes.capacity() <= KEEP_HEAD_BYTES && self.headers.capacity() <= MAX_HEADERS {
            self
        } else {
            HeadBufs::default()
        }
    }
}

/// Largest head buffer kept for reuse; a longer head's buffer is freed.
const KEEP_HEAD_BYTES: usize = 8 * 1024;

impl RequestHead {
    /// Parses a request head from the start of `buf`. Returns `Ok(None)` while the head is incomplete,
    /// else the head and how many bytes of `buf` it used.
    pub fn parse(buf: &[u8]) -> Result<Option<(RequestHead, usize)>, HeadError> {
        RequestHead::parse_into(buf, &mut HeadBufs::default())
    }

    /// [`RequestHead::parse`] into `spare`'s buffers: they are taken (left empty) when a head
    /// is returned, and left in place otherwise.
    pub fn parse_into(
        buf: &[u8],
        spare: &mut HeadBufs,
    ) -> Result<Option<(RequestHead, usize)>, HeadError> {
        // Header slots left uninitialised: httparse writes only the ones it fills.
        let mut raw = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_request_with_uninit_headers(&mut req, buf, &mut raw);
        let len = match parsed {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        };
        let bytes = &buf[..len];
        let method = match req.method.unwrap_or("") {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            _ => Method::Other,
        };
        let target = offset(bytes, req.path.unwrap_or("").as_bytes());
        let minor_version = req.version.unwrap_or(1);
        let facts = collect_facts(req.headers)?;
        let (bytes_owned, headers) = std::mem::take(spare).fill(bytes, req.headers);
        let framing = if facts.chunked {
            BodyFraming::Chunked
        } else {
            BodyFraming::Length(facts.content_length.unwrap_or(0))
        };
        let close = facts.close || (minor_version == 0 && !facts.keep_alive);
        let head = RequestHead {
            bytes: bytes_owned,
            method,
            target,
            minor_version,
            headers,
            framing,
            expect_continue: facts.expect_continue && minor_version == 1,
            close,
        };
        Ok(Some((head, len)))
    }

    /// The head's buffers, for the next head parsed on the connection
    /// ([`RequestHead::parse_into`]).
    pub fn into_bufs(self) -> HeadBufs {
        HeadBufs {
            bytes: self.bytes,
            headers: self.headers,
        }
        .kept()
    }

    /// The request target (path and query).
    pub fn target(&self) -> &[u8] {
        &self.bytes[self.target.clone()]
    }

    /// The path without the query string.
    pub fn path(&self) -> &[u8] {
        let t = self.target();
        match t.iter().position(|b| *b == b'?') {
            Some(i) => &t[..i],
            None => t,
        }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        header_in(&self.bytes, &self.headers, name)
    }

    /// Iterates header lines as (name, value) byte slices.
    pub fn header_lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(n, v)| (&self.bytes[n.clone()], &self.bytes[v.clone()]))
    }
}

impl ResponseHead {
    /// Parses a response head to a request made with `method`. Returns `Ok(None)` while incomplete.
    /// Interim 1xx heads are returned like any other; callers skip them.
    pub fn parse(buf: &[u8], method: Method) -> Result<Option<(ResponseHead, usize)>, HeadError> {
        ResponseHead::parse_into(buf, method, &mut HeadBufs::default())
    }

    /// [`ResponseHead::parse`] into `spare`'s buffers: they are taken (left empty) when a head
    /// is returned, and left in place otherwise.
    pub fn parse_into(
        buf: &[u8],
        method: Method,
        spare: &mut HeadBufs,
    ) -> Result<Option<(ResponseHead, usize)>, HeadError> {
        let mut raw = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut res, buf, &mut raw);
        let len = match parsed {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        };
        let bytes = &buf[..len];
        let status = res.code.unwrap_or(0);
        let minor_version = res.version.unwrap_or(1);
        let facts = collect_facts(res.headers)?;
        let (bytes_owned, headers) = std::mem::take(spare).fill(bytes, res.headers);
        let bodyless = method == Method::Head || status < 200 || status == 204 || status == 304;
        let framing = if bodyless {
            BodyFraming::Length(0)
        } else if facts.chunked {
            BodyFraming::Chunked
        } else if let Some(n) = facts.content_length {
            BodyFraming::Length(n)
        } else {
            BodyFraming::UntilClose
        };
        let close = facts.close
            || (minor_version == 0 && !facts.keep_alive)
            || framing == BodyFraming::UntilClose;
        let head = ResponseHead {
            bytes: bytes_owned,
            status,
            minor_version,
            headers,
            framing,
            close,
        };
        Ok(Some((head, len)))
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        header_in(&self.bytes, &self.headers, name)
    }

    /// The head's buffers, for the next head parsed on the connection
    /// ([`ResponseHead::parse_into`]).
    pub fn into_bufs(self) -> HeadBufs {
        HeadBufs {
            bytes: self.bytes,
            headers: self.headers,
        }
        .kept()
    }

    /// Iterates header lines as (name, value) byte slices.
    pub fn header_lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(n, v)| (&self.bytes[n.clone()], &self.bytes[v.clone()]))
    }

    /// The reason phrase sent on the status line (may be empty).
    pub fn reason(&self) -> &[u8] {
        let line_end = self
            .bytes
            .iter()
            .position(|b| *b == b'\r' || *b == b'\n')
            .unwrap_or(self.bytes.len());
        let line = &self.bytes[..line_end];
        // "HTTP/1.1 200 OK": the reason starts after the second space.
        let mut spaces = line.iter().enumerate().filter(|(_, b)| **b == b' ');
        match (spaces.next(), spaces.next()) {
            (Some(_), Some((i, _))) => &line[i + 1..],
            _ => b"",
        }
    }
}

fn header_in<'a>(
    bytes: &'a [u8],
    headers: &[(Range<usize>, Range<usize>)],
    name: &str,
) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| bytes[n.clone()].eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| &bytes[v.clone()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Some((head, used))) = RequestHead::parse(&data) {
                prop_assert_eq!(head.bytes.len(), used);
                let _ = head.path();
            }
            if let Ok(Some((head, used))) = ResponseHead::parse(&data, Method::Post) {
                prop_assert!(used <= data.len());
                prop_assert!(head.reason().len() < head.bytes.len());
            }
        }

        #[test]
        fn heads_parse_the_same_at_any_prefix(cut in 0usize..200) {
            let raw = b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello";
            let cut = cut.min(raw.len());
            match RequestHead::parse(&raw[..cut]).unwrap() {
                Some((_, used)) => prop_assert!(cut >= used),
                None => prop_assert!(cut < raw.len() - 5),
            }
        }
    }

    #[test]
    fn partial_head_asks_for_more() {
        assert!(
            RequestHead::parse(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn request_framing_and_flags() {
        let raw = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n{\"model\":1}";
        let (head, used) = RequestHead::parse(raw).unwrap().unwrap();
        assert_eq!(used, raw.len() - 11);
        assert_eq!(head.method, Method::Post);
        assert_eq!(head.path(), b"/v1/chat/completions");
        assert_eq!(head.target(), b"/v1/chat/completions?x=1");
        assert_eq!(head.framing, BodyFraming::Length(12));
        assert!(head.expect_continue);
        assert!(head.close);
        assert_eq!(head.header("HOST"), Some(&b"a"[..]));
    }

    #[test]
    fn http10_closes_unless_keep_alive() {
        let (h, _) = RequestHead::parse(b"GET / HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.close);
        let (h, _) = RequestHead::parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.close);
    }

    #[test]
    fn conflicting_framing_is_refused() {
        let raw = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(
            RequestHead::parse(raw),
            Err(HeadError::Framing(_))
        ));
        let raw = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
        assert!(matches!(
            RequestHead::parse(raw),
            Err(HeadError::Framing(_))
        ));
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(
            RequestHead::parse(raw).unwrap_err(),
            HeadError::UnsupportedTransferEncoding
        );
        let raw = b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n";
        assert!(RequestHead::parse(raw).is_err());
    }

    #[test]
    fn a_head_parsed_into_kept_buffers_equals_a_fresh_parse() {
        let first = b"POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\nx-long: aaaaaaaaaaaaaaaaaaaa\r\nx-more: b\r\ncontent-length: 3\r\n\r\nabc";
        let second = b"GET /health HTTP/1.0\r\nconnection: keep-alive\r\n\r\n";
        let (head, _) = RequestHead::parse(first).unwrap().unwrap();
        let mut bufs = head.into_bufs();
        let (reused, used) = RequestHead::parse_into(second, &mut bufs).unwrap().unwrap();
        let (fresh, fresh_used) = RequestHead::parse(second).unwrap().unwrap();
        assert_eq!(used, fresh_used);
        assert_eq!(reused.bytes, fresh.bytes);
        assert_eq!(reused.headers, fresh.headers);
        assert_eq!(reused.target(), b"/health");
        assert_eq!(reused.framing, fresh.framing);
        assert_eq!(reused.close, fresh.close);
        // An incomplete head leaves the buffers where they were.
        let mut bufs = reused.into_bufs();
        let kept = bufs.bytes.capacity();
        assert!(RequestHead::parse_into(b"GET / HT", &mut bufs)
            .unwrap()
            .is_none());
        assert_eq!(bufs.bytes.capacity(), kept);
        let up = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nserver: x\r\n\r\nok";
        let (r, _) = ResponseHead::parse_into(up, Method::Post, &mut bufs)
            .unwrap()
            .unwrap();
        let (f, _) = ResponseHead::parse(up, Method::Post).unwrap().unwrap();
        assert_eq!(
            (r.bytes, r.headers, r.framing),
            (f.bytes, f.headers, f.framing)
        );
    }

    #[test]
    fn content_length_is_digits_only() {
        let length = |value: &str| {
            let raw = format!("POST / HTTP/1.1\r\nContent-Length:{value}\r\n\r\n");
            RequestHead::parse(raw.as_bytes()).map(|h| h.map(|(h, _)| h.framing))
        };
        assert_eq!(length(" 12 "), Ok(Some(BodyFraming::Length(12))));
        assert_eq!(length("0"), Ok(Some(BodyFraming::Length(0))));
        assert_eq!(
            length(" 18446744073709551615"),
            Ok(Some(BodyFraming::Length(u64::MAX)))
        );
        // RFC 9110: 1*DIGIT. A sign, inner spaces, an overflow or nothing at all is refused.
        for bad in [" +5", " 1 2", " 18446744073709551616", " ", " 0x10", " 5;"] {
            assert!(
                matches!(length(bad), Err(HeadError::Framing(_))),
                "content-length {bad:?}"
            );
        }
    }

    #[test]
    fn response_framing() {
        let (h, _) = ResponseHead::parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Method::Post,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert!(!h.close);
        assert_eq!(h.reason(), b"OK");
        let (h, _) = ResponseHead::parse(b"HTTP/1.1 200 OK\r\n\r\n", Method::Post)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, BodyFraming::UntilClose);
        assert!(h.close);
        let (h, _) = ResponseHead::parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
            Method::Head,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, BodyFraming::Length(0));
        let (h, _) = ResponseHead::parse(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\n",
            Method::Post,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status, 503);
        assert_eq!(h.reason(), b"Service Unavailable");
    }
}
