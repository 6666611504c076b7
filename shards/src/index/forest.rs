//! [`Forest`]: the blocks up to 64 replicas' engines hold, in one radix tree of block chains, so
//! one walk down a prompt answers for all of them.
//!
//! # Shape
//!
//! Every block the router can name sits at one place: under its parent block (the router's XXH3
//! chain names a block by its whole prefix, so a name has one parent). Runs of blocks that the
//! same replicas hold in the same media are kept as one *node*: an edge (the blocks, in order)
//! and three 64-bit holder sets, one per medium (GPU, CPU, storage), bit `i` for member `i`.
//! Every block of a node is held by exactly the node's holders; a change that holds for part of
//! a node splits it, and a node whose only child has the same holders absorbs it. A node that no
//! member holds stays only while some descendant is held (a hole the engine may leave); an empty
//! leaf is removed with its blocks.
//!
//! # Lookup
//!
//! [`Forest::walk`] follows the prompt from node to node: the first block of each node is found
//! in one map, and a node's edge is compared with the prompt by its last block only, because two
//! chains that agree on a block agree on everything before it; only the node where the prompt
//! leaves the tree is searched (binary search on the same property). A prompt costs one map
//! probe per node on its path, whatever its length and however many members there are.
//!
//! # Names
//!
//! A block's slot keeps its full 128-bit chain value (a run stored under a parent continues the
//! parent's chain). Nodes hold `u32` slot numbers, so a block costs 24 bytes of slot plus four
//! of edge, shared by every member that holds it.

use super::hasher::{FoldBuildHasher, Key};
use super::mirror::Medium;
use crate::prefix_hash::BlockHash;
use std::collections::HashMap;

/// The "none" node or slot.
const NIL: u32 = u32::MAX;

/// How many members one forest serves (one bit each in a `u64`).
pub const FOREST_MEMBERS: usize = 64;

/// Which members hold a node's blocks, per medium.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Holders {
    gpu: u64,
    cpu: u64,
    storage: u64,
}

impl Holders {
    fn of(&mut self, medium: Medium) -> &mut u64 {
        match medium {
            Medium::Gpu => &mut self.gpu,
            Medium::Cpu => &mut self.cpu,
            Medium::Storage => &mut self.storage,
        }
    }

    fn get(&self, medium: Medium) -> u64 {
        match medium {
            Medium::Gpu => self.gpu,
            Medium::Cpu => self.cpu,
            Medium::Storage => self.storage,
        }
    }

    fn any(&self) -> u64 {
        self.gpu | self.cpu | self.storage
    }
}

/// A run of blocks with one set of holders.
#[derive(Debug, Default)]
struct Node {
    /// Slot numbers, in chain order.
    edge: Vec<u32>,
    /// The chain value of the last block (a walk compares it without touching the slots).
    last: Key,
    /// The node whose last block is this one's first block's parent, `NIL` under the root.
    parent: u32,
    holders: Holders,
    children: Vec<u32>,
    /// Whether the node is in use (freed nodes wait in the free list).
    live: bool,
}

/// A block: its chain value and where it sits.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    hash: Key,
    node: u32,
    offset: u32,
}

/// Slots per chunk of the slab.
const CHUNK: usize = 4096;

/// The slots, in fixed chunks: growing never copies them or leaves more than one chunk unused.
#[derive(Debug, Default)]
struct Slab {
    chunks: Vec<Box<[Slot]>>,
    len: usize,
}

impl Slab {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, slot: Slot) {
        if self.len == self.chunks.len() * CHUNK {
            self.chunks
                .push(vec![Slot::default(); CHUNK].into_boxed_slice());
        }
        let i = self.len;
        self.len += 1;
        self[i] = slot;
    }

    fn bytes(&self) -> usize {
        self.chunks.len() * CHUNK * std::mem::size_of::<Slot>()
            + self.chunks.capacity() * std::mem::size_of::<Box<[Slot]>>()
    }
}

