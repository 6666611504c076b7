//! What the gateway routed to a replica in exact mode, held for a short while until the engine's
//! own events say what it stored (pure: the time is an argument).
//!
//! An engine publishes its BlockStored after the step that computed the blocks, so for a few
//! milliseconds after routing a new long prompt the mirror does not know it yet; siblings of that
//! prompt sent meanwhile would be priced as cold and scattered. Each routed prompt's blocks are
//! therefore held here for [`SPECULATIVE_TTL`]; a lookup in exact mode counts a block as held
//! when the mirror holds it on the GPU or it is held here. An entry is `confirmed` and dropped as
//! soon as the mirror holds all its blocks on the GPU (the mirror alone answers from then on, evictions
//! included), and `expired` when its time runs out first (the engine never stored it, or
//! evicted it at once). An AllBlocksCleared drops every entry. At most as many distinct blocks
//! as the replica's capacity are held (the entries share their block lists with the routing
//! records): past that the oldest entries go first, counted `dropped`.

use super::hasher::FoldBuildHasher;
use crate::prefix_hash::BlockHash;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a routed prompt's blocks count as held before the engine's events must confirm
/// them: far above the event lag of an engine step (milliseconds), short enough that a request
/// the engine never stored (refused, evicted at once) does not steer routing for long.
pub const SPECULATIVE_TTL: Duration = Duration::from_secs(2);

/// What the speculative entries of one replica came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpeculativeCounters {
    /// Routed prompts inserted.
    pub inserted: u64,
    /// Entries the mirror held whole (on its GPU) when they were checked.
    pub confirmed: u64,
    /// Entries the mirror did not confirm by their expiry: the engine never stored those
    /// blocks under the names the gateway computed (a refused request, an eviction at once, or
    /// tokens that differ from the engine's: ADR 021's parity check reads this).
    pub expired: u64,
    /// Entries pushed out by the size bound before either.
    pub dropped: u64,
    /// Entries removed because the attempt that routed them was taken back.
    pub taken_back: u64,
}

/// One replica's speculative blocks.
#[derive(Debug)]
pub struct Speculative {
    ttl: Duration,
    capacity: usize,
    /// Entries in insertion order, so expiry deadlines are ascending.
    queue: VecDeque<(Instant, Arc<[BlockHash]>)>,
    /// How many live entries name each block.
    held: HashMap<BlockHash, u32, FoldBuildHasher>,
    counters: SpeculativeCounters,
}

impl Speculative {
    /// Holds entries for `ttl`, at most `capacity` distinct blocks in all.
    pub fn new(ttl: Duration, capacity: usize) -> Speculative {
        Speculative {
            ttl,
            capacity,
            queue: VecDeque::new(),
            held: HashMap::default(),
            counters: SpeculativeCounters::default(),
        }
    }

    /// What the entries came to so far.
    pub fn counters(&self) -> SpeculativeCounters {
        self.counters
    }

