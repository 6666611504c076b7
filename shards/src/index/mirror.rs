//! [`EngineMirror`]: one replica's exact view of its engine's prefix cache, built only from the
//! engine's own KV events (BlockStored, BlockRemoved, AllBlocksCleared), never from routing.
//!
//! - **Keys are the router's own.** Each stored block is named by the router's XXH3 chain
//!   ([`crate::prefix_hash`]) recomputed from the event's token ids: the first block of a run
//!   without a parent starts from the run's [`HashSalt`] (model, LoRA adapter, `cache_salt`),
//!   a run with a parent continues from the chain value the mirror holds for that parent. A
//!   block's extra keys other than the adapter and the salt (multimodal identifiers) are mixed
//!   in as a digest, so such a block never matches a text-only prediction. The engine's hash
//!   values only identify blocks between its own events; they are never compared with the
//!   router's.
//! - **Copies are counted.** vLLM re-stores a block with the same hash under a new physical
//!   block (a duplicate BlockStored is normal) and reports one BlockRemoved per physical copy,
//!   so each engine block keeps a count per storage medium (GPU, CPU, storage tiers); it leaves
//!   the mirror when its last copy does.
//! - **Bounded.** At most `capacity` engine blocks are held; a store past it is refused and
//!   counted (a publisher claiming more blocks than its engine has is out of sync or lying).
//! - A run whose parent the mirror does not hold cannot be named (its chain is unknown): it is
//!   refused and counted as an orphan; the caller decides whether that means a lost event.
//! - **Shared blocks.** The blocks themselves live in a [`Forest`] that up to 64 replicas of a
//!   shard share (a block several engines hold is kept once, with one holder bit each); a
//!   [`Member`] is one replica's part: the engine's ids of its blocks and their copies.
//!   [`EngineMirror`] is a member with a forest of its own, for one replica on its own.

use super::forest::{Forest, Walk};
use super::hasher::FoldBuildHasher;
use crate::prefix_hash::{extend_block_hashes, BlockHash, HashSalt};
use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_128;

/// An engine's own name for a block, as its events carry it: the 64-bit int widened, or for
/// the bytes form (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`) the XXH3-128 of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineBlockId(pub u128);

impl EngineBlockId {
    /// The 64 bits a mirror keys the block by: an int hash exactly, a bytes hash folded (two
    /// blocks of one engine collide with odds of 2^-64; one stream never mixes the two forms).
    pub fn key(self) -> u64 {
        (self.0 as u64) ^ ((self.0 >> 64) as u64)
    }

    /// The id of an int hash.
    pub fn from_int(v: u64) -> Self {
        EngineBlockId(u128::from(v))
    }

    /// The id of a bytes hash (tagged so it never equals an int's id).
    pub fn from_bytes(b: &[u8]) -> Self {
        EngineBlockId(xxh3_128(b) | (1u128 << 127))
    }
}

/// Where the engine holds a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Medium {
    /// The engine's own KV cache (vLLM's `"GPU"`, also when the event names none).
    Gpu,
    /// Host memory offloading (`"CPU"`).
    Cpu,
    /// Any slower tier (`"STORAGE"`, and 0.26's `"FS"` / `"OBJ"`, or a name this crate does not
    /// know).
    Storage,
}

impl Medium {
    /// The medium of an event's `medium` field.
    pub fn parse(name: Option<&str>) -> Medium {
        match name {
            None => Medium::Gpu,
            Some(n) if n.eq_ignore_ascii_case("GPU") => Medium::Gpu,
            Some(n) if n.eq_ignore_ascii_case("CPU") => Medium::Cpu,
            Some(_) => Medium::Storage,
        }
    }

    /// Every medium, fastest first.
    pub const ALL: [Medium; 3] = [Medium::Gpu, Medium::Cpu, Medium::Storage];

    fn index(self) -> usize {
        match self {
            Medium::Gpu => 0,
            Medium::Cpu => 1,
            Medium::Storage => 2,
        }
    }
}

/// One BlockStored event, as the mirror needs it.
#[derive(Debug, Clone, Copy)]
pub struct StoredBlocks<'a> {
    /// The engine's id of each stored block, in order.
    pub engine_ids: &'a [EngineBlockId],
    /// The engine's id of the block before the first, `None` for a prompt's first block.
    pub parent: Option<EngineBlockId>,
    /// The tokens of all the blocks (`engine_ids.len() * block_size` of them).
    pub token_ids: &'a [u32],
    /// Tokens per block.
    pub block_size: usize,
    /// The namespace a parentless run starts from (model, adapter, `cache_salt`).
    pub salt: HashSalt,
    /// Per block, a digest of its extra keys beyond the adapter and the salt; empty when no
    /// block has any.
    pub extra: &'a [Option<u128>],
    /// Where the blocks were stored.
    pub medium: Medium,
}

