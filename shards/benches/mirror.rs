//! Benchmarks of the exact index, the [`EngineMirror`] built from an engine's KV events
//! (`cargo bench -p inferrail-shards --bench mirror`).
//!
//! Plain `std::time::Instant` timing; prints p50 and p99 (and throughputs). The machine is shared
//! and noisy: read the figures side by side within one run, not across runs.
//!
//! - events applied per second by one shard thread: an `IndexShards` of 1 shard, one synced
//!   replica of 16,384 blocks fed vLLM-like batches (one BlockStored run of 32 blocks of 16
//!   tokens each, half of them continuing the previous run, and once the mirror is full a
//!   BlockRemoved of the 32 oldest blocks, so it stays in its steady state); next to it the same
//!   batches applied directly with `apply_batch` (no thread, no queue);
//! - lookup of a 512-block prompt over 64 replicas in exact mode: one `Forest::walk` of a forest
//!   shared by 64 members (what a shard does for its exact replicas) of ~16,384 blocks each,
//!   every one holding some prefix of the asked prompt stored by BlockStored runs of that
//!   prompt's tokens (target: p99 1 us over the 64);
//! - bytes per block of an `EngineMirror` holding 100,000 blocks, counted by a counting
//!   allocator and compared with `EngineMirror::bytes` (target: 64 B/block).
#![allow(unsafe_code)] // the counting global allocator forwards to System

#[path = "support/counting.rs"]
mod counting;
#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/timing.rs"]
mod timing;

use counting::ALLOCATED;
use fleet::{held_prefixes, PROMPT_BLOCKS, REPLICAS};
use timing::{report, Rng};

use inferrail_events::{BlockRemoved, BlockStored, KvEventBatch, WireEvent};
use inferrail_shards::index::{
    apply_batch, EngineMirror, Forest, IndexConfig, IndexMode, IndexShards, KvEventTarget, Member,
    MemberMirror, Walk,
};
use inferrail_shards::prefix_hash::{block_hashes, BlockHash, HashSalt};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MODEL: &str = "bench-model";
const BLOCK_SIZE: usize = 16;
const CAPACITY: usize = 16_384;
/// Blocks per BlockStored run (and per BlockRemoved) in the throughput figure.
const RUN_BLOCKS: usize = 32;

/// Unique engine block hashes that look like real ones (splitmix64 of a counter: a bijection,
/// so no two blocks ever share a hash).
struct EngineHashes(u64);

impl EngineHashes {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn stored(hashes: &[u64], parent: Option<u64>, token_ids: Vec<u32>) -> WireEvent {
    WireEvent::BlockStored(BlockStored::gpu(
        hashes.iter().copied(),
        parent,
        token_ids,
        BLOCK_SIZE as u64,
    ))
}

fn removed(hashes: impl Iterator<Item = u64>) -> WireEvent {
    WireEvent::BlockRemoved(BlockRemoved::gpu(hashes))
}

fn batch(events: Vec<WireEvent>) -> KvEventBatch {
    KvEventBatch {
        ts: 0.0,
        events,
        data_parallel_rank: None,
    }
}

/// An engine's event stream in its steady state: each batch stores one run of
/// [`RUN_BLOCKS`] blocks (every other run continuing the previous one, as a conversation's next
/// turn does), and once the cache is full first removes its [`RUN_BLOCKS`] oldest blocks.
struct Engine {
    rng: Rng,
    ids: EngineHashes,
    /// Held blocks, oldest first.
    held: VecDeque<u64>,
    last: Option<u64>,
    capacity: usize,
    runs: u64,
}

impl Engine {
    fn new(capacity: usize, seed: u64) -> Engine {
        assert!(capacity >= 2 * RUN_BLOCKS);
        Engine {
            rng: Rng(seed),
            ids: EngineHashes(seed),
            held: VecDeque::with_capacity(capacity),
            last: None,
            capacity,
            runs: 0,
        }
    }

