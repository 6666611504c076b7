//! [`IndexShards`]: the approximate KV index on threads of its own.
//!
//! Each replica belongs to one shard (a fixed mix of its key, modulo the shard count); the shard's
//! thread owns that replica's [`ReplicaBlocks`] outright, so no lock guards the index. Callers
//! talk to the shards through bounded queues:
//!
//! - the data path ([`lookup`](IndexShards::lookup), [`record`](IndexShards::record),
//!   [`take_back`](IndexShards::take_back)) never waits: a full queue is an
//!   [`IndexError::Full`] at once, and a lookup's answer is a one-shot [`LookupReply`] to await;
//! - the control path ([`forget`](IndexShards::forget), [`clear`](IndexShards::clear),
//!   [`set_capacity`](IndexShards::set_capacity), [`request_stats`](IndexShards::request_stats))
//!   waits for room in the queue, because losing one of them would leave the index wrong for
//!   good; those calls are rare and a shard drains its queue in microseconds.
//!
//! Commands for one replica are applied in the order they were queued (one shard, one FIFO), so
//! a take-back always finds the undo token its record left.

use super::error::IndexError;
use super::feed::{apply_batch, BatchApplied};
use super::forest::{Forest, Walk};
use super::held::{HeldBlocks, PoolRoom};
use super::mirror::{KvEventTarget, Member, MemberMirror};
use super::replica_blocks::{RecordUndo, ReplicaBlocks};
use super::reply::{Gather, LookupPart, LookupReply, PartSender, StatsReply};
use super::speculative::{Speculative, SpeculativeCounters, SPECULATIVE_TTL};
use crate::prefix_hash::BlockHash;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use inferrail_events::KvEventBatch;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// How the index shards are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexConfig {
    /// Shard threads; 0 is taken as 1.
    pub shards: usize,
    /// Commands each shard's queue holds; 0 is taken as 1. Data-path calls fail with
    /// [`IndexError::Full`] when it is full.
    pub queue_capacity: usize,
    /// The capacity in blocks of a replica first seen by a record, until
    /// [`IndexShards::set_capacity`] names its own.
    pub default_capacity_blocks: usize,
}

impl Default for IndexConfig {
    /// One shard, 4096 queued commands, 16384 blocks per replica (the config's defaults).
    fn default() -> Self {
        IndexConfig {
            shards: 1,
            queue_capacity: 4096,
            default_capacity_blocks: 16384,
        }
    }
}

/// One replica's figures, as [`IndexShards::stats`] reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaIndexStats {
    /// The replica's key.
    pub key: u64,
    /// Blocks held in its shadow; never more than `capacity`.
    pub entries: usize,
    /// Estimated heap bytes of its shadow ([`ReplicaBlocks::bytes`]).
    pub bytes: usize,
    /// Its capacity in blocks.
    pub capacity: usize,
    /// How many times it was cleared ([`IndexShards::clear`]: engine restarts).
    pub resets: u64,
    /// Which view answers its lookups.
    pub mode: IndexMode,
    /// Engine blocks held in its mirror (0 without KV events).
    pub mirror_blocks: usize,
    /// Everything its KV events did to the mirror since it was made.
    pub events: BatchApplied,
    /// What its speculative entries (routed, not yet confirmed by events) came to.
    pub speculative: SpeculativeCounters,
    /// Distinct blocks held speculatively now.
    pub speculative_blocks: usize,
}

/// Which view of a replica's cache answers lookups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexMode {
    /// Predicted from routing records (no KV events for this replica).
    #[default]
    Approximate,
    /// The mirror of the engine's own KV events, complete since the cache was last known empty.
    Exact,
    /// KV events are followed, but some may be missing: lookups use the routing records until
    /// the stream is synced again.
    Unsynced,
}

