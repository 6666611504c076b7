use super::*;
use crate::index::reference::{RefBlocks, RefUndo};
use crate::prefix_hash::{block_hashes, HashSalt};
use proptest::prelude::*;

fn chain(tokens: &[u32]) -> Vec<BlockHash> {
    block_hashes(&HashSalt::new("m", None, None), tokens, 1)
}

fn h(v: u128) -> BlockHash {
    BlockHash(v)
}

#[test]
fn eviction_takes_the_tail_of_the_least_recent_prompt_first() {
    let a = chain(&[1, 2, 3, 4]);
    let b = chain(&[5, 6, 7, 8]);
    let c = chain(&[9, 10]);
    let mut r = ReplicaBlocks::new(8);
    r.record(&a);
    r.record(&b);
    let order: Vec<_> = r.iter_lru().collect();
    assert_eq!(order, vec![a[3], a[2], a[1], a[0], b[3], b[2], b[1], b[0]]);
    r.record(&c);
    assert!(!r.holds(&a[3]) && !r.holds(&a[2]));
    assert_eq!(r.matched_prefix(&a), 2);
    assert_eq!(r.matched_prefix(&b), 4);
    assert_eq!(r.len(), 8);
}

#[test]
fn shared_prefix_is_refreshed_and_matched() {
    let a = chain(&[1, 2, 3, 4, 5]);
    let b = chain(&[1, 2, 3, 9, 9, 9]);
    let mut r = ReplicaBlocks::new(100);
    r.record(&a);
    assert_eq!(r.matched_prefix(&b), 3);
    r.record(&b);
    assert_eq!(r.len(), 8);
    assert_eq!(r.matched_prefix(&b), 6);
    assert_eq!(r.matched_prefix(&a), 5);
    assert_eq!(r.matched_prefix(&[]), 0);
}

#[test]
fn a_prompt_longer_than_the_capacity_keeps_its_head() {
    let a = chain(&[1, 2, 3, 4, 5, 6]);
    let mut r = ReplicaBlocks::new(4);
    let undo = r.record(&a);
    assert_eq!(undo.len(), 4);
    assert_eq!(r.matched_prefix(&a), 4);
    let mut z = ReplicaBlocks::new(0);
    assert!(z.record(&a).is_empty());
    assert!(z.is_empty());
}

#[test]
fn take_back_right_after_a_record_restores_the_exact_order() {
    let a = chain(&[1, 2, 3, 4]);
    let b = chain(&[7, 8]);
    let c = chain(&[1, 2, 3, 4, 5, 6]);
    let mut r = ReplicaBlocks::new(100);
    r.record(&a);
    r.record(&b);
    let before: Vec<_> = r.iter_lru().collect();
    let undo = r.record(&c);
    r.take_back(&c, undo);
    assert_eq!(r.iter_lru().collect::<Vec<_>>(), before);
}

#[test]
fn take_back_keeps_what_a_later_record_touched() {
    let a = chain(&[1, 2, 3]);
    let b = chain(&[1, 2, 5]);
    let mut r = ReplicaBlocks::new(100);
    let ua = r.record(&a);
    r.record(&b);
    r.take_back(&a, ua);
    // a[0] and a[1] were recorded again by b: they stay; a[2] only a added: gone.
    assert_eq!(r.matched_prefix(&a), 2);
    assert_eq!(r.matched_prefix(&b), 3);
}

#[test]
fn a_token_from_another_shadow_does_nothing() {
    let a = chain(&[1, 2, 3]);
    let mut r1 = ReplicaBlocks::new(10);
    let mut r2 = ReplicaBlocks::new(10);
    let u1 = r1.record(&a);
    r2.record(&a);
    r2.take_back(&a, u1);
    assert_eq!(r2.matched_prefix(&a), 3);
    let u = r1.record(&a);
    r1.clear();
    r1.record(&a[..1]);
    r1.take_back(&a, u);
    assert_eq!(r1.matched_prefix(&a), 1);
}

#[test]
fn capacity_cut_evicts_and_compacts() {
    let mut r = ReplicaBlocks::new(20_000);
    for p in 0..1000u32 {
        r.record(&chain(&[p, 1, 2, 3, 4, 5, 6, 7, 8, 9]));
    }
    assert_eq!(r.len(), 10_000);
    r.set_capacity(25);
    assert_eq!(r.len(), 25);
    // The 25 most recent: all of prompts 998 and 999 plus the head of 997 (tails first).
    assert_eq!(
        r.matched_prefix(&chain(&[999, 1, 2, 3, 4, 5, 6, 7, 8, 9])),
        10
    );
    assert_eq!(
        r.matched_prefix(&chain(&[998, 1, 2, 3, 4, 5, 6, 7, 8, 9])),
        10
    );
    assert_eq!(
        r.matched_prefix(&chain(&[997, 1, 2, 3, 4, 5, 6, 7, 8, 9])),
        5
    );
    assert!(r.bytes() < 40_000, "{} bytes after compaction", r.bytes());
    r.record(&chain(&[5, 5]));
    assert_eq!(r.len(), 25);
    assert_eq!(r.iter_lru().count(), 25);
}

