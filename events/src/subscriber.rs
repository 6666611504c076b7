//! A ZMQ SUB socket for one engine's KV event stream: it connects to the engine's PUB endpoint
//! over TCP (ZMTP 3.0, NULL mechanism), subscribes to a topic prefix and yields each message as
//! `[topic, seq, payload]`, the way vLLM's `ZmqEventPublisher` sends them.
//!
//! Blocking, on the caller's thread, with every wait bounded: connecting by
//! [`SubscriberConfig::connect_timeout`], the handshake by the same, and each
//! [`Subscriber::receive`] by [`SubscriberConfig::idle_timeout`] (it then returns
//! [`Received::Idle`], so a caller can check its own deadlines on a silent stream). A message
//! larger than [`SubscriberConfig::max_message_bytes`] drops the connection instead of growing
//! memory. Reconnecting, with backoff, is the caller's decision: a dropped connection loses
//! the messages published meanwhile (use [`crate::replay_client`] to fetch them).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::zmtp::decoder::{FrameError, Message, MessageDecoder};
use crate::zmtp::{self, write_frame, EndpointError, Target};

/// How a subscriber connects and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberConfig {
    /// The engine's PUB endpoint, `tcp://host:port` (a `*` bind address is the engine's own
    /// configuration, not a place to connect to: resolve it first).
    pub endpoint: String,
    /// Topic prefix to subscribe to (vLLM's default topic is empty: everything).
    pub topic: Vec<u8>,
    /// Bound on the TCP connect and on the handshake.
    pub connect_timeout: Duration,
    /// How long [`Subscriber::receive`] waits for bytes before returning [`Received::Idle`].
    pub idle_timeout: Duration,
    /// Largest message accepted (all frames); larger drops the connection.
    pub max_message_bytes: usize,
}

impl SubscriberConfig {
    /// A configuration for `endpoint` with the defaults: every topic, 1 s to connect, 1 s idle
    /// wait, 64 MiB messages.
    pub fn new(endpoint: impl Into<String>) -> Self {
        SubscriberConfig {
            endpoint: endpoint.into(),
            topic: Vec::new(),
            connect_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            max_message_bytes: 64 << 20,
        }
    }
}

/// Why a subscription failed. Every variant comes from the engine side (its address, its
/// socket, its bytes); all of them end the connection, and a reconnect after a backoff may
/// succeed, except [`SubscribeError::Endpoint`] and [`SubscribeError::BindAddress`], which
/// are configuration errors no retry fixes.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The endpoint is not `tcp://host:port`.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The endpoint is a bind address (`*` or `::`), which cannot be connected to.
    #[error("KV events endpoint {0:?} is a bind address; connect to the engine's host instead")]
    BindAddress(String),
    /// No address of the endpoint accepted a connection in time.
    #[error("cannot connect to KV events endpoint {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The last error.
        source: io::Error,
    },
    /// The ZMTP handshake failed (not a ZMQ PUB socket, another mechanism, timeout).
    #[error("KV events handshake with {endpoint} failed: {source}")]
    Handshake {
        /// The endpoint.
        endpoint: String,
        /// What went wrong.
        source: io::Error,
    },
    /// Reading from the socket failed.
    #[error("KV events stream: {0}")]
    Io(#[from] io::Error),
    /// The publisher closed the connection.
    #[error("KV events publisher closed the connection")]
    Closed,
    /// The bytes stopped being ZMTP.
    #[error("KV events stream: {0}")]
    Frames(#[from] FrameError),
}

/// One published message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMessage {
    /// The topic frame.
    pub topic: Vec<u8>,
    /// The batch's sequence number.
    pub seq: u64,
    /// The msgpack payload ([`crate::decode_batch`] reads it).
    pub payload: Vec<u8>,
}

/// What [`Subscriber::receive`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A message shaped `[topic, seq, payload]`.
    Message(EventMessage),
    /// A data message of another shape (frame count, or a sequence frame not 8 bytes): skipped,
    /// the connection stays up.
    Malformed {
        /// How many frames it had.
        frames: usize,
    },
    /// Nothing arrived within the idle timeout.
    Idle,
}

/// A connected, subscribed SUB socket.
#[derive(Debug)]
pub struct Subscriber {
    stream: TcpStream,
    decoder: MessageDecoder,
    buf: Vec<u8>,
    peer: SocketAddr,
    idle: Duration,
}

/// Frames a KV event message may have (topic, seq, payload), with room for a replay reply's
/// leading empty frame.
const MAX_FRAMES: usize = 4;

/// Connects to `endpoint` (`tcp://host:port`), trying each address it resolves to, within
/// `timeout` each; returns the stream and the address it reached.
pub(crate) fn connect_endpoint(
    endpoint: &str,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), SubscribeError> {
    let addr = match zmtp::parse_endpoint(endpoint)? {
        Target::Connect(a) => a,
        Target::Bind(_) => return Err(SubscribeError::BindAddress(endpoint.to_string())),
    };
    let connect_err = |source| SubscribeError::Connect {
        endpoint: endpoint.to_string(),
        source,
    };
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(connect_err)?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last = e,
        }
    }
    Err(connect_err(last))
}

