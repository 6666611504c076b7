//! Tests of the block pool: vLLM behaviours one by one, and a property test against a naive
//! reference model (Vec-based, O(n) everything) written straight from vLLM's Python.
use inferrail_shards::block_hash::{
    extend_block_hashes, hash_block, prompt_block_hashes, BlockHash, ExtraKey,
};
use proptest::prelude::*;

use super::block_pool::*;

const BS: usize = 4;

fn pool(n: usize, caching: bool) -> BlockPool {
    BlockPool::new(n, BS, caching, true).unwrap()
}

fn toks(base: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| base + i).collect()
}

/// Admits a whole prompt in one chunk.
fn admit(p: &mut BlockPool, id: RequestId, t: &[u32]) -> Result<CacheHit, AllocError> {
    p.admit(id, t, &prompt_block_hashes(t, BS), usize::MAX, false)
}

fn removed(events: &[KvCacheEvent]) -> Vec<BlockHash> {
    events
        .iter()
        .filter_map(|e| match e {
            KvCacheEvent::BlockRemoved { block_hashes } => Some(block_hashes[0]),
            _ => None,
        })
        .collect()
}

#[test]
fn null_block_usage_and_config() {
    assert!(BlockPool::new(0, 4, true, false).is_err());
    assert!(BlockPool::new(4, 0, true, false).is_err());
    let mut p = pool(11, true);
    assert_eq!(
        (
            p.num_gpu_blocks(),
            p.num_usable_blocks(),
            p.num_free_blocks()
        ),
        (11, 10, 10)
    );
    assert_eq!(p.free_queue(), (1..11).collect::<Vec<_>>());
    assert_eq!(p.usage(), 0.0);
    admit(&mut p, 1, &toks(0, 10)).unwrap(); // 3 blocks
    assert_eq!(p.request_blocks(1), Some(&[1, 2, 3][..]));
    assert!((p.usage() - 0.3).abs() < 1e-12);
    assert_eq!(pool(1, true).usage(), 0.0);
    p.check_invariants().unwrap();
}

#[test]
fn shared_prefix_counted_once() {
    let mut p = pool(20, true);
    let mut a = toks(0, 12); // 3 full blocks
    let mut b = a.clone();
    a.extend([100, 101]);
    b.extend([200, 201, 202, 203, 204]);
    admit(&mut p, 1, &a).unwrap();
    let hit = admit(&mut p, 2, &b).unwrap();
    assert_eq!(hit.num_tokens, 12);
    let (ra, rb) = (
        p.request_blocks(1).unwrap().to_vec(),
        p.request_blocks(2).unwrap().to_vec(),
    );
    assert_eq!(ra[..3], rb[..3]);
    for &blk in &ra[..3] {
        assert_eq!(p.ref_count(blk), Some(2));
    }
    // 3 shared + 1 tail of a + 2 blocks of b's 17 tokens.
    assert_eq!(p.num_used_blocks(), 6);
    let s = p.prefix_cache_stats();
    assert_eq!((s.requests, s.queries, s.hits), (2, 14 + 17, 12));
    p.free(1);
    assert_eq!(p.ref_count(ra[0]), Some(1));
    assert_eq!(p.num_used_blocks(), 5);
    p.free(2);
    assert_eq!(p.num_free_blocks(), 19);
    p.check_invariants().unwrap();
}

#[test]
fn freed_blocks_serve_hits_until_reused() {
    let mut p = pool(7, true); // 6 usable
    let a = toks(0, 13); // 4 blocks, 3 full
    admit(&mut p, 1, &a).unwrap();
    p.free(1);
    assert_eq!(p.num_free_blocks(), 6);
    // Still cached while free: a repeat hits all 3 full blocks.
    let hit = admit(&mut p, 2, &a).unwrap();
    assert_eq!(hit.num_tokens, 12);
    assert_eq!(hit.blocks, vec![1, 2, 3]);
    p.free(2);
    // Fill the pool with other content: the free queue head is the never-used 5, 6, then the
    // uncached tail block 4 (prepended), then 3, 2, 1 (cached, tail first).
    assert_eq!(p.free_queue(), vec![4, 5, 6, 3, 2, 1]);
    p.take_events();
    admit(&mut p, 3, &toks(1000, 20)).unwrap(); // 5 blocks: 4, 5, 6, 3, 2
    let h = prompt_block_hashes(&a, BS);
    assert_eq!(removed(&p.take_events()), vec![h[2], h[1]]);
    p.free(3);
    // Block 1 (a's first block) survived and still hits; the rest of a misses.
    let hit = admit(&mut p, 4, &a).unwrap();
    assert_eq!(hit.blocks, vec![1]);
    p.check_invariants().unwrap();
}

