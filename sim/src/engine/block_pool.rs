//! The KV block pool with prefix caching, with vLLM V1's semantics (vLLM 0.32:
//! `vllm/v1/core/block_pool.py`, `FreeKVCacheBlockQueue` in `kv_cache_utils.py`,
//! `FullAttentionManager` in `single_type_kv_cache_manager.py`, `KVCacheManager` in
//! `kv_cache_manager.py`), for one full-attention KV cache group whose block size is the hash
//! block size.
//!
//! What it reproduces:
//! - **Blocks.** `num_gpu_blocks` blocks with ids `0..num_gpu_blocks`; block 0 is vLLM's null
//!   block, never handed out, so `num_gpu_blocks - 1` are usable. Each block has a ref count
//!   (the number of live requests holding it) and, once cached, the [`BlockHash`] of its
//!   content.
//! - **Free queue.** Free blocks (ref count 0) form one queue in eviction order, initially by
//!   block id. New blocks are taken from its head; a taken block that still holds a hash is
//!   evicted from the cache then (a [`KvCacheEvent::BlockRemoved`] per physical block).
//! - **Free.** A finished (or preempted) request releases its blocks in reverse order (tail
//!   first). Those reaching ref count 0 keep their hash and go to the queue's tail, so they serve
//!   later hits until reused, and a request's tail blocks are evicted before its head blocks.
//!   Blocks without a hash (a partial last block), and every block when prefix caching is off,
//!   go to the queue's *head* instead (vLLM reuses them LIFO).
//! - **Hits.** A new request's longest prefix of cached full blocks is a hit, capped at
//!   `num_tokens - 1` tokens (the last token must be computed to get logits, so a prompt that
//!   is entirely cached recomputes its whole last block). Hit blocks with ref count 0 leave the
//!   free queue ("touch"). Two running requests with the same prefix share blocks (ref 2).
//! - **Caching.** Blocks are cached as soon as the tokens filling them are *scheduled*
//!   (`allocate_slots` caches up to `min(computed + new, num_tokens)` tokens), including blocks
//!   completed during decode, with one [`KvCacheEvent::BlockStored`] per call. Identical
//!   content in another physical block is cached again (duplicates are not merged) and a lookup
//!   returns the first block cached under a hash.
//! - **Usage** is `1 - free / (num_gpu_blocks - 1)`; prefix-cache stats count tokens as vLLM's
//!   `PrefixCacheStats` does (queries = prompt tokens, hits = hit tokens, recorded once per
//!   admitted request, preempted requests counted apart).
//!
//! Call order per scheduling step, as vLLM's scheduler does: for a waiting request,
//! [`BlockPool::get_computed_blocks`], then [`BlockPool::allocate_slots`] with that hit, then
//! (on success) [`BlockPool::record_prefix_cache_stats`]; for a running request,
//! [`BlockPool::allocate_slots`] with [`CacheHit::none`]; [`BlockPool::free`] when it finishes
//! or is preempted. [`BlockPool::admit`] bundles the first three.

use std::collections::HashMap;

pub use inferrail_shards::block_hash::{BlockHash, ExtraKey};

/// A block's index in the pool (0 is the null block).
pub type BlockId = u32;

/// The pool's name for a request (the simulator maps vLLM's string ids onto these).
pub type RequestId = u64;

const NIL: u32 = u32::MAX;

/// A KV cache event in vLLM's order, carrying full digests (see
/// `inferrail_shards::block_hash::as_event_int` for the value on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvCacheEvent {
    /// Newly cached full blocks of one request, in order.
    BlockStored {
        /// One hash per block.
        block_hashes: Vec<BlockHash>,
        /// The hash of the block before the first one, `None` when the first is block 0.
        parent_block_hash: Option<BlockHash>,
        /// The tokens of all the blocks (`block_hashes.len() * block_size`).
        token_ids: Vec<u32>,
        /// Tokens per block.
        block_size: usize,
        /// Per block, the extra keys vLLM publishes for it (`None` for a block without any):
        /// a salted request's first block carries `[salt]` (the bare salt, not the
        /// `("cache_salt", salt)` tuple its hash uses), every other block `None`.
        extra_keys: Vec<Option<Vec<ExtraKey>>>,
    },
    /// A cached block was reused for other content (one event per physical block).
    BlockRemoved {
        /// The evicted block's hash.
        block_hashes: Vec<BlockHash>,
    },
    /// [`BlockPool::reset_prefix_cache`] succeeded.
    AllBlocksCleared,
}

