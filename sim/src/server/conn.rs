//! The server side of one client connection: request heads and bodies read from the shared
//! connection state ([`crate::conn_state`], also used by the scripted engine), and cancelable
//! writes of responses and SSE events.

use std::time::Duration;

use inferrail_wire::{BodyFraming, ChunkedDecoder, HeadError, RequestHead};
use monoio::io::{CancelableAsyncWriteRentExt, OwnedWriteHalf};
use monoio::net::TcpStream;

pub(crate) use crate::conn_state::{read_loop, Conn};

/// Largest request head accepted (431 beyond).
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted (413 beyond).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// An idle keep-alive connection is closed after this long (uvicorn's default in vLLM).
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

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