#[test]
fn eviction_order_tail_blocks_of_older_request_first() {
    let mut p = pool(9, true); // 8 usable
    let a = toks(0, 12); // 3 full blocks; + 1 block needed? 12 tokens = 3 blocks exactly
    let b = toks(500, 12);
    admit(&mut p, 1, &a).unwrap(); // blocks 1, 2, 3
    admit(&mut p, 2, &b).unwrap(); // blocks 4, 5, 6
    p.free(1);
    p.free(2);
    // 7, 8 were never used; then a's blocks tail first, then b's.
    assert_eq!(p.free_queue(), vec![7, 8, 3, 2, 1, 6, 5, 4]);
    p.take_events();
    admit(&mut p, 3, &toks(9000, 24)).unwrap(); // 6 blocks
    let (ha, hb) = (prompt_block_hashes(&a, BS), prompt_block_hashes(&b, BS));
    assert_eq!(removed(&p.take_events()), vec![ha[2], ha[1], ha[0], hb[2]]);
    p.check_invariants().unwrap();
}

#[test]
fn fully_cached_prompt_recomputes_its_last_block() {
    let mut p = pool(20, true);
    let a = toks(0, 12); // exactly 3 blocks
    let h = prompt_block_hashes(&a, BS);
    admit(&mut p, 1, &a).unwrap();
    let ev = p.take_events();
    assert_eq!(
        ev,
        vec![KvCacheEvent::BlockStored {
            block_hashes: h.clone(),
            parent_block_hash: None,
            token_ids: a.clone(),
            block_size: BS,
            extra_keys: vec![None; 3],
        }]
    );
    p.free(1);
    let hit = admit(&mut p, 2, &a).unwrap();
    assert_eq!(hit.num_tokens, 8); // capped at 11 tokens -> 2 blocks
                                   // The last block is computed again in a new block and stored again, same hash.
    assert_eq!(
        p.take_events(),
        vec![KvCacheEvent::BlockStored {
            block_hashes: vec![h[2]],
            parent_block_hash: Some(h[1]),
            token_ids: a[8..].to_vec(),
            block_size: BS,
            extra_keys: vec![None],
        }]
    );
    let blocks = p.request_blocks(2).unwrap().to_vec();
    assert_eq!(blocks.len(), 3);
    assert_ne!(blocks[2], 3);
    assert_eq!(p.block_hash(3), Some(&h[2])); // the old copy stays cached (free)
    assert_eq!(p.block_hash(blocks[2]), Some(&h[2]));
    // One more token: every full block hits.
    let mut a2 = a.clone();
    a2.push(77);
    assert_eq!(
        p.get_computed_blocks(&prompt_block_hashes(&a2, BS), 13)
            .num_tokens,
        12
    );
    p.check_invariants().unwrap();
}

