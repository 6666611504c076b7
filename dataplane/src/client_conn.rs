//! A client connection's reading side: the bytes read but not used yet, request heads within the
//! header timeout, bodies bounded in size and time, and whole writes back; and the buffers one
//! request borrows from the connection and gives back (write, body, both heads, request id,
//! exchange, timer), so the next keep-alive request allocates none of them.

use crate::exchange::ExchangeBufs;
use bytes::{Bytes, BytesMut};
use inferrail_shards::index::RecordTicket;
use inferrail_wire::{BodyFraming, ChunkedDecoder, ErrorKind, HeadBufs, RequestHead};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::Sleep;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// Largest request head accepted (request line and headers).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Smallest free space offered to a socket read.
const READ_CHUNK: usize = 16 * 1024;

/// A client connection and the bytes read from it but not used yet.
pub struct ClientConn {
    /// The client socket.
    pub stream: TcpStream,
    /// Bytes read and not consumed, starting at `pos`.
    buf: Vec<u8>,
    pos: usize,
    /// The engine read buffer kept between requests so a request does not allocate one.
    spare: Vec<u8>,
    /// The buffer outgoing bytes are built in (the upstream request head, then the client's
    /// response head and first body bytes), kept between requests.
    write_buf: Vec<u8>,
    /// The buffer request bodies are read into. A body is split off it and frozen (shared
    /// with the attempts, no copy); once the request has dropped it, the next body reclaims the
    /// same storage, so a keep-alive request allocates no body buffer.
    body_buf: BytesMut,
    /// The buffers of the next request head and of the next engine response head, given back
    /// once the request is done.
    request_head_bufs: HeadBufs,
    response_head_bufs: HeadBufs,
    /// The next request's id is written here; a proxied request gives it back.
    request_id_buf: String,
    /// The buffers of the next request's exchange (its action queue and replicas tried).
    exchange_bufs: ExchangeBufs<RecordTicket>,
    /// The one timer the connection's reads and its requests' exchanges sleep on, boxed and
    /// kept: a timer entry is 128-byte aligned, and held inline it would make every request
    /// future that sleeps that aligned and large, and copied in full each time one is started.
    /// `None` while a request has taken it ([`ClientConn::take_timer`]).
    timer: Option<Pin<Box<Sleep>>>,
}

/// Largest buffer a connection keeps for its next request; a bigger one is freed.
const KEEP_AT_MOST: usize = 4 * READ_CHUNK;

/// Keeps `buf` (emptied) in `slot` unless it grew past [`KEEP_AT_MOST`].
fn keep(slot: &mut Vec<u8>, mut buf: Vec<u8>) {
    if buf.capacity() <= KEEP_AT_MOST {
        buf.clear();
        *slot = buf;
    }
}

/// A boxed timer set to `at`; it joins the timer wheel only once polled.
fn new_timer(at: Instant) -> Pin<Box<Sleep>> {
    Box::pin(monoio::time::sleep_until(at.into()))
}

/// Why the head of the next request could not be had.
pub(crate) enum HeadFailure {
    /// Clean end: the client closed or idled out between requests. Close silently.
    Idle,
    /// A partial head timed out: answer 408 and close.
    Timeout,
    /// Not HTTP, or too big: answer 400/431 and close.
    Bad(ErrorKind, String),
}

/// Why a request body could not be read.
pub(crate) enum BodyFailure {
    TooLarge,
    Timeout,
    Closed,
    Malformed(String),
}

/// Reads more bytes from `stream` into the spare capacity of `buf`, growing it when needed.
pub(crate) async fn read_more(
    stream: &mut TcpStream,
    mut buf: Vec<u8>,
) -> (std::io::Result<usize>, Vec<u8>) {
    if buf.capacity() - buf.len() < READ_CHUNK {
        buf.reserve(READ_CHUNK);
    }
    let len = buf.len();
    let cap = buf.capacity();
    let (res, slice) = stream
        .read(monoio::buf::IoBufMut::slice_mut(buf, len..cap))
        .await;
    (res, slice.into_inner())
}

