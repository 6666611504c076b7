//! Counters of one KV event stream, written by its thread and read by `/metrics` and
//! `/admin/index` (relaxed atomics: each figure is exact on its own, not a consistent set).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// What one stream has done since the gateway started following it.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Subscriptions made.
    pub connects: AtomicU64,
    /// Connection attempts that failed.
    pub connect_failures: AtomicU64,
    /// Connection attempts that failed since the last one that succeeded.
    pub failures_in_a_row: AtomicU64,
    /// Subscriptions lost.
    pub disconnects: AtomicU64,
    /// Whether the subscription is up now.
    pub connected: AtomicBool,
    /// Whether lookups trust the mirror now.
    pub synced: AtomicBool,
    /// Batches decoded and applied.
    pub batches: AtomicU64,
    /// Events in them.
    pub events: AtomicU64,
    /// Events of a type the decoder does not know (skipped).
    pub unknown_events: AtomicU64,
    /// Payloads that did not decode (each unsyncs the mirror).
    pub decode_errors: AtomicU64,
    /// Data messages not shaped `[topic, seq, payload]`.
    pub malformed: AtomicU64,
    /// Batches already applied that came again.
    pub duplicates: AtomicU64,
    /// Sequence gaps seen on the live stream.
    pub gaps: AtomicU64,
    /// Replay requests made.
    pub replays: AtomicU64,
    /// Replay requests that failed.
    pub replay_failures: AtomicU64,
    /// Batches received by replay.
    pub replayed: AtomicU64,
    /// Publisher restarts seen (sequence back to 0): the mirror was cleared.
    pub restarts: AtomicU64,
    /// Times the mirror became trustworthy again after it was not.
    pub resyncs: AtomicU64,
    /// Engine timestamp to applied, of the last batch, in microseconds.
    pub last_lag_us: AtomicU64,
    /// Set once a BlockStored of another block size than the model's arrived.
    pub block_size_mismatch: AtomicBool,
    /// That block size.
    pub mismatched_block_size: AtomicU64,
}

/// A copy of [`StreamStats`] for the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFigures {
    /// Subscriptions made.
    pub connects: u64,
    /// Failed connection attempts.
    pub connect_failures: u64,
    /// Subscriptions lost.
    pub disconnects: u64,
    /// Subscription up now.
    pub connected: bool,
    /// Mirror trusted now.
    pub synced: bool,
    /// Batches applied.
    pub batches: u64,
    /// Events in them.
    pub events: u64,
    /// Unknown events skipped.
    pub unknown_events: u64,
    /// Payloads that did not decode.
    pub decode_errors: u64,
    /// Misshapen messages.
    pub malformed: u64,
    /// Duplicate batches dropped.
    pub duplicates: u64,
    /// Gaps seen.
    pub gaps: u64,
    /// Replays asked for.
    pub replays: u64,
    /// Replays that failed.
    pub replay_failures: u64,
    /// Batches received by replay.
    pub replayed: u64,
    /// Publisher restarts.
    pub restarts: u64,
    /// Returns to synced.
    pub resyncs: u64,
    /// Last batch's lag, µs.
    pub last_lag_us: u64,
    /// The engine's block size when it differs from the model's, else `None`.
    pub mismatched_block_size: Option<u64>,
}

impl StreamStats {
    /// The figures now.
    pub fn figures(&self) -> StreamFigures {
        StreamFigures {
            connects: self.connects.load(Relaxed),
            connect_failures: self.connect_failures.load(Relaxed),
            disconnects: self.disconnects.load(Relaxed),
            connected: self.connected.load(Relaxed),
            synced: self.synced.load(Relaxed),
            batches: self.batches.load(Relaxed),
            events: self.events.load(Relaxed),
            unknown_events: self.unknown_events.load(Relaxed),
            decode_errors: self.decode_errors.load(Relaxed),
            malformed: self.malformed.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            gaps: self.gaps.load(Relaxed),
            replays: self.replays.load(Relaxed),
            replay_failures: self.replay_failures.load(Relaxed),
            replayed: self.replayed.load(Relaxed),
            restarts: self.restarts.load(Relaxed),
            resyncs: self.resyncs.load(Relaxed),
            last_lag_us: self.last_lag_us.load(Relaxed),
            mismatched_block_size: self
                .block_size_mismatch
                .load(Relaxed)
                .then(|| self.mismatched_block_size.load(Relaxed)),
        }
    }
}

impl StreamFigures {
    /// The figures as a JSON object (the admin API's shape).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "connected": self.connected,
            "synced": self.synced,
            "connects": self.connects,
            "connect_failures": self.connect_failures,
            "disconnects": self.disconnects,
            "batches": self.batches,
            "events": self.events,
            "unknown_events": self.unknown_events,
            "decode_errors": self.decode_errors,
            "malformed": self.malformed,
            "duplicates": self.duplicates,
            "gaps": self.gaps,
            "replays": self.replays,
            "replay_failures": self.replay_failures,
            "replayed": self.replayed,
            "restarts": self.restarts,
            "resyncs": self.resyncs,
            "last_lag_us": self.last_lag_us,
            "mismatched_block_size": self.mismatched_block_size,
        })
    }
}