/// Prefix-cache counters, cumulative, in tokens, as vLLM's `PrefixCacheStats::record` counts
/// them. `queries` and `hits` feed `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Admitted requests that were never preempted.
    pub requests: u64,
    /// Their tokens at admission (`request.num_tokens`).
    pub queries: u64,
    /// Their prefix-cache hit tokens.
    pub hits: u64,
    /// Admissions of previously preempted requests.
    pub preempted_requests: u64,
    /// Their tokens at re-admission.
    pub preempted_queries: u64,
    /// Their hit tokens.
    pub preempted_hits: u64,
}

/// The result of a prefix-cache lookup: the hit blocks, in order, and the tokens they cover.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheHit {
    /// The cached blocks making up the hit, block 0 first.
    pub blocks: Vec<BlockId>,
    /// `blocks.len() * block_size`.
    pub num_tokens: usize,
}

impl CacheHit {
    /// No hit (what a running request, or a pool without prefix caching, passes).
    pub fn none() -> Self {
        CacheHit::default()
    }
}

/// One `allocate_slots` call: a request's state before this step and the tokens to schedule.
#[derive(Debug, Clone, Copy)]
pub struct SlotRequest<'a> {
    /// The request.
    pub request_id: RequestId,
    /// Every token of the request known so far (prompt, then generated): vLLM's
    /// `request.all_token_ids`. Its length is `request.num_tokens`.
    pub token_ids: &'a [u32],
    /// The chained hashes of the full blocks of `token_ids` (at least those that this step
    /// completes; see `inferrail_shards::block_hash::extend_block_hashes`). Ignored when prefix
    /// caching is off.
    pub block_hashes: &'a [BlockHash],
    /// Tokens already computed before this step, not counting the hit
    /// (`request.num_computed_tokens`; 0 for a new or preempted request).
    pub num_computed_tokens: usize,
    /// Tokens to compute this step (a prefill chunk, or 1 when decoding).
    pub num_new_tokens: usize,
    /// Free blocks to leave untouched (vLLM's watermark for waiting requests; 0 by default).
    pub watermark_blocks: usize,
    /// The request's `cache_salt`: published as the extra keys of its first block (tokens
    /// `0..block_size`) when that block is stored. It must already be part of `block_hashes`.
    pub cache_salt: Option<&'a str>,
}

/// Why `allocate_slots` allocated nothing. The pool is unchanged in every case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Not enough free blocks: the scheduler must wait or preempt.
    #[error("need {needed} free KV blocks, {free} available")]
    NoSpace {
        /// Blocks the step needs (new blocks, hit blocks leaving the free queue, watermark).
        needed: usize,
        /// Free blocks in the pool.
        free: usize,
    },
    /// The call breaks the API's contract (described in the message).
    #[error("invalid allocate_slots call: {0}")]
    Invalid(&'static str),
}

/// Why a pool could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolConfigError {
    /// `num_gpu_blocks` must be at least 1 (the null block) and fit a `u32`.
    #[error("num_gpu_blocks must be in 1..u32::MAX, got {0}")]
    NumBlocks(usize),
    /// `block_size` must be positive.
    #[error("block_size must be positive")]
    BlockSize,
}

#[derive(Debug, Clone, Default)]
struct ReqBlocks {
    blocks: Vec<BlockId>,
    /// Leading blocks already cached (hit or stored): `num_cached_block` in vLLM.
    num_cached: usize,
}

/// vLLM's `FreeKVCacheBlockQueue`: a doubly linked list over block ids with O(1) pop, remove,
/// append and prepend. Nodes `n` and `n + 1` are the fake head and tail.
#[derive(Debug, Clone)]
struct FreeQueue {
    prev: Vec<u32>,
    next: Vec<u32>,
    len: usize,
}

impl FreeQueue {
    /// A queue of blocks `first..n` in id order.
    fn new(n: usize, first: usize) -> Self {
        let head = n as u32;
        let tail = head + 1;
        let mut q = FreeQueue {
            prev: vec![NIL; n + 2],
            next: vec![NIL; n + 2],
            len: 0,
        };
        q.next[head as usize] = tail;
        q.prev[tail as usize] = head;
        for b in first..n {
            q.link_before(tail, b as u32);
        }
        q
    }

    fn head(&self) -> u32 {
        (self.prev.len() - 2) as u32
    }

    fn tail(&self) -> u32 {
        (self.prev.len() - 1) as u32
    }