impl ClientConn {
    /// Wraps an accepted socket.
    pub fn new(stream: TcpStream) -> ClientConn {
        ClientConn {
            stream,
            buf: Vec::with_capacity(READ_CHUNK),
            pos: 0,
            spare: Vec::new(),
            write_buf: Vec::new(),
            body_buf: BytesMut::new(),
            request_head_bufs: HeadBufs::default(),
            response_head_bufs: HeadBufs::default(),
            request_id_buf: String::new(),
            exchange_bufs: ExchangeBufs::default(),
            timer: None,
        }
    }

    /// Unconsumed bytes already read.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Reads until `deadline`; `Ok(0)` means the peer closed.
    async fn fill(&mut self, deadline: Instant) -> std::io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > self.buf.capacity() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let buf = std::mem::take(&mut self.buf);
        let timer = self.timer.get_or_insert_with(|| new_timer(deadline));
        timer.as_mut().reset(deadline.into());
        let read = read_more(&mut self.stream, buf);
        monoio::select! {
            biased;
            (res, buf) = read => {
                self.buf = buf;
                res
            }
            // The read was cancelled mid-flight: bytes may be lost, so the caller must close.
            _ = timer.as_mut() => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }

    pub(crate) async fn read_head(
        &mut self,
        idle_timeout: Duration,
    ) -> Result<RequestHead, HeadFailure> {
        let deadline = Instant::now() + idle_timeout;
        loop {
            // Between keep-alive requests the buffer is usually empty: read before parsing.
            let parsed = if self.buffered().is_empty() {
                Ok(None)
            } else {
                RequestHead::parse_into(&self.buf[self.pos..], &mut self.request_head_bufs)
            };
            match parsed {
                Ok(Some((head, used))) => {
                    self.consume(used);
                    return Ok(head);
                }
                Ok(None) if self.buffered().len() > MAX_HEAD_BYTES => {
                    return Err(HeadFailure::Bad(
                        ErrorKind::HeaderFieldsTooLarge,
                        "request head too large".into(),
                    ))
                }
                Ok(None) => {}
                Err(inferrail_wire::HeadError::TooManyHeaders) => {
                    return Err(HeadFailure::Bad(
                        ErrorKind::HeaderFieldsTooLarge,
                        "too many header lines".into(),
                    ))
                }
                Err(e) => return Err(HeadFailure::Bad(ErrorKind::BadRequest, e.to_string())),
            }
            let started = !self.buffered().is_empty();
            match self.fill(deadline).await {
                Ok(0) => return Err(HeadFailure::Idle),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut && started => {
                    return Err(HeadFailure::Timeout)
                }
                Err(_) => return Err(HeadFailure::Idle),
            }
        }
    }