#[test]
fn decode_caches_blocks_it_completes() {
    let mut p = pool(20, true);
    let mut t = toks(0, 6);
    let mut h = prompt_block_hashes(&t, BS);
    p.admit(1, &t, &h, usize::MAX, false).unwrap();
    p.take_events();
    let mut computed = 6;
    for tok in [50, 51] {
        t.push(tok);
        extend_block_hashes(&mut h, &t, BS);
        let req = SlotRequest {
            request_id: 1,
            token_ids: &t,
            block_hashes: &h,
            num_computed_tokens: computed,
            num_new_tokens: 1,
            watermark_blocks: 0,
            cache_salt: None,
        };
        p.allocate_slots(&req, &CacheHit::none()).unwrap();
        computed += 1;
    }
    // Token 7 (index 7) fills block 1 when scheduled.
    assert_eq!(
        p.take_events(),
        vec![KvCacheEvent::BlockStored {
            block_hashes: vec![h[1]],
            parent_block_hash: Some(h[0]),
            token_ids: t[4..8].to_vec(),
            block_size: BS,
            extra_keys: vec![None],
        }]
    );
    // The next decode token needs a third block.
    t.push(52);
    extend_block_hashes(&mut h, &t, BS);
    let req = SlotRequest {
        request_id: 1,
        token_ids: &t,
        block_hashes: &h,
        num_computed_tokens: computed,
        num_new_tokens: 1,
        watermark_blocks: 0,
        cache_salt: None,
    };
    assert_eq!(p.allocate_slots(&req, &CacheHit::none()).unwrap().len(), 1);
    assert_eq!(p.request_blocks(1).unwrap().len(), 3);
    p.check_invariants().unwrap();
}

#[test]
fn chunked_prefill_and_no_space_changes_nothing() {
    let mut p = pool(5, true); // 4 usable
    let t = toks(0, 16);
    let h = prompt_block_hashes(&t, BS);
    let hit = p.admit(1, &t, &h, 6, false).unwrap(); // first chunk: 6 tokens -> 2 blocks
    assert_eq!(hit.num_tokens, 0);
    assert_eq!(p.request_blocks(1).unwrap().len(), 2);
    // Only block 0 is full so far.
    assert!(p.is_cached(&h[0]) && !p.is_cached(&h[1]));
    let other = toks(900, 12);
    let before = (p.free_queue(), p.prefix_cache_stats());
    let err = admit(&mut p, 2, &other).unwrap_err();
    assert_eq!(err, AllocError::NoSpace { needed: 3, free: 2 });
    assert_eq!((p.free_queue(), p.prefix_cache_stats()), before);
    assert!(p.request_blocks(2).is_none());
    let req = SlotRequest {
        request_id: 1,
        token_ids: &t,
        block_hashes: &h,
        num_computed_tokens: 6,
        num_new_tokens: 10,
        watermark_blocks: 0,
        cache_salt: None,
    };
    p.allocate_slots(&req, &CacheHit::none()).unwrap();
    assert_eq!(p.num_free_blocks(), 0);
    assert_eq!(p.num_cached_hashes(), 4);
    p.check_invariants().unwrap();
}

#[test]
fn no_prefix_caching_mode() {
    let mut p = pool(10, false);
    let a = toks(0, 12);
    admit(&mut p, 1, &a).unwrap();
    p.free(1);
    // Freed blocks go to the head (LIFO), tail first.
    assert_eq!(p.free_queue()[..3], [3, 2, 1]);
    let hit = admit(&mut p, 2, &a).unwrap();
    assert_eq!(hit, CacheHit::none());
    assert_eq!(p.request_blocks(2), Some(&[3, 2, 1][..]));
    assert_eq!(p.num_cached_hashes(), 0);
    assert!(p.take_events().is_empty());
    assert_eq!(p.prefix_cache_stats(), PrefixCacheStats::default());
    p.check_invariants().unwrap();
}

#[test]
fn reset_prefix_cache_only_when_idle() {
    let mut p = pool(10, true);
    let a = toks(0, 12);
    admit(&mut p, 1, &a).unwrap();
    p.take_events();
    assert!(!p.reset_prefix_cache());
    assert!(p.take_events().is_empty());
    p.free(1);
    assert!(p.reset_prefix_cache());
    assert_eq!(p.take_events(), vec![KvCacheEvent::AllBlocksCleared]);
    assert_eq!(p.num_cached_hashes(), 0);
    assert_eq!(admit(&mut p, 2, &a).unwrap().num_tokens, 0);
    // Cleared blocks were not "evicted": no BlockRemoved when reused.
    assert!(removed(&p.take_events()).is_empty());
    p.check_invariants().unwrap();
}

