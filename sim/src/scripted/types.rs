//! The plain data types of the scripted engine: what it is told to do and what it reports.

use std::time::{Duration, Instant};

/// How the engine treats completion requests (`POST /v1/chat/completions`, `POST /v1/completions`).
///
/// `/health` and `/v1/models` are always answered normally; only [`Behavior::Refuse`] reaches them,
/// because it closes the listener itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Answer at once, streaming or not as the request's `"stream"` asks (one content chunk).
    Instant,
    /// Streaming requests get `chunks` content chunks `interval` apart (the head and the role chunk
    /// go out at once); non-streaming ones are answered after `chunks * interval`. `chunks: 0` acts
    /// as 1.
    Stream {
        /// Content chunks (completion tokens) per response.
        chunks: usize,
        /// Pause before each content chunk.
        interval: Duration,
    },
    /// Wait `delay` before the response head, then answer as [`Behavior::Instant`].
    Slow {
        /// Time between the end of the request and the response head.
        delay: Duration,
    },
    /// Read the request and never answer, until the client closes the connection.
    Hang,
    /// Answer with this status and an OpenAI error body (503 also sends `retry-after: 1`).
    Status {
        /// The HTTP status code to answer with.
        code: u16,
    },
    /// Read the request, then close the connection without sending a byte.
    CloseBeforeResponse,
    /// Stop listening (connections are refused) until another behavior is set; connections that
    /// are open get closed too.
    Refuse,
    /// Write these exact bytes (a whole HTTP response, any framing), one write per part, `gap`
    /// apart; keep the connection afterwards only if the bytes form one well-framed response.
    Raw {
        /// The response bytes, one write each.
        parts: Vec<Vec<u8>>,
        /// Pause between two writes.
        gap: Duration,
    },
}

/// How to start a [`crate::ScriptedEngine`].
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// TCP port; 0 picks an ephemeral port on 127.0.0.1.
    pub port: u16,
    /// The served model name; requests naming another model get vLLM's 404.
    pub model: String,
    /// The behavior at start.
    pub behavior: Behavior,
    /// Keep a copy of every completion request for [`crate::ScriptedEngine::received`]. The copies
    /// are never dropped, so long benchmark runs should turn this off.
    pub record: bool,
}

impl EngineOptions {
    /// Ephemeral port, [`Behavior::Instant`], recording on.
    pub fn new(model: &str) -> Self {
        EngineOptions {
            port: 0,
            model: model.to_owned(),
            behavior: Behavior::Instant,
            record: true,
        }
    }
}

/// Counters the engine keeps about completion requests and connections.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Completion requests whose head was read.
    pub requests: u64,
    /// Completion requests read but not yet fully answered or abandoned.
    pub in_flight: u64,
    /// High-water mark of `in_flight`.
    pub max_in_flight: u64,
    /// Requests abandoned because the client closed before the response ended.
    pub client_disconnects: u64,
    /// When the engine noticed the latest such close.
    pub last_disconnect: Option<Instant>,
    /// TCP connections accepted (health checks and scrapes included).
    pub connections_accepted: u64,
    /// Connections that carried at least one completion request.
    pub completion_connections: u64,
}

/// One completion request as the engine received it (body de-chunked).
#[derive(Clone, Debug)]
pub struct ReceivedRequest {
    /// The method token, e.g. `POST`.
    pub method: String,
    /// The request target as sent (path, and query if any).
    pub path: String,
    /// Header lines in wire order, names as sent (lossy UTF-8).
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte (de-chunked when it came chunked).
    pub body: Vec<u8>,
    /// When the engine parsed the request head.
    pub received_at: Instant,
}

impl ReceivedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
