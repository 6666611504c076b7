//! The router's exact index against the simulator's real prefix cache: an [`EngineMirror`] fed
//! only the engine's KV events, through the wire path (the engine's events turned into a batch
//! as the sim server does, msgpack-encoded, decoded by the gateway's decoder, applied with
//! [`apply_batch`]), must hold exactly what the block pool holds after every engine step:
//! - the same set of engine blocks (every cached hash of the pool is in the mirror, under the
//!   router's own name for the block's prefix, and the mirror holds nothing else);
//! - for every probe prompt (every prompt issued so far, every request's tokens so far, a few
//!   never issued), the leading cached blocks by the engine's vLLM hashes equal
//!   `mirror.matched(router chain).gpu`.
//!
//! The traffic is concurrent (several requests per step, chunked prefills beside decodes),
//! the pool small enough to evict and preempt, and the run goes through a refused and an
//! accepted `reset_prefix_cache` and a kill -9 + restart of the engine (the gateway clears the
//! mirror, as `IndexShards::clear_mirror` does on a publisher restart). Pure, in-process,
//! deterministic (seeded).

use std::collections::{HashMap, HashSet};

use inferrail_events::{decode_batch, KvEventBatch, WireEvent};
use inferrail_shards::block_hash::{self, hash_block, BlockHash as VllmHash, ExtraKey};
use inferrail_shards::index::{apply_batch, engine_id, BatchApplied, EngineMirror, KvEventTarget};
use inferrail_shards::prefix_hash::{self, BlockHash as RouterHash, HashSalt};
use inferrail_sim::engine::{
    KvCacheEvent, LatencyModel, Request, RequestId, Scheduler, SchedulerConfig, StepOutput,
};
use inferrail_sim::kv_events::{batch_from_engine, external_hash, EventMeta, HashFormat};

/// The model the replica serves: the salt of the router's chains and `apply_batch`'s model.
const MODEL: &str = "sim/parity-model";

/// SplitMix64: small, seeded, good enough to draw a workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next() % 32_000) as u32 + 1).collect()
    }
}

/// A token sequence with both chains of its full blocks: the engine's (vLLM's sha256 chain,
/// `cache_salt` in the first block's extra keys, as the scheduler hashes a request) and the
/// router's (XXH3 chain from the model's and salt's seed, as a prediction hashes a prompt).
#[derive(Debug, Clone)]
struct Seq {
    tokens: Vec<u32>,
    salt: Option<String>,
    vllm: Vec<VllmHash>,
    router: Vec<RouterHash>,
}

impl Seq {
    fn new(tokens: Vec<u32>, salt: Option<String>, bs: usize) -> Seq {
        let mut s = Seq {
            tokens,
            salt,
            vllm: Vec::new(),
            router: Vec::new(),
        };
        s.sync(bs);
        s
    }

    /// Hashes the full blocks not hashed yet (after tokens were appended).
    fn sync(&mut self, bs: usize) {
        if let Some(salt) = &self.salt {
            if self.vllm.is_empty() && self.tokens.len() >= bs {
                let extra = [ExtraKey::cache_salt(salt)];
                self.vllm
                    .push(hash_block(None, &self.tokens[..bs], Some(&extra)));
            }
        }
        block_hash::extend_block_hashes(&mut self.vllm, &self.tokens, bs);
        let done = self.router.len();
        let parent = self
            .router
            .last()
            .copied()
            .unwrap_or_else(|| HashSalt::new(MODEL, None, self.salt.as_deref()).seed());
        prefix_hash::extend_block_hashes(parent, &self.tokens[done * bs..], bs, &mut self.router);
        debug_assert_eq!(self.vllm.len(), self.router.len());
        debug_assert_eq!(
            self.router,
            prefix_hash::block_hashes(
                &HashSalt::new(MODEL, None, self.salt.as_deref()),
                &self.tokens,
                bs
            )
        );
    }

    fn key(&self) -> (Option<String>, Vec<u32>) {
        (self.salt.clone(), self.tokens.clone())
    }

    fn describe(&self) -> String {
        let head: Vec<u32> = self.tokens.iter().take(4).copied().collect();
        format!(
            "{} tokens ({} full blocks), salt {:?}, starting {head:?}",
            self.tokens.len(),
            self.vllm.len(),
            self.salt
        )
    }
}