impl IndexMode {
    /// The mode's name in admin answers and metrics (`approximate`, `exact`, `unsynced`).
    pub fn as_str(self) -> &'static str {
        match self {
            IndexMode::Approximate => "approximate",
            IndexMode::Exact => "exact",
            IndexMode::Unsynced => "unsynced",
        }
    }
}

/// Where a record's undo token waits for a possible take-back. The shard thread is the only one
/// that locks it (once to fill, once to take), so the lock is never contended.
type UndoSlot = Mutex<Option<RecordUndo>>;

/// Proof that one [`IndexShards::record`] was queued, to hand to [`IndexShards::take_back`] if
/// the engine refuses the request or fails before answering. Dropping it keeps the record; it is
/// not `Clone`, so a record is taken back at most once.
#[derive(Debug)]
pub struct RecordTicket {
    replica: u64,
    blocks: Arc<[BlockHash]>,
    undo: Arc<UndoSlot>,
}

impl RecordTicket {
    /// The replica the blocks were recorded on.
    pub fn replica(&self) -> u64 {
        self.replica
    }
}

/// What a shard thread is asked to do.
enum Command {
    Lookup {
        prompt: Arc<[BlockHash]>,
        /// (position in the caller's list, replica key).
        replicas: Vec<(u32, u64)>,
        reply: PartSender<LookupPart>,
    },
    Record {
        replica: u64,
        blocks: Arc<[BlockHash]>,
        partial: bool,
        undo: Arc<UndoSlot>,
    },
    TakeBack {
        replica: u64,
        blocks: Arc<[BlockHash]>,
        undo: Arc<UndoSlot>,
    },
    Forget {
        replica: u64,
    },
    Clear {
        replica: u64,
    },
    SetCapacity {
        replica: u64,
        blocks: usize,
    },
    Stats {
        reply: PartSender<Vec<ReplicaIndexStats>>,
    },
    Events {
        replica: u64,
        model: Arc<str>,
        batch: Arc<KvEventBatch>,
    },
    ClearMirror {
        replica: u64,
    },
    SetSynced {
        replica: u64,
        synced: bool,
    },
    StopEvents {
        replica: u64,
    },
}

/// The approximate KV index: `shards` threads, each owning the replicas hashed to it. Dropping
/// it stops the threads after they drained their queues.
#[derive(Debug)]
pub struct IndexShards {
    senders: Vec<Sender<Command>>,
    threads: Vec<JoinHandle<()>>,
}

/// The shard that owns `replica` among `shards` (splitmix64 finaliser, so nearby keys spread).
pub fn shard_of(replica: u64, shards: usize) -> usize {
    let mut z = replica.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % shards.max(1) as u64) as usize
}

impl IndexShards {
    /// Starts the shard threads (named `inferrail-index-N`).
    pub fn start(config: IndexConfig) -> Result<IndexShards, IndexError> {
        let shards = config.shards.max(1);
        let mut senders = Vec::with_capacity(shards);
        let mut threads = Vec::with_capacity(shards);
        for shard in 0..shards {
            let (tx, rx) = bounded(config.queue_capacity.max(1));
            let default_capacity = config.default_capacity_blocks;
            let thread = std::thread::Builder::new()
                .name(format!("inferrail-index-{shard}"))
                .spawn(move || run_shard(rx, default_capacity))
                .map_err(|source| IndexError::Spawn { shard, source })?;
            senders.push(tx);
            threads.push(thread);
        }
        Ok(IndexShards { senders, threads })
    }

