//! Benchmarks of block hashing and the approximate KV index (`cargo bench -p inferrail-shards`).
//!
//! Plain `std::time::Instant` timing, one sample per operation over many repetitions; prints the
//! median (p50) and p99 of each. The machine is shared and noisy: read the figures side by side
//! within one run, not across runs.
//!
//! - lookup of a 512-block prompt over 64 replicas, each holding 16,384 blocks of background
//!   prompts plus some prefix of the asked prompt: directly on `ReplicaBlocks::matched_prefix`
//!   (and, for comparison, with one `holds` probe per block), and through `IndexShards`;
//! - bytes per block of a `ReplicaBlocks` full at 100,000 blocks, counted by a counting
//!   allocator and compared with `ReplicaBlocks::bytes`;
//! - `block_hashes` of an 8,000-token prompt in blocks of 16.
#![allow(unsafe_code)] // the counting global allocator forwards to System

#[path = "support/counting.rs"]
mod counting;
#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/timing.rs"]
mod timing;

use counting::ALLOCATED;
use fleet::{held_prefixes, PROMPT_BLOCKS, REPLICAS};
use timing::{percentiles, report, Rng};

use inferrail_shards::index::{HeldBlocks, IndexConfig, IndexShards, LookupReply, ReplicaBlocks};
use inferrail_shards::prefix_hash::{block_hashes, BlockHash, HashSalt};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

const BLOCK_SIZE: usize = 16;
const BACKGROUND_CAPACITY: usize = 16_384;

/// 64 shadows, each filled with background prompts, then each asked prompt's held prefix
/// (`held[p][r]`: blocks of prompt `p` that replica `r` holds).
fn build_replicas(
    salt: &HashSalt,
    prompts: &[Arc<[BlockHash]>],
    held: &[Vec<usize>],
) -> Vec<ReplicaBlocks> {
    let mut rng = Rng(7);
    (0..REPLICAS)
        .map(|r| {
            let asked: usize = held.iter().map(|h| h[r]).sum();
            let mut shadow = ReplicaBlocks::new(BACKGROUND_CAPACITY);
            while shadow.len() + 64 <= BACKGROUND_CAPACITY.saturating_sub(asked) {
                let bg = block_hashes(salt, &rng.tokens(64 * BLOCK_SIZE), BLOCK_SIZE);
                shadow.record(&bg);
            }
            for (p, prompt) in prompts.iter().enumerate() {
                shadow.record(&prompt[..held[p][r]]);
            }
            shadow
        })
        .collect()
}

fn bench_direct(salt: &HashSalt) {
    for (scenario, distinct) in [("mixed", 1usize), ("mixed", 24), ("cold", 1), ("all", 1)] {
        let mut rng = Rng(99);
        let prompts: Vec<Arc<[BlockHash]>> = (0..distinct)
            .map(|_| block_hashes(salt, &rng.tokens(PROMPT_BLOCKS * BLOCK_SIZE), BLOCK_SIZE).into())
            .collect();
        let held: Vec<Vec<usize>> = (0..distinct)
            .map(|_| held_prefixes(scenario, &mut rng))
            .collect();
        let replicas = build_replicas(salt, &prompts, &held);
        for (p, prompt) in prompts.iter().enumerate() {
            for (r, shadow) in replicas.iter().enumerate() {
                assert_eq!(shadow.matched_prefix(prompt), held[p][r]);
            }
        }
        let label = format!("{scenario}, {distinct} prompt(s) in turn");
        let reps = if scenario == "all" { 2_000 } else { 20_000 };
        let mut samples = Vec::with_capacity(reps);
        let mut sink = 0usize;
        for i in 0..reps {
            let prompt = &prompts[i % distinct];
            let t = Instant::now();
            for r in &replicas {
                sink = sink.wrapping_add(r.matched_prefix(prompt));
            }
            samples.push(t.elapsed());
        }
        report(&format!("direct matched_prefix x64, {label}"), &mut samples);
        let mut samples = Vec::with_capacity(reps / 10);
        for i in 0..reps / 10 {
            let prompt = &prompts[i % distinct];
            let t = Instant::now();
            for r in &replicas {
                sink = sink.wrapping_add(prompt.iter().take_while(|b| r.holds(b)).count());
            }
            samples.push(t.elapsed());
        }
        report(
            &format!("  (one probe per block instead, {label})"),
            &mut samples,
        );
        std::hint::black_box(sink);
    }
}

