//! Relaying a committed response: the client-facing head built from the engine's, and the body
//! re-framed for the client (passed through, dechunked for HTTP/1.0, or rechunked).

use inferrail_wire::headers::{is_hop_by_hop, listed_in_connection};
use inferrail_wire::{
    encode_chunk, push_decimal, push_header, push_kept_headers, BodyFraming, ChunkedDecoder,
    ResponseHead, LAST_CHUNK,
};

/// How the response body is carried from engine to client.
pub(crate) enum Relay {
    /// Content-length body passed through; bytes still expected.
    Length(u64),
    /// Chunked body passed through untouched; the decoder only finds its end.
    Chunked(ChunkedDecoder),
    /// Chunked body decoded for an HTTP/1.0 client, which gets it close-delimited.
    Dechunk(ChunkedDecoder),
    /// Close-delimited engine body re-framed as chunks for the client.
    Rechunk,
    /// Close-delimited engine body passed to an HTTP/1.0 client as is.
    RawUntilClose,
}

impl Relay {
    /// Turns body bytes from the engine into client bytes appended to `out`. Returns whether the
    /// body is complete and how many input bytes belonged to it.
    pub(crate) fn step(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(bool, usize), String> {
        match self {
            Relay::Length(left) => {
                let take = (*left).min(input.len() as u64) as usize;
                out.extend_from_slice(&input[..take]);
                *left -= take as u64;
                Ok((*left == 0, take))
            }
            Relay::Chunked(d) => {
                let p = d.feed(input, None).map_err(|e| e.to_string())?;
                out.extend_from_slice(&input[..p.consumed]);
                Ok((p.done, p.consumed))
            }
            Relay::Dechunk(d) => {
                let p = d.feed(input, Some(out)).map_err(|e| e.to_string())?;
                Ok((p.done, p.consumed))
            }
            Relay::Rechunk => {
                encode_chunk(out, input);
                Ok((false, input.len()))
            }
            Relay::RawUntilClose => {
                out.extend_from_slice(input);
                Ok((false, input.len()))
            }
        }
    }

    /// Called at engine EOF: the bytes that end the client's body, or `None` if the body was cut.
    pub(crate) fn finish_at_eof(&self) -> Option<&'static [u8]> {
        match self {
            Relay::Rechunk => Some(LAST_CHUNK),
            Relay::RawUntilClose => Some(b""),
            _ => None,
        }
    }
}

/// Gateway headers added to a proxied response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadExtras<'a> {
    /// The request's id (`x-request-id`).
    pub(crate) request_id: &'a str,
    /// The replica that answered (`x-inferrail-replica`).
    pub(crate) replica: &'a str,
    /// The policy that routed the request.
    pub(crate) policy: &'a str,
    /// Prompt tokens, when the prompt was tokenized.
    pub(crate) prompt_tokens: Option<u32>,
    /// Cached tokens predicted on the replica, when a prediction was made.
    pub(crate) cached_tokens: Option<u32>,
}

/// Room for the gateway's own header lines (request id, replica, policy, token counts).
const OWN_HEADERS_ROOM: usize = 256;

/// The client-facing response head built from the engine's, in `out` (emptied first) with room
/// for `body_room` more bytes (the body bytes that go out in the same write).
pub(crate) fn client_head(
    mut out: Vec<u8>,
    up: &ResponseHead,
    extras: &HeadExtras<'_>,
    relay: &Relay,
    close: bool,
    minor: u8,
    body_room: usize,
) -> Vec<u8> {
    let connection = up.header("connection").unwrap_or(b"");
    out.clear();
    out.reserve(up.bytes.len() + OWN_HEADERS_ROOM + body_room);
    out.extend_from_slice(if minor == 0 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    push_decimal(&mut out, u64::from(up.status));
    out.push(b' ');
    out.extend_from_slice(up.reason());
    out.extend_from_slice(b"\r\n");
    push_kept_headers(&mut out, &up.bytes, &up.headers, |name| {
        !(is_hop_by_hop(name)
            || listed_in_connection(connection, name)
            || name.eq_ignore_ascii_case(b"x-request-id")
            || name.eq_ignore_ascii_case(b"x-inferrail-replica")
            || name.eq_ignore_ascii_case(b"x-inferrail-policy")
            || name.eq_ignore_ascii_case(b"x-inferrail-prompt-tokens")
            || name.eq_ignore_ascii_case(b"x-inferrail-cached-tokens"))
    });
    if matches!(relay, Relay::Chunked(_) | Relay::Rechunk) {
        push_header(&mut out, b"transfer-encoding", b"chunked");
    }
    push_header(&mut out, b"x-request-id", extras.request_id.as_bytes());
    push_header(&mut out, b"x-inferrail-replica", extras.replica.as_bytes());
    push_header(&mut out, b"x-inferrail-policy", extras.policy.as_bytes());
    for (name, value) in [
        (&b"x-inferrail-prompt-tokens: "[..], extras.prompt_tokens),
        (&b"x-inferrail-cached-tokens: "[..], extras.cached_tokens),
    ] {
        if let Some(v) = value {
            out.extend_from_slice(name);
            push_decimal(&mut out, u64::from(v));
            out.extend_from_slice(b"\r\n");
        }
    }
    if close {
        push_header(&mut out, b"connection", b"close");
    } else if minor == 0 {
        push_header(&mut out, b"connection", b"keep-alive");
    }
    out.extend_from_slice(b"\r\n");
    out
}

impl Relay {
    /// How an engine body with `framing` is carried to a client speaking HTTP/1.`client_minor`.
    pub(crate) fn new(framing: BodyFraming, client_minor: u8) -> Relay {
        match (framing, client_minor) {
            (BodyFraming::Length(n), _) => Relay::Length(n),
            (BodyFraming::Chunked, 0) => Relay::Dechunk(ChunkedDecoder::new()),
            (BodyFraming::Chunked, _) => Relay::Chunked(ChunkedDecoder::new()),
            (BodyFraming::UntilClose, 0) => Relay::RawUntilClose,
            (BodyFraming::UntilClose, _) => Relay::Rechunk,
        }
    }

    /// The client connection must close after this body (its end is the close).
    pub(crate) fn closes_client(&self, client_minor: u8) -> bool {
        client_minor == 0 && !matches!(self, Relay::Length(_))
            || matches!(self, Relay::RawUntilClose)
    }
}
