//! The naive reference model of the index, for tests: a `Vec` of (block, stamp) scanned
//! linearly, following the same documented rules as [`super::ReplicaBlocks`] with none of its
//! data structures.

use crate::prefix_hash::BlockHash;

/// A reference shadow: held blocks with their stamps, in no particular order.
#[derive(Debug, Clone)]
pub(crate) struct RefBlocks {
    pub(crate) capacity: usize,
    clock: u64,
    held: Vec<(BlockHash, u64)>,
    reuse: f64,
}

/// What one reference record did: (block, stamp given, stamp before or None when new), in the
/// order the record stamped them.
#[derive(Debug, Clone)]
pub(crate) struct RefUndo {
    entries: Vec<(BlockHash, u64, Option<u64>)>,
}

impl RefBlocks {
    pub(crate) fn new(capacity: usize) -> RefBlocks {
        RefBlocks {
            capacity,
            clock: 0,
            held: Vec::new(),
            reuse: 1.0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    fn find(&self, b: BlockHash) -> Option<usize> {
        self.held.iter().position(|&(h, _)| h == b)
    }

    fn evict(&mut self) {
        while self.held.len() > self.capacity {
            let oldest = self
                .held
                .iter()
                .enumerate()
                .min_by_key(|(_, &(_, s))| s)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    self.held.remove(i);
                }
                None => break,
            }
        }
    }

    /// Stamps the first `capacity` blocks from the last to the first, then evicts the oldest.
    /// Also folds the record into the reuse: each held block weighs (its age + 1) over (the
    /// oldest held block's age + 1), ages counted in stamps before this record.
    pub(crate) fn record(&mut self, blocks: &[BlockHash]) -> RefUndo {
        let n = blocks.len().min(self.capacity);
        let oldest = self.held.iter().map(|&(_, s)| s).min();
        let oldest_age = oldest.map_or(0, |s| self.clock - s);
        let mut held_weight = 0.0;
        for b in &blocks[..n] {
            if let Some(p) = self.find(*b) {
                let age = self.clock - self.held[p].1;
                held_weight += (age + 1) as f64 / (oldest_age + 1) as f64;
            }
        }
        if n > 0 {
            let keep = (-(n as f64) / self.capacity as f64).exp();
            self.reuse =
                self.reuse * keep + (held_weight / n as f64).clamp(0.0, 1.0) * (1.0 - keep);
        }
        let mut entries = Vec::new();
        for i in (0..n).rev() {
            self.clock += 1;
            let stamp = self.clock;
            let prev = match self.find(blocks[i]) {
                Some(p) => Some(std::mem::replace(&mut self.held[p].1, stamp)),
                None => {
                    self.held.push((blocks[i], stamp));
                    None
                }
            };
            entries.push((blocks[i], stamp, prev));
        }
        self.evict();
        RefUndo { entries }
    }

    /// Reverts, in reverse order, every entry whose block still has the stamp the record gave.
    pub(crate) fn take_back(&mut self, undo: RefUndo) {
        for &(b, stamp, prev) in undo.entries.iter().rev() {
            if let Some(p) = self.find(b) {
                if self.held[p].1 == stamp {
                    match prev {
                        None => {
                            self.held.remove(p);
                        }
                        Some(old) => self.held[p].1 = old,
                    }
                }
            }
        }
    }

    pub(crate) fn reuse(&self) -> f64 {
        self.reuse
    }

    pub(crate) fn holds(&self, b: &BlockHash) -> bool {
        self.find(*b).is_some()
    }

    /// Leading blocks held, one by one.
    pub(crate) fn matched_prefix(&self, prompt: &[BlockHash]) -> usize {
        prompt.iter().take_while(|b| self.holds(b)).count()
    }

    pub(crate) fn clear(&mut self) {
        self.held.clear();
    }

    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict();
    }

    /// Held blocks, least recent first.
    pub(crate) fn lru_order(&self) -> Vec<BlockHash> {
        let mut v = self.held.clone();
        v.sort_by_key(|&(_, s)| s);
        v.into_iter().map(|(h, _)| h).collect()
    }
}
