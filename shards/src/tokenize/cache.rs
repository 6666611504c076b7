//! The segment cache: token ids of text segments (the text between special / added tokens,
//! which HF tokenizers encode independently), keyed by the segment text, bounded by a token
//! budget. Repeated system prompts and earlier turns then cost a hash lookup.
//!
//! Sixteen shards, each a mutex over a map and a CLOCK ring (second-chance eviction: a hit
//! sets the entry's reference bit; eviction skips and clears referenced entries once). Each
//! shard holds at most `budget / 16` tokens; a segment longer than that is never cached. A
//! cache is private to one model, and its locks are only taken on tokenizer pool threads: a data
//! core tokenizing a short body inline uses its own [`LocalSegmentCache`] (one per thread and
//! model, of one shard's budget), which takes no lock and shares nothing.

use std::collections::hash_map::Entry;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use xxhash_rust::xxh3::{xxh3_64, Xxh3DefaultBuilder};

const SHARDS: usize = 16;

/// Counters of a cache, read at any time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the segment.
    pub hits: u64,
    /// Lookups that did not (the segment was then encoded).
    pub misses: u64,
    /// Tokens held now.
    pub tokens: u64,
    /// Segments held now.
    pub entries: u64,
}

struct Slot {
    ids: Arc<[u32]>,
    referenced: bool,
}

#[derive(Default)]
pub(crate) struct Shard {
    /// Keyed by segment text, hashed with XXH3 (segments are long: a system prompt is tens of
    /// kilobytes, and SipHash over it costs more than the rest of a cached lookup).
    map: HashMap<Arc<str>, Slot, Xxh3DefaultBuilder>,
    ring: VecDeque<Arc<str>>,
    tokens: usize,
}

impl Shard {
    /// Appends the ids of `segment` to `out` and marks it referenced, if held.
    fn get(&mut self, segment: &str, out: &mut Vec<u32>) -> bool {
        match self.map.get_mut(segment) {
            Some(slot) => {
                slot.referenced = true;
                out.extend_from_slice(&slot.ids);
                true
            }
            None => false,
        }
    }

    /// Stores `segment`'s `ids` (non-empty, at most `budget` long), evicting by CLOCK until the
    /// shard holds at most `budget` tokens.
    fn insert(&mut self, segment: &str, ids: Arc<[u32]>, budget: usize) {
        let key: Arc<str> = segment.into();
        let n = ids.len();
        match self.map.entry(key.clone()) {
            Entry::Occupied(_) => return,
            Entry::Vacant(v) => {
                v.insert(Slot {
                    ids,
                    referenced: false,
                });
            }
        }
        self.ring.push_back(key.clone());
        self.tokens += n;
        while self.tokens > budget {
            let Some(victim) = self.ring.pop_front() else {
                break;
            };
            if Arc::ptr_eq(&victim, &key) && self.ring.is_empty() {
                self.ring.push_back(victim);
                break;
            }
            let referenced = self.map.get(&victim).is_some_and(|slot| slot.referenced);
            if referenced {
                if let Some(slot) = self.map.get_mut(&victim) {
                    slot.referenced = false;
                }
                self.ring.push_back(victim);
            } else if let Some(slot) = self.map.remove(&victim) {
                self.tokens -= slot.ids.len();
            }
        }
    }
}

/// Where an encoder looks segments up: the shared [`SegmentCache`] (pool threads) or one
/// thread's own [`LocalSegmentCache`] (data cores). Either way the ids appended are exactly
/// `encode(segment)`'s.
pub(crate) trait Segments {
    /// Appends the ids of `segment` to `out`, from the cache or from `encode(segment)`.
    fn extend_with(&self, segment: &str, out: &mut Vec<u32>, encode: impl FnOnce(&str) -> Vec<u32>);
}

impl Segments for SegmentCache {
    fn extend_with(
        &self,
        segment: &str,
        out: &mut Vec<u32>,
        encode: impl FnOnce(&str) -> Vec<u32>,
    ) {
        SegmentCache::extend_with(self, segment, out, encode)
    }
}

/// One thread's own segment cache (`!Sync`: no lock, no atomic, nothing shared with another
/// thread), one CLOCK shard of a fixed token budget. Data cores tokenize inline through it, so
/// the request path never takes a lock.
pub struct LocalSegmentCache {
    shard: std::cell::RefCell<Shard>,
    budget: usize,
}