    fn contains(&self, b: BlockId) -> bool {
        self.prev[b as usize] != NIL
    }

    fn link_before(&mut self, at: u32, b: u32) {
        let p = self.prev[at as usize];
        self.next[p as usize] = b;
        self.prev[b as usize] = p;
        self.next[b as usize] = at;
        self.prev[at as usize] = b;
        self.len += 1;
    }

    fn remove(&mut self, b: BlockId) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
        self.prev[b as usize] = NIL;
        self.next[b as usize] = NIL;
        self.len -= 1;
    }

    fn pop_front(&mut self) -> Option<BlockId> {
        let first = self.next[self.head() as usize];
        if first == self.tail() {
            return None;
        }
        self.remove(first);
        Some(first)
    }

    /// Puts `blocks` at the front, `blocks[0]` first.
    fn prepend_n(&mut self, blocks: &[BlockId]) {
        let first = self.next[self.head() as usize];
        for &b in blocks {
            self.link_before(first, b);
        }
    }

    fn append_n(&mut self, blocks: &[BlockId]) {
        let tail = self.tail();
        for &b in blocks {
            self.link_before(tail, b);
        }
    }

    fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        let tail = self.tail();
        let mut cur = self.next[self.head() as usize];
        std::iter::from_fn(move || {
            if cur == tail {
                return None;
            }
            let b = cur;
            cur = self.next[cur as usize];
            Some(b)
        })
    }
}

/// The KV block pool (see the module docs for the semantics).
#[derive(Debug, Clone)]
pub struct BlockPool {
    block_size: usize,
    enable_caching: bool,
    enable_events: bool,
    ref_cnt: Vec<u32>,
    hash: Vec<Option<BlockHash>>,
    free: FreeQueue,
    /// Cached full blocks by hash, in caching order (a lookup takes the first).
    cached: HashMap<BlockHash, Vec<BlockId>>,
    requests: HashMap<RequestId, ReqBlocks>,
    events: Vec<KvCacheEvent>,
    stats: PrefixCacheStats,
    num_evicted: u64,
}

