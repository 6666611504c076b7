use super::*;
use crate::index::reference::{RefBlocks, RefUndo};
use crate::prefix_hash::{block_hashes, HashSalt};
use proptest::prelude::*;
use std::collections::HashMap;

fn chain(tokens: &[u32]) -> Arc<[BlockHash]> {
    block_hashes(&HashSalt::new("m", None, None), tokens, 1).into()
}

/// The answers of replicas answered from their routing records: everything on the GPU.
fn gpu(blocks: &[usize]) -> Vec<HeldBlocks> {
    blocks.iter().map(|&b| HeldBlocks::on_gpu(b)).collect()
}

fn start(shards: usize, default_capacity_blocks: usize) -> IndexShards {
    let config = IndexConfig {
        shards,
        queue_capacity: 4096,
        default_capacity_blocks,
    };
    match IndexShards::start(config) {
        Ok(index) => index,
        Err(e) => panic!("index did not start: {e}"),
    }
}

#[test]
fn lookups_answer_in_the_order_asked() {
    let index = start(3, 100);
    let a = chain(&[1, 2, 3, 4]);
    let b = chain(&[1, 2, 9]);
    index.record(10, Arc::clone(&a)).ok();
    index.record(20, Arc::clone(&b)).ok();
    let reply = index.lookup(Arc::clone(&a), &[20, 99, 10, 10]);
    assert_eq!(
        reply.and_then(LookupReply::wait).map(without_room).ok(),
        Some(gpu(&[2, 0, 4, 4]))
    );
    let none = index.lookup(Arc::clone(&a), &[]);
    assert_eq!(
        none.and_then(LookupReply::wait).map(without_room).ok(),
        Some(vec![])
    );
}

#[test]
fn take_back_clear_forget_and_stats() {
    let index = start(2, 100);
    let a = chain(&[1, 2, 3]);
    let b = chain(&[1, 2, 3, 4, 5]);
    index.record(1, Arc::clone(&a)).ok();
    let ticket = index.record(1, Arc::clone(&b));
    assert_eq!(ticket.as_ref().map(RecordTicket::replica).ok(), Some(1));
    if let Ok(t) = ticket {
        index.take_back(t).ok();
    }
    let ask = |p: &Arc<[BlockHash]>, rs: &[u64]| {
        index
            .lookup(Arc::clone(p), rs)
            .and_then(LookupReply::wait)
            .map(without_room)
            .ok()
            .map(|v| v.iter().map(HeldBlocks::total).collect::<Vec<_>>())
    };
    assert_eq!(ask(&b, &[1]), Some(vec![3]));
    index.set_capacity(2, 7).ok();
    index.record(2, Arc::clone(&b)).ok();
    index.clear(1).ok();
    assert_eq!(ask(&b, &[1, 2]), Some(vec![0, 5]));
    let stats = index.stats().ok().unwrap_or_default();
    assert_eq!(stats.len(), 2);
    assert_eq!(
        (
            stats[0].key,
            stats[0].entries,
            stats[0].capacity,
            stats[0].resets
        ),
        (1, 0, 100, 1)
    );
    assert_eq!(
        (
            stats[1].key,
            stats[1].entries,
            stats[1].capacity,
            stats[1].resets
        ),
        (2, 5, 7, 0)
    );
    assert!(stats[1].bytes > 0);
    index.forget(2).ok();
    assert_eq!(index.stats().ok().map(|s| s.len()), Some(1));
    assert_eq!(ask(&b, &[2]), Some(vec![0]));
}

#[test]
fn a_ticket_does_not_outlive_a_forgotten_replica() {
    let index = start(1, 100);
    let a = chain(&[1, 2, 3]);
    let old = index.record(5, Arc::clone(&a));
    index.forget(5).ok();
    index.record(5, Arc::clone(&a)).ok();
    if let Ok(t) = old {
        index.take_back(t).ok();
    }
    let held = index
        .lookup(Arc::clone(&a), &[5])
        .and_then(LookupReply::wait)
        .map(without_room);
    assert_eq!(held.ok(), Some(gpu(&[3])));
}