/// The shape of one run.
#[derive(Debug, Clone, Copy)]
struct Params {
    seed: u64,
    block_size: usize,
    num_gpu_blocks: usize,
    max_num_batched_tokens: usize,
    max_num_seqs: usize,
    long_prefill_token_threshold: usize,
    hash_format: HashFormat,
    /// Requests issued before the reset, between the reset and the kill, and after the restart.
    phases: [usize; 3],
}

impl Params {
    fn config(&self) -> SchedulerConfig {
        let capacity = (self.num_gpu_blocks - 1) * self.block_size;
        SchedulerConfig {
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            block_size: self.block_size,
            num_gpu_blocks: self.num_gpu_blocks,
            enable_prefix_caching: true,
            enable_kv_events: true,
            long_prefill_token_threshold: self.long_prefill_token_threshold,
            max_model_len: Some(capacity.min(2048)),
        }
    }

    /// Tokens a pool can hold.
    fn capacity(&self) -> usize {
        (self.num_gpu_blocks - 1) * self.block_size
    }
}

/// What the run went through, to show the scenario covered what it claims.
#[derive(Debug, Default)]
struct Totals {
    steps: usize,
    batches: usize,
    stored: u64,
    removed: u64,
    cleared: u64,
    evicted: u64,
    preemptions: u64,
    max_batch: usize,
    /// Steps that computed a prefill chunk and a decode together.
    mixed_steps: usize,
    /// The most physical blocks holding one hash at once, minus one (0: never a duplicate).
    max_duplicates: usize,
    probes_checked: u64,
    refused_resets: usize,
}

impl Totals {
    fn merge(&mut self, t: Totals) {
        self.steps += t.steps;
        self.batches += t.batches;
        self.stored += t.stored;
        self.removed += t.removed;
        self.cleared += t.cleared;
        self.evicted += t.evicted;
        self.preemptions += t.preemptions;
        self.max_batch = self.max_batch.max(t.max_batch);
        self.mixed_steps += t.mixed_steps;
        self.max_duplicates = self.max_duplicates.max(t.max_duplicates);
        self.probes_checked += t.probes_checked;
        self.refused_resets += t.refused_resets;
    }
}

struct Harness {
    p: Params,
    rng: Rng,
    sched: Scheduler,
    mirror: EngineMirror,
    meta: EventMeta,
    now: f64,
    next_id: RequestId,
    /// Requests the engine has and their tokens so far (prompt, then outputs).
    live: HashMap<RequestId, Seq>,
    /// Every sequence to probe: prompts issued, finished requests' whole tokens, never issued.
    probes: Vec<Seq>,
    probe_keys: HashSet<(Option<String>, Vec<u32>)>,
    /// Issued prompts (for exact repeats) and finished sequences (for follow-ups).
    issued: Vec<Seq>,
    finished: Vec<Seq>,
    /// System prompts; the first is block-aligned.
    systems: Vec<Vec<u32>>,
    /// The router's name of every block the engine could have computed, by its vLLM hash.
    names: HashMap<VllmHash, RouterHash>,
    /// Prompts of another model: the mirror must never match them.
    foreign: Vec<Vec<RouterHash>>,
    /// An AllBlocksCleared is due in the next batch.
    clear_due: bool,
    totals: Totals,
}

impl Harness {
    fn new(p: Params) -> Harness {
        let mut rng = Rng(p.seed);
        let bs = p.block_size;
        let sched = Scheduler::new(p.config(), LatencyModel::default()).expect("valid config");
        let capacity = sched.pool().num_usable_blocks();
        let meta = EventMeta {
            hash_format: p.hash_format,
            ..EventMeta::default()
        };
        let mut systems = Vec::new();
        let max_sys = (p.capacity() / 8 / bs).max(3);
        for i in 0..4 {
            let blocks = rng.range(2, max_sys);
            let extra = if i == 0 { 0 } else { rng.range(1, bs - 1) };
            systems.push(rng.tokens(blocks * bs + extra));
        }
        let mut h = Harness {
            p,
            rng,
            sched,
            mirror: EngineMirror::new(capacity),
            meta,
            now: 0.0,
            next_id: 1,
            live: HashMap::new(),
            probes: Vec::new(),
            probe_keys: HashSet::new(),
            issued: Vec::new(),
            finished: Vec::new(),
            systems,
            names: HashMap::new(),
            foreign: Vec::new(),
            clear_due: false,
            totals: Totals::default(),
        };
        // Never issued: random prompts, system prompts with unseen suffixes, an unseen salt.
        for i in 0..4 {
            let n = h.rng.range(bs, 6 * bs);
            let t = h.rng.tokens(n);
            h.probe(Seq::new(t, None, bs));
            let mut t = h.systems[i].clone();
            let n = h.rng.range(1, 3 * bs);
            t.extend(h.rng.tokens(n));
            h.probe(Seq::new(t, None, bs));
            h.probe(Seq::new(
                h.systems[i].clone(),
                Some("never-used".into()),
                bs,
            ));
            let other = HashSalt::new("another/model", None, None);
            h.foreign
                .push(prefix_hash::block_hashes(&other, &h.systems[i], bs));
        }
        h
    }