#[test]
fn bytes_per_block_at_100k_is_under_100() {
    let cap = 100_000;
    let mut r = ReplicaBlocks::new(cap);
    let blocks: Vec<BlockHash> = (0..cap as u128)
        .map(|i| h(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)))
        .collect();
    for chunk in blocks.chunks(500) {
        r.record(chunk);
    }
    assert_eq!(r.len(), cap);
    let per_block = r.bytes() as f64 / cap as f64;
    assert!(per_block <= 100.0, "{per_block} bytes per block");
}

/// Applies the same operations to the real shadow and the reference, comparing everything
/// observable after each one.
struct Pair {
    real: ReplicaBlocks,
    model: RefBlocks,
    tickets: Vec<Option<(Vec<BlockHash>, RecordUndo, RefUndo)>>,
}

#[derive(Debug, Clone)]
enum Op {
    Record(usize),
    TakeBack(usize),
    Clear,
    SetCapacity(usize),
}

impl Pair {
    fn new(capacity: usize) -> Pair {
        Pair {
            real: ReplicaBlocks::new(capacity),
            model: RefBlocks::new(capacity),
            tickets: Vec::new(),
        }
    }

    fn apply(&mut self, op: &Op, prompts: &[Vec<BlockHash>]) {
        match *op {
            Op::Record(p) => {
                let blocks = prompts[p % prompts.len()].clone();
                let u = self.real.record(&blocks);
                let m = self.model.record(&blocks);
                self.tickets.push(Some((blocks, u, m)));
            }
            Op::TakeBack(t) => {
                if self.tickets.is_empty() {
                    return;
                }
                let n = self.tickets.len();
                if let Some((blocks, u, m)) = self.tickets[t % n].take() {
                    self.real.take_back(&blocks, u);
                    self.model.take_back(m);
                }
            }
            Op::Clear => {
                self.real.clear();
                self.model.clear();
            }
            Op::SetCapacity(c) => {
                self.real.set_capacity(c);
                self.model.set_capacity(c);
            }
        }
    }

    fn check_order(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.real.len(), self.model.len());
        prop_assert!(self.real.len() <= self.real.capacity());
        prop_assert_eq!(
            self.real
                .iter_lru()
                .take(self.real.len() + 1)
                .collect::<Vec<_>>(),
            self.model.lru_order()
        );
        prop_assert!(
            (self.real.reuse() - self.model.reuse()).abs() < 1e-12,
            "reuse {} against the model's {}",
            self.real.reuse(),
            self.model.reuse()
        );
        Ok(())
    }
}

fn ops(max_capacity: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0usize..64).prop_map(Op::Record),
        3 => (0usize..64).prop_map(Op::TakeBack),
        1 => Just(Op::Clear),
        1 => (0..max_capacity).prop_map(Op::SetCapacity),
    ];
    prop::collection::vec(op, 1..60)
}