#[test]
fn shard_of_spreads_and_stays_in_range() {
    let mut counts = [0usize; 4];
    for key in 0..4000u64 {
        counts[shard_of(key, 4)] += 1;
    }
    assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    assert_eq!(shard_of(123, 0), 0);
}

/// The reference for the whole index: a [`RefBlocks`] per replica, with resets and an
/// incarnation number (a forgotten replica that comes back is a new shadow).
struct Model {
    default_capacity: usize,
    replicas: HashMap<u64, (RefBlocks, u64, u64)>,
    incarnations: u64,
}

impl Model {
    fn entry(&mut self, key: u64) -> &mut (RefBlocks, u64, u64) {
        let capacity = self.default_capacity;
        let incarnations = &mut self.incarnations;
        self.replicas.entry(key).or_insert_with(|| {
            *incarnations += 1;
            (RefBlocks::new(capacity), 0, *incarnations)
        })
    }
}

#[derive(Debug, Clone)]
enum Op {
    Record(usize, usize),
    TakeBack(usize),
    Clear(usize),
    SetCapacity(usize, usize),
    Forget(usize),
    Lookup(usize),
}

const KEYS: [u64; 5] = [3, 17, 1 << 40, u64::MAX, 0x9e37_79b9];

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0usize..5, 0usize..64).prop_map(|(r, p)| Op::Record(r, p)),
        3 => (0usize..64).prop_map(Op::TakeBack),
        1 => (0usize..5).prop_map(Op::Clear),
        1 => (0usize..5, 0usize..20).prop_map(|(r, c)| Op::SetCapacity(r, c)),
        1 => (0usize..5).prop_map(Op::Forget),
        3 => (0usize..64).prop_map(Op::Lookup),
    ];
    prop::collection::vec(op, 1..50)
}