    fn bs(&self) -> usize {
        self.p.block_size
    }

    fn probe(&mut self, s: Seq) {
        self.learn(&s);
        if self.probe_keys.insert(s.key()) {
            self.probes.push(s);
        }
    }

    fn learn(&mut self, s: &Seq) {
        for (v, r) in s.vllm.iter().zip(&s.router) {
            let prev = self.names.insert(*v, *r);
            assert!(
                prev.is_none_or(|p| p == *r),
                "one vLLM hash, two router names"
            );
        }
    }

    /// Draws one request: a system prompt and a short or long turn, an exact repeat, a
    /// follow-up of a finished conversation, a salted tenant's turn, the block-aligned system
    /// prompt alone (fully cached: vLLM recomputes its last block into a duplicate), or noise.
    fn draw(&mut self) -> (Vec<u32>, Option<String>, usize) {
        let bs = self.bs();
        let cap = self.p.capacity();
        let max_prompt = cap / 2;
        let max_tokens = self.rng.range(1, (cap / 6).clamp(2, 40));
        let sys = self.rng.range(0, self.systems.len() - 1);
        let roll = self.rng.range(0, 99);
        let mut salt = None;
        let mut tokens = match roll {
            0..=34 => {
                let mut t = self.systems[sys].clone();
                let n = self.rng.range(1, 4 * bs);
                t.extend(self.rng.tokens(n));
                t
            }
            35..=49 => {
                let mut t = self.systems[sys].clone();
                let n = self.rng.range(cap / 6, cap / 3);
                t.extend(self.rng.tokens(n));
                t
            }
            50..=61 if !self.issued.is_empty() => {
                let i = self.rng.range(0, self.issued.len() - 1);
                salt = self.issued[i].salt.clone();
                self.issued[i].tokens.clone()
            }
            62..=73 if !self.finished.is_empty() => {
                let i = self.rng.range(0, self.finished.len() - 1);
                salt = self.finished[i].salt.clone();
                let mut t = self.finished[i].tokens.clone();
                let n = self.rng.range(1, 2 * bs);
                t.extend(self.rng.tokens(n));
                t
            }
            74..=85 => {
                salt = Some(["tenant-a", "tenant-b"][self.rng.range(0, 1)].to_string());
                let mut t = self.systems[sys].clone();
                let n = self.rng.range(1, 3 * bs);
                t.extend(self.rng.tokens(n));
                t
            }
            86..=93 => self.systems[0].clone(),
            _ => {
                let n = self.rng.range(1, max_prompt);
                self.rng.tokens(n)
            }
        };
        tokens.truncate(max_prompt);
        (tokens, salt, max_tokens)
    }

    /// Queues `n` requests arriving now.
    fn add(&mut self, n: usize) {
        for _ in 0..n {
            let (tokens, salt, max_tokens) = self.draw();
            let id = self.next_id;
            self.next_id += 1;
            let mut req = Request::new(id, tokens.clone(), max_tokens, self.now);
            req.seed = self.rng.next();
            req.cache_salt = salt.clone();
            self.sched
                .add_request(req)
                .unwrap_or_else(|e| panic!("request {id} refused: {e}"));
            let s = Seq::new(tokens, salt, self.bs());
            self.issued.push(s.clone());
            self.probe(s.clone());
            self.live.insert(id, s);
        }
    }