/// Why a BlockStored was not applied. None of these changes the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreRefused {
    /// The run's parent is not held, so its chain cannot be computed.
    #[error("the stored blocks' parent is not in the mirror")]
    Orphan,
    /// The token count is not `blocks * block_size`, or `block_size` is 0, or the extra keys
    /// do not have one entry per block.
    #[error("stored blocks and their tokens do not line up")]
    Shape,
    /// Holding the new blocks would pass the mirror's capacity (or its forest's bound on the
    /// blocks it keeps, see [`Forest`]), or one engine block would have more copies in one
    /// medium than a mirror counts (255).
    #[error("the mirror is full")]
    Full,
}

/// One engine block of a member: the forest slot it names and its copies per medium.
#[derive(Debug, Clone, Copy)]
struct EngineEntry {
    slot: u32,
    copies: [u8; 3],
}

/// How many leading blocks of a prompt the engine holds, by the fastest medium of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MirrorMatch {
    /// Leading blocks held in the engine's own cache.
    pub gpu: usize,
    /// Past those, up to the first block held nowhere: blocks with a copy in host memory (or on
    /// the GPU again), loaded rather than recomputed.
    pub cpu: usize,
    /// Past `gpu`, blocks held only in a slower tier.
    pub storage: usize,
}

impl MirrorMatch {
    /// Leading blocks held in some medium.
    pub fn any(&self) -> usize {
        self.gpu + self.cpu + self.storage
    }
}

/// Counts of what the mirror has applied and refused since it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MirrorCounters {
    /// Blocks stored (copies, duplicates included).
    pub stored: u64,
    /// Copies removed.
    pub removed: u64,
    /// Removals of a block (or a medium's copy) the mirror did not hold.
    pub unknown_removed: u64,
    /// Runs refused because their parent was not held.
    pub orphans: u64,
    /// Runs refused because the mirror was full.
    pub full: u64,
    /// Runs refused for their shape.
    pub malformed: u64,
    /// AllBlocksCleared events.
    pub cleared: u64,
}

/// One replica's part of a shared [`Forest`]: its engine's block ids, their copies, and its
/// holder bit there.
#[derive(Debug)]
pub struct Member {
    bit: u32,
    engine: HashMap<u64, EngineEntry, FoldBuildHasher>,
    /// Slots this member holds under more than one engine id, per medium: how many ids beyond
    /// the first (rare: an engine naming equal content twice).
    aliases: HashMap<u32, [u16; 3], FoldBuildHasher>,
    capacity: usize,
    counters: MirrorCounters,
}

impl Member {
    /// Joins `forest` (None when its 64 member bits are taken), holding at most `capacity`
    /// engine blocks.
    pub fn join(forest: &mut Forest, capacity: usize) -> Option<Member> {
        let bit = forest.join()?;
        forest.add_capacity(capacity, 0);
        Some(Member {
            bit,
            engine: HashMap::default(),
            aliases: HashMap::default(),
            capacity,
            counters: MirrorCounters::default(),
        })
    }

    /// Leaves `forest`: every block this member held is released there.
    pub fn leave(self, forest: &mut Forest) {
        forest.clear(self.bit);
        forest.leave(self.bit);
        forest.add_capacity(0, self.capacity);
    }

    /// The member's bit in its forest.
    pub fn bit(&self) -> u32 {
        self.bit
    }

    /// Engine blocks held (each counted once, whatever its copies).
    pub fn len(&self) -> usize {
        self.engine.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.engine.is_empty()
    }

    /// The most engine blocks held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets the bound (e.g. once the engine's block count is known). Blocks already held stay
    /// even past a lower bound; new stores are refused until the member is below it.
    pub fn set_capacity(&mut self, forest: &mut Forest, capacity: usize) {
        forest.add_capacity(capacity, self.capacity);
        self.capacity = capacity;
    }

    /// What has been applied and refused.
    pub fn counters(&self) -> MirrorCounters {
        self.counters
    }

    /// Heap bytes of this member's own tables (its blocks are counted by the forest).
    pub fn bytes(&self) -> usize {
        table_bytes(
            self.engine.capacity(),
            std::mem::size_of::<(u64, EngineEntry)>(),
        ) + table_bytes(
            self.aliases.capacity(),
            std::mem::size_of::<(u32, [u16; 3])>(),
        )
    }
}

/// A member and its forest, borrowed together: what KV events are applied to.
#[derive(Debug)]
pub struct MemberMirror<'a> {
    /// The shared blocks.
    pub forest: &'a mut Forest,
    /// The replica's part.
    pub member: &'a mut Member,
}