fn prompt_family() -> impl Strategy<Value = Vec<Arc<[BlockHash]>>> {
    prop::collection::vec(prop::collection::vec(0u32..3, 0..17), 1..10).prop_map(|ps| {
        let salt = HashSalt::new("m", None, None);
        ps.iter()
            .map(|p| block_hashes(&salt, p, 2).into())
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn index_shards_equal_the_reference(
        prompts in prompt_family(), shards in 1usize..4, default_capacity in 0usize..20, ops in ops()
    ) {
        let index = start(shards, default_capacity);
        let mut model = Model { default_capacity, replicas: HashMap::new(), incarnations: 0 };
        let mut tickets: Vec<Option<(RecordTicket, RefUndo, u64)>> = Vec::new();
        for op in &ops {
            match *op {
                Op::Record(r, p) => {
                    let prompt = &prompts[p % prompts.len()];
                    let ticket = index.record(KEYS[r], Arc::clone(prompt));
                    prop_assert!(ticket.is_ok());
                    let (shadow, _, incarnation) = model.entry(KEYS[r]);
                    let undo = shadow.record(prompt);
                    let incarnation = *incarnation;
                    if let Ok(ticket) = ticket {
                        tickets.push(Some((ticket, undo, incarnation)));
                    }
                }
                Op::TakeBack(t) => {
                    let n = tickets.len();
                    if let Some((ticket, undo, incarnation)) = tickets.get_mut(t % n.max(1)).and_then(Option::take) {
                        let key = ticket.replica();
                        prop_assert!(index.take_back(ticket).is_ok());
                        if let Some((shadow, _, now)) = model.replicas.get_mut(&key) {
                            if *now == incarnation {
                                shadow.take_back(undo);
                            }
                        }
                    }
                }
                Op::Clear(r) => {
                    prop_assert!(index.clear(KEYS[r]).is_ok());
                    let (shadow, resets, _) = model.entry(KEYS[r]);
                    shadow.clear();
                    *resets += 1;
                }
                Op::SetCapacity(r, c) => {
                    prop_assert!(index.set_capacity(KEYS[r], c).is_ok());
                    model.entry(KEYS[r]).0.set_capacity(c);
                }
                Op::Forget(r) => {
                    prop_assert!(index.forget(KEYS[r]).is_ok());
                    model.replicas.remove(&KEYS[r]);
                }
                Op::Lookup(p) => {
                    let prompt = &prompts[p % prompts.len()];
                    let got = index.lookup(Arc::clone(prompt), &KEYS).and_then(LookupReply::wait).map(without_room);
                    let want: Vec<HeldBlocks> = KEYS
                        .iter()
                        .map(|k| model.replicas.get(k).map_or(0, |(s, _, _)| s.matched_prefix(prompt)))
                        .map(HeldBlocks::on_gpu)
                        .collect();
                    prop_assert_eq!(got.ok(), Some(want));
                }
            }
        }
        let stats = index.stats();
        prop_assert!(stats.is_ok());
        let got: Vec<(u64, usize, usize, u64)> = stats
            .unwrap_or_default()
            .iter()
            .map(|s| (s.key, s.entries, s.capacity, s.resets))
            .collect();
        let mut want: Vec<(u64, usize, usize, u64)> = model
            .replicas
            .iter()
            .map(|(&k, (s, resets, _))| (k, s.len(), s.capacity, *resets))
            .collect();
        want.sort();
        prop_assert_eq!(got, want);
    }
}

/// A small deterministic generator for the stress test (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn concurrent_callers_get_every_reply_and_capacities_hold() {
    const REPLICAS: u64 = 16;
    const MAX_CAPACITY: usize = 40;
    let index = Arc::new(
        match IndexShards::start(IndexConfig {
            shards: 3,
            queue_capacity: 64,
            default_capacity_blocks: MAX_CAPACITY,
        }) {
            Ok(i) => i,
            Err(e) => panic!("index did not start: {e}"),
        },
    );
    let prompts: Arc<Vec<Arc<[BlockHash]>>> = Arc::new(
        (0..32u32)
            .map(|p| {
                let tokens: Vec<u32> = (0..(p % 7) * 5 + 3)
                    .map(|t| (t * (p % 3 + 1)) % 11)
                    .collect();
                chain(&tokens)
            })
            .collect(),
    );
    let replicas: Vec<u64> = (0..REPLICAS).collect();
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let index = Arc::clone(&index);
            let prompts = Arc::clone(&prompts);
            let replicas = replicas.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + w * 0x9e37);
                let (mut asked, mut answered, mut busy) = (0usize, 0usize, 0usize);
                let mut tickets = Vec::new();
                for _ in 0..3000 {
                    let prompt = &prompts[rng.below(prompts.len())];
                    match rng.below(10) {
                        0..=3 => match index.lookup(Arc::clone(prompt), &replicas) {
                            Ok(reply) => {
                                asked += 1;
                                let got = reply.wait();
                                let Ok(got) = got else {
                                    panic!("lost reply: {got:?}")
                                };
                                assert_eq!(got.len(), replicas.len());
                                assert!(got
                                    .iter()
                                    .all(|n| n.total() <= prompt.len().min(MAX_CAPACITY)));
                                answered += 1;
                            }
                            Err(IndexError::Full { .. }) => busy += 1,
                            Err(e) => panic!("lookup failed: {e}"),
                        },
                        4..=7 => match index
                            .record(rng.below(REPLICAS as usize) as u64, Arc::clone(prompt))
                        {
                            Ok(t) => tickets.push(t),
                            Err(IndexError::Full { .. }) => busy += 1,
                            Err(e) => panic!("record failed: {e}"),
                        },
                        _ => {
                            if !tickets.is_empty() {
                                let t = tickets.swap_remove(rng.below(tickets.len()));
                                match index.take_back(t) {
                                    Ok(()) | Err(IndexError::Full { .. }) => {}
                                    Err(e) => panic!("take_back failed: {e}"),
                                }
                            }
                        }
                    }
                }
                (asked, answered, busy)
            })
        })
        .collect();
    // The control side changes capacities and restarts engines meanwhile.
    let mut rng = Rng(42);
    for _ in 0..300 {
        let r = rng.below(REPLICAS as usize) as u64;
        match rng.below(3) {
            0 => assert!(index.set_capacity(r, rng.below(MAX_CAPACITY + 1)).is_ok()),
            1 => assert!(index.clear(r).is_ok()),
            _ => {
                let stats = index.stats();
                let Ok(stats) = stats else {
                    panic!("stats lost: {stats:?}")
                };
                assert!(stats
                    .iter()
                    .all(|s| s.entries <= s.capacity && s.capacity <= MAX_CAPACITY));
            }
        }
    }
    let mut asked = 0;
    for w in workers {
        match w.join() {
            Ok((a, answered, _busy)) => {
                assert_eq!(a, answered);
                asked += a;
            }
            Err(_) => panic!("a worker panicked"),
        }
    }
    assert!(asked > 0);
    let stats = index.stats().unwrap_or_default();
    assert_eq!(stats.len(), REPLICAS as usize);
    assert!(stats.iter().all(|s| s.entries <= s.capacity));
}