#[test]
fn preempted_requests_counted_apart() {
    let mut p = pool(10, true);
    let a = toks(0, 9);
    let h = prompt_block_hashes(&a, BS);
    p.admit(1, &a, &h, usize::MAX, false).unwrap();
    p.free(1);
    p.admit(1, &a, &h, usize::MAX, true).unwrap();
    let s = p.prefix_cache_stats();
    assert_eq!((s.requests, s.queries, s.hits), (1, 9, 0));
    assert_eq!(
        (s.preempted_requests, s.preempted_queries, s.preempted_hits),
        (1, 9, 8)
    );
}

#[test]
fn invalid_calls_are_rejected_without_change() {
    let mut p = pool(10, true);
    let a = toks(0, 12);
    let h = prompt_block_hashes(&a, BS);
    admit(&mut p, 1, &a).unwrap();
    p.free(1);
    let hit = p.get_computed_blocks(&h, 12);
    let req = |id| SlotRequest {
        request_id: id,
        token_ids: &a,
        block_hashes: &h[..1],
        num_computed_tokens: 0,
        num_new_tokens: 4,
        watermark_blocks: 0,
        cache_salt: None,
    };
    // Hashes must cover the blocks to cache.
    assert!(matches!(
        p.allocate_slots(&req(2), &hit),
        Err(AllocError::Invalid(_))
    ));
    // A stale hit (blocks reused since the lookup) is refused.
    admit(&mut p, 3, &toks(100, 32)).unwrap();
    let full = SlotRequest {
        block_hashes: &h,
        ..req(2)
    };
    assert!(matches!(
        p.allocate_slots(&full, &hit),
        Err(AllocError::Invalid(_))
    ));
    p.check_invariants().unwrap();
}

// ---- reference model -------------------------------------------------------------------------

/// vLLM's block pool, naively: Vec free queue (front = next out), Vec cache entries in
/// insertion order, linear scans everywhere.
struct RefPool {
    caching: bool,
    ref_cnt: Vec<u32>,
    hash: Vec<Option<BlockHash>>,
    free: Vec<BlockId>,
    cache: Vec<(BlockHash, BlockId)>,
    reqs: Vec<(RequestId, Vec<BlockId>, usize)>,
    events: Vec<KvCacheEvent>,
    stats: PrefixCacheStats,
}

impl RefPool {
    fn new(n: usize, caching: bool) -> Self {
        RefPool {
            caching,
            ref_cnt: vec![0; n],
            hash: vec![None; n],
            free: (1..n as BlockId).collect(),
            cache: Vec::new(),
            reqs: Vec::new(),
            events: Vec::new(),
            stats: PrefixCacheStats::default(),
        }
    }

    fn lookup(&self, hashes: &[BlockHash], num_tokens: usize) -> CacheHit {
        let mut blocks = Vec::new();
        if self.caching && num_tokens > 0 {
            for h in hashes.iter().take((num_tokens - 1) / BS) {
                match self.cache.iter().find(|(x, _)| x == h) {
                    Some(&(_, b)) => blocks.push(b),
                    None => break,
                }
            }
        }
        let num_tokens = blocks.len() * BS;
        CacheHit { blocks, num_tokens }
    }

    fn req_pos(&self, id: RequestId) -> Option<usize> {
        self.reqs.iter().position(|r| r.0 == id)
    }