    /// The number of shard threads.
    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    /// Asks, for each of `replicas`, how many leading blocks of `prompt` it holds, by tier
    /// ([`HeldBlocks`]: a replica answered by its event mirror splits GPU, CPU and storage
    /// blocks; one answered by its routing records holds everything on the GPU; unknown replicas
    /// hold none). Never waits: each involved shard gets one queued request, or the call fails
    /// with the first shard that was full or stopped. The reply lists the answers in the order
    /// of `replicas`.
    pub fn lookup(
        &self,
        prompt: Arc<[BlockHash]>,
        replicas: &[u64],
    ) -> Result<LookupReply, IndexError> {
        let shards = self.senders.len();
        let mut per_shard: Vec<Vec<(u32, u64)>> = vec![Vec::new(); shards];
        for (position, &replica) in replicas.iter().enumerate() {
            per_shard[shard_of(replica, shards)].push((position as u32, replica));
        }
        let involved: Vec<usize> = (0..shards).filter(|&s| !per_shard[s].is_empty()).collect();
        let (gather, parts) = Gather::new(involved.len());
        for (&shard, reply) in involved.iter().zip(parts) {
            let command = Command::Lookup {
                prompt: Arc::clone(&prompt),
                replicas: std::mem::take(&mut per_shard[shard]),
                reply,
            };
            self.try_send(shard, command)?;
        }
        Ok(LookupReply::new(gather, replicas.len()))
    }

    /// Records `blocks` (a prompt's chain from its first block) as most recently used on
    /// `replica`, creating its shadow with the default capacity if it is new. Never waits.
    pub fn record(
        &self,
        replica: u64,
        blocks: Arc<[BlockHash]>,
    ) -> Result<RecordTicket, IndexError> {
        self.record_prompt(replica, blocks, false)
    }

    /// [`record`](IndexShards::record) as [`ReplicaBlocks::record_prompt`]: `partial` when the
    /// prompt ends in a partial block (which spends engine capacity but is never cached).
    pub fn record_prompt(
        &self,
        replica: u64,
        blocks: Arc<[BlockHash]>,
        partial: bool,
    ) -> Result<RecordTicket, IndexError> {
        let undo = Arc::new(Mutex::new(None));
        self.try_send(
            self.shard_for(replica),
            Command::Record {
                replica,
                blocks: Arc::clone(&blocks),
                partial,
                undo: Arc::clone(&undo),
            },
        )?;
        Ok(RecordTicket {
            replica,
            blocks,
            undo,
        })
    }

    /// Undoes the record behind `ticket` as [`ReplicaBlocks::take_back`] describes (nothing if
    /// the replica was forgotten or cleared since). Never waits.
    pub fn take_back(&self, ticket: RecordTicket) -> Result<(), IndexError> {
        let RecordTicket {
            replica,
            blocks,
            undo,
        } = ticket;
        self.try_send(
            self.shard_for(replica),
            Command::TakeBack {
                replica,
                blocks,
                undo,
            },
        )
    }

    /// Drops everything known about `replica` (it left the fleet). Waits for queue room.
    pub fn forget(&self, replica: u64) -> Result<(), IndexError> {
        self.send(self.shard_for(replica), Command::Forget { replica })
    }

    /// Empties `replica`'s shadow and counts a reset (its engine restarted with an empty
    /// cache). Waits for queue room.
    pub fn clear(&self, replica: u64) -> Result<(), IndexError> {
        self.send(self.shard_for(replica), Command::Clear { replica })
    }

    /// Sets `replica`'s capacity in blocks (creating its shadow if new), evicting at once what
    /// no longer fits. Waits for queue room.
    pub fn set_capacity(&self, replica: u64, blocks: usize) -> Result<(), IndexError> {
        self.send(
            self.shard_for(replica),
            Command::SetCapacity { replica, blocks },
        )
    }

    /// Applies one KV event batch of `replica`'s engine (serving `model`) to its mirror,
    /// creating the mirror (unsynced, as large as the replica's capacity) on the first batch.
    /// Waits for queue room: a subscription thread calls it, never a data core, and a lost
    /// batch would leave the mirror wrong.
    pub fn apply_events(
        &self,
        replica: u64,
        model: Arc<str>,
        batch: Arc<KvEventBatch>,
    ) -> Result<(), IndexError> {
        self.send(
            self.shard_for(replica),
            Command::Events {
                replica,
                model,
                batch,
            },
        )
    }