impl BlockPool {
    /// A pool of `num_gpu_blocks` blocks (vLLM's `num_gpu_blocks`, including the null block) of
    /// `block_size` tokens. `enable_caching` is `--enable-prefix-caching` (vLLM's default);
    /// `enable_events` records [`KvCacheEvent`]s for [`BlockPool::take_events`].
    pub fn new(
        num_gpu_blocks: usize,
        block_size: usize,
        enable_caching: bool,
        enable_events: bool,
    ) -> Result<Self, PoolConfigError> {
        if num_gpu_blocks == 0 || num_gpu_blocks >= (u32::MAX - 2) as usize {
            return Err(PoolConfigError::NumBlocks(num_gpu_blocks));
        }
        if block_size == 0 {
            return Err(PoolConfigError::BlockSize);
        }
        Ok(BlockPool {
            block_size,
            enable_caching,
            enable_events,
            ref_cnt: vec![0; num_gpu_blocks],
            hash: vec![None; num_gpu_blocks],
            free: FreeQueue::new(num_gpu_blocks, 1),
            cached: HashMap::new(),
            requests: HashMap::new(),
            events: Vec::new(),
            stats: PrefixCacheStats::default(),
            num_evicted: 0,
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Whether prefix caching is on.
    pub fn caching_enabled(&self) -> bool {
        self.enable_caching
    }

    /// All blocks, the null block included (vLLM's `num_gpu_blocks`).
    pub fn num_gpu_blocks(&self) -> usize {
        self.ref_cnt.len()
    }

    /// Blocks that can hold KV: `num_gpu_blocks - 1`.
    pub fn num_usable_blocks(&self) -> usize {
        self.ref_cnt.len() - 1
    }

    /// Blocks in the free queue (including cached blocks with ref count 0).
    pub fn num_free_blocks(&self) -> usize {
        self.free.len
    }

    /// Usable blocks held by at least one request.
    pub fn num_used_blocks(&self) -> usize {
        self.num_usable_blocks() - self.free.len
    }

    /// vLLM's `kv_cache_usage` (`vllm:kv_cache_usage_perc`): `1 - free / (num_gpu_blocks - 1)`,
    /// 0 for a pool with only the null block.
    pub fn usage(&self) -> f64 {
        let total = self.num_usable_blocks();
        if total == 0 {
            return 0.0;
        }
        1.0 - self.free.len as f64 / total as f64
    }

    /// The cumulative prefix-cache counters.
    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// Cached blocks evicted so far (blocks reused while holding a hash).
    pub fn num_evicted_blocks(&self) -> u64 {
        self.num_evicted
    }

    /// A block's ref count (`None` for an unknown id).
    pub fn ref_count(&self, block: BlockId) -> Option<u32> {
        self.ref_cnt.get(block as usize).copied()
    }

    /// The hash a block holds, if it is cached (ref count 0 or not).
    pub fn block_hash(&self, block: BlockId) -> Option<&BlockHash> {
        self.hash.get(block as usize).and_then(Option::as_ref)
    }

    /// Whether some block is cached under `hash`.
    pub fn is_cached(&self, hash: &BlockHash) -> bool {
        self.cached.contains_key(hash)
    }

    /// Distinct hashes in the cache.
    pub fn num_cached_hashes(&self) -> usize {
        self.cached.len()
    }

    /// The blocks a request holds, block 0 first (`None` if it holds none).
    pub fn request_blocks(&self, request_id: RequestId) -> Option<&[BlockId]> {
        self.requests.get(&request_id).map(|r| r.blocks.as_slice())
    }

    /// Requests holding blocks.
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }

    /// The free queue in eviction order (next block handed out first). O(free blocks).
    pub fn free_queue(&self) -> Vec<BlockId> {
        self.free.iter().collect()
    }

    /// The longest cached prefix of a request's full blocks (`block_hashes`, chained from block
    /// 0), capped at `num_tokens - 1` tokens (`num_tokens` = the request's tokens). Only
    /// looks; empty when prefix caching is off. Pass the result to
    /// [`BlockPool::allocate_slots`] before changing the pool.
    pub fn get_computed_blocks(&self, block_hashes: &[BlockHash], num_tokens: usize) -> CacheHit {
        if !self.enable_caching || num_tokens == 0 {
            return CacheHit::none();
        }
        let max_blocks = (num_tokens - 1) / self.block_size;
        let blocks: Vec<BlockId> = block_hashes
            .iter()
            .take(max_blocks)
            .map_while(|h| self.cached.get(h).and_then(|ids| ids.first().copied()))
            .collect();
        let num_tokens = blocks.len() * self.block_size;
        CacheHit { blocks, num_tokens }
    }

    /// Gives a request slots for `num_new_tokens` more tokens (vLLM's `allocate_slots`).
    ///
    /// For a request that holds no blocks yet, `hit` (from [`BlockPool::get_computed_blocks`]
    /// on the unchanged pool) is taken: its blocks are touched and become the request's first
    /// blocks. Then new blocks are taken from the free queue head (evicting their old hashes)
    /// until the request has `ceil((computed + hit + new) / block_size)` blocks, and every block
    /// full of scheduled tokens is cached (one `BlockStored` event). Returns the new blocks.
    ///
    /// Fails without changing anything when the free blocks (minus `watermark_blocks`) cannot
    /// cover the new blocks plus the hit blocks that must leave the free queue.
    pub fn allocate_slots(
        &mut self,
        req: &SlotRequest<'_>,
        hit: &CacheHit,
    ) -> Result<Vec<BlockId>, AllocError> {
        let bs = self.block_size;
        let existing = self.requests.get(&req.request_id);
        let running = existing.is_some_and(|r| !r.blocks.is_empty());
        if running && !hit.blocks.is_empty() {
            return Err(AllocError::Invalid(
                "a request holding blocks cannot take a cache hit",
            ));
        }
        if hit.num_tokens != hit.blocks.len() * bs {
            return Err(AllocError::Invalid(
                "hit.num_tokens must be hit.blocks.len() * block_size",
            ));
        }
        if req.num_new_tokens == 0 && hit.blocks.is_empty() {
            return Err(AllocError::Invalid("num_new_tokens must be positive"));
        }
        let total_computed = req.num_computed_tokens + hit.num_tokens;
        let num_tokens_need_slot = total_computed + req.num_new_tokens;
        let num_tokens_to_cache = num_tokens_need_slot.min(req.token_ids.len());
        let num_full = num_tokens_to_cache / bs;
        if self.enable_caching {
            if req.block_hashes.len() < num_full {
                return Err(AllocError::Invalid(
                    "block_hashes must cover every full block",
                ));
            }
            // The hit must still be what get_computed_blocks saw.
            for (i, &b) in hit.blocks.iter().enumerate() {
                let ok = (b as usize) < self.hash.len()
                    && b != 0
                    && self.hash[b as usize].as_ref() == req.block_hashes.get(i);
                if !ok {
                    return Err(AllocError::Invalid("stale cache hit"));
                }
            }
        } else if !hit.blocks.is_empty() {
            return Err(AllocError::Invalid("no cache hits without prefix caching"));
        }

        let held = existing.map_or(0, |r| r.blocks.len());
        let required = num_tokens_need_slot.div_ceil(bs);
        let num_new_blocks = required.saturating_sub(held + hit.blocks.len());
        let evictable = hit
            .blocks
            .iter()
            .filter(|&&b| self.ref_cnt[b as usize] == 0)
            .count();
        let needed = num_new_blocks + evictable + req.watermark_blocks;
        if needed > self.free.len {
            return Err(AllocError::NoSpace {
                needed,
                free: self.free.len,
            });
        }

        let entry = self.requests.entry(req.request_id).or_default();
        if !running {
            // add_local_computed_blocks: touch the hit, mark it cached.
            for &b in &hit.blocks {
                if self.ref_cnt[b as usize] == 0 {
                    self.free.remove(b);
                }
                self.ref_cnt[b as usize] += 1;
            }
            entry.blocks.extend_from_slice(&hit.blocks);
            entry.num_cached = hit.blocks.len();
        }

        let mut new_blocks = Vec::with_capacity(num_new_blocks);
        for _ in 0..num_new_blocks {
            let Some(b) = self.free.pop_front() else {
                return Err(AllocError::Invalid("free queue out of sync"));
            };
            if self.enable_caching {
                if let Some(h) = self.hash[b as usize].take() {
                    remove_cached(&mut self.cached, &h, b);
                    self.num_evicted += 1;
                    if self.enable_events {
                        self.events.push(KvCacheEvent::BlockRemoved {
                            block_hashes: vec![h],
                        });
                    }
                }
            }
            self.ref_cnt[b as usize] = 1;
            new_blocks.push(b);
        }
        let entry = self.requests.entry(req.request_id).or_default();
        entry.blocks.extend_from_slice(&new_blocks);

        if self.enable_caching && entry.num_cached < num_full {
            let start = entry.num_cached;
            for i in start..num_full {
                let b = entry.blocks[i];
                let h = req.block_hashes[i];
                self.hash[b as usize] = Some(h);
                self.cached.entry(h).or_default().push(b);
            }
            entry.num_cached = num_full;
            if self.enable_events {
                self.events.push(KvCacheEvent::BlockStored {
                    block_hashes: req.block_hashes[start..num_full].to_vec(),
                    parent_block_hash: start.checked_sub(1).map(|p| req.block_hashes[p]),
                    token_ids: req.token_ids[start * bs..num_full * bs].to_vec(),
                    block_size: bs,
                    extra_keys: (start..num_full)
                        .map(|i| block_extra_keys(i, req.cache_salt))
                        .collect(),
                });
            }
        }
        Ok(new_blocks)
    }

    /// Counts an admitted request in the prefix-cache stats (vLLM records it once the request is
    /// scheduled, not at every lookup): `num_tokens` queried, `num_hits` hit. No-op without
    /// prefix caching.
    pub fn record_prefix_cache_stats(
        &mut self,
        num_tokens: usize,
        num_hits: usize,
        preempted: bool,
    ) {
        if !self.enable_caching {
            return;
        }
        let s = &mut self.stats;
        if preempted {
            s.preempted_requests += 1;
            s.preempted_queries += num_tokens as u64;
            s.preempted_hits += num_hits as u64;
        } else {
            s.requests += 1;
            s.queries += num_tokens as u64;
            s.hits += num_hits as u64;
        }
    }

    /// Admits a waiting request: lookup, `allocate_slots` for up to `max_new_tokens` (the
    /// prefill chunk; the tokens after the hit, at most), then records the stats, for a request
    /// without `cache_salt`. Returns the hit; `Err` leaves the pool and the stats unchanged.
    pub fn admit(
        &mut self,
        request_id: RequestId,
        token_ids: &[u32],
        block_hashes: &[BlockHash],
        max_new_tokens: usize,
        preempted: bool,
    ) -> Result<CacheHit, AllocError> {
        let hit = self.get_computed_blocks(block_hashes, token_ids.len());
        let num_new_tokens = (token_ids.len() - hit.num_tokens).min(max_new_tokens);
        let req = SlotRequest {
            request_id,
            token_ids,
            block_hashes,
            num_computed_tokens: 0,
            num_new_tokens,
            watermark_blocks: 0,
            cache_salt: None,
        };
        self.allocate_slots(&req, &hit)?;
        self.record_prefix_cache_stats(token_ids.len(), hit.num_tokens, preempted);
        Ok(hit)
    }

    /// Releases a request's blocks, tail first (vLLM's `free`): blocks reaching ref count 0
    /// rejoin the free queue, cached ones at the tail keeping their hash, uncached ones (and all
    /// of them without prefix caching) at the head. Unknown requests are ignored.
    pub fn free(&mut self, request_id: RequestId) {
        let Some(req) = self.requests.remove(&request_id) else {
            return;
        };
        let mut evict_first = Vec::new();
        let mut evict_last = Vec::new();
        for &b in req.blocks.iter().rev() {
            let rc = &mut self.ref_cnt[b as usize];
            *rc = rc.saturating_sub(1);
            if *rc == 0 {
                if self.hash[b as usize].is_none() || !self.enable_caching {
                    evict_first.push(b);
                } else {
                    evict_last.push(b);
                }
            }
        }
        self.free.prepend_n(&evict_first);
        self.free.append_n(&evict_last);
    }

    /// vLLM's `reset_prefix_cache`: forgets every cached hash and records `AllBlocksCleared`.
    /// Refused (returns false, nothing changes) while any block is held by a request.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.num_used_blocks() != 0 {
            return false;
        }
        self.cached.clear();
        self.hash.iter_mut().for_each(|h| *h = None);
        if self.enable_events {
            self.events.push(KvCacheEvent::AllBlocksCleared);
        }
        true
    }