impl std::ops::Index<usize> for Slab {
    type Output = Slot;
    fn index(&self, i: usize) -> &Slot {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl std::ops::IndexMut<usize> for Slab {
    fn index_mut(&mut self, i: usize) -> &mut Slot {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

/// Where a block sits, for the member code in [`super::mirror`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    node: u32,
    offset: u32,
}

/// One node on a walked path.
#[derive(Debug, Clone, Copy)]
struct PathNode {
    /// The prompt block the node starts at.
    start: u32,
    /// Blocks of it the prompt matched.
    len: u32,
    /// Members holding it on the GPU.
    gpu: u64,
    /// Members holding it on the GPU or in host memory.
    fast: u64,
    /// Members holding it anywhere.
    any: u64,
}

/// What one walk found for each member asked, by member bit.
#[derive(Debug, Clone)]
pub struct Walk {
    /// Leading blocks held on the GPU, per member.
    pub gpu: [u32; FOREST_MEMBERS],
    /// Past those, blocks whose fastest copy is in host memory (or on the GPU again after a
    /// block that is only offloaded), per member.
    pub cpu: [u32; FOREST_MEMBERS],
    /// Past those, blocks held only in a slower tier, per member.
    pub storage: [u32; FOREST_MEMBERS],
    /// The nodes on the prompt's path, in depth order.
    path: Vec<PathNode>,
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            gpu: [0; FOREST_MEMBERS],
            cpu: [0; FOREST_MEMBERS],
            storage: [0; FOREST_MEMBERS],
            path: Vec::new(),
        }
    }
}

impl Walk {
    /// Member `bit`'s answer.
    pub fn result(&self, bit: u32) -> super::mirror::MirrorMatch {
        let b = bit as usize;
        super::mirror::MirrorMatch {
            gpu: self.gpu[b] as usize,
            cpu: self.cpu[b] as usize,
            storage: self.storage[b] as usize,
        }
    }

    /// Whether member `bit`'s engine holds the prompt's block at `depth` on its GPU (`depth`
    /// anywhere on the walked path; false past it).
    pub fn gpu_at(&self, bit: u32, depth: usize) -> Option<usize> {
        let node = self.node_at(depth)?;
        let end = node.start as usize + node.len as usize;
        (node.gpu & (1u64 << bit) != 0).then_some(end)
    }

    /// Where member `bit` holds the prompt's block at `depth`, if anywhere on the walked path:
    /// the end of that node's run and whether the fastest copy is on the GPU or in host memory
    /// (`true`) or only in a slower tier (`false`).
    pub fn held_at(&self, bit: u32, depth: usize) -> Option<(usize, bool)> {
        let node = self.node_at(depth)?;
        let end = node.start as usize + node.len as usize;
        let b = 1u64 << bit;
        (node.any & b != 0).then_some((end, node.fast & b != 0))
    }

    /// The walked node covering prompt block `depth`.
    fn node_at(&self, depth: usize) -> Option<&PathNode> {
        // The path is in depth order.
        let at = self.path.partition_point(|n| n.start as usize <= depth);
        let node = self.path.get(at.checked_sub(1)?)?;
        (depth < node.start as usize + node.len as usize).then_some(node)
    }
}

/// The blocks of up to [`FOREST_MEMBERS`] engines, shared (see the module doc).
#[derive(Debug, Default)]
pub struct Forest {
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    slots: Slab,
    free_slots: Vec<u32>,
    /// The first block of every node, to the node.
    starts: HashMap<Key, u32, FoldBuildHasher>,
    /// Member bits in use.
    members: u64,
    /// The members' capacities, summed: the forest holds at most twice as many slots.
    capacity_sum: usize,
}

impl Forest {
    /// An empty forest.
    pub fn new() -> Forest {
        Forest::default()
    }

    /// Takes a free member bit, if any.
    pub fn join(&mut self) -> Option<u32> {
        let free = !self.members;
        if free == 0 {
            return None;
        }
        let bit = free.trailing_zeros();
        self.members |= 1u64 << bit;
        Some(bit)
    }

    /// Gives member `bit` back; the caller has cleared its blocks first ([`Forest::clear`]).
    pub fn leave(&mut self, bit: u32) {
        self.members &= !(1u64 << bit);
    }

