//! What to do with one engine stream's messages (sans-IO): a [`StreamTracker`] is fed what
//! happened (connected, a message with its sequence number, a replayed message, a replay's
//! end, the connection lost, an AllBlocksCleared applied, blocks stored) and answers what the
//! caller does (apply the batch, drop it, hold it while a replay fills a gap, clear the mirror
//! first, run a replay, wait before reconnecting), and whether the mirror built from the
//! stream can be trusted ([`SyncState`]).
//!
//! The rules:
//! - Sequence numbers count batches from 0 per publisher process. The next expected one is
//!   applied; an older one is a duplicate (a replay overlapping live traffic) and dropped.
//! - A **gap** (a number past the expected one) asks the replay endpoint for the missing
//!   batches, holding live batches meanwhile (at most [`TrackerLimits::max_held`]). Without a
//!   replay endpoint, or when the replay cannot cover the gap (its first batch is past the
//!   one asked for, or it failed), or when too much is held, the mirror is unsynced.
//! - A **restart** (sequence number 0 after a higher one) is a new engine process, whose cache
//!   starts empty: the mirror is cleared and is exact again from there.
//! - A **lost connection** loses what was published meanwhile: on reconnecting, a replay is
//!   asked from the expected number; without a replay endpoint the mirror is unsynced.
//! - **Unsynced** until the mirror is known complete again: an AllBlocksCleared applied, a
//!   restart seen, or as many blocks stored since the resync as the engine has (every block
//!   held before then was evicted, or is still held unseen, which makes the mirror
//!   under-predict, the safe direction). The first connection counts as a resync unless its
//!   first batch is number 0 or a replay from 0 covers the history.
//! - Reconnects back off from [`TrackerLimits::min_backoff`], doubling up to
//!   [`TrackerLimits::max_backoff`], back to the minimum once a connection delivered a batch.

use std::time::Duration;

/// Whether the mirror built from the stream can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncState {
    /// Every batch since the engine's cache was last known empty has been applied.
    Synced,
    /// Batches may be missing; predictions for this replica must not use the mirror.
    Unsynced(UnsyncedBy),
}

/// Why a stream is unsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsyncedBy {
    /// The stream has not started yet, or started after the engine did.
    Start,
    /// Batches were missed and could not be replayed.
    Gap,
    /// The connection was lost with no replay endpoint to fill it.
    Disconnect,
    /// More live batches arrived during a replay than may be held.
    Overflow,
}

/// What the caller does with a message it fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Apply the batch to the mirror now.
    Apply,
    /// Already applied (or older than the mirror): ignore it.
    Duplicate,
    /// Keep it: a replay is filling the gap before it. Once the replay is done, feed the held
    /// messages again, in order, with [`StreamTracker::message`].
    Hold,
    /// Keep it, and run this replay (a gap opened before it).
    HoldAndReplay {
        /// The first number to ask for.
        from: u64,
    },
    /// Too much arrived during the replay: drop the held messages and the replay's remaining
    /// replies, then apply this batch (the stream is unsynced).
    DropHeldThenApply,
    /// A new engine process: clear the mirror, then apply the batch.
    ClearThenApply,
}

/// What the caller does right after connecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read live messages.
    Read,
    /// Ask the replay endpoint for every batch from this number on, feed each reply with
    /// [`StreamTracker::replayed`], end with [`StreamTracker::replay_done`]; live messages
    /// meanwhile go to [`StreamTracker::message`] (and are held).
    Replay {
        /// The first number wanted.
        from: u64,
    },
}

/// Bounds of a tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerLimits {
    /// Live batches held while a replay runs; past this the stream is unsynced.
    pub max_held: usize,
    /// First reconnect delay.
    pub min_backoff: Duration,
    /// Longest reconnect delay.
    pub max_backoff: Duration,
}