    pub(crate) async fn read_body(
        &mut self,
        framing: BodyFraming,
        max: u64,
        deadline: Instant,
    ) -> Result<Bytes, BodyFailure> {
        match framing {
            BodyFraming::Length(n) => {
                if n > max {
                    return Err(BodyFailure::TooLarge);
                }
                let n = n as usize;
                while self.buffered().len() < n {
                    match self.fill(deadline).await {
                        Ok(0) => return Err(BodyFailure::Closed),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                            return Err(BodyFailure::Timeout)
                        }
                        Err(_) => return Err(BodyFailure::Closed),
                    }
                }
                // Reclaims the last body's storage when nothing holds that body any more.
                self.body_buf.reserve(n);
                self.body_buf
                    .extend_from_slice(&self.buf[self.pos..self.pos + n]);
                self.consume(n);
                Ok(self.body_buf.split().freeze())
            }
            BodyFraming::Chunked => {
                // Rare enough that its body is a vector of its own.
                let mut decoder = ChunkedDecoder::new();
                let mut body = Vec::new();
                loop {
                    let progress = decoder
                        .feed(&self.buf[self.pos..], Some(&mut body))
                        .map_err(|e| BodyFailure::Malformed(e.to_string()))?;
                    self.consume(progress.consumed);
                    if body.len() as u64 > max {
                        return Err(BodyFailure::TooLarge);
                    }
                    if progress.done {
                        return Ok(Bytes::from(body));
                    }
                    match self.fill(deadline).await {
                        Ok(0) => return Err(BodyFailure::Closed),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                            return Err(BodyFailure::Timeout)
                        }
                        Err(_) => return Err(BodyFailure::Closed),
                    }
                }
            }
            BodyFraming::UntilClose => Err(BodyFailure::Malformed("no body framing".into())),
        }
    }

    /// The connection's spare buffer (empty, possibly with capacity).
    pub(crate) fn take_spare(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.spare)
    }

    /// Keeps `buf` for the next request unless it grew large.
    pub(crate) fn put_spare(&mut self, buf: Vec<u8>) {
        keep(&mut self.spare, buf);
    }

    /// The connection's buffer for outgoing bytes (empty, possibly with capacity).
    pub(crate) fn take_write_buf(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.write_buf)
    }

    /// Keeps `buf` as the buffer for outgoing bytes unless it grew large.
    pub(crate) fn put_write_buf(&mut self, buf: Vec<u8>) {
        keep(&mut self.write_buf, buf);
    }

    /// The buffer for the next request id (empty, possibly with capacity).
    pub(crate) fn take_request_id_buf(&mut self) -> String {
        std::mem::take(&mut self.request_id_buf)
    }

    /// Keeps a finished request's id buffer for the next id.
    pub(crate) fn put_request_id_buf(&mut self, mut id: String) {
        if id.capacity() <= 256 {
            id.clear();
            self.request_id_buf = id;
        }
    }

    /// The buffers for the next request's exchange.
    pub(crate) fn take_exchange_bufs(&mut self) -> ExchangeBufs<RecordTicket> {
        std::mem::take(&mut self.exchange_bufs)
    }

    /// Keeps a finished exchange's buffers for the next request's.
    pub(crate) fn put_exchange_bufs(&mut self, bufs: ExchangeBufs<RecordTicket>) {
        self.exchange_bufs = bufs;
    }

    /// The connection's timer (a fresh one set to `at` when a request holds the kept one).
    pub(crate) fn take_timer(&mut self, at: Instant) -> Pin<Box<Sleep>> {
        self.timer.take().unwrap_or_else(|| new_timer(at))
    }

    /// Keeps a request's timer as the connection's.
    pub(crate) fn put_timer(&mut self, timer: Pin<Box<Sleep>>) {
        self.timer = Some(timer);
    }

    /// Takes back a finished request's head buffers for the next request's.
    pub(crate) fn put_request_head(&mut self, head: RequestHead) {
        self.request_head_bufs = head.into_bufs();
    }

    /// The buffers for the next engine response head (empty, possibly with capacity).
    pub(crate) fn take_response_head_bufs(&mut self) -> HeadBufs {
        std::mem::take(&mut self.response_head_bufs)
    }

    /// Keeps a relayed response head's buffers for the next one.
    pub(crate) fn put_response_head_bufs(&mut self, bufs: HeadBufs) {
        self.response_head_bufs = bufs;
    }

    /// Lets go of a finished request's body. Its storage is the connection's body buffer's
    /// unless it grew past [`KEEP_AT_MOST`] (then the buffer starts afresh, and the storage is
    /// freed with the body's last holder); the next body reuses it once nothing else holds it (a
    /// write the driver abandoned may still).
    pub(crate) fn put_body(&mut self, body: Bytes) {
        if body.len() > KEEP_AT_MOST {
            self.body_buf = BytesMut::new();
        }
    }

    /// Writes `bytes` to the client; false when the client is gone.
    pub async fn send(&mut self, bytes: Vec<u8>) -> bool {
        let (res, _) = self.stream.write_all(bytes).await;
        res.is_ok()
    }
}
