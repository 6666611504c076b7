use super::*;
use crate::index::forest::{Forest, Walk};
use crate::prefix_hash::block_hashes;
use proptest::prelude::*;

const BS: usize = 4;

fn salt() -> HashSalt {
    HashSalt::new("m", None, None)
}

fn ids(range: std::ops::Range<u64>) -> Vec<EngineBlockId> {
    range.map(EngineBlockId::from_int).collect()
}

fn tokens(n_blocks: usize, seed: u32) -> Vec<u32> {
    (0..(n_blocks * BS) as u32).map(|t| t * 31 + seed).collect()
}

fn run<'a>(
    engine_ids: &'a [EngineBlockId],
    parent: Option<EngineBlockId>,
    token_ids: &'a [u32],
    medium: Medium,
) -> StoredBlocks<'a> {
    StoredBlocks {
        engine_ids,
        parent,
        token_ids,
        block_size: BS,
        salt: salt(),
        extra: &[],
        medium,
    }
}

#[test]
fn a_stored_prompt_matches_the_routers_own_hashes_of_it() {
    let mut m = EngineMirror::new(100);
    let t = tokens(6, 1);
    let first = ids(0..4);
    let names = m.stored(run(&first, None, &t[..16], Medium::Gpu)).unwrap();
    // The continuation names its blocks from the parent's chain value.
    let rest = ids(4..6);
    m.stored(run(&rest, Some(first[3]), &t[16..], Medium::Gpu))
        .unwrap();
    let prompt = block_hashes(&salt(), &t, BS);
    assert_eq!(names, prompt[..4]);
    assert_eq!(
        m.matched(&prompt),
        MirrorMatch {
            gpu: 6,
            cpu: 0,
            storage: 0
        }
    );
    // A longer prompt matches the held prefix; another salt matches nothing.
    let longer = block_hashes(&salt(), &[t.clone(), vec![9; 8]].concat(), BS);
    assert_eq!(m.matched(&longer).gpu, 6);
    let other = block_hashes(&HashSalt::new("m", None, Some("s")), &t, BS);
    assert_eq!(m.matched(&other), MirrorMatch::default());
    assert_eq!(m.len(), 6);
}

#[test]
fn copies_are_counted_and_the_last_removal_drops_the_block() {
    let mut m = EngineMirror::new(100);
    let t = tokens(2, 2);
    let id = ids(0..2);
    m.stored(run(&id, None, &t, Medium::Gpu)).unwrap();
    // vLLM re-stores a block under a new physical copy with the same hash.
    m.stored(run(&id[1..], Some(id[0]), &t[4..], Medium::Gpu))
        .unwrap();
    let prompt = block_hashes(&salt(), &t, BS);
    assert_eq!(m.removed(&id[1..], Medium::Gpu), 0);
    assert_eq!(m.matched(&prompt).gpu, 2, "one copy of block 1 is left");
    assert_eq!(m.removed(&id[1..], Medium::Gpu), 0);
    assert_eq!(m.matched(&prompt).gpu, 1);
    // A removal of something not held is counted, and changes nothing.
    assert_eq!(m.removed(&id[1..], Medium::Gpu), 1);
    assert_eq!(m.removed(&id[..1], Medium::Cpu), 1);
    assert_eq!(m.counters().unknown_removed, 2);
    assert_eq!(m.len(), 1);
}

#[test]
fn offloaded_blocks_count_as_held_but_not_on_the_gpu() {
    let mut m = EngineMirror::new(100);
    let t = tokens(4, 3);
    let id = ids(0..4);
    m.stored(run(&id, None, &t, Medium::Gpu)).unwrap();
    // The last two blocks are offloaded to CPU, then evicted from the GPU.
    m.stored(run(&id[2..], Some(id[1]), &t[8..], Medium::Cpu))
        .unwrap();
    m.removed(&id[2..], Medium::Gpu);
    let prompt = block_hashes(&salt(), &t, BS);
    assert_eq!(
        m.matched(&prompt),
        MirrorMatch {
            gpu: 2,
            cpu: 2,
            storage: 0
        }
    );
    assert_eq!(Medium::parse(Some("STORAGE")), Medium::Storage);
    assert_eq!(Medium::parse(Some("cpu")), Medium::Cpu);
    assert_eq!(Medium::parse(None), Medium::Gpu);
}