/// One BlockStored of a whole prompt from its first block, block size 1 (as [`chain`] hashes).
fn stored_batch(engine_ids: std::ops::Range<u64>, tokens: &[u32]) -> Arc<KvEventBatch> {
    stored_run(engine_ids, None, tokens, "GPU")
}

/// One BlockStored in `medium` of blocks following the engine block `parent` (block size 1).
fn stored_run(
    engine_ids: std::ops::Range<u64>,
    parent: Option<u64>,
    tokens: &[u32],
    medium: &str,
) -> Arc<KvEventBatch> {
    use inferrail_events::{BlockStored, WireEvent};
    let mut stored = BlockStored::gpu(engine_ids, parent, tokens.to_vec(), 1);
    stored.medium = Some(medium.into());
    Arc::new(KvEventBatch {
        ts: 0.0,
        events: vec![WireEvent::BlockStored(stored)],
        data_parallel_rank: None,
    })
}

/// A lookup's answers by tier, their pool rooms left out (see [`held_with_room`]).
fn without_room(v: Vec<HeldBlocks>) -> Vec<HeldBlocks> {
    v.into_iter()
        .map(|h| HeldBlocks { room: None, ..h })
        .collect()
}

/// The blocks of `prompt` that `replica` holds, by tier (its pool room left out: see
/// [`room_of`]).
fn held(index: &IndexShards, prompt: &Arc<[BlockHash]>, replica: u64) -> HeldBlocks {
    HeldBlocks {
        room: None,
        ..held_with_room(index, prompt, replica)
    }
}

/// What a lookup of `prompt` answers for `replica`, its pool room included.
fn held_with_room(index: &IndexShards, prompt: &Arc<[BlockHash]>, replica: u64) -> HeldBlocks {
    match index
        .lookup(Arc::clone(prompt), &[replica])
        .and_then(LookupReply::wait)
    {
        Ok(v) => v[0],
        Err(e) => panic!("lookup failed: {e}"),
    }
}

fn mode_of(index: &IndexShards, replica: u64) -> (IndexMode, usize) {
    let stats = index.stats().unwrap_or_default();
    let s = stats.iter().find(|s| s.key == replica).copied();
    s.map_or((IndexMode::Approximate, 0), |s| (s.mode, s.mirror_blocks))
}

