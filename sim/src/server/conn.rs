//! The server side of one client connection: request heads and bodies read from the shared
//! connection state ([`crate::conn_state`], also used by the scripted engine), and cancelable
//! writes of responses and SSE events.

use monoio::io::{CancelableAsyncWriteRentExt, OwnedWriteHalf};
use monoio::net::TcpStream;

pub(crate) use crate::conn_state::{next_head, read_body, read_loop, BodyError, Conn, NextHead};

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