#[test]
fn past_the_gpu_run_each_block_counts_by_its_fastest_copy_up_to_a_hole() {
    let mut m = EngineMirror::new(100);
    let t = tokens(9, 7);
    let id = ids(0..9);
    let prompt = block_hashes(&salt(), &t, BS);
    // Blocks 0-1 on the GPU; 2 on the CPU; 3 on the GPU again (past the run); 4 in storage
    // and on the CPU; 5 in storage only; 6 nowhere; 7-8 on the GPU beyond the hole.
    m.stored(run(&id[..2], None, &t[..8], Medium::Gpu)).unwrap();
    for (b, medium) in [
        (2, Medium::Cpu),
        (3, Medium::Gpu),
        (4, Medium::Storage),
        (4, Medium::Cpu),
        (5, Medium::Storage),
        (6, Medium::Gpu),
        (7, Medium::Gpu),
        (8, Medium::Gpu),
    ] {
        let r = run(
            &id[b..b + 1],
            Some(id[b - 1]),
            &t[b * BS..(b + 1) * BS],
            medium,
        );
        m.stored(r).unwrap();
    }
    m.removed(&id[6..7], Medium::Gpu);
    let want = MirrorMatch {
        gpu: 2,
        cpu: 3,
        storage: 1,
    };
    assert_eq!(
        m.matched(&prompt),
        want,
        "the hole at block 6 ends the match"
    );
    // Storage only past the run, then the CPU copy goes: block 4 is priced as storage.
    m.removed(&id[4..5], Medium::Cpu);
    assert_eq!(
        m.matched(&prompt),
        MirrorMatch {
            gpu: 2,
            cpu: 2,
            storage: 2
        }
    );
    // A prompt whose first block is offloaded has no GPU run at all.
    m.removed(&id[..1], Medium::Gpu);
    m.stored(run(&id[..1], None, &t[..4], Medium::Storage))
        .unwrap();
    assert_eq!(
        m.matched(&prompt[..3]),
        MirrorMatch {
            gpu: 0,
            cpu: 2,
            storage: 1
        }
    );
}

#[test]
fn refusals_leave_the_mirror_as_it_was() {
    let mut m = EngineMirror::new(3);
    let t = tokens(4, 4);
    let id = ids(0..4);
    assert_eq!(
        m.stored(run(&id[1..], Some(id[0]), &t[4..], Medium::Gpu)),
        Err(StoreRefused::Orphan)
    );
    assert_eq!(
        m.stored(run(&id, None, &t[..15], Medium::Gpu)),
        Err(StoreRefused::Shape)
    );
    assert_eq!(
        m.stored(run(&id, None, &t, Medium::Gpu)),
        Err(StoreRefused::Full)
    );
    assert!(m.is_empty());
    m.stored(run(&id[..3], None, &t[..12], Medium::Gpu))
        .unwrap();
    // Re-storing held blocks is not growth.
    m.stored(run(&id[..3], None, &t[..12], Medium::Cpu))
        .unwrap();
    let c = m.counters();
    assert_eq!((c.orphans, c.malformed, c.full, c.stored), (1, 1, 1, 6));
    m.cleared();
    assert!(m.is_empty());
    assert_eq!(
        m.matched(&block_hashes(&salt(), &t, BS)),
        MirrorMatch::default()
    );
}

#[test]
fn extra_keys_set_a_block_apart_from_text_only_predictions() {
    let mut m = EngineMirror::new(100);
    let t = tokens(2, 5);
    let id = ids(0..2);
    let extra = [None, Some(77u128)];
    m.stored(StoredBlocks {
        extra: &extra,
        ..run(&id, None, &t, Medium::Gpu)
    })
    .unwrap();
    let prompt = block_hashes(&salt(), &t, BS);
    assert_eq!(m.matched(&prompt).gpu, 1);
}

