//! The sans-IO request exchange: one state machine per proxied request that holds every retry
//! rule, the quinn-proto way. It does no I/O and reads no clock: the driver
//! ([`crate::proxy`]) feeds it [`Event`]s with the time they happened, performs the [`Action`]s it
//! returns, and sleeps until [`Exchange::timer`]. The same machine runs under virtual time in its
//! unit and property tests.
//!
//! The rules, each a test in `tests.rs`:
//! - A request moves to another attempt only before its response was committed (the head went to
//!   the client): on a connect failure or timeout, a close before the response head, a
//!   first-byte timeout, the replica leaving rotation, or a 502/503/504 when another attempt is
//!   allowed. Never after.
//! - A stale pooled connection (reused, closed by the engine, nothing received) gets one fresh
//!   connection to the same replica at once: not an attempt, not reported against the replica.
//! - An engine that closes after reading the whole request may have died processing it: such a
//!   request is retried at most once; the second such close refuses it as poison (502,
//!   `poison_request`). A stale-looking close whose fresh retry cannot connect counts too (the
//!   engine died, it did not idle out the connection).
//! - `server.request_timeout` bounds the whole request, streaming included; each attempt has
//!   `server.first_byte_timeout` for its response head; a response silent for
//!   `server.stream_idle_timeout` is cut. Backoff never sleeps past the deadline and no attempt
//!   starts after it.
//! - At most `retry.max_attempts` attempts; every failed attempt takes its index record back and
//!   reports the replica's failure (passive ejection) unless the failure was not the engine's.

#[cfg(test)]
mod props;
mod rules;
mod state;
#[cfg(test)]
mod tests;

pub use rules::backoff;
pub use state::{Exchange, ExchangeBufs};

use crate::errors::{Failure, NoCandidate};
use crate::metrics::Outcome;
use std::time::{Duration, Instant};

/// The limits one request runs under, fixed when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The whole request ends by then (`server.request_timeout` after its head arrived).
    pub deadline: Instant,
    /// Most attempts, the first included (at least 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles per attempt.
    pub backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
    /// Longest TCP connect.
    pub connect_timeout: Duration,
    /// Longest wait for the response head, from the attempt's start.
    pub first_byte_timeout: Duration,
    /// Longest silence mid-response (engine not sending, or client not reading).
    pub stream_idle_timeout: Duration,
}

/// A timer of the exchange; [`Exchange::timer`] says which one is due next and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// The whole-request deadline.
    Deadline,
    /// The current connect's `connect_timeout`.
    Connect,
    /// The current attempt's `first_byte_timeout`.
    FirstByte,
    /// The end of a backoff between attempts.
    Backoff,
    /// `stream_idle_timeout` after the response last moved.
    Stall,
}

/// Something that happened to the request, fed to [`Exchange::handle`]. Events that do not fit
/// the current state (late or duplicated) are ignored.
#[derive(Debug)]
pub enum Event<T> {
    /// A replica was chosen for the attempt [`Action::Route`] asked for, with the index record
    /// of the prompt on it (taken back if the attempt fails).
    Routed {
        /// Snapshot index of the replica.
        replica: usize,
        /// The index record's ticket, when the prompt was recorded.
        ticket: Option<T>,
    },
    /// No replica could take the request.
    NoCandidate {
        /// What refused.
        why: NoCandidate,
        /// The request may wait for a slot (a wait queue has room for it).
        can_wait: bool,
    },
    /// A slot freed up while the request waited ([`Action::WaitForSlot`]).
    SlotFreed,
    /// The connection is open.
    Connected {
        /// It came from the idle pool.
        reused: bool,
    },
    /// The connect failed (the OS error's text).
    ConnectFailed(String),
    /// The whole request, head and body, was written.
    RequestWritten,
    /// The response head arrived (1xx heads are skipped by the driver).
    Head {
        /// Its status.
        status: u16,
    },
    /// The engine closed or reset the connection: before the head (the machine knows whether the
    /// request was fully written) or mid-response.
    EngineClosed {
        /// Some response byte had been received.
        received_any: bool,
    },
    /// The engine sent bytes that are not a valid response (head or body framing).
    Protocol(String),
    /// Response bytes arrived from the engine and are being written to the client.
    Received,
    /// Bytes were written to the client; the driver reads the engine again.
    Delivered,
    /// The response ended completely and reached the client.
    StreamEnded,
    /// The client closed its connection.
    ClientLeft,
    /// The current attempt's replica left rotation.
    LeftRotation,
    /// A timer [`Exchange::timer`] named came due. Ignored unless it is armed and due.
    TimerFired(Timer),
}

/// What the driver must do next, from [`Exchange::poll_action`]. At most one I/O action (route,
/// wait, connect, send, read head, relay, back off) is outstanding at a time; the others are
/// bookkeeping to do at once, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<T> {
    /// Choose a replica for attempt `attempt`, preferring ones not in [`Exchange::tried`]; answer
    /// with [`Event::Routed`] or [`Event::NoCandidate`].
    Route {
        /// The attempt's number, from 1.
        attempt: u32,
    },
    /// Wait for a slot on a full fleet until `until` at the latest (the deadline); answer with
    /// [`Event::SlotFreed`] or let [`Timer::Deadline`] fire.
    WaitForSlot {
        /// The deadline.
        until: Instant,
    },
    /// Open a connection to `replica` (dropping the attempt's previous one, if any): from the
    /// idle pool if `pooled` and one is there, else a fresh one. Answer with
    /// [`Event::Connected`] or [`Event::ConnectFailed`].
    Connect {
        /// Snapshot index of the replica.
        replica: usize,
        /// A pooled connection may be used.
        pooled: bool,
    },
    /// Write the request; answer with [`Event::RequestWritten`] or [`Event::EngineClosed`].
    Send,
    /// Read the response head; answer with [`Event::Head`], [`Event::EngineClosed`] or
    /// [`Event::Protocol`].
    ReadHead,
    /// Commit: send the response head to the client and relay the body, feeding
    /// [`Event::Received`] / [`Event::Delivered`] and then [`Event::StreamEnded`],
    /// [`Event::EngineClosed`] or [`Event::Protocol`]. Nothing is retried from here on.
    Relay {
        /// The response's status.
        status: u16,
    },
    /// A failure happened: count its reason.
    Failed {
        /// The replica it happened on, if any.
        replica: Option<usize>,
        /// What failed.
        failure: Failure,
    },
    /// Report the attempt's result on `replica` for passive ejection.
    Report {
        /// Snapshot index of the replica.
        replica: usize,
        /// The replica served it (false: counts toward ejection).
        ok: bool,
    },
    /// Take back the index record of a failed or refused attempt (the engine cached nothing).
    TakeBack(T),
    /// The attempt is over: drop its connection (never pooled) and its replica slot.
    Release,
    /// Sleep until `until` (before the deadline); then [`Timer::Backoff`] fires.
    BackOff {
        /// When the next attempt may start.
        until: Instant,
    },
    /// Answer the client with this failure's error (nothing reached it yet).
    Answer {
        /// What to tell the client.
        failure: Failure,
        /// The replica named in the message, if any.
        replica: Option<usize>,
    },
    /// The request is over: count its outcome. Nothing follows.
    Finish {
        /// The request's outcome.
        outcome: Outcome,
        /// The replica it is counted on, if any.
        replica: Option<usize>,
    },
}