    /// Empties `replica`'s mirror (its engine process restarted). Waits for queue room.
    pub fn clear_mirror(&self, replica: u64) -> Result<(), IndexError> {
        self.send(self.shard_for(replica), Command::ClearMirror { replica })
    }

    /// Says whether `replica`'s mirror is complete: while it is, lookups for the replica are
    /// answered by the mirror ([`IndexMode::Exact`]), otherwise by the routing records
    /// ([`IndexMode::Unsynced`]). Waits for queue room.
    pub fn set_synced(&self, replica: u64, synced: bool) -> Result<(), IndexError> {
        self.send(
            self.shard_for(replica),
            Command::SetSynced { replica, synced },
        )
    }

    /// Drops `replica`'s mirror (its events are no longer followed): lookups go back to the
    /// routing records. Waits for queue room.
    pub fn stop_events(&self, replica: u64) -> Result<(), IndexError> {
        self.send(self.shard_for(replica), Command::StopEvents { replica })
    }

    /// Asks every shard for its replicas' figures. Waits for queue room, not for the answer.
    pub fn request_stats(&self) -> Result<StatsReply, IndexError> {
        let (gather, parts) = Gather::new(self.senders.len());
        for (shard, reply) in parts.into_iter().enumerate() {
            self.send(shard, Command::Stats { reply })?;
        }
        Ok(StatsReply::new(gather))
    }

    /// Every known replica's figures, sorted by key, once all shards answered (blocks this
    /// thread: tests and non-core threads only).
    pub fn stats(&self) -> Result<Vec<ReplicaIndexStats>, IndexError> {
        self.request_stats()?.wait()
    }

    fn shard_for(&self, replica: u64) -> usize {
        shard_of(replica, self.senders.len())
    }

    fn try_send(&self, shard: usize, command: Command) -> Result<(), IndexError> {
        match self.senders[shard].try_send(command) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(IndexError::Full { shard }),
            Err(TrySendError::Disconnected(_)) => Err(IndexError::Stopped { shard }),
        }
    }

    fn send(&self, shard: usize, command: Command) -> Result<(), IndexError> {
        self.senders[shard]
            .send(command)
            .map_err(|_| IndexError::Stopped { shard })
    }
}

impl Drop for IndexShards {
    fn drop(&mut self) {
        self.senders.clear();
        for thread in self.threads.drain(..) {
            // A shard that panicked has already dropped its queue; nothing more to do.
            let _ = thread.join();
        }
    }
}

/// One replica as its shard keeps it.
struct Replica {
    blocks: ReplicaBlocks,
    resets: u64,
    exact: Option<Exact>,
}

/// A replica's mirror of its engine's KV events: its part of one of the shard's forests.
struct Exact {
    member: Member,
    /// Which of the shard's forests.
    forest: usize,
    synced: bool,
    events: BatchApplied,
    /// What was routed here and the events have not confirmed yet.
    speculative: Speculative,
}

impl Exact {
    /// The member and its forest, to apply events to.
    fn mirror<'a>(&'a mut self, forests: &'a mut [Forest]) -> MemberMirror<'a> {
        MemberMirror {
            forest: &mut forests[self.forest],
            member: &mut self.member,
        }
    }

    /// Drops the speculative entries due by `now`, confirmed when the mirror holds the whole
    /// entry on its GPU.
    fn expire(&mut self, forests: &[Forest], now: Instant) {
        let (forest, bit) = (&forests[self.forest], self.member.bit());
        self.speculative
            .expire(now, |entry| holds_all(forest, bit, entry));
    }

    /// Drops the entries the mirror now holds whole on its GPU.
    fn confirm(&mut self, forests: &[Forest]) {
        let (forest, bit) = (&forests[self.forest], self.member.bit());
        self.speculative
            .confirm(|entry| holds_all(forest, bit, entry));
    }
}