/// What applies an engine's KV events ([`super::apply_batch`] feeds either kind).
pub trait KvEventTarget {
    /// Applies a BlockStored; returns the router's names of the stored blocks.
    fn stored(&mut self, s: StoredBlocks<'_>) -> Result<Vec<BlockHash>, StoreRefused>;
    /// Applies a BlockRemoved of one copy of each block in `medium`; returns how many of them
    /// were not held there.
    fn removed(&mut self, ids: &[EngineBlockId], medium: Medium) -> usize;
    /// Applies AllBlocksCleared: nothing is held any more.
    fn cleared(&mut self);
}

impl KvEventTarget for MemberMirror<'_> {
    fn stored(&mut self, s: StoredBlocks<'_>) -> Result<Vec<BlockHash>, StoreRefused> {
        let (forest, m) = (&mut *self.forest, &mut *self.member);
        let n = s.engine_ids.len();
        if s.block_size == 0
            || s.token_ids.len() != n.saturating_mul(s.block_size)
            || !(s.extra.is_empty() || s.extra.len() == n)
        {
            m.counters.malformed += 1;
            return Err(StoreRefused::Shape);
        }
        let (parent_slot, seed) = match s.parent {
            None => (None, s.salt.seed()),
            Some(p) => match m.engine.get(&p.key()) {
                Some(e) => (Some(e.slot), forest.hash(e.slot)),
                None => {
                    m.counters.orphans += 1;
                    return Err(StoreRefused::Orphan);
                }
            },
        };
        let mi = s.medium.index();
        let mut new = 0;
        for id in s.engine_ids {
            match m.engine.get(&id.key()) {
                None => new += 1,
                Some(e) if e.copies[mi] == u8::MAX => {
                    m.counters.full += 1;
                    return Err(StoreRefused::Full);
                }
                Some(_) => {}
            }
        }
        if m.engine.len() + new > m.capacity || !forest.has_room(n) {
            m.counters.full += 1;
            return Err(StoreRefused::Full);
        }
        let names = chain(seed, &s);
        let slots = forest.slots_of(parent_slot, &names);
        // Blocks this member starts holding in the medium, grouped into chain runs (indices
        // into `slots` one after the other).
        let mut run: Vec<u32> = Vec::with_capacity(n);
        let mut last_index = usize::MAX;
        for (i, (id, &slot)) in s.engine_ids.iter().zip(&slots).enumerate() {
            let e = m.engine.entry(id.key()).or_insert(EngineEntry {
                slot,
                copies: [0; 3],
            });
            // An engine id keeps the name it was first stored under: its hash names its
            // content, and the content does not change while any copy is held.
            e.copies[mi] += 1;
            if e.copies[mi] > 1 {
                continue;
            }
            let slot = e.slot;
            if forest.holds(slot, m.bit, s.medium) {
                m.aliases.entry(slot).or_insert([0; 3])[mi] += 1;
                continue;
            }
            if slot != slots[i] {
                forest.hold(&[slot], m.bit, s.medium);
                continue;
            }
            if last_index.wrapping_add(1) != i {
                forest.hold(&run, m.bit, s.medium);
                run.clear();
            }
            run.push(slot);
            last_index = i;
        }
        forest.hold(&run, m.bit, s.medium);
        if let Some(&last) = slots.last() {
            // A new node nobody came to hold (ids already named elsewhere) must not stay.
            forest.tidy(last);
        }
        m.counters.stored += n as u64;
        Ok(names)
    }

    fn removed(&mut self, ids: &[EngineBlockId], medium: Medium) -> usize {
        let (forest, m) = (&mut *self.forest, &mut *self.member);
        let mi = medium.index();
        let mut unknown = 0;
        let mut released = Vec::new();
        for id in ids {
            let key = id.key();
            let Some(e) = m.engine.get_mut(&key) else {
                unknown += 1;
                continue;
            };
            if e.copies[mi] == 0 {
                unknown += 1;
                continue;
            }
            e.copies[mi] -= 1;
            m.counters.removed += 1;
            let (slot, left) = (e.slot, e.copies[mi]);
            if e.copies == [0; 3] {
                m.engine.remove(&key);
            }
            if left > 0 {
                continue;
            }
            match m.aliases.get_mut(&slot) {
                Some(a) if a[mi] > 0 => {
                    a[mi] -= 1;
                    if *a == [0; 3] {
                        m.aliases.remove(&slot);
                    }
                }
                _ => released.push(slot),
            }
        }
        forest.release(&released, m.bit, medium);
        m.counters.unknown_removed += unknown as u64;
        unknown
    }

