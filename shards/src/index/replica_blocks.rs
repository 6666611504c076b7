//! [`ReplicaBlocks`]: one replica's shadow of its engine's prefix cache, an LRU of block hashes.
//!
//! # Recency order, and why
//!
//! Every held block carries a *stamp*; a larger stamp is more recent and eviction removes the
//! smallest stamp first. [`ReplicaBlocks::record`] stamps a prompt's blocks **from its last
//! block to its first**: block `n-1` gets the lowest new stamp, block `0` the highest. vLLM frees
//! a finished request's blocks in reverse order (`reversed(blocks)` appended to the free queue),
//! so it evicts a request's tail before its head and an older request before a newer one; the
//! same order here means the shadow evicts exactly the blocks the engine evicts first: the LAST
//! blocks of the least recent prompt.
//!
//! A consequence this module relies on: when every recorded slice is a whole chain from a
//! prompt's first block (what [`block_hashes`](crate::prefix_hash::block_hashes) produces), the
//! held set is *prefix-closed*: a block is held only while its parent is held, with a larger
//! stamp (records stamp parents above children; eviction takes children first; a take-back only
//! lowers stamps back to values that kept the order). [`ReplicaBlocks::matched_prefix`] uses this
//! to answer with a binary search in `O(log prompt)` map probes instead of one per block.
//!
//! # Layout
//!
//! Nodes live in a slab (`Vec`) linked into one list ordered by stamp (head = least recent) with
//! `u32` links; a hash map from the 128-bit block hash to the node's slot finds them. A node is
//! 32 bytes and a map entry 24 (+1 control byte), about 65-75 bytes per block once full.

use super::hasher::{FoldBuildHasher, Key};
use crate::prefix_hash::BlockHash;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The "no node" link.
const NIL: u32 = u32::MAX;

/// The most blocks one replica can hold: slots are `u32` and `NIL` is reserved, and a record
/// may hold up to twice the capacity for a moment before it evicts.
pub const MAX_CAPACITY_BLOCKS: usize = (u32::MAX / 2) as usize;

/// Extra slab slots reserved past the capacity, so a record that briefly holds more than the
/// capacity (before it evicts) does not double the slab.
const SLAB_HEADROOM: usize = 1024;

/// Hands out a distinct identity to every [`ReplicaBlocks`], so an undo token from one never
/// changes another (e.g. a replica forgotten and added again).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One slab slot: a held block (stamp > 0) or a free slot (stamp 0, `next` = next free slot).
#[derive(Debug, Clone, Copy)]
struct Node {
    key: Key,
    /// Recency: unique among held blocks, larger = more recent; 0 marks a free slot.
    stamp: u64,
    prev: u32,
    next: u32,
}

/// What one [`ReplicaBlocks::record`] changed, to undo it exactly with
/// [`ReplicaBlocks::take_back`]. Small: one entry per run of blocks that were new, or that were
/// held with consecutive stamps (a whole earlier prompt is one run).
#[derive(Debug)]
pub struct RecordUndo {
    /// The identity of the [`ReplicaBlocks`] that made it.
    owner: u64,
    /// The stamp given to the last recorded block; block `i` got `base + (len - 1 - i)`.
    base: u64,
    /// How many blocks the record stamped (the prompt, cut to the capacity).
    len: u32,
    /// Runs in the order the record made them (from the last block towards the first).
    runs: Vec<Run>,
    /// Spare (unhashed) blocks the record used up, and whether it left a partial block spare.
    spare_taken: usize,
    partial: bool,
}

impl RecordUndo {
    /// How many leading blocks of the prompt the record stamped (and a take-back may revert).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the record stamped nothing (empty prompt or zero capacity).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Blocks `start..start+len` of a record: all new (`first_prev == 0`), or all held before with
/// stamps `first_prev, first_prev - 1, ...` (block `start` the most recent).
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u32,
    len: u32,
    first_prev: u64,
    /// Neighbours of block `start` just before the record moved it: where a take-back starts
    /// looking for its old place (any held node is a correct start; these are close ones).
    prev_slot: u32,
    next_slot: u32,
}

