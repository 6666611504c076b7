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

use super::hasher::FoldBuildHasher;
use crate::prefix_hash::{extend_block_hashes, BlockHash, HashSalt};
use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_128;

/// An engine's own name for a block, as its events carry it: the 64-bit int widened, or for
/// the bytes form (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`) the XXH3-128 of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineBlockId(pub u128);

impl EngineBlockId {
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
    /// Holding the new blocks would pass the mirror's capacity.
    #[error("the mirror is full")]
    Full,
}

/// One engine block: the router's name for it and its copies per medium.
#[derive(Debug, Clone, Copy)]
struct Entry {
    ours: BlockHash,
    copies: [u32; 3],
}

impl Entry {
    fn total(&self) -> u32 {
        self.copies.iter().sum()
    }
}

/// How many leading blocks of a prompt the engine holds, by where it would get each from.
/// `gpu + cpu + storage` is the leading run of blocks held in some medium.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MirrorMatch {
    /// Leading blocks held in the engine's own cache (a GPU copy each).
    pub gpu: usize,
    /// Past the `gpu` run, blocks whose fastest copy is on the CPU (or on the GPU: once the run
    /// is broken the engine loads what follows from its offload tier, so a GPU copy past it is
    /// priced as the CPU's).
    pub cpu: usize,
    /// Past the `gpu` run, blocks held only in a slower tier than the CPU.
    pub storage: usize,
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

/// One replica's exact prefix cache, from its events.
#[derive(Debug)]
pub struct EngineMirror {
    engine: HashMap<EngineBlockId, Entry, FoldBuildHasher>,
    /// Copies per medium of each router-named block (summed over engine blocks with that name).
    ours: HashMap<BlockHash, [u32; 3], FoldBuildHasher>,
    capacity: usize,
    counters: MirrorCounters,
}

impl EngineMirror {
    /// An empty mirror holding at most `capacity` engine blocks.
    pub fn new(capacity: usize) -> Self {
        EngineMirror {
            engine: HashMap::default(),
            ours: HashMap::default(),
            capacity,
            counters: MirrorCounters::default(),
        }
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
    /// even past a lower bound; new stores are refused until the mirror is below it.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
    }

    /// What has been applied and refused.
    pub fn counters(&self) -> MirrorCounters {
        self.counters
    }

    /// The router's name for an engine block, if held.
    pub fn ours(&self, id: EngineBlockId) -> Option<BlockHash> {
        self.engine.get(&id).map(|e| e.ours)
    }

    /// Applies a BlockStored; returns the router's names of the stored blocks.
    pub fn stored(&mut self, s: StoredBlocks<'_>) -> Result<Vec<BlockHash>, StoreRefused> {
        let n = s.engine_ids.len();
        if s.block_size == 0
            || s.token_ids.len() != n.saturating_mul(s.block_size)
            || !(s.extra.is_empty() || s.extra.len() == n)
        {
            self.counters.malformed += 1;
            return Err(StoreRefused::Shape);
        }
        let parent = match s.parent {
            None => s.salt.seed(),
            Some(p) => match self.engine.get(&p) {
                Some(e) => e.ours,
                None => {
                    self.counters.orphans += 1;
                    return Err(StoreRefused::Orphan);
                }
            },
        };
        let new = s
            .engine_ids
            .iter()
            .filter(|id| !self.engine.contains_key(id))
            .count();
        if self.engine.len() + new > self.capacity {
            self.counters.full += 1;
            return Err(StoreRefused::Full);
        }
        let names = self.chain(parent, &s);
        let m = s.medium.index();
        for (id, &ours) in s.engine_ids.iter().zip(&names) {
            let entry = self.engine.entry(*id).or_insert(Entry {
                ours,
                copies: [0; 3],
            });
            // An engine id keeps the name it was first stored under: its hash names its
            // content, and the content does not change while any copy is held.
            entry.copies[m] += 1;
            let ours = entry.ours;
            self.ours.entry(ours).or_insert([0; 3])[m] += 1;
        }
        self.counters.stored += n as u64;
        Ok(names)
    }

    /// The router's chain over a run's blocks from `parent`, extra keys mixed in per block.
    fn chain(&self, parent: BlockHash, s: &StoredBlocks<'_>) -> Vec<BlockHash> {
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

    /// Applies a BlockRemoved of one copy of each block in `medium`; returns how many of them
    /// the mirror did not hold there.
    pub fn removed(&mut self, ids: &[EngineBlockId], medium: Medium) -> usize {
        let m = medium.index();
        let mut unknown = 0;
        for id in ids {
            let Some(entry) = self.engine.get_mut(id) else {
                unknown += 1;
                continue;
            };
            if entry.copies[m] == 0 {
                unknown += 1;
                continue;
            }
            entry.copies[m] -= 1;
            self.counters.removed += 1;
            let ours = entry.ours;
            if entry.total() == 0 {
                self.engine.remove(id);
            }
            if let Some(c) = self.ours.get_mut(&ours) {
                c[m] -= 1;
                if c.iter().all(|&x| x == 0) {
                    self.ours.remove(&ours);
                }
            }
        }
        self.counters.unknown_removed += unknown as u64;
        unknown
    }

    /// Applies AllBlocksCleared: nothing is held any more.
    pub fn cleared(&mut self) {
        self.engine = HashMap::default();
        self.ours = HashMap::default();
        self.counters.cleared += 1;
    }

    /// Whether some copy of the block named `h` (the router's name) is on the GPU.
    pub fn holds_gpu(&self, h: &BlockHash) -> bool {
        self.ours.get(h).is_some_and(|c| c[0] > 0)
    }

    /// How many leading blocks of `prompt` (router names, as [`crate::prefix_hash`] computes
    /// them for a request) the engine holds: the run of blocks with a GPU copy, then up to the
    /// first block held nowhere, each counted by its fastest copy. Exact: one probe per block
    /// up to the first one not held anywhere.
    pub fn matched(&self, prompt: &[BlockHash]) -> MirrorMatch {
        let mut out = MirrorMatch::default();
        let mut gpu_run = true;
        for h in prompt {
            let Some(c) = self.ours.get(h) else {
                break;
            };
            if gpu_run && c[0] > 0 {
                out.gpu += 1;
                continue;
            }
            gpu_run = false;
            if c[0] > 0 || c[1] > 0 {
                out.cpu += 1;
            } else {
                out.storage += 1;
            }
        }
        out
    }

    /// An estimate of the heap bytes held: both tables, sized the way hashbrown sizes them.
    pub fn bytes(&self) -> usize {
        fn table(cap: usize, entry: usize) -> usize {
            let buckets = if cap == 0 {
                0
            } else if cap < 8 {
                (cap + 1).next_power_of_two()
            } else {
                (cap * 8 / 7).next_power_of_two()
            };
            buckets * (entry + 1)
        }
        std::mem::size_of::<Self>()
            + table(
                self.engine.capacity(),
                std::mem::size_of::<(EngineBlockId, Entry)>(),
            )
            + table(
                self.ours.capacity(),
                std::mem::size_of::<(BlockHash, [u32; 3])>(),
            )
    }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