    fn allocate(
        &mut self,
        r: &SlotRequest<'_>,
        hit: &CacheHit,
    ) -> Result<Vec<BlockId>, AllocError> {
        let pos = self.req_pos(r.request_id);
        let held = pos.map_or(0, |i| self.reqs[i].1.len());
        let total = r.num_computed_tokens + hit.num_tokens + r.num_new_tokens;
        let need_new = total.div_ceil(BS).saturating_sub(held + hit.blocks.len());
        let evictable = hit
            .blocks
            .iter()
            .filter(|&&b| self.ref_cnt[b as usize] == 0)
            .count();
        let needed = need_new + evictable + r.watermark_blocks;
        if needed > self.free.len() {
            return Err(AllocError::NoSpace {
                needed,
                free: self.free.len(),
            });
        }
        let i = match pos {
            Some(i) => i,
            None => {
                self.reqs.push((r.request_id, Vec::new(), 0));
                self.reqs.len() - 1
            }
        };
        if held == 0 {
            for &b in &hit.blocks {
                if self.ref_cnt[b as usize] == 0 {
                    self.free.retain(|&x| x != b);
                }
                self.ref_cnt[b as usize] += 1;
                self.reqs[i].1.push(b);
            }
            self.reqs[i].2 = hit.blocks.len();
        }
        let mut new = Vec::new();
        for _ in 0..need_new {
            let b = self.free.remove(0);
            if self.caching {
                if let Some(h) = self.hash[b as usize].take() {
                    let at = self
                        .cache
                        .iter()
                        .position(|&(x, y)| x == h && y == b)
                        .unwrap();
                    self.cache.remove(at);
                    self.events.push(KvCacheEvent::BlockRemoved {
                        block_hashes: vec![h],
                    });
                }
            }
            self.ref_cnt[b as usize] = 1;
            new.push(b);
            self.reqs[i].1.push(b);
        }
        let full = total.min(r.token_ids.len()) / BS;
        let start = self.reqs[i].2;
        if self.caching && start < full {
            for k in start..full {
                let b = self.reqs[i].1[k];
                self.hash[b as usize] = Some(r.block_hashes[k]);
                self.cache.push((r.block_hashes[k], b));
            }
            self.reqs[i].2 = full;
            self.events.push(KvCacheEvent::BlockStored {
                block_hashes: r.block_hashes[start..full].to_vec(),
                parent_block_hash: if start == 0 {
                    None
                } else {
                    Some(r.block_hashes[start - 1])
                },
                token_ids: r.token_ids[start * BS..full * BS].to_vec(),
                block_size: BS,
                // vLLM publishes the bare salt for the block at token 0, nothing for others.
                extra_keys: (start..full)
                    .map(|k| match r.cache_salt {
                        Some(salt) if k == 0 => Some(vec![ExtraKey::Str(salt.to_string())]),
                        _ => None,
                    })
                    .collect(),
            });
        }
        Ok(new)
    }

    fn free(&mut self, id: RequestId) {
        let Some(i) = self.req_pos(id) else { return };
        let (_, blocks, _) = self.reqs.remove(i);
        let mut first = Vec::new();
        for &b in blocks.iter().rev() {
            self.ref_cnt[b as usize] -= 1;
            if self.ref_cnt[b as usize] == 0 {
                if self.hash[b as usize].is_none() || !self.caching {
                    first.push(b);
                } else {
                    self.free.push(b);
                }
            }
        }
        first.append(&mut self.free);
        self.free = first;
    }

    fn reset(&mut self) -> bool {
        if self.ref_cnt.iter().any(|&r| r > 0) {
            return false;
        }
        self.cache.clear();
        self.hash.iter_mut().for_each(|h| *h = None);
        self.events.push(KvCacheEvent::AllBlocksCleared);
        true
    }
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        slot: usize,
        prefix: usize,
        len: usize,
        suffix: u32,
        chunk: usize,
        preempted: bool,
        salt: Option<&'static str>,
    },
    Step {
        slot: usize,
        tok: u32,
        chunk: usize,
    },
    Free {
        slot: usize,
    },
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            0..4usize,
            0..3usize,
            1..30usize,
            0..4u32,
            1..20usize,
            any::<bool>(),
            prop::option::of(prop::sample::select(vec!["a", "b"])),
        )
            .prop_map(|(slot, prefix, len, suffix, chunk, preempted, salt)| Op::Admit {
                slot,
                prefix,
                len,
                suffix,
                chunk,
                preempted,
                salt,
            }),
        4 => (0..4usize, 0..3u32, 1..8usize).prop_map(|(slot, tok, chunk)| Op::Step { slot, tok, chunk }),
        2 => (0..4usize).prop_map(|slot| Op::Free { slot }),
        1 => Just(Op::Reset),
    ]
}

