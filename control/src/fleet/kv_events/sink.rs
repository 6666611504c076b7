//! The index side of a replica's streams: every operation a stream's thread makes on the
//! replica's mirror goes through one [`ReplicaMirror`], under its lock, tagged with the
//! generation of streams that made it. The controller starts a new generation when the
//! replica's streams change or stop; an operation of an older generation is dropped, so a
//! stopping thread can never touch the mirror after its successor started (or after the replica
//! left the index). The lock is held only by the replica's stream threads and the control thread.

use super::core::MirrorSink;
use inferrail_events::KvEventBatch;
use inferrail_shards::index::IndexShards;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// One replica's mirror as its streams see it.
pub struct ReplicaMirror {
    index: Arc<IndexShards>,
    key: u64,
    /// The model the engine serves: the salt its blocks are named under.
    model: Arc<str>,
    state: Mutex<State>,
    /// The engine's KV capacity in blocks (0 while unknown), read by the streams' trackers.
    pub capacity_blocks: AtomicU64,
}

struct State {
    generation: u64,
    /// Whether each of the current generation's streams (one per data-parallel rank) is synced.
    ranks: Vec<bool>,
}

impl ReplicaMirror {
    /// The mirror of replica `key` serving `model`, with no streams yet.
    pub fn new(index: Arc<IndexShards>, key: u64, model: Arc<str>) -> Arc<ReplicaMirror> {
        Arc::new(ReplicaMirror {
            index,
            key,
            model,
            state: Mutex::new(State {
                generation: 0,
                ranks: Vec::new(),
            }),
            capacity_blocks: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a generation of `ranks` streams: the mirror is emptied and untrusted until they
    /// sync. Returns the generation the new streams' sinks carry.
    pub fn start_generation(&self, ranks: usize) -> u64 {
        let mut s = self.lock();
        s.generation += 1;
        s.ranks = vec![false; ranks];
        let _ = self.index.clear_mirror(self.key);
        let _ = self.index.set_synced(self.key, false);
        s.generation
    }

    /// Ends the current generation: its streams' operations are dropped from now on, and the
    /// replica's lookups go back to the routing records. With `forget`, the caller removes the
    /// replica from the index itself (it left the fleet).
    pub fn stop(&self, forget: bool) {
        let mut s = self.lock();
        s.generation += 1;
        s.ranks.clear();
        if !forget {
            let _ = self.index.stop_events(self.key);
        }
    }

    /// The sink for rank `rank` of generation `generation`.
    pub fn sink(self: &Arc<Self>, generation: u64, rank: usize) -> IndexSink {
        IndexSink {
            mirror: self.clone(),
            generation,
            rank,
        }
    }
}

/// One stream's [`MirrorSink`] into the index shards.
pub struct IndexSink {
    mirror: Arc<ReplicaMirror>,
    generation: u64,
    rank: usize,
}

impl IndexSink {
    /// Runs `f` under the mirror's lock when this sink's generation is current.
    fn current(&self, f: impl FnOnce(&ReplicaMirror, &mut State)) {
        let m = &*self.mirror;
        let mut s = m.lock();
        if s.generation == self.generation {
            f(m, &mut s);
        }
    }
}

impl MirrorSink for IndexSink {
    fn apply(&mut self, batch: Arc<KvEventBatch>) {
        self.current(|m, _| {
            let _ = m.index.apply_events(m.key, m.model.clone(), batch);
        });
    }

    fn clear(&mut self) {
        self.current(|m, _| {
            let _ = m.index.clear_mirror(m.key);
        });
    }

    fn set_synced(&mut self, synced: bool) {
        let rank = self.rank;
        self.current(|m, s| {
            if let Some(r) = s.ranks.get_mut(rank) {
                *r = synced;
            }
            let all = !s.ranks.is_empty() && s.ranks.iter().all(|&r| r);
            let _ = m.index.set_synced(m.key, all);
        });
    }
}

/// The capacity a stream's tracker should use, when known.
pub fn capacity_of(mirror: &ReplicaMirror) -> Option<u64> {
    Some(mirror.capacity_blocks.load(Relaxed)).filter(|&c| c > 0)
}