impl Default for TrackerLimits {
    fn default() -> Self {
        TrackerLimits {
            max_held: 10_000,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A replay in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Replay {
    from: u64,
    held: usize,
    /// Whether a reply has been fed yet (the first one says how far back the buffer reaches).
    answered: bool,
}

/// One engine stream's sequence and sync state.
#[derive(Debug, Clone)]
pub struct StreamTracker {
    limits: TrackerLimits,
    has_replay: bool,
    /// The next number to apply; `None` before the first batch (or after a failed replay).
    expected: Option<u64>,
    sync: SyncState,
    replay: Option<Replay>,
    /// Blocks stored since the stream became unsynced, and how many make it complete again.
    stored_since_resync: u64,
    capacity_blocks: Option<u64>,
    backoff: Duration,
    delivered: bool,
    /// Whether any batch was applied to the mirror yet.
    applied_any: bool,
}

impl StreamTracker {
    /// A tracker for a stream that has (`has_replay`) or lacks a replay endpoint.
    pub fn new(has_replay: bool, limits: TrackerLimits) -> Self {
        StreamTracker {
            limits,
            has_replay,
            expected: None,
            sync: SyncState::Unsynced(UnsyncedBy::Start),
            replay: None,
            stored_since_resync: 0,
            capacity_blocks: None,
            backoff: limits.min_backoff,
            delivered: false,
            applied_any: false,
        }
    }

    /// Whether the mirror can be trusted.
    pub fn sync(&self) -> SyncState {
        self.sync
    }

    /// The next sequence number expected.
    pub fn expected(&self) -> Option<u64> {
        self.expected
    }

    /// Whether a replay is in progress.
    pub fn replaying(&self) -> bool {
        self.replay.is_some()
    }

    /// Sets the engine's KV capacity in blocks (for the stored-blocks resync rule).
    pub fn set_capacity_blocks(&mut self, blocks: u64) {
        self.capacity_blocks = Some(blocks);
    }

    fn unsync(&mut self, why: UnsyncedBy) {
        if self.sync == SyncState::Synced {
            self.stored_since_resync = 0;
        }
        self.sync = SyncState::Unsynced(why);
    }

    fn start_replay(&mut self, from: u64, held: usize) {
        self.replay = Some(Replay {
            from,
            held,
            answered: false,
        });
    }

    /// A connection was made: replay what may have been missed (on the first connection, the
    /// history from 0), or, without a replay endpoint, read on (unsynced if batches may have
    /// been lost while disconnected).
    pub fn connected(&mut self) -> Next {
        self.delivered = false;
        if self.has_replay {
            let from = self.expected.unwrap_or(0);
            self.start_replay(from, 0);
            return Next::Replay { from };
        }
        if self.expected.is_some() {
            self.unsync(UnsyncedBy::Disconnect);
            // Whatever comes next starts the stream again.
            self.expected = None;
        }
        Next::Read
    }

    /// The connection was lost (drop anything held); returns how long to wait before the next
    /// connection attempt.
    pub fn disconnected(&mut self) -> Duration {
        if self.delivered {
            self.backoff = self.limits.min_backoff;
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(self.limits.max_backoff);
        self.replay = None;
        self.delivered = false;
        wait
    }

    /// A live message numbered `seq` arrived.
    pub fn message(&mut self, seq: u64) -> Verdict {
        self.delivered = true;
        if let Some(r) = &mut self.replay {
            if r.held < self.limits.max_held {
                r.held += 1;
                return Verdict::Hold;
            }
            self.replay = None;
            self.unsync(UnsyncedBy::Overflow);
            self.expected = Some(seq + 1);
            self.applied_any = true;
            return Verdict::DropHeldThenApply;
        }
        match self.expected {
            Some(e) if seq > e && self.has_replay => {
                self.start_replay(e, 1);
                Verdict::HoldAndReplay { from: e }
            }
            _ => self.accept(seq),
        }
    }

    /// A replayed message numbered `seq` arrived (replies come oldest first).
    pub fn replayed(&mut self, seq: u64) -> Verdict {
        let Some(r) = &mut self.replay else {
            return Verdict::Duplicate;
        };
        let first = !r.answered;
        r.answered = true;
        if first && seq > r.from {
            // The buffer no longer reaches back to what was asked for: that part is lost.
            self.unsync(if self.expected.is_none() {
                UnsyncedBy::Start
            } else {
                UnsyncedBy::Gap
            });
            self.expected = Some(seq + 1);
            self.applied_any = true;
            return Verdict::Apply;
        }
        self.accept(seq)
    }

    /// The replay ended: every reply was fed (`ok`), or it failed. The held live messages
    /// are fed again next, in order.
    pub fn replay_done(&mut self, ok: bool) {
        let Some(r) = self.replay.take() else {
            return;
        };
        if !ok {
            if self.expected.is_some() {
                self.unsync(UnsyncedBy::Gap);
            }
            // The next live batch starts the stream again.
            self.expected = None;
            return;
        }
        if !r.answered && r.from == 0 && self.expected.is_none() {
            // Nothing was ever published: the engine has stored nothing yet.
            self.expected = Some(0);
            self.sync = SyncState::Synced;
        }
    }

    /// A batch the tracker accepted could not be applied (its payload did not decode): the
    /// mirror misses it, so it is unsynced as after a gap it could not replay.
    pub fn lost(&mut self) {
        self.unsync(UnsyncedBy::Gap);
    }

    /// An AllBlocksCleared was applied: the mirror is as empty as the engine's cache.
    pub fn cleared(&mut self) {
        self.sync = SyncState::Synced;
        self.stored_since_resync = 0;
    }

    /// `blocks` were stored into the mirror (the resync rule counts them while unsynced).
    pub fn stored(&mut self, blocks: u64) {
        if let SyncState::Unsynced(_) = self.sync {
            self.stored_since_resync = self.stored_since_resync.saturating_add(blocks);
            if self
                .capacity_blocks
                .is_some_and(|c| c > 0 && self.stored_since_resync >= c)
            {
                self.sync = SyncState::Synced;
                self.stored_since_resync = 0;
            }
        }
    }

    /// The sequence rules for a message in order.
    fn accept(&mut self, seq: u64) -> Verdict {
        let v = self.sequence(seq);
        if v != Verdict::Duplicate {
            self.applied_any = true;
        }
        v
    }

    fn sequence(&mut self, seq: u64) -> Verdict {
        match self.expected {
            None => {
                self.expected = Some(seq + 1);
                if seq == 0 {
                    // A process's first batch: its cache started empty, whatever the mirror
                    // held from an earlier one.
                    self.sync = SyncState::Synced;
                    self.stored_since_resync = 0;
                    if self.applied_any {
                        return Verdict::ClearThenApply;
                    }
                } else if self.sync == SyncState::Synced {
                    self.unsync(UnsyncedBy::Start);
                }
                Verdict::Apply
            }
            Some(e) if seq == e => {
                self.expected = Some(e + 1);
                Verdict::Apply
            }
            Some(_) if seq == 0 => {
                // A new publisher process: its engine's cache started empty.
                self.expected = Some(1);
                self.sync = SyncState::Synced;
                self.stored_since_resync = 0;
                Verdict::ClearThenApply
            }
            Some(e) if seq > e => {
                self.unsync(UnsyncedBy::Gap);
                self.expected = Some(seq + 1);
                Verdict::Apply
            }
            Some(_) => Verdict::Duplicate,
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
