//! One client connection's shared state, used by both the simulator's server and the scripted
//! engine: a reader task that always has a cancelable read posted (so a client close is seen at
//! once, whatever the handler is doing), an inbox the handler parses requests from, and one
//! `Canceller` for every read and write. Closing a connection cancels its pending operations, so
//! no io_uring operation is dropped in flight (which would keep the socket open and could lose
//! bytes).

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::task::{Poll, Waker};

use inferrail_wire::{BodyFraming, ChunkedDecoder, HeadError, RequestHead};
use monoio::io::{CancelHandle, CancelableAsyncReadRent, Canceller, OwnedReadHalf};
use monoio::net::TcpStream;

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
    pub(crate) handle: CancelHandle,
    /// A completion request arrived on this connection.
    pub(crate) carried_completion: Cell<bool>,
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
            carried_completion: Cell::new(false),
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

    /// Whether the engine side closed the connection (rather than the client).
    pub(crate) fn closed_by_engine(&self) -> bool {
        self.closed.get()
    }

    /// Registers the handler's waker for the next change (bytes, end of input, close).
    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.set(Some(waker.clone()));
    }

    /// Resolves on the next change after this call. Only the handler task waits here.
    pub(crate) fn changed(&self) -> impl Future<Output = ()> + '_ {
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

/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// An idle connection is closed after this long without a request.
pub(crate) const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What waiting for the next request head on a connection gave.
pub(crate) enum NextHead {
    Head(RequestHead),
    /// The connection ended or idled out between requests.
    Done,
    /// An unreadable head: answer this status and close.
    Bad(u16),
}

/// Waits for the next complete request head in the inbox (closing an idle connection after
/// `IDLE_TIMEOUT`).
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

/// Why a request body could not be read.
pub(crate) enum BodyError {
    Gone,
    Malformed,
    TooLarge,
}

/// Reads a request body of `framing` from the inbox (content-length or chunked, capped at
/// `MAX_BODY`).
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
