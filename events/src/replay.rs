//! vLLM's KV event replay socket: a ZMQ ROUTER (ZMTP 3.0, NULL mechanism, hand-written on
//! blocking `std::net` like [`crate::publisher`]) serving the latest published batches again.
//!
//! The protocol, as a real vLLM 0.32 answers it (`events/tests/fixtures/kv_events/replay_*`):
//! - **Request.** A client (normally a DEALER) sends the two-frame message
//!   `["", start_seq]`, `start_seq` a big-endian integer (8 bytes). vLLM's ROUTER sees
//!   `[identity, "", start_seq]`; any other shape is ignored (vLLM logs a warning).
//! - **Replies.** One four-frame message `["", topic, seq (8 bytes BE), payload]` per buffered
//!   batch whose seq is at least `start_seq`, oldest first, with the payload bytes exactly as
//!   published, then the end marker `["", "", ffffffffffffffff, ""]`.
//! - **Buffer.** The latest `buffer_steps` batches (vLLM's `deque(maxlen=buffer_steps)`).
//! - **Endpoint.** Always bound (`tcp://*:P` on every IPv4 interface, `tcp://host:P` on that
//!   address), as vLLM binds its ROUTER whatever the endpoint.
//!
//! Each connection has its own thread; a client that does not read its replies within the
//! publisher's send timeout is disconnected. The publisher thread only appends to the buffer,
//! so a slow replay never delays publishing (vLLM serves replays on its publisher thread).

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::lock;
use crate::publisher::PublisherError;
use crate::zmtp::{self, read_frame, write_frame, Target};

/// vLLM's end-of-replay sequence number, `(-1).to_bytes(8, "big", signed=True)`.
pub const END_SEQ: [u8; 8] = [0xff; 8];

/// The latest published batches, `(seq, payload)`, oldest first.
#[derive(Debug)]
pub(crate) struct ReplayBuffer {
    items: Mutex<VecDeque<(u64, Arc<[u8]>)>>,
    cap: usize,
}

impl ReplayBuffer {
    fn new(cap: usize) -> Self {
        ReplayBuffer {
            items: Mutex::new(VecDeque::with_capacity(cap.min(1024))),
            cap,
        }
    }

    /// Appends a published batch, forgetting the oldest beyond the capacity.
    pub(crate) fn push(&self, seq: u64, payload: Arc<[u8]>) {
        if self.cap == 0 {
            return;
        }
        let mut items = lock(&self.items);
        while items.len() >= self.cap {
            items.pop_front();
        }
        items.push_back((seq, payload));
    }

    /// The buffered batches with seq at least `start`.
    fn since(&self, start: u64) -> Vec<(u64, Arc<[u8]>)> {
        let items = lock(&self.items);
        let first = items.partition_point(|(s, _)| *s < start);
        items.range(first..).cloned().collect()
    }
}

