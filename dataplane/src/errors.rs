//! Why an upstream attempt failed, where the failure came from, and whether a retry is allowed.

use crate::metrics::ErrorReason;
use inferrail_wire::ErrorKind;

/// One failed attempt at an engine. Every variant happened before any response byte reached the
/// client; failures after that point end the request instead of producing an `AttemptError`.
#[derive(Debug)]
pub enum AttemptError {
    /// TCP connect failed.
    Connect(std::io::Error),
    /// TCP connect did not finish within `server.connect_timeout`.
    ConnectTimeout,
    /// The engine closed or reset the connection before a complete response head.
    EngineClosed {
        /// The connection came from the idle pool (it may have been closed while idle).
        reused: bool,
        /// No response byte at all was received.
        nothing_received: bool,
    },
    /// The engine answered 502, 503 or 504 and another attempt is allowed.
    Unavailable(u16),
    /// No response head within the request deadline.
    Timeout,
    /// The engine sent something that is not an HTTP/1.x response.
    Protocol(String),
    /// The client went away while the gateway waited.
    ClientGone,
    /// The replica left rotation (failed health checks or was ejected) while the request waited
    /// for its response head; nothing reached the client, so the request moves elsewhere.
    LeftRotation,
}

impl AttemptError {
    /// True when the request may move to another replica (or be tried again).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            AttemptError::Connect(_)
                | AttemptError::ConnectTimeout
                | AttemptError::EngineClosed { .. }
                | AttemptError::Unavailable(_)
                | AttemptError::LeftRotation
        )
    }

    /// Whether the failure counts against the replica's health (passive ejection). The client
    /// leaving, a stale pooled connection and a replica already out of rotation do not.
    pub fn counts_against_replica(&self) -> bool {
        !matches!(self, AttemptError::ClientGone | AttemptError::LeftRotation)
            && !self.stale_reuse()
    }

    /// True when the failure is the classic stale keep-alive race: a pooled connection the engine
    /// had closed. Such an attempt is repeated once at once on a fresh connection, uncounted.
    pub fn stale_reuse(&self) -> bool {
        matches!(
            self,
            AttemptError::EngineClosed {
                reused: true,
                nothing_received: true
            }
        )
    }

    /// The metrics label for this failure.
    pub fn reason(&self) -> ErrorReason {
        match self {
            AttemptError::Connect(_) | AttemptError::ConnectTimeout => ErrorReason::ConnectFailed,
            AttemptError::EngineClosed { .. } => ErrorReason::EngineClosed,
            AttemptError::Unavailable(_) => ErrorReason::EngineUnavailable,
            AttemptError::Timeout => ErrorReason::UpstreamTimeout,
            AttemptError::Protocol(_) => ErrorReason::UpstreamProtocol,
            AttemptError::ClientGone => ErrorReason::ClientDisconnected,
            AttemptError::LeftRotation => ErrorReason::ReplicaLeftRotation,
        }
    }

    /// The error the client gets when this was the last attempt.
    pub fn client_error(&self, replica: &str) -> (ErrorKind, String) {
        match self {
            AttemptError::Connect(e) => (
                ErrorKind::BadGateway,
                format!("could not connect to engine {replica}: {e}"),
            ),
            AttemptError::ConnectTimeout => (
                ErrorKind::BadGateway,
                format!("connecting to engine {replica} timed out"),
            ),
            AttemptError::EngineClosed { .. } => (
                ErrorKind::BadGateway,
                format!("engine {replica} closed the connection before answering"),
            ),
            AttemptError::Unavailable(status) => (
                ErrorKind::ServiceUnavailable,
                format!("engine {replica} answered {status}"),
            ),
            AttemptError::Timeout => (
                ErrorKind::GatewayTimeout,
                format!("engine {replica} did not answer within the request timeout"),
            ),
            AttemptError::Protocol(what) => (
                ErrorKind::BadGateway,
                format!("engine {replica} sent an invalid response: {what}"),
            ),
            AttemptError::ClientGone => (ErrorKind::BadRequest, "client closed".to_string()),
            AttemptError::LeftRotation => (
                ErrorKind::ServiceUnavailable,
                format!("engine {replica} left rotation while the request waited"),
            ),
        }
    }
}