/// Prompts over a 3-letter alphabet, two tokens per block: many shared prefixes.
fn prompt_family() -> impl Strategy<Value = Vec<Vec<BlockHash>>> {
    prop::collection::vec(prop::collection::vec(0u32..3, 0..17), 1..12).prop_map(|ps| {
        let salt = HashSalt::new("m", None, None);
        ps.iter().map(|p| block_hashes(&salt, p, 2)).collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn replica_blocks_equals_the_reference_on_chains(
        prompts in prompt_family(), capacity in 0usize..24, ops in ops(24)
    ) {
        let mut pair = Pair::new(capacity);
        for op in &ops {
            pair.apply(op, &prompts);
            pair.check_order()?;
            for p in &prompts {
                prop_assert_eq!(pair.real.matched_prefix(p), pair.model.matched_prefix(p));
            }
        }
    }

    #[test]
    fn replica_blocks_equals_the_reference_on_arbitrary_slices(
        prompts in prop::collection::vec(prop::collection::vec((0u128..12).prop_map(BlockHash), 0..10), 1..8),
        capacity in 0usize..16, ops in ops(16)
    ) {
        // Not chains (repeats, shared middles): the order and contents must still match.
        let mut pair = Pair::new(capacity);
        for op in &ops {
            pair.apply(op, &prompts);
            pair.check_order()?;
            for v in 0..12u128 {
                prop_assert_eq!(pair.real.holds(&BlockHash(v)), pair.model.holds(&BlockHash(v)));
            }
        }
    }
}

/// vLLM's block pool for sequential requests, naively: a free queue of blocks that are either
/// unhashed (`None`) or cached under a hash. A request takes its longest held prefix out of the
/// queue (hits here are whole blocks; the last-token cap is the caller's), allocates its other blocks from the head
/// (evicting what they held), and on finishing puts its partial block back at the head and its
/// full blocks at the tail, last block first.
struct VllmPool {
    queue: std::collections::VecDeque<Option<BlockHash>>,
}

impl VllmPool {
    fn new(usable: usize) -> VllmPool {
        VllmPool {
            queue: (0..usable).map(|_| None).collect(),
        }
    }

    fn held(&self, b: &BlockHash) -> bool {
        self.queue.iter().any(|q| q.as_ref() == Some(b))
    }

    /// Runs one request of `full` blocks plus a partial one; returns the blocks it hit.
    fn run(&mut self, full: &[BlockHash], partial: bool) -> usize {
        let hits = full.iter().take_while(|b| self.held(b)).count();
        for b in &full[..hits] {
            let at = self.queue.iter().position(|q| q.as_ref() == Some(b));
            if let Some(at) = at {
                self.queue.remove(at);
            }
        }
        let new = full.len() - hits + usize::from(partial);
        for _ in 0..new {
            self.queue.pop_front();
        }
        if partial {
            self.queue.push_front(None);
        }
        for b in full.iter().rev() {
            self.queue.push_back(Some(*b));
        }
        hits
    }
}

proptest! {
    /// Sequential requests with shared prefixes and partial blocks: the shadow predicts exactly
    /// the hits vLLM's pool gives, and holds exactly the hashes it holds.
    #[test]
    fn record_prompt_mirrors_vllms_block_pool(
        capacity in 4usize..40,
        requests in proptest::collection::vec((0u32..4, 1usize..12, any::<bool>()), 1..60),
    ) {
        let mut pool = VllmPool::new(capacity);
        let mut shadow = ReplicaBlocks::new(capacity);
        for (root, len, partial) in requests {
            // Prompts share roots: `root` picks the first tokens, `len` how far the chain goes.
            let tokens: Vec<u32> = (0..len as u32).map(|i| root * 1000 + if i < 3 { i } else { i + root }).collect();
            let full = chain(&tokens);
            if full.len() + usize::from(partial) > capacity {
                continue;
            }
            let predicted = shadow.matched_prefix(&full);
            let real = pool.run(&full, partial);
            prop_assert_eq!(predicted, real);
            shadow.record_prompt(&full, partial);
            let mut held: Vec<u128> = pool.queue.iter().flatten().map(|b| b.0).collect();
            held.sort_unstable();
            let mut mine: Vec<u128> = shadow.iter_lru().map(|b| b.0).collect();
            mine.sort_unstable();
            prop_assert_eq!(mine, held);
        }
    }
}

#[test]
fn reuse_counts_hits_by_how_near_eviction_they_were() {
    let capacity = 64;
    let mut r = ReplicaBlocks::new(capacity);
    assert_eq!((r.reuse(), r.free_blocks()), (1.0, 64));
    // Nothing shared but the first block (a chat template's opening), as on W6: the shared
    // block is always the most recent, so its hits say nothing about the blocks that would go.
    for p in 0..40u32 {
        let tokens: Vec<u32> = std::iter::once(7)
            .chain((1..8).map(|t| 1_000 * (p + 1) + t))
            .collect();
        r.record(&chain(&tokens));
    }
    let one_offs = r.reuse();
    assert!(one_offs < 0.05, "{one_offs}");
    // Six prompts that fill the pool between them, sent in turn (as on W1): each hit is on a
    // block five prompts deep, near the eviction end, so the share climbs towards 1.
    let mut r = ReplicaBlocks::new(capacity);
    let prompts: Vec<Vec<BlockHash>> = (0..6)
        .map(|p| chain(&(0..10).map(|t| 1_000 * p + t).collect::<Vec<u32>>()))
        .collect();
    for p in &prompts {
        r.record(p);
    }
    let first_fill = r.reuse();
    assert!(first_fill < 0.5, "distinct prompts: {first_fill}");
    for _ in 0..6 {
        for p in &prompts {
            r.record(p);
        }
    }
    let cycling = r.reuse();
    assert!(cycling > 0.75, "{first_fill} -> {cycling}");
    // One prompt sent again and again: its hits are recent, and the blocks that would be
    // evicted (the other prompts, untouched since) are not the ones reused.
    for _ in 0..40 {
        r.record(&prompts[0]);
    }
    let sticky = r.reuse();
    assert!(sticky < 0.25, "{cycling} -> {sticky}");
    // An empty record changes nothing.
    r.record(&[]);
    assert_eq!(r.reuse(), sticky);
}