/// A per-replica shadow LRU of block hashes, holding at most `capacity` blocks. Pure data: no
/// clock, no I/O, no threads. See the module docs for the exact eviction order.
#[derive(Debug)]
pub struct ReplicaBlocks {
    id: u64,
    capacity: usize,
    /// The last stamp handed out (stamps start at 1).
    clock: u64,
    nodes: Vec<Node>,
    free: u32,
    head: u32,
    tail: u32,
    len: usize,
    map: HashMap<Key, u32, FoldBuildHasher>,
    /// Blocks the engine holds without a hash (never used yet, or a request's partial last
    /// block): vLLM keeps them at the head of its free queue, so allocating one evicts nothing.
    spare: usize,
    /// Recent share of recorded blocks already held (see [`ReplicaBlocks::reuse`]).
    reuse: f64,
}

impl ReplicaBlocks {
    /// An empty shadow holding at most `capacity` blocks (clamped to [`MAX_CAPACITY_BLOCKS`]).
    /// Nothing is allocated until blocks are recorded.
    pub fn new(capacity: usize) -> ReplicaBlocks {
        ReplicaBlocks {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            capacity: capacity.min(MAX_CAPACITY_BLOCKS),
            spare: capacity.min(MAX_CAPACITY_BLOCKS),
            clock: 0,
            nodes: Vec::new(),
            free: NIL,
            head: NIL,
            tail: NIL,
            len: 0,
            map: HashMap::default(),
            reuse: 1.0,
        }
    }

    /// How likely a block this pool evicts next is to be asked for again, in 0..=1: the share of
    /// the blocks recorded here that were already held, each hit weighted by how near eviction
    /// the block was (its age over the least recent held block's age, so a hit on the next
    /// block to go counts 1 and a hit on the block just used counts almost 0), as an average
    /// weighted towards about the last `capacity` blocks recorded (each record of `n` blocks
    /// keeps `exp(-n / capacity)` of the old value). 1 before anything was recorded: an
    /// unmeasured cache is assumed worth keeping. A prefix every prompt repeats (a chat
    /// template's first block) is always recent, so it adds almost nothing.
    pub fn reuse(&self) -> f64 {
        self.reuse
    }

    /// Blocks a new prompt can take without evicting a held block (the spare ones).
    pub fn free_blocks(&self) -> usize {
        self.spare
    }

    /// Blocks held now; never more than [`ReplicaBlocks::capacity`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most blocks held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// True when `block` is held.
    pub fn holds(&self, block: &BlockHash) -> bool {
        self.map.contains_key(&Key::from(*block))
    }