    /// One engine step, its events published and applied, then the full check.
    fn step(&mut self, ctx: &str) {
        let mut out = self.sched.step(self.now);
        self.totals.steps += 1;
        let step = self.totals.steps;
        let ctx = format!("{ctx}, step {step} (t={:.4})", self.now);
        self.totals.max_batch = self.totals.max_batch.max(out.scheduled.len());
        if out.scheduled.iter().any(|w| w.decode) && out.scheduled.iter().any(|w| !w.decode) {
            self.totals.mixed_steps += 1;
        }
        self.totals.preemptions += out.preempted.len() as u64;
        let changed = self.publish(&mut out, &ctx);
        for t in &out.tokens {
            let s = self.live.get_mut(&t.id).expect("a token of a live request");
            s.tokens.push(t.token);
            s.sync(self.p.block_size);
            let s = s.clone();
            self.learn(&s);
        }
        for f in &out.finished {
            let s = self.live.remove(&f.id).expect("a live request finished");
            assert_eq!(s.tokens.len(), f.prompt_tokens + f.output_tokens.len());
            self.finished.push(s.clone());
            self.probe(s);
        }
        if !out.is_idle() {
            self.now = out.end;
        }
        self.check(&ctx, changed);
    }

    /// What the sim server does with a finished step's events (`Core::publish_kv_events`):
    /// nothing when there are none, else one batch for rank 0 from `batch_from_engine`. Then the
    /// wire (encode, the gateway's decoder) and the gateway's `apply_batch`.
    fn publish(&mut self, out: &mut StepOutput, ctx: &str) -> bool {
        let events = std::mem::take(&mut out.kv_events);
        if events.is_empty() {
            assert!(
                !self.clear_due,
                "{ctx}: the reset's AllBlocksCleared is late"
            );
            return false;
        }
        let batch = batch_from_engine(out.end, &events, Some(0), &self.meta);
        let bytes = batch.encode();
        let decoded = decode_batch(&bytes).unwrap_or_else(|e| panic!("{ctx}: decode: {e}"));
        assert_eq!(decoded.unknown_events, 0, "{ctx}: unknown events");
        assert_eq!(decoded.batch, batch, "{ctx}: the batch changed on the wire");
        let batch = decoded.batch;
        self.totals.batches += 1;

        let mut want = BatchApplied::default();
        for e in &events {
            match e {
                KvCacheEvent::BlockStored { block_hashes, .. } => {
                    want.stored += block_hashes.len() as u64
                }
                KvCacheEvent::BlockRemoved { block_hashes } => {
                    want.removed += block_hashes.len() as u64
                }
                KvCacheEvent::AllBlocksCleared => want.cleared += 1,
            }
        }
        assert_eq!(
            want.cleared,
            u64::from(self.clear_due),
            "{ctx}: AllBlocksCleared events {} but a reset due: {}",
            want.cleared,
            self.clear_due
        );
        self.clear_due = false;

        // Up to the clear, then the rest: right after the clear the mirror holds nothing.
        let split = batch
            .events
            .iter()
            .rposition(|e| matches!(e, WireEvent::AllBlocksCleared))
            .map_or(0, |i| i + 1);
        let sub = |events: &[WireEvent]| KvEventBatch {
            ts: batch.ts,
            events: events.to_vec(),
            data_parallel_rank: batch.data_parallel_rank,
        };
        let mut got = BatchApplied::default();
        if split > 0 {
            got.add(apply_batch(
                &mut self.mirror,
                MODEL,
                &sub(&batch.events[..split]),
            ));
            assert!(
                self.mirror.is_empty(),
                "{ctx}: {} blocks left in the mirror after AllBlocksCleared",
                self.mirror.len()
            );
        }
        got.add(apply_batch(
            &mut self.mirror,
            MODEL,
            &sub(&batch.events[split..]),
        ));
        assert_eq!(
            got, want,
            "{ctx}: the mirror refused or missed events (orphans / refused / unknown removals) \
             of batch {:?}",
            events
        );
        self.totals.stored += got.stored;
        self.totals.removed += got.removed;
        self.totals.cleared += got.cleared;
        true
    }