/// Whether member `bit` of `forest` holds every block of `entry` on its GPU.
fn holds_all(forest: &Forest, bit: u32, entry: &[BlockHash]) -> bool {
    let mut walk = Walk::default();
    forest.walk(entry, 1u64 << bit, 0, &mut walk);
    walk.result(bit).gpu == entry.len()
}

impl Replica {
    fn mode(&self) -> IndexMode {
        match &self.exact {
            None => IndexMode::Approximate,
            Some(e) if e.synced => IndexMode::Exact,
            Some(_) => IndexMode::Unsynced,
        }
    }

    /// The forest and member bit answering for the replica, when it is exact.
    fn exact_member(&self) -> Option<(usize, u32)> {
        match &self.exact {
            Some(e) if e.synced => Some((e.forest, e.member.bit())),
            _ => None,
        }
    }
}

/// A replica's pool room from its free blocks and its reuse share (0..=1).
fn room(free_blocks: usize, reuse: f64) -> PoolRoom {
    PoolRoom {
        free_blocks: u32::try_from(free_blocks).unwrap_or(u32::MAX),
        reuse_permille: (reuse.clamp(0.0, 1.0) * 1000.0).round() as u16,
    }
}

/// How many leading blocks of `prompt` an exact replica holds, by tier: what the forest walk
/// found, or with speculative blocks, the GPU run extended by them (and by the GPU blocks they
/// bridge to on the walked path), then the blocks past it the engine holds, each by its fastest
/// copy, up to the first it holds nowhere.
fn exact_held(
    walk: &Walk,
    bit: u32,
    speculative: &Speculative,
    prompt: &[BlockHash],
) -> HeldBlocks {
    let found = walk.result(bit);
    if speculative.is_empty() {
        return found.into();
    }
    let mut gpu = found.gpu;
    loop {
        let from = gpu;
        while gpu < prompt.len() && speculative.contains(&prompt[gpu]) {
            gpu += 1;
        }
        while let Some(end) = walk.gpu_at(bit, gpu) {
            gpu = end;
        }
        if gpu == from {
            break;
        }
    }
    if gpu == found.gpu {
        return found.into();
    }
    let mut held = HeldBlocks::on_gpu(gpu);
    let mut at = gpu;
    while let Some((end, fast)) = walk.held_at(bit, at) {
        let n = u32::try_from(end - at).unwrap_or(u32::MAX);
        if fast {
            held.cpu = held.cpu.saturating_add(n);
        } else {
            held.storage = held.storage.saturating_add(n);
        }
        at = end;
    }
    held
}

/// A shard thread: applies commands in queue order until every sender is gone.
fn run_shard(commands: Receiver<Command>, default_capacity: usize) {
    let mut shard = Shard::new(default_capacity);
    for command in commands.iter() {
        shard.apply(command, Instant::now());
    }
}

/// The replicas of one shard: pure state, fed one command at a time.
struct Shard {
    replicas: HashMap<u64, Replica>,
    /// The exact replicas' blocks, up to 64 replicas per forest.
    forests: Vec<Forest>,
    /// A lookup's walk, kept so its path buffer is reused.
    walk: Walk,
    /// A lookup's members asked per forest, kept so it is not allocated per lookup.
    asked: Vec<(u64, u64)>,
    default_capacity: usize,
}

impl Shard {
    fn new(default_capacity: usize) -> Shard {
        Shard {
            replicas: HashMap::new(),
            forests: Vec::new(),
            walk: Walk::default(),
            asked: Vec::new(),
            default_capacity,
        }
    }

    fn entry(&mut self, replica: u64) -> &mut Replica {
        let capacity = self.default_capacity;
        self.replicas.entry(replica).or_insert_with(|| Replica {
            blocks: ReplicaBlocks::new(capacity),
            resets: 0,
            exact: None,
        })
    }