    fn cleared(&mut self) {
        self.forest.clear(self.member.bit);
        self.member.engine = HashMap::default();
        self.member.aliases = HashMap::default();
        self.member.counters.cleared += 1;
    }
}

impl MemberMirror<'_> {
    /// The router's name for an engine block, if held.
    pub fn ours(&self, id: EngineBlockId) -> Option<BlockHash> {
        self.member
            .engine
            .get(&id.key())
            .map(|e| self.forest.hash(e.slot))
    }
}

/// The router's chain over a run's blocks from `parent`, extra keys mixed in per block.
fn chain(parent: BlockHash, s: &StoredBlocks<'_>) -> Vec<BlockHash> {
    let mut names = Vec::with_capacity(s.engine_ids.len());
    if s.extra.iter().all(Option::is_none) {
        extend_block_hashes(parent, s.token_ids, s.block_size, &mut names);
        return names;
    }
    let mut prev = parent;
    for (i, block) in s.token_ids.chunks_exact(s.block_size).enumerate() {
        // One block's link of the chain, then the extra keys mixed in.
        extend_block_hashes(prev, block, s.block_size, &mut names);
        let mut h = names[i];
        if let Some(Some(d)) = s.extra.get(i) {
            let mut buf = [0u8; 40];
            buf[..8].copy_from_slice(b"extra\0v1");
            buf[8..24].copy_from_slice(&h.0.to_le_bytes());
            buf[24..].copy_from_slice(&d.to_le_bytes());
            h = BlockHash(xxh3_128(&buf));
            names[i] = h;
        }
        prev = h;
    }
    names
}

/// The heap bytes of a hashbrown table of `cap` entries of `entry` bytes, sized the way it sizes
/// itself.
pub(crate) fn table_bytes(cap: usize, entry: usize) -> usize {
    let buckets = if cap == 0 {
        0
    } else if cap < 8 {
        (cap + 1).next_power_of_two()
    } else {
        (cap * 8 / 7).next_power_of_two()
    };
    buckets * (entry + 1)
}

/// One replica's exact prefix cache, from its events: a [`Member`] with a forest of its own.
#[derive(Debug)]
pub struct EngineMirror {
    forest: Forest,
    member: Member,
}

impl EngineMirror {
    /// An empty mirror holding at most `capacity` engine blocks.
    pub fn new(capacity: usize) -> Self {
        let mut forest = Forest::new();
        let member = match Member::join(&mut forest, capacity) {
            Some(m) => m,
            // A new forest has all 64 bits free.
            None => unreachable!("a new forest has a free member bit"),
        };
        EngineMirror { forest, member }
    }

    fn parts(&mut self) -> MemberMirror<'_> {
        MemberMirror {
            forest: &mut self.forest,
            member: &mut self.member,
        }
    }

    /// Engine blocks held (each counted once, whatever its copies).
    pub fn len(&self) -> usize {
        self.member.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.member.is_empty()
    }

    /// The most engine blocks held.
    pub fn capacity(&self) -> usize {
        self.member.capacity()
    }

    /// Sets the bound; see [`Member::set_capacity`].
    pub fn set_capacity(&mut self, capacity: usize) {
        self.member.set_capacity(&mut self.forest, capacity);
    }

    /// What has been applied and refused.
    pub fn counters(&self) -> MirrorCounters {
        self.member.counters()
    }

    /// The router's name for an engine block, if held.
    pub fn ours(&self, id: EngineBlockId) -> Option<BlockHash> {
        self.member
            .engine
            .get(&id.key())
            .map(|e| self.forest.hash(e.slot))
    }

    /// How many leading blocks of `prompt` (router names, as [`crate::prefix_hash`] computes
    /// them for a request) the engine holds, by the fastest medium of each. Exact: one map probe
    /// per forest node on the prompt's path.
    pub fn matched(&self, prompt: &[BlockHash]) -> MirrorMatch {
        let mut walk = Walk::default();
        let bit = self.member.bit;
        self.forest.walk(prompt, 1u64 << bit, 0, &mut walk);
        walk.result(bit)
    }

    /// The forest's shape (tests).
    #[cfg(test)]
    pub(crate) fn forest(&self) -> &Forest {
        &self.forest
    }

    /// An estimate of the heap bytes held: the forest and the member's tables, sized the way
    /// they size themselves.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.forest.bytes() + self.member.bytes()
    }
}

impl KvEventTarget for EngineMirror {
    fn stored(&mut self, s: StoredBlocks<'_>) -> Result<Vec<BlockHash>, StoreRefused> {
        self.parts().stored(s)
    }

    fn removed(&mut self, ids: &[EngineBlockId], medium: Medium) -> usize {
        self.parts().removed(ids, medium)
    }

    fn cleared(&mut self) {
        self.parts().cleared()
    }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
