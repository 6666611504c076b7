//! One client connection's plumbing, the same approach as the scripted engine's: a reader task
//! that always has a cancelable read posted (so a client close is seen at once, whatever the
//! handler is doing), an inbox the handler parses requests from, and cancelable writes. Closing a
//! connection cancels its pending operations, so no io_uring operation is dropped in flight.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::task::{Poll, Waker};
use std::time::Duration;

use inferrail_wire::{BodyFraming, ChunkedDecoder, HeadError, RequestHead};
use monoio::io::{
    CancelHandle, CancelableAsyncReadRent, CancelableAsyncWriteRentExt, Canceller, OwnedReadHalf,
    OwnedWriteHalf,
};
use monoio::net::TcpStream;

/// Largest request head accepted (431 beyond).
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted (413 beyond).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// An idle keep-alive connection is closed after this long (uvicorn's default in vLLM).
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes asked for per read.
const READ_CHUNK: usize = 16 * 1024;

/// State shared by a connection's reader and handler tasks.
pub(crate) struct Conn {
    pub(crate) inbox: RefCell<Vec<u8>>,
    eof: Cell<bool>,
    closed: Cell<bool>,
    version: Cell<u64>,
    waker: Cell<Option<Waker>>,
    canceller: RefCell<Option<Canceller>>,
    handle: CancelHandle,
}

impl Conn {
    pub(crate) fn new() -> Conn {
        let canceller = Canceller::new();
        let handle = canceller.handle();
        Conn {
            inbox: RefCell::new(Vec::new()),
            eof: Cell::new(false),
            closed: Cell::new(false),
            version: Cell::new(0),
            waker: Cell::new(None),
            canceller: RefCell::new(Some(canceller)),
            handle,
        }
    }

    fn notify(&self) {
        self.version.set(self.version.get().wrapping_add(1));
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Closes the connection: cancels its pending reads and writes and wakes the handler.
    pub(crate) fn close(&self) {
        if self.closed.replace(true) {
            return;
        }
        if let Some(c) = self.canceller.borrow_mut().take() {
            drop(c.cancel());
        }
        self.notify();
    }

    /// Whether the client closed its side (or the engine closed the connection).
    pub(crate) fn gone(&self) -> bool {
        self.closed.get() || self.eof.get()
    }

    /// Registers the handler's waker for the next change (bytes, end of input, close).
    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.set(Some(waker.clone()));
    }

    /// Resolves on the next change after this call. Only the handler task waits here.
    fn changed(&self) -> impl Future<Output = ()> + '_ {
        let start = self.version.get();
        poll_fn(move |cx| {
            if self.version.get() != start {
                Poll::Ready(())
            } else {
                self.register(cx.waker());
                Poll::Pending
            }
        })
    }
}

/// The reader task: appends bytes to the inbox until end of input, an error or a cancel.
pub(crate) async fn read_loop(conn: &Conn, mut rd: OwnedReadHalf<TcpStream>) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        let (res, b) = rd.cancelable_read(buf, conn.handle.clone()).await;
        buf = b;
        match res {
            Ok(n) if n > 0 => {
                conn.inbox.borrow_mut().extend_from_slice(&buf[..n]);
                buf.clear();
                conn.notify();
            }
            _ => {
                conn.eof.set(true);
                conn.notify();
                return;
            }
        }
    }
}

/// The handler's output side: the write half and a reusable buffer.
pub(crate) struct Writer {
    wr: OwnedWriteHalf<TcpStream>,
    /// Bytes of the next write.
    pub(crate) out: Vec<u8>,
    /// Status and `Content-Length` (0 for a chunked stream) of the response last started here,
    /// for the `http_*` metrics.
    pub(crate) started: Option<(u16, u64)>,
}

impl Writer {
    pub(crate) fn new(wr: OwnedWriteHalf<TcpStream>) -> Writer {
        Writer {
            wr,
            out: Vec::with_capacity(4096),
            started: None,
        }
    }

    /// Writes `out` in one write and empties it; `Err` when the connection is gone.
    pub(crate) async fn flush(&mut self, conn: &Conn) -> Result<(), ()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.out);
        let (res, mut buf) =
            CancelableAsyncWriteRentExt::write_all(&mut self.wr, buf, conn.handle.clone()).await;
        buf.clear();
        self.out = buf;
        res.map(|_| ()).map_err(|_| ())
    }
}

pub(crate) enum NextHead {
    Head(RequestHead),
    /// The connection ended or idled out between requests.
    Done,
    /// An unreadable head: answer this status and close.
    Bad(u16),
}

pub(crate) async fn next_head(conn: &Conn) -> NextHead {
    loop {
        {
            let mut inbox = conn.inbox.borrow_mut();
            if !inbox.is_empty() {
                match RequestHead::parse(&inbox) {
                    Ok(Some((head, used))) => {
                        inbox.drain(..used);
                        return NextHead::Head(head);
                    }
                    Ok(None) if inbox.len() > MAX_HEAD => return NextHead::Bad(431),
                    Ok(None) => {}
                    Err(HeadError::TooManyHeaders) => return NextHead::Bad(431),
                    Err(_) => return NextHead::Bad(400),
                }
            }
        }
        if conn.gone() {
            return NextHead::Done;
        }
        let idle = conn.inbox.borrow().is_empty();
        let changed = conn.changed();
        if idle {
            let timed_out = monoio::select! {
                _ = monoio::time::sleep(IDLE_TIMEOUT) => true,
                _ = changed => false,
            };
            if timed_out {
                return NextHead::Done;
            }
        } else {
            changed.await;
        }
    }
}

pub(crate) enum BodyError {
    Gone,
    Malformed,
    TooLarge,
}

pub(crate) async fn read_body(conn: &Conn, framing: BodyFraming) -> Result<Vec<u8>, BodyError> {
    match framing {
        BodyFraming::Length(0) => Ok(Vec::new()),
        BodyFraming::Length(n) => {
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_BODY)
                .ok_or(BodyError::TooLarge)?;
            loop {
                {
                    let mut inbox = conn.inbox.borrow_mut();
                    if inbox.len() >= n {
                        let body = inbox[..n].to_vec();
                        inbox.drain(..n);
                        return Ok(body);
                    }
                }
                if conn.gone() {
                    return Err(BodyError::Gone);
                }
                conn.changed().await;
            }
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut body = Vec::new();
            loop {
                {
                    let mut inbox = conn.inbox.borrow_mut();
                    if !inbox.is_empty() {
                        let p = decoder
                            .feed(&inbox, Some(&mut body))
                            .map_err(|_| BodyError::Malformed)?;
                        inbox.drain(..p.consumed);
                        if p.done {
                            return Ok(body);
                        }
                        if body.len() > MAX_BODY {
                            return Err(BodyError::TooLarge);
                        }
                    }
                }
                if conn.gone() {
                    return Err(BodyError::Gone);
                }
                conn.changed().await;
            }
        }
        BodyFraming::UntilClose => Err(BodyError::Malformed),
    }
}