    /// The mirror equals the pool: the same blocks under the right names, and the same leading
    /// cached blocks for every probe. After a step without events (`changed` false: neither the
    /// pool's cache nor the mirror changed) only the live requests' sequences, which grew, are
    /// probed.
    fn check(&mut self, ctx: &str, changed: bool) {
        let pool = self.sched.pool();
        let bs = self.p.block_size;
        pool.check_invariants()
            .unwrap_or_else(|e| panic!("{ctx}: pool invariant: {e}"));
        let counters = self.mirror.counters();
        assert_eq!(
            (
                counters.orphans,
                counters.full,
                counters.malformed,
                counters.unknown_removed
            ),
            (0, 0, 0, 0),
            "{ctx}: mirror counters {counters:?}"
        );

        // Block by block: every cached hash of the pool is held, under the router's name.
        let mut copies: HashMap<VllmHash, usize> = HashMap::new();
        for b in 0..pool.num_gpu_blocks() as u32 {
            let Some(h) = pool.block_hash(b) else {
                continue;
            };
            let n = copies.entry(*h).or_default();
            *n += 1;
            if *n > 1 {
                continue;
            }
            let want = self
                .names
                .get(h)
                .unwrap_or_else(|| panic!("{ctx}: block {b} holds a hash no sequence has"));
            let id = engine_id(&external_hash(h, self.p.hash_format));
            assert_eq!(
                self.mirror.ours(id),
                Some(*want),
                "{ctx}: engine block {b} (event id {id:?}, ref {:?}): mirror's name differs",
                pool.ref_count(b)
            );
        }
        let dups = copies
            .values()
            .copied()
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        self.totals.max_duplicates = self.totals.max_duplicates.max(dups);
        assert_eq!(copies.len(), pool.num_cached_hashes(), "{ctx}");
        assert_eq!(
            self.mirror.len(),
            pool.num_cached_hashes(),
            "{ctx}: mirror holds {} engine blocks, the pool caches {} hashes",
            self.mirror.len(),
            pool.num_cached_hashes()
        );
        assert!(self.mirror.len() <= self.mirror.capacity(), "{ctx}");

        // Prompt by prompt: the leading cached blocks.
        let settled = if changed { &self.probes[..] } else { &[] };
        let probes = settled.iter().chain(self.live.values());
        for (i, s) in probes.enumerate() {
            let engine = s.vllm.iter().take_while(|h| pool.is_cached(h)).count();
            // What the engine reports as a hit is that prefix capped one token short: a fully
            // cached prompt recomputes its last block (checked where the cap bites; below it
            // both walk the same map).
            let cap = s.tokens.len().saturating_sub(1) / bs;
            if engine >= cap {
                let hit = pool.get_computed_blocks(&s.vllm, s.tokens.len());
                assert_eq!(
                    hit.blocks.len(),
                    cap,
                    "{ctx}: probe {i} ({}): {engine} leading blocks cached, get_computed_blocks \
                     hits {}",
                    s.describe(),
                    hit.blocks.len()
                );
            }
            let m = self.mirror.matched(&s.router);
            assert_eq!(
                (m.gpu, m.cpu, m.storage),
                (engine, 0, 0),
                "{ctx}: probe {i} ({}): the engine caches {engine} leading blocks, the mirror \
                 matches {m:?}",
                s.describe()
            );
            self.totals.probes_checked += 1;
        }
        for (i, f) in self.foreign.iter().enumerate() {
            assert_eq!(
                self.mirror.matched(f).any(),
                0,
                "{ctx}: another model's prompt {i} matched"
            );
        }
    }

    /// Steps with `n` requests arriving in small groups, several running at once.
    fn traffic(&mut self, n: usize, phase: &str) {
        let mut left = n;
        while left > 0 {
            if self.sched.waiting().count() < 2 * self.p.max_num_seqs {
                let k = self.rng.range(1, 4).min(left);
                self.add(k);
                left -= k;
            }
            self.step(phase);
            if !self.sched.running().is_empty() && self.rng.chance(10) {
                assert!(
                    !self.sched.reset_prefix_cache(),
                    "{phase}: reset_prefix_cache accepted while requests hold blocks"
                );
                self.totals.refused_resets += 1;
            }
        }
    }

    fn drain(&mut self, phase: &str) {
        while self.sched.has_work() {
            self.step(phase);
        }
    }

    /// `/reset_prefix_cache` on an idle engine; its AllBlocksCleared goes out with the next
    /// step that has work, as in the server (which only steps when there is work).
    fn reset(&mut self) {
        assert!(!self.sched.has_work());
        assert!(
            !self.mirror.is_empty(),
            "nothing cached before the reset (the scenario is too small)"
        );
        assert!(self.sched.reset_prefix_cache(), "reset refused while idle");
        assert_eq!(self.sched.pool().num_cached_hashes(), 0);
        self.clear_due = true;
    }

