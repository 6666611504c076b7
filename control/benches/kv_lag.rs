//! The KV event lag (`cargo bench -p inferrail-control --bench kv_lag`): how long after an
//! engine publishes a BlockStored a lookup sees its blocks, through the gateway's real path.
//!
//! A `KvEventPublisher` (bound on `tcp://*:0`, as an engine with vLLM's `tcp://*:port` does)
//! publishes; the gateway's stream thread (`fleet::kv_events::thread::spawn` around a
//! `StreamCore`, feeding an `IndexSink` of a `ReplicaMirror`) subscribes on
//! `tcp://127.0.0.1:<port>`, decodes and hands each batch to an `IndexShards` of 1 shard, whose
//! replica is in exact mode. Each sample publishes one BlockStored of a fresh 4-block run (random
//! token ids, no parent), taking `t0` just before `publish`, then asks `IndexShards::lookup` for
//! that run's router block hashes, again and again, until the replica holds at least one of them:
//! `t1 - t0` is the sample (publisher queue and thread, msgpack encode, ZMTP over loopback TCP,
//! subscriber read and decode, the stream core's sequence rules, the shard queue and apply, and
//! the lookup that saw it). Prints p50 and p99.
//!
//! The machine this runs on has 2 cores and the path has 3 threads of its own (publisher,
//! stream, shard), so the polling thread calls `std::thread::yield_now()` between lookups:
//! spinning flat out would compete with the very threads it waits for and measure the scheduler
//! instead. The figure is an upper bound of what a gateway whose data cores do not share the
//! path's cores would see.

#[path = "../../shards/benches/support/timing.rs"]
mod timing;

use inferrail_control::fleet::kv_events::core::StreamCore;
use inferrail_control::fleet::kv_events::sink::ReplicaMirror;
use inferrail_control::fleet::kv_events::stats::StreamStats;
use inferrail_control::fleet::kv_events::thread::{self as stream_thread, StreamPlan};
use inferrail_events::stream::TrackerLimits;
use inferrail_events::{BlockStored, KvEventBatch, KvEventPublisher, PublisherConfig, WireEvent};
use inferrail_shards::index::{IndexConfig, IndexMode, IndexShards};
use inferrail_shards::prefix_hash::{block_hashes, BlockHash, HashSalt};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use timing::{report, Rng};

const MODEL: &str = "bench-model";
const BLOCK_SIZE: usize = 16;
const RUN_BLOCKS: usize = 4;
const REPLICA: u64 = 1;
/// The longest one sample may take before the bench gives up (a lost batch).
const GIVE_UP: Duration = Duration::from_secs(5);

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One fresh run: its batch (a parentless BlockStored of `RUN_BLOCKS` blocks) and the router's
/// chain of its tokens, as a request for that prompt would be hashed.
fn fresh_run(rng: &mut Rng, salt: &HashSalt) -> (KvEventBatch, Arc<[BlockHash]>) {
    let tokens = rng.tokens(RUN_BLOCKS * BLOCK_SIZE);
    let chain: Arc<[BlockHash]> = block_hashes(salt, &tokens, BLOCK_SIZE).into();
    let batch = KvEventBatch {
        ts: now_unix(),
        events: vec![WireEvent::BlockStored(BlockStored::gpu(
            (0..RUN_BLOCKS).map(|_| rng.next()).collect::<Vec<_>>(),
            None,
            tokens,
            BLOCK_SIZE as u64,
        ))],
        data_parallel_rank: None,
    };
    (batch, chain)
}

/// Polls lookups of `chain` (yielding between them) until the replica holds some of it; the
/// blocks it holds, or `None` past [`GIVE_UP`].
fn wait_held(index: &IndexShards, chain: &Arc<[BlockHash]>, since: Instant) -> Option<usize> {
    loop {
        if let Ok(reply) = index.lookup(Arc::clone(chain), &[REPLICA]) {
            let answer = loop {
                if let Some(answer) = reply.try_get() {
                    break answer;
                }
                std::thread::yield_now();
            };
            if let Some(held) = answer.ok().as_ref().and_then(|a| a.first()) {
                if held.total() > 0 {
                    return Some(held.total());
                }
            }
        }
        if since.elapsed() > GIVE_UP {
            return None;
        }
        std::thread::yield_now();
    }
}

