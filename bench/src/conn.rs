//! One keep-alive HTTP/1.1 connection and one request/response exchange on it.
//!
//! Framing comes from `inferrail-wire` (head parsing, content-length, chunked): the generator reads
//! every response to its end so the connection can carry the next request, and never parses HTTP
//! itself.

use std::io;
use std::net::SocketAddr;

use bytes::Bytes;
use inferrail_wire::{BodyFraming, ChunkedDecoder, HeadError, Method, ResponseHead};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;

/// Largest response head accepted before the exchange is called broken.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Read buffer size; a read asks for at least this much room.
const READ_CHUNK: usize = 16 * 1024;
/// Largest 2xx response body kept for the caller (to read its `usage`); longer ones are skipped.
const MAX_KEPT_BODY: usize = 1024 * 1024;

/// An open connection and its read buffer (kept across requests to avoid reallocating).
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    stream: TcpStream,
    /// Bytes read but not yet consumed.
    buf: Vec<u8>,
}

/// How an exchange ended when a complete response arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The final (non-1xx) status code.
    pub status: u16,
    /// The connection may carry another request.
    pub reusable: bool,
    /// The (de-chunked) body of a 2xx response of at most [`MAX_KEPT_BODY`] bytes; empty otherwise.
    pub body: Vec<u8>,
}

/// Why an exchange produced no complete response. Every variant leaves the connection unusable.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// Writing or reading failed, or the peer closed before the response ended.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The response head is not valid HTTP/1.x.
    #[error("bad response head: {0}")]
    Head(#[from] HeadError),
    /// The chunked body is malformed.
    #[error("bad chunked body: {0}")]
    Chunked(#[from] inferrail_wire::ChunkedError),
    /// The head grew past [`MAX_HEAD_BYTES`].
    #[error("response head too large")]
    HeadTooLarge,
}

impl Conn {
    /// Connects to `addr` with Nagle off (requests are written in one piece).
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect_addr(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(READ_CHUNK),
        })
    }

    /// Writes `request` (a complete request made with `method`) and reads the response to its end.
    pub async fn exchange(
        &mut self,
        request: Bytes,
        method: Method,
    ) -> Result<Response, ExchangeError> {
        let (written, _) = self.stream.write_all(request).await;
        written?;
        self.buf.clear();
        let (head, used) = self.read_head(method).await?;
        let leftover = self.buf.len() - used;
        let mut body = Vec::new();
        let keep = (200..300).contains(&head.status);
        let body_ended_cleanly = match head.framing {
            BodyFraming::Length(n) => {
                let keep = (keep && n <= MAX_KEPT_BODY as u64).then_some(&mut body);
                self.skip_length(n, used, leftover, keep).await?
            }
            BodyFraming::Chunked => self.skip_chunked(used, keep.then_some(&mut body)).await?,
            BodyFraming::UntilClose => self.skip_until_close().await?,
        };
        Ok(Response {
            status: head.status,
            reusable: !head.close && body_ended_cleanly,
            body,
        })
    }

    /// Reads until a final response head is complete; returns it and the bytes of `buf` it used.
    async fn read_head(&mut self, method: Method) -> Result<(ResponseHead, usize), ExchangeError> {
        loop {
            if let Some((head, used)) = ResponseHead::parse(&self.buf, method)? {
                if (100..200).contains(&head.status) {
                    // Interim response (100 Continue and the like): skip it.
                    self.buf.drain(..used);
                    continue;
                }
                return Ok((head, used));
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(ExchangeError::HeadTooLarge);
            }
            self.read_more().await?;
        }
    }

    /// Skips a content-length body of which `have` bytes are already buffered at `buf[start..]`,
    /// appending it to `keep` when given. Returns false when more bytes than the body arrived (the
    /// connection is then out of step and not reused).
    async fn skip_length(
        &mut self,
        len: u64,
        start: usize,
        have: usize,
        mut keep: Option<&mut Vec<u8>>,
    ) -> Result<bool, ExchangeError> {
        let mut remaining = len.saturating_sub(have as u64);
        let mut clean = have as u64 <= len;
        if let Some(out) = keep.as_deref_mut() {
            let n = have.min(len as usize);
            out.extend_from_slice(&self.buf[start..start + n]);
        }
        while remaining > 0 {
            self.buf.clear();
            let n = self.read_more().await? as u64;
            if let Some(out) = keep.as_deref_mut() {
                out.extend_from_slice(&self.buf[..n.min(remaining) as usize]);
            }
            clean = n <= remaining;
            remaining = remaining.saturating_sub(n);
        }
        Ok(clean)
    }

    /// Follows a chunked body that starts at `buf[start..]` to its end, appending its data to
    /// `keep` when given (up to [`MAX_KEPT_BODY`]; a longer body leaves `keep` empty).
    async fn skip_chunked(
        &mut self,
        start: usize,
        mut keep: Option<&mut Vec<u8>>,
    ) -> Result<bool, ExchangeError> {
        let mut decoder = ChunkedDecoder::new();
        let mut progress = decoder.feed(&self.buf[start..], keep.as_deref_mut())?;
        let mut pos = start + progress.consumed;
        while !progress.done {
            if keep.as_ref().is_some_and(|k| k.len() > MAX_KEPT_BODY) {
                keep.take().map(Vec::clear);
            }
            self.buf.clear();
            self.read_more().await?;
            progress = decoder.feed(&self.buf, keep.as_deref_mut())?;
            pos = progress.consumed;
        }
        if let Some(k) = keep.filter(|k| k.len() > MAX_KEPT_BODY) {
            k.clear();
        }
        Ok(pos == self.buf.len())
    }

    /// Reads until the peer closes. The connection is never reusable afterwards.
    async fn skip_until_close(&mut self) -> Result<bool, ExchangeError> {
        loop {
            self.buf.clear();
            match self.read_some().await? {
                0 => return Ok(false),
                _ => continue,
            }
        }
    }

    /// Appends at least one byte to `buf`; the peer closing first is an error.
    async fn read_more(&mut self) -> Result<usize, ExchangeError> {
        match self.read_some().await? {
            0 => Err(ExchangeError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the response ended",
            ))),
            n => Ok(n),
        }
    }

    /// One read appended to `buf`; 0 means the peer closed.
    async fn read_some(&mut self) -> io::Result<usize> {
        let mut buf = std::mem::take(&mut self.buf);
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let len = buf.len();
        let (result, slice) = self.stream.read(buf.slice_mut(len..)).await;
        self.buf = slice.into_inner();
        result
    }
}

