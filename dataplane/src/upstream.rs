//! The engine side of one attempt: connecting (pooled or fresh), the request bytes, and reading
//! the response head. Timeouts are the exchange's timers, raced by the driver; none here.

use crate::client_conn::read_more;
use crate::core_state::CoreView;
use crate::sockets::{send_now_pair, SentNow};
use inferrail_wire::headers::{is_hop_by_hop, listed_in_connection};
use inferrail_wire::{
    push_decimal, push_header, push_kept_headers, HeadBufs, Method, RequestHead, ResponseHead,
};
use monoio::io::AsyncWriteRentExt;
use monoio::net::TcpStream;

/// Largest response head accepted from an engine.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// The head of one upstream request for `authority`, built in one pass: the request line, the
/// client's headers except hop-by-hop ones, those the gateway sets itself and `expect` (the
/// gateway sends the whole body at once), then `x-request-id` and the body's length. The body
/// itself is written from the request's shared buffer, never copied.
fn upstream_request(
    mut out: Vec<u8>,
    head: &RequestHead,
    request_id: &str,
    authority: &str,
    body_len: usize,
) -> Vec<u8> {
    out.clear();
    out.reserve(head.bytes.len() + authority.len() + request_id.len() + 96);
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(head.target());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    push_header(&mut out, b"host", authority.as_bytes());
    let connection = head.header("connection").unwrap_or(b"");
    push_kept_headers(&mut out, &head.bytes, &head.headers, |name| {
        !(is_hop_by_hop(name)
            || listed_in_connection(connection, name)
            || name.eq_ignore_ascii_case(b"host")
            || name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"x-request-id"))
    });
    push_header(&mut out, b"x-request-id", request_id.as_bytes());
    out.extend_from_slice(b"content-length: ");
    push_decimal(&mut out, body_len as u64);
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// Gets a connection to replica `replica`: a pooled one (idle for less than the pool's timeout
/// at `now`) if `pooled` allows and one is idle, else a new one. Returns the stream and whether
/// it came from the pool.
pub(crate) async fn connect(
    view: &CoreView,
    replica: usize,
    pooled: bool,
    now: std::time::Instant,
) -> std::io::Result<(TcpStream, bool)> {
    let settings = &view.snap.settings;
    if pooled {
        if let Some(state) = view.replicas.get(replica) {
            if let Some(stream) = state.pool.checkout(settings.pool_idle_timeout, now) {
                return Ok((stream, true));
            }
        }
    }
    let addr = view
        .snap
        .replicas
        .get(replica)
        .ok_or_else(|| std::io::Error::other("replica left the snapshot"))?
        .spec
        .addr;
    let stream = TcpStream::connect_addr(addr).await?;
    let _ = stream.set_nodelay(true);
    Ok((stream, false))
}

/// Writes the whole request, its head built in `wire`: head and body side by side in one
/// `sendmsg` when the socket takes them, the body always from the request's shared buffer (never
/// copied, on any attempt). Returns false when the engine closed, and `wire` for the next use.
pub(crate) async fn send(
    upstream: &mut TcpStream,
    wire: Vec<u8>,
    head: &RequestHead,
    request_id: &str,
    authority: &str,
    body: &bytes::Bytes,
) -> (bool, Vec<u8>) {
    let mut wire = upstream_request(wire, head, request_id, authority, body.len());
    // What the socket takes at once goes out in one sendmsg, head and body side by side; only a
    // remainder waits for the socket through the ring, the body still from its shared buffer.
    let body_sent = match send_now_pair(upstream, &wire, body) {
        SentNow::All => return (true, wire),
        SentNow::Failed => return (false, wire),
        SentNow::Part(n) if n < wire.len() => {
            wire.drain(..n);
            let (res, returned) = upstream.write_all(wire).await;
            wire = returned;
            if res.is_err() {
                return (false, wire);
            }
            0
        }
        SentNow::Part(n) => n - wire.len(),
    };
    let (res, _) = upstream.write_all(body.slice(body_sent..)).await;
    (res.is_ok(), wire)
}

/// Why no response head could be read.
pub(crate) enum HeadError {
    /// The engine closed; `received_any` when some byte had arrived.
    Closed {
        /// Some response byte had arrived.
        received_any: bool,
    },
    /// Not an HTTP/1.x response head.
    Protocol(String),
}

/// Outcome of reading the upstream head, before anything is sent to the client.
pub(crate) struct UpstreamHead {
    /// The response head.
    pub(crate) head: ResponseHead,
    /// Read buffer holding the head and any body bytes after it.
    pub(crate) buf: Vec<u8>,
    /// Bytes of `buf` the head takes.
    pub(crate) head_len: usize,
}

/// Reads the engine's response head (skipping 1xx interim heads) into `head_bufs`' buffers.
pub(crate) async fn read_head(
    upstream: &mut TcpStream,
    mut buf: Vec<u8>,
    mut head_bufs: HeadBufs,
) -> Result<UpstreamHead, HeadError> {
    buf.clear();
    let mut received_any = false;
    loop {
        let (res, b) = read_more(upstream, buf).await;
        buf = b;
        match res {
            Ok(0) | Err(_) => return Err(HeadError::Closed { received_any }),
            Ok(_) => received_any = true,
        }
        loop {
            match ResponseHead::parse_into(&buf, Method::Post, &mut head_bufs) {
                Ok(Some((head, len))) if head.status < 200 => {
                    head_bufs = head.into_bufs();
                    buf.drain(..len);
                }
                Ok(Some((head, len))) => {
                    return Ok(UpstreamHead {
                        head,
                        buf,
                        head_len: len,
                    })
                }
                Ok(None) if buf.len() > MAX_RESPONSE_HEAD => {
                    return Err(HeadError::Protocol("response head too large".into()))
                }
                Ok(None) => break,
                Err(e) => return Err(HeadError::Protocol(e.to_string())),
            }
        }
    }
}