    /// Changes the members' summed capacity by `joined - left`.
    pub(crate) fn add_capacity(&mut self, joined: usize, left: usize) {
        self.capacity_sum = self
            .capacity_sum
            .saturating_add(joined)
            .saturating_sub(left);
    }

    /// Whether `n` more slots fit. Slots held by nobody stay while they lead to a held block (a
    /// publisher that removes a chain's head but keeps its tail); the bound keeps such
    /// leftovers from growing without end: at most twice the members' capacities in all.
    pub(crate) fn has_room(&self, n: usize) -> bool {
        self.blocks().saturating_add(n) <= self.capacity_sum.saturating_mul(2)
    }

    /// Whether no member bit is in use.
    pub fn is_unused(&self) -> bool {
        self.members == 0
    }

    /// Distinct blocks held by some member (or kept as a path to a held one).
    pub fn blocks(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// Nodes in use.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free_nodes.len()
    }

    /// The chain value of `slot`.
    pub(crate) fn hash(&self, slot: u32) -> BlockHash {
        self.slots[slot as usize].hash.into()
    }

    fn place(&self, slot: u32) -> Place {
        let s = &self.slots[slot as usize];
        Place {
            node: s.node,
            offset: s.offset,
        }
    }

    /// Whether member `bit` holds `slot` in `medium`.
    pub(crate) fn holds(&self, slot: u32, bit: u32, medium: Medium) -> bool {
        let n = self.slots[slot as usize].node;
        self.nodes[n as usize].holders.get(medium) & (1u64 << bit) != 0
    }

    /// The slots of `names`, a chain continuing `parent` (a slot, or `None` for a chain from its
    /// namespace's seed): the blocks already in the forest are found, the rest are added as one
    /// new node that nobody holds yet (the caller holds them next with [`Forest::hold`]).
    pub(crate) fn slots_of(&mut self, parent: Option<u32>, names: &[BlockHash]) -> Vec<u32> {
        let mut out = Vec::with_capacity(names.len());
        let mut at = parent.map(|p| self.place(p));
        for (i, name) in names.iter().enumerate() {
            match self.next_after(at, name) {
                Some(slot) => {
                    out.push(slot);
                    at = Some(self.place(slot));
                }
                None => {
                    self.attach(at, &names[i..], &mut out);
                    break;
                }
            }
        }
        out
    }

    /// The slot named `name` right after `at` (or first under the root), if it is held there.
    fn next_after(&self, at: Option<Place>, name: &BlockHash) -> Option<u32> {
        let parent_node = match at {
            Some(p) => {
                let node = &self.nodes[p.node as usize];
                if let Some(&next) = node.edge.get(p.offset as usize + 1) {
                    return (self.slots[next as usize].hash == Key::from(*name)).then_some(next);
                }
                p.node
            }
            None => NIL,
        };
        let &child = self.starts.get(&Key::from(*name))?;
        let c = &self.nodes[child as usize];
        (c.parent == parent_node).then(|| c.edge[0])
    }

    /// Adds `names` as a new, unheld node after `at` (splitting its node there when `at` is not
    /// its last block); pushes their slots to `out`.
    fn attach(&mut self, at: Option<Place>, names: &[BlockHash], out: &mut Vec<u32>) {
        let parent = match at {
            Some(p) => {
                if (p.offset as usize) + 1 < self.nodes[p.node as usize].edge.len() {
                    self.split(p.node, p.offset as usize + 1);
                }
                p.node
            }
            None => NIL,
        };
        let node = self.alloc_node(parent);
        let mut edge = Vec::with_capacity(names.len());
        for (i, &hash) in names.iter().enumerate() {
            let slot = self.alloc_slot(Slot {
                hash: hash.into(),
                node,
                offset: i as u32,
            });
            edge.push(slot);
            out.push(slot);
        }
        if let (Some(&first), Some(&last)) = (names.first(), names.last()) {
            self.starts.insert(first.into(), node);
            self.nodes[node as usize].last = last.into();
        }
        self.nodes[node as usize].edge = edge;
        if parent != NIL {
            self.nodes[parent as usize].children.push(node);
        }
    }

