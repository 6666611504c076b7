//! Benchmark of one full cost_model decision (`cargo bench -p inferrail-dataplane --bench
//! decision`; here, not in inferrail-routing, because it times the index lookup too): an 8,000-token prompt (500 blocks of 16), the index lookup on every replica's
//! shadow (`ReplicaBlocks::matched_prefix`, what an index shard runs), the predicted cached
//! tokens, pricing, guards and the pick — at 8, 64 and 256 replicas. Also the decision alone
//! (candidates already annotated) to split the two.
//!
//! Replicas: each shadow holds 16,384 blocks of background prompts plus a prefix of the asked
//! prompt (a quarter cold, a quarter the 32-block system prompt, a quarter somewhere in the
//! conversation, a quarter all of it). Plain `Instant` timing per decision; p50 and p99.

use inferrail_config::PolicyKind;
use inferrail_dataplane::predict::PromptFacts;
use inferrail_routing::offer::{self, EngineReading, LoadReading};
use inferrail_routing::rng::Rng as CoreRng;
use inferrail_routing::RouteInput;
use inferrail_routing::{brain, policies, BrainParams, Candidate, FleetFacts, PromptView};
use inferrail_shards::index::ReplicaBlocks;
use inferrail_shards::prefix_hash::{block_hashes, BlockHash, HashSalt};
use std::time::{Duration, Instant};

const BLOCK: usize = 16;
const PROMPT_TOKENS: usize = 8000;
const CAPACITY: usize = 16_384;

/// xorshift64*: deterministic inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next() % 150_000) as u32).collect()
    }
}

fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize].as_nanos() as f64;
    (at(0.5) / 1000.0, at(0.99) / 1000.0)
}

fn shadows(salt: &HashSalt, prompt: &[BlockHash], n: usize, rng: &mut Rng) -> Vec<ReplicaBlocks> {
    (0..n)
        .map(|r| {
            let held = match r % 4 {
                0 => 0,
                1 => 32,
                2 => (rng.next() % prompt.len() as u64) as usize,
                _ => prompt.len(),
            };
            let mut s = ReplicaBlocks::new(CAPACITY);
            while s.len() + 64 <= CAPACITY - held {
                s.record(&block_hashes(salt, &rng.tokens(64 * BLOCK), BLOCK));
            }
            s.record(&prompt[..held]);
            s
        })
        .collect()
}

fn main() {
    let salt = HashSalt::new("bench-model", None, None);
    let mut rng = Rng(42);
    let ids = rng.tokens(PROMPT_TOKENS);
    let facts = PromptFacts {
        tokens: PROMPT_TOKENS as u32,
        hashes: block_hashes(&salt, &ids, BLOCK).into(),
        block_size: BLOCK as u32,
    };
    let params = BrainParams::default();
    let fleet = FleetFacts::new(Duration::from_secs(10));
    println!(
        "cost_model decision, {PROMPT_TOKENS}-token prompt ({} blocks)",
        facts.hashes.len()
    );
    for n in [8usize, 64, 256] {
        let replicas = shadows(&salt, &facts.hashes, n, &mut rng);
        let mut candidates: Vec<Candidate> = (0..n)
            .map(|r| {
                let load = LoadReading {
                    in_flight: (r % 7) as u32,
                    pending: (r % 3) as u32,
                    prompt_tokens: 0,
                    queued_prefill_secs: (r % 5) as f64 * 0.1,
                };
                let engine = EngineReading {
                    running: (r % 7) as f64,
                    waiting: 0.0,
                    kv_cache_usage: 0.5,
                    age: Duration::from_millis(1),
                    own_in_flight: (r % 7) as u32,
                };
                offer::candidate(r, r as u64 + 1, load, Some(engine), Duration::from_secs(1))
            })
            .collect();
        let mut policy = policies::build(PolicyKind::CostModel);
        let mut core_rng = CoreRng::new(7);
        let reps = if n == 256 { 5_000 } else { 20_000 };
        let (mut full, mut alone) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
        let mut sink = 0usize;
        for i in 0..reps {
            let t = Instant::now();
            for (c, shadow) in candidates.iter_mut().zip(&replicas) {
                c.cached_tokens = Some(facts.cached_tokens(shadow.matched_prefix(&facts.hashes)));
            }
            let input = RouteInput {
                prompt: Some(PromptView {
                    tokens: facts.tokens,
                    hashes: &facts.hashes,
                    block_size: facts.block_size,
                }),
                approx_tokens: 0,
                session: None,
                params: &params,
                fleet: &fleet,
                now_micros: i as u64,
            };
            let d = brain::decide(policy.as_mut(), &input, &candidates, &mut core_rng);
            full.push(t.elapsed());
            let t = Instant::now();
            let d2 = brain::decide(policy.as_mut(), &input, &candidates, &mut core_rng);
            alone.push(t.elapsed());
            sink = sink.wrapping_add(d.winner + d2.winner);
        }
        std::hint::black_box(sink);
        let (p50, p99) = percentiles(&mut full);
        let (a50, a99) = percentiles(&mut alone);
        println!(
            "  {n:>3} replicas: with index lookup p50 {p50:>8.2} us  p99 {p99:>8.2} us   \
             decision alone p50 {a50:>7.2} us  p99 {a99:>7.2} us"
        );
    }
}