    /// Distinct blocks held now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Changes the size bound (the replica's capacity became known).
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
    }

    /// Whether `block` is held by a live entry (call [`Speculative::expire`] first).
    pub fn contains(&self, block: &BlockHash) -> bool {
        self.held.contains_key(block)
    }

    /// Holds `blocks` (a routed prompt's full blocks) from `now` on.
    pub fn insert(&mut self, blocks: Arc<[BlockHash]>, now: Instant) {
        if blocks.is_empty() {
            return;
        }
        self.counters.inserted += 1;
        for b in blocks.iter() {
            *self.held.entry(*b).or_insert(0) += 1;
        }
        self.queue.push_back((now + self.ttl, blocks));
        while self.held.len() > self.capacity && !self.queue.is_empty() {
            if let Some((_, oldest)) = self.queue.pop_front() {
                self.counters.dropped += 1;
                self.release(&oldest);
            }
        }
    }

    /// Removes the entry inserted with exactly `blocks` (the same allocation), if still held:
    /// its attempt never reached the engine.
    pub fn take_back(&mut self, blocks: &Arc<[BlockHash]>) {
        if let Some(at) = self.queue.iter().position(|(_, b)| Arc::ptr_eq(b, blocks)) {
            if let Some((_, entry)) = self.queue.remove(at) {
                self.counters.taken_back += 1;
                self.release(&entry);
            }
        }
    }

    /// Drops the entries due by `now`, counting each as confirmed when `confirmed` says the
    /// mirror holds all its blocks.
    pub fn expire(&mut self, now: Instant, confirmed: impl Fn(&[BlockHash]) -> bool) {
        while self.queue.front().is_some_and(|(due, _)| *due <= now) {
            let Some((_, entry)) = self.queue.pop_front() else {
                break;
            };
            if confirmed(&entry) {
                self.counters.confirmed += 1;
            } else {
                self.counters.expired += 1;
            }
            self.release(&entry);
        }
    }

    /// Drops the entries `held` says the mirror now holds whole, counting them confirmed: from
    /// then on the mirror alone answers for them, so an eviction the engine reports is seen at
    /// once.
    pub fn confirm(&mut self, held: impl Fn(&[BlockHash]) -> bool) {
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for (due, entry) in std::mem::take(&mut self.queue) {
            if held(&entry) {
                self.counters.confirmed += 1;
                self.release(&entry);
            } else {
                kept.push_back((due, entry));
            }
        }
        self.queue = kept;
    }

    /// Drops every entry (the engine's cache was emptied), counting none.
    pub fn clear(&mut self) {
        self.queue.clear();
        self.held.clear();
    }

    fn release(&mut self, entry: &[BlockHash]) {
        for b in entry {
            if let Some(n) = self.held.get_mut(b) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(ids: &[u128]) -> Arc<[BlockHash]> {
        ids.iter().map(|&i| BlockHash(i)).collect()
    }

    #[test]
    fn entries_live_for_the_ttl_and_are_classified_when_they_expire() {
        let t0 = Instant::now();
        let mut s = Speculative::new(Duration::from_secs(2), 100);
        s.insert(blocks(&[1, 2, 3]), t0);
        s.insert(blocks(&[1, 2, 4]), t0 + Duration::from_secs(1));
        assert!(s.contains(&BlockHash(3)) && s.contains(&BlockHash(4)));
        // The first is due at 2 s; the mirror holds its last block by then.
        s.expire(t0 + Duration::from_secs(2), |e| {
            e.last() == Some(&BlockHash(3))
        });
        assert!(!s.contains(&BlockHash(3)));
        assert!(s.contains(&BlockHash(1)), "still named by the second entry");
        s.expire(t0 + Duration::from_secs(3), |_| false);
        assert!(s.is_empty());
        let c = s.counters();
        assert_eq!((c.inserted, c.confirmed, c.expired), (2, 1, 1));
    }

    #[test]
    fn an_entry_the_mirror_confirms_leaves_at_once() {
        let t0 = Instant::now();
        let mut s = Speculative::new(Duration::from_secs(2), 100);
        s.insert(blocks(&[1, 2]), t0);
        s.insert(blocks(&[1, 3]), t0);
        s.confirm(|e| e.last() == Some(&BlockHash(2)));
        assert!(!s.contains(&BlockHash(2)));
        assert!(s.contains(&BlockHash(1)) && s.contains(&BlockHash(3)));
        assert_eq!(s.counters().confirmed, 1);
    }

    #[test]
    fn the_size_bound_drops_the_oldest_and_take_back_removes_its_own_entry() {
        let t0 = Instant::now();
        let mut s = Speculative::new(Duration::from_secs(2), 4);
        let a = blocks(&[1, 2]);
        let b = blocks(&[1, 2]);
        s.insert(a.clone(), t0);
        s.insert(b.clone(), t0);
        // The same hashes in another allocation are another request's entry.
        s.take_back(&b);
        assert!(s.contains(&BlockHash(2)));
        s.take_back(&a);
        assert!(s.is_empty());
        s.insert(blocks(&[5, 6, 7]), t0);
        s.insert(blocks(&[8, 9]), t0);
        assert!(!s.contains(&BlockHash(5)), "pushed out by the bound");
        assert!(s.contains(&BlockHash(9)));
        let c = s.counters();
        assert_eq!((c.taken_back, c.dropped, c.expired), (2, 1, 0));
    }
}