#[test]
fn bytes_per_block_stay_bounded() {
    let n = 100_000u64;
    let mut m = EngineMirror::new(n as usize);
    let t = tokens(1, 6);
    for i in 0..n {
        let id = [EngineBlockId::from_int(i)];
        let salt = HashSalt::new("m", None, Some(&i.to_string()));
        m.stored(StoredBlocks {
            salt,
            ..run(&id, None, &t, Medium::Gpu)
        })
        .unwrap();
    }
    let per_block = m.bytes() / n as usize;
    // The worst shape: every block a chain of its own, so a forest node (80 bytes and its edge)
    // per block on top of its slot, engine entry and start entry.
    assert!(per_block < 256, "{per_block} bytes a block");
}

/// The naive answer for `prompt` from a multiset of (name, medium index) copies: the GPU run,
/// then up to the first block held nowhere, each block by its fastest copy.
fn naive_match(naive: &[(BlockHash, usize)], prompt: &[BlockHash]) -> MirrorMatch {
    let fastest = |h: &BlockHash| {
        naive
            .iter()
            .filter(|(x, _)| x == h)
            .map(|&(_, mi)| mi)
            .min()
    };
    let gpu = prompt.iter().take_while(|h| fastest(h) == Some(0)).count();
    let mut out = MirrorMatch {
        gpu,
        cpu: 0,
        storage: 0,
    };
    for h in &prompt[gpu..] {
        match fastest(h) {
            Some(0 | 1) => out.cpu += 1,
            Some(_) => out.storage += 1,
            None => break,
        }
    }
    out
}

/// One operation of a random event stream.
#[derive(Debug, Clone)]
enum Op {
    /// Store blocks `[from, from + n)` of prompt `p` in medium `m` (0 GPU, 1 CPU, 2 storage),
    /// the first with its parent when `from > 0`.
    Store {
        p: usize,
        from: usize,
        n: usize,
        medium: usize,
    },
    /// Remove one copy of block `b` of prompt `p` from medium `m`.
    Remove {
        p: usize,
        b: usize,
        medium: usize,
    },
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4usize, 0..6usize, 1..4usize, 0..3usize)
            .prop_map(|(p, from, n, medium)| Op::Store { p, from, n, medium }),
        4 => (0..4usize, 0..8usize, 0..3usize).prop_map(|(p, b, medium)| Op::Remove { p, b, medium }),
        1 => Just(Op::Clear),
    ]
}

proptest! {
    /// Against a naive multiset of (prompt, block, medium) copies: the mirror holds a block
    /// exactly while some copy of it is held, a run whose parent is not held is refused, and
    /// `matched` is the naive leading count for every prompt.
    #[test]
    fn agrees_with_a_naive_multiset(ops in proptest::collection::vec(op(), 0..80)) {
        const BLOCKS: usize = 8;
        let prompts: Vec<Vec<u32>> = (0..4).map(|p| tokens(BLOCKS, p as u32 * 1000)).collect();
        // Prompts 0 and 1 share their first two blocks' tokens.
        let mut prompts = prompts;
        let shared: Vec<u32> = prompts[0][..2 * BS].to_vec();
        prompts[1][..2 * BS].copy_from_slice(&shared);
        let names: Vec<Vec<BlockHash>> = prompts.iter().map(|t| block_hashes(&salt(), t, BS)).collect();
        // The engine names a block by its content: equal router names, equal engine ids.
        let eid = |p: usize, b: usize| EngineBlockId(names[p][b].0 ^ 0x5a5a);
        let mut naive: Vec<(BlockHash, usize)> = Vec::new(); // (name, medium index) per copy
        let mut m = EngineMirror::new(1_000);
        for o in ops {
            match o {
                Op::Store { p, from, n, medium } => {
                    let to = (from + n).min(BLOCKS);
                    let ids: Vec<EngineBlockId> = (from..to).map(|b| eid(p, b)).collect();
                    let parent = (from > 0).then(|| eid(p, from - 1));
                    let medium = Medium::ALL[medium];
                    let parent_held = from == 0 || naive.iter().any(|(h, _)| *h == names[p][from - 1]);
                    let r = m.stored(run(&ids, parent, &prompts[p][from * BS..to * BS], medium));
                    prop_assert_eq!(r.is_ok(), parent_held);
                    if parent_held {
                        for &h in &names[p][from..to] {
                            naive.push((h, medium.index()));
                        }
                    }
                }
                Op::Remove { p, b, medium } => {
                    let medium = Medium::ALL[medium];
                    let unknown = m.removed(&[eid(p, b)], medium);
                    match naive.iter().position(|&(h, mi)| h == names[p][b] && mi == medium.index()) {
                        Some(i) => {
                            naive.swap_remove(i);
                            prop_assert_eq!(unknown, 0);
                        }
                        None => prop_assert_eq!(unknown, 1),
                    }
                }
                Op::Clear => {
                    m.cleared();
                    naive.clear();
                }
            }
            m.forest().check();
            for prompt in &names {
                prop_assert_eq!(m.matched(prompt), naive_match(&naive, prompt));
            }
            let mut distinct: Vec<BlockHash> = naive.iter().map(|(h, _)| *h).collect();
            distinct.sort_by_key(|h| h.0);
            distinct.dedup();
            prop_assert_eq!(m.len(), distinct.len());
        }
    }
}

