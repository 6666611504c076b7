//! A completion request once its head and body were read and validated: what the proxy sends
//! upstream and what routing and prediction read about it.

use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::RequestHead;
use std::time::Instant;

/// A completion request that was read and validated, ready to go upstream.
pub struct ProxyRequest {
    /// The client's request head.
    pub head: RequestHead,
    /// The body to forward (the client's bytes, with only the model name spliced if needed),
    /// read once and shared by every attempt without a copy.
    pub body: bytes::Bytes,
    /// Model index in the snapshot.
    pub model: usize,
    /// The model's split arm this request belongs to (0 without a split).
    pub arm: usize,
    /// The request's routing decisions go to the decision log.
    pub sampled: bool,
    /// Which completions endpoint it was sent to.
    pub endpoint: Endpoint,
    /// The request id (client's or generated), sent upstream and back.
    pub request_id: String,
    /// When the request head was read.
    pub started: Instant,
    /// When the whole request must be over (`server.request_timeout` after `started`).
    pub deadline: Instant,
    /// The conversation's hash (`x-session-id`, else `user`), when session affinity is on and
    /// the request names one.
    pub session: Option<u64>,
}