#[test]
fn a_synced_mirror_answers_and_an_unsynced_one_falls_back_to_the_routing_records() {
    let index = start(2, 100);
    let model: Arc<str> = Arc::from("m");
    let prompt = chain(&[1, 2, 3, 4]);
    // Routed here, so the routing records predict all four blocks.
    index.record(7, Arc::clone(&prompt)).ok();
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(4));
    assert_eq!(mode_of(&index, 7).0, IndexMode::Approximate);

    // The engine's events say it stored only the first two: unsynced, the records still answer.
    index
        .apply_events(7, Arc::clone(&model), stored_batch(10..12, &[1, 2]))
        .unwrap();
    assert_eq!(mode_of(&index, 7), (IndexMode::Unsynced, 2));
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(4));

    // Synced: the mirror answers, exactly what the engine holds.
    index.set_synced(7, true).unwrap();
    assert_eq!(mode_of(&index, 7).0, IndexMode::Exact);
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(2));

    // An engine restart empties the mirror; the records would still claim four blocks.
    index.clear_mirror(7).unwrap();
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(0));

    // Events no longer followed: back to the records.
    index.stop_events(7).unwrap();
    assert_eq!(mode_of(&index, 7), (IndexMode::Approximate, 0));
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(4));
}

#[test]
fn the_mirror_takes_the_replicas_capacity() {
    let index = start(1, 3);
    let model: Arc<str> = Arc::from("m");
    index
        .apply_events(5, Arc::clone(&model), stored_batch(0..4, &[1, 2, 3, 4]))
        .unwrap();
    let stats = index.stats().unwrap();
    assert_eq!(stats[0].mirror_blocks, 0, "four blocks do not fit in three");
    assert_eq!(stats[0].events.refused, 1);
    index.set_capacity(5, 8).unwrap();
    index
        .apply_events(5, model, stored_batch(0..4, &[1, 2, 3, 4]))
        .unwrap();
    let stats = index.stats().unwrap();
    assert_eq!((stats[0].mirror_blocks, stats[0].events.stored), (4, 4));
}

#[test]
fn in_exact_mode_a_routed_prompt_counts_until_its_events_arrive_and_a_take_back_removes_it() {
    let index = start(2, 100);
    let model: Arc<str> = Arc::from("m");
    index.set_synced(3, true).unwrap();
    let prompt = chain(&[1, 2, 3, 4]);
    assert_eq!(
        held(&index, &prompt, 3),
        HeldBlocks::on_gpu(0),
        "an empty engine"
    );
    // Routed here before the engine published anything: its siblings find it.
    let ticket = index.record(3, Arc::clone(&prompt)).unwrap();
    assert_eq!(held(&index, &prompt, 3), HeldBlocks::on_gpu(4));
    let stats = index.stats().unwrap();
    let s = stats.iter().find(|s| s.key == 3).unwrap();
    assert_eq!((s.speculative.inserted, s.speculative_blocks), (1, 4));
    // The attempt never reached the engine: taken back, the prompt is cold again.
    index.take_back(ticket).unwrap();
    assert_eq!(held(&index, &prompt, 3), HeldBlocks::on_gpu(0));
    // The events of another routed prompt: the mirror and the speculative entry agree.
    let second = chain(&[1, 2]);
    index.record(3, Arc::clone(&second)).unwrap();
    index
        .apply_events(3, Arc::clone(&model), stored_batch(20..22, &[1, 2]))
        .unwrap();
    assert_eq!(held(&index, &prompt, 3), HeldBlocks::on_gpu(2));
    // An engine restart drops both.
    index.clear_mirror(3).unwrap();
    assert_eq!(held(&index, &prompt, 3), HeldBlocks::on_gpu(0));
}