/// The NULL handshake as `own_type` with a deadline of `timeout`, then the stream set back to
/// blocking reads without a timeout.
pub(crate) fn handshake_within(
    stream: &mut TcpStream,
    endpoint: &str,
    timeout: Duration,
    own_type: &[u8],
    peer_types: &[&[u8]],
) -> Result<(), SubscribeError> {
    let failed = |source| SubscribeError::Handshake {
        endpoint: endpoint.to_string(),
        source,
    };
    stream.set_nodelay(true).map_err(failed)?;
    stream.set_read_timeout(Some(timeout)).map_err(failed)?;
    stream.set_write_timeout(Some(timeout)).map_err(failed)?;
    zmtp::handshake(stream, own_type, peer_types).map_err(failed)
}

/// Reads into `buf` and feeds the decoder; `Ok(false)` when the read timed out.
pub(crate) fn fill(
    stream: &mut TcpStream,
    buf: &mut [u8],
    decoder: &mut MessageDecoder,
) -> Result<bool, SubscribeError> {
    match stream.read(buf) {
        Ok(0) => Err(SubscribeError::Closed),
        Ok(n) => {
            decoder.feed(&buf[..n]);
            Ok(true)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
        Err(e) => Err(SubscribeError::Io(e)),
    }
}

impl Subscriber {
    /// Connects, handshakes as SUB with a PUB or XPUB peer and subscribes to `config.topic`.
    pub fn connect(config: &SubscriberConfig) -> Result<Self, SubscribeError> {
        let (mut stream, peer) = connect_endpoint(&config.endpoint, config.connect_timeout)?;
        handshake_within(
            &mut stream,
            &config.endpoint,
            config.connect_timeout,
            b"SUB",
            &[b"PUB", b"XPUB"],
        )?;
        // ZMTP 3.0 subscriptions are one-frame messages: 0x01 then the topic prefix.
        let mut sub = Vec::with_capacity(config.topic.len() + 10);
        let mut body = Vec::with_capacity(config.topic.len() + 1);
        body.push(1);
        body.extend_from_slice(&config.topic);
        write_frame(&mut sub, &body, false, false);
        stream.write_all(&sub)?;
        let idle = config.idle_timeout.max(Duration::from_millis(1));
        stream.set_read_timeout(Some(idle))?;
        Ok(Subscriber {
            stream,
            decoder: MessageDecoder::new(config.max_message_bytes, MAX_FRAMES),
            buf: vec![0u8; 64 * 1024],
            peer,
            idle,
        })
    }

    /// The address connected to.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The next message, or [`Received::Idle`] after the idle timeout with nothing new.
    pub fn receive(&mut self) -> Result<Received, SubscribeError> {
        let started = Instant::now();
        loop {
            if let Some(m) = self.decoder.next_message()? {
                if m.command {
                    continue;
                }
                return Ok(shape(m));
            }
            // A timed-out read, or a peer trickling bytes slower than whole messages, returns
            // within about one idle timeout.
            if !fill(&mut self.stream, &mut self.buf, &mut self.decoder)?
                || started.elapsed() >= self.idle
            {
                return Ok(Received::Idle);
            }
        }
    }
}

/// The sequence number in a message's 8-byte big-endian frame, `None` for another length.
pub(crate) fn seq_of(frame: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(frame).ok().map(u64::from_be_bytes)
}

/// A data message as `[topic, seq, payload]`, or why not.
fn shape(m: Message) -> Received {
    let frames = m.frames.len();
    let mut it = m.frames.into_iter();
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(topic), Some(seq), Some(payload), None) => match seq_of(&seq) {
            Some(seq) => Received::Message(EventMessage {
                topic,
                seq,
                payload,
            }),
            None => Received::Malformed { frames },
        },
        _ => Received::Malformed { frames },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_take_the_vllm_shape_or_are_called_malformed() {
        let m = |frames: Vec<&[u8]>| Message {
            frames: frames.into_iter().map(<[u8]>::to_vec).collect(),
            command: false,
        };
        assert_eq!(
            shape(m(vec![b"kv", &7u64.to_be_bytes(), b"\x92"])),
            Received::Message(EventMessage {
                topic: b"kv".to_vec(),
                seq: 7,
                payload: b"\x92".to_vec()
            })
        );
        assert_eq!(
            shape(m(vec![b"kv", b"short", b""])),
            Received::Malformed { frames: 3 }
        );
        assert_eq!(shape(m(vec![b"kv"])), Received::Malformed { frames: 1 });
    }

    #[test]
    fn a_bind_address_is_refused_before_any_connect() {
        let cfg = SubscriberConfig::new("tcp://*:5557");
        assert!(matches!(
            Subscriber::connect(&cfg),
            Err(SubscribeError::BindAddress(_))
        ));
        assert!(matches!(
            Subscriber::connect(&SubscriberConfig::new("ipc:///tmp/x")),
            Err(SubscribeError::Endpoint(_))
        ));
    }
}