/// One operation on a forest shared by several members.
#[derive(Debug, Clone)]
enum SharedOp {
    /// Member `m` stores blocks `[from, from + n)` of prompt `p` under its id form `alias`.
    Store {
        m: usize,
        p: usize,
        from: usize,
        n: usize,
        medium: usize,
        alias: bool,
    },
    /// Member `m` removes one copy of blocks `[b, b + n)` of prompt `p` under its id form
    /// `alias`, in one event, listed last first when `desc`.
    Remove {
        m: usize,
        p: usize,
        b: usize,
        n: usize,
        desc: bool,
        medium: usize,
        alias: bool,
    },
    Clear {
        m: usize,
    },
}

const MEMBERS: usize = 3;

fn shared_op() -> impl Strategy<Value = SharedOp> {
    prop_oneof![
        8 => (0..MEMBERS, 0..4usize, 0..6usize, 1..5usize, 0..3usize, proptest::bool::weighted(0.2))
            .prop_map(|(m, p, from, n, medium, alias)| SharedOp::Store { m, p, from, n, medium, alias }),
        5 => (0..MEMBERS, 0..4usize, 0..8usize, 1..4usize, any::<bool>(), 0..3usize, proptest::bool::weighted(0.2))
            .prop_map(|(m, p, b, n, desc, medium, alias)| SharedOp::Remove { m, p, b, n, desc, medium, alias }),
        1 => (0..MEMBERS).prop_map(|m| SharedOp::Clear { m }),
    ]
}

