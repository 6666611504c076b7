//! One KV event stream's rules, without I/O: a [`StreamCore`] is fed what its thread saw (a
//! connection made or failed, a live message, a replay's result, the connection lost) with the
//! time, and drives a [`MirrorSink`] (apply a batch, clear the mirror, say whether the mirror is
//! trustworthy) while counting everything in [`StreamStats`].
//!
//! The sequence rules are [`StreamTracker`]'s; this adds what the gateway needs around them:
//! a mirror is trusted only while its stream is connected (a silent engine may have restarted
//! and lost its cache), a batch whose payload does not decode is a lost batch (unsynced), and
//! live batches that arrive while a replay fills a gap are held and applied after it in order.

use super::stats::StreamStats;
use inferrail_events::stream::StreamTracker;
use inferrail_events::stream::{Next, SyncState, TrackerLimits, Verdict};
use inferrail_events::{decode_batch, EventMessage, KvEventBatch, WireEvent};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Where a stream's batches go: the replica's mirror in the index shards.
pub trait MirrorSink {
    /// Applies a decoded batch to the mirror, in stream order.
    fn apply(&mut self, batch: Arc<KvEventBatch>);
    /// Empties the mirror (the engine restarted: its cache is empty).
    fn clear(&mut self);
    /// Whether lookups may trust the mirror from now on.
    fn set_synced(&mut self, synced: bool);
}

/// What the stream's thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Read the next live message.
    Read,
    /// Ask the replay endpoint for every batch from `from` on, then call
    /// [`StreamCore::replay_finished`].
    Replay {
        /// The first sequence number wanted.
        from: u64,
    },
}

/// One stream's state: the tracker, the held messages, what the sink was last told.
pub struct StreamCore {
    tracker: StreamTracker,
    held: Vec<EventMessage>,
    stats: Arc<StreamStats>,
    /// The model's block size: batches of another size never match a prediction.
    block_size: u64,
    connected: bool,
    /// What the sink was last told (`None`: nothing yet).
    told: Option<bool>,
    /// Whether the mirror was ever trusted (the first sync is not a resync).
    ever_synced: bool,
}

impl StreamCore {
    /// A stream with (`has_replay`) or without a replay endpoint, for a model hashed in blocks of
    /// `block_size` tokens, counting into `stats`.
    pub fn new(
        has_replay: bool,
        limits: TrackerLimits,
        block_size: u64,
        stats: Arc<StreamStats>,
    ) -> StreamCore {
        StreamCore {
            tracker: StreamTracker::new(has_replay, limits),
            held: Vec::new(),
            stats,
            block_size,
            connected: false,
            told: None,
            ever_synced: false,
        }
    }

    /// The engine's KV capacity in blocks (for the resync rule), when known.
    pub fn set_capacity_blocks(&mut self, blocks: u64) {
        self.tracker.set_capacity_blocks(blocks);
    }

    /// A connection attempt failed; returns how long to wait before the next one.
    pub fn connect_failed(&mut self, sink: &mut dyn MirrorSink) -> Duration {
        self.stats.connect_failures.fetch_add(1, Relaxed);
        self.stats.failures_in_a_row.fetch_add(1, Relaxed);
        self.connected = false;
        self.tell(sink);
        self.tracker.disconnected()
    }

    /// The subscription is up: read on, or replay what may have been missed first.
    pub fn connected(&mut self, sink: &mut dyn MirrorSink) -> Step {
        self.stats.connects.fetch_add(1, Relaxed);
        self.stats.failures_in_a_row.store(0, Relaxed);
        self.stats.connected.store(true, Relaxed);
        self.connected = true;
        let step = match self.tracker.connected() {
            Next::Read => Step::Read,
            Next::Replay { from } => Step::Replay { from },
        };
        self.tell(sink);
        step
    }

    /// The connection was lost; returns how long to wait before reconnecting.
    pub fn disconnected(&mut self, sink: &mut dyn MirrorSink) -> Duration {
        self.stats.disconnects.fetch_add(1, Relaxed);
        self.stats.connected.store(false, Relaxed);
        self.connected = false;
        self.held.clear();
        let wait = self.tracker.disconnected();
        self.tell(sink);
        wait
    }

    /// A data message of the wrong shape arrived (skipped; the stream stays up).
    pub fn malformed(&mut self) {
        self.stats.malformed.fetch_add(1, Relaxed);
    }