struct Shared {
    shutdown: AtomicBool,
    buffer: Arc<ReplayBuffer>,
    topic: Vec<u8>,
    send_timeout: Duration,
    next_peer: AtomicU64,
    peers: Mutex<Vec<(u64, TcpStream)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A running replay socket; dropping it closes the socket and every connection.
pub(crate) struct ReplayServer {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    local_addr: SocketAddr,
}

impl std::fmt::Debug for ReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl ReplayServer {
    /// Binds `endpoint` and starts accepting replay clients.
    pub(crate) fn start(
        endpoint: &str,
        topic: Vec<u8>,
        buffer_steps: usize,
        send_timeout: Duration,
    ) -> Result<Self, PublisherError> {
        let addr = match zmtp::parse_endpoint(endpoint)? {
            Target::Bind(a) | Target::Connect(a) => a,
        };
        let bind_err = |source| PublisherError::Bind {
            endpoint: endpoint.to_string(),
            source,
        };
        let listener = TcpListener::bind(&addr).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let shared = Arc::new(Shared {
            shutdown: AtomicBool::new(false),
            buffer: Arc::new(ReplayBuffer::new(buffer_steps)),
            topic,
            send_timeout,
            next_peer: AtomicU64::new(0),
            peers: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let sh = shared.clone();
        let acceptor = thread::Builder::new()
            .name("kv-replay-accept".into())
            .spawn(move || accept_loop(listener, sh))
            .map_err(PublisherError::Thread)?;
        Ok(ReplayServer {
            shared,
            acceptor: Some(acceptor),
            local_addr,
        })
    }

    /// The buffer the publisher thread appends to.
    pub(crate) fn buffer(&self) -> Arc<ReplayBuffer> {
        self.shared.buffer.clone()
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for (_, s) in lock(&self.shared.peers).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let id = shared.next_peer.fetch_add(1, Ordering::Relaxed);
                let registered = stream.try_clone().map(|s| {
                    let mut peers = lock(&shared.peers);
                    peers.push((id, s));
                });
                if registered.is_err() {
                    continue;
                }
                let sh = shared.clone();
                let spawned =
                    thread::Builder::new()
                        .name("kv-replay-peer".into())
                        .spawn(move || {
                            let _ = serve_client(stream, &sh);
                            lock(&sh.peers).retain(|(p, _)| *p != id);
                        });
                let mut threads = lock(&shared.threads);
                threads.retain(|t| !t.is_finished());
                match spawned {
                    Ok(t) => threads.push(t),
                    Err(_) => lock(&shared.peers).retain(|(p, _)| *p != id),
                }
            }
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A request's start sequence number: the frame as a big-endian unsigned integer (any
/// length, as Python's `int.from_bytes`), saturating.
pub(crate) fn start_seq(bytes: &[u8]) -> u64 {
    let mut v: u64 = 0;
    for &b in bytes {
        if v > u64::MAX >> 8 {
            return u64::MAX;
        }
        v = (v << 8) | u64::from(b);
    }
    v
}

/// Appends the reply carrying one buffered batch: `["", topic, seq, payload]`.
pub(crate) fn write_batch_reply(out: &mut Vec<u8>, topic: &[u8], seq: u64, payload: &[u8]) {
    write_frame(out, b"", true, false);
    write_frame(out, topic, true, false);
    write_frame(out, &seq.to_be_bytes(), true, false);
    write_frame(out, payload, false, false);
}

/// Appends the end marker `["", "", END_SEQ, ""]`.
pub(crate) fn write_end_marker(out: &mut Vec<u8>) {
    write_frame(out, b"", true, false);
    write_frame(out, b"", true, false);
    write_frame(out, &END_SEQ, true, false);
    write_frame(out, b"", false, false);
}

/// The largest frame a replay client may send (a request is an empty frame and 8 bytes).
const MAX_REQUEST_FRAME: u64 = 1 << 16;

fn serve_client(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    zmtp::handshake(&mut stream, b"ROUTER", &[b"DEALER", b"REQ", b"ROUTER"])?;
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(Some(shared.send_timeout))?;
    let mut message: Vec<Vec<u8>> = Vec::new();
    let mut out = Vec::new();
    while !shared.shutdown.load(Ordering::SeqCst) {
        let frame = read_frame(&mut stream, MAX_REQUEST_FRAME)?;
        if frame.command {
            // PING and other commands carry no request.
            continue;
        }
        message.push(frame.body);
        if frame.more {
            if message.len() > 16 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "replay request too long",
                ));
            }
            continue;
        }
        let request = std::mem::take(&mut message);
        // vLLM's ROUTER sees [identity, delimiter, start_seq]; anything else is ignored.
        if request.len() != 2 {
            continue;
        }
        let batches = shared.buffer.since(start_seq(&request[1]));
        // Written in slices so a long replay never needs one huge buffer.
        for chunk in batches.chunks(64) {
            out.clear();
            for (seq, payload) in chunk {
                write_batch_reply(&mut out, &shared.topic, *seq, payload);
            }
            stream.write_all(&out)?;
        }
        out.clear();
        write_end_marker(&mut out);
        stream.write_all(&out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_seq_is_big_endian_and_saturates() {
        assert_eq!(start_seq(&[0; 8]), 0);
        assert_eq!(start_seq(&5u64.to_be_bytes()), 5);
        assert_eq!(start_seq(&[1, 0]), 256);
        assert_eq!(start_seq(&[]), 0);
        assert_eq!(start_seq(&[1; 9]), u64::MAX);
    }

    #[test]
    fn buffer_keeps_the_latest() {
        let b = ReplayBuffer::new(3);
        for s in 0..5u64 {
            b.push(s, vec![s as u8].into());
        }
        let seqs = |v: Vec<(u64, Arc<[u8]>)>| v.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
        assert_eq!(seqs(b.since(0)), [2, 3, 4]);
        assert_eq!(seqs(b.since(4)), [4]);
        assert!(b.since(5).is_empty());
        let none = ReplayBuffer::new(0);
        none.push(0, vec![].into());
        assert!(none.since(0).is_empty());
    }

    #[test]
    fn end_marker_frames() {
        let mut out = Vec::new();
        write_end_marker(&mut out);
        let mut want = vec![1, 0, 1, 0, 1, 8];
        want.extend_from_slice(&END_SEQ);
        want.extend_from_slice(&[0, 0]);
        assert_eq!(out, want);
    }
}