fn bench_shards(salt: &HashSalt, prompt: &Arc<[BlockHash]>) {
    for shards in [1usize, 2] {
        let index = match IndexShards::start(IndexConfig {
            shards,
            queue_capacity: 4096,
            default_capacity_blocks: BACKGROUND_CAPACITY,
        }) {
            Ok(i) => i,
            Err(e) => {
                println!("IndexShards did not start: {e}");
                return;
            }
        };
        let held = held_prefixes("mixed", &mut Rng(99));
        let mut rng = Rng(7);
        for (r, &n) in held.iter().enumerate() {
            let mut recorded = 0;
            while recorded + 64 <= BACKGROUND_CAPACITY - n {
                let bg: Arc<[BlockHash]> =
                    block_hashes(salt, &rng.tokens(64 * BLOCK_SIZE), BLOCK_SIZE).into();
                while index.record(r as u64, Arc::clone(&bg)).is_err() {
                    std::thread::yield_now();
                }
                recorded += 64;
            }
            while index.record(r as u64, prompt[..n].to_vec().into()).is_err() {
                std::thread::yield_now();
            }
        }
        let keys: Vec<u64> = (0..REPLICAS as u64).collect();
        let check = index
            .lookup(Arc::clone(prompt), &keys)
            .and_then(LookupReply::wait);
        let want: Vec<HeldBlocks> = held.iter().map(|&n| HeldBlocks::on_gpu(n)).collect();
        assert_eq!(check.ok(), Some(want));
        let reps = 20_000;
        let mut samples = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            let got = index
                .lookup(Arc::clone(prompt), &keys)
                .and_then(LookupReply::wait);
            samples.push(t.elapsed());
            std::hint::black_box(got.ok());
        }
        report(
            &format!("IndexShards lookup + blocking wait, {shards} shard(s), mixed"),
            &mut samples,
        );
    }
}

fn bench_bytes_per_block(salt: &HashSalt) {
    let capacity = 100_000;
    let mut rng = Rng(3);
    let before = ALLOCATED.load(Ordering::Relaxed);
    let mut r = ReplicaBlocks::new(capacity);
    // Fill past the capacity so the shadow is in its steady state (evicting).
    while r.len() < capacity {
        let p = block_hashes(salt, &rng.tokens(500 * BLOCK_SIZE), BLOCK_SIZE);
        r.record(&p);
    }
    for _ in 0..20 {
        let p = block_hashes(salt, &rng.tokens(500 * BLOCK_SIZE), BLOCK_SIZE);
        r.record(&p);
    }
    let measured = ALLOCATED.load(Ordering::Relaxed) - before;
    println!(
        "{:<58} measured {:>6.1} B/block   estimate {:>6.1} B/block   ({} blocks)",
        "ReplicaBlocks bytes per block at capacity 100,000",
        measured as f64 / r.len() as f64,
        r.bytes() as f64 / r.len() as f64,
        r.len()
    );
    std::hint::black_box(&r);
}

fn bench_block_hashes(salt: &HashSalt) {
    let ids = Rng(11).tokens(8_000);
    let reps = 20_000;
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let h = block_hashes(salt, std::hint::black_box(&ids), BLOCK_SIZE);
        samples.push(t.elapsed());
        std::hint::black_box(h);
    }
    let (p50, _) = percentiles(&mut samples);
    report("block_hashes, 8,000 tokens, block 16", &mut samples);
    println!(
        "{:<58} {:>10.1} M tokens/s per thread at the median",
        "  throughput",
        8_000.0 / p50 * 1000.0
    );
}

fn main() {
    // `cargo test --benches` runs this binary with `--bench` absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let salt = HashSalt::new("bench-model", None, None);
    let prompt_ids = Rng(5).tokens(PROMPT_BLOCKS * BLOCK_SIZE);
    let prompt: Arc<[BlockHash]> = block_hashes(&salt, &prompt_ids, BLOCK_SIZE).into();
    assert_eq!(prompt.len(), PROMPT_BLOCKS);
    if quick {
        println!("(not run with --bench: skipping the timed runs)");
        return;
    }
    bench_block_hashes(&salt);
    bench_bytes_per_block(&salt);
    bench_direct(&salt);
    bench_shards(&salt, &prompt);
}