/// Waits until `ready` holds, for at most `limit`.
fn wait_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn bench_lag(samples_wanted: usize) -> Result<(), String> {
    let publisher = KvEventPublisher::start(PublisherConfig {
        endpoint: "tcp://*:0".into(),
        ..PublisherConfig::default()
    })
    .map_err(|e| format!("publisher: {e}"))?;
    let port = publisher
        .local_addr()
        .ok_or("the publisher bound no address")?
        .port();
    let index = Arc::new(
        IndexShards::start(IndexConfig {
            shards: 1,
            queue_capacity: 4096,
            default_capacity_blocks: 1 << 16,
        })
        .map_err(|e| format!("index: {e}"))?,
    );
    let model: Arc<str> = MODEL.into();
    // As `KvStreams` starts a replica's one stream (fleet/kv_events/mod.rs `start_streams`).
    let mirror = ReplicaMirror::new(Arc::clone(&index), REPLICA, Arc::clone(&model));
    let generation = mirror.start_generation(1);
    let stats = Arc::new(StreamStats::default());
    let core = StreamCore::new(
        false,
        TrackerLimits::default(),
        BLOCK_SIZE as u64,
        Arc::clone(&stats),
    );
    let plan = StreamPlan {
        replica: "bench".into(),
        rank: 0,
        endpoint: format!("tcp://127.0.0.1:{port}"),
        replay_endpoint: None,
        topic: Vec::new(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sink = mirror.sink(generation, 0);
    let thread = stream_thread::spawn(plan, core, sink, Arc::clone(&mirror), Arc::clone(&stop))
        .map_err(|e| format!("stream thread: {e}"))?;

    let result = (|| {
        // A PUB socket drops what is published before the subscription arrives; batch 0 must
        // reach the stream, which then knows the engine's cache started empty (synced).
        if !wait_until(Duration::from_secs(10), || {
            publisher.num_subscriptions() >= 1
        }) {
            return Err("the stream thread did not subscribe".to_string());
        }
        let salt = HashSalt::new(MODEL, None, None);
        let mut rng = Rng(42);
        let (warm, chain) = fresh_run(&mut rng, &salt);
        publisher.publish(warm);
        if wait_held(&index, &chain, Instant::now()).is_none() {
            return Err("the first batch never reached the index".to_string());
        }
        let replica = index.stats().map_err(|e| format!("stats: {e}"))?;
        if replica.first().map(|s| s.mode) != Some(IndexMode::Exact) {
            return Err(format!("the replica is not in exact mode: {replica:?}"));
        }
        let mut samples = Vec::with_capacity(samples_wanted);
        for i in 0..samples_wanted {
            let (batch, chain) = fresh_run(&mut rng, &salt);
            let t0 = Instant::now();
            if !publisher.publish(batch) {
                return Err(format!("sample {i}: the publisher's queue was full"));
            }
            let held = wait_held(&index, &chain, t0);
            samples.push(t0.elapsed());
            match held {
                Some(RUN_BLOCKS) => {}
                Some(n) => return Err(format!("sample {i}: {n} of {RUN_BLOCKS} blocks held")),
                None => return Err(format!("sample {i}: not seen within {GIVE_UP:?}")),
            }
        }
        report(
            "publish BlockStored -> lookup sees it (loopback, 1 shard)",
            &mut samples,
        );
        let replica = index.stats().map_err(|e| format!("stats: {e}"))?;
        if let Some(s) = replica.first() {
            println!(
                "{:<58} {} batches, {} blocks stored, {} orphans, {} refused; stream gaps {}, \
                 decode errors {}",
                "  index and stream figures",
                samples_wanted + 1,
                s.events.stored,
                s.events.orphans,
                s.events.refused,
                stats.gaps.load(Relaxed),
                stats.decode_errors.load(Relaxed)
            );
        }
        Ok(())
    })();
    stop.store(true, Relaxed);
    let _ = thread.join();
    drop(publisher);
    result
}

fn main() {
    // `cargo test --benches` runs this binary with `--bench` absent: keep that quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("(not run with --bench: skipping the timed runs)");
        return;
    }
    if let Err(e) = bench_lag(1_000) {
        eprintln!("kv_lag: {e}");
        std::process::exit(1);
    }
}