impl LocalSegmentCache {
    /// A cache of at most `budget_tokens` tokens (0 disables it).
    pub fn new(budget_tokens: usize) -> LocalSegmentCache {
        LocalSegmentCache {
            shard: std::cell::RefCell::new(Shard::default()),
            budget: budget_tokens,
        }
    }

    /// Tokens held now.
    pub fn tokens(&self) -> usize {
        self.shard.borrow().tokens
    }
}

impl Segments for LocalSegmentCache {
    fn extend_with(
        &self,
        segment: &str,
        out: &mut Vec<u32>,
        encode: impl FnOnce(&str) -> Vec<u32>,
    ) {
        if self.budget > 0 && self.shard.borrow_mut().get(segment, out) {
            return;
        }
        let ids: Arc<[u32]> = encode(segment).into();
        out.extend_from_slice(&ids);
        if self.budget > 0 && ids.len() <= self.budget && !ids.is_empty() {
            self.shard.borrow_mut().insert(segment, ids, self.budget);
        }
    }
}

/// A bounded map from segment text to its token ids.
pub struct SegmentCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for SegmentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl SegmentCache {
    /// A cache holding at most `budget_tokens` tokens (0 disables it: every lookup misses
    /// and nothing is stored).
    pub fn new(budget_tokens: u64) -> SegmentCache {
        SegmentCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: usize::try_from(budget_tokens / SHARDS as u64).unwrap_or(usize::MAX),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        &self.shards[(xxh3_64(key.as_bytes()) as usize) % SHARDS]
    }

    /// Appends the ids of `segment` to `out`: from the cache, or from `encode(segment)` (then
    /// stored if it fits). The ids appended are always exactly `encode(segment)`'s.
    pub fn extend_with(
        &self,
        segment: &str,
        out: &mut Vec<u32>,
        encode: impl FnOnce(&str) -> Vec<u32>,
    ) {
        if self.shard_budget == 0 {
            self.misses.fetch_add(1, Ordering::Relaxed);
            out.extend(encode(segment));
            return;
        }
        let shard = self.shard(segment);
        if shard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(segment, out)
        {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let ids: Arc<[u32]> = encode(segment).into();
        out.extend_from_slice(&ids);
        if ids.len() > self.shard_budget || ids.is_empty() {
            return;
        }
        shard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(segment, ids, self.shard_budget);
    }

    /// Holds every shard's mutex until the guards are dropped (tests: the inline path must not
    /// need any of them).
    #[cfg(test)]
    pub(crate) fn lock_all(&self) -> Vec<std::sync::MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }

    /// The budget of one shard, which is also the budget of each thread's inline cache.
    pub(crate) fn shard_budget(&self) -> usize {
        self.shard_budget
    }

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        let (mut tokens, mut entries) = (0u64, 0u64);
        for shard in &self.shards {
            let s = shard.lock().unwrap_or_else(|p| p.into_inner());
            tokens += s.tokens as u64;
            entries += s.map.len() as u64;
        }
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            tokens,
            entries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(s: &str) -> Vec<u32> {
        s.bytes().map(u32::from).collect()
    }

    #[test]
    fn hits_after_first_miss_and_same_ids() {
        let c = SegmentCache::new(1 << 20);
        let mut a = Vec::new();
        c.extend_with("hello", &mut a, fake);
        let mut b = Vec::new();
        c.extend_with("hello", &mut b, |_| unreachable!("cached"));
        assert_eq!(a, b);
        let st = c.stats();
        assert_eq!((st.hits, st.misses, st.entries, st.tokens), (1, 1, 1, 5));
    }

    #[test]
    fn budget_is_never_exceeded() {
        let c = SegmentCache::new(16 * 10);
        for i in 0..1000 {
            let s = format!("segment number {i}");
            let mut out = Vec::new();
            c.extend_with(&s, &mut out, fake);
            assert_eq!(out, fake(&s));
            let mut again = Vec::new();
            c.extend_with(&s, &mut again, fake);
            assert_eq!(again, fake(&s));
        }
        assert!(c.stats().tokens <= 160);
    }

    #[test]
    fn zero_budget_disables() {
        let c = SegmentCache::new(0);
        let mut out = Vec::new();
        c.extend_with("abc", &mut out, fake);
        c.extend_with("abc", &mut out, fake);
        assert_eq!(out, [fake("abc"), fake("abc")].concat());
        assert_eq!(c.stats().hits, 0);
        assert_eq!(c.stats().entries, 0);
    }
}