    /// Takes the events recorded since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<KvCacheEvent> {
        std::mem::take(&mut self.events)
    }

    /// Checks the pool's internal invariants, returning the first violation. O(blocks);
    /// meant for tests and debug assertions.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut holders = vec![0u32; self.ref_cnt.len()];
        for r in self.requests.values() {
            for &b in &r.blocks {
                holders[b as usize] += 1;
            }
            if r.num_cached > r.blocks.len() {
                return Err("num_cached beyond blocks".into());
            }
        }
        let mut free_seen = 0;
        for (b, (&rc, &held)) in self.ref_cnt.iter().zip(&holders).enumerate().skip(1) {
            let id = b as BlockId;
            if rc != held {
                return Err(format!("block {b}: ref {rc} but {held} holders"));
            }
            let in_free = self.free.contains(id);
            if in_free == (rc > 0) {
                return Err(format!("block {b}: ref {rc} and in_free {in_free}"));
            }
            free_seen += usize::from(in_free);
            if let Some(h) = &self.hash[b] {
                if !self.cached.get(h).is_some_and(|ids| ids.contains(&id)) {
                    return Err(format!("block {b} hash not in the cache map"));
                }
            }
        }
        if self.ref_cnt[0] != 0 || self.free.contains(0) || holders[0] != 0 {
            return Err("null block in use".into());
        }
        if free_seen != self.free.len || self.free.iter().count() != self.free.len {
            return Err("free queue length out of sync".into());
        }
        if self.free.len + self.num_used_blocks() != self.num_usable_blocks() {
            return Err("free + used != usable".into());
        }
        for (h, ids) in &self.cached {
            if ids.is_empty() {
                return Err("empty cache entry".into());
            }
            for &b in ids {
                if self.hash[b as usize].as_ref() != Some(h) {
                    return Err(format!("cache maps a hash to block {b} holding another"));
                }
            }
        }
        if !self.enable_caching && !self.cached.is_empty() {
            return Err("cached blocks without prefix caching".into());
        }
        Ok(())
    }
}

fn remove_cached(cached: &mut HashMap<BlockHash, Vec<BlockId>>, h: &BlockHash, b: BlockId) {
    if let Some(ids) = cached.get_mut(h) {
        ids.retain(|&x| x != b);
        if ids.is_empty() {
            cached.remove(h);
        }
    }
}

/// The extra keys vLLM publishes in `BlockStored` for the request's block `index`: `[salt]` for
/// the first block of a salted request (vLLM's `generate_block_hash_extra_keys` adds the salt to
/// the block starting at token 0 only), `None` otherwise.
pub fn block_extra_keys(index: usize, cache_salt: Option<&str>) -> Option<Vec<ExtraKey>> {
    match cache_salt {
        Some(salt) if index == 0 => Some(vec![ExtraKey::Str(salt.to_owned())]),
        _ => None,
    }
}