proptest! {
    /// Several members in one forest, each against its own naive multiset of copies: one walk
    /// answers every member exactly as its multiset alone would, also when an engine names the
    /// same content under two ids (an alias), and the forest keeps its shape rules throughout.
    #[test]
    fn a_shared_forest_answers_each_member_as_its_own_mirror(
        ops in proptest::collection::vec(shared_op(), 0..120)
    ) {
        const BLOCKS: usize = 8;
        let mut prompts: Vec<Vec<u32>> = (0..4).map(|p| tokens(BLOCKS, p as u32 * 1000)).collect();
        // Prompts 0, 1 and 2 share their first blocks (3 and 1 of them).
        let head: Vec<u32> = prompts[0][..3 * BS].to_vec();
        prompts[1][..3 * BS].copy_from_slice(&head);
        prompts[2][..BS].copy_from_slice(&head[..BS]);
        let names: Vec<Vec<BlockHash>> = prompts.iter().map(|t| block_hashes(&salt(), t, BS)).collect();
        let eid = |p: usize, b: usize, alias: bool| {
            EngineBlockId(names[p][b].0 ^ if alias { 0xa11a5 } else { 0x5a5a })
        };
        let mut forest = Forest::new();
        let mut members: Vec<Member> = (0..MEMBERS)
            .map(|_| Member::join(&mut forest, 1_000).expect("a free bit"))
            .collect();
        // Per member: (engine id, name, medium index) per copy.
        let mut naive: Vec<Vec<(EngineBlockId, BlockHash, usize)>> = vec![Vec::new(); MEMBERS];
        let mut walk = Walk::default();
        for o in ops {
            match o {
                SharedOp::Store { m, p, from, n, medium, alias } => {
                    let to = (from + n).min(BLOCKS);
                    let ids: Vec<EngineBlockId> = (from..to).map(|b| eid(p, b, alias)).collect();
                    let parent = (from > 0).then(|| eid(p, from - 1, alias));
                    let medium = Medium::ALL[medium];
                    let parent_held = parent.is_none_or(|id| naive[m].iter().any(|c| c.0 == id));
                    let mut mirror = MemberMirror { forest: &mut forest, member: &mut members[m] };
                    let r = mirror.stored(run(&ids, parent, &prompts[p][from * BS..to * BS], medium));
                    prop_assert_eq!(r.is_ok(), parent_held);
                    if parent_held {
                        for (b, &id) in (from..to).zip(&ids) {
                            naive[m].push((id, names[p][b], medium.index()));
                        }
                    }
                }
                SharedOp::Remove { m, p, b, n, desc, medium, alias } => {
                    let medium = Medium::ALL[medium];
                    let mut ids: Vec<EngineBlockId> = (b..(b + n).min(BLOCKS)).map(|b| eid(p, b, alias)).collect();
                    if desc {
                        ids.reverse();
                    }
                    let mut mirror = MemberMirror { forest: &mut forest, member: &mut members[m] };
                    let unknown = mirror.removed(&ids, medium);
                    let mut naive_unknown = 0;
                    for id in ids {
                        match naive[m].iter().position(|c| c.0 == id && c.2 == medium.index()) {
                            Some(i) => {
                                naive[m].swap_remove(i);
                            }
                            None => naive_unknown += 1,
                        }
                    }
                    prop_assert_eq!(unknown, naive_unknown);
                }
                SharedOp::Clear { m } => {
                    MemberMirror { forest: &mut forest, member: &mut members[m] }.cleared();
                    naive[m].clear();
                }
            }
            forest.check();
            let mask = (1u64 << MEMBERS) - 1;
            for prompt in &names {
                forest.walk(prompt, mask, 0, &mut walk);
                for (m, member) in members.iter().enumerate() {
                    let copies: Vec<(BlockHash, usize)> = naive[m].iter().map(|c| (c.1, c.2)).collect();
                    prop_assert_eq!(walk.result(member.bit()), naive_match(&copies, prompt), "member {}", m);
                }
            }
            for (m, member) in members.iter().enumerate() {
                let mut distinct: Vec<EngineBlockId> = naive[m].iter().map(|c| c.0).collect();
                distinct.sort_by_key(|id| id.0);
                distinct.dedup();
                prop_assert_eq!(member.len(), distinct.len());
            }
        }
        // Members leaving release everything: the forest ends empty.
        for member in members {
            member.leave(&mut forest);
        }
        forest.check();
        prop_assert_eq!(forest.blocks(), 0);
        prop_assert!(forest.is_unused());
    }
}

#[test]
fn blocks_kept_only_as_a_path_to_a_held_tail_are_bounded() {
    // A publisher that stores chains and removes each one's head but keeps its tail: the heads
    // stay in the forest as the path to the tails, up to twice the capacity in all.
    let capacity = 10;
    let mut m = EngineMirror::new(capacity);
    let mut refused = 0;
    for round in 0..6u64 {
        let id = ids(round * 100..round * 100 + 10);
        let t = tokens(10, round as u32 * 7919);
        match m.stored(run(&id, None, &t, Medium::Gpu)) {
            Ok(_) => {
                assert_eq!(m.removed(&id[..9], Medium::Gpu), 0);
            }
            Err(e) => {
                assert_eq!(e, StoreRefused::Full);
                refused += 1;
            }
        }
        m.forest().check();
        assert!(
            m.forest().blocks() <= 2 * capacity,
            "{}",
            m.forest().blocks()
        );
    }
    assert!(refused > 0, "a store past the bound is refused");
    assert_eq!(m.counters().full, refused);
}