/// How a streamed (SSE) exchange ended when a complete response arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseResponse {
    /// The final (non-1xx) status code.
    pub status: u16,
    /// When the first complete SSE event arrived (`None`: no event, e.g. an error body).
    pub first_event: Option<std::time::Instant>,
    /// When `data: [DONE]` arrived.
    pub done_at: Option<std::time::Instant>,
    /// What the event scanner saw over the whole body.
    pub events: crate::sse::SseSummary,
}

/// Receives a response as it arrives, for callers that time what they see (streams).
pub trait BodySink {
    /// The final (non-1xx) response head, as soon as it is complete.
    fn head(&mut self, head: &ResponseHead);
    /// The next body bytes (de-chunked), as soon as they were read.
    fn body(&mut self, bytes: &[u8]);
}

/// How a streamed exchange ended when a complete response arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streamed {
    /// The final (non-1xx) status code.
    pub status: u16,
    /// The connection may carry another request.
    pub reusable: bool,
}

impl Conn {
    /// Writes `request` and reads the response to its end, handing the head and then the body
    /// bytes to `sink` as they arrive (not once the body is whole).
    pub async fn exchange_streaming(
        &mut self,
        request: Bytes,
        method: Method,
        sink: &mut impl BodySink,
    ) -> Result<Streamed, ExchangeError> {
        let (written, _) = self.stream.write_all(request).await;
        written?;
        self.buf.clear();
        let (head, used) = self.read_head(method).await?;
        sink.head(&head);
        let clean = match head.framing {
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                let mut payload = Vec::new();
                let mut start = used;
                loop {
                    payload.clear();
                    let progress = decoder.feed(&self.buf[start..], Some(&mut payload))?;
                    sink.body(&payload);
                    if progress.done {
                        break start + progress.consumed == self.buf.len();
                    }
                    self.buf.clear();
                    self.read_more().await?;
                    start = 0;
                }
            }
            BodyFraming::Length(n) => {
                // Error bodies (and a non-streamed answer) come with a length.
                let mut remaining = n;
                let mut start = used;
                loop {
                    let have = (self.buf.len() - start) as u64;
                    let take = have.min(remaining) as usize;
                    sink.body(&self.buf[start..start + take]);
                    remaining -= take as u64;
                    if remaining == 0 {
                        break have == take as u64;
                    }
                    self.buf.clear();
                    self.read_more().await?;
                    start = 0;
                }
            }
            BodyFraming::UntilClose => {
                let mut start = used;
                loop {
                    sink.body(&self.buf[start..]);
                    self.buf.clear();
                    start = 0;
                    if self.read_some().await? == 0 {
                        break false;
                    }
                }
            }
        };
        Ok(Streamed {
            status: head.status,
            reusable: !head.close && clean,
        })
    }

    /// Writes `request` and reads a response whose body may be a chunked `text/event-stream`,
    /// parsing its SSE events as the bytes arrive (not once the body is whole), so the time of
    /// the first event and of `data: [DONE]` are those a streaming client sees.
    pub async fn exchange_sse(
        &mut self,
        request: Bytes,
        method: Method,
    ) -> Result<SseResponse, ExchangeError> {
        let mut sink = SseTimes::default();
        let streamed = self.exchange_streaming(request, method, &mut sink).await?;
        sink.scanner.finish();
        Ok(SseResponse {
            status: streamed.status,
            first_event: sink.first_event,
            done_at: sink.done_at,
            events: sink.scanner.summary(),
        })
    }
}

/// The sink of [`Conn::exchange_sse`]: scans events and notes when the first one and
/// `[DONE]` arrived.
#[derive(Debug, Default)]
struct SseTimes {
    scanner: crate::sse::SseScanner,
    first_event: Option<std::time::Instant>,
    done_at: Option<std::time::Instant>,
}

impl BodySink for SseTimes {
    fn head(&mut self, _: &ResponseHead) {}

    fn body(&mut self, bytes: &[u8]) {
        self.scanner.feed(bytes);
        let s = self.scanner.summary();
        if self.first_event.is_none() && s.events > 0 {
            self.first_event = Some(std::time::Instant::now());
        }
        if self.done_at.is_none() && s.done {
            self.done_at = Some(std::time::Instant::now());
        }
    }
}
