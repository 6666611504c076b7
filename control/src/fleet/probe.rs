//! An HTTP/1.1 GET client for the control thread's engine probes.
//!
//! [`http_get`] opens one fresh connection per call (`connection: close`); [`http_get_reusing`]
//! keeps the connection between calls of one loop (the scrape loop, every 100 ms by default), so
//! a scrape costs no TCP handshake and teardown. Both bound the whole exchange (connect
//! included) by a timeout and the body by a byte cap, and turn every way an engine can misbehave
//! into a typed [`ProbeError`]. It never panics, whatever the peer sends,
//! and it stops reading the moment the cap is exceeded. It runs on a monoio runtime with the
//! timer enabled (the control thread's).

use inferrail_wire::{BodyFraming, ChunkedDecoder, Method, ResponseHead};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use std::net::SocketAddr;
use std::time::Duration;

/// Largest response head accepted (status line and headers), in bytes.
pub const MAX_HEAD: usize = 64 * 1024;

/// Size of one socket read: a vLLM `/metrics` page (about 50 to 60 KiB) in one or two reads.
const READ_CHUNK: usize = 64 * 1024;

/// A response read in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The final (non-1xx) status code.
    pub status: u16,
    /// The body with transfer framing removed; never longer than the cap given to [`http_get`].
    pub body: Vec<u8>,
}

/// Why a probe got no complete response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The TCP connection could not be established (refused, unreachable, ...).
    #[error("connect failed: {0}")]
    Connect(String),
    /// The exchange did not complete within the timeout.
    #[error("timeout")]
    Timeout,
    /// The body is (or was declared) longer than the cap.
    #[error("response larger than {cap} bytes")]
    TooLarge {
        /// The cap that was exceeded.
        cap: usize,
    },
    /// The peer sent something that is not a valid HTTP/1.x response, or the request could not
    /// be formed (an authority or path with forbidden bytes).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connection closed (or failed) before the response was complete.
    #[error("connection closed before the response was complete")]
    Closed,
}

/// GETs `path` from `addr` with `Host: authority`, on a fresh connection that is closed after.
///
/// Guarantees: the whole exchange, connect included, takes at most about `timeout`
/// ([`ProbeError::Timeout`]); at most `cap` body bytes are kept and reading stops as soon as the
/// body is known to exceed `cap` ([`ProbeError::TooLarge`]); content-length, chunked and
/// close-delimited bodies are all read; interim 1xx heads are skipped.
pub async fn http_get(
    addr: SocketAddr,
    authority: &str,
    path: &str,
    timeout: Duration,
    cap: usize,
) -> Result<Fetched, ProbeError> {
    get(&mut None, false, addr, authority, path, timeout, cap).await
}

/// [`http_get`] over `conn`, the connection kept from this loop's previous call (if any), with
/// the same bounds. A kept connection the engine closed meanwhile (closed before any response
/// byte) is replaced by a fresh one within the same call; after a complete response that allows
/// it (`content-length` or chunked, no `connection: close`, no bytes beyond it) the connection
/// is kept in `conn` for the next call, and after anything else (an error, a timeout) `conn` is
/// left empty.
pub async fn http_get_reusing(
    conn: &mut Option<TcpStream>,
    addr: SocketAddr,
    authority: &str,
    path: &str,
    timeout: Duration,
    cap: usize,
) -> Result<Fetched, ProbeError> {
    get(conn, true, addr, authority, path, timeout, cap).await
}

/// One GET within `timeout`: on the connection kept in `conn` if there is one (replaced by a
/// fresh one when the engine closed it while idle), else on a fresh one; the connection is put
/// back in `conn` only after a complete response that allows reuse. `keep_alive` is the
/// request's `connection` header.
async fn get(
    conn: &mut Option<TcpStream>,
    keep_alive: bool,
    addr: SocketAddr,
    authority: &str,
    path: &str,
    timeout: Duration,
    cap: usize,
) -> Result<Fetched, ProbeError> {
    let request = build_request(authority, path, keep_alive)?;
    let kept = conn.take();
    let reusing = async {
        if let Some(stream) = kept {
            match exchange(stream, &request, cap).await {
                // The engine closed the idle connection: not an answer, try a fresh one.
                Err(Failure {
                    error: ProbeError::Closed,
                    received_any: false,
                }) => {}
                other => return other,
            }
        }
        exchange(connect(addr).await?, &request, cap).await
    };
    match monoio::time::timeout(timeout, reusing).await {
        Ok(Ok((fetched, reusable))) => {
            *conn = reusable;
            Ok(fetched)
        }
        Ok(Err(failure)) => Err(failure.error),
        Err(_) => Err(ProbeError::Timeout),
    }
}