    fn step(&mut self) -> KvEventBatch {
        let mut events = Vec::with_capacity(2);
        if self.held.len() + RUN_BLOCKS > self.capacity {
            // Never the previous run's blocks: they are the newest.
            events.push(removed(self.held.drain(..RUN_BLOCKS)));
        }
        let parent = if self.runs % 2 == 1 { self.last } else { None };
        let hashes: Vec<u64> = (0..RUN_BLOCKS).map(|_| self.ids.next()).collect();
        events.push(stored(
            &hashes,
            parent,
            self.rng.tokens(RUN_BLOCKS * BLOCK_SIZE),
        ));
        self.held.extend(&hashes);
        self.last = hashes.last().copied();
        self.runs += 1;
        batch(events)
    }
}

/// `n` batches of a steady-state engine of `capacity` blocks.
fn engine_batches(n: usize, capacity: usize) -> Vec<Arc<KvEventBatch>> {
    let mut engine = Engine::new(capacity, 17);
    (0..n).map(|_| Arc::new(engine.step())).collect()
}

fn events_in(batches: &[Arc<KvEventBatch>]) -> usize {
    batches.iter().map(|b| b.events.len()).sum()
}

fn throughput(label: &str, batches: usize, events: usize, elapsed: Duration) {
    let s = elapsed.as_secs_f64();
    println!(
        "{label:<58} {:>9.0} batches/s   {:>9.0} events/s   {:>6.2} M blocks stored/s",
        batches as f64 / s,
        events as f64 / s,
        (batches * RUN_BLOCKS) as f64 / s / 1e6
    );
}

fn bench_apply(n: usize) {
    let batches = engine_batches(n, CAPACITY);
    let events = events_in(&batches);
    let model: Arc<str> = MODEL.into();

    // Directly, on this thread.
    let mut mirror = EngineMirror::new(CAPACITY);
    let mut samples = Vec::with_capacity(n);
    let start = Instant::now();
    for b in &batches {
        let t = Instant::now();
        let applied = apply_batch(&mut mirror, &model, b);
        samples.push(t.elapsed());
        std::hint::black_box(applied);
    }
    let direct = start.elapsed();
    let c = mirror.counters();
    assert_eq!(c.stored, (n * RUN_BLOCKS) as u64);
    assert_eq!(
        (c.orphans, c.full, c.malformed, c.unknown_removed),
        (0, 0, 0, 0)
    );
    assert_eq!(mirror.len(), CAPACITY.min(n * RUN_BLOCKS));
    throughput(
        "apply_batch directly (32-block runs, steady state)",
        n,
        events,
        direct,
    );
    report("  per batch", &mut samples);
    drop(mirror);

    // Through one shard thread.
    let index = match IndexShards::start(IndexConfig {
        shards: 1,
        queue_capacity: 4096,
        default_capacity_blocks: CAPACITY,
    }) {
        Ok(i) => i,
        Err(e) => {
            println!("IndexShards did not start: {e}");
            return;
        }
    };
    let replica = 1;
    let setup = index
        .set_capacity(replica, CAPACITY)
        .and_then(|()| index.set_synced(replica, true))
        .and_then(|()| index.stats());
    assert!(setup.is_ok(), "the replica was set up");
    let start = Instant::now();
    for b in &batches {
        // Waits for queue room: the figure is the shard's rate, not the sender's.
        let sent = index.apply_events(replica, Arc::clone(&model), Arc::clone(b));
        assert!(sent.is_ok());
    }
    // The shard's queue is FIFO: its stats answer comes after every batch was applied.
    let stats = index.stats();
    let threaded = start.elapsed();
    let stats = match stats {
        Ok(s) => s,
        Err(e) => panic!("stats: {e}"),
    };
    let s = &stats[0];
    assert_eq!(s.mode, IndexMode::Exact);
    assert_eq!(s.events.stored, (n * RUN_BLOCKS) as u64);
    assert_eq!(
        (s.events.orphans, s.events.refused, s.events.unknown_removed),
        (0, 0, 0)
    );
    assert_eq!(s.mirror_blocks, CAPACITY.min(n * RUN_BLOCKS));
    throughput(
        "IndexShards apply_events, 1 shard thread",
        n,
        events,
        threaded,
    );
}

/// Stores the first `blocks` blocks of `tokens` as the engine would: runs of at most 64 blocks,
/// the first without a parent, each next one continuing the one before.
fn store_prefix(
    mirror: &mut impl KvEventTarget,
    ids: &mut EngineHashes,
    tokens: &[u32],
    blocks: usize,
) {
    let mut parent = None;
    let mut at = 0;
    while at < blocks {
        let n = (blocks - at).min(64);
        let hashes: Vec<u64> = (0..n).map(|_| ids.next()).collect();
        let run = tokens[at * BLOCK_SIZE..(at + n) * BLOCK_SIZE].to_vec();
        let applied = apply_batch(mirror, MODEL, &batch(vec![stored(&hashes, parent, run)]));
        assert_eq!(applied.stored, n as u64, "the run was stored");
        parent = hashes.last().copied();
        at += n;
    }
}

/// One forest of 64 members (a shard's exact replicas), each filled with parentless background
/// runs of 64 blocks, then each asked prompt's held prefix (`held[p][r]`: blocks of prompt `p`
/// that replica `r` holds).
fn build_fleet(prompts: &[Vec<u32>], held: &[Vec<usize>]) -> (Forest, Vec<Member>) {
    let mut rng = Rng(7);
    let mut ids = EngineHashes(1);
    let mut forest = Forest::new();
    let mut members = Vec::with_capacity(REPLICAS);
    for r in 0..REPLICAS {
        let asked: usize = held.iter().map(|h| h[r]).sum();
        let mut member = match Member::join(&mut forest, CAPACITY) {
            Some(m) => m,
            None => panic!("a forest has 64 member bits"),
        };
        let mut mirror = MemberMirror {
            forest: &mut forest,
            member: &mut member,
        };
        while mirror.member.len() + 64 <= CAPACITY.saturating_sub(asked) {
            let bg = rng.tokens(64 * BLOCK_SIZE);
            store_prefix(&mut mirror, &mut ids, &bg, 64);
        }
        for (p, tokens) in prompts.iter().enumerate() {
            store_prefix(&mut mirror, &mut ids, tokens, held[p][r]);
        }
        members.push(member);
    }
    (forest, members)
}

fn bench_lookup() {
    let salt = HashSalt::new(MODEL, None, None);
    for (scenario, distinct) in [("mixed", 1usize), ("mixed", 24), ("cold", 1), ("all", 1)] {
        let mut rng = Rng(99);
        let prompts: Vec<Vec<u32>> = (0..distinct)
            .map(|_| rng.tokens(PROMPT_BLOCKS * BLOCK_SIZE))
            .collect();
        // The router's chain of each prompt, as a request's prediction computes it.
        let chains: Vec<Arc<[BlockHash]>> = prompts
            .iter()
            .map(|t| block_hashes(&salt, t, BLOCK_SIZE).into())
            .collect();
        let held: Vec<Vec<usize>> = (0..distinct)
            .map(|_| held_prefixes(scenario, &mut rng))
            .collect();
        let (forest, members) = build_fleet(&prompts, &held);
        let all = u64::MAX;
        let mut walk = Walk::default();
        for (p, chain) in chains.iter().enumerate() {
            assert_eq!(chain.len(), PROMPT_BLOCKS);
            forest.walk(chain, all, 0, &mut walk);
            for (r, member) in members.iter().enumerate() {
                let m = walk.result(member.bit());
                assert_eq!((m.gpu, m.any()), (held[p][r], held[p][r]), "replica {r}");
            }
        }
        let full = members.iter().all(|m| m.len() + 64 > CAPACITY);
        assert!(full, "every member holds ~{CAPACITY} blocks");
        let label = format!("{scenario}, {distinct} prompt(s) in turn");
        let reps = 20_000;
        let mut samples = Vec::with_capacity(reps);
        let mut sink = 0usize;
        for i in 0..reps {
            let chain = &chains[i % distinct];
            let t = Instant::now();
            forest.walk(chain, all, 0, &mut walk);
            samples.push(t.elapsed());
            sink = sink.wrapping_add(walk.gpu[i % REPLICAS] as usize);
        }
        report(
            &format!("Forest::walk, 64 members of one forest, {label}"),
            &mut samples,
        );
        println!(
            "  ({} nodes, {} distinct blocks, {:.1} B per member block)",
            forest.node_count(),
            forest.blocks(),
            (forest.bytes() + members.iter().map(Member::bytes).sum::<usize>()) as f64
                / members.iter().map(Member::len).sum::<usize>() as f64
        );
        std::hint::black_box(sink);
    }
}

fn bench_bytes_per_block() {
    let capacity = 100_000;
    // Every batch is made before counting starts, so only the mirror's heap is measured.
    let batches = engine_batches(capacity / RUN_BLOCKS + 200, capacity);
    let before = ALLOCATED.load(Ordering::Relaxed);
    let mut mirror = EngineMirror::new(capacity);
    for b in &batches {
        apply_batch(&mut mirror, MODEL, b);
    }
    let measured = ALLOCATED.load(Ordering::Relaxed) - before;
    assert_eq!(mirror.counters().full, 0);
    assert!(mirror.len() + RUN_BLOCKS > capacity, "the mirror is full");
    println!(
        "{:<58} measured {:>6.1} B/block   estimate {:>6.1} B/block   ({} blocks)",
        "EngineMirror bytes per block at capacity 100,000",
        measured as f64 / mirror.len() as f64,
        mirror.bytes() as f64 / mirror.len() as f64,
        mirror.len()
    );
    std::hint::black_box(&mirror);
}

/// The stream generator against a small mirror: no orphan, no refusal, no unknown removal.
fn smoke() {
    let batches = engine_batches(100, 256);
    let mut mirror = EngineMirror::new(256);
    for b in &batches {
        let applied = apply_batch(&mut mirror, MODEL, b);
        assert_eq!(
            (applied.orphans, applied.refused, applied.unknown_removed),
            (0, 0, 0)
        );
    }
    assert_eq!(mirror.len(), 256);
}

fn main() {
    // `cargo test --benches` runs this binary with `--bench` absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    smoke();
    if quick {
        println!("(not run with --bench: skipping the timed runs)");
        return;
    }
    bench_bytes_per_block();
    bench_apply(20_000);
    bench_lookup();
}