/// Three overlapping prompt families: 0 and 1 share their first 10 tokens.
fn prompt(prefix: usize, len: usize, suffix: u32) -> Vec<u32> {
    let mut t: Vec<u32> = (0..len as u32)
        .map(|i| match prefix {
            0 => i % 7,
            1 if i < 10 => i % 7,
            1 => 100 + i,
            _ => 200 + i,
        })
        .collect();
    t.extend((0..suffix).map(|j| 300 + suffix * 10 + j));
    t
}

struct Live {
    id: RequestId,
    tokens: Vec<u32>,
    hashes: Vec<BlockHash>,
    computed: usize,
    salt: Option<&'static str>,
}

/// The scheduler's hashing: `extend_block_hashes`, the first block salted as vLLM does.
fn extend_salted(hashes: &mut Vec<BlockHash>, tokens: &[u32], salt: Option<&str>) {
    if let Some(salt) = salt {
        if hashes.is_empty() && tokens.len() >= BS {
            let extra = [ExtraKey::cache_salt(salt)];
            hashes.push(hash_block(None, &tokens[..BS], Some(&extra)));
        }
    }
    extend_block_hashes(hashes, tokens, BS);
}

fn run(n: usize, caching: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut p = BlockPool::new(n, BS, caching, true).unwrap();
    let mut r = RefPool::new(n, caching);
    let mut slots: Vec<Option<Live>> = (0..4).map(|_| None).collect();
    let mut next_id = 0;
    for op in ops {
        match op {
            Op::Admit {
                slot,
                prefix,
                len,
                suffix,
                chunk,
                preempted,
                salt,
            } if slots[slot].is_none() => {
                let tokens = prompt(prefix, len, suffix);
                let mut hashes = Vec::new();
                extend_salted(&mut hashes, &tokens, salt);
                let hit = p.get_computed_blocks(&hashes, tokens.len());
                prop_assert_eq!(&hit, &r.lookup(&hashes, tokens.len()));
                next_id += 1;
                let req = SlotRequest {
                    request_id: next_id,
                    token_ids: &tokens,
                    block_hashes: &hashes,
                    num_computed_tokens: 0,
                    num_new_tokens: (tokens.len() - hit.num_tokens).min(chunk),
                    watermark_blocks: 0,
                    cache_salt: salt,
                };
                let got = p.allocate_slots(&req, &hit);
                prop_assert_eq!(&got, &r.allocate(&req, &hit));
                if got.is_ok() {
                    p.record_prefix_cache_stats(tokens.len(), hit.num_tokens, preempted);
                    if caching {
                        let s = &mut r.stats;
                        if preempted {
                            s.preempted_requests += 1;
                            s.preempted_queries += tokens.len() as u64;
                            s.preempted_hits += hit.num_tokens as u64;
                        } else {
                            s.requests += 1;
                            s.queries += tokens.len() as u64;
                            s.hits += hit.num_tokens as u64;
                        }
                    }
                    let computed = hit.num_tokens + req.num_new_tokens;
                    slots[slot] = Some(Live {
                        id: next_id,
                        tokens,
                        hashes,
                        computed,
                        salt,
                    });
                }
            }
            Op::Admit { .. } => {}
            Op::Step { slot, tok, chunk } => {
                let Some(live) = slots[slot].as_mut() else {
                    continue;
                };
                let num_new = if live.computed < live.tokens.len() {
                    (live.tokens.len() - live.computed).min(chunk)
                } else {
                    live.tokens.push(500 + tok);
                    extend_salted(&mut live.hashes, &live.tokens, live.salt);
                    1
                };
                let req = SlotRequest {
                    request_id: live.id,
                    token_ids: &live.tokens,
                    block_hashes: &live.hashes,
                    num_computed_tokens: live.computed,
                    num_new_tokens: num_new,
                    watermark_blocks: 0,
                    cache_salt: live.salt,
                };
                let got = p.allocate_slots(&req, &CacheHit::none());
                prop_assert_eq!(&got, &r.allocate(&req, &CacheHit::none()));
                if got.is_ok() {
                    live.computed += num_new;
                }
            }
            Op::Free { slot } => {
                if let Some(live) = slots[slot].take() {
                    p.free(live.id);
                    r.free(live.id);
                }
            }
            Op::Reset => {
                prop_assert_eq!(p.reset_prefix_cache(), r.reset());
            }
        }
        // Same events (hence the same evicted hashes in the same order), same queue, same
        // counts and stats.
        prop_assert_eq!(p.take_events(), std::mem::take(&mut r.events));
        prop_assert_eq!(p.free_queue(), r.free.clone());
        prop_assert_eq!(p.num_free_blocks(), r.free.len());
        prop_assert_eq!(p.prefix_cache_stats(), r.stats);
        if let Err(e) = p.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
        // Ref counts equal the number of live requests holding each block.
        for b in 1..n as BlockId {
            let holders = slots
                .iter()
                .flatten()
                .filter(|l| p.request_blocks(l.id).is_some_and(|bl| bl.contains(&b)))
                .count() as u32;
            prop_assert_eq!(p.ref_count(b), Some(holders));
            prop_assert_eq!(p.ref_count(b), Some(r.ref_cnt[b as usize]));
            prop_assert!(!(p.free_queue().contains(&b) && holders > 0));
        }
        prop_assert_eq!(p.num_free_blocks() + p.num_used_blocks(), n - 1);
    }
    for live in slots.iter().flatten() {
        p.free(live.id);
    }
    prop_assert_eq!(p.num_free_blocks(), n - 1);
    prop_assert_eq!(p.num_requests(), 0);
    prop_assert!((1..n as BlockId).all(|b| p.ref_count(b) == Some(0)));
    prop_assert!(p.reset_prefix_cache());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn pool_matches_reference(
        n in 2..24usize,
        caching in prop::bool::weighted(0.8),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(n, caching, ops)?;
    }
}

