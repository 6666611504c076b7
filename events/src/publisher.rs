//! A ZMQ PUB socket for KV events, speaking ZMTP 3.0 over TCP with the NULL mechanism, written
//! by hand on blocking `std::net`, publishing like vLLM's `ZmqEventPublisher`.
//!
//! - **Endpoint.** As vLLM does, the socket *binds* when the endpoint contains `*` or `::`
//!   (`tcp://*:5557` binds every IPv4 interface) and *connects* otherwise (reconnecting every
//!   100 ms, like libzmq, when the peer goes away). Only `tcp://` is supported.
//! - **Messages.** Each batch is one three-frame message `[topic, seq, payload]`: the topic's
//!   bytes, the batch's sequence number (from 0, as an 8-byte big-endian integer) and the
//!   msgpack payload ([`KvEventBatch::encode`]).
//! - **Subscriptions.** A subscriber only gets messages whose topic frame starts with one of
//!   its subscriptions, accepted both as ZMTP 3.0 messages (`\x01topic` / `\x00topic`) and as
//!   ZMTP 3.1 `SUBSCRIBE` / `CANCEL` commands. As with libzmq, messages published before a
//!   subscription arrives are not delivered to it.
//! - **Never blocking the engine.** [`KvEventPublisher::publish`] only puts the batch on a
//!   bounded queue; a dedicated thread encodes and writes it. A full queue drops the batch (and
//!   counts it) instead of waiting. A subscriber that cannot take a message within
//!   [`PublisherConfig::send_timeout`] is disconnected (libzmq would drop its messages at the
//!   high-water mark instead; a half-written frame leaves no other choice).
//!
//! - **Replay.** With [`PublisherConfig::replay_endpoint`], the last
//!   [`PublisherConfig::buffer_steps`] batches are kept and served on a ROUTER socket (see
//!   [`crate::replay`]).

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::batch::KvEventBatch;
use crate::lock;
use crate::replay::{ReplayBuffer, ReplayServer};
use crate::zmtp::{self, read_frame, split_command, write_frame, EndpointError, Target};

/// The largest frame a subscriber may send (subscriptions are tiny).
const MAX_INBOUND_FRAME: u64 = 1 << 20;

/// How the publisher is set up (vLLM's `KVEventsConfig` names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    /// `tcp://host:port`; bound when it contains `*` or `::`, connected to otherwise.
    pub endpoint: String,
    /// The topic frame of every message (vLLM's default is empty).
    pub topic: String,
    /// Batches waiting for the publisher thread before new ones are dropped.
    pub max_queue_size: usize,
    /// How long one subscriber may take to accept a message before it is disconnected.
    pub send_timeout: Duration,
    /// vLLM's `replay_endpoint`: a ROUTER socket (always bound) answering replay requests.
    pub replay_endpoint: Option<String>,
    /// vLLM's `buffer_steps`: how many of the latest batches the replay socket can serve.
    pub buffer_steps: usize,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            endpoint: "tcp://*:5557".into(),
            topic: String::new(),
            max_queue_size: 100_000,
            send_timeout: Duration::from_secs(1),
            replay_endpoint: None,
            buffer_steps: 10_000,
        }
    }
}

/// Why a publisher could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublisherError {
    /// The endpoint is not a `tcp://host:port` address.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// Binding the endpoint failed.
    #[error("cannot bind KV events endpoint {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// The error.
        source: io::Error,
    },
    /// A thread could not be spawned.
    #[error("cannot start the KV events publisher thread: {0}")]
    Thread(io::Error),
}

/// One connected subscriber, as the publisher thread sees it.
struct Peer {
    stream: TcpStream,
    subs: Arc<Mutex<Vec<Vec<u8>>>>,
    alive: Arc<AtomicBool>,
}

struct Shared {
    shutdown: AtomicBool,
    peers: Mutex<Vec<Peer>>,
    dropped: AtomicU64,
    published: AtomicU64,
    send_timeout: Duration,
}