/// The request bytes; refuses an authority or path that could split the request.
fn build_request(authority: &str, path: &str, keep_alive: bool) -> Result<Vec<u8>, ProbeError> {
    let clean = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
    if !clean(authority) {
        return Err(ProbeError::Protocol(format!(
            "invalid authority {authority:?}"
        )));
    }
    if !clean(path) || !path.starts_with('/') {
        return Err(ProbeError::Protocol(format!("invalid path {path:?}")));
    }
    let connection = if keep_alive { "keep-alive" } else { "close" };
    Ok(format!(
        "GET {path} HTTP/1.1\r\nhost: {authority}\r\nuser-agent: inferrail-probe\r\n\
         accept: */*\r\nconnection: {connection}\r\n\r\n"
    )
    .into_bytes())
}

/// Why an exchange gave no response, and whether any response byte had arrived (a kept
/// connection that fails before one was closed by the engine while idle).
struct Failure {
    error: ProbeError,
    received_any: bool,
}

impl From<ProbeError> for Failure {
    fn from(error: ProbeError) -> Failure {
        Failure {
            error,
            received_any: false,
        }
    }
}

/// Opens a connection to `addr`.
async fn connect(addr: SocketAddr) -> Result<TcpStream, Failure> {
    let stream = TcpStream::connect_addr(addr)
        .await
        .map_err(|e| ProbeError::Connect(e.to_string()))?;
    // Nagle only delays a single small write; failing to disable it changes nothing else.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Sends `request` on `stream` and reads the response; returns it and the stream when the
/// connection may carry another request.
async fn exchange(
    mut stream: TcpStream,
    request: &[u8],
    cap: usize,
) -> Result<(Fetched, Option<TcpStream>), Failure> {
    let (written, _) = stream.write_all(request.to_vec()).await;
    written.map_err(|_| ProbeError::Closed)?;
    let mut reader = Reader {
        stream,
        chunk: Vec::with_capacity(READ_CHUNK),
        received_any: false,
        surplus: false,
    };
    let read = async {
        let (head, rest) = read_head(&mut reader).await?;
        let body = match head.framing {
            BodyFraming::Length(n) => read_length(&mut reader, rest, n, cap).await?,
            BodyFraming::Chunked => read_chunked(&mut reader, rest, cap).await?,
            BodyFraming::UntilClose => read_until_close(&mut reader, rest, cap).await?,
        };
        Ok::<_, ProbeError>((head, body))
    };
    let read = read.await;
    let (head, body) = read.map_err(|error| Failure {
        error,
        received_any: reader.received_any,
    })?;
    let reusable = !head.close && head.framing != BodyFraming::UntilClose && !reader.surplus;
    let fetched = Fetched {
        status: head.status,
        body,
    };
    Ok((fetched, reusable.then_some(reader.stream)))
}

/// A stream plus one reusable read buffer.
struct Reader {
    stream: TcpStream,
    chunk: Vec<u8>,
    /// Some response byte arrived.
    received_any: bool,
    /// Bytes beyond the response arrived (the connection cannot carry another request).
    surplus: bool,
}

impl Reader {
    /// Reads once; returns the bytes read (empty at end of stream).
    async fn read(&mut self) -> Result<&[u8], ProbeError> {
        let mut buf = std::mem::take(&mut self.chunk);
        buf.clear();
        let (res, buf) = self.stream.read(buf).await;
        self.chunk = buf;
        match res {
            Ok(n) => {
                self.received_any |= n > 0;
                Ok(&self.chunk)
            }
            Err(_) => Err(ProbeError::Closed),
        }
    }
}

/// Reads until a final (non-1xx) head is complete; returns it and the bytes after it.
async fn read_head(reader: &mut Reader) -> Result<(ResponseHead, Vec<u8>), ProbeError> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        match ResponseHead::parse(&buf, Method::Get) {
            Ok(Some((head, used))) => {
                buf.drain(..used);
                match head.status {
                    101 => {
                        return Err(ProbeError::Protocol(
                            "unexpected protocol switch (101)".into(),
                        ))
                    }
                    100..=199 => continue,
                    _ => return Ok((head, buf)),
                }
            }
            Ok(None) => {}
            Err(e) => return Err(ProbeError::Protocol(e.to_string())),
        }
        if buf.len() >= MAX_HEAD {
            return Err(ProbeError::Protocol(format!(
                "response head longer than {MAX_HEAD} bytes"
            )));
        }
        let bytes = reader.read().await?;
        if bytes.is_empty() {
            return Err(ProbeError::Closed);
        }
        buf.extend_from_slice(bytes);
    }
}

