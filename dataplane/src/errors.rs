//! Why a request's exchange with the engines failed: where the failure came from (the client, an
//! engine, the gateway's own limits), whether the retry rules allow another attempt, and what the
//! client is told. The retry decisions themselves live in [`crate::exchange`]; they read these
//! properties instead of matching on scattered conditions.

use crate::metrics::ErrorReason;
use inferrail_wire::ErrorKind;

/// Where a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client (went away, or sent a request that kills engines).
    Client,
    /// An engine (refused, closed, timed out, spoke garbage, answered 502/503/504).
    Engine,
    /// The gateway's own state (no replica could take the request).
    Gateway,
}

/// Why no replica could take the request when one was to be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoCandidate {
    /// The model has no replica at all (none configured, none discovered).
    NoReplicas,
    /// Every replica of the model is out of rotation (failed health checks, ejected).
    OutOfRotation,
    /// Every replica in rotation is at its `max_concurrency`.
    AtCapacity,
    /// Every replica in rotation is at its `max_concurrency` and its queue of requests waiting
    /// at the gateway for a slot is at its `max_pending`.
    QueueFull,
}

/// One failure of a request's exchange. Failures before the commit (the response head going to
/// the client) may be retried as [`Failure::retryable`] says; failures after it cut the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// TCP connect failed (the OS error's text).
    Connect(String),
    /// TCP connect did not finish within `server.connect_timeout`.
    ConnectTimeout,
    /// The engine closed or reset the connection before the response ended.
    EngineClosed {
        /// The connection came from the idle pool (it may have been closed while idle).
        reused: bool,
        /// The whole request (head and body) had been written.
        request_written: bool,
        /// Some response byte had been received.
        received_any: bool,
    },
    /// The engine answered 502, 503 or 504 and another attempt was allowed.
    Unavailable(u16),
    /// No response head within `server.first_byte_timeout` of the attempt's start.
    FirstByteTimeout,
    /// `server.request_timeout` passed (before the head: nothing answered; after: response cut).
    Deadline,
    /// The engine went silent mid-response for `server.stream_idle_timeout`.
    Stalled,
    /// The engine sent something that is not a valid HTTP/1.x response.
    Protocol(String),
    /// The client went away (or stopped reading for `server.stream_idle_timeout`).
    ClientGone,
    /// The replica left rotation while the request waited for its response head.
    LeftRotation,
    /// No replica could take the request.
    NoCandidate(NoCandidate),
    /// Every replica stayed full until the request deadline while the request waited for a slot.
    WaitedForSlot,
    /// Two engines closed the connection after reading the whole request: the request is refused
    /// rather than offered to a third.
    Poison,
}

impl Failure {
    /// Where the failure came from.
    pub fn side(&self) -> Side {
        match self {
            Failure::ClientGone | Failure::Poison => Side::Client,
            Failure::NoCandidate(_) | Failure::WaitedForSlot | Failure::LeftRotation => {
                Side::Gateway
            }
            _ => Side::Engine,
        }
    }