#[test]
fn a_synced_mirror_splits_its_answer_by_tier_and_speculative_blocks_count_as_gpu() {
    let index = start(2, 100);
    let model: Arc<str> = Arc::from("m");
    let prompt = chain(&[1, 2, 3, 4, 5, 6]);
    let split = |gpu, cpu, storage| HeldBlocks {
        gpu,
        cpu,
        storage,
        room: None,
    };
    // Blocks 1-2 on the GPU, 3-4 offloaded to the CPU, 5 in storage, 6 nowhere.
    for batch in [
        stored_run(10..12, None, &[1, 2], "GPU"),
        stored_run(12..14, Some(11), &[3, 4], "CPU"),
        stored_run(14..15, Some(13), &[5], "STORAGE"),
    ] {
        index.apply_events(3, Arc::clone(&model), batch).unwrap();
    }
    // Unsynced: the routing records answer (nothing was routed here), all as GPU.
    assert_eq!(held(&index, &prompt, 3), HeldBlocks::default());
    index.set_synced(3, true).unwrap();
    assert_eq!(held(&index, &prompt, 3), split(2, 2, 1));
    // Routed here: the speculative entry holds blocks 1-3 on the GPU until events confirm it.
    index.record(3, chain(&[1, 2, 3])).unwrap();
    assert_eq!(held(&index, &prompt, 3), split(3, 1, 1));
    // The same prompt on a replica without events: its routing records, all on the GPU.
    index.record(4, Arc::clone(&prompt)).unwrap();
    let both = index
        .lookup(Arc::clone(&prompt), &[4, 3])
        .and_then(LookupReply::wait)
        .map(without_room);
    assert_eq!(both.ok(), Some(vec![split(6, 0, 0), split(3, 1, 1)]));
}

#[test]
fn more_exact_replicas_than_one_forest_holds_each_answer_for_itself() {
    // 70 replicas on one shard: two forests. Replica r's engine holds the first r % 9 blocks.
    let index = start(1, 100);
    let model: Arc<str> = Arc::from("m");
    let tokens: Vec<u32> = (1..=8).collect();
    let prompt = chain(&tokens);
    let replicas: Vec<u64> = (0..70).collect();
    for &r in &replicas {
        index.set_synced(r, true).unwrap();
        let n = (r % 9) as usize;
        if n > 0 {
            index
                .apply_events(
                    r,
                    Arc::clone(&model),
                    stored_batch(r * 100..r * 100 + n as u64, &tokens[..n]),
                )
                .unwrap();
        }
    }
    let want: Vec<HeldBlocks> = replicas
        .iter()
        .map(|r| HeldBlocks::on_gpu((r % 9) as usize))
        .collect();
    let asked = index
        .lookup(Arc::clone(&prompt), &replicas)
        .and_then(LookupReply::wait)
        .map(without_room);
    assert_eq!(asked.ok(), Some(want.clone()));
    // A replica leaving releases its bit and its blocks; one joining later takes the bit.
    index.stop_events(8).unwrap();
    index.set_synced(200, true).unwrap();
    index
        .apply_events(
            200,
            Arc::clone(&model),
            stored_batch(20_000..20_003, &tokens[..3]),
        )
        .unwrap();
    assert_eq!(held(&index, &prompt, 200), HeldBlocks::on_gpu(3));
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(7));
    index.forget(7).unwrap();
    assert_eq!(held(&index, &prompt, 7), HeldBlocks::on_gpu(0));
    let stats = index.stats().unwrap();
    let of = |k: u64| {
        stats
            .iter()
            .find(|s| s.key == k)
            .map(|s| (s.mode, s.mirror_blocks))
    };
    assert_eq!(of(8), Some((IndexMode::Approximate, 0)));
    assert_eq!(of(200), Some((IndexMode::Exact, 3)));
    assert_eq!(of(17), Some((IndexMode::Exact, 8)));
}