    fn exact(&mut self, replica: u64) -> &mut Exact {
        let capacity = self.entry(replica).blocks.capacity();
        let has = self
            .replicas
            .get(&replica)
            .is_some_and(|r| r.exact.is_some());
        if !has {
            let joined = self
                .forests
                .iter_mut()
                .enumerate()
                .find_map(|(i, f)| Member::join(f, capacity).map(|m| (i, m)));
            let (forest, member) = match joined {
                Some(j) => j,
                None => {
                    let mut f = Forest::new();
                    let joined = Member::join(&mut f, capacity);
                    self.forests.push(f);
                    match joined {
                        Some(m) => (self.forests.len() - 1, m),
                        None => unreachable!("a new forest has a free member bit"),
                    }
                }
            };
            let r = self.entry(replica);
            r.exact = Some(Exact {
                member,
                forest,
                synced: false,
                events: BatchApplied::default(),
                speculative: Speculative::new(SPECULATIVE_TTL, capacity),
            });
        }
        match self.entry(replica).exact.as_mut() {
            Some(e) => e,
            None => unreachable!("the mirror was made above"),
        }
    }

    /// `replica`'s mirror (made when missing) and the shard's forests, borrowed together.
    fn exact_with_forests(&mut self, replica: u64) -> Option<(&mut Exact, &mut Vec<Forest>)> {
        self.exact(replica);
        let e = self.replicas.get_mut(&replica)?.exact.as_mut()?;
        Some((e, &mut self.forests))
    }

    /// Ends `replica`'s mirror, releasing its blocks in its forest.
    fn drop_exact(&mut self, exact: Option<Exact>) {
        if let Some(e) = exact {
            if let Some(f) = self.forests.get_mut(e.forest) {
                e.member.leave(f);
            }
        }
    }

    /// Answers a lookup: one forest walk for all the exact replicas asked that share a forest,
    /// the routing records for the rest.
    fn lookup(
        &mut self,
        prompt: &[BlockHash],
        replicas: &[(u32, u64)],
        now: Instant,
    ) -> LookupPart {
        let mut answers = Vec::with_capacity(replicas.len());
        // Members asked per forest, and those with speculative blocks (they need the path).
        let mut asked = std::mem::take(&mut self.asked);
        asked.clear();
        asked.resize(self.forests.len(), (0, 0));
        for &(position, key) in replicas {
            let Some(r) = self.replicas.get_mut(&key) else {
                answers.push((position, HeldBlocks::default()));
                continue;
            };
            match r.exact_member() {
                Some((f, bit)) => {
                    if let Some(e) = &mut r.exact {
                        e.expire(&self.forests, now);
                        if !e.speculative.is_empty() {
                            asked[f].1 |= 1u64 << bit;
                        }
                    }
                    asked[f].0 |= 1u64 << bit;
                }
                None => {
                    let room = room(r.blocks.free_blocks(), r.blocks.reuse());
                    answers.push((
                        position,
                        HeldBlocks {
                            room: Some(room),
                            ..HeldBlocks::on_gpu(r.blocks.matched_prefix(prompt))
                        },
                    ));
                }
            }
        }
        for (f, &(mask, keep_path)) in asked.iter().enumerate() {
            if mask == 0 {
                continue;
            }
            self.forests[f].walk(prompt, mask, keep_path, &mut self.walk);
            for &(position, key) in replicas {
                let Some(r) = self.replicas.get(&key) else {
                    continue;
                };
                let (Some((rf, bit)), Some(e)) = (r.exact_member(), &r.exact) else {
                    continue;
                };
                if rf == f {
                    let free = e.member.capacity().saturating_sub(e.member.len());
                    let held = HeldBlocks {
                        room: Some(room(free, r.blocks.reuse())),
                        ..exact_held(&self.walk, bit, &e.speculative, prompt)
                    };
                    answers.push((position, held));
                }
            }
        }
        self.asked = asked;
        answers
    }