    fn alloc_node(&mut self, parent: u32) -> u32 {
        let node = Node {
            edge: Vec::new(),
            last: Key::default(),
            parent,
            holders: Holders::default(),
            children: Vec::new(),
            live: true,
        };
        match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                n
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn alloc_slot(&mut self, slot: Slot) -> u32 {
        match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                s
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Splits `n` before its block `at` (0 < at < len): the blocks from `at` on move to a new
    /// child with the same holders, which takes over `n`'s children.
    fn split(&mut self, n: u32, at: usize) {
        let tail = self.nodes[n as usize].edge.split_off(at);
        let children = std::mem::take(&mut self.nodes[n as usize].children);
        let holders = self.nodes[n as usize].holders;
        let last = self.nodes[n as usize].last;
        if let Some(&kept) = self.nodes[n as usize].edge.last() {
            self.nodes[n as usize].last = self.slots[kept as usize].hash;
        }
        let t = self.alloc_node(n);
        for &c in &children {
            self.nodes[c as usize].parent = t;
        }
        for (i, &s) in tail.iter().enumerate() {
            let slot = &mut self.slots[s as usize];
            slot.node = t;
            slot.offset = i as u32;
        }
        self.starts.insert(self.slots[tail[0] as usize].hash, t);
        let node = &mut self.nodes[t as usize];
        node.edge = tail;
        node.last = last;
        node.children = children;
        node.holders = holders;
        self.nodes[n as usize].children.push(t);
    }

    /// Merges `n`'s only child into it when their holders are the same; says whether it did.
    fn absorb_child(&mut self, n: u32) -> bool {
        let node = &self.nodes[n as usize];
        let [c] = node.children[..] else {
            return false;
        };
        if self.nodes[c as usize].holders != node.holders {
            return false;
        }
        let child = std::mem::take(&mut self.nodes[c as usize]);
        let base = self.nodes[n as usize].edge.len() as u32;
        for (i, &s) in child.edge.iter().enumerate() {
            let slot = &mut self.slots[s as usize];
            slot.node = n;
            slot.offset = base + i as u32;
        }
        self.starts.remove(&self.slots[child.edge[0] as usize].hash);
        for &g in &child.children {
            self.nodes[g as usize].parent = n;
        }
        let node = &mut self.nodes[n as usize];
        node.edge.extend_from_slice(&child.edge);
        node.last = child.last;
        node.children = child.children;
        self.free_nodes.push(c);
        true
    }

    /// Restores the shape rules around `n` after its holders changed: an empty leaf goes (and
    /// so do the empty leaves it leaves behind), a node merges with an only child or into a
    /// parent it is the only child of when their holders agree.
    fn settle(&mut self, n: u32) {
        let mut n = n;
        loop {
            let node = &self.nodes[n as usize];
            if !(node.holders.any() == 0 && node.children.is_empty()) {
                // Several nodes change at once while a member is cleared: merge as far as equal
                // holders go.
                while self.absorb_child(n) {}
                // An empty child absorbed may leave an empty leaf (while a member is cleared).
                let node = &self.nodes[n as usize];
                if !(node.holders.any() == 0 && node.children.is_empty()) {
                    break;
                }
                continue;
            }
            let parent = node.parent;
            self.free(n);
            if parent == NIL {
                return;
            }
            n = parent;
        }
        let parent = self.nodes[n as usize].parent;
        if parent != NIL {
            while self.absorb_child(parent) {}
        }
    }

    /// Frees the leaf `n` and its slots.
    fn free(&mut self, n: u32) {
        let node = std::mem::take(&mut self.nodes[n as usize]);
        if let Some(&first) = node.edge.first() {
            self.starts.remove(&self.slots[first as usize].hash);
        }
        for &s in &node.edge {
            self.slots[s as usize].node = NIL;
            self.free_slots.push(s);
        }
        if node.parent != NIL {
            let siblings = &mut self.nodes[node.parent as usize].children;
            if let Some(i) = siblings.iter().position(|&c| c == n) {
                siblings.swap_remove(i);
            }
        }
        self.free_nodes.push(n);
    }

    /// Sets (or clears) member `bit` in `medium` on the consecutive slots `run` (in chain order,
    /// each right after the one before it).
    fn change_run(&mut self, run: &[u32], bit: u32, medium: Medium, hold: bool) {
        let mut i = 0;
        while i < run.len() {
            // The part of the run in one node: fresh places, as every change reshapes nodes.
            let p = self.place(run[i]);
            let len = self.nodes[p.node as usize].edge.len();
            let mut j = i + 1;
            while j < run.len() && self.slots[run[j] as usize].node == p.node {
                j += 1;
            }
            let a = p.offset as usize;
            let b = a + (j - i);
            debug_assert!(b <= len);
            if b < len {
                self.split(p.node, b);
            }
            let target = if a > 0 {
                self.split(p.node, a);
                self.slots[run[i] as usize].node
            } else {
                p.node
            };
            let h = self.nodes[target as usize].holders.of(medium);
            if hold {
                *h |= 1u64 << bit;
            } else {
                *h &= !(1u64 << bit);
            }
            self.settle(target);
            i = j;
        }
    }

    /// Member `bit` now holds the consecutive slots `run` (chain order, each right after the one
    /// before it) in `medium`.
    pub(crate) fn hold(&mut self, run: &[u32], bit: u32, medium: Medium) {
        self.change_run(run, bit, medium, true);
    }

    /// Member `bit` no longer holds `slots` in `medium`; consecutive blocks of a chain among
    /// them (in either order) are released as one run.
    pub(crate) fn release(&mut self, slots: &[u32], bit: u32, medium: Medium) {
        let mut run = Vec::new();
        let mut i = 0;
        while i < slots.len() {
            let mut j = i + 1;
            // Chain neighbours now: same node, next offset (a reshape never makes that false
            // for blocks that are not neighbours, so checking as we go is safe).
            if j < slots.len() && self.follows(slots[j - 1], slots[j]) {
                while j < slots.len() && self.follows(slots[j - 1], slots[j]) {
                    j += 1;
                }
                self.change_run(&slots[i..j], bit, medium, false);
            } else if j < slots.len() && self.follows(slots[j], slots[j - 1]) {
                while j < slots.len() && self.follows(slots[j], slots[j - 1]) {
                    j += 1;
                }
                run.clear();
                run.extend(slots[i..j].iter().rev());
                self.change_run(&run, bit, medium, false);
            } else {
                self.change_run(&slots[i..j], bit, medium, false);
            }
            i = j;
        }
    }

    /// Whether `b` is the block right after `a` in one node.
    fn follows(&self, a: u32, b: u32) -> bool {
        let (pa, pb) = (self.place(a), self.place(b));
        pa.node == pb.node && pa.offset + 1 == pb.offset
    }

    /// Removes `slot`'s node if nobody holds it and it leads to nothing held (a node
    /// [`Forest::slots_of`] added that no member came to hold).
    pub(crate) fn tidy(&mut self, slot: u32) {
        let n = self.slots[slot as usize].node;
        if n != NIL && self.nodes[n as usize].live {
            self.settle(n);
        }
    }

    /// Member `bit` no longer holds anything.
    pub fn clear(&mut self, bit: u32) {
        let mask = 1u64 << bit;
        let mut touched = Vec::new();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.live && n.holders.any() & mask != 0 {
                n.holders.gpu &= !mask;
                n.holders.cpu &= !mask;
                n.holders.storage &= !mask;
                touched.push(i as u32);
            }
        }
        // Deepest first is not needed: settle skips nodes freed or merged meanwhile.
        for n in touched {
            if self.nodes[n as usize].live {
                self.settle(n);
            }
        }
    }

    /// Walks `prompt` (a request's chain) for the members in `mask`, and keeps walking past
    /// where they all stop while members in `keep_path` may need the path (their speculative
    /// blocks can bridge a hole). Fills `out` for the bits of `mask`; records the path
    /// ([`Walk::gpu_at`], [`Walk::held_at`]) only when `keep_path` is not empty.
    pub fn walk(&self, prompt: &[BlockHash], mask: u64, keep_path: u64, out: &mut Walk) {
        out.path.clear();
        let mut m = mask;
        while m != 0 {
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            out.gpu[b] = 0;
            out.cpu[b] = 0;
            out.storage[b] = 0;
        }
        let mut alive_gpu = mask;
        let mut alive_any = mask;
        let mut depth = 0usize;
        let mut parent = NIL;
        while depth < prompt.len() && (alive_any | keep_path) != 0 {
            let Some(&id) = self.starts.get(&Key::from(prompt[depth])) else {
                break;
            };
            let node = &self.nodes[id as usize];
            if node.parent != parent {
                break;
            }
            let rest = &prompt[depth..];
            let most = node.edge.len().min(rest.len());
            let full = most == node.edge.len() && node.last == Key::from(rest[most - 1]);
            let matched = if full
                || (most < node.edge.len()
                    && self.slots[node.edge[most - 1] as usize].hash == Key::from(rest[most - 1]))
            {
                most
            } else {
                // Blocks [0, lo) match, block hi does not.
                let (mut lo, mut hi) = (1usize, most - 1);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if self.slots[node.edge[mid] as usize].hash == Key::from(rest[mid]) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            };
            let h = node.holders;
            let mut dropped = alive_gpu & !h.gpu;
            while dropped != 0 {
                let b = dropped.trailing_zeros() as usize;
                dropped &= dropped - 1;
                out.gpu[b] = depth as u32;
            }
            alive_gpu &= h.gpu;
            alive_any &= h.any();
            let mut offloaded = alive_any & !alive_gpu;
            while offloaded != 0 {
                let b = offloaded.trailing_zeros() as usize;
                offloaded &= offloaded - 1;
                if (h.gpu | h.cpu) & (1u64 << b) != 0 {
                    out.cpu[b] += matched as u32;
                } else {
                    out.storage[b] += matched as u32;
                }
            }
            // Only a member with speculative blocks reads the path (no allocation otherwise).
            if keep_path != 0 {
                out.path.push(PathNode {
                    start: depth as u32,
                    len: matched as u32,
                    gpu: h.gpu,
                    fast: h.gpu | h.cpu,
                    any: h.any(),
                });
            }
            depth += matched;
            if matched < node.edge.len() {
                break;
            }
            parent = id;
        }
        while alive_gpu != 0 {
            let b = alive_gpu.trailing_zeros() as usize;
            alive_gpu &= alive_gpu - 1;
            out.gpu[b] = depth as u32;
        }
    }

    /// An estimate of the heap bytes held, sized the way the containers size themselves.
    pub fn bytes(&self) -> usize {
        let edges: usize = self
            .nodes
            .iter()
            .map(|n| n.edge.capacity() * 4 + n.children.capacity() * 4)
            .sum();
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.free_nodes.capacity() * 4
            + self.slots.bytes()
            + self.free_slots.capacity() * 4
            + edges
            + super::mirror::table_bytes(self.starts.capacity(), std::mem::size_of::<(Key, u32)>())
    }

    /// Checks the shape rules (tests): every slot's place, the starts map, parent links, no
    /// empty leaf, no mergeable only child.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut starts = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.live {
                continue;
            }
            let i = i as u32;
            assert!(!n.edge.is_empty(), "node {i} has blocks");
            for (o, &s) in n.edge.iter().enumerate() {
                let slot = self.slots[s as usize];
                assert_eq!((slot.node, slot.offset as usize), (i, o), "slot {s}");
            }
            assert_eq!(self.starts.get(&Key::from(self.hash(n.edge[0]))), Some(&i));
            assert_eq!(
                Some(n.last),
                n.edge.last().map(|&s| self.slots[s as usize].hash)
            );
            starts += 1;
            assert!(
                n.holders.any() != 0 || !n.children.is_empty(),
                "empty leaf {i}"
            );
            if let [c] = n.children[..] {
                assert_ne!(self.nodes[c as usize].holders, n.holders, "unmerged {i}");
            }
            for &c in &n.children {
                assert_eq!(self.nodes[c as usize].parent, i);
            }
            if n.parent != NIL {
                assert!(self.nodes[n.parent as usize].children.contains(&i));
            }
        }
        assert_eq!(starts, self.starts.len());
        let live_slots: usize = self
            .nodes
            .iter()
            .filter(|n| n.live)
            .map(|n| n.edge.len())
            .sum();
        assert_eq!(live_slots, self.blocks());
    }
}