/// A content-length body: refused before reading when the length exceeds `cap`.
async fn read_length(
    reader: &mut Reader,
    mut body: Vec<u8>,
    len: u64,
    cap: usize,
) -> Result<Vec<u8>, ProbeError> {
    let len = match usize::try_from(len) {
        Ok(len) if len <= cap => len,
        _ => return Err(ProbeError::TooLarge { cap }),
    };
    reader.surplus |= body.len() > len;
    body.truncate(len);
    // The length is bounded by `cap`: room for the whole body at once, not a doubling per read.
    body.reserve_exact(len - body.len());
    while body.len() < len {
        let bytes = reader.read().await?;
        if bytes.is_empty() {
            return Err(ProbeError::Closed);
        }
        let take = bytes.len().min(len - body.len());
        let surplus = take < bytes.len();
        body.extend_from_slice(&bytes[..take]);
        reader.surplus |= surplus;
    }
    Ok(body)
}

/// A chunked body, de-chunked; fails as soon as the decoded length exceeds `cap`.
async fn read_chunked(
    reader: &mut Reader,
    rest: Vec<u8>,
    cap: usize,
) -> Result<Vec<u8>, ProbeError> {
    let mut decoder = ChunkedDecoder::new();
    let mut body = Vec::new();
    // Whether the body ended, and whether bytes followed its end in `input`.
    let mut feed = |input: &[u8], body: &mut Vec<u8>| -> Result<(bool, bool), ProbeError> {
        let progress = decoder
            .feed(input, Some(body))
            .map_err(|e| ProbeError::Protocol(e.to_string()))?;
        if body.len() > cap {
            return Err(ProbeError::TooLarge { cap });
        }
        Ok((
            progress.done,
            progress.done && progress.consumed < input.len(),
        ))
    };
    if let (true, surplus) = feed(&rest, &mut body)? {
        reader.surplus |= surplus;
        return Ok(body);
    }
    loop {
        let bytes = reader.read().await?;
        if bytes.is_empty() {
            return Err(ProbeError::Closed);
        }
        if let (true, surplus) = feed(bytes, &mut body)? {
            reader.surplus |= surplus;
            return Ok(body);
        }
    }
}