// ---- replay of a real vLLM capture ---------------------------------------------------------

/// The HTTP requests a real vLLM 0.32.0 served (128 blocks of 32 tokens, one at a time) are
/// replayed through the pool step by step; the pool must publish the same KV events in the
/// same order (every BlockStored, every BlockRemoved, AllBlocksCleared), report the same
/// `cached_tokens` per request and the same prefix-cache counters as the server's /metrics.
#[test]
fn replays_vllm_capture_events_in_order() {
    use inferrail_shards::block_hash::{as_event_int, hash_block};

    const VBS: usize = 32;
    let data = include_str!("testdata/vllm_replay.txt");
    let nums = |s: &str| -> Vec<u64> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse().unwrap())
            .collect()
    };
    // (kind, parent, hashes, tokens)
    type Expected = (char, Option<u64>, Vec<u64>, Vec<u32>);
    let mut expected: Vec<Expected> = Vec::new();
    let mut script: Vec<Vec<&str>> = Vec::new();
    for line in data.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('|').collect();
        match f[0] {
            "S" => expected.push((
                'S',
                (f[1] != "-").then(|| f[1].parse().unwrap()),
                nums(f[2]),
                nums(f[3]).into_iter().map(|t| t as u32).collect(),
            )),
            "R" => expected.push(('R', None, nums(f[1]), vec![])),
            "C" => expected.push(('C', None, vec![], vec![])),
            _ => script.push(f),
        }
    }
    let as_tuple = |e: &KvCacheEvent| match e {
        KvCacheEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            extra_keys,
        } => {
            assert_eq!(*block_size, VBS);
            // Unsalted requests: no extra keys on any block.
            assert_eq!(extra_keys, &vec![None; block_hashes.len()]);
            assert_eq!(token_ids.len(), block_hashes.len() * VBS);
            let toks = if block_hashes.len() == 1 {
                token_ids.clone()
            } else {
                vec![]
            };
            (
                'S',
                parent_block_hash.as_ref().map(as_event_int),
                block_hashes.iter().map(as_event_int).collect(),
                toks,
            )
        }
        KvCacheEvent::BlockRemoved { block_hashes } => (
            'R',
            None,
            block_hashes.iter().map(as_event_int).collect(),
            vec![],
        ),
        KvCacheEvent::AllBlocksCleared => ('C', None, vec![], vec![]),
    };

    let mut p = BlockPool::new(128, VBS, true, true).unwrap();
    let mut pos = 0; // events matched so far
    let check = |p: &mut BlockPool, pos: &mut usize, what: &str| {
        for e in p.take_events() {
            assert_eq!(as_tuple(&e), expected[*pos], "event {} ({what})", *pos);
            *pos += 1;
        }
    };
    let mut next_id = 0;
    for f in &script {
        if f[0] == "X" {
            assert!(p.reset_prefix_cache());
            continue;
        }
        let (tag, n): (&str, usize) = (f[1], f[2].parse().unwrap());
        let outputs: usize = if f[4] == "-" {
            f[3].parse().unwrap()
        } else {
            f[4].parse().unwrap()
        };
        let prompt: Vec<u32> = nums(f[6]).into_iter().map(|t| t as u32).collect();
        // echo + logprobs asks for prompt logprobs, which skips the prefix-cache lookup.
        let skip_lookup = tag.contains("logprobs_echo");
        let mut live = Vec::new();
        for _ in 0..n {
            next_id += 1;
            let hashes = prompt_block_hashes(&prompt, VBS);
            let hit = if skip_lookup {
                CacheHit::none()
            } else {
                p.get_computed_blocks(&hashes, prompt.len())
            };
            let req = SlotRequest {
                request_id: next_id,
                token_ids: &prompt,
                block_hashes: &hashes,
                num_computed_tokens: 0,
                num_new_tokens: prompt.len() - hit.num_tokens,
                watermark_blocks: 0,
                cache_salt: None,
            };
            p.allocate_slots(&req, &hit).unwrap();
            if !skip_lookup {
                p.record_prefix_cache_stats(prompt.len(), hit.num_tokens, false);
            }
            if f[5] != "-" && n == 1 {
                assert_eq!(hit.num_tokens.to_string(), f[5], "{tag} cached_tokens");
            }
            check(&mut p, &mut pos, tag);
            live.push((next_id, prompt.clone(), hashes));
        }
        for (id, tokens, hashes) in &mut live {
            // The prefill sampled the first token; each decode step computes the last one.
            tokens.push(1);
            for _ in 1..outputs {
                if tokens.len() % VBS == 0 {
                    // This step fills a block with generated tokens: vLLM's event says which.
                    let (kind, _, _, want) = &expected[pos];
                    assert_eq!(*kind, 'S');
                    let start = tokens.len() - VBS;
                    assert_eq!(want[..prompt.len().saturating_sub(start)], prompt[start..]);
                    tokens[start..].copy_from_slice(want);
                    let parent = hashes.last().copied();
                    hashes.push(hash_block(parent.as_ref(), &tokens[start..], None));
                }
                let req = SlotRequest {
                    request_id: *id,
                    token_ids: tokens,
                    block_hashes: hashes,
                    num_computed_tokens: tokens.len() - 1,
                    num_new_tokens: 1,
                    watermark_blocks: 0,
                    cache_salt: None,
                };
                p.allocate_slots(&req, &CacheHit::none()).unwrap();
                check(&mut p, &mut pos, tag);
                tokens.push(1);
            }
        }
        for (id, _, _) in &live {
            p.free(*id);
        }
        p.check_invariants().unwrap();
    }
    assert_eq!(
        pos,
        expected.len(),
        "all {} events reproduced",
        expected.len()
    );
    // /metrics after the run: vllm:prefix_cache_queries_total 6937, hits_total 832, usage 0.
    let s = p.prefix_cache_stats();
    assert_eq!((s.queries, s.hits), (6937, 832));
    assert_eq!(p.usage(), 0.0);
}