#[test]
fn a_speculative_entry_bridges_a_hole_to_the_blocks_the_engine_holds_past_it() {
    let index = start(1, 100);
    let model: Arc<str> = Arc::from("m");
    let prompt = chain(&[1, 2, 3, 4, 5, 6]);
    index.set_synced(4, true).unwrap();
    // The engine holds blocks 0..2 and, past a hole at 2, blocks 3..6 (stored, then block 2
    // evicted on its own).
    index
        .apply_events(4, Arc::clone(&model), stored_batch(40..43, &[1, 2, 3]))
        .unwrap();
    index
        .apply_events(
            4,
            Arc::clone(&model),
            stored_run(43..46, Some(42), &[4, 5, 6], "GPU"),
        )
        .unwrap();
    assert_eq!(held(&index, &prompt, 4), HeldBlocks::on_gpu(6));
    let evict = Arc::new(KvEventBatch {
        ts: 0.0,
        events: vec![inferrail_events::WireEvent::BlockRemoved(
            inferrail_events::BlockRemoved::gpu([42]),
        )],
        data_parallel_rank: None,
    });
    index.apply_events(4, Arc::clone(&model), evict).unwrap();
    assert_eq!(
        held(&index, &prompt, 4),
        HeldBlocks::on_gpu(2),
        "the engine stops at the hole"
    );
    // A routed prompt covering the hole: held speculatively, the walk continues past it.
    index.record(4, chain(&[1, 2, 3])).unwrap();
    assert_eq!(held(&index, &prompt, 4), HeldBlocks::on_gpu(6));
}

#[test]
fn a_speculative_run_past_the_gpu_blocks_is_followed_by_the_offloaded_ones_by_tier() {
    let index = start(1, 100);
    let model: Arc<str> = Arc::from("m");
    let prompt = chain(&[1, 2, 3, 4, 5, 6]);
    index.set_synced(6, true).unwrap();
    // Blocks 0..2 on the GPU; 0..4 have host-memory copies; 4..5 only in storage.
    index
        .apply_events(
            6,
            Arc::clone(&model),
            stored_run(60..62, None, &[1, 2], "GPU"),
        )
        .unwrap();
    index
        .apply_events(
            6,
            Arc::clone(&model),
            stored_run(60..64, None, &[1, 2, 3, 4], "CPU"),
        )
        .unwrap();
    index
        .apply_events(
            6,
            Arc::clone(&model),
            stored_run(64..65, Some(63), &[5], "STORAGE"),
        )
        .unwrap();
    let tiers = |gpu, cpu, storage| HeldBlocks {
        gpu,
        cpu,
        storage,
        room: None,
    };
    assert_eq!(held(&index, &prompt, 6), tiers(2, 2, 1));
    // Routed here: block 2 counts as on the GPU; block 3 is still loaded from host memory.
    index.record(6, chain(&[1, 2, 3])).unwrap();
    assert_eq!(held(&index, &prompt, 6), tiers(3, 1, 1));
}

#[test]
fn lookups_report_each_replicas_pool_room() {
    // 100 blocks a replica; a 4-block prompt recorded on replica 10 leaves it 96 spare blocks
    // (whole blocks only, none partial) and a reuse share just under 1.
    let index = start(2, 100);
    let a = chain(&[1, 2, 3, 4]);
    index.record(10, Arc::clone(&a)).ok();
    let room = held_with_room(&index, &a, 10)
        .room
        .expect("a recorded replica has a room");
    assert_eq!(room.free_blocks, 96);
    assert!(
        room.reuse_permille < 1000 && room.reuse_permille > 900,
        "{room:?}"
    );
    // Two replicas see the same two prompts; then replica 10 gets the older one again (every
    // block held, near the eviction end) and replica 11 a new one: 10's share stays higher.
    let b = chain(&[5, 6, 7, 8]);
    let c = chain(&[9, 10, 11, 12]);
    index.record(11, Arc::clone(&a)).ok();
    index.record(10, Arc::clone(&b)).ok();
    index.record(11, Arc::clone(&b)).ok();
    index.record(10, Arc::clone(&a)).ok();
    index.record(11, Arc::clone(&c)).ok();
    let again = held_with_room(&index, &a, 10).room.expect("room");
    let fresh = held_with_room(&index, &a, 11).room.expect("room");
    assert_eq!((again.free_blocks, fresh.free_blocks), (92, 88));
    assert!(
        again.reuse_permille > fresh.reuse_permille,
        "{again:?} against {fresh:?}"
    );
    // A replica nothing was routed to has no room to report.
    assert_eq!(held_with_room(&index, &a, 77).room, None);
}