    /// Applies one command at time `now` (speculative entries expire by it).
    fn apply(&mut self, command: Command, now: Instant) {
        match command {
            Command::Lookup {
                prompt,
                replicas,
                reply,
            } => {
                let answers = self.lookup(&prompt, &replicas, now);
                reply.send(answers);
            }
            Command::Record {
                replica,
                blocks,
                partial,
                undo,
            } => {
                self.entry(replica);
                let Some(r) = self.replicas.get_mut(&replica) else {
                    return;
                };
                let token = r.blocks.record_prompt(&blocks, partial);
                if let Some(e) = &mut r.exact {
                    e.expire(&self.forests, now);
                    e.speculative.insert(blocks, now);
                }
                *lock(&undo) = Some(token);
            }
            Command::TakeBack {
                replica,
                blocks,
                undo,
            } => {
                let token = lock(&undo).take();
                if let (Some(token), Some(r)) = (token, self.replicas.get_mut(&replica)) {
                    r.blocks.take_back(&blocks, token);
                    if let Some(e) = &mut r.exact {
                        e.speculative.take_back(&blocks);
                    }
                }
            }
            Command::Forget { replica } => {
                let exact = self.replicas.remove(&replica).and_then(|r| r.exact);
                self.drop_exact(exact);
            }
            Command::Clear { replica } => {
                let r = self.entry(replica);
                r.blocks.clear();
                r.resets += 1;
            }
            Command::SetCapacity { replica, blocks } => {
                self.entry(replica);
                let Some(r) = self.replicas.get_mut(&replica) else {
                    return;
                };
                r.blocks.set_capacity(blocks);
                if let Some(e) = &mut r.exact {
                    if let Some(f) = self.forests.get_mut(e.forest) {
                        e.member.set_capacity(f, blocks);
                    }
                    e.speculative.set_capacity(blocks);
                }
            }
            Command::Events {
                replica,
                model,
                batch,
            } => {
                let Some((e, forests)) = self.exact_with_forests(replica) else {
                    return;
                };
                let applied = apply_batch(&mut e.mirror(forests), &model, &batch);
                e.events.add(applied);
                if applied.cleared > 0 {
                    e.speculative.clear();
                }
                e.confirm(forests);
                e.expire(forests, now);
            }
            Command::ClearMirror { replica } => {
                let Some((e, forests)) = self.exact_with_forests(replica) else {
                    return;
                };
                e.mirror(forests).cleared();
                e.speculative.clear();
            }
            Command::SetSynced { replica, synced } => {
                self.exact(replica).synced = synced;
            }
            Command::StopEvents { replica } => {
                let exact = self.replicas.get_mut(&replica).and_then(|r| r.exact.take());
                self.drop_exact(exact);
            }
            Command::Stats { reply } => {
                // Entries due by now are classified before they are counted.
                for r in self.replicas.values_mut() {
                    if let Some(e) = &mut r.exact {
                        e.expire(&self.forests, now);
                    }
                }
                let stats = self
                    .replicas
                    .iter()
                    .map(|(&key, r)| ReplicaIndexStats {
                        key,
                        entries: r.blocks.len(),
                        bytes: r.blocks.bytes(),
                        capacity: r.blocks.capacity(),
                        resets: r.resets,
                        mode: r.mode(),
                        mirror_blocks: r.exact.as_ref().map_or(0, |e| e.member.len()),
                        events: r
                            .exact
                            .as_ref()
                            .map_or_else(BatchApplied::default, |e| e.events),
                        speculative: r
                            .exact
                            .as_ref()
                            .map_or_else(SpeculativeCounters::default, |e| {
                                e.speculative.counters()
                            }),
                        speculative_blocks: r.exact.as_ref().map_or(0, |e| e.speculative.len()),
                    })
                    .collect();
                reply.send(stats);
            }
        }
    }
}

/// Locks an undo slot; a poisoned lock (a panic elsewhere while holding it) still holds a
/// consistent `Option`, so it is used as is.
fn lock(slot: &UndoSlot) -> std::sync::MutexGuard<'_, Option<RecordUndo>> {
    match slot.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
#[path = "shards_tests.rs"]
mod tests;