/// A running KV event publisher; dropping it sends what is queued, then closes its sockets.
pub struct KvEventPublisher {
    tx: Option<SyncSender<KvEventBatch>>,
    replay: Option<ReplayServer>,
    shared: Arc<Shared>,
    publisher: Option<JoinHandle<()>>,
    acceptor: Option<JoinHandle<()>>,
    local_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for KvEventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvEventPublisher")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl KvEventPublisher {
    /// Binds (or starts connecting to) `config.endpoint` and starts the publisher thread.
    pub fn start(config: PublisherConfig) -> Result<Self, PublisherError> {
        let target = zmtp::parse_endpoint(&config.endpoint)?;
        // vLLM binds the replay socket before it starts publishing.
        let replay = match &config.replay_endpoint {
            Some(ep) => Some(ReplayServer::start(
                ep,
                config.topic.as_bytes().to_vec(),
                config.buffer_steps,
                config.send_timeout,
            )?),
            None => None,
        };
        let buffer = replay.as_ref().map(ReplayServer::buffer);
        let shared = Arc::new(Shared {
            shutdown: AtomicBool::new(false),
            peers: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            published: AtomicU64::new(0),
            send_timeout: config.send_timeout,
        });
        let (tx, rx) = mpsc::sync_channel(config.max_queue_size.max(1));
        let mut local_addr = None;
        let acceptor = match target {
            Target::Bind(addr) => {
                let listener = TcpListener::bind(&addr).map_err(|source| PublisherError::Bind {
                    endpoint: config.endpoint.clone(),
                    source,
                })?;
                local_addr = listener.local_addr().ok();
                listener
                    .set_nonblocking(true)
                    .map_err(|source| PublisherError::Bind {
                        endpoint: config.endpoint.clone(),
                        source,
                    })?;
                let sh = shared.clone();
                Some(
                    thread::Builder::new()
                        .name("kv-events-accept".into())
                        .spawn(move || accept_loop(listener, sh))
                        .map_err(PublisherError::Thread)?,
                )
            }
            Target::Connect(addr) => {
                let sh = shared.clone();
                thread::Builder::new()
                    .name("kv-events-connect".into())
                    .spawn(move || connect_loop(addr, sh))
                    .map_err(PublisherError::Thread)?;
                None
            }
        };
        let sh = shared.clone();
        let topic = config.topic.into_bytes();
        let publisher = thread::Builder::new()
            .name("kv-events-pub".into())
            .spawn(move || publish_loop(rx, topic, sh, buffer))
            .map_err(PublisherError::Thread);
        let publisher = match publisher {
            Ok(p) => p,
            Err(e) => {
                shared.shutdown.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        Ok(KvEventPublisher {
            tx: Some(tx),
            shared,
            publisher: Some(publisher),
            acceptor,
            local_addr,
            replay,
        })
    }

    /// Queues a batch for publishing; never blocks. Returns `false` (and counts the batch as
    /// dropped) when the queue is full.
    pub fn publish(&self, batch: KvEventBatch) -> bool {
        let Some(tx) = &self.tx else { return false };
        match tx.try_send(batch) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The bound address, when the endpoint binds (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// The replay socket's bound address, when `replay_endpoint` is set.
    pub fn replay_addr(&self) -> Option<SocketAddr> {
        self.replay.as_ref().map(ReplayServer::local_addr)
    }

    /// Connected subscribers that completed the handshake.
    pub fn num_peers(&self) -> usize {
        let peers = lock(&self.shared.peers);
        peers
            .iter()
            .filter(|p| p.alive.load(Ordering::SeqCst))
            .count()
    }

    /// Active subscriptions over all connected subscribers.
    pub fn num_subscriptions(&self) -> usize {
        let peers = lock(&self.shared.peers);
        peers
            .iter()
            .filter(|p| p.alive.load(Ordering::SeqCst))
            .map(|p| lock(&p.subs).len())
            .sum()
    }

    /// Batches dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Batches sent so far (the next sequence number).
    pub fn published(&self) -> u64 {
        self.shared.published.load(Ordering::SeqCst)
    }
}

impl Drop for KvEventPublisher {
    fn drop(&mut self) {
        // Closing the queue lets the publisher thread send what is left, then exit.
        drop(self.tx.take());
        if let Some(p) = self.publisher.take() {
            let _ = p.join();
        }
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let peers = std::mem::take(&mut *lock(&self.shared.peers));
        for p in peers {
            p.alive.store(false, Ordering::SeqCst);
            let _ = p.stream.shutdown(Shutdown::Both);
        }
        // Closes the replay socket and its connections.
        drop(self.replay.take());
    }
}

fn publish_loop(
    rx: Receiver<KvEventBatch>,
    topic: Vec<u8>,
    shared: Arc<Shared>,
    buffer: Option<Arc<ReplayBuffer>>,
) {
    let mut seq: u64 = 0;
    let mut msg = Vec::new();
    while let Ok(batch) = rx.recv() {
        let payload = batch.encode();
        msg.clear();
        write_frame(&mut msg, &topic, true, false);
        write_frame(&mut msg, &seq.to_be_bytes(), true, false);
        write_frame(&mut msg, &payload, false, false);
        if let Some(b) = &buffer {
            b.push(seq, payload.into());
        }
        seq += 1;
        {
            let mut peers = lock(&shared.peers);
            peers.retain(|p| p.alive.load(Ordering::SeqCst));
            for p in peers.iter_mut() {
                let wanted = lock(&p.subs).iter().any(|s| topic.starts_with(s));
                if wanted && (&p.stream).write_all(&msg).is_err() {
                    p.alive.store(false, Ordering::SeqCst);
                    let _ = p.stream.shutdown(Shutdown::Both);
                }
            }
        }
        shared.published.store(seq, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let sh = shared.clone();
                let _ = thread::Builder::new()
                    .name("kv-events-peer".into())
                    .spawn(move || {
                        let _ = serve_peer(stream, &sh);
                    });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(10))
            }
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn connect_loop(addr: String, shared: Arc<Shared>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map(|a| a.collect())
            .unwrap_or_default();
        for a in addrs {
            if let Ok(stream) = TcpStream::connect_timeout(&a, Duration::from_millis(500)) {
                let _ = serve_peer(stream, &shared);
                break;
            }
        }
        // libzmq's default reconnect interval.
        thread::sleep(Duration::from_millis(100));
    }
}

/// Handshakes with one subscriber, registers it, then reads its subscriptions until it leaves.
fn serve_peer(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    handshake(&mut stream)?;
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(Some(shared.send_timeout))?;
    let subs = Arc::new(Mutex::new(Vec::new()));
    let alive = Arc::new(AtomicBool::new(true));
    {
        let mut peers = lock(&shared.peers);
        if shared.shutdown.load(Ordering::SeqCst) {
            return Ok(());
        }
        peers.push(Peer {
            stream: stream.try_clone()?,
            subs: subs.clone(),
            alive: alive.clone(),
        });
    }
    let result = read_subscriptions(&mut stream, &subs, &alive);
    alive.store(false, Ordering::SeqCst);
    let _ = stream.shutdown(Shutdown::Both);
    result
}

fn read_subscriptions(
    stream: &mut TcpStream,
    subs: &Mutex<Vec<Vec<u8>>>,
    alive: &AtomicBool,
) -> io::Result<()> {
    // Whether the next frame starts a message (subscriptions are single-frame messages).
    let mut at_message_start = true;
    while alive.load(Ordering::SeqCst) {
        let frame = read_frame(stream, MAX_INBOUND_FRAME)?;
        if frame.command {
            let (name, data) = split_command(&frame.body)?;
            match name {
                b"SUBSCRIBE" => lock(subs).push(data.to_vec()),
                b"CANCEL" => cancel(&mut lock(subs), data),
                _ => {}
            }
            continue;
        }
        if at_message_start && !frame.more {
            match frame.body.split_first() {
                Some((1, topic)) => lock(subs).push(topic.to_vec()),
                Some((0, topic)) => cancel(&mut lock(subs), topic),
                _ => {}
            }
        }
        at_message_start = !frame.more;
    }
    Ok(())
}

fn cancel(subs: &mut Vec<Vec<u8>>, topic: &[u8]) {
    if let Some(i) = subs.iter().position(|s| s == topic) {
        subs.swap_remove(i);
    }
}

fn handshake(stream: &mut TcpStream) -> io::Result<()> {
    zmtp::handshake(stream, b"PUB", &[b"SUB", b"XSUB"])
}