    /// True when the request may move to another attempt, if nothing reached the client yet and
    /// `retry.max_attempts` and the deadline allow it.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Failure::Connect(_)
                | Failure::ConnectTimeout
                | Failure::EngineClosed { .. }
                | Failure::Unavailable(_)
                | Failure::FirstByteTimeout
                | Failure::LeftRotation
        )
    }

    /// The classic stale keep-alive race: a pooled connection the engine had closed, nothing
    /// received. Repeated once at once on a fresh connection, not counted as an attempt.
    pub fn stale_reuse(&self) -> bool {
        matches!(
            self,
            Failure::EngineClosed {
                reused: true,
                received_any: false,
                ..
            }
        )
    }

    /// The engine closed after reading the whole request (it may have died processing it), and
    /// the close is not a stale pooled connection. Counts toward refusing the request as poison.
    pub fn died_on_request(&self) -> bool {
        matches!(
            self,
            Failure::EngineClosed {
                request_written: true,
                ..
            }
        ) && !self.stale_reuse()
    }

    /// Whether the failure counts against the replica's health (passive ejection). The client,
    /// a stale pooled connection, a replica already out of rotation and the gateway's own limits
    /// do not.
    pub fn counts_against_replica(&self) -> bool {
        self.side() == Side::Engine && !self.stale_reuse()
    }

    /// The metrics label for this failure.
    pub fn reason(&self) -> ErrorReason {
        match self {
            Failure::Connect(_) | Failure::ConnectTimeout => ErrorReason::ConnectFailed,
            Failure::EngineClosed { .. } => ErrorReason::EngineClosed,
            Failure::Unavailable(_) => ErrorReason::EngineUnavailable,
            Failure::FirstByteTimeout | Failure::Deadline | Failure::Stalled => {
                ErrorReason::UpstreamTimeout
            }
            Failure::Protocol(_) => ErrorReason::UpstreamProtocol,
            Failure::ClientGone => ErrorReason::ClientDisconnected,
            Failure::LeftRotation => ErrorReason::ReplicaLeftRotation,
            Failure::NoCandidate(NoCandidate::OutOfRotation | NoCandidate::NoReplicas) => {
                ErrorReason::NoReplicaInRotation
            }
            Failure::NoCandidate(_) | Failure::WaitedForSlot => ErrorReason::FleetFull,
            Failure::Poison => ErrorReason::PoisonRequest,
        }
    }

    /// The error the client gets when this failure ends the request before anything reached it:
    /// `model` is the model's name, `replica` the id of the replica that failed (if any).
    pub fn client_error(&self, model: &str, replica: &str) -> (ErrorKind, String) {
        use ErrorKind::{BadGateway, GatewayTimeout, ServiceUnavailable};
        match self {
            Failure::Connect(e) => (
                BadGateway,
                format!("could not connect to engine {replica}: {e}"),
            ),
            Failure::ConnectTimeout => (
                BadGateway,
                format!("connecting to engine {replica} timed out"),
            ),
            Failure::EngineClosed { .. } => (
                BadGateway,
                format!("engine {replica} closed the connection before answering"),
            ),
            Failure::Unavailable(status) => (
                ServiceUnavailable,
                format!("engine {replica} answered {status}"),
            ),
            Failure::FirstByteTimeout => (
                GatewayTimeout,
                format!("engine {replica} did not answer within the first-byte timeout"),
            ),
            Failure::Deadline | Failure::Stalled => (
                GatewayTimeout,
                format!("engine {replica} did not answer within the request timeout"),
            ),
            Failure::Protocol(what) => (
                BadGateway,
                format!("engine {replica} sent an invalid response: {what}"),
            ),
            Failure::ClientGone => (ErrorKind::BadRequest, "client closed".to_string()),
            Failure::LeftRotation => (
                ServiceUnavailable,
                format!("engine {replica} left rotation while the request waited"),
            ),
            Failure::NoCandidate(why) => (ServiceUnavailable, no_candidate_message(*why, model)),
            Failure::WaitedForSlot => (
                ServiceUnavailable,
                format!(
                    "every replica of model `{model}` stayed at its concurrency limit until the \
                     request timeout"
                ),
            ),
            Failure::Poison => (
                BadGateway,
                "two engines closed the connection after reading this request (the last was \
                 engine "
                    .to_string()
                    + replica
                    + "); it is not sent to another engine",
            ),
        }
    }
}

/// The 503 message naming what refused the request.
fn no_candidate_message(why: NoCandidate, model: &str) -> String {
    match why {
        NoCandidate::NoReplicas => format!("model `{model}` has no replica"),
        NoCandidate::OutOfRotation => {
            format!("every replica of model `{model}` is out of rotation (unhealthy or ejected)")
        }
        NoCandidate::AtCapacity => {
            format!("every replica of model `{model}` is at its concurrency limit")
        }
        NoCandidate::QueueFull => format!(
            "every replica of model `{model}` is at its concurrency limit and its queue of \
             requests waiting for a slot is full (max_pending)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_reuse_is_neither_a_death_nor_held_against_the_replica() {
        let stale = Failure::EngineClosed {
            reused: true,
            request_written: true,
            received_any: false,
        };
        assert!(stale.stale_reuse() && !stale.died_on_request());
        assert!(!stale.counts_against_replica());
        let died = Failure::EngineClosed {
            reused: false,
            request_written: true,
            received_any: false,
        };
        assert!(died.died_on_request() && died.counts_against_replica() && died.retryable());
        let mid_write = Failure::EngineClosed {
            reused: false,
            request_written: false,
            received_any: false,
        };
        assert!(!mid_write.died_on_request() && mid_write.retryable());
    }

    #[test]
    fn refusals_name_what_refused() {
        let msg = |why| Failure::NoCandidate(why).client_error("m", "").1;
        assert!(msg(NoCandidate::OutOfRotation).contains("out of rotation"));
        assert!(msg(NoCandidate::AtCapacity).contains("concurrency limit"));
        assert!(msg(NoCandidate::QueueFull).contains("max_pending"));
        assert_eq!(
            Failure::NoCandidate(NoCandidate::OutOfRotation).reason(),
            ErrorReason::NoReplicaInRotation
        );
        assert_eq!(
            Failure::NoCandidate(NoCandidate::AtCapacity).reason(),
            ErrorReason::FleetFull
        );
        let (kind, poison) = Failure::Poison.client_error("m", "e-1");
        assert_eq!(kind, ErrorKind::BadGateway);
        assert!(poison.contains("e-1"), "{poison}");
        assert_eq!(Failure::Poison.side(), Side::Client);
    }
}