    /// A live message arrived at `now_unix` (seconds since the epoch, for the lag figure).
    pub fn live(&mut self, msg: EventMessage, now_unix: f64, sink: &mut dyn MirrorSink) -> Step {
        let step = match self.tracker.message(msg.seq) {
            Verdict::Apply => {
                self.apply(&msg, now_unix, sink);
                Step::Read
            }
            Verdict::Duplicate => {
                self.stats.duplicates.fetch_add(1, Relaxed);
                Step::Read
            }
            Verdict::Hold => {
                self.held.push(msg);
                Step::Read
            }
            Verdict::HoldAndReplay { from } => {
                self.stats.gaps.fetch_add(1, Relaxed);
                self.held.push(msg);
                Step::Replay { from }
            }
            Verdict::DropHeldThenApply => {
                self.held.clear();
                self.apply(&msg, now_unix, sink);
                Step::Read
            }
            Verdict::ClearThenApply => {
                self.stats.restarts.fetch_add(1, Relaxed);
                sink.clear();
                self.apply(&msg, now_unix, sink);
                Step::Read
            }
        };
        self.tell(sink);
        step
    }

    /// The replay asked for by the last [`Step::Replay`] finished: its batches oldest first, or
    /// `None` when it failed. The held live messages follow; the answer is what to do next (a
    /// held message may open another gap).
    pub fn replay_finished(
        &mut self,
        replies: Option<Vec<EventMessage>>,
        now_unix: f64,
        sink: &mut dyn MirrorSink,
    ) -> Step {
        self.stats.replays.fetch_add(1, Relaxed);
        let ok = replies.is_some();
        for msg in replies.unwrap_or_else(|| {
            self.stats.replay_failures.fetch_add(1, Relaxed);
            Vec::new()
        }) {
            self.stats.replayed.fetch_add(1, Relaxed);
            match self.tracker.replayed(msg.seq) {
                Verdict::Duplicate => {}
                Verdict::ClearThenApply => {
                    self.stats.restarts.fetch_add(1, Relaxed);
                    sink.clear();
                    self.apply(&msg, now_unix, sink);
                }
                // A replay reply is applied or dropped; the tracker never holds one.
                _ => self.apply(&msg, now_unix, sink),
            }
        }
        self.tracker.replay_done(ok);
        let mut next = Step::Read;
        for msg in std::mem::take(&mut self.held) {
            if let Step::Replay { from } = self.live(msg, now_unix, sink) {
                next = Step::Replay { from };
            }
        }
        self.tell(sink);
        next
    }

    /// Decodes and applies one accepted batch.
    fn apply(&mut self, msg: &EventMessage, now_unix: f64, sink: &mut dyn MirrorSink) {
        let decoded = match decode_batch(&msg.payload) {
            Ok(d) => d,
            Err(_) => {
                self.stats.decode_errors.fetch_add(1, Relaxed);
                self.tracker.lost();
                return;
            }
        };
        let batch = decoded.batch;
        self.stats.batches.fetch_add(1, Relaxed);
        self.stats
            .events
            .fetch_add(batch.events.len() as u64, Relaxed);
        self.stats
            .unknown_events
            .fetch_add(decoded.unknown_events as u64, Relaxed);
        let mut stored = 0u64;
        let mut cleared = false;
        for event in &batch.events {
            match event {
                WireEvent::BlockStored(s) => {
                    stored += s.block_hashes.len() as u64;
                    if s.block_size != self.block_size
                        && !self.stats.block_size_mismatch.swap(true, Relaxed)
                    {
                        self.stats
                            .mismatched_block_size
                            .store(s.block_size, Relaxed);
                    }
                }
                WireEvent::AllBlocksCleared => cleared = true,
                WireEvent::BlockRemoved(_) => {}
            }
        }
        if batch.ts.is_finite() && batch.ts > 0.0 && now_unix >= batch.ts {
            let lag_us = ((now_unix - batch.ts) * 1e6).min(u64::MAX as f64) as u64;
            self.stats.last_lag_us.store(lag_us, Relaxed);
        }
        sink.apply(Arc::new(batch));
        if cleared {
            self.tracker.cleared();
        }
        self.tracker.stored(stored);
    }

    /// Tells the sink whether the mirror is trustworthy when that changed.
    fn tell(&mut self, sink: &mut dyn MirrorSink) {
        let synced = self.connected && self.tracker.sync() == SyncState::Synced;
        self.stats.synced.store(synced, Relaxed);
        if self.told == Some(synced) {
            return;
        }
        if synced && self.ever_synced {
            self.stats.resyncs.fetch_add(1, Relaxed);
        }
        self.ever_synced |= synced;
        self.told = Some(synced);
        sink.set_synced(synced);
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