/// A body that runs until the peer closes; fails as soon as it exceeds `cap`.
async fn read_until_close(
    reader: &mut Reader,
    mut body: Vec<u8>,
    cap: usize,
) -> Result<Vec<u8>, ProbeError> {
    loop {
        if body.len() > cap {
            return Err(ProbeError::TooLarge { cap });
        }
        let bytes = reader.read().await?;
        if bytes.is_empty() {
            return Ok(body);
        }
        body.extend_from_slice(bytes);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream as StdStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    /// Runs `fut` to completion on a fresh monoio runtime with the timer enabled, like the
    /// control thread's.
    pub(crate) fn run<F: std::future::Future>(fut: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
            .block_on(fut)
    }

    /// A tiny engine on 127.0.0.1: every accepted connection is handed to `behaviour` on its
    /// own thread. The accept loop ends when the server is dropped.
    pub(crate) struct TestEngine {
        pub(crate) addr: SocketAddr,
        stop: Arc<AtomicBool>,
    }

    impl TestEngine {
        pub(crate) fn start<F>(behaviour: F) -> TestEngine
        where
            F: Fn(StdStream) + Send + Sync + 'static,
        {
            let behaviour = Arc::new(behaviour);
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.set_nonblocking(true).expect("nonblocking");
            let addr = listener.local_addr().expect("addr");
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            std::thread::spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            stream.set_nonblocking(false).expect("blocking");
                            let behaviour = behaviour.clone();
                            std::thread::spawn(move || behaviour(stream));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            });
            TestEngine { addr, stop }
        }
    }

    impl Drop for TestEngine {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Reads a request head; returns the request target, or "" if the peer went away.
    pub(crate) fn read_request(stream: &mut StdStream) -> String {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buf = Vec::new();
        let mut byte = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(0) | Err(_) => return String::new(),
                Ok(n) => buf.extend_from_slice(&byte[..n]),
            }
        }
        let text = String::from_utf8_lossy(&buf);
        text.split(' ').nth(1).unwrap_or("").to_string()
    }

    /// Accepts, reads the request, never answers; holds the socket until the client leaves.
    pub(crate) fn hung(mut stream: StdStream) {
        read_request(&mut stream);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let mut sink = [0u8; 64];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    }

    /// Writes `total` bytes of body in 64 KiB pieces; returns how many were written.
    pub(crate) fn pour(stream: &mut StdStream, total: usize, chunked: bool) -> usize {
        let piece = vec![b'x'; 64 * 1024];
        let mut written = 0;
        while written < total {
            let n = piece.len().min(total - written);
            let ok = if chunked {
                stream
                    .write_all(format!("{n:x}\r\n").as_bytes())
                    .and_then(|()| stream.write_all(&piece[..n]))
                    .and_then(|()| stream.write_all(b"\r\n"))
            } else {
                stream.write_all(&piece[..n])
            };
            if ok.is_err() {
                return written;
            }
            written += n;
        }
        if chunked {
            let _ = stream.write_all(b"0\r\n\r\n");
        }
        written
    }

    const FIFTY_MB: usize = 50 * 1024 * 1024;

    fn get(addr: SocketAddr, timeout: Duration, cap: usize) -> Result<Fetched, ProbeError> {
        run(http_get(addr, "engine-1:8000", "/metrics", timeout, cap))
    }

    #[test]
    fn content_length_body_after_an_interim_head() {
        let engine = TestEngine::start(|mut s| {
            assert_eq!(read_request(&mut s), "/metrics");
            let _ = s.write_all(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            );
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert_eq!(
            got,
            Ok(Fetched {
                status: 200,
                body: b"hello".to_vec()
            })
        );
    }

    #[test]
    fn request_names_host_and_asks_to_close() {
        let engine = TestEngine::start(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut byte = [0u8; 256];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut byte) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&byte[..n]),
                }
            }
            let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
            let body = format!(
                "{}{}",
                u8::from(text.contains("host: engine-1:8000\r\n")),
                u8::from(text.contains("connection: close\r\n"))
            );
            let _ = write!(s, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{body}");
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert_eq!(got.map(|f| f.body), Ok(b"11".to_vec()));
    }

    #[test]
    fn chunked_body_is_dechunked() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n\
                  4\r\nnot \r\n5\r\nready\r\n0\r\n\r\n",
            );
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert_eq!(
            got,
            Ok(Fetched {
                status: 503,
                body: b"not ready".to_vec()
            })
        );
    }

    #[test]
    fn close_delimited_body_runs_to_eof() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil ");
            std::thread::sleep(Duration::from_millis(20));
            let _ = s.write_all(b"close");
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert_eq!(got.map(|f| f.body), Ok(b"until close".to_vec()));
    }

    #[test]
    fn declared_length_over_cap_is_refused_without_reading() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = write!(s, "HTTP/1.1 200 OK\r\ncontent-length: {FIFTY_MB}\r\n\r\n");
            pour(&mut s, FIFTY_MB, false);
        });
        let started = Instant::now();
        let got = get(engine.addr, Duration::from_secs(20), 4 * 1024 * 1024);
        assert_eq!(
            got,
            Err(ProbeError::TooLarge {
                cap: 4 * 1024 * 1024
            })
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn chunked_body_over_cap_stops_reading() {
        let (tx, rx) = std::sync::mpsc::channel::<usize>();
        let engine = TestEngine::start(move |mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
            let _ = tx.send(pour(&mut s, FIFTY_MB, true));
        });
        let started = Instant::now();
        let got = get(engine.addr, Duration::from_secs(20), 1024 * 1024);
        assert_eq!(got, Err(ProbeError::TooLarge { cap: 1024 * 1024 }));
        assert!(started.elapsed() < Duration::from_secs(10));
        let written = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("server done");
        assert!(written < FIFTY_MB, "server wrote all {written} bytes");
    }

    #[test]
    fn endless_page_ends_in_too_large_or_timeout() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
            pour(&mut s, usize::MAX, false);
        });
        let timeout = Duration::from_secs(2);
        let started = Instant::now();
        let got = get(engine.addr, timeout, 1024 * 1024);
        assert!(
            matches!(got, Err(ProbeError::TooLarge { .. } | ProbeError::Timeout)),
            "{got:?}"
        );
        assert!(started.elapsed() < timeout + Duration::from_secs(3));
    }

    #[test]
    fn silent_engine_times_out() {
        let engine = TestEngine::start(hung);
        let timeout = Duration::from_millis(200);
        let started = Instant::now();
        let got = get(engine.addr, timeout, 1024);
        assert_eq!(got, Err(ProbeError::Timeout));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(150), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"\x16\x03\x01\x00garbage, not http\r\n\r\n");
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert!(matches!(got, Err(ProbeError::Protocol(_))), "{got:?}");
    }

    #[test]
    fn bad_chunk_framing_is_a_protocol_error() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n");
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert!(matches!(got, Err(ProbeError::Protocol(_))), "{got:?}");
    }

    #[test]
    fn short_body_is_closed() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this");
        });
        let got = get(engine.addr, Duration::from_secs(5), 1024);
        assert_eq!(got, Err(ProbeError::Closed));
    }

    #[test]
    fn refused_connection_is_connect() {
        let addr = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr")
        };
        let got = get(addr, Duration::from_secs(5), 1024);
        assert!(matches!(got, Err(ProbeError::Connect(_))), "{got:?}");
    }

    #[test]
    fn request_splitting_is_refused() {
        let addr: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let got = run(http_get(
            addr,
            "a\r\nx: y",
            "/health",
            Duration::from_secs(1),
            64,
        ));
        assert!(matches!(got, Err(ProbeError::Protocol(_))), "{got:?}");
        let got = run(http_get(addr, "a", "health", Duration::from_secs(1), 64));
        assert!(matches!(got, Err(ProbeError::Protocol(_))), "{got:?}");
    }

    /// An engine that counts its connections and answers `ok` to every request on each, with
    /// `extra` header lines; `per_connection` requests at most, then closes without saying so.
    fn counting_engine(
        extra: &'static str,
        per_connection: usize,
    ) -> (TestEngine, Arc<std::sync::atomic::AtomicUsize>) {
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        let engine = TestEngine::start(move |mut s| {
            count.fetch_add(1, Ordering::SeqCst);
            for _ in 0..per_connection {
                if read_request(&mut s).is_empty() {
                    return;
                }
                // One write, so that bytes beyond the body arrive with it.
                let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{extra}\r\nok");
                let _ = s.write_all(answer.as_bytes());
            }
        });
        (engine, accepted)
    }

    /// One kept-connection GET of `/metrics` from `engine`, 5 s and 64 bytes at most.
    async fn get_metrics(
        conn: &mut Option<TcpStream>,
        engine: &TestEngine,
    ) -> Result<Fetched, ProbeError> {
        http_get_reusing(
            conn,
            engine.addr,
            "e:1",
            "/metrics",
            Duration::from_secs(5),
            64,
        )
        .await
    }

    #[test]
    fn a_kept_connection_serves_the_next_gets() {
        let (engine, accepted) = counting_engine("", 100);
        let mut conn = None;
        for _ in 0..3 {
            let got = run(get_metrics(&mut conn, &engine));
            assert_eq!(got.map(|f| f.body), Ok(b"ok".to_vec()));
            assert!(
                conn.is_some(),
                "kept after a complete content-length answer"
            );
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for three GETs"
        );
    }

    #[test]
    fn a_kept_connection_the_engine_closed_is_replaced_within_the_call() {
        let (engine, accepted) = counting_engine("", 1);
        let mut conn = None;
        run(async {
            for _ in 0..3 {
                let got = get_metrics(&mut conn, &engine).await;
                assert_eq!(got.map(|f| f.body), Ok(b"ok".to_vec()));
                // Let the engine's close reach the kept socket before the next GET.
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            3,
            "a fresh connection each time"
        );
    }

    #[test]
    fn an_answer_that_closes_or_overruns_leaves_no_connection_kept() {
        for extra in ["connection: close\r\n", "x: 1\r\n\r\nok"] {
            // The second answer carries bytes beyond its body (an answer nobody asked for).
            let (engine, _) = counting_engine(extra, 100);
            let mut conn = None;
            let got = run(get_metrics(&mut conn, &engine));
            assert!(got.is_ok(), "{extra:?}: {got:?}");
            assert!(conn.is_none(), "{extra:?}: the connection must not be kept");
        }
    }

    #[test]
    fn a_kept_get_says_keep_alive_and_a_one_shot_says_close() {
        assert!(
            String::from_utf8(build_request("e:1", "/metrics", true).unwrap())
                .unwrap()
                .contains("connection: keep-alive\r\n")
        );
        assert!(
            String::from_utf8(build_request("e:1", "/health", false).unwrap())
                .unwrap()
                .contains("connection: close\r\n")
        );
    }
}