    /// kill -9: the engine and whatever it held vanish; a new one starts empty. The gateway
    /// sees the publisher restart and clears the mirror (`IndexShards::clear_mirror`).
    fn kill_and_restart(&mut self) {
        assert!(
            !self.sched.running().is_empty(),
            "the kill is meant to hit a busy engine"
        );
        assert!(!self.mirror.is_empty());
        self.totals.evicted += self.sched.pool().num_evicted_blocks();
        self.sched = Scheduler::new(self.p.config(), LatencyModel::default()).expect("config");
        self.now = 0.0;
        self.next_id = 1;
        for (_, s) in std::mem::take(&mut self.live) {
            self.probe(s);
        }
        KvEventTarget::cleared(&mut self.mirror);
        assert!(self.mirror.is_empty());
        self.check("after the restart", true);
    }

    /// The whole scenario: traffic, reset, traffic, kill mid-traffic, traffic after restart.
    fn run(mut self) -> Totals {
        let [a, b, c] = self.p.phases;
        self.traffic(a, "phase 1");
        self.drain("phase 1 drain");
        let evicted_before_reset = self.sched.pool().num_evicted_blocks();
        self.reset();
        self.traffic(b, "phase 2 (after the reset)");
        // Kill with requests in flight.
        while self.sched.running().is_empty() {
            if !self.sched.has_work() {
                self.add(1);
            }
            self.step("phase 2 (before the kill)");
        }
        self.kill_and_restart();
        self.traffic(c, "phase 3 (after the restart)");
        self.drain("phase 3 drain");
        self.totals.evicted += self.sched.pool().num_evicted_blocks();
        assert!(
            evicted_before_reset > 0,
            "seed {}: no eviction before the reset",
            self.p.seed
        );
        assert!(
            self.sched.pool().num_evicted_blocks() > 0,
            "seed {}: no eviction after the restart",
            self.p.seed
        );
        self.totals
    }
}

#[test]
fn mirror_equals_the_engine_cache_through_eviction_reset_and_restart() {
    let p = Params {
        seed: 0x5eed_0001,
        block_size: 16,
        num_gpu_blocks: 96,
        max_num_batched_tokens: 192,
        max_num_seqs: 6,
        long_prefill_token_threshold: 0,
        hash_format: HashFormat::Int,
        phases: [140, 80, 100],
    };
    let t = Harness::new(p).run();
    eprintln!("{t:?}");
    assert!(t.max_batch >= 4, "{t:?}: never 4 requests in one step");
    assert!(t.mixed_steps > 0, "{t:?}: no step mixed prefill and decode");
    assert!(t.preemptions > 0, "{t:?}: no preemption");
    assert!(t.max_duplicates > 0, "{t:?}: no duplicate block");
    assert!(t.refused_resets > 0, "{t:?}: no refused reset");
    assert_eq!(t.cleared, 1, "{t:?}");
    assert!(t.removed > 100, "{t:?}");
}

#[test]
fn mirror_equals_the_engine_cache_over_seeds() {
    let mut totals = Totals::default();
    for i in 0..8u64 {
        let p = Params {
            seed: 0xa11c_e000 + i,
            block_size: [4, 8, 16, 16][(i % 4) as usize],
            num_gpu_blocks: [40, 48, 33, 64][(i % 4) as usize],
            max_num_batched_tokens: [64, 96, 128, 48][(i % 4) as usize],
            max_num_seqs: [4, 5, 6, 8][(i % 4) as usize],
            long_prefill_token_threshold: if i % 3 == 0 { 24 } else { 0 },
            hash_format: if i % 2 == 0 {
                HashFormat::Int
            } else {
                HashFormat::Bytes
            },
            phases: [40, 25, 30],
        };
        totals.merge(Harness::new(p).run());
    }
    eprintln!("{totals:?}");
    assert_eq!(totals.cleared, 8, "{totals:?}");
    assert!(totals.mixed_steps > 0, "{totals:?}");
    assert!(totals.preemptions > 0, "{totals:?}");
    assert!(totals.max_duplicates > 0, "{totals:?}");
}
