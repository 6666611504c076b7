//! A ZMQ DEALER for vLLM's KV event replay ROUTER: it asks for every buffered batch from a
//! sequence number on (`["", start_seq]`, the number as 8 big-endian bytes) and reads the
//! replies `["", topic, seq, payload]` until the end marker `["", "", ffffffffffffffff, ""]`.
//!
//! One request per connection, bounded three ways: the whole exchange by a deadline, the
//! batches by a count, each message by a size. An engine whose buffer no longer reaches back
//! to `start_seq` answers from its oldest batch; the caller sees that as a first sequence
//! number above the one it asked for.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::replay::END_SEQ;
use crate::subscriber::{
    connect_endpoint, fill, handshake_within, seq_of, EventMessage, SubscribeError,
};
use crate::zmtp::decoder::MessageDecoder;
use crate::zmtp::write_frame;

/// What one replay request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    /// The whole exchange: connect, handshake, request and every reply.
    pub deadline: Duration,
    /// Batches accepted; the request fails past this many.
    pub max_batches: usize,
    /// Largest reply message (all frames).
    pub max_message_bytes: usize,
}

impl Default for ReplayLimits {
    fn default() -> Self {
        ReplayLimits {
            deadline: Duration::from_secs(5),
            max_batches: 100_000,
            max_message_bytes: 64 << 20,
        }
    }
}

/// Why a replay did not complete. All of these come from the engine's side and end the
/// request; another request may succeed (the configuration errors of
/// [`SubscribeError::Endpoint`] and [`SubscribeError::BindAddress`] excepted).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Connecting, the handshake or the socket failed.
    #[error(transparent)]
    Socket(#[from] SubscribeError),
    /// The end marker had not come by the deadline.
    #[error("KV events replay did not finish within {0:?}")]
    Deadline(Duration),
    /// More batches than [`ReplayLimits::max_batches`].
    #[error("KV events replay sent more than {0} batches")]
    TooMany(usize),
    /// A reply that is not `["", topic, seq, payload]`.
    #[error("KV events replay reply of {frames} frames is not [\"\", topic, seq, payload]")]
    Malformed {
        /// How many frames it had.
        frames: usize,
    },
}

/// Asks the ROUTER at `endpoint` for every buffered batch with a sequence number of at least
/// `start_seq`; returns them oldest first.
pub fn replay_from(
    endpoint: &str,
    start_seq: u64,
    limits: ReplayLimits,
) -> Result<Vec<EventMessage>, ReplayError> {
    let started = Instant::now();
    let left = |started: Instant| limits.deadline.saturating_sub(started.elapsed());
    let (mut stream, _) = connect_endpoint(endpoint, left(started))?;
    handshake_within(
        &mut stream,
        endpoint,
        left(started).max(Duration::from_millis(1)),
        b"DEALER",
        &[b"ROUTER"],
    )?;
    let mut request = Vec::with_capacity(16);
    write_frame(&mut request, b"", true, false);
    write_frame(&mut request, &start_seq.to_be_bytes(), false, false);
    stream.write_all(&request).map_err(SubscribeError::Io)?;

    let mut decoder = MessageDecoder::new(limits.max_message_bytes, 4);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        while let Some(m) = decoder.next_message().map_err(SubscribeError::Frames)? {
            if m.command {
                continue;
            }
            let frames = m.frames.len();
            let [empty, topic, seq, payload]: [Vec<u8>; 4] = m
                .frames
                .try_into()
                .map_err(|_| ReplayError::Malformed { frames })?;
            let seq_number = seq_of(&seq).filter(|_| empty.is_empty());
            let Some(seq_number) = seq_number else {
                return Err(ReplayError::Malformed { frames });
            };
            if seq == END_SEQ {
                return Ok(out);
            }
            if out.len() == limits.max_batches {
                return Err(ReplayError::TooMany(limits.max_batches));
            }
            out.push(EventMessage {
                topic,
                seq: seq_number,
                payload,
            });
        }
        let remaining = left(started);
        if remaining.is_zero() {
            return Err(ReplayError::Deadline(limits.deadline));
        }
        stream
            .set_read_timeout(Some(remaining.max(Duration::from_millis(1))))
            .map_err(SubscribeError::Io)?;
        fill(&mut stream, &mut buf, &mut decoder)?;
    }
}