    /// Held blocks from the least to the most recently used (eviction order).
    pub fn iter_lru(&self) -> impl Iterator<Item = BlockHash> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            let node = self.nodes.get(at as usize)?;
            at = node.next;
            Some(BlockHash::from(node.key))
        })
    }

    /// Marks the prompt's blocks (a chain from its first block) most recently used, stamped from
    /// the last block to the first (see the module docs), then evicts the least recent blocks
    /// while more than the capacity are held. Only the first `capacity` blocks are stamped: the
    /// rest could not stay anyway. Returns the token that undoes exactly this record.
    pub fn record(&mut self, blocks: &[BlockHash]) -> RecordUndo {
        self.record_prompt(blocks, false)
    }

    /// [`record`](ReplicaBlocks::record) for a prompt as vLLM's block pool sees it: the
    /// request's new blocks (its full blocks not held, plus its partial last block when
    /// `partial`) come first from the spare blocks, then by evicting the least recent held
    /// ones; when it finishes, its full blocks are held (stamped as `record` does) and its
    /// partial block becomes a spare block again (vLLM puts unhashed blocks back at the head of
    /// its free queue). So at most `capacity - spare` blocks are held.
    pub fn record_prompt(&mut self, blocks: &[BlockHash], partial: bool) -> RecordUndo {
        let n = blocks.len().min(self.capacity);
        // Ages count stamps handed out since; the least recent held block has the largest.
        let oldest_age = self
            .nodes
            .get(self.head as usize)
            .map_or(0, |h| self.clock.saturating_sub(h.stamp));
        let mut new_blocks = 0;
        let mut held_weight = 0.0;
        for b in &blocks[..n] {
            match self.map.get(&Key::from(*b)) {
                Some(&slot) => {
                    let age = self.clock.saturating_sub(self.nodes[slot as usize].stamp);
                    held_weight += (age + 1) as f64 / (oldest_age + 1) as f64;
                }
                None => new_blocks += 1,
            }
        }
        if n > 0 {
            let keep = (-(n as f64) / self.capacity.max(1) as f64).exp();
            let held = (held_weight / n as f64).clamp(0.0, 1.0);
            self.reuse = self.reuse * keep + held * (1.0 - keep);
        }
        let spare_taken = self.spare.min(new_blocks + usize::from(partial));
        self.spare -= spare_taken;
        let base = self.clock + 1;
        self.clock += n as u64;
        let mut runs: Vec<Run> = Vec::new();
        for i in (0..n).rev() {
            let stamp = base + (n - 1 - i) as u64;
            let key = Key::from(blocks[i]);
            let idx = i as u32;
            match self.map.get(&key).copied() {
                Some(slot) => {
                    let node = self.nodes[slot as usize];
                    let prev = node.stamp;
                    self.unlink(slot);
                    self.nodes[slot as usize].stamp = stamp;
                    self.push_back(slot);
                    match runs.last_mut() {
                        Some(run)
                            if run.first_prev != 0
                                && run.start == idx + 1
                                && run.first_prev.checked_add(1) == Some(prev) =>
                        {
                            run.start = idx;
                            run.len += 1;
                            run.first_prev = prev;
                            run.prev_slot = node.prev;
                            run.next_slot = node.next;
                        }
                        _ => runs.push(Run {
                            start: idx,
                            len: 1,
                            first_prev: prev,
                            prev_slot: node.prev,
                            next_slot: node.next,
                        }),
                    }
                }
                None => {
                    let slot = self.alloc(key, stamp);
                    self.map.insert(key, slot);
                    self.push_back(slot);
                    match runs.last_mut() {
                        Some(run) if run.first_prev == 0 && run.start == idx + 1 => {
                            run.start = idx;
                            run.len += 1;
                        }
                        _ => runs.push(Run {
                            start: idx,
                            len: 1,
                            first_prev: 0,
                            prev_slot: NIL,
                            next_slot: NIL,
                        }),
                    }
                }
            }
        }
        if partial {
            self.spare += 1;
        }
        self.evict_to(self.capacity.saturating_sub(self.spare));
        RecordUndo {
            owner: self.id,
            base,
            len: n as u32,
            runs,
            spare_taken,
            partial,
        }
    }

    /// Spare blocks: held by the engine without a hash (see [`record_prompt`](Self::record_prompt)).
    pub fn spare(&self) -> usize {
        self.spare
    }

    /// Undoes what the [`record`](ReplicaBlocks::record) that returned `undo` did to the blocks
    /// it stamped and nobody stamped since: blocks it added are removed; blocks it moved get
    /// their previous stamp back (their old place in the eviction order). Blocks recorded again
    /// since (by a later record) keep that later recency; blocks gone since (evicted, cleared)
    /// stay gone; blocks the record evicted are not brought back (the shadow under-predicts
    /// until they are recorded again, never over-predicts). `blocks` must be the slice given to
    /// the record; a token from another `ReplicaBlocks` does nothing.
    pub fn take_back(&mut self, blocks: &[BlockHash], undo: RecordUndo) {
        if undo.owner != self.id {
            return;
        }
        let n = undo.len as usize;
        // The attempt never ran: the blocks it took are spare again.
        self.spare = (self.spare + undo.spare_taken)
            .saturating_sub(usize::from(undo.partial))
            .min(self.capacity.saturating_sub(self.len));
        let mut last_placed = NIL;
        // Reverse of the record's order: from the first block towards the last.
        for run in undo.runs.iter().rev() {
            let mut before = NIL;
            for k in 0..run.len {
                let i = (run.start + k) as usize;
                let Some(block) = blocks.get(i) else {
                    before = NIL;
                    continue;
                };
                let assigned = undo.base + (n - 1 - i) as u64;
                let Some(slot) = self.map.get(&Key::from(*block)).copied() else {
                    before = NIL;
                    continue;
                };
                if self.nodes[slot as usize].stamp != assigned {
                    before = NIL;
                    continue;
                }
                if run.first_prev == 0 {
                    self.remove(slot);
                    continue;
                }
                let prev_stamp = run.first_prev - u64::from(k);
                self.unlink(slot);
                self.nodes[slot as usize].stamp = prev_stamp;
                if before != NIL && before != slot {
                    // The block placed just before had stamp prev_stamp + 1: no held stamp lies
                    // between, so this block goes right in front of it. (It can be this very
                    // block when a slice repeats a hash; then it is placed like any other.)
                    self.link_before(slot, before);
                } else {
                    self.place(slot, &[run.prev_slot, run.next_slot, last_placed]);
                }
                before = slot;
                last_placed = slot;
            }
        }
    }

    /// How many leading blocks of `prompt` are held. Exact when the held set is prefix-closed
    /// along `prompt` (the module-level guarantee when records are whole chains and `prompt` is
    /// a chain). Probes the first block, then the last, then bisects: at most
    /// `2 + ceil(log2(prompt.len()))` map probes, 1 for a replica that holds none of it and 2 for
    /// one that holds all of it.
    pub fn matched_prefix(&self, prompt: &[BlockHash]) -> usize {
        let held = |i: usize| self.map.contains_key(&Key::from(prompt[i]));
        let n = prompt.len();
        if n == 0 || !held(0) {
            return 0;
        }
        if held(n - 1) {
            return n;
        }
        // Invariant: block `lo` is held, block `hi` is not.
        let (mut lo, mut hi) = (0, n - 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if held(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo + 1
    }

    /// Forgets every block (the engine restarted with an empty cache) and frees the memory;
    /// the capacity stays. Undo tokens made before have no effect afterwards.
    pub fn clear(&mut self) {
        self.nodes = Vec::new();
        self.map = HashMap::default();
        self.free = NIL;
        self.head = NIL;
        self.tail = NIL;
        self.len = 0;
        self.spare = self.capacity;
    }

    /// Sets the capacity (clamped to [`MAX_CAPACITY_BLOCKS`]), evicting the least recent blocks
    /// beyond it at once, and releasing memory when the slab became much larger than needed.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.min(MAX_CAPACITY_BLOCKS);
        self.evict_to(self.capacity);
        self.spare = self.capacity - self.len;
        let wanted = self.capacity.saturating_add(SLAB_HEADROOM);
        if self.nodes.capacity() > wanted.saturating_mul(2) {
            self.compact();
        }
    }

    /// An estimate of the heap bytes this shadow uses: the slab, the hash map's table (computed
    /// from its capacity the way hashbrown sizes tables) and the struct itself.
    pub fn bytes(&self) -> usize {
        let cap = self.map.capacity();
        let buckets = if cap == 0 {
            0
        } else if cap < 8 {
            (cap + 1).next_power_of_two()
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        let entry = std::mem::size_of::<(Key, u32)>() + 1;
        std::mem::size_of::<Self>()
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + buckets * entry
            + if buckets > 0 { 16 } else { 0 }
    }

    /// Evicts from the head until at most `limit` blocks are held.
    fn evict_to(&mut self, limit: usize) {
        while self.len > limit && self.head != NIL {
            self.remove(self.head);
        }
    }

    /// Unlinks, unmaps and frees a held slot.
    fn remove(&mut self, slot: u32) {
        self.unlink(slot);
        let node = &mut self.nodes[slot as usize];
        let key = node.key;
        node.stamp = 0;
        node.next = self.free;
        node.prev = NIL;
        self.free = slot;
        self.map.remove(&key);
        self.len -= 1;
    }

    /// A slot holding `key` with `stamp`, not yet linked or mapped.
    fn alloc(&mut self, key: Key, stamp: u64) -> u32 {
        self.len += 1;
        let node = Node {
            key,
            stamp,
            prev: NIL,
            next: NIL,
        };
        if self.free != NIL {
            let slot = self.free;
            self.free = self.nodes[slot as usize].next;
            self.nodes[slot as usize] = node;
            return slot;
        }
        let len = self.nodes.len();
        if len == self.nodes.capacity() {
            let target = self.capacity.saturating_add(SLAB_HEADROOM);
            if len < target && len.saturating_mul(2) > target {
                // Doubling would overshoot what a full shadow needs: grow to exactly that.
                self.nodes.reserve_exact(target - len);
            }
        }
        self.nodes.push(node);
        len as u32
    }

    /// Takes a linked slot out of the list.
    fn unlink(&mut self, slot: u32) {
        let Node { prev, next, .. } = self.nodes[slot as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        let node = &mut self.nodes[slot as usize];
        node.prev = NIL;
        node.next = NIL;
    }

    /// Links an unlinked slot at the tail (most recent).
    fn push_back(&mut self, slot: u32) {
        let old_tail = self.tail;
        {
            let node = &mut self.nodes[slot as usize];
            node.prev = old_tail;
            node.next = NIL;
        }
        if old_tail == NIL {
            self.head = slot;
        } else {
            self.nodes[old_tail as usize].next = slot;
        }
        self.tail = slot;
    }

    /// Links an unlinked slot right before the linked slot `at`.
    fn link_before(&mut self, slot: u32, at: u32) {
        let prev = self.nodes[at as usize].prev;
        {
            let node = &mut self.nodes[slot as usize];
            node.prev = prev;
            node.next = at;
        }
        self.nodes[at as usize].prev = slot;
        if prev == NIL {
            self.head = slot;
        } else {
            self.nodes[prev as usize].next = slot;
        }
    }

    /// Links an unlinked slot where its stamp belongs in the stamp-ordered list, walking from the
    /// first of `hints` that is a held slot (else from the head). Any held slot is a correct
    /// start; a near one makes the walk short.
    fn place(&mut self, slot: u32, hints: &[u32]) {
        let stamp = self.nodes[slot as usize].stamp;
        let start = hints
            .iter()
            .copied()
            .find(|&h| h != slot && self.nodes.get(h as usize).is_some_and(|n| n.stamp != 0))
            .unwrap_or(self.head);
        if start == NIL {
            self.push_back(slot);
            return;
        }
        let mut at = start;
        if self.nodes[at as usize].stamp < stamp {
            // Walk towards the tail to the last node older than `stamp`; link after it.
            loop {
                let next = self.nodes[at as usize].next;
                if next == NIL {
                    self.push_back(slot);
                    return;
                }
                if self.nodes[next as usize].stamp > stamp {
                    self.link_before(slot, next);
                    return;
                }
                at = next;
            }
        }
        // Walk towards the head to the first node newer than `stamp` with an older (or no)
        // predecessor; link before it.
        loop {
            let prev = self.nodes[at as usize].prev;
            if prev == NIL || self.nodes[prev as usize].stamp < stamp {
                self.link_before(slot, at);
                return;
            }
            at = prev;
        }
    }

    /// Rebuilds the slab densely in list order (after a large capacity cut). Slot hints in
    /// outstanding undo tokens become mere starting points (still correct, maybe farther).
    fn compact(&mut self) {
        let mut nodes = Vec::with_capacity(self.len.min(self.capacity) + SLAB_HEADROOM.min(64));
        let mut map = HashMap::with_capacity_and_hasher(self.len, FoldBuildHasher::default());
        let mut at = self.head;
        while let Some(node) = self.nodes.get(at as usize) {
            let slot = nodes.len() as u32;
            map.insert(node.key, slot);
            nodes.push(Node {
                key: node.key,
                stamp: node.stamp,
                prev: if slot == 0 { NIL } else { slot - 1 },
                next: slot + 1,
            });
            at = node.next;
        }
        if let Some(last) = nodes.last_mut() {
            last.next = NIL;
        }
        self.head = if nodes.is_empty() { NIL } else { 0 };
        self.tail = if nodes.is_empty() {
            NIL
        } else {
            (nodes.len() - 1) as u32
        };
        self.free = NIL;
        self.nodes = nodes;
        self.map = map;
    }
}

#[cfg(test)]
#[path = "replica_blocks_tests.rs"]
mod tests;
